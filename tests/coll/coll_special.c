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

int main(int argc, char **argv)
{
    cc_ctx_t ctx;
    int rc = 0;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    opts.timeout_ms = 15000;
    if (!cc_start(&argc, argv, "coll_special", 2, 200, &opts, NULL, &ctx, &rc)) return rc;
    const int n = ctx.nranks;
    static const size_t counts[] = {257, 40963};
    const size_t maxc = 40963, maxb = maxc * 4;
    symmem_buffer_t sym[CC_MAX_RANKS];
    void *dsend[CC_MAX_RANKS], *drecv[CC_MAX_RANKS];
    if (cc_alloc(&ctx, 2 * maxb + 4096, sym) != SYMMEM_OK) {
        cc_shm_abort(ctx.shm);
        return 1;
    }
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        CC_CUDA_OK(&ctx, cudaMalloc(&dsend[i], maxb));
        CC_CUDA_OK(&ctx, cudaMalloc(&drecv[i], maxb));
    }
    void *in_all = malloc(maxb * (size_t)n), *hout = malloc(maxb);
    uint64_t cases = 0, failed = 0;
    int fatal = 0;
    for (int dt = 0; dt < SYMMEM_DTYPE_COUNT && !fatal; dt++)
        for (int op = 0; op < SYMMEM_REDOP_COUNT && !fatal; op++)
            for (int algo = 0; algo < SYMMEM_ALGO_COUNT && !fatal; algo++)
                for (int ci = 0; ci < 2 && !fatal; ci++) {
                    const size_t count = counts[ci], es = symmem_dtype_size((symmem_dtype_t)dt), bytes = count * es;
                    const int zero_copy = (algo + ci) % 2;
                    const uint64_t seed = cc_mix64(0x5bec1a1ull + cases);
                    for (int r = 0; r < n; r++)
                        make_input((char *)in_all + (size_t)r * bytes, (symmem_dtype_t)dt, count, seed, r, n);
                    uint64_t st_l[CC_MAX_RANKS], st_a[CC_MAX_RANKS], h_l[CC_MAX_RANKS], h_a[CC_MAX_RANKS];
                    void *rp[CC_MAX_RANKS];
                    for (int i = 0; i < ctx.nlocal; i++) {
                        cc_rank_t *R = &ctx.r[i];
                        cudaSetDevice(R->device);
                        char *sbase = zero_copy ? symmem_buffer_ptr(sym[i]) : dsend[i];
                        void *sp = sbase;
                        rp[i] = zero_copy ? (void *)(sbase + maxb + 4096) : drecv[i];
                        CC_CUDA_OK(&ctx, cudaMemcpy(sp, (char *)in_all + (size_t)R->rank * bytes, bytes, cudaMemcpyHostToDevice));
                        CC_CUDA_OK(&ctx, cudaMemset(rp[i], 0, bytes));
                        symmem_status_t st = symmem_all_reduce(R->comm, sp, rp[i], count, (symmem_dtype_t)dt,
                                                               (symmem_redop_t)op, (symmem_algo_t)algo, R->stream);
                        st_l[i] = (uint64_t)st;
                        if (st != SYMMEM_OK)
                            cc_log(&ctx, "FAIL: all_reduce %s %s %s: %s: %s", symmem_dtype_name((symmem_dtype_t)dt),
                                   symmem_redop_name((symmem_redop_t)op), symmem_algo_name((symmem_algo_t)algo),
                                   symmem_status_name(st), symmem_last_error());
                    }
                    if (cc_allgather_u64(&ctx, st_l, st_a) != 0) {
                        fatal = 1;
                        break;
                    }
                    int nok = 0;
                    for (int r = 0; r < n; r++) nok += st_a[r] == SYMMEM_OK;
                    if (nok != n || cc_sync(&ctx) != cudaSuccess || cc_async_error(&ctx) != SYMMEM_OK) {
                        fatal = 1;
                        failed++;
                        cc_shm_abort(ctx.shm);
                        break;
                    }
                    int bad_case = 0;
                    for (int i = 0; i < ctx.nlocal; i++) {
                        cudaSetDevice(ctx.r[i].device);
                        CC_CUDA_OK(&ctx, cudaMemcpy(hout, rp[i], bytes, cudaMemcpyDeviceToHost));
                        h_l[i] = cc_hash(hout, bytes);
                        if (i > 0) continue;
                        size_t wrong = 0;
                        for (size_t k = 0; k < count; k++) {
                            double in[CC_MAX_RANKS], ref;
                            for (int r = 0; r < n; r++) in[r] = cc_load((char *)in_all + (size_t)r * bytes, (symmem_dtype_t)dt, k);
                            double got = cc_load(hout, (symmem_dtype_t)dt, k);
                            if (!cc_elem_ok(got, in, n, (symmem_redop_t)op, (symmem_dtype_t)dt, &ref)) {
                                if (wrong < 3)
                                    cc_log(&ctx, "FAIL: all_reduce %s %s %s count=%zu%s: element %zu (pattern %d): got %g want %g",
                                           symmem_dtype_name((symmem_dtype_t)dt), symmem_redop_name((symmem_redop_t)op),
                                           symmem_algo_name((symmem_algo_t)algo), count, zero_copy ? " zero-copy" : "",
                                           k, planted(count, k), got, ref);
                                wrong++;
                            }
                        }
                        bad_case |= wrong != 0;
                    }
                    if (cc_allgather_u64(&ctx, h_l, h_a) != 0) {
                        fatal = 1;
                        break;
                    }
                    for (int r = 1; r < n; r++)
                        if (h_a[r] != h_a[0]) {
                            if (cc_is_root(&ctx))
                                cc_log(&ctx, "FAIL: all_reduce %s %s %s count=%zu: rank %d differs bitwise from rank 0",
                                       symmem_dtype_name((symmem_dtype_t)dt), symmem_redop_name((symmem_redop_t)op),
                                       symmem_algo_name((symmem_algo_t)algo), count, r);
                            bad_case = 1;
                            break;
                        }
                    failed += cc_sum_u64(&ctx, (uint64_t)bad_case) != 0;
                    cases++;
                }
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        cudaFree(dsend[i]);
        cudaFree(drecv[i]);
    }
    if (!fatal) {
        cc_barrier(&ctx);
        cc_free(&ctx, sym);
    }
    cc_finish(&ctx);
    free(in_all);
    free(hout);
    if (cc_is_root(&ctx))
        cc_log(&ctx, "checked NaN/Inf/overflow propagation (IEEE) for every dtype x op x algorithm: %llu cases passed, "
               "%llu failed%s", (unsigned long long)(cases - failed), (unsigned long long)failed,
               fatal ? " (stopped early)" : "");
    return failed || fatal ? 1 : 0;
}
