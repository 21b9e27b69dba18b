/* symmem-bench's NCCL, loaded at run time (SYMMEM_BENCH_NCCL_DLOPEN, the binary wheel's build). The wheel
 * cannot carry NCCL (hundreds of MB) and must start without it: the baseline runs where an NCCL is found,
 * from SYMMEM_NCCL_LIBRARY (the `symmem-bench` console script sets it to the nvidia-nccl wheel's library
 * when one is installed), else libnccl.so.2 on the loader's path. Without one every call below fails with
 * ncclSystemError, ncclGetErrorString says what to install, and the bench runs without the baseline.
 * These definitions stand in for libnccl's at link time: the bench's sources are those of a linked build. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <nccl.h>

/* Every NCCL function the bench calls: name, parameters, arguments. */
#define BENCH_NCCL_CALLS(X)                                                                                    \
    X(ncclGetUniqueId, (ncclUniqueId * id), (id))                                                              \
    X(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank), (comm, nranks, id, rank)) \
    X(ncclCommInitAll, (ncclComm_t * comms, int ndev, const int *devlist), (comms, ndev, devlist))            \
    X(ncclCommDestroy, (ncclComm_t comm), (comm))                                                              \
    X(ncclAllReduce,                                                                                           \
      (const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,         \
       cudaStream_t stream),                                                                                   \
      (send, recv, count, dt, op, comm, stream))                                                               \
    X(ncclReduceScatter,                                                                                       \
      (const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op, ncclComm_t comm,         \
       cudaStream_t stream),                                                                                   \
      (send, recv, count, dt, op, comm, stream))                                                               \
    X(ncclAllGather,                                                                                           \
      (const void *send, void *recv, size_t count, ncclDataType_t dt, ncclComm_t comm, cudaStream_t stream),   \
      (send, recv, count, dt, comm, stream))                                                                   \
    X(ncclGroupStart, (void), ())                                                                              \
    X(ncclGroupEnd, (void), ())

static struct {
    void *handle; /* NULL: not found; then `why` says what to do */
    char why[768];
#define BENCH_NCCL_PTR(name, params, args) ncclResult_t(*name) params;
    BENCH_NCCL_CALLS(BENCH_NCCL_PTR)
#undef BENCH_NCCL_PTR
    const char *(*error_string)(ncclResult_t);
} nccl;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    const char *env = getenv("SYMMEM_NCCL_LIBRARY");
    const char *lib = env && *env ? env : "libnccl.so.2";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(nccl.why, sizeof nccl.why,
                 "NCCL not found (%s): install it (pip install nvidia-nccl-cu13, or -cu12 for a CUDA 12 driver) or "
                 "set SYMMEM_NCCL_LIBRARY to a libnccl.so.2",
                 dlerror());
        return;
    }
    const char *missing = NULL;
#define BENCH_NCCL_SYM(name, params, args)                                                                     \
    if (!(*(void **)&nccl.name = dlsym(h, #name)) && !missing) missing = #name;
    BENCH_NCCL_CALLS(BENCH_NCCL_SYM)
#undef BENCH_NCCL_SYM
    if (!(*(void **)&nccl.error_string = dlsym(h, "ncclGetErrorString")) && !missing) missing = "ncclGetErrorString";
    if (missing) {
        snprintf(nccl.why, sizeof nccl.why, "%s has no %s: point SYMMEM_NCCL_LIBRARY at an NCCL 2 library",
                 lib, missing);
        dlclose(h);
        return;
    }
    nccl.handle = h;
}

#define BENCH_NCCL_DEF(name, params, args)                                                                     \
    ncclResult_t name params                                                                                   \
    {                                                                                                          \
        pthread_once(&nccl_once, load);                                                                        \
        return nccl.handle ? nccl.name args : ncclSystemError;                                                 \
    }
BENCH_NCCL_CALLS(BENCH_NCCL_DEF)
#undef BENCH_NCCL_DEF

const char *ncclGetErrorString(ncclResult_t result)
{
    pthread_once(&nccl_once, load);
    return nccl.handle ? nccl.error_string(result) : nccl.why;
}
