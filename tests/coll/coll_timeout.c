/* coll_timeout: a rank that never calls the operation. SYMMEM_TIMEOUT_MS=2000 (in the children's environment,
 * or set here before the in-process communicators exist); rank R (--missing R, default 1) sets everything up
 * and then skips the all-reduce. Every other rank asserts that
 *  - its stream completes (the kernel gives up after the timeout instead of hanging or trapping), not
 *    before ~1 s and within 30 s;
 *  - symmem_comm_get_async_error reports SYMMEM_TIMEOUT and the message names the missing rank ("rank R");
 *  - the next collective call on the communicator fails (the error is sticky);
 *  - the CUDA context is still usable (a memset and a synchronize succeed);
 *  - symmem_free and symmem_comm_destroy succeed (teardown is clean).
 * The missing rank waits for the others' verdict on the test's own channel, then tears down too.
 * Ranks as processes (--mp N) or as threads of one process (--inproc N), any N >= 2.
 * Optional argument: the algorithm of the all-reduce (default auto, which is Lamport one-shot at this size):
 * the flag waits and the Lamport polls time out through different loops. With more than two ranks, the
 * algorithms whose ranks wait for every peer's data themselves (all but staged and island) must name the
 * missing rank on every rank; staged and island pass data along (a permutation, island owners), so a rank
 * may wait for a peer that gave up waiting for the missing one: there every rank must name some rank and at
 * least one must name the missing one.
 * Usage: coll_timeout [--mp N | --inproc N] [--missing R] [ALGO]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "test_util.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Whether msg names rank r: "rank r" not followed by another digit ("rank 1" is not in "rank 12"). */
static int names_rank(const char *msg, int r)
{
    char want[32];
    const int len = snprintf(want, sizeof want, "rank %d", r);
    for (const char *p = strstr(msg, want); p; p = strstr(p + 1, want))
        if (p[len] < '0' || p[len] > '9') return 1;
    return 0;
}

/* Whether msg names any rank other than `self` as the one it waited for. */
static int names_some_peer(const char *msg, int self, int nranks)
{
    for (int r = 0; r < nranks; r++)
        if (r != self && names_rank(msg, r)) return 1;
    return 0;
}

typedef struct verdict {
    int failures;
    int named_missing; /* the error names the missing rank */
} verdict_t;

/* A present rank after its all-reduce was enqueued at t0: the checks of the header. */
static verdict_t check_present(cc_ctx_t *ctx, cc_rank_t *R, void *d, size_t count, int missing, int direct, double t0)
{
    verdict_t v = {0, 0};
    cudaSetDevice(R->device);
    cudaError_t e = cudaStreamSynchronize(R->stream);
    const double dt = now_s() - t0;
    cc_log(ctx, "rank %d: stream completed after %.2f s: %s", R->rank, dt, cudaGetErrorString(e));
    CC_EXPECT(ctx, v.failures, e == cudaSuccess, "rank %d: the kernel must exit, not trap (%s)", R->rank,
              cudaGetErrorString(e));
    CC_EXPECT(ctx, v.failures, dt >= 1.0 && dt <= 30.0, "rank %d: completion after %.2f s with a 2 s timeout", R->rank,
              dt);
    char msg[1024];
    symmem_status_t ae = cc_wait_async_error(R, msg, sizeof msg);
    cc_log(ctx, "rank %d: symmem_comm_get_async_error: %s: \"%s\"", R->rank, symmem_status_name(ae), msg);
    CC_EXPECT(ctx, v.failures, ae == SYMMEM_TIMEOUT, "rank %d: expected SYMMEM_TIMEOUT", R->rank);
    symmem_status_t st = symmem_all_reduce(R->comm, d, d, count, SYMMEM_FLOAT32, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, R->stream);
    char msg2[1024];
    snprintf(msg2, sizeof msg2, "%s", symmem_last_error());
    if (ctx->nranks == 2 || R->rank == 0 || st == SYMMEM_OK)
        cc_log(ctx, "rank %d: next symmem_all_reduce: %s: \"%s\"", R->rank, symmem_status_name(st), msg2);
    if (st == SYMMEM_OK) {
        cc_log(ctx, "FAIL: rank %d: a call on a communicator in its error state succeeded", R->rank);
        v.failures++;
        cudaStreamSynchronize(R->stream);
    }
    v.named_missing = names_rank(msg, missing) || names_rank(msg2, missing);
    if (direct)
        CC_EXPECT(ctx, v.failures, v.named_missing, "rank %d: neither message names the missing rank (\"rank %d\")",
                  R->rank, missing);
    else
        CC_EXPECT(ctx, v.failures, names_some_peer(msg, R->rank, ctx->nranks),
                  "rank %d: the message names no rank it waited for", R->rank);
    e = cudaMemset(d, 0, count * 4); /* legacy stream: checks the whole context, not one stream */
    if (e == cudaSuccess) e = cudaStreamSynchronize(R->stream);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    CC_EXPECT(ctx, v.failures, e == cudaSuccess, "rank %d: the CUDA context is unusable after the timeout: %s", R->rank,
              cudaGetErrorString(e));
    return v;
}

int main(int argc, char **argv)
{
    static const char *const env[] = {"SYMMEM_TIMEOUT_MS=2000", NULL};
    /* In-process ranks read it at init, in this process: set before cc_start makes them (children get env). */
    if (getenv("SYMMEM_TIMEOUT_MS") == NULL) setenv("SYMMEM_TIMEOUT_MS", "2000", 1);
    cc_ctx_t ctx;
    int rc = 0;
    if (!cc_start(&argc, argv, "coll_timeout", 2, 120, NULL, env, &ctx, &rc)) return rc;
    symmem_algo_t algo = SYMMEM_ALGO_AUTO;
    int missing = 1;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--missing") && a + 1 < argc) {
            missing = atoi(argv[++a]);
        } else if (symmem_algo_from_name(argv[a], &algo) != SYMMEM_OK) {
            cc_log(&ctx, "FAIL: unknown argument or algorithm %s", argv[a]);
            return 1;
        }
    }
    if (ctx.nranks < 2 || missing < 0 || missing >= ctx.nranks) {
        cc_log(&ctx, "FAIL: --missing %d with %d ranks (need 2 or more ranks and a rank among them)", missing,
               ctx.nranks);
        return 1;
    }
    const int direct = ctx.nranks == 2 || (algo != SYMMEM_ALGO_STAGED && algo != SYMMEM_ALGO_ISLAND);
    const size_t count = 4096;
    symmem_buffer_t sym[CC_MAX_RANKS];
    void *d[CC_MAX_RANKS] = {0};
    if (cc_alloc(&ctx, count * 4, sym) != SYMMEM_OK) {
        cc_shm_abort(ctx.shm);
        return 1;
    }
    for (int i = 0; i < ctx.nlocal; i++) {
        CC_CHECK_CUDA(&ctx, cudaSetDevice(ctx.r[i].device));
        CC_CHECK_CUDA(&ctx, cudaMalloc(&d[i], count * 4));
        CC_CHECK_CUDA(&ctx, cc_rank_memset(&ctx.r[i], d[i], 0x3c, count * 4)); /* 0x3c3c3c3c: finite, nonzero */
    }
    if (cc_barrier(&ctx) != 0) return 1;
    int failures = 0, named = 0;
    /* Every present rank's call first (threads of one process: one thread enqueues rank after rank), then the
     * checks, each from the same start. */
    const double t0 = now_s();
    for (int i = 0; i < ctx.nlocal; i++) {
        cc_rank_t *R = &ctx.r[i];
        if (R->rank == missing) continue;
        cudaSetDevice(R->device);
        symmem_status_t st = symmem_all_reduce(R->comm, d[i], d[i], count, SYMMEM_FLOAT32, SYMMEM_OP_SUM, algo, R->stream);
        CC_EXPECT(&ctx, failures, st == SYMMEM_OK, "rank %d: the call itself returned %s (%s); expected it to enqueue",
                  R->rank, symmem_status_name(st), symmem_last_error());
    }
    if (cc_is_root(&ctx))
        cc_log(&ctx, "all-reduce of %zu floats with %s on %d ranks, rank %d absent", count, symmem_algo_name(algo),
               ctx.nranks, missing);
    for (int i = 0; i < ctx.nlocal; i++) {
        if (ctx.r[i].rank == missing) continue;
        const verdict_t v = check_present(&ctx, &ctx.r[i], d[i], count, missing, direct, t0);
        failures += v.failures;
        named += v.named_missing;
    }
    /* The missing rank's communicator saw nothing wrong. */
    for (int i = 0; i < ctx.nlocal; i++)
        if (ctx.r[i].rank == missing)
            CC_EXPECT(&ctx, failures, symmem_comm_get_async_error(ctx.r[i].comm) == SYMMEM_OK,
                      "rank %d (the missing one) is in an error state", missing);
    /* Every rank's verdict (the missing one's too), then all tear down. */
    uint64_t total = cc_sum_u64(&ctx, (uint64_t)failures);
    const uint64_t named_total = cc_sum_u64(&ctx, (uint64_t)named);
    if (named_total == 0) {
        if (cc_is_root(&ctx)) cc_log(&ctx, "FAIL: no rank's error names the missing rank %d", missing);
        total++;
    }
    for (int i = 0; i < ctx.nlocal; i++) {
        cudaSetDevice(ctx.r[i].device);
        cudaFree(d[i]);
        total += (uint64_t)cc_teardown_rank(&ctx, &ctx.r[i], sym[i]);
    }
    if (cc_is_root(&ctx))
        cc_log(&ctx, "checked a missing rank among %d: timeout reported by the %d others, %llu of them naming rank %d, "
               "sticky error, clean teardown: %s", ctx.nranks, ctx.nranks - 1, (unsigned long long)named_total, missing,
               total ? "FAILED" : "ok");
    return total ? 1 : 0;
}
