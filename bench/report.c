/* symmem-bench's output: the header, the nccl-tests-style rows (symmem | NCCL | ratio) and the
 * best-vs-NCCL summary. Only the root process prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "collectives/tune.h"

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

void bench_print_columns(const bench_t *b)
{
    printf("#%11s %12s %9s %6s %17s | %10s %7s %7s %7s | %10s %7s %7s %7s | %6s%s\n", "size", "count", "type", "redop",
           "algo", "time", "algbw", "busbw", "#wrong", "nccl time", "algbw", "busbw", "#wrong", "ratio",
           b->o.model ? " |      model      floor" : "");
    printf("#%11s %12s %9s %6s %17s | %10s %7s %7s %7s | %10s %7s %7s %7s | %6s%s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "", b->o.model ? " |       (us)       (us)" : "");
}

/* What the run's memory is: the PCIe lab (host memory, every rank on one GPU) said plainly, what it is and
 * what it is not (docs/collectives.md, "The PCIe lab"). */
static void print_memory_header(const bench_t *b)
{
    int host = 0, per_link = 1, autotune = 0;
    double rw = 0.0, bar = 0.0;
    if (!bench_model_facts(b, &host, &per_link, &autotune, &rw, &bar)) return;
    const int n = b->ctx.nranks;
    static const char *const states[] = {"not run", "loaded from the tuning file (no measurement)",
                                         "measured at init and saved", "skipped (see the INFO log)"};
    if (host && per_link >= n)
        printf("# PCIe lab: every rank's symmetric memory (its buffers and the collective workspace: flags, Lamport "
               "slots, data halves) is pinned host memory on the GPU's NUMA node, so every access to it, a rank's "
               "own included, crosses the GPU's one PCIe link, which all %d ranks share (a PCIe box gives each GPU "
               "its own link; here the link carries n times one GPU's traffic). The far end is host DRAM, not a "
               "peer GPU's BAR: no posted writes into another GPU's memory, no far-end L2, a poll is a read round "
               "trip to DRAM. Device-local only: the kernels' call state, peer tables and error record\n",
               n);
    else if (host)
        printf("# host memory: every rank's symmetric memory is pinned host memory on its GPU's NUMA node; every "
               "access crosses its GPU's link (%d rank(s) per GPU)\n",
               per_link);
    else if (per_link >= n)
        printf("# one GPU, device memory: every rank's peers are on the same GPU (HBM and L2, no link between "
               "them); %d ranks share its SMs\n",
               n);
    if (autotune >= 0 && autotune < 4) printf("# autotune at init: %s\n", states[autotune]);
    if (rw > 0.0 || bar > 0.0)
        printf("# init probe: loads and stores at once %.1f GB/s, a barrier kernel %.2f us (slowest rank)\n", rw, bar);
    if (b->o.model)
        printf("# model, floor: the cost model's prediction for the row on this communicator's machine and its floor "
               "(links and trips only) (topology/cost.h; figures of the init probe where it ran, else defaults)\n");
}

/* The --tune lines of the header. */
static void print_tune_header(const bench_t *b, const char *fingerprint, const char *env_algo)
{
    const opts_t *o = &b->o;
    printf("# --tune: every algorithm per size; winner = lowest time (slowest rank) with #wrong 0, decided by "
           "rank 0 and broadcast%s\n",
           o->algo_given ? "; --algo ignored" : "");
    printf("# --tune: table of %s -> %s (section [%s]; other ops and sections kept)\n",
           symmem_coll_kind_name(o->coll->kind), bench_tune_path(o), fingerprint);
    if (!o->check) printf("# --tune with -c 0: results are not checked, so a wrong algorithm can win\n");
    if (env_algo && env_algo[0] && strcasecmp(env_algo, "auto") != 0)
        printf("# --tune: SYMMEM_ALGO overrides the table: the auto rows after tuning run %s, not the table\n",
               env_algo);
}

void bench_print_header(const bench_t *b)
{
    const cc_ctx_t *ctx = &b->ctx;
    const opts_t *o = &b->o;
    const int n = ctx->nranks;
    const char *env_algo = getenv("SYMMEM_ALGO");
    printf("# symmem-bench %d.%d.%d: %s, %d ranks (%s) on %d GPU(s), %s %s\n", SYMMEM_VERSION_MAJOR,
           SYMMEM_VERSION_MINOR, SYMMEM_VERSION_PATCH, symmem_coll_kind_name(o->coll->kind), n,
           o->inprocess ? "threads of one process" : "one process each", ctx->ngpus, symmem_dtype_name(o->dt),
           o->coll->reduces ? symmem_redop_name(o->op) : "");
    static const char *const across[] = {"rank 0", "mean of ranks", "fastest rank", "slowest rank"};
    printf("# timing: %s, %d ops per %s, median of %d, %s; warm-up %d;%s check %s; symmem buffers: %s\n",
           o->graph ? "CUDA-graph replays" : o->blocking ? "eager launches, each waited for" : "eager launches",
           o->iters, o->graph ? "graph" : "batch", o->replays, across[o->average], o->warmup,
           o->align ? " ranks aligned by an untimed replay;" : "", o->check ? "on" : "off",
           o->zero_copy ? "symmetric (zero copy)" : "cudaMalloc (copy-in)");
    printf("# NCCL baseline: %s%s\n", b->have_nccl ? "on (cudaMalloc buffers, same timing)" : "off",
           !o->coll->sized && b->have_nccl ? "; NCCL has no barrier: a 1-element all-reduce stands in" : "");
    const char *fingerprint;
    char deftab[4096];
    double probe_rd = 0, probe_wr = 0;
    const int have_probe = bench_table_facts(b, &fingerprint, deftab, sizeof deftab, &probe_rd, &probe_wr);
    printf("# algorithm table: topology [%s], %s%s%s%s\n", fingerprint,
           deftab[0] ? "table file (its section for this topology, if any) " : "built-in table", deftab,
           env_algo && env_algo[0] ? ", SYMMEM_ALGO=" : "", env_algo && env_algo[0] ? env_algo : "");
    double probe_ce = 0;
    if (have_probe && symmem_coll_probe_ce_figure(b->ctx.r[0].comm, &probe_ce))
        printf("# init probe: peer read %.1f GB/s, peer write %.1f GB/s, copy-engine write %.1f GB/s (all ranks at "
               "once, min over ranks)\n",
               probe_rd, probe_wr, probe_ce);
    print_memory_header(b);
    if (o->tune) print_tune_header(b, fingerprint, env_algo);
    if (o->inprocess && ctx->ngpus < n) printf("# ranks share GPUs: times are not meaningful, check the #wrong column\n");
    bench_print_columns(b);
}

void bench_print_row(const bench_t *b, const geom_t *g, const char *label, const result_t *sr, const result_t *nr,
                     double busf, double model_us, double floor_us)
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
    char model[48] = "";
    if (o->model) {
        char m[16] = "-", f[16] = "-";
        if (model_us >= 0) snprintf(m, sizeof m, "%.2f", model_us);
        if (floor_us >= 0) snprintf(f, sizeof f, "%.2f", floor_us);
        snprintf(model, sizeof model, " | %10s %10s", m, f);
    }
    printf(" %11zu %12zu %9s %6s %17s | %s | %s | %s%s\n", g->bytes, g->total, symmem_dtype_name(o->dt),
           o->coll->reduces ? symmem_redop_name(o->op) : "none", label, s1, s2, ratio, model);
    fflush(stdout);
}

/* The cost model's least floor over every algorithm at this size (links and trips only). */
static double least_floor(const bench_t *b, const geom_t *g)
{
    double least = -1.0;
    for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++) {
        if (!symmem_algo_listed(a)) continue;
        const double f = bench_model_us(b, g, a, 1);
        if (f > 0 && (least < 0 || f < least)) least = f;
    }
    return least;
}

void bench_print_best(const bench_t *b, const size_rec_t *recs, int nrec)
{
    const int model = b->o.model;
    printf("#\n# best symmem algorithm per size vs NCCL (ratio = symmem time / NCCL time; < 1: symmem faster)%s\n",
           model ? "; floor: the cost model's least floor over the algorithms (links and trips), best/floor" : "");
    printf("#%11s %17s %10s %10s %7s%s\n", "size", "best algo", "time(us)", "nccl(us)", "ratio",
           model ? "   floor(us) best/floor" : "");
    double geo = 0;
    int ngeo = 0;
    for (int k = 0; k < nrec; k++) {
        const size_rec_t *x = &recs[k];
        const double nccl_us = x->nccl.ok ? x->nccl.us : 0;
        /* "-" where there is no figure (NCCL baseline off or failed, no symmem algorithm ran), never 0.00 */
        char r[16] = "-", t[16] = "-", n[16] = "-", fl[48] = "";
        if (x->best >= 0) snprintf(t, sizeof t, "%.2f", x->best_us);
        if (nccl_us > 0) snprintf(n, sizeof n, "%.2f", nccl_us);
        if (x->best >= 0 && nccl_us > 0) {
            snprintf(r, sizeof r, "%.2f", x->best_us / nccl_us);
            geo += log(x->best_us / nccl_us);
            ngeo++;
        }
        if (model) {
            const double f = least_floor(b, &x->g);
            if (f > 0 && x->best >= 0) snprintf(fl, sizeof fl, " %11.2f %10.2f", f, x->best_us / f);
            else if (f > 0) snprintf(fl, sizeof fl, " %11.2f %10s", f, "-");
        }
        printf(" %11zu %17s %10s %10s %7s%s\n", x->g.bytes, x->best >= 0 ? x->best_label : "-", t, n, r, fl);
    }
    if (ngeo) printf("# geometric mean ratio: %.3f over %d sizes\n", exp(geo / ngeo), ngeo);
}

static void size_words(size_t b, char *out, size_t len)
{
    if (b >= ((size_t)1 << 20) && b % ((size_t)1 << 20) == 0) snprintf(out, len, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(out, len, "%zu KiB", b >> 10);
    else snprintf(out, len, "%zu B", b);
}

void bench_print_model_summary(const bench_t *b, const size_rec_t *recs, int nrec)
{
    int host = 0, per_link = 1, autotune = 0;
    double rw, bar;
    bench_model_facts(b, &host, &per_link, &autotune, &rw, &bar);
    const char *where = host && per_link >= b->ctx.nranks ? "lab (host_numa, one GPU)"
                        : host                          ? "host_numa"
                        : per_link >= b->ctx.nranks     ? "device, one GPU"
                                                        : "device";
    printf("#\n# summary (markdown): auto after the init's autotune against the best forced algorithm of this run; the\n"
           "# cost model's table alone (what auto runs without autotune: that algorithm's time in this run); the\n"
           "# model's prediction for the best algorithm and its least floor over the algorithms\n");
    printf("# | ranks | memory | size | auto (choice) us | best forced us | auto/best | model table (choice) us | "
           "model/best | model us (best) | floor us | best/floor |\n");
    int pass = 1, compared = 0;
    double worst = 0.0;
    size_t worst_at = 0;
    for (int k = 0; k < nrec; k++) {
        const size_rec_t *x = &recs[k];
        int best = -1;
        for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++) {
            const result_t *r = &x->res[a];
            if (r->ok && r->wrong == 0 && (best < 0 || r->us < x->res[best].us)) best = a;
        }
        const result_t *au = &x->res[SYMMEM_ALGO_AUTO];
        const int auto_ok = au->ok && au->wrong == 0;
        char sz[32], at[64] = "-", bt[64] = "-", ratio[16] = "-", pred[16] = "-", fl[16] = "-", bf[16] = "-";
        char mt[64] = "-", mr[16] = "-";
        const int mc = bench_model_choice(b, &x->g);
        if (mc > SYMMEM_ALGO_AUTO && mc < SYMMEM_ALGO_COUNT && x->res[mc].ok && x->res[mc].wrong == 0) {
            snprintf(mt, sizeof mt, "%.2f (%s)", x->res[mc].us, symmem_algo_name((symmem_algo_t)mc));
            if (best >= 0) snprintf(mr, sizeof mr, "%.2f", x->res[mc].us / x->res[best].us);
        }
        size_words(x->g.bytes, sz, sizeof sz);
        if (auto_ok)
            snprintf(at, sizeof at, "%.2f (%s)", au->us,
                     symmem_algo_name((symmem_algo_t)bench_auto_choice(b, &x->g)));
        if (best >= 0) {
            snprintf(bt, sizeof bt, "%.2f (%s)", x->res[best].us, symmem_algo_name((symmem_algo_t)best));
            const double p = bench_model_us(b, &x->g, best, 0);
            if (p > 0) snprintf(pred, sizeof pred, "%.2f", p);
        }
        const double f = least_floor(b, &x->g);
        if (f > 0) snprintf(fl, sizeof fl, "%.2f", f);
        if (f > 0 && best >= 0) snprintf(bf, sizeof bf, "%.2f", x->res[best].us / f);
        if (auto_ok && best >= 0) {
            const double q = au->us / x->res[best].us;
            snprintf(ratio, sizeof ratio, "%.2f", q);
            compared++;
            if (q > worst) worst = q, worst_at = x->g.bytes;
            if (q > 1.10) pass = 0;
        } else {
            pass = 0; /* a size without both figures cannot pass */
        }
        printf("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", b->ctx.nranks, where, sz, at, bt, ratio, mt,
               mr, pred, fl, bf);
    }
    char wsz[32] = "-";
    if (compared) size_words(worst_at, wsz, sizeof wsz);
    printf("# AUTO <= 1.10x best: %s (%d ranks, %s: %d sizes compared, worst %.2f at %s)\n", pass ? "PASS" : "FAIL",
           b->ctx.nranks, where, compared, worst, wsz);
}
