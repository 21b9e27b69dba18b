/* The compressed wire (collectives/wire.h) on the CPU:
 *  - the quantizer's round trip at every group size and dtype: every value within half a step of its group,
 *    ties to even, the group's largest magnitude exact to a rounding, zeros, tiny groups, NaN and infinity;
 *  - which calls it serves and the threshold below which the exact path runs (and the settings' defaults);
 *  - that nothing but a call chooses it: AUTO's tables, the tuning file, the table API, the cost model;
 *  - the geometry of its quantized rounds;
 *  - the whole all-reduce as its kernel runs it (tests/wire_model.h) at 2..16 ranks, one island and several,
 *    on normal, heavy-tailed and TP-forward data: every rank's bytes identical, the documented bound held
 *    (and not so loose that a quarter of it would hold too), one island equal to an independent two-shot
 *    computation, NaN and infinity confined to their groups. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kinds.h"
#include "base/param.h"
#include "collectives/tune.h"
#include "collectives/wire.h"
#include "test_util.h"
#include "topology/cost.h"
#include "wire_model.h"

#define MIB ((size_t)1 << 20)

static const uint32_t groups[3] = {32, 64, 128};
static const symmem_dtype_t dtypes[2] = {SYMMEM_BFLOAT16, SYMMEM_FLOAT16};

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

/* Quantize one group as the kernel does (largest magnitude, scale, q) and dequantize it. */
static symmem_wire_scale_t trip(const float *x, int g, int *q, float *y)
{
    float amax = 0.0f;
    for (int k = 0; k < g; k++) amax = symmem_wire_amax(amax, fabsf(x[k]));
    const symmem_wire_scale_t s = symmem_wire_scale_of(amax);
    for (int k = 0; k < g; k++) {
        q[k] = symmem_wire_quant(x[k], s.inv);
        y[k] = symmem_wire_dequant(q[k], s.scale);
    }
    return s;
}

/* Random groups of every group size and dtype (values as the dtype holds them): each value within half a
 * step (amax / 254) plus the fp32 roundings of its group's largest magnitude; |q| <= 127; the largest
 * magnitude comes back as +-127 steps, within two fp32 roundings; the same input gives the same bits. */
static void round_trip_every_group_and_dtype(void)
{
    float x[128], y[128], y2[128];
    int q[128], q2[128];
    for (int gi = 0; gi < 3; gi++)
        for (int di = 0; di < 2; di++)
            for (int t = 0; t < 3000; t++) {
                const int g = (int)groups[gi];
                const symmem_dtype_t dt = dtypes[di];
                /* fp16: up to 300, so that the outliers (x100) stay finite */
                const double mag =
                    dt == SYMMEM_FLOAT16 ? pow(10.0, -4.0 + 6.5 * urand()) : pow(10.0, -30.0 + 60.0 * urand());
                for (int k = 0; k < g; k++) {
                    double v = (urand() - 0.5) * 2.0 * mag;
                    if (t % 3 == 1 && urand() < 0.05) v *= 100.0; /* outliers */
                    if (t % 3 == 2 && urand() < 0.3) v = 0.0;
                    x[k] = wm_to_f(dt, wm_from_f(dt, (float)v));
                }
                const symmem_wire_scale_t s = trip(x, g, q, y);
                float amax = 0.0f;
                for (int k = 0; k < g; k++) amax = fmaxf(amax, fabsf(x[k]));
                for (int k = 0; k < g; k++) {
                    CHECK(q[k] >= -127 && q[k] <= 127);
                    EXPECT_MSG(fabs((double)y[k] - x[k]) <=
                                   amax * (1.0 / 254 + 3e-7) + (amax < SYMMEM_WIRE_TINY ? SYMMEM_WIRE_TINY : 0.0f),
                               "G %d %s x %g y %g amax %g", g, symmem_dtype_name(dt), x[k], y[k], amax);
                    if (fabsf(x[k]) == amax && amax >= SYMMEM_WIRE_TINY) {
                        EXPECT(abs(q[k]) == 127);
                        EXPECT_MSG(fabs((double)fabsf(y[k]) - amax) <= amax * 2.5e-7, "%g %g", y[k], amax);
                    }
                }
                CHECK(!isnan(s.scale));
                trip(x, g, q2, y2);
                CHECK(memcmp(q, q2, sizeof(int) * (size_t)g) == 0 && memcmp(y, y2, sizeof(float) * (size_t)g) == 0);
            }
    CHECK(test_failures == 0);
}

/* Ties round to even; the bound's half step is tight (a value half a step off the grid loses exactly that);
 * zeros and signed zeros; groups below 2^-100 travel as zeros (and the rest of the range does not); fp16's
 * largest and bf16's subnormal-range values; a NaN or an infinity makes the whole group NaN. */
static void round_trip_edges(void)
{
    float x[32], y[32];
    int q[32];
    /* amax 127: the step is 1, x * inv is x exactly, so .5 values are ties */
    for (int k = 0; k < 32; k++) x[k] = 0.0f;
    x[0] = 127.0f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = -0.5f, x[5] = 0.5f, x[6] = 1.5f, x[7] = -0.0f;
    trip(x, 32, q, y);
    CHECK(q[0] == 127 && q[1] == 2 && q[2] == 4 && q[3] == -2 && q[4] == 0 && q[5] == 0 && q[6] == 2 && q[7] == 0);
    CHECK(y[0] == 127.0f && y[1] == 2.0f && fabsf(y[1] - x[1]) == 0.5f); /* the half step, exactly */
    /* all zeros */
    for (int k = 0; k < 32; k++) x[k] = k % 2 ? -0.0f : 0.0f;
    symmem_wire_scale_t s = trip(x, 32, q, y);
    CHECK(s.scale == 0.0f);
    for (int k = 0; k < 32; k++) CHECK(q[k] == 0 && y[k] == 0.0f);
    /* tiny: below 2^-100 zeros, at 2^-99 quantized */
    for (int k = 0; k < 32; k++) x[k] = ldexpf((float)(k + 1) / 32.0f, -101);
    trip(x, 32, q, y);
    for (int k = 0; k < 32; k++) CHECK(y[k] == 0.0f && fabsf(y[k] - x[k]) < SYMMEM_WIRE_TINY);
    for (int k = 0; k < 32; k++) x[k] = ldexpf((float)(k + 1) / 32.0f, -99);
    trip(x, 32, q, y);
    CHECK(q[31] == 127 && y[31] > 0.0f);
    /* fp16's largest finite value and bf16's smallest normal range */
    for (int k = 0; k < 32; k++) x[k] = k == 3 ? 65504.0f : (float)k;
    trip(x, 32, q, y);
    CHECK(q[3] == 127 && fabsf(y[3] - 65504.0f) <= 65504.0f * 2.5e-7f);
    for (int k = 0; k < 32; k++) x[k] = ldexpf(1.0f + (float)k / 32.0f, -90);
    trip(x, 32, q, y);
    for (int k = 0; k < 32; k++) CHECK(fabsf(y[k] - x[k]) <= ldexpf(2.0f, -90) / 254.0f * 1.001f);
    /* NaN or infinity anywhere: every value of the group NaN; the scale says so */
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int b = 0; b < 3; b++)
        for (int at = 0; at < 32; at += 31) {
            for (int k = 0; k < 32; k++) x[k] = (float)k - 16.0f;
            x[at] = bad[b];
            s = trip(x, 32, q, y);
            CHECK(isnan(s.scale));
            for (int k = 0; k < 32; k++) CHECK(isnan(y[k]) && q[k] == 0);
        }
    /* the NaN-keeping maximum: a NaN on either side wins */
    CHECK(isnan(symmem_wire_amax(NAN, 1.0f)) && isnan(symmem_wire_amax(1.0f, NAN)) &&
          symmem_wire_amax(2.0f, 1.0f) == 2.0f);
}

/* The calls it serves, the threshold, one rank, and the settings' defaults and validation. */
static void route_and_threshold(void)
{
    char err[256];
    const size_t t = MIB;
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_SUM, SYMMEM_BFLOAT16, 8, t - 2, t, err, sizeof err) == 0);
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_SUM, SYMMEM_BFLOAT16, 8, t, t, err, sizeof err) == 1);
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_SUM, SYMMEM_FLOAT16, 2, 64 * MIB, t, err, sizeof err) ==
          1);
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_SUM, SYMMEM_FLOAT16, 16, 2, 0, err, sizeof err) == 1);
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_SUM, SYMMEM_BFLOAT16, 1, 64 * MIB, t, err, sizeof err) ==
          0);
    CHECK(symmem_wire_route(SYMMEM_COLL_REDUCE_SCATTER, SYMMEM_OP_SUM, SYMMEM_BFLOAT16, 8, 64 * MIB, t, err,
                            sizeof err) == -1);
    CHECK_CONTAINS(err, "all_reduce only");
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_GATHER, SYMMEM_OP_SUM, SYMMEM_BFLOAT16, 8, 64 * MIB, t, err, sizeof err) ==
          -1);
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_MAX, SYMMEM_BFLOAT16, 8, 64 * MIB, t, err, sizeof err) ==
          -1);
    CHECK_CONTAINS(err, "sum only");
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_SUM, SYMMEM_FLOAT32, 8, 64 * MIB, t, err, sizeof err) ==
          -1);
    CHECK_CONTAINS(err, "bfloat16 and float16");
    /* an error whatever the size: the call is wrong below the threshold too */
    CHECK(symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_MIN, SYMMEM_FLOAT16, 8, 16, t, err, sizeof err) == -1);
    /* the settings */
    unsetenv("SYMMEM_WIRE_MIN_BYTES");
    unsetenv("SYMMEM_WIRE_GROUP");
    symmem_param_reload();
    CHECK(symmem_param_size(SYMMEM_PARAM_WIRE_MIN_BYTES) == MIB);
    CHECK(symmem_param_int(SYMMEM_PARAM_WIRE_GROUP) == SYMMEM_WIRE_GROUP_DEFAULT);
    setenv("SYMMEM_WIRE_MIN_BYTES", "16M", 1);
    setenv("SYMMEM_WIRE_GROUP", "128", 1);
    symmem_param_reload();
    CHECK(symmem_param_size(SYMMEM_PARAM_WIRE_MIN_BYTES) == 16 * MIB);
    CHECK(symmem_param_int(SYMMEM_PARAM_WIRE_GROUP) == 128);
    CHECK(symmem_wire_group_ok(32) && symmem_wire_group_ok(64) && symmem_wire_group_ok(128));
    CHECK(!symmem_wire_group_ok(16) && !symmem_wire_group_ok(96) && !symmem_wire_group_ok(256) &&
          !symmem_wire_group_ok(0));
}

/* Lossy means asked for: no built-in table holds it (every link class, 2..16 ranks, with islands), the table
 * API and the tuning file refuse it, the cost model (which the autotune prunes with) has no price for it. */
static void never_chosen_by_auto(void)
{
    CHECK(symmem_algo_lossy(SYMMEM_ALGO_WIRE_INT8));
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++)
        if (a != SYMMEM_ALGO_WIRE_INT8) CHECK(!symmem_algo_lossy(a));
    const symmem_link_t links[3] = {SYMMEM_LINK_NVLINK, SYMMEM_LINK_PCIE, SYMMEM_LINK_HOST};
    for (int l = 0; l < 3; l++)
        for (int n = 2; n <= 16; n++)
            for (int isl = 0; isl < 2; isl++) {
                topo_choice_facts_t f = {.nranks = n, .link = links[l], .read_gbs = 40, .write_gbs = 50, .ce_gbs = 50};
                if (isl && n >= 4) {
                    int key[SYMMEM_MAX_RANKS];
                    for (int q = 0; q < n; q++) key[q] = q < n / 2 ? 0 : 1;
                    topo_island_facts(n, key, &f);
                }
                symmem_coll_tuning_t t;
                symmem_coll_tune_init(&t, "fp", &f);
                for (int i = 0; i < t.defaults.nrules; i++) CHECK(!symmem_algo_lossy(t.defaults.rules[i].algo));
                for (int k = 0; k < SYMMEM_COLL_BARRIER; k++)
                    for (size_t b = 1024; b <= 1024 * MIB; b *= 2)
                        CHECK(!symmem_algo_lossy(symmem_coll_choose(&t, (symmem_coll_kind_t)k, SYMMEM_FORM_ORDINARY, b)));
            }
    symmem_coll_tuning_t t;
    const topo_choice_facts_t f = {.nranks = 8, .link = SYMMEM_LINK_PCIE};
    symmem_coll_tune_init(&t, "fpW", &f);
    CHECK_ST(symmem_coll_tune_set(&t, SYMMEM_COLL_ALL_REDUCE, 64 * MIB, SYMMEM_ALGO_WIRE_INT8),
             SYMMEM_INVALID_ARGUMENT);
    char path[] = "/tmp/symmem_test_wire_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    CHECK(fp);
    fprintf(fp, "[fpW]\nall_reduce 4M twoshot_push\nall_reduce inf wire_int8\n");
    fclose(fp);
    CHECK_ST(symmem_coll_tune_load(&t, path), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("lossy");
    CHECK_ERR_HAS(":3:");
    CHECK(t.table.nrules == 0); /* unchanged */
    unlink(path);
    topo_cost_machine_t m;
    memset(&m, 0, sizeof m);
    m.nranks = 8, m.ranks_per_link = 1, m.write_gbs = 50, m.read_gbs = 50, m.duplex = 1, m.trip_us = 1, m.kernel_us = 2;
    topo_cost_flow_t flow;
    CHECK(topo_cost_flow(&m, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_WIRE_INT8, 64 * MIB, &flow) == -1);
    CHECK(topo_cost_us(&m, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_WIRE_INT8, 64 * MIB) < 0);
    CHECK(topo_cost_us(&m, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PUSH, 64 * MIB) > 0); /* the model works */
}

/* The geometry over rank counts, counts, group sizes and workspaces: the slots of a round fit a half, the
 * rounds cover the message and are as few as the half allows, several rounds move whole warps, three syncs a
 * round, the grid's rules. */
static void geometry_invariants(void)
{
    const size_t wss[] = {SYMMEM_COLL_MIN_WORKSPACE, 64 * MIB, 256 * MIB};
    const uint64_t counts[] = {1, 7, 8, 9, 255, 4097, 65537, 1000003, 4194304, 33554433};
    const symmem_coll_grid_t grid = {132, 128};
    for (size_t w = 0; w < sizeof wss / sizeof wss[0]; w++) {
        const symmem_coll_layout_t lay = symmem_coll_layout(wss[w]);
        for (int n = 2; n <= 16; n++)
            for (int gi = 0; gi < 3; gi++)
                for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                    const uint32_t slots = 2 * (uint32_t)n + (uint32_t)(c % 3) * (uint32_t)n; /* 2n..4n */
                    const uint32_t lanes = groups[gi] / 8;
                    symmem_coll_geom_t g;
                    uint64_t sb = 0;
                    CHECK(symmem_wire_geometry(&lay, &grid, n, counts[c], slots, groups[gi], &g, &sb) == 0);
                    const uint64_t needp = (g.stride + 7) / 8;
                    CHECK(g.stride % 8 == 0 && g.stride * (uint64_t)n >= counts[c] && g.total == counts[c]);
                    CHECK(sb == symmem_wire_slot_bytes(g.segp, lanes) && sb % 16 == 0);
                    CHECK((uint64_t)slots * sb <= lay.half_bytes);
                    CHECK(g.segp >= 1 && g.rounds * g.segp >= needp && (g.rounds - 1) * g.segp < needp);
                    if (g.rounds > 1) {
                        CHECK(g.segp % 32 == 0);
                        /* as many packs as fit, to a whole warp */
                        CHECK((uint64_t)slots * symmem_wire_slot_bytes(g.segp + 32, lanes) > lay.half_bytes);
                    }
                    CHECK(g.epochs == 6 * g.rounds && g.positions == (g.segp + 1) / 2); /* two packs a thread */
                    CHECK(g.threads % 32 == 0 && g.threads >= grid.min_threads && g.threads <= SYMMEM_COLL_THREADS);
                    CHECK(g.grid >= 1 && g.grid <= grid.max_grid);
                    CHECK((uint64_t)g.grid * (uint64_t)g.threads >= g.positions || g.grid == grid.max_grid);
                }
    }
    /* the default workspace at 8 ranks: 64 MiB of bf16 in few rounds, each about twice what 16-byte slots
     * would allow */
    const symmem_coll_layout_t lay = symmem_coll_layout(64 * MIB);
    symmem_coll_geom_t g, g16;
    uint64_t sb;
    CHECK(symmem_wire_geometry(&lay, &grid, 8, 32 * MIB, 16, 32, &g, &sb) == 0);
    CHECK(symmem_coll_geometry(&lay, &grid, 8, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_WIRE_INT8, 32 * MIB, 2, 0, 0, 0, 16,
                               &g16) == 0);
    CHECK(g.segp >= g16.segp * 16 / 10 && g.rounds <= (g16.rounds + 1) / 2 + 1);
    /* refusals: an invalid group, a half too small for one pack per slot */
    CHECK(symmem_wire_geometry(&lay, &grid, 8, 1000, 16, 48, &g, &sb) == 1);
    symmem_coll_layout_t tiny = lay;
    tiny.half_bytes = 16 * 16 + 8; /* the generic geometry's one pack per slot, but not a quantized slot's 32 bytes */
    CHECK(symmem_wire_geometry(&tiny, &grid, 8, 1000, 16, 32, &g, &sb) == 1);
}

/* ---- the whole algorithm (tests/wire_model.h) --------------------------------------------------------------- */
typedef struct run {
    int n;
    uint16_t *in[SYMMEM_MAX_RANKS], *out[SYMMEM_MAX_RANKS];
} run_t;

static void run_alloc(run_t *R, int n, uint64_t count)
{
    R->n = n;
    for (int r = 0; r < n; r++) {
        R->in[r] = malloc((count ? count : 1) * 2);
        R->out[r] = malloc((count ? count : 1) * 2);
        CHECK(R->in[r] && R->out[r]);
    }
}
static void run_free(run_t *R)
{
    for (int r = 0; r < R->n; r++) free(R->in[r]), free(R->out[r]);
}

/* The plan of a model run: the geometry from a layout whose half holds `half_packs` packs per slot (small
 * halves force several rounds). */
static void plan_model(wire_model_t *m, int n, symmem_dtype_t dt, uint64_t count, uint32_t group,
                       const symmem_island_split_t *split, uint64_t half_packs)
{
    symmem_island_sched_t s;
    char err[256];
    uint32_t slots = 1;
    for (int r = 0; r < n; r++) {
        CHECK(symmem_island_schedule(split, SYMMEM_COLL_ALL_REDUCE, r, &s, err, sizeof err) == 0);
        if (s.slots > slots) slots = s.slots;
    }
    symmem_coll_layout_t lay = symmem_coll_layout(64 * MIB);
    if (half_packs) lay.half_bytes = slots * symmem_wire_slot_bytes(half_packs, group / 8);
    const symmem_coll_grid_t grid = {132, 128};
    symmem_coll_geom_t g;
    uint64_t sb;
    CHECK(symmem_wire_geometry(&lay, &grid, n, count, slots, group, &g, &sb) == 0);
    m->n = n, m->dt = dt, m->count = count, m->stride = g.stride, m->segp = g.segp, m->rounds = g.rounds;
    m->lanes = group / 8, m->split = *split;
}

/* Every rank's output identical to rank 0's (NaN as NaN: payloads are not the model's business). */
static int ranks_identical(const run_t *R, uint64_t count, symmem_dtype_t dt)
{
    for (int r = 1; r < R->n; r++)
        for (uint64_t i = 0; i < count; i++)
            if (R->out[r][i] != R->out[0][i] && !(isnan(wm_to_f(dt, R->out[r][i])) && isnan(wm_to_f(dt, R->out[0][i]))))
                return 0;
    return 1;
}

static symmem_island_split_t split_of(int n, const char *islands)
{
    symmem_island_split_t s;
    char err[256];
    if (!islands) {
        int unknown[SYMMEM_MAX_RANKS];
        for (int q = 0; q < n; q++) unknown[q] = -1;
        symmem_island_split_from_numa(n, unknown, &s);
    } else {
        CHECK(symmem_island_split_parse(islands, n, &s, err, sizeof err) == 0);
    }
    return s;
}

/* One island, computed without the schedule: shard x's owner x adds its own exact input and every other
 * rank's quantized input of x (rank order, fp32), quantizes the sum; every rank takes deq. Groups of G / 8
 * packs from the start of each round of each shard. */
static void two_shot_direct(const wire_model_t *m, const uint16_t *const *in, uint16_t *out)
{
    const uint32_t G = m->lanes * 8;
    for (int x = 0; x < m->n; x++) {
        const uint64_t start = (uint64_t)x * m->stride;
        if (start >= m->count) continue;
        const uint64_t len = m->stride < m->count - start ? m->stride : m->count - start;
        for (uint64_t rs = 0; rs < len; rs += m->segp * 8) {
            const uint64_t re = rs + m->segp * 8 < len ? rs + m->segp * 8 : len; /* the round's end */
            for (uint64_t g0 = rs; g0 < re; g0 += G) {
                const uint64_t ge = g0 + G < re ? g0 + G : re;
                float sum[128];
                for (uint64_t i = g0; i < ge; i++) sum[i - g0] = 0.0f;
                for (int q = 0; q < m->n; q++) {
                    float v[128], amax = 0.0f;
                    for (uint64_t i = g0; i < ge; i++) v[i - g0] = wm_to_f(m->dt, in[q][start + i]);
                    if (q != x) {
                        for (uint64_t i = g0; i < ge; i++) amax = symmem_wire_amax(amax, fabsf(v[i - g0]));
                        const symmem_wire_scale_t s = symmem_wire_scale_of(amax);
                        for (uint64_t i = g0; i < ge; i++)
                            v[i - g0] = symmem_wire_dequant(symmem_wire_quant(v[i - g0], s.inv), s.scale);
                    }
                    for (uint64_t i = g0; i < ge; i++)
                        sum[i - g0] = q == 0 ? v[i - g0] : SYMMEM_WIRE_ADD(sum[i - g0], v[i - g0]);
                }
                float amax = 0.0f;
                for (uint64_t i = g0; i < ge; i++) amax = symmem_wire_amax(amax, fabsf(sum[i - g0]));
                const symmem_wire_scale_t s = symmem_wire_scale_of(amax);
                for (uint64_t i = g0; i < ge; i++)
                    out[start + i] =
                        wm_from_f(m->dt, symmem_wire_dequant(symmem_wire_quant(sum[i - g0], s.inv), s.scale));
            }
        }
    }
}

typedef struct model_case {
    int n;
    const char *islands; /* NULL: one island */
    uint64_t count;
    uint64_t half_packs; /* 0: the default workspace */
} model_case_t;

static const model_case_t model_cases[] = {
    {2, NULL, 100003, 0},    {3, NULL, 65536, 0},          {4, NULL, 131075, 512},      {5, NULL, 1000, 0},
    {6, NULL, 49999, 96},    {7, NULL, 4099, 32},          {8, NULL, 262144, 0},        {8, NULL, 65541, 1024},
    {9, NULL, 40000, 0},     {12, NULL, 65541, 0},         {16, NULL, 131072, 0},       {16, NULL, 33, 0},
    {2, "0,1", 70001, 0},    {3, "0,1-2", 50000, 64},      {4, "0-1,2-3", 65537, 0},    {6, "0-1,2-3,4-5", 30000, 0},
    {8, "0-3,4-7", 131075, 0}, {8, "0-1+4-5,2-3+6-7", 50000, 256}, {8, "0-2,3-7", 77777, 0},
    {16, "0-7,8-15", 65536, 0}, {12, "0-3,4-7,8-11", 50000, 0},
};

/* Every case x dtype x group x data kind: ranks identical, the bound held and meaningful, one island equal to
 * the direct computation; in place (input == output) for every other case. */
static void model_against_bound(void)
{
    for (size_t ci = 0; ci < sizeof model_cases / sizeof model_cases[0]; ci++) {
        const model_case_t *mc = &model_cases[ci];
        const symmem_island_split_t split = split_of(mc->n, mc->islands);
        const int quantizations = split.count > 1 ? 3 : 2;
        for (int di = 0; di < 2; di++)
            for (int gi = 0; gi < 3; gi++)
                for (int kind = 0; kind < WM_KINDS; kind++) {
                    if ((ci + (size_t)gi + (size_t)kind) % 2 && mc->n >= 8) continue; /* halves the large cases */
                    const symmem_dtype_t dt = dtypes[di];
                    wire_model_t m;
                    plan_model(&m, mc->n, dt, mc->count, groups[gi], &split, mc->half_packs);
                    run_t R;
                    run_alloc(&R, mc->n, mc->count);
                    const int in_place = ci % 2;
                    const uint64_t seed = 0x5eedull + ci * 131 + (uint64_t)kind;
                    for (int r = 0; r < mc->n; r++) wm_fill(kind, dt, seed, r, mc->n, mc->count, R.in[r]);
                    uint16_t *keep[SYMMEM_MAX_RANKS];
                    for (int r = 0; r < mc->n; r++) {
                        keep[r] = malloc(mc->count * 2);
                        CHECK(keep[r]);
                        memcpy(keep[r], R.in[r], mc->count * 2);
                    }
                    CHECK(wire_model_run(&m, (const uint16_t *const *)R.in, in_place ? R.in : R.out) == 0);
                    if (in_place)
                        for (int r = 0; r < mc->n; r++) memcpy(R.out[r], R.in[r], mc->count * 2);
                    char what[200];
                    snprintf(what, sizeof what, "%d ranks, islands %s, count %llu (%llu rounds), %s, G %u, %s%s",
                             mc->n, mc->islands ? mc->islands : "one", (unsigned long long)mc->count,
                             (unsigned long long)m.rounds, symmem_dtype_name(dt), groups[gi], wm_kind_name[kind],
                             in_place ? ", in place" : "");
                    EXPECT_MSG(ranks_identical(&R, mc->count, dt), "%s", what);
                    const wm_err_t e = wm_error((const uint16_t *const *)keep, mc->n, dt, mc->count, groups[gi],
                                                quantizations, R.out[0]);
                    EXPECT_MSG(e.nonfinite == 0 && e.max_over_bound <= 1.0, "%s: %.3f of the bound at %llu", what,
                               e.max_over_bound, (unsigned long long)e.worst);
                    /* the quantization error is there: a quarter of the bound would not hold (normal data, few
                     * ranks: W sums every rank's largest magnitude, so at many ranks it is loose by design) */
                    if (kind == WM_NORMAL && mc->count >= 4096 && mc->n <= 4)
                        EXPECT_MSG(e.max_scaled > symmem_wire_bound_c(dt, quantizations) / 4, "%s: %.5f", what,
                                   e.max_scaled);
                    if (split.count == 1) {
                        uint16_t *direct = malloc(mc->count * 2);
                        CHECK(direct);
                        two_shot_direct(&m, (const uint16_t *const *)keep, direct);
                        EXPECT_MSG(memcmp(direct, R.out[0], mc->count * 2) == 0,
                                   "%s: the schedule's result differs from "
                                   "the direct two-shot",
                                   what);
                        free(direct);
                    }
                    /* and the check itself: one result moved by twice its bound fails it */
                    if (ci == 0 && gi == 0 && kind == WM_NORMAL) {
                        const float v = wm_to_f(dt, R.out[0][100]);
                        double w = 0;
                        for (int r = 0; r < mc->n; r++) {
                            float mx = 0;
                            for (int j = 100 - 31; j <= 100 + 31; j++) mx = fmaxf(mx, fabsf(wm_to_f(dt, keep[r][j])));
                            w += mx;
                        }
                        R.out[0][100] = wm_from_f(dt, (float)(v + 2.0 * symmem_wire_bound_c(dt, quantizations) * w));
                        const wm_err_t bad = wm_error((const uint16_t *const *)keep, mc->n, dt, mc->count, groups[gi],
                                                      quantizations, R.out[0]);
                        EXPECT(bad.max_over_bound > 1.0 && bad.worst == 100);
                    }
                    for (int r = 0; r < mc->n; r++) free(keep[r]);
                    run_free(&R);
                }
    }
    CHECK(test_failures == 0);
}

/* NaN and infinity: the group that holds one is NaN on every rank (an infinity too: the sum's group cannot
 * be scaled), the other groups are finite and within the bound; values whose sum passes fp32's range make
 * their group NaN. */
static void special_values_confined_to_their_group(void)
{
    const int n = 4;
    const uint64_t count = 4096;
    const symmem_island_split_t split = split_of(n, NULL);
    for (int di = 0; di < 2; di++) {
        const symmem_dtype_t dt = dtypes[di];
        wire_model_t m;
        plan_model(&m, n, dt, count, 32, &split, 0);
        run_t R;
        run_alloc(&R, n, count);
        for (int r = 0; r < n; r++) wm_fill(WM_NORMAL, dt, 77, r, n, count, R.in[r]);
        /* rank 2: NaN at 5 (shard 0's first group), rank 0: +Inf at 1100 (shard 1), rank 3: -Inf at 3100 in its
         * own shard (3072.., the owner's exact input) */
        R.in[2][5] = wm_from_f(dt, NAN);
        R.in[0][1100] = wm_from_f(dt, INFINITY);
        R.in[3][3100] = wm_from_f(dt, -INFINITY);
        CHECK(wire_model_run(&m, (const uint16_t *const *)R.in, R.out) == 0);
        CHECK(ranks_identical(&R, count, dt));
        for (uint64_t i = 0; i < count; i++) {
            const uint64_t s = i / m.stride, g0 = s * m.stride + (i - s * m.stride) / 32 * 32;
            const int bad = g0 == 0 || (g0 <= 1100 && 1100 < g0 + 32) || (g0 <= 3100 && 3100 < g0 + 32);
            const float v = wm_to_f(dt, R.out[1][i]);
            EXPECT_MSG(bad ? isnan(v) : isfinite(v), "%s element %llu: %g", symmem_dtype_name(dt),
                       (unsigned long long)i, v);
        }
        run_free(&R);
    }
    CHECK(test_failures == 0);
    /* bf16 values near its largest: two of them pass fp32's range in the sum */
    wire_model_t m;
    const symmem_island_split_t two = split_of(2, NULL);
    plan_model(&m, 2, SYMMEM_BFLOAT16, 64, 32, &two, 0);
    run_t R;
    run_alloc(&R, 2, 64);
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 64; i++) R.in[r][i] = wm_from_f(SYMMEM_BFLOAT16, i == 40 ? 3.0e38f : 1.0f);
    CHECK(wire_model_run(&m, (const uint16_t *const *)R.in, R.out) == 0);
    for (int i = 0; i < 64; i++) {
        const float v = wm_to_f(SYMMEM_BFLOAT16, R.out[0][i]);
        CHECK(i >= 32 ? isnan(v) : v == 2.0f); /* shard 1 is elements 32..63: one group */
    }
    run_free(&R);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"round_trip_every_group_and_dtype", round_trip_every_group_and_dtype, 60},
        {"round_trip_edges", round_trip_edges, 10},
        {"route_and_threshold", route_and_threshold, 10},
        {"never_chosen_by_auto", never_chosen_by_auto, 30},
        {"geometry_invariants", geometry_invariants, 60},
        {"model_against_bound", model_against_bound, 600},
        {"special_values_confined_to_their_group", special_values_confined_to_their_group, 30},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
