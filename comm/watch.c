/* The error watcher (symmem_comm_set_error_handler, SYMMEM_ON_ERROR=abort): it tells the application about
 * a failed communicator without it polling, since a kernel that times out inside a CUDA graph replay has no
 * call to return its error from. It watches the process's live CUDA communicators.
 *
 * The watcher is one thread, started when the first communicator needs watching (a handler set, or
 * SYMMEM_ON_ERROR=abort) and ended when none does. Every SYMMEM_ERROR_POLL_MS it reads each watched
 * communicator's host-mapped error record (no CUDA call, no device synchronisation) and its host-side error
 * state; the first error of a communicator is handed to its handler once, on the watcher thread. A handler
 * may destroy its communicator (the entry is then dropped after the handler returns); symmem_comm_destroy
 * from another thread waits until the handler of that communicator has returned. The PyTorch layer reads
 * the same error state from a Python thread of its own instead of registering a handler here
 * (docs/integrations.md says why). */
#include "comm/watch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/coll.h"

typedef struct watch {
    symmem_comm_t comm;
    symmem_error_handler_t handler;
    void *ctx;
    int notified;          /* its first error was handed on */
    int busy;              /* the watcher is checking it (or running its handler) right now */
    int dropped;           /* destroyed from its own handler: freed by the watcher afterwards */
    struct watch *next;
} watch_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static watch_t *head;
static int thread_running;
static pthread_t watcher;

static int abort_mode;
static pthread_once_t abort_once = PTHREAD_ONCE_INIT;
static void read_abort_mode(void)
{
    const char *v = symmem_param_str(SYMMEM_PARAM_ON_ERROR);
    abort_mode = strcasecmp(v, "abort") == 0;
    if (!abort_mode && v[0] && strcasecmp(v, "report") != 0)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_ON_ERROR=%s is not report or abort; using report", v);
}
static int abort_on_error(void)
{
    pthread_once(&abort_once, read_abort_mode);
    return abort_mode;
}

static int watched(const watch_t *w) { return !w->dropped && !w->notified && (w->handler || abort_on_error()); }

/* The communicator's error, if any: a kernel's record (turned into its error state here) or an error a
 * host call recorded. Reads host memory only. */
static symmem_status_t comm_error(symmem_comm_t comm, char *msg, size_t len)
{
    symmem_status_t st = symmem_coll_poll_error(comm);
    if (st == SYMMEM_OK) {
        st = symmem_comm_error(comm, msg, len);
    } else {
        snprintf(msg, len, "%s", symmem_last_error());
    }
    symmem_clear_error();
    return st;
}

static void *watch_loop(void *unused)
{
    (void)unused;
    symmem_log_set_rank(-1); /* messages name their rank themselves */
    const int64_t poll_ms = symmem_param_int(SYMMEM_PARAM_ERROR_POLL_MS);
    const struct timespec pause = {poll_ms >= 1000 ? poll_ms / 1000 : 0,
                                   (long)((poll_ms < 1 ? 1 : poll_ms % 1000) * 1000000L)};
    pthread_mutex_lock(&mu);
    for (;;) {
        int any = 0;
        for (watch_t *w = head; w; w = w->next) {
            if (!watched(w)) continue;
            any = 1;
            w->busy = 1;
            pthread_mutex_unlock(&mu);
            char msg[1024] = "";
            const symmem_status_t st = comm_error(w->comm, msg, sizeof msg);
            if (st != SYMMEM_OK) {
                if (abort_on_error()) {
                    SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "aborting the process (SYMMEM_ON_ERROR=abort): %s", msg);
                    abort();
                }
                w->notified = 1;
                w->handler(w->comm, st, msg, w->ctx);
            }
            pthread_mutex_lock(&mu);
            w->busy = 0;
            pthread_cond_broadcast(&cv);
        }
        /* entries destroyed from their own handler */
        for (watch_t **pp = &head; *pp;) {
            watch_t *w = *pp;
            if (w->dropped) {
                *pp = w->next;
                free(w);
            } else {
                pp = &w->next;
            }
        }
        if (!any) break;
        pthread_mutex_unlock(&mu);
        nanosleep(&pause, NULL);
        pthread_mutex_lock(&mu);
    }
    thread_running = 0;
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* With mu held. */
static void ensure_watcher(void)
{
    int need = 0;
    for (watch_t *w = head; w && !need; w = w->next) need = watched(w);
    if (!need || thread_running) return;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&watcher, &a, watch_loop, NULL) == 0)
        thread_running = 1;
    else
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "cannot start the error watcher thread: errors are still reported by "
                                        "symmem_comm_get_async_error and every later call");
    pthread_attr_destroy(&a);
}

void symmem_watch_add(symmem_comm_t comm)
{
    watch_t *w = calloc(1, sizeof *w);
    if (!w) return; /* only the watcher is lost; the communicator works */
    w->comm = comm;
    pthread_mutex_lock(&mu);
    w->next = head;
    head = w;
    ensure_watcher();
    pthread_mutex_unlock(&mu);
}

void symmem_watch_remove(symmem_comm_t comm)
{
    pthread_mutex_lock(&mu);
    for (watch_t **pp = &head; *pp; pp = &(*pp)->next) {
        watch_t *w = *pp;
        if (w->comm != comm || w->dropped) continue;
        if (w->busy && thread_running && pthread_equal(pthread_self(), watcher)) {
            w->dropped = 1; /* called from its own handler: the watcher frees it after the handler */
            break;
        }
        while (w->busy) pthread_cond_wait(&cv, &mu);
        /* the list may have changed while waiting: find w again */
        for (pp = &head; *pp && *pp != w; pp = &(*pp)->next) {
        }
        if (*pp) *pp = w->next;
        free(w);
        break;
    }
    pthread_mutex_unlock(&mu);
}

symmem_status_t symmem_comm_set_error_handler(symmem_comm_t comm, symmem_error_handler_t handler, void *ctx)
{
    symmem_clear_error();
    /* Found in the list before anything is read through the handle (a destroyed one is not there). */
    pthread_mutex_lock(&mu);
    watch_t *w = comm ? head : NULL;
    while (w && (w->comm != comm || w->dropped)) w = w->next;
    if (w) {
        while (w->busy && !(thread_running && pthread_equal(pthread_self(), watcher))) pthread_cond_wait(&cv, &mu);
        w->handler = handler;
        w->ctx = ctx;
        ensure_watcher();
    }
    pthread_mutex_unlock(&mu);
    if (w) return SYMMEM_OK;
    /* the handle looked up among the live communicators before it is read */
    switch (symmem_comm_live(comm) ? comm->backend : SYMMEM_BACKEND_DEFAULT) {
    case SYMMEM_BACKEND_HOST:
        return symmem_set_error(SYMMEM_UNSUPPORTED,
                                "symmem_comm_set_error_handler: the host backend has no asynchronous errors (every "
                                "failure is returned by the call that met it)");
    case SYMMEM_BACKEND_CUDA:
        return symmem_set_error(SYMMEM_INVALID_USAGE,
                                "symmem_comm_set_error_handler: the communicator's collectives are not initialised");
    default:
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_set_error_handler: not a live communicator");
    }
}
