/* Shared helpers for the collective tests and symmem-bench: see coll_common.h. */
#include "coll_common.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ======================================================================================================
 * Shared-memory channel. Invariant: `count` is touched only inside a barrier; the last arriver resets it
 * and then bumps `gen` (release), waiters leave when they see a new `gen` (acquire). A slot is written by
 * its owner only between two barriers, so readers between the same barriers see a stable value.
 * ==================================================================================================== */
struct cc_shm {
    _Atomic uint32_t count;
    _Atomic uint32_t gen;
    _Atomic int32_t aborted;
    uint32_t pad;
    unsigned char slot[CC_MAX_RANKS][CC_SLOT_BYTES];
};

static double cc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void cc_env_name(char *buf, size_t len, const char *prefix, const char *what)
{
    snprintf(buf, len, "%s_%s", prefix, what);
}

cc_shm_t *cc_shm_attach(const char *prefix)
{
    char name[64];
    cc_env_name(name, sizeof name, prefix, "SHM_FD");
    const char *s = getenv(name);
    if (!s) return NULL;
    int fd = atoi(s);
    void *p = mmap(NULL, sizeof(cc_shm_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "cc_shm_attach: mmap of fd %d: %s\n", fd, strerror(errno));
        return NULL;
    }
    return (cc_shm_t *)p;
}

void cc_shm_abort(cc_shm_t *shm)
{
    if (shm) atomic_store(&shm->aborted, 1);
}

int cc_shm_barrier(cc_shm_t *shm, int nprocs, int timeout_s)
{
    if (!shm || nprocs <= 1) return 0;
    uint32_t g = atomic_load_explicit(&shm->gen, memory_order_acquire);
    if (atomic_fetch_add(&shm->count, 1) == (uint32_t)nprocs - 1) {
        atomic_store(&shm->count, 0);
        atomic_fetch_add_explicit(&shm->gen, 1, memory_order_release);
        return atomic_load(&shm->aborted) ? -1 : 0;
    }
    double deadline = cc_now() + (timeout_s > 0 ? timeout_s : 600);
    unsigned spins = 0;
    while (atomic_load_explicit(&shm->gen, memory_order_acquire) == g) {
        if (atomic_load(&shm->aborted)) return -1;
        if (++spins > 1000) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            if (cc_now() > deadline) {
                fprintf(stderr, "cc_shm_barrier: timed out after %d s waiting for the other ranks\n",
                        timeout_s);
                cc_shm_abort(shm);
                return -1;
            }
        }
    }
    return atomic_load(&shm->aborted) ? -1 : 0;
}

int cc_shm_allgather(cc_shm_t *shm, int proc, int nprocs, const void *in, size_t bytes, void *out)
{
    if (bytes > CC_SLOT_BYTES) return -1;
    if (!shm || nprocs <= 1) {
        memcpy(out, in, bytes);
        return 0;
    }
    memcpy(shm->slot[proc], in, bytes);
    if (cc_shm_barrier(shm, nprocs, 600) != 0) return -1;
    for (int p = 0; p < nprocs; p++) memcpy((char *)out + (size_t)p * bytes, shm->slot[p], bytes);
    return cc_shm_barrier(shm, nprocs, 600);
}

/* ======================================================================================================
 * Launching.
 * ==================================================================================================== */
int cc_child_rank(const char *prefix)
{
    char name[64];
    cc_env_name(name, sizeof name, prefix, "RANK");
    const char *s = getenv(name);
    return s ? atoi(s) : -1;
}

int cc_probe_gpu_count(void)
{
    int fds[2];
    if (pipe(fds) != 0) return 0;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return 0;
    }
    if (pid == 0) {
        /* The child may initialise CUDA: it never returns into the caller. */
        close(fds[0]);
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        ssize_t w = write(fds[1], &n, sizeof n);
        (void)w;
        _exit(0);
    }
    close(fds[1]);
    int n = 0;
    if (read(fds[0], &n, sizeof n) != (ssize_t)sizeof n) n = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return n;
}

int cc_launch(const char *prefix, int nranks, char **argv, const char *const *extra_env, int timeout_s)
{
    if (nranks < 1 || nranks > CC_MAX_RANKS) {
        fprintf(stderr, "cc_launch: %d ranks (1..%d)\n", nranks, CC_MAX_RANKS);
        return 1;
    }
    symmem_unique_id_t id;
    char idstr[SYMMEM_UNIQUE_ID_STRLEN];
    if (symmem_get_unique_id(&id) != SYMMEM_OK ||
        symmem_unique_id_to_string(&id, idstr, sizeof idstr) != SYMMEM_OK) {
        fprintf(stderr, "cc_launch: symmem_get_unique_id failed: %s\n", symmem_last_error());
        return 1;
    }
    /* The channel: a memfd the children inherit across exec (no close-on-exec). */
    int fd = memfd_create("symmem-test-shm", 0);
    if (fd < 0 || ftruncate(fd, sizeof(cc_shm_t)) != 0) {
        fprintf(stderr, "cc_launch: memfd: %s\n", strerror(errno));
        return 1;
    }
    cc_shm_t *shm = mmap(NULL, sizeof(cc_shm_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (shm == MAP_FAILED) {
        fprintf(stderr, "cc_launch: mmap: %s\n", strerror(errno));
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pids[CC_MAX_RANKS];
    int status[CC_MAX_RANKS];
    int done[CC_MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
        done[r] = 0;
        status[r] = -1;
        pids[r] = fork();
        if (pids[r] < 0) {
            fprintf(stderr, "cc_launch: fork: %s\n", strerror(errno));
            cc_shm_abort(shm);
            for (int q = 0; q < r; q++) kill(pids[q], SIGKILL);
            return 1;
        }
        if (pids[r] == 0) {
            char name[64], val[32];
            cc_env_name(name, sizeof name, prefix, "RANK");
            snprintf(val, sizeof val, "%d", r);
            setenv(name, val, 1);
            cc_env_name(name, sizeof name, prefix, "NRANKS");
            snprintf(val, sizeof val, "%d", nranks);
            setenv(name, val, 1);
            cc_env_name(name, sizeof name, prefix, "SHM_FD");
            snprintf(val, sizeof val, "%d", fd);
            setenv(name, val, 1);
            setenv("SYMMEM_UNIQUE_ID", idstr, 1);
            /* NVLink multicast stays off everywhere: it can take a shared host's GPUs out of service. */
            setenv("NCCL_NVLS_ENABLE", "0", 1);
            setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
            setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
            for (const char *const *e = extra_env; e && *e; e++) putenv((char *)*e);
            execv("/proc/self/exe", argv);
            fprintf(stderr, "cc_launch: exec: %s\n", strerror(errno));
            _exit(127);
        }
    }
    double start = cc_now(), kill_at = 0;
    int left = nranks, failed = 0;
    while (left > 0) {
        for (int r = 0; r < nranks; r++) {
            if (done[r]) continue;
            int st;
            pid_t w = waitpid(pids[r], &st, WNOHANG);
            if (w != pids[r]) continue;
            done[r] = 1;
            left--;
            status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            if (status[r] != 0 && status[r] != CC_EXIT_SKIP) {
                if (!failed)
                    fprintf(stderr, "cc_launch: rank %d exited with %d%s\n", r, status[r],
                            WIFSIGNALED(st) ? " (signal)" : "");
                failed = 1;
                cc_shm_abort(shm);
                if (kill_at == 0) kill_at = cc_now() + 20; /* time for the others to report and tear down */
            }
        }
        double now = cc_now();
        int timed_out = timeout_s > 0 && now - start > timeout_s;
        if (left > 0 && (timed_out || (kill_at > 0 && now > kill_at))) {
            for (int r = 0; r < nranks; r++)
                if (!done[r]) {
                    fprintf(stderr, "cc_launch: killing rank %d (pid %d): %s\n", r, (int)pids[r],
                            timed_out ? "timeout" : "another rank failed");
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                    done[r] = 1;
                    status[r] = 137;
                    left--;
                }
            failed = 1;
        }
        if (left > 0) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    munmap(shm, sizeof(cc_shm_t));
    close(fd);
    int skipped = 0;
    for (int r = 0; r < nranks; r++) skipped += status[r] == CC_EXIT_SKIP;
    if (failed) return 1;
    if (skipped == nranks) return CC_EXIT_SKIP;
    if (skipped) {
        fprintf(stderr, "cc_launch: %d of %d ranks skipped, the others ran: inconsistent\n", skipped, nranks);
        return 1;
    }
    return 0;
}

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
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
        if (child <= 0) printf("[%s] SKIP: no CUDA device (cudaGetDeviceCount)\n", name);
        *exit_code = CC_EXIT_SKIP;
        return 0;
    }
    ctx->ngpus = ndev;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    if (opts_in) opts = *opts_in;
    if (multiproc) {
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
        if (cudaSetDevice(r->device) != cudaSuccess || cudaFree(NULL) != cudaSuccess ||
            cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking) != cudaSuccess ||
            cc_dev_preload() != cudaSuccess) {
            cc_log(ctx, "FAIL: CUDA init on device %d", r->device);
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
    } else {
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
             * while a collective waits for a rank not enqueued yet (see coll_kernels.cu). */
            if (cudaSetDevice(devices[r]) != cudaSuccess ||
                cudaStreamCreateWithFlags(&ctx->r[r].stream, cudaStreamNonBlocking) != cudaSuccess ||
                cc_dev_preload() != cudaSuccess) {
                cc_log(ctx, "FAIL: CUDA init on device %d", devices[r]);
                *exit_code = 1;
                return 0;
            }
        }
        symmem_status_t st = symmem_comm_init_all(nranks, devices, &opts, comms);
        if (st != SYMMEM_OK) {
            cc_log(ctx, "FAIL: symmem_comm_init_all(%d ranks on %d GPUs): %s: %s", nranks, ndev,
                   symmem_status_name(st), symmem_last_error());
            *exit_code = 1;
            return 0;
        }
        for (int r = 0; r < nranks; r++) ctx->r[r].comm = comms[r];
    }
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

/* ======================================================================================================
 * Number formats.
 * ==================================================================================================== */
static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t cc_float_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cc_bf16_to_float(uint16_t h) { return u2f((uint32_t)h << 16); }

float cc_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t cc_float_to_half(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
    float a = fabsf(f);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity */
    if (a < ldexpf(1.0f, -14)) {
        /* subnormal: multiples of 2^-24, round to nearest even */
        float q = a * 16777216.0f; /* exact */
        float r = nearbyintf(q);   /* default rounding mode: nearest even */
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t au = f2u(a);
    uint32_t exp = (au >> 23) - 112u;
    uint32_t man = au & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* may carry into the exponent: correct */
    return (uint16_t)(sign | h);
}

double cc_load(const void *p, symmem_dtype_t dt, size_t i)
{
    switch (dt) {
    case SYMMEM_FLOAT32: return ((const float *)p)[i];
    case SYMMEM_FLOAT16: return cc_half_to_float(((const uint16_t *)p)[i]);
    case SYMMEM_BFLOAT16: return cc_bf16_to_float(((const uint16_t *)p)[i]);
    default: return NAN;
    }
}

void cc_store(void *p, symmem_dtype_t dt, size_t i, double v)
{
    switch (dt) {
    case SYMMEM_FLOAT32: ((float *)p)[i] = (float)v; break;
    case SYMMEM_FLOAT16: ((uint16_t *)p)[i] = cc_float_to_half((float)v); break;
    case SYMMEM_BFLOAT16: ((uint16_t *)p)[i] = cc_float_to_bf16((float)v); break;
    default: break;
    }
}

void cc_fill(void *dst, symmem_dtype_t dt, size_t count, uint64_t seed, int rank, uint64_t index0)
{
    for (size_t k = 0; k < count; k++) {
        float v = cc_value(seed, rank, index0 + k, dt);
        switch (dt) {
        case SYMMEM_FLOAT32: ((float *)dst)[k] = v; break;
        case SYMMEM_FLOAT16: ((uint16_t *)dst)[k] = cc_float_to_half(v); break;
        default: ((uint16_t *)dst)[k] = cc_float_to_bf16(v); break;
        }
    }
}

/* ======================================================================================================
 * Reference and comparison.
 * ==================================================================================================== */
static double cc_dtype_max(symmem_dtype_t dt)
{
    /* Largest finite value, plus half an ulp: references at or beyond it round to infinity. */
    if (dt == SYMMEM_FLOAT16) return 65520.0;
    if (dt == SYMMEM_BFLOAT16) return ldexp(1.0, 128) - ldexp(1.0, 119); /* (2 - 2^-8) * 2^127 */
    return ldexp(1.0, 128) - ldexp(1.0, 103);                             /* (2 - 2^-24) * 2^127 */
}

int cc_elem_ok(double got, const double *in, int n, symmem_redop_t op, symmem_dtype_t dt, double *ref_out)
{
    if (op == SYMMEM_OP_SUM) {
        double ref = 0, sabs = 0;
        for (int r = 0; r < n; r++) {
            ref += in[r];
            sabs += fabs(in[r]);
        }
        if (ref_out) *ref_out = ref;
        if (isnan(ref)) return isnan(got);
        if (isinf(ref) || fabs(ref) >= cc_dtype_max(dt)) return isinf(got) && (got > 0) == (ref > 0);
        if (isnan(got) || isinf(got)) return 0;
        double rel = dt == SYMMEM_FLOAT32 ? ldexp(1.0, -23) : dt == SYMMEM_FLOAT16 ? ldexp(1.0, -10) : ldexp(1.0, -8);
        double tol = rel * fabs(ref) + 2.0 * n * ldexp(1.0, -24) * sabs + (dt == SYMMEM_FLOAT16 ? ldexp(1.0, -24) : 0);
        return fabs(got - ref) <= tol;
    }
    int is_max = op == SYMMEM_OP_MAX, any_nan = 0, have = 0;
    double best = 0;
    for (int r = 0; r < n; r++) {
        if (isnan(in[r])) {
            any_nan = 1;
            continue;
        }
        if (!have || (is_max ? in[r] > best : in[r] < best)) best = in[r];
        have = 1;
    }
    if (ref_out) *ref_out = any_nan ? NAN : best;
    if (!have) return isnan(got);
    if (any_nan && isnan(got)) return 1;
    return got == best;
}

size_t cc_check_reduce(const void *out, symmem_dtype_t dt, symmem_redop_t op, size_t count, uint64_t index0,
                       int nranks, uint64_t seed, cc_bad_t *bad)
{
    size_t wrong = 0;
    double in[CC_MAX_RANKS];
    for (size_t k = 0; k < count; k++) {
        for (int r = 0; r < nranks; r++) in[r] = cc_value(seed, r, index0 + k, dt);
        double got = cc_load(out, dt, k), ref;
        if (!cc_elem_ok(got, in, nranks, op, dt, &ref)) {
            if (wrong == 0 && bad) {
                bad->first = k;
                bad->got = got;
                bad->want = ref;
            }
            wrong++;
        }
    }
    if (bad) bad->wrong = wrong;
    return wrong;
}

size_t cc_check_gather(const void *out, symmem_dtype_t dt, size_t count, int nranks, uint64_t seed, cc_bad_t *bad)
{
    size_t wrong = 0;
    for (int r = 0; r < nranks; r++)
        for (size_t k = 0; k < count; k++) {
            double want = cc_value(seed, r, k, dt), got = cc_load(out, dt, (size_t)r * count + k);
            if (!(got == want)) {
                if (wrong == 0 && bad) {
                    bad->first = (size_t)r * count + k;
                    bad->got = got;
                    bad->want = want;
                }
                wrong++;
            }
        }
    if (bad) bad->wrong = wrong;
    return wrong;
}

uint64_t cc_hash(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    uint64_t h = 0x243f6a8885a308d3ull ^ bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = cc_mix64(h ^ w);
    }
    uint64_t w = 0;
    memcpy(&w, b + i, bytes - i);
    return cc_mix64(h ^ w ^ 0x13198a2e03707344ull);
}
