/* coll_mismatch: ranks that break the zero-copy-out rule (every rank passes its receive buffer at the same
 * offset of the same symmetric buffer). Two processes, one symmetric buffer of four regions per rank:
 * region 0 is the send buffer on both ranks, rank 0 receives into region 1 and rank 1 into region 2, and
 * region 3 stays untouched as a control. Two-shot all-reduces store results straight into every rank's
 * receive buffer at the offset the storing rank was given, so without the check rank 0 would write into
 * rank 1's region 1 and rank 1 into rank 0's region 2. Asserted on both ranks:
 *  - the call enqueues, the stream completes without a CUDA error (the kernel exits, no trap);
 *  - symmem_comm_get_async_error reports SYMMEM_INVALID_USAGE with the "different arguments" message;
 *  - no result landed anywhere: the regions a rank does not receive into still hold what this test put
 *    there, and its own receive buffer holds NaN in each of its `count` elements (the defined output of a
 *    call that failed before storing: every block stops at the check and stores NaN over its share;
 *    docs/collectives.md, "After an error"), the bytes past them untouched;
 *  - the error is sticky (the next call fails) and teardown is clean.
 * Argument: the algorithm (twoshot_push, default, or twoshot_pull, which with both buffers symmetric reads
 * the peers' inputs in place and writes their outputs, or staged).
 * The Lamport algorithms (oneshot_push, twoshot_lamport) use no receive buffer of the peers; for them both
 * ranks receive into region 1 and rank 1 passes one element fewer: the same grid and round size, another
 * tag. Their payload carries no tag, so what catches it is the round header every block exchanges before
 * reading payload; the same assertions hold (nothing stored, both ranks report).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

#define REGION ((size_t)1 << 20) /* bytes per region: a multi-block kernel */

int main(int argc, char **argv)
{
    static const char *const env[] = {"SYMMEM_TIMEOUT_MS=5000", NULL};
    cc_ctx_t ctx;
    int rc = 0;
    if (!cc_start(&argc, argv, "coll_mismatch", 2, 120, NULL, env, &ctx, &rc)) return rc;
    symmem_algo_t algo;
    if (!cc_pair_algo(&ctx, argc, argv, SYMMEM_ALGO_TWOSHOT_PUSH, &algo)) return 1;
    const int lamport = algo == SYMMEM_ALGO_ONESHOT_PUSH || algo == SYMMEM_ALGO_TWOSHOT_LAMPORT;
    cc_rank_t *R = &ctx.r[0];
    const size_t count = REGION / 4 - (lamport ? (size_t)R->rank : 0);
    symmem_buffer_t sym[1];
    if (cc_alloc(&ctx, 4 * REGION, sym) != SYMMEM_OK) {
        cc_shm_abort(ctx.shm);
        return 1;
    }
    unsigned char *base = symmem_buffer_ptr(sym[0]);
    /* region 0: finite nonzero input; regions 1-3: a per-rank, per-region byte that no all-reduce of the
     * input could produce in every byte */
    CC_CHECK_CUDA(&ctx, cc_rank_memset(R, base, 0x3c, REGION));
    for (int k = 1; k < 4; k++) CC_CHECK_CUDA(&ctx, cc_rank_memset(R, base + k * REGION, 0xa0 + 16 * R->rank + k, REGION));
    if (cc_barrier(&ctx) != 0) return 1;

    int failures = 0;
    unsigned char *recv = base + (size_t)(1 + (lamport ? 0 : R->rank)) * REGION;
    symmem_status_t st = symmem_all_reduce(R->comm, base, recv, count, SYMMEM_FLOAT32, SYMMEM_OP_SUM, algo, R->stream);
    CC_EXPECT(&ctx, failures, st == SYMMEM_OK, "the call itself returned %s (%s); expected it to enqueue",
              symmem_status_name(st), symmem_last_error());
    cudaError_t e = cudaStreamSynchronize(R->stream);
    CC_EXPECT(&ctx, failures, e == cudaSuccess, "the kernel must exit, not trap (%s)", cudaGetErrorString(e));
    char msg[1024];
    symmem_status_t ae = cc_wait_async_error(R, msg, sizeof msg);
    cc_log(&ctx, "%s: symmem_comm_get_async_error: %s: \"%s\"", symmem_algo_name(algo), symmem_status_name(ae), msg);
    CC_EXPECT(&ctx, failures, ae == SYMMEM_INVALID_USAGE && strstr(msg, "different arguments"),
              "expected SYMMEM_INVALID_USAGE naming different arguments");
    /* Nothing landed: every region this rank does not send from or receive into still holds its fill byte;
     * its own receive buffer is NaN over the call's elements (no result was stored), the fill after them. */
    unsigned char *h = malloc(REGION);
    CC_EXPECT(&ctx, failures, h, "out of host memory for the region check");
    for (int k = 1; k < 4 && h; k++) {
        CC_CHECK_CUDA(&ctx, cudaMemcpy(h, base + k * REGION, REGION, cudaMemcpyDeviceToHost));
        const unsigned char want = (unsigned char)(0xa0 + 16 * R->rank + k);
        const size_t nan_bytes = base + k * REGION == recv ? count * 4 : 0;
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < nan_bytes; i += 4) {
            float f;
            memcpy(&f, h + i, 4);
            if (f == f && bad++ == 0) first = i;
        }
        for (size_t i = nan_bytes; i < REGION; i++)
            if (h[i] != want && bad++ == 0) first = i;
        CC_EXPECT(&ctx, failures, !bad, "region %d%s: %zu wrong (first at byte %zu: %02x; want %s)", k,
                  nan_bytes ? " (this rank's receive buffer)" : "", bad, first, h[first],
                  first < nan_bytes ? "NaN" : "the fill byte");
    }
    free(h);
    st = symmem_all_reduce(R->comm, base, recv, count, SYMMEM_FLOAT32, SYMMEM_OP_SUM, algo, R->stream);
    if (st == SYMMEM_OK) {
        cc_log(&ctx, "FAIL: a call on a communicator in its error state succeeded");
        failures++;
        cudaStreamSynchronize(R->stream);
    }
    uint64_t total = cc_sum_u64(&ctx, (uint64_t)failures);
    total += (uint64_t)cc_teardown_rank(&ctx, R, sym[0]);
    if (cc_is_root(&ctx))
        cc_log(&ctx, "%s with %s: reported on both ranks, no result written (NaN in each rank's own output): %s",
               symmem_algo_name(algo),
               lamport ? "counts that differ by one element" : "receive buffers at different offsets",
               total ? "FAILED" : "ok");
    return total ? 1 : 0;
}
