/* The copy-engine two-shot (SYMMEM_ALGO_COPY_ENGINE): the peer data of a collective moved by the GPU's copy
 * engines (cudaMemcpyAsync on the call's stream), the reductions on the SMs, the steps ordered by the flag
 * syncs of protocol.cuh (no remote atomics). docs/collectives.md, "Copy-engine two-shot", has the long form.
 *
 * The schedule is a plain description, built by a pure function per rank and round (copy_engine_plan.c), and
 * executed step by step: by the host launcher (copy_engine.c: a copy step is one cudaMemcpyAsync, a kernel
 * step one launch of the step kernel of copy_engine.cu, which only syncs and runs its jobs) and by the CPU
 * test (tests/unit/test_copy_engine.c), which runs it on host arrays for every size, rank count and kind and
 * checks the results and the ordering of every workspace access against the syncs.
 *
 * The schedule, rank r of n, all-reduce (reduce-scatter: the first half; all-gather: the second), one
 * round per segment of every shard that fits a data half (the geometry of plan.c with this algorithm's
 * descriptor, algos.h):
 *   start:  kernel: sync                                   (every rank is done with the previous call)
 *   round:  copies: shard d of my input -> slot r of rank d, for d = r+1, ..., r+n-1 (mod n): in pass p
 *                   every rank sends to its p-th successor, one outbound and one inbound stream per GPU
 *           kernel: sync; my shard = reduce over ranks 0..n-1 (my own input, the slots) -> my output
 *           copies: my reduced shard -> gather slot r of rank d, same order
 *           kernel: sync; gather slots -> my output (the last round: then one more sync)
 * Each kernel signals its peers only when it starts, i.e. after every earlier copy and kernel of its stream
 * has completed, so a sync means "every rank's stream has reached this point". Every workspace access of
 * the call lies between the start sync and the last one (nothing before or after touches the
 * workspace: calls of other algorithms around it need no assumption about its halves), and every write
 * into a rank's area and every read of it are separated by a sync (the CPU test checks both). */
#ifndef SYMMEM_COLLECTIVES_COPY_ENGINE_H
#define SYMMEM_COLLECTIVES_COPY_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kinds.h"
#include "collectives/kernel_abi.h"
#include "collectives/plan.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the description ---------------------------------------------------------------------------------- */
/* A byte range's start: the executing rank's send or receive buffer, or a rank's workspace (offset from its
 * start, as mapped on every rank). */
enum { SYMMEM_CE_SEND = 0, SYMMEM_CE_RECV = 1, SYMMEM_CE_WS = 2 };
typedef struct symmem_ce_ref {
    int32_t buf;  /* SYMMEM_CE_* */
    int32_t rank; /* SYMMEM_CE_WS: whose workspace; SEND/RECV: always the executing rank */
    uint64_t off; /* bytes */
} symmem_ce_ref_t;

/* One job of a kernel step: dst[i] = src[0][i] op src[1][i] op ... (fp32, in this order: the rank order)
 * for i < elems; one source is a plain copy of the bytes. */
typedef struct symmem_ce_job {
    symmem_ce_ref_t dst;
    uint64_t elems;
    int32_t nsrc;
    symmem_ce_ref_t src[SYMMEM_MAX_RANKS];
} symmem_ce_job_t;

enum { SYMMEM_CE_COPY = 0, SYMMEM_CE_KERNEL = 1 };
/* A step of one rank. COPY: `bytes` from src to dst by the copy engine, in stream order. KERNEL: sync with
 * every rank (epoch: the kernel's first epoch + 1; all its blocks), then its jobs, then, with end_sync,
 * another sync (epoch + 2). Every kernel consumes two epochs, so the state stays even. */
typedef struct symmem_ce_step {
    int32_t type;
    int32_t end_sync;
    symmem_ce_ref_t dst, src; /* COPY */
    uint64_t bytes;           /* COPY */
    int32_t njobs;            /* KERNEL */
    symmem_ce_job_t jobs[SYMMEM_MAX_RANKS];
} symmem_ce_step_t;

/* What every rank plans a call with (the same values on every rank). */
typedef struct symmem_ce_call {
    int kind;          /* symmem_coll_kind_t: all_reduce, reduce_scatter, all_gather */
    int n, rank;
    uint64_t stride;   /* elements between shards (the geometry's) */
    uint64_t total;    /* valid elements of the sharded buffer */
    uint64_t segp;     /* packs per shard per round */
    uint64_t rounds;
    size_t elem_size;         /* element size */
    uint64_t data_off; /* workspace offset of the two data halves, and one half's bytes */
    uint64_t half_bytes;
    int in_place;      /* all-gather: my input is my part of the output (no copy of it) */
} symmem_ce_call_t;

/* The most steps of one round: n-1 copies, a kernel, n-1 copies, a kernel. */
#define SYMMEM_CE_MAX_STEPS (2 * SYMMEM_MAX_RANKS)
/* The steps of rank c->rank in round `round` (0..rounds-1) into out (SYMMEM_CE_MAX_STEPS); the start sync
 * is symmem_ce_plan_start. Returns the count. Copies of zero bytes are left out; kernels never are (every
 * rank must run the same kernels, their syncs pair up across ranks). Pure. */
int symmem_ce_plan_round(const symmem_ce_call_t *c, uint64_t round, symmem_ce_step_t *out);
/* The call's first step: a kernel with no jobs (the start sync). */
void symmem_ce_plan_start(symmem_ce_step_t *out);
/* Kernels per round (1 for reduce-scatter and all-gather, 2 for all-reduce) and the epochs a call of
 * `rounds` rounds consumes (2 per kernel, the start sync's included). */
int symmem_ce_kernels_per_round(int kind);
uint64_t symmem_ce_epochs(int kind, uint64_t rounds);

/* ---- the step kernel's parameters (copy_engine.cu) ------------------------------------------------------ */
typedef struct symmem_ce_kjob {
    void *dst;
    const void *src[SYMMEM_MAX_RANKS];
    uint64_t elems;
    int32_t nsrc;
    int32_t aligned; /* dst and every src 16-byte aligned: vector access */
} symmem_ce_kjob_t;
typedef struct symmem_ce_kparams {
    symmem_coll_params_t p; /* the protocol's fields (workspaces, state, error record, rank, tag, timeout) and
                               the call's (kind, recv, stride, total: the NaN output after an error) */
    int32_t njobs;
    int32_t end_sync;
    symmem_ce_kjob_t jobs[SYMMEM_MAX_RANKS];
} symmem_ce_kparams_t;
SYMMEM_STATIC_ASSERT(sizeof(symmem_ce_kparams_t) <= 4096, "the step kernel's parameters fit a launch");

/* Launch the step kernel for dtype x op (all-gather: SUM) with `grid` blocks of `threads`; the cudaError_t. */
int symmem_ce_launch_kernel(const symmem_ce_kparams_t *k, int grid, int threads, void *stream);

/* ---- the host launcher (copy_engine.c) -------------------------------------------------------------------- */
struct symmem_coll_call;
/* Run a planned call (p: its parameters, g: its geometry) as the description says, on the call's stream.
 * SYMMEM_OK, or SYMMEM_CUDA_ERROR naming the step that failed to enqueue. */
symmem_status_t symmem_ce_run(symmem_comm_t comm, const struct symmem_coll_call *c, const symmem_coll_params_t *p,
                              const symmem_coll_geom_t *g);

#ifdef __cplusplus
}
#endif
#endif
