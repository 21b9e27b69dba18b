/* coll_timeout: a rank that never calls the operation. Two processes (SYMMEM_TIMEOUT_MS=2000 in their
 * environment); rank 1 sets everything up and then skips the all-reduce. Rank 0 asserts that
 *  - its stream completes (the kernel gives up after the timeout instead of hanging or trapping), not
 *    before ~1 s and within 30 s;
 *  - symmem_comm_get_async_error reports SYMMEM_TIMEOUT and the message names the missing rank ("rank 1");
 *  - the next collective call on the communicator fails (the error is sticky);
 *  - the CUDA context is still usable (a memset and a synchronize succeed);
 *  - symmem_free and symmem_comm_destroy succeed (teardown is clean).
 * Rank 1 waits for rank 0's verdict on the test's own channel, then tears down too.
 * Optional argument: the algorithm of the all-reduce (default auto, which is Lamport one-shot at this size):
 * the flag waits and the Lamport polls time out through different loops.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv)
{
    static const char *const env[] = {"SYMMEM_TIMEOUT_MS=2000", NULL};
    cc_ctx_t ctx;
    int rc = 0;
    if (!cc_start(&argc, argv, "coll_timeout", 2, 120, NULL, env, &ctx, &rc)) return rc;
    symmem_algo_t algo;
    if (!cc_pair_algo(&ctx, argc, argv, SYMMEM_ALGO_AUTO, &algo)) return 1;
    cc_rank_t *R = &ctx.r[0];
    const size_t count = 4096;
    symmem_buffer_t sym[1];
    void *d = NULL;
    if (cc_alloc(&ctx, count * 4, sym) != SYMMEM_OK) {
        cc_shm_abort(ctx.shm);
        return 1;
    }
    CC_CUDA_OK(&ctx, cudaMalloc(&d, count * 4));
    CC_CUDA_OK(&ctx, cc_rank_memset(R, d, 0x3c, count * 4)); /* 0x3c3c3c3c: finite, nonzero */
    if (cc_barrier(&ctx) != 0) return 1;
    int failures = 0;
    if (R->rank == 0) {
        double t0 = now_s();
        symmem_status_t st = symmem_all_reduce(R->comm, d, d, count, SYMMEM_FLOAT32, SYMMEM_OP_SUM, algo, R->stream);
        cc_log(&ctx, "all-reduce of %zu floats with %s, rank 1 absent", count, symmem_algo_name(algo));
        CC_EXPECT(&ctx, failures, st == SYMMEM_OK, "the call itself returned %s (%s); expected it to enqueue",
                  symmem_status_name(st), symmem_last_error());
        cudaError_t e = cudaStreamSynchronize(R->stream);
        double dt = now_s() - t0;
        cc_log(&ctx, "stream completed after %.2f s: %s", dt, cudaGetErrorString(e));
        CC_EXPECT(&ctx, failures, e == cudaSuccess, "the kernel must exit, not trap (%s)", cudaGetErrorString(e));
        CC_EXPECT(&ctx, failures, dt >= 1.0 && dt <= 30.0, "completion after %.2f s with a 2 s timeout", dt);
        char msg[1024];
        symmem_status_t ae = cc_wait_async_error(R, msg, sizeof msg);
        cc_log(&ctx, "symmem_comm_get_async_error: %s: \"%s\"", symmem_status_name(ae), msg);
        CC_EXPECT(&ctx, failures, ae == SYMMEM_TIMEOUT, "expected SYMMEM_TIMEOUT");
        st = symmem_all_reduce(R->comm, d, d, count, SYMMEM_FLOAT32, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, R->stream);
        char msg2[1024];
        snprintf(msg2, sizeof msg2, "%s", symmem_last_error());
        cc_log(&ctx, "next symmem_all_reduce: %s: \"%s\"", symmem_status_name(st), msg2);
        if (st == SYMMEM_OK) {
            cc_log(&ctx, "FAIL: a call on a communicator in its error state succeeded");
            failures++;
            cudaStreamSynchronize(R->stream);
        }
        CC_EXPECT(&ctx, failures, strstr(msg, "rank 1") || strstr(msg2, "rank 1"),
                  "neither message names the missing rank (\"rank 1\")");
        e = cudaMemset(d, 0, count * 4); /* legacy stream: checks the whole context, not one stream */
        if (e == cudaSuccess) e = cudaDeviceSynchronize();
        CC_EXPECT(&ctx, failures, e == cudaSuccess, "the CUDA context is unusable after the timeout: %s",
                  cudaGetErrorString(e));
    }
    /* Rank 0's verdict, then both tear down. */
    uint64_t total = cc_sum_u64(&ctx, (uint64_t)failures);
    cudaFree(d);
    total += (uint64_t)cc_teardown_rank(&ctx, R, sym[0]);
    if (R->rank == 0)
        cc_log(&ctx, "checked a missing rank: timeout reported with the rank named, sticky error, clean teardown: %s",
               total ? "FAILED" : "ok");
    return total ? 1 : 0;
}
