/* symmem-bench's algorithm table: what SYMMEM_ALGO_AUTO resolves to (asked of the library's own table,
 * symmem_coll_choose, by the call's form and the byte count the library looks it up by), and --tune: every
 * concrete algorithm per size; rank 0 turns the slowest-rank times of the correct ones into the rules of
 * this op and form with the autotune's own decision and builder (symmem_autotune_table_from_times, so both
 * make the same table of the same times) and broadcasts them over the shared-memory channel; every rank
 * replaces its rules of this op and form (symmem_coll_tune_replace), rank 0 writes the table to FILE
 * (symmem_coll_tune_save), and auto is measured again with the new table. See bench/NOTES.md.
 * The one file of the benchmarks that uses the collectives' internal tuning API (collectives/tune.h, a
 * hidden part of symmem_static): the tuner sets a live communicator's table, which no public call does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "collectives/autotune.h"
#include "collectives/tune.h"

size_t bench_table_key(const bench_t *b, const geom_t *g)
{
    return symmem_coll_message_bytes(b->ctx.nranks, b->o.coll->kind, g->count, b->o.dt);
}

/* The form of the bench's calls: both buffers symmetric (-z 1) or cudaMalloc memory (-z 0). */
static symmem_form_t bench_form(const bench_t *b) { return b->o.zero_copy ? SYMMEM_FORM_SYMMETRIC : SYMMEM_FORM_ORDINARY; }

int bench_auto_choice(const bench_t *b, const geom_t *g)
{
    return (int)symmem_coll_choose(symmem_coll_tuning(b->ctx.r[0].comm), b->o.coll->kind, bench_form(b),
                                   bench_table_key(b, g));
}

int bench_model_choice(const bench_t *b, const geom_t *g)
{
    const symmem_coll_tuning_t *t = symmem_coll_tuning(b->ctx.r[0].comm);
    if (!t || !b->o.coll->tunable) return SYMMEM_ALGO_AUTO;
    return (int)topo_table_lookup(&t->defaults, b->o.coll->kind, bench_table_key(b, g));
}

double bench_model_us(const bench_t *b, const geom_t *g, int algo, int floor)
{
    if (!b->o.coll->tunable) return -1.0;
    const int a = algo == SYMMEM_ALGO_AUTO ? bench_auto_choice(b, g) : algo;
    return symmem_coll_predict_us(b->ctx.r[0].comm, b->o.coll->kind, (symmem_algo_t)a, bench_table_key(b, g), floor);
}

int bench_model_facts(const bench_t *b, int *host_memory, int *ranks_per_link, int *autotune, double *rw_gbs,
                      double *barrier_us)
{
    symmem_comm_t comm = b->ctx.r[0].comm;
    *rw_gbs = *barrier_us = 0.0;
    symmem_coll_probe_more(comm, rw_gbs, barrier_us);
    *autotune = symmem_coll_autotune_state(comm);
    return symmem_coll_model_memory(comm, host_memory, ranks_per_link);
}

const char *bench_algo_label(const bench_t *b, const geom_t *g, int algo, char *buf, size_t len)
{
    if (algo != SYMMEM_ALGO_AUTO || !b->o.coll->tunable)
        snprintf(buf, len, "%s", symmem_algo_name((symmem_algo_t)algo));
    else
        snprintf(buf, len, "auto:%s", symmem_algo_name((symmem_algo_t)bench_auto_choice(b, g)));
    return buf;
}

int bench_table_facts(const bench_t *b, const char **fingerprint, char *table_file, size_t len, double *probe_rd,
                      double *probe_wr)
{
    symmem_comm_t comm = b->ctx.r[0].comm;
    int explicit_tab = 0;
    *fingerprint = symmem_coll_tuning(comm)->fingerprint;
    if (symmem_coll_tune_path(table_file, len, 0, &explicit_tab) != 0 || access(table_file, R_OK) != 0)
        table_file[0] = 0;
    return symmem_coll_probe_figures(comm, probe_rd, probe_wr);
}

/* --tune FILE, else where the library looks by default: SYMMEM_TUNE_FILE, else <cache dir>/tune.txt
 * (the folder is created), so a tuning pass serves every later run on this machine without settings. */
const char *bench_tune_path(const opts_t *o)
{
    static char path[4096];
    int explicit_path = 0;
    if (o->tune_file) return o->tune_file;
    if (symmem_coll_tune_path(path, sizeof path, 1, &explicit_path) != 0) return "symmem-tune.txt";
    return path;
}

/* Before measuring: if FILE exists, every rank loads it, so the rules of the other ops (and of this op,
 * for the "before" column) are what the file says; symmem_coll_tune_save replaces the whole section of
 * this topology, so without this a second --tune for another op would drop the first op's rules.
 * Agreed across ranks; -1 (nothing measured) if any rank cannot read or parse it. */
int bench_tune_begin(bench_t *b)
{
    cc_ctx_t *ctx = &b->ctx;
    const char *path = bench_tune_path(&b->o);
    uint64_t failed = 0;
    if (access(path, F_OK) == 0) {
        for (int i = 0; i < ctx->nlocal; i++) {
            if (symmem_coll_tune_load(symmem_coll_tuning(ctx->r[i].comm), path) == SYMMEM_OK) continue;
            if (!failed) cc_log(ctx, "--tune: cannot use %s: %s", path, symmem_last_error());
            failed++;
        }
    }
    if (cc_sum_u64(ctx, failed) != 0) {
        if (cc_is_root(ctx)) printf("# --tune: %s exists but cannot be used (see above): fix or remove it\n", path);
        return -1;
    }
    return 0;
}

/* Rank 0 decides each size's winner from its times (already the slowest rank's; wrong or failed runs count
 * as not run) as the autotune decides a step (symmem_autotune_decide) and broadcasts it over the
 * shared-memory channel; every rank then builds the rules of this op and form from the same winners with the
 * autotune's builder (symmem_autotune_rules): symmem_autotune_table_from_times, one size at a time. Returns
 * the number of rules, or -1 if the channel failed. */
static int tune_decide(bench_t *b, size_rec_t *recs, int nrec, topo_table_t *rules)
{
    cc_ctx_t *ctx = &b->ctx;
    const symmem_coll_kind_t kind = b->o.coll->kind;
    const symmem_coll_tuning_t *c = symmem_coll_tuning(ctx->r[0].comm);
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg);
    symmem_autotune_point_t pts[BENCH_MAX_SIZES];
    for (int k = 0; k < nrec; k++) {
        int w = -1;
        if (cc_is_root(ctx)) {
            double us[SYMMEM_ALGO_COUNT];
            for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) {
                const result_t *r = &recs[k].res[a];
                us[a] = a > SYMMEM_ALGO_AUTO && r->ok && r->wrong == 0 ? r->us : -1.0;
            }
            w = symmem_autotune_decide(&c->defaults, kind, recs[k].key, us, cfg.tie);
        }
        uint64_t mine[CC_MAX_RANKS], all[CC_MAX_RANKS];
        for (int i = 0; i < CC_MAX_RANKS; i++) mine[i] = (uint64_t)(int64_t)w;
        if (cc_allgather_u64(ctx, mine, all) != 0) return -1;
        const int agreed = (int)(int64_t)all[0]; /* rank 0's */
        recs[k].winner = agreed > SYMMEM_ALGO_AUTO && agreed < SYMMEM_ALGO_COUNT ? agreed : -1;
        pts[k].bytes = recs[k].key;
        pts[k].winner = recs[k].winner;
        pts[k].pinned = 0;
    }
    rules->nrules = 0;
    if (symmem_autotune_rules(rules, &c->defaults, kind, bench_form(b), pts, nrec) != 0) return -1;
    return rules->nrules;
}

/* Every rank: replace this op's rules of the bench's form, then check that every rank now chooses the same
 * algorithm at every measured size (the library compares tables only at init). On failure every rank
 * clears the op's rules of that form (built-in default; still the same everywhere). Agreed; 0 or -1. */
static int tune_apply(bench_t *b, const size_rec_t *recs, int nrec, const topo_table_t *rules)
{
    cc_ctx_t *ctx = &b->ctx;
    const symmem_coll_kind_t kind = b->o.coll->kind;
    const topo_table_t none = {0};
    uint64_t failed = 0, hl[CC_MAX_RANKS] = {0}, ha[CC_MAX_RANKS];
    for (int i = 0; i < ctx->nlocal; i++) {
        symmem_coll_tuning_t *c = symmem_coll_tuning(ctx->r[i].comm);
        const symmem_status_t st = symmem_coll_tune_replace(c, kind, bench_form(b), rules);
        if (st != SYMMEM_OK) {
            cc_log(ctx, "--tune: rank %d: setting the table: %s: %s", ctx->r[i].rank, symmem_status_name(st),
                   symmem_last_error());
            failed++;
        }
        int chosen[BENCH_MAX_SIZES];
        for (int k = 0; k < nrec; k++) chosen[k] = (int)symmem_coll_choose(c, kind, bench_form(b), recs[k].key);
        hl[i] = cc_hash(chosen, (size_t)nrec * sizeof chosen[0]);
    }
    int differ = 0;
    if (cc_allgather_u64(ctx, hl, ha) != 0) return -1;
    for (int k = 1; k < ctx->nranks; k++) differ |= ha[k] != ha[0];
    if (cc_sum_u64(ctx, failed) == 0 && !differ) return 0;
    for (int i = 0; i < ctx->nlocal; i++)
        symmem_coll_tune_replace(symmem_coll_tuning(ctx->r[i].comm), kind, bench_form(b), &none);
    if (cc_is_root(ctx))
        printf("# --tune: %s; %s falls back to the built-in table, nothing written\n",
               differ ? "ranks ended up with different choices" : "the table could not be set (see above)",
               symmem_coll_kind_name(b->o.coll->kind));
    return -1;
}

/* The table as symmem_coll_tune_print writes it, each line behind "#   " so the output stays a table. */
static void print_table_commented(const symmem_coll_tuning_t *comm)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) {
        symmem_coll_tune_print(comm, stdout);
        return;
    }
    symmem_coll_tune_print(comm, m);
    fclose(m);
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) printf("#   %s\n", line);
    free(buf);
}

static void print_tune_summary(const size_rec_t *recs, int nrec)
{
    printf("#\n# tuning: before = what auto chose before this pass, after = auto with the new table (times in us,\n"
           "# slowest rank; ratio = time / NCCL time, < 1: symmem faster; NCCL from the tuning pass)\n");
    printf("#%11s %17s %10s %6s | %17s %10s %6s | %10s\n", "size", "before", "time", "ratio", "after", "time",
           "ratio", "nccl");
    double gb = 0, ga = 0;
    int nb = 0, na = 0, nowin = 0;
    for (int k = 0; k < nrec; k++) {
        const size_rec_t *x = &recs[k];
        const double nccl = x->nccl.ok ? x->nccl.us : 0;
        const result_t *bf = x->before > SYMMEM_ALGO_AUTO && x->before < SYMMEM_ALGO_COUNT ? &x->res[x->before] : NULL;
        const int bok = bf && bf->ok && bf->wrong == 0, aok = x->after.ok && x->after.wrong == 0;
        char bt[16] = "-", br[16] = "-", at[16] = "-", ar[16] = "-", nt[16] = "-", al[32];
        if (bok) snprintf(bt, sizeof bt, "%.2f", bf->us);
        if (aok) snprintf(at, sizeof at, "%.2f", x->after.us);
        if (nccl > 0) snprintf(nt, sizeof nt, "%.2f", nccl);
        if (bok && nccl > 0) {
            snprintf(br, sizeof br, "%.2f", bf->us / nccl);
            gb += log(bf->us / nccl);
            nb++;
        }
        if (aok && nccl > 0) {
            snprintf(ar, sizeof ar, "%.2f", x->after.us / nccl);
            ga += log(x->after.us / nccl);
            na++;
        }
        snprintf(al, sizeof al, "%s%s", symmem_algo_name((symmem_algo_t)x->after_algo), x->winner >= 0 ? "" : "*");
        nowin += x->winner < 0;
        printf(" %11zu %17s %10s %6s | %17s %10s %6s | %10s\n", x->g.bytes, symmem_algo_name((symmem_algo_t)x->before),
               bt, br, al, at, ar, nt);
    }
    if (nowin) printf("# *: no algorithm ran correctly at this size; a neighbouring size's range covers it\n");
    if (nb) printf("# geometric mean ratio before: %.3f over %d sizes\n", exp(gb / nb), nb);
    if (na) printf("# geometric mean ratio after:  %.3f over %d sizes\n", exp(ga / na), na);
}

/* After the measuring pass: decide, build, set, save, print, re-measure auto. 0, or -1 when no table was
 * set or it could not be written. Every rank makes the same collective calls in the same order. */
int bench_tune_finish(bench_t *b, size_rec_t *recs, int nrec, double busf, uint64_t *wrong_total)
{
    cc_ctx_t *ctx = &b->ctx;
    const int root = cc_is_root(ctx);
    const char *path = bench_tune_path(&b->o);
    static topo_table_t rules;
    const int nr = tune_decide(b, recs, nrec, &rules);
    if (nr < 0) return -1;
    int nwin = 0;
    for (int k = 0; k < nrec; k++) nwin += recs[k].winner >= 0;
    if (nr == 0) {
        if (root) printf("# --tune: no algorithm ran correctly at any size: table unchanged, nothing written\n");
        return -1;
    }
    if (tune_apply(b, recs, nrec, &rules) != 0) return -1;
    int rc = 0;
    if (root) {
        symmem_coll_tuning_t *c = symmem_coll_tuning(ctx->r[0].comm);
        printf("#\n# tuned: %d of %d sizes had a winner, %d rule(s) for %s.%s\n", nwin, nrec, nr,
               symmem_coll_kind_name(b->o.coll->kind), symmem_form_name(bench_form(b)));
        const symmem_status_t st = symmem_coll_tune_save(c, path);
        if (st == SYMMEM_OK)
            printf("# written to %s (use it: SYMMEM_TUNE_FILE=%s); the table now in effect:\n", path, path);
        else {
            printf("# --tune: could not write %s: %s: %s; the table now in effect (not saved):\n", path,
                   symmem_status_name(st), symmem_last_error());
            rc = -1;
        }
        print_table_commented(c);
        printf("#\n# after tuning: auto with the new table (NCCL columns repeat the tuning pass's measurement)\n");
        bench_print_columns(b);
    }
    for (int k = 0; k < nrec; k++) {
        size_rec_t *x = &recs[k];
        char label[32];
        bench_algo_label(b, &x->g, SYMMEM_ALGO_AUTO, label, sizeof label);
        x->after_algo = bench_auto_choice(b, &x->g);
        x->after = bench_measure(b, &x->g, SYMMEM_ALGO_AUTO, 0, cc_mix64(cc_mix64(0xbe4c8ull ^ x->g.bytes) + 0x7475));
        *wrong_total += x->after.wrong;
        if (root)
            bench_print_row(b, &x->g, label, &x->after, &x->nccl, busf,
                            b->o.model ? bench_model_us(b, &x->g, SYMMEM_ALGO_AUTO, 0) : -1.0,
                            b->o.model ? bench_model_us(b, &x->g, SYMMEM_ALGO_AUTO, 1) : -1.0);
    }
    if (root) print_tune_summary(recs, nrec);
    return rc;
}

