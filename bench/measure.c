/* symmem-bench's measurement of one configuration (size x algorithm, or the NCCL baseline): the geometry and
 * buffer rotation, the enqueue on every local rank, the check against the float64 reference, and the timing
 * of CUDA-graph replays or eager batches (method in symmem_bench.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

size_t bench_align4k(size_t x) { return (x + 4095) & ~(size_t)4095; }

int bench_geometry(const bench_t *b, size_t size, geom_t *g)
{
    const size_t es = symmem_dtype_size(b->o.dt);
    memset(g, 0, sizeof *g);
    if (!b->o.coll->sized) {
        g->sets = 1;
        return 0;
    }
    b->o.coll->shape(size, es, (size_t)b->ctx.nranks, g);
    if (g->count == 0) return -1;
    g->bytes = g->total * es;
    size_t per = bench_align4k(g->sbytes) + bench_align4k(g->rbytes);
    size_t fit = 3 * b->l2 / per;
    g->sets = fit < 1 ? 1 : fit > 8 ? 8 : (int)fit;
    if (g->sets > b->max_sets) g->sets = b->max_sets;
    return 0;
}

static void set_ptrs(const bench_t *b, int i, const geom_t *g, int set, int nccl, void **sp, void **rp)
{
    unsigned char *base = nccl ? b->ndev[i] : b->o.zero_copy ? symmem_buffer_ptr(b->sym[i]) : b->dev[i];
    size_t off = (size_t)set * (bench_align4k(g->sbytes) + bench_align4k(g->rbytes));
    *sp = base + off;
    *rp = base + off + bench_align4k(g->sbytes);
}

#ifdef SYMMEM_HAVE_NCCL
static int enqueue_nccl(bench_t *b, int i, const void *sp, void *rp, const geom_t *g)
{
    ncclDataType_t t = b->o.dt == SYMMEM_FLOAT32 ? ncclFloat32 : b->o.dt == SYMMEM_FLOAT16 ? ncclFloat16 : ncclBfloat16;
    ncclRedOp_t op = b->o.op == SYMMEM_OP_SUM ? ncclSum : b->o.op == SYMMEM_OP_MAX ? ncclMax : ncclMin;
    ncclResult_t r = b->o.coll->nccl(sp, rp, g->count, t, op, b->nccl[i], b->ctx.r[i].stream);
    if (r != ncclSuccess) {
        cc_log(&b->ctx, "NCCL error: %s", ncclGetErrorString(r));
        return -1;
    }
    return 0;
}
#endif

/* One operation on local rank i: 0, 1 (unsupported) or -1. */
static int enqueue(bench_t *b, int i, const geom_t *g, int set, int algo, int nccl)
{
    cc_rank_t *R = &b->ctx.r[i];
    void *sp, *rp;
    set_ptrs(b, i, g, set, nccl, &sp, &rp);
    if (nccl) {
#ifdef SYMMEM_HAVE_NCCL
        return enqueue_nccl(b, i, sp, rp, g);
#else
        return -1;
#endif
    }
    symmem_status_t st = b->o.coll->call(R, sp, rp, g->count, b->o.dt, b->o.op, (symmem_algo_t)algo);
    if (st == SYMMEM_UNSUPPORTED) return 1;
    if (st != SYMMEM_OK) {
        cc_log(&b->ctx, "symmem %s (%s): %s: %s", symmem_coll_kind_name(b->o.coll->kind),
               symmem_algo_name((symmem_algo_t)algo), symmem_status_name(st), symmem_last_error());
        return -1;
    }
    return 0;
}

/* Enqueue one op on every local rank (in a group for NCCL when one thread drives several ranks).
 * Returns 0, 1 (unsupported on every rank) or -1, agreed across processes. */
static int enqueue_all(bench_t *b, const geom_t *g, int set, int algo, int nccl)
{
    int worst = 0;
#ifdef SYMMEM_HAVE_NCCL
    if (nccl && b->ctx.nlocal > 1) ncclGroupStart();
#endif
    for (int i = 0; i < b->ctx.nlocal; i++) {
        cudaSetDevice(b->ctx.r[i].device);
        int r = enqueue(b, i, g, set, algo, nccl);
        if (r < 0 || (r > worst && worst >= 0)) worst = r;
    }
#ifdef SYMMEM_HAVE_NCCL
    if (nccl && b->ctx.nlocal > 1 && ncclGroupEnd() != ncclSuccess) worst = -1;
#endif
    return worst;
}

/* ---- correctness ------------------------------------------------------------------------------------ */
/* Fresh inputs in buffer set 0 of every local rank (the output poisoned), then one operation; the
 * outcome agreed across ranks: 0, 1 (unsupported) or -1. */
static int check_run(bench_t *b, const geom_t *g, int algo, int nccl, uint64_t seed, unsigned char *h)
{
    cc_ctx_t *ctx = &b->ctx;
    int upload_failed = 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        void *sp, *rp;
        cudaSetDevice(ctx->r[i].device);
        set_ptrs(b, i, g, 0, nccl, &sp, &rp);
        if (b->o.coll->check) {
            cc_fill(h, b->o.dt, g->sbytes / symmem_dtype_size(b->o.dt), seed, ctx->r[i].rank, 0);
            cudaError_t e = cc_rank_upload(&ctx->r[i], sp, h, g->sbytes);
            if (e == cudaSuccess) e = cc_rank_memset(&ctx->r[i], rp, 0xFF, g->rbytes);
            if (e != cudaSuccess) {
                cc_log(ctx, "rank %d: uploading the check's input: %s", ctx->r[i].rank, cudaGetErrorString(e));
                upload_failed = 1;
            }
        }
    }
    cc_sync(ctx);
    if (cc_barrier(ctx) != 0) return -1;
    /* a failed upload is agreed on below like a failed enqueue, so no rank waits for the others */
    int r = upload_failed ? -1 : enqueue_all(b, g, 0, algo, nccl);
    uint64_t st_l[CC_MAX_RANKS] = {0}, st_a[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) st_l[i] = (uint64_t)(int64_t)r;
    if (cc_allgather_u64(ctx, st_l, st_a) != 0) return -1;
    int agreed = (int)(int64_t)st_a[0];
    for (int k = 1; k < ctx->nranks; k++)
        if ((int)(int64_t)st_a[k] != agreed) agreed = -1;
    if (agreed != 0) {
        if (agreed < 0) cc_sync(ctx);
        return agreed;
    }
    if (cc_sync(ctx) != cudaSuccess || (!nccl && cc_async_error(ctx) != SYMMEM_OK)) return -1;
    return 0;
}

/* *wrong_out: wrong elements summed over ranks plus the ranks whose output differs bitwise from rank 0's
 * (collectives whose ranks all hold the same result). 0, 1 (unsupported) or -1. */
static int check(bench_t *b, const geom_t *g, int algo, int nccl, uint64_t seed, uint64_t *wrong_out)
{
    cc_ctx_t *ctx = &b->ctx;
    const bench_coll_t *c = b->o.coll;
    size_t maxb = g->sbytes > g->rbytes ? g->sbytes : g->rbytes;
    unsigned char *h = malloc(maxb ? maxb : 1);
    if (!h) return -1;
    const int r = check_run(b, g, algo, nccl, seed, h);
    if (r != 0) {
        free(h);
        return r;
    }
    uint64_t wrong = 0, hl[CC_MAX_RANKS], ha[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        void *sp, *rp;
        cudaSetDevice(ctx->r[i].device);
        set_ptrs(b, i, g, 0, nccl, &sp, &rp);
        hl[i] = 0;
        if (!c->check) continue;
        cudaMemcpy(h, rp, g->rbytes, cudaMemcpyDeviceToHost);
        hl[i] = cc_hash(h, g->rbytes);
        wrong += c->check(h, b->o.dt, b->o.op, g->count, ctx->r[i].rank, i, ctx->nranks, seed);
    }
    free(h);
    if (cc_allgather_u64(ctx, hl, ha) != 0) return -1;
    if (c->bitwise)
        for (int k = 1; k < ctx->nranks; k++) wrong += ha[k] != ha[0];
    *wrong_out = cc_sum_u64(ctx, wrong);
    return 0;
}

/* ---- timing ----------------------------------------------------------------------------------------- */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* -n operations captured into one graph per local rank, instantiated, and replayed once (warm-up). */
static int capture(bench_t *b, const geom_t *g, int algo, int nccl, cudaGraphExec_t *exec)
{
    cc_ctx_t *ctx = &b->ctx;
    int rc = 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (cudaStreamBeginCapture(ctx->r[i].stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) rc = -1;
    }
    for (int k = 0; k < b->o.iters && rc == 0; k++) rc = enqueue_all(b, g, k % g->sets, algo, nccl);
    /* End every capture before instantiating any graph: with several ranks in this thread, an
     * instantiation while another of its streams is still capturing is refused. */
    cudaGraph_t graphs[CC_MAX_RANKS] = {0};
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaError_t e = cudaStreamEndCapture(ctx->r[i].stream, &graphs[i]);
        if (rc == 0 && e != cudaSuccess) {
            cc_log(ctx, "graph capture: %s", cudaGetErrorString(e));
            rc = -1;
        }
    }
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaError_t e = rc == 0 ? cudaGraphInstantiate(&exec[i], graphs[i], 0) : cudaSuccess;
        if (graphs[i]) cudaGraphDestroy(graphs[i]);
        if (e != cudaSuccess) {
            cc_log(ctx, "graph instantiate: %s", cudaGetErrorString(e));
            rc = -1;
        }
    }
    for (int i = 0; i < ctx->nlocal && rc == 0; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaGraphLaunch(exec[i], ctx->r[i].stream);
    }
    return rc;
}

static void launch_graphs(bench_t *b, cudaGraphExec_t *exec)
{
    for (int i = 0; i < b->ctx.nlocal; i++) {
        cudaSetDevice(b->ctx.r[i].device);
        cudaGraphLaunch(exec[i], b->ctx.r[i].stream);
    }
}

static void record(bench_t *b, cudaEvent_t *ev)
{
    for (int i = 0; i < b->ctx.nlocal; i++) {
        cudaSetDevice(b->ctx.r[i].device);
        cudaEventRecord(ev[i], b->ctx.r[i].stream);
    }
}

/* The timed replays (eager: batches): t[i * replays + rep] = per-op microseconds of local rank i. */
static int replays(bench_t *b, const geom_t *g, int algo, int nccl, cudaGraphExec_t *exec, cudaEvent_t *ev0,
                   cudaEvent_t *ev1, double *t)
{
    cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    int rc = 0;
    for (int rep = 0; rep < o->replays && rc == 0; rep++) {
        if (cc_barrier(ctx) != 0) return -1;
        /* Align the ranks before the clock starts: the processes leave the host barrier and launch at
         * slightly different times (tens of microseconds), and a rank that starts early would count its
         * wait for the others as time of the first operation. One untimed replay (eager: one operation)
         * ends on every rank within an operation's latency of the others, since each operation waits
         * for every rank; the timed part follows on the same stream with nothing in between. */
        if (o->align && o->graph) launch_graphs(b, exec);
        else if (o->align) rc = enqueue_all(b, g, 0, algo, nccl);
        record(b, ev0);
        if (o->graph) launch_graphs(b, exec);
        else
            for (int k = 0; k < o->iters && rc == 0; k++) {
                rc = enqueue_all(b, g, k % g->sets, algo, nccl);
                /* -z 1: every rank's operation done before the next launch (all local ranks first: one
                 * thread drives them, and each waits for the others) */
                if (o->blocking && rc == 0 && cc_sync(ctx) != cudaSuccess) rc = -1;
            }
        record(b, ev1);
        if (cc_sync(ctx) != cudaSuccess) rc = -1;
        for (int i = 0; i < ctx->nlocal && rc == 0; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, ev0[i], ev1[i]);
            t[(size_t)i * o->replays + rep] = 1000.0 * ms / o->iters;
        }
    }
    return rc;
}

/* The median per local rank, then across the communicator's ranks as -a says (default: the slowest). */
static int across_ranks(bench_t *b, double *t, int rc, double *us_out)
{
    cc_ctx_t *ctx = &b->ctx;
    const int nrep = b->o.replays;
    uint64_t ml[CC_MAX_RANKS], ma[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        double *ti = t + (size_t)i * nrep;
        qsort(ti, (size_t)nrep, sizeof(double), cmp_double);
        double med = nrep % 2 ? ti[nrep / 2] : 0.5 * (ti[nrep / 2 - 1] + ti[nrep / 2]);
        memcpy(&ml[i], &med, sizeof med);
    }
    if (cc_sum_u64(ctx, rc != 0) != 0) return -1;
    if (cc_allgather_u64(ctx, ml, ma) != 0) return -1;
    double worst = 0, best = 0, sum = 0, first = 0;
    for (int k = 0; k < ctx->nranks; k++) {
        double v;
        memcpy(&v, &ma[k], sizeof v);
        if (k == 0) first = best = v;
        if (v > worst) worst = v;
        if (v < best) best = v;
        sum += v;
    }
    switch (b->o.average) {
    case BENCH_AVERAGE_RANK0: *us_out = first; break;
    case BENCH_AVERAGE_MEAN: *us_out = sum / ctx->nranks; break;
    case BENCH_AVERAGE_MIN: *us_out = best; break;
    default: *us_out = worst; break;
    }
    return 0;
}

static int timing(bench_t *b, const geom_t *g, int algo, int nccl, double *us_out)
{
    cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    cudaGraphExec_t exec[CC_MAX_RANKS] = {0};
    cudaEvent_t ev0[CC_MAX_RANKS], ev1[CC_MAX_RANKS];
    int rc = 0, set = 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaEventCreate(&ev0[i]);
        cudaEventCreate(&ev1[i]);
    }
    /* Warm-up, eager. */
    for (int k = 0; k < o->warmup && rc == 0; k++) rc = enqueue_all(b, g, set++ % g->sets, algo, nccl);
    if (rc == 0 && o->graph) rc = capture(b, g, algo, nccl, exec);
    if (cc_sync(ctx) != cudaSuccess) rc = -1;
    double *t = calloc((size_t)o->replays * CC_MAX_RANKS, sizeof(double));
    if (rc == 0) rc = replays(b, g, algo, nccl, exec, ev0, ev1, t);
    if (rc == 0 && !nccl && cc_async_error(ctx) != SYMMEM_OK) rc = -1;
    const int agreed = across_ranks(b, t, rc, us_out);
    free(t);
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (exec[i]) cudaGraphExecDestroy(exec[i]);
        cudaEventDestroy(ev0[i]);
        cudaEventDestroy(ev1[i]);
    }
    return agreed;
}

result_t bench_measure(bench_t *b, const geom_t *g, int algo, int nccl, uint64_t seed)
{
    result_t r = {0, 0, 0};
    if (b->o.check) {
        int c = check(b, g, algo, nccl, seed, &r.wrong);
        if (c != 0) {
            if (c < 0) r.wrong = 1; /* a failure to run counts as wrong */
            return r;
        }
    }
    if (timing(b, g, algo, nccl, &r.us) != 0) {
        r.wrong += 1;
        return r;
    }
    r.ok = 1;
    return r;
}
