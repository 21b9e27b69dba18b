/* coll_islands: ranks that split into islands differently. Two processes; rank 0 runs with
 * SYMMEM_ISLANDS=0,1 (two islands), rank 1 with the argument's list ("numa", the default: no SYMMEM_ISLANDS,
 * the NUMA split, one island for two ranks on one GPU or one socket; "0-1": one island, named; "0,1,x": a
 * list it refuses). The ranks would build different default tables and schedules; init agrees instead that
 * the island algorithm is unavailable everywhere. Asserted on both ranks:
 *  - init succeeds;
 *  - an all-reduce that names the island algorithm fails at the call with SYMMEM_UNSUPPORTED and a message
 *    that says the ranks do not agree on the islands (no kernel runs, so nothing waits for a timeout);
 *  - AUTO all-reduces, reduce-scatters and all-gathers from 1 KiB to 8 MiB then complete with the float64
 *    reference's results and no asynchronous error (both ranks ran the same algorithm: a different one would
 *    be a mismatch or a timeout, reported);
 *  - teardown is clean.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "test_util.h"

/* The split, before the library reads its parameters: rank 0's always, rank 1's from the argument. Returns
 * rank 1's list ("numa": none). */
static const char *set_split(int argc, char **argv)
{
    const int child = cc_child_rank("SYMMEM_TEST");
    const char *other = "numa";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mp") || !strcmp(argv[i], "--inproc")) i++; /* the mode, and its rank count */
        else if (strncmp(argv[i], "--", 2) != 0) other = argv[i];
    }
    if (child == 0) setenv("SYMMEM_ISLANDS", "0,1", 1);
    if (child == 1) {
        if (strcmp(other, "numa") == 0) unsetenv("SYMMEM_ISLANDS");
        else setenv("SYMMEM_ISLANDS", other, 1);
    }
    return other;
}

/* The island algorithm by name: refused at the call on both ranks, with the reason. */
static void island_refused(cc_ctx_t *ctx, const char *other, void *dsend, void *drecv, int *failures)
{
    cc_rank_t *R = &ctx->r[0];
    symmem_status_t st = symmem_all_reduce(R->comm, dsend, drecv, 1024, SYMMEM_FLOAT32, SYMMEM_OP_SUM,
                                           SYMMEM_ALGO_ISLAND, R->stream);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", symmem_last_error());
    cc_log(ctx, "rank 1 with \"%s\": island all-reduce: %s: \"%s\"", other, symmem_status_name(st), msg);
    CC_EXPECT(ctx, *failures, st == SYMMEM_UNSUPPORTED, "expected SYMMEM_UNSUPPORTED, got %s", symmem_status_name(st));
    CC_EXPECT(ctx, *failures, strstr(msg, "do not agree on the islands") != NULL,
              "the message does not say that the ranks disagree on the islands");
}

/* The host and device buffers of the AUTO calls (max_bytes each). */
typedef struct io {
    void *dsend, *drecv, *hsend, *hrecv;
    size_t max_bytes;
} io_t;

/* AUTO at every size: the same choice on both ranks; each call checked against the float64 reference.
 * Runs while *failures is 0 (a failure before it or in it stops it). *calls counts the calls made. 0, or 1
 * (main returns 1). */
static int auto_sizes(cc_ctx_t *ctx, const io_t *io, int *failures, int *calls)
{
    enum { AR, RS, AG };
    static const char *const kind_name[] = {"all_reduce", "reduce_scatter", "all_gather"};
    cc_rank_t *R = &ctx->r[0];
    const int n = 2;
    void *dsend = io->dsend, *drecv = io->drecv, *hsend = io->hsend, *hrecv = io->hrecv;
    for (size_t bytes = 1024; bytes <= io->max_bytes && *failures == 0; bytes *= 8)
        for (int k = 0; k < 3 && *failures == 0; k++) {
            const int kind = k;
            const symmem_dtype_t dt = k == 1 ? SYMMEM_BFLOAT16 : SYMMEM_FLOAT32;
            const size_t es = symmem_dtype_size(dt);
            /* count: all-reduce elements; reduce-scatter / all-gather: per-rank elements (odd on purpose) */
            const size_t count = kind == AR ? bytes / es - 3 : bytes / es / n - 1;
            const uint64_t seed = 0x15a9d000u + bytes + (uint64_t)k;
            const size_t in_elems = kind == RS ? count * n : count;
            const size_t out_elems = kind == AG ? count * n : count;
            cc_fill(hsend, dt, in_elems, seed, R->rank, 0);
            /* on the rank's stream: a cudaMemcpy from pageable memory may return before its DMA lands, and
             * the rank's non-blocking stream does not wait for the legacy stream's copy, so the collective
             * could read part of the previous size's input (seen: about 1 run in 8 under MPS) */
            CC_CHECK_CUDA(ctx, cudaMemcpyAsync(dsend, hsend, in_elems * es, cudaMemcpyHostToDevice, R->stream));
            symmem_status_t st;
            if (kind == AR)
                st = symmem_all_reduce(R->comm, dsend, drecv, count, dt, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, R->stream);
            else if (kind == RS)
                st = symmem_reduce_scatter(R->comm, dsend, drecv, count, dt, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO,
                                           R->stream);
            else st = symmem_all_gather(R->comm, dsend, drecv, count, dt, SYMMEM_ALGO_AUTO, R->stream);
            CC_EXPECT(ctx, *failures, st == SYMMEM_OK, "%s of %zu elements: %s (%s)", kind_name[kind], count,
                      symmem_status_name(st), symmem_last_error());
            const cudaError_t e = cudaStreamSynchronize(R->stream);
            CC_EXPECT(ctx, *failures, e == cudaSuccess, "stream: %s", cudaGetErrorString(e));
            const symmem_status_t ae = symmem_comm_get_async_error(R->comm);
            CC_EXPECT(ctx, *failures, ae == SYMMEM_OK, "%s of %zu elements: asynchronous error %s (%s)",
                      kind_name[kind], count, symmem_status_name(ae), symmem_last_error());
            CC_CHECK_CUDA(ctx, cudaMemcpy(hrecv, drecv, out_elems * es, cudaMemcpyDeviceToHost));
            cc_bad_t bad = {0};
            const size_t wrong =
                kind == AG
                    ? cc_check_gather(hrecv, dt, count, n, seed, &bad)
                    : cc_check_reduce(hrecv, dt, SYMMEM_OP_SUM, count,
                                      kind == RS ? (uint64_t)R->rank * count : 0, n, seed, &bad);
            CC_EXPECT(ctx, *failures, wrong == 0, "%s of %zu elements: %zu wrong, first at %zu: %g, float64 %g",
                      kind_name[kind], count, wrong, bad.first, bad.got, bad.want);
            (*calls)++;
        }
    return 0;
}

int main(int argc, char **argv)
{
    const char *other = set_split(argc, argv);
    static const char *const env[] = {"SYMMEM_TIMEOUT_MS=5000", NULL};
    cc_ctx_t ctx;
    int rc = 0;
    if (!cc_start(&argc, argv, "coll_islands", 2, 120, NULL, env, &ctx, &rc)) return rc;
    cc_rank_t *R = &ctx.r[0];
    const int n = 2;
    const size_t max_bytes = (size_t)8 << 20;
    if (ctx.nprocs != n) {
        cc_log(&ctx, "FAIL: coll_islands needs --mp 2 (ranks as processes, each with its own environment)");
        return 2;
    }
    symmem_buffer_t sym[1];
    if (cc_alloc(&ctx, 4096, sym) != SYMMEM_OK) {
        cc_shm_abort(ctx.shm);
        return 1;
    }
    void *dsend = NULL, *drecv = NULL, *hsend = malloc(max_bytes), *hrecv = malloc(max_bytes);
    int failures = 0;
    CC_EXPECT(&ctx, failures, hsend && hrecv, "out of host memory");
    CC_CHECK_CUDA(&ctx, cudaMalloc(&dsend, max_bytes));
    CC_CHECK_CUDA(&ctx, cudaMalloc(&drecv, max_bytes));
    if (cc_barrier(&ctx) != 0) return 1;

    island_refused(&ctx, other, dsend, drecv, &failures);
    const io_t io = {dsend, drecv, hsend, hrecv, max_bytes};
    int calls = 0;
    if (auto_sizes(&ctx, &io, &failures, &calls) != 0) return 1;

    uint64_t total = cc_sum_u64(&ctx, (uint64_t)failures);
    cudaFree(dsend);
    cudaFree(drecv);
    free(hsend);
    free(hrecv);
    total += (uint64_t)cc_teardown_rank(&ctx, R, sym[0]);
    if (R->rank == 0)
        cc_log(&ctx, "islands differ between ranks (rank 1: \"%s\"): island refused with the reason, %d AUTO calls "
                     "correct on both ranks, clean teardown: %s",
               other, calls, total ? "FAILED" : "ok");
    return total ? 1 : 0;
}
