/* The fused all-reduce + residual add + RMSNorm (symmem_all_reduce_add_rmsnorm): what its host side
 * (fused.c) and its kernels (fused_kernels.cu) share, and the pure planning rules its CPU test checks.
 * Plain C, like kernel_abi.h. docs/collectives.md, "Fused all-reduce + residual add + RMSNorm", has the
 * reasoning. */
#ifndef SYMMEM_COLLECTIVES_FUSED_H
#define SYMMEM_COLLECTIVES_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/kernel_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Values of a row each thread of a block holds in registers between the sum of squares and the scaling
 * (fp32). A row is one block's: up to SYMMEM_COLL_THREADS threads x this many values, hence
 * SYMMEM_RMSNORM_MAX_HIDDEN (symmem.h) = 512 x 32. */
#define SYMMEM_FUSED_ELEMS_PER_THREAD 32
SYMMEM_STATIC_ASSERT(SYMMEM_RMSNORM_MAX_HIDDEN == SYMMEM_COLL_THREADS * SYMMEM_FUSED_ELEMS_PER_THREAD,
                     "the hidden-size limit is what one block holds in registers");

/* Kernel arguments: the protocol's fields (workspace, state, error record, rank, tag, Lamport layout,
 * timeout: c.send/c.recv/c.peer_send/c.peer_recv are unused) and the rows of one chunk. x, residual and out
 * point at the chunk's first row. One Lamport round per kernel. Round layout in the Lamport buffer, M = rows * row_packs
 * 16-byte packs (row-major, a row padded to whole packs with zeros):
 *   one-shot: slot[src][M]                           (src = 0..n-1, my own slot included)
 *   two-shot: slot[src][shard_packs], gather[M]      (shard s = packs [s*shard_packs, +shard_packs) of M) */
typedef struct symmem_fused_params {
    symmem_coll_params_t c;
    const void *x;
    void *residual;
    const void *weight;
    void *out;
    uint32_t rows;        /* rows of this kernel */
    uint32_t hidden;      /* elements per row */
    uint32_t row_packs;   /* 16-byte packs per row: ceil(hidden / (16 / element size)) */
    uint32_t shard_packs; /* two-shot: packs of M each rank reduces, ceil(M / n) */
    uint32_t ppt;         /* packs of a row per thread: ceil(row_packs / blockDim.x) */
    uint32_t inplace;     /* out == x (fused_kernels.cu: what the one-shot pushes do about it) */
    float eps;
} symmem_fused_params_t;

/* The pure rules (fused.c; tests/unit/test_fused_plan.c). ------------------------------------------------ */

/* One-shot or two-shot for a message of `bytes` (tokens * hidden * element size) over n ranks whose worst
 * link is `link`: SYMMEM_ALGO_ONESHOT_PUSH or SYMMEM_ALGO_TWOSHOT_LAMPORT. One-shot moves (n-1)*S into each
 * GPU after one one-way trip, two-shot 2(n-1)/n*S after two, so two-shot pays from
 * S* = n*L*B / ((n-1)(n-2)) (L one-way latency, B bandwidth per GPU of the link class); never at n <= 2. */
symmem_algo_t symmem_fused_choose(int n, symmem_link_t link, size_t bytes);
/* The crossover S* above in bytes (SIZE_MAX: one-shot at every size). */
size_t symmem_fused_crossover_bytes(int n, symmem_link_t link);

/* Most rows one kernel (one Lamport round) of `algo` holds in a Lamport buffer of lam_buf_bytes, n ranks,
 * row_packs packs per row (0: not even one row fits). Also bounded so that every 32-bit pack index of the
 * round stays below 2^31. */
uint64_t symmem_fused_max_rows(symmem_algo_t algo, int n, uint64_t row_packs, size_t lam_buf_bytes);

/* Block shape for rows of `hidden` elements of `elem_size` bytes: packs per row, packs per thread, threads
 * (a multiple of 32, at most SYMMEM_COLL_THREADS). 0, or -1 if hidden is 0 or above the limit. */
int symmem_fused_block(uint64_t hidden, size_t elem_size, uint32_t *row_packs, uint32_t *ppt, int *threads);

/* The grid of one kernel of `rows` rows: a block per row at least (up to max_grid), more while every
 * thread would still have a store to make (one-shot: n*M stores, two-shot about 2*M), at most max_grid. */
int symmem_fused_grid(symmem_algo_t algo, int n, uint64_t rows, uint32_t row_packs, int threads, int max_grid);

/* The whole call: algorithm (want: AUTO, ONESHOT_PUSH or TWOSHOT_LAMPORT), and the split of `tokens` rows
 * into chunks, one kernel each, as equal as possible (chunk k: rows [k*tokens/chunks, (k+1)*tokens/chunks)),
 * none above symmem_fused_max_rows. 0 and *plan filled; 1: the workspace holds not one row for the
 * algorithm (AUTO: for either); -1: bad hidden / want. */
typedef struct symmem_fused_plan {
    symmem_algo_t algo;
    uint32_t row_packs, ppt;
    int threads;
    uint64_t max_rows; /* per chunk */
    uint64_t chunks;
} symmem_fused_plan_t;
int symmem_fused_plan(int n, symmem_link_t link, size_t lam_buf_bytes, uint64_t tokens, uint64_t hidden,
                      size_t elem_size, symmem_algo_t want, symmem_fused_plan_t *plan);
/* First row of chunk k (k = chunks: tokens). */
uint64_t symmem_fused_chunk_start(const symmem_fused_plan_t *plan, uint64_t tokens, uint64_t k);

/* Local. The algorithm SYMMEM_ALGO_AUTO runs for this call on `comm` (the benchmark's label);
 * SYMMEM_ALGO_AUTO if the arguments are invalid. */
symmem_algo_t symmem_fused_auto_algo(symmem_comm_t comm, size_t tokens, size_t hidden, symmem_dtype_t dtype);

/* Kernels (fused_kernels.cu). ---------------------------------------------------------------------------- */
/* Launch one fused kernel (p->c.algo, p->c.dtype, p->c.lam_check select it); the cudaError_t. */
int symmem_fused_launch(const symmem_fused_params_t *p, int grid, int threads, void *stream, int pdl);
/* Load the fused kernels now (see symmem_coll_preload), adding them to *info. */
int symmem_fused_preload(symmem_coll_preload_info_t *info);

#ifdef __cplusplus
}
#endif
#endif
