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

void bench_print_columns(void)
{
    printf("#%11s %12s %9s %6s %17s | %10s %7s %7s %7s | %10s %7s %7s %7s | %6s\n", "size", "count", "type", "redop",
           "algo", "time", "algbw", "busbw", "#wrong", "nccl time", "algbw", "busbw", "#wrong", "ratio");
    printf("#%11s %12s %9s %6s %17s | %10s %7s %7s %7s | %10s %7s %7s %7s | %6s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "");
}

/* The --tune lines of the header. */
static void print_tune_header(const bench_t *b, const char *fingerprint, const char *env_algo)
{
    const opts_t *o = &b->o;
    printf("# --tune: every algorithm per size; winner = lowest time (slowest rank) with #wrong 0, decided by "
           "rank 0 and broadcast%s\n",
           o->algo_given ? "; -a ignored" : "");
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
    printf("# timing: %s, %d ops per %s, median of %d, slowest rank; warm-up %d;%s check %s; symmem buffers: %s\n",
           o->graph ? "CUDA-graph replays" : "eager launches", o->iters, o->graph ? "graph" : "batch", o->replays,
           o->warmup, o->align ? " ranks aligned by an untimed replay;" : "", o->check ? "on" : "off",
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
    if (o->tune) print_tune_header(b, fingerprint, env_algo);
    if (o->inprocess && ctx->ngpus < n) printf("# ranks share GPUs: times are not meaningful, check the #wrong column\n");
    bench_print_columns();
}

void bench_print_row(const bench_t *b, const geom_t *g, const char *label, const result_t *sr, const result_t *nr,
                     double busf)
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
    printf(" %11zu %12zu %9s %6s %17s | %s | %s | %s\n", g->bytes, g->total, symmem_dtype_name(o->dt),
           o->coll->reduces ? symmem_redop_name(o->op) : "none", label, s1, s2, ratio);
    fflush(stdout);
}

void bench_print_best(const size_rec_t *recs, int nrec)
{
    printf("#\n# best symmem algorithm per size vs NCCL (ratio = symmem time / NCCL time; < 1: symmem faster)\n");
    printf("#%11s %17s %10s %10s %7s\n", "size", "best algo", "time(us)", "nccl(us)", "ratio");
    double geo = 0;
    int ngeo = 0;
    for (int k = 0; k < nrec; k++) {
        const size_rec_t *x = &recs[k];
        const double nccl_us = x->nccl.ok ? x->nccl.us : 0;
        /* "-" where there is no figure (NCCL baseline off or failed, no symmem algorithm ran), never 0.00 */
        char r[16] = "-", t[16] = "-", n[16] = "-";
        if (x->best >= 0) snprintf(t, sizeof t, "%.2f", x->best_us);
        if (nccl_us > 0) snprintf(n, sizeof n, "%.2f", nccl_us);
        if (x->best >= 0 && nccl_us > 0) {
            snprintf(r, sizeof r, "%.2f", x->best_us / nccl_us);
            geo += log(x->best_us / nccl_us);
            ngeo++;
        }
        printf(" %11zu %17s %10s %10s %7s\n", x->g.bytes, x->best >= 0 ? x->best_label : "-", t, n, r);
    }
    if (ngeo) printf("# geometric mean ratio: %.3f over %d sizes\n", exp(geo / ngeo), ngeo);
}
