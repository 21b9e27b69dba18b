/* coll_wire: the compressed-wire all-reduce (SYMMEM_ALGO_WIRE_INT8, collectives/wire.h) on the GPU, at any rank
 * count (as processes or threads), from ordinary (cudaMalloc) buffers. Cases:
 *  - data: bf16 and fp16 x normal, heavy-tailed and TP-forward data (tests/wire_model.h) x counts (odd ones;
 *    several rounds where the workspace is small), in place and out of place. Every rank's bytes are identical
 *    (hashes across processes); the result is within the documented bound of the float64 reference
 *    (|err_i| <= c W_i + a); and it is bit for bit what the CPU model of the kernel computes from the same
 *    inputs with the plan the library reports (symmem_coll_wire_describe). The root prints the error figures
 *    of the wire and, from the same inputs, of the exact algorithm AUTO runs (docs/collectives.md's table).
 *  - graph: the wire all-reduce captured once in a CUDA graph with a device-side counter (fresh inputs every
 *    replay, one rank delayed in turn, out of place and in place) and replayed; every replay's output is the
 *    model's for its own inputs, on every rank: epochs advance on the device.
 *  - threshold: below SYMMEM_WIRE_MIN_BYTES the call is the exact algorithm AUTO runs, bit for bit; at it, the
 *    wire (the library says so).
 *  - refusals: float32, max, reduce_scatter with the wire are SYMMEM_INVALID_ARGUMENT naming the reason, on every
 *    rank alike, with nothing launched (the next call works).
 * "timeout" instead (2 processes or more): rank 1 never calls; every other rank's kernel gives up after the
 * timeout naming rank 1, its output is NaN, the error is sticky, teardown is clean.
 * Usage: coll_wire [--mp N | --inproc N] [--lean] [--replays R] [timeout]
 * ctest sets SYMMEM_WIRE_MIN_BYTES=64K, so that 2-MiB messages take the wire and the threshold case is quick. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/param.h"
#include "harness.h"
#include "test_util.h"
#include "wire_model.h"

#define ALGO SYMMEM_ALGO_WIRE_INT8
#define GRAPH_COUNT 300007

typedef struct wire_state {
    int lean, replays;
    size_t maxcount;
    void *din[CC_MAX_RANKS], *dout[CC_MAX_RANKS], *dexact[CC_MAX_RANKS];
    uint16_t *in[CC_MAX_RANKS];    /* host: every rank's input (root), or the local ranks' (others) */
    uint16_t *model[CC_MAX_RANKS]; /* root: the model's output of every rank */
    uint16_t *got, *exact;         /* one rank's output of the wire and of AUTO */
} wire_state_t;

static int is_local(const cc_ctx_t *ctx, int rank, int *i)
{
    for (int k = 0; k < ctx->nlocal; k++)
        if (ctx->r[k].rank == rank) return *i = k, 1;
    return 0;
}

/* The model's plan from what the library says it runs (the same on every rank). 0, or 1 (logged). Only the
 * root asks, between the ranks' exchanges: callers count a failure, never return past an exchange. */
static int describe(cc_ctx_t *ctx, size_t count, symmem_dtype_t dt, wire_model_t *m, int *quantizations,
                    uint32_t *group)
{
    symmem_wire_desc_t d;
    const int r = symmem_coll_wire_describe(ctx->r[0].comm, count, dt, &d);
    CC_CHECK(ctx, r == 1);
    m->n = ctx->nranks, m->dt = dt, m->count = count, m->stride = d.stride, m->segp = d.segp, m->rounds = d.rounds;
    m->lanes = d.lanes, m->split = d.split;
    *quantizations = d.quantizations;
    *group = d.group;
    return 0;
}

/* ---- data ------------------------------------------------------------------------------------------------- */
typedef struct data_case {
    symmem_dtype_t dt;
    int kind;
    size_t count;
    int in_place;
    uint64_t seed;
} data_case_t;

static int data_one(cc_ctx_t *ctx, wire_state_t *S, const data_case_t *c, int *fatal)
{
    const int n = ctx->nranks, root = cc_is_root(ctx);
    const size_t bytes = c->count * 2;
    char name[160];
    snprintf(name, sizeof name, "%s %s count %zu%s", symmem_dtype_name(c->dt), wm_kind_name[c->kind], c->count,
             c->in_place ? " in place" : "");
    /* inputs: every rank's on the root (the reference and the model), the local ones elsewhere */
    for (int r = 0; r < n; r++) {
        int i;
        if (root || is_local(ctx, r, &i)) wm_fill(c->kind, c->dt, c->seed, r, n, c->count, S->in[r]);
    }
    void *out[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        out[i] = c->in_place ? S->din[i] : S->dout[i];
        CC_CHECK_CUDA(ctx, cc_rank_upload(R, S->din[i], S->in[R->rank], bytes));
        CC_CHECK_CUDA(ctx, cc_rank_upload(R, S->dexact[i], S->in[R->rank], bytes));
        if (!c->in_place) CC_CHECK_CUDA(ctx, cc_rank_memset(R, S->dout[i], 0xff, bytes));
    }
    uint64_t st_l[CC_MAX_RANKS], st_a[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        symmem_status_t st = symmem_all_reduce(R->comm, S->din[i], out[i], c->count, c->dt, SYMMEM_OP_SUM, ALGO,
                                               R->stream);
        if (st == SYMMEM_OK) /* the exact algorithm on the same inputs, in place, for the error table */
            st = symmem_all_reduce(R->comm, S->dexact[i], S->dexact[i], c->count, c->dt, SYMMEM_OP_SUM,
                                   SYMMEM_ALGO_AUTO, R->stream);
        st_l[i] = (uint64_t)st;
        if (st != SYMMEM_OK) cc_log(ctx, "FAIL: %s: %s: %s", name, symmem_status_name(st), symmem_last_error());
    }
    if (cc_allgather_u64(ctx, st_l, st_a) != 0) return *fatal = 1, 1;
    for (int r = 0; r < n; r++)
        if (st_a[r] != SYMMEM_OK) return *fatal = 1, 1;
    if (cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) {
        cc_shm_abort(ctx->shm);
        return *fatal = 1, 1;
    }
    uint64_t h_l[CC_MAX_RANKS], h_a[CC_MAX_RANKS];
    int failures = 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        CC_CHECK_CUDA(ctx, cudaMemcpy(S->got, out[i], bytes, cudaMemcpyDeviceToHost));
        h_l[i] = cc_hash(S->got, bytes);
        if (!root || i > 0) continue;
        CC_CHECK_CUDA(ctx, cudaMemcpy(S->exact, S->dexact[i], bytes, cudaMemcpyDeviceToHost));
        wire_model_t m;
        int quantizations;
        uint32_t group;
        if (describe(ctx, c->count, c->dt, &m, &quantizations, &group) != 0 ||
            wire_model_run(&m, (const uint16_t *const *)S->in, S->model) != 0) {
            failures++;
            continue;
        }
        const wm_err_t e = wm_error((const uint16_t *const *)S->in, n, c->dt, c->count, group, quantizations, S->got);
        const wm_err_t x = wm_error((const uint16_t *const *)S->in, n, c->dt, c->count, group, quantizations, S->exact);
        size_t differ = 0, first = 0;
        for (size_t k = 0; k < c->count; k++)
            if (S->got[k] != S->model[0][k] &&
                !(isnan(wm_to_f(c->dt, S->got[k])) && isnan(wm_to_f(c->dt, S->model[0][k]))))
                if (differ++ == 0) first = k;
        CC_EXPECT(ctx, failures, differ == 0,
                  "%s: %zu elements differ from the CPU model, the first at %zu: %g, model %g", name, differ, first,
                  wm_to_f(c->dt, S->got[first]), wm_to_f(c->dt, S->model[0][first]));
        CC_EXPECT(ctx, failures, e.nonfinite == 0 && e.max_over_bound <= 1.0,
                  "%s: %llu non-finite results, error %.3f of the bound at element %llu", name,
                  (unsigned long long)e.nonfinite, e.max_over_bound, (unsigned long long)e.worst);
        cc_log(ctx, "error %d ranks %s (%u rounds, %d islands, G %u): wire mean rel %.3e max rel %.3e max |err|/W %.5f "
               "(c %.4f, %.2f of the bound); exact (AUTO) mean rel %.3e max rel %.3e",
               n, name, (unsigned)m.rounds, m.split.count, group, e.mean_rel, e.max_rel, e.max_scaled,
               symmem_wire_bound_c(c->dt, quantizations), e.max_over_bound, x.mean_rel, x.max_rel);
    }
    if (cc_allgather_u64(ctx, h_l, h_a) != 0) return *fatal = 1, 1;
    for (int r = 1; r < n; r++)
        CC_EXPECT(ctx, failures, h_a[r] == h_a[0], "%s: rank %d differs bitwise from rank 0", name, r);
    return failures;
}

static int case_data(cc_ctx_t *ctx, void *arg, int dti, int *fatal)
{
    wire_state_t *S = arg;
    const symmem_dtype_t dt = dti ? SYMMEM_FLOAT16 : SYMMEM_BFLOAT16;
    /* 2 MiB; an odd count (partial packs, groups and shards); the TP forward shape (rows of 7168) */
    const size_t tp_rows = S->lean || ctx->nranks > 8 ? 256 : 1024;
    const size_t counts[3] = {(size_t)1 << 20, S->lean ? 0 : 2999999, tp_rows * WM_ROW};
    int failures = 0;
    for (int kind = 0; kind < WM_KINDS && !*fatal; kind++)
        for (int k = 0; k < 3 && !*fatal; k++) {
            if (!counts[k] || (k == 2) != (kind == WM_TP)) continue; /* the TP data at its shape only */
            const data_case_t c = {dt, kind, counts[k], (kind + k + dti) % 2,
                                   0xd47aull + (uint64_t)(dti * 16 + kind * 4 + k)};
            failures += data_one(ctx, S, &c, fatal);
        }
    return failures;
}

/* ---- graph ----------------------------------------------------------------------------------------------- */
typedef struct graph_rank {
    uint32_t *iter;
    void *io;
    unsigned char *hist_a, *hist_b;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
} graph_rank_t;

static int case_graph(cc_ctx_t *ctx, void *arg, int param, int *fatal)
{
    wire_state_t *S = arg;
    (void)param;
    const int n = ctx->nranks, replays = S->replays;
    const symmem_dtype_t dt = SYMMEM_BFLOAT16;
    const size_t count = GRAPH_COUNT, bytes = count * 2;
    const uint64_t seed = 0x6a4b9ull;
    graph_rank_t G[CC_MAX_RANKS];
    memset(G, 0, sizeof G);
    int failures = 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        CC_CHECK_CUDA(ctx, cudaMalloc((void **)&G[i].iter, sizeof(uint32_t)));
        CC_CHECK_CUDA(ctx, cudaMalloc(&G[i].io, bytes));
        CC_CHECK_CUDA(ctx, cudaMalloc((void **)&G[i].hist_a, bytes * (size_t)replays));
        CC_CHECK_CUDA(ctx, cudaMalloc((void **)&G[i].hist_b, bytes * (size_t)replays));
        CC_CHECK_CUDA(ctx, cc_rank_memset(R, G[i].iter, 0, sizeof(uint32_t)));
        /* one rank delayed in turn; fresh inputs; out of place into dout; fresh inputs; in place; histories */
        CC_CHECK_CUDA(ctx, cudaStreamBeginCapture(R->stream, cudaStreamCaptureModeThreadLocal));
        cudaError_t e = cc_dev_spin(20000, G[i].iter, n, R->rank, R->stream);
        symmem_status_t st = SYMMEM_OK;
        if (e == cudaSuccess) e = cc_dev_fill(S->din[i], dt, count, seed, G[i].iter, R->rank, 0, R->stream);
        if (e == cudaSuccess)
            st = symmem_all_reduce(R->comm, S->din[i], S->dout[i], count, dt, SYMMEM_OP_SUM, ALGO, R->stream);
        if (e == cudaSuccess && st == SYMMEM_OK)
            e = cc_dev_record(G[i].hist_a, S->dout[i], bytes, G[i].iter, R->stream);
        if (e == cudaSuccess && st == SYMMEM_OK)
            e = cc_dev_fill(G[i].io, dt, count, seed ^ 0x1234ull, G[i].iter, R->rank, 0, R->stream);
        if (e == cudaSuccess && st == SYMMEM_OK)
            st = symmem_all_reduce(R->comm, G[i].io, G[i].io, count, dt, SYMMEM_OP_SUM, ALGO, R->stream);
        if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_record(G[i].hist_b, G[i].io, bytes, G[i].iter, R->stream);
        if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_incr(G[i].iter, R->stream);
        const cudaError_t e2 = cudaStreamEndCapture(R->stream, &G[i].graph);
        if (st != SYMMEM_OK) {
            cc_log(ctx, "FAIL: capturing the wire all-reduce: %s: %s", symmem_status_name(st), symmem_last_error());
            cc_shm_abort(ctx->shm);
            return *fatal = 1, 1;
        }
        CC_CHECK_CUDA(ctx, e);
        CC_CHECK_CUDA(ctx, e2);
        CC_CHECK_CUDA(ctx, cudaGraphInstantiate(&G[i].exec, G[i].graph, 0));
    }
    if (cc_sync(ctx) != cudaSuccess || cc_barrier(ctx) != 0) return *fatal = 1, 1;
    for (int k = 0; k < replays; k++)
        for (int i = 0; i < ctx->nlocal; i++) {
            cudaSetDevice(ctx->r[i].device);
            CC_CHECK_CUDA(ctx, cudaGraphLaunch(G[i].exec, ctx->r[i].stream));
        }
    if (cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) {
        cc_log(ctx, "FAIL: the replays did not complete");
        cc_shm_abort(ctx->shm);
        return *fatal = 1, 1;
    }
    /* every rank hashes its histories; the root checks its first local rank's against the model */
    wire_model_t m;
    int quantizations = 0;
    uint32_t group = 0;
    const int have_model = cc_is_root(ctx) && describe(ctx, count, dt, &m, &quantizations, &group) == 0;
    if (cc_is_root(ctx) && !have_model) failures++;
    uint64_t h_l[CC_MAX_RANKS], h_a[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        uint64_t h = 0;
        for (int k = 0; k < replays; k++)
            for (int which = 0; which < 2; which++) {
                CC_CHECK_CUDA(ctx, cudaMemcpy(S->got, (which ? G[i].hist_b : G[i].hist_a) + (size_t)k * bytes, bytes,
                                              cudaMemcpyDeviceToHost));
                h = h * 31 + cc_hash(S->got, bytes);
                if (!have_model || i > 0) continue;
                const uint64_t s = cc_iter_seed(which ? seed ^ 0x1234ull : seed, (uint64_t)k);
                for (int r = 0; r < n; r++)
                    for (size_t x = 0; x < count; x++) S->in[r][x] = cc_float_to_bf16(cc_value(s, r, x, dt));
                const int same = wire_model_run(&m, (const uint16_t *const *)S->in, S->model) == 0 &&
                                 memcmp(S->got, S->model[0], bytes) == 0;
                CC_EXPECT(ctx, failures, same, "replay %d, %s: not the model's result for the replay's inputs", k,
                          which ? "in place" : "out of place");
                if (k == replays - 1 && which == 1) {
                    const wm_err_t e = wm_error((const uint16_t *const *)S->in, n, dt, count, group, quantizations,
                                                S->got);
                    CC_EXPECT(ctx, failures, e.max_over_bound <= 1.0, "last replay: %.3f of the bound",
                              e.max_over_bound);
                }
            }
        h_l[i] = h;
    }
    if (cc_allgather_u64(ctx, h_l, h_a) != 0) return *fatal = 1, 1;
    for (int r = 1; r < n; r++) CC_EXPECT(ctx, failures, h_a[r] == h_a[0], "graph: rank %d's histories differ", r);
    if (cc_is_root(ctx)) cc_log(ctx, "graph: %d replays of two wire all-reduces of %zu bf16 checked", replays, count);
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaGraphExecDestroy(G[i].exec);
        cudaGraphDestroy(G[i].graph);
        cudaFree(G[i].iter), cudaFree(G[i].io), cudaFree(G[i].hist_a), cudaFree(G[i].hist_b);
    }
    return failures;
}

/* ---- threshold and refusals ----------------------------------------------------------------------------------- */
static int case_threshold(cc_ctx_t *ctx, void *arg, int param, int *fatal)
{
    wire_state_t *S = arg;
    (void)param;
    const size_t min_bytes = symmem_param_size(SYMMEM_PARAM_WIRE_MIN_BYTES);
    int failures = 0;
    CC_CHECK(ctx, min_bytes >= 64 && min_bytes / 2 <= S->maxcount);
    const size_t below = min_bytes / 2 - 1, at = min_bytes / 2;
    symmem_wire_desc_t d;
    CC_CHECK(ctx, symmem_coll_wire_describe(ctx->r[0].comm, below, SYMMEM_BFLOAT16, &d) == 0);
    CC_CHECK(ctx, symmem_coll_wire_describe(ctx->r[0].comm, at, SYMMEM_BFLOAT16, &d) == 1);
    /* below: the wire call and AUTO's on the same inputs give the same bytes */
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        wm_fill(WM_NORMAL, SYMMEM_BFLOAT16, 99, R->rank, ctx->nranks, below, S->got);
        CC_CHECK_CUDA(ctx, cc_rank_upload(R, S->din[i], S->got, below * 2));
        CC_CHECK_CUDA(ctx, cc_rank_upload(R, S->dexact[i], S->got, below * 2));
    }
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        if (symmem_all_reduce(R->comm, S->din[i], S->dout[i], below, SYMMEM_BFLOAT16, SYMMEM_OP_SUM, ALGO, R->stream) !=
                SYMMEM_OK ||
            symmem_all_reduce(R->comm, S->dexact[i], S->dexact[i], below, SYMMEM_BFLOAT16, SYMMEM_OP_SUM,
                              SYMMEM_ALGO_AUTO, R->stream) != SYMMEM_OK) {
            cc_log(ctx, "FAIL: below the threshold: %s", symmem_last_error());
            cc_shm_abort(ctx->shm);
            return *fatal = 1, 1;
        }
    }
    if (cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) return *fatal = 1, 1;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        CC_CHECK_CUDA(ctx, cudaMemcpy(S->got, S->dout[i], below * 2, cudaMemcpyDeviceToHost));
        CC_CHECK_CUDA(ctx, cudaMemcpy(S->exact, S->dexact[i], below * 2, cudaMemcpyDeviceToHost));
        CC_EXPECT(ctx, failures, memcmp(S->got, S->exact, below * 2) == 0,
                  "rank %d: %zu bytes with the wire are not the exact algorithm's result", ctx->r[i].rank, below * 2);
    }
    return failures;
}

static int case_refusals(cc_ctx_t *ctx, void *arg, int param, int *fatal)
{
    wire_state_t *S = arg;
    (void)param;
    (void)fatal;
    int failures = 0;
    const size_t count = (size_t)1 << 18;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        symmem_status_t st = symmem_all_reduce(R->comm, S->din[i], S->dout[i], count / 2, SYMMEM_FLOAT32, SYMMEM_OP_SUM,
                                               ALGO, R->stream);
        CC_EXPECT(ctx, failures, st == SYMMEM_INVALID_ARGUMENT && strstr(symmem_last_error(), "bfloat16 and float16"),
                  "float32: %s: %s", symmem_status_name(st), symmem_last_error());
        st = symmem_all_reduce(R->comm, S->din[i], S->dout[i], count, SYMMEM_BFLOAT16, SYMMEM_OP_MAX, ALGO, R->stream);
        CC_EXPECT(ctx, failures, st == SYMMEM_INVALID_ARGUMENT && strstr(symmem_last_error(), "sum only"),
                  "max: %s: %s", symmem_status_name(st), symmem_last_error());
        st = symmem_reduce_scatter(R->comm, S->din[i], S->dout[i], count / (size_t)ctx->nranks, SYMMEM_BFLOAT16,
                                   SYMMEM_OP_SUM, ALGO, R->stream);
        CC_EXPECT(ctx, failures, st == SYMMEM_INVALID_ARGUMENT && strstr(symmem_last_error(), "all_reduce only"),
                  "reduce_scatter: %s: %s", symmem_status_name(st), symmem_last_error());
        CC_EXPECT(ctx, failures, symmem_comm_get_async_error(R->comm) == SYMMEM_OK, "the refusals left an error");
    }
    /* nothing was launched: a wire call right after works on every rank */
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        CC_CHECK_CUDA(ctx, cc_rank_memset(R, S->din[i], 0, count * 2));
        CC_CHECK_OK(ctx, symmem_all_reduce(R->comm, S->din[i], S->dout[i], count, SYMMEM_BFLOAT16, SYMMEM_OP_SUM, ALGO,
                                           R->stream));
    }
    if (cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) return *fatal = 1, 1;
    return failures;
}

/* ---- timeout ------------------------------------------------------------------------------------------------ */
static int run_timeout(cc_ctx_t *ctx, wire_state_t *S)
{
    const size_t count = (size_t)1 << 20;
    const int missing = 1;
    int failures = 0;
    for (int i = 0; i < ctx->nlocal; i++) CC_CHECK_CUDA(ctx, cc_rank_memset(&ctx->r[i], S->din[i], 0x3c, count * 2));
    if (cc_barrier(ctx) != 0) return 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        if (R->rank == missing) continue;
        cudaSetDevice(R->device);
        CC_EXPECT(ctx, failures,
                  symmem_all_reduce(R->comm, S->din[i], S->dout[i], count, SYMMEM_BFLOAT16, SYMMEM_OP_SUM, ALGO,
                                    R->stream) == SYMMEM_OK,
                  "rank %d: the call did not enqueue: %s", R->rank, symmem_last_error());
    }
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        if (R->rank == missing) continue;
        cudaSetDevice(R->device);
        const cudaError_t e = cudaStreamSynchronize(R->stream);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        CC_EXPECT(ctx, failures, e == cudaSuccess && dt >= 1.0 && dt <= 30.0, "rank %d: %s after %.2f s", R->rank,
                  cudaGetErrorString(e), dt);
        char msg[1024];
        const symmem_status_t ae = cc_wait_async_error(R, msg, sizeof msg);
        cc_log(ctx, "rank %d: %s: \"%s\"", R->rank, symmem_status_name(ae), msg);
        char want[32];
        snprintf(want, sizeof want, "rank %d", missing);
        CC_EXPECT(ctx, failures, ae == SYMMEM_TIMEOUT && strstr(msg, want), "rank %d: expected a timeout naming %s",
                  R->rank, want);
        CC_CHECK_CUDA(ctx, cudaMemcpy(S->got, S->dout[i], count * 2, cudaMemcpyDeviceToHost));
        size_t finite = 0;
        for (size_t k = 0; k < count; k++) finite += !isnan(cc_bf16_to_float(S->got[k]));
        CC_EXPECT(ctx, failures, finite == 0, "rank %d: %zu outputs are not NaN after the timeout", R->rank, finite);
        CC_EXPECT(ctx, failures,
                  symmem_all_reduce(R->comm, S->din[i], S->dout[i], count, SYMMEM_BFLOAT16, SYMMEM_OP_SUM, ALGO,
                                    R->stream) != SYMMEM_OK,
                  "rank %d: a call after the timeout succeeded", R->rank);
    }
    return (int)cc_sum_u64(ctx, (uint64_t)failures);
}

int main(int argc, char **argv)
{
    static const char *const env_timeout[] = {"SYMMEM_TIMEOUT_MS=2000", NULL};
    int timeout_mode = 0;
    for (int a = 1; a < argc; a++) timeout_mode |= !strcmp(argv[a], "timeout");
    if (timeout_mode && getenv("SYMMEM_TIMEOUT_MS") == NULL) setenv("SYMMEM_TIMEOUT_MS", "2000", 1);
    cc_ctx_t ctx;
    int rc = 0;
    if (!cc_start(&argc, argv, "coll_wire", 2, 600, NULL, timeout_mode ? env_timeout : NULL, &ctx, &rc)) return rc;
    static wire_state_t S;
    S.replays = 12;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--lean")) S.lean = 1;
        else if (!strcmp(argv[a], "--replays") && a + 1 < argc) S.replays = atoi(argv[++a]);
        else if (strcmp(argv[a], "timeout") != 0) {
            cc_log(&ctx, "FAIL: unknown argument %s", argv[a]);
            return 1;
        }
    }
    const int n = ctx.nranks;
    S.maxcount = 2999999 > 1024 * WM_ROW ? 2999999 : 1024 * WM_ROW;
    const size_t maxb = S.maxcount * 2;
    for (int i = 0; i < ctx.nlocal; i++) {
        CC_CHECK_CUDA(&ctx, cudaSetDevice(ctx.r[i].device));
        CC_CHECK_CUDA(&ctx, cudaMalloc(&S.din[i], maxb));
        CC_CHECK_CUDA(&ctx, cudaMalloc(&S.dout[i], maxb));
        CC_CHECK_CUDA(&ctx, cudaMalloc(&S.dexact[i], maxb));
    }
    for (int r = 0; r < n; r++) {
        int i;
        const int need = cc_is_root(&ctx) || is_local(&ctx, r, &i);
        S.in[r] = need ? malloc(maxb) : NULL;
        S.model[r] = cc_is_root(&ctx) ? malloc(maxb) : NULL;
        if ((need && !S.in[r]) || (cc_is_root(&ctx) && !S.model[r])) return 1;
    }
    S.got = malloc(maxb);
    S.exact = malloc(maxb);
    if (!S.got || !S.exact) return 1;
    if (timeout_mode) {
        rc = ctx.nranks >= 2 ? run_timeout(&ctx, &S) != 0 : 1;
        for (int i = 0; i < ctx.nlocal; i++) {
            cudaSetDevice(ctx.r[i].device);
            cudaFree(S.din[i]), cudaFree(S.dout[i]), cudaFree(S.dexact[i]);
            rc |= cc_teardown_rank(&ctx, &ctx.r[i], NULL);
        }
        if (cc_is_root(&ctx)) cc_log(&ctx, "wire all-reduce with rank 1 absent: %s", rc ? "FAILED" : "ok");
        return rc;
    }
    const cc_case_t cases[] = {
        {"data bfloat16", case_data, 0},     {"data float16", case_data, 1},  {"graph", case_graph, 0},
        {"threshold", case_threshold, 0}, {"refusals", case_refusals, 0},
    };
    rc = cc_run_cases(&ctx, cases, (int)(sizeof cases / sizeof cases[0]), &S);
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        cudaFree(S.din[i]), cudaFree(S.dout[i]), cudaFree(S.dexact[i]);
    }
    cc_finish(&ctx);
    for (int r = 0; r < n; r++) free(S.in[r]), free(S.model[r]);
    free(S.got), free(S.exact);
    return rc;
}
