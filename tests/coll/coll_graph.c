/* coll_graph: an all-reduce captured once in a CUDA graph and replayed many times (10,000 by default in
 * multi-process mode), for every algorithm. Each replay
 *   1. delays one rank (a spin kernel, rank = replay % nranks) so ranks arrive in every order,
 *   2. writes fresh inputs with a kernel whose values depend on a device-side replay counter,
 *   3. all-reduces them out of place from cudaMalloc memory: where the ranks are processes, with graph
 *      registration (on unless SYMMEM_GRAPH_REGISTER=0), every rank maps its peers' input and output at
 *      capture and the kernel works on them in place; otherwise the copy-in path,
 *   4. rewrites a symmetric buffer the same way and all-reduces it in place (zero copy, and the input is
 *      overwritten by the next replay while a slow peer may still be reading it),
 *   5. appends both outputs to a history indexed by the counter, then bumps the counter.
 * An epoch baked in at capture, a flag reused too early or a missing trailing barrier shows up as a wrong
 * history entry or a timeout. After the last replay every entry is checked against the float64 reference
 * of its own inputs, and the history must be bitwise equal across ranks. At the end each rank must have
 * mapped each peer's two cudaMalloc buffers exactly once over every algorithm's capture with graph registration,
 * none without it or as threads.
 * Usage: coll_graph [--mp N | --inproc N] [--replays R]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/param.h"
#include "harness.h"
#include "test_util.h"

#define COUNT 2053

typedef struct rank_state {
    uint32_t *iter;
    void *din, *dout;
    symmem_buffer_t sym;
    unsigned char *hist_a, *hist_b;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
} rank_state_t;

static int capture(cc_ctx_t *ctx, int i, rank_state_t *s, symmem_algo_t algo, symmem_dtype_t dt, uint64_t seed,
                   symmem_status_t *st_out)
{
    cc_rank_t *R = &ctx->r[i];
    const size_t bytes = COUNT * symmem_dtype_size(dt);
    void *sp = symmem_buffer_ptr(s->sym);
    symmem_status_t st = SYMMEM_OK;
    cudaSetDevice(R->device);
    CC_CHECK_CUDA(ctx, cudaStreamBeginCapture(R->stream, cudaStreamCaptureModeThreadLocal));
    cudaError_t e = cc_dev_spin(4000, s->iter, ctx->nranks, R->rank, R->stream);
    if (e == cudaSuccess) e = cc_dev_fill(s->din, dt, COUNT, seed, s->iter, R->rank, 0, R->stream);
    if (e == cudaSuccess)
        st = symmem_all_reduce(R->comm, s->din, s->dout, COUNT, dt, SYMMEM_OP_SUM, algo, R->stream);
    if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_record(s->hist_a, s->dout, bytes, s->iter, R->stream);
    if (e == cudaSuccess && st == SYMMEM_OK)
        e = cc_dev_fill(sp, dt, COUNT, seed ^ 0xabcdefull, s->iter, R->rank, 0, R->stream);
    if (e == cudaSuccess && st == SYMMEM_OK)
        st = symmem_all_reduce(R->comm, sp, sp, COUNT, dt, SYMMEM_OP_SUM, algo, R->stream);
    if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_record(s->hist_b, sp, bytes, s->iter, R->stream);
    if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_incr(s->iter, R->stream);
    cudaError_t e2 = cudaStreamEndCapture(R->stream, &s->graph);
    if (e == cudaSuccess) e = e2;
    *st_out = st;
    if (st != SYMMEM_OK) {
        cc_log(ctx, "FAIL: capturing symmem_all_reduce(%s): %s: %s", symmem_algo_name(algo), symmem_status_name(st),
               symmem_last_error());
        if (s->graph) cudaGraphDestroy(s->graph);
        s->graph = NULL;
        return 1;
    }
    CC_CHECK_CUDA(ctx, e);
    CC_CHECK_CUDA(ctx, cudaGraphInstantiate(&s->exec, s->graph, 0));
    return 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Capture and instantiate every local rank's graph (counter reset first), then line the ranks up. */
static int capture_all(cc_ctx_t *ctx, rank_state_t *S, symmem_algo_t algo, symmem_dtype_t dt, uint64_t seed,
                       int *fatal)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        CC_CHECK_CUDA(ctx, cudaMemsetAsync(S[i].iter, 0, sizeof(uint32_t), ctx->r[i].stream));
        symmem_status_t st = SYMMEM_OK;
        if (capture(ctx, i, &S[i], algo, dt, seed, &st) != 0) {
            *fatal = st == SYMMEM_OK; /* a CUDA failure leaves the process unusable */
            cc_shm_abort(ctx->shm);
            return 1;
        }
    }
    if (cc_sync(ctx) != cudaSuccess || cc_barrier(ctx) != 0) {
        *fatal = 1;
        return 1;
    }
    return 0;
}

/* `replays` launches of every local rank's graph, rank after rank; *seconds their wall time. */
static int replay_all(cc_ctx_t *ctx, rank_state_t *S, symmem_algo_t algo, int replays, double *seconds, int *fatal)
{
    const double t0 = now_s();
    for (int k = 0; k < replays; k++)
        for (int i = 0; i < ctx->nlocal; i++) {
            cudaSetDevice(ctx->r[i].device);
            CC_CHECK_CUDA(ctx, cudaGraphLaunch(S[i].exec, ctx->r[i].stream));
        }
    if (cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) {
        cc_log(ctx, "FAIL: %s: replays did not complete", symmem_algo_name(algo));
        cc_shm_abort(ctx->shm);
        *fatal = 1;
        return 1;
    }
    *seconds = now_s() - t0;
    return 0;
}

/* Local rank i's replay counter and both histories: every entry against the reference of its own inputs
 * (first local rank; the others through the hash). *hash: the histories' hash. Failures seen. */
static int check_rank_history(cc_ctx_t *ctx, rank_state_t *s, int i, symmem_algo_t algo, symmem_dtype_t dt,
                              uint64_t seed, int replays, unsigned char *hhist, uint64_t *hash)
{
    const size_t bytes = COUNT * symmem_dtype_size(dt);
    int failed = 0;
    cudaSetDevice(ctx->r[i].device);
    uint32_t it = 0;
    CC_CHECK_CUDA(ctx, cudaMemcpy(&it, s->iter, sizeof it, cudaMemcpyDeviceToHost));
    if ((int)it != replays) {
        cc_log(ctx, "FAIL: %s: rank %d's replay counter is %u after %d replays", symmem_algo_name(algo),
               ctx->r[i].rank, it, replays);
        failed = 1;
    }
    uint64_t h = 0;
    for (int which = 0; which < 2; which++) {
        CC_CHECK_CUDA(ctx, cudaMemcpy(hhist, which ? s->hist_b : s->hist_a, bytes * (size_t)replays,
                                   cudaMemcpyDeviceToHost));
        h ^= cc_hash(hhist, bytes * (size_t)replays) + (uint64_t)which;
        if (i > 0) continue; /* the other local ranks are compared bitwise through the hash */
        size_t bad_iters = 0;
        for (int k = 0; k < replays; k++) {
            uint64_t sd = cc_iter_seed(which ? seed ^ 0xabcdefull : seed, (uint64_t)k);
            cc_bad_t bad = {0, 0, 0, 0};
            if (cc_check_reduce(hhist + (size_t)k * bytes, dt, SYMMEM_OP_SUM, COUNT, 0, ctx->nranks, sd, &bad)) {
                if (bad_iters < 5)
                    cc_log(ctx, "FAIL: %s %s: replay %d: %zu of %d elements wrong (first at %zu: got %.9g "
                           "want %.9g)", symmem_algo_name(algo), which ? "zero-copy in place" : "copy-in",
                           k, bad.wrong, COUNT, bad.first, bad.got, bad.want);
                bad_iters++;
            }
        }
        failed |= bad_iters != 0;
    }
    *hash = h;
    return failed;
}

static int run_algo(cc_ctx_t *ctx, rank_state_t *S, symmem_algo_t algo, symmem_dtype_t dt, int replays,
                    unsigned char *hhist, int *fatal)
{
    const uint64_t seed = cc_mix64(0x67a9ull + (uint64_t)algo);
    const int n = ctx->nranks;
    int failed = 0;
    double seconds = 0;
    if (capture_all(ctx, S, algo, dt, seed, fatal) != 0) return 1;
    if (replay_all(ctx, S, algo, replays, &seconds, fatal) != 0) return 1;
    uint64_t h_local[CC_MAX_RANKS] = {0}, h_all[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++)
        failed |= check_rank_history(ctx, &S[i], i, algo, dt, seed, replays, hhist, &h_local[i]);
    if (cc_allgather_u64(ctx, h_local, h_all) != 0) {
        *fatal = 1;
        return 1;
    }
    for (int r = 1; r < n; r++)
        if (h_all[r] != h_all[0]) {
            if (cc_is_root(ctx)) cc_log(ctx, "FAIL: %s: rank %d's history differs bitwise from rank 0's", symmem_algo_name(algo), r);
            failed = 1;
            break;
        }
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaGraphExecDestroy(S[i].exec);
        cudaGraphDestroy(S[i].graph);
        S[i].exec = NULL;
        S[i].graph = NULL;
    }
    failed = cc_sum_u64(ctx, (uint64_t)failed) != 0;
    if (cc_is_root(ctx))
        cc_log(ctx, "%-15s %-8s %d replays x 2 all-reduces of %d elements: %s (%.1f us per replay)",
               symmem_algo_name(algo), symmem_dtype_name(dt), replays, COUNT, failed ? "FAILED" : "ok",
               1e6 * seconds / replays);
    return failed;
}


/* One case per algorithm (dtype cycling with it), on the state shared by the cases. */
typedef struct graph_run {
    rank_state_t *S;
    int replays;
    unsigned char *hhist;
} graph_run_t;

static int case_algo(cc_ctx_t *ctx, void *arg, int algo, int *fatal)
{
    graph_run_t *g = arg;
    return run_algo(ctx, g->S, (symmem_algo_t)algo, (symmem_dtype_t)(algo % SYMMEM_DTYPE_COUNT), g->replays,
                    g->hhist, fatal);
}

int main(int argc, char **argv)
{
    cc_ctx_t ctx;
    int rc = 0;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    opts.timeout_ms = 15000;
    if (!cc_start(&argc, argv, "coll_graph", 2, 290, &opts, NULL, &ctx, &rc)) return rc;
    int replays = ctx.multiproc ? 10000 : 1000;
    for (int a = 1; a + 1 < argc; a++)
        if (!strcmp(argv[a], "--replays")) replays = atoi(argv[a + 1]);
    if (replays < 1) replays = 1;

    rank_state_t S[CC_MAX_RANKS];
    memset(S, 0, sizeof S);
    symmem_buffer_t sym[CC_MAX_RANKS];
    const size_t max_bytes = COUNT * 4;
    if (cc_alloc(&ctx, max_bytes, sym) != SYMMEM_OK) {
        cc_shm_abort(ctx.shm);
        return 1;
    }
    for (int i = 0; i < ctx.nlocal; i++) {
        S[i].sym = sym[i];
        cudaSetDevice(ctx.r[i].device);
        CC_CHECK_CUDA(&ctx, cudaMalloc((void **)&S[i].iter, sizeof(uint32_t)));
        CC_CHECK_CUDA(&ctx, cudaMalloc(&S[i].din, max_bytes));
        CC_CHECK_CUDA(&ctx, cudaMalloc(&S[i].dout, max_bytes));
        CC_CHECK_CUDA(&ctx, cudaMalloc((void **)&S[i].hist_a, max_bytes * (size_t)replays));
        CC_CHECK_CUDA(&ctx, cudaMalloc((void **)&S[i].hist_b, max_bytes * (size_t)replays));
    }
    unsigned char *hhist = malloc(max_bytes * (size_t)replays);
    if (!hhist) return 1;
    cc_case_t cases[SYMMEM_ALGO_COUNT];
    int ncases = 0;
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++)
        if (cc_algo_known(a)) cases[ncases++] = (cc_case_t){symmem_algo_name((symmem_algo_t)a), case_algo, a};
    graph_run_t run = {S, replays, hhist};
    rc = cc_run_cases(&ctx, cases, ncases, &run);
    free(hhist);
    /* graph registration (SYMMEM_GRAPH_REGISTER, as the library reads it): on for processes with device
     * buffers; each peer's two allocations mapped once */
    const int reg_on = ctx.multiproc && ctx.nlocal == 1 && symmem_param_int(SYMMEM_PARAM_GRAPH_REGISTER) != 0 &&
                       symmem_buffer_placement(S[0].sym) == SYMMEM_PLACEMENT_DEVICE;
    for (int i = 0; !ctx.fatal && i < ctx.nlocal; i++) {
        const size_t want = reg_on ? 2 * (size_t)(ctx.nranks - 1) : 0,
                     got = symmem_comm_graph_mappings(ctx.r[i].comm);
        if (got != want) {
            cc_log(&ctx, "FAIL: rank %d mapped %zu peer allocations for its captured calls on cudaMalloc memory, "
                   "want %zu (%s)", ctx.r[i].rank, got, want,
                   reg_on ? "processes: each peer's input and output, once" : "no graph registration here");
            rc = 1;
        }
    }
    if (!ctx.fatal) {
        cc_barrier(&ctx);
        cc_free(&ctx, sym);
    }
    /* the peers' mappings of din and dout close at their communicators' destroy: free them only after every
     * process destroyed its own (CUDA leaves freeing an allocation an importer still maps undefined) */
    cc_finish(&ctx);
    if (!ctx.fatal) cc_barrier(&ctx);
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        cudaFree(S[i].iter);
        cudaFree(S[i].din);
        cudaFree(S[i].dout);
        cudaFree(S[i].hist_a);
        cudaFree(S[i].hist_b);
    }
    if (cc_is_root(&ctx))
        cc_log(&ctx, "checked %d replays of a captured all-reduce (copy-in and zero-copy, inputs rewritten by a "
               "captured kernel) per algorithm: %s", replays, rc ? "FAILED" : "every algorithm passed");
    return rc;
}
