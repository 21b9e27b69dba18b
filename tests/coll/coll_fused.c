/* coll_fused: symmem_all_reduce_add_rmsnorm (the fused all-reduce + residual add + RMSNorm) against a host
 * reference, on every rank count the ctest entries give (processes or threads of one process).
 *
 * Default mode, in this order:
 *  1. sweep: hidden 1, 7, 8, 4095, 4096, 4097, 7168, 16384 x tokens 1, 2, 3, 17, 64, 257, the three dtypes
 *     and eps 1e-6 / 1e-5 / 0.25 spread over them, some cases with every pointer one element off 16 bytes
 *     (the element path) and some with out == x (in place); fresh random data per case (x differs per
 *     rank; residual and weight are the same on every rank, as in tensor parallelism). One-shot first:
 *       - residual must equal, bit for bit, the stated rounding: h = round(fp32 sum in rank order),
 *         residual = round(residual + h) in fp32 (a host emulation of those fp32 operations), and lie
 *         within the rounding bound of the float64 reference residual + sum(x);
 *       - out must lie within the output rounding (plus 2^-17 for the fp32 sum of squares and rsqrt) of
 *         the float64 reference residual * weight / sqrt(mean(residual^2) + eps) of that residual;
 *     then two-shot (and auto in some cases) on the same inputs must give the same bits, and every rank
 *     the same bits as rank 0.
 *  2. argument errors: each bad argument gives SYMMEM_INVALID_ARGUMENT naming it, launches nothing, and
 *     the communicator stays usable (a correct call afterwards).
 *  3. a sequence of fused and plain all-reduces (Lamport one-shot and two-shot, flag two-shot, auto) back
 *     to back on one stream without host synchronisation, one rank delayed before each: the fused and the
 *     plain calls share the workspace, the Lamport buffers' rotation and the state; every result checked.
 *  4. CUDA-graph replays with fresh inputs (written by captured kernels keyed by a device counter): per
 *     replay a delayed rank, a fused one-shot call, a plain all-reduce, a fused two-shot call in place; every
 *     replay's outputs recorded and checked, and bitwise equal across ranks.
 * Mode "timeout" (--mp 2): rank 1 stops replaying a captured graph of two fused calls; rank 0's stream
 * completes, the error names rank 1 and the fused operation, the second call's out and residual and every
 * output of the next replay are NaN, the next eager call fails.
 * Mode "mismatch" (--mp 2, SYMMEM_LAMPORT_CHECK=1): rank 1 passes hidden - 1; both ranks report
 * SYMMEM_INVALID_USAGE and leave out and residual NaN.
 * Usage: coll_fused [--mp N | --inproc N] [timeout | mismatch] [--replays R]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define RES_RANK 16 /* pseudo-ranks of cc_value for the residual and the weight: the same on every rank */
#define W_RANK 17
#define MAX_TOKENS 257
#define MAX_HIDDEN 16384
#define MAX_BYTES ((size_t)MAX_TOKENS * MAX_HIDDEN * 4)

static const char *const FN = "symmem_all_reduce_add_rmsnorm";

/* ---- host reference ------------------------------------------------------------------------------------ */
static float round_dt(float f, symmem_dtype_t dt)
{
    if (dt == SYMMEM_BFLOAT16) return cc_bf16_to_float(cc_float_to_bf16(f));
    if (dt == SYMMEM_FLOAT16) return cc_half_to_float(cc_float_to_half(f));
    return f;
}

static uint32_t bits_at(const void *p, symmem_dtype_t dt, size_t i)
{
    if (dt == SYMMEM_FLOAT32) {
        uint32_t u;
        memcpy(&u, (const char *)p + 4 * i, 4);
        return u;
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    return h;
}

static uint32_t bits_of(float f, symmem_dtype_t dt)
{
    if (dt == SYMMEM_BFLOAT16) return cc_float_to_bf16(f);
    if (dt == SYMMEM_FLOAT16) return cc_float_to_half(f);
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* One call's inputs: x of rank r = cc_value(sx, r, i), residual = cc_value(sr, RES_RANK, i), weight =
 * cc_value(sw, W_RANK, j). */
typedef struct shape {
    symmem_dtype_t dt;
    size_t tokens, hidden;
    float eps;
    uint64_t sx, sr, sw;
} shape_t;

typedef struct bad3 {
    size_t res_bits, res_ref, out_ref; /* wrong residual bits, residual off the float64 bound, out off */
    size_t first;
    double got, want;
    const char *what;
} bad3_t;

static void note(bad3_t *b, size_t *counter, const char *what, size_t i, double got, double want)
{
    if (b->res_bits + b->res_ref + b->out_ref == 0) {
        b->first = i;
        b->got = got;
        b->want = want;
        b->what = what;
    }
    (*counter)++;
}

/* Check one call's host copies of out and residual; returns the number of wrong elements. */
static size_t check_fused(const shape_t *s, int n, const void *out, const void *res, bad3_t *b)
{
    const symmem_dtype_t dt = s->dt;
    const size_t H = s->hidden;
    const double rel = dt == SYMMEM_FLOAT32 ? ldexp(1.0, -23) : dt == SYMMEM_FLOAT16 ? ldexp(1.0, -10) : ldexp(1.0, -8);
    const double rel_out = (dt == SYMMEM_FLOAT32 ? ldexp(1.0, -24) : dt == SYMMEM_FLOAT16 ? ldexp(1.0, -11) : ldexp(1.0, -8)) +
                           ldexp(1.0, -17);
    const double abs_out = dt == SYMMEM_FLOAT16 ? ldexp(1.0, -24) : 0.0;
    memset(b, 0, sizeof *b);
    float *rn = malloc(H * sizeof *rn);
    if (!rn) return 1;
    for (size_t t = 0; t < s->tokens; t++) {
        double ss = 0;
        for (size_t j = 0; j < H; j++) {
            const size_t i = t * H + j;
            /* the stated fp32 operations, on the host (binary32 arithmetic, round to nearest) */
            float acc = cc_value(s->sx, 0, i, dt);
            double s64 = acc, sabs = fabs(acc);
            for (int r = 1; r < n; r++) {
                const float v = cc_value(s->sx, r, i, dt);
                acc = acc + v;
                s64 += v;
                sabs += fabs(v);
            }
            float h = round_dt(acc, dt);
            if (h == 0.0f) h = 0.0f; /* -0.0 counts as +0.0 */
            const float r0 = cc_value(s->sr, RES_RANK, i, dt);
            rn[j] = round_dt(r0 + h, dt);
            const uint32_t got_bits = bits_at(res, dt, i);
            const double got_r = cc_load(res, dt, i);
            if (got_bits != bits_of(rn[j], dt)) note(b, &b->res_bits, "residual bits", i, got_r, rn[j]);
            /* the float64 reference of the whole sequence: two roundings (h, residual) and the fp32 sum */
            const double ref_r = (double)r0 + s64;
            const double tol = rel * (fabs(s64) + fabs(ref_r)) + 2.0 * n * ldexp(1.0, -24) * sabs;
            if (!(fabs(got_r - ref_r) <= tol)) note(b, &b->res_ref, "residual vs float64", i, got_r, ref_r);
            ss += (double)rn[j] * rn[j];
        }
        const double inv = 1.0 / sqrt(ss / (double)H + (double)s->eps);
        for (size_t j = 0; j < H; j++) {
            const size_t i = t * H + j;
            const double ref = (double)rn[j] * inv * (double)cc_value(s->sw, W_RANK, j, dt);
            const double got = cc_load(out, dt, i);
            if (!(fabs(got - ref) <= rel_out * fabs(ref) + abs_out)) note(b, &b->out_ref, "out vs float64", i, got, ref);
        }
    }
    free(rn);
    return b->res_bits + b->res_ref + b->out_ref;
}

/* ---- per-rank buffers ------------------------------------------------------------------------------------ */
typedef struct dbufs {
    char *x, *res, *w, *out; /* cudaMalloc'ed, MAX_BYTES + 64 each (room for a misaligned start) */
} dbufs_t;

typedef struct call {
    shape_t s;
    symmem_algo_t algo;
    int inplace;  /* out == x */
    size_t shift; /* bytes every pointer is moved off its 256-byte aligned base */
} call_t;

static void ptrs(const dbufs_t *d, const call_t *c, char **x, char **res, char **w, char **out)
{
    *x = d->x + c->shift;
    *res = d->res + c->shift;
    *w = d->w + c->shift;
    *out = c->inplace ? *x : d->out + c->shift;
}

/* Fill this call's inputs on every local rank and enqueue the fused call (fresh inputs: seeds per call). */
static int enqueue_call(cc_ctx_t *ctx, const dbufs_t *D, const call_t *c, int fill_weight)
{
    const shape_t *s = &c->s;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        char *x, *res, *w, *out;
        ptrs(&D[i], c, &x, &res, &w, &out);
        cudaSetDevice(R->device);
        const size_t count = s->tokens * s->hidden;
        cudaError_t e = cc_dev_fill(x, s->dt, count, s->sx, NULL, R->rank, 0, R->stream);
        if (e == cudaSuccess) e = cc_dev_fill(res, s->dt, count, s->sr, NULL, RES_RANK, 0, R->stream);
        if (e == cudaSuccess && fill_weight) e = cc_dev_fill(w, s->dt, s->hidden, s->sw, NULL, W_RANK, 0, R->stream);
        if (e == cudaSuccess && !c->inplace) e = cudaMemsetAsync(out, 0xff, count * symmem_dtype_size(s->dt), R->stream);
        if (e != cudaSuccess) {
            cc_log(ctx, "FAIL: filling inputs: %s", cudaGetErrorString(e));
            return -1;
        }
        const symmem_status_t st = symmem_all_reduce_add_rmsnorm(R->comm, x, res, w, out, s->tokens, s->hidden, s->eps,
                                                                 s->dt, c->algo, R->stream);
        if (st != SYMMEM_OK) {
            cc_log(ctx, "FAIL: %s(%zu x %zu %s, %s): rank %d: %s: %s", FN, s->tokens, s->hidden, symmem_dtype_name(s->dt),
                   symmem_algo_name(c->algo), R->rank, symmem_status_name(st), symmem_last_error());
            return -1;
        }
    }
    return 0;
}

/* Run one call on every rank and bring back local rank 0's out and residual (hout, hres) and every local
 * rank's hash of both. 0, or -1 (fatal). */
static int run_call(cc_ctx_t *ctx, const dbufs_t *D, const call_t *c, unsigned char *hout, unsigned char *hres,
                    unsigned char *scratch, uint64_t *hash)
{
    if (enqueue_call(ctx, D, c, 1) != 0 || cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) {
        cc_shm_abort(ctx->shm);
        return -1;
    }
    const size_t bytes = c->s.tokens * c->s.hidden * symmem_dtype_size(c->s.dt);
    for (int i = 0; i < ctx->nlocal; i++) {
        char *x, *res, *w, *out;
        ptrs(&D[i], c, &x, &res, &w, &out);
        cudaSetDevice(ctx->r[i].device);
        unsigned char *o = i == 0 ? hout : scratch, *r = i == 0 ? hres : scratch + bytes;
        if (cudaMemcpy(o, out, bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(r, res, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
            cc_log(ctx, "FAIL: copying the results back");
            cc_shm_abort(ctx->shm);
            return -1;
        }
        hash[i] = cc_mix64(cc_hash(o, bytes) ^ (cc_hash(r, bytes) * 3));
    }
    return 0;
}

/* Every rank's hash equal to rank 0's. 1 if so. */
static int same_everywhere(cc_ctx_t *ctx, const uint64_t *local, int *fatal)
{
    uint64_t all[CC_MAX_RANKS];
    if (cc_allgather_u64(ctx, local, all) != 0) {
        *fatal = 1;
        return 0;
    }
    for (int r = 1; r < ctx->nranks; r++)
        if (all[r] != all[0]) return 0;
    return 1;
}

/* ---- 1. sweep -------------------------------------------------------------------------------------------- */
static int sweep(cc_ctx_t *ctx, const dbufs_t *D, int *fatal)
{
    static const size_t hiddens[] = {1, 7, 8, 4095, 4096, 4097, 7168, 16384};
    static const size_t tokens[] = {1, 2, 3, 17, 64, 257};
    static const float epss[] = {1e-6f, 1e-5f, 0.25f};
    const int n = ctx->nranks;
    const int nh = (int)(sizeof hiddens / sizeof *hiddens), nt = (int)(sizeof tokens / sizeof *tokens);
    unsigned char *hout = malloc(MAX_BYTES), *hres = malloc(MAX_BYTES), *scratch = malloc(2 * MAX_BYTES);
    if (!hout || !hres || !scratch) {
        *fatal = 1;
        return 1;
    }
    int failures = 0, cases = 0;
    for (int hi = 0; hi < nh && !*fatal; hi++)
        for (int ti = 0; ti < nt && !*fatal; ti++) {
            const int k = hi * nt + ti;
            call_t c;
            memset(&c, 0, sizeof c);
            c.s.dt = (symmem_dtype_t)((hi + ti) % SYMMEM_DTYPE_COUNT);
            c.s.tokens = tokens[ti];
            c.s.hidden = hiddens[hi];
            c.s.eps = epss[(hi + 2 * ti) % 3];
            c.s.sx = cc_mix64(0xf05edull + (uint64_t)k);
            c.s.sr = cc_mix64(c.s.sx + 1);
            c.s.sw = cc_mix64(c.s.sx + 2);
            c.shift = k % 4 == 3 ? symmem_dtype_size(c.s.dt) : 0;
            c.inplace = k % 5 == 2;
            static const symmem_algo_t algos[] = {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_AUTO};
            const int nalgos = ti == 0 || ti == nt - 1 ? 3 : 2;
            uint64_t first[CC_MAX_RANKS];
            for (int a = 0; a < nalgos && !*fatal; a++) {
                c.algo = algos[a];
                uint64_t h[CC_MAX_RANKS];
                if (run_call(ctx, D, &c, hout, hres, scratch, h) != 0) {
                    *fatal = 1;
                    break;
                }
                char what[160];
                snprintf(what, sizeof what, "%zu x %zu %s eps %g%s%s, %s", c.s.tokens, c.s.hidden, symmem_dtype_name(c.s.dt),
                         (double)c.s.eps, c.shift ? ", misaligned" : "", c.inplace ? ", out == x" : "",
                         symmem_algo_name(c.algo));
                if (a == 0) {
                    bad3_t b;
                    if (check_fused(&c.s, n, hout, hres, &b)) {
                        cc_log(ctx, "FAIL: %s: %zu residual bits, %zu residual vs float64, %zu out vs float64 wrong (first: %s "
                               "at %zu: got %.9g want %.9g)", what, b.res_bits, b.res_ref, b.out_ref, b.what, b.first, b.got,
                               b.want);
                        failures++;
                    }
                    memcpy(first, h, sizeof first);
                } else {
                    for (int i = 0; i < ctx->nlocal; i++)
                        if (h[i] != first[i]) {
                            cc_log(ctx, "FAIL: %s: rank %d's out/residual differ bitwise from oneshot_push's", what,
                                   ctx->r[i].rank);
                            failures++;
                            break;
                        }
                }
                if (!same_everywhere(ctx, h, fatal)) {
                    if (cc_is_root(ctx)) cc_log(ctx, "FAIL: %s: the ranks' out/residual differ bitwise", what);
                    failures++;
                }
            }
            cases++;
        }
    free(hout);
    free(hres);
    free(scratch);
    if (cc_is_root(ctx))
        cc_log(ctx, "sweep: %d shapes (hidden 1..16384, tokens 1..257, 3 dtypes, 3 eps, misaligned and in-place cases), "
               "one-shot vs float64 reference, two-shot and auto bitwise equal to it, ranks bitwise equal: %s",
               cases, failures ? "FAILED" : "ok");
    return failures;
}

/* ---- 2. argument errors ---------------------------------------------------------------------------------- */
typedef struct bad_arg {
    const char *what, *needle;
    size_t dx, dres, dw, dout; /* byte offsets from the buffers (SIZE_MAX: NULL) */
    int out_is_res, res_in_x, out_in_x, w_is_out;
    size_t tokens, hidden;
    float eps;
    int dtype;
    symmem_algo_t algo;
} bad_arg_t;

static int arg_errors(cc_ctx_t *ctx, const dbufs_t *D)
{
    const float nanf_ = nanf("");
    const bad_arg_t cases[] = {
        {"hidden 0", "hidden 0", 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"hidden above the limit", "hidden 16385", 0, 0, 0, 0, 0, 0, 0, 0, 4, 16385, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"x NULL", "x is NULL", SIZE_MAX, 0, 0, 0, 0, 0, 0, 0, 4, 64, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"weight NULL", "weight is NULL", 0, 0, SIZE_MAX, 0, 0, 0, 0, 0, 4, 64, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"out == residual", "must be another buffer", 0, 0, 0, 0, 1, 0, 0, 0, 4, 64, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"residual overlapping x", "and residual", 0, 0, 0, 0, 0, 1, 0, 0, 4, 64, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"out overlapping x, not equal", "without being equal", 0, 0, 0, 0, 0, 0, 1, 0, 4, 64, 1e-6f, SYMMEM_BFLOAT16,
         SYMMEM_ALGO_AUTO},
        {"weight == out", "overlaps out", 0, 0, 0, 0, 0, 0, 0, 1, 4, 64, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"misaligned x", "not aligned", 1, 0, 0, 0, 0, 0, 0, 0, 4, 64, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"misaligned out (fp32)", "not aligned", 0, 0, 0, 2, 0, 0, 0, 0, 4, 64, 1e-6f, SYMMEM_FLOAT32, SYMMEM_ALGO_AUTO},
        {"negative eps", "eps", 0, 0, 0, 0, 0, 0, 0, 0, 4, 64, -1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"NaN eps", "eps", 0, 0, 0, 0, 0, 0, 0, 0, 4, 64, nanf_, SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO},
        {"flag algorithm", "not one of", 0, 0, 0, 0, 0, 0, 0, 0, 4, 64, 1e-6f, SYMMEM_BFLOAT16, SYMMEM_ALGO_TWOSHOT_PUSH},
        {"bad dtype", "invalid dtype", 0, 0, 0, 0, 0, 0, 0, 0, 4, 64, 1e-6f, 7, SYMMEM_ALGO_AUTO},
        {"tokens x hidden too large", "too large", 0, 0, 0, 0, 0, 0, 0, 0, SIZE_MAX / 1024, 4096, 1e-6f, SYMMEM_BFLOAT16,
         SYMMEM_ALGO_AUTO},
    };
    const int ncases = (int)(sizeof cases / sizeof *cases);
    int failures = 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        for (int k = 0; k < ncases; k++) {
            const bad_arg_t *b = &cases[k];
            const size_t es = b->dtype == SYMMEM_FLOAT32 ? 4 : 2;
            char *x = b->dx == SIZE_MAX ? NULL : D[i].x + b->dx;
            char *res = b->res_in_x ? D[i].x + 64 * es : D[i].res + b->dres;
            char *w = b->dw == SIZE_MAX ? NULL : b->w_is_out ? D[i].out : D[i].w + b->dw;
            char *out = b->out_is_res ? res : b->out_in_x ? D[i].x + 64 * es : D[i].out + b->dout;
            const symmem_status_t st = symmem_all_reduce_add_rmsnorm(R->comm, x, res, w, out, b->tokens, b->hidden, b->eps,
                                                                     (symmem_dtype_t)b->dtype, b->algo, R->stream);
            const char *msg = symmem_last_error();
            CC_EXPECT(ctx, failures, st == SYMMEM_INVALID_ARGUMENT && strstr(msg, b->needle) && strstr(msg, FN),
                      "%s: rank %d: %s \"%s\", expected SYMMEM_INVALID_ARGUMENT naming \"%s\"", b->what, R->rank,
                      symmem_status_name(st), msg, b->needle);
        }
        /* out == x (in place) and tokens == 0 are accepted (the latter launches nothing) */
        if (symmem_all_reduce_add_rmsnorm(R->comm, D[i].x, D[i].res, D[i].w, D[i].out, 0, 64, 1e-6f, SYMMEM_BFLOAT16,
                                          SYMMEM_ALGO_AUTO, R->stream) != SYMMEM_OK) {
            cc_log(ctx, "FAIL: tokens 0: %s", symmem_last_error());
            failures++;
        }
    }
    /* nothing was launched and the communicator is usable: a correct call works everywhere */
    call_t c;
    memset(&c, 0, sizeof c);
    c.s = (shape_t){SYMMEM_BFLOAT16, 5, 4096, 1e-5f, 0xa16ull, 0xa17ull, 0xa18ull};
    c.algo = SYMMEM_ALGO_AUTO;
    c.inplace = 1;
    unsigned char *hout = malloc(2 * MAX_BYTES), *scratch = malloc(2 * MAX_BYTES);
    uint64_t h[CC_MAX_RANKS];
    bad3_t b;
    if (!hout || !scratch || run_call(ctx, D, &c, hout, hout + MAX_BYTES, scratch, h) != 0) {
        cc_log(ctx, "FAIL: a correct call after the argument errors did not run");
        failures++;
    } else {
        CC_EXPECT(ctx, failures, !check_fused(&c.s, ctx->nranks, hout, hout + MAX_BYTES, &b),
                  "the correct call after the argument errors: %s wrong at %zu", b.what, b.first);
    }
    free(hout);
    free(scratch);
    if (cc_is_root(ctx))
        cc_log(ctx, "argument errors: %d bad calls per rank, each SYMMEM_INVALID_ARGUMENT with its reason; the "
               "communicator usable after them: %s", ncases, failures ? "FAILED" : "ok");
    return failures;
}

/* ---- 3. fused and plain calls back to back --------------------------------------------------------------- */
enum { M_FUSED = 0, M_PLAIN = 1 };
typedef struct mop {
    int kind;
    symmem_algo_t algo;
    shape_t s;          /* fused */
    size_t count;       /* plain: elements; seed s.sx */
    size_t off, bytes;  /* in the arenas: fused x/res/out at off in three arenas; plain in/out likewise */
    int delayed;
    uint64_t spin_ns;
} mop_t;

/* The sequence's state: the plan, the per-rank arenas (inputs, residuals, outputs, weights), the host
 * copies. */
typedef struct mixed_run {
    int K;
    mop_t *ops;
    size_t total, wtotal; /* bytes of each of a_in, a_res, a_out; of the weights */
    size_t *wofs;         /* operation j's weight at a_w + wofs[j] */
    char *a_in[CC_MAX_RANKS], *a_res[CC_MAX_RANKS], *a_out[CC_MAX_RANKS], *a_w[CC_MAX_RANKS];
    unsigned char *hout, *hres;
} mixed_run_t;

/* The plan, the same on every rank: fused and plain calls alternate, cycling algorithms, dtypes, shapes. */
static void mixed_plan(const cc_ctx_t *ctx, mixed_run_t *m)
{
    static const size_t f_hidden[] = {7, 4096, 7168, 4097};
    static const size_t f_tokens[] = {1, 3, 17, 2};
    static const size_t p_counts[] = {1, 1000, 65537, 4099};
    static const symmem_algo_t f_algos[] = {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_AUTO};
    static const symmem_algo_t p_algos[] = {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_TWOSHOT_PUSH,
                                            SYMMEM_ALGO_AUTO};
    const int n = ctx->nranks, K = m->K;
    mop_t *ops = calloc((size_t)K, sizeof *ops);
    size_t total = 0, wtotal = 0;
    for (int j = 0; j < K; j++) {
        mop_t *o = &ops[j];
        o->kind = j % 2;
        o->s.dt = (symmem_dtype_t)((j / 2) % SYMMEM_DTYPE_COUNT);
        o->s.sx = cc_mix64(0x3173dull + (uint64_t)j);
        o->s.sr = cc_mix64(o->s.sx + 1);
        o->s.sw = cc_mix64(o->s.sx + 2);
        o->delayed = j % n;
        o->spin_ns = 1000 + cc_mix64((uint64_t)j) % 20000;
        const size_t es = symmem_dtype_size(o->s.dt);
        if (o->kind == M_FUSED) {
            o->algo = f_algos[(j / 2) % 3];
            o->s.hidden = f_hidden[(j / 2) % 4];
            o->s.tokens = f_tokens[(j / 6) % 4];
            o->s.eps = 1e-5f;
            o->bytes = o->s.tokens * o->s.hidden * es;
            wtotal += (o->s.hidden * es + 255) & ~(size_t)255;
        } else {
            o->algo = p_algos[(j / 2) % 4];
            o->count = p_counts[(j / 4) % 4];
            o->bytes = o->count * es;
        }
        o->off = total;
        total += (o->bytes + 255) & ~(size_t)255;
    }
    m->ops = ops;
    m->total = total;
    m->wtotal = wtotal;
}

/* The arenas of every local rank, zeroed. 0, or 1 (mixed returns 1; *fatal set when cudaMalloc failed). */
static int mixed_alloc(cc_ctx_t *ctx, mixed_run_t *m, int *fatal)
{
    const size_t total = m->total, wtotal = m->wtotal;
    char **a_in = m->a_in, **a_res = m->a_res, **a_out = m->a_out, **a_w = m->a_w;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (cudaMalloc((void **)&a_in[i], total) != cudaSuccess || cudaMalloc((void **)&a_res[i], total) != cudaSuccess ||
            cudaMalloc((void **)&a_out[i], total) != cudaSuccess || cudaMalloc((void **)&a_w[i], wtotal + 256) != cudaSuccess) {
            cc_log(ctx, "FAIL: cudaMalloc of the arenas");
            *fatal = 1;
            return 1;
        }
        /* defined bytes between the operations' regions (the ranks' arenas are compared by hash) */
        CC_CHECK_CUDA(ctx, cc_rank_memset(&ctx->r[i], a_in[i], 0, total));
        CC_CHECK_CUDA(ctx, cc_rank_memset(&ctx->r[i], a_res[i], 0, total));
        CC_CHECK_CUDA(ctx, cc_rank_memset(&ctx->r[i], a_out[i], 0, total));
    }
    return 0;
}

/* Every operation's inputs (weights at their own offsets, wofs), then the streams and the processes
 * synchronised. 0, or 1 with *fatal set. */
static int mixed_fill(cc_ctx_t *ctx, mixed_run_t *m, int *fatal)
{
    const int K = m->K;
    char *const *a_in = m->a_in, *const *a_res = m->a_res, *const *a_w = m->a_w;
    int fail = 0;
    size_t woff = 0;
    size_t *wofs = calloc((size_t)K, sizeof *wofs);
    m->wofs = wofs;
    for (int j = 0; j < K; j++) {
        const mop_t *o = &m->ops[j];
        const size_t es = symmem_dtype_size(o->s.dt);
        for (int i = 0; i < ctx->nlocal && !fail; i++) {
            cc_rank_t *R = &ctx->r[i];
            cudaSetDevice(R->device);
            cudaError_t e = o->kind == M_FUSED
                                ? cc_dev_fill(a_in[i] + o->off, o->s.dt, o->s.tokens * o->s.hidden, o->s.sx, NULL, R->rank, 0, R->stream)
                                : cc_dev_fill(a_in[i] + o->off, o->s.dt, o->count, o->s.sx, NULL, R->rank, 0, R->stream);
            if (e == cudaSuccess && o->kind == M_FUSED)
                e = cc_dev_fill(a_res[i] + o->off, o->s.dt, o->s.tokens * o->s.hidden, o->s.sr, NULL, RES_RANK, 0, R->stream);
            if (e == cudaSuccess && o->kind == M_FUSED)
                e = cc_dev_fill(a_w[i] + woff, o->s.dt, o->s.hidden, o->s.sw, NULL, W_RANK, 0, R->stream);
            if (e != cudaSuccess) fail = 1;
        }
        wofs[j] = woff;
        if (o->kind == M_FUSED) woff += (o->s.hidden * es + 255) & ~(size_t)255;
    }
    if (fail || cc_sync(ctx) != cudaSuccess || cc_barrier(ctx) != 0) {
        *fatal = 1;
        return 1;
    }
    return 0;
}

/* Every operation back to back, rank after rank (the delayed rank spins first), no host synchronisation;
 * then the streams synchronised. 0, or 1 with *fatal set. */
static int mixed_enqueue(cc_ctx_t *ctx, const mixed_run_t *m, int *fatal)
{
    const int K = m->K;
    char *const *a_in = m->a_in, *const *a_res = m->a_res, *const *a_out = m->a_out, *const *a_w = m->a_w;
    const size_t *wofs = m->wofs;
    int fail = 0;
    for (int j = 0; j < K && !fail; j++) {
        const mop_t *o = &m->ops[j];
        for (int i = 0; i < ctx->nlocal && !fail; i++) {
            cc_rank_t *R = &ctx->r[i];
            cudaSetDevice(R->device);
            cudaError_t e = R->rank == o->delayed ? cc_dev_spin(o->spin_ns, NULL, 1, 0, R->stream) : cudaSuccess;
            symmem_status_t st = SYMMEM_OK;
            if (e == cudaSuccess && o->kind == M_FUSED)
                st = symmem_all_reduce_add_rmsnorm(R->comm, a_in[i] + o->off, a_res[i] + o->off, a_w[i] + wofs[j],
                                                   a_out[i] + o->off, o->s.tokens, o->s.hidden, o->s.eps, o->s.dt, o->algo,
                                                   R->stream);
            else if (e == cudaSuccess)
                st = symmem_all_reduce(R->comm, a_in[i] + o->off, a_out[i] + o->off, o->count, o->s.dt, SYMMEM_OP_SUM,
                                       o->algo, R->stream);
            if (e != cudaSuccess || st != SYMMEM_OK) {
                cc_log(ctx, "FAIL: op %d: rank %d: %s %s", j, R->rank,
                       e != cudaSuccess ? cudaGetErrorString(e) : symmem_status_name(st), st != SYMMEM_OK ? symmem_last_error() : "");
                fail = 1;
            }
        }
    }
    if (fail) cc_shm_abort(ctx->shm);
    if (cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK || fail) {
        cc_log(ctx, "FAIL: the mixed sequence did not complete");
        *fatal = 1;
        return 1;
    }
    return 0;
}

/* Every local rank's outputs and residuals hashed into hl[i]; local rank 0's checked against the
 * reference, *failures counting the wrong operations. 0, or 1 (mixed returns 1). */
static int mixed_verify(cc_ctx_t *ctx, mixed_run_t *m, uint64_t *hl, int *failures)
{
    const int n = ctx->nranks, K = m->K;
    const size_t total = m->total;
    char *const *a_res = m->a_res, *const *a_out = m->a_out;
    unsigned char *hout = malloc(total + 1), *hres = malloc(total + 1);
    m->hout = hout;
    m->hres = hres;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        CC_CHECK_CUDA(ctx, cudaMemcpy(hout, a_out[i], total, cudaMemcpyDeviceToHost));
        CC_CHECK_CUDA(ctx, cudaMemcpy(hres, a_res[i], total, cudaMemcpyDeviceToHost));
        hl[i] = cc_mix64(cc_hash(hout, total) ^ 3 * cc_hash(hres, total));
        if (i > 0) continue;
        for (int j = 0; j < K; j++) {
            const mop_t *o = &m->ops[j];
            size_t wrong;
            bad3_t b;
            cc_bad_t pb = {0, 0, 0, 0};
            if (o->kind == M_FUSED) wrong = check_fused(&o->s, n, hout + o->off, hres + o->off, &b);
            else wrong = cc_check_reduce(hout + o->off, o->s.dt, SYMMEM_OP_SUM, o->count, 0, n, o->s.sx, &pb);
            if (wrong) {
                if (*failures < 5)
                    cc_log(ctx, "FAIL: op %d (%s %s %s): %zu wrong (first %s at %zu: got %.9g want %.9g)", j,
                           o->kind == M_FUSED ? FN : "symmem_all_reduce", symmem_algo_name(o->algo),
                           symmem_dtype_name(o->s.dt), wrong, o->kind == M_FUSED ? b.what : "", o->kind == M_FUSED ? b.first : pb.first,
                           o->kind == M_FUSED ? b.got : pb.got, o->kind == M_FUSED ? b.want : pb.want);
                (*failures)++;
            }
        }
    }
    return 0;
}

/* Free the arenas, the host copies, the plan. */
static void mixed_free(cc_ctx_t *ctx, mixed_run_t *m)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaFree(m->a_in[i]);
        cudaFree(m->a_res[i]);
        cudaFree(m->a_out[i]);
        cudaFree(m->a_w[i]);
    }
    free(m->hout);
    free(m->hres);
    free(m->ops);
    free(m->wofs);
}

static int mixed(cc_ctx_t *ctx, int K, int *fatal)
{
    mixed_run_t m;
    memset(&m, 0, sizeof m);
    m.K = K;
    mixed_plan(ctx, &m);
    if (mixed_alloc(ctx, &m, fatal) != 0 || mixed_fill(ctx, &m, fatal) != 0 || mixed_enqueue(ctx, &m, fatal) != 0)
        return 1;
    int failures = 0;
    uint64_t hl[CC_MAX_RANKS];
    if (mixed_verify(ctx, &m, hl, &failures) != 0) return 1;
    if (!same_everywhere(ctx, hl, fatal)) {
        if (cc_is_root(ctx)) cc_log(ctx, "FAIL: mixed sequence: the ranks' outputs differ bitwise");
        failures++;
    }
    mixed_free(ctx, &m);
    if (cc_is_root(ctx))
        cc_log(ctx, "mixed: %d fused and plain all-reduces back to back, no host sync, a delayed rank before each: %s",
               K, failures ? "FAILED" : "all correct");
    return failures;
}

/* ---- 4. graph replays ------------------------------------------------------------------------------------ */
/* Per replay: spin (rank replay % n), A = fused one-shot 5 x 4097 bf16 (unaligned rows), a plain oneshot_push
 * all-reduce of 3001 fp16, B = fused two-shot 3 x 4096 fp16 in place (out == x); fresh inputs from the
 * replay counter; every output recorded per replay. */
enum { G_OA, G_RA, G_OB, G_RB, G_P, G_NREC };
static const size_t g_tokens[2] = {5, 3}, g_hidden[2] = {4097, 4096}, g_plain = 3001;

typedef struct gstate {
    uint32_t *iter;
    char *xa, *ra, *wa, *oa, *xb, *rb, *wb, *pin, *pout;
    char *hist[G_NREC];
    cudaGraphExec_t exec;
} gstate_t;

static size_t g_len(int k)
{
    if (k == G_P) return g_plain * 2;
    return g_tokens[k >= G_OB] * g_hidden[k >= G_OB] * 2;
}

static shape_t g_shape(int b, uint64_t seed, uint64_t iter)
{
    shape_t s;
    s.dt = b ? SYMMEM_FLOAT16 : SYMMEM_BFLOAT16;
    s.tokens = g_tokens[b];
    s.hidden = g_hidden[b];
    s.eps = b ? 1e-5f : 1e-6f;
    s.sx = cc_iter_seed(seed + (b ? 4 : 0), iter);
    s.sr = cc_iter_seed(seed + (b ? 5 : 1), iter);
    s.sw = seed + (b ? 6 : 2); /* the weights are written once */
    return s;
}

static int capture_graph(cc_ctx_t *ctx, int i, gstate_t *g, uint64_t seed, symmem_algo_t algo_a)
{
    cc_rank_t *R = &ctx->r[i];
    cudaSetDevice(R->device);
    cudaStream_t s = R->stream;
    cudaGraph_t graph = NULL;
    CC_CHECK_CUDA(ctx, cc_dev_fill(g->wa, SYMMEM_BFLOAT16, g_hidden[0], seed + 2, NULL, W_RANK, 0, s));
    CC_CHECK_CUDA(ctx, cc_dev_fill(g->wb, SYMMEM_FLOAT16, g_hidden[1], seed + 6, NULL, W_RANK, 0, s));
    CC_CHECK_CUDA(ctx, cudaMemsetAsync(g->iter, 0, sizeof *g->iter, s));
    CC_CHECK_CUDA(ctx, cudaStreamSynchronize(s));
    CC_CHECK_CUDA(ctx, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    symmem_status_t st = SYMMEM_OK;
    const size_t na = g_tokens[0] * g_hidden[0], nb = g_tokens[1] * g_hidden[1];
    cudaError_t e = cc_dev_spin(3000, g->iter, ctx->nranks, R->rank, s);
    if (e == cudaSuccess) e = cc_dev_fill(g->xa, SYMMEM_BFLOAT16, na, seed, g->iter, R->rank, 0, s);
    if (e == cudaSuccess) e = cc_dev_fill(g->ra, SYMMEM_BFLOAT16, na, seed + 1, g->iter, RES_RANK, 0, s);
    if (e == cudaSuccess)
        st = symmem_all_reduce_add_rmsnorm(R->comm, g->xa, g->ra, g->wa, g->oa, g_tokens[0], g_hidden[0], 1e-6f,
                                           SYMMEM_BFLOAT16, algo_a, s);
    if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_fill(g->pin, SYMMEM_FLOAT16, g_plain, seed + 3, g->iter, R->rank, 0, s);
    if (e == cudaSuccess && st == SYMMEM_OK)
        st = symmem_all_reduce(R->comm, g->pin, g->pout, g_plain, SYMMEM_FLOAT16, SYMMEM_OP_SUM, SYMMEM_ALGO_ONESHOT_PUSH, s);
    if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_fill(g->xb, SYMMEM_FLOAT16, nb, seed + 4, g->iter, R->rank, 0, s);
    if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_fill(g->rb, SYMMEM_FLOAT16, nb, seed + 5, g->iter, RES_RANK, 0, s);
    if (e == cudaSuccess && st == SYMMEM_OK)
        st = symmem_all_reduce_add_rmsnorm(R->comm, g->xb, g->rb, g->wb, g->xb, g_tokens[1], g_hidden[1], 1e-5f,
                                           SYMMEM_FLOAT16, SYMMEM_ALGO_TWOSHOT_LAMPORT, s);
    const char *src[G_NREC] = {g->oa, g->ra, g->xb, g->rb, g->pout};
    for (int k = 0; k < G_NREC && e == cudaSuccess && st == SYMMEM_OK; k++)
        e = cc_dev_record(g->hist[k], src[k], g_len(k), g->iter, s);
    if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_incr(g->iter, s);
    const cudaError_t e2 = cudaStreamEndCapture(s, &graph);
    if (st != SYMMEM_OK) {
        cc_log(ctx, "FAIL: capturing: %s: %s", symmem_status_name(st), symmem_last_error());
        if (graph) cudaGraphDestroy(graph);
        return 1;
    }
    CC_CHECK_CUDA(ctx, e);
    CC_CHECK_CUDA(ctx, e2);
    CC_CHECK_CUDA(ctx, cudaGraphInstantiate(&g->exec, graph, 0));
    cudaGraphDestroy(graph);
    return 0;
}

/* Every local rank's buffers, histories and counter, its graph captured; then the processes' barrier. 0, or
 * 1 (graphs returns 1; *fatal set unless a CUDA call failed, which CC_CHECK_CUDA reports). */
static int graphs_setup(cc_ctx_t *ctx, gstate_t *G, uint64_t seed, int replays, int *fatal)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        gstate_t *g = &G[i];
        cudaSetDevice(ctx->r[i].device);
        char **bufs[] = {&g->xa, &g->ra, &g->wa, &g->oa, &g->xb, &g->rb, &g->wb, &g->pin, &g->pout};
        for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) CC_CHECK_CUDA(ctx, cudaMalloc((void **)bufs[k], g_len(G_OA)));
        for (int k = 0; k < G_NREC; k++) CC_CHECK_CUDA(ctx, cudaMalloc((void **)&g->hist[k], g_len(k) * (size_t)replays));
        CC_CHECK_CUDA(ctx, cudaMalloc((void **)&g->iter, sizeof *g->iter));
        if (capture_graph(ctx, i, g, seed, SYMMEM_ALGO_ONESHOT_PUSH) != 0) {
            *fatal = 1;
            return 1;
        }
    }
    if (cc_barrier(ctx) != 0) {
        *fatal = 1;
        return 1;
    }
    return 0;
}

/* Every local rank's histories hashed into hl[i]; local rank 0's checked replay by replay against the
 * reference, *failures counting the wrong calls. 0, or 1 (graphs returns 1). */
static int graphs_verify(cc_ctx_t *ctx, const gstate_t *G, uint64_t seed, int replays, uint64_t *hl, int *failures)
{
    const int n = ctx->nranks;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        unsigned char *h[G_NREC];
        uint64_t hash = 0;
        for (int k = 0; k < G_NREC; k++) {
            h[k] = malloc(g_len(k) * (size_t)replays);
            CC_CHECK_CUDA(ctx, cudaMemcpy(h[k], G[i].hist[k], g_len(k) * (size_t)replays, cudaMemcpyDeviceToHost));
            hash = cc_mix64(hash ^ cc_hash(h[k], g_len(k) * (size_t)replays));
        }
        hl[i] = hash;
        for (int r = 0; r < replays && i == 0; r++) {
            for (int b = 0; b < 2; b++) {
                const shape_t s = g_shape(b, seed, (uint64_t)r);
                bad3_t bad;
                const int ko = b ? G_OB : G_OA, kr = b ? G_RB : G_RA;
                if (check_fused(&s, n, h[ko] + (size_t)r * g_len(ko), h[kr] + (size_t)r * g_len(kr), &bad)) {
                    if (*failures < 5)
                        cc_log(ctx, "FAIL: replay %d, fused %s: %s wrong at %zu (got %.9g want %.9g)", r,
                               b ? "two-shot in place" : "one-shot", bad.what, bad.first, bad.got, bad.want);
                    (*failures)++;
                }
            }
            cc_bad_t pb = {0, 0, 0, 0};
            if (cc_check_reduce(h[G_P] + (size_t)r * g_len(G_P), SYMMEM_FLOAT16, SYMMEM_OP_SUM, g_plain, 0, n,
                                cc_iter_seed(seed + 3, (uint64_t)r), &pb)) {
                if (*failures < 5) cc_log(ctx, "FAIL: replay %d, plain all-reduce: %zu wrong", r, pb.wrong);
                (*failures)++;
            }
        }
        for (int k = 0; k < G_NREC; k++) free(h[k]);
    }
    return 0;
}

/* Destroy the graphs, free the buffers. */
static void graphs_free(cc_ctx_t *ctx, gstate_t *G)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        gstate_t *g = &G[i];
        cudaSetDevice(ctx->r[i].device);
        cudaGraphExecDestroy(g->exec);
        char *bufs[] = {g->xa, g->ra, g->wa, g->oa, g->xb, g->rb, g->wb, g->pin, g->pout};
        for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) cudaFree(bufs[k]);
        for (int k = 0; k < G_NREC; k++) cudaFree(g->hist[k]);
        cudaFree(g->iter);
    }
}

static int graphs(cc_ctx_t *ctx, int replays, int *fatal)
{
    const uint64_t seed = 0x96a9f0ull;
    gstate_t G[CC_MAX_RANKS];
    memset(G, 0, sizeof G);
    if (graphs_setup(ctx, G, seed, replays, fatal) != 0) return 1;
    for (int k = 0; k < replays; k++)
        for (int i = 0; i < ctx->nlocal; i++) {
            cudaSetDevice(ctx->r[i].device);
            CC_CHECK_CUDA(ctx, cudaGraphLaunch(G[i].exec, ctx->r[i].stream));
        }
    if (cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) {
        cc_log(ctx, "FAIL: graph replays did not complete");
        *fatal = 1;
        return 1;
    }
    int failures = 0;
    uint64_t hl[CC_MAX_RANKS];
    if (graphs_verify(ctx, G, seed, replays, hl, &failures) != 0) return 1;
    if (!same_everywhere(ctx, hl, fatal)) {
        if (cc_is_root(ctx)) cc_log(ctx, "FAIL: graph replays: the ranks' histories differ bitwise");
        failures++;
    }
    graphs_free(ctx, G);
    if (cc_is_root(ctx))
        cc_log(ctx, "graphs: %d replays of [delay, fused one-shot, plain all-reduce, fused two-shot in place], fresh "
               "inputs each: %s", replays, failures ? "FAILED" : "all correct");
    return failures;
}

/* ---- mode "timeout" -------------------------------------------------------------------------------------- */
static size_t not_nan(const void *h, symmem_dtype_t dt, size_t count)
{
    size_t bad = 0;
    for (size_t k = 0; k < count; k++) bad += !isnan(cc_load(h, dt, k));
    return bad;
}

static int mode_timeout(cc_ctx_t *ctx, symmem_algo_t algo)
{
    if (!ctx->multiproc || ctx->nranks != 2) {
        cc_log(ctx, "FAIL: timeout mode runs with --mp 2");
        return 1;
    }
    cc_rank_t *R = &ctx->r[0];
    const uint64_t seed = 0x7e5f0ull;
    gstate_t g;
    memset(&g, 0, sizeof g);
    const int replays = 3;
    char **bufs[] = {&g.xa, &g.ra, &g.wa, &g.oa, &g.xb, &g.rb, &g.wb, &g.pin, &g.pout};
    for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) CC_CHECK_CUDA(ctx, cudaMalloc((void **)bufs[k], g_len(G_OA)));
    for (int k = 0; k < G_NREC; k++) CC_CHECK_CUDA(ctx, cudaMalloc((void **)&g.hist[k], g_len(k) * (size_t)replays));
    CC_CHECK_CUDA(ctx, cudaMalloc((void **)&g.iter, sizeof *g.iter));
    if (capture_graph(ctx, 0, &g, seed, algo) != 0) return 1;
    int failures = 0;
    /* replay 0 on both ranks: correct */
    CC_CHECK_CUDA(ctx, cudaGraphLaunch(g.exec, R->stream));
    CC_CHECK_CUDA(ctx, cudaStreamSynchronize(R->stream));
    unsigned char *h = malloc(g_len(G_OA) * (size_t)replays);
    for (int b = 0; b < 2; b++) {
        const shape_t s = g_shape(b, seed, 0);
        unsigned char *ho = h, *hr = h + g_len(G_OA);
        CC_CHECK_CUDA(ctx, cudaMemcpy(ho, g.hist[b ? G_OB : G_OA], g_len(b ? G_OB : G_OA), cudaMemcpyDeviceToHost));
        CC_CHECK_CUDA(ctx, cudaMemcpy(hr, g.hist[b ? G_RB : G_RA], g_len(b ? G_RB : G_RA), cudaMemcpyDeviceToHost));
        bad3_t bad;
        CC_EXPECT(ctx, failures, !check_fused(&s, 2, ho, hr, &bad), "replay 0, fused %c: %s wrong at %zu", 'A' + b,
                  bad.what, bad.first);
    }
    if (cc_barrier(ctx) != 0) return 1;
    if (R->rank == 0) {
        /* replay 1 without rank 1: A times out; B (and the plain call) start after the failure: NaN */
        CC_CHECK_CUDA(ctx, cudaGraphLaunch(g.exec, R->stream));
        cudaError_t e = cudaStreamSynchronize(R->stream);
        cc_log(ctx, "replay 1 without rank 1 (call A: %s): the stream completed: %s", symmem_algo_name(algo),
               cudaGetErrorString(e));
        if (e != cudaSuccess) failures++;
        /* replay 2: every kernel starts after the failure: both fused calls' out and residual are NaN */
        CC_CHECK_CUDA(ctx, cudaGraphLaunch(g.exec, R->stream));
        CC_CHECK_CUDA(ctx, cudaStreamSynchronize(R->stream));
        for (int r = 1; r < replays; r++)
            for (int k = 0; k < G_NREC; k++) {
                if (r == 1 && (k == G_OA || k == G_RA)) continue; /* the call that failed: unspecified */
                const symmem_dtype_t dt = k == G_OA || k == G_RA ? SYMMEM_BFLOAT16 : SYMMEM_FLOAT16;
                CC_CHECK_CUDA(ctx, cudaMemcpy(h, g.hist[k] + (size_t)r * g_len(k), g_len(k), cudaMemcpyDeviceToHost));
                const size_t bad = not_nan(h, dt, g_len(k) / 2);
                CC_EXPECT(ctx, failures, !bad, "replay %d, output %d after the timeout: %zu of %zu elements not NaN", r,
                          k, bad, g_len(k) / 2);
            }
        char msg[1024];
        const symmem_status_t ae = cc_wait_async_error(R, msg, sizeof msg);
        cc_log(ctx, "symmem_comm_get_async_error: %s: \"%s\"", symmem_status_name(ae), msg);
        CC_EXPECT(ctx, failures, ae == SYMMEM_TIMEOUT && strstr(msg, "rank 1") && strstr(msg, "all_reduce_add_rmsnorm"),
                  "expected SYMMEM_TIMEOUT naming rank 1 and all_reduce_add_rmsnorm");
        /* the fused kernels wait for Lamport data, not flags: the message says which round */
        CC_EXPECT(ctx, failures, strstr(msg, "Lamport round") != NULL, "the message does not name the Lamport round");
        const symmem_status_t st = symmem_all_reduce_add_rmsnorm(R->comm, g.xa, g.ra, g.wa, g.oa, 1, 64, 1e-6f,
                                                                 SYMMEM_BFLOAT16, SYMMEM_ALGO_AUTO, R->stream);
        CC_EXPECT(ctx, failures, st != SYMMEM_OK, "an eager call on the failed communicator succeeded");
    }
    const uint64_t total = cc_sum_u64(ctx, (uint64_t)failures);
    free(h);
    cudaGraphExecDestroy(g.exec);
    for (size_t k = 0; k < sizeof bufs / sizeof *bufs; k++) cudaFree(*bufs[k]);
    for (int k = 0; k < G_NREC; k++) cudaFree(g.hist[k]);
    cudaFree(g.iter);
    const symmem_status_t ds = symmem_comm_destroy(R->comm);
    R->comm = NULL;
    cudaStreamDestroy(R->stream);
    if (ds != SYMMEM_OK) {
        cc_log(ctx, "FAIL: symmem_comm_destroy: %s", symmem_last_error());
        return 1;
    }
    if (R->rank == 0)
        cc_log(ctx, "a fused call timing out in a graph replay: rank named, NaN out and residual after it, sticky error: %s",
               total ? "FAILED" : "ok");
    return total ? 1 : 0;
}

/* ---- mode "mismatch" ------------------------------------------------------------------------------------- */
static int mode_mismatch(cc_ctx_t *ctx, const dbufs_t *D, symmem_algo_t algo)
{
    if (!ctx->multiproc || ctx->nranks != 2) {
        cc_log(ctx, "FAIL: mismatch mode runs with --mp 2 (and SYMMEM_LAMPORT_CHECK=1)");
        return 1;
    }
    cc_rank_t *R = &ctx->r[0];
    int failures = 0;
    {
        /* rank 1 passes one element fewer per row: the same grid and block, another tag */
        const size_t tokens = 8, hidden = 4096 - (size_t)R->rank, bytes = tokens * 4096 * 2;
        CC_CHECK_CUDA(ctx, cc_dev_fill(D[0].x, SYMMEM_BFLOAT16, tokens * hidden, 1, NULL, R->rank, 0, R->stream));
        CC_CHECK_CUDA(ctx, cc_dev_fill(D[0].res, SYMMEM_BFLOAT16, tokens * hidden, 2, NULL, RES_RANK, 0, R->stream));
        CC_CHECK_CUDA(ctx, cc_dev_fill(D[0].w, SYMMEM_BFLOAT16, hidden, 3, NULL, W_RANK, 0, R->stream));
        CC_CHECK_CUDA(ctx, cudaStreamSynchronize(R->stream));
        if (cc_barrier(ctx) != 0) return 1;
        symmem_status_t st = symmem_all_reduce_add_rmsnorm(R->comm, D[0].x, D[0].res, D[0].w, D[0].out, tokens, hidden,
                                                           1e-6f, SYMMEM_BFLOAT16, algo, R->stream);
        CC_EXPECT(ctx, failures, st == SYMMEM_OK, "%s: the call returned %s (%s); expected it to enqueue",
                  symmem_algo_name(algo), symmem_status_name(st), symmem_last_error());
        CC_CHECK_CUDA(ctx, cudaStreamSynchronize(R->stream));
        char msg[1024];
        const symmem_status_t ae = cc_wait_async_error(R, msg, sizeof msg);
        cc_log(ctx, "%s, hidden %zu here: %s: \"%s\"", symmem_algo_name(algo), hidden, symmem_status_name(ae), msg);
        CC_EXPECT(ctx, failures, ae == SYMMEM_INVALID_USAGE && strstr(msg, "different arguments"),
                  "expected SYMMEM_INVALID_USAGE naming different arguments");
        /* every block saw the mismatch before taking any payload, so every block stored NaN over its share */
        unsigned char *h = malloc(bytes);
        const char *names[2] = {"out", "residual"};
        char *bufs[2] = {D[0].out, D[0].res};
        for (int k = 0; k < 2 && h; k++) {
            CC_CHECK_CUDA(ctx, cudaMemcpy(h, bufs[k], tokens * hidden * 2, cudaMemcpyDeviceToHost));
            const size_t bad = not_nan(h, SYMMEM_BFLOAT16, tokens * hidden);
            CC_EXPECT(ctx, failures, !bad, "%s: %zu of %zu elements of %s are not NaN", symmem_algo_name(algo), bad,
                      tokens * hidden, names[k]);
        }
        free(h);
    }
    const uint64_t total = cc_sum_u64(ctx, (uint64_t)failures);
    if (cc_is_root(ctx))
        cc_log(ctx, "%s with hidden that differs by one between ranks (SYMMEM_LAMPORT_CHECK=1): reported on both "
               "ranks, out and residual NaN: %s", symmem_algo_name(algo), total ? "FAILED" : "ok");
    return total ? 1 : 0;
}

/* The correctness cases (the error modes are their own runs: the communicator ends in its error state). */
typedef struct fused_run {
    const dbufs_t *D;
    int replays;
} fused_run_t;

static int case_sweep(cc_ctx_t *ctx, void *arg, int param, int *fatal)
{
    (void)param;
    return sweep(ctx, ((const fused_run_t *)arg)->D, fatal);
}
static int case_arg_errors(cc_ctx_t *ctx, void *arg, int param, int *fatal)
{
    (void)param;
    (void)fatal;
    return arg_errors(ctx, ((const fused_run_t *)arg)->D);
}
static int case_mixed(cc_ctx_t *ctx, void *arg, int param, int *fatal)
{
    (void)arg;
    (void)param;
    return mixed(ctx, ctx->multiproc ? 120 : 48, fatal);
}
static int case_graphs(cc_ctx_t *ctx, void *arg, int param, int *fatal)
{
    (void)param;
    return graphs(ctx, ((const fused_run_t *)arg)->replays, fatal);
}
static const cc_case_t fused_cases[] = {
    {"sweep", case_sweep, 0},
    {"argument errors", case_arg_errors, 0},
    {"mixed sequence", case_mixed, 0},
    {"graph replays", case_graphs, 0},
};

int main(int argc, char **argv)
{
    cc_ctx_t ctx;
    int rc = 0;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    opts.timeout_ms = 15000;
    static const char *const env_errors[] = {"SYMMEM_TIMEOUT_MS=2000", NULL};
    int timeout_mode = 0, mismatch_mode = 0;
    for (int a = 1; a < argc; a++) {
        timeout_mode |= !strcmp(argv[a], "timeout");
        mismatch_mode |= !strcmp(argv[a], "mismatch");
    }
    const int error_mode = timeout_mode || mismatch_mode;
    if (!cc_start(&argc, argv, "coll_fused", 2, 290, error_mode ? NULL : &opts, error_mode ? env_errors : NULL, &ctx, &rc))
        return rc;
    symmem_algo_t algo = SYMMEM_ALGO_ONESHOT_PUSH;
    if (error_mode && argc > 2 && symmem_algo_from_name(argv[2], &algo) != SYMMEM_OK) {
        cc_log(&ctx, "FAIL: unknown algorithm %s", argv[2]);
        return 1;
    }
    if (timeout_mode) return mode_timeout(&ctx, algo);
    int replays = ctx.multiproc ? 300 : 60;
    for (int a = 1; a + 1 < argc; a++)
        if (!strcmp(argv[a], "--replays")) replays = atoi(argv[a + 1]);
    if (replays < 1) replays = 1;
    dbufs_t D[CC_MAX_RANKS];
    memset(D, 0, sizeof D);
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        char **b[] = {&D[i].x, &D[i].res, &D[i].w, &D[i].out};
        for (int k = 0; k < 4; k++) CC_CHECK_CUDA(&ctx, cudaMalloc((void **)b[k], MAX_BYTES + 64));
    }
    if (mismatch_mode) {
        rc = mode_mismatch(&ctx, D, algo);
    } else {
        const fused_run_t run = {D, replays};
        rc = cc_run_cases(&ctx, fused_cases, (int)(sizeof fused_cases / sizeof *fused_cases), (void *)&run);
    }
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        cudaFree(D[i].x);
        cudaFree(D[i].res);
        cudaFree(D[i].w);
        cudaFree(D[i].out);
    }
    if (!mismatch_mode && !ctx.fatal) cc_barrier(&ctx);
    cc_finish(&ctx);
    if (cc_is_root(&ctx) && !mismatch_mode)
        cc_log(&ctx, "symmem_all_reduce_add_rmsnorm on %d ranks: %s", ctx.nranks,
               rc ? "FAILED" : "sweep, argument errors, mixed sequence and graph replays all correct");
    return rc;
}
