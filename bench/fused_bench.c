/* symmem-fused-bench: the fused all-reduce + residual add + RMSNorm (symmem_all_reduce_add_rmsnorm) against
 * the unfused sequences a framework runs instead, in one run, on the same GPUs, with the same timing:
 *   fused     one symmem_all_reduce_add_rmsnorm (per -a algorithm; auto shows what it chose)
 *   sym-3k    symmem_all_reduce + a residual-add kernel + an RMSNorm kernel (torch add + torch rms_norm)
 *   sym-2k    symmem_all_reduce + one add-and-norm kernel (vLLM's / SGLang's fused_add_rms_norm)
 *   nccl-3k, nccl-2k   the same with ncclAllReduce (when built with NCCL and no two ranks share a GPU)
 * and the ratios fused / each. Shapes: hidden -H (default 4096,7168) x tokens -T (default 1..128, powers of
 * two), dtype -d (bf16), eps 1e-6. Inputs: x differs per rank, residual and weight are the same everywhere.
 *
 * Timing (as symmem-bench): per shape and variant, -n calls are captured into one CUDA graph per rank,
 * warmed up (-w eager calls and one replay), then replayed -R times, each replay after a host barrier and
 * one untimed replay that aligns the ranks, timed with CUDA events on each rank's stream; per-call time =
 * elapsed / n; a rank's time is the median over replays; the table shows the slowest rank. The residual
 * keeps growing over the calls (it is updated in place); that changes no timing.
 * Check (-c 1, default): before timing each shape, fresh inputs through fused (every -a algorithm) and
 * through sym-3k: out and residual must be bitwise equal (the baseline kernels use the fused kernel's
 * arithmetic) and bitwise equal across ranks; nccl-3k must agree within one bf16 rounding. #wrong counts
 * the elements that do not, plus ranks that differ. Exit status 1 if any #wrong.
 * Ranks: --mp N (processes, default: one per GPU, at least 2; ranks that share a GPU need MPS) or
 * --inproc N (threads of one process).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "harness.h"
#include "collectives/fused.h"
#include "fused_bench.h"

#ifdef SYMMEM_HAVE_NCCL
#include <nccl.h>
#endif

#define RES_RANK 16
#define W_RANK 17
#define MAX_LIST 32

enum { V_SYM3 = 0, V_SYM2, V_NCCL3, V_NCCL2, V_BASE, V_FUSED = V_BASE }; /* V_FUSED + k: the k-th -a algorithm */

typedef struct fb_opts {
    size_t hidden[MAX_LIST], tokens[MAX_LIST];
    int nh, nt;
    symmem_dtype_t dt;
    float eps;
    int iters, warmup, replays, check, nccl;
    symmem_algo_t algos[3];
    int nalgos;
} fb_opts_t;

typedef struct fb {
    fb_opts_t o;
    cc_ctx_t ctx;
    char *x[CC_MAX_RANKS], *res[CC_MAX_RANKS], *w[CC_MAX_RANKS], *out[CC_MAX_RANKS], *h[CC_MAX_RANKS];
    int have_nccl;
#ifdef SYMMEM_HAVE_NCCL
    ncclComm_t nccl[CC_MAX_RANKS];
#endif
} fb_t;

static int parse_list(const char *s, size_t *out, int *n)
{
    *n = 0;
    for (const char *p = s; *p && *n < MAX_LIST;) {
        char *end;
        const unsigned long long v = strtoull(p, &end, 10);
        if (end == p || v == 0) return -1;
        out[(*n)++] = (size_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *n > 0 ? 0 : -1;
}

static int parse(int argc, char **argv, fb_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->hidden[0] = 4096;
    o->hidden[1] = 7168;
    o->nh = 2;
    for (size_t t = 1; t <= 128; t *= 2) o->tokens[o->nt++] = t;
    o->dt = SYMMEM_BFLOAT16;
    o->eps = 1e-6f;
    o->iters = 20;
    o->warmup = 5;
    o->replays = 20;
    o->check = 1;
#ifdef SYMMEM_HAVE_NCCL
    o->nccl = 1;
#endif
    o->algos[0] = SYMMEM_ALGO_AUTO;
    o->nalgos = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: symmem-fused-bench [--mp N | --inproc N] [-H 4096,7168] [-T 1,2,...,128] [-d bf16|half|float]\n"
                   "       [-a auto|oneshot_push|twoshot_lamport|all] [-n 20] [-w 5] [-R 20] [-c 0|1] [--nccl 0|1] [--eps E]\n");
            exit(0);
        }
        if (!v) {
            fprintf(stderr, "symmem-fused-bench: %s needs a value (-h for help)\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "-H")) {
            if (parse_list(v, o->hidden, &o->nh) != 0) return -1;
        } else if (!strcmp(a, "-T")) {
            if (parse_list(v, o->tokens, &o->nt) != 0) return -1;
        } else if (!strcmp(a, "-d")) {
            if (!strcasecmp(v, "bf16") || !strcasecmp(v, "bfloat16")) o->dt = SYMMEM_BFLOAT16;
            else if (!strcasecmp(v, "half") || !strcasecmp(v, "fp16")) o->dt = SYMMEM_FLOAT16;
            else if (!strcasecmp(v, "float") || !strcasecmp(v, "fp32")) o->dt = SYMMEM_FLOAT32;
            else return -1;
        } else if (!strcmp(a, "-a")) {
            if (!strcasecmp(v, "all")) {
                o->algos[0] = SYMMEM_ALGO_AUTO;
                o->algos[1] = SYMMEM_ALGO_ONESHOT_PUSH;
                o->algos[2] = SYMMEM_ALGO_TWOSHOT_LAMPORT;
                o->nalgos = 3;
            } else if (symmem_algo_from_name(v, &o->algos[0]) != SYMMEM_OK) {
                return -1;
            }
        } else if (!strcmp(a, "-n")) {
            o->iters = atoi(v);
        } else if (!strcmp(a, "-w")) {
            o->warmup = atoi(v);
        } else if (!strcmp(a, "-R")) {
            o->replays = atoi(v);
        } else if (!strcmp(a, "-c")) {
            o->check = atoi(v);
        } else if (!strcmp(a, "--nccl")) {
            o->nccl = atoi(v);
        } else if (!strcmp(a, "--eps")) {
            o->eps = strtof(v, NULL);
        } else {
            fprintf(stderr, "symmem-fused-bench: unknown option %s (-h for help)\n", a);
            return -1;
        }
    }
    for (int k = 0; k < o->nh; k++)
        if (o->hidden[k] > SYMMEM_RMSNORM_MAX_HIDDEN) return -1;
    return o->iters >= 1 && o->replays >= 1 ? 0 : -1;
}

/* ---- one call of a variant on every local rank ------------------------------------------------------------- */
static int enqueue_all(fb_t *b, int v, size_t T, size_t H)
{
    cc_ctx_t *ctx = &b->ctx;
    const symmem_dtype_t dt = b->o.dt;
    const size_t count = T * H;
    const int nccl = v == V_NCCL3 || v == V_NCCL2;
    /* the all-reduce of every rank first (an NCCL group when one thread drives several ranks: its kernels
     * launch at ncclGroupEnd, so the rank's next kernels must be enqueued after it) */
#ifdef SYMMEM_HAVE_NCCL
    if (nccl && ctx->nlocal > 1) ncclGroupStart();
#endif
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        symmem_status_t st = SYMMEM_OK;
        if (v >= V_FUSED) {
            st = symmem_all_reduce_add_rmsnorm(R->comm, b->x[i], b->res[i], b->w[i], b->out[i], T, H, b->o.eps, dt,
                                               b->o.algos[v - V_FUSED], R->stream);
        } else if (!nccl) {
            st = symmem_all_reduce(R->comm, b->x[i], b->h[i], count, dt, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, R->stream);
        } else {
#ifdef SYMMEM_HAVE_NCCL
            const ncclDataType_t t = dt == SYMMEM_FLOAT32 ? ncclFloat32 : dt == SYMMEM_FLOAT16 ? ncclFloat16 : ncclBfloat16;
            if (ncclAllReduce(b->x[i], b->h[i], count, t, ncclSum, b->nccl[i], R->stream) != ncclSuccess) return -1;
#else
            return -1;
#endif
        }
        if (st != SYMMEM_OK) {
            cc_log(ctx, "%s: %s", symmem_status_name(st), symmem_last_error());
            return -1;
        }
    }
#ifdef SYMMEM_HAVE_NCCL
    if (nccl && ctx->nlocal > 1 && ncclGroupEnd() != ncclSuccess) return -1;
#endif
    if (v >= V_FUSED) return 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        cudaError_t e;
        if (v == V_SYM3 || v == V_NCCL3) {
            e = fb_add(b->res[i], b->h[i], count, dt, R->stream);
            if (e == cudaSuccess) e = fb_rows(b->res[i], NULL, b->w[i], b->out[i], T, H, b->o.eps, dt, R->stream);
        } else {
            e = fb_rows(b->res[i], b->h[i], b->w[i], b->out[i], T, H, b->o.eps, dt, R->stream);
        }
        if (e != cudaSuccess) {
            cc_log(ctx, "baseline kernels: %s", cudaGetErrorString(e));
            return -1;
        }
    }
    return 0;
}

/* ---- check ------------------------------------------------------------------------------------------------- */
static int fill(fb_t *b, size_t T, size_t H, uint64_t seed)
{
    for (int i = 0; i < b->ctx.nlocal; i++) {
        cc_rank_t *R = &b->ctx.r[i];
        cudaSetDevice(R->device);
        if (cc_dev_fill(b->x[i], b->o.dt, T * H, seed, NULL, R->rank, 0, R->stream) != cudaSuccess ||
            cc_dev_fill(b->res[i], b->o.dt, T * H, seed + 1, NULL, RES_RANK, 0, R->stream) != cudaSuccess ||
            cc_dev_fill(b->w[i], b->o.dt, H, seed + 2, NULL, W_RANK, 0, R->stream) != cudaSuccess)
            return -1;
    }
    return cc_sync(&b->ctx) == cudaSuccess ? 0 : -1;
}

/* Run variant v once on fresh inputs; local rank 0's out and residual into ho, hr; every local rank's hash. */
static int run_once(fb_t *b, int v, size_t T, size_t H, uint64_t seed, unsigned char *ho, unsigned char *hr,
                    unsigned char *scratch, uint64_t *hash)
{
    const size_t bytes = T * H * symmem_dtype_size(b->o.dt);
    if (fill(b, T, H, seed) != 0 || cc_barrier(&b->ctx) != 0 || enqueue_all(b, v, T, H) != 0 ||
        cc_sync(&b->ctx) != cudaSuccess || cc_async_error(&b->ctx) != SYMMEM_OK)
        return -1;
    for (int i = 0; i < b->ctx.nlocal; i++) {
        cudaSetDevice(b->ctx.r[i].device);
        unsigned char *o = i ? scratch : ho, *r = i ? scratch + bytes : hr;
        if (cudaMemcpy(o, b->out[i], bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(r, b->res[i], bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
            return -1;
        hash[i] = cc_mix64(cc_hash(o, bytes) ^ 3 * cc_hash(r, bytes));
    }
    return 0;
}

static uint64_t count_diff(const unsigned char *a, const unsigned char *b, size_t count, symmem_dtype_t dt, double tol)
{
    uint64_t d = 0;
    for (size_t k = 0; k < count; k++) {
        const double x = cc_load(a, dt, k), y = cc_load(b, dt, k);
        if (tol == 0 ? memcmp(a + k * symmem_dtype_size(dt), b + k * symmem_dtype_size(dt), symmem_dtype_size(dt)) != 0
                     : !(fabs(x - y) <= tol * fmax(fabs(x), fabs(y)) + 1e-30))
            d++;
    }
    return d;
}

/* #wrong of one shape (the same on every process), -1 if something failed to run. */
static int64_t check_shape(fb_t *b, size_t T, size_t H)
{
    const symmem_dtype_t dt = b->o.dt;
    const size_t bytes = T * H * symmem_dtype_size(dt), count = T * H;
    const uint64_t seed = cc_mix64(0xfb0ull ^ (T * 1000003u + H));
    unsigned char *ro = malloc(bytes), *rr = malloc(bytes), *go = malloc(bytes), *gr = malloc(bytes),
                  *scratch = malloc(2 * bytes);
    uint64_t wrong = 0, href[CC_MAX_RANKS], hv[CC_MAX_RANKS], all[CC_MAX_RANKS];
    int rc = ro && rr && go && gr && scratch ? run_once(b, V_SYM3, T, H, seed, ro, rr, scratch, href) : -1;
    for (int a = 0; a < b->o.nalgos && rc == 0; a++) {
        rc = run_once(b, V_FUSED + a, T, H, seed, go, gr, scratch, hv);
        if (rc != 0) break;
        wrong += count_diff(go, ro, count, dt, 0) + count_diff(gr, rr, count, dt, 0);
        if (cc_allgather_u64(&b->ctx, hv, all) != 0) rc = -1;
        for (int r = 1; r < b->ctx.nranks && rc == 0; r++) wrong += all[r] != all[0];
    }
    if (rc == 0 && b->have_nccl) {
        rc = run_once(b, V_NCCL3, T, H, seed, go, gr, scratch, hv);
        const double tol = dt == SYMMEM_FLOAT32 ? 1e-5 : dt == SYMMEM_FLOAT16 ? ldexp(1.0, -9) : ldexp(1.0, -7);
        if (rc == 0) wrong += count_diff(go, ro, count, dt, tol) + count_diff(gr, rr, count, dt, tol);
    }
    free(ro);
    free(rr);
    free(go);
    free(gr);
    free(scratch);
    if (cc_sum_u64(&b->ctx, rc != 0) != 0) return -1;
    return (int64_t)cc_sum_u64(&b->ctx, wrong);
}

/* ---- timing ------------------------------------------------------------------------------------------------ */
static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Slowest rank's median per-call time of variant v in microseconds, or -1. */
static double timing(fb_t *b, int v, size_t T, size_t H)
{
    cc_ctx_t *ctx = &b->ctx;
    const fb_opts_t *o = &b->o;
    cudaGraphExec_t exec[CC_MAX_RANKS] = {0};
    cudaGraph_t graph[CC_MAX_RANKS] = {0};
    cudaEvent_t ev0[CC_MAX_RANKS], ev1[CC_MAX_RANKS];
    double *t = calloc((size_t)o->replays * CC_MAX_RANKS, sizeof *t);
    int rc = t ? 0 : -1;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaEventCreate(&ev0[i]);
        cudaEventCreate(&ev1[i]);
    }
    for (int k = 0; k < o->warmup && rc == 0; k++) rc = enqueue_all(b, v, T, H);
    for (int i = 0; i < ctx->nlocal && rc == 0; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (cudaStreamBeginCapture(ctx->r[i].stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) rc = -1;
    }
    for (int k = 0; k < o->iters && rc == 0; k++) rc = enqueue_all(b, v, T, H);
    for (int i = 0; i < ctx->nlocal; i++) { /* every capture ends before any graph is instantiated */
        cudaSetDevice(ctx->r[i].device);
        enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
        cudaStreamIsCapturing(ctx->r[i].stream, &cs);
        if (cs != cudaStreamCaptureStatusNone && cudaStreamEndCapture(ctx->r[i].stream, &graph[i]) != cudaSuccess) rc = -1;
    }
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (rc == 0 && cudaGraphInstantiate(&exec[i], graph[i], 0) != cudaSuccess) rc = -1;
        if (graph[i]) cudaGraphDestroy(graph[i]);
    }
    for (int i = 0; i < ctx->nlocal && rc == 0; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaGraphLaunch(exec[i], ctx->r[i].stream);
    }
    if (cc_sync(ctx) != cudaSuccess) rc = -1;
    for (int rep = 0; rep < o->replays && rc == 0; rep++) {
        if (cc_barrier(ctx) != 0) {
            rc = -1;
            break;
        }
        for (int i = 0; i < ctx->nlocal; i++) { /* untimed: the ranks leave it within a call of each other */
            cudaSetDevice(ctx->r[i].device);
            cudaGraphLaunch(exec[i], ctx->r[i].stream);
        }
        for (int i = 0; i < ctx->nlocal; i++) {
            cudaSetDevice(ctx->r[i].device);
            cudaEventRecord(ev0[i], ctx->r[i].stream);
            cudaGraphLaunch(exec[i], ctx->r[i].stream);
            cudaEventRecord(ev1[i], ctx->r[i].stream);
        }
        if (cc_sync(ctx) != cudaSuccess) rc = -1;
        for (int i = 0; i < ctx->nlocal && rc == 0; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, ev0[i], ev1[i]);
            t[(size_t)i * o->replays + rep] = 1000.0 * ms / o->iters;
        }
    }
    if (rc == 0 && cc_async_error(ctx) != SYMMEM_OK) rc = -1;
    uint64_t ml[CC_MAX_RANKS] = {0}, ma[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal && t; i++) {
        double *ti = t + (size_t)i * o->replays;
        qsort(ti, (size_t)o->replays, sizeof *ti, cmp_double);
        const double med = o->replays % 2 ? ti[o->replays / 2] : 0.5 * (ti[o->replays / 2 - 1] + ti[o->replays / 2]);
        memcpy(&ml[i], &med, sizeof med);
    }
    free(t);
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (exec[i]) cudaGraphExecDestroy(exec[i]);
        cudaEventDestroy(ev0[i]);
        cudaEventDestroy(ev1[i]);
    }
    if (cc_sum_u64(ctx, rc != 0) != 0 || cc_allgather_u64(ctx, ml, ma) != 0) return -1;
    double worst = 0;
    for (int k = 0; k < ctx->nranks; k++) {
        double x;
        memcpy(&x, &ma[k], sizeof x);
        if (x > worst) worst = x;
    }
    return worst;
}

/* ---- setup ------------------------------------------------------------------------------------------------- */
static int setup(fb_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    size_t maxh = 0, maxt = 0;
    for (int k = 0; k < b->o.nh; k++) maxh = b->o.hidden[k] > maxh ? b->o.hidden[k] : maxh;
    for (int k = 0; k < b->o.nt; k++) maxt = b->o.tokens[k] > maxt ? b->o.tokens[k] : maxt;
    const size_t bytes = maxh * maxt * 4 + 256;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        char **p[] = {&b->x[i], &b->res[i], &b->w[i], &b->out[i], &b->h[i]};
        for (int k = 0; k < 5; k++)
            if (cudaMalloc((void **)p[k], bytes) != cudaSuccess || cc_rank_memset(&ctx->r[i], *p[k], 0, bytes) != cudaSuccess)
                return -1;
        if (fb_preload() != cudaSuccess) return -1;
    }
    b->have_nccl = 0;
#ifdef SYMMEM_HAVE_NCCL
    if (b->o.nccl && ctx->nranks <= ctx->ngpus) {
        ncclResult_t nr = ncclSuccess;
        if (ctx->multiproc) {
            ncclUniqueId id;
            memset(&id, 0, sizeof id);
            if (ctx->proc == 0) nr = ncclGetUniqueId(&id);
            unsigned char all[CC_MAX_RANKS * sizeof(ncclUniqueId)];
            if (cc_shm_allgather(ctx->shm, ctx->proc, ctx->nprocs, &id, sizeof id, all) != 0) return -1;
            memcpy(&id, all, sizeof id);
            if (nr == ncclSuccess) nr = ncclCommInitRank(&b->nccl[0], ctx->nranks, id, ctx->proc);
        } else {
            int devices[CC_MAX_RANKS];
            for (int r = 0; r < ctx->nranks; r++) devices[r] = ctx->r[r].device;
            nr = ncclCommInitAll(b->nccl, ctx->nranks, devices);
        }
        if (nr != ncclSuccess) cc_log(ctx, "NCCL init failed: %s (continuing without it)", ncclGetErrorString(nr));
        b->have_nccl = cc_sum_u64(ctx, nr != ncclSuccess) == 0;
    }
#endif
    return 0;
}

static void teardown(fb_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    cc_barrier(ctx);
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
#ifdef SYMMEM_HAVE_NCCL
        if (b->have_nccl) ncclCommDestroy(b->nccl[i]);
#endif
        cudaFree(b->x[i]);
        cudaFree(b->res[i]);
        cudaFree(b->w[i]);
        cudaFree(b->out[i]);
        cudaFree(b->h[i]);
    }
    cc_finish(ctx);
}

/* ---- the run ----------------------------------------------------------------------------------------------- */
static void ratio(char *buf, size_t len, double a, double b)
{
    if (a > 0 && b > 0) snprintf(buf, len, "%6.2f", a / b);
    else snprintf(buf, len, "%6s", "-");
}

static void time_col(char *buf, size_t len, double us)
{
    if (us > 0) snprintf(buf, len, "%8.2f", us);
    else snprintf(buf, len, "%8s", "-");
}

static int run(fb_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    const fb_opts_t *o = &b->o;
    const int root = cc_is_root(ctx);
    const size_t es = symmem_dtype_size(o->dt);
    uint64_t wrong_total = 0;
    int failed = 0;
    /* per fused algorithm: the worst ratio to sym-3k at tokens <= 64 and at any size, and where */
    double worst64[3] = {0, 0, 0}, worst[3] = {0, 0, 0};
    size_t w64h[3] = {0}, w64t[3] = {0}, wh[3] = {0}, wt[3] = {0};
    if (root) {
        printf("# symmem-fused-bench: all_reduce_add_rmsnorm, %d ranks (%s) on %d GPU(s), %s, eps %g\n", ctx->nranks,
               ctx->multiproc ? "one process each" : "threads of one process", ctx->ngpus, symmem_dtype_name(o->dt),
               (double)o->eps);
        printf("# timing: CUDA-graph replays of %d calls, median of %d, slowest rank; warm-up %d; ranks aligned by an "
               "untimed replay; check %s\n", o->iters, o->replays, o->warmup, o->check ? "on" : "off");
        printf("# sym-3k: symmem_all_reduce(auto) + add kernel + rmsnorm kernel; sym-2k: symmem_all_reduce(auto) + "
               "add_rmsnorm kernel; nccl-*: the same over ncclAllReduce (%s)\n",
               b->have_nccl ? "on" : "off: not built with NCCL, --nccl 0, or ranks share a GPU");
        if (ctx->nranks > ctx->ngpus)
            printf("# ranks share GPUs: times of co-located ranks (the same SMs and HBM, no link between GPUs), not "
                   "cross-GPU figures\n");
        printf("#%6s %6s %9s %16s | %8s %8s %8s %8s %8s | %6s %6s %6s %6s | %6s\n", "hidden", "tokens", "bytes",
               "fused algo", "fused", "sym-3k", "sym-2k", "nccl-3k", "nccl-2k", "f/s3k", "f/s2k", "f/n3k", "f/n2k",
               "#wrong");
        printf("#%6s %6s %9s %16s | %8s %8s %8s %8s %8s | %6s %6s %6s %6s | %6s\n", "", "", "(B)", "", "(us)", "(us)",
               "(us)", "(us)", "(us)", "", "", "", "", "");
    }
    for (int hi = 0; hi < o->nh && !failed; hi++)
        for (int ti = 0; ti < o->nt && !failed; ti++) {
            const size_t H = o->hidden[hi], T = o->tokens[ti];
            int64_t wrong = 0;
            if (o->check && (wrong = check_shape(b, T, H)) < 0) {
                failed = 1;
                break;
            }
            wrong_total += (uint64_t)wrong;
            double base[V_BASE] = {0, 0, 0, 0};
            for (int v = 0; v < V_BASE && !failed; v++) {
                if ((v == V_NCCL3 || v == V_NCCL2) && !b->have_nccl) continue;
                base[v] = timing(b, v, T, H);
                if (base[v] < 0) failed = 1;
            }
            for (int a = 0; a < o->nalgos && !failed; a++) {
                const double f = timing(b, V_FUSED + a, T, H);
                if (f < 0) {
                    failed = 1;
                    break;
                }
                const double r3 = base[V_SYM3] > 0 ? f / base[V_SYM3] : 0;
                if (T <= 64 && r3 > worst64[a]) worst64[a] = r3, w64h[a] = H, w64t[a] = T;
                if (r3 > worst[a]) worst[a] = r3, wh[a] = H, wt[a] = T;
                if (!root) continue;
                char label[40], c[5][16], r[4][16];
                const symmem_algo_t al = o->algos[a] == SYMMEM_ALGO_AUTO
                                             ? symmem_fused_auto_algo(ctx->r[0].comm, T, H, o->dt)
                                             : o->algos[a];
                snprintf(label, sizeof label, "%s%s", o->algos[a] == SYMMEM_ALGO_AUTO ? "auto:" : "", symmem_algo_name(al));
                time_col(c[0], sizeof c[0], f);
                for (int v = 0; v < V_BASE; v++) time_col(c[v + 1], sizeof c[v + 1], base[v]);
                for (int v = 0; v < V_BASE; v++) ratio(r[v], sizeof r[v], f, base[v]);
                printf(" %6zu %6zu %9zu %16s | %s %s %s %s %s | %s %s %s %s | %6lld\n", H, T, T * H * es, label, c[0],
                       c[1], c[2], c[3], c[4], r[0], r[1], r[2], r[3], (long long)wrong);
                fflush(stdout);
            }
        }
    if (root && !failed)
        for (int a = 0; a < o->nalgos; a++) {
            printf("# fused %s vs sym-3k: worst ratio at tokens <= 64: %.2f (hidden %zu, tokens %zu): target <= 0.75 %s;"
                   " worst at any size: %.2f (hidden %zu, tokens %zu): never slower %s\n",
                   symmem_algo_name(o->algos[a]), worst64[a], w64h[a], w64t[a], worst64[a] <= 0.75 ? "met" : "NOT met",
                   worst[a], wh[a], wt[a], worst[a] <= 1.0 ? "met" : "NOT met");
        }
    if (root)
        printf("# %s; #wrong total %llu %s\n", failed ? "stopped early: a call failed" : "done",
               (unsigned long long)wrong_total, wrong_total ? "FAILED" : "OK");
    return failed || wrong_total ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fb_opts_t o;
            return parse(2, (char *[]){argv[0], "-h", NULL}, &o);
        }
    /* without --mp / --inproc: one process per GPU (at least 2), told to the children explicitly */
    char *args[128];
    int nargs = 0, mode_given = 0;
    for (int i = 0; i < argc && nargs < 120; i++) {
        mode_given |= !strcmp(argv[i], "--mp") || !strcmp(argv[i], "--inproc");
        args[nargs++] = argv[i];
    }
    char nbuf[16];
    if (!mode_given && cc_child_rank("SYMMEM_TEST") < 0) {
        const int ngpu = cc_probe_gpu_count();
        if (ngpu <= 0) {
            printf("symmem-fused-bench: no CUDA device; nothing to measure\n");
            return CC_EXIT_SKIP;
        }
        snprintf(nbuf, sizeof nbuf, "%d", ngpu < 2 ? 2 : ngpu > CC_MAX_RANKS ? CC_MAX_RANKS : ngpu);
        args[nargs++] = "--mp";
        args[nargs++] = nbuf;
    }
    args[nargs] = NULL;
    fb_t b;
    memset(&b, 0, sizeof b);
    int rc = 0;
    if (!cc_start(&nargs, args, "symmem-fused-bench", 2, 0, NULL, NULL, &b.ctx, &rc)) return rc;
    if (parse(nargs, args, &b.o) != 0) {
        if (cc_is_root(&b.ctx)) fprintf(stderr, "symmem-fused-bench: bad options (-h for help)\n");
        cc_shm_abort(b.ctx.shm);
        return 2;
    }
    if (setup(&b) != 0) {
        cc_log(&b.ctx, "setup failed");
        cc_shm_abort(b.ctx.shm);
        return 1;
    }
    rc = run(&b);
    teardown(&b);
    return rc;
}
