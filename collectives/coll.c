/* Collectives, host side: per-communicator setup (workspace, device state, error record), argument checks,
 * algorithm choice, geometry (shards, rounds, grid) and launch. The kernels are in kernels.cu, the
 * algorithm table in tune.c, the protocol in docs/collectives.md. */
#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "alloc/alloc.h"
#include "base/hash.h"
#include "collectives/coll_internal.h"
#include "collectives/fused.h"
#include "base/comm_state.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "topology/choice.h"
#include "topology/probe.h"
#include "topology/ranks.h"

/* One-shot pull (and reduce-scatter / all-gather pull) read the sender's buffer directly only from this
 * size on: zero copy costs one more sync at the end of the call (~1-2 us), a local copy of a small message
 * costs less. Two-shot all-reduce needs no extra sync and reads symmetric inputs directly at any size. */
#define ZC_MIN_BYTES ((size_t)256 << 10)

static double probe_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- setup and teardown --------------------------------------------------------------------------------- */
static symmem_status_t cuda_fail(cudaError_t e, const char *what)
{
    return symmem_set_error(SYMMEM_CUDA_ERROR, "collectives: %s failed: %s (%s)", what, cudaGetErrorName(e),
                            cudaGetErrorString(e));
}

static size_t align_down(size_t v, size_t a) { return v / a * a; }
static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t symmem_coll_lamport_buf_bytes(size_t ws)
{
    size_t lam = 4096;
    while (lam <= ws / 16) lam *= 2; /* lam * 2 <= ws / 8, without overflow */
    return lam + SYMMEM_COLL_LAMPORT_SLACK;
}

void symmem_coll_layout(struct symmem_coll *co, size_t ws)
{
    co->ws_bytes = ws;
    co->lam_hdr_off = SYMMEM_COLL_FLAG_BYTES;
    co->lam_off = co->lam_hdr_off + 3 * SYMMEM_COLL_LAMPORT_HDR_BYTES;
    co->lam_buf_bytes = symmem_coll_lamport_buf_bytes(ws);
    co->data_off = align_up(co->lam_off + 3 * co->lam_buf_bytes, 4096);
    co->half_bytes = align_down((ws - co->data_off) / 2, 4096);
}

/* Carve the workspace: flags, Lamport headers, three Lamport buffers, two data halves. */
static symmem_status_t plan_workspace(symmem_comm_t comm, struct symmem_coll *co)
{
    size_t ws = symmem_param_size(SYMMEM_PARAM_WORKSPACE_BYTES);
    if (ws < SYMMEM_COLL_MIN_WORKSPACE) {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_WORKSPACE_BYTES=%zu is below the minimum; using %zu", ws,
                    SYMMEM_COLL_MIN_WORKSPACE);
        ws = SYMMEM_COLL_MIN_WORKSPACE;
    }
    symmem_coll_layout(co, ws);
    (void)comm;
    return SYMMEM_OK;
}

int symmem_coll_min_block_threads(void)
{
    const int64_t v = symmem_param_int(SYMMEM_PARAM_MIN_BLOCK_THREADS);
    const int64_t t = v <= 32 ? 32 : v >= SYMMEM_COLL_THREADS ? SYMMEM_COLL_THREADS : (v + 31) / 32 * 32;
    if (t != v)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_MIN_BLOCK_THREADS=%" PRId64 " is not a multiple of 32 in [32, %d]; using %" PRId64,
                    v, SYMMEM_COLL_THREADS, t);
    return (int)t;
}

/* Small messages use many small blocks (each SM injects and polls only a little of the message) rather than
 * a few full ones. A function of agreed values only, so every rank launches the same grid. */
int symmem_coll_block_threads(const struct symmem_coll *co, uint64_t positions)
{
    const uint64_t g = co->max_grid > 0 ? (uint64_t)co->max_grid : 1;
    uint64_t t = positions / g + (positions % g != 0);
    if (t > SYMMEM_COLL_THREADS) t = SYMMEM_COLL_THREADS; /* before rounding: no overflow for any count */
    t = (t + 31) / 32 * 32;
    if (t < (uint64_t)co->min_threads) t = (uint64_t)co->min_threads;
    if (t > SYMMEM_COLL_THREADS) t = SYMMEM_COLL_THREADS;
    return (int)t;
}

int symmem_coll_grid_rule(int blocks_per_sm, int sm_count, int ranks_here, int share_pct, int max_blocks)
{
    const int64_t capacity = (int64_t)(blocks_per_sm > 0 ? blocks_per_sm : 1) * (sm_count > 0 ? sm_count : 1);
    const int64_t share = share_pct < 1 ? 1 : share_pct > 100 ? 100 : share_pct;
    int64_t g = capacity * share / 100 / (ranks_here > 0 ? ranks_here : 1);
    if (max_blocks > 0 && g > max_blocks) g = max_blocks;
    if (g > SYMMEM_COLL_MAX_GRID) g = SYMMEM_COLL_MAX_GRID;
    return g < 1 ? 1 : (int)g;
}

/* This rank's grid bound from its own GPU (agree_across_ranks takes the minimum over ranks). */
static int grid_cap(symmem_comm_t comm, int blocks_per_sm, int *capacity)
{
    const symmem_peer_info_t *me = &comm->peers[comm->rank];
    int here = 0;
    for (int q = 0; q < comm->nranks; q++) here += strcmp(comm->peers[q].pci_bus_id, me->pci_bus_id) == 0;
    const int64_t share = symmem_param_int(SYMMEM_PARAM_GRID_SHARE);
    if (share < 1 || share > 100)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_GRID_SHARE=%" PRId64 " is not a percentage in 1..100; using %d", share,
                    share < 1 ? 1 : 100);
    const int64_t cap = symmem_param_int(SYMMEM_PARAM_MAX_BLOCKS);
    *capacity = blocks_per_sm * me->sm_count;
    return symmem_coll_grid_rule(blocks_per_sm, me->sm_count, here, (int)(share < 1 ? 1 : share > 100 ? 100 : share),
                                 cap > 0 && cap < INT32_MAX ? (int)cap : 0);
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
} agree_t;

static symmem_status_t agree_across_ranks(symmem_comm_t comm, struct symmem_coll *co)
{
    agree_t me = {co->max_grid, co->min_threads, (int32_t)co->tuning.env_algo, topo_table_hash(&co->tuning.table), co->pdl, co->probe,
                  co->lam_check},
            all[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &me, all, sizeof me));
    int table_differs = 0, probe_differs = 0;
    for (int r = 0; r < comm->nranks; r++) {
        if (all[r].max_grid < co->max_grid) co->max_grid = all[r].max_grid;
        if (all[r].min_threads < co->min_threads) co->min_threads = all[r].min_threads; /* grids must match */
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
        if (all[r].table_hash != me.table_hash) table_differs = 1;
    }
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

/* ---- peer-bandwidth probe ------------------------------------------------------------------------------- */
#define PROBE_BYTES ((size_t)4 << 20)
#define PROBE_RUNS 3 /* timed, after one warm-up (topology/probe.c) */

/* Whether this rank asks for the probe (agreed across ranks afterwards). */
static int probe_wanted(symmem_comm_t comm)
{
    const char *v = symmem_param_str(SYMMEM_PARAM_COLL_PROBE);
    if (comm->nranks < 2) return 0;
    if (strcmp(v, "0") == 0 || strcasecmp(v, "off") == 0) return 0;
    if (strcasecmp(v, "force") == 0 || strcmp(v, "1") == 0) return 1;
    if (v[0] && strcasecmp(v, "auto") != 0)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_COLL_PROBE=%s is not auto, force or 0; using auto", v);
    return topo_probe_useful(comm->link_class);
}

/* The ring figures (topology/probe.h) over the data halves, which hold nothing between calls: rank r loads
 * from half 0 of rank r+1 into its own half 1 and stores its own half 0 into half 1 of rank r+1. Flags,
 * Lamport buffers and the device state stay as initialised. The figures replace the built-in table with
 * topo_choose's for them: the same on every rank (minima over ranks); a tuning-file table, agreed by hash,
 * is not touched and still wins. */
static symmem_status_t probe_links(symmem_comm_t comm, struct symmem_coll *co)
{
    const int peer = (comm->rank + 1) % comm->nranks;
    size_t bytes = PROBE_BYTES < co->half_bytes ? PROBE_BYTES : co->half_bytes;
    const topo_probe_buffers_t b = {co->ws_peers[peer] + co->data_off, co->ws_peers[peer] + co->data_off + co->half_bytes,
                                    co->ws_peers[comm->rank] + co->data_off + co->half_bytes,
                                    co->ws_peers[comm->rank] + co->data_off, align_down(bytes, 16 * SYMMEM_COLL_THREADS),
                                    co->max_grid, SYMMEM_COLL_THREADS};
    double rd = 0, wr = 0;
    const double t0 = probe_now_ms();
    SYMMEM_CHECK(topo_probe_ring(comm, &b, &rd, &wr));
    co->probed = 1;
    co->probe_read_gbs = rd;
    co->probe_write_gbs = wr;
    const topo_choice_facts_t f = {comm->nranks, comm->link_class, rd, wr};
    const int changed = symmem_coll_tune_measured(&co->tuning, &f);
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                "probe: peer read %.1f GB/s, peer write %.1f GB/s (all ranks at once, min over ranks); %s%s "
                "(%d default rules changed; %zu bytes x %d runs, %.1f ms at init)",
                rd, wr, co->tuning.prefer == TOPO_PREFER_KEEP ? "no clear winner, keeping " : "preferring ",
                topo_prefer_name(co->tuning.prefer), changed, b.bytes, PROBE_RUNS + 1, probe_now_ms() - t0);
    return SYMMEM_OK;
}

void symmem_coll_residency(symmem_comm_t comm, int *grid, int *capacity)
{
    *grid = comm && comm->coll ? comm->coll->max_grid : 0;
    *capacity = comm && comm->coll ? comm->coll->capacity : 0;
}

int symmem_coll_probe_figures(symmem_comm_t comm, double *read_gbs, double *write_gbs)
{
    if (!comm || !comm->coll || !comm->coll->probed) return 0;
    if (read_gbs) *read_gbs = comm->coll->probe_read_gbs;
    if (write_gbs) *write_gbs = comm->coll->probe_write_gbs;
    return 1;
}

symmem_status_t symmem_coll_comm_init(symmem_comm_t comm)
{
    if (!comm || comm->backend != SYMMEM_BACKEND_CUDA) return SYMMEM_OK;
    struct symmem_coll *co = calloc(1, sizeof *co);
    if (!co) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "collectives: out of host memory");
    comm->coll = co;
    symmem_status_t st = SYMMEM_OK;
    cudaError_t e;
    cudaStream_t s = NULL;

    /* Load every kernel now (this thread has the communicator's device current): a kernel loaded lazily
     * at its first launch can wait for the running kernels of its context, and ours wait for each other
     * (kernels.cu, symmem_coll_preload). It also gives the occupancy the grid rule below needs. */
    symmem_coll_preload_info_t pre;
    if ((e = (cudaError_t)symmem_coll_preload(&pre)) != cudaSuccess ||
        (e = (cudaError_t)symmem_fused_preload(&pre)) != cudaSuccess) {
        st = cuda_fail(e, "loading the collective kernels");
        goto fail;
    }
    if (pre.min_blocks_per_sm < 1) {
        st = symmem_set_error(SYMMEM_CUDA_ERROR,
                              "collectives: a block of %d threads of the collective kernels does not fit on one SM "
                              "of this GPU (%d registers per thread)",
                              SYMMEM_COLL_THREADS, pre.max_regs);
        goto fail;
    }
    SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL, "loaded %d collective kernels: at most %d registers per thread, %d block(s) of %d "
                                     "threads per SM",
                 pre.kernels, pre.max_regs, pre.min_blocks_per_sm, SYMMEM_COLL_THREADS);
    co->max_grid = grid_cap(comm, pre.min_blocks_per_sm, &co->capacity);
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, comm->device) != cudaSuccess) mps = 0;
    (void)cudaGetLastError();
    co->mps = mps;
    co->min_threads = symmem_coll_min_block_threads();
    /* Programmatic dependent launch (see symmem_coll_launch): Hopper and newer, one rank per GPU. */
    co->pdl = symmem_param_int(SYMMEM_PARAM_PDL) != 0 && comm->ranks_per_device == 1 &&
              comm->peers[comm->rank].cc_major >= 9;
    co->lam_check = symmem_param_int(SYMMEM_PARAM_LAMPORT_CHECK) != 0;
    const topo_choice_facts_t facts = {comm->nranks, comm->link_class, 0.0, 0.0};
    symmem_coll_tune_init(&co->tuning, comm->fingerprint, &facts);
    const char *env = symmem_param_str(SYMMEM_PARAM_ALGO);
    if (env[0] && symmem_algo_from_name(env, &co->tuning.env_algo) != SYMMEM_OK) {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_ALGO=%s is not an algorithm; using auto", env);
        symmem_clear_error();
        co->tuning.env_algo = SYMMEM_ALGO_AUTO;
    }
    /* The algorithm table measured on this machine (symmem-bench --tune): SYMMEM_TUNE_FILE, else the
     * cache folder's tune.txt when it exists. A table that does not parse is ignored with a warning. */
    char tune[4096];
    int explicit_tune = 0;
    if (symmem_coll_tune_path(tune, sizeof tune, 0, &explicit_tune) == 0 &&
        (explicit_tune || access(tune, R_OK) == 0) && symmem_coll_tune_load(&co->tuning, tune) != SYMMEM_OK) {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "algorithm table %s ignored: %s", tune, symmem_last_error());
        symmem_clear_error();
        co->tuning.table.nrules = 0;
    }
    co->probe = probe_wanted(comm);
    SYMMEM_CHECK_GOTO(agree_across_ranks(comm, co), st, fail);
    SYMMEM_CHECK_GOTO(plan_workspace(comm, co), st, fail);
    co->colocated_peer = -1;
    for (int q = 0; q < comm->nranks && co->colocated_peer < 0; q++)
        if (q != comm->rank && comm->peers[q].pid == comm->peers[comm->rank].pid &&
            strcmp(comm->peers[q].pci_bus_id, comm->peers[comm->rank].pci_bus_id) == 0)
            co->colocated_peer = q;
    /* Under MPS a client process gets only a few hardware work queues (CUDA_DEVICE_MAX_CONNECTIONS, shared
     * pool); several ranks' streams of this process may then share one queue, and a rank's collective
     * waits behind a co-located rank's that waits for it: a timeout (coll_b2b --inproc 4 under MPS: timed
     * out; with CUDA_DEVICE_MAX_CONNECTIONS=32: passed; bench/NOTES.md). Say so before it happens. */
    if (co->colocated_peer >= 0 && co->mps && comm->rank < co->colocated_peer) {
        const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
        if (!conn || atoi(conn) <= comm->ranks_per_device)
            SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                        "ranks %d and %d of this process share GPU %s under MPS, where the process's streams may "
                        "share hardware work queues: their collectives would then run one after the other and "
                        "time out. Set CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts, or run such ranks "
                        "without MPS (docs/collectives.md, \"Residency\")",
                        comm->rank, co->colocated_peer, comm->peers[comm->rank].pci_bus_id);
    }
    SYMMEM_CHECK_GOTO(symmem_alloc_create(comm, co->ws_bytes, &co->ws), st, fail);
    for (int r = 0; r < comm->nranks; r++) co->ws_peers[r] = co->ws->peers[r];

    if ((e = cudaMalloc((void **)&co->dev_state, sizeof *co->dev_state)) != cudaSuccess) {
        st = cuda_fail(e, "cudaMalloc of the collective state");
        goto fail;
    }
    if ((e = cudaHostAlloc((void **)&co->err, sizeof *co->err, cudaHostAllocMapped | cudaHostAllocPortable)) !=
        cudaSuccess) {
        co->err = NULL;
        st = cuda_fail(e, "cudaHostAlloc of the error record");
        goto fail;
    }
    memset(co->err, 0, sizeof *co->err);
    if ((e = cudaHostGetDevicePointer((void **)&co->err_dev, co->err, 0)) != cudaSuccess) {
        st = cuda_fail(e, "cudaHostGetDevicePointer of the error record");
        goto fail;
    }
    /* Zero the flags and the state, fill the Lamport buffers with the empty word, and wait: no peer may push
     * before every rank's buffers are ready, hence the host barrier after the synchronize. */
    if ((e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) != cudaSuccess) {
        st = cuda_fail(e, "cudaStreamCreateWithFlags");
        goto fail;
    }
    char *mine = co->ws_peers[comm->rank];
    if ((e = cudaMemsetAsync(mine, 0, SYMMEM_COLL_FLAG_BYTES, s)) != cudaSuccess ||
        (e = cudaMemsetAsync(co->dev_state, 0, sizeof *co->dev_state, s)) != cudaSuccess ||
        (e = (cudaError_t)symmem_coll_launch_fill_empty(
             mine + co->lam_hdr_off, co->lam_off - co->lam_hdr_off + 3 * co->lam_buf_bytes, s)) != cudaSuccess ||
        (e = cudaStreamSynchronize(s)) != cudaSuccess) {
        st = cuda_fail(e, "initialising the collective workspace");
        goto fail;
    }
    cudaStreamDestroy(s);
    s = NULL;
    SYMMEM_CHECK_GOTO(symmem_comm_barrier(comm), st, fail);
    /* The defaults become final here: the probe's decision comes from allgathered minima, so it is the
     * same on every rank (the tuning-file table, agreed above by hash, is not touched and still wins). */
    if (co->probe) SYMMEM_CHECK_GOTO(probe_links(comm, co), st, fail);
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                "collectives ready: workspace %zu bytes (Lamport 3 x %zu, data 2 x %zu), %d blocks/kernel of %d..%d "
                "threads, PDL %s, "
                "links %s, fingerprint %s, table %s%s",
                co->ws_bytes, co->lam_buf_bytes, co->half_bytes, co->max_grid, co->min_threads, SYMMEM_COLL_THREADS,
                co->pdl ? "on" : "off",
                topo_link_name(comm->link_class), comm->fingerprint,
                co->tuning.table.nrules ? "from the tuning file" : "built-in",
                co->tuning.prefer == TOPO_PREFER_PULL ? " (defaults: pull, from the probe)" : "");
    return SYMMEM_OK;
fail:
    if (s) cudaStreamDestroy(s);
    symmem_coll_comm_fini(comm);
    return st;
}

void symmem_coll_comm_fini(symmem_comm_t comm)
{
    if (!comm || !comm->coll) return;
    struct symmem_coll *co = comm->coll;
    /* cudaFree waits for the device, so no kernel of ours still uses the workspace when it is unmapped (a
     * kernel waiting on a dead peer ends at its timeout). */
    if (co->dev_state) cudaFree(co->dev_state);
    /* Only if it is still live: a destroy that released every buffer first leaves nothing to free. */
    symmem_alloc_release(co->ws);
    if (co->err) cudaFreeHost(co->err);
    (void)cudaGetLastError();
    free(co);
    comm->coll = NULL;
}

/* ---- errors ------------------------------------------------------------------------------------------------ */
static int family_of(symmem_coll_kind_t kind, symmem_algo_t algo);

/* Which of the last operations launched here carries `tag` (a flag's tag is the hash of its call's
 * arguments, the same on every rank that made that call): "all_gather oneshot_pull 16411 x half". */
static void describe_tag(const struct symmem_coll *co, uint32_t tag, char *out, size_t size)
{
    const uint64_t launches = __atomic_load_n(&co->launches, __ATOMIC_ACQUIRE);
    const uint64_t n = launches < SYMMEM_COLL_HIST ? launches : SYMMEM_COLL_HIST;
    for (uint64_t k = 1; k <= n; k++) {
        const struct symmem_coll_hist *e = &co->hist[(launches - k) % SYMMEM_COLL_HIST];
        if (__atomic_load_n(&e->tag, __ATOMIC_RELAXED) != tag) continue;
        const int32_t kind = __atomic_load_n(&e->kind, __ATOMIC_RELAXED);
        if (kind == SYMMEM_COLL_BARRIER)
            snprintf(out, size, "a barrier");
        else
            snprintf(out, size, "%s %s %" PRIu64 " x %s", symmem_coll_kind_name((symmem_coll_kind_t)kind),
                     symmem_algo_name((symmem_algo_t)__atomic_load_n(&e->algo, __ATOMIC_RELAXED)),
                     __atomic_load_n(&e->count, __ATOMIC_RELAXED),
                     symmem_dtype_name((symmem_dtype_t)__atomic_load_n(&e->dtype, __ATOMIC_RELAXED)));
        return;
    }
    snprintf(out, size, "tag %04x, none of the last %d operations launched here", tag, SYMMEM_COLL_HIST);
}

symmem_status_t symmem_coll_poll_error(symmem_comm_t comm)
{
    if (!comm || !comm->coll || !comm->coll->err) return SYMMEM_OK;
    struct symmem_coll *co = comm->coll;
    volatile symmem_coll_error_record_t *rec = co->err;
    const uint32_t status = rec->status;
    if (status == 0) return SYMMEM_OK;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    const symmem_coll_kind_t kind = (symmem_coll_kind_t)rec->kind;
    const char *op = symmem_coll_kind_name(kind);
    const char *algo = kind == SYMMEM_COLL_BARRIER ? "barrier" : symmem_algo_name((symmem_algo_t)rec->algo);
    const uint64_t seen = rec->seen;
    char msg[1024], last[128];
    const int lamport = kind != SYMMEM_COLL_BARRIER &&
                        family_of(kind, (symmem_algo_t)rec->algo) == SYMMEM_COLL_FAM_LAMPORT;
    switch (rec->reason) {
    case SYMMEM_COLL_ERR_TIMEOUT:
        if (lamport)
            snprintf(msg, sizeof msg,
                     "rank %d: %s (%s) sequence number %" PRIu64 " timed out after %d ms waiting for the data of rank "
                     "%d (Lamport round %" PRIu64 ", block %u): rank %d did not make the same call, exited or is "
                     "stuck. The communicator is unusable; destroy it (SYMMEM_TIMEOUT_MS sets the timeout)",
                     rec->rank, op, algo, rec->call, comm->timeout_ms, rec->peer, rec->epoch, rec->block, rec->peer);
        else {
            /* Epochs advance only in flag-based operations (Lamport ones use none), two per round; the flag's
             * tag names the operation the peer signalled last on this block. */
            if ((seen >> 16) == 0)
                snprintf(last, sizeof last, "none yet");
            else {
                char what[80];
                describe_tag(co, (uint32_t)(seen & 0xffffu), what, sizeof what);
                snprintf(last, sizeof last, "epoch %" PRIu64 ", %s", seen >> 16, what);
            }
            snprintf(msg, sizeof msg,
                     "rank %d: %s (%s) sequence number %" PRIu64 " timed out after %d ms waiting for rank %d (block %u, "
                     "epoch %" PRIu64 "; its last flag there: %s): rank %d did not make the same call, exited or is "
                     "stuck. The communicator is unusable; destroy it (SYMMEM_TIMEOUT_MS sets the timeout)",
                     rec->rank, op, algo, rec->call, comm->timeout_ms, rec->peer, rec->block, rec->epoch, last,
                     rec->peer);
        }
        break;
    case SYMMEM_COLL_ERR_MISMATCH:
        if (lamport && (seen >> 16) != (rec->epoch & 0x7fffffffu))
            snprintf(last, sizeof last, "; it is at Lamport round %" PRIu64 ", we at %" PRIu64
                     ": the ranks made different numbers of Lamport calls", seen >> 16, rec->epoch & 0x7fffffffu);
        else
            last[0] = '\0';
        snprintf(msg, sizeof msg,
                 "rank %d: %s (%s) sequence number %" PRIu64 ": rank %d reached the same point with different "
                 "arguments (tag %04" PRIx64 ", ours %04x%s): every rank must pass the same count, dtype, op and "
                 "algorithm, and either all plain device buffers or the same symmetric buffer at the same offset "
                 "(the send buffer; also the receive buffer for the two-shot all-reduces; in-place all_gather: the "
                 "receive buffer)",
                 rec->rank, op, algo, rec->call, rec->peer, seen & 0xffffu, rec->tag, last);
        break;
    case SYMMEM_COLL_ERR_CONCURRENT:
        snprintf(msg, sizeof msg,
                 "rank %d: %s (%s) sequence number %" PRIu64 " ran at the same time as another operation of the same "
                 "communicator (used from two streams without ordering them?); results are undefined. Use one "
                 "communicator per stream",
                 rec->rank, op, algo, rec->call);
        break;
    default:
        snprintf(msg, sizeof msg, "rank %d: %s (%s) sequence number %" PRIu64 " failed (reason %u)", rec->rank, op,
                 algo, rec->call, rec->reason);
        break;
    }
    const uint32_t started = rec->started, grid = rec->grid;
    if (rec->reason == SYMMEM_COLL_ERR_TIMEOUT && started != 0 && started < grid) {
        const size_t len = strlen(msg);
        snprintf(msg + len, sizeof msg - len,
                 ". Only %u of the kernel's %u blocks had started on rank %d: the GPU could not hold every rank's "
                 "kernel at once beside other work (docs/collectives.md, \"Residency\"): lower SYMMEM_GRID_SHARE or "
                 "SYMMEM_MAX_BLOCKS, or keep other spinning kernels (another communicator, NCCL) off the GPU meanwhile",
                 started, grid, rec->rank);
    }
    /* The watcher thread and the caller's thread may both get here: one of them logs. */
    const int first = !__atomic_exchange_n(&co->error_reported, 1, __ATOMIC_ACQ_REL);
    if (first && rec->reason == SYMMEM_COLL_ERR_TIMEOUT && rec->peer >= 0 &&
        rec->peer < comm->nranks && comm->peers[rec->peer].pid == comm->peers[comm->rank].pid)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                    "rank %d runs in this process (GPU %s): one thread that drives several ranks enqueues rank after "
                    "rank, so every kernel it enqueues after this operation and before the peer's must run "
                    "concurrently with it: use one stream per rank (not the legacy default stream), and load every "
                    "kernel of your own before (CUDA lazy loading may wait for running kernels: launch each once "
                    "first, or set CUDA_MODULE_LOADING=EAGER)",
                    rec->peer, comm->peers[rec->peer].pci_bus_id);
    symmem_comm_set_error(comm, (symmem_status_t)status, msg);
    if (first) SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "%s", msg); /* logged once, here, where it was detected */
    return symmem_record_error((symmem_status_t)status, "%s", msg);
}

/* Every call starts here: the communicator must be usable. */
static symmem_status_t check_usable(symmem_comm_t comm, const char *call)
{
    if (comm->backend != SYMMEM_BACKEND_CUDA)
        return symmem_set_error(SYMMEM_UNSUPPORTED,
                                "%s: collectives need the CUDA backend (this communicator uses the host backend, "
                                "which has no GPU kernels)",
                                call);
    if (!comm->coll)
        return symmem_set_error(SYMMEM_INVALID_USAGE, "%s: the communicator's collectives are not initialised", call);
    SYMMEM_CHECK(symmem_coll_poll_error(comm));
    char msg[sizeof comm->async_error_msg];
    const symmem_status_t st = symmem_comm_error(comm, msg, sizeof msg);
    if (st != SYMMEM_OK)
        return symmem_record_error(st, "%s: the communicator is in an error state after an earlier failure: %s", call, msg);
    return SYMMEM_OK;
}

/* ---- geometry ------------------------------------------------------------------------------------------- */
static int family_of(symmem_coll_kind_t kind, symmem_algo_t algo)
{
    switch (algo) {
    case SYMMEM_ALGO_ONESHOT_PULL:
    case SYMMEM_ALGO_TWOSHOT_PULL: return SYMMEM_COLL_FAM_PULL;
    case SYMMEM_ALGO_ONESHOT_PUSH:
    case SYMMEM_ALGO_TWOSHOT_LAMPORT: /* reduce-scatter: its first half, = oneshot_push's */
        return kind == SYMMEM_COLL_ALL_GATHER ? SYMMEM_COLL_FAM_PUSH : SYMMEM_COLL_FAM_LAMPORT;
    default: return SYMMEM_COLL_FAM_PUSH;
    }
}

/* 16-byte units per shard-pack in one half (one Lamport buffer for the Lamport family). `zo`: the push
 * all-reduce stores results into the peers' receive buffers, so two-shot push needs no gather area (staged
 * keeps it: it stages its result there before the passes). */
static uint64_t units_of(symmem_coll_kind_t kind, symmem_algo_t algo, int fam, int n, int zo)
{
    const uint64_t un = (uint64_t)n;
    if (fam == SYMMEM_COLL_FAM_LAMPORT) {
        if (kind != SYMMEM_COLL_ALL_REDUCE) return un;
        return algo == SYMMEM_ALGO_TWOSHOT_LAMPORT ? 2 * un : un * un; /* two-shot: n slots and n gather slots */
    }
    if (fam == SYMMEM_COLL_FAM_PULL) {
        if (kind == SYMMEM_COLL_ALL_GATHER) return 1;
        return (kind == SYMMEM_COLL_ALL_REDUCE && algo == SYMMEM_ALGO_TWOSHOT_PULL) ? un + 1 : un;
    }
    if (kind == SYMMEM_COLL_ALL_REDUCE) return zo && algo == SYMMEM_ALGO_TWOSHOT_PUSH ? un : 2 * un;
    return un;
}

int symmem_coll_geometry(const struct symmem_coll *co, int n, symmem_coll_kind_t kind, symmem_algo_t algo,
                         uint64_t count, size_t elem_size, int zo_on, int no_ws, symmem_coll_geom_t *g)
{
    const uint64_t V = 16 / elem_size;
    memset(g, 0, sizeof *g);
    g->fam = family_of(kind, algo);
    if (kind == SYMMEM_COLL_ALL_REDUCE) {
        g->stride = (count + (uint64_t)n - 1) / (uint64_t)n;
        g->stride = (g->stride + V - 1) / V * V;
        g->total = count;
    } else {
        g->stride = count;
        g->total = count * (uint64_t)n;
    }
    g->units = no_ws ? 0 : units_of(kind, algo, g->fam, n, zo_on);
    const uint64_t cap = g->fam == SYMMEM_COLL_FAM_LAMPORT ? co->lam_buf_bytes : co->half_bytes;
    const uint64_t segp_cap = no_ws ? UINT64_MAX : cap / (16 * g->units);
    if (segp_cap == 0) return 1;
    const uint64_t needp = (g->stride + V - 1) / V;
    g->segp = needp < segp_cap ? needp : segp_cap;
    g->rounds = (needp + g->segp - 1) / g->segp;
    if (g->rounds > UINT32_MAX) return 2;
    /* Grid: a deterministic function of (algorithm, size, ranks, max_grid, min_threads), so every rank
     * launches the same. */
    const int lamport_one = g->fam == SYMMEM_COLL_FAM_LAMPORT && kind == SYMMEM_COLL_ALL_REDUCE &&
                            algo == SYMMEM_ALGO_ONESHOT_PUSH; /* every rank reduces all n shards */
    g->positions = lamport_one ? (uint64_t)n * g->segp : g->segp;
    g->threads = symmem_coll_block_threads(co, g->positions);
    uint64_t grid = (g->positions + (uint64_t)g->threads - 1) / (uint64_t)g->threads;
    if (grid > (uint64_t)co->max_grid) grid = (uint64_t)co->max_grid;
    g->grid = grid < 1 ? 1 : (int)grid;
    return 0;
}

symmem_coll_tuning_t *symmem_coll_tuning(symmem_comm_t comm) { return comm && comm->coll ? &comm->coll->tuning : NULL; }

size_t symmem_comm_max_message_bytes(symmem_comm_t comm)
{
    if (!comm || !comm->coll) return 0;
    const struct symmem_coll *co = comm->coll;
    const uint64_t u = units_of(SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PULL, SYMMEM_COLL_FAM_PULL, comm->nranks, 0);
    return (size_t)(co->half_bytes / (16 * u) * 16 * (uint64_t)comm->nranks);
}

static int ranges_overlap(const char *a, size_t na, const char *b, size_t nb) { return a < b + nb && b < a + na; }

typedef struct coll_call {
    symmem_coll_kind_t kind;
    const void *send;
    void *recv;
    size_t count;
    symmem_dtype_t dtype;
    symmem_redop_t op;
    symmem_algo_t algo;
    symmem_stream_t stream;
    const char *name;
} coll_call_t;

static symmem_status_t check_args(symmem_comm_t comm, const coll_call_t *c, size_t *in_bytes, size_t *out_bytes)
{
    const size_t es = symmem_dtype_size(c->dtype);
    const size_t n = (size_t)comm->nranks;
    if (es == 0) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: invalid dtype %d", c->name, (int)c->dtype);
    if (c->kind != SYMMEM_COLL_ALL_GATHER && ((int)c->op < 0 || c->op >= SYMMEM_REDOP_COUNT))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: invalid reduction op %d", c->name, (int)c->op);
    if ((int)c->algo < 0 || c->algo >= SYMMEM_ALGO_COUNT)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: invalid algorithm %d", c->name, (int)c->algo);
    if (c->count > (SIZE_MAX / 2) / es / n)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: count %zu is too large", c->name, c->count);
    if (!c->send || !c->recv)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: %s is NULL", c->name, !c->send ? "sendbuf" : "recvbuf");
    if ((uintptr_t)c->send % es || (uintptr_t)c->recv % es)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "%s: sendbuf %p / recvbuf %p is not aligned to the %zu-byte element size of %s (any "
                                "element-aligned pointer works; 16-byte alignment is fastest)",
                                c->name, c->send, c->recv, es, symmem_dtype_name(c->dtype));
    const size_t b = c->count * es;
    *in_bytes = c->kind == SYMMEM_COLL_REDUCE_SCATTER ? b * n : b;
    *out_bytes = c->kind == SYMMEM_COLL_ALL_GATHER ? b * n : b;
    /* In place only in the exact forms (as NCCL): all-reduce send == recv, reduce-scatter recv = send +
     * rank*count, all-gather send = recv + rank*count; any other overlap would race. */
    const char *s = c->send, *r = c->recv;
    const size_t mine = (size_t)comm->rank * b;
    int ok_in_place = 0;
    if (c->kind == SYMMEM_COLL_ALL_REDUCE) ok_in_place = s == r;
    else if (c->kind == SYMMEM_COLL_REDUCE_SCATTER) ok_in_place = r == s + mine;
    else ok_in_place = s == r + mine;
    if (!ok_in_place && ranges_overlap(s, *in_bytes, r, *out_bytes))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "%s: sendbuf %p (%zu bytes) and recvbuf %p (%zu bytes) overlap, and not in the in-place "
                                "form (all_reduce: send == recv; reduce_scatter: recv == send + rank*count; all_gather: "
                                "send == recv + rank*count)",
                                c->name, c->send, *in_bytes, c->recv, *out_bytes);
    return SYMMEM_OK;
}

/* Whether `bytes` starting at ptr - lead lie inside one symmetric buffer of `comm`: *buf and *region (the
 * offset of ptr - lead from the buffer's base on this rank, which the zero-copy rules ask to be the same
 * on every rank). */
static int sym_region(symmem_comm_t comm, const void *ptr, size_t lead, size_t bytes, symmem_buffer_t *buf,
                      size_t *region)
{
    *buf = symmem_alloc_find(comm, ptr);
    if (!*buf) return 0;
    const size_t size = (*buf)->size;
    const size_t off = (size_t)((const char *)ptr - (const char *)(*buf)->peers[comm->rank]);
    if (off < lead) return 0; /* e.g. in-place all-gather whose receive buffer starts before this buffer */
    *region = off - lead;
    return bytes <= size && *region <= size - bytes;
}

/* A zero-copy region as the tag must cover it: its offset and which buffer (two of one size told apart). */
static uint32_t hash_region(uint32_t h, symmem_buffer_t buf, size_t region)
{
    h = symmem_fnv32_u64(h, region);
    h = symmem_fnv32_u64(h, buf->size);
    h = symmem_fnv32_u64(h, buf->mapped_size);
    return symmem_fnv32_u64(h, buf->seq);
}

/* Pull algorithms may read the senders' inputs in place when they lie in a symmetric buffer of this
 * communicator ("zero copy"): p->zc[q] is where rank q's input is mapped here. Every rank computes every
 * zc[q] from ITS OWN view of the shared buffer, so the rule every rank must follow is stated for the buffer
 * region all ranks share (the same symmetric buffer, the same offset `region` on every rank):
 *  - all-reduce, reduce-scatter (in place too: recv = send + rank*count, the region starts at send) and
 *    out-of-place all-gather: the region is the input; rank q's input is at region:
 *    zc[q] = peer_base(q) + region, region = send - base.
 *  - in-place all-gather (send = recv + rank*count*es): the region is the RECEIVE buffer; rank q's input is
 *    its own chunk q of it: zc[q] = peer_base(q) + region + q*in_bytes, region = recv - base. (Using send's
 *    offset, region + rank*in_bytes, differs on every rank -- a false tag mismatch -- and would point zc[q]
 *    at chunk `rank` of rank q, which rank q is overwriting.)
 * The tag hashes the region's offset, the form (in-place all-gather or not) and the buffer's sizes: ranks
 * that pass other offsets or forms stop with SYMMEM_INVALID_USAGE instead of reading the wrong memory.
 * Returns 1 (zero copy, p->zc filled, *h updated) or 0 (copy-in path; the same decision on every rank that
 * follows the rule, and a different one shows up in the tag through zc_on). */
static int zero_copy(symmem_comm_t comm, const coll_call_t *c, size_t in_bytes, size_t out_bytes, int two,
                     symmem_coll_params_t *p, uint32_t *h)
{
    const int ag_in_place = c->kind == SYMMEM_COLL_ALL_GATHER && p->in_place;
    const size_t lead = ag_in_place ? (size_t)comm->rank * in_bytes : 0; /* send - start of the region */
    symmem_buffer_t buf;
    size_t region;
    if (!sym_region(comm, c->send, lead, ag_in_place ? out_bytes : in_bytes, &buf, &region)) return 0;
    if (!two) {
        if (in_bytes < ZC_MIN_BYTES) return 0;
        /* one-shot all-reduce in place: peers would read my input while I overwrite it */
        if (c->kind == SYMMEM_COLL_ALL_REDUCE && ranges_overlap(c->send, in_bytes, c->recv, out_bytes)) return 0;
    }
    for (int q = 0; q < comm->nranks; q++)
        p->zc[q] = (const char *)buf->peers[q] + region + (ag_in_place ? (size_t)q * in_bytes : 0);
    *h = symmem_fnv32_u64(hash_region(*h, buf, region), (uint64_t)ag_in_place);
    return 1;
}

/* Two-shot all-reduce (push, staged, and pull when it also reads in place) may store each reduced shard
 * straight into every rank's receive buffer when that lies in a symmetric buffer of this communicator ("zero
 * copy out"): p->zo[q] is where rank q's receive buffer is mapped here, at the same offset `region` = recv -
 * base on every rank (the rule; the tag hashes the region and the buffer, so ranks that break it stop with
 * SYMMEM_INVALID_USAGE). It saves the gather area's copy-out and the sync after every round but the last: a
 * peer stores into my receive buffer only after the round's first sync, which I signal after my kernel
 * started (so the stream work before it is done) and after reading my input of that round (so in place is
 * safe), and my kernel ends only after the last round's second sync, which every peer signals after its
 * stores into my buffer. Two-shot pull with zero copy both ways needs no workspace at all (kernels.cu,
 * run_pull). Returns 1 (p->zo filled, *h updated) or 0. */
static int zero_copy_out(symmem_comm_t comm, const coll_call_t *c, size_t out_bytes, symmem_coll_params_t *p,
                         uint32_t *h)
{
    symmem_buffer_t buf;
    size_t region;
    if (!sym_region(comm, c->recv, 0, out_bytes, &buf, &region)) return 0;
    for (int q = 0; q < comm->nranks; q++) p->zo[q] = (char *)buf->peers[q] + region;
    *h = hash_region(*h, buf, region);
    return 1;
}

/* Remember what was launched with which tag (error messages name the operation a late peer last signalled). */
static void record_launch(struct symmem_coll *co, uint32_t tag, symmem_coll_kind_t kind, symmem_algo_t algo,
                          symmem_dtype_t dtype, size_t count)
{
    /* Relaxed atomics: the watcher thread may read the history (describe_tag) while this thread writes
     * it; a torn entry only blurs an error message. */
    struct symmem_coll_hist *e = &co->hist[co->launches % SYMMEM_COLL_HIST];
    __atomic_store_n(&e->tag, tag, __ATOMIC_RELAXED);
    __atomic_store_n(&e->kind, (int32_t)kind, __ATOMIC_RELAXED);
    __atomic_store_n(&e->algo, (int32_t)algo, __ATOMIC_RELAXED);
    __atomic_store_n(&e->dtype, (int32_t)dtype, __ATOMIC_RELAXED);
    __atomic_store_n(&e->count, (uint64_t)count, __ATOMIC_RELAXED);
    __atomic_store_n(&co->launches, co->launches + 1, __ATOMIC_RELEASE);
}

/* Two ranks of this process on one GPU must run their kernels at the same time: the legacy default stream
 * serialises them (one waits for the other forever), so say so before the timeout does. Warned once. */
static void check_stream(symmem_comm_t comm, symmem_stream_t stream, const char *call)
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

static symmem_status_t run_collective(symmem_comm_t comm, const coll_call_t *c)
{
    struct symmem_coll *co = comm->coll;
    size_t in_bytes = 0, out_bytes = 0;
    SYMMEM_CHECK(check_args(comm, c, &in_bytes, &out_bytes));
    if (c->count == 0) return SYMMEM_OK;
    const int n = comm->nranks;
    const size_t es = symmem_dtype_size(c->dtype);
    const size_t bytes = symmem_coll_message_bytes(n, c->kind, c->count, c->dtype);
    const symmem_algo_t algo = c->algo != SYMMEM_ALGO_AUTO ? c->algo : symmem_coll_choose(&co->tuning, c->kind, bytes);
    const int fam = family_of(c->kind, algo);

    symmem_coll_params_t p;
    memset(&p, 0, sizeof p);
    p.send = c->send;
    p.recv = c->recv;
    for (int q = 0; q < n; q++) p.ws[q] = co->ws_peers[q];
    p.st = co->dev_state;
    p.err = co->err_dev;
    p.rank = comm->rank;
    p.nranks = n;
    p.kind = c->kind;
    p.algo = algo;
    p.dtype = c->dtype;
    p.op = c->kind == SYMMEM_COLL_ALL_GATHER ? SYMMEM_OP_SUM : c->op;
    p.data_off = co->data_off;
    p.half_bytes = co->half_bytes;
    p.lam_hdr_off = co->lam_hdr_off;
    p.lam_check = co->lam_check;
    p.lam_off = co->lam_off;
    p.lam_buf_bytes = co->lam_buf_bytes;
    p.timeout_ns = comm->timeout_ms > 0 ? (uint64_t)comm->timeout_ms * 1000000u : 0;
    p.aligned = ((uintptr_t)c->send % 16 == 0 && (uintptr_t)c->recv % 16 == 0 &&
                 (c->kind == SYMMEM_COLL_ALL_REDUCE || (c->count * es) % 16 == 0));
    p.in_place = c->kind == SYMMEM_COLL_ALL_REDUCE ? c->send == c->recv
               : c->kind == SYMMEM_COLL_ALL_GATHER ? (const char *)c->send == (const char *)c->recv + (size_t)comm->rank * c->count * es
                                                   : 0;

    /* Zero copy in (pull: peers' inputs read in place) and out (results stored into peers' outputs): both
     * decided before the round size, which they change. hz collects what the tag must cover. */
    uint32_t hz = 0;
    const int two_pull = c->kind == SYMMEM_COLL_ALL_REDUCE && algo == SYMMEM_ALGO_TWOSHOT_PULL;
    if (fam == SYMMEM_COLL_FAM_PULL) p.zc_on = zero_copy(comm, c, in_bytes, out_bytes, two_pull, &p, &hz);
    if (c->kind == SYMMEM_COLL_ALL_REDUCE &&
        (algo == SYMMEM_ALGO_TWOSHOT_PUSH || algo == SYMMEM_ALGO_STAGED || (two_pull && p.zc_on)))
        p.zo_on = zero_copy_out(comm, c, out_bytes, &p, &hz);
    /* two-shot pull with zero copy both ways uses no workspace: one round of any size */
    const int no_ws = two_pull && p.zc_on && p.zo_on;
    symmem_coll_geom_t geo;
    const int gst = symmem_coll_geometry(co, n, c->kind, algo, c->count, es, p.zo_on, no_ws, &geo);
    if (gst == 1)
        return symmem_set_error(SYMMEM_INVALID_USAGE,
                                "%s: the workspace (%zu bytes) is too small for %s with %d ranks; raise "
                                "SYMMEM_WORKSPACE_BYTES",
                                c->name, co->ws_bytes, symmem_algo_name(algo), n);
    if (gst != 0) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: message too large", c->name);
    p.stride = geo.stride;
    p.total = geo.total;
    p.segp = geo.segp;
    p.rounds = (uint32_t)geo.rounds;
    const uint64_t grid = (uint64_t)geo.grid;
    const int threads = geo.threads;

    uint32_t h = SYMMEM_FNV32_INIT;
    h = symmem_fnv32_u64(h, (uint64_t)c->kind);
    h = symmem_fnv32_u64(h, (uint64_t)algo);
    h = symmem_fnv32_u64(h, (uint64_t)c->dtype);
    h = symmem_fnv32_u64(h, (uint64_t)p.op);
    h = symmem_fnv32_u64(h, c->count);
    h = symmem_fnv32_u64(h, grid);
    h = symmem_fnv32_u64(h, (uint64_t)threads);
    h = symmem_fnv32_u64(h, p.segp);
    h = symmem_fnv32_u64(h, (uint64_t)p.zc_on);
    h = symmem_fnv32_u64(h, (uint64_t)p.zo_on);
    h = symmem_fnv32_u64(h, hz);
    p.tag = symmem_hash_fold16(h);

    SYMMEM_TRACE(SYMMEM_SUBSYS_COLL, "%s count %zu %s %s algo %s grid %" PRIu64 "x%d rounds %u segp %" PRIu64 " zc %d zo %d",
                 c->name, c->count, symmem_dtype_name(c->dtype), symmem_redop_name(p.op), symmem_algo_name(algo), grid,
                 threads, p.rounds, p.segp, p.zc_on, p.zo_on);
    check_stream(comm, c->stream, c->name);
    const cudaError_t e = (cudaError_t)symmem_coll_launch(&p, fam, (int)grid, threads, c->stream, co->pdl);
    if (e != cudaSuccess)
        return symmem_set_error(SYMMEM_CUDA_ERROR, "%s (%s): kernel launch failed: %s (%s)", c->name,
                                symmem_algo_name(algo), cudaGetErrorName(e), cudaGetErrorString(e));
    record_launch(co, p.tag, c->kind, algo, c->dtype, c->count);
    return SYMMEM_OK;
}

static symmem_status_t entry(symmem_comm_t comm, const coll_call_t *c)
{
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(comm, c->name, &e));
    symmem_status_t st = check_usable(comm, c->name);
    if (st == SYMMEM_OK) st = run_collective(comm, c);
    symmem_entry_end(&e);
    return st;
}

symmem_status_t symmem_all_reduce(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                  symmem_dtype_t dtype, symmem_redop_t op, symmem_algo_t algo, symmem_stream_t stream)
{
    const coll_call_t c = {SYMMEM_COLL_ALL_REDUCE, sendbuf, recvbuf, count, dtype, op, algo, stream, "symmem_all_reduce"};
    return entry(comm, &c);
}

symmem_status_t symmem_reduce_scatter(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                      symmem_dtype_t dtype, symmem_redop_t op, symmem_algo_t algo,
                                      symmem_stream_t stream)
{
    const coll_call_t c = {SYMMEM_COLL_REDUCE_SCATTER, sendbuf, recvbuf, count, dtype, op, algo, stream,
                           "symmem_reduce_scatter"};
    return entry(comm, &c);
}

symmem_status_t symmem_all_gather(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                  symmem_dtype_t dtype, symmem_algo_t algo, symmem_stream_t stream)
{
    const coll_call_t c = {SYMMEM_COLL_ALL_GATHER, sendbuf, recvbuf, count, dtype, SYMMEM_OP_SUM, algo, stream,
                           "symmem_all_gather"};
    return entry(comm, &c);
}

symmem_status_t symmem_barrier(symmem_comm_t comm, symmem_stream_t stream)
{
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(comm, "symmem_barrier", &e));
    symmem_status_t st = check_usable(comm, "symmem_barrier");
    if (st == SYMMEM_OK) {
        struct symmem_coll *co = comm->coll;
        symmem_coll_params_t p;
        memset(&p, 0, sizeof p);
        for (int q = 0; q < comm->nranks; q++) p.ws[q] = co->ws_peers[q];
        p.st = co->dev_state;
        p.err = co->err_dev;
        p.rank = comm->rank;
        p.nranks = comm->nranks;
        p.kind = SYMMEM_COLL_BARRIER;
        p.algo = SYMMEM_ALGO_AUTO;
        p.timeout_ns = comm->timeout_ms > 0 ? (uint64_t)comm->timeout_ms * 1000000u : 0;
        p.tag = symmem_hash_fold16(symmem_fnv32_u64(SYMMEM_FNV32_INIT, SYMMEM_COLL_BARRIER));
        check_stream(comm, stream, "symmem_barrier");
        const cudaError_t ce = (cudaError_t)symmem_coll_launch_barrier(&p, stream, co->pdl);
        if (ce != cudaSuccess)
            st = symmem_set_error(SYMMEM_CUDA_ERROR, "symmem_barrier: kernel launch failed: %s (%s)", cudaGetErrorName(ce),
                                  cudaGetErrorString(ce));
        else
            record_launch(co, p.tag, SYMMEM_COLL_BARRIER, SYMMEM_ALGO_AUTO, SYMMEM_FLOAT32, 0);
    }
    symmem_entry_end(&e);
    return st;
}

/* ---- shared with the other entry points of the collectives (fused.c) ------------------------------------ */
symmem_status_t symmem_coll_check_usable(symmem_comm_t comm, const char *call) { return check_usable(comm, call); }

void symmem_coll_check_stream(symmem_comm_t comm, symmem_stream_t stream, const char *call)
{
    check_stream(comm, stream, call);
}

void symmem_coll_record_launch(struct symmem_coll *co, uint32_t tag, symmem_coll_kind_t kind, symmem_algo_t algo,
                               symmem_dtype_t dtype, size_t count)
{
    record_launch(co, tag, kind, algo, dtype, count);
}
