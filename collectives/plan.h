/* The plan of a call (plan.c): pure functions of values every rank agrees on, so every rank plans the same
 * call the same way: the workspace layout, threads per block, the geometry of a call (shards, rounds,
 * grid), and the zero-copy and tag rules. Plain inputs: the unit tests need no
 * communicator. */
#ifndef SYMMEM_COLLECTIVES_PLAN_H
#define SYMMEM_COLLECTIVES_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/kinds.h"
#include "collectives/kernel_abi.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the workspace layout (kernel_abi.h has the areas) ---------------------------------------------------- */
/* Smallest SYMMEM_WORKSPACE_BYTES (smaller values are raised to it). */
#define SYMMEM_COLL_MIN_WORKSPACE ((size_t)4 << 20)
/* Bytes of one Lamport buffer in a workspace of `ws` bytes (>= 4 MiB): the largest power of two at most
 * ws/8 (8 MiB of the default 64 MiB; the three take 37.5%), plus SYMMEM_COLL_LAMPORT_SLACK. Powers of two so
 * that power-of-two messages fill whole rounds: twoshot_lamport moves half a buffer per round, and a
 * message just over a round pays a whole extra round (~3 us on NVLink). The slack absorbs
 * the rounding of shards up to a 16-byte pack (under 16 bytes per shard and slot: at most n^2 * 16 bytes for
 * one-shot, 2n * 16 for two-shot), so that holds at every rank count up to 16, not only at powers of two. */
#define SYMMEM_COLL_LAMPORT_SLACK ((size_t)16 << 10)
size_t symmem_coll_lamport_buf_bytes(size_t ws);

typedef struct symmem_coll_layout {
    size_t ws_bytes;
    size_t lam_hdr_off, lam_off, lam_buf_bytes; /* Lamport headers, buffers 0..2 of lam_buf_bytes each */
    size_t data_off, half_bytes;                /* the two data halves */
} symmem_coll_layout_t;
/* The layout of a workspace of `ws` bytes (>= the minimum). */
symmem_coll_layout_t symmem_coll_layout(size_t ws);

/* ---- blocks and threads -------------------------------------------------------------------------------- */
/* The grid limits every call of a communicator plans with (agreed at init: the same on every rank; the
 * blocks per kernel come from the grid rule, residency.h). */
typedef struct symmem_coll_grid {
    int max_grid;    /* blocks per kernel at most */
    int min_threads; /* threads per block at least (SYMMEM_MIN_BLOCK_THREADS) */
} symmem_coll_grid_t;
/* SYMMEM_MIN_BLOCK_THREADS made a multiple of 32 in [32, SYMMEM_COLL_THREADS] (a warning when it was not). */
int symmem_coll_min_block_threads(void);
/* Threads per block of a kernel over `positions` 16-byte positions: enough that grid->max_grid blocks cover
 * them in one pass, at least grid->min_threads, at most SYMMEM_COLL_THREADS, a multiple of 32. Small
 * messages so use many small blocks (each SM injects and polls only a little of the message) rather than a
 * few full ones. */
int symmem_coll_block_threads(const symmem_coll_grid_t *grid, uint64_t positions);
/* The same with another bound than SYMMEM_COLL_THREADS (a multiple of 32, at least grid->min_threads). */
int symmem_coll_block_threads_up_to(const symmem_coll_grid_t *grid, uint64_t positions, int most);

/* ---- the geometry of one call ------------------------------------------------------------------------------ */
typedef struct symmem_coll_geom {
    int family;         /* symmem_coll_family_t */
    uint64_t stride;    /* elements between shards */
    uint64_t total;     /* valid elements of the sharded buffer */
    uint64_t units;     /* 16-byte packs of workspace per shard position (0: no workspace) */
    uint64_t segp;      /* packs per shard per round */
    uint64_t rounds;
    uint64_t positions; /* 16-byte positions the grid covers per round */
    uint64_t epochs;    /* flag sync epochs the kernel uses (what it publishes in the state protocol) */
    int threads, grid;  /* threads per block, blocks */
    int wide;           /* the two-shot pull all-reduce into an ordinary output: its own kernel, up to
                         * SYMMEM_COLL_WIDE_THREADS threads a block (symmem_coll_launch_wide) */
    int zc_packs;       /* the two-shot pull all-reduce with zero copy both ways: its own kernel, whose threads
                         * reduce this many packs a pass (symmem_coll_zc_packs; positions count passes:
                         * symmem_coll_launch_zc); 0 for every other call */
} symmem_coll_geom_t;
/* 0 and *g filled; 1: the workspace holds not even one pack per shard; 2: too many rounds (their epochs
 * would not fit the kernel's count). zero_copy_out: the results go straight into the peers' receive buffers;
 * zero_copy_in: the inputs are read in place; no_ws: the call uses no workspace (both zero copies where the
 * descriptor allows it); units: the packs per shard position the call uses, at most the descriptor's, or 0
 * for the descriptor's (the island algorithm passes what its split's schedule names). */
int symmem_coll_geometry(const symmem_coll_layout_t *ws, const symmem_coll_grid_t *grid, int n, symmem_coll_kind_t kind,
                         symmem_algo_t algo, uint64_t count, size_t elem_size, int zero_copy_in, int zero_copy_out,
                         int no_ws, uint64_t units, symmem_coll_geom_t *g);

#ifdef __cplusplus
}
#endif
#endif
