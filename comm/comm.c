/* Communicators: the three ways in (unique id, user bootstrap, all ranks in one process), creation in the
 * order of the layers (bootstrap mesh, facts, collectives, watcher), teardown in reverse, the accessors
 * and the asynchronous error. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/alloc.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/bootstrap.h"
#include "boot/group.h"
#include "collectives/coll.h"
#include "comm/facts.h"
#include "comm/options.h"
#include "comm/watch.h"
#include "symmem/topo.h"

/* ---- creation and destruction ----------------------------------------------------------------------- */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static const char *placement_name(symmem_placement_t p)
{
    switch (p) {
    case SYMMEM_PLACEMENT_DEVICE: return "device";
    case SYMMEM_PLACEMENT_HOST_NUMA: return "host-NUMA";
    case SYMMEM_PLACEMENT_AUTO: return "auto";
    default: return "default";
    }
}

/* SYMMEM_TOPO_DUMP_FILE: rank 0 writes the topology model it sees (facts, no measurement) as JSON, like
 * NCCL_TOPO_DUMP_FILE. A failure is a warning: the communicator works without it. */
static void dump_topology(symmem_comm_t c)
{
    const char *path = symmem_param_str(SYMMEM_PARAM_TOPO_DUMP_FILE);
    if (!*path || c->rank != 0) return;
    symmem_topo_options_t o;
    symmem_topo_options_init(&o);
    o.measure = 0;
    symmem_topo_t t = NULL;
    FILE *f = NULL;
    if (symmem_topo_discover(&o, &t) == SYMMEM_OK && (f = fopen(path, "w")) != NULL &&
        symmem_topo_write_json(t, f) == SYMMEM_OK)
        SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "topology written to %s", path);
    else
        SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "SYMMEM_TOPO_DUMP_FILE=%s: could not write the topology", path);
    if (f) fclose(f);
    symmem_topo_destroy(t);
    symmem_clear_error();
}

/* Free everything the communicator holds. Local; leaves the calling thread's last error alone. */
static void comm_release(symmem_comm_t c)
{
    /* The watcher lets go before anything it reads is freed; the collectives free their own workspace
     * before the buffers left are released, so only the caller's leftovers are warned about. */
    symmem_comm_set_detach(c);
    symmem_watch_remove(c);
    if (c->backend == SYMMEM_BACKEND_CUDA) symmem_coll_comm_fini(c);
    symmem_buffers_release_all(c);
    symmem_alloc_index_free(c);
    symmem_boot_destroy(c->boot);
    c->magic = 0;
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static symmem_status_t comm_create(const symmem_boot_id_t *id, int nranks, int rank, const symmem_options_t *opts,
                                   symmem_comm_t *out)
{
    if (nranks < 1 || nranks > SYMMEM_MAX_RANKS)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "nranks %d out of range [1, %d]", nranks, SYMMEM_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "rank %d out of range [0, %d)", rank, nranks);
    symmem_comm_opts_t o;
    SYMMEM_CHECK(symmem_comm_resolve_options(opts, &o));
    const int prev_rank = symmem_log_set_rank(rank); /* messages name this rank from here on */
    symmem_comm_t c = NULL;
    symmem_status_t st = symmem_comm_check_device(&o);
    if (st == SYMMEM_OK && !(c = calloc(1, sizeof *c))) st = symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    if (st != SYMMEM_OK) {
        symmem_log_set_rank(prev_rank);
        return st;
    }
    c->magic = SYMMEM_COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->device = -1;
    c->backend = o.backend;
    c->numa_node_opt = o.numa_node;
    c->timeout_ms = o.timeout_ms;
    pthread_mutex_init(&c->lock, NULL);
    /* Where init spends its time, per step (said in the "communicator ready" line): each step ends in an
     * exchange with every rank, so a step's time here includes waiting for the slowest rank's step before. */
    double t[5];
    t[0] = now_ms();
    SYMMEM_CHECK_GOTO(symmem_boot_create(id, nranks, rank, o.timeout_ms, &c->boot), st, fail);
    t[1] = now_ms();
    SYMMEM_CHECK_GOTO(symmem_comm_agree_facts(c, &o), st, fail);
    t[2] = now_ms();
    SYMMEM_CHECK_GOTO(symmem_comm_agree_reachability(c), st, fail);
    t[3] = t[4] = now_ms();
    if (c->backend == SYMMEM_BACKEND_CUDA) {
        SYMMEM_CHECK_GOTO(symmem_coll_comm_init(c), st, fail);
        t[4] = now_ms();
        symmem_watch_add(c);
    } else {
        symmem_coll_autotune_host_note(c);
    }
    dump_topology(c);
    char times[192];
    const int cuda = c->backend == SYMMEM_BACKEND_CUDA;
    snprintf(times, sizeof times, "init %.0f ms: bootstrap mesh %.0f, facts %.0f%s, links %.0f%s, collectives %.0f",
             t[4] - t[0], t[1] - t[0], t[2] - t[1], cuda ? " (CUDA context, GPU attributes)" : "", t[3] - t[2],
             cuda ? " (P2P, NVML)" : "", t[4] - t[3]);
    if (c->backend == SYMMEM_BACKEND_HOST)
        SYMMEM_INFO(SYMMEM_SUBSYS_CORE, "communicator ready: %d ranks, host backend (memfd memory, no GPU); %s", nranks,
                    times);
    else
        SYMMEM_INFO(SYMMEM_SUBSYS_CORE, "communicator ready: %d ranks, GPU %d (%s), %s placement; %s", nranks,
                    c->device, c->peers[rank].pci_bus_id, placement_name(c->placement), times);
    if (!symmem_comm_live_add(c)) {
        st = symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    symmem_log_set_rank(prev_rank);
    *out = c;
    return SYMMEM_OK;
fail:
    /* Tear down at once, telling the peers why (they would otherwise only see a closed socket, or wait for
     * the timeout), so their errors name the real cause. comm_release keeps this thread's error message. */
    symmem_boot_abort(c->boot, st, symmem_last_error());
    comm_release(c);
    symmem_log_set_rank(prev_rank);
    return st;
}

typedef struct init_args {
    symmem_boot_id_t id;
    int nranks, rank;
    symmem_options_t opts;
    int has_opts;
    symmem_comm_t *out;
} init_args_t;

static symmem_status_t init_deferred(void *p)
{
    init_args_t *a = p;
    return comm_create(&a->id, a->nranks, a->rank, a->has_opts ? &a->opts : NULL, a->out);
}

symmem_status_t symmem_comm_init(int nranks, int rank, const symmem_unique_id_t *id, const symmem_options_t *opts,
                                 symmem_comm_t *comm)
{
    symmem_clear_error();
    if (!id || !comm) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_init: id or comm is NULL");
    init_args_t a;
    memset(&a, 0, sizeof a);
    memcpy(&a.id, id->bytes, sizeof a.id);
    a.nranks = nranks;
    a.rank = rank;
    if (opts) a.opts = *opts, a.has_opts = 1;
    a.out = comm;
    if (symmem_group_active()) return symmem_group_defer(NULL, init_deferred, &a, sizeof a);
    return init_deferred(&a);
}

symmem_status_t symmem_comm_init_bootstrap(int nranks, int rank, const symmem_bootstrap_t *bs,
                                           const symmem_options_t *opts, symmem_comm_t *comm)
{
    symmem_clear_error();
    if (!bs || !bs->allgather || !comm)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_init_bootstrap: bootstrap or comm is NULL");
    if (nranks < 1 || nranks > SYMMEM_MAX_RANKS || rank < 0 || rank >= nranks)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "rank %d of %d out of range (at most %d ranks)", rank, nranks,
                                SYMMEM_MAX_RANKS);
    /* Rank 0's id reaches everyone through the user's allgather; the rest runs over our own sockets. */
    symmem_boot_id_t mine, *all = calloc((size_t)nranks, sizeof *all);
    if (!all) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    symmem_status_t st = symmem_boot_id_make(&mine);
    if (st == SYMMEM_OK && bs->allgather(bs->ctx, &mine, all, sizeof mine) != 0)
        st = symmem_set_error(SYMMEM_PEER_FAILURE, "the user bootstrap's allgather failed (rank %d of %d)", rank,
                              nranks);
    symmem_unique_id_t id;
    if (st == SYMMEM_OK) memcpy(id.bytes, &all[0], sizeof all[0]);
    free(all);
    if (st != SYMMEM_OK) return st;
    return symmem_comm_init(nranks, rank, &id, opts, comm);
}

typedef struct init_all_args {
    init_args_t a;
    symmem_status_t st;
    char err[1024];
} init_all_args_t;

static void *init_all_thread(void *p)
{
    init_all_args_t *t = p;
    t->st = init_deferred(&t->a);
    if (t->st != SYMMEM_OK) snprintf(t->err, sizeof t->err, "%s", symmem_last_error());
    return NULL;
}

symmem_status_t symmem_comm_init_all(int nranks, const int *devices, const symmem_options_t *opts,
                                     symmem_comm_t *comms)
{
    symmem_clear_error();
    if (!comms || nranks < 1 || nranks > SYMMEM_MAX_RANKS)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_init_all: nranks %d out of range [1, %d]",
                                nranks, SYMMEM_MAX_RANKS);
    symmem_options_t base = SYMMEM_OPTIONS_INIT;
    if (opts) base = *opts;
    symmem_unique_id_t id;
    SYMMEM_CHECK(symmem_get_unique_id(&id));
    init_all_args_t *t = calloc((size_t)nranks, sizeof *t);
    pthread_t *th = calloc((size_t)nranks, sizeof *th);
    symmem_comm_t *tmp = calloc((size_t)nranks, sizeof *tmp);
    int *started = calloc((size_t)nranks, sizeof *started);
    symmem_status_t st = SYMMEM_OK;
    if (!t || !th || !tmp || !started) st = symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    for (int r = 0; r < nranks && st == SYMMEM_OK; r++) {
        memcpy(&t[r].a.id, id.bytes, sizeof t[r].a.id);
        t[r].a.nranks = nranks;
        t[r].a.rank = r;
        t[r].a.opts = base;
        t[r].a.opts.device = devices ? devices[r] : r;
        t[r].a.has_opts = 1;
        t[r].a.out = &tmp[r];
        if (pthread_create(&th[r], NULL, init_all_thread, &t[r]) != 0)
            st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "symmem_comm_init_all: cannot start a thread for rank %d", r);
        else
            started[r] = 1;
    }
    /* A rank that could not start makes the others time out; they are joined all the same. */
    int cause = -1;
    for (int r = 0; r < nranks; r++) {
        if (!started || !started[r]) continue;
        pthread_join(th[r], NULL);
        /* The first rank that failed on its own: the others fail with SYMMEM_PEER_FAILURE because it told
         * them it gave up, and the caller wants the cause. */
        if (t[r].st != SYMMEM_OK && (cause < 0 || (t[cause].st == SYMMEM_PEER_FAILURE && t[r].st != SYMMEM_PEER_FAILURE)))
            cause = r;
    }
    /* The message to leave as this thread's last error (the rank's thread logged it; destroy clears it). */
    char why[sizeof t->err];
    snprintf(why, sizeof why, "%s", st == SYMMEM_OK && cause >= 0 ? t[cause].err : symmem_last_error());
    if (cause >= 0 && st == SYMMEM_OK) st = t[cause].st;
    if (st == SYMMEM_OK) symmem_comm_set_attach(tmp, nranks);
    for (int r = 0; r < nranks && st == SYMMEM_OK; r++) comms[r] = tmp[r];
    if (st != SYMMEM_OK) {
        for (int r = 0; r < nranks && tmp; r++) symmem_comm_destroy(tmp[r]);
        symmem_record_error(st, "%s", why);
    }
    free(t), free(th), free(tmp), free(started);
    return st;
}

symmem_status_t symmem_comm_destroy(symmem_comm_t c)
{
    symmem_clear_error();
    if (!c) return SYMMEM_OK;
    if (!symmem_comm_live_take(c))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "symmem_comm_destroy: %p is not a live communicator (destroyed twice, or not from "
                                "symmem_comm_init)",
                                (void *)c);
    symmem_entry_t e;
    symmem_entry_enter(c, &e);
    comm_release(c);
    symmem_entry_end(&e);
    return SYMMEM_OK;
}

/* ---- accessors, the asynchronous error --------------------------------------------------------------------- */

static int valid(symmem_comm_t c) { return symmem_comm_live(c); }
int symmem_comm_rank(symmem_comm_t c) { return valid(c) ? c->rank : -1; }
int symmem_comm_size(symmem_comm_t c) { return valid(c) ? c->nranks : -1; }
int symmem_comm_device(symmem_comm_t c) { return valid(c) ? c->device : -1; }
symmem_backend_t symmem_comm_backend(symmem_comm_t c) { return valid(c) ? c->backend : SYMMEM_BACKEND_DEFAULT; }

symmem_status_t symmem_comm_peer_link(symmem_comm_t c, int peer, symmem_link_t *link, int *native_atomics)
{
    symmem_clear_error();
    if (!valid(c)) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_peer_link: invalid communicator");
    if (peer < 0 || peer >= c->nranks)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "peer %d out of range [0, %d)", peer, c->nranks);
    if (link) *link = c->link[peer];
    if (native_atomics) *native_atomics = c->native_atomics[peer];
    return SYMMEM_OK;
}

symmem_status_t symmem_comm_get_async_error(symmem_comm_t c)
{
    symmem_clear_error();
    if (!valid(c)) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_get_async_error: invalid communicator");
    if (c->backend == SYMMEM_BACKEND_CUDA) (void)symmem_coll_poll_error(c);
    char msg[sizeof c->async_error_msg];
    const symmem_status_t st = symmem_comm_error(c, msg, sizeof msg);
    symmem_clear_error();
    /* logged when it happened; the message already names the rank */
    return st == SYMMEM_OK ? SYMMEM_OK : symmem_forward_error(st, msg);
}
