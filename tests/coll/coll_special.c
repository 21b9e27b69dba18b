/* coll_special: NaN and Inf through all-reduce, for every dtype x op x algorithm (and copy-in and zero
 * copy). Finite random data with special values planted at the start, the middle and the tail (so both
 * halves of a two-shot split and the unaligned tail see them):
 *   +Inf on one rank                       sum +Inf, max +Inf, min = min of the others
 *   +Inf on rank 0, -Inf on rank 1         sum NaN,  max +Inf, min -Inf
 *   NaN on the last rank                   sum NaN;  max/min: NaN or the max/min of the others (see below)
 *   -Inf on every rank                     sum -Inf, max -Inf, min -Inf
 *   a large finite value on every rank     sum overflows the dtype: +Inf (fp16 40000, bf16/fp32 2.5e38)
 *   NaN on rank 1, +Inf on rank 0          sum NaN
 * What is asserted for max/min with a NaN input: either NaN (IEEE 754-2019 maximum/minimum) or the max/min
 * of the non-NaN inputs (754-2008 maxNum/minNum, CUDA's fmaxf/fminf); both are IEEE behaviours, the
 * header does not pick one. Every rank must produce the same bits either way. Everything else must match
 * the float64 reference as in coll_sweep.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define NPAT 6

static double pattern_value(int pat, int rank, int n, symmem_dtype_t dt, double normal)
{
    double big = dt == SYMMEM_FLOAT16 ? 40000.0 : 2.5e38;
    switch (pat) {
    case 0: return rank == 0 ? INFINITY : normal;
    case 1: return rank == 0 ? INFINITY : rank == 1 ? -INFINITY : normal;
    case 2: return rank == n - 1 ? NAN : normal;
    case 3: return -INFINITY;
    case 4: return big;
    default: return rank == 1 ? NAN : rank == 0 ? INFINITY : normal;
    }
}

/* Positions of the planted values: 6 at the start, 6 in the middle, 6 at the end. */
static int planted(size_t count, size_t k)
{
    if (k < NPAT) return (int)k;
    if (k >= count / 2 && k < count / 2 + NPAT) return (int)(k - count / 2);
    if (k + NPAT >= count) return (int)(k + NPAT - count);
    return -1;
}

static void make_input(void *dst, symmem_dtype_t dt, size_t count, uint64_t seed, int rank, int n)
{
    cc_fill(dst, dt, count, seed, rank, 0);
    for (size_t k = 0; k < count; k++) {
        int p = planted(count, k);
        if (p >= 0) cc_store(dst, dt, k, pattern_value(p, rank, n, dt, cc_load(dst, dt, k)));
    }
}

/* The buffers every case uses: a symmetric buffer (zero copy: input at 0, output after maxb + 4096),
 * cudaMalloc send/recv (copy-in), the host inputs of every rank and one output. */
typedef struct special_run {
    symmem_buffer_t sym[CC_MAX_RANKS];
    void *dsend[CC_MAX_RANKS], *drecv[CC_MAX_RANKS];
    void *in_all, *hout;
    size_t maxb;
} special_run_t;

static const size_t counts[] = {257, 40963};

typedef struct special_case {
    symmem_dtype_t dt;
    symmem_redop_t op;
    symmem_algo_t algo;
    size_t count;
    int zero_copy;
    uint64_t seed;
} special_case_t;

static void case_name(const special_case_t *c, char *buf, size_t len)
{
    snprintf(buf, len, "all_reduce %s %s %s count=%zu%s", symmem_dtype_name(c->dt), symmem_redop_name(c->op),
             symmem_algo_name(c->algo), c->count, c->zero_copy ? " zero-copy" : "");
}

/* Upload the inputs and launch on every local rank; rp[i]: where rank i's result lands. 0, or 1 when CUDA
 * failed (logged, channel aborted). st_l[i]: the call's status. Every local rank's buffers are prepared
 * before the first collective is enqueued: this thread drives all local ranks, and a synchronous copy
 * between two ranks' launches would wait inside the driver while the first rank's collective waits for the
 * second (docs/collectives.md, "Blocking host calls"; the copy-engine algorithm's copies stalled that way). */
static int launch(cc_ctx_t *ctx, special_run_t *S, const special_case_t *c, void **rp, uint64_t *st_l)
{
    const size_t bytes = c->count * symmem_dtype_size(c->dt);
    void *sp[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        char *sbase = c->zero_copy ? symmem_buffer_ptr(S->sym[i]) : S->dsend[i];
        sp[i] = sbase;
        rp[i] = c->zero_copy ? (void *)(sbase + S->maxb + 4096) : S->drecv[i];
        /* on the rank's own (non-blocking) stream, and waited for: a legacy-stream cudaMemcpy from pageable
         * memory may return before its data lands, and cudaMemset is asynchronous */
        CC_CHECK_CUDA(ctx, cudaMemcpyAsync(sp[i], (char *)S->in_all + (size_t)R->rank * bytes, bytes,
                                        cudaMemcpyHostToDevice, R->stream));
        CC_CHECK_CUDA(ctx, cudaMemsetAsync(rp[i], 0, bytes, R->stream));
        CC_CHECK_CUDA(ctx, cudaStreamSynchronize(R->stream));
    }
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        symmem_status_t st = symmem_all_reduce(R->comm, sp[i], rp[i], c->count, c->dt, c->op, c->algo, R->stream);
        st_l[i] = (uint64_t)st;
        if (st != SYMMEM_OK) {
            char name[128];
            case_name(c, name, sizeof name);
            cc_log(ctx, "FAIL: %s: %s: %s", name, symmem_status_name(st), symmem_last_error());
        }
    }
    return 0;
}

/* Copy each local result back and hash it (h_l); the first local rank's is checked element by element
 * against the IEEE rules (*bad set). 0, or 1 when CUDA failed. */
static int verify(cc_ctx_t *ctx, special_run_t *S, const special_case_t *c, void *const *rp, uint64_t *h_l, int *bad)
{
    const int n = ctx->nranks;
    const size_t bytes = c->count * symmem_dtype_size(c->dt);
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        CC_CHECK_CUDA(ctx, cudaMemcpy(S->hout, rp[i], bytes, cudaMemcpyDeviceToHost));
        h_l[i] = cc_hash(S->hout, bytes);
        if (i > 0) continue;
        size_t wrong = 0;
        for (size_t k = 0; k < c->count; k++) {
            double in[CC_MAX_RANKS], ref;
            for (int r = 0; r < n; r++) in[r] = cc_load((char *)S->in_all + (size_t)r * bytes, c->dt, k);
            double got = cc_load(S->hout, c->dt, k);
            if (!cc_elem_ok(got, in, n, c->op, c->dt, &ref)) {
                if (wrong < 3) {
                    char name[128];
                    case_name(c, name, sizeof name);
                    cc_log(ctx, "FAIL: %s: element %zu (pattern %d): got %g want %g", name, k, planted(c->count, k),
                           got, ref);
                }
                wrong++;
            }
        }
        *bad |= wrong != 0;
    }
    return 0;
}

/* One dtype x op x algorithm x size: 0 passed (on every rank), 1 failed; *fatal when the ranks cannot go
 * on (a call refused on some rank, CUDA or the channel failed). */
static int run_one(cc_ctx_t *ctx, special_run_t *S, const special_case_t *c, int *fatal)
{
    const int n = ctx->nranks;
    const size_t bytes = c->count * symmem_dtype_size(c->dt);
    for (int r = 0; r < n; r++) make_input((char *)S->in_all + (size_t)r * bytes, c->dt, c->count, c->seed, r, n);
    uint64_t st_l[CC_MAX_RANKS], st_a[CC_MAX_RANKS], h_l[CC_MAX_RANKS], h_a[CC_MAX_RANKS];
    void *rp[CC_MAX_RANKS];
    if (launch(ctx, S, c, rp, st_l) != 0 || cc_allgather_u64(ctx, st_l, st_a) != 0) return *fatal = 1, 1;
    int nok = 0;
    for (int r = 0; r < n; r++) nok += st_a[r] == SYMMEM_OK;
    if (nok != n || cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) {
        cc_shm_abort(ctx->shm);
        return *fatal = 1, 1;
    }
    int bad = 0;
    if (verify(ctx, S, c, rp, h_l, &bad) != 0 || cc_allgather_u64(ctx, h_l, h_a) != 0) return *fatal = 1, 1;
    for (int r = 1; r < n; r++)
        if (h_a[r] != h_a[0]) {
            if (cc_is_root(ctx)) {
                char name[128];
                case_name(c, name, sizeof name);
                cc_log(ctx, "FAIL: %s: rank %d differs bitwise from rank 0", name, r);
            }
            bad = 1;
            break;
        }
    return cc_sum_u64(ctx, (uint64_t)bad) != 0;
}

/* One case per algorithm: every dtype x op x size under it (copy-in or zero copy alternating). The seeds
 * are those of the one loop over dtype x op x algorithm x size this test ran before it had cases. */
static int case_algo(cc_ctx_t *ctx, void *arg, int algo, int *fatal)
{
    int failures = 0;
    for (int dt = 0; dt < SYMMEM_DTYPE_COUNT && !*fatal; dt++)
        for (int op = 0; op < SYMMEM_REDOP_COUNT && !*fatal; op++)
            for (int ci = 0; ci < 2 && !*fatal; ci++) {
                const uint64_t index = (((uint64_t)dt * SYMMEM_REDOP_COUNT + (uint64_t)op) * SYMMEM_ALGO_COUNT +
                                        (uint64_t)algo) * 2 + (uint64_t)ci;
                const special_case_t c = {(symmem_dtype_t)dt, (symmem_redop_t)op, (symmem_algo_t)algo, counts[ci],
                                          (algo + ci) % 2, cc_mix64(0x5bec1a1ull + index)};
                failures += run_one(ctx, arg, &c, fatal);
            }
    return failures;
}

int main(int argc, char **argv)
{
    cc_ctx_t ctx;
    int rc = 0;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    opts.timeout_ms = 15000;
    if (!cc_start(&argc, argv, "coll_special", 2, 200, &opts, NULL, &ctx, &rc)) return rc;
    const int n = ctx.nranks;
    static special_run_t S;
    S.maxb = 40963 * 4;
    if (cc_alloc(&ctx, 2 * S.maxb + 4096, S.sym) != SYMMEM_OK) {
        cc_shm_abort(ctx.shm);
        return 1;
    }
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        CC_CHECK_CUDA(&ctx, cudaMalloc(&S.dsend[i], S.maxb));
        CC_CHECK_CUDA(&ctx, cudaMalloc(&S.drecv[i], S.maxb));
    }
    S.in_all = malloc(S.maxb * (size_t)n);
    S.hout = malloc(S.maxb);
    cc_case_t cases[SYMMEM_ALGO_COUNT];
    int ncases = 0;
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++)
        if (cc_algo_known(a)) cases[ncases++] = (cc_case_t){symmem_algo_name((symmem_algo_t)a), case_algo, a};
    rc = cc_run_cases(&ctx, cases, ncases, &S);
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        cudaFree(S.dsend[i]);
        cudaFree(S.drecv[i]);
    }
    if (!ctx.fatal) {
        cc_barrier(&ctx);
        cc_free(&ctx, S.sym);
    }
    cc_finish(&ctx);
    free(S.in_all);
    free(S.hout);
    if (cc_is_root(&ctx))
        cc_log(&ctx, "checked NaN/Inf/overflow propagation (IEEE) for every dtype x op x algorithm: %s",
               rc ? "FAILED" : "every case passed");
    return rc;
}
