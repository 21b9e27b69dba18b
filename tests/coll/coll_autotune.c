/* coll_autotune: the autotune at init (SYMMEM_AUTOTUNE, collectives/autotune.h) on the GPU, as processes or
 * as threads of one process. The parent makes a fresh tuning file (SYMMEM_TUNE_FILE in a new temporary
 * folder) and sets SYMMEM_AUTOTUNE=auto for every rank (and, for ranks as threads, CUDA_DEVICE_MAX_CONNECTIONS=32
 * unless set: ranks that are threads on one GPU measure only where each can have a hardware queue). Asserted
 * on every rank:
 *  1. the harness's communicators measured their table at init (state "measured"), and every rank holds the
 *     same table (its hash, allgathered), with all-reduce rules (the first op measured);
 *  2. AUTO all-reduces, reduce-scatters and all-gathers at sizes on both sides of the tuned bounds complete
 *     with the float64 reference's results and no asynchronous error (every rank ran the same algorithm: a
 *     different one is a mismatch or a timeout);
 *  3. rank 0 saved the file: it holds the communicator's key;
 *  4. a second communicator over the same ranks (processes: a new unique id from rank 0 through the
 *     harness's channel; threads: symmem_comm_init_all again) loads that table instead of measuring (state
 *     "loaded"), the same on every rank and the same as the first's.
 * Usage: coll_autotune [--mp N | --inproc N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/autotune.h"
#include "collectives/tune.h"
#include "harness.h"
#include "test_util.h"

#define MAX_BYTES ((size_t)4 << 20)

static char tune_dir[64] = "";

/* The parent (or the only process): a fresh folder for the tuning file, before the library reads its
 * parameters; the children inherit the environment. */
static void fresh_tune_file(int inproc)
{
    if (cc_child_rank("SYMMEM_TEST") >= 0) return;
    snprintf(tune_dir, sizeof tune_dir, "/tmp/symmem-coll-autotune-XXXXXX");
    if (!mkdtemp(tune_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/tune.txt", tune_dir);
    setenv("SYMMEM_TUNE_FILE", path, 1);
    setenv("SYMMEM_AUTOTUNE", "auto", 1);
    /* ranks as threads on one GPU measure only with a hardware queue each (under MPS too); read at CUDA start.
     * Not for ranks as processes, which have queues of their own: under MPS the clients' connections are
     * the one server's, and four clients asking for 32 each failed their CUDA init where two did not. */
    if (inproc) setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
}

static void remove_tune_dir(void)
{
    if (!tune_dir[0]) return;
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tune_dir);
    if (system(cmd) != 0) fprintf(stderr, "coll_autotune: could not remove %s\n", tune_dir);
}

/* Every local rank's table hash and autotune state, allgathered; the same on every rank and `want`. */
static int agreed(cc_ctx_t *ctx, symmem_comm_t *comms, int want, uint64_t *hash_out)
{
    uint64_t mine[CC_MAX_RANKS] = {0}, all[CC_MAX_RANKS], st_mine[CC_MAX_RANKS] = {0}, st_all[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        const symmem_coll_tuning_t *t = symmem_coll_tuning(comms[i]);
        CC_CHECK(ctx, t != NULL);
        mine[i] = topo_table_hash(&t->table);
        st_mine[i] = (uint64_t)symmem_coll_autotune_state(comms[i]);
        /* all-reduce comes first in the plan: it has rules whatever the budget left for the other ops */
        CC_CHECK(ctx, topo_table_lookup_form(&t->table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1024) !=
                          SYMMEM_ALGO_AUTO);
    }
    CC_CHECK(ctx, cc_allgather_u64(ctx, mine, all) == 0);
    CC_CHECK(ctx, cc_allgather_u64(ctx, st_mine, st_all) == 0);
    for (int r = 0; r < ctx->nranks; r++) {
        CC_CHECK(ctx, all[r] == all[0]);
        if (st_all[r] != (uint64_t)want)
            cc_log(ctx, "rank %d: autotune state %s, expected %s", r,
                   symmem_autotune_state_name((symmem_autotune_state_t)st_all[r]),
                   symmem_autotune_state_name((symmem_autotune_state_t)want));
        CC_CHECK(ctx, st_all[r] == (uint64_t)want);
    }
    *hash_out = all[0];
    return 0;
}

/* AUTO at sizes from 1 KiB to 4 MiB (x4), every op, checked against the reference. */
static int auto_runs(cc_ctx_t *ctx)
{
    const int n = ctx->nranks;
    void *dsend[CC_MAX_RANKS], *drecv[CC_MAX_RANKS];
    const size_t buf = MAX_BYTES + 4096;
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        CC_CHECK_CUDA(ctx, cudaMalloc(&dsend[i], buf));
        CC_CHECK_CUDA(ctx, cudaMalloc(&drecv[i], buf));
    }
    unsigned char *h = malloc(buf), *o = malloc(buf);
    CC_CHECK(ctx, h && o);
    int failures = 0;
    for (size_t bytes = 1024; bytes <= MAX_BYTES && failures == 0; bytes *= 4)
        for (int k = SYMMEM_COLL_ALL_REDUCE; k <= SYMMEM_COLL_ALL_GATHER && failures == 0; k++) {
            const symmem_dtype_t dt = SYMMEM_BFLOAT16;
            const size_t es = symmem_dtype_size(dt);
            const size_t count = k == SYMMEM_COLL_ALL_REDUCE ? bytes / es : bytes / es / (size_t)n;
            const size_t in_elems = k == SYMMEM_COLL_REDUCE_SCATTER ? count * (size_t)n : count;
            const size_t out_elems = k == SYMMEM_COLL_ALL_GATHER ? count * (size_t)n : count;
            const uint64_t seed = 0xa7707000u + bytes + (uint64_t)k;
            for (int i = 0; i < ctx->nlocal; i++) {
                cc_rank_t *R = &ctx->r[i];
                cudaSetDevice(R->device);
                cc_fill(h, dt, in_elems, seed, R->rank, 0);
                CC_CHECK_CUDA(ctx, cudaMemcpyAsync(dsend[i], h, in_elems * es, cudaMemcpyHostToDevice, R->stream));
                CC_CHECK_CUDA(ctx, cudaStreamSynchronize(R->stream));
            }
            for (int i = 0; i < ctx->nlocal; i++) {
                cc_rank_t *R = &ctx->r[i];
                cudaSetDevice(R->device);
                symmem_status_t st =
                    k == SYMMEM_COLL_ALL_REDUCE
                        ? symmem_all_reduce(R->comm, dsend[i], drecv[i], count, dt, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, R->stream)
                    : k == SYMMEM_COLL_REDUCE_SCATTER
                        ? symmem_reduce_scatter(R->comm, dsend[i], drecv[i], count, dt, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO,
                                                R->stream)
                        : symmem_all_gather(R->comm, dsend[i], drecv[i], count, dt, SYMMEM_ALGO_AUTO, R->stream);
                CC_CHECK_OK(ctx, st);
            }
            CC_CHECK(ctx, cc_sync(ctx) == cudaSuccess && cc_async_error(ctx) == SYMMEM_OK);
            for (int i = 0; i < ctx->nlocal; i++) {
                cc_rank_t *R = &ctx->r[i];
                cudaSetDevice(R->device);
                CC_CHECK_CUDA(ctx, cudaMemcpy(o, drecv[i], out_elems * es, cudaMemcpyDeviceToHost));
                size_t wrong = 0;
                if (k == SYMMEM_COLL_ALL_REDUCE) wrong = cc_check_reduce(o, dt, SYMMEM_OP_SUM, count, 0, n, seed, NULL);
                else if (k == SYMMEM_COLL_REDUCE_SCATTER)
                    wrong = cc_check_reduce(o, dt, SYMMEM_OP_SUM, count, (uint64_t)R->rank * count, n, seed, NULL);
                else
                    wrong = cc_check_gather(o, dt, count, n, seed, NULL);
                CC_EXPECT(ctx, failures, wrong == 0, "%s of %zu bytes (AUTO: %s): %zu wrong elements",
                          symmem_coll_kind_name((symmem_coll_kind_t)k), bytes,
                          symmem_algo_name(symmem_coll_choose(symmem_coll_tuning(R->comm), (symmem_coll_kind_t)k,
                                                              SYMMEM_FORM_ORDINARY,
                                                              symmem_coll_message_bytes(n, (symmem_coll_kind_t)k,
                                                                                        count, dt))),
                          wrong);
            }
        }
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaFree(dsend[i]);
        cudaFree(drecv[i]);
    }
    free(h), free(o);
    return failures;
}

/* The saved file holds the key of the communicator (rank 0 wrote it before its init returned; the other
 * ranks read it after the allgathers above, which follow every rank's init). */
static int file_has_key(cc_ctx_t *ctx)
{
    const char *path = getenv("SYMMEM_TUNE_FILE");
    CC_CHECK(ctx, path != NULL);
    FILE *f = fopen(path, "r");
    CC_CHECK(ctx, f != NULL);
    char line[512], want[256];
    snprintf(want, sizeof want, "[%s]", symmem_coll_tuning(ctx->r[0].comm)->fingerprint);
    int found = 0;
    while (fgets(line, sizeof line, f)) found |= strncmp(line, want, strlen(want)) == 0;
    fclose(f);
    if (!found) cc_log(ctx, "FAIL: %s has no section %s", path, want);
    return !found;
}

/* A second communicator over the same ranks: it loads the saved table. */
static int second_init_loads(cc_ctx_t *ctx, uint64_t first_hash)
{
    symmem_comm_t comms[CC_MAX_RANKS] = {0};
    CC_CHECK_OK(ctx, cc_comm_init_again(ctx, comms));
    uint64_t h = 0;
    const int bad = agreed(ctx, comms, SYMMEM_AUTOTUNE_LOADED, &h);
    for (int i = 0; i < ctx->nlocal; i++) symmem_comm_destroy(comms[i]);
    CC_CHECK(ctx, bad == 0);
    CC_CHECK(ctx, h == first_hash);
    return 0;
}

int main(int argc, char **argv)
{
    int inproc = 0;
    for (int i = 1; i < argc; i++) inproc |= strcmp(argv[i], "--inproc") == 0;
    fresh_tune_file(inproc);
    cc_ctx_t ctx;
    int rc = 0;
    if (!cc_start(&argc, argv, "coll_autotune", 2, 600, NULL, NULL, &ctx, &rc)) {
        remove_tune_dir();
        return rc;
    }
    symmem_comm_t comms[CC_MAX_RANKS];
    for (int i = 0; i < ctx.nlocal; i++) comms[i] = ctx.r[i].comm;
    uint64_t hash = 0;
    int failures = agreed(&ctx, comms, SYMMEM_AUTOTUNE_MEASURED, &hash);
    if (failures == 0) failures += auto_runs(&ctx);
    if (failures == 0) failures += file_has_key(&ctx);
    if (failures == 0) failures += second_init_loads(&ctx, hash);
    const uint64_t total = cc_sum_u64(&ctx, (uint64_t)failures);
    if (cc_is_root(&ctx))
        cc_log(&ctx, "%s: table measured at init and agreed by every rank, AUTO correct at every size, saved, loaded "
                     "by a second init (%llu failures)",
               total ? "FAIL" : "ok", (unsigned long long)total);
    cc_finish(&ctx);
    if (!ctx.multiproc) remove_tune_dir();
    return total ? 1 : 0;
}
