/* The symmetric allocation protocol (collective) and buffer bookkeeping.
 *
 * symmem_alloc, on every rank:
 *   1. agree on the size (allgather; a mismatch fails on every rank, listing the sizes);
 *   2. create this rank's physical memory (data part + signal part) and export it as a descriptor;
 *   3. agree that every rank succeeded (a rank out of memory makes every rank fail, naming it);
 *   4. pass descriptors over the bootstrap sockets (SCM_RIGHTS), import every peer's;
 *   5. reserve nranks * stride of address space and map rank r at base + r * stride; grant access;
 *   6. agree again, zero this rank's signal part, and barrier so no peer signals before it is zeroed.
 * Every step unwinds in reverse on failure, so a failed call leaves nothing mapped or open.
 * symmem_free is local (see the header): peers keep the physical memory alive through their own handles.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "base/handles.h"
#include "base/log.h"
#include "base/status.h"
#include "boot/group.h"

/* Registry of live buffers across all communicators: a set of their handles, so that every call given a
 * buffer finds it there before reading it (a double free, a buffer freed with its communicator, a foreign or
 * junk pointer is refused without being dereferenced), and a list through the buffers for the searches by
 * communicator. registry_lock guards both, and the buffers' fields while a lookup reads them. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static symmem_handle_set_t registry_live = SYMMEM_HANDLE_SET_INIT;
static struct symmem_buffer *registry;

/* ---- the per-communicator index ---------------------------------------------------------------------
 * Every collective call asks whether its input and output lie in a symmetric buffer of its communicator
 * (symmem_alloc_find: the call's form and its zero-copy plan), and for ordinary tensors the answer is no.
 * So that the question costs neither a lock nor a walk over every buffer of every communicator, each
 * communicator publishes its live buffers' local parts sorted by address as an immutable snapshot, rebuilt
 * under registry_lock whenever one of its buffers comes or goes; a lookup loads the snapshot and bisects it.
 * A replaced snapshot may still be searched by a lookup on another thread: lookups count themselves in
 * alloc_index_readers around the search, and a rebuild frees the replaced snapshots only when it sees no
 * lookup in flight (the count and the snapshot pointer are sequentially consistent, so a lookup that starts
 * after that check loads the new snapshot); otherwise they wait for the next rebuild or the release. */
typedef struct alloc_span {
    uintptr_t lo, hi; /* this rank's part: [peers[rank], peers[rank] + mapped_size) */
    struct symmem_buffer *buf;
} alloc_span_t;

struct symmem_alloc_index {
    struct symmem_alloc_index *older;
    size_t n;
    alloc_span_t span[];
};

static void index_free_chain(struct symmem_alloc_index *ix)
{
    while (ix) {
        struct symmem_alloc_index *older = ix->older;
        free(ix);
        ix = older;
    }
}

/* Called under registry_lock. Out of memory: the communicator's lookups walk the registry instead. */
static void index_rebuild(symmem_comm_t c)
{
    size_t n = 0;
    for (struct symmem_buffer *p = registry; p; p = p->next) n += p->comm == c && p->peers[c->rank];
    struct symmem_alloc_index *ix = malloc(sizeof *ix + n * sizeof ix->span[0]);
    if (!ix) {
        __atomic_store_n(&c->alloc_index_stale, 1, __ATOMIC_SEQ_CST);
        return;
    }
    ix->n = 0;
    for (struct symmem_buffer *p = registry; p; p = p->next) {
        if (p->comm != c || !p->peers[c->rank]) continue;
        const alloc_span_t e = {(uintptr_t)p->peers[c->rank], (uintptr_t)p->peers[c->rank] + p->mapped_size, p};
        size_t i = ix->n++;
        for (; i > 0 && ix->span[i - 1].lo > e.lo; i--) ix->span[i] = ix->span[i - 1];
        ix->span[i] = e;
    }
    ix->older = c->alloc_index;
    __atomic_store_n(&c->alloc_index, ix, __ATOMIC_SEQ_CST);
    __atomic_store_n(&c->alloc_index_stale, 0, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->alloc_index_readers, __ATOMIC_SEQ_CST) == 0) {
        index_free_chain(ix->older);
        ix->older = NULL;
    }
}

void symmem_alloc_index_free(symmem_comm_t c)
{
    pthread_mutex_lock(&registry_lock);
    struct symmem_alloc_index *ix = c->alloc_index;
    c->alloc_index = NULL;
    pthread_mutex_unlock(&registry_lock);
    index_free_chain(ix);
}

static int registry_add(struct symmem_buffer *b)
{
    pthread_mutex_lock(&registry_lock);
    int ok = symmem_handle_set_add(&registry_live, b);
    if (ok) {
        b->prev = NULL;
        b->next = registry;
        if (registry) registry->prev = b;
        registry = b;
        index_rebuild(b->comm);
    }
    pthread_mutex_unlock(&registry_lock);
    return ok;
}

/* Remove b if it is live; returns 1 if it was. */
static int registry_take(struct symmem_buffer *b)
{
    pthread_mutex_lock(&registry_lock);
    int found = symmem_handle_set_take(&registry_live, b);
    if (found) {
        if (b->prev) b->prev->next = b->next;
        else registry = b->next;
        if (b->next) b->next->prev = b->prev;
        index_rebuild(b->comm);
    }
    pthread_mutex_unlock(&registry_lock);
    return found;
}

static size_t round_up(size_t x, size_t g) { return (x + g - 1) / g * g; }

/* Every rank reports its status; returns the first failure with the failing rank named. */
typedef struct status_msg {
    int32_t status;
    char msg[252];
} status_msg_t;

static symmem_status_t agree(symmem_comm_t c, symmem_status_t mine, const char *step)
{
    status_msg_t me, all[SYMMEM_MAX_RANKS];
    memset(&me, 0, sizeof me);
    me.status = (int32_t)mine;
    if (mine != SYMMEM_OK) snprintf(me.msg, sizeof me.msg, "%s", symmem_last_error());
    symmem_status_t st = symmem_comm_allgather(c, &me, all, sizeof me);
    if (st != SYMMEM_OK) return st;
    if (mine != SYMMEM_OK) return mine; /* keep this rank's own message */
    for (int r = 0; r < c->nranks; r++)
        if (all[r].status != SYMMEM_OK)
            /* A peer's text need not end in a NUL: print at most its field, never what lies beyond. */
            return symmem_set_error((symmem_status_t)all[r].status, "symmem_alloc: %s failed on rank %d: %.*s", step,
                                    r, (int)sizeof all[r].msg, all[r].msg);
    return SYMMEM_OK;
}

/* Consistent on every rank: every rank sees the same sizes. */
static symmem_status_t agree_on_size(symmem_comm_t c, size_t size)
{
    uint64_t mine = size, all[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(c, &mine, all, sizeof mine));
    for (int r = 0; r < c->nranks; r++)
        if (all[r] != size)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "symmem_alloc: rank %d asked for %llu bytes, this rank for %zu: every rank must "
                                    "pass the same size",
                                    r, (unsigned long long)all[r], size);
    if (size == 0) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_alloc: size 0 (every rank passed 0)");
    return SYMMEM_OK;
}

/* Local (its result goes through agree()): an absurd size gets a clear error instead of a driver one. */
static symmem_status_t check_capacity(symmem_comm_t c, size_t size, const symmem_mem_ops_t *ops)
{
    size_t cap = ops->capacity(c, c->placement);
    if (size <= cap && size <= SIZE_MAX / 4 / (size_t)c->nranks) return SYMMEM_OK;
    int host = c->placement == SYMMEM_PLACEMENT_HOST_NUMA || c->backend == SYMMEM_BACKEND_HOST;
    return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                            "symmem_alloc: %zu bytes per rank is more than this rank's %s memory (%zu bytes)", size,
                            host ? "host" : "device", cap);
}

static symmem_status_t check_placement(symmem_comm_t c)
{
    if (c->backend != SYMMEM_BACKEND_CUDA) return SYMMEM_OK;
    if (c->placement == SYMMEM_PLACEMENT_DEVICE && !c->all_p2p) {
        for (int j = 0; j < c->nranks; j++)
            if (c->link[j] == SYMMEM_LINK_HOST)
                return symmem_set_error(SYMMEM_UNSUPPORTED,
                                        "symmem_alloc: GPU %s (rank %d) cannot access GPU %s (rank %d) peer-to-peer, "
                                        "so device placement is impossible; use SYMMEM_PLACEMENT=host_numa or auto",
                                        c->peers[c->rank].pci_bus_id, c->rank, c->peers[j].pci_bus_id, j);
        return symmem_set_error(SYMMEM_UNSUPPORTED,
                                "symmem_alloc: some pair of GPUs has no P2P (run symmem-topo), so device placement is "
                                "impossible; use SYMMEM_PLACEMENT=host_numa or auto");
    }
    if (c->placement == SYMMEM_PLACEMENT_HOST_NUMA && !c->peers[c->rank].host_numa_ok)
        return symmem_set_error(SYMMEM_UNSUPPORTED,
                                "symmem_alloc: host-NUMA placement needs cuMemCreate on host NUMA nodes (CUDA 12.2+ "
                                "driver with HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED), which GPU %s lacks",
                                c->peers[c->rank].pci_bus_id);
    return SYMMEM_OK;
}

/* Unmap, release and unreserve whatever of b is set up. Local. */
static void buffer_teardown(struct symmem_buffer *b)
{
    const symmem_mem_ops_t *ops = b->ops;
    if (b->table) ops->free_table(b->table);
    for (int r = 0; r < b->nmapped; r++) ops->unmap(b->base + (size_t)r * b->stride, b->stride);
    for (int r = 0; r < b->comm->nranks; r++)
        if (b->handles[r]) ops->release(b->handles[r]);
    if (b->base) ops->unreserve(b->base, (size_t)b->comm->nranks * b->stride);
    free(b);
}

/* Steps 4-5: import every peer's descriptor, reserve, map, grant access. fds are closed by the caller. */
static symmem_status_t import_and_map(struct symmem_buffer *b, const int *fds, size_t gran)
{
    symmem_comm_t c = b->comm;
    const symmem_mem_ops_t *ops = b->ops;
    for (int r = 0; r < c->nranks; r++)
        if (r != c->rank) SYMMEM_CHECK(ops->import_fd(fds[r], &b->handles[r]));
    SYMMEM_CHECK(ops->reserve((size_t)c->nranks * b->stride, gran, &b->base));
    for (int r = 0; r < c->nranks; r++) {
        SYMMEM_CHECK(ops->map(b->base + (size_t)r * b->stride, b->stride, b->handles[r]));
        b->nmapped = r + 1;
    }
    SYMMEM_CHECK(ops->set_access(c, b->placement, b->base, (size_t)c->nranks * b->stride));
    void *table[2 * SYMMEM_MAX_RANKS] = {0};
    for (int r = 0; r < c->nranks; r++) {
        b->peers[r] = b->base + (size_t)r * b->stride;
        b->signals[r] = (char *)b->peers[r] + b->mapped_size;
        table[r] = b->peers[r];
        table[SYMMEM_MAX_RANKS + r] = b->signals[r];
    }
    return ops->make_table(table, 2 * SYMMEM_MAX_RANKS, &b->table);
}

static symmem_status_t create_local(struct symmem_buffer *b, int numa_node, int *fd)
{
    SYMMEM_CHECK(b->ops->create(b->comm, b->placement, numa_node, b->stride, &b->handles[b->comm->rank]));
    return b->ops->export_fd(b->handles[b->comm->rank], fd);
}

symmem_status_t symmem_alloc_create(symmem_comm_t c, size_t size, symmem_buffer_t *out)
{
    const symmem_mem_ops_t *ops = c->backend == SYMMEM_BACKEND_HOST ? &symmem_mem_ops_host : &symmem_mem_ops_cuda;
    SYMMEM_CHECK(agree_on_size(c, size));
    c->alloc_seq++;
    int node = -1;
    symmem_status_t st = check_capacity(c, size, ops);
    if (st == SYMMEM_OK) st = check_placement(c);
    if (st == SYMMEM_OK && c->placement == SYMMEM_PLACEMENT_HOST_NUMA) st = symmem_numa_pick(c, &node);
    size_t gran = 0;
    if (st == SYMMEM_OK) st = ops->granularity(c, c->placement, node, &gran);
    SYMMEM_CHECK(agree(c, st, "placement"));

    struct symmem_buffer *b = calloc(1, sizeof *b);
    if (!b) st = symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    int my_fd = -1;
    if (b) {
        b->comm = c;
        b->ops = ops;
        b->placement = c->backend == SYMMEM_BACKEND_HOST ? SYMMEM_PLACEMENT_DEVICE : c->placement;
        b->seq = c->alloc_seq;
        b->size = size;
        b->mapped_size = round_up(size, gran);
        b->stride = b->mapped_size + round_up(SYMMEM_SIGNAL_BYTES, gran);
        st = create_local(b, node, &my_fd);
    }
    st = agree(c, st, "allocation");
    int fds[SYMMEM_MAX_RANKS];
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++) fds[r] = -1;
    if (st == SYMMEM_OK) st = symmem_comm_exchange_fds(c, my_fd, c->alloc_seq, fds);
    if (my_fd >= 0) close(my_fd);
    if (st == SYMMEM_OK) {
        symmem_status_t mine = import_and_map(b, fds, gran);
        for (int r = 0; r < c->nranks; r++)
            if (fds[r] >= 0) close(fds[r]);
        st = agree(c, mine, "mapping peers");
    }
    if (st == SYMMEM_OK) st = agree(c, ops->zero(b->signals[c->rank], SYMMEM_SIGNAL_BYTES), "zeroing signals");
    if (st != SYMMEM_OK) {
        if (b) buffer_teardown(b);
        return st;
    }
    if (!registry_add(b)) {
        buffer_teardown(b);
        return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "symmem_alloc: out of host memory");
    }
    SYMMEM_DEBUG(SYMMEM_SUBSYS_ALLOC, "symmem_alloc #%llu: %zu bytes (mapped %zu, stride %zu) at %p",
                 (unsigned long long)c->alloc_seq, size, b->mapped_size, b->stride, b->peers[c->rank]);
    *out = b;
    return SYMMEM_OK;
}

typedef struct alloc_args {
    symmem_comm_t comm;
    size_t size;
    symmem_buffer_t *out;
} alloc_args_t;

static symmem_status_t alloc_entry(void *p)
{
    alloc_args_t *a = p;
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(a->comm, "symmem_alloc", &e));
    char why[sizeof a->comm->async_error_msg];
    symmem_status_t st = symmem_comm_error(a->comm, why, sizeof why);
    if (st != SYMMEM_OK)
        st = symmem_set_error(SYMMEM_COMM_ERROR, "symmem_alloc: the communicator failed earlier: %s", why);
    else
        st = symmem_alloc_create(a->comm, a->size, a->out);
    symmem_entry_end(&e);
    return st;
}

symmem_status_t symmem_alloc(symmem_comm_t comm, size_t size, symmem_buffer_t *buf)
{
    symmem_clear_error();
    if (!buf) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_alloc: buf is NULL");
    alloc_args_t a = {comm, size, buf};
    if (symmem_group_active()) return symmem_group_defer(comm, alloc_entry, &a, sizeof a);
    return alloc_entry(&a);
}

int symmem_alloc_release(symmem_buffer_t buf)
{
    if (!buf || !registry_take(buf)) return 0;
    buffer_teardown(buf);
    return 1;
}

symmem_status_t symmem_free(symmem_buffer_t buf)
{
    symmem_clear_error();
    if (!buf) return SYMMEM_OK;
    if (!registry_take(buf))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "symmem_free: %p is not a live symmem buffer (freed twice, or not from symmem_alloc)",
                                (void *)buf);
    /* A communicator that destroy has already taken out of the live list is torn down without the entry
     * guard (which would report "not a live communicator" for a free that is legitimate). */
    symmem_entry_t e;
    const int guard =
        symmem_comm_live(buf->comm) && symmem_entry_begin(buf->comm, "symmem_free", &e) == SYMMEM_OK;
    buffer_teardown(buf);
    if (guard) symmem_entry_end(&e);
    return SYMMEM_OK;
}

void symmem_buffers_release_all(symmem_comm_t c)
{
    for (;;) {
        struct symmem_buffer *victim = NULL;
        pthread_mutex_lock(&registry_lock);
        for (struct symmem_buffer *p = registry; p; p = p->next)
            if (p->comm == c) {
                victim = p;
                break;
            }
        pthread_mutex_unlock(&registry_lock);
        if (!victim || !registry_take(victim)) return;
        SYMMEM_WARN(SYMMEM_SUBSYS_ALLOC, "symmem_comm_destroy: freeing a buffer of %zu bytes the caller did not free",
                    victim->size);
        buffer_teardown(victim);
    }
}

/* ---- lookups ---------------------------------------------------------------------------------------- */

/* What a lookup reads: the buffer's fields copied under registry_lock once the handle was found live, so that
 * a stale or junk handle is never read and a free racing the lookup on another thread cannot pull the buffer
 * from under it. 0 (SYMMEM_INVALID_ARGUMENT recorded for `call`) when the handle is not a live buffer. */
typedef struct view {
    struct symmem_buffer b;
    int rank, nranks;
} view_t;

static int view(symmem_buffer_t h, const char *call, view_t *v)
{
    pthread_mutex_lock(&registry_lock);
    int found = h && symmem_handle_set_has(&registry_live, h);
    if (found) {
        v->b = *h;
        v->rank = h->comm->rank;
        v->nranks = h->comm->nranks;
    }
    pthread_mutex_unlock(&registry_lock);
    if (!found)
        symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                         "%s: %p is not a live symmem buffer (freed, freed by symmem_comm_destroy with its "
                         "communicator, or not from symmem_alloc)",
                         call, (const void *)h);
    return found;
}

int symmem_alloc_live(symmem_buffer_t h)
{
    pthread_mutex_lock(&registry_lock);
    int found = h && symmem_handle_set_has(&registry_live, h);
    pthread_mutex_unlock(&registry_lock);
    return found;
}

void *symmem_buffer_ptr(symmem_buffer_t h)
{
    view_t v;
    return view(h, "symmem_buffer_ptr", &v) ? v.b.peers[v.rank] : NULL;
}

void *symmem_buffer_peer_ptr(symmem_buffer_t h, int peer)
{
    view_t v;
    return view(h, "symmem_buffer_peer_ptr", &v) && peer >= 0 && peer < v.nranks ? v.b.peers[peer] : NULL;
}

void *symmem_buffer_signal_ptr(symmem_buffer_t h, int peer)
{
    view_t v;
    return view(h, "symmem_buffer_signal_ptr", &v) && peer >= 0 && peer < v.nranks ? v.b.signals[peer] : NULL;
}

uint64_t symmem_buffer_seq(symmem_buffer_t h)
{
    view_t v;
    return view(h, "symmem_buffer_seq", &v) ? v.b.seq : 0;
}

size_t symmem_buffer_size(symmem_buffer_t h)
{
    view_t v;
    return view(h, "symmem_buffer_size", &v) ? v.b.size : 0;
}

size_t symmem_buffer_mapped_size(symmem_buffer_t h)
{
    view_t v;
    return view(h, "symmem_buffer_mapped_size", &v) ? v.b.mapped_size : 0;
}

symmem_comm_t symmem_buffer_comm(symmem_buffer_t h)
{
    view_t v;
    return view(h, "symmem_buffer_comm", &v) ? v.b.comm : NULL;
}

symmem_placement_t symmem_buffer_placement(symmem_buffer_t h)
{
    view_t v;
    return view(h, "symmem_buffer_placement", &v) ? v.b.placement : SYMMEM_PLACEMENT_DEFAULT;
}

void *const *symmem_buffer_device_peers(symmem_buffer_t h)
{
    view_t v;
    return view(h, "symmem_buffer_device_peers", &v) ? v.b.table : NULL;
}

void *const *symmem_buffer_device_signals(symmem_buffer_t h)
{
    view_t v;
    return view(h, "symmem_buffer_device_signals", &v) ? v.b.table + SYMMEM_MAX_RANKS : NULL;
}

symmem_buffer_t symmem_buffer_lookup(symmem_comm_t c, const void *ptr)
{
    if (!symmem_comm_live(c)) {
        symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_buffer_lookup: %p is not a live communicator", (void *)c);
        return NULL;
    }
    return symmem_alloc_find(c, ptr);
}

symmem_buffer_t symmem_alloc_find(symmem_comm_t c, const void *ptr)
{
    const uintptr_t p = (uintptr_t)ptr;
    if (__atomic_load_n(&c->alloc_index_stale, __ATOMIC_SEQ_CST)) {
        symmem_buffer_t found = NULL;
        pthread_mutex_lock(&registry_lock);
        for (struct symmem_buffer *b = registry; b && !found; b = b->next) {
            if (b->comm != c || !b->peers[c->rank]) continue;
            const uintptr_t mine = (uintptr_t)b->peers[c->rank];
            if (p >= mine && p < mine + b->mapped_size) found = b;
        }
        pthread_mutex_unlock(&registry_lock);
        return found;
    }
    __atomic_fetch_add(&c->alloc_index_readers, 1, __ATOMIC_SEQ_CST);
    const struct symmem_alloc_index *ix = __atomic_load_n(&c->alloc_index, __ATOMIC_SEQ_CST);
    symmem_buffer_t found = NULL;
    if (ix) {
        /* the last span starting at or below p (spans never overlap: each is its own mapping) */
        size_t lo = 0, hi = ix->n;
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (ix->span[mid].lo <= p) lo = mid + 1;
            else hi = mid;
        }
        if (lo > 0 && p < ix->span[lo - 1].hi) found = ix->span[lo - 1].buf;
    }
    __atomic_fetch_sub(&c->alloc_index_readers, 1, __ATOMIC_RELEASE);
    return found;
}
