/* Group calls: collective host calls recorded between symmem_group_start and symmem_group_end on one
 * thread run together at symmem_group_end, so a single thread can drive all ranks of symmem_comm_init_all
 * through a collective call such as symmem_alloc. Each communicator's calls form one lane, run in order on
 * one helper thread; lanes run concurrently. The communicator is only the key of its lane here. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "boot/group.h"

typedef struct deferred {
    symmem_comm_t comm; /* lane key; NULL: a lane of its own */
    symmem_group_fn fn;
    void *args;
    symmem_status_t st;
    char err[1024];
    struct deferred *next;      /* order of recording */
    struct deferred *lane_next; /* next call of the same lane */
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

symmem_status_t symmem_group_defer(symmem_comm_t comm, symmem_group_fn fn, const void *args, size_t args_size)
{
    deferred_t *d = calloc(1, sizeof *d);
    void *copy = malloc(args_size);
    if (!d || !copy) {
        free(d), free(copy);
        return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory recording a group call");
    }
    memcpy(copy, args, args_size);
    d->comm = comm;
    d->fn = fn;
    d->args = copy;
    if (group_tail) group_tail->next = d;
    else group_head = d;
    group_tail = d;
    return SYMMEM_OK;
}

/* Run one lane. Every call runs even after one failed: the peers' lanes make the same calls and would
 * otherwise wait for this one until the timeout. */
static void *run_lane(void *p)
{
    for (deferred_t *d = p; d; d = d->lane_next) {
        d->st = d->fn(d->args);
        if (d->st != SYMMEM_OK) snprintf(d->err, sizeof d->err, "%s", symmem_last_error());
    }
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
    int n = 0;
    for (deferred_t *d = list; d; d = d->next) n++;
    /* Lanes: the first call of each communicator heads its lane; later calls append to it. */
    deferred_t **heads = calloc((size_t)n + 1, sizeof *heads), **tails = calloc((size_t)n + 1, sizeof *tails);
    pthread_t *th = calloc((size_t)n + 1, sizeof *th);
    char *started = calloc((size_t)n + 1, 1);
    int nlanes = 0;
    for (deferred_t *d = list; d && heads && tails; d = d->next) {
        int l = 0;
        while (l < nlanes && !(d->comm && heads[l]->comm == d->comm)) l++;
        if (l == nlanes) heads[nlanes++] = d;
        else tails[l]->lane_next = d;
        tails[l] = d;
    }
    if (!heads || !tails || !th || !started) {
        for (deferred_t *d = list; d; d = d->next) {
            d->st = symmem_set_error(SYMMEM_OUT_OF_MEMORY, "symmem_group_end: out of host memory");
            snprintf(d->err, sizeof d->err, "%s", symmem_last_error());
        }
        nlanes = 0;
    }
    for (int l = 0; l < nlanes; l++) {
        if (pthread_create(&th[l], NULL, run_lane, heads[l]) == 0) {
            started[l] = 1;
            continue;
        }
        for (deferred_t *d = heads[l]; d; d = d->lane_next) {
            d->st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "symmem_group_end: cannot start a thread for a group call");
            snprintf(d->err, sizeof d->err, "%s", symmem_last_error());
        }
    }
    for (int l = 0; l < nlanes; l++)
        if (started[l]) pthread_join(th[l], NULL);
    /* The first failure in recording order is reported. Each was logged where it was found; here it only
     * becomes this thread's last error. */
    symmem_status_t st = SYMMEM_OK;
    for (deferred_t *d = list; d;) {
        if (d->st != SYMMEM_OK && st == SYMMEM_OK) st = symmem_record_error(d->st, "%s", d->err);
        deferred_t *next = d->next;
        free(d->args);
        free(d);
        d = next;
    }
    free(heads), free(tails), free(th), free(started);
    return st;
}
