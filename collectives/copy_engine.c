/* The copy-engine two-shot's host launcher (copy_engine.h): the description of every round (copy_engine_plan.c)
 * enqueued on the call's stream as it stands, a copy step as one cudaMemcpyAsync, a kernel step as one
 * launch of the step kernel (copy_engine.cu). Stream-ordered and capturable: copies become memcpy nodes,
 * kernels kernel nodes, and the epochs advance on the device as for every other kernel. */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"
#include "collectives/copy_engine.h"

typedef struct ce_bufs {
    const char *send;
    char *recv;
    char *const *ws; /* every rank's workspace, mapped here */
} ce_bufs_t;

static char *resolve(const ce_bufs_t *b, const symmem_ce_ref_t *r)
{
    switch (r->buf) {
    case SYMMEM_CE_SEND: return (char *)b->send + r->off;
    case SYMMEM_CE_RECV: return b->recv + r->off;
    default: return b->ws[r->rank] + r->off;
    }
}

static void kernel_params(const ce_bufs_t *b, const symmem_coll_params_t *p, const symmem_ce_step_t *s,
                          symmem_ce_kparams_t *k)
{
    memset(k, 0, sizeof *k);
    k->p = *p;
    k->njobs = s->njobs;
    k->end_sync = s->end_sync;
    for (int j = 0; j < s->njobs; j++) {
        const symmem_ce_job_t *sj = &s->jobs[j];
        symmem_ce_kjob_t *kj = &k->jobs[j];
        kj->dst = resolve(b, &sj->dst);
        kj->elems = sj->elems;
        kj->nsrc = sj->nsrc;
        uintptr_t any = (uintptr_t)kj->dst;
        for (int q = 0; q < sj->nsrc; q++) {
            kj->src[q] = resolve(b, &sj->src[q]);
            any |= (uintptr_t)kj->src[q];
        }
        kj->aligned = any % 16 == 0;
    }
}

/* One step; the cudaError_t, *what names it. */
static cudaError_t run_step(const ce_bufs_t *b, const symmem_coll_params_t *p, const symmem_coll_geom_t *g,
                            const symmem_ce_step_t *s, cudaStream_t stream, symmem_ce_kparams_t *k, const char **what)
{
    if (s->type == SYMMEM_CE_COPY) {
        *what = "peer copy (cudaMemcpyAsync)";
        return cudaMemcpyAsync(resolve(b, &s->dst), resolve(b, &s->src), (size_t)s->bytes, cudaMemcpyDefault, stream);
    }
    *what = "step kernel launch";
    kernel_params(b, p, s, k);
    return (cudaError_t)symmem_ce_launch_kernel(k, g->grid, g->threads, stream);
}

symmem_status_t symmem_ce_run(symmem_comm_t comm, const symmem_coll_call_t *c, const symmem_coll_params_t *p,
                              const symmem_coll_geom_t *g)
{
    const struct symmem_coll *co = comm->coll;
    const symmem_ce_call_t call = {.kind = c->kind,
                                   .n = comm->nranks,
                                   .rank = comm->rank,
                                   .stride = g->stride,
                                   .total = g->total,
                                   .segp = g->segp,
                                   .rounds = g->rounds,
                                   .elem_size = symmem_dtype_size(c->dtype),
                                   .data_off = co->layout.data_off,
                                   .half_bytes = co->layout.half_bytes,
                                   .in_place = p->in_place};
    const ce_bufs_t b = {(const char *)c->send, (char *)c->recv, co->ws_peers};
    const cudaStream_t stream = (cudaStream_t)c->stream;
    /* a round's steps and one kernel's parameters: a few hundred KiB, for calls of several MiB */
    symmem_ce_step_t *steps = malloc(SYMMEM_CE_MAX_STEPS * sizeof *steps);
    symmem_ce_kparams_t *k = malloc(sizeof *k);
    if (!steps || !k) {
        free(steps);
        free(k);
        return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "%s (copy_engine): out of host memory", c->name);
    }
    const char *what = "";
    uint64_t round = 0;
    int step = 0;
    symmem_ce_plan_start(&steps[0]);
    cudaError_t e = run_step(&b, p, g, &steps[0], stream, k, &what);
    const int at_start = e != cudaSuccess;
    for (; e == cudaSuccess && round < g->rounds; round++) {
        const int ns = symmem_ce_plan_round(&call, round, steps);
        for (step = 0; step < ns && e == cudaSuccess; step++) e = run_step(&b, p, g, &steps[step], stream, k, &what);
        if (e != cudaSuccess) break;
    }
    free(steps);
    free(k);
    if (e == cudaSuccess) return SYMMEM_OK;
    /* Part of the call is enqueued: its kernels' syncs now pair up with nothing on the peers, which time out
     * naming this rank (never a hang, never a silent result: their kernels then store NaN). This rank's
     * communicator stops here. */
    (void)cudaGetLastError();
    char where[96], hint[96];
    if (at_start) snprintf(where, sizeof where, "the start sync's %s", what);
    else snprintf(where, sizeof where, "round %" PRIu64 " of %" PRIu64 " at its %s", round, (uint64_t)g->rounds, what);
    snprintf(hint, sizeof hint, "the peers' kernels of this call will time out waiting for rank %d", comm->rank);
    const symmem_status_t st =
        symmem_cudart_error(SYMMEM_CUDA_ERROR, e, hint, "%s (copy_engine): enqueuing %s", c->name, where);
    symmem_comm_set_error(comm, st, symmem_last_error());
    return st;
}
