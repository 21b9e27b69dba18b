/* Residency: every block of every rank's collective kernel resident at once (residency.h). The grid rule and
 * this rank's grid at init, the ranks of this process on this GPU, the process's communicators by GPU, and
 * what a timeout says about it. */
#include "collectives/residency.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"

/* ---- the grid rule ------------------------------------------------------------------------------------------ */
int symmem_coll_grid_rule(int blocks_per_sm, int sm_count, int ranks_here, int share_pct, int max_blocks)
{
    return symmem_coll_grid_rule_room(blocks_per_sm, sm_count, ranks_here, share_pct, max_blocks, 0, 0);
}

int symmem_coll_grid_rule_room(int blocks_per_sm, int sm_count, int ranks_here, int share_pct, int max_blocks, int room,
                               int gpcs)
{
    const int64_t sms = sm_count > 0 ? sm_count : 1;
    int64_t pool = (int64_t)(blocks_per_sm > 0 ? blocks_per_sm : 1) * sms;
    /* blocks counted as SMs: at most the SMs, so never above pool */
    if (ranks_here > 1 && room > 0 && gpcs > 0) pool = symmem_coll_room_pool(sm_count, room, gpcs);
    const int64_t share = share_pct < 1 ? 1 : share_pct > 100 ? 100 : share_pct;
    int64_t g = pool * share / 100 / (ranks_here > 0 ? ranks_here : 1);
    if (max_blocks > 0 && g > max_blocks) g = max_blocks;
    if (g > SYMMEM_COLL_MAX_GRID) g = SYMMEM_COLL_MAX_GRID;
    return g < 1 ? 1 : (int)g;
}

int symmem_coll_default_share(int blocks_per_sm, int sm_count, int ranks_here, int room, int gpcs)
{
    const int64_t capacity = (int64_t)(blocks_per_sm > 0 ? blocks_per_sm : 1) * (sm_count > 0 ? sm_count : 1);
    int64_t pool = capacity;
    if (ranks_here > 1 && room > 0 && gpcs > 0) pool = symmem_coll_room_pool(sm_count, room, gpcs);
    if (pool <= 0) return 100; /* the room leaves nothing: one block per rank whatever the share */
    const int64_t s = SYMMEM_COLL_DEFAULT_SHARE * capacity / pool;
    return s > 100 ? 100 : s < 1 ? 1 : (int)s;
}

int64_t symmem_coll_room_pool(int sm_count, int room, int gpcs)
{
    /* Pigeonholes: with (room - 1) x gpcs + 1 SMs idle, the GPCs cannot all have fewer than room of them. */
    const int64_t idle = room > 0 ? (int64_t)(room - 1) * gpcs + 1 : 0;
    const int64_t rest = (int64_t)(sm_count > 0 ? sm_count : 1) - idle;
    return rest > 0 ? rest : 0;
}

int symmem_coll_gpcs_from_clusters(int clusters8, int clusters16, int sm_count)
{
    if (clusters8 < 0 || clusters16 < 0) return 0;
    const int gpcs = clusters8 - clusters16;
    return gpcs >= 1 && gpcs <= sm_count / 8 ? gpcs : 0;
}

/* ---- this rank's grid, at init -------------------------------------------------------------------------------- */
/* SYMMEM_GRID_SHARE set and accepted: a share of the pool as the user wrote it. Unset, or refused (which falls
 * back to the default), the default share stands, which depends on the pool (symmem_coll_default_share). */
static int grid_share_set(void)
{
    const char *source = symmem_param_get(SYMMEM_PARAM_GRID_SHARE, SYMMEM_PARAM_FIELD_SOURCE);
    return source && strcmp(source, "environment") == 0;
}

/* The GPC count, measured only where the room applies (more than one rank here, a room above 0), so that
 * one rank per GPU, and SYMMEM_CLUSTER_ROOM=0, load no query kernel. */
static void measure_gpcs(const symmem_peer_info_t *me, symmem_coll_residency_t *r)
{
    r->clusters8 = r->clusters16 = -1;
    if (r->room > 0 && r->ranks_here > 1) {
        symmem_coll_cluster_counts(&r->clusters8, &r->clusters16);
        r->gpcs = symmem_coll_gpcs_from_clusters(r->clusters8, r->clusters16, me->sm_count);
    }
}

int symmem_coll_residency_grid(symmem_comm_t comm, int blocks_per_sm, int *capacity, symmem_coll_residency_t *r)
{
    const symmem_peer_info_t *me = &comm->peers[comm->rank];
    int here = 0;
    for (int q = 0; q < comm->nranks; q++) here += strcmp(comm->peers[q].pci_bus_id, me->pci_bus_id) == 0;
    const int64_t share = symmem_param_int(SYMMEM_PARAM_GRID_SHARE);
    if (share < 1 || share > 100)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_GRID_SHARE=%" PRId64 " is not a percentage in 1..100; using %d", share,
                    share < 1 ? 1 : 100);
    const int64_t room = symmem_param_int(SYMMEM_PARAM_CLUSTER_ROOM);
    if (room < 0)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_CLUSTER_ROOM=%" PRId64 " is negative; using 0 (no room)", room);
    memset(r, 0, sizeof *r);
    r->room = room < 0 ? 0 : room > INT32_MAX ? INT32_MAX : (int)room;
    r->ranks_here = here;
    measure_gpcs(me, r);
    r->share_set = grid_share_set();
    r->share = r->share_set ? (int)(share < 1 ? 1 : share > 100 ? 100 : share)
                            : symmem_coll_default_share(blocks_per_sm, me->sm_count, here, r->room, r->gpcs);
    const int64_t cap = symmem_param_int(SYMMEM_PARAM_MAX_BLOCKS);
    *capacity = blocks_per_sm * me->sm_count;
    return symmem_coll_grid_rule_room(blocks_per_sm, me->sm_count, here, r->share,
                                      cap > 0 && cap < INT32_MAX ? (int)cap : 0, r->room, r->gpcs);
}

void symmem_coll_residency_log(symmem_comm_t comm, const symmem_coll_residency_t *r, int grid)
{
    const symmem_peer_info_t *me = &comm->peers[comm->rank];
    if (r->room <= 0) return;
    if (r->ranks_here <= 1) {
        SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL,
                     "SYMMEM_CLUSTER_ROOM=%d does not apply: no other rank of this communicator shares this GPU",
                     r->room);
        return;
    }
    if (r->gpcs == 0) {
        SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                    "SYMMEM_CLUSTER_ROOM=%d not applied: the GPC count of GPU %s (compute capability %d.%d) is unknown "
                    "(clusters of 8 and of 16 whole-SM blocks resident at once: %d and %d; -1: refused, or the query "
                    "failed); its %d ranks take %d%% of all its blocks, %d per rank's kernel",
                    r->room, me->pci_bus_id, me->cc_major, me->cc_minor, r->clusters8, r->clusters16, r->ranks_here,
                    r->share, grid);
        return;
    }
    const int64_t pool = symmem_coll_room_pool(me->sm_count, r->room, r->gpcs);
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                "SYMMEM_CLUSTER_ROOM=%d: co-located ranks leave at least %" PRId64 " SMs of GPU %s idle, so that "
                "one of its %d GPCs has %d idle: %" PRId64 " blocks (%d%% of the other %" PRId64 " SMs%s) for this "
                "communicator's %d ranks there, %d per rank's kernel, %d in all",
                r->room, (int64_t)me->sm_count - pool, me->pci_bus_id, r->gpcs, r->room, pool * r->share / 100,
                r->share, pool,
                r->share_set ? ", SYMMEM_GRID_SHARE"
                             : "; SYMMEM_GRID_SHARE unset: at most 75% of the GPU's blocks, the idle SMs included",
                r->ranks_here, grid, grid * r->ranks_here);
}

/* ---- the ranks of this process on this GPU -------------------------------------------------------------------- */
/* The hardware work queues a context of this process gets: CUDA_DEVICE_MAX_CONNECTIONS, 8 where unset. */
static int work_queues(int *set)
{
    const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    *set = conn != NULL;
    return conn ? atoi(conn) : 8;
}

void symmem_coll_residency_colocated(symmem_comm_t comm, struct symmem_coll *co)
{
    const symmem_peer_info_t *me = &comm->peers[comm->rank];
    co->colocated_peer = -1;
    co->colocated_ranks = 0;
    for (int q = 0; q < comm->nranks; q++) {
        if (comm->peers[q].pid != me->pid || strcmp(comm->peers[q].pci_bus_id, me->pci_bus_id) != 0) continue;
        co->colocated_ranks++;
        if (q != comm->rank && co->colocated_peer < 0) co->colocated_peer = q;
    }
    /* Several ranks' streams of this process may share one hardware work queue, and a rank's collective
     * then waits behind a co-located rank's work that waits for it: a timeout. Under MPS a client process
     * gets only a few queues (CUDA_DEVICE_MAX_CONNECTIONS, shared pool: coll_b2b --inproc 4 under MPS timed
     * out; with CUDA_DEVICE_MAX_CONNECTIONS=32 it passed); without MPS a context has
     * CUDA_DEVICE_MAX_CONNECTIONS queues (8 by default), too few once more ranks of the process share the
     * GPU. Said once per GPU (by its lowest rank here), before it happens. */
    if (co->colocated_peer < 0 || comm->rank > co->colocated_peer) return;
    int set = 0;
    const int queues = work_queues(&set);
    if (co->mps && (!set || queues <= comm->ranks_per_device))
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                    "ranks %d and %d of this process share GPU %s under MPS, where the process's streams may "
                    "share hardware work queues: their collectives would then run one after the other and "
                    "time out. Set CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts, or run such ranks "
                    "without MPS (docs/collectives.md, \"Residency\")",
                    comm->rank, co->colocated_peer, me->pci_bus_id);
    else if (!co->mps && co->colocated_ranks > queues)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                    "%d ranks of this process share GPU %s, more than its %d hardware work queues "
                    "(CUDA_DEVICE_MAX_CONNECTIONS%s): two ranks' streams then share a queue, and what one rank "
                    "enqueues after a collective that waits holds back the other's collective behind it, until "
                    "the timeout. Set CUDA_DEVICE_MAX_CONNECTIONS=32 (the most CUDA allows) before CUDA starts "
                    "(docs/collectives.md, \"Residency\")",
                    co->colocated_ranks, me->pci_bus_id, queues, set ? "" : ", 8 by default");
}

int symmem_coll_private_streams_safe(symmem_comm_t comm, const struct symmem_coll *co)
{
    if (co->colocated_peer < 0) return 1; /* no other rank of this process on this GPU */
    int set = 0;
    const int queues = work_queues(&set);
    if (co->mps) return set && queues > comm->ranks_per_device;
    return co->colocated_ranks <= queues;
}

/* Two ranks of this process on one GPU must run their kernels at the same time: the legacy default stream
 * serialises them (one waits for the other forever), so say so before the timeout does. */
void symmem_coll_check_stream(symmem_comm_t comm, symmem_stream_t stream, const char *call)
{
    struct symmem_coll *co = comm->coll;
    if (co->colocated_peer < 0 || co->legacy_stream_warned) return;
    if (stream != NULL && (cudaStream_t)stream != cudaStreamLegacy) return;
    co->legacy_stream_warned = 1;
    SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                "%s on the legacy default stream, while rank %d runs in this process on the same GPU: kernels of "
                "co-located ranks wait for each other and must run concurrently; give every rank its own stream "
                "(cudaStreamNonBlocking), or its operations can only time out",
                call, co->colocated_peer);
}

/* ---- the communicators of this process that share a GPU --------------------------------------------------- */
/* The process's CUDA communicators with collectives. Processes on one GPU (MPS) are not counted against each
 * other (the list is per process); ranks of one communicator in several processes are, through the grid
 * rule's ranks on the GPU (their bus ids). */
typedef struct resident {
    symmem_comm_t comm;
    char bus_id[32]; /* the GPU, as every rank names it */
    int grid;        /* the communicator's blocks per kernel */
    struct resident *next;
} resident_t;

static pthread_mutex_t residents_mu = PTHREAD_MUTEX_INITIALIZER;
static resident_t *residents;

void symmem_coll_residency_add(symmem_comm_t comm)
{
    const struct symmem_coll *co = comm->coll;
    resident_t *r = calloc(1, sizeof *r);
    if (!r) return; /* only the check is lost; the communicator works */
    r->comm = comm;
    snprintf(r->bus_id, sizeof r->bus_id, "%s", comm->peers[comm->rank].pci_bus_id);
    r->grid = co->grid.max_grid;
    pthread_mutex_lock(&residents_mu);
    int total = r->grid, count = 1;
    for (const resident_t *o = residents; o; o = o->next)
        if (strcmp(o->bus_id, r->bus_id) == 0) total += o->grid, count++;
    r->next = residents;
    residents = r;
    pthread_mutex_unlock(&residents_mu);
    if (total > co->capacity) {
        char share[64];
        if (grid_share_set())
            snprintf(share, sizeof share, "now %d%%", (int)symmem_param_int(SYMMEM_PARAM_GRID_SHARE));
        else
            snprintf(share, sizeof share, "unset: %d%% or more", SYMMEM_COLL_DEFAULT_SHARE);
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                    "%d communicator ranks of this process on GPU %s may hold %d thread blocks at once, more than the "
                    "%d the GPU can keep resident: if their collectives run at the same time (separate streams) a "
                    "kernel may wait on blocks that cannot start, until the timeout. Set SYMMEM_GRID_SHARE (each "
                    "communicator's share of the GPU, %s) so the shares add up to at most 100%%, or order "
                    "their streams (docs/collectives.md, \"Residency\")",
                    count, r->bus_id, total, co->capacity, share);
    }
}

void symmem_coll_residency_remove(symmem_comm_t comm)
{
    pthread_mutex_lock(&residents_mu);
    for (resident_t **pp = &residents; *pp; pp = &(*pp)->next) {
        resident_t *r = *pp;
        if (r->comm != comm) continue;
        *pp = r->next;
        free(r);
        break;
    }
    pthread_mutex_unlock(&residents_mu);
}

/* ---- timeouts ----------------------------------------------------------------------------------------------- */
void symmem_coll_residency_explain(symmem_comm_t comm, const volatile symmem_coll_error_record_t *rec, char *msg,
                                   size_t len)
{
    if (rec->reason != SYMMEM_COLL_ERR_TIMEOUT) return;
    const uint32_t started = rec->started, grid = rec->grid;
    if (started != 0 && started < grid) {
        const size_t n = strlen(msg);
        snprintf(msg + n, len - n,
                 ". Only %u of the kernel's %u blocks had started on rank %d: the GPU could not hold every rank's "
                 "kernel at once beside other work (docs/collectives.md, \"Residency\"): lower SYMMEM_GRID_SHARE or "
                 "SYMMEM_MAX_BLOCKS, or keep other spinning kernels (another communicator, NCCL) off the GPU meanwhile",
                 started, grid, rec->rank);
    }
    /* A peer on this GPU can be stuck in a way a peer on another GPU cannot: its own kernel queued before this
     * call may need SMs that this call's waiting blocks hold (a cuBLAS GEMM in clusters, at 16 ranks on one
     * H200: docs/collectives.md, "Residency"). */
    const int peer = (int)rec->peer;
    if (peer >= 0 && peer < comm->nranks && peer != comm->rank &&
        strcmp(comm->peers[peer].pci_bus_id, comm->peers[comm->rank].pci_bus_id) == 0) {
        const size_t n = strlen(msg);
        snprintf(msg + n, len - n,
                 ". Rank %d runs on this GPU too (%s): work it queued before this call that needs whole SMs, such "
                 "as a GEMM in clusters, can wait for the SMs this call's blocks hold; ranks that share a GPU and "
                 "run such kernels need idle SMs left for them: SYMMEM_CLUSTER_ROOM=%s (the default) or more, or a "
                 "lower SYMMEM_GRID_SHARE (docs/collectives.md, \"Residency\")",
                 peer, comm->peers[comm->rank].pci_bus_id, symmem_param_default(SYMMEM_PARAM_CLUSTER_ROOM));
    }
}
