/* The autotune without a GPU (collectives/autotune.h): the decision whether to measure, the plan the cost
 * model leaves, the winner of a step, and the collective run on host-backend communicators (one thread per
 * rank) with injected times: every rank ends with the same table, built from the slowest rank's times; the
 * budget and a rank that cannot measure stop every rank at the same step; the saved table loads back to the
 * same rules, and a later init loads it instead of measuring. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/param.h"
#include "base/status.h"
#include "collectives/residency.h"
#include "boot/comm_state.h"
#include "collectives/autotune.h"
#include "collectives/tune.h"
#include "symmem/symmem.h"
#include "test_util.h"
#include "topology/choice.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
enum { N = 4 };

/* The PCIe lab at N ranks: one GPU, host memory, the link's figures shared by the ranks. */
static topo_choice_facts_t lab_facts(void)
{
    topo_choice_facts_t f = {.nranks = N, .link = SYMMEM_LINK_NVLINK, .read_gbs = 50.8 / N, .write_gbs = 52.3 / N,
                             .host_memory = 1, .ranks_per_gpu = N};
    const int one[SYMMEM_MAX_RANKS] = {0};
    topo_island_facts(N, one, &f);
    return f;
}

static void all_available(int *av)
{
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) av[a] = a != SYMMEM_ALGO_AUTO;
}

/* ---- the decision ------------------------------------------------------------------------------------------ */
static void measures_only_where_it_may_and_must(void)
{
    symmem_autotune_state_t st;
    const char *why = NULL;
    symmem_autotune_wish_in_t in = {SYMMEM_AUTOTUNE_AUTO, 4, 0, 0, 0, 0, 0};
    CHECK(symmem_autotune_wish(&in, &st, &why) == 1 && strstr(why, "no table"));
    in.table_loaded = 1; /* a later init: the file has the key */
    CHECK(symmem_autotune_wish(&in, &st, &why) == 0 && st == SYMMEM_AUTOTUNE_LOADED);
    in.mode = SYMMEM_AUTOTUNE_FORCE;
    CHECK(symmem_autotune_wish(&in, &st, &why) == 1 && strstr(why, "force"));
    in.capturing = 1; /* never inside a capture, even forced */
    CHECK(symmem_autotune_wish(&in, &st, &why) == 0 && st == SYMMEM_AUTOTUNE_SKIPPED && strstr(why, "capture"));
    /* co-located ranks of one process that could share a hardware queue: never (a wait for itself) */
    in = (symmem_autotune_wish_in_t){SYMMEM_AUTOTUNE_FORCE, 4, 0, 0, 0, 0, 1};
    CHECK(symmem_autotune_wish(&in, &st, &why) == 0 && st == SYMMEM_AUTOTUNE_SKIPPED &&
          strstr(why, "CUDA_DEVICE_MAX_CONNECTIONS"));
    in = (symmem_autotune_wish_in_t){SYMMEM_AUTOTUNE_OFF, 4, 0, 0, 0, 0, 0};
    CHECK(symmem_autotune_wish(&in, &st, &why) == 0 && st == SYMMEM_AUTOTUNE_NOT_RUN && strstr(why, "off"));
    in = (symmem_autotune_wish_in_t){SYMMEM_AUTOTUNE_FORCE, 4, 1, 0, 0, 0, 0};
    CHECK(symmem_autotune_wish(&in, &st, &why) == 0 && strstr(why, "SYMMEM_ALGO"));
    in = (symmem_autotune_wish_in_t){SYMMEM_AUTOTUNE_FORCE, 4, 0, 0, 0, 1, 0};
    CHECK(symmem_autotune_wish(&in, &st, &why) == 0 && strstr(why, "host backend"));
    in = (symmem_autotune_wish_in_t){SYMMEM_AUTOTUNE_FORCE, 1, 0, 0, 0, 0, 0};
    CHECK(symmem_autotune_wish(&in, &st, &why) == 0 && strstr(why, "one rank"));
    in = (symmem_autotune_wish_in_t){SYMMEM_AUTOTUNE_AUTO, 2, 0, 0, 0, 0, 0}; /* two ranks have a choice */
    CHECK(symmem_autotune_wish(&in, &st, &why) == 1);
}

/* SYMMEM_AUTOTUNE's words, any case; anything else is auto (with a warning) */
static void mode_read_in_any_case_else_auto(void)
{
    static const struct {
        const char *v;
        symmem_autotune_mode_t mode;
    } cases[] = {{"", SYMMEM_AUTOTUNE_AUTO},      {"auto", SYMMEM_AUTOTUNE_AUTO},   {"AUTO", SYMMEM_AUTOTUNE_AUTO},
                 {"off", SYMMEM_AUTOTUNE_OFF},    {"Off", SYMMEM_AUTOTUNE_OFF},     {"0", SYMMEM_AUTOTUNE_OFF},
                 {"force", SYMMEM_AUTOTUNE_FORCE}, {"FORCE", SYMMEM_AUTOTUNE_FORCE}, {"1", SYMMEM_AUTOTUNE_FORCE},
                 {"offf", SYMMEM_AUTOTUNE_AUTO},  {"2", SYMMEM_AUTOTUNE_AUTO},      {"10", SYMMEM_AUTOTUNE_AUTO}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(setenv("SYMMEM_AUTOTUNE", cases[i].v, 1) == 0);
        symmem_param_reload();
        const symmem_autotune_mode_t got = symmem_autotune_mode();
        if (got != cases[i].mode) fprintf(stderr, "SYMMEM_AUTOTUNE=\"%s\": mode %d\n", cases[i].v, (int)got);
        CHECK(got == cases[i].mode);
    }
    CHECK(unsetenv("SYMMEM_AUTOTUNE") == 0);
    symmem_param_reload();
    CHECK(symmem_autotune_mode() == SYMMEM_AUTOTUNE_AUTO); /* the default */
}

/* ---- the plan and a step's winner -------------------------------------------------------------------------- */
static void plan_keeps_model_choice_and_prunes(void)
{
    const topo_choice_facts_t f = lab_facts();
    topo_cost_machine_t m;
    topo_choice_machine(&f, &m);
    topo_choice_t c;
    topo_choose(&f, &c);
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg); /* autotune.h: 1 KiB to 4 MiB, factor 4 or 20 us, ties 3% */
    CHECK(cfg.min_bytes == 1 * KIB && cfg.max_bytes == 4 * MIB && cfg.keep_factor == 4.0 && cfg.keep_us == 20.0);
    CHECK(cfg.tie == 0.03 && cfg.graph_us == 2500.0 && cfg.min_ops == 4 && cfg.max_ops == 32 && cfg.skip_factor == 2.0);
    CHECK(cfg.budget_ms == (double)symmem_param_int(SYMMEM_PARAM_AUTOTUNE_BUDGET_MS) &&
          strcmp(symmem_param_default(SYMMEM_PARAM_AUTOTUNE_BUDGET_MS), "8000") == 0);
    /* all-reduce in the three forms callers pass, the sharded ops in two; two bisection rounds */
    CHECK(cfg.forms[SYMMEM_COLL_ALL_REDUCE] == (SYMMEM_FORM_BIT(SYMMEM_FORM_ORDINARY) |
                                                SYMMEM_FORM_BIT(SYMMEM_FORM_SYMMETRIC_INPUT) |
                                                SYMMEM_FORM_BIT(SYMMEM_FORM_SYMMETRIC)));
    CHECK(cfg.forms[SYMMEM_COLL_REDUCE_SCATTER] ==
          (SYMMEM_FORM_BIT(SYMMEM_FORM_ORDINARY) | SYMMEM_FORM_BIT(SYMMEM_FORM_SYMMETRIC_INPUT)));
    CHECK(cfg.refine == 2 && cfg.agree == 0.03 && cfg.max_rounds == 4);
    int av[SYMMEM_ALGO_COUNT];
    all_available(av);
    symmem_autotune_plan_t p;
    symmem_autotune_plan(&m, &c.table, av, &cfg, &p);
    CHECK(p.nsteps == (3 + 2 + 2) * 13); /* 1 KiB .. 4 MiB, every op in each of its forms */
    int pruned = 0;
    for (int s = 0; s < p.nsteps; s++) {
        const symmem_autotune_step_t *st = &p.step[s];
        const symmem_algo_t model = topo_table_lookup(&c.table, (symmem_coll_kind_t)st->kind, st->bytes);
        int has_model = 0;
        for (int i = 0; i < st->ncand; i++) {
            has_model |= st->algo[i] == (int32_t)model;
            if (i) CHECK(st->pred_us[i] >= st->pred_us[i - 1]);
            CHECK(st->pred_us[i] <= st->pred_us[0] * cfg.keep_factor || st->pred_us[i] <= st->pred_us[0] + cfg.keep_us ||
                  st->algo[i] == (int32_t)model);
        }
        CHECK(has_model && st->ncand >= 1);
        /* one graph length for every candidate, from the least prediction */
        CHECK(st->ops == symmem_autotune_graph_ops(&cfg, st->pred_us[0]));
        /* and every algorithm the rule keeps is a candidate, at its price, ties in algorithm order */
        double least = -1.0;
        for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++) {
            const double us = topo_cost_us(&m, (symmem_coll_kind_t)st->kind, (symmem_algo_t)a, st->bytes);
            if (us >= 0 && (least < 0 || us < least)) least = us;
        }
        CHECK(least >= 0 && st->pred_us[0] == least);
        for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++) {
            const double us = topo_cost_us(&m, (symmem_coll_kind_t)st->kind, (symmem_algo_t)a, st->bytes);
            const int kept = us >= 0 && (us <= least * cfg.keep_factor || us <= least + cfg.keep_us || a == (int)model);
            int at = -1;
            for (int i = 0; i < st->ncand; i++)
                if (st->algo[i] == a) at = i;
            CHECK(kept == (at >= 0));
            if (at >= 0) CHECK(st->pred_us[at] == us);
            if (at > 0 && st->pred_us[at - 1] == us) CHECK(st->algo[at - 1] < a);
        }
        pruned += st->ncand < SYMMEM_ALGO_COUNT - 1;
        if (s > 0 && st->kind == p.step[s - 1].kind && st->form == p.step[s - 1].form)
            CHECK(st->bytes == 2 * p.step[s - 1].bytes);
        else CHECK(st->bytes == cfg.min_bytes); /* a new op or form starts at the smallest size */
    }
    CHECK(pruned > 0); /* the model leaves out what it prices far off (one-shot at 4 MiB on 4 ranks) */
    /* an unavailable algorithm is never planned */
    av[SYMMEM_ALGO_ISLAND] = 0;
    symmem_autotune_plan(&m, &c.table, av, &cfg, &p);
    for (int s = 0; s < p.nsteps; s++)
        for (int i = 0; i < p.step[s].ncand; i++) CHECK(p.step[s].algo[i] != SYMMEM_ALGO_ISLAND);
}

static void winner_rules(void)
{
    symmem_autotune_step_t st;
    memset(&st, 0, sizeof st);
    st.ncand = 3;
    st.algo[0] = SYMMEM_ALGO_TWOSHOT_PUSH, st.algo[1] = SYMMEM_ALGO_ONESHOT_PUSH, st.algo[2] = SYMMEM_ALGO_STAGED;
    const double t1[3] = {10.0, 9.0, 12.0};
    CHECK(symmem_autotune_winner(&st, t1, SYMMEM_ALGO_STAGED, 0.03) == SYMMEM_ALGO_ONESHOT_PUSH);
    const double t2[3] = {10.0, 9.8, 12.0}; /* within 3% of the fastest: the model's choice stands */
    CHECK(symmem_autotune_winner(&st, t2, SYMMEM_ALGO_TWOSHOT_PUSH, 0.03) == SYMMEM_ALGO_TWOSHOT_PUSH);
    const double t3[3] = {-1.0, 9.8, 12.0}; /* did not run on some rank: never wins */
    CHECK(symmem_autotune_winner(&st, t3, SYMMEM_ALGO_TWOSHOT_PUSH, 0.03) == SYMMEM_ALGO_ONESHOT_PUSH);
    const double t4[3] = {-1.0, -1.0, -1.0};
    CHECK(symmem_autotune_winner(&st, t4, SYMMEM_ALGO_TWOSHOT_PUSH, 0.03) == -1);
}

static void step_line_names_times_skips_and_choice(void)
{
    symmem_autotune_step_t st;
    memset(&st, 0, sizeof st);
    st.kind = SYMMEM_COLL_ALL_REDUCE;
    st.bytes = 2 * MIB;
    st.ncand = 3;
    st.algo[0] = SYMMEM_ALGO_STAGED, st.algo[1] = SYMMEM_ALGO_COPY_ENGINE, st.algo[2] = SYMMEM_ALGO_ISLAND;
    st.ops = 5;
    const double t[3] = {1048.61, 1010.24, -1.0};
    char text[512];
    symmem_autotune_step_describe(&st, t, NULL, SYMMEM_ALGO_COPY_ENGINE, SYMMEM_ALGO_TWOSHOT_PUSH, text, sizeof text);
    CHECK(strcmp(text, "all_reduce.ord 2 MiB: staged 1048.6 us x5, copy_engine 1010.2 us x5, island not run -> "
                       "copy_engine (the model: twoshot_push)") == 0);
    const int skip[3] = {1, 0, 0}; /* a skipped candidate says so, whatever its (absent) time */
    symmem_autotune_step_describe(&st, t, skip, SYMMEM_ALGO_COPY_ENGINE, SYMMEM_ALGO_TWOSHOT_PUSH, text, sizeof text);
    CHECK(strcmp(text, "all_reduce.ord 2 MiB: staged skipped, copy_engine 1010.2 us x5, island not run -> "
                       "copy_engine (the model: twoshot_push)") == 0);
    const double none[3] = {-1.0, -1.0, -1.0};
    symmem_autotune_step_describe(&st, none, NULL, -1, SYMMEM_ALGO_TWOSHOT_PUSH, text, sizeof text);
    CHECK(strstr(text, "-> nothing ran (the model: twoshot_push)") != NULL);
    char small[24]; /* truncated, never overrun */
    symmem_autotune_step_describe(&st, t, NULL, SYMMEM_ALGO_COPY_ENGINE, SYMMEM_ALGO_TWOSHOT_PUSH, small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1 && strncmp(small, text, sizeof small - 1) == 0);
}

/* Operations per graph: as many as fit in graph_us of predicted time, within [min_ops, max_ops]: 20 or more
 * wherever one operation is predicted under 125 us. */
static void graph_holds_the_ops_that_fit_its_time(void)
{
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg);
    CHECK(symmem_autotune_graph_ops(&cfg, 1.0) == 32);     /* small: the most */
    CHECK(symmem_autotune_graph_ops(&cfg, 78.125) == 32);  /* 2500 / 78.125 = 32 exactly */
    CHECK(symmem_autotune_graph_ops(&cfg, 78.2) == 31);    /* floor, not rounded */
    CHECK(symmem_autotune_graph_ops(&cfg, 125.0) == 20);
    CHECK(symmem_autotune_graph_ops(&cfg, 625.0) == 4);
    CHECK(symmem_autotune_graph_ops(&cfg, 630.0) == 4);    /* 3.97: the least */
    CHECK(symmem_autotune_graph_ops(&cfg, 5000.0) == 4);
    CHECK(symmem_autotune_graph_ops(&cfg, 0.0) == 32);     /* no prediction: the most */
    CHECK(symmem_autotune_graph_ops(&cfg, -1.0) == 32);
    CHECK(symmem_autotune_graph_ops(&cfg, 1e-300) == 32);  /* no overflow of the int */
    for (double us = 0.5; us < 10000.0; us *= 1.1) {
        const int k = symmem_autotune_graph_ops(&cfg, us);
        CHECK(k >= 4 && k <= 32 && (k == 4 || k == 32 || (k * us <= 2500.0 && (k + 1) * us > 2500.0)));
        if (us <= 125.0) CHECK(k >= 20);
    }
    cfg.min_ops = 0, cfg.max_ops = 0; /* nonsense bounds: still at least one operation */
    CHECK(symmem_autotune_graph_ops(&cfg, 5000.0) == 1 && symmem_autotune_graph_ops(&cfg, 1.0) == 1);
}

/* The skip rule: at half the size over factor times the fastest, and not the model's choice. */
static void skips_what_was_over_factor_slower_at_half_the_size(void)
{
    symmem_autotune_step_t st;
    memset(&st, 0, sizeof st);
    st.ncand = 4;
    st.algo[0] = SYMMEM_ALGO_TWOSHOT_PUSH, st.algo[1] = SYMMEM_ALGO_STAGED, st.algo[2] = SYMMEM_ALGO_COPY_ENGINE;
    st.algo[3] = SYMMEM_ALGO_ONESHOT_PUSH;
    double half[SYMMEM_ALGO_COUNT];
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) half[a] = -1.0;
    half[SYMMEM_ALGO_TWOSHOT_PUSH] = 10.0;
    half[SYMMEM_ALGO_STAGED] = 20.0;      /* exactly 2x: measured */
    half[SYMMEM_ALGO_COPY_ENGINE] = 20.1; /* over 2x: skipped */
    half[SYMMEM_ALGO_ONESHOT_PUSH] = 90.0;
    half[SYMMEM_ALGO_TWOSHOT_PULL] = 5.0; /* no candidate here, but the fastest reading at half the size */
    int skip[SYMMEM_ALGO_COUNT];
    CHECK(symmem_autotune_skips(&st, half, SYMMEM_ALGO_TWOSHOT_PUSH, 2.0, skip) == 3);
    CHECK(!skip[0] && skip[1] && skip[2] && skip[3]); /* against 5 us: staged is 4x */
    half[SYMMEM_ALGO_TWOSHOT_PULL] = -1.0;
    CHECK(symmem_autotune_skips(&st, half, SYMMEM_ALGO_TWOSHOT_PUSH, 2.0, skip) == 2);
    CHECK(!skip[0] && !skip[1] && skip[2] && skip[3]);
    /* the model's choice is measured however slow */
    CHECK(symmem_autotune_skips(&st, half, SYMMEM_ALGO_ONESHOT_PUSH, 2.0, skip) == 1);
    CHECK(!skip[0] && !skip[1] && skip[2] && !skip[3]);
    /* no reading at half the size (skipped there, or did not run): measured */
    half[SYMMEM_ALGO_COPY_ENGINE] = -1.0;
    CHECK(symmem_autotune_skips(&st, half, SYMMEM_ALGO_TWOSHOT_PUSH, 2.0, skip) == 1 && !skip[2] && skip[3]);
    /* factor 0 (off), no half-size step, or no reading at all: nothing skipped */
    CHECK(symmem_autotune_skips(&st, half, SYMMEM_ALGO_TWOSHOT_PUSH, 0.0, skip) == 0);
    CHECK(symmem_autotune_skips(&st, NULL, SYMMEM_ALGO_TWOSHOT_PUSH, 2.0, skip) == 0);
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) half[a] = -1.0;
    CHECK(symmem_autotune_skips(&st, half, SYMMEM_ALGO_TWOSHOT_PUSH, 2.0, skip) == 0);
    for (int i = 0; i < st.ncand; i++) CHECK(!skip[i]);
}

/* ---- the collective run with injected times ---------------------------------------------------------------- */
typedef struct fake {
    int rank;
    int steps;         /* steps measured so far */
    double ms_per_step; /* this rank's clock */
    int fail_at;       /* measure returns -1 at this step (-1: never) */
    uint32_t measured[SYMMEM_AUTOTUNE_MAX_STEPS]; /* by step: the algorithms measure was asked for (bits) */
    int32_t ops[SYMMEM_AUTOTUNE_MAX_STEPS];       /* by step: the graph length measure was given */
} fake_t;

static double skip_factor = 2.0; /* run_all's; table_from_winners turns the skips off */
static int refine_rounds = 0;    /* run_all's bisection rounds: the tests of the plan's own steps keep it off */
static size_t cut_bytes;         /* set by the bisection test: fake_us puts a cut in the winners here */

static int designated_winners; /* set by table_from_winners: fake_us makes designated() the clear winner */

/* The candidate that table_from_winners makes win a step: by the size's place in the 1 KiB.. scan, 1 KiB on its
 * own, then two sizes at a time, so that the table has runs of one size and of more, and changes between them. */
static int designated(const symmem_autotune_step_t *st)
{
    int log2k = 0;
    while (((size_t)1 << (10 + log2k)) < st->bytes) log2k++;
    return ((log2k + 1) / 2) % st->ncand;
}

/* The injected time of `algo` at `bytes` on `rank`: the model's prediction, except that rank 3 is slow with
 * twoshot_push at 64 KiB all-reduce (so only the slowest rank's view picks the winner there) and twoshot_pull
 * never runs on rank 1; with designated_winners, designated() is 100x faster than the rest. */
static double fake_us(int rank, const symmem_autotune_step_t *st, int i)
{
    if (cut_bytes) {
        /* the candidate of the lowest algorithm wins up to the cut, that of the highest above it */
        int lo = 0, hi = 0;
        for (int j = 1; j < st->ncand; j++) {
            if (st->algo[j] < st->algo[lo]) lo = j;
            if (st->algo[j] > st->algo[hi]) hi = j;
        }
        return (i == (st->bytes <= cut_bytes ? lo : hi) ? 1.0 : 100.0) * (1.0 + 0.001 * rank);
    }
    if (designated_winners) return st->pred_us[i] * (i == designated(st) ? 0.01 : 1.0) * (1.0 + 0.001 * rank);
    if (st->algo[i] == SYMMEM_ALGO_TWOSHOT_PULL && rank == 1) return -1.0;
    double t = st->pred_us[i] * (1.0 + 0.001 * rank);
    if (st->kind == SYMMEM_COLL_ALL_REDUCE && st->bytes == 64 * KIB && st->algo[i] == SYMMEM_ALGO_TWOSHOT_PUSH)
        t = rank == 3 ? 1000.0 : 0.5;
    return t;
}

static int fake_measure(void *p, const symmem_autotune_step_t *st, double *us)
{
    fake_t *f = p;
    if (f->steps == f->fail_at) return -1;
    for (int i = 0; i < st->ncand; i++) {
        us[i] = fake_us(f->rank, st, i);
        f->measured[f->steps] |= 1u << st->algo[i];
    }
    f->ops[f->steps] = st->ops;
    f->steps++;
    return 0;
}

static double fake_elapsed(void *p)
{
    const fake_t *f = p;
    return f->steps * f->ms_per_step;
}

typedef struct rank_job {
    symmem_comm_t comm;
    symmem_coll_tuning_t tu;
    fake_t fake;
    symmem_autotune_cfg_t cfg;
    symmem_autotune_result_t res;
    symmem_status_t st;
} rank_job_t;

static void *rank_run(void *p)
{
    rank_job_t *j = p;
    const topo_choice_facts_t f = lab_facts();
    topo_cost_machine_t m;
    topo_choice_machine(&f, &m);
    int av[SYMMEM_ALGO_COUNT];
    all_available(av);
    const symmem_autotune_ops_t ops = {fake_measure, fake_elapsed, &j->fake};
    j->st = symmem_autotune_run(j->comm, &j->tu, &m, av, &ops, &j->cfg, &j->res);
    return NULL;
}

/* The plan every rank of run_all makes (the same facts, defaults and config), and the tuning it starts from. */
static void run_all_plan(symmem_autotune_plan_t *plan, symmem_coll_tuning_t *tu_out)
{
    const topo_choice_facts_t f = lab_facts();
    topo_cost_machine_t m;
    topo_choice_machine(&f, &m);
    symmem_coll_tuning_t tu;
    symmem_coll_tune_init(&tu, "lab-key", &f);
    int av[SYMMEM_ALGO_COUNT];
    all_available(av);
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg);
    symmem_autotune_plan(&m, &tu.defaults, av, &cfg, plan);
    if (tu_out) *tu_out = tu;
}

/* Every rank runs the autotune on its own thread; jobs[r] holds what it got. */
static void run_all(symmem_comm_t *comms, rank_job_t *jobs, double budget_ms, const double *ms_per_step, int fail_rank,
                    int fail_at)
{
    pthread_t th[N];
    const topo_choice_facts_t f = lab_facts();
    for (int r = 0; r < N; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].comm = comms[r];
        symmem_coll_tune_init(&jobs[r].tu, "lab-key", &f);
        jobs[r].fake = (fake_t){r, 0, ms_per_step ? ms_per_step[r] : 0.0, r == fail_rank ? fail_at : -1, {0}, {0}};
        symmem_autotune_cfg_default(&jobs[r].cfg);
        jobs[r].cfg.budget_ms = budget_ms;
        jobs[r].cfg.skip_factor = skip_factor;
        jobs[r].cfg.refine = refine_rounds;
        CHECK(pthread_create(&th[r], NULL, rank_run, &jobs[r]) == 0);
    }
    for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < N; r++) {
        CHECK_OK(jobs[r].st);
        CHECK(jobs[r].res.agreed);
        CHECK(jobs[r].res.steps == jobs[0].res.steps && jobs[r].res.budget_stop == jobs[0].res.budget_stop);
        CHECK(jobs[r].res.hash == jobs[0].res.hash && topo_table_hash(&jobs[r].tu.table) == jobs[0].res.hash);
    }
}

static void run_agrees_on_the_slowest_rank(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    run_all(comms, jobs, 1e9, NULL, -1, -1);
    const symmem_coll_tuning_t *t = &jobs[0].tu;
    CHECK(jobs[0].res.steps == jobs[0].res.planned && !jobs[0].res.budget_stop && !jobs[0].res.failed);
    /* 64 KiB: twoshot_push is the fastest on three ranks, the slowest on rank 3: it does not win */
    for (int f = 0; f < SYMMEM_FORM_COUNT; f++)
        CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, (symmem_form_t)f, 64 * KIB) != SYMMEM_ALGO_TWOSHOT_PUSH);
    /* twoshot_pull did not run on rank 1: it wins nowhere */
    for (int i = 0; i < t->table.nrules; i++) CHECK(t->table.rules[i].algo != SYMMEM_ALGO_TWOSHOT_PULL);
    /* elsewhere the injected times are the model's: its choice among what ran (ties keep the model's) */
    const symmem_algo_t a1 = symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 4 * MIB);
    CHECK(a1 != SYMMEM_ALGO_AUTO && a1 != SYMMEM_ALGO_TWOSHOT_PULL);
    /* every op has rules in each form it measured, none in the others; above 4 MiB the model's */
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg);
    for (int k = 0; k <= SYMMEM_COLL_ALL_GATHER; k++)
        for (int f = 0; f < SYMMEM_FORM_COUNT; f++) {
            const int measured = (cfg.forms[k] & SYMMEM_FORM_BIT(f)) != 0;
            CHECK(topo_table_has_form(&t->table, (symmem_coll_kind_t)k, f) == measured);
            if (measured)
                CHECK(topo_table_lookup_form(&t->table, (symmem_coll_kind_t)k, f, SIZE_MAX) ==
                      topo_table_lookup(&t->defaults, (symmem_coll_kind_t)k, SIZE_MAX));
        }
    CHECK(!topo_table_has_form(&t->table, SYMMEM_COLL_ALL_REDUCE, TOPO_FORM_ANY));
    char text[1024];
    symmem_autotune_describe(&t->table, text, sizeof text);
    printf("  tuned: %s\n", text);
    CHECK(strstr(text, "all_reduce") && strstr(text, "reduce_scatter") && strstr(text, "all_gather"));
}

/* The skips in a run: what measure is asked for at each size follows the rule from the slowest rank's readings
 * at half the size, the same on every rank; a candidate skipped at one size is measured at the next; the
 * graphs are the plan's. */
static void run_skips_what_was_slow_at_half_the_size(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    static symmem_autotune_plan_t plan;
    symmem_coll_tuning_t tu;
    run_all_plan(&plan, &tu);
    run_all(comms, jobs, 1e9, NULL, -1, -1);
    CHECK(jobs[0].res.steps == plan.nsteps);
    double last[SYMMEM_ALGO_COUNT];
    int skipped = 0, measured = 0, planned = 0, measured_after_skip = 0;
    uint32_t was_skipped = 0; /* at the last step */
    for (int s = 0; s < plan.nsteps; s++) {
        const symmem_autotune_step_t *st = &plan.step[s];
        const symmem_algo_t model = topo_table_lookup(&tu.defaults, (symmem_coll_kind_t)st->kind, st->bytes);
        const int half = s > 0 && plan.step[s - 1].kind == st->kind && plan.step[s - 1].form == st->form &&
                         2 * plan.step[s - 1].bytes == st->bytes;
        int skip[SYMMEM_ALGO_COUNT];
        skipped += symmem_autotune_skips(st, half ? last : NULL, model, 2.0, skip);
        uint32_t want = 0;
        for (int i = 0; i < st->ncand; i++)
            if (!skip[i]) want |= 1u << st->algo[i];
        /* the step's graph length, whichever candidates are measured (from its least prediction) */
        for (int r = 0; r < N; r++) CHECK(jobs[r].fake.measured[s] == want && jobs[r].fake.ops[s] == st->ops);
        /* this step's readings, as the run takes them: the slowest rank's, none where one rank had none */
        double now[SYMMEM_ALGO_COUNT];
        for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) now[a] = -1.0;
        for (int i = 0; i < st->ncand; i++) {
            if (skip[i]) continue;
            measured++;
            measured_after_skip += half && (was_skipped >> st->algo[i] & 1u);
            double t = 0.0;
            for (int r = 0; r < N && t >= 0.0; r++) {
                const double v = fake_us(r, st, i);
                t = v > 0.0 ? (v > t ? v : t) : -1.0;
            }
            now[st->algo[i]] = t;
        }
        planned += st->ncand;
        memcpy(last, now, sizeof last);
        was_skipped = 0;
        for (int i = 0; i < st->ncand; i++) {
            if (!skip[i]) continue;
            was_skipped |= 1u << st->algo[i];
            /* skipped: the model's choice never is, and the reading at half the size was over 2x the fastest */
            CHECK(st->algo[i] != (int32_t)model && half);
        }
    }
    CHECK(skipped > 0 && measured + skipped == planned && measured_after_skip > 0);
    CHECK(jobs[0].res.skipped == skipped && jobs[0].res.measurements == measured);
}

/* floor(sqrt(x)), by bisection (the library's is Newton's) */
static size_t root_floor(uint64_t x)
{
    uint64_t lo = 0, hi = (uint64_t)1 << 32;
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (mid * mid <= x) lo = mid;
        else hi = mid;
    }
    return (size_t)lo;
}

/* The table the autotune builds from its winners, rebuilt here from the plan and the designated winners: a run
 * of sizes with one winner holds up to the geometric middle of its last size and the next (floor), the last
 * run up to that of 4 MiB and 8 MiB, the model's rules above it, and neighbouring rules with one algorithm are
 * one; `changed` counts the sizes whose winner is not the model's choice. */
static void table_from_winners_run(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    static symmem_autotune_plan_t plan;
    symmem_coll_tuning_t tu;
    run_all_plan(&plan, &tu);
    designated_winners = 1;
    skip_factor = 0.0; /* every candidate measured: the designated winners are 100x apart from the rest */
    run_all(comms, jobs, 1e9, NULL, -1, -1);
    skip_factor = 2.0;
    designated_winners = 0;
    int planned = 0;
    for (int s = 0; s < plan.nsteps; s++) planned += plan.step[s].ncand;
    CHECK(jobs[0].res.steps == plan.nsteps && jobs[0].res.measurements == planned);

    static topo_table_t want;
    want.nrules = 0;
    int changed = 0, distinct_runs = 0;
    for (int s0 = 0; s0 < plan.nsteps;) {
        const int k = plan.step[s0].kind, f = plan.step[s0].form;
        size_t top = 0;
        int s = s0;
        for (; s < plan.nsteps && plan.step[s].kind == k && plan.step[s].form == f; s++) {
            const symmem_autotune_step_t *st = &plan.step[s];
            const int w = st->algo[designated(st)];
            changed += w != (int)topo_table_lookup(&tu.defaults, (symmem_coll_kind_t)k, st->bytes);
            const int last = s + 1 == plan.nsteps || plan.step[s + 1].kind != k || plan.step[s + 1].form != f;
            top = root_floor((uint64_t)st->bytes * 2 * st->bytes); /* the next size is twice this one */
            if (!last && plan.step[s + 1].algo[designated(&plan.step[s + 1])] == w) continue;
            CHECK(topo_table_add_form(&want, k, f, top, (symmem_algo_t)w) == 0);
            distinct_runs++;
        }
        s0 = s;
        CHECK(top == root_floor((uint64_t)32 << 40)); /* 4 MiB's run ends between 4 and 8 MiB */
        for (int i = 0; i < tu.defaults.nrules; i++)
            if (tu.defaults.rules[i].kind == k && tu.defaults.rules[i].max_bytes > top)
                CHECK(topo_table_add_form(&want, k, f, tu.defaults.rules[i].max_bytes, tu.defaults.rules[i].algo) == 0);
    }
    CHECK(distinct_runs > 6); /* the pattern changes winners within each op */
    int w = 0;
    for (int i = 0; i < want.nrules; i++) {
        if (w > 0 && want.rules[w - 1].kind == want.rules[i].kind && want.rules[w - 1].form == want.rules[i].form &&
            want.rules[w - 1].algo == want.rules[i].algo)
            w--;
        want.rules[w++] = want.rules[i];
    }
    want.nrules = w;

    const topo_table_t *got = &jobs[0].tu.table;
    CHECK(got->nrules == want.nrules);
    for (int i = 0; i < got->nrules && i < want.nrules; i++) {
        const topo_rule_t *a = &got->rules[i], *b = &want.rules[i];
        if (a->kind != b->kind || a->form != b->form || a->max_bytes != b->max_bytes || a->algo != b->algo)
            fprintf(stderr, "rule %d: got %d.%d %zu %s, want %d.%d %zu %s\n", i, a->kind, a->form, a->max_bytes,
                    symmem_algo_name(a->algo), b->kind, b->form, b->max_bytes, symmem_algo_name(b->algo));
        CHECK(a->kind == b->kind && a->form == b->form && a->max_bytes == b->max_bytes && a->algo == b->algo);
    }
    CHECK(jobs[0].res.changed == changed);
}

/* The log's words for a table: bounds in MiB, KiB or bytes, whichever is whole; the last rule "above". */
static void table_logged_in_whole_units_last_rule_above(void)
{
    topo_table_t t = {0};
    CHECK(topo_table_add(&t, SYMMEM_COLL_ALL_REDUCE, 1024, SYMMEM_ALGO_ONESHOT_PULL) == 0);
    CHECK(topo_table_add(&t, SYMMEM_COLL_ALL_REDUCE, 11585, SYMMEM_ALGO_ONESHOT_PUSH) == 0);
    CHECK(topo_table_add(&t, SYMMEM_COLL_ALL_REDUCE, 96 * KIB, SYMMEM_ALGO_TWOSHOT_LAMPORT) == 0);
    CHECK(topo_table_add(&t, SYMMEM_COLL_ALL_REDUCE, 1 * MIB, SYMMEM_ALGO_TWOSHOT_PULL) == 0);
    CHECK(topo_table_add(&t, SYMMEM_COLL_ALL_REDUCE, 3 * MIB, SYMMEM_ALGO_STAGED) == 0);
    CHECK(topo_table_add(&t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH) == 0);
    CHECK(topo_table_add(&t, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_STAGED) == 0);
    CHECK(topo_table_add(&t, SYMMEM_COLL_ALL_GATHER, 1536 * KIB, SYMMEM_ALGO_COPY_ENGINE) == 0);
    CHECK(topo_table_add(&t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_STAGED) == 0);
    char text[512];
    symmem_autotune_describe(&t, text, sizeof text);
    const char *want = "all_reduce up to 1 KiB oneshot_pull, up to 11585 B oneshot_push, up to 96 KiB twoshot_lamport, "
                       "up to 1 MiB twoshot_pull, up to 3 MiB staged, above twoshot_push; reduce_scatter staged; "
                       "all_gather up to 1536 KiB copy_engine, above staged";
    if (strcmp(text, want) != 0) fprintf(stderr, "got:  %s\nwant: %s\n", text, want);
    CHECK(strcmp(text, want) == 0);
    char small[20]; /* truncated, never overrun */
    symmem_autotune_describe(&t, small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1 && strncmp(small, want, sizeof small - 1) == 0);
    topo_table_t none = {0};
    symmem_autotune_describe(&none, text, sizeof text);
    CHECK(text[0] == '\0');
}

static void budget_stops_every_rank_at_once(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    /* rank 2's clock runs 100x faster: its elapsed decides for everyone (past 450 ms after its 5th step) */
    const double per_step[N] = {1.0, 1.0, 100.0, 1.0};
    run_all(comms, jobs, 450.0, per_step, -1, -1);
    CHECK(jobs[0].res.budget_stop && jobs[0].res.steps == 5);
    for (int r = 0; r < N; r++) CHECK(jobs[r].fake.steps == 5); /* nobody measured a sixth */
    /* sizes past the budget keep the model's choice; the other ops have no rules (the model's table) */
    const symmem_coll_tuning_t *t = &jobs[0].tu;
    CHECK(!topo_table_has_form(&t->table, SYMMEM_COLL_REDUCE_SCATTER, SYMMEM_FORM_ORDINARY));
    CHECK(!topo_table_has_form(&t->table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC_INPUT));
    CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 4 * MIB) ==
          topo_table_lookup(&t->defaults, SYMMEM_COLL_ALL_REDUCE, 4 * MIB));
    /* a budget reached exactly is not yet spent: 500 ms stops after the 6th step, not the 5th */
    run_all(comms, jobs, 500.0, per_step, -1, -1);
    CHECK(jobs[0].res.budget_stop && jobs[0].res.steps == 6 && jobs[3].fake.steps == 6);
    /* spent only by the last step: every step measured, and no stop reported */
    const int planned = jobs[0].res.planned;
    run_all(comms, jobs, 100.0 * planned - 50.0, per_step, -1, -1);
    CHECK(!jobs[0].res.budget_stop && jobs[0].res.steps == planned && jobs[0].res.elapsed_ms > 100.0 * planned - 50.0);
}

static void failing_rank_stops_every_rank(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    run_all(comms, jobs, 1e9, NULL, 1, 3);
    CHECK(jobs[0].res.failed && jobs[0].res.steps == 4); /* steps 0..2 decided, step 3 lost on every rank */
    for (int r = 0; r < N; r++) CHECK(jobs[r].res.failed && (r == 1 || jobs[r].fake.steps == 4));
    CHECK(topo_table_lookup_form(&jobs[0].tu.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 1 * KIB) !=
          SYMMEM_ALGO_AUTO);
}

/* ---- save, load, and the next init ------------------------------------------------------------------------------ */
static void saved_table_round_trips(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    run_all(comms, jobs, 1e9, NULL, -1, -1);
    char dir[] = "/tmp/symmem-autotune-XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tune.txt", dir);
    CHECK_OK(symmem_coll_tune_save(&jobs[0].tu, path)); /* rank 0 saves */
    struct stat sb;
    CHECK(stat(path, &sb) == 0 && (sb.st_mode & 0777) == 0644);
    /* a later init of every rank: a fresh table for the key, loaded from the file */
    const topo_choice_facts_t f = lab_facts();
    for (int r = 0; r < N; r++) {
        symmem_coll_tuning_t later;
        symmem_coll_tune_init(&later, "lab-key", &f);
        CHECK_OK(symmem_coll_tune_load(&later, path));
        CHECK(topo_table_hash(&later.table) == jobs[0].res.hash);
        symmem_autotune_state_t st;
        const char *why;
        const symmem_autotune_wish_in_t in = {SYMMEM_AUTOTUNE_AUTO, N, 0, later.table.nrules > 0, 0, 0, 0};
        CHECK(symmem_autotune_wish(&in, &st, &why) == 0 && st == SYMMEM_AUTOTUNE_LOADED);
    }
    /* another key in the same file survives a second save; the file has no leftovers */
    symmem_coll_tuning_t other;
    symmem_coll_tune_init(&other, "other-key", &f);
    CHECK_OK(symmem_coll_tune_set(&other, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_STAGED));
    CHECK_OK(symmem_coll_tune_save(&other, path));
    symmem_coll_tuning_t again;
    symmem_coll_tune_init(&again, "lab-key", &f);
    CHECK_OK(symmem_coll_tune_load(&again, path));
    CHECK(topo_table_hash(&again.table) == jobs[0].res.hash);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test $(ls '%s' | grep -c tmp) -eq 0", dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* ---- forms, the bisection, declared sizes, the key ----------------------------------------------------------- */
/* A call with an ordinary input never takes a rule measured with a symmetric one; a symmetric output borrows the
 * rules of its input's form; a form without rules of its own or to borrow takes the model's. */
static void ordinary_call_never_takes_a_symmetric_rule(void)
{
    const topo_choice_facts_t f = lab_facts();
    symmem_coll_tuning_t tu;
    symmem_coll_tune_init(&tu, "k", &f);
    const symmem_algo_t model = topo_table_lookup(&tu.defaults, SYMMEM_COLL_ALL_REDUCE, 64 * KIB);
    const symmem_algo_t other = model == SYMMEM_ALGO_STAGED ? SYMMEM_ALGO_COPY_ENGINE : SYMMEM_ALGO_STAGED;
    CHECK(topo_table_add_form(&tu.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC, SIZE_MAX, other) == 0);
    CHECK(topo_table_add_form(&tu.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC_INPUT, SIZE_MAX, other) == 0);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 64 * KIB) == model);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC_OUTPUT, 64 * KIB) == model);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC_INPUT, 64 * KIB) == other);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC, 64 * KIB) == other);
    /* the ordinary form's rules: a symmetric output borrows them, a symmetric input does not */
    tu.table.nrules = 0;
    CHECK(topo_table_add_form(&tu.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, SIZE_MAX, other) == 0);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 64 * KIB) == other);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC_OUTPUT, 64 * KIB) == other);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC_INPUT, 64 * KIB) == model);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC, 64 * KIB) == model);
    /* rules of every form (an older file's, symmem_coll_tune_set's) answer for each form without its own */
    CHECK_OK(symmem_coll_tune_set(&tu, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PULL));
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC, 64 * KIB) == SYMMEM_ALGO_TWOSHOT_PULL);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 64 * KIB) == other);
}

/* The key holds what changes the ranking: a changed grid (the residency rules, SYMMEM_CLUSTER_ROOM,
 * SYMMEM_GRID_SHARE, SYMMEM_MAX_BLOCKS all act through it), block size, workspace, placement or kernels is
 * another section, so a table measured under other settings is never loaded and the next init measures. */
static void key_changes_with_what_changes_the_ranking(void)
{
    char base[192], k[192];
    symmem_coll_tune_key(base, sizeof base, "n4.rpd4.sm90x132.nvlink.0", 0, 25, 64, (size_t)64 << 20, "0123abcd");
    symmem_coll_tune_key(k, sizeof k, "n4.rpd4.sm90x132.nvlink.0", 0, 25, 64, (size_t)64 << 20, "0123abcd");
    CHECK(strcmp(base, k) == 0 && strstr(base, "n4.rpd4.sm90x132.nvlink.0.") == base);
    symmem_coll_tune_key(k, sizeof k, "n4.rpd4.sm90x132.nvlink.0", 0, 24, 64, (size_t)64 << 20, "0123abcd");
    CHECK(strcmp(base, k) != 0);
    symmem_coll_tune_key(k, sizeof k, "n4.rpd4.sm90x132.nvlink.0", 0, 25, 128, (size_t)64 << 20, "0123abcd");
    CHECK(strcmp(base, k) != 0);
    symmem_coll_tune_key(k, sizeof k, "n4.rpd4.sm90x132.nvlink.0", 0, 25, 64, (size_t)32 << 20, "0123abcd");
    CHECK(strcmp(base, k) != 0);
    symmem_coll_tune_key(k, sizeof k, "n4.rpd4.sm90x132.nvlink.0", 1, 25, 64, (size_t)64 << 20, "0123abcd");
    CHECK(strcmp(base, k) != 0);
    /* another build of the same version whose kernels or plan differ */
    symmem_coll_tune_key(k, sizeof k, "n4.rpd4.sm90x132.nvlink.0", 0, 25, 64, (size_t)64 << 20, "0123abce");
    CHECK(strcmp(base, k) != 0);
    /* this build's hash: 8 hex digits, in the key the init uses */
    const char *kh = symmem_coll_kernels_hash();
    CHECK(strlen(kh) == 8 && strspn(kh, "0123456789abcdef") == 8);
    symmem_coll_tune_key(k, sizeof k, "fp", 0, 25, 64, (size_t)64 << 20, kh);
    char tail[16];
    snprintf(tail, sizeof tail, ".k%s", kh);
    CHECK(strlen(k) > strlen(tail) && strcmp(k + strlen(k) - strlen(tail), tail) == 0);
    /* the room changes the grid the key holds: 4 ranks on an H200 (132 SMs, 8 GPCs) at room 8 and at room 0 */
    const int room8 = symmem_coll_grid_rule_room(1, 132, 4, 75, 0, 8, 8);
    const int room0 = symmem_coll_grid_rule_room(1, 132, 4, 75, 0, 0, 8);
    CHECK(room8 != room0);
    char a[192], b[192];
    symmem_coll_tune_key(a, sizeof a, "fp", 0, room8, 64, (size_t)64 << 20, "0123abcd");
    symmem_coll_tune_key(b, sizeof b, "fp", 0, room0, 64, (size_t)64 << 20, "0123abcd");
    CHECK(strcmp(a, b) != 0);
    /* a table saved under one key is not loaded under the other: the next init finds no table and measures */
    char dir[] = "/tmp/symmem-key-XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tune.txt", dir);
    const topo_choice_facts_t f = lab_facts();
    symmem_coll_tuning_t saved, later;
    symmem_coll_tune_init(&saved, a, &f);
    CHECK(topo_table_add_form(&saved.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, SIZE_MAX,
                              SYMMEM_ALGO_STAGED) == 0);
    CHECK_OK(symmem_coll_tune_save(&saved, path));
    symmem_coll_tune_init(&later, b, &f);
    CHECK_OK(symmem_coll_tune_load(&later, path));
    CHECK(later.table.nrules == 0);
    symmem_autotune_state_t st;
    const char *why;
    const symmem_autotune_wish_in_t in = {SYMMEM_AUTOTUNE_AUTO, N, 0, later.table.nrules > 0, 0, 0, 0};
    CHECK(symmem_autotune_wish(&in, &st, &why) == 1);
    symmem_coll_tune_init(&later, a, &f);
    CHECK_OK(symmem_coll_tune_load(&later, path));
    CHECK(later.table.nrules > 0 && topo_table_lookup_form(&later.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY,
                                                           1 * KIB) == SYMMEM_ALGO_STAGED);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* Rules of each form round-trip through the file, spelled op.form; a rule without a form is every form's. */
static void forms_round_trip_through_the_file(void)
{
    char dir[] = "/tmp/symmem-forms-XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/tune.txt", dir);
    const topo_choice_facts_t f = lab_facts();
    symmem_coll_tuning_t tu, back;
    symmem_coll_tune_init(&tu, "key", &f);
    CHECK(topo_table_add_form(&tu.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 12288, SYMMEM_ALGO_ONESHOT_PUSH) == 0);
    CHECK(topo_table_add_form(&tu.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, SIZE_MAX, SYMMEM_ALGO_STAGED) == 0);
    CHECK(topo_table_add_form(&tu.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC_INPUT, SIZE_MAX,
                              SYMMEM_ALGO_TWOSHOT_PULL) == 0);
    CHECK(topo_table_add_form(&tu.table, SYMMEM_COLL_REDUCE_SCATTER, TOPO_FORM_ANY, SIZE_MAX, SYMMEM_ALGO_STAGED) == 0);
    CHECK_OK(symmem_coll_tune_save(&tu, path));
    symmem_coll_tune_init(&back, "key", &f);
    CHECK_OK(symmem_coll_tune_load(&back, path));
    /* the save adds the defaults for the op without rules (all-gather), every form */
    CHECK(topo_table_has_form(&back.table, SYMMEM_COLL_ALL_GATHER, TOPO_FORM_ANY));
    for (int i = 0; i < tu.table.nrules; i++) {
        const topo_rule_t *r = &tu.table.rules[i];
        CHECK(topo_table_lookup_form(&back.table, (symmem_coll_kind_t)r->kind, r->form, r->max_bytes) == r->algo);
    }
    FILE *fp = fopen(path, "r");
    CHECK(fp != NULL);
    char text[8192];
    const size_t got = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
    text[got] = '\0';
    if (fp) fclose(fp);
    CHECK(strstr(text, "all_reduce.ord") && strstr(text, "all_reduce.sym_in") && strstr(text, "\nreduce_scatter "));
    /* an unknown form is an error naming the line */
    fp = fopen(path, "w");
    CHECK(fp != NULL);
    if (fp) fprintf(fp, "[key]\nall_reduce.nope 1024 staged\n"), fclose(fp);
    CHECK(symmem_coll_tune_load(&back, path) == SYMMEM_INVALID_ARGUMENT && strstr(symmem_last_error(), ":2:") &&
          strstr(symmem_last_error(), "nope"));
    symmem_clear_error();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

/* The builder: bounds at geometric midpoints, a declared point holding exactly its size, the model above. */
static void rules_from_points(void)
{
    const topo_choice_facts_t f = lab_facts();
    topo_choice_t c;
    topo_choose(&f, &c);
    const symmem_autotune_point_t pts[] = {{64 * KIB, SYMMEM_ALGO_TWOSHOT_LAMPORT, 0},
                                           {16 * KIB, SYMMEM_ALGO_ONESHOT_PUSH, 0}, /* any order */
                                           {32 * KIB, SYMMEM_ALGO_TWOSHOT_LAMPORT, 0},
                                           {48 * KIB, -1, 0}, /* nothing ran: no point */
                                           {96 * KIB, SYMMEM_ALGO_STAGED, 1},
                                           {128 * KIB, SYMMEM_ALGO_TWOSHOT_LAMPORT, 0}};
    topo_table_t t = {0};
    CHECK(symmem_autotune_rules(&t, &c.table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, pts, 6) == 0);
    const int F = SYMMEM_FORM_ORDINARY;
    CHECK(topo_table_lookup_form(&t, SYMMEM_COLL_ALL_REDUCE, F, 1) == SYMMEM_ALGO_ONESHOT_PUSH);
    CHECK(topo_table_lookup_form(&t, SYMMEM_COLL_ALL_REDUCE, F, symmem_autotune_mid(16 * KIB, 32 * KIB)) ==
          SYMMEM_ALGO_ONESHOT_PUSH);
    CHECK(topo_table_lookup_form(&t, SYMMEM_COLL_ALL_REDUCE, F, symmem_autotune_mid(16 * KIB, 32 * KIB) + 1) ==
          SYMMEM_ALGO_TWOSHOT_LAMPORT);
    CHECK(topo_table_lookup_form(&t, SYMMEM_COLL_ALL_REDUCE, F, 96 * KIB - 1) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    CHECK(topo_table_lookup_form(&t, SYMMEM_COLL_ALL_REDUCE, F, 96 * KIB) == SYMMEM_ALGO_STAGED);
    CHECK(topo_table_lookup_form(&t, SYMMEM_COLL_ALL_REDUCE, F, 96 * KIB + 1) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    const size_t top = symmem_autotune_mid(128 * KIB, 256 * KIB);
    CHECK(topo_table_lookup_form(&t, SYMMEM_COLL_ALL_REDUCE, F, top) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    CHECK(topo_table_lookup_form(&t, SYMMEM_COLL_ALL_REDUCE, F, SIZE_MAX) ==
          topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX));
    /* no rule of another form, op or of every form */
    CHECK(!topo_table_has_form(&t, SYMMEM_COLL_ALL_REDUCE, TOPO_FORM_ANY) &&
          !topo_table_has_form(&t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC) &&
          !topo_table_has_form(&t, SYMMEM_COLL_REDUCE_SCATTER, F));
    CHECK(symmem_autotune_pinned(&t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 96 * KIB));
    CHECK(!symmem_autotune_pinned(&t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC, 96 * KIB));
    /* the midpoint: floor of the geometric mean, inside [lo, hi) */
    CHECK(symmem_autotune_mid(64 * KIB, 128 * KIB) == 92681 && symmem_autotune_mid(8, 9) == 8);
    CHECK(symmem_autotune_mid((size_t)1 << 40, (size_t)1 << 42) == (size_t)1 << 41);
}

/* The sizes the bisection measures: between neighbours with different winners, farther apart than the ratio,
 * rounded to the op's unit; the two winners are the candidates. */
static void cuts_between_different_winners(void)
{
    const symmem_autotune_point_t pts[] = {{32 * KIB, SYMMEM_ALGO_ONESHOT_PUSH, 0},
                                           {64 * KIB, SYMMEM_ALGO_ONESHOT_PUSH, 0},
                                           {128 * KIB, SYMMEM_ALGO_STAGED, 0},
                                           {256 * KIB, SYMMEM_ALGO_STAGED, 0},
                                           {270 * KIB, SYMMEM_ALGO_TWOSHOT_PULL, 0}}; /* closer than 1.15 */
    uint64_t mid[8];
    int32_t a[8], b[8];
    CHECK(symmem_autotune_cuts(pts, 5, 1.15, 64, mid, a, b, 8) == 1);
    CHECK(mid[0] == 92681 / 64 * 64 && a[0] == SYMMEM_ALGO_ONESHOT_PUSH && b[0] == SYMMEM_ALGO_STAGED);
    CHECK(symmem_autotune_cuts(pts, 5, 1.01, 64, mid, a, b, 8) == 2 && mid[1] > 256 * KIB && mid[1] < 270 * KIB);
    CHECK(symmem_autotune_cuts(pts, 5, 1.01, 64, mid, a, b, 1) == 1); /* at most `max` */
}

/* The run bisects where winners change: with a cut at 80 KiB in every op and form, two rounds measure between 64
 * and 128 KiB twice, and the table puts the change between the measured sizes on either side of the cut. */
static void bisection_run(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    cut_bytes = 80 * KIB;
    refine_rounds = 2;
    run_all(comms, jobs, 1e9, NULL, -1, -1);
    refine_rounds = 0;
    cut_bytes = 0;
    CHECK(jobs[0].res.refined >= 2);
    const symmem_coll_tuning_t *t = &jobs[0].tu;
    /* all-reduce, ordinary form: every size up to the cut takes the lower winner, every size above 92681 B (the
     * first midpoint, measured above the cut) the upper one; between the last two measured sizes the bound */
    const symmem_algo_t below = symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 64 * KIB);
    const symmem_algo_t above = symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 128 * KIB);
    CHECK(below != above);
    CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 72 * KIB) == below);
    CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 96 * KIB) == above);
    CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 112 * KIB) == above);
    /* the two rounds narrowed it: the bound lies within 2^(1/4) of the cut */
    size_t bound = 0;
    for (int i = 0; i < t->table.nrules; i++) {
        const topo_rule_t *r = &t->table.rules[i];
        if (r->kind == SYMMEM_COLL_ALL_REDUCE && r->form == SYMMEM_FORM_ORDINARY && r->algo == below &&
            r->max_bytes >= 64 * KIB && r->max_bytes < 128 * KIB)
            bound = r->max_bytes;
    }
    printf("  bound %zu for a cut at %zu\n", bound, (size_t)80 * KIB);
    CHECK(bound > 80 * KIB / 1.19 && bound < 80 * KIB * 1.19);
}

/* Declared sizes: measured once, each pinned to its own winner, the sizes around them unchanged; a second call
 * measures nothing; ranks that pass other sizes all fail. */
typedef struct pin_job {
    symmem_comm_t comm;
    symmem_coll_tuning_t tu;
    fake_t fake;
    const size_t *sizes;
    int n;
    symmem_autotune_result_t res;
    symmem_status_t st;
} pin_job_t;

static void *pin_run(void *p)
{
    pin_job_t *j = p;
    const topo_choice_facts_t f = lab_facts();
    topo_cost_machine_t m;
    topo_choice_machine(&f, &m);
    int av[SYMMEM_ALGO_COUNT];
    all_available(av);
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg);
    cfg.skip_factor = 0.0;
    const symmem_autotune_ops_t ops = {fake_measure, fake_elapsed, &j->fake};
    j->st = symmem_autotune_pins(j->comm, &j->tu, &m, av, &ops, &cfg, j->sizes, j->n,
                                 SYMMEM_FORM_BIT(SYMMEM_FORM_ORDINARY), &j->res);
    return NULL;
}

static void pins_all(symmem_comm_t *comms, pin_job_t *jobs, const size_t *sizes, int n, const size_t *odd_sizes)
{
    pthread_t th[N];
    for (int r = 0; r < N; r++) {
        jobs[r].comm = comms[r];
        jobs[r].fake = (fake_t){r, 0, 0.0, -1, {0}, {0}};
        jobs[r].sizes = r == 2 && odd_sizes ? odd_sizes : sizes;
        jobs[r].n = n;
        CHECK(pthread_create(&th[r], NULL, pin_run, &jobs[r]) == 0);
    }
    for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
}

static void declared_sizes_run(symmem_comm_t *comms)
{
    static pin_job_t jobs[N];
    const topo_choice_facts_t f = lab_facts();
    for (int r = 0; r < N; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        symmem_coll_tune_init(&jobs[r].tu, "lab-key", &f);
    }
    const symmem_coll_tuning_t before = jobs[0].tu;
    const size_t sizes[] = {12 * KIB, 96 * KIB, 112 * KIB, 12 * KIB /* twice: once */, 0 /* skipped */};
    designated_winners = 1;
    pins_all(comms, jobs, sizes, 5, NULL);
    for (int r = 0; r < N; r++) {
        CHECK_OK(jobs[r].st);
        CHECK(jobs[r].res.agreed && jobs[r].res.steps == 3);
    }
    const symmem_coll_tuning_t *t = &jobs[0].tu;
    for (int i = 0; i < 3; i++) {
        symmem_autotune_step_t st;
        topo_cost_machine_t m;
        topo_choice_machine(&f, &m);
        int av[SYMMEM_ALGO_COUNT];
        all_available(av);
        symmem_autotune_cfg_t cfg;
        symmem_autotune_cfg_default(&cfg);
        symmem_autotune_plan_step(&m, &before.defaults, av, &cfg, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY,
                                  sizes[i], &st);
        const symmem_algo_t want = (symmem_algo_t)st.algo[designated(&st)];
        CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, sizes[i]) == want);
        /* the neighbours keep what they had (the model's: nothing was tuned before) */
        for (int d = -64; d <= 64; d += 128)
            CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, sizes[i] + d) ==
                  symmem_coll_choose(&before, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, sizes[i] + d));
        CHECK(symmem_autotune_pinned(&t->table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, sizes[i]));
    }
    /* other forms are not touched */
    CHECK(!topo_table_has_form(&t->table, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_SYMMETRIC));
    /* again: nothing left to measure */
    const uint64_t h = topo_table_hash(&t->table);
    pins_all(comms, jobs, sizes, 5, NULL);
    for (int r = 0; r < N; r++) {
        CHECK_OK(jobs[r].st);
        CHECK(jobs[r].res.steps == 0 && jobs[r].fake.steps == 0);
    }
    CHECK(topo_table_hash(&jobs[0].tu.table) == h);
    /* one rank declares other sizes: every rank fails, naming it, and no table changes */
    const size_t odd[] = {12 * KIB, 96 * KIB, 112 * KIB, 12 * KIB, 48 * KIB};
    pins_all(comms, jobs, sizes, 5, odd);
    designated_winners = 0;
    for (int r = 0; r < N; r++) {
        CHECK(jobs[r].st == SYMMEM_INVALID_USAGE);
        CHECK(topo_table_hash(&jobs[r].tu.table) == h);
    }
}

/* symmem-bench --tune and the autotune make the same table of the same times: the autotune's rules of one op
 * and form equal symmem_autotune_table_from_times (what --tune calls) given the slowest rank's times. */
static void tuner_and_autotune_agree(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    static symmem_autotune_plan_t plan;
    symmem_coll_tuning_t tu;
    run_all_plan(&plan, &tu);
    skip_factor = 0.0;
    run_all(comms, jobs, 1e9, NULL, -1, -1);
    skip_factor = 2.0;
    static uint64_t bytes[SYMMEM_AUTOTUNE_MAX_STEPS];
    static double us[SYMMEM_AUTOTUNE_MAX_STEPS][SYMMEM_ALGO_COUNT];
    int n = 0;
    for (int s = 0; s < plan.nsteps; s++) {
        const symmem_autotune_step_t *st = &plan.step[s];
        if (st->kind != SYMMEM_COLL_ALL_REDUCE || st->form != SYMMEM_FORM_ORDINARY) continue;
        bytes[n] = st->bytes;
        for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) us[n][a] = -1.0;
        for (int i = 0; i < st->ncand; i++) {
            double t = 0.0;
            for (int r = 0; r < N && t >= 0.0; r++) {
                const double v = fake_us(r, st, i);
                t = v > 0.0 ? (v > t ? v : t) : -1.0;
            }
            us[n][st->algo[i]] = t;
        }
        n++;
    }
    static topo_table_t want;
    want.nrules = 0;
    symmem_autotune_cfg_t cfg;
    symmem_autotune_cfg_default(&cfg);
    CHECK(symmem_autotune_table_from_times(&want, &tu.defaults, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, bytes,
                                           (const double (*)[SYMMEM_ALGO_COUNT])us, n, cfg.tie) == 0);
    const topo_table_t *got = &jobs[0].tu.table;
    int k = 0;
    for (int i = 0; i < got->nrules; i++) {
        const topo_rule_t *r = &got->rules[i];
        if (r->kind != SYMMEM_COLL_ALL_REDUCE || r->form != SYMMEM_FORM_ORDINARY) continue;
        CHECK(k < want.nrules && want.rules[k].max_bytes == r->max_bytes && want.rules[k].algo == r->algo);
        k++;
    }
    CHECK(k == want.nrules && k > 1);
}

/* Each case in its own process (test_run_all): host-backend communicators of N ranks, one thread each. */
static void with_comms(void (*fn)(symmem_comm_t *))
{
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_HOST;
    symmem_comm_t comms[N];
    CHECK_OK(symmem_comm_init_all(N, NULL, &o, comms));
    fn(comms);
    for (int r = 0; r < N; r++) CHECK_OK(symmem_comm_destroy(comms[r]));
}

static void agrees_on_the_slowest_rank(void) { with_comms(run_agrees_on_the_slowest_rank); }
static void budget_stops_at_once(void) { with_comms(budget_stops_every_rank_at_once); }
static void failing_rank_stops(void) { with_comms(failing_rank_stops_every_rank); }
static void round_trip(void) { with_comms(saved_table_round_trips); }
static void table_from_winners(void) { with_comms(table_from_winners_run); }
static void run_skips(void) { with_comms(run_skips_what_was_slow_at_half_the_size); }
static void bisection_measures_the_cut(void) { with_comms(bisection_run); }
static void declared_sizes_are_pinned(void) { with_comms(declared_sizes_run); }
static void tune_and_autotune_same_table(void) { with_comms(tuner_and_autotune_agree); }

int main(void)
{
    static const test_case_t cases[] = {
        {"measures_only_where_it_may_and_must", measures_only_where_it_may_and_must, 10},
        {"mode_read_in_any_case_else_auto", mode_read_in_any_case_else_auto, 10},
        {"plan_keeps_model_choice_and_prunes", plan_keeps_model_choice_and_prunes, 10},
        {"winner_rules", winner_rules, 10},
        {"step_line_names_times_skips_and_choice", step_line_names_times_skips_and_choice, 10},
        {"graph_holds_the_ops_that_fit_its_time", graph_holds_the_ops_that_fit_its_time, 10},
        {"skips_what_was_over_factor_slower_at_half_the_size", skips_what_was_over_factor_slower_at_half_the_size, 10},
        {"run_skips_what_was_slow_at_half_the_size", run_skips, 60},
        {"agrees_on_the_slowest_rank", agrees_on_the_slowest_rank, 60},
        {"budget_stops_at_once", budget_stops_at_once, 60},
        {"failing_rank_stops", failing_rank_stops, 60},
        {"saved_table_round_trips", round_trip, 60},
        {"table_from_winners", table_from_winners, 60},
        {"table_logged_in_whole_units_last_rule_above", table_logged_in_whole_units_last_rule_above, 10},
        {"ordinary_call_never_takes_a_symmetric_rule", ordinary_call_never_takes_a_symmetric_rule, 10},
        {"key_changes_with_what_changes_the_ranking", key_changes_with_what_changes_the_ranking, 10},
        {"forms_round_trip_through_the_file", forms_round_trip_through_the_file, 10},
        {"rules_from_points", rules_from_points, 10},
        {"cuts_between_different_winners", cuts_between_different_winners, 10},
        {"bisection_measures_the_cut", bisection_measures_the_cut, 60},
        {"declared_sizes_are_pinned", declared_sizes_are_pinned, 60},
        {"tune_and_autotune_same_table", tune_and_autotune_same_table, 60},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
