/* symmem-bench: reduce-scatter. Size = the input bytes (nranks blocks of count); busbw factor (n-1)/n. */
#include "bench.h"

static void shape(size_t size, size_t es, size_t nranks, geom_t *g)
{
    g->count = size / es / nranks;
    g->total = g->count * nranks;
    g->sbytes = g->total * es;
    g->rbytes = g->count * es;
}

static symmem_status_t call(const cc_rank_t *R, const void *send, void *recv, size_t count, symmem_dtype_t dt,
                            symmem_redop_t op, symmem_algo_t algo)
{
    return symmem_reduce_scatter(R->comm, send, recv, count, dt, op, algo, R->stream);
}

#ifdef SYMMEM_HAVE_NCCL
static ncclResult_t nccl(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                         ncclComm_t comm, cudaStream_t stream)
{
    return ncclReduceScatter(send, recv, count, dt, op, comm, stream);
}
#endif

/* Each rank holds its own block: every local rank is checked. */
static size_t check(const void *out, symmem_dtype_t dt, symmem_redop_t op, size_t count, int rank, int local,
                    int nranks, uint64_t seed)
{
    (void)local;
    return cc_check_reduce(out, dt, op, count, (uint64_t)rank * count, nranks, seed, NULL);
}

const bench_coll_t bench_reduce_scatter = {
    .kind = SYMMEM_COLL_REDUCE_SCATTER, .reduces = 1, .tunable = 1, .sized = 1, .bitwise = 0, .bus_passes = 1,
    .shape = shape, .call = call,
#ifdef SYMMEM_HAVE_NCCL
    .nccl = nccl,
#endif
    .check = check,
};
