/* coll_busy: collectives interleaved with work that takes the GPU's SMs, as a tensor-parallel model runs
 * them (a GEMM before every all-reduce, other streams busy meanwhile), with co-located ranks: the case in
 * which a rank's spinning kernel can wait for a peer's blocks that cannot become resident.
 * Before every operation each rank enqueues, on its own stream, a wave of "occupy" blocks (twice as many
 * blocks as SMs, each holding 48 KiB of shared memory and 512 threads for 20 us: like a GEMM's grid), and
 * every third operation also a long occupy kernel on a second stream (a quarter of the SMs for 300 us)
 * that runs beside the collective. Operations cycle every algorithm (auto included) of all-reduce over
 * 4 KiB .. 16 MiB of bf16 (odd counts too), plus reduce-scatter and all-gather, in windows of back-to-back
 * operations without host synchronisation; every result is checked against the float64 reference and must
 * be bitwise equal on every rank.
 * Usage: coll_busy [--mp N | --inproc N] [--ops K] [--sizes S]
 *   --sizes S: the all-reduces at the first S sizes only (default all 4). Residency does not grow with the size
 *   beyond the one at which a kernel takes every block the rule grants (1 MiB does once 9 or more ranks
 *   share an H200: 11 down to 6 blocks each), while the float64 reference of a 16 MiB all-reduce grows with
 *   the ranks: 9..16 co-located ranks run --sizes 3.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

enum { K_AR = 0, K_RS, K_AG };
static const char *const kind_names[] = {"all_reduce", "reduce_scatter", "all_gather"};

typedef struct busy_op {
    int kind;
    symmem_algo_t algo;
    size_t count; /* elements per rank-buffer as the API counts them */
    size_t in_bytes, out_bytes;
    uint64_t seed;
} busy_op_t;

#define WINDOW 6

/* Every operation's dtype and its element size. */
static const symmem_dtype_t dt = SYMMEM_BFLOAT16;
static const size_t es = 2;

/* bf16 element counts: 4 KiB, 64 KiB + 1 element, 1 MiB - 3 elements, 16 MiB; the run uses the first n_sizes */
static const size_t ar_counts[] = {2048, 32769, 524285, 8388608};
#define N_AR_COUNTS ((int)(sizeof ar_counts / sizeof *ar_counts))
static int n_sizes = N_AR_COUNTS;

/* The run's state: the plan, WINDOW operations' worth of per-rank inputs and outputs, the side streams. */
typedef struct busy {
    int K;
    busy_op_t *ops;
    size_t in_max, out_max; /* bytes of one operation's slot in din / dout */
    int sms;
    unsigned char *din[CC_MAX_RANKS], *dout[CC_MAX_RANKS];
    cudaStream_t side[CC_MAX_RANKS];
    unsigned char *hout;
} busy_t;

/* The plan, the same on every rank: every algorithm at every size, then reduce-scatter / all-gather. */
static void plan(const cc_ctx_t *ctx, busy_t *b)
{
    const int n = ctx->nranks, K = b->K;
    busy_op_t *ops = calloc((size_t)K, sizeof *ops);
    const int nar = SYMMEM_ALGO_COUNT * n_sizes;
    size_t in_max = 0, out_max = 0;
    for (int j = 0; j < K; j++) {
        busy_op_t *o = &ops[j];
        if (j < nar) {
            o->kind = K_AR;
            o->algo = (symmem_algo_t)(j % SYMMEM_ALGO_COUNT);
            if (!cc_algo_known(o->algo)) o->algo = SYMMEM_ALGO_AUTO;
            o->count = ar_counts[(j / SYMMEM_ALGO_COUNT) % n_sizes];
        } else {
            o->kind = (j - nar) % 2 ? K_AG : K_RS;
            o->algo = (symmem_algo_t)((j - nar) / 2 % SYMMEM_ALGO_COUNT);
            if (!cc_algo_known(o->algo)) o->algo = SYMMEM_ALGO_AUTO;
            o->count = ((size_t)1 << (10 + 3 * ((j - nar) / 2 % 4))) + (size_t)(j % 3); /* 1K..2M elements per rank */
        }
        o->seed = cc_mix64(0xb5e7ull + (uint64_t)j);
        o->in_bytes = o->count * es * (o->kind == K_RS ? (size_t)n : 1);
        o->out_bytes = o->count * es * (o->kind == K_AG ? (size_t)n : 1);
        if (o->in_bytes > in_max) in_max = o->in_bytes;
        if (o->out_bytes > out_max) out_max = o->out_bytes;
    }
    b->ops = ops;
    b->in_max = (in_max + 255) & ~(size_t)255;
    b->out_max = (out_max + 255) & ~(size_t)255;
}

/* Per-rank buffers and side streams, the occupy kernel loaded; then the processes' barrier. 0, or 1 (main
 * returns 1). */
static int allocate(cc_ctx_t *ctx, busy_t *b)
{
    const size_t in_max = b->in_max, out_max = b->out_max;
    unsigned char **din = b->din, **dout = b->dout;
    cudaStream_t *side = b->side;
    int sms = 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        CC_CHECK_CUDA(ctx, cudaSetDevice(R->device));
        CC_CHECK_CUDA(ctx, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, R->device));
        b->sms = sms;
        CC_CHECK_CUDA(ctx, cudaMalloc((void **)&din[i], in_max * WINDOW));
        CC_CHECK_CUDA(ctx, cudaMalloc((void **)&dout[i], out_max * WINDOW));
        CC_CHECK_CUDA(ctx, cudaStreamCreateWithFlags(&side[i], cudaStreamNonBlocking));
        /* load the occupy kernel (and set its shared-memory limit) before any collective runs */
        CC_CHECK_CUDA(ctx, cc_dev_occupy(1000, 1, 512, 48 << 10, side[i]));
        CC_CHECK_CUDA(ctx, cudaDeviceSynchronize());
    }
    if (cc_barrier(ctx) != 0) return 1;
    return 0;
}

/* Operations w0..w1-1 back to back, rank after rank, no host synchronisation, each after its occupy
 * kernels. 0, or 1 after logging the first failure. */
static int enqueue_window(cc_ctx_t *ctx, const busy_t *b, int w0, int w1)
{
    const size_t in_max = b->in_max, out_max = b->out_max;
    const int sms = b->sms;
    int fail = 0;
    for (int j = w0; j < w1 && !fail; j++) {
        const busy_op_t *o = &b->ops[j];
        for (int i = 0; i < ctx->nlocal && !fail; i++) {
            cc_rank_t *R = &ctx->r[i];
            cudaSetDevice(R->device);
            unsigned char *in = b->din[i] + (size_t)(j - w0) * in_max, *out = b->dout[i] + (size_t)(j - w0) * out_max;
            cudaError_t e = cc_dev_fill(in, dt, o->in_bytes / es, o->seed, NULL, R->rank, 0, R->stream);
            if (e == cudaSuccess) e = cc_dev_occupy(20000, 2 * sms, 512, 48 << 10, R->stream);
            if (e == cudaSuccess && j % 3 == 0)
                e = cc_dev_occupy(300000, sms / 4 > 0 ? sms / 4 : 1, 512, 48 << 10, b->side[i]);
            symmem_status_t st = SYMMEM_OK;
            if (e == cudaSuccess && o->kind == K_AR)
                st = symmem_all_reduce(R->comm, in, out, o->count, dt, SYMMEM_OP_SUM, o->algo, R->stream);
            else if (e == cudaSuccess && o->kind == K_RS) {
                st = symmem_reduce_scatter(R->comm, in, out, o->count, dt, SYMMEM_OP_SUM, o->algo, R->stream);
                if (st == SYMMEM_UNSUPPORTED)
                    st = symmem_reduce_scatter(R->comm, in, out, o->count, dt, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO,
                                               R->stream);
            } else if (e == cudaSuccess) {
                st = symmem_all_gather(R->comm, in, out, o->count, dt, o->algo, R->stream);
                if (st == SYMMEM_UNSUPPORTED)
                    st = symmem_all_gather(R->comm, in, out, o->count, dt, SYMMEM_ALGO_AUTO, R->stream);
            }
            if (e != cudaSuccess || st != SYMMEM_OK) {
                cc_log(ctx, "FAIL: op %d (%s %s count %zu): rank %d: %s%s%s", j, kind_names[o->kind],
                       symmem_algo_name(o->algo), o->count, R->rank,
                       e != cudaSuccess ? cudaGetErrorString(e) : symmem_status_name(st), st != SYMMEM_OK ? ": " : "",
                       st != SYMMEM_OK ? symmem_last_error() : "");
                fail = 1;
            }
        }
    }
    return fail;
}

/* Check the window: full reference on the first local rank (every rank for reduce-scatter), and a hash of
 * every output for bitwise equality across ranks; *wrong_ops counts failed operations. 0, or 1 (main
 * returns 1). */
static int check_window(cc_ctx_t *ctx, const busy_t *b, int w0, int w1, size_t *wrong_ops)
{
    const int n = ctx->nranks;
    const size_t out_max = b->out_max;
    unsigned char *hout = b->hout;
    unsigned char *const *dout = b->dout;
    for (int j = w0; j < w1; j++) {
        const busy_op_t *o = &b->ops[j];
        uint64_t h_local[CC_MAX_RANKS], h_all[CC_MAX_RANKS];
        for (int i = 0; i < ctx->nlocal; i++) {
            cc_rank_t *R = &ctx->r[i];
            cudaSetDevice(R->device);
            CC_CHECK_CUDA(ctx,
                       cudaMemcpy(hout, dout[i] + (size_t)(j - w0) * out_max, o->out_bytes, cudaMemcpyDeviceToHost));
            h_local[i] = cc_hash(hout, o->out_bytes);
            if (i != 0 && o->kind != K_RS) continue;
            cc_bad_t bad = {0, 0, 0, 0};
            size_t wrong = 0;
            if (o->kind == K_AR)
                wrong = cc_check_reduce(hout, dt, SYMMEM_OP_SUM, o->count, 0, n, o->seed, &bad);
            else if (o->kind == K_RS)
                wrong =
                    cc_check_reduce(hout, dt, SYMMEM_OP_SUM, o->count, (uint64_t)R->rank * o->count, n, o->seed, &bad);
            else
                wrong = cc_check_gather(hout, dt, o->count, n, o->seed, &bad);
            if (wrong) {
                if (*wrong_ops < 5)
                    cc_log(ctx, "FAIL: op %d (%s %s count %zu): rank %d: %zu wrong (first at %zu: got %.9g want %.9g)",
                           j, kind_names[o->kind], symmem_algo_name(o->algo), o->count, R->rank, wrong, bad.first,
                           bad.got, bad.want);
                (*wrong_ops)++;
            }
        }
        if (o->kind == K_RS) continue; /* each rank holds another shard */
        if (cc_allgather_u64(ctx, h_local, h_all) != 0) return 1;
        for (int r = 1; r < n; r++)
            if (h_all[r] != h_all[0]) {
                if (cc_is_root(ctx))
                    cc_log(ctx, "FAIL: op %d (%s %s): rank %d's output differs bitwise from rank 0's", j,
                           kind_names[o->kind], symmem_algo_name(o->algo), r);
                (*wrong_ops)++;
                break;
            }
    }
    return 0;
}

/* Free everything, the communicators included (cc_finish). */
static void release(cc_ctx_t *ctx, busy_t *b)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaStreamSynchronize(b->side[i]);
        cudaStreamDestroy(b->side[i]);
        cudaFree(b->din[i]);
        cudaFree(b->dout[i]);
    }
    cc_barrier(ctx);
    cc_finish(ctx);
    free(b->hout);
    free(b->ops);
}

int main(int argc, char **argv)
{
    cc_ctx_t ctx;
    int rc = 0;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    opts.timeout_ms = 20000;
    if (!cc_start(&argc, argv, "coll_busy", 2, 290, &opts, NULL, &ctx, &rc)) return rc;
    const int n = ctx.nranks;
    busy_t b;
    memset(&b, 0, sizeof b);
    for (int a = 1; a + 1 < argc; a++)
        if (!strcmp(argv[a], "--sizes")) n_sizes = atoi(argv[a + 1]);
    if (n_sizes < 1 || n_sizes > N_AR_COUNTS) {
        cc_log(&ctx, "FAIL: --sizes takes 1..%d", N_AR_COUNTS);
        cc_finish(&ctx);
        return 1;
    }
    b.K = SYMMEM_ALGO_COUNT * n_sizes + 6;
    for (int a = 1; a + 1 < argc; a++)
        if (!strcmp(argv[a], "--ops")) b.K = atoi(argv[a + 1]);
    const int K = b.K;
    plan(&ctx, &b);
    if (allocate(&ctx, &b) != 0) return 1;

    b.hout = malloc(b.out_max);
    size_t wrong_ops = 0;
    int fail = 0;
    for (int w0 = 0; w0 < K && !fail; w0 += WINDOW) {
        const int w1 = w0 + WINDOW < K ? w0 + WINDOW : K;
        fail = enqueue_window(&ctx, &b, w0, w1);
        if (fail) break;
        if (cc_sync(&ctx) != cudaSuccess || cc_async_error(&ctx) != SYMMEM_OK) {
            cc_log(&ctx, "FAIL: operations %d..%d did not complete", w0, w1 - 1);
            fail = 1;
            break;
        }
        if (check_window(&ctx, &b, w0, w1, &wrong_ops) != 0) return 1;
    }
    if (fail) cc_shm_abort(ctx.shm);
    const uint64_t failed = cc_sum_u64(&ctx, (uint64_t)(wrong_ops + (size_t)fail));
    release(&ctx, &b);
    if (cc_is_root(&ctx))
        cc_log(&ctx, "checked %d operations (every algorithm, all-reduces of 4 KiB..%zu KiB) interleaved with "
               "SM-occupying work on the same and a second stream, %d ranks: %s", K, ar_counts[n_sizes - 1] * es >> 10,
               n, failed ? "FAILED" : "all correct");
    return failed ? 1 : 0;
}
