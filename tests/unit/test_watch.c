/* The error watcher (comm/watch.c), without a GPU: a communicator shell whose kernel error record lives in
 * plain host memory, written by the test the way a failing kernel writes it (fields, then the status). */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/param.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"
#include "comm/watch.h"
#include "test_util.h"

static symmem_comm_t shell(const char *bus)
{
    struct symmem_comm *c = calloc(1, sizeof *c);
    struct symmem_coll *co = calloc(1, sizeof *co);
    CHECK(c && co);
    c->magic = SYMMEM_COMM_MAGIC;
    c->nranks = 2;
    c->rank = 0;
    c->backend = SYMMEM_BACKEND_CUDA;
    c->timeout_ms = 2000;
    pthread_mutex_init(&c->lock, NULL);
    for (int r = 0; r < 2; r++) {
        snprintf(c->peers[r].pci_bus_id, sizeof c->peers[r].pci_bus_id, "%s", bus);
        c->peers[r].pid = 1000 + r; /* two processes */
    }
    co->err = calloc(1, sizeof *co->err);
    CHECK(co->err);
    c->coll = co;
    return c;
}

static void shell_free(symmem_comm_t c)
{
    free(c->coll->err);
    free(c->coll);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* What a kernel of rank 0 writes when it gave up waiting for rank 1. */
static void kernel_timeout(symmem_comm_t c)
{
    volatile symmem_coll_error_record_t *r = c->coll->err;
    r->reason = SYMMEM_COLL_ERR_TIMEOUT;
    r->kind = SYMMEM_COLL_ALL_REDUCE;
    r->algo = SYMMEM_ALGO_TWOSHOT_PUSH;
    r->rank = 0;
    r->peer = 1;
    r->call = 7;
    r->epoch = 4;
    r->block = 3;
    r->started = 0;
    r->grid = 8;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    r->status = SYMMEM_TIMEOUT;
}

typedef struct seen {
    pthread_mutex_t mu;
    int calls;
    symmem_status_t status;
    char msg[1024];
    pthread_t thread;
    int destroy; /* the handler removes the communicator from the watcher, as symmem_comm_destroy would */
} seen_t;

static void handler(symmem_comm_t comm, symmem_status_t status, const char *message, void *ctx)
{
    seen_t *s = ctx;
    pthread_mutex_lock(&s->mu);
    s->calls++;
    s->status = status;
    snprintf(s->msg, sizeof s->msg, "%s", message);
    s->thread = pthread_self();
    pthread_mutex_unlock(&s->mu);
    if (s->destroy) symmem_watch_remove(comm);
}

static int calls_of(seen_t *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->calls;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Wait (at most 10 s: only a broken watcher takes that long) for the handler's first call. */
static void wait_called(seen_t *s)
{
    for (int i = 0; i < 1000 && calls_of(s) == 0; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void handler_called_once_on_its_thread(void)
{
    symmem_comm_t c = shell("0000:01:00.0");
    seen_t s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    symmem_watch_add(c);
    CHECK_OK(symmem_comm_set_error_handler(c, handler, &s));
    sleep_ms(50);
    CHECK(calls_of(&s) == 0); /* nothing failed yet */
    kernel_timeout(c);
    wait_called(&s);
    sleep_ms(100); /* several more polls */
    CHECK(calls_of(&s) == 1);
    CHECK(s.status == SYMMEM_TIMEOUT);
    CHECK(strstr(s.msg, "rank 1") && strstr(s.msg, "sequence number 7"));
    CHECK(!pthread_equal(s.thread, pthread_self()));
    /* the communicator is in its error state for everyone else too */
    pthread_mutex_lock(&c->lock);
    CHECK(c->async_error == SYMMEM_TIMEOUT);
    pthread_mutex_unlock(&c->lock);
    symmem_watch_remove(c);
    shell_free(c);
}

/* A timeout waiting for a rank on the same GPU says what only ranks that share a GPU run into (a kernel of the
 * peer's that needs the SMs this call's blocks hold); one waiting for a rank on another GPU does not. The
 * handler and the communicator's stored error (what every later call reports) hold the whole message, hint
 * included, past the 512th character. */
static void timeout_on_a_shared_gpu_says_so(void)
{
    for (int shared = 0; shared <= 1; shared++) {
        symmem_comm_t c = shell("0000:01:00.0");
        if (!shared) snprintf(c->peers[1].pci_bus_id, sizeof c->peers[1].pci_bus_id, "%s", "0000:02:00.0");
        seen_t s = {.mu = PTHREAD_MUTEX_INITIALIZER};
        symmem_watch_add(c);
        CHECK_OK(symmem_comm_set_error_handler(c, handler, &s));
        kernel_timeout(c);
        wait_called(&s);
        CHECK(s.status == SYMMEM_TIMEOUT && strstr(s.msg, "waiting for rank 1"));
        const char *hint = "Rank 1 runs on this GPU too (0000:01:00.0)";
        const int hinted = strstr(s.msg, hint) && strstr(s.msg, "SYMMEM_CLUSTER_ROOM=8 (the default) or more, or a") &&
                           strstr(s.msg, "lower SYMMEM_GRID_SHARE (docs/collectives.md");
        CHECK(shared ? hinted : !strstr(s.msg, hint));
        /* what every later call reports (the communicator's stored error) keeps it too */
        char stored[2048] = "";
        CHECK(symmem_comm_error(c, stored, sizeof stored) == SYMMEM_TIMEOUT && strcmp(stored, s.msg) == 0);
        CHECK(!shared || strlen(stored) > 512);
        symmem_watch_remove(c);
        shell_free(c);
    }
}

static void host_error_reaches_handler(void)
{
    symmem_comm_t c = shell("0000:01:00.0");
    seen_t s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    symmem_watch_add(c);
    CHECK_OK(symmem_comm_set_error_handler(c, handler, &s));
    symmem_comm_set_error(c, SYMMEM_PEER_FAILURE, "rank 1 closed its connection");
    wait_called(&s);
    CHECK(calls_of(&s) == 1 && s.status == SYMMEM_PEER_FAILURE && strstr(s.msg, "rank 1 closed"));
    symmem_watch_remove(c);
    shell_free(c);
}

static void handler_set_after_the_failure(void)
{
    symmem_comm_t c = shell("0000:01:00.0");
    seen_t s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    symmem_watch_add(c);
    kernel_timeout(c);
    CHECK_OK(symmem_comm_set_error_handler(c, handler, &s));
    wait_called(&s);
    CHECK(calls_of(&s) == 1 && s.status == SYMMEM_TIMEOUT);
    symmem_watch_remove(c);
    shell_free(c);
}

static void handler_may_destroy(void)
{
    symmem_comm_t c = shell("0000:01:00.0"), d = shell("0000:02:00.0");
    seen_t s = {.mu = PTHREAD_MUTEX_INITIALIZER, .destroy = 1}, t = {.mu = PTHREAD_MUTEX_INITIALIZER};
    symmem_watch_add(c);
    symmem_watch_add(d);
    CHECK_OK(symmem_comm_set_error_handler(c, handler, &s));
    CHECK_OK(symmem_comm_set_error_handler(d, handler, &t));
    kernel_timeout(c);
    wait_called(&s);
    CHECK(calls_of(&s) == 1);
    /* the watcher survived the removal from inside the handler: it still watches d */
    kernel_timeout(d);
    wait_called(&t);
    CHECK(calls_of(&t) == 1);
    symmem_watch_remove(c); /* already gone: a no-op */
    symmem_watch_remove(d);
    shell_free(c);
    shell_free(d);
}

static void handler_removed_and_errors(void)
{
    symmem_comm_t c = shell("0000:01:00.0");
    seen_t s = {.mu = PTHREAD_MUTEX_INITIALIZER};
    /* a handle the library does not know (this shell is not a live communicator until the watcher has it) */
    CHECK_ST(symmem_comm_set_error_handler(c, handler, &s), SYMMEM_INVALID_ARGUMENT);
    symmem_watch_add(c);
    CHECK_OK(symmem_comm_set_error_handler(c, handler, &s));
    CHECK_OK(symmem_comm_set_error_handler(c, NULL, NULL)); /* removed before the failure */
    kernel_timeout(c);
    sleep_ms(100);
    CHECK(calls_of(&s) == 0);
    symmem_watch_remove(c);
    CHECK_ST(symmem_comm_set_error_handler(c, handler, &s), SYMMEM_INVALID_ARGUMENT); /* removed: unknown again */
    CHECK_ST(symmem_comm_set_error_handler(NULL, handler, &s), SYMMEM_INVALID_ARGUMENT);
    /* a live host-backend communicator: no asynchronous errors to report */
    setenv("SYMMEM_BACKEND", "host", 1);
    symmem_param_reload();
    symmem_comm_t h[2];
    CHECK_OK(symmem_comm_init_all(2, NULL, NULL, h));
    CHECK_ST(symmem_comm_set_error_handler(h[0], handler, &s), SYMMEM_UNSUPPORTED);
    CHECK_OK(symmem_comm_destroy(h[0]));
    CHECK_OK(symmem_comm_destroy(h[1]));
    shell_free(c);
}

static void abort_mode_aborts(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setenv("SYMMEM_ON_ERROR", "abort", 1);
        setenv("SYMMEM_LOG_LEVEL", "NONE", 1);
        symmem_param_reload();
        symmem_comm_t c = shell("0000:01:00.0");
        symmem_watch_add(c); /* watched without a handler */
        kernel_timeout(c);
        sleep(10);
        _exit(0); /* not aborted: the parent fails the test */
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"handler_called_once_on_its_thread", handler_called_once_on_its_thread, 30},
        {"timeout_on_a_shared_gpu_says_so", timeout_on_a_shared_gpu_says_so, 30},
        {"host_error_reaches_handler", host_error_reaches_handler, 30},
        {"handler_set_after_the_failure", handler_set_after_the_failure, 30},
        {"handler_may_destroy", handler_may_destroy, 30},
        {"handler_removed_and_errors", handler_removed_and_errors, 30},
        {"abort_mode_aborts", abort_mode_aborts, 30},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
