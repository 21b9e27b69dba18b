/* Group calls: collective host calls recorded between symmem_group_start and symmem_group_end on one
 * thread run together at symmem_group_end, one helper thread each, so a single thread can drive all ranks
 * of symmem_comm_init_all through a collective call such as symmem_alloc. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/status.h"

typedef struct deferred {
    symmem_group_fn fn;
    void *args;
    symmem_status_t st;
    char err[1024];
    struct deferred *next;
} deferred_t;

static _Thread_local int group_depth;
static _Thread_local deferred_t *group_head, *group_tail;

int symmem_group_active(void) { return group_depth > 0; }

symmem_status_t symmem_group_start(void)
{
    symmem_clear_error();
    group_depth++;
    return SYMMEM_OK;
}

symmem_status_t symmem_group_defer(symmem_group_fn fn, const void *args, size_t args_size)
{
    deferred_t *d = calloc(1, sizeof *d);
    void *copy = malloc(args_size);
    if (!d || !copy) {
        free(d), free(copy);
        return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory recording a group call");
    }
    memcpy(copy, args, args_size);
    d->fn = fn;
    d->args = copy;
    if (group_tail) group_tail->next = d;
    else group_head = d;
    group_tail = d;
    return SYMMEM_OK;
}

static void *run_deferred(void *p)
{
    deferred_t *d = p;
    d->st = d->fn(d->args);
    if (d->st != SYMMEM_OK) snprintf(d->err, sizeof d->err, "%s", symmem_last_error());
    return NULL;
}

symmem_status_t symmem_group_end(void)
{
    symmem_clear_error();
    if (group_depth == 0)
        return symmem_set_error(SYMMEM_INVALID_USAGE, "symmem_group_end without a matching symmem_group_start");
    if (--group_depth > 0) return SYMMEM_OK; /* nested groups run at the outermost end */
    deferred_t *list = group_head;
    group_head = group_tail = NULL;
    symmem_status_t st = SYMMEM_OK;
    int n = 0;
    for (deferred_t *d = list; d; d = d->next) n++;
    pthread_t *th = calloc((size_t)n + 1, sizeof *th);
    char *started = calloc((size_t)n + 1, 1);
    int i = 0;
    for (deferred_t *d = list; d; d = d->next, i++) {
        if (th && started && pthread_create(&th[i], NULL, run_deferred, d) == 0) {
            started[i] = 1;
        } else {
            d->st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "symmem_group_end: cannot start a thread for call %d", i);
            snprintf(d->err, sizeof d->err, "%s", symmem_last_error());
        }
    }
    i = 0;
    for (deferred_t *d = list; d; i++) {
        if (started && started[i]) pthread_join(th[i], NULL);
        /* The call logged its error where it found it; here it only becomes this thread's last error. */
        if (d->st != SYMMEM_OK && st == SYMMEM_OK) st = symmem_record_error(d->st, "%s", d->err);
        deferred_t *next = d->next;
        free(d->args);
        free(d);
        d = next;
    }
    free(th);
    free(started);
    return st;
}
