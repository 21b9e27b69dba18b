/* symmem-bench's ranks, buffers and NCCL communicators: one rank per process (a child of cc_launch), or
 * every rank in this process (--inprocess, symmem_comm_init_all). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* This process is rank child_rank of o->nranks: CUDA on device rank % ndev, the channel, the communicator. */
static int ranks_multiproc(bench_t *b, int child_rank, int ndev)
{
    cc_ctx_t *ctx = &b->ctx;
    ctx->multiproc = 1;
    ctx->nprocs = b->o.nranks;
    ctx->proc = child_rank;
    ctx->nlocal = 1;
    ctx->shm = cc_shm_attach("SYMMEM_BENCH");
    cc_rank_t *R = &ctx->r[0];
    R->rank = child_rank;
    R->device = child_rank % ndev;
    if (!ctx->shm || cudaSetDevice(R->device) != cudaSuccess || cudaFree(NULL) != cudaSuccess ||
        cudaStreamCreateWithFlags(&R->stream, cudaStreamNonBlocking) != cudaSuccess) {
        fprintf(stderr, "symmem-bench rank %d: CUDA/channel init failed\n", child_rank);
        cc_shm_abort(ctx->shm);
        return 1;
    }
    if (cc_barrier(ctx) != 0) return 1;
    symmem_options_t so = SYMMEM_OPTIONS_INIT;
    symmem_unique_id_t id;
    const char *ids = getenv("SYMMEM_UNIQUE_ID");
    symmem_status_t st = ids ? symmem_unique_id_from_string(ids, &id) : SYMMEM_INVALID_ARGUMENT;
    so.device = R->device;
    so.placement = b->o.placement;
    so.timeout_ms = b->o.timeout_s * 1000; /* -T; 0: SYMMEM_TIMEOUT_MS */
    if (st == SYMMEM_OK) st = symmem_comm_init(b->o.nranks, child_rank, &id, &so, &R->comm);
    if (st != SYMMEM_OK) {
        fprintf(stderr, "symmem-bench rank %d: symmem_comm_init: %s: %s\n", child_rank, symmem_status_name(st),
                symmem_last_error());
        cc_shm_abort(ctx->shm);
        return 1;
    }
    return 0;
}

/* Every rank in this process, rank r on device r % ndev. */
static int ranks_inproc(bench_t *b, int ndev)
{
    cc_ctx_t *ctx = &b->ctx;
    const int n = b->o.nranks;
    ctx->nprocs = 1;
    ctx->nlocal = n;
    int devices[CC_MAX_RANKS];
    symmem_comm_t comms[CC_MAX_RANKS];
    for (int r = 0; r < n; r++) {
        devices[r] = r % ndev;
        ctx->r[r].rank = r;
        ctx->r[r].device = devices[r];
        cudaSetDevice(devices[r]);
        /* cc_dev_preload: one thread enqueues rank after rank, so no helper kernel may be loaded
         * lazily while a collective waits for a rank not enqueued yet. */
        if (cudaStreamCreateWithFlags(&ctx->r[r].stream, cudaStreamNonBlocking) != cudaSuccess ||
            cc_dev_preload() != cudaSuccess)
            return 1;
    }
    symmem_options_t so = SYMMEM_OPTIONS_INIT;
    so.placement = b->o.placement;
    so.timeout_ms = b->o.timeout_s * 1000; /* -T; 0: SYMMEM_TIMEOUT_MS */
    symmem_status_t st = symmem_comm_init_all(n, devices, &so, comms);
    if (st != SYMMEM_OK) {
        fprintf(stderr, "symmem-bench: symmem_comm_init_all: %s: %s\n", symmem_status_name(st), symmem_last_error());
        return 1;
    }
    for (int r = 0; r < n; r++) ctx->r[r].comm = comms[r];
    return 0;
}

/* Buffers: enough for the largest size, and for the rotation at smaller sizes. Returns the bytes per rank
 * (0 on failure). */
static size_t buffers(bench_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    geom_t g;
    size_t need = 0;
    b->max_sets = 8;
    BENCH_FOR_SIZES(o, s)
    {
        if (bench_geometry(b, (size_t)s, &g) != 0) continue;
        size_t bytes = (size_t)g.sets * (bench_align4k(g.sbytes) + bench_align4k(g.rbytes));
        if (bytes > need) need = bytes;
    }
    if (need == 0) need = 4096;
    b->slot_bytes = need;
    if (o->zero_copy && cc_alloc(ctx, need, b->sym) != SYMMEM_OK) return 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (!o->zero_copy && cudaMalloc((void **)&b->dev[i], need) != cudaSuccess) return 0;
        /* Defined contents for the buffer sets that the check does not fill (timing only); on the rank's
         * stream and finished before the first check uploads its input there */
        if (cc_rank_memset(&ctx->r[i], o->zero_copy ? symmem_buffer_ptr(b->sym[i]) : b->dev[i], 0, need) !=
            cudaSuccess)
            return 0;
    }
    return need;
}

#ifdef SYMMEM_HAVE_NCCL
/* NCCL on the same GPUs (not when ranks share a GPU). rank 0's unique id goes to the others through the
 * shared-memory channel. 0, or 1 when the run cannot go on (a failed NCCL init only drops the baseline). */
static int nccl_setup(bench_t *b, int child_rank, int ndev, size_t need)
{
    cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    if (!o->nccl || o->nranks > ndev) return 0;
    ncclResult_t nr = ncclSuccess;
    if (!o->inprocess) {
        ncclUniqueId nid;
        memset(&nid, 0, sizeof nid);
        if (child_rank == 0) nr = ncclGetUniqueId(&nid);
        unsigned char all[CC_MAX_RANKS * sizeof(ncclUniqueId)];
        if (cc_shm_allgather(ctx->shm, ctx->proc, ctx->nprocs, &nid, sizeof nid, all) != 0) return 1;
        memcpy(&nid, all, sizeof nid); /* rank 0's */
        if (nr == ncclSuccess) nr = ncclCommInitRank(&b->nccl[0], o->nranks, nid, child_rank);
    } else {
        int devices[CC_MAX_RANKS];
        for (int r = 0; r < o->nranks; r++) devices[r] = r % ndev;
        nr = ncclCommInitAll(b->nccl, o->nranks, devices);
    }
    if (nr != ncclSuccess)
        fprintf(stderr, "symmem-bench: NCCL init failed: %s (continuing without the baseline)\n", ncclGetErrorString(nr));
    b->have_nccl = cc_sum_u64(ctx, nr != ncclSuccess) == 0;
    for (int i = 0; i < ctx->nlocal && b->have_nccl; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (cudaMalloc((void **)&b->ndev[i], need) != cudaSuccess ||
            cc_rank_memset(&ctx->r[i], b->ndev[i], 0, need) != cudaSuccess)
            return 1;
    }
    return 0;
}
#endif

int bench_setup(bench_t *b, int child_rank)
{
    cc_ctx_t *ctx = &b->ctx;
    memset(ctx, 0, sizeof *ctx);
    ctx->name = "symmem-bench";
    ctx->timeout_s = 600;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
        fprintf(stderr, "symmem-bench: no CUDA device\n");
        return CC_EXIT_SKIP;
    }
    ctx->ngpus = ndev;
    ctx->nranks = b->o.nranks;
    if ((b->o.inprocess ? ranks_inproc(b, ndev) : ranks_multiproc(b, child_rank, ndev)) != 0) return 1;
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, ctx->r[0].device);
    b->l2 = (size_t)prop.l2CacheSize;
    const size_t need = buffers(b);
    if (need == 0) return 1;
    b->have_nccl = 0;
#ifdef SYMMEM_HAVE_NCCL
    if (nccl_setup(b, child_rank, ndev, need) != 0) return 1;
#endif
    return 0;
}

void bench_teardown(bench_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    cc_barrier(ctx);
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
#ifdef SYMMEM_HAVE_NCCL
        if (b->have_nccl) ncclCommDestroy(b->nccl[i]);
#endif
        cudaFree(b->dev[i]);
        cudaFree(b->ndev[i]);
    }
    if (b->o.zero_copy) cc_free(ctx, b->sym);
    cc_finish(ctx);
}
