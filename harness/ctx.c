/* The collective tests' context: the ranks of this process (one per process, or all of them as threads of
 * one), the host-side exchanges between processes, allocation, synchronisation and error helpers, and the
 * per-case runner. See harness.h. */
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/kinds.h"

/* ======================================================================================================
 * Context.
 * ==================================================================================================== */
void cc_log(const cc_ctx_t *ctx, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ctx->multiproc)
        printf("[%s rank %d] %s\n", ctx->name, ctx->proc, msg);
    else
        printf("[%s] %s\n", ctx->name, msg);
    fflush(stdout);
}

int cc_algo_known(int algo)
{
    /* a lossy algorithm has tests of its own (coll_wire): the exact checks of "every algorithm" are not its */
    return strcmp(symmem_algo_name((symmem_algo_t)algo), "invalid_algo") != 0 && !symmem_algo_lossy(algo);
}

int cc_pair_algo(const cc_ctx_t *ctx, int argc, char **argv, symmem_algo_t dflt, symmem_algo_t *algo)
{
    if (!ctx->multiproc || ctx->nranks != 2) {
        cc_log(ctx, "FAIL: run with --mp 2");
        return 0;
    }
    *algo = dflt;
    if (argc > 1 && symmem_algo_from_name(argv[1], algo) != SYMMEM_OK) {
        cc_log(ctx, "FAIL: unknown algorithm %s", argv[1]);
        return 0;
    }
    return 1;
}

int cc_is_root(const cc_ctx_t *ctx) { return ctx->proc == 0; }

int cc_barrier(cc_ctx_t *ctx) { return cc_shm_barrier(ctx->shm, ctx->nprocs, ctx->timeout_s); }

int cc_allgather_u64(cc_ctx_t *ctx, const uint64_t *local_vals, uint64_t *out)
{
    if (!ctx->multiproc) {
        memcpy(out, local_vals, sizeof(uint64_t) * (size_t)ctx->nranks);
        return 0;
    }
    return cc_shm_allgather(ctx->shm, ctx->proc, ctx->nprocs, local_vals, sizeof(uint64_t), out);
}

uint64_t cc_sum_u64(cc_ctx_t *ctx, uint64_t v)
{
    uint64_t all[CC_MAX_RANKS];
    if (!ctx->multiproc) return v;
    if (cc_shm_allgather(ctx->shm, ctx->proc, ctx->nprocs, &v, sizeof v, all) != 0) return v + 1;
    uint64_t s = 0;
    for (int p = 0; p < ctx->nprocs; p++) s += all[p];
    return s;
}

static int cc_parse_mode(int *argc, char **argv, int default_nranks, int *multiproc, int *nranks)
{
    *multiproc = 1;
    *nranks = default_nranks;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if ((!strcmp(argv[i], "--mp") || !strcmp(argv[i], "--inproc")) && i + 1 < *argc) {
            *multiproc = !strcmp(argv[i], "--mp");
            *nranks = atoi(argv[i + 1]);
            i++;
            continue;
        }
        argv[out++] = argv[i];
    }
    /* Keep the mode for the children's argv (they parse it too): rewrite it in place at the end. */
    *argc = out;
    argv[out] = NULL;
    if (*nranks < 1 || *nranks > CC_MAX_RANKS) {
        fprintf(stderr, "rank count %d out of range (1..%d)\n", *nranks, CC_MAX_RANKS);
        return -1;
    }
    return 0;
}

/* One rank per process (a child of cc_launch): CUDA on device rank % ndev, the MPS check, the channel
 * barrier, then symmem_comm_init with the unique id from the environment. 1, or 0 with *exit_code set. */
static int start_multiproc(cc_ctx_t *ctx, int child, int ndev, symmem_options_t opts, int *exit_code)
{
    const char *name = ctx->name;
    const int nranks = ctx->nranks;
    ctx->nprocs = nranks;
    ctx->proc = child;
    ctx->nlocal = 1;
    ctx->shm = cc_shm_attach("SYMMEM_TEST");
    if (!ctx->shm) {
        fprintf(stderr, "[%s] child without SYMMEM_TEST_SHM_FD\n", name);
        *exit_code = 1;
        return 0;
    }
    cc_rank_t *r = &ctx->r[0];
    r->rank = child;
    r->device = child % ndev;
    const char *step = "cudaSetDevice";
    cudaError_t e = cudaSetDevice(r->device);
    if (e == cudaSuccess) step = "cudaFree(NULL) (context creation)", e = cudaFree(NULL);
    if (e == cudaSuccess) step = "cudaStreamCreateWithFlags", e = cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) step = "loading the harness's kernels", e = cc_dev_preload();
    if (e != cudaSuccess) {
        cc_log(ctx, "FAIL: CUDA init on device %d: %s: %s", r->device, step, cudaGetErrorString(e));
        cc_shm_abort(ctx->shm);
        *exit_code = 1;
        return 0;
    }
    /* Processes that share a GPU run their kernels at the same time only under MPS; without it they
     * take turns (time slices), and kernels that wait for each other stall until the timeout. Every
     * child sees the same answer, so all skip together. */
    int mps = 0;
    if (nranks > ndev && (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, r->device) != cudaSuccess || !mps)) {
        if (child == 0)
            printf("[%s] SKIP: %d processes on %d GPU(s) need MPS to run at the same time (scripts/gpu_check.sh "
                   "starts it)\n", name, nranks, ndev);
        *exit_code = CC_EXIT_SKIP;
        return 0;
    }
    /* Everyone has a CUDA context before the bootstrap starts its timeout. */
    if (cc_barrier(ctx) != 0) {
        *exit_code = 1;
        return 0;
    }
    symmem_unique_id_t id;
    const char *ids = getenv("SYMMEM_UNIQUE_ID");
    symmem_status_t st = ids ? symmem_unique_id_from_string(ids, &id) : SYMMEM_INVALID_ARGUMENT;
    if (st == SYMMEM_OK) {
        opts.device = r->device;
        st = symmem_comm_init(nranks, child, &id, &opts, &r->comm);
    }
    if (st != SYMMEM_OK) {
        cc_log(ctx, "FAIL: symmem_comm_init: %s: %s", symmem_status_name(st), symmem_last_error());
        cc_shm_abort(ctx->shm);
        *exit_code = 1;
        return 0;
    }
    return 1;
}

/* Every rank in this process: a stream and the helper kernels per device, then symmem_comm_init_all. 1, or
 * 0 with *exit_code set. */
static int start_inproc(cc_ctx_t *ctx, int ndev, const symmem_options_t *opts, int *exit_code)
{
    const int nranks = ctx->nranks;
    ctx->nprocs = 1;
    ctx->proc = 0;
    ctx->nlocal = nranks;
    int devices[CC_MAX_RANKS];
    symmem_comm_t comms[CC_MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        devices[r] = r % ndev;
        ctx->r[r].rank = r;
        ctx->r[r].device = devices[r];
        /* cc_dev_preload: one thread enqueues rank after rank, so no helper kernel may be loaded lazily
         * while a collective waits for a rank not enqueued yet (see kernels.cu). */
        const char *step = "cudaSetDevice";
        cudaError_t e = cudaSetDevice(devices[r]);
        if (e == cudaSuccess) step = "cudaStreamCreateWithFlags", e = cudaStreamCreateWithFlags(&ctx->r[r].stream, cudaStreamNonBlocking);
        if (e == cudaSuccess) step = "loading the harness's kernels", e = cc_dev_preload();
        if (e != cudaSuccess) {
            cc_log(ctx, "FAIL: CUDA init on device %d: %s: %s", devices[r], step, cudaGetErrorString(e));
            *exit_code = 1;
            return 0;
        }
    }
    symmem_status_t st = symmem_comm_init_all(nranks, devices, opts, comms);
    if (st != SYMMEM_OK) {
        cc_log(ctx, "FAIL: symmem_comm_init_all(%d ranks on %d GPUs): %s: %s", nranks, ndev,
               symmem_status_name(st), symmem_last_error());
        *exit_code = 1;
        return 0;
    }
    for (int r = 0; r < nranks; r++) ctx->r[r].comm = comms[r];
    return 1;
}

int cc_start(int *argc, char **argv, const char *name, int default_nranks, int timeout_s,
             const symmem_options_t *opts_in, const char *const *extra_env, cc_ctx_t *ctx, int *exit_code)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->name = name;
    ctx->timeout_s = timeout_s;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int child = cc_child_rank("SYMMEM_TEST");
    int multiproc, nranks;
    char *argv_copy[64];
    int n = *argc < 63 ? *argc : 63;
    for (int i = 0; i < n; i++) argv_copy[i] = argv[i];
    argv_copy[n] = NULL;
    if (cc_parse_mode(argc, argv, default_nranks, &multiproc, &nranks) != 0) {
        *exit_code = 2;
        return 0;
    }
    ctx->multiproc = multiproc;
    ctx->nranks = nranks;
    if (multiproc && child < 0) {
        *exit_code = cc_launch("SYMMEM_TEST", nranks, argv_copy, extra_env, timeout_s);
        if (*exit_code == CC_EXIT_SKIP) printf("[%s] SKIP: every rank skipped\n", name);
        return 0;
    }
    /* Threads of one process drive their ranks' streams through the context's hardware work queues
     * (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default). With more ranks than queues two ranks' streams share
     * one, and whatever a rank enqueues behind its waiting collective (its next call, a copy-engine call's
     * later steps) holds back the other rank's collective queued after it in that queue, which the first
     * waits for: a timeout (docs/collectives.md, "Residency"). The variable is read when CUDA starts. */
    if (!multiproc && nranks > CC_CUDA_DEFAULT_QUEUES && getenv("CUDA_DEVICE_MAX_CONNECTIONS") == NULL) {
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
        printf("[%s] %d ranks as threads: CUDA_DEVICE_MAX_CONNECTIONS=32 (one hardware work queue per rank's "
               "stream; the default is %d)\n", name, nranks, CC_CUDA_DEFAULT_QUEUES);
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
        if (child <= 0) printf("[%s] SKIP: no CUDA device (cudaGetDeviceCount)\n", name);
        *exit_code = CC_EXIT_SKIP;
        return 0;
    }
    ctx->ngpus = ndev;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    if (opts_in) opts = *opts_in;
    if (!(multiproc ? start_multiproc(ctx, child, ndev, opts, exit_code) : start_inproc(ctx, ndev, &opts, exit_code)))
        return 0;
    if (cc_is_root(ctx))
        cc_log(ctx, "%d ranks (%s) on %d GPU(s), rank r on device r %% %d", nranks,
               multiproc ? "one process each" : "threads of one process", ndev, ndev);
    return 1;
}

void cc_finish(cc_ctx_t *ctx)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        symmem_status_t st = symmem_comm_destroy(ctx->r[i].comm);
        if (st != SYMMEM_OK)
            cc_log(ctx, "symmem_comm_destroy(rank %d): %s: %s", ctx->r[i].rank, symmem_status_name(st),
                   symmem_last_error());
        if (ctx->r[i].stream) cudaStreamDestroy(ctx->r[i].stream);
        ctx->r[i].comm = NULL;
        ctx->r[i].stream = NULL;
    }
}

symmem_status_t cc_comm_init_again(cc_ctx_t *ctx, symmem_comm_t *comms)
{
    if (ctx->multiproc) {
        symmem_unique_id_t id, all[CC_MAX_RANKS];
        memset(&id, 0, sizeof id);
        if (ctx->proc == 0) {
            const symmem_status_t st = symmem_get_unique_id(&id);
            if (st != SYMMEM_OK) return st; /* the other processes time out in the allgather, naming it */
        }
        if (cc_shm_allgather(ctx->shm, ctx->proc, ctx->nprocs, &id, sizeof id, all) != 0) return SYMMEM_TIMEOUT;
        symmem_options_t o = SYMMEM_OPTIONS_INIT;
        o.device = ctx->r[0].device;
        return symmem_comm_init(ctx->nranks, ctx->r[0].rank, &all[0], &o, &comms[0]);
    }
    int devices[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) devices[i] = ctx->r[i].device;
    return symmem_comm_init_all(ctx->nranks, devices, NULL, comms);
}

symmem_status_t cc_alloc(cc_ctx_t *ctx, size_t bytes, symmem_buffer_t *bufs)
{
    symmem_status_t st = SYMMEM_OK;
    if (ctx->nlocal == 1) {
        cudaSetDevice(ctx->r[0].device);
        st = symmem_alloc(ctx->r[0].comm, bytes, &bufs[0]);
    } else {
        st = symmem_group_start();
        for (int i = 0; i < ctx->nlocal && st == SYMMEM_OK; i++) st = symmem_alloc(ctx->r[i].comm, bytes, &bufs[i]);
        symmem_status_t e = symmem_group_end();
        if (st == SYMMEM_OK) st = e;
    }
    if (st != SYMMEM_OK)
        cc_log(ctx, "FAIL: symmem_alloc(%zu bytes): %s: %s", bytes, symmem_status_name(st), symmem_last_error());
    return st;
}

void cc_free(cc_ctx_t *ctx, symmem_buffer_t *bufs)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        symmem_status_t st = symmem_free(bufs[i]);
        if (st != SYMMEM_OK)
            cc_log(ctx, "symmem_free(rank %d): %s: %s", ctx->r[i].rank, symmem_status_name(st), symmem_last_error());
        bufs[i] = NULL;
    }
}

cudaError_t cc_rank_memset(const cc_rank_t *R, void *dst, int byte, size_t bytes)
{
    cudaError_t e = cudaSetDevice(R->device);
    if (e == cudaSuccess) e = cudaMemsetAsync(dst, byte, bytes, R->stream);
    return e == cudaSuccess ? cudaStreamSynchronize(R->stream) : e;
}

cudaError_t cc_rank_upload(const cc_rank_t *R, void *dst, const void *src, size_t bytes)
{
    cudaError_t e = cudaSetDevice(R->device);
    if (e == cudaSuccess) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, R->stream);
    /* waited for: from pageable memory the copy may still read src after the call returns */
    return e == cudaSuccess ? cudaStreamSynchronize(R->stream) : e;
}

cudaError_t cc_sync(cc_ctx_t *ctx)
{
    cudaError_t first = cudaSuccess;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaError_t e = cudaStreamSynchronize(ctx->r[i].stream);
        if (e != cudaSuccess && first == cudaSuccess) {
            first = e;
            cc_log(ctx, "FAIL: cudaStreamSynchronize(rank %d): %s", ctx->r[i].rank, cudaGetErrorString(e));
        }
    }
    return first;
}

symmem_status_t cc_async_error(cc_ctx_t *ctx)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        symmem_status_t st = symmem_comm_get_async_error(ctx->r[i].comm);
        if (st != SYMMEM_OK) {
            cc_log(ctx, "FAIL: rank %d communicator error: %s: %s", ctx->r[i].rank, symmem_status_name(st),
                   symmem_last_error());
            return st;
        }
    }
    return SYMMEM_OK;
}

symmem_status_t cc_wait_async_error(cc_rank_t *R, char *msg, size_t len)
{
    /* the error is host-visible once the stream is done; allow a moment for the host-side record */
    symmem_status_t st = SYMMEM_OK;
    for (int k = 0; k < 200 && st == SYMMEM_OK; k++) {
        st = symmem_comm_get_async_error(R->comm);
        if (st == SYMMEM_OK) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    snprintf(msg, len, "%s", symmem_last_error());
    return st;
}

int cc_teardown_rank(cc_ctx_t *ctx, cc_rank_t *R, symmem_buffer_t buf)
{
    symmem_status_t fs = symmem_free(buf);
    symmem_status_t ds = symmem_comm_destroy(R->comm);
    R->comm = NULL;
    cudaStreamDestroy(R->stream);
    if (fs == SYMMEM_OK && ds == SYMMEM_OK) return 0;
    cc_log(ctx, "FAIL: teardown: symmem_free %s, symmem_comm_destroy %s: %s", symmem_status_name(fs),
           symmem_status_name(ds), symmem_last_error());
    return 1;
}


int cc_run_cases(cc_ctx_t *ctx, const cc_case_t *cases, int ncases, void *arg)
{
    int passed = 0, failed = 0, fatal = 0;
    for (int k = 0; k < ncases && !fatal; k++) {
        const int local = cases[k].fn(ctx, arg, cases[k].param, &fatal);
        /* A fatal rank aborts the channel, so the others' exchange below fails and they stop here too. */
        if (fatal) cc_shm_abort(ctx->shm);
        uint64_t mine = local != 0, all[CC_MAX_RANKS], total = mine;
        if (!fatal && ctx->multiproc) {
            if (cc_shm_allgather(ctx->shm, ctx->proc, ctx->nprocs, &mine, sizeof mine, all) != 0) fatal = 1;
            for (int p = 0; p < ctx->nprocs && !fatal; p++) total += p == ctx->proc ? 0 : all[p];
        }
        if (fatal) total = 1;
        if (cc_is_root(ctx)) printf("%s %s%s\n", total ? "FAIL" : "ok  ", cases[k].name, fatal ? " (the run stops here)" : "");
        if (total) failed++;
        else passed++;
    }
    ctx->fatal = fatal;
    if (cc_is_root(ctx)) printf("%d passed, %d failed, 0 skipped\n", passed, failed + (ncases - passed - failed));
    fflush(stdout);
    return failed || fatal ? 1 : 0;
}
