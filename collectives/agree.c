/* What the ranks of a communicator agree on at collectives init: each rank's wishes (the grid its GPU
 * holds, residency.c; the block size, the launch mode, the Lamport check, the islands, SYMMEM_ALGO, the
 * tuning file's table, the probe), then one exchange that makes them the same everywhere, since every rank
 * must plan every call the same way; and the facts of the algorithm choice they are made from. */
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
#include "collectives/residency.h"
#include "topology/choice.h"

/* ---- the islands and the choice's facts ---------------------------------------------------------------------- */
void symmem_coll_island_init(symmem_comm_t comm, struct symmem_coll *co)
{
    const char *env = symmem_param_str(SYMMEM_PARAM_ISLANDS);
    char err[sizeof co->island_error - 64];
    co->island_error[0] = '\0';
    if (env[0]) {
        if (symmem_island_split_parse(env, comm->nranks, &co->islands, err, sizeof err) != 0) {
            snprintf(co->island_error, sizeof co->island_error, "SYMMEM_ISLANDS=%s", err);
            SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "%s; the island algorithm is unavailable", co->island_error);
            symmem_island_split_from_numa(comm->nranks, (const int[SYMMEM_MAX_RANKS]){0}, &co->islands);
            co->islands_hash = symmem_island_hash(&co->islands);
            return;
        }
    } else {
        int numa[SYMMEM_MAX_RANKS];
        for (int q = 0; q < comm->nranks; q++) numa[q] = comm->peers[q].numa_node;
        symmem_island_split_from_numa(comm->nranks, numa, &co->islands);
    }
    co->islands_hash = symmem_island_hash(&co->islands);
    for (int k = 0; k < 3; k++)
        if (symmem_island_schedule(&co->islands, (symmem_coll_kind_t)k, comm->rank, &co->island_sched[k], err,
                                   sizeof err) != 0) {
            snprintf(co->island_error, sizeof co->island_error, "%s", err);
            SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "%s; the island algorithm is unavailable", err);
            return;
        }
    char list[128];
    symmem_island_split_format(&co->islands, list, sizeof list);
    SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL, "islands %s (%s)", list, env[0] ? "SYMMEM_ISLANDS" : "NUMA nodes");
}

void symmem_coll_choice_facts(symmem_comm_t comm, const struct symmem_coll *co, double rd, double wr, double ce,
                              topo_choice_facts_t *f)
{
    memset(f, 0, sizeof *f);
    f->nranks = comm->nranks;
    f->link = comm->link_class;
    f->read_gbs = rd;
    f->write_gbs = wr;
    f->ce_gbs = ce;
    f->host_memory = comm->placement == SYMMEM_PLACEMENT_HOST_NUMA;
    f->ranks_per_gpu = comm->ranks_per_device;
    if (rd > 0.0 && co->probed) { /* the probe's other figures go with its read and write */
        f->rw_gbs = co->probe_rw_gbs;
        f->barrier_us = co->probe_barrier_us;
    }
    int key[SYMMEM_MAX_RANKS];
    for (int q = 0; q < comm->nranks; q++) key[q] = co->island_error[0] ? 0 : co->islands.of[q];
    topo_island_facts(comm->nranks, key, f);
}

/* ---- the agreement ---------------------------------------------------------------------------------------- */
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
    int32_t graph_reg; /* SYMMEM_GRAPH_REGISTER on this rank */
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
                  co->islands_hash, co->wire.min_bytes, (int32_t)co->wire.group, co->graph_reg},
            all[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &me, all, sizeof me));
    int table_differs = 0, probe_differs = 0, islands_differ = -1;
    for (int r = 0; r < comm->nranks; r++) {
        if (all[r].max_grid < co->grid.max_grid) co->grid.max_grid = all[r].max_grid;
        if (all[r].min_threads < co->grid.min_threads) co->grid.min_threads = all[r].min_threads; /* grids match */
        if (!all[r].pdl) co->pdl = 0; /* the same launch mode everywhere keeps timing symmetric */
        if (all[r].lam_check) co->lam_check = 1; /* a rank that checks waits for headers: all push them */
        /* a captured call's exchange is collective: every rank registers or none does */
        if (!all[r].graph_reg) co->graph_reg = 0;
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

/* The tuning key (symmem_coll_tune_key) from this rank's grid bound, before the ranks agree on it: ranks
 * whose bounds differ load different sections or none, and the table hash check below then drops the table
 * on every rank. */
static void tune_key(symmem_comm_t comm, const struct symmem_coll *co, char *out, size_t len)
{
    size_t ws = symmem_param_size(SYMMEM_PARAM_WORKSPACE_BYTES);
    if (ws < SYMMEM_COLL_MIN_WORKSPACE) ws = SYMMEM_COLL_MIN_WORKSPACE; /* as the workspace plans it */
    symmem_coll_tune_key(out, len, comm->fingerprint, comm->placement == SYMMEM_PLACEMENT_HOST_NUMA, co->grid.max_grid,
                         co->grid.min_threads, ws, symmem_coll_kernels_hash());
}

/* SYMMEM_ALGO, then the table measured on this machine (symmem-bench --tune, or the autotune of an earlier
 * init): SYMMEM_TUNE_FILE, else the cache folder's tune.txt when it exists, its section for this key. A table
 * that cannot be used (a refused file, an error in this key's section) is ignored with a warning. */
static void table_wishes(symmem_comm_t comm, struct symmem_coll *co)
{
    topo_choice_facts_t facts;
    char key[sizeof co->tuning.fingerprint];
    symmem_coll_choice_facts(comm, co, 0.0, 0.0, 0.0, &facts);
    tune_key(comm, co, key, sizeof key);
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
    symmem_coll_tune_load_cached(&co->tuning);
}

/* Graph registration (graphreg.h) needs every rank to capture at the same time, which thread ranks sharing a
 * GPU cannot: it is off wherever two ranks run in one process (from the facts every rank shares, so the same
 * answer everywhere; a false "same process" across PID namespaces only turns it off). Its kernels load and
 * store the peers' device memory directly, as device placement does: it is off where the symmetric buffers
 * live in host memory (GPUs that cannot map each other, the PCIe lab, whose point is that every peer access
 * crosses the link). */
static int graph_reg_possible(symmem_comm_t comm)
{
    if (comm->nranks < 2 || comm->placement != SYMMEM_PLACEMENT_DEVICE || !comm->all_p2p) return 0;
    for (int a = 0; a < comm->nranks; a++)
        for (int b = a + 1; b < comm->nranks; b++)
            if (comm->peers[a].pid == comm->peers[b].pid && comm->peers[a].host_hash == comm->peers[b].host_hash)
                return 0;
    return 1;
}

symmem_status_t symmem_coll_agree(symmem_comm_t comm, struct symmem_coll *co, int blocks_per_sm)
{
    symmem_coll_residency_t res;
    co->grid.max_grid = symmem_coll_residency_grid(comm, blocks_per_sm, &co->capacity, &res);
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, comm->device) != cudaSuccess) mps = 0;
    (void)cudaGetLastError();
    co->mps = mps;
    co->grid.min_threads = symmem_coll_min_block_threads();
    /* Programmatic dependent launch (see symmem_coll_launch): Hopper and newer, one rank per GPU. */
    co->pdl = symmem_param_int(SYMMEM_PARAM_PDL) != 0 && comm->ranks_per_device == 1 &&
              comm->peers[comm->rank].cc_major >= 9;
    co->lam_check = symmem_param_int(SYMMEM_PARAM_LAMPORT_CHECK) != 0;
    co->graph_reg = symmem_param_int(SYMMEM_PARAM_GRAPH_REGISTER) != 0 && graph_reg_possible(comm);
    table_wishes(comm, co);
    co->probe = probe_wanted(comm);
    SYMMEM_CHECK(agree_across_ranks(comm, co));
    symmem_coll_residency_log(comm, &res, co->grid.max_grid);
    return SYMMEM_OK;
}

void symmem_coll_available(const struct symmem_coll *co, int *av)
{
    /* a lossy algorithm (the compressed wire) runs only where a call names it: never a table's */
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++)
        av[a] = a != SYMMEM_ALGO_AUTO && symmem_algo_listed(a) && !symmem_algo_lossy(a);
    if (co->island_error[0]) av[SYMMEM_ALGO_ISLAND] = 0;
    if (co->probed && !(co->probe_ce_gbs > 0.0)) av[SYMMEM_ALGO_COPY_ENGINE] = 0;
}
