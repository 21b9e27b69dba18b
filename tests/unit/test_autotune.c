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

#include "boot/comm_state.h"
#include "collectives/autotune.h"
#include "collectives/tune.h"
#include "symmem/symmem.h"
#include "test_util.h"
#include "topology/choice.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
enum { N = 4 };

/* The lab of issue 29 at N ranks: one GPU, host memory, the link's figures shared by the ranks. */
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
static void wish_rules(void)
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
    CHECK(symmem_autotune_wish(&in, &st, &why) == 0);
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
    symmem_autotune_cfg_default(&cfg);
    int av[SYMMEM_ALGO_COUNT];
    all_available(av);
    symmem_autotune_plan_t p;
    symmem_autotune_plan(&m, &c.table, av, &cfg, &p);
    CHECK(p.nsteps == 3 * 13); /* 1 KiB .. 4 MiB, every op */
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
        pruned += st->ncand < SYMMEM_ALGO_COUNT - 1;
        if (s > 0 && st->kind == p.step[s - 1].kind) CHECK(st->bytes == 2 * p.step[s - 1].bytes);
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

static void step_words(void)
{
    symmem_autotune_step_t st;
    memset(&st, 0, sizeof st);
    st.kind = SYMMEM_COLL_ALL_REDUCE;
    st.bytes = 2 * MIB;
    st.ncand = 3;
    st.algo[0] = SYMMEM_ALGO_STAGED, st.algo[1] = SYMMEM_ALGO_COPY_ENGINE, st.algo[2] = SYMMEM_ALGO_ISLAND;
    const double t[3] = {1048.61, 1010.24, -1.0};
    char text[512];
    symmem_autotune_step_describe(&st, t, SYMMEM_ALGO_COPY_ENGINE, SYMMEM_ALGO_TWOSHOT_PUSH, text, sizeof text);
    CHECK(strcmp(text, "all_reduce 2 MiB: staged 1048.6 us, copy_engine 1010.2 us, island not run -> copy_engine "
                       "(the model: twoshot_push)") == 0);
    const double none[3] = {-1.0, -1.0, -1.0};
    symmem_autotune_step_describe(&st, none, -1, SYMMEM_ALGO_TWOSHOT_PUSH, text, sizeof text);
    CHECK(strstr(text, "-> nothing ran (the model: twoshot_push)") != NULL);
    char small[24]; /* truncated, never overrun */
    symmem_autotune_step_describe(&st, t, SYMMEM_ALGO_COPY_ENGINE, SYMMEM_ALGO_TWOSHOT_PUSH, small, sizeof small);
    CHECK(strlen(small) == sizeof small - 1 && strncmp(small, text, sizeof small - 1) == 0);
}

/* ---- the collective run with injected times ---------------------------------------------------------------- */
typedef struct fake {
    int rank;
    int steps;         /* steps measured so far */
    double ms_per_step; /* this rank's clock */
    int fail_at;       /* measure returns -1 at this step (-1: never) */
} fake_t;

/* The injected time of `algo` at `bytes` on `rank`: the model's prediction, except that rank 3 is slow with
 * twoshot_push at 64 KiB all-reduce (so only the slowest rank's view picks the winner there) and twoshot_pull
 * never runs on rank 1. */
static double fake_us(int rank, const symmem_autotune_step_t *st, int i)
{
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
    for (int i = 0; i < st->ncand; i++) us[i] = fake_us(f->rank, st, i);
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
        jobs[r].fake = (fake_t){r, 0, ms_per_step ? ms_per_step[r] : 0.0, r == fail_rank ? fail_at : -1};
        symmem_autotune_cfg_default(&jobs[r].cfg);
        jobs[r].cfg.budget_ms = budget_ms;
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
    CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, 64 * KIB) != SYMMEM_ALGO_TWOSHOT_PUSH);
    /* twoshot_pull did not run on rank 1: it wins nowhere */
    for (int i = 0; i < t->table.nrules; i++) CHECK(t->table.rules[i].algo != SYMMEM_ALGO_TWOSHOT_PULL);
    /* elsewhere the injected times are the model's: its choice among what ran (ties keep the model's) */
    const symmem_algo_t a1 = symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, 4 * MIB);
    CHECK(a1 != SYMMEM_ALGO_AUTO && a1 != SYMMEM_ALGO_TWOSHOT_PULL);
    /* every op has rules; above 4 MiB the model's */
    for (int k = 0; k <= SYMMEM_COLL_ALL_GATHER; k++)
        CHECK(topo_table_lookup(&t->table, (symmem_coll_kind_t)k, SIZE_MAX) ==
              topo_table_lookup(&t->defaults, (symmem_coll_kind_t)k, SIZE_MAX));
    char text[1024];
    symmem_autotune_describe(&t->table, text, sizeof text);
    printf("  tuned: %s\n", text);
    CHECK(strstr(text, "all_reduce") && strstr(text, "reduce_scatter") && strstr(text, "all_gather"));
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
    CHECK(topo_table_lookup(&t->table, SYMMEM_COLL_REDUCE_SCATTER, 4 * KIB) == SYMMEM_ALGO_AUTO);
    CHECK(symmem_coll_choose(t, SYMMEM_COLL_ALL_REDUCE, 4 * MIB) ==
          topo_table_lookup(&t->defaults, SYMMEM_COLL_ALL_REDUCE, 4 * MIB));
}

static void failing_rank_stops_every_rank(symmem_comm_t *comms)
{
    static rank_job_t jobs[N];
    run_all(comms, jobs, 1e9, NULL, 1, 3);
    CHECK(jobs[0].res.failed && jobs[0].res.steps == 4); /* steps 0..2 decided, step 3 lost on every rank */
    for (int r = 0; r < N; r++) CHECK(jobs[r].res.failed && (r == 1 || jobs[r].fake.steps == 4));
    CHECK(topo_table_lookup(&jobs[0].tu.table, SYMMEM_COLL_ALL_REDUCE, 1 * KIB) != SYMMEM_ALGO_AUTO);
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

int main(void)
{
    static const test_case_t cases[] = {
        {"wish_rules", wish_rules, 10},
        {"plan_keeps_model_choice_and_prunes", plan_keeps_model_choice_and_prunes, 10},
        {"winner_rules", winner_rules, 10},
        {"step_words", step_words, 10},
        {"agrees_on_the_slowest_rank", agrees_on_the_slowest_rank, 60},
        {"budget_stops_at_once", budget_stops_at_once, 60},
        {"failing_rank_stops", failing_rank_stops, 60},
        {"saved_table_round_trips", round_trip, 60},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
