/* symmem-bench: all-gather. Size = the output bytes (nranks blocks of count); busbw factor (n-1)/n. */
#include "bench.h"

static void shape(size_t size, size_t es, size_t nranks, geom_t *g)
{
    g->count = size / es / nranks;
    g->total = g->count * nranks;
    g->sbytes = g->count * es;
    g->rbytes = g->total * es;
}

static symmem_status_t call(const cc_rank_t *R, const void *send, void *recv, size_t count, symmem_dtype_t dt,
                            symmem_redop_t op, symmem_algo_t algo)
{
    (void)op;
    return symmem_all_gather(R->comm, send, recv, count, dt, algo, R->stream);
}

#ifdef SYMMEM_HAVE_NCCL
static ncclResult_t nccl(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                         ncclComm_t comm, cudaStream_t stream)
{
    (void)op;
    return ncclAllGather(send, recv, count, dt, comm, stream);
}
#endif

/* Every rank holds the same result (bitwise, checked across ranks): the first local rank's is compared. */
static size_t check(const void *out, symmem_dtype_t dt, symmem_redop_t op, size_t count, int rank, int local,
                    int nranks, uint64_t seed)
{
    (void)op;
    (void)rank;
    return local == 0 ? cc_check_gather(out, dt, count, nranks, seed, NULL) : 0;
}

const bench_coll_t bench_all_gather = {
    .kind = SYMMEM_COLL_ALL_GATHER, .reduces = 0, .tunable = 1, .sized = 1, .bitwise = 1, .bus_passes = 1,
    .shape = shape, .call = call,
#ifdef SYMMEM_HAVE_NCCL
    .nccl = nccl,
#endif
    .check = check,
};
