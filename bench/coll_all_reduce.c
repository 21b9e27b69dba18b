/* symmem-bench: all-reduce. Size = the input (= output) bytes; busbw factor 2(n-1)/n. */
#include "bench.h"

static void shape(size_t size, size_t es, size_t nranks, geom_t *g)
{
    (void)nranks;
    g->count = size / es;
    g->total = g->count;
    g->sbytes = g->rbytes = g->count * es;
}

static symmem_status_t call(const cc_rank_t *R, const void *send, void *recv, size_t count, symmem_dtype_t dt,
                            symmem_redop_t op, symmem_algo_t algo)
{
    return symmem_all_reduce(R->comm, send, recv, count, dt, op, algo, R->stream);
}

#ifdef SYMMEM_HAVE_NCCL
static ncclResult_t nccl(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                         ncclComm_t comm, cudaStream_t stream)
{
    return ncclAllReduce(send, recv, count, dt, op, comm, stream);
}
#endif

/* Every rank holds the same result (bitwise, checked across ranks): the first local rank's is compared. */
static size_t check(const void *out, symmem_dtype_t dt, symmem_redop_t op, size_t count, int rank, int local,
                    int nranks, uint64_t seed)
{
    (void)rank;
    return local == 0 ? cc_check_reduce(out, dt, op, count, 0, nranks, seed, NULL) : 0;
}

const bench_coll_t bench_all_reduce = {
    .kind = SYMMEM_COLL_ALL_REDUCE, .reduces = 1, .tunable = 1, .sized = 1, .bitwise = 1, .bus_passes = 2,
    .shape = shape, .call = call,
#ifdef SYMMEM_HAVE_NCCL
    .nccl = nccl,
#endif
    .check = check,
};
