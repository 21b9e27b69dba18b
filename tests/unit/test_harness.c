/* The harness's host side (harness/: the one rank launcher and the collective tests' per-case runner),
 * without a GPU: cc_spawn's exit accounting (all passed, all skipped, a mixed skip, a failure, a rank
 * killed by a signal, the overall timeout, the others killed after a failure), cc_run_cases's counting
 * and its stop after a fatal case, and the sum tolerance of cc_elem_ok against the rounding the island
 * schedule does. */
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "values.h"
#include "test_util.h"

static void exit_with(int proc, void *arg)
{
    const int *codes = arg;
    _exit(codes[proc]);
}

static void spawn_exit_codes(void)
{
    int ok[3] = {0, 0, 0}, skip[2] = {77, 77}, mixed[2] = {0, 77}, fail[3] = {0, 3, 0};
    CHECK(cc_spawn(3, exit_with, ok, 0) == 0);
    CHECK(cc_spawn(2, exit_with, skip, 0) == CC_EXIT_SKIP);
    CHECK(cc_spawn(2, exit_with, mixed, 0) == 1); /* some ranks skipped, the others ran: inconsistent */
    CHECK(cc_spawn(3, exit_with, fail, 0) == 1);
    CHECK(cc_spawn(0, exit_with, ok, 0) == 1);
    CHECK(cc_spawn(CC_SPAWN_MAX + 1, exit_with, ok, 0) == 1);
}

static void crash(int proc, void *arg)
{
    (void)arg;
    if (proc == 1) abort();
}

static void spawn_signal_fails(void) { CHECK(cc_spawn(2, crash, NULL, 0) == 1); }

static void hang(int proc, void *arg)
{
    (void)proc;
    (void)arg;
    sleep(60);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static void spawn_timeout_kills(void)
{
    const double t0 = now_s();
    CHECK(cc_spawn(2, hang, NULL, 1) == 1);
    CHECK(now_s() - t0 < 10);
}

/* Rank 0 fails at once, rank 1 would sleep for a minute: it is killed 20 s after the failure. */
static void fail_or_hang(int proc, void *arg)
{
    (void)arg;
    if (proc == 0) _exit(1);
    sleep(60);
}

static void spawn_failure_kills_the_rest(void)
{
    const double t0 = now_s();
    CHECK(cc_spawn(2, fail_or_hang, NULL, 0) == 1);
    CHECK(now_s() - t0 < 40);
}

static void gpu_count_is_probed(void) { CHECK(cc_probe_gpu_count() >= 0); }

/* ---- cc_run_cases on an in-process context (one process: no channel) ---------------------------------- */
static int calls[4];
static int case_fn(cc_ctx_t *ctx, void *arg, int param, int *fatal)
{
    (void)ctx;
    const int *outcome = arg; /* per param: 0 pass, 1 fail, 2 fatal */
    calls[param]++;
    if (outcome[param] == 2) *fatal = 1;
    return outcome[param] != 0;
}

static void run_cases_counts(void)
{
    cc_ctx_t ctx = {0};
    ctx.name = "test_harness";
    ctx.nranks = ctx.nlocal = ctx.nprocs = 1;
    const cc_case_t cases[] = {{"a", case_fn, 0}, {"b", case_fn, 1}, {"c", case_fn, 2}, {"d", case_fn, 3}};
    int pass_all[4] = {0, 0, 0, 0}, one_fails[4] = {0, 1, 0, 0}, fatal_third[4] = {0, 0, 2, 0};
    CHECK(cc_run_cases(&ctx, cases, 4, pass_all) == 0 && !ctx.fatal);
    CHECK(cc_run_cases(&ctx, cases, 4, one_fails) == 1 && !ctx.fatal);
    for (int k = 0; k < 4; k++) calls[k] = 0;
    CHECK(cc_run_cases(&ctx, cases, 4, fatal_third) == 1 && ctx.fatal);
    CHECK(calls[2] == 1 && calls[3] == 0); /* the run stops at the fatal case */
}

/* The island all-reduce of 16-bit types rounds each island's partial sum to the dtype, then sums the
 * partials in fp32 and rounds once more (collectives/island.c). Every such result of the test data must
 * pass, at every split the GPU tests force; and a result just outside the bound must fail, so the bound
 * is not loose enough to hide a wrong sum. (Half this partial term is too tight: 0.15-0.45% of the bf16
 * island results of the test data fall outside it.) */
static double to_dtype(double v, symmem_dtype_t dt)
{
    uint16_t h;
    cc_store(&h, dt, 0, v);
    return cc_load(&h, dt, 0);
}

static void sum_tolerance_covers_island_partials(void)
{
    /* island of each rank, for the splits coll_sweep_island_* force */
    static const int8_t splits[][8] = {{0, 1, 1, -1},          {0, 0, 1, 1, 1, -1},   {0, 0, 0, 1, 1, 1, -1},
                                       {0, 0, 1, 1, 2, 2, -1}, {0, 0, 0, 0, 1, 1, 1, 1}, {0, 0, 1, 1, 2, 2, 3, 3},
                                       {0, 0, 0, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 0, 0, 1, 1}};
    const symmem_dtype_t dts[] = {SYMMEM_BFLOAT16, SYMMEM_FLOAT16};
    for (int d = 0; d < 2; d++)
        for (size_t sp = 0; sp < sizeof splits / sizeof *splits; sp++) {
            int n = 0, k = 0;
            while (n < 8 && splits[sp][n] >= 0) k = splits[sp][n] + 1 > k ? splits[sp][n] + 1 : k, n++;
            size_t bad = 0, beyond_ok = 0;
            for (uint64_t i = 0; i < 20000; i++) {
                double in[8], ref = 0, sabs = 0;
                float part[4] = {0, 0, 0, 0}, acc = 0;
                for (int r = 0; r < n; r++) {
                    in[r] = cc_value(7 + sp, r, i, dts[d]);
                    part[splits[sp][r]] += (float)in[r];
                    ref += in[r];
                    sabs += fabs(in[r]);
                }
                for (int j = 0; j < k; j++) acc += (float)to_dtype(part[j], dts[d]);
                bad += !cc_elem_ok(to_dtype(acc, dts[d]), in, n, SYMMEM_OP_SUM, dts[d], NULL);
                /* 2.5 times the partial term plus 2^-8 |ref| away from the reference: outside the bound */
                const double u = ldexp(1.0, dts[d] == SYMMEM_FLOAT16 ? -11 : -8);
                beyond_ok += cc_elem_ok(ref + 2.5 * u * sabs + ldexp(1.0, -8) * fabs(ref), in, n, SYMMEM_OP_SUM,
                                        dts[d], NULL);
            }
            CHECK(bad == 0);
            CHECK(beyond_ok == 0);
        }
}

int main(void)
{
    const test_case_t cases[] = {
        {"spawn_exit_codes", spawn_exit_codes, 30},
        {"spawn_signal_fails", spawn_signal_fails, 30},
        {"spawn_timeout_kills", spawn_timeout_kills, 30},
        {"spawn_failure_kills_the_rest", spawn_failure_kills_the_rest, 60},
        {"gpu_count_is_probed", gpu_count_is_probed, 30},
        {"run_cases_counts", run_cases_counts, 30},
        {"sum_tolerance_covers_island_partials", sum_tolerance_covers_island_partials, 30},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof *cases));
}
