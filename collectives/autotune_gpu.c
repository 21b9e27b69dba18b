/* The autotune at a communicator's init (autotune.h) and the declared sizes (symmem_tune_sizes): the decision
 * with every rank, the measurements (CUDA graphs of the collectives on a private stream, timed with events),
 * the save, the log.
 *
 * What is measured is the call as it will be made: bf16 sum, the input and output in the step's form
 * (symmem_form_t): a symmetric buffer of the communicator (in its placement) for a symmetric side, plain
 * cudaMalloc memory, as a framework's caching allocator has it, for an ordinary one; back-to-back operations
 * captured into one graph (a framework's decode step), timed as graph after graph on one stream once the
 * ranks are in step (time_graph), repeated until two medians agree; the slowest rank decides (autotune.c). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "base/log.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/autotune.h"
#include "collectives/coll_internal.h"

#define AT_TIMED 3 /* timed replays per candidate, back to back; the median counts */

typedef struct gpu_ctx {
    symmem_comm_t comm;
    const symmem_autotune_cfg_t *cfg;
    cudaStream_t stream;
    cudaEvent_t ev[AT_TIMED + 1]; /* ev[k] ends replay k (ev[0]: the lead-in) */
    symmem_buffer_t buf;
    char *in, *out;         /* this rank's halves of buf: the symmetric sides */
    char *ord_in, *ord_out; /* cudaMalloc memory: the ordinary sides */
    size_t half;
    double t0_ms;
    int warmed; /* the warm-up ran (before the first step's timing) */
} gpu_ctx_t;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double elapsed_ms(void *p) { return now_ms() - ((gpu_ctx_t *)p)->t0_ms; }

/* The call of one candidate: bf16 sum; all-reduce of bytes; reduce-scatter and all-gather of a whole buffer
 * of `bytes` (n shards, as the table counts them). count 0: too small for the rank count. */
static symmem_coll_call_t call_of(const gpu_ctx_t *g, const symmem_autotune_step_t *st, symmem_algo_t algo)
{
    const size_t elem_size = symmem_dtype_size(SYMMEM_BFLOAT16), n = (size_t)g->comm->nranks;
    symmem_coll_call_t c;
    memset(&c, 0, sizeof c);
    c.kind = (symmem_coll_kind_t)st->kind;
    c.send = (st->form & SYMMEM_FORM_SYMMETRIC_INPUT) ? g->in : g->ord_in;
    c.recv = (st->form & SYMMEM_FORM_SYMMETRIC_OUTPUT) ? g->out : g->ord_out;
    c.count = c.kind == SYMMEM_COLL_ALL_REDUCE ? st->bytes / elem_size : st->bytes / elem_size / n;
    c.dtype = SYMMEM_BFLOAT16;
    c.op = SYMMEM_OP_SUM;
    c.algo = algo;
    c.stream = g->stream;
    c.name = "the autotune's measurement";
    return c;
}

/* ops operations of the candidate captured into one graph on this rank's stream (thread-local capture: the
 * caller's own captures, if any, are not disturbed); NULL where it could not be made. */
static cudaGraphExec_t capture(gpu_ctx_t *g, const symmem_coll_call_t *c, int ops)
{
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (c->count == 0 || cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    symmem_status_t st = SYMMEM_OK;
    for (int k = 0; k < ops && st == SYMMEM_OK; k++) st = symmem_coll_run(g->comm, c);
    const cudaError_t e = cudaStreamEndCapture(g->stream, &graph);
    if (st == SYMMEM_OK && e == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) exec = NULL;
    /* uploaded now, so that the first launch (time_graph's lead-in) does not carry the upload */
    if (exec && cudaGraphUpload(exec, g->stream) != cudaSuccess) (void)cudaGetLastError();
    if (st != SYMMEM_OK) symmem_clear_error(); /* e.g. a workspace too small for this algorithm: not a candidate */
    if (graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return st == SYMMEM_OK && e == cudaSuccess ? exec : NULL;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The replays of one graph, each a time per operation in the state a graph of many runs in (symmem-bench's
 * graphs, a decode step's graph): a device barrier, an untimed lead-in replay, then AT_TIMED replays back to
 * back with an event after each; replay k's time runs from the event before it to its own, and the median
 * counts. What this keeps out (bench/NOTES.md, "The autotune's timing: barrier, lead-in and graph length"):
 * - The state of a lone operation. Per operation on the lab, the copy engine runs up to 27% faster in a
 *   graph of one than in graphs of eight or ten, and two-shot pull, which has no closing sync, up to 1.9x
 *   slower (consecutive operations overlap across ranks). How many a candidate's graph holds is the plan's
 *   (symmem_autotune_graph_ops).
 * - How far apart the ranks ended the lead-in: it lands in the first timed replay, and the median drops it.
 *   The barrier bounds it: every rank starts the lead-in within a flag's latency.
 * The median per operation, or -1. */
static double time_graph_once(gpu_ctx_t *g, cudaGraphExec_t exec, int ops)
{
    int ok = symmem_coll_enqueue_barrier(g->comm, g->stream, "the autotune's alignment") == SYMMEM_OK;
    if (!ok) symmem_clear_error();
    for (int k = 0; k <= AT_TIMED && ok; k++)
        ok = cudaGraphLaunch(exec, g->stream) == cudaSuccess && cudaEventRecord(g->ev[k], g->stream) == cudaSuccess;
    /* whatever was launched ends (a kernel whose peer never comes ends at the communicator's timeout) */
    if (cudaStreamSynchronize(g->stream) != cudaSuccess) ok = 0;
    double t[AT_TIMED];
    for (int k = 0; k < AT_TIMED && ok; k++) {
        float ms = 0.0f;
        ok = cudaEventElapsedTime(&ms, g->ev[k], g->ev[k + 1]) == cudaSuccess;
        t[k] = 1000.0 * (double)ms / ops;
    }
    (void)cudaGetLastError();
    if (!ok) return -1.0;
    qsort(t, AT_TIMED, sizeof t[0], cmp_double);
    return t[AT_TIMED / 2];
}

/* time_graph_once until two consecutive medians agree within cfg->agree (the steady state: a reading taken
 * while the GPU or the MPS server still warms up, or beside a passing hiccup, differs from the next), at most
 * cfg->max_rounds; the lower of the agreeing pair, else the median of the rounds. Every rank runs the same
 * number of rounds (each round starts with a device barrier, which a rank that stopped early would never
 * reach): a rank's wish to go on is agreed over the host before each further round. */
static double time_graph(gpu_ctx_t *g, cudaGraphExec_t exec, int ops)
{
    double r[16];
    const int max = g->cfg->max_rounds < 2 ? 2 : g->cfg->max_rounds > 16 ? 16 : g->cfg->max_rounds;
    int k = 0, pair_agrees = 0;
    for (;;) {
        r[k] = time_graph_once(g, exec, ops);
        pair_agrees = 0;
        if (k > 0 && r[k] > 0) {
            const double lo = r[k] < r[k - 1] ? r[k] : r[k - 1], hi = r[k] < r[k - 1] ? r[k - 1] : r[k];
            pair_agrees = hi <= lo * (1.0 + g->cfg->agree);
        }
        /* 0: this rank's last two medians agree; 1: it wants another round; 2: it failed (every rank stops) */
        int32_t state = r[k] < 0 ? 2 : pair_agrees ? 0 : 1, all[SYMMEM_MAX_RANKS];
        if (symmem_comm_allgather(g->comm, &state, all, sizeof state) != SYMMEM_OK) return symmem_clear_error(), -1.0;
        int more = 0, failed = 0;
        for (int q = 0; q < g->comm->nranks; q++) more |= all[q] == 1, failed |= all[q] == 2;
        k++;
        if (state == 2) return -1.0;
        if (failed || !more || k == max) break;
    }
    /* the last two agree (rounds may have run on for a peer): the lower of them; else the median of all */
    if (pair_agrees) return r[k - 1] < r[k - 2] ? r[k - 1] : r[k - 2];
    qsort(r, (size_t)k, sizeof r[0], cmp_double);
    return r[k / 2];
}

/* Before the first timing: collectives back to back for cfg->warmup_ms on every rank (the same count
 * everywhere: rank 0's clock decides through the allgather), so a cold GPU's clocks or a fresh MPS server do
 * not read slow into the first sizes. */
static void warm_up(gpu_ctx_t *g, cudaGraphExec_t exec)
{
    const double t0 = now_ms();
    for (int rounds = 0; rounds < 64; rounds++) {
        int ok = cudaGraphLaunch(exec, g->stream) == cudaSuccess && cudaStreamSynchronize(g->stream) == cudaSuccess;
        (void)cudaGetLastError();
        int32_t more = ok && now_ms() - t0 < g->cfg->warmup_ms, all[SYMMEM_MAX_RANKS];
        if (symmem_comm_allgather(g->comm, &more, all, sizeof more) != SYMMEM_OK) {
            symmem_clear_error();
            return;
        }
        if (!all[0]) return;
    }
}

/* One step on this rank: every candidate captured, the captures agreed with every rank (a candidate runs only
 * where every rank could make its graph), the agreed ones timed in order. -1 when this rank's communicator
 * failed (a kernel timed out: nothing more can run). */
static int measure(void *p, const symmem_autotune_step_t *st, double *us)
{
    gpu_ctx_t *g = p;
    cudaGraphExec_t exec[SYMMEM_ALGO_COUNT] = {0};
    uint32_t mine = 0, all[SYMMEM_MAX_RANKS];
    const int ops = st->ops > 0 ? st->ops : 1;
    for (int i = 0; i < st->ncand; i++) {
        const symmem_coll_call_t c = call_of(g, st, (symmem_algo_t)st->algo[i]);
        exec[i] = capture(g, &c, ops);
        if (exec[i]) mine |= 1u << i;
    }
    uint32_t agreed = mine;
    const symmem_status_t s = symmem_comm_allgather(g->comm, &mine, all, sizeof mine);
    for (int r = 0; r < g->comm->nranks && s == SYMMEM_OK; r++) agreed &= all[r];
    if (s == SYMMEM_OK && !g->warmed) {
        g->warmed = 1;
        for (int i = 0; i < st->ncand; i++)
            if (agreed >> i & 1u) {
                warm_up(g, exec[i]);
                break;
            }
    }
    for (int i = 0; i < st->ncand; i++) {
        if (s == SYMMEM_OK && (agreed >> i & 1u)) us[i] = time_graph(g, exec[i], ops);
        if (exec[i]) cudaGraphExecDestroy(exec[i]);
    }
    (void)cudaGetLastError();
    if (s != SYMMEM_OK) return symmem_clear_error(), -1;
    if (symmem_coll_poll_error(g->comm) != SYMMEM_OK) return -1;
    return 0;
}

/* A capture this init could disturb: one on the legacy stream's device (a blocking stream capturing makes
 * the legacy stream report it) or on this thread's per-thread stream. Captures of other threads in relaxed
 * or thread-local mode are not disturbed (ours is thread-local); one in global mode would make the
 * measurement's own calls fail, which leaves the model's table. */
static int capturing(void)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(cudaStreamLegacy, &cs);
    int active = e == cudaErrorStreamCaptureImplicit || (e == cudaSuccess && cs != cudaStreamCaptureStatusNone);
    cs = cudaStreamCaptureStatusNone;
    e = cudaStreamIsCapturing(cudaStreamPerThread, &cs);
    active |= e == cudaSuccess && cs != cudaStreamCaptureStatusNone;
    (void)cudaGetLastError();
    return active;
}

/* Stream, events, then the symmetric buffer (collective): 0, or -1 with everything released (agreed). */
static int ctx_open(gpu_ctx_t *g, const symmem_autotune_cfg_t *cfg)
{
    const size_t half = (cfg->max_bytes + 4095) / 4096 * 4096;
    /* the ranks of this process create their streams together: consecutive creations, distinct queues */
    if (symmem_comm_barrier(g->comm) != SYMMEM_OK) return -1;
    int32_t ok = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) == cudaSuccess, oks[SYMMEM_MAX_RANKS];
    for (int i = 0; i < AT_TIMED + 1 && ok; i++) ok = cudaEventCreate(&g->ev[i]) == cudaSuccess;
    (void)cudaGetLastError();
    if (symmem_comm_allgather(g->comm, &ok, oks, sizeof ok) != SYMMEM_OK) return -1;
    for (int r = 0; r < g->comm->nranks; r++)
        if (!oks[r]) return -1;
    /* the ordinary sides first, agreed: a rank without them must not leave the others in the collective alloc */
    ok = cudaMalloc((void **)&g->ord_in, 2 * half) == cudaSuccess;
    if (!ok) g->ord_in = NULL;
    (void)cudaGetLastError();
    if (symmem_comm_allgather(g->comm, &ok, oks, sizeof ok) != SYMMEM_OK) return -1;
    for (int r = 0; r < g->comm->nranks; r++)
        if (!oks[r]) return -1;
    g->ord_out = g->ord_in + half;
    if (symmem_alloc_create(g->comm, 2 * half, &g->buf) != SYMMEM_OK) return g->buf = NULL, -1;
    g->half = half;
    g->in = symmem_buffer_ptr(g->buf);
    g->out = g->in + half;
    /* defined contents (zeros: no Lamport sentinel, no NaN), on the stream the measurements use */
    if (cudaMemsetAsync(g->in, 0, 2 * half, g->stream) != cudaSuccess) (void)cudaGetLastError();
    if (cudaMemsetAsync(g->ord_in, 0, 2 * half, g->stream) != cudaSuccess) (void)cudaGetLastError();
    return 0;
}

static void ctx_close(gpu_ctx_t *g)
{
    if (g->stream) cudaStreamSynchronize(g->stream);
    if (g->buf) symmem_alloc_release(g->buf);
    if (g->ord_in) cudaFree(g->ord_in);
    for (int i = 0; i < AT_TIMED + 1; i++)
        if (g->ev[i]) cudaEventDestroy(g->ev[i]);
    if (g->stream) cudaStreamDestroy(g->stream);
    (void)cudaGetLastError();
}

/* ctx_open on every rank. Where it failed: a peer gone (the communicator's error state) is the status, init or
 * the call fails with it; anything else is a warning naming `who` and what stands instead (`then`), and
 * *skipped = 1. */
static symmem_status_t open_measuring(symmem_comm_t comm, gpu_ctx_t *g, const symmem_autotune_cfg_t *cfg,
                                      const char *who, const char *then, int *skipped)
{
    *skipped = 0;
    if (ctx_open(g, cfg) == 0) return SYMMEM_OK;
    ctx_close(g);
    SYMMEM_CHECK(symmem_coll_poll_error(comm));
    char msg[sizeof comm->async_error_msg];
    const symmem_status_t failed = symmem_comm_error(comm, msg, sizeof msg);
    if (failed != SYMMEM_OK) return symmem_set_error(failed, "%s", msg); /* a peer is gone */
    symmem_clear_error();
    SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "%s: could not set up its stream or buffers on every rank; %s", who, then);
    *skipped = 1;
    return SYMMEM_OK;
}

/* Rank 0 saves the agreed table where symmem-bench --tune does (its lock waited for within the init's
 * timeout); every rank says where. */
static void save(symmem_comm_t comm, struct symmem_coll *co, char *where, size_t len)
{
    char path[4096];
    int explicit_path = 0;
    if (comm->rank == 0) {
        symmem_coll_tune_save_cached(&co->tuning, comm->timeout_ms, where, len);
        return;
    }
    if (symmem_coll_tune_path(path, sizeof path, 0, &explicit_path) != 0)
        snprintf(where, len, "not saved by rank 0: no cache folder to use");
    else snprintf(where, len, "saved by rank 0 to %s", path);
}

static symmem_status_t run(symmem_comm_t comm, struct symmem_coll *co, const char *why)
{
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg);
    gpu_ctx_t g;
    memset(&g, 0, sizeof g);
    g.comm = comm;
    g.cfg = &cfg;
    g.t0_ms = now_ms();
    int skipped = 0;
    SYMMEM_CHECK(open_measuring(comm, &g, &cfg, "autotune", "the cost model's table", &skipped));
    if (skipped) {
        co->autotune_state = SYMMEM_AUTOTUNE_SKIPPED;
        return SYMMEM_OK;
    }
    int av[SYMMEM_ALGO_COUNT];
    symmem_coll_available(co, av);
    const symmem_autotune_ops_t ops = {measure, elapsed_ms, &g};
    symmem_autotune_result_t res;
    const topo_table_t model = co->tuning.defaults;
    symmem_status_t st = symmem_autotune_run(comm, &co->tuning, &co->machine, av, &ops, &cfg, &res);
    ctx_close(&g);
    SYMMEM_CHECK(st);
    /* a kernel that timed out put the communicator in its error state: init fails with it */
    SYMMEM_CHECK(symmem_coll_poll_error(comm));
    if (!res.agreed || res.steps == 0) {
        co->autotune_state = SYMMEM_AUTOTUNE_SKIPPED;
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "autotune: nothing agreed (%d of %d sizes measured%s); the cost model's table",
                    res.steps, res.planned, res.failed ? ", a rank could not measure" : "");
        return SYMMEM_OK;
    }
    co->autotune_state = SYMMEM_AUTOTUNE_MEASURED;
    char where[4200], tuned[4096], before[1024];
    save(comm, co, where, sizeof where);
    symmem_autotune_describe(&co->tuning.table, tuned, sizeof tuned);
    symmem_autotune_describe(&model, before, sizeof before);
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                "autotune (%s): measured %d of %d planned sizes and %d bisection sizes (ordinary and symmetric forms), %d "
                "candidates (%d skipped: over %.0fx the fastest at half the size) in %.0f ms (budget %.0f ms%s%s), "
                "the slowest rank deciding; %d sizes chose otherwise than the cost model; table [%s] %s: %s (the "
                "model's: %s)",
                why, res.steps - res.refined, res.planned, res.refined, res.measurements, res.skipped, cfg.skip_factor,
                res.elapsed_ms,
                cfg.budget_ms,
                res.budget_stop ? ", reached: larger sizes keep the model's choice" : "",
                res.failed ? ", stopped: a rank could not measure" : "", res.changed, co->tuning.fingerprint, where,
                tuned, before);
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_autotune_init(symmem_comm_t comm, struct symmem_coll *co)
{
    const symmem_autotune_wish_in_t in = {symmem_autotune_mode(), comm->nranks, co->tuning.env_algo != SYMMEM_ALGO_AUTO,
                                          co->tuning.table.nrules > 0, comm->nranks > 1 && capturing(), 0,
                                          !symmem_coll_private_streams_safe(comm, co)};
    symmem_autotune_state_t state;
    const char *why;
    const int32_t want = symmem_autotune_wish(&in, &state, &why);
    co->autotune_state = state;
    if (comm->nranks < 2) return SYMMEM_OK;
    /* every rank measures or none: the wish is agreed (SYMMEM_AUTOTUNE, a capture, differ per rank) */
    int32_t wants[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &want, wants, sizeof want));
    int other = -1;
    for (int r = 0; r < comm->nranks && other < 0; r++)
        if (wants[r] != want) other = r;
    if (want && other >= 0) {
        co->autotune_state = SYMMEM_AUTOTUNE_SKIPPED;
        SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "autotune: not measuring: rank %d does not (its SYMMEM_AUTOTUNE, tuning file or "
                                        "a graph capture there); table: %s",
                    other, co->tuning.table.nrules ? "the tuning file's" : "the cost model's");
        return SYMMEM_OK;
    }
    if (!want) {
        SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "autotune: not measuring: %s; table: %s", why,
                    co->tuning.env_algo != SYMMEM_ALGO_AUTO ? "none (SYMMEM_ALGO)"
                    : co->tuning.table.nrules               ? "the tuning file's"
                                                            : "the cost model's");
        return SYMMEM_OK;
    }
    return run(comm, co, why);
}

int symmem_coll_autotune_state(symmem_comm_t comm)
{
    return comm && comm->coll ? comm->coll->autotune_state : SYMMEM_AUTOTUNE_NOT_RUN;
}

void symmem_coll_autotune_host_note(symmem_comm_t comm)
{
    if (symmem_autotune_mode() == SYMMEM_AUTOTUNE_OFF || !comm || comm->nranks < 2) return;
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "autotune: not measuring: the host backend runs no GPU kernels to time");
}

/* ---- declared sizes (symmem_tune_sizes) -------------------------------------------------------------------- */
/* Whether this rank can measure now: 1, or 0 with *why. */
static int can_measure(symmem_comm_t comm, const struct symmem_coll *co, const char **why)
{
    if (symmem_autotune_mode() == SYMMEM_AUTOTUNE_OFF) return *why = "SYMMEM_AUTOTUNE=off", 0;
    if (co->tuning.env_algo != SYMMEM_ALGO_AUTO) return *why = "SYMMEM_ALGO overrides every table", 0;
    if (!symmem_coll_private_streams_safe(comm, co))
        return *why = "ranks of this process share the GPU with fewer hardware work queues than ranks (set "
                      "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts)",
               0;
    return 1;
}

static symmem_status_t tune_sizes(symmem_comm_t comm, const size_t *bytes, int nsizes, unsigned forms)
{
    struct symmem_coll *co = comm->coll;
    if (capturing())
        return symmem_set_error(SYMMEM_INVALID_USAGE, "symmem_tune_sizes: a CUDA graph capture is running on this "
                                                      "device; call it before capturing (it measures with graphs of "
                                                      "its own)");
    const size_t limit = symmem_comm_max_message_bytes(comm);
    size_t want[64];
    int n = 0;
    for (int i = 0; i < nsizes; i++)
        if (bytes[i] > 0 && bytes[i] <= limit) want[n++] = bytes[i];
    const char *why = "";
    int32_t mine = can_measure(comm, co, &why), all[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &mine, all, sizeof mine));
    for (int r = 0; r < comm->nranks; r++)
        if (!all[r]) {
            SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "symmem_tune_sizes: not measuring: %s", mine ? "another rank cannot" : why);
            return SYMMEM_OK;
        }
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg);
    cfg.max_bytes = 4096;
    for (int i = 0; i < n; i++)
        if (want[i] > cfg.max_bytes) cfg.max_bytes = want[i];
    gpu_ctx_t g;
    memset(&g, 0, sizeof g);
    g.comm = comm;
    g.cfg = &cfg;
    g.t0_ms = now_ms();
    int skipped = 0;
    SYMMEM_CHECK(open_measuring(comm, &g, &cfg, "symmem_tune_sizes", "the table is unchanged", &skipped));
    if (skipped) return SYMMEM_OK;
    int av[SYMMEM_ALGO_COUNT];
    symmem_coll_available(co, av);
    const symmem_autotune_ops_t ops = {measure, elapsed_ms, &g};
    symmem_autotune_result_t res;
    symmem_status_t st = symmem_autotune_pins(comm, &co->tuning, &co->machine, av, &ops, &cfg, want, n,
                                              forms ? forms : SYMMEM_FORM_BIT(SYMMEM_FORM_ORDINARY), &res);
    ctx_close(&g);
    SYMMEM_CHECK(st);
    SYMMEM_CHECK(symmem_coll_poll_error(comm));
    char where[4200] = "nothing new to save", tuned[4096];
    if (res.agreed && res.steps > 0) save(comm, co, where, sizeof where);
    symmem_autotune_describe(&co->tuning.table, tuned, sizeof tuned);
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL,
                "symmem_tune_sizes: %d of %d declared sizes x forms measured (the others held already or out of "
                "range) in %.0f ms%s%s; %s; table [%s]: %s",
                res.steps, nsizes, res.elapsed_ms, res.budget_stop ? ", the budget stopped it" : "",
                res.failed ? ", a rank could not measure" : "", where, co->tuning.fingerprint, tuned);
    return SYMMEM_OK;
}

symmem_status_t symmem_tune_sizes(symmem_comm_t comm, const size_t *bytes, int nsizes, unsigned forms)
{
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(comm, "symmem_tune_sizes", &e));
    symmem_status_t st = SYMMEM_OK;
    if (nsizes < 0 || nsizes > 64 || (nsizes > 0 && !bytes))
        st = symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_tune_sizes: %d sizes%s (0 to 64, and not NULL)", nsizes,
                              nsizes > 0 && !bytes ? " at NULL" : "");
    else if (forms & ~((1u << SYMMEM_FORM_COUNT) - 1u))
        st = symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                              "symmem_tune_sizes: forms 0x%x names no form (a mask of SYMMEM_FORM_BIT)", forms);
    else if (comm->backend == SYMMEM_BACKEND_CUDA && comm->nranks > 1) {
        st = symmem_coll_check_usable(comm, "symmem_tune_sizes");
        if (st == SYMMEM_OK) st = tune_sizes(comm, bytes, nsizes, forms);
    }
    symmem_entry_end(&e);
    return st;
}
