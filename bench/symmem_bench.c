/* symmem-bench: nccl-tests-style benchmark of the symmem collectives, with NCCL measured in the same run,
 * on the same GPUs, with the same timing method, and a ratio column (symmem time / NCCL time).
 *
 * Ranks: by default one process per GPU, launched by the tool itself: the parent never touches CUDA (the
 * GPU count comes from a forked probe), it makes a symmem unique id and a shared-memory channel (memfd),
 * and fork+execs itself with SYMMEM_UNIQUE_ID, SYMMEM_BENCH_RANK/NRANKS/SHM_FD; rank r uses device
 * r % device count. --inprocess runs the ranks in one process (symmem_comm_init_all, one thread driving
 * every rank), which allows more ranks than GPUs (correctness only: co-located ranks share a GPU).
 * NCCL's unique id: rank 0 calls ncclGetUniqueId after its CUDA initialisation and hands it to the others
 * through the same shared-memory channel (an allgather of 128 bytes); NCCL is skipped when ranks share a
 * GPU (NCCL refuses duplicate devices).
 *
 * Timing (METHOD): per size and algorithm, -n operations are captured into one CUDA graph per rank
 * (rotating among several buffer sets while they fit in ~3x L2, so the cache is not what is measured),
 * warmed up (-w eager operations plus one replay), then replayed -R times; each replay is timed with CUDA
 * events on each rank's stream, after a host barrier and one untimed replay that aligns the ranks (eager:
 * one untimed operation); per-op time = elapsed / n; a rank's time is the
 * median over replays; the reported time is the largest over ranks. -G 0 times eager launches the same way.
 * Check (-c 1): fresh random data per rank and size (never zeros), float64 host reference, #wrong = wrong
 * elements summed over ranks plus the number of ranks whose output differs bitwise from rank 0's
 * (all-reduce, all-gather). The exit status is 1 if any #wrong is nonzero.
 *
 * auto: the algorithm column shows what SYMMEM_ALGO_AUTO resolved to ("auto:twoshot_pull"), asked of the
 * library's own table (symmem_coll_choose) with the same byte count the library looks it up by.
 * --tune [FILE]: every concrete algorithm per size; rank 0 picks the fastest correct one per size from the
 * slowest-rank times and broadcasts the choice over the shared-memory channel; every rank replaces the
 * table of this op with contiguous size ranges (symmem_coll_tune_clear/_set), rank 0 writes it to FILE
 * (symmem_coll_tune_save), and auto is measured again with the new table. See bench/NOTES.md.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "harness.h"
/* The collectives' internal tuning API (hidden symbols of symmem_static, callable from this binary). The
 * relative path keeps the include path of the other bench/test targets unchanged. */
#include "collectives/tune.h"

#ifdef SYMMEM_HAVE_NCCL
#include <nccl.h>
#endif

enum { T_AR, T_RS, T_AG, T_BARRIER };
static const char *const t_names[] = {"all_reduce", "reduce_scatter", "all_gather", "barrier"};

typedef struct opts {
    size_t minb, maxb;
    double factor;
    int iters, warmup, replays, check, graph, zero_copy, nranks, inprocess, nccl, tune;
    int align; /* one untimed replay (eager: operation) before each timed one */
    const char *tune_file; /* --tune FILE; NULL: $SYMMEM_TUNE_FILE, else <cache dir>/tune.txt */
    int algo_given;        /* -a was on the command line (--tune ignores it) */
    symmem_dtype_t dt;
    symmem_redop_t op;
    int coll;
    int algos[SYMMEM_ALGO_COUNT];
    int nalgos;
} opts_t;

/* Sizes kept for the summaries; --tune refuses a size list longer than this. */
#define BENCH_MAX_SIZES 256

typedef struct bench {
    opts_t o;
    cc_ctx_t ctx;
    size_t slot_bytes; /* per buffer set: send region then recv region */
    int max_sets;
    symmem_buffer_t sym[CC_MAX_RANKS];
    unsigned char *dev[CC_MAX_RANKS];  /* copy-in buffers (-z 0) */
    unsigned char *ndev[CC_MAX_RANKS]; /* NCCL's buffers */
    size_t l2;
    int have_nccl;
#ifdef SYMMEM_HAVE_NCCL
    ncclComm_t nccl[CC_MAX_RANKS];
#endif
} bench_t;

/* One measured configuration. */
typedef struct result {
    double us;
    uint64_t wrong;
    int ok; /* 0: not run (unsupported or failed to enqueue) */
} result_t;

/* ---- options ---------------------------------------------------------------------------------------- */
static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || v < 0) return -1;
    switch (*end) {
    case 'k': case 'K': v *= 1024; break;
    case 'm': case 'M': v *= 1024 * 1024; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; break;
    case 0: break;
    default: return -1;
    }
    *out = (size_t)v;
    return 0;
}

static void usage(void)
{
    printf("usage: symmem-bench [options]\n"
           "  -b SIZE     min bytes (default 1K; K/M/G suffixes)\n"
           "  -e SIZE     max bytes (default 256M)\n"
           "  -f FACTOR   size multiplier (default 2)\n"
           "  -n N        operations per timed graph / eager batch (default 20)\n"
           "  -w N        warm-up operations (default 5)\n"
           "  -R N        timed replays, median reported (default 10)\n"
           "  -c 0|1      check results (default 1)\n"
           "  -d TYPE     bfloat16 (default), half, float\n"
           "  -o OP       sum (default), max, min\n"
           "  -a ALGO     auto (default), all, or one or more (comma-separated) of:");
    for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++)
        printf("%s %s", a == SYMMEM_ALGO_AUTO + 1 ? "" : ",", symmem_algo_name((symmem_algo_t)a));
    printf("\n"
           "              auto rows show the algorithm the table chose, e.g. auto:twoshot_pull\n"
           "  -t COLL     all_reduce (default), reduce_scatter, all_gather, barrier\n"
           "  -g          time CUDA-graph replays (default);  -G 0 eager launches, -G 1 graphs\n"
           "  -z 0|1      input/output in a symmetric buffer (1, default: zero copy) or cudaMalloc memory (0)\n"
           "  -N N        ranks (default: number of GPUs); one process per rank\n"
           "  --inprocess ranks as one process (symmem_comm_init_all); N may exceed the GPU count\n"
           "  --nccl 0|1  NCCL baseline in the same run (default 1 when built with NCCL)\n"
           "  --align 0|1 one untimed replay before each timed one, so ranks start the clock together (default 1)\n"
           "  --tune [FILE]  tune the algorithm table for -t/-d/-o over the -b..-e sizes: time every algorithm\n"
           "              (-a is ignored), take per size the fastest with #wrong 0 (slowest-rank time), set it on\n"
           "              every rank as contiguous size ranges, write the table to FILE (default\n"
           "              $SYMMEM_TUNE_FILE, else <cache dir>/tune.txt, which the library loads by default; the\n"
           "              section of this topology, this op's rules replaced, other ops and sections kept), print\n"
           "              it, and re-run auto with it vs NCCL. Also --tune=FILE\n"
           "Size is the largest buffer of the operation (nccl-tests convention): the all-reduce input, the\n"
           "reduce-scatter input, the all-gather output. busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (others).\n");
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->minb = 1024;
    o->maxb = (size_t)256 << 20;
    o->factor = 2;
    o->iters = 20;
    o->warmup = 5;
    o->replays = 10;
    o->check = 1;
    o->graph = 1;
    o->align = 1;
    o->zero_copy = 1;
    o->nranks = 0;
#ifdef SYMMEM_HAVE_NCCL
    o->nccl = 1;
#endif
    o->dt = SYMMEM_BFLOAT16;
    o->op = SYMMEM_OP_SUM;
    o->coll = T_AR;
    o->algos[0] = SYMMEM_ALGO_AUTO;
    o->nalgos = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_ARG                                                                                           \
    if (!v) {                                                                                              \
        fprintf(stderr, "symmem-bench: %s needs a value\n", a);                                            \
        return -1;                                                                                         \
    }                                                                                                      \
    i++
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            exit(0);
        } else if (!strcmp(a, "-g")) {
            o->graph = 1;
        } else if (!strcmp(a, "--inprocess")) {
            o->inprocess = 1;
        } else if (!strcmp(a, "--tune")) {
            o->tune = 1;
            if (v && v[0] != '-') { /* optional FILE */
                o->tune_file = v;
                i++;
            }
        } else if (!strncmp(a, "--tune=", 7)) {
            o->tune = 1;
            o->tune_file = a + 7;
        } else if (!strcmp(a, "-b") || !strcmp(a, "-e")) {
            NEED_ARG;
            if (parse_size(v, !strcmp(a, "-b") ? &o->minb : &o->maxb) != 0) {
                fprintf(stderr, "symmem-bench: bad size %s\n", v);
                return -1;
            }
        } else if (!strcmp(a, "-f")) {
            NEED_ARG;
            o->factor = atof(v);
        } else if (!strcmp(a, "-n")) {
            NEED_ARG;
            o->iters = atoi(v);
        } else if (!strcmp(a, "-w")) {
            NEED_ARG;
            o->warmup = atoi(v);
        } else if (!strcmp(a, "-R")) {
            NEED_ARG;
            o->replays = atoi(v);
        } else if (!strcmp(a, "-c")) {
            NEED_ARG;
            o->check = atoi(v);
        } else if (!strcmp(a, "-G")) {
            NEED_ARG;
            o->graph = atoi(v) != 0;
        } else if (!strcmp(a, "-z")) {
            NEED_ARG;
            o->zero_copy = atoi(v) != 0;
        } else if (!strcmp(a, "-N")) {
            NEED_ARG;
            o->nranks = atoi(v);
        } else if (!strcmp(a, "--nccl")) {
            NEED_ARG;
            o->nccl = atoi(v) != 0;
        } else if (!strcmp(a, "--align")) {
            NEED_ARG;
            o->align = atoi(v) != 0;
        } else if (!strcmp(a, "-d")) {
            NEED_ARG;
            if (!strcasecmp(v, "bfloat16") || !strcasecmp(v, "bf16")) o->dt = SYMMEM_BFLOAT16;
            else if (!strcasecmp(v, "half") || !strcasecmp(v, "float16") || !strcasecmp(v, "fp16")) o->dt = SYMMEM_FLOAT16;
            else if (!strcasecmp(v, "float") || !strcasecmp(v, "float32") || !strcasecmp(v, "fp32")) o->dt = SYMMEM_FLOAT32;
            else {
                fprintf(stderr, "symmem-bench: unknown dtype %s\n", v);
                return -1;
            }
        } else if (!strcmp(a, "-o")) {
            NEED_ARG;
            if (!strcasecmp(v, "sum")) o->op = SYMMEM_OP_SUM;
            else if (!strcasecmp(v, "max")) o->op = SYMMEM_OP_MAX;
            else if (!strcasecmp(v, "min")) o->op = SYMMEM_OP_MIN;
            else {
                fprintf(stderr, "symmem-bench: unknown op %s\n", v);
                return -1;
            }
        } else if (!strcmp(a, "-t")) {
            NEED_ARG;
            int found = -1;
            for (int t = 0; t < 4; t++)
                if (!strcasecmp(v, t_names[t])) found = t;
            if (found < 0) {
                fprintf(stderr, "symmem-bench: unknown collective %s\n", v);
                return -1;
            }
            o->coll = found;
        } else if (!strcmp(a, "-a")) {
            NEED_ARG;
            o->algo_given = 1;
            if (!strcasecmp(v, "all")) {
                o->nalgos = SYMMEM_ALGO_COUNT;
                for (int k = 0; k < SYMMEM_ALGO_COUNT; k++) o->algos[k] = k;
            } else { /* one name or a comma-separated list, each once */
                o->nalgos = 0;
                for (const char *p = v; *p;) {
                    const size_t len = strcspn(p, ",");
                    char name[32];
                    symmem_algo_t al;
                    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
                    if (len >= sizeof name || symmem_algo_from_name(name, &al) != SYMMEM_OK) {
                        fprintf(stderr, "symmem-bench: unknown algorithm %.*s\n", (int)len, p);
                        return -1;
                    }
                    int seen = 0;
                    for (int k = 0; k < o->nalgos; k++) seen |= o->algos[k] == (int)al;
                    if (!seen) o->algos[o->nalgos++] = (int)al;
                    p += len;
                    if (*p == ',') p++;
                }
                if (o->nalgos == 0) {
                    fprintf(stderr, "symmem-bench: -a needs an algorithm\n");
                    return -1;
                }
            }
        } else {
            fprintf(stderr, "symmem-bench: unknown option %s (-h for help)\n", a);
            return -1;
        }
#undef NEED_ARG
    }
    if (o->iters < 1 || o->replays < 1 || o->factor <= 1.0 || o->minb > o->maxb || o->minb == 0) {
        fprintf(stderr, "symmem-bench: inconsistent options (-n/-R >= 1, -f > 1, 0 < -b <= -e)\n");
        return -1;
    }
    if (o->tune) {
        if (o->coll == T_BARRIER) {
            fprintf(stderr, "symmem-bench: --tune needs -t all_reduce, reduce_scatter or all_gather\n");
            return -1;
        }
        if (o->tune_file && !o->tune_file[0]) {
            fprintf(stderr, "symmem-bench: --tune= needs a file name\n");
            return -1;
        }
        int nsizes = 0;
        for (double s = (double)o->minb; s <= (double)o->maxb * 1.0000001 && nsizes <= BENCH_MAX_SIZES; s *= o->factor)
            nsizes++;
        if (nsizes > BENCH_MAX_SIZES) {
            fprintf(stderr, "symmem-bench: --tune measures at most %d sizes; raise -f or narrow -b/-e\n",
                    BENCH_MAX_SIZES);
            return -1;
        }
        /* every concrete algorithm; auto is what is being built */
        o->nalgos = 0;
        for (int k = SYMMEM_ALGO_AUTO + 1; k < SYMMEM_ALGO_COUNT; k++) o->algos[o->nalgos++] = k;
    }
    return 0;
}

/* ---- geometry of one size --------------------------------------------------------------------------- */
typedef struct geom {
    size_t count;        /* argument to the call: per-rank count for RS/AG */
    size_t total;        /* elements of the largest buffer (the "count" column) */
    size_t sbytes, rbytes;
    size_t bytes;        /* the "size" column */
    int sets;            /* buffer sets rotated through */
} geom_t;

static size_t align4k(size_t x) { return (x + 4095) & ~(size_t)4095; }

static int geometry(const bench_t *b, size_t size, geom_t *g)
{
    const size_t es = symmem_dtype_size(b->o.dt);
    const size_t n = (size_t)b->ctx.nranks;
    memset(g, 0, sizeof *g);
    if (b->o.coll == T_BARRIER) {
        g->sets = 1;
        return 0;
    }
    if (b->o.coll == T_AR) {
        g->count = size / es;
        g->total = g->count;
        g->sbytes = g->rbytes = g->count * es;
    } else {
        g->count = size / es / n;
        g->total = g->count * n;
        g->sbytes = b->o.coll == T_RS ? g->total * es : g->count * es;
        g->rbytes = b->o.coll == T_RS ? g->count * es : g->total * es;
    }
    if (g->count == 0) return -1;
    g->bytes = g->total * es;
    size_t per = align4k(g->sbytes) + align4k(g->rbytes);
    size_t fit = 3 * b->l2 / per;
    g->sets = fit < 1 ? 1 : fit > 8 ? 8 : (int)fit;
    if (g->sets > b->max_sets) g->sets = b->max_sets;
    return 0;
}

static void set_ptrs(const bench_t *b, int i, const geom_t *g, int set, int nccl, void **sp, void **rp)
{
    unsigned char *base = nccl ? b->ndev[i] : b->o.zero_copy ? symmem_buffer_ptr(b->sym[i]) : b->dev[i];
    size_t off = (size_t)set * (align4k(g->sbytes) + align4k(g->rbytes));
    *sp = base + off;
    *rp = base + off + align4k(g->sbytes);
}

/* ---- enqueue one operation on local rank i ---------------------------------------------------------- */
static int enqueue(bench_t *b, int i, const geom_t *g, int set, int algo, int nccl)
{
    cc_rank_t *R = &b->ctx.r[i];
    void *sp, *rp;
    set_ptrs(b, i, g, set, nccl, &sp, &rp);
    if (nccl) {
#ifdef SYMMEM_HAVE_NCCL
        ncclDataType_t t = b->o.dt == SYMMEM_FLOAT32 ? ncclFloat32 : b->o.dt == SYMMEM_FLOAT16 ? ncclFloat16 : ncclBfloat16;
        ncclRedOp_t op = b->o.op == SYMMEM_OP_SUM ? ncclSum : b->o.op == SYMMEM_OP_MAX ? ncclMax : ncclMin;
        ncclResult_t r;
        switch (b->o.coll) {
        case T_AR: r = ncclAllReduce(sp, rp, g->count, t, op, b->nccl[i], R->stream); break;
        case T_RS: r = ncclReduceScatter(sp, rp, g->count, t, op, b->nccl[i], R->stream); break;
        case T_AG: r = ncclAllGather(sp, rp, g->count, t, b->nccl[i], R->stream); break;
        default: r = ncclAllReduce(sp, rp, 1, ncclFloat32, ncclSum, b->nccl[i], R->stream); break; /* "barrier" */
        }
        if (r != ncclSuccess) {
            cc_log(&b->ctx, "NCCL error: %s", ncclGetErrorString(r));
            return -1;
        }
        return 0;
#else
        return -1;
#endif
    }
    symmem_status_t st;
    switch (b->o.coll) {
    case T_AR: st = symmem_all_reduce(R->comm, sp, rp, g->count, b->o.dt, b->o.op, (symmem_algo_t)algo, R->stream); break;
    case T_RS: st = symmem_reduce_scatter(R->comm, sp, rp, g->count, b->o.dt, b->o.op, (symmem_algo_t)algo, R->stream); break;
    case T_AG: st = symmem_all_gather(R->comm, sp, rp, g->count, b->o.dt, (symmem_algo_t)algo, R->stream); break;
    default: st = symmem_barrier(R->comm, R->stream); break;
    }
    if (st == SYMMEM_UNSUPPORTED) return 1;
    if (st != SYMMEM_OK) {
        cc_log(&b->ctx, "symmem %s (%s): %s: %s", t_names[b->o.coll], symmem_algo_name((symmem_algo_t)algo),
               symmem_status_name(st), symmem_last_error());
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
static int check(bench_t *b, const geom_t *g, int algo, int nccl, uint64_t seed, uint64_t *wrong_out)
{
    cc_ctx_t *ctx = &b->ctx;
    const int n = ctx->nranks;
    size_t maxb = g->sbytes > g->rbytes ? g->sbytes : g->rbytes;
    unsigned char *h = malloc(maxb ? maxb : 1);
    if (!h) return -1;
    for (int i = 0; i < ctx->nlocal; i++) {
        void *sp, *rp;
        cudaSetDevice(ctx->r[i].device);
        set_ptrs(b, i, g, 0, nccl, &sp, &rp);
        if (b->o.coll != T_BARRIER) {
            cc_fill(h, b->o.dt, g->sbytes / symmem_dtype_size(b->o.dt), seed, ctx->r[i].rank, 0);
            cudaMemcpy(sp, h, g->sbytes, cudaMemcpyHostToDevice);
            cudaMemset(rp, 0xFF, g->rbytes);
        }
    }
    cc_sync(ctx);
    if (cc_barrier(ctx) != 0) {
        free(h);
        return -1;
    }
    int r = enqueue_all(b, g, 0, algo, nccl);
    uint64_t st_l[CC_MAX_RANKS] = {0}, st_a[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) st_l[i] = (uint64_t)(int64_t)r;
    if (cc_allgather_u64(ctx, st_l, st_a) != 0) {
        free(h);
        return -1;
    }
    int agreed = (int)(int64_t)st_a[0];
    for (int k = 1; k < n; k++)
        if ((int)(int64_t)st_a[k] != agreed) agreed = -1;
    if (agreed != 0) {
        if (agreed < 0) cc_sync(ctx);
        free(h);
        return agreed;
    }
    if (cc_sync(ctx) != cudaSuccess || (!nccl && cc_async_error(ctx) != SYMMEM_OK)) {
        free(h);
        return -1;
    }
    uint64_t wrong = 0, hl[CC_MAX_RANKS], ha[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        void *sp, *rp;
        cudaSetDevice(ctx->r[i].device);
        set_ptrs(b, i, g, 0, nccl, &sp, &rp);
        hl[i] = 0;
        if (b->o.coll == T_BARRIER) continue;
        cudaMemcpy(h, rp, g->rbytes, cudaMemcpyDeviceToHost);
        hl[i] = cc_hash(h, g->rbytes);
        if (b->o.coll == T_AR && i == 0)
            wrong += cc_check_reduce(h, b->o.dt, b->o.op, g->count, 0, n, seed, NULL);
        else if (b->o.coll == T_RS)
            wrong += cc_check_reduce(h, b->o.dt, b->o.op, g->count, (uint64_t)ctx->r[i].rank * g->count, n, seed, NULL);
        else if (b->o.coll == T_AG && i == 0)
            wrong += cc_check_gather(h, b->o.dt, g->count, n, seed, NULL);
    }
    free(h);
    if (cc_allgather_u64(ctx, hl, ha) != 0) return -1;
    if (b->o.coll == T_AR || b->o.coll == T_AG)
        for (int k = 1; k < n; k++) wrong += ha[k] != ha[0];
    *wrong_out = cc_sum_u64(ctx, wrong);
    return 0;
}

/* ---- timing ----------------------------------------------------------------------------------------- */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
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
    if (rc == 0 && o->graph) {
        for (int i = 0; i < ctx->nlocal; i++) {
            cudaSetDevice(ctx->r[i].device);
            if (cudaStreamBeginCapture(ctx->r[i].stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) rc = -1;
        }
        for (int k = 0; k < o->iters && rc == 0; k++) rc = enqueue_all(b, g, k % g->sets, algo, nccl);
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
    }
    if (cc_sync(ctx) != cudaSuccess) rc = -1;
    double *t = calloc((size_t)o->replays * CC_MAX_RANKS, sizeof(double));
    for (int rep = 0; rep < o->replays && rc == 0; rep++) {
        if (cc_barrier(ctx) != 0) {
            rc = -1;
            break;
        }
        /* Align the ranks before the clock starts: the processes leave the host barrier and launch at
         * slightly different times (tens of microseconds), and a rank that starts early would count its
         * wait for the others as time of the first operation. One untimed replay (eager: one operation)
         * ends on every rank within an operation's latency of the others, since each operation waits
         * for every rank; the timed part follows on the same stream with nothing in between. */
        if (o->align && o->graph) {
            for (int i = 0; i < ctx->nlocal; i++) {
                cudaSetDevice(ctx->r[i].device);
                cudaGraphLaunch(exec[i], ctx->r[i].stream);
            }
        } else if (o->align) {
            rc = enqueue_all(b, g, 0, algo, nccl);
        }
        for (int i = 0; i < ctx->nlocal; i++) {
            cudaSetDevice(ctx->r[i].device);
            cudaEventRecord(ev0[i], ctx->r[i].stream);
        }
        if (o->graph) {
            for (int i = 0; i < ctx->nlocal; i++) {
                cudaSetDevice(ctx->r[i].device);
                cudaGraphLaunch(exec[i], ctx->r[i].stream);
            }
        } else {
            for (int k = 0; k < o->iters && rc == 0; k++) rc = enqueue_all(b, g, k % g->sets, algo, nccl);
        }
        for (int i = 0; i < ctx->nlocal; i++) {
            cudaSetDevice(ctx->r[i].device);
            cudaEventRecord(ev1[i], ctx->r[i].stream);
        }
        if (cc_sync(ctx) != cudaSuccess) rc = -1;
        for (int i = 0; i < ctx->nlocal && rc == 0; i++) {
            float ms = 0;
            cudaEventElapsedTime(&ms, ev0[i], ev1[i]);
            t[(size_t)i * o->replays + rep] = 1000.0 * ms / o->iters;
        }
    }
    if (rc == 0 && !nccl && cc_async_error(ctx) != SYMMEM_OK) rc = -1;
    /* Median per rank, then the slowest rank. */
    uint64_t ml[CC_MAX_RANKS], ma[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        double *ti = t + (size_t)i * o->replays;
        qsort(ti, (size_t)o->replays, sizeof(double), cmp_double);
        double med = o->replays % 2 ? ti[o->replays / 2] : 0.5 * (ti[o->replays / 2 - 1] + ti[o->replays / 2]);
        memcpy(&ml[i], &med, sizeof med);
    }
    free(t);
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (exec[i]) cudaGraphExecDestroy(exec[i]);
        cudaEventDestroy(ev0[i]);
        cudaEventDestroy(ev1[i]);
    }
    if (cc_sum_u64(ctx, rc != 0) != 0) return -1;
    if (cc_allgather_u64(ctx, ml, ma) != 0) return -1;
    double worst = 0;
    for (int k = 0; k < ctx->nranks; k++) {
        double v;
        memcpy(&v, &ma[k], sizeof v);
        if (v > worst) worst = v;
    }
    *us_out = worst;
    return 0;
}

static result_t measure(bench_t *b, const geom_t *g, int algo, int nccl, uint64_t seed)
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

/* ---- setup ------------------------------------------------------------------------------------------ */
static int setup(bench_t *b, int child_rank)
{
    cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    memset(ctx, 0, sizeof *ctx);
    ctx->name = "symmem-bench";
    ctx->timeout_s = 600;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
        fprintf(stderr, "symmem-bench: no CUDA device\n");
        return CC_EXIT_SKIP;
    }
    ctx->ngpus = ndev;
    ctx->nranks = o->nranks;
    symmem_options_t so = SYMMEM_OPTIONS_INIT;
    if (!o->inprocess) {
        ctx->multiproc = 1;
        ctx->nprocs = o->nranks;
        ctx->proc = child_rank;
        ctx->nlocal = 1;
        ctx->shm = cc_shm_attach("SYMMEM_BENCH");
        cc_rank_t *R = &ctx->r[0];
        R->rank = child_rank;
        R->device = child_rank % ndev;
        if (!ctx->shm || cudaSetDevice(R->device) != cudaSuccess || cudaFree(NULL) != cudaSuccess ||
            cudaStreamCreateWithFlags(&R->stream, cudaStreamNonBlocking) != cudaSuccess) {
            fprintf(stderr, "symmem-bench rank %d: CUDA/channel init failed\n", child_rank);
            cc_shm_abort(ctx->shm);
            return 1;
        }
        if (cc_barrier(ctx) != 0) return 1;
        symmem_unique_id_t id;
        const char *ids = getenv("SYMMEM_UNIQUE_ID");
        symmem_status_t st = ids ? symmem_unique_id_from_string(ids, &id) : SYMMEM_INVALID_ARGUMENT;
        so.device = R->device;
        if (st == SYMMEM_OK) st = symmem_comm_init(o->nranks, child_rank, &id, &so, &R->comm);
        if (st != SYMMEM_OK) {
            fprintf(stderr, "symmem-bench rank %d: symmem_comm_init: %s: %s\n", child_rank, symmem_status_name(st),
                    symmem_last_error());
            cc_shm_abort(ctx->shm);
            return 1;
        }
    } else {
        ctx->nprocs = 1;
        ctx->nlocal = o->nranks;
        int devices[CC_MAX_RANKS];
        symmem_comm_t comms[CC_MAX_RANKS];
        for (int r = 0; r < o->nranks; r++) {
            devices[r] = r % ndev;
            ctx->r[r].rank = r;
            ctx->r[r].device = devices[r];
            cudaSetDevice(devices[r]);
            /* cc_dev_preload: one thread enqueues rank after rank, so no helper kernel may be loaded
             * lazily while a collective waits for a rank not enqueued yet. */
            if (cudaStreamCreateWithFlags(&ctx->r[r].stream, cudaStreamNonBlocking) != cudaSuccess ||
                cc_dev_preload() != cudaSuccess)
                return 1;
        }
        symmem_status_t st = symmem_comm_init_all(o->nranks, devices, &so, comms);
        if (st != SYMMEM_OK) {
            fprintf(stderr, "symmem-bench: symmem_comm_init_all: %s: %s\n", symmem_status_name(st), symmem_last_error());
            return 1;
        }
        for (int r = 0; r < o->nranks; r++) ctx->r[r].comm = comms[r];
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, ctx->r[0].device);
    b->l2 = (size_t)prop.l2CacheSize;

    /* Buffers: enough for the largest size, and for the rotation at smaller sizes. */
    geom_t g;
    size_t need = 0;
    b->max_sets = 8;
    for (double s = (double)o->minb; s <= (double)o->maxb * 1.0000001; s *= o->factor) {
        if (geometry(b, (size_t)s, &g) != 0) continue;
        size_t bytes = (size_t)g.sets * (align4k(g.sbytes) + align4k(g.rbytes));
        if (bytes > need) need = bytes;
    }
    if (need == 0) need = 4096;
    b->slot_bytes = need;
    if (o->zero_copy && cc_alloc(ctx, need, b->sym) != SYMMEM_OK) return 1;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (!o->zero_copy && cudaMalloc((void **)&b->dev[i], need) != cudaSuccess) return 1;
        /* Defined contents for the buffer sets that the check does not fill (timing only). */
        if (cudaMemset(o->zero_copy ? symmem_buffer_ptr(b->sym[i]) : b->dev[i], 0, need) != cudaSuccess) return 1;
    }

    /* NCCL on the same GPUs (not when ranks share a GPU). */
    b->have_nccl = 0;
#ifdef SYMMEM_HAVE_NCCL
    if (o->nccl && o->nranks <= ndev) {
        ncclResult_t nr = ncclSuccess;
        if (!o->inprocess) {
            ncclUniqueId nid;
            memset(&nid, 0, sizeof nid);
            if (child_rank == 0) nr = ncclGetUniqueId(&nid);
            unsigned char all[CC_MAX_RANKS * sizeof(ncclUniqueId)];
            if (cc_shm_allgather(ctx->shm, ctx->proc, ctx->nprocs, &nid, sizeof nid, all) != 0) return 1;
            memcpy(&nid, all, sizeof nid); /* rank 0's */
            if (nr == ncclSuccess) nr = ncclCommInitRank(&b->nccl[0], o->nranks, nid, child_rank);
        } else {
            int devices[CC_MAX_RANKS];
            for (int r = 0; r < o->nranks; r++) devices[r] = r % ndev;
            nr = ncclCommInitAll(b->nccl, o->nranks, devices);
        }
        if (nr != ncclSuccess) {
            fprintf(stderr, "symmem-bench: NCCL init failed: %s (continuing without the baseline)\n", ncclGetErrorString(nr));
        }
        b->have_nccl = cc_sum_u64(ctx, nr != ncclSuccess) == 0;
        for (int i = 0; i < ctx->nlocal && b->have_nccl; i++) {
            cudaSetDevice(ctx->r[i].device);
            if (cudaMalloc((void **)&b->ndev[i], need) != cudaSuccess || cudaMemset(b->ndev[i], 0, need) != cudaSuccess)
                return 1;
        }
    }
#endif
    return 0;
}

static void teardown(bench_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    cc_barrier(ctx);
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
#ifdef SYMMEM_HAVE_NCCL
        if (b->have_nccl) ncclCommDestroy(b->nccl[i]);
#endif
        cudaFree(b->dev[i]);
        cudaFree(b->ndev[i]);
    }
    if (b->o.zero_copy) cc_free(ctx, b->sym);
    cc_finish(ctx);
}

/* ---- auto: what the library's table chooses --------------------------------------------------------- */
static symmem_coll_kind_t coll_kind(int coll)
{
    return coll == T_RS ? SYMMEM_COLL_REDUCE_SCATTER
         : coll == T_AG ? SYMMEM_COLL_ALL_GATHER
         : coll == T_BARRIER ? SYMMEM_COLL_BARRIER
                             : SYMMEM_COLL_ALL_REDUCE;
}

/* The byte count the library looks the table up by, from the same count argument enqueue() passes. */
static size_t table_key(const bench_t *b, const geom_t *g)
{
    return symmem_coll_message_bytes(b->ctx.nranks, coll_kind(b->o.coll), g->count, b->o.dt);
}

/* What SYMMEM_ALGO_AUTO resolves to on this process's first rank (every rank holds the same table). */
static int auto_choice(const bench_t *b, const geom_t *g)
{
    return (int)symmem_coll_choose(symmem_coll_tuning(b->ctx.r[0].comm), coll_kind(b->o.coll), table_key(b, g));
}

/* The algorithm column: the name, or "auto:<chosen>" (the barrier has no algorithm to choose). Call it
 * while the table is the one the measurement uses. */
static const char *algo_label(const bench_t *b, const geom_t *g, int algo, char *buf, size_t len)
{
    if (algo != SYMMEM_ALGO_AUTO || b->o.coll == T_BARRIER)
        snprintf(buf, len, "%s", symmem_algo_name((symmem_algo_t)algo));
    else
        snprintf(buf, len, "auto:%s", symmem_algo_name((symmem_algo_t)auto_choice(b, g)));
    return buf;
}

/* ---- output ----------------------------------------------------------------------------------------- */
static void fmt_result(char *buf, size_t len, const result_t *r, double bytes, double busf, int check)
{
    char wrong[32];
    if (check)
        snprintf(wrong, sizeof wrong, "%llu", (unsigned long long)r->wrong);
    else
        snprintf(wrong, sizeof wrong, "N/A");
    if (!r->ok && r->wrong == 0) {
        snprintf(buf, len, "%10s %7s %7s %7s", "unsupp", "-", "-", "-");
        return;
    }
    if (!r->ok) {
        snprintf(buf, len, "%10s %7s %7s %7s", "error", "-", "-", wrong);
        return;
    }
    double algbw = r->us > 0 ? bytes / (r->us * 1e3) : 0;
    snprintf(buf, len, "%10.2f %7.2f %7.2f %7s", r->us, algbw, algbw * busf, wrong);
}

/* One size of the run: what the summaries (best-vs-NCCL, tuning) need. */
typedef struct size_rec {
    geom_t g;
    size_t key;                      /* table key (symmem_coll_message_bytes) */
    result_t nccl;
    result_t res[SYMMEM_ALGO_COUNT]; /* by algorithm; ok == 0 where not measured */
    int best;                        /* fastest correct entry of -a, -1: none */
    double best_us;
    char best_label[32];
    int before; /* --tune: what auto chose before this pass */
    int winner;     /* --tune: rank 0's decision, broadcast; -1: no correct algorithm at this size */
    int after_algo; /* --tune: what auto chooses with the new table */
    result_t after; /* --tune: auto with the new table */
} size_rec_t;

/* --tune FILE, else where the library looks by default: SYMMEM_TUNE_FILE, else <cache dir>/tune.txt
 * (the folder is created), so a tuning pass serves every later run on this machine without settings. */
static const char *tune_path(const opts_t *o)
{
    static char path[4096];
    int explicit_path = 0;
    if (o->tune_file) return o->tune_file;
    if (symmem_coll_tune_path(path, sizeof path, 1, &explicit_path) != 0) return "symmem-tune.txt";
    return path;
}

static void print_columns(void)
{
    printf("#%11s %12s %9s %6s %17s | %10s %7s %7s %7s | %10s %7s %7s %7s | %6s\n", "size", "count", "type", "redop",
           "algo", "time", "algbw", "busbw", "#wrong", "nccl time", "algbw", "busbw", "#wrong", "ratio");
    printf("#%11s %12s %9s %6s %17s | %10s %7s %7s %7s | %10s %7s %7s %7s | %6s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "");
}

static void print_header(const bench_t *b)
{
    const cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    const int n = ctx->nranks;
    const char *env_algo = getenv("SYMMEM_ALGO");
    printf("# symmem-bench %d.%d.%d: %s, %d ranks (%s) on %d GPU(s), %s %s\n", SYMMEM_VERSION_MAJOR,
           SYMMEM_VERSION_MINOR, SYMMEM_VERSION_PATCH, t_names[o->coll], n,
           o->inprocess ? "threads of one process" : "one process each", ctx->ngpus, symmem_dtype_name(o->dt),
           o->coll == T_AG || o->coll == T_BARRIER ? "" : symmem_redop_name(o->op));
    printf("# timing: %s, %d ops per %s, median of %d, slowest rank; warm-up %d;%s check %s; symmem buffers: %s\n",
           o->graph ? "CUDA-graph replays" : "eager launches", o->iters, o->graph ? "graph" : "batch", o->replays,
           o->warmup, o->align ? " ranks aligned by an untimed replay;" : "", o->check ? "on" : "off",
           o->zero_copy ? "symmetric (zero copy)" : "cudaMalloc (copy-in)");
    printf("# NCCL baseline: %s%s\n", b->have_nccl ? "on (cudaMalloc buffers, same timing)" : "off",
           o->coll == T_BARRIER && b->have_nccl ? "; NCCL has no barrier: a 1-element all-reduce stands in" : "");
    char deftab[4096];
    int explicit_tab = 0;
    const int have_tab = symmem_coll_tune_path(deftab, sizeof deftab, 0, &explicit_tab) == 0 && access(deftab, R_OK) == 0;
    printf("# algorithm table: topology [%s], %s%s%s%s\n", symmem_coll_tuning(ctx->r[0].comm)->fingerprint,
           have_tab ? "table file (its section for this topology, if any) " : "built-in table", have_tab ? deftab : "",
           env_algo && env_algo[0] ? ", SYMMEM_ALGO=" : "", env_algo && env_algo[0] ? env_algo : "");
    double probe_rd = 0, probe_wr = 0;
    if (symmem_coll_probe_figures(ctx->r[0].comm, &probe_rd, &probe_wr))
        printf("# init probe: peer read %.1f GB/s, peer write %.1f GB/s (all ranks at once, min over ranks)\n", probe_rd,
               probe_wr);
    if (o->tune) {
        printf("# --tune: every algorithm per size; winner = lowest time (slowest rank) with #wrong 0, decided by "
               "rank 0 and broadcast%s\n",
               o->algo_given ? "; -a ignored" : "");
        printf("# --tune: table of %s -> %s (section [%s]; other ops and sections kept)\n", t_names[o->coll],
               tune_path(o), symmem_coll_tuning(ctx->r[0].comm)->fingerprint);
        if (!o->check) printf("# --tune with -c 0: results are not checked, so a wrong algorithm can win\n");
        if (env_algo && env_algo[0] && strcasecmp(env_algo, "auto") != 0)
            printf("# --tune: SYMMEM_ALGO overrides the table: the auto rows after tuning run %s, not the table\n",
                   env_algo);
    }
    if (o->inprocess && ctx->ngpus < n) printf("# ranks share GPUs: times are not meaningful, check the #wrong column\n");
    print_columns();
}

static void print_row(const bench_t *b, const geom_t *g, const char *label, const result_t *sr, const result_t *nr,
                      double busf)
{
    const opts_t *o = &b->o;
    char s1[96], s2[96], ratio[16];
    fmt_result(s1, sizeof s1, sr, (double)g->bytes, busf, o->check);
    if (b->have_nccl)
        fmt_result(s2, sizeof s2, nr, (double)g->bytes, busf, o->check);
    else
        snprintf(s2, sizeof s2, "%10s %7s %7s %7s", "-", "-", "-", "-");
    if (sr->ok && nr->ok && nr->us > 0)
        snprintf(ratio, sizeof ratio, "%6.2f", sr->us / nr->us);
    else
        snprintf(ratio, sizeof ratio, "%6s", "-");
    printf(" %11zu %12zu %9s %6s %17s | %s | %s | %s\n", g->bytes, g->total, symmem_dtype_name(o->dt),
           o->coll == T_AG || o->coll == T_BARRIER ? "none" : symmem_redop_name(o->op), label, s1, s2, ratio);
    fflush(stdout);
}

static void print_best(const size_rec_t *recs, int nrec)
{
    printf("#\n# best symmem algorithm per size vs NCCL (ratio = symmem time / NCCL time; < 1: symmem faster)\n");
    printf("#%11s %17s %10s %10s %7s\n", "size", "best algo", "time(us)", "nccl(us)", "ratio");
    double geo = 0;
    int ngeo = 0;
    for (int k = 0; k < nrec; k++) {
        const size_rec_t *x = &recs[k];
        const double nccl_us = x->nccl.ok ? x->nccl.us : 0;
        /* "-" where there is no figure (NCCL baseline off or failed, no symmem algorithm ran), never 0.00 */
        char r[16] = "-", t[16] = "-", n[16] = "-";
        if (x->best >= 0) snprintf(t, sizeof t, "%.2f", x->best_us);
        if (nccl_us > 0) snprintf(n, sizeof n, "%.2f", nccl_us);
        if (x->best >= 0 && nccl_us > 0) {
            snprintf(r, sizeof r, "%.2f", x->best_us / nccl_us);
            geo += log(x->best_us / nccl_us);
            ngeo++;
        }
        printf(" %11zu %17s %10s %10s %7s\n", x->g.bytes, x->best >= 0 ? x->best_label : "-", t, n, r);
    }
    if (ngeo) printf("# geometric mean ratio: %.3f over %d sizes\n", exp(geo / ngeo), ngeo);
}

/* ---- --tune ----------------------------------------------------------------------------------------- */
/* Before measuring: if FILE exists, every rank loads it, so the rules of the other ops (and of this op,
 * for the "before" column) are what the file says; symmem_coll_tune_save replaces the whole section of
 * this topology, so without this a second --tune for another op would drop the first op's rules.
 * Agreed across ranks; -1 (nothing measured) if any rank cannot read or parse it. */
static int tune_begin(bench_t *b, const char *path)
{
    cc_ctx_t *ctx = &b->ctx;
    uint64_t failed = 0;
    if (access(path, F_OK) == 0) {
        for (int i = 0; i < ctx->nlocal; i++) {
            if (symmem_coll_tune_load(symmem_coll_tuning(ctx->r[i].comm), path) == SYMMEM_OK) continue;
            if (!failed) cc_log(ctx, "--tune: cannot use %s: %s", path, symmem_last_error());
            failed++;
        }
    }
    if (cc_sum_u64(ctx, failed) != 0) {
        if (cc_is_root(ctx)) printf("# --tune: %s exists but cannot be used (see above): fix or remove it\n", path);
        return -1;
    }
    return 0;
}

/* Rank 0 picks each size's winner (its times are already the slowest rank's) and broadcasts it through
 * the shared-memory channel, so every rank builds the table from the same decisions. Returns the number
 * of sizes with a winner, or -1 if the channel failed. */
static int tune_decide(bench_t *b, size_rec_t *recs, int nrec)
{
    cc_ctx_t *ctx = &b->ctx;
    const int root = cc_is_root(ctx);
    int nwin = 0;
    for (int k = 0; k < nrec; k++) {
        int w = -1;
        double wus = 0;
        for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT && root; a++) {
            const result_t *r = &recs[k].res[a];
            if (r->ok && r->wrong == 0 && (w < 0 || r->us < wus)) { /* unsupported or wrong never wins */
                w = a;
                wus = r->us;
            }
        }
        uint64_t mine[CC_MAX_RANKS], all[CC_MAX_RANKS];
        for (int i = 0; i < CC_MAX_RANKS; i++) mine[i] = (uint64_t)(int64_t)w;
        if (cc_allgather_u64(ctx, mine, all) != 0) return -1;
        const int agreed = (int)(int64_t)all[0]; /* rank 0's */
        recs[k].winner = agreed > SYMMEM_ALGO_AUTO && agreed < SYMMEM_ALGO_COUNT ? agreed : -1;
        nwin += recs[k].winner >= 0;
    }
    return nwin;
}

/* floor(sqrt(lo*hi)), kept in [lo, hi) */
static size_t geo_mid(size_t lo, size_t hi)
{
    size_t t = (size_t)floor(sqrt((double)lo * (double)hi));
    if (t < lo) t = lo;
    if (t >= hi) t = hi - 1;
    return t;
}

/* Contiguous ranges from the agreed winners: a run of sizes with the same winner holds up to the
 * geometric midpoint between its last size and the next measured size with a winner; the last run
 * holds up to SIZE_MAX. Sizes below the first measured one fall under the first rule. */
static int tune_ranges(const size_rec_t *recs, int nrec, size_t *max_bytes, int *algo)
{
    int nr = 0;
    size_t last_key = 0;
    for (int k = 0; k < nrec; k++) {
        const int w = recs[k].winner;
        if (w < 0) continue;
        if (nr > 0 && algo[nr - 1] == w) {
            last_key = recs[k].key;
            continue;
        }
        if (nr > 0) max_bytes[nr - 1] = geo_mid(last_key, recs[k].key);
        algo[nr] = w;
        last_key = recs[k].key;
        nr++;
    }
    if (nr > 0) max_bytes[nr - 1] = SIZE_MAX;
    return nr;
}

/* Every rank: replace this op's rules with the ranges, then check that every rank now chooses the same
 * algorithm at every measured size (the library compares tables only at init). On failure every rank
 * clears the op (built-in default; still the same everywhere). Agreed; 0 or -1. */
static int tune_apply(bench_t *b, const size_rec_t *recs, int nrec, const size_t *max_bytes, const int *algo, int nr)
{
    cc_ctx_t *ctx = &b->ctx;
    const symmem_coll_kind_t kind = coll_kind(b->o.coll);
    uint64_t failed = 0, hl[CC_MAX_RANKS] = {0}, ha[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        symmem_coll_tuning_t *c = symmem_coll_tuning(ctx->r[i].comm);
        symmem_status_t st = symmem_coll_tune_clear(c, kind);
        for (int j = 0; j < nr && st == SYMMEM_OK; j++)
            st = symmem_coll_tune_set(c, kind, max_bytes[j], (symmem_algo_t)algo[j]);
        if (st != SYMMEM_OK) {
            cc_log(ctx, "--tune: rank %d: setting the table: %s: %s", ctx->r[i].rank, symmem_status_name(st),
                   symmem_last_error());
            failed++;
        }
        int chosen[BENCH_MAX_SIZES];
        for (int k = 0; k < nrec; k++) chosen[k] = (int)symmem_coll_choose(c, kind, recs[k].key);
        hl[i] = cc_hash(chosen, (size_t)nrec * sizeof chosen[0]);
    }
    int differ = 0;
    if (cc_allgather_u64(ctx, hl, ha) != 0) return -1;
    for (int k = 1; k < ctx->nranks; k++) differ |= ha[k] != ha[0];
    if (cc_sum_u64(ctx, failed) == 0 && !differ) return 0;
    for (int i = 0; i < ctx->nlocal; i++) symmem_coll_tune_clear(symmem_coll_tuning(ctx->r[i].comm), kind);
    if (cc_is_root(ctx))
        printf("# --tune: %s; %s falls back to the built-in table, nothing written\n",
               differ ? "ranks ended up with different choices" : "the table could not be set (see above)",
               t_names[b->o.coll]);
    return -1;
}

/* The table as symmem_coll_tune_print writes it, each line behind "#   " so the output stays a table. */
static void print_table_commented(const symmem_coll_tuning_t *comm)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        symmem_coll_tune_print(comm, stdout);
        return;
    }
    symmem_coll_tune_print(comm, m);
    fclose(m);
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) printf("#   %s\n", line);
    free(buf);
}

static void print_tune_summary(const size_rec_t *recs, int nrec)
{
    printf("#\n# tuning: before = what auto chose before this pass, after = auto with the new table (times in us,\n"
           "# slowest rank; ratio = time / NCCL time, < 1: symmem faster; NCCL from the tuning pass)\n");
    printf("#%11s %17s %10s %6s | %17s %10s %6s | %10s\n", "size", "before", "time", "ratio", "after", "time",
           "ratio", "nccl");
    double gb = 0, ga = 0;
    int nb = 0, na = 0, nowin = 0;
    for (int k = 0; k < nrec; k++) {
        const size_rec_t *x = &recs[k];
        const double nccl = x->nccl.ok ? x->nccl.us : 0;
        const result_t *bf = x->before > SYMMEM_ALGO_AUTO && x->before < SYMMEM_ALGO_COUNT ? &x->res[x->before] : NULL;
        const int bok = bf && bf->ok && bf->wrong == 0, aok = x->after.ok && x->after.wrong == 0;
        char bt[16] = "-", br[16] = "-", at[16] = "-", ar[16] = "-", nt[16] = "-", al[32];
        if (bok) snprintf(bt, sizeof bt, "%.2f", bf->us);
        if (aok) snprintf(at, sizeof at, "%.2f", x->after.us);
        if (nccl > 0) snprintf(nt, sizeof nt, "%.2f", nccl);
        if (bok && nccl > 0) {
            snprintf(br, sizeof br, "%.2f", bf->us / nccl);
            gb += log(bf->us / nccl);
            nb++;
        }
        if (aok && nccl > 0) {
            snprintf(ar, sizeof ar, "%.2f", x->after.us / nccl);
            ga += log(x->after.us / nccl);
            na++;
        }
        snprintf(al, sizeof al, "%s%s", symmem_algo_name((symmem_algo_t)x->after_algo), x->winner >= 0 ? "" : "*");
        nowin += x->winner < 0;
        printf(" %11zu %17s %10s %6s | %17s %10s %6s | %10s\n", x->g.bytes, symmem_algo_name((symmem_algo_t)x->before),
               bt, br, al, at, ar, nt);
    }
    if (nowin) printf("# *: no algorithm ran correctly at this size; a neighbouring size's range covers it\n");
    if (nb) printf("# geometric mean ratio before: %.3f over %d sizes\n", exp(gb / nb), nb);
    if (na) printf("# geometric mean ratio after:  %.3f over %d sizes\n", exp(ga / na), na);
}

/* After the measuring pass: decide, build, set, save, print, re-measure auto. 0, or -1 when no table was
 * set or it could not be written. Every rank makes the same collective calls in the same order. */
static int tune_finish(bench_t *b, size_rec_t *recs, int nrec, double busf, uint64_t *wrong_total)
{
    cc_ctx_t *ctx = &b->ctx;
    const int root = cc_is_root(ctx);
    const char *path = tune_path(&b->o);
    size_t max_bytes[BENCH_MAX_SIZES];
    int algo[BENCH_MAX_SIZES];
    const int nwin = tune_decide(b, recs, nrec);
    if (nwin < 0) return -1;
    const int nr = tune_ranges(recs, nrec, max_bytes, algo);
    if (nr == 0) {
        if (root) printf("# --tune: no algorithm ran correctly at any size: table unchanged, nothing written\n");
        return -1;
    }
    if (tune_apply(b, recs, nrec, max_bytes, algo, nr) != 0) return -1;
    int rc = 0;
    if (root) {
        symmem_coll_tuning_t *c = symmem_coll_tuning(ctx->r[0].comm);
        printf("#\n# tuned: %d of %d sizes had a winner, %d rule(s) for %s\n", nwin, nrec, nr, t_names[b->o.coll]);
        const symmem_status_t st = symmem_coll_tune_save(c, path);
        if (st == SYMMEM_OK)
            printf("# written to %s (use it: SYMMEM_TUNE_FILE=%s); the table now in effect:\n", path, path);
        else {
            printf("# --tune: could not write %s: %s: %s; the table now in effect (not saved):\n", path,
                   symmem_status_name(st), symmem_last_error());
            rc = -1;
        }
        print_table_commented(c);
        printf("#\n# after tuning: auto with the new table (NCCL columns repeat the tuning pass's measurement)\n");
        print_columns();
    }
    for (int k = 0; k < nrec; k++) {
        size_rec_t *x = &recs[k];
        char label[32];
        algo_label(b, &x->g, SYMMEM_ALGO_AUTO, label, sizeof label);
        x->after_algo = auto_choice(b, &x->g);
        x->after = measure(b, &x->g, SYMMEM_ALGO_AUTO, 0, cc_mix64(cc_mix64(0xbe4c8ull ^ x->g.bytes) + 0x7475));
        *wrong_total += x->after.wrong;
        if (root) print_row(b, &x->g, label, &x->after, &x->nccl, busf);
    }
    if (root) print_tune_summary(recs, nrec);
    return rc;
}

static int run(bench_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    const int n = ctx->nranks, root = cc_is_root(ctx);
    const double busf = o->coll == T_AR ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
    static size_rec_t recs[BENCH_MAX_SIZES]; /* static: no allocation that could fail on one rank only */
    size_rec_t scratch;
    int nrec = 0, rc = 0;
    uint64_t wrong_total = 0;
    if (root) print_header(b);
    if (o->tune && tune_begin(b, tune_path(o)) != 0) return 1;
    size_t last = (size_t)-1;
    for (double s = (double)o->minb; s <= (double)o->maxb * 1.0000001; s *= o->factor) {
        geom_t g;
        if (geometry(b, (size_t)s, &g) != 0 || g.bytes == last) continue;
        last = g.bytes;
        size_rec_t *x = nrec < BENCH_MAX_SIZES ? &recs[nrec] : &scratch; /* --tune never overflows (parse_args) */
        memset(x, 0, sizeof *x);
        x->g = g;
        x->key = table_key(b, &g);
        x->best = x->winner = -1;
        x->before = auto_choice(b, &g);
        uint64_t seed = cc_mix64(0xbe4c8ull ^ g.bytes);
        if (b->have_nccl) x->nccl = measure(b, &g, SYMMEM_ALGO_AUTO, 1, seed);
        wrong_total += x->nccl.wrong;
        for (int a = 0; a < o->nalgos; a++) {
            char label[32];
            algo_label(b, &g, o->algos[a], label, sizeof label);
            result_t sr = measure(b, &g, o->algos[a], 0, cc_mix64(seed + (uint64_t)a + 1));
            x->res[o->algos[a]] = sr;
            wrong_total += sr.wrong;
            if (sr.ok && sr.wrong == 0 && (x->best < 0 || sr.us < x->best_us)) {
                x->best = o->algos[a];
                x->best_us = sr.us;
                snprintf(x->best_label, sizeof x->best_label, "%s", label);
            }
            if (root) print_row(b, &g, label, &sr, &x->nccl, busf);
        }
        if (nrec < BENCH_MAX_SIZES) nrec++;
        if (o->coll == T_BARRIER) break;
    }
    if (o->tune) {
        if (tune_finish(b, recs, nrec, busf, &wrong_total) != 0) rc = 1;
    } else if (root) {
        print_best(recs, nrec);
    }
    if (root)
        printf("# out of bounds values: %llu %s\n", (unsigned long long)wrong_total, wrong_total ? "FAILED" : "OK");
    return rc || wrong_total ? 1 : 0;
}

int main(int argc, char **argv)
{
    bench_t b;
    memset(&b, 0, sizeof b);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (parse_args(argc, argv, &b.o) != 0) return 2;
    int child = cc_child_rank("SYMMEM_BENCH");
    if (child < 0 && !b.o.inprocess) {
        /* Parent: no CUDA here. The GPU count comes from a forked probe. */
        int ngpu = cc_probe_gpu_count();
        if (ngpu <= 0) {
            printf("symmem-bench: no CUDA device; nothing to measure\n");
            return CC_EXIT_SKIP;
        }
        if (b.o.nranks <= 0) b.o.nranks = ngpu < 2 ? 2 : ngpu; /* one GPU: two ranks on it */
        if (b.o.nranks > CC_MAX_RANKS) b.o.nranks = CC_MAX_RANKS;
        char nbuf[16];
        snprintf(nbuf, sizeof nbuf, "%d", b.o.nranks);
        /* Children get the resolved rank count. */
        char *cargv[256];
        int k = 0;
        for (int i = 0; i < argc && k < 250; i++) cargv[k++] = argv[i];
        cargv[k++] = "-N";
        cargv[k++] = nbuf;
        cargv[k] = NULL;
        return cc_launch("SYMMEM_BENCH", b.o.nranks, cargv, NULL, 0);
    }
    if (b.o.inprocess && b.o.nranks <= 0) {
        int ndev = 0;
        if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) {
            printf("symmem-bench: no CUDA device; nothing to measure\n");
            return CC_EXIT_SKIP;
        }
        b.o.nranks = ndev < 2 ? 2 : ndev;
    }
    if (b.o.nranks < 1 || b.o.nranks > CC_MAX_RANKS) {
        fprintf(stderr, "symmem-bench: -N %d out of range\n", b.o.nranks);
        return 2;
    }
    int rc = setup(&b, child < 0 ? 0 : child);
    if (rc != 0) {
        cc_shm_abort(b.ctx.shm);
        return rc;
    }
    rc = run(&b);
    teardown(&b);
    return rc;
}
