/* coll_sweep: every operation x dtype x op x algorithm over sizes from 1 element up (odd counts, tails),
 * against a float64 host reference on fresh random data, with
 *  - in place (NCCL's forms for reduce-scatter and all-gather) and out of place, copy-in from cudaMalloc memory and zero copy from a
 *    symmetric buffer, send/recv pointers misaligned by 1..7 elements;
 *  - guard bytes before and after the output checked untouched, the output pre-filled with NaN;
 *  - bitwise equality of the output across ranks (all-reduce, all-gather);
 *  - sizes around the workspace limit (symmem_comm_max_message_bytes: chunked path), and one 256 MiB
 *    all-reduce per dtype (multi-process mode).
 * Usage: coll_sweep [--mp N | --inproc N] [--quick | --lean] [--algo NAME]   (--algo: only that algorithm's cases)
 *   --quick: five counts, every placement at the small ones; --lean: the same five counts, one placement per
 *   case, rotating through all eight over the run (every operation x dtype x op x algorithm still, about a
 *   fifteenth of the in-process cases: what keeps 9..16 co-located ranks, whose every case costs a host round
 *   per rank, within a minute).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

enum { OP_AR, OP_RS, OP_AG, OP_COUNT };
static const char *const coll_names[OP_COUNT] = {"all_reduce", "reduce_scatter", "all_gather"};

#define GUARD 64
#define NVARIANTS 8
#define MAX_PRINTED_FAILURES 25

typedef struct scase {
    int coll;
    symmem_dtype_t dt;
    symmem_redop_t op;
    symmem_algo_t algo;
    size_t count;
    int variant;
    int big; /* > the workspace: UNSUPPORTED tolerated for forced algorithms */
} scase_t;

/* Placement variants: in place?, send symmetric?, recv symmetric?, misaligned? (offsets 1..7 elements). */
static const struct {
    int inplace, send_sym, recv_sym, misaligned;
    const char *name;
} variants[NVARIANTS] = {
    {0, 0, 0, 0, "copy-in dev->dev"},       {1, 0, 0, 0, "in-place dev"},
    {0, 1, 1, 0, "zero-copy sym->sym"},     {1, 1, 1, 0, "in-place sym"},
    {0, 0, 1, 1, "dev+k->sym+j misaligned"}, {0, 1, 0, 1, "sym+k->dev+j misaligned"},
    {1, 1, 1, 1, "in-place sym+k"},          {1, 0, 0, 1, "in-place dev+k"},
};

typedef struct stats {
    uint64_t pass, fail, unsupported;
    uint64_t per_algo[OP_COUNT][SYMMEM_ALGO_COUNT][3];
} stats_t;

typedef struct bufs {
    symmem_buffer_t sym[CC_MAX_RANKS];
    void *dev_send[CC_MAX_RANKS], *dev_recv[CC_MAX_RANKS];
    size_t cap; /* bytes usable in each of sym, dev_send, dev_recv */
} bufs_t;

static size_t send_count(const scase_t *c, int n) { return c->coll == OP_RS ? c->count * (size_t)n : c->count; }
static size_t recv_count(const scase_t *c, int n) { return c->coll == OP_AG ? c->count * (size_t)n : c->count; }

/* Byte layout of one case in a buffer: send region at s_off, recv at r_off. In place (all three operations,
 * in NCCL's forms: all-reduce send == recv; reduce-scatter recv = send + rank*count; all-gather send =
 * recv + rank*count) there is one region, at s_off, of the larger of the two sizes. */
static void layout(const scase_t *c, int n, size_t es, size_t *s_off, size_t *r_off, int *inplace)
{
    int k = (int)(c->count % 7);
    size_t soff = variants[c->variant].misaligned ? (size_t)(1 + k) : 0;
    size_t roff = variants[c->variant].misaligned ? (size_t)(1 + (k + 3) % 7) : 0;
    *inplace = variants[c->variant].inplace;
    *s_off = 4096 + soff * es;
    if (*inplace) {
        *r_off = *s_off;
        return;
    }
    /* send and recv live in different allocations except for sym->sym; lay them out apart anyway. */
    size_t send_end = *s_off + send_count(c, n) * es + GUARD;
    *r_off = ((send_end + 4095) / 4096) * 4096 + 4096 + roff * es;
}

static size_t case_bytes_needed(const scase_t *c, int n)
{
    size_t es = symmem_dtype_size(c->dt), s, r;
    int ip;
    layout(c, n, es, &s, &r, &ip);
    size_t big = send_count(c, n) > recv_count(c, n) ? send_count(c, n) : recv_count(c, n);
    return r + big * es + GUARD + 4096;
}

enum { R_PASS = 0, R_FAIL = 1, R_UNSUP = 2 };

/* Enqueue the case's operation on every local rank. Returns the statuses gathered from every rank. */
static int enqueue(cc_ctx_t *ctx, const scase_t *c, void **sp, void **rp, const char *what, uint64_t *st_all)
{
    uint64_t st_local[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        symmem_status_t st;
        if (c->coll == OP_AR)
            st = symmem_all_reduce(R->comm, sp[i], rp[i], c->count, c->dt, c->op, c->algo, R->stream);
        else if (c->coll == OP_RS)
            st = symmem_reduce_scatter(R->comm, sp[i], rp[i], c->count, c->dt, c->op, c->algo, R->stream);
        else
            st = symmem_all_gather(R->comm, sp[i], rp[i], c->count, c->dt, c->algo, R->stream);
        st_local[i] = (uint64_t)st;
        if (st != SYMMEM_OK && st != SYMMEM_UNSUPPORTED)
            cc_log(ctx, "FAIL: %s: rank %d returned %s: %s", what, R->rank, symmem_status_name(st),
                   symmem_last_error());
    }
    return cc_allgather_u64(ctx, st_local, st_all);
}

/* Check the outputs of every local rank; returns 1 on any failure. h_local receives the output hashes. */
/* outer[i]/outer_bytes: the region the operation may write (the recv buffer, or in place the whole shared
 * region), with GUARD bytes of 0xA5 before and after that must survive; rp[i] lies inside it. */
static int verify(cc_ctx_t *ctx, const scase_t *c, void **rp, void **outer, size_t outer_bytes, uint64_t seed,
                  unsigned char *hrecv, const char *what, uint64_t *h_local, int quiet)
{
    const int n = ctx->nranks;
    const size_t es = symmem_dtype_size(c->dt), rcount = recv_count(c, n), rbytes = rcount * es;
    int failed = 0;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        CC_CHECK_CUDA(ctx, cudaMemcpy(hrecv, (char *)outer[i] - GUARD, outer_bytes + 2 * GUARD, cudaMemcpyDeviceToHost));
        const unsigned char *out = hrecv + GUARD + ((char *)rp[i] - (char *)outer[i]);
        int guard_bad = 0;
        for (int g = 0; g < GUARD; g++) guard_bad += (hrecv[g] != 0xA5) + (hrecv[GUARD + outer_bytes + g] != 0xA5);
        cc_bad_t bad = {0, 0, 0, 0};
        /* All-reduce and all-gather outputs must be bitwise equal on every rank (checked by hash), so
         * the element-wise reference runs on the first local rank only: in-process runs stay fast. */
        int full = c->coll == OP_RS || i == 0;
        if (!full)
            ;
        else if (c->coll == OP_AR)
            cc_check_reduce(out, c->dt, c->op, c->count, 0, n, seed, &bad);
        else if (c->coll == OP_RS)
            cc_check_reduce(out, c->dt, c->op, c->count, (uint64_t)R->rank * c->count, n, seed, &bad);
        else
            cc_check_gather(out, c->dt, c->count, n, seed, &bad);
        if (bad.wrong || guard_bad) {
            failed = 1;
            if (!quiet)
                cc_log(ctx, "FAIL: %s: rank %d: %zu of %zu elements wrong (first at %zu: got %.9g want %.9g), "
                       "%d guard bytes overwritten", what, R->rank, bad.wrong, rcount, bad.first, bad.got,
                       bad.want, guard_bad);
        }
        h_local[i] = cc_hash(out, rbytes);
    }
    return failed;
}

/* One case on the local ranks: its name, sizes, layout() and every local rank's pointers (send, recv, and
 * the region the operation may write, see verify). */
typedef struct placed {
    char what[256];
    size_t es, scount, sbytes, outer_bytes, s_off, r_off;
    int inplace;
    void *sp[CC_MAX_RANKS], *rp[CC_MAX_RANKS], *outer[CC_MAX_RANKS];
} placed_t;

static void describe(const scase_t *c, int n, placed_t *p)
{
    const size_t es = symmem_dtype_size(c->dt);
    const size_t scount = send_count(c, n), rcount = recv_count(c, n);
    const size_t rbytes = rcount * es, sbytes = scount * es;
    layout(c, n, es, &p->s_off, &p->r_off, &p->inplace);
    snprintf(p->what, sizeof p->what, "%s %s %s %s count=%zu [%s]", coll_names[c->coll], symmem_dtype_name(c->dt),
             c->coll == OP_AG ? "-" : symmem_redop_name(c->op), symmem_algo_name(c->algo), c->count,
             variants[c->variant].name);
    p->es = es;
    p->scount = scount;
    p->sbytes = sbytes;
    p->outer_bytes = p->inplace && sbytes > rbytes ? sbytes : rbytes;
}

/* Inputs (fresh, rank-dependent), NaN-filled output, guards. 0, or 1 after logging (channel aborted). */
static int prepare(cc_ctx_t *ctx, const bufs_t *b, const scase_t *c, uint64_t seed, unsigned char *hsend, placed_t *p)
{
    const int vs = variants[c->variant].send_sym, vr = variants[c->variant].recv_sym;
    const int inplace = p->inplace;
    const size_t es = p->es, outer_bytes = p->outer_bytes;
    void **sp = p->sp, **rp = p->rp, **outer = p->outer;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        unsigned char *sbase = vs ? symmem_buffer_ptr(b->sym[i]) : b->dev_send[i];
        unsigned char *rbase = vr ? symmem_buffer_ptr(b->sym[i]) : b->dev_recv[i];
        const size_t mine = (size_t)R->rank * c->count * es;
        if (inplace) {
            unsigned char *base = sbase + p->s_off;
            sp[i] = c->coll == OP_AG ? base + mine : base;
            rp[i] = c->coll == OP_RS ? base + mine : base;
            outer[i] = base;
        } else {
            sp[i] = sbase + p->s_off;
            rp[i] = rbase + p->r_off;
            outer[i] = rp[i];
        }
        cc_fill(hsend, c->dt, p->scount, seed, R->rank, 0);
        cudaError_t e = cudaMemsetAsync((char *)outer[i] - GUARD, 0xA5, GUARD, R->stream);
        if (e == cudaSuccess) e = cudaMemsetAsync((char *)outer[i] + outer_bytes, 0xA5, GUARD, R->stream);
        if (e == cudaSuccess && (!inplace || c->coll == OP_AG)) e = cudaMemsetAsync(outer[i], 0xFF, outer_bytes, R->stream);
        if (e == cudaSuccess) e = cudaMemcpyAsync(sp[i], hsend, p->sbytes, cudaMemcpyHostToDevice, R->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(R->stream);
        if (e != cudaSuccess) {
            cc_log(ctx, "FAIL: %s: preparing the buffers: %s", p->what, cudaGetErrorString(e));
            cc_shm_abort(ctx->shm);
            return 1;
        }
    }
    return 0;
}

/* Whether every rank enqueued the case (st_all: every rank's status). If not, *result is the case's result
 * (unsupported everywhere: tolerated or not) or *fatal is set (ranks that disagree). */
static int enqueued_everywhere(cc_ctx_t *ctx, const scase_t *c, const char *what, const uint64_t *st_all, int *result,
                               int *fatal)
{
    const int n = ctx->nranks;
    int n_ok = 0, n_unsup = 0;
    for (int r = 0; r < n; r++) {
        n_ok += st_all[r] == SYMMEM_OK;
        n_unsup += st_all[r] == SYMMEM_UNSUPPORTED;
    }
    if (n_unsup == n) {
        /* Tolerated: a forced algorithm beyond the workspace, or one that a reduce-scatter/all-gather does
         * not implement. Never for auto, never for an all-reduce within the workspace. */
        int tolerated = c->algo != SYMMEM_ALGO_AUTO && (c->big || c->coll != OP_AR);
        if (!tolerated && cc_is_root(ctx))
            cc_log(ctx, "FAIL: %s: SYMMEM_UNSUPPORTED, but this combination is required: %s", what,
                   symmem_last_error());
        *result = tolerated ? R_UNSUP : R_FAIL;
        return 0;
    }
    if (n_ok != n) {
        /* Some ranks enqueued the operation and others did not: their kernels can only time out. */
        if (cc_is_root(ctx)) cc_log(ctx, "FAIL: %s: ranks disagree on the status (%d of %d OK)", what, n_ok, n);
        cc_sync(ctx);
        *fatal = 1;
        return 0;
    }
    return 1;
}

/* The completed case's outputs: verify() on every local rank, then bitwise equality across ranks (not for
 * reduce-scatter). R_PASS or R_FAIL (*fatal set when the channel failed). */
static int check_outputs(cc_ctx_t *ctx, const scase_t *c, placed_t *p, uint64_t seed, unsigned char *hrecv, int quiet,
                         int *fatal)
{
    const int n = ctx->nranks;
    uint64_t h_local[CC_MAX_RANKS], h_all[CC_MAX_RANKS];
    int failed = verify(ctx, c, p->rp, p->outer, p->outer_bytes, seed, hrecv, p->what, h_local, quiet);
    if (cc_allgather_u64(ctx, h_local, h_all) != 0) {
        *fatal = 1;
        return R_FAIL;
    }
    if (c->coll != OP_RS)
        for (int r = 1; r < n; r++)
            if (h_all[r] != h_all[0]) {
                if (cc_is_root(ctx) && !quiet)
                    cc_log(ctx, "FAIL: %s: rank %d's output differs bitwise from rank 0's", p->what, r);
                failed = 1;
                break;
            }
    return failed ? R_FAIL : R_PASS;
}

static int run_case(cc_ctx_t *ctx, bufs_t *b, const scase_t *c, uint64_t seed, int quiet, int *fatal)
{
    placed_t p;
    describe(c, ctx->nranks, &p);
    unsigned char *hsend = malloc(p.sbytes ? p.sbytes : 1), *hrecv = malloc(p.outer_bytes + 2 * GUARD);
    int result = R_FAIL;
    uint64_t st_all[CC_MAX_RANKS];
    if (!hsend || !hrecv) {
        cc_log(ctx, "FAIL: out of host memory for %s", p.what);
        cc_shm_abort(ctx->shm);
        *fatal = 1;
        goto out;
    }
    if (prepare(ctx, b, c, seed, hsend, &p) != 0) {
        *fatal = 1;
        goto out;
    }
    if (enqueue(ctx, c, p.sp, p.rp, p.what, st_all) != 0) {
        *fatal = 1;
        goto out;
    }
    if (!enqueued_everywhere(ctx, c, p.what, st_all, &result, fatal)) goto out;
    if (cc_sync(ctx) != cudaSuccess || cc_async_error(ctx) != SYMMEM_OK) {
        cc_log(ctx, "FAIL: %s: the operation did not complete", p.what);
        cc_shm_abort(ctx->shm);
        *fatal = 1;
        goto out;
    }
    result = check_outputs(ctx, c, &p, seed, hrecv, quiet, fatal);
out:
    free(hsend);
    free(hrecv);
    /* Every process counts the same result. */
    if (!*fatal && cc_sum_u64(ctx, result == R_FAIL) != 0) result = R_FAIL;
    return result;
}

/* ---- the case list ----------------------------------------------------------------------------------- */
typedef struct caselist {
    scase_t *v;
    size_t n, cap;
} caselist_t;

static void add(caselist_t *l, scase_t c)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->v = realloc(l->v, l->cap * sizeof(scase_t));
        if (!l->v) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    l->v[l->n++] = c;
}

static const size_t counts_mp[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255,
                                   256, 511, 1023, 1024, 1025, 4095, 4096, 8191, 32769, 65535, 131073, 262143,
                                   1048575, 4194307};
static const size_t counts_inproc[] = {1, 2, 3, 7, 16, 17, 33, 255, 1025, 4099, 65537, 262147};
static const size_t counts_quick[] = {1, 3, 17, 1025, 65537};

static void build_cases(caselist_t *l, const size_t *counts, size_t ncounts, size_t max_msg, int big, int lean,
                        int nranks)
/* big: also the chunk-boundary sizes and the 256 MiB cases (multi-process runs); lean: one placement per case */
{
    size_t idx = 0;
    for (int coll = 0; coll < OP_COUNT; coll++)
        for (int dt = 0; dt < SYMMEM_DTYPE_COUNT; dt++)
            for (int op = 0; op < (coll == OP_AG ? 1 : SYMMEM_REDOP_COUNT); op++)
                for (int algo = 0; algo < SYMMEM_ALGO_COUNT; algo++)
                    for (size_t k = 0; k < ncounts && cc_algo_known(algo); k++) {
                        scase_t c = {coll, (symmem_dtype_t)dt, (symmem_redop_t)op, (symmem_algo_t)algo, counts[k], 0, 0};
                        size_t bytes = counts[k] * symmem_dtype_size(c.dt) * (coll == OP_AR ? 1 : (size_t)nranks);
                        c.big = max_msg && bytes > max_msg;
                        /* Small sizes: every placement. Larger: one placement, rotating. */
                        if (counts[k] <= 1025 && !lean) {
                            for (int v = 0; v < NVARIANTS; v++) {
                                c.variant = v;
                                add(l, c);
                            }
                        } else {
                            c.variant = (int)((idx++ + k) % NVARIANTS);
                            add(l, c);
                        }
                    }
    /* Around the workspace limit (where chunking starts): bf16 sum, every algorithm. */
    if (big && max_msg >= 4096) {
        size_t m = max_msg / 2;
        size_t around[3] = {m - 1, m + 1, 2 * m + 3};
        for (int algo = 0; algo < SYMMEM_ALGO_COUNT; algo++)
            for (int k = 0; k < 3 && cc_algo_known(algo); k++) {
                if (k == 0 && algo != SYMMEM_ALGO_AUTO) continue;
                scase_t c = {OP_AR, SYMMEM_BFLOAT16, SYMMEM_OP_SUM, (symmem_algo_t)algo, around[k], (algo + k) % 4, around[k] * 2 > max_msg};
                add(l, c);
            }
    }
    /* One 256 MiB all-reduce per dtype (auto, sum), each with a different placement. */
    if (big) {
        static const int v[SYMMEM_DTYPE_COUNT] = {5, 0, 3};
        for (int dt = 0; dt < SYMMEM_DTYPE_COUNT; dt++) {
            size_t count = ((size_t)256 << 20) / symmem_dtype_size((symmem_dtype_t)dt);
            scase_t c = {OP_AR, (symmem_dtype_t)dt, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, count, v[dt], 1};
            add(l, c);
        }
    }
}

/* The case list for this run: quick or lean, multi-process (chunk boundaries and 256 MiB cases too) or
 * in-process counts; with --algo only that algorithm's cases. */
static void plan_cases(const cc_ctx_t *ctx, int quick, int lean, symmem_algo_t only, size_t max_msg, caselist_t *cases)
{
    if (quick || lean)
        build_cases(cases, counts_quick, sizeof counts_quick / sizeof *counts_quick, max_msg, 0, lean, ctx->nranks);
    else if (ctx->multiproc)
        build_cases(cases, counts_mp, sizeof counts_mp / sizeof *counts_mp, max_msg, 1, 0, ctx->nranks);
    else
        build_cases(cases, counts_inproc, sizeof counts_inproc / sizeof *counts_inproc, max_msg, 0, 0, ctx->nranks);
    if (only != SYMMEM_ALGO_COUNT) {
        size_t w = 0;
        for (size_t k = 0; k < cases->n; k++)
            if (cases->v[k].algo == only) cases->v[w++] = cases->v[k];
        cases->n = w;
    }
}

/* Buffers large enough for every case (rounded up to 2 MiB): symmetric, send, recv. 0, or 1 (main returns
 * 1; the communicators are already destroyed when the symmetric allocation failed). */
static int alloc_bufs(cc_ctx_t *ctx, const caselist_t *cases, size_t max_msg, bufs_t *b)
{
    memset(b, 0, sizeof *b);
    for (size_t k = 0; k < cases->n; k++) {
        size_t need = case_bytes_needed(&cases->v[k], ctx->nranks);
        if (need > b->cap) b->cap = need;
    }
    b->cap = (b->cap + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    if (cc_is_root(ctx))
        cc_log(ctx, "%zu cases; workspace limit %zu bytes; buffers of %zu MiB (symmetric, send, recv)", cases->n,
               max_msg, b->cap >> 20);
    if (cc_alloc(ctx, b->cap, b->sym) != SYMMEM_OK) {
        cc_shm_abort(ctx->shm);
        cc_finish(ctx);
        return 1;
    }
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        if (cudaMalloc(&b->dev_send[i], b->cap) != cudaSuccess || cudaMalloc(&b->dev_recv[i], b->cap) != cudaSuccess) {
            cc_log(ctx, "FAIL: cudaMalloc(%zu)", b->cap);
            cc_shm_abort(ctx->shm);
            return 1;
        }
    }
    return 0;
}

/* Every case in order until one leaves the ranks out of step (*fatal), the results tallied in *st (after
 * MAX_PRINTED_FAILURES failures the cases run quiet). */
static void run_cases(cc_ctx_t *ctx, bufs_t *b, const caselist_t *cases, stats_t *st, int *fatal)
{
    memset(st, 0, sizeof *st);
    for (size_t k = 0; k < cases->n && !*fatal; k++) {
        const scase_t *c = &cases->v[k];
        int res = run_case(ctx, b, c, cc_mix64(0x5eedull ^ (k << 8)), st->fail >= MAX_PRINTED_FAILURES, fatal);
        st->per_algo[c->coll][c->algo][res]++;
        st->pass += res == R_PASS;
        st->fail += res == R_FAIL;
        st->unsupported += res == R_UNSUP;
    }
}

/* The root's table: passed, failed and unsupported cases per operation and algorithm. */
static void print_table(const cc_ctx_t *ctx, const stats_t *st)
{
    if (!cc_is_root(ctx)) return;
    cc_log(ctx, "%-15s %-15s %8s %8s %12s", "operation", "algorithm", "passed", "failed", "unsupported");
    for (int c = 0; c < OP_COUNT; c++)
        for (int a = 0; a < SYMMEM_ALGO_COUNT; a++)
            if (cc_algo_known(a))
                cc_log(ctx, "%-15s %-15s %8llu %8llu %12llu", coll_names[c], symmem_algo_name((symmem_algo_t)a),
                       (unsigned long long)st->per_algo[c][a][R_PASS], (unsigned long long)st->per_algo[c][a][R_FAIL],
                       (unsigned long long)st->per_algo[c][a][R_UNSUP]);
}

int main(int argc, char **argv)
{
    cc_ctx_t ctx;
    int rc = 0;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    opts.timeout_ms = 15000; /* a hang fails the case within 15 s instead of the default 30 */
    if (!cc_start(&argc, argv, "coll_sweep", 2, 290, &opts, NULL, &ctx, &rc)) return rc;
    int quick = 0, lean = 0;
    symmem_algo_t only = SYMMEM_ALGO_COUNT; /* every algorithm */
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--quick")) quick = 1;
        if (!strcmp(argv[a], "--lean")) lean = 1;
        if (!strcmp(argv[a], "--algo") && (a + 1 >= argc || symmem_algo_from_name(argv[a + 1], &only) != SYMMEM_OK)) {
            cc_log(&ctx, "FAIL: --algo needs an algorithm name");
            cc_finish(&ctx);
            return 1;
        }
    }

    size_t max_msg = symmem_comm_max_message_bytes(ctx.r[0].comm);
    caselist_t cases = {0, 0, 0};
    plan_cases(&ctx, quick, lean, only, max_msg, &cases);
    bufs_t b;
    if (alloc_bufs(&ctx, &cases, max_msg, &b) != 0) return 1;

    stats_t st;
    int fatal = 0;
    run_cases(&ctx, &b, &cases, &st, &fatal);
    if (fatal) {
        cc_log(&ctx, "FAIL: stopped early: the communicator or the process channel is unusable");
        st.fail++;
    }
    print_table(&ctx, &st);
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        cudaFree(b.dev_send[i]);
        cudaFree(b.dev_recv[i]);
    }
    if (!fatal) {
        cc_barrier(&ctx); /* nobody frees its symmetric buffer while a peer may still read it */
        cc_free(&ctx, b.sym);
    }
    cc_finish(&ctx);
    free(cases.v);
    if (cc_is_root(&ctx))
        cc_log(&ctx,
               "checked every operation x dtype x op x algorithm against a float64 reference, placements, "
               "offsets, guards and cross-rank bitwise equality: %llu cases passed, %llu failed, %llu unsupported "
               "(tolerated)",
               (unsigned long long)st.pass, (unsigned long long)st.fail, (unsigned long long)st.unsupported);
    return st.fail ? 1 : 0;
}
