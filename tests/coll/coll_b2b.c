/* coll_b2b: hundreds of operations back to back on one stream with no host synchronisation in between
 * (the case that breaks flag reuse: a fast rank starts operation j+1 while a slow one is still in j).
 * Before each operation one rank (j % nranks) is held back by a spin kernel for 1..21 us. The sequence
 * mixes all-reduce (copy-in, and zero-copy in place on one symmetric buffer that a kernel rewrites every
 * time), reduce-scatter, all-gather and barrier, cycling algorithms, dtypes, ops and sizes. The barrier
 * is checked for what it promises: each rank writes a word into its symmetric buffer just before it,
 * every rank reads every peer's word just after it and must see the new value. All results are checked
 * once, after the last operation; all-reduce and all-gather outputs must be bitwise equal across ranks.
 * Usage: coll_b2b [--mp N | --inproc N] [--ops K]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

enum { K_AR = 0, K_AR_ZC, K_RS, K_AG, K_BARRIER, K_KINDS };
static const char *const kind_names[K_KINDS] = {"all_reduce copy-in", "all_reduce zero-copy in place",
                                                "reduce_scatter", "all_gather", "barrier"};

typedef struct op {
    int kind;
    symmem_algo_t algo;
    symmem_dtype_t dt;
    symmem_redop_t op;
    size_t count;
    size_t in_off, out_off; /* byte offsets in the per-rank input and output arenas */
    size_t in_bytes, out_bytes;
    int delayed;
    uint64_t spin_ns, seed;
} op_t;

static const size_t sizes_mp[] = {1, 7, 1000, 4099, 16411, 65537};
static const size_t sizes_inproc[] = {1, 7, 1000, 4099, 16411};

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

static uint64_t barrier_word(int j, int rank) { return (uint64_t)(j + 1) * 1000u + (uint64_t)rank; }

/* The whole run's state: the plan, the symmetric buffers, the per-rank input and output arenas. */
typedef struct b2b {
    int K;
    op_t *ops;
    size_t in_total, out_total, zc_max;
    symmem_buffer_t zc[CC_MAX_RANKS], flags[CC_MAX_RANKS];
    unsigned char *din[CC_MAX_RANKS], *dout[CC_MAX_RANKS];
    unsigned char *hin, *hout;
} b2b_t;

/* The plan: the same on every rank. */
static void plan(const cc_ctx_t *ctx, b2b_t *b)
{
    const int n = ctx->nranks, K = b->K;
    const size_t *sizes = ctx->multiproc ? sizes_mp : sizes_inproc;
    const size_t nsizes =
        ctx->multiproc ? sizeof sizes_mp / sizeof *sizes_mp : sizeof sizes_inproc / sizeof *sizes_inproc;
    op_t *ops = calloc((size_t)K, sizeof *ops);
    size_t in_total = 0, out_total = 0, zc_max = 0;
    for (int j = 0; j < K; j++) {
        op_t *o = &ops[j];
        o->kind = j % K_KINDS;
        o->algo = (symmem_algo_t)((j / K_KINDS) % SYMMEM_ALGO_COUNT);
        if (!cc_algo_known(o->algo)) o->algo = SYMMEM_ALGO_AUTO;
        o->dt = (symmem_dtype_t)((j / 3) % SYMMEM_DTYPE_COUNT);
        o->op = (symmem_redop_t)((j / 2) % SYMMEM_REDOP_COUNT);
        o->count = sizes[(size_t)(j * 7 / 5) % nsizes];
        o->delayed = j % n;
        o->spin_ns = 1000 + cc_mix64((uint64_t)j) % 20000;
        o->seed = cc_mix64(0xb2bull + (uint64_t)j);
        size_t es = symmem_dtype_size(o->dt);
        switch (o->kind) {
        case K_AR: o->in_bytes = o->count * es; o->out_bytes = o->count * es; break;
        case K_AR_ZC: o->in_bytes = 0; o->out_bytes = o->count * es; break;
        case K_RS: o->in_bytes = o->count * es * (size_t)n; o->out_bytes = o->count * es; break;
        case K_AG: o->in_bytes = o->count * es; o->out_bytes = o->count * es * (size_t)n; break;
        default: o->in_bytes = 0; o->out_bytes = sizeof(uint64_t) * (size_t)n; break;
        }
        if (o->kind == K_AR_ZC && o->out_bytes > zc_max) zc_max = o->out_bytes;
        o->in_off = in_total;
        o->out_off = out_total;
        in_total += align256(o->in_bytes);
        out_total += align256(o->out_bytes);
    }
    b->ops = ops;
    b->in_total = in_total;
    b->out_total = out_total;
    b->zc_max = zc_max;
}

/* Symmetric buffers, arenas with every rank's inputs, NaN-filled outputs, zeroed barrier words; then the
 * processes' barrier. 0, or 1 (main returns 1). */
static int allocate(cc_ctx_t *ctx, b2b_t *b)
{
    const int K = b->K;
    const op_t *ops = b->ops;
    const size_t in_total = b->in_total, out_total = b->out_total, zc_max = b->zc_max;
    symmem_buffer_t *zc = b->zc, *flags = b->flags;
    unsigned char **din = b->din, **dout = b->dout;
    if (cc_alloc(ctx, zc_max ? zc_max : 256, zc) != SYMMEM_OK ||
        cc_alloc(ctx, sizeof(uint64_t) * (size_t)K, flags) != SYMMEM_OK) {
        cc_shm_abort(ctx->shm);
        return 1;
    }
    unsigned char *hin = malloc(in_total + 1), *hout = malloc(out_total + 1);
    b->hin = hin;
    b->hout = hout;
    if (!hin || !hout) return 1;
    for (int i = 0; i < ctx->nlocal; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        for (int j = 0; j < K; j++)
            if (ops[j].in_bytes) cc_fill(hin + ops[j].in_off, ops[j].dt, ops[j].in_bytes / symmem_dtype_size(ops[j].dt), ops[j].seed, R->rank, 0);
        CC_CHECK_CUDA(ctx, cudaMalloc((void **)&din[i], in_total + 1));
        CC_CHECK_CUDA(ctx, cudaMalloc((void **)&dout[i], out_total + 1));
        CC_CHECK_CUDA(ctx, cc_rank_upload(R, din[i], hin, in_total));
        CC_CHECK_CUDA(ctx, cc_rank_memset(R, dout[i], 0xFF, out_total));
        CC_CHECK_CUDA(ctx, cc_rank_memset(R, symmem_buffer_ptr(flags[i]), 0, sizeof(uint64_t) * (size_t)K));
    }
    if (cc_barrier(ctx) != 0) return 1;
    return 0;
}

/* Enqueue operation j on local rank i (after the spin when it is the delayed rank). 0, or 1 after logging. */
static int enqueue_op(cc_ctx_t *ctx, const b2b_t *b, int j, int i)
{
    const int n = ctx->nranks;
    const op_t *o = &b->ops[j];
    cc_rank_t *R = &ctx->r[i];
    cudaSetDevice(R->device);
    cudaStream_t s = R->stream;
    void *in = b->din[i] + o->in_off, *out = b->dout[i] + o->out_off, *z = symmem_buffer_ptr(b->zc[i]);
    cudaError_t e = R->rank == o->delayed ? cc_dev_spin(o->spin_ns, NULL, 1, 0, s) : cudaSuccess;
    symmem_status_t st = SYMMEM_OK;
    if (e != cudaSuccess) {
    } else if (o->kind == K_AR) {
        st = symmem_all_reduce(R->comm, in, out, o->count, o->dt, o->op, o->algo, s);
    } else if (o->kind == K_AR_ZC) {
        e = cc_dev_fill(z, o->dt, o->count, o->seed, NULL, R->rank, 0, s);
        if (e == cudaSuccess) st = symmem_all_reduce(R->comm, z, z, o->count, o->dt, o->op, o->algo, s);
        if (e == cudaSuccess && st == SYMMEM_OK) e = cudaMemcpyAsync(out, z, o->out_bytes, cudaMemcpyDeviceToDevice, s);
    } else if (o->kind == K_RS) {
        st = symmem_reduce_scatter(R->comm, in, out, o->count, o->dt, o->op, o->algo, s);
        if (st == SYMMEM_UNSUPPORTED && o->algo != SYMMEM_ALGO_AUTO)
            st = symmem_reduce_scatter(R->comm, in, out, o->count, o->dt, o->op, SYMMEM_ALGO_AUTO, s);
    } else if (o->kind == K_AG) {
        st = symmem_all_gather(R->comm, in, out, o->count, o->dt, o->algo, s);
        if (st == SYMMEM_UNSUPPORTED && o->algo != SYMMEM_ALGO_AUTO)
            st = symmem_all_gather(R->comm, in, out, o->count, o->dt, SYMMEM_ALGO_AUTO, s);
    } else {
        const symmem_buffer_t flags = b->flags[i];
        void *peers[CC_MAX_RANKS];
        for (int p = 0; p < n; p++)
            peers[p] = p == R->rank ? symmem_buffer_ptr(flags) : symmem_buffer_peer_ptr(flags, p);
        e = cc_dev_write_u64(symmem_buffer_ptr(flags), (size_t)j, barrier_word(j, R->rank), s);
        if (e == cudaSuccess) st = symmem_barrier(R->comm, s);
        if (e == cudaSuccess && st == SYMMEM_OK) e = cc_dev_read_peers(out, peers, n, (size_t)j, s);
    }
    if (e != cudaSuccess || st != SYMMEM_OK) {
        cc_log(ctx, "FAIL: op %d (%s %s %s): rank %d: %s%s%s", j, kind_names[o->kind], symmem_algo_name(o->algo),
               symmem_dtype_name(o->dt), R->rank, e != cudaSuccess ? cudaGetErrorString(e) : symmem_status_name(st),
               st != SYMMEM_OK ? ": " : "", st != SYMMEM_OK ? symmem_last_error() : "");
        return 1;
    }
    return 0;
}

/* Wrong elements of operation j's output `out` on `rank`; the first one in *bad. */
static size_t check_op(const op_t *o, int j, int n, int rank, const unsigned char *out, cc_bad_t *bad)
{
    size_t wrong = 0;
    if (o->kind == K_AR || o->kind == K_AR_ZC)
        wrong = cc_check_reduce(out, o->dt, o->op, o->count, 0, n, o->seed, bad);
    else if (o->kind == K_RS)
        wrong = cc_check_reduce(out, o->dt, o->op, o->count, (uint64_t)rank * o->count, n, o->seed, bad);
    else if (o->kind == K_AG)
        wrong = cc_check_gather(out, o->dt, o->count, n, o->seed, bad);
    else
        for (int p = 0; p < n; p++) {
            uint64_t w;
            memcpy(&w, out + 8 * (size_t)p, 8);
            if (w != barrier_word(j, p)) {
                if (!wrong) {
                    bad->first = (size_t)p;
                    bad->got = (double)w;
                    bad->want = (double)barrier_word(j, p);
                }
                wrong++;
            }
        }
    return wrong;
}

/* Check every result (the reference on the first local rank; every rank for reduce-scatter and barrier)
 * and hash the all-reduce and all-gather outputs into h_local[i]; wrong_ops counts failed operations per
 * kind. Nothing is checked after an enqueue failure (`fail`). 0, or 1 (main returns 1). */
static int verify(cc_ctx_t *ctx, const b2b_t *b, int fail, size_t *wrong_ops, uint64_t *h_local)
{
    const int n = ctx->nranks, K = b->K;
    const size_t out_total = b->out_total;
    unsigned char *hout = b->hout;
    unsigned char *const *dout = b->dout;
    for (int i = 0; i < ctx->nlocal && !fail; i++) {
        cc_rank_t *R = &ctx->r[i];
        cudaSetDevice(R->device);
        CC_CHECK_CUDA(ctx, cudaMemcpy(hout, dout[i], out_total, cudaMemcpyDeviceToHost));
        uint64_t h = 0;
        for (int j = 0; j < K; j++) {
            const op_t *o = &b->ops[j];
            const unsigned char *out = hout + o->out_off;
            cc_bad_t bad = {0, 0, 0, 0};
            size_t wrong = 0;
            int full = i == 0 || o->kind == K_RS || o->kind == K_BARRIER;
            if (o->kind != K_RS && o->kind != K_BARRIER) h = cc_mix64(h ^ cc_hash(out, o->out_bytes));
            if (!full) continue;
            wrong = check_op(o, j, n, R->rank, out, &bad);
            if (wrong) {
                if (wrong_ops[o->kind] < 3)
                    cc_log(ctx,
                           "FAIL: op %d (%s %s %s %s count=%zu): rank %d: %zu wrong (first at %zu: got %.9g want %.9g)",
                           j, kind_names[o->kind], symmem_algo_name(o->algo), symmem_dtype_name(o->dt),
                           symmem_redop_name(o->op), o->count, R->rank, wrong, bad.first, bad.got, bad.want);
                wrong_ops[o->kind]++;
            }
        }
        h_local[i] = h;
    }
    return 0;
}

/* The failures of every process: wrong operations, an enqueue failure, outputs that differ bitwise across
 * ranks. 0, or 1 when the processes' channel failed (main returns 1). */
static int count_failures(cc_ctx_t *ctx, const size_t *wrong_ops, int fail, const uint64_t *h_local, uint64_t *failed)
{
    const int n = ctx->nranks;
    uint64_t h_all[CC_MAX_RANKS];
    size_t wrong_all = 0;
    for (int k = 0; k < K_KINDS; k++) wrong_all += wrong_ops[k];
    if (cc_allgather_u64(ctx, h_local, h_all) != 0) return 1;
    int bitwise_bad = 0;
    for (int r = 1; r < n; r++) bitwise_bad += h_all[r] != h_all[0];
    if (bitwise_bad && cc_is_root(ctx)) cc_log(ctx, "FAIL: all-reduce/all-gather outputs differ bitwise across ranks");
    *failed = cc_sum_u64(ctx, (uint64_t)(wrong_all + (size_t)fail + (size_t)bitwise_bad));
    return 0;
}

/* Free everything, the communicators included (cc_finish). */
static void release(cc_ctx_t *ctx, b2b_t *b)
{
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaFree(b->din[i]);
        cudaFree(b->dout[i]);
    }
    cc_barrier(ctx);
    cc_free(ctx, b->zc);
    cc_free(ctx, b->flags);
    cc_finish(ctx);
    free(b->hin);
    free(b->hout);
    free(b->ops);
}

int main(int argc, char **argv)
{
    cc_ctx_t ctx;
    int rc = 0;
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    opts.timeout_ms = 15000;
    if (!cc_start(&argc, argv, "coll_b2b", 2, 290, &opts, NULL, &ctx, &rc)) return rc;
    b2b_t b;
    memset(&b, 0, sizeof b);
    b.K = ctx.multiproc ? 400 : 200;
    for (int a = 1; a + 1 < argc; a++)
        if (!strcmp(argv[a], "--ops")) b.K = atoi(argv[a + 1]);
    const int K = b.K;
    plan(&ctx, &b);
    if (allocate(&ctx, &b) != 0) return 1;

    /* Enqueue everything, rank after rank, with no host synchronisation. */
    int fail = 0;
    for (int j = 0; j < K && !fail; j++)
        for (int i = 0; i < ctx.nlocal; i++)
            if (enqueue_op(&ctx, &b, j, i) != 0) {
                fail = 1;
                break;
            }
    if (fail) cc_shm_abort(ctx.shm);
    if (cc_sync(&ctx) != cudaSuccess || cc_async_error(&ctx) != SYMMEM_OK) {
        cc_log(&ctx, "FAIL: the sequence did not complete");
        cc_shm_abort(ctx.shm);
        return 1;
    }

    size_t wrong_ops[K_KINDS] = {0};
    uint64_t h_local[CC_MAX_RANKS], failed = 0;
    if (verify(&ctx, &b, fail, wrong_ops, h_local) != 0) return 1;
    if (count_failures(&ctx, wrong_ops, fail, h_local, &failed) != 0) return 1;
    release(&ctx, &b);
    if (cc_is_root(&ctx))
        cc_log(&ctx, "checked %d back-to-back operations on one stream, no host sync, one rank delayed each time "
               "(all-reduce copy-in and zero-copy, reduce-scatter, all-gather, barrier visibility): %s",
               K, failed ? "FAILED" : "all correct");
    return failed ? 1 : 0;
}
