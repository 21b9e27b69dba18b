/* What the ranks of a communicator agree on at collectives init: each rank's wishes (the grid its GPU
 * holds, the block size, the launch mode, the Lamport check, SYMMEM_ALGO, the tuning file's table, the
 * probe), then one exchange that makes them the same everywhere, since every rank must plan every call the
 * same way. */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"
#include "topology/choice.h"

/* SYMMEM_CLUSTER_ROOM on this rank: what the grid rule was given, for the INFO line once the grid is agreed. */
typedef struct cluster_room {
    int asked;                 /* SYMMEM_CLUSTER_ROOM (0 or more) */
    int here;                  /* ranks of the communicator on this GPU */
    int gpcs;                  /* the GPU's GPCs; 0: unknown, or not measured (the room does not apply) */
    int clusters8, clusters16; /* what gpcs came from (symmem_coll_cluster_counts) */
    int share;                 /* SYMMEM_GRID_SHARE, clamped */
} cluster_room_t;

/* The GPC count, measured only where the room applies (more than one rank here, a room above 0), so that
 * one rank per GPU, and SYMMEM_CLUSTER_ROOM=0, load no query kernel. */
static void measure_gpcs(const symmem_peer_info_t *me, cluster_room_t *rm)
{
    rm->clusters8 = rm->clusters16 = -1;
    if (rm->asked > 0 && rm->here > 1) {
        symmem_coll_cluster_counts(&rm->clusters8, &rm->clusters16);
        rm->gpcs = symmem_coll_gpcs_from_clusters(rm->clusters8, rm->clusters16, me->sm_count);
    }
}

/* This rank's grid bound from its own GPU (agree_across_ranks takes the minimum over ranks). */
static int grid_cap(symmem_comm_t comm, int blocks_per_sm, int *capacity, cluster_room_t *rm)
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
    memset(rm, 0, sizeof *rm);
    rm->asked = room < 0 ? 0 : room > INT32_MAX ? INT32_MAX : (int)room;
    rm->here = here;
    rm->share = (int)(share < 1 ? 1 : share > 100 ? 100 : share);
    measure_gpcs(me, rm);
    const int64_t cap = symmem_param_int(SYMMEM_PARAM_MAX_BLOCKS);
    *capacity = blocks_per_sm * me->sm_count;
    return symmem_coll_grid_rule_room(blocks_per_sm, me->sm_count, here, rm->share,
                                      cap > 0 && cap < INT32_MAX ? (int)cap : 0, rm->asked, rm->gpcs);
}

/* Says what SYMMEM_CLUSTER_ROOM did, with the agreed grid. */
static void cluster_room_log(symmem_comm_t comm, const struct symmem_coll *co, const cluster_room_t *rm)
{
    const symmem_peer_info_t *me = &comm->peers[comm->rank];
    if (rm->asked <= 0) return;
    if (rm->here <= 1) {
        SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL,
                     "SYMMEM_CLUSTER_ROOM=%d does not apply: no other rank of this communicator shares this GPU",
                     rm->asked);
        return;
    }
    if (rm->gpcs == 0) {
        SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                    "SYMMEM_CLUSTER_ROOM=%d not applied: the GPC count of GPU %s (compute capability %d.%d) is unknown "
                    "(clusters of 8 and of 16 whole-SM blocks resident at once: %d and %d; -1: refused, or the query "
                    "failed); its %d ranks take %d%% of all its blocks, %d per rank's kernel",
                    rm->asked, me->pci_bus_id, me->cc_major, me->cc_minor, rm->clusters8, rm->clusters16, rm->here,
                    rm->share, co->grid.max_grid);
        return;
    }
    const int64_t pool = symmem_coll_room_pool(me->sm_count, rm->asked, rm->gpcs);
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                "SYMMEM_CLUSTER_ROOM=%d: co-located ranks leave %d idle SMs per GPC of GPU %s (%d GPCs): %" PRId64
                " blocks (%d%% of the other %" PRId64 " SMs) for this communicator's %d ranks there, %d per rank's "
                "kernel, %d in all",
                rm->asked, rm->asked, me->pci_bus_id, rm->gpcs, pool * rm->share / 100, rm->share, pool, rm->here,
                co->grid.max_grid, co->grid.max_grid * rm->here);
}

/* Facts every rank must agree on, exchanged once at init. */
typedef struct agree {
    int32_t max_grid;
    int32_t min_threads;
    int32_t env_algo;
    uint64_t table_hash;
    int32_t pdl;
    int32_t probe; /* this rank wants the peer-bandwidth probe */
    int32_t lam_check;
    int32_t island_ok;    /* the island algorithm is available here (island_error empty) */
    uint64_t islands_hash; /* of the split it would run (symmem_island_hash) */
    uint64_t wire_min_bytes; /* the compressed wire's threshold and group (wire.h) */
    int32_t wire_group;
} agree_t;

/* Ranks that split into islands differently (SYMMEM_ISLANDS set on some ranks only, or to different lists;
 * one rank's list refused) would build different default tables and schedules: the island algorithm goes
 * on every rank, and the defaults are rebuilt without islands, the same everywhere. */
static void islands_disagree(symmem_comm_t comm, struct symmem_coll *co, int r)
{
    SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "ranks %d and %d split the ranks into islands differently (SYMMEM_ISLANDS differs "
                                    "between ranks, or is refused on one); the island algorithm is unavailable",
                r, comm->rank);
    snprintf(co->island_error, sizeof co->island_error,
             "the ranks do not agree on the islands (rank %d and rank %d differ: SYMMEM_ISLANDS must be the same on "
             "every rank)",
             r, comm->rank);
    topo_choice_facts_t f;
    symmem_coll_choice_facts(comm, co, 0.0, 0.0, 0.0, &f);
    (void)symmem_coll_tune_measured(&co->tuning, &f);
}

static symmem_status_t agree_across_ranks(symmem_comm_t comm, struct symmem_coll *co)
{
    agree_t me = {co->grid.max_grid, co->grid.min_threads, (int32_t)co->tuning.env_algo,
                  topo_table_hash(&co->tuning.table), co->pdl, co->probe, co->lam_check, co->island_error[0] == '\0',
                  co->islands_hash, co->wire.min_bytes, (int32_t)co->wire.group},
            all[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &me, all, sizeof me));
    int table_differs = 0, probe_differs = 0, islands_differ = -1;
    for (int r = 0; r < comm->nranks; r++) {
        if (all[r].max_grid < co->grid.max_grid) co->grid.max_grid = all[r].max_grid;
        if (all[r].min_threads < co->grid.min_threads) co->grid.min_threads = all[r].min_threads; /* grids match */
        if (!all[r].pdl) co->pdl = 0; /* the same launch mode everywhere keeps timing symmetric */
        if (all[r].lam_check) co->lam_check = 1; /* a rank that checks waits for headers: all push them */
        /* the probe is collective (barriers, an allgather): every rank runs it or none does */
        if (all[r].probe != me.probe) probe_differs = 1;
        if (!all[r].probe) co->probe = 0;
        if (all[r].env_algo != me.env_algo)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "SYMMEM_ALGO differs between ranks (rank %d: %s, this rank: %s): every rank must "
                                    "use the same algorithm",
                                    r, symmem_algo_name((symmem_algo_t)all[r].env_algo),
                                    symmem_algo_name(co->tuning.env_algo));
        /* a call asking for the compressed wire must run the same kernel everywhere */
        if (all[r].wire_min_bytes != me.wire_min_bytes || all[r].wire_group != me.wire_group)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "SYMMEM_WIRE_MIN_BYTES or SYMMEM_WIRE_GROUP differs between ranks (rank %d: "
                                    "%" PRIu64 " bytes, group %d; this rank: %" PRIu64 " bytes, group %d): every rank "
                                    "must set the same",
                                    r, all[r].wire_min_bytes, all[r].wire_group, me.wire_min_bytes, me.wire_group);
        if (all[r].table_hash != me.table_hash) table_differs = 1;
        if (islands_differ < 0 && (all[r].island_ok != me.island_ok ||
                                   (me.island_ok && all[r].islands_hash != me.islands_hash)))
            islands_differ = r;
    }
    if (islands_differ >= 0) islands_disagree(comm, co, islands_differ);
    if (table_differs) {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "ranks loaded different algorithm tables (SYMMEM_TUNE_FILE differs between "
                                        "ranks?); every rank uses the built-in table");
        co->tuning.table.nrules = 0;
    }
    if (probe_differs)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_COLL_PROBE asks for the peer-bandwidth probe on some ranks only; no "
                                        "rank runs it");
    return SYMMEM_OK;
}

/* Whether this rank asks for the probe (agreed across ranks afterwards). */
static int probe_wanted(symmem_comm_t comm)
{
    const char *v = symmem_param_str(SYMMEM_PARAM_COLL_PROBE);
    if (comm->nranks < 2) return 0;
    if (strcmp(v, "0") == 0 || strcasecmp(v, "off") == 0) return 0;
    if (strcasecmp(v, "force") == 0 || strcmp(v, "1") == 0) return 1;
    if (v[0] && strcasecmp(v, "auto") != 0)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_COLL_PROBE=%s is not auto, force or 0; using auto", v);
    /* in host memory every access crosses the GPU's link, whose figures the cost model needs (the PCIe lab) */
    return topo_probe_useful(comm->link_class) || comm->placement == SYMMEM_PLACEMENT_HOST_NUMA;
}

/* The tuning key: the topology fingerprint (rank count, ranks per GPU, GPU, links), the placement (host
 * memory is another machine as far as the table goes) and the library version (another version may have
 * other algorithms). The same string on every rank. */
static void tune_key(symmem_comm_t comm, char *out, size_t len)
{
    snprintf(out, len, "%s.%s.v%d.%d.%d", comm->fingerprint,
             comm->placement == SYMMEM_PLACEMENT_HOST_NUMA ? "host_numa" : "device", SYMMEM_VERSION_MAJOR,
             SYMMEM_VERSION_MINOR, SYMMEM_VERSION_PATCH);
}

/* SYMMEM_ALGO, then the table measured on this machine (symmem-bench --tune, or the autotune of an earlier
 * init): SYMMEM_TUNE_FILE, else the cache folder's tune.txt when it exists, its section for this key. A table
 * that does not parse is ignored with a warning. */
static void table_wishes(symmem_comm_t comm, struct symmem_coll *co)
{
    topo_choice_facts_t facts;
    char key[sizeof co->tuning.fingerprint];
    symmem_coll_choice_facts(comm, co, 0.0, 0.0, 0.0, &facts);
    tune_key(comm, key, sizeof key);
    symmem_coll_tune_init(&co->tuning, key, &facts);
    const char *env = symmem_param_str(SYMMEM_PARAM_ALGO);
    const int env_algo = env[0] ? symmem_algo_lookup(env) : SYMMEM_ALGO_AUTO;
    co->tuning.env_algo = env_algo < 0 || symmem_algo_lossy(env_algo) ? SYMMEM_ALGO_AUTO : (symmem_algo_t)env_algo;
    if (env_algo < 0) SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_ALGO=%s is not an algorithm; using auto", env);
    else if (symmem_algo_lossy(env_algo))
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                    "SYMMEM_ALGO=%s is lossy and runs only where a call asks for it (the algo argument; torch's "
                    "wire=\"int8\"); using auto",
                    env);
    char tune[4096];
    int explicit_tune = 0;
    if (symmem_coll_tune_path(tune, sizeof tune, 0, &explicit_tune) == 0 &&
        (explicit_tune || access(tune, R_OK) == 0) && symmem_coll_tune_load(&co->tuning, tune) != SYMMEM_OK) {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "algorithm table %s ignored: %s", tune, symmem_last_error());
        symmem_clear_error();
        co->tuning.table.nrules = 0;
    }
}

symmem_status_t symmem_coll_agree(symmem_comm_t comm, struct symmem_coll *co, int blocks_per_sm)
{
    cluster_room_t room;
    co->grid.max_grid = grid_cap(comm, blocks_per_sm, &co->capacity, &room);
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, comm->device) != cudaSuccess) mps = 0;
    (void)cudaGetLastError();
    co->mps = mps;
    co->grid.min_threads = symmem_coll_min_block_threads();
    /* Programmatic dependent launch (see symmem_coll_launch): Hopper and newer, one rank per GPU. */
    co->pdl = symmem_param_int(SYMMEM_PARAM_PDL) != 0 && comm->ranks_per_device == 1 &&
              comm->peers[comm->rank].cc_major >= 9;
    co->lam_check = symmem_param_int(SYMMEM_PARAM_LAMPORT_CHECK) != 0;
    table_wishes(comm, co);
    co->probe = probe_wanted(comm);
    SYMMEM_CHECK(agree_across_ranks(comm, co));
    cluster_room_log(comm, co, &room);
    return SYMMEM_OK;
}
