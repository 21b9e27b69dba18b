/* The collectives of a communicator, made and freed (what comm/ calls): load the kernels, agree with the
 * other ranks (agree.c), find the ranks that share this GPU (residency.c), make the workspace
 * (workspace.c), run the init probe where it decides something, the autotune (autotune_gpu.c), and the
 * accessors the rest of the library reads. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/autotune.h"
#include "collectives/coll_internal.h"
#include "collectives/fused.h"
#include "collectives/residency.h"
#include "topology/choice.h"
#include "topology/probe.h"
#include "topology/ranks.h"

#define PROBE_BYTES ((size_t)4 << 20)
#define PROBE_RUNS 3 /* timed, after one warm-up (topology/probe.c) */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static size_t align_down(size_t v, size_t a) { return v / a * a; }

#define BARRIER_WARM 2
#define BARRIER_RUNS 16

/* Wait for `ev` without a busy host spin (co-located ranks' threads share the CPU). */
static cudaError_t wait_quietly(cudaEvent_t ev)
{
    for (;;) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e != cudaErrorNotReady) return e;
        usleep(20);
    }
}

/* The cost model's fixed cost of a kernel with one sync (topo_choice_facts_t.barrier_us): barrier kernels back
 * to back on a private stream, every rank at once, the slowest rank's time per barrier. Every rank launches
 * the same kernels once every rank has its stream and events (a rank that could not, or whose stream could
 * share a hardware queue with a co-located rank's: no figure anywhere). */
static symmem_status_t time_barrier(symmem_comm_t comm, const struct symmem_coll *co, double *us)
{
    cudaStream_t s = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    /* the ranks of this process create their streams together, so that they get hardware queues of their
     * own where there are enough (symmem_coll_private_streams_safe); elsewhere no barrier is timed */
    SYMMEM_CHECK(symmem_comm_barrier(comm));
    int32_t ok = symmem_coll_private_streams_safe(comm, co) &&
                 cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
                 cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess,
            oks[SYMMEM_MAX_RANKS];
    (void)cudaGetLastError();
    symmem_status_t st = symmem_comm_allgather(comm, &ok, oks, sizeof ok);
    int all = st == SYMMEM_OK;
    for (int r = 0; r < comm->nranks && all; r++) all = oks[r] != 0;
    double mine = 0.0, got[SYMMEM_MAX_RANKS];
    for (int i = 0; all && st == SYMMEM_OK && i < BARRIER_WARM + BARRIER_RUNS; i++) {
        if (i == BARRIER_WARM && cudaEventRecord(e0, s) != cudaSuccess) mine = -1.0;
        st = symmem_coll_enqueue_barrier(comm, s, "the init probe's barrier");
    }
    float ms = 0.0f;
    if (all && st == SYMMEM_OK) {
        if (cudaEventRecord(e1, s) == cudaSuccess && wait_quietly(e1) == cudaSuccess &&
            cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && mine == 0.0)
            mine = 1000.0 * (double)ms / BARRIER_RUNS;
        else
            mine = -1.0;
        (void)cudaGetLastError();
        st = symmem_comm_allgather(comm, &mine, got, sizeof mine);
    }
    if (s) cudaStreamSynchronize(s), cudaStreamDestroy(s);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    (void)cudaGetLastError();
    SYMMEM_CHECK(st);
    *us = 0.0;
    for (int r = 0; all && r < comm->nranks; r++) {
        if (got[r] <= 0.0) return *us = 0.0, SYMMEM_OK; /* one rank without a figure: none */
        if (got[r] > *us) *us = got[r];
    }
    return SYMMEM_OK;
}

/* The ring figures (topology/probe.h) over the data halves, which hold nothing between calls: rank r loads
 * from half 0 of rank r+1 into its own half 1 and stores its own half 0 into half 1 of rank r+1; then the
 * barrier's time. Flags, Lamport buffers and the device state stay as initialised. The figures feed the cost
 * model, whose table replaces the built-in one: the same on every rank (minima over ranks, the slowest
 * barrier); a tuning-file table, agreed by hash, is not touched and still wins. */
static symmem_status_t probe_links(symmem_comm_t comm, struct symmem_coll *co)
{
    const int peer = (comm->rank + 1) % comm->nranks;
    const symmem_coll_layout_t *l = &co->layout;
    const size_t bytes = align_down(PROBE_BYTES < l->half_bytes ? PROBE_BYTES : l->half_bytes, 16 * SYMMEM_COLL_THREADS);
    char *theirs = co->ws_peers[peer] + l->data_off, *mine = co->ws_peers[comm->rank] + l->data_off;
    const topo_probe_buffers_t b = {theirs, theirs + l->half_bytes, mine + l->half_bytes, mine, bytes,
                                    co->grid.max_grid, SYMMEM_COLL_THREADS};
    topo_probe_figures_t fig;
    double bar = 0.0;
    const double t0 = now_ms();
    SYMMEM_CHECK(topo_probe_ring(comm, &b, &fig));
    SYMMEM_CHECK(time_barrier(comm, co, &bar));
    co->probed = 1;
    co->probe_read_gbs = fig.read_gbs;
    co->probe_write_gbs = fig.write_gbs;
    co->probe_ce_gbs = fig.ce_gbs;
    co->probe_rw_gbs = fig.rw_gbs;
    co->probe_barrier_us = bar;
    topo_choice_facts_t f;
    symmem_coll_choice_facts(comm, co, fig.read_gbs, fig.write_gbs, fig.ce_gbs, &f);
    const int changed = symmem_coll_tune_measured(&co->tuning, &f);
    topo_choice_t ch;
    topo_choose(&f, &ch);
    char ring[96] = "no copy-engine two-shot";
    if (ch.copy_engine_above != SIZE_MAX) snprintf(ring, sizeof ring, "copy-engine two-shot above %zu bytes", ch.copy_engine_above);
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                "probe: peer read %.1f GB/s, peer write %.1f GB/s, copy-engine write %.1f GB/s, read and write at once "
                "%.1f GB/s (all ranks at once, min over ranks), barrier %.2f us (slowest rank); %s%s, %s (%d default "
                "rules changed; %zu bytes x %d runs, %.1f ms at init)",
                fig.read_gbs, fig.write_gbs, fig.ce_gbs, fig.rw_gbs, bar,
                co->tuning.prefer == TOPO_PREFER_KEEP ? "no clear winner, keeping " : "preferring ",
                topo_prefer_name(co->tuning.prefer), ring, changed, bytes, PROBE_RUNS + 1, now_ms() - t0);
    return SYMMEM_OK;
}

/* Load every kernel now (this thread has the communicator's device current): a kernel loaded lazily at its
 * first launch can wait for the running kernels of its context, and ours wait for each other (launch.cu,
 * symmem_coll_preload). It also gives the occupancy the grid rule needs: *blocks_per_sm. */
static symmem_status_t load_kernels(int *blocks_per_sm)
{
    symmem_coll_preload_info_t pre;
    cudaError_t e;
    if ((e = (cudaError_t)symmem_coll_preload(&pre)) != cudaSuccess ||
        (e = (cudaError_t)symmem_fused_preload(&pre)) != cudaSuccess)
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "collectives: loading the collective kernels");
    if (pre.min_blocks_per_sm < 1)
        return symmem_set_error(SYMMEM_CUDA_ERROR,
                                "collectives: a block of the collective kernels (%d threads, %d for the wide ones) "
                                "does not fit on one SM of this GPU (%d registers per thread)",
                                SYMMEM_COLL_THREADS, SYMMEM_COLL_WIDE_THREADS, pre.max_regs);
    SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL, "loaded %d collective kernels: at most %d registers per thread, %d block(s) of %d "
                                     "threads per SM",
                 pre.kernels, pre.max_regs, pre.min_blocks_per_sm, SYMMEM_COLL_THREADS);
    *blocks_per_sm = pre.min_blocks_per_sm;
    return SYMMEM_OK;
}

/* A tuning-file table goes through the autotune's filter once the probe has spoken: a rule naming an
 * algorithm that cannot run here would fail the first AUTO call that reaches it and leave the peers waiting
 * for the timeout. Every rank drops the same rules (the table and the facts are agreed). */
static void table_filter(struct symmem_coll *co)
{
    int av[SYMMEM_ALGO_COUNT];
    symmem_coll_available(co, av);
    char dropped[512];
    if (symmem_coll_tune_drop_unavailable(&co->tuning, av, dropped, sizeof dropped) == 0) return;
    SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                "the algorithm table's rules %s name an algorithm that cannot run here (%s%s%s); they are dropped, "
                "the neighbouring rules or the built-in table serve their sizes",
                dropped, av[SYMMEM_ALGO_ISLAND] ? "" : co->island_error,
                !av[SYMMEM_ALGO_ISLAND] && !av[SYMMEM_ALGO_COPY_ENGINE] ? "; " : "",
                av[SYMMEM_ALGO_COPY_ENGINE] ? "" : "the init probe found the copy engine's peer copies failing");
}

symmem_status_t symmem_coll_comm_init(symmem_comm_t comm)
{
    if (!comm || comm->backend != SYMMEM_BACKEND_CUDA) return SYMMEM_OK;
    struct symmem_coll *co = calloc(1, sizeof *co);
    if (!co) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "collectives: out of host memory");
    comm->coll = co;
    int blocks_per_sm = 0;
    symmem_status_t st;
    const double t0 = now_ms();
    SYMMEM_CHECK_GOTO(load_kernels(&blocks_per_sm), st, fail);
    const double t1 = now_ms();
    symmem_coll_island_init(comm, co); /* before the table: its facts include the islands */
    symmem_coll_wire_init(comm, co);   /* its settings are agreed below */
    SYMMEM_CHECK_GOTO(symmem_coll_agree(comm, co, blocks_per_sm), st, fail);
    symmem_coll_residency_colocated(comm, co);
    const double t2 = now_ms();
    SYMMEM_CHECK_GOTO(symmem_coll_workspace_init(comm, co), st, fail);
    const double t3 = now_ms();
    /* The defaults become final here: the probe's decision comes from allgathered minima, so it is the same on
     * every rank (the tuning-file table, agreed above by hash, still wins, less the rules table_filter drops). */
    if (co->probe) SYMMEM_CHECK_GOTO(probe_links(comm, co), st, fail);
    {
        topo_choice_facts_t f;
        symmem_coll_choice_facts(comm, co, co->probed ? co->probe_read_gbs : 0.0, co->probed ? co->probe_write_gbs : 0.0,
                                 co->probed ? co->probe_ce_gbs : 0.0, &f);
        topo_choice_machine(&f, &co->machine);
    }
    table_filter(co);
    SYMMEM_CHECK_GOTO(symmem_coll_autotune_init(comm, co), st, fail);
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                "collectives ready: workspace %zu bytes (Lamport 3 x %zu, data 2 x %zu), %d blocks/kernel of %d..%d "
                "threads, PDL %s, links %s, %s memory, key %s, table %s%s; %.0f ms: kernels loaded %.0f, agreed %.0f, "
                "workspace %.0f, probe and autotune %.0f",
                co->layout.ws_bytes, co->layout.lam_buf_bytes, co->layout.half_bytes, co->grid.max_grid,
                co->grid.min_threads, SYMMEM_COLL_THREADS, co->pdl ? "on" : "off", topo_link_name(comm->link_class),
                co->machine.host_memory ? "host" : "device", co->tuning.fingerprint,
                co->autotune_state == SYMMEM_AUTOTUNE_MEASURED ? "measured at this init (autotune)"
                : co->tuning.table.nrules                      ? "from the tuning file"
                                                               : "the cost model's",
                co->tuning.prefer == TOPO_PREFER_PULL ? " (defaults: pull, from the probe)" : "", now_ms() - t0,
                t1 - t0, t2 - t1, t3 - t2, now_ms() - t3);
    symmem_coll_residency_add(comm);
    return SYMMEM_OK;
fail:
    symmem_coll_comm_fini(comm);
    return st;
}

void symmem_coll_comm_fini(symmem_comm_t comm)
{
    if (!comm || !comm->coll) return;
    symmem_coll_residency_remove(comm);
    symmem_coll_reg_fini(comm);
    symmem_coll_workspace_fini(comm->coll);
    free(comm->coll);
    comm->coll = NULL;
}

symmem_coll_tuning_t *symmem_coll_tuning(symmem_comm_t comm) { return comm && comm->coll ? &comm->coll->tuning : NULL; }

int symmem_coll_probe_ce_figure(symmem_comm_t comm, double *ce_gbs)
{
    if (!comm || !comm->coll || !comm->coll->probed) return 0;
    if (ce_gbs) *ce_gbs = comm->coll->probe_ce_gbs;
    return 1;
}

int symmem_coll_probe_more(symmem_comm_t comm, double *rw_gbs, double *barrier_us)
{
    if (!comm || !comm->coll || !comm->coll->probed) return 0;
    if (rw_gbs) *rw_gbs = comm->coll->probe_rw_gbs;
    if (barrier_us) *barrier_us = comm->coll->probe_barrier_us;
    return 1;
}

double symmem_coll_predict_us(symmem_comm_t comm, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes, int floor)
{
    if (!comm || !comm->coll) return -1.0;
    const topo_cost_machine_t *m = &comm->coll->machine;
    return floor ? topo_cost_floor_us(m, kind, algo, bytes) : topo_cost_us(m, kind, algo, bytes);
}

int symmem_coll_model_memory(symmem_comm_t comm, int *host_memory, int *ranks_per_link)
{
    if (!comm || !comm->coll) return 0;
    if (host_memory) *host_memory = comm->coll->machine.host_memory;
    if (ranks_per_link) *ranks_per_link = comm->coll->machine.ranks_per_link;
    return 1;
}

int symmem_coll_probe_figures(symmem_comm_t comm, double *read_gbs, double *write_gbs)
{
    if (!comm || !comm->coll || !comm->coll->probed) return 0;
    if (read_gbs) *read_gbs = comm->coll->probe_read_gbs;
    if (write_gbs) *write_gbs = comm->coll->probe_write_gbs;
    return 1;
}
