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
 * warmed up (-w eager operations plus one replay), then replayed -G times; each replay is timed with CUDA
 * events on each rank's stream, after a host barrier and one untimed replay that aligns the ranks (eager:
 * one untimed operation); per-op time = elapsed / n; a rank's time is the
 * median over replays; the reported time is the largest over ranks (-a: rank 0's, the mean or the smallest).
 * -G 0 times eager launches the same way (-z 1: each operation waited for before the next).
 * The options are nccl-tests' where symmem has a meaning for them (options.c; --help).
 * Check (-c 1): fresh random data per rank and size (never zeros), float64 host reference, #wrong = wrong
 * elements summed over ranks plus the number of ranks whose output differs bitwise from rank 0's
 * (all-reduce, all-gather). The exit status is 1 if any #wrong is nonzero.
 *
 * auto: the algorithm column shows what SYMMEM_ALGO_AUTO resolved to ("auto:twoshot_pull"); --tune [FILE]
 * builds the table from measurements (both in tuner.c).
 *
 * Files (bench.h): this driver (the size loop, the summaries, main); options.c; one descriptor per collective,
 * coll_<name>.c, listed in bench_colls below; measure.c (check and timing); setup.c (ranks, buffers, NCCL);
 * report.c (output); tuner.c (the algorithm table, --tune).
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

const bench_coll_t *const bench_colls[SYMMEM_COLL_KIND_COUNT] = {
    [SYMMEM_COLL_ALL_REDUCE] = &bench_all_reduce,
    [SYMMEM_COLL_REDUCE_SCATTER] = &bench_reduce_scatter,
    [SYMMEM_COLL_ALL_GATHER] = &bench_all_gather,
    [SYMMEM_COLL_BARRIER] = &bench_barrier,
};

static int run(bench_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    const int n = ctx->nranks, root = cc_is_root(ctx);
    const double busf = (double)(o->coll->bus_passes * (n - 1)) / n;
    static size_rec_t recs[BENCH_MAX_SIZES]; /* static: no allocation that could fail on one rank only */
    size_rec_t scratch;
    int nrec = 0, rc = 0;
    uint64_t wrong_total = 0;
    if (root) bench_print_header(b);
    if (o->tune && bench_tune_begin(b) != 0) return 1;
    size_t last = (size_t)-1;
    BENCH_FOR_SIZES(o, s)
    {
        geom_t g;
        if (bench_geometry(b, (size_t)s, &g) != 0 || g.bytes == last) continue;
        last = g.bytes;
        size_rec_t *x = nrec < BENCH_MAX_SIZES ? &recs[nrec] : &scratch; /* --tune never overflows (bench_parse_args) */
        memset(x, 0, sizeof *x);
        x->g = g;
        x->key = bench_table_key(b, &g);
        x->best = x->winner = -1;
        x->before = bench_auto_choice(b, &g);
        uint64_t seed = cc_mix64(0xbe4c8ull ^ g.bytes);
        if (b->have_nccl) x->nccl = bench_measure(b, &g, SYMMEM_ALGO_AUTO, 1, seed);
        wrong_total += x->nccl.wrong;
        for (int a = 0; a < o->nalgos; a++) {
            char label[32];
            bench_algo_label(b, &g, o->algos[a], label, sizeof label);
            result_t sr = bench_measure(b, &g, o->algos[a], 0, cc_mix64(seed + (uint64_t)a + 1));
            x->res[o->algos[a]] = sr;
            wrong_total += sr.wrong;
            if (sr.ok && sr.wrong == 0 && (x->best < 0 || sr.us < x->best_us)) {
                x->best = o->algos[a];
                x->best_us = sr.us;
                snprintf(x->best_label, sizeof x->best_label, "%s", label);
            }
            if (root)
                bench_print_row(b, &g, label, &sr, &x->nccl, busf, o->model ? bench_model_us(b, &g, o->algos[a], 0) : -1.0,
                                o->model ? bench_model_us(b, &g, o->algos[a], 1) : -1.0);
        }
        if (nrec < BENCH_MAX_SIZES) nrec++;
        if (!o->coll->sized) break;
    }
    if (o->tune) {
        if (bench_tune_finish(b, recs, nrec, busf, &wrong_total) != 0) rc = 1;
    } else if (root) {
        bench_print_best(b, recs, nrec);
        if (o->model) bench_print_model_summary(b, recs, nrec);
    }
    if (root)
        printf("# out of bounds values: %llu %s\n", (unsigned long long)wrong_total, wrong_total ? "FAILED" : "OK");
    return rc || wrong_total ? 1 : 0;
}

/* Every -d and -o asked for (nccl-tests' "all"), -N times (0: until interrupted). */
static int run_all(bench_t *b)
{
    int rc = 0;
    for (int cycle = 0; b->o.cycles == 0 || cycle < b->o.cycles; cycle++)
        for (int d = 0; d < b->o.ndts; d++)
            for (int p = 0; p < (b->o.coll->reduces ? b->o.nops : 1); p++) {
                b->o.dt = b->o.dts[d];
                b->o.op = b->o.ops[p];
                if (run(b) != 0) rc = 1;
            }
    return rc;
}

int main(int argc, char **argv)
{
    bench_t b;
    memset(&b, 0, sizeof b);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const int parsed = bench_parse_args(argc, argv, &b.o);
    if (parsed != 0) return parsed > 0 ? 0 : 2;
    if (b.o.dry_run) {
        bench_print_plan(&b.o);
        return 0;
    }
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
        cargv[k++] = "--nranks";
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
        fprintf(stderr, "symmem-bench: --nranks %d out of range\n", b.o.nranks);
        return 2;
    }
    int rc = bench_setup(&b, child < 0 ? 0 : child);
    if (rc != 0) {
        cc_shm_abort(b.ctx.shm);
        return rc;
    }
    rc = run_all(&b);
    bench_teardown(&b);
    return rc;
}
