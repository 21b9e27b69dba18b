/* coll_timeout_graph: a timeout inside a CUDA-graph replay, where no call can return the error. Two
 * processes (SYMMEM_TIMEOUT_MS=2000); each captures one graph: fresh inputs (a fill kernel keyed by a
 * device counter), an all-reduce of 4096 floats, an all-reduce of 8193 bf16, an all-gather of 1000 floats
 * per rank, then the counter's increment. Both ranks replay it once and check every output against the
 * float64 reference. Then rank 1 stops replaying and rank 0 replays twice more. Rank 0 asserts that
 *  - its stream completes (every kernel gives up or returns at once; nothing hangs);
 *  - the error handler set with symmem_comm_set_error_handler is called once, on another thread, with
 *    SYMMEM_TIMEOUT and a message naming rank 1, without rank 0 asking for it;
 *  - in the replay that failed, the outputs of the operations after the one that timed out are NaN in
 *    every element, and in the replay after it every output is NaN (the documented defined state);
 *  - symmem_comm_get_async_error reports SYMMEM_TIMEOUT and the next eager call fails;
 *  - teardown is clean.
 * Optional argument: the algorithm of the first all-reduce (default auto). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "test_util.h"

typedef struct seen {
    int calls;
    symmem_status_t status;
    char msg[1024];
    pthread_t thread;
} seen_t;

static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_error(symmem_comm_t comm, symmem_status_t status, const char *message, void *ctx)
{
    (void)comm;
    seen_t *s = ctx;
    pthread_mutex_lock(&seen_mu);
    s->calls++;
    s->status = status;
    snprintf(s->msg, sizeof s->msg, "%s", message);
    s->thread = pthread_self();
    pthread_mutex_unlock(&seen_mu);
}

enum { OP_A = 0, OP_B, OP_C, NOPS };
static const symmem_dtype_t op_dt[NOPS] = {SYMMEM_FLOAT32, SYMMEM_BFLOAT16, SYMMEM_FLOAT32};
static const size_t op_count[NOPS] = {4096, 8193, 1000};
static const char *const op_name[NOPS] = {"all-reduce A (fp32)", "all-reduce B (bf16)", "all-gather C (fp32)"};

/* Elements of an output that are not NaN. */
static size_t not_nan(const void *h, symmem_dtype_t dt, size_t count)
{
    size_t bad = 0;
    for (size_t k = 0; k < count; k++) bad += !isnan(cc_load(h, dt, k));
    return bad;
}

/* The run's state: the three operations' buffers, the replay counter, the graph, a host copy. */
typedef struct tgraph {
    void *in[NOPS], *out[NOPS];
    size_t out_count[NOPS];
    uint32_t *iter;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    unsigned char *h;
} tgraph_t;

/* The buffers and the zeroed counter. 0, or 1 (main returns 1). */
static int allocate(cc_ctx_t *ctx, tgraph_t *tg)
{
    const int n = ctx->nranks;
    void **in = tg->in, **out = tg->out;
    size_t *out_count = tg->out_count;
    uint32_t *iter = NULL;
    for (int k = 0; k < NOPS; k++) {
        const size_t es = symmem_dtype_size(op_dt[k]);
        out_count[k] = op_count[k] * (k == OP_C ? (size_t)n : 1);
        CC_CHECK_CUDA(ctx, cudaMalloc(&in[k], op_count[k] * es));
        CC_CHECK_CUDA(ctx, cudaMalloc(&out[k], out_count[k] * es));
    }
    CC_CHECK_CUDA(ctx, cudaMalloc((void **)&iter, sizeof *iter));
    tg->iter = iter;
    CC_CHECK_CUDA(ctx, cc_rank_memset(&ctx->r[0], iter, 0, sizeof *iter));
    return 0;
}

/* Capture: fill, A, fill, B, fill, C, counter++; then instantiate. 0, or 1 (main returns 1). */
static int capture(cc_ctx_t *ctx, tgraph_t *tg, symmem_algo_t algo)
{
    cc_rank_t *R = &ctx->r[0];
    void *const *in = tg->in, *const *out = tg->out;
    uint32_t *iter = tg->iter;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    CC_CHECK_CUDA(ctx, cudaStreamBeginCapture(R->stream, cudaStreamCaptureModeThreadLocal));
    symmem_status_t st = SYMMEM_OK;
    for (int k = 0; k < NOPS && st == SYMMEM_OK; k++) {
        if (cc_dev_fill(in[k], op_dt[k], op_count[k], 0x7e57ull + (uint64_t)k, iter, R->rank, 0, R->stream) != cudaSuccess)
            st = SYMMEM_CUDA_ERROR;
        else if (k == OP_C)
            st = symmem_all_gather(R->comm, in[k], out[k], op_count[k], op_dt[k], SYMMEM_ALGO_AUTO, R->stream);
        else
            st = symmem_all_reduce(R->comm, in[k], out[k], op_count[k], op_dt[k], SYMMEM_OP_SUM,
                                   k == OP_A ? algo : SYMMEM_ALGO_AUTO, R->stream);
    }
    if (st == SYMMEM_OK && cc_dev_incr(iter, R->stream) != cudaSuccess) st = SYMMEM_CUDA_ERROR;
    CC_CHECK_CUDA(ctx, cudaStreamEndCapture(R->stream, &graph));
    tg->graph = graph;
    if (st != SYMMEM_OK) {
        cc_log(ctx, "FAIL: capture: %s: %s", symmem_status_name(st), symmem_last_error());
        cc_shm_abort(ctx->shm);
        return 1;
    }
    CC_CHECK_CUDA(ctx, cudaGraphInstantiate(&exec, graph, 0));
    tg->exec = exec;
    return 0;
}

/* Replay 0 on both ranks: correct results (*failures counts the wrong outputs); then the processes'
 * barrier. 0, or 1 (main returns 1). */
static int replay_correct(cc_ctx_t *ctx, tgraph_t *tg, int *failures)
{
    cc_rank_t *R = &ctx->r[0];
    const int n = ctx->nranks;
    void *const *out = tg->out;
    const size_t *out_count = tg->out_count;
    cudaGraphExec_t exec = tg->exec;
    unsigned char *h = malloc(out_count[OP_B] * 4 + out_count[OP_C] * 4 + 64);
    tg->h = h;
    CC_CHECK_CUDA(ctx, cudaGraphLaunch(exec, R->stream));
    CC_CHECK_CUDA(ctx, cudaStreamSynchronize(R->stream));
    for (int k = 0; k < NOPS; k++) {
        CC_CHECK_CUDA(ctx, cudaMemcpy(h, out[k], out_count[k] * symmem_dtype_size(op_dt[k]), cudaMemcpyDeviceToHost));
        cc_bad_t bad = {0, 0, 0, 0};
        const uint64_t seed = cc_iter_seed(0x7e57ull + (uint64_t)k, 0);
        const size_t wrong = k == OP_C ? cc_check_gather(h, op_dt[k], op_count[k], n, seed, &bad)
                                       : cc_check_reduce(h, op_dt[k], SYMMEM_OP_SUM, op_count[k], 0, n, seed, &bad);
        CC_EXPECT(ctx, *failures, !wrong, "replay 0, %s: %zu wrong (first at %zu: got %.9g want %.9g)", op_name[k],
                  wrong, bad.first, bad.got, bad.want);
    }
    if (cc_barrier(ctx) != 0) return 1;
    return 0;
}

/* Rank 0, replay 1 without rank 1: A times out, B and C start after the failure (NaN); the error handler
 * is called once, on another thread. *failures counts what differs. 0, or 1 (main returns 1). */
static int replay_timeout(cc_ctx_t *ctx, tgraph_t *tg, symmem_algo_t algo, seen_t *seen, int *failures)
{
    cc_rank_t *R = &ctx->r[0];
    void *const *out = tg->out;
    const size_t *out_count = tg->out_count;
    cudaGraphExec_t exec = tg->exec;
    unsigned char *h = tg->h;
    /* on the rank's stream: a cudaMemset on the legacy stream could land after the replay wrote */
    CC_CHECK_CUDA(ctx, cudaMemsetAsync(out[OP_B], 0, out_count[OP_B] * 2, R->stream));
    CC_CHECK_CUDA(ctx, cudaMemsetAsync(out[OP_C], 0, out_count[OP_C] * 4, R->stream));
    CC_CHECK_CUDA(ctx, cudaGraphLaunch(exec, R->stream));
    cudaError_t e = cudaStreamSynchronize(R->stream);
    cc_log(ctx, "replay 1 without rank 1 (%s): the stream completed: %s", symmem_algo_name(algo),
           cudaGetErrorString(e));
    if (e != cudaSuccess) (*failures)++;
    for (int k = OP_B; k < NOPS; k++) {
        CC_CHECK_CUDA(ctx, cudaMemcpy(h, out[k], out_count[k] * symmem_dtype_size(op_dt[k]), cudaMemcpyDeviceToHost));
        const size_t bad = not_nan(h, op_dt[k], out_count[k]);
        cc_log(ctx, "replay 1, %s after the timeout: %zu of %zu elements not NaN", op_name[k], bad, out_count[k]);
        if (bad) (*failures)++;
    }
    /* The handler runs on the watcher thread; allow it 10 s (it polls every 10 ms). */
    for (int t = 0; t < 1000; t++) {
        pthread_mutex_lock(&seen_mu);
        const int calls = seen->calls;
        pthread_mutex_unlock(&seen_mu);
        if (calls) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&seen_mu);
    cc_log(ctx, "error handler: called %d time(s), %s: \"%s\"", seen->calls, symmem_status_name(seen->status),
           seen->msg);
    CC_EXPECT(ctx, *failures, seen->calls == 1 && seen->status == SYMMEM_TIMEOUT && strstr(seen->msg, "rank 1"),
              "expected one call with SYMMEM_TIMEOUT naming rank 1");
    CC_EXPECT(ctx, *failures, !seen->calls || !pthread_equal(seen->thread, pthread_self()),
              "the handler ran on the application's thread");
    pthread_mutex_unlock(&seen_mu);
    return 0;
}

/* Rank 0, replay 2: every kernel starts after the failure: every output is NaN; the error is sticky and
 * the handler is not called again. *failures counts what differs. 0, or 1 (main returns 1). */
static int replay_after(cc_ctx_t *ctx, tgraph_t *tg, seen_t *seen, int *failures)
{
    cc_rank_t *R = &ctx->r[0];
    void *const *in = tg->in, *const *out = tg->out;
    const size_t *out_count = tg->out_count;
    cudaGraphExec_t exec = tg->exec;
    unsigned char *h = tg->h;
    for (int k = 0; k < NOPS; k++)
        CC_CHECK_CUDA(ctx, cudaMemsetAsync(out[k], 0, out_count[k] * symmem_dtype_size(op_dt[k]), R->stream));
    CC_CHECK_CUDA(ctx, cudaGraphLaunch(exec, R->stream));
    CC_CHECK_CUDA(ctx, cudaStreamSynchronize(R->stream));
    for (int k = 0; k < NOPS; k++) {
        CC_CHECK_CUDA(ctx, cudaMemcpy(h, out[k], out_count[k] * symmem_dtype_size(op_dt[k]), cudaMemcpyDeviceToHost));
        const size_t bad = not_nan(h, op_dt[k], out_count[k]);
        cc_log(ctx, "replay 2, %s: %zu of %zu elements not NaN", op_name[k], bad, out_count[k]);
        if (bad) (*failures)++;
    }
    char msg[1024];
    const symmem_status_t ae = cc_wait_async_error(R, msg, sizeof msg);
    CC_EXPECT(ctx, *failures, ae == SYMMEM_TIMEOUT, "symmem_comm_get_async_error: %s, expected SYMMEM_TIMEOUT",
              symmem_status_name(ae));
    const symmem_status_t st = symmem_all_reduce(R->comm, in[OP_A], out[OP_A], op_count[OP_A], SYMMEM_FLOAT32,
                                                 SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, R->stream);
    CC_EXPECT(ctx, *failures, st != SYMMEM_OK, "an eager call on the failed communicator succeeded");
    pthread_mutex_lock(&seen_mu);
    CC_EXPECT(ctx, *failures, seen->calls == 1, "the handler was called %d times", seen->calls);
    pthread_mutex_unlock(&seen_mu);
    return 0;
}

/* Free everything, destroy the communicator. 0, or 1 when symmem_comm_destroy failed (logged). */
static int teardown(cc_ctx_t *ctx, tgraph_t *tg)
{
    cc_rank_t *R = &ctx->r[0];
    cudaGraphExecDestroy(tg->exec);
    cudaGraphDestroy(tg->graph);
    for (int k = 0; k < NOPS; k++) {
        cudaFree(tg->in[k]);
        cudaFree(tg->out[k]);
    }
    cudaFree(tg->iter);
    free(tg->h);
    symmem_status_t ds = symmem_comm_destroy(R->comm);
    cudaStreamDestroy(R->stream);
    if (ds != SYMMEM_OK) {
        cc_log(ctx, "FAIL: symmem_comm_destroy: %s", symmem_last_error());
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const env[] = {"SYMMEM_TIMEOUT_MS=2000", NULL};
    cc_ctx_t ctx;
    int rc = 0;
    if (!cc_start(&argc, argv, "coll_timeout_graph", 2, 120, NULL, env, &ctx, &rc)) return rc;
    symmem_algo_t algo;
    if (!cc_pair_algo(&ctx, argc, argv, SYMMEM_ALGO_AUTO, &algo)) return 1;
    cc_rank_t *R = &ctx.r[0];
    seen_t seen;
    memset(&seen, 0, sizeof seen);
    if (R->rank == 0 && symmem_comm_set_error_handler(R->comm, on_error, &seen) != SYMMEM_OK) {
        cc_log(&ctx, "FAIL: symmem_comm_set_error_handler: %s", symmem_last_error());
        cc_shm_abort(ctx.shm);
        return 1;
    }
    tgraph_t tg;
    memset(&tg, 0, sizeof tg);
    int failures = 0;
    if (allocate(&ctx, &tg) != 0 || capture(&ctx, &tg, algo) != 0 || replay_correct(&ctx, &tg, &failures) != 0)
        return 1;
    if (R->rank == 0) {
        if (replay_timeout(&ctx, &tg, algo, &seen, &failures) != 0) return 1;
        if (replay_after(&ctx, &tg, &seen, &failures) != 0) return 1;
    }
    const uint64_t total = cc_sum_u64(&ctx, (uint64_t)failures);
    if (teardown(&ctx, &tg) != 0) return 1;
    if (R->rank == 0)
        cc_log(&ctx, "a timeout inside a graph replay: NaN outputs after it, the handler told, sticky error: %s",
               total ? "FAILED" : "ok");
    return total ? 1 : 0;
}
