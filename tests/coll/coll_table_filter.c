/* coll_table_filter: a tuning file's rule that names an algorithm that cannot run here is dropped at init,
 * so that no AUTO call reaches it. Every rank runs with SYMMEM_ISLANDS=0-2 (a well-formed list of ranks that
 * do not fit a 2-rank communicator, which the island split refuses: the island algorithm is unavailable on
 * every rank, the same availability filter that drops the copy engine
 * where the init probe found its peer copies failing) and SYMMEM_AUTOTUNE=off; the parent makes a fresh
 * SYMMEM_TUNE_FILE in a new temporary folder. Once the harness's communicators are up, rank 0 writes their
 * key's section: all-reduces up to 64 KiB by the island algorithm, the rest by twoshot_push. A second
 * communicator over the same ranks loads that file; asserted on every rank:
 *  1. its table has no island rule and keeps the twoshot_push one, which now serves every size, the same
 *     table on every rank (hash, allgathered);
 *  2. AUTO all-reduces of 4 KiB and 1 MiB complete with the reference's results.
 * Usage: coll_table_filter [--mp N | --inproc N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "collectives/tune.h"
#include "harness.h"
#include "test_util.h"

static char tune_dir[64] = "";

/* The parent (or the only process), before the library reads its parameters; the children inherit them. */
static void settings(void)
{
    if (cc_child_rank("SYMMEM_TEST") >= 0) return;
    snprintf(tune_dir, sizeof tune_dir, "/tmp/symmem-coll-table-filter-XXXXXX");
    if (!mkdtemp(tune_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    char path[128];
    snprintf(path, sizeof path, "%s/tune.txt", tune_dir);
    setenv("SYMMEM_TUNE_FILE", path, 1);
    setenv("SYMMEM_AUTOTUNE", "off", 1);
    setenv("SYMMEM_ISLANDS", "0-2", 1); /* the parameter's syntax holds; the split refuses it at 2 ranks */
}

static void remove_tune_dir(void)
{
    if (!tune_dir[0]) return;
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tune_dir);
    if (system(cmd) != 0) fprintf(stderr, "coll_table_filter: could not remove %s\n", tune_dir);
}

/* Rank 0's process writes the section of the communicators' key; every process waits for it. */
static int write_table(cc_ctx_t *ctx)
{
    if (cc_is_root(ctx)) {
        const char *path = getenv("SYMMEM_TUNE_FILE");
        CC_CHECK(ctx, path != NULL);
        FILE *f = fopen(path, "w");
        CC_CHECK(ctx, f != NULL);
        fprintf(f, "[%s]\nall_reduce 65536 island\nall_reduce inf twoshot_push\n",
                symmem_coll_tuning(ctx->r[0].comm)->fingerprint);
        CC_CHECK(ctx, fclose(f) == 0 && chmod(path, 0644) == 0);
    }
    CC_CHECK(ctx, cc_barrier(ctx) == 0);
    return 0;
}

/* AUTO all-reduces on the second communicators, checked against the reference. */
static int auto_runs(cc_ctx_t *ctx, symmem_comm_t *comms)
{
    const symmem_dtype_t dt = SYMMEM_BFLOAT16;
    const size_t es = symmem_dtype_size(dt), max_bytes = (size_t)1 << 20;
    void *dsend[CC_MAX_RANKS], *drecv[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        CC_CHECK_CUDA(ctx, cudaMalloc(&dsend[i], max_bytes));
        CC_CHECK_CUDA(ctx, cudaMalloc(&drecv[i], max_bytes));
    }
    unsigned char *h = malloc(max_bytes);
    CC_CHECK(ctx, h != NULL);
    int failures = 0;
    static const size_t sizes[] = {4096, (size_t)1 << 20};
    for (int s = 0; s < 2 && failures == 0; s++) {
        const size_t count = sizes[s] / es;
        const uint64_t seed = 0xf117e000u + sizes[s];
        for (int i = 0; i < ctx->nlocal; i++) {
            cc_rank_t *R = &ctx->r[i];
            cudaSetDevice(R->device);
            cc_fill(h, dt, count, seed, R->rank, 0);
            CC_CHECK_CUDA(ctx, cc_rank_upload(R, dsend[i], h, count * es));
        }
        for (int i = 0; i < ctx->nlocal; i++) {
            cc_rank_t *R = &ctx->r[i];
            cudaSetDevice(R->device);
            CC_CHECK_OK(ctx, symmem_all_reduce(comms[i], dsend[i], drecv[i], count, dt, SYMMEM_OP_SUM,
                                               SYMMEM_ALGO_AUTO, R->stream));
        }
        CC_CHECK(ctx, cc_sync(ctx) == cudaSuccess);
        for (int i = 0; i < ctx->nlocal; i++) {
            cudaSetDevice(ctx->r[i].device);
            CC_CHECK_OK(ctx, symmem_comm_get_async_error(comms[i]));
            CC_CHECK_CUDA(ctx, cudaMemcpy(h, drecv[i], count * es, cudaMemcpyDeviceToHost));
            const size_t wrong = cc_check_reduce(h, dt, SYMMEM_OP_SUM, count, 0, ctx->nranks, seed, NULL);
            CC_EXPECT(ctx, failures, wrong == 0, "all_reduce of %zu bytes (AUTO: %s): %zu wrong elements", sizes[s],
                      symmem_algo_name(symmem_coll_choose(symmem_coll_tuning(comms[i]), SYMMEM_COLL_ALL_REDUCE,
                                                          SYMMEM_FORM_ORDINARY, sizes[s])),
                      wrong);
        }
    }
    for (int i = 0; i < ctx->nlocal; i++) {
        cudaSetDevice(ctx->r[i].device);
        cudaFree(dsend[i]);
        cudaFree(drecv[i]);
    }
    free(h);
    return failures;
}

/* A second communicator over the same ranks loads the file: the island rule is gone, the other kept. */
static int second_init_filters(cc_ctx_t *ctx)
{
    symmem_comm_t comms[CC_MAX_RANKS] = {0};
    CC_CHECK_OK(ctx, cc_comm_init_again(ctx, comms));
    int failures = 0;
    uint64_t mine[CC_MAX_RANKS] = {0}, all[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        const symmem_coll_tuning_t *t = symmem_coll_tuning(comms[i]);
        CC_CHECK(ctx, t != NULL);
        int island = 0;
        for (int k = 0; k < t->table.nrules; k++) island += t->table.rules[k].algo == SYMMEM_ALGO_ISLAND;
        CC_EXPECT(ctx, failures, island == 0, "the loaded table kept %d island rule(s)", island);
        CC_EXPECT(ctx, failures,
                  topo_table_lookup(&t->table, SYMMEM_COLL_ALL_REDUCE, 1024) == SYMMEM_ALGO_TWOSHOT_PUSH &&
                      topo_table_lookup(&t->table, SYMMEM_COLL_ALL_REDUCE, (size_t)1 << 30) == SYMMEM_ALGO_TWOSHOT_PUSH,
                  "the twoshot_push rule does not serve every all-reduce size (%d rules)", t->table.nrules);
        mine[i] = topo_table_hash(&t->table);
    }
    CC_CHECK(ctx, cc_allgather_u64(ctx, mine, all) == 0);
    for (int r = 0; r < ctx->nranks; r++) CC_EXPECT(ctx, failures, all[r] == all[0], "rank %d holds another table", r);
    if (failures == 0) failures += auto_runs(ctx, comms);
    for (int i = 0; i < ctx->nlocal; i++) symmem_comm_destroy(comms[i]);
    return failures;
}

int main(int argc, char **argv)
{
    settings();
    cc_ctx_t ctx;
    int rc = 0;
    if (!cc_start(&argc, argv, "coll_table_filter", 2, 300, NULL, NULL, &ctx, &rc)) {
        remove_tune_dir();
        return rc;
    }
    int failures = write_table(&ctx);
    if (failures == 0) failures += second_init_filters(&ctx);
    const uint64_t total = cc_sum_u64(&ctx, (uint64_t)failures);
    if (cc_is_root(&ctx))
        cc_log(&ctx, "%s: a loaded island rule dropped at init where the island algorithm is unavailable, the same "
                     "table on every rank, AUTO correct (%llu failures)",
               total ? "FAIL" : "ok", (unsigned long long)total);
    cc_finish(&ctx);
    if (!ctx.multiproc) remove_tune_dir();
    return total ? 1 : 0;
}
