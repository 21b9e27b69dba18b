/* Launching ranks as processes (one launcher for every multi-process test and the benchmarks) and the
 * shared-memory channel between them; counting GPUs without touching CUDA here. See harness.h. */
#include "harness.h"

#include <errno.h>
#include <signal.h>
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


/* Wait for every child; one that fails (neither 0 nor CC_EXIT_SKIP) aborts the channel, and the rest get
 * 20 s to report and tear down before they are killed; timeout_s (0: none) bounds the whole run. */
static int wait_children(const char *label, const pid_t *pids, int n, cc_shm_t *shm, int timeout_s)
{
    int status[CC_SPAWN_MAX], done[CC_SPAWN_MAX];
    for (int r = 0; r < n; r++) done[r] = 0, status[r] = -1;
    double start = cc_now(), kill_at = 0;
    int left = n, failed = 0;
    while (left > 0) {
        for (int r = 0; r < n; r++) {
            int st;
            if (done[r] || waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
            done[r] = 1;
            left--;
            status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
            if (status[r] == 0 || status[r] == CC_EXIT_SKIP) continue;
            if (!failed)
                fprintf(stderr, "%s: rank %d exited with %d%s\n", label, r, status[r], WIFSIGNALED(st) ? " (signal)" : "");
            failed = 1;
            cc_shm_abort(shm);
            if (kill_at == 0) kill_at = cc_now() + 20; /* time for the others to report and tear down */
        }
        double now = cc_now();
        int timed_out = timeout_s > 0 && now - start > timeout_s;
        if (left > 0 && (timed_out || (kill_at > 0 && now > kill_at))) {
            for (int r = 0; r < n; r++)
                if (!done[r]) {
                    fprintf(stderr, "%s: killing rank %d (pid %d): %s\n", label, r, (int)pids[r],
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
    int skipped = 0;
    for (int r = 0; r < n; r++) skipped += status[r] == CC_EXIT_SKIP;
    if (failed) return 1;
    if (skipped == n) return CC_EXIT_SKIP;
    if (skipped) {
        fprintf(stderr, "%s: %d of %d ranks skipped, the others ran: inconsistent\n", label, skipped, n);
        return 1;
    }
    return 0;
}

int cc_spawn_on(const char *label, int nprocs, void (*fn)(int proc, void *arg), void *arg, cc_shm_t *shm,
                int timeout_s)
{
    if (nprocs < 1 || nprocs > CC_SPAWN_MAX) {
        fprintf(stderr, "%s: %d processes (1..%d)\n", label, nprocs, CC_SPAWN_MAX);
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pids[CC_SPAWN_MAX];
    for (int r = 0; r < nprocs; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            fprintf(stderr, "%s: fork: %s\n", label, strerror(errno));
            cc_shm_abort(shm);
            for (int q = 0; q < r; q++) kill(pids[q], SIGKILL), waitpid(pids[q], NULL, 0);
            return 1;
        }
        if (pids[r] == 0) {
            fn(r, arg);
            fflush(stdout);
            _exit(0);
        }
    }
    return wait_children(label, pids, nprocs, shm, timeout_s);
}

int cc_spawn(int nprocs, void (*fn)(int proc, void *arg), void *arg, int timeout_s)
{
    return cc_spawn_on("cc_spawn", nprocs, fn, arg, NULL, timeout_s);
}

/* A child of cc_launch: its rank, the channel and the unique id in the environment, then the same binary. */
typedef struct launch_args {
    const char *prefix;
    int nranks, fd;
    const char *idstr;
    char **argv;
    const char *const *extra_env;
} launch_args_t;

static void launch_child(int r, void *p)
{
    const launch_args_t *a = p;
    char name[64], val[32];
    cc_env_name(name, sizeof name, a->prefix, "RANK");
    snprintf(val, sizeof val, "%d", r);
    setenv(name, val, 1);
    cc_env_name(name, sizeof name, a->prefix, "NRANKS");
    snprintf(val, sizeof val, "%d", a->nranks);
    setenv(name, val, 1);
    cc_env_name(name, sizeof name, a->prefix, "SHM_FD");
    snprintf(val, sizeof val, "%d", a->fd);
    setenv(name, val, 1);
    setenv("SYMMEM_UNIQUE_ID", a->idstr, 1);
    /* NVLink multicast stays off everywhere: it can take a shared host's GPUs out of service. */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
    setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
    for (const char *const *e = a->extra_env; e && *e; e++) putenv((char *)*e);
    execv("/proc/self/exe", a->argv);
    fprintf(stderr, "cc_launch: exec: %s\n", strerror(errno));
    _exit(127);
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
    launch_args_t a = {prefix, nranks, fd, idstr, argv, extra_env};
    const int rc = cc_spawn_on("cc_launch", nranks, launch_child, &a, shm, timeout_s);
    munmap(shm, sizeof(cc_shm_t));
    close(fd);
    return rc;
}
