/* Communicators of symmem_comm_init_all driven the wrong way fail at once instead of waiting the timeout,
 * the legal ways (a group, one thread per rank, threads that change ranks between calls) keep working, and
 * errors are logged once, where they are found. Host backend: no GPU needed. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "boot/comm_state.h"
#include "symmem/symmem.h"
#include "test_util.h"

enum { N = 3 };
/* Long enough that a call which waits for it cannot pass the "at once" bounds below; those bounds are far
 * above what a direct failure takes, so only a wait for the timeout breaks them. */
#define TIMEOUT_MS 60000
#define AT_ONCE_MS 20000.0

static symmem_options_t host_opts(void)
{
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_HOST;
    o.timeout_ms = TIMEOUT_MS;
    return o;
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void init_all(int n, symmem_comm_t *comms)
{
    symmem_options_t o = host_opts();
    CHECK_OK(symmem_comm_init_all(n, NULL, &o, comms));
}

/* Every rank writes its pattern, then each checks every peer's; comm barriers keep the rounds apart. */
static void fill(symmem_buffer_t b, int rank, int round) { memset(symmem_buffer_ptr(b), 'a' + rank + round, 4096); }
static void verify(symmem_buffer_t b, int nranks, int round)
{
    for (int p = 0; p < nranks; p++) {
        const char *peer = symmem_buffer_peer_ptr(b, p);
        CHECK(peer && peer[0] == 'a' + p + round && peer[4095] == 'a' + p + round);
    }
}

static void group_alloc_works(symmem_comm_t *comms, int n)
{
    symmem_buffer_t bufs[SYMMEM_MAX_RANKS];
    CHECK_OK(symmem_group_start());
    for (int r = 0; r < n; r++) CHECK_OK(symmem_alloc(comms[r], 4096, &bufs[r]));
    CHECK_OK(symmem_group_end());
    for (int r = 0; r < n; r++) fill(bufs[r], r, 0);
    for (int r = 0; r < n; r++) verify(bufs[r], n, 0);
    for (int r = 0; r < n; r++) CHECK_OK(symmem_free(bufs[r]));
}

/* ---- misuse: one thread, no group ------------------------------------------------------------------- */

static void single_thread_outside_group_fails_at_once(void)
{
    symmem_comm_t comms[N];
    init_all(N, comms);
    for (int r = 0; r < N; r++) {
        symmem_buffer_t b = NULL;
        double t0 = now_ms();
        CHECK_ST(symmem_alloc(comms[r], 4096, &b), SYMMEM_INVALID_USAGE);
        double ms = now_ms() - t0;
        if (ms > AT_ONCE_MS) fprintf(stderr, "symmem_alloc took %.0f ms to fail\n", ms);
        CHECK(ms < AT_ONCE_MS);
        CHECK(b == NULL);
        CHECK_ERR_HAS("symmem_alloc");
        CHECK_ERR_HAS("symmem_group_start()");
        CHECK_ERR_HAS("one thread per rank");
        CHECK(symmem_comm_get_async_error(comms[r]) == SYMMEM_OK); /* nothing was sent: not an error state */
    }
    group_alloc_works(comms, N); /* the refused calls left the communicators in step */
    for (int r = 0; r < N; r++) CHECK_OK(symmem_comm_destroy(comms[r]));
}

/* ---- legal: one thread per rank, no group --------------------------------------------------------------- */

typedef struct rank_job {
    symmem_comm_t comm;
    int rank, round;
    symmem_status_t st;
} rank_job_t;

static void *rank_thread(void *p)
{
    rank_job_t *j = p;
    symmem_buffer_t b;
    j->st = symmem_alloc(j->comm, 4096, &b);
    if (j->st != SYMMEM_OK) {
        fprintf(stderr, "rank %d round %d: %s: %s\n", j->rank, j->round, symmem_status_name(j->st),
                symmem_last_error());
        return NULL;
    }
    fill(b, j->rank, j->round);
    if ((j->st = symmem_comm_barrier(j->comm)) == SYMMEM_OK) verify(b, N, j->round);
    if (j->st == SYMMEM_OK) j->st = symmem_comm_barrier(j->comm); /* nobody frees before all have read */
    symmem_free(b);
    return NULL;
}

static void one_thread_per_rank_without_group_works(void)
{
    symmem_comm_t comms[N];
    init_all(N, comms);
    /* Round 0: this thread (which made the communicators) drives rank 0 after starting the others. Later
     * rounds: fresh threads, and thread i drives another rank each round, as a thread pool would. */
    for (int round = 0; round < 3; round++) {
        pthread_t th[N];
        rank_job_t jobs[N];
        int first = round == 0 ? 1 : 0;
        for (int i = 0; i < N; i++) {
            int r = (i + round) % N;
            jobs[i] = (rank_job_t){comms[r], r, round, SYMMEM_INTERNAL_ERROR};
        }
        for (int i = first; i < N; i++) CHECK(pthread_create(&th[i], NULL, rank_thread, &jobs[i]) == 0);
        if (first) rank_thread(&jobs[0]);
        for (int i = first; i < N; i++) pthread_join(th[i], NULL);
        for (int i = 0; i < N; i++) CHECK(jobs[i].st == SYMMEM_OK);
    }
    for (int r = 0; r < N; r++) CHECK_OK(symmem_comm_destroy(comms[r]));
}

/* ---- a sibling that can never answer ------------------------------------------------------------------ */

/* A second, idle thread: with it the process is not single-threaded, so only the sibling checks apply. */
static int idle_pipe[2];
static void *idle_thread(void *p)
{
    (void)p;
    char c;
    while (read(idle_pipe[0], &c, 1) < 0) {
    }
    return NULL;
}

static void destroyed_or_failed_sibling_fails_at_once(void)
{
    pthread_t idle;
    CHECK(pipe(idle_pipe) == 0);
    CHECK(pthread_create(&idle, NULL, idle_thread, NULL) == 0);
    symmem_comm_t comms[2];
    symmem_buffer_t b = NULL;

    init_all(2, comms);
    CHECK_OK(symmem_comm_destroy(comms[1]));
    double t0 = now_ms();
    CHECK_ST(symmem_alloc(comms[0], 4096, &b), SYMMEM_PEER_FAILURE);
    CHECK(now_ms() - t0 < AT_ONCE_MS);
    CHECK_ERR_HAS("rank 1 of this symmem_comm_init_all was destroyed");
    CHECK_OK(symmem_comm_destroy(comms[0]));

    init_all(2, comms);
    symmem_comm_set_error(comms[1], SYMMEM_TIMEOUT, "rank 1: injected by the test");
    t0 = now_ms();
    CHECK_ST(symmem_alloc(comms[0], 4096, &b), SYMMEM_PEER_FAILURE);
    CHECK(now_ms() - t0 < AT_ONCE_MS);
    CHECK_ERR_HAS("rank 1 of this symmem_comm_init_all failed earlier");
    CHECK_ERR_HAS("injected by the test");
    for (int r = 0; r < 2; r++) CHECK_OK(symmem_comm_destroy(comms[r]));

    close(idle_pipe[1]);
    pthread_join(idle, NULL);
}

/* ---- messages ------------------------------------------------------------------------------------------ */

/* Route this process's log to a fresh file (before the library's first log line reads the settings). */
static char log_path[64];
static void log_to_file(const char *level)
{
    strcpy(log_path, "/tmp/symmem-test-log-XXXXXX");
    int fd = mkstemp(log_path);
    CHECK(fd >= 0);
    close(fd);
    setenv("SYMMEM_LOG_FILE", log_path, 1);
    setenv("SYMMEM_LOG_LEVEL", level, 1);
    unsetenv("SYMMEM_LOG_SUBSYS");
}

/* The whole log on stderr (when a count is not what a test expects: the lines say why). */
static void echo_log(void)
{
    FILE *f = fopen(log_path, "r");
    if (!f) return;
    char line[2048];
    fprintf(stderr, "---- %s\n", log_path);
    while (fgets(line, sizeof line, f)) fputs(line, stderr);
    fprintf(stderr, "----\n");
    fclose(f);
}

/* Lines of the log that contain every one of needles[] (NULL-terminated). */
static int log_lines(const char *const *needles)
{
    FILE *f = fopen(log_path, "r");
    CHECK(f != NULL);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        int all = 1;
        for (int k = 0; needles[k]; k++) all &= strstr(line, needles[k]) != NULL;
        n += all;
    }
    fclose(f);
    return n;
}

/* WARN lines, but for the one about unknown SYMMEM_* variables of the caller's environment (a user's or a
 * script's, e.g. SYMMEM_BOGUS=1 ctest), which is not what these counts are about. */
static int warn_lines(void)
{
    return log_lines((const char *[]){" symmem WARN ", NULL}) -
           log_lines((const char *[]){" symmem WARN ", "unknown environment variable", NULL});
}

static void errors_are_logged_once(void)
{
    log_to_file("WARN");
    /* A size mismatch inside a group: each rank finds it (and logs its own view); symmem_group_end hands
     * the first one to this thread without logging it again. */
    symmem_comm_t comms[2];
    init_all(2, comms);
    symmem_buffer_t bad[2];
    CHECK_OK(symmem_group_start());
    for (int r = 0; r < 2; r++) CHECK_OK(symmem_alloc(comms[r], r ? 64 : 32, &bad[r]));
    CHECK_ST(symmem_group_end(), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("every rank must pass the same size");
    const int warns = warn_lines(), sizes = log_lines((const char *[]){" symmem WARN ", "same size", NULL});
    if (warns != 2 || sizes != 2) echo_log();
    CHECK(warns == 2);
    CHECK(sizes == 2);
    for (int r = 0; r < 2; r++) CHECK_OK(symmem_comm_destroy(comms[r]));

    /* No CUDA driver: the default backend's error, found once for the process, is logged once however many
     * ranks ask, and each call still returns it. */
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (driver != 0) {
        printf("  a CUDA driver is present: the missing-driver message is not exercised here\n");
        return;
    }
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_CUDA;
    symmem_comm_t cuda[4];
    for (int k = 0; k < 2; k++) {
        CHECK_ST(symmem_comm_init_all(4, NULL, &o, cuda), SYMMEM_NO_DEVICE);
        CHECK_ERR_HAS("no CUDA driver found");
        CHECK_ERR_HAS("SYMMEM_BACKEND=host");
    }
    CHECK(log_lines((const char *[]){" symmem WARN ", "no CUDA driver found", NULL}) == 1);
    /* Beside the cause, a rank may log that a sibling closed its connection mid-handshake (the sibling
     * left before it could tell this one why): a different event, seen by another rank, so no total here. */
    unlink(log_path);
}

static void info_line_names_backend_and_placement(void)
{
    log_to_file("INFO");
    symmem_comm_t comms[2];
    init_all(2, comms);
    CHECK(log_lines((const char *[]){" symmem INFO ", "communicator ready: 2 ranks, host backend (memfd memory, no GPU)",
                                     NULL}) == 2);
    CHECK(log_lines((const char *[]){"communicator ready", "device -1", NULL}) == 0);
    for (int r = 0; r < 2; r++) CHECK_OK(symmem_comm_destroy(comms[r]));
    unlink(log_path);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"single_thread_outside_group_fails_at_once", single_thread_outside_group_fails_at_once, 100},
        {"one_thread_per_rank_without_group_works", one_thread_per_rank_without_group_works, 100},
        {"destroyed_or_failed_sibling_fails_at_once", destroyed_or_failed_sibling_fails_at_once, 100},
        {"errors_are_logged_once", errors_are_logged_once, 100},
        {"info_line_names_backend_and_placement", info_line_names_backend_and_placement, 60},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
