/* symmem-bench: barrier. No data and no size (measured once); NCCL has no barrier, a 1-element float
 * all-reduce stands in for it. */
#include "bench.h"

static void shape(size_t size, size_t es, size_t nranks, geom_t *g)
{
    (void)size;
    (void)es;
    (void)nranks;
    (void)g;
}

static symmem_status_t call(const cc_rank_t *R, const void *send, void *recv, size_t count, symmem_dtype_t dt,
                            symmem_redop_t op, symmem_algo_t algo)
{
    (void)send, (void)recv, (void)count, (void)dt, (void)op, (void)algo;
    return symmem_barrier(R->comm, R->stream);
}

#ifdef SYMMEM_HAVE_NCCL
static ncclResult_t nccl(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                         ncclComm_t comm, cudaStream_t stream)
{
    (void)count, (void)dt, (void)op;
    return ncclAllReduce(send, recv, 1, ncclFloat32, ncclSum, comm, stream);
}
#endif

const bench_coll_t bench_barrier = {
    .kind = SYMMEM_COLL_BARRIER, .reduces = 0, .tunable = 0, .sized = 0, .bitwise = 0, .bus_passes = 1,
    .shape = shape, .call = call,
#ifdef SYMMEM_HAVE_NCCL
    .nccl = nccl,
#endif
    .check = NULL,
};
