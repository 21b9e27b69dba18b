/* Collectives model unit tests (no GPU): the push-or-pull decision of the init probe (SYMMEM_COLL_PROBE)
 * from measured peer read/write bandwidth, how it changes the built-in default table, the block-size
 * rule (SYMMEM_MIN_BLOCK_THREADS), the grid (residency) rule (SYMMEM_GRID_SHARE) with its room for cluster
 * kernels (SYMMEM_CLUSTER_ROOM) and the GPC count that room is measured in. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/kinds.h"
#include "base/param.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"
#include "collectives/island.h"
#include "collectives/tune.h"
#include "test_util.h"
#include "topology/choice.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* The built-in table for a rank count and link class, with or without the probe's figures. */
static void defaults_for(int nranks, symmem_link_t link, double rd, double wr, topo_table_t *t)
{
    const topo_choice_facts_t f = {.nranks = nranks, .link = link, .read_gbs = rd, .write_gbs = wr};
    topo_choice_t c;
    topo_choose(&f, &c);
    *t = c.table;
}

static int table_has(const topo_table_t *t, symmem_algo_t algo)
{
    for (int i = 0; i < t->nrules; i++)
        if (t->rules[i].algo == algo) return 1;
    return 0;
}

static void prefer_from_figures(void)
{
    /* the published extremes (ANCHORS, "Physical limits") */
    CHECK(topo_prefer_from_figures(52.0, 2.6) == TOPO_PREFER_PULL);
    CHECK(topo_prefer_from_figures(25.0, 45.0) == TOPO_PREFER_PUSH);
    /* within 30% either way: keep the defaults */
    CHECK(topo_prefer_from_figures(40.0, 40.0) == TOPO_PREFER_KEEP);
    CHECK(topo_prefer_from_figures(40.0, 30.0) == TOPO_PREFER_KEEP);
    CHECK(topo_prefer_from_figures(30.0, 40.0) == TOPO_PREFER_KEEP);
    /* the threshold is strict: write < 0.7 * read */
    CHECK(topo_prefer_from_figures(100.0, 70.0) == TOPO_PREFER_KEEP);
    CHECK(topo_prefer_from_figures(100.0, 69.0) == TOPO_PREFER_PULL);
    CHECK(topo_prefer_from_figures(69.0, 100.0) == TOPO_PREFER_PUSH);
    /* units do not matter, only the ratio */
    CHECK(topo_prefer_from_figures(52e9, 2.6e9) == TOPO_PREFER_PULL);
    /* no valid figures (a rank that failed reports 0; the minimum is then 0): keep */
    CHECK(topo_prefer_from_figures(0.0, 10.0) == TOPO_PREFER_KEEP);
    CHECK(topo_prefer_from_figures(10.0, 0.0) == TOPO_PREFER_KEEP);
    CHECK(topo_prefer_from_figures(-1.0, 10.0) == TOPO_PREFER_KEEP);
    CHECK(topo_prefer_from_figures(NAN, 10.0) == TOPO_PREFER_KEEP);
    CHECK(topo_prefer_from_figures(10.0, NAN) == TOPO_PREFER_KEEP);
    CHECK(topo_prefer_from_figures(INFINITY, 10.0) == TOPO_PREFER_KEEP);
    CHECK(strcmp(topo_prefer_name(TOPO_PREFER_PULL), "pull") == 0);
    CHECK(strcmp(topo_prefer_name(TOPO_PREFER_PUSH), "push") == 0);
}

static int table_has_push(const topo_table_t *t)
{
    return table_has(t, SYMMEM_ALGO_ONESHOT_PUSH) || table_has(t, SYMMEM_ALGO_TWOSHOT_PUSH) ||
           table_has(t, SYMMEM_ALGO_STAGED) || table_has(t, SYMMEM_ALGO_TWOSHOT_LAMPORT);
}

static int table_has_pull(const topo_table_t *t)
{
    return table_has(t, SYMMEM_ALGO_ONESHOT_PULL) || table_has(t, SYMMEM_ALGO_TWOSHOT_PULL);
}

/* Figures that prefer pull (stores 20x slower than loads, as published) make the cost model choose among the
 * pull algorithms only; the communicator's path (the probe's figures through symmem_coll_tune_measured) gets
 * the same table, and measuring again changes nothing. With stores at 2.6 GB/s two-shot pull, which stores
 * each reduced shard into every rank's output, loses to one-shot pull at every size. */
static void pull_rewrites_pcie_defaults(void)
{
    for (int n = 2; n <= 16; n *= 2) {
        topo_table_t base, t;
        defaults_for(n, SYMMEM_LINK_PCIE, 0.0, 0.0, &base);
        CHECK(base.nrules > 0);
        CHECK(table_has(&base, SYMMEM_ALGO_ONESHOT_PUSH) && !table_has_pull(&base));
        defaults_for(n, SYMMEM_LINK_PCIE, 52.0, 2.6, &t);
        CHECK(!table_has_push(&t) && table_has_pull(&t));
        CHECK(topo_table_lookup(&t, SYMMEM_COLL_ALL_REDUCE, 12 * KIB) == SYMMEM_ALGO_ONESHOT_PULL);
        CHECK(topo_table_lookup(&t, SYMMEM_COLL_ALL_REDUCE, 256 * MIB) == SYMMEM_ALGO_ONESHOT_PULL);
        CHECK(topo_table_lookup(&t, SYMMEM_COLL_REDUCE_SCATTER, 16 * KIB) != SYMMEM_ALGO_AUTO);
        /* where stores are as fast as loads, two-shot pull takes the large sizes (fewer bytes per GPU) */
        if (n >= 4) {
            topo_table_t even;
            const topo_choice_facts_t f = {.nranks = n, .link = SYMMEM_LINK_PCIE, .read_gbs = 52.0, .write_gbs = 35.0};
            topo_choice_t c;
            topo_choose(&f, &c);
            even = c.table;
            CHECK(c.prefer == TOPO_PREFER_PULL);
            CHECK(topo_table_lookup(&even, SYMMEM_COLL_ALL_REDUCE, 256 * MIB) == SYMMEM_ALGO_TWOSHOT_PULL);
        }
        symmem_coll_tuning_t tu;
        const topo_choice_facts_t none = {.nranks = n, .link = SYMMEM_LINK_PCIE},
                                  pull = {.nranks = n, .link = SYMMEM_LINK_PCIE, .read_gbs = 52.0, .write_gbs = 2.6};
        symmem_coll_tune_init(&tu, "fp", &none);
        CHECK(topo_table_hash(&tu.defaults) == topo_table_hash(&base));
        CHECK(symmem_coll_tune_measured(&tu, &pull) > 0);
        CHECK(topo_table_hash(&tu.defaults) == topo_table_hash(&t) && tu.prefer == TOPO_PREFER_PULL);
        CHECK(symmem_coll_tune_measured(&tu, &pull) == 0); /* measuring again changes nothing more */
    }
}

/* Figures within the margin, or preferring push, keep the push algorithms on every link class (the model
 * prices them with the figures, so the bounds may move); pull figures never leave a push algorithm behind. */
static void keep_and_push_leave_defaults(void)
{
    const symmem_link_t links[] = {SYMMEM_LINK_PCIE, SYMMEM_LINK_NVLINK, SYMMEM_LINK_HOST};
    for (size_t l = 0; l < sizeof links / sizeof links[0]; l++)
        for (int n = 2; n <= 8; n *= 2) {
            topo_table_t base, keep, push, pull;
            defaults_for(n, links[l], 0.0, 0.0, &base);
            defaults_for(n, links[l], 40.0, 40.0, &keep);
            defaults_for(n, links[l], 25.0, 45.0, &push);
            CHECK(table_has_push(&base) && !table_has_pull(&base));
            CHECK(table_has_push(&keep) && !table_has_pull(&keep));
            CHECK(table_has_push(&push) && !table_has_pull(&push));
            defaults_for(n, links[l], 52.0, 2.6, &pull);
            CHECK(!table_has_push(&pull));
        }
}

/* The block size rule: one pass over the positions with up to max_grid blocks, at least min_threads, at
 * most 512, a multiple of 32; and SYMMEM_MIN_BLOCK_THREADS clamped into that range. */
static void block_threads_rule(void)
{
    symmem_coll_grid_t co;
    memset(&co, 0, sizeof co);
    co.max_grid = 132;
    co.min_threads = 256;
    CHECK(symmem_coll_block_threads(&co, 1) == 256);
    CHECK(symmem_coll_block_threads(&co, 1024) == 256);        /* 16 KiB bf16 Lamport at 2 ranks: 4 blocks */
    CHECK(symmem_coll_block_threads(&co, 132 * 256) == 256);
    CHECK(symmem_coll_block_threads(&co, 132 * 256 + 1) == 288); /* 257 needed, rounded up to a warp */
    CHECK(symmem_coll_block_threads(&co, 132 * 512) == 512);
    CHECK(symmem_coll_block_threads(&co, UINT64_MAX) == 512);  /* grid-stride above one pass */
    co.min_threads = 32;
    CHECK(symmem_coll_block_threads(&co, 1024) == 32);         /* ceil(1024/132) = 8 -> one warp */
    CHECK(symmem_coll_block_threads(&co, 4096) == 32);
    CHECK(symmem_coll_block_threads(&co, 4225) == 64);         /* 33 per block */
    co.max_grid = 0; /* never 0 in a communicator; treated as 1 */
    CHECK(symmem_coll_block_threads(&co, 100) == 128);
    /* the one-pass property and the bounds, over many sizes and grid limits */
    for (int g = 1; g <= 256; g += 17)
        for (uint64_t pos = 1; pos < ((uint64_t)1 << 22); pos = pos * 3 + 1)
            for (int m = 32; m <= 512; m *= 2) {
                co.max_grid = g;
                co.min_threads = m;
                const int t = symmem_coll_block_threads(&co, pos);
                CHECK(t % 32 == 0 && t >= m && t <= 512);
                CHECK(t == 512 || (uint64_t)t * (uint64_t)g >= pos);
                CHECK(t == m || t == 512 || (uint64_t)(t - 32) * (uint64_t)g < pos); /* the fewest that do */
            }
    static const struct {
        const char *env;
        int want;
    } v[] = {{NULL, 128}, {"64", 64}, {"512", 512}, {"32", 32}, /* outside 32..512 or not a multiple of 32: */
             {"100", 128}, {"0", 128}, {"-5", 128}, {"1000", 128}, {"9223372036854775807", 128}}; /* the default */
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        if (v[i].env) setenv("SYMMEM_MIN_BLOCK_THREADS", v[i].env, 1);
        else unsetenv("SYMMEM_MIN_BLOCK_THREADS");
        symmem_param_reload();
        CHECK(symmem_coll_min_block_threads() == v[i].want);
    }
    unsetenv("SYMMEM_MIN_BLOCK_THREADS");
    symmem_param_reload();
}

static void probe_parameter(void)
{
    unsetenv("SYMMEM_COLL_PROBE");
    symmem_param_reload();
    CHECK(strcmp(symmem_param_str(SYMMEM_PARAM_COLL_PROBE), "auto") == 0);
    CHECK(strcmp(symmem_param_name(SYMMEM_PARAM_COLL_PROBE), "SYMMEM_COLL_PROBE") == 0);
    setenv("SYMMEM_COLL_PROBE", "force", 1);
    symmem_param_reload();
    CHECK(strcmp(symmem_param_str(SYMMEM_PARAM_COLL_PROBE), "force") == 0);
    /* no figures without a communicator that ran the probe */
    double r = -1.0, w = -1.0;
    CHECK(symmem_coll_probe_figures(NULL, &r, &w) == 0 && r == -1.0 && w == -1.0);
    CHECK(symmem_coll_probe_ce_figure(NULL, &r) == 0 && r == -1.0);
}

/* Lamport buffers: a power of two (plus the rounding slack), at most an eighth of the workspace and more
 * than a sixteenth (the largest such), so three fit with room for the data halves; the default workspace
 * gives 8 MiB. */
static void lamport_buffer_rule(void)
{
    const size_t MIB_ = (size_t)1 << 20;
    const size_t sl = SYMMEM_COLL_LAMPORT_SLACK;
    CHECK(symmem_coll_lamport_buf_bytes(64 * MIB_) == 8 * MIB_ + sl);
    CHECK(symmem_coll_lamport_buf_bytes(32 * MIB_) == 4 * MIB_ + sl);
    CHECK(symmem_coll_lamport_buf_bytes(96 * MIB_) == 8 * MIB_ + sl);
    CHECK(symmem_coll_lamport_buf_bytes(4 * MIB_) == MIB_ / 2 + sl);
    const size_t sizes[] = {4 * MIB_, 5 * MIB_ + 12345, 63 * MIB_, 64 * MIB_ - 1, 64 * MIB_ + 1, 1000 * MIB_,
                            SIZE_MAX / 2, SIZE_MAX};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const size_t ws = sizes[i], lam = symmem_coll_lamport_buf_bytes(ws);
        const size_t pow2 = lam - SYMMEM_COLL_LAMPORT_SLACK;
        CHECK(pow2 >= 4096 && (pow2 & (pow2 - 1)) == 0 && lam % 4096 == 0);
        CHECK(pow2 <= ws / 8 && pow2 > ws / 16);
    }
}

/* Workspace packs per shard position that each kernel layout writes (pull.cu, push.cu: the half layouts;
 * lamport.cu: the slot layouts), stated here from the kernels, not from the descriptors (algos.h). */
static uint64_t kernel_units(symmem_coll_kind_t kind, symmem_algo_t algo, int n, int zo)
{
    const uint64_t un = (uint64_t)n;
    const int ar = kind == SYMMEM_COLL_ALL_REDUCE, ag = kind == SYMMEM_COLL_ALL_GATHER;
    switch (algo) {
    case SYMMEM_ALGO_ONESHOT_PULL: return ag ? 1 : un;                     /* staging[s][segp] (AG: mine) */
    case SYMMEM_ALGO_TWOSHOT_PULL: return ag ? 1 : ar ? un + 1 : un;       /* + result[segp] */
    case SYMMEM_ALGO_ONESHOT_PUSH:
    case SYMMEM_ALGO_TWOSHOT_LAMPORT:
        if (ag) return un;                                                  /* flag push: gather[s][segp] */
        if (!ar) return un;                                                 /* Lamport RS: slots[src][segp] */
        return algo == SYMMEM_ALGO_ONESHOT_PUSH ? un * un : 2 * un;         /* slots[src][n*segp] / + gather */
    case SYMMEM_ALGO_STAGED: return ar ? 2 * un : un;                      /* slots + gather (AR) */
    case SYMMEM_ALGO_COPY_ENGINE: return ar ? 2 * un : un;                   /* copy_engine_plan.c: slots + gather */
    case SYMMEM_ALGO_ISLAND: return 4 * un;                                 /* G, A, X slots (island.c): at most 4n */
    case SYMMEM_ALGO_WIRE_INT8: return 4 * un; /* the island slots; its own rounds: wire.h (tests/unit/test_wire.c) */
    default: return ar ? (zo ? un : 2 * un) : un;                           /* twoshot_push */
    }
}

/* Flag epochs each kernel's loops consume (pull.cu, push.cu, lamport.cu), stated from the kernels: two per
 * round (sync A and B), none in the Lamport family, and one more sync at the end when the pull kernels read
 * the inputs in place, except the two-shot all-reduce, whose second sync already implies it. */
static uint64_t kernel_epochs(symmem_coll_kind_t kind, symmem_algo_t algo, uint64_t rounds, int zc)
{
    const int ar = kind == SYMMEM_COLL_ALL_REDUCE, ag = kind == SYMMEM_COLL_ALL_GATHER;
    const int lamport = !ag && (algo == SYMMEM_ALGO_ONESHOT_PUSH || algo == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    const int pull = algo == SYMMEM_ALGO_ONESHOT_PULL || algo == SYMMEM_ALGO_TWOSHOT_PULL;
    if (lamport) return 0;
    /* copy-engine two-shot: two per step kernel, two kernels a round for all-reduce (the start sync's two are the
     * plan's, symmem_ce_epochs: tests/unit/test_copy_engine.c) */
    if (algo == SYMMEM_ALGO_COPY_ENGINE) return (ar ? 4 : 2) * rounds;
    if (algo == SYMMEM_ALGO_ISLAND || algo == SYMMEM_ALGO_WIRE_INT8) return 6 * rounds; /* three sync slots a round */
    return 2 * rounds + (pull && zc && !(ar && algo == SYMMEM_ALGO_TWOSHOT_PULL) ? 2 : 0);
}

/* The per-call geometry over every kind x algorithm x rank count x dtype size and many counts: the
 * kernel's footprint fits its area, the rounds cover the message and are as few as the area allows, the
 * grid and block sizes obey their rules; and the rounds the workspace layout was chosen for (power-of-two
 * messages fill whole Lamport two-shot rounds: bench/NOTES.md, "Measurements"). */
static void geometry_invariants(void)
{
    const size_t MIB_ = (size_t)1 << 20;
    const size_t wss[] = {SYMMEM_COLL_MIN_WORKSPACE, 32 * MIB_, 64 * MIB_, 96 * MIB_ + 4096};
    const uint64_t counts[] = {1, 2, 3, 7, 8, 9, 15, 17, 255, 1000, 4095, 65537, 1000003, 4194304, 33554433};
    for (size_t w = 0; w < sizeof wss / sizeof wss[0]; w++) {
        const symmem_coll_layout_t co = symmem_coll_layout(wss[w]);
        const symmem_coll_grid_t grid = {132, 256};
        CHECK(co.lam_hdr_off >= SYMMEM_COLL_FLAG_BYTES);
        CHECK(co.lam_off >= co.lam_hdr_off + 3 * SYMMEM_COLL_LAMPORT_HDR_BYTES);
        CHECK(co.data_off >= co.lam_off + 3 * co.lam_buf_bytes && co.data_off % 4096 == 0);
        CHECK(co.half_bytes > 0 && co.data_off + 2 * co.half_bytes <= wss[w]);
        for (int n = 2; n <= 8; n++)
            for (int k = 0; k < SYMMEM_COLL_KIND_COUNT; k++) {
                if (k >= SYMMEM_COLL_BARRIER) continue; /* no table, no geometry */
                for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++)
                    for (size_t es = 2; es <= 4 && symmem_algo_listed(a); es += 2)
                        for (int zo = 0; zo <= 3; zo++)
                            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
                                const symmem_coll_kind_t kind = (symmem_coll_kind_t)k;
                                const symmem_algo_t algo = (symmem_algo_t)a;
                                const int zc = zo >> 1;
                                symmem_coll_geom_t g;
                                const int st = symmem_coll_geometry(&co, &grid, n, kind, algo, counts[c], es, zc,
                                                                    zo & 1, 0, 0, &g);
                                if (symmem_coll_family_of(kind, algo) == SYMMEM_COLL_FAM_NONE) {
                                    CHECK(st == 1); /* an operation the algorithm does not serve: no geometry */
                                    continue;
                                }
                                CHECK(st == 0);
                                if (st != 0) continue;
                                const uint64_t V = 16 / es;
                                const uint64_t cap = g.family == 2 /* Lamport */ ? co.lam_buf_bytes : co.half_bytes;
                                CHECK(g.units == kernel_units(kind, algo, n, zo & 1));
                                CHECK(g.epochs == kernel_epochs(kind, algo, g.rounds, zc));
                                CHECK(g.units * g.segp * 16 <= cap);              /* fits its area */
                                const uint64_t needp = (g.stride + V - 1) / V;
                                CHECK(g.segp >= 1 && g.rounds * g.segp >= needp);  /* covers the message */
                                CHECK((g.rounds - 1) * g.segp < needp);            /* no empty round */
                                CHECK(g.segp == needp || (g.units * (g.segp + 1) * 16 > cap)); /* fewest rounds */
                                CHECK(kind != SYMMEM_COLL_ALL_REDUCE || (g.stride % V == 0 && g.stride * (uint64_t)n >= counts[c]));
                                /* the two-shot pull all-reduce runs its own kernels: into an ordinary output the
                                 * wide one, with zero copy both ways the one whose threads take several packs a
                                 * pass (its positions count passes) */
                                const int two = kind == SYMMEM_COLL_ALL_REDUCE && algo == SYMMEM_ALGO_TWOSHOT_PULL;
                                const int wide = two && !(zo & 1), zc_both = two && zc && (zo & 1);
                                CHECK(g.wide == wide);
                                CHECK(g.zc_packs == (zc_both ? symmem_coll_zc_packs(n) : 0));
                                CHECK(!zc_both || g.positions == (g.segp + (uint64_t)g.zc_packs - 1) / (uint64_t)g.zc_packs);
                                CHECK(g.threads % 32 == 0 && g.threads >= 256 &&
                                      g.threads <= (wide ? SYMMEM_COLL_WIDE_THREADS : SYMMEM_COLL_THREADS));
                                CHECK(g.grid >= 1 && g.grid <= grid.max_grid);
                                CHECK((uint64_t)g.grid * (uint64_t)g.threads >= g.positions ||
                                      g.grid == grid.max_grid);
                            }
            }
        /* two-shot pull with zero copy both ways: no workspace, one round of any size */
        symmem_coll_geom_t g;
        CHECK(symmem_coll_geometry(&co, &grid, 8, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PULL, 33554433, 2, 1, 1, 1, 0,
                                   &g) == 0);
        CHECK(g.units == 0 && g.rounds == 1 && g.epochs == 2);
        /* ... in its own kernel, two packs a thread a pass at 8 ranks, at most SYMMEM_COLL_THREADS a block */
        CHECK(!g.wide && g.zc_packs == 2 && g.threads == SYMMEM_COLL_THREADS && g.positions == (g.segp + 1) / 2);
        /* ... one pack a pass above 8 ranks */
        CHECK(symmem_coll_geometry(&co, &grid, 16, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PULL, 33554433, 2, 1, 1, 1, 0,
                                   &g) == 0);
        CHECK(g.zc_packs == 1 && g.positions == g.segp);
        /* copy in (an ordinary input) into an ordinary output: the wide kernel too */
        CHECK(symmem_coll_geometry(&co, &grid, 8, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PULL, 33554433, 2, 0, 0, 0, 0,
                                   &g) == 0);
        CHECK(g.wide && !g.zc_packs && g.units == 9);
        /* zero copy in only (an ordinary output): the wide kernel, through the workspace (staging and result:
         * 9 units at 8 ranks), in blocks of SYMMEM_COLL_WIDE_THREADS where a round fills them */
        CHECK(symmem_coll_geometry(&co, &grid, 8, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PULL, 33554433, 2, 1, 0, 0, 0,
                                   &g) == 0);
        CHECK(g.wide && g.units == 9 && g.rounds >= 1);
        CHECK(g.threads == SYMMEM_COLL_WIDE_THREADS || (wss[w] < 64 * MIB_ && (uint64_t)g.grid * (uint64_t)g.threads >= g.positions));
    }
    /* default workspace: bf16 all-reduce of 4 MiB in one Lamport two-shot round at any rank count, 8 MiB
     * in two; one-shot Lamport at 2 ranks also one round at 4 MiB */
    symmem_coll_layout_t co = symmem_coll_layout(64 * MIB_);
    const symmem_coll_grid_t grid = {132, 256};
    for (int n = 2; n <= 8; n++) {
        symmem_coll_geom_t g;
        const uint64_t count = (4 * MIB_) / 2;
        CHECK(symmem_coll_geometry(&co, &grid, n, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_LAMPORT, count, 2, 0, 0, 0, 0, &g) == 0);
        CHECK(g.rounds == 1); /* also at 3, 5, 6, 7 ranks: the slack takes the shards' rounding */
        CHECK(symmem_coll_geometry(&co, &grid, n, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_LAMPORT, 2 * count, 2, 0, 0, 0, 0, &g) == 0);
        CHECK(g.rounds == 2);
        CHECK(symmem_coll_geometry(&co, &grid, n, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_LAMPORT, 2 * count + 16384, 2, 0, 0, 0, 0, &g) == 0);
        CHECK(g.rounds == 3); /* 32 KiB over: the slack is far smaller than that */
        /* one-shot Lamport: n slots of the whole round, so 8 MiB / n of message per round: 4 MiB in n/2
         * rounds, rounded up */
        CHECK(symmem_coll_geometry(&co, &grid, n, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_ONESHOT_PUSH, count, 2, 0, 0, 0, 0, &g) == 0);
        CHECK(g.rounds == (uint64_t)((n + 1) / 2));
    }
    symmem_coll_geom_t g1;
    CHECK(symmem_coll_geometry(&co, &grid, 2, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_ONESHOT_PUSH, 2 * MIB_, 2, 0, 0, 0, 0, &g1) == 0);
    CHECK(g1.rounds == 1 && g1.positions == 2 * g1.segp);
    /* the workspace too small for the layout is an error, not a zero-sized round */
    memset(&co, 0, sizeof co);
    co.half_bytes = 16;
    co.lam_buf_bytes = 16;
    const symmem_coll_grid_t one = {1, 32};
    CHECK(symmem_coll_geometry(&co, &one, 2, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PUSH, 100, 4, 0, 0, 0, 0, &g1) == 1);
    /* AUTO has no descriptor row: no geometry */
    CHECK(symmem_coll_geometry(&co, &one, 2, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_AUTO, 100, 4, 0, 0, 0, 0, &g1) == 1);
}

/* The island algorithm plans with the slots its split's schedule names: fewer than the descriptor grants
 * give larger rounds that still fit; more than it grants is refused. */
static void island_units(void)
{
    const symmem_coll_layout_t co = symmem_coll_layout((size_t)64 << 20);
    const symmem_coll_grid_t grid = {132, 256};
    static const struct { int n; const char *split; } cases[] = {
        {8, "0-3,4-7"}, {8, "0-7"}, {8, "0-2,3-7"}, {6, "0-1,2-3,4-5"}, {5, "0+2+4,1+3"}, {3, "0,1-2"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int n = cases[c].n;
        symmem_island_split_t s;
        char err[256];
        CHECK(symmem_island_split_parse(cases[c].split, n, &s, err, sizeof err) == 0);
        for (int k = 0; k < 3; k++) {
            const symmem_coll_kind_t kind = (symmem_coll_kind_t)k;
            symmem_island_sched_t sc;
            uint32_t slots = 0;
            for (int r = 0; r < n; r++) {
                CHECK(symmem_island_schedule(&s, kind, r, &sc, err, sizeof err) == 0);
                CHECK(r == 0 || sc.slots == slots); /* every rank plans with the same units */
                slots = sc.slots;
            }
            CHECK(slots >= 1 && slots <= (uint32_t)(SYMMEM_ISLAND_SLOTS_PER_RANK * n));
            if (kind == SYMMEM_COLL_ALL_GATHER) CHECK(slots == (uint32_t)n); /* the gathered shards only */
            const uint64_t count = (uint64_t)1 << 26; /* several rounds at any of these units */
            symmem_coll_geom_t full, own;
            CHECK(symmem_coll_geometry(&co, &grid, n, kind, SYMMEM_ALGO_ISLAND, count, 2, 0, 0, 0, 0, &full) == 0);
            CHECK(symmem_coll_geometry(&co, &grid, n, kind, SYMMEM_ALGO_ISLAND, count, 2, 0, 0, 0, slots, &own) == 0);
            CHECK(full.units == (uint64_t)SYMMEM_ISLAND_SLOTS_PER_RANK * n && own.units == slots);
            CHECK(own.units * own.segp * 16 <= co.half_bytes && own.units * (own.segp + 1) * 16 > co.half_bytes);
            CHECK(own.rounds <= full.rounds && own.epochs == own.rounds * SYMMEM_ISLAND_EPOCHS_PER_ROUND);
            if (slots < full.units / 2) CHECK(own.rounds < full.rounds);
            CHECK(symmem_coll_geometry(&co, &grid, n, kind, SYMMEM_ALGO_ISLAND, count, 2, 0, 0, 0, full.units + 1,
                                       &own) == 1);
        }
    }
}

/* symmem_coll_first_at, where the two-shot pull's kernels start the loop that finishes what their whole-pack loop
 * left: every position from `from` on is taken by the thread that a plain grid-stride loop from 0 gives it (so
 * by the same block in both loops, which the per-block syncs need), once, and by no thread below `from`. */
static void first_at_keeps_threads(void)
{
    static const uint64_t threads[] = {1, 2, 7, 32, 128, 7168};
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        const uint64_t nt = threads[t];
        for (uint64_t from = 0; from <= 3 * nt + 5; from += nt > 64 ? 37 : 1) {
            const uint64_t end = from + 2 * nt + 3;
            uint64_t taken = 0;
            for (uint64_t tid = 0; tid < nt; tid++) {
                const uint64_t first = symmem_coll_first_at(tid, from, nt);
                CHECK(first >= from && first % nt == tid); /* the plain loop's thread for that position */
                CHECK(first < from + nt);                   /* the first such position: none skipped */
                for (uint64_t pk = first; pk < end; pk += nt) taken++;
            }
            CHECK(taken == end - from); /* each position once */
        }
    }
}

/* Graph registration (collectives/graphreg.h): the agreement on every rank's record, and the plan's zero copy
 * from the mapped sides. */
static void graph_registration_agreement(void)
{
    enum { N = 4 };
    symmem_reg_rec_t all[N];
    memset(all, 0, sizeof all);
    for (int q = 0; q < N; q++) {
        all[q].seq = 7;
        all[q].count = 1000;
        all[q].kind = SYMMEM_COLL_ALL_REDUCE;
        all[q].dtype = SYMMEM_BFLOAT16;
        all[q].op = SYMMEM_OP_SUM;
        all[q].side[0].kind = all[q].side[1].kind = SYMMEM_REG_ORDINARY;
    }
    char err[512];
    int send = -1, recv = -1;
    CHECK(symmem_coll_reg_agree(all, N, 1, &send, &recv, err, sizeof err) == SYMMEM_OK && send == 1 && recv == 1);
    all[2].side[0].kind = SYMMEM_REG_SYMMETRIC; /* one rank's input symmetric: the input is not mapped */
    CHECK(symmem_coll_reg_agree(all, N, 0, &send, &recv, err, sizeof err) == SYMMEM_OK && send == 0 && recv == 1);
    all[3].side[1].kind = SYMMEM_REG_NONE; /* one rank's output without a handle */
    CHECK(symmem_coll_reg_agree(all, N, 3, &send, &recv, err, sizeof err) == SYMMEM_OK && send == 0 && recv == 0);
    /* a rank at another captured call, or with another count: an error naming it, on every rank */
    all[2].seq = 8;
    CHECK(symmem_coll_reg_agree(all, N, 0, &send, &recv, err, sizeof err) == SYMMEM_INVALID_USAGE);
    CHECK(strstr(err, "rank 2") != NULL);
    all[2].seq = 7;
    all[1].count = 999;
    CHECK(symmem_coll_reg_agree(all, N, 3, &send, &recv, err, sizeof err) == SYMMEM_INVALID_USAGE);
    CHECK(strstr(err, "rank 1") != NULL);

    /* the plan reads the mapped sides: every peer's pointer, the tag covering the exchange's number */
    struct symmem_comm comm;
    memset(&comm, 0, sizeof comm);
    comm.nranks = N;
    comm.rank = 1;
    static char mem[N][2][(size_t)1 << 19]; /* 512 KiB each: at the ZC_LARGE size rule */
    symmem_coll_reg_t reg;
    memset(&reg, 0, sizeof reg);
    reg.send = reg.recv = 1;
    reg.seq = 41;
    for (int q = 0; q < N; q++) reg.peer_send[q] = mem[q][0], reg.peer_recv[q] = mem[q][1];
    symmem_coll_call_t c;
    memset(&c, 0, sizeof c);
    c.kind = SYMMEM_COLL_ALL_REDUCE;
    c.send = mem[1][0];
    c.recv = mem[1][1];
    c.count = (size_t)1 << 17;
    c.dtype = SYMMEM_FLOAT32;
    c.reg = &reg;
    const size_t bytes = c.count * 4;
    symmem_coll_params_t p;
    memset(&p, 0, sizeof p);
    uint32_t h1 = 0, h2 = 0;
    CHECK(symmem_coll_zero_copy_in(&comm, &c, bytes, bytes, 1, &p, &h1) == 1);
    CHECK(symmem_coll_zero_copy_out(&comm, &c, bytes, &p, &h1) == 1);
    for (int q = 0; q < N; q++) CHECK(p.peer_send[q] == mem[q][0] && p.peer_recv[q] == mem[q][1]);
    reg.seq = 42;
    CHECK(symmem_coll_zero_copy_in(&comm, &c, bytes, bytes, 1, &p, &h2) == 1);
    CHECK(symmem_coll_zero_copy_out(&comm, &c, bytes, &p, &h2) == 1);
    CHECK(h1 != h2);
    /* the size rule of SYMMEM_COLL_ZC_LARGE algorithms, and no one-shot in place, hold as for symmetric memory */
    CHECK(symmem_coll_zero_copy_in(&comm, &c, SYMMEM_COLL_ZC_MIN_BYTES - 16, SYMMEM_COLL_ZC_MIN_BYTES - 16, 0, &p,
                                   &h2) == 0);
    c.recv = (void *)c.send;
    CHECK(symmem_coll_zero_copy_in(&comm, &c, bytes, bytes, 0, &p, &h2) == 0);
}

/* What the parameters tell the protocol it may skip (protocol.cuh): the late publish wherever no kernel uses PDL,
 * the relaxed first sync only on device memory (the PCIe lab's host memory keeps the release). */
static void protocol_flags(void)
{
    static struct symmem_coll co;
    struct symmem_comm comm;
    memset(&co, 0, sizeof co);
    memset(&comm, 0, sizeof comm);
    comm.nranks = 2;
    comm.coll = &co;
    const symmem_placement_t placements[2] = {SYMMEM_PLACEMENT_DEVICE, SYMMEM_PLACEMENT_HOST_NUMA};
    for (int pdl = 0; pdl < 2; pdl++)
        for (int i = 0; i < 2; i++) {
            co.pdl = pdl;
            comm.placement = placements[i];
            symmem_coll_params_t p;
            symmem_coll_params_base(&comm, &p);
            CHECK(((p.flags & SYMMEM_COLL_PF_LATE_PUBLISH) != 0) == !pdl);
            CHECK(((p.flags & SYMMEM_COLL_PF_DEVICE_DATA) != 0) == (placements[i] == SYMMEM_PLACEMENT_DEVICE));
        }
}

int main(void)
{
    static const test_case_t cases[] = {
        {"prefer_from_figures", prefer_from_figures, 10},
        {"protocol_flags", protocol_flags, 10},
        {"pull_rewrites_pcie_defaults", pull_rewrites_pcie_defaults, 10},
        {"keep_and_push_leave_defaults", keep_and_push_leave_defaults, 10},
        {"probe_parameter", probe_parameter, 10},
        {"block_threads_rule", block_threads_rule, 10},
        {"lamport_buffer_rule", lamport_buffer_rule, 10},
        {"geometry_invariants", geometry_invariants, 60},
        {"island_units", island_units, 10},
        {"first_at_keeps_threads", first_at_keeps_threads, 10},
        {"graph_registration_agreement", graph_registration_agreement, 10},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
