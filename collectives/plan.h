/* The plan of a call (plan.c): pure functions of values every rank agrees on, so every rank plans the same
 * call the same way: the workspace layout, the blocks per kernel, threads per block, the geometry of a call
 * (shards, rounds, grid), and the zero-copy and tag rules. Plain inputs: the unit tests need no
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
/* Blocks per collective kernel (docs/collectives.md, "Residency"). The ranks of a communicator that share
 * a GPU wait for each other inside their kernels, so all their blocks must be resident at once, beside
 * other work: share_pct percent of what the GPU keeps resident (blocks_per_sm blocks of
 * SYMMEM_COLL_THREADS threads on each of sm_count SMs), divided among the ranks_here ranks on the GPU;
 * at most max_blocks (SYMMEM_MAX_BLOCKS; 0: no bound) and SYMMEM_COLL_MAX_GRID, at least 1. */
int symmem_coll_grid_rule(int blocks_per_sm, int sm_count, int ranks_here, int share_pct, int max_blocks);
/* The same rule with room for kernels in clusters (SYMMEM_CLUSTER_ROOM). Such a kernel (a cuBLAS GEMM whose
 * blocks each take a whole SM, in clusters of 8) starts a cluster only where one GPC has that many idle SMs,
 * which the co-located ranks' waiting blocks may hold. Where ranks_here > 1, room > 0 and gpcs > 0 (the GPC
 * count known), the ranks on the GPU hold at most sm_count - room * gpcs blocks together (0 where negative),
 * counting each block as an SM of its own: room * gpcs SMs stay idle, so some GPC keeps room of them and a
 * cluster of room blocks can start there. The communicator takes share_pct percent of those blocks, divided
 * among its ranks_here ranks; then max_blocks and SYMMEM_COLL_MAX_GRID as above, and at least 1 per rank even
 * where the room leaves less. Otherwise (one rank on the GPU, room 0, GPCs unknown) symmem_coll_grid_rule's
 * result. H200 (132 SMs, 8 GPCs), room 8, share 75: 68 blocks, 51 for the communicator, 25 per rank at 2
 * ranks, 3 at 16. */
int symmem_coll_grid_rule_room(int blocks_per_sm, int sm_count, int ranks_here, int share_pct, int max_blocks, int room,
                               int gpcs);
/* The blocks that co-located ranks hold together under the room, before the share: sm_count - room * gpcs, at
 * least 0 (what symmem_coll_grid_rule_room divides, and what init's INFO line reports). */
int64_t symmem_coll_room_pool(int sm_count, int room, int gpcs);
/* The GPU's GPC count, which CUDA does not report, from how many clusters of 8 and of 16 whole-SM blocks it
 * keeps resident at once (cudaOccupancyMaxActiveClusters; negative: that size refused or its query failed).
 * A GPC of s SMs holds floor(s/8) clusters of 8 and floor(s/16) of 16, one more of 8 wherever 8 <= s <= 23:
 * where every GPC has 8..23 SMs, the difference is the GPC count. 0 (unknown) where either count is negative
 * or the difference is not in 1..sm_count/8. */
int symmem_coll_gpcs_from_clusters(int clusters8, int clusters16, int sm_count);

/* The grid limits every call of a communicator plans with (agreed at init: the same on every rank). */
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
} symmem_coll_geom_t;
/* 0 and *g filled; 1: the workspace holds not even one pack per shard; 2: too many rounds (their epochs
 * would not fit the kernel's count). zero_copy_out: the results go straight into the peers' receive buffers;
 * zero_copy_in: the inputs are read in place; no_ws: the call uses no workspace (both zero copies where the
 * descriptor allows it); units: the packs per shard position the call uses, at most the descriptor's, or 0
 * for the descriptor's (the island algorithm passes what its split's schedule names). */
int symmem_coll_geometry(const symmem_coll_layout_t *ws, const symmem_coll_grid_t *grid, int n, symmem_coll_kind_t kind,
                         symmem_algo_t algo, uint64_t count, size_t elem_size, int zero_copy_in, int zero_copy_out,
                         int no_ws, uint64_t units, symmem_coll_geom_t *g);

/* One-shot pull (and reduce-scatter / all-gather pull) read the sender's buffer directly only from this size
 * on (SYMMEM_COLL_ZC_LARGE): zero copy costs one more sync at the end of the call (~1-2 us), a local copy of
 * a small message costs less. */
#define SYMMEM_COLL_ZC_MIN_BYTES ((size_t)256 << 10)

#ifdef __cplusplus
}
#endif
#endif
