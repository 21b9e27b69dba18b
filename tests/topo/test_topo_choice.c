/* symmem-topo's recommendation and a communicator's algorithm choice agree on every fixture machine
 * (tests/topo/fixtures/<machine>/, each a captured or synthetic sysfs tree): for each, a communicator with
 * one rank per GPU is taken through what its init does with the same machine facts
 *   - comm/facts.c: every rank's link row (the pair links), all_p2p, topo_link_class, the auto placement;
 *   - collectives init: the table of symmem_coll_tune_init, then, where SYMMEM_COLL_PROBE=auto probes
 *     (topo_probe_useful), symmem_coll_tune_measured with the ring figures the probe measures (every GPU at
 *     once with its successor, the minimum over ranks)
 * and compared with what symmem-topo reports: the advice (direction, staged, placement), the table of its
 * JSON report, and the choice at sizes across every bound. Fixtures with figures exercise the probe path. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "collectives/island.h"
#include "collectives/tune.h"
#include "symmem/symmem.h"
#include "test_util.h"
#include "topology/ranks.h"
#include "topology/topo_internal.h"

#define KIB_ ((size_t)1 << 10)
#define MIB_ ((size_t)1 << 20)

/* The communicator's side, from the public per-pair and per-GPU facts of the model. */
static void communicator_choice(symmem_topo_t t, symmem_coll_tuning_t *tu, symmem_placement_t *placement,
                                int *probed)
{
    const int n = symmem_topo_gpu_count(t);
    int32_t links[SYMMEM_TOPO_MAX_GPUS * SYMMEM_TOPO_MAX_GPUS];
    int all_p2p = 1, numa[SYMMEM_TOPO_MAX_GPUS];
    double rd = -1, wr = -1;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            symmem_link_t l;
            EXPECT(symmem_topo_pair_link(t, i, j, &l) == SYMMEM_OK);
            links[i * SYMMEM_TOPO_MAX_GPUS + j] = (int32_t)l;
            all_p2p &= l != SYMMEM_LINK_HOST; /* topo_rank_links: p2p 0 exactly when the link is HOST */
        }
        symmem_topo_gpu_info_t g;
        EXPECT(symmem_topo_gpu_info(t, i, &g) == SYMMEM_OK);
        if (i == 0 || g.ring_read_gbs < rd) rd = g.ring_read_gbs;
        if (i == 0 || g.ring_write_gbs < wr) wr = g.ring_write_gbs;
        numa[i] = g.numa_node < 0 ? -1 : g.numa_node; /* the islands: comm/facts.c's peers[].numa_node */
    }
    const symmem_link_t cls = topo_link_class(n, links, SYMMEM_TOPO_MAX_GPUS, all_p2p);
    *placement = topo_choose_placement(cls);
    topo_choice_facts_t facts = {.nranks = n, .link = cls, .read_gbs = 0.0, .write_gbs = 0.0};
    topo_island_facts(n, numa, &facts);
    symmem_coll_tune_init(tu, "fixture", &facts);
    *probed = topo_probe_useful(cls) && n >= 2 && rd > 0 && wr > 0;
    if (*probed) {
        topo_choice_facts_t measured = {.nranks = n, .link = cls, .read_gbs = rd, .write_gbs = wr};
        topo_island_facts(n, numa, &measured);
        symmem_coll_tune_measured(tu, &measured);
    }
}

/* The facts a communicator with one rank per GPU of this fixture sees (as communicator_choice builds them). */
static void fixture_facts(symmem_topo_t t, int probed, topo_choice_facts_t *f)
{
    const int n = symmem_topo_gpu_count(t);
    int32_t links[SYMMEM_TOPO_MAX_GPUS * SYMMEM_TOPO_MAX_GPUS];
    int all_p2p = 1, numa[SYMMEM_TOPO_MAX_GPUS];
    double rd = -1, wr = -1;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            symmem_link_t l;
            EXPECT(symmem_topo_pair_link(t, i, j, &l) == SYMMEM_OK);
            links[i * SYMMEM_TOPO_MAX_GPUS + j] = (int32_t)l;
            all_p2p &= l != SYMMEM_LINK_HOST;
        }
        symmem_topo_gpu_info_t g;
        EXPECT(symmem_topo_gpu_info(t, i, &g) == SYMMEM_OK);
        if (i == 0 || g.ring_read_gbs < rd) rd = g.ring_read_gbs;
        if (i == 0 || g.ring_write_gbs < wr) wr = g.ring_write_gbs;
        numa[i] = g.numa_node < 0 ? -1 : g.numa_node;
    }
    memset(f, 0, sizeof *f);
    f->nranks = n;
    f->link = topo_link_class(n, links, SYMMEM_TOPO_MAX_GPUS, all_p2p);
    if (probed) f->read_gbs = rd, f->write_gbs = wr;
    topo_island_facts(n, numa, f);
}

/* The table against the model's least predicted time at sizes from 1 KiB to 1 GiB, every op; the island
 * rule (PCIe, several islands, pushing) follows the floors instead (follows_floors checks it). */
static void model_follows_table_facts(const topo_choice_facts_t *f, const topo_table_t *t)
{
    topo_choice_t c;
    topo_choose(f, &c);
    if (f->link == SYMMEM_LINK_PCIE && f->islands > 1 && c.direction == SYMMEM_TOPO_PUSH && !f->host_memory) return;
    topo_cost_machine_t m;
    topo_choice_machine(f, &m);
    for (int k = 0; k <= SYMMEM_COLL_ALL_GATHER; k++) {
        const symmem_coll_kind_t kind = (symmem_coll_kind_t)k;
        topo_cost_candidates_t cand;
        topo_choice_candidates(f, c.prefer, kind, &cand);
        for (size_t b = KIB_; b <= ((size_t)1 << 30); b = b * 9 / 8 + 1) {
            const size_t lo = b / KIB_ * KIB_, hi = lo + KIB_;
            const symmem_algo_t got = topo_table_lookup(t, kind, b);
            EXPECT(got == topo_cost_best(&m, kind, &cand, b, NULL) || got == topo_cost_best(&m, kind, &cand, lo, NULL) ||
                  got == topo_cost_best(&m, kind, &cand, hi, NULL));
        }
    }
}

static void model_follows_table(symmem_topo_t t, const topo_table_t *table, int probed)
{
    topo_choice_facts_t f;
    fixture_facts(t, probed, &f);
    model_follows_table_facts(&f, table);
}

static void compare(const char *name, symmem_topo_t t)
{
    symmem_topo_advice_t a;
    symmem_coll_tuning_t tu;
    symmem_placement_t placement;
    int probed = 0;
    EXPECT(symmem_topo_get_advice(t, &a) == SYMMEM_OK);
    communicator_choice(t, &tu, &placement, &probed);
    const topo_table_t *rec = &t->model.table; /* the table symmem-topo reports (JSON "table") */
    const symmem_topo_direction_t dir = tu.prefer == TOPO_PREFER_PULL ? SYMMEM_TOPO_PULL : SYMMEM_TOPO_PUSH;
    const int staged = symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, SIZE_MAX) == SYMMEM_ALGO_STAGED;
    int fails = test_failures;
    EXPECT(a.direction == dir);
    EXPECT(a.staged == staged);
    EXPECT(a.placement == placement);
    EXPECT(a.measured == probed);
    EXPECT(rec->nrules == tu.defaults.nrules);
    for (int i = 0; i < rec->nrules && i < tu.defaults.nrules; i++) {
        EXPECT(rec->rules[i].kind == tu.defaults.rules[i].kind);
        EXPECT(rec->rules[i].max_bytes == tu.defaults.rules[i].max_bytes);
        EXPECT(rec->rules[i].algo == tu.defaults.rules[i].algo);
    }
    /* what AUTO runs at every bound and around it, against what the report's table says */
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++)
        for (int i = 0; i < rec->nrules; i++) {
            const size_t b = rec->rules[i].max_bytes, sizes[3] = {b == SIZE_MAX ? b : b + 1, b, b ? b - 1 : 0};
            for (int s = 0; s < 3; s++)
                EXPECT(symmem_coll_choose(&tu, (symmem_coll_kind_t)k, SYMMEM_FORM_ORDINARY, sizes[s]) ==
                      topo_table_lookup(rec, (symmem_coll_kind_t)k, sizes[s]));
        }
    /* the cost model's choice: where no island or copy-engine rule applies, the table is the least predicted
     * time among the candidates at every size (up to the KiB rounding of bounds) */
    model_follows_table(t, &tu.defaults, probed);
    /* and the words say the same: every algorithm of the table is named in the recommendation */
    for (int i = 0; i < rec->nrules; i++) EXPECT_CONTAINS(symmem_topo_recommendation(t), symmem_algo_name(rec->rules[i].algo));
    printf("%s %s: %d GPUs, %s, %s%s, %d rules\n", test_failures == fails ? "ok  " : "FAIL", name,
           symmem_topo_gpu_count(t), a.direction == SYMMEM_TOPO_PUSH ? "push" : "pull", a.staged ? "staged" : "not staged",
           probed ? ", from measured ring figures" : "", rec->nrules);
}

/* ---- the copy-engine two-shot's rule (topology/choice.h, topo_copy_engine_rule) -------------------------------- */

static topo_choice_t choose_with(int n, symmem_link_t link, double rd, double wr, double ce)
{
    const topo_choice_facts_t f = {.nranks = n, .link = link, .read_gbs = rd, .write_gbs = wr, .ce_gbs = ce};
    topo_choice_t c;
    topo_choose(&f, &c);
    return c;
}

static int has_algo(const topo_table_t *t, symmem_algo_t a)
{
    for (int i = 0; i < t->nrules; i++)
        if (t->rules[i].algo == a) return 1;
    return 0;
}

/* Where the rule fires, the table is the SM table up to the bound and the copy-engine two-shot above it, for every
 * collective; where it does not, the table is exactly the SM table. */
static void copy_engine_against_sm_table(int n, symmem_link_t link, double rd, double wr, double ce, size_t want_above)
{
    const topo_choice_t sm = choose_with(n, link, rd, wr, 0.0), c = choose_with(n, link, rd, wr, ce);
    EXPECT(c.copy_engine_above == want_above);
    EXPECT(c.direction == sm.direction && c.staged == sm.staged);
    if (want_above == SIZE_MAX) {
        EXPECT(topo_table_hash(&c.table) == topo_table_hash(&sm.table) && !has_algo(&c.table, SYMMEM_ALGO_COPY_ENGINE));
        return;
    }
    const size_t sizes[] = {1, 12 * KIB_, 96 * KIB_, want_above / 2, want_above - 1, want_above};
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            EXPECT(topo_table_lookup(&c.table, (symmem_coll_kind_t)k, sizes[i]) ==
                  topo_table_lookup(&sm.table, (symmem_coll_kind_t)k, sizes[i]));
        /* reduce-scatter and all-gather have their own bound (half the copies, half the saving: the same
         * power of two in every case below) */
        EXPECT(topo_table_lookup(&c.table, (symmem_coll_kind_t)k, want_above + 1) == SYMMEM_ALGO_COPY_ENGINE);
        EXPECT(topo_table_lookup(&c.table, (symmem_coll_kind_t)k, 64 * MIB_) == SYMMEM_ALGO_COPY_ENGINE);
        EXPECT(topo_table_lookup(&c.table, (symmem_coll_kind_t)k, SIZE_MAX) == SYMMEM_ALGO_COPY_ENGINE);
    }
}

static void copy_engine_rule(void)
{
    /* The floor (choice.h): above S the ring wins when wire * S * (1/sm - 1/ce) > copies * C + 2 * L, with
     * wire = copies / n bytes through each GPU per byte, C = 2 us per copy, L = 1 us per extra sync.
     * 8 ranks, all-reduce: copies 14, wire 1.75. SM stores 25 GB/s, copy engine 50 GB/s (ANCHORS: SM stores
     * with every peer driven ~25 GB/s, copy engine 53-55 GB/s): saving 1.75 * (0.04 - 0.02) = 0.035 ns per
     * byte, cost 14 * 2000 + 2000 = 30000 ns, S = 857 KB: 1 MiB (the power of two above). Reduce-scatter /
     * all-gather: 7 copies, wire 0.875, saving 0.0175 ns/B, cost 16000 ns, S = 914 KB: 1 MiB too. */
    EXPECT(topo_copy_engine_above_bytes(8, SYMMEM_COLL_ALL_REDUCE, 25.0, 50.0) == MIB_);
    EXPECT(topo_copy_engine_above_bytes(8, SYMMEM_COLL_REDUCE_SCATTER, 25.0, 50.0) == MIB_);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, 50.0, MIB_);
    /* a narrower gap moves the bound up: sm 27, ce 40 (27 < 0.7 * 40 = 28): saving 1.75 * (1/27 - 1/40) =
     * 0.02106 ns/B, S = 30000 / 0.02106 = 1.42 MB: 2 MiB; reduce-scatter 16000 / 0.01053 = 1.52 MB: 2 MiB */
    EXPECT(topo_copy_engine_above_bytes(8, SYMMEM_COLL_ALL_REDUCE, 27.0, 40.0) == 2 * MIB_);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 27.0, 40.0, 2 * MIB_);
    /* a wide gap never goes below 1 MiB: sm 10, ce 50 gives S = 30000 / 0.14 = 214 KB */
    EXPECT(topo_copy_engine_above_bytes(8, SYMMEM_COLL_ALL_REDUCE, 10.0, 50.0) == MIB_);
    /* the margin: the copy engine must be faster than the SM figure by the push/pull margin (sm < 0.7 ce) */
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 36.0, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 35.0, 50.0, SIZE_MAX); /* strict: 35 = 0.7 * 50 */
    EXPECT(topo_copy_engine_above_bytes(8, SYMMEM_COLL_ALL_REDUCE, 34.0, 50.0) != SIZE_MAX);
    /* the SM figure compared is the direction's: a pulling table (stores 2.6, loads 40) compares loads */
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 40.0, 2.6, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 25.0, 2.6, 50.0, MIB_);
    /* every rank count: a power of two of at least 1 MiB, the SM table below it */
    for (int n = 2; n <= 8; n++) {
        const size_t a = topo_copy_engine_above_bytes(n, SYMMEM_COLL_ALL_REDUCE, 25.0, 50.0);
        EXPECT(a >= MIB_ && a != SIZE_MAX && (a & (a - 1)) == 0);
        copy_engine_against_sm_table(n, SYMMEM_LINK_PCIE, 20.0, 25.0, 50.0, a);
    }
    /* the bound against choice.h's floor at every rank count and op over a grid of figures, dense enough
     * that a change to the copy count, the bytes through a GPU or the fixed costs moves some bound past a
     * power of two: the least power of two of at least 1 MiB that is not below S */
    int above_1mib = 0;
    for (int n = 2; n <= 16; n++)
        for (int k = 0; k < 2; k++) {
            const int kind = k ? SYMMEM_COLL_REDUCE_SCATTER : SYMMEM_COLL_ALL_REDUCE;
            for (double sm = 4.0; sm <= 34.0; sm += 0.5)
                for (double ce = 50.0; ce <= 60.0; ce += 1.0) {
                    const double copies = k ? n - 1.0 : 2.0 * (n - 1), wire = copies / n;
                    const double S = (copies * TOPO_CE_COPY_NS + 2.0 * TOPO_CE_SYNC_NS) / (wire * (1.0 / sm - 1.0 / ce));
                    size_t want = MIB_;
                    while ((double)want < S) want *= 2;
                    const size_t got = topo_copy_engine_above_bytes(n, kind, sm, ce);
                    EXPECT_MSG(got == want, "%d ranks, %s, sm %.1f ce %.0f: %zu, want %zu (S %.0f)", n,
                               k ? "reduce-scatter" : "all-reduce", sm, ce, got, want, S);
                    above_1mib += want > MIB_;
                }
        }
    EXPECT(above_1mib > 1000);
    /* never without the probe's figures (SM or copy engine), never off PCIe */
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 0.0, 0.0, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 0.0, 25.0, 50.0, SIZE_MAX); /* one direction is no figure */
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, INFINITY, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, 0.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, -1.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, NAN, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, INFINITY, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_NVLINK, 300.0, 340.0, 1000.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_HOST, 10.0, 10.0, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(1, SYMMEM_LINK_PCIE, 20.0, 25.0, 50.0, SIZE_MAX);
    /* one island (as a communicator's facts always carry it) is no island boundary: the rule fires; buffers in
     * host memory on a PCIe box do not take it (the copies would cross the GPU's own link twice) */
    {
        const int same[8] = {0};
        topo_choice_facts_t one = {.nranks = 8, .link = SYMMEM_LINK_PCIE, .read_gbs = 20.0, .write_gbs = 25.0,
                                   .ce_gbs = 50.0};
        topo_island_facts(8, same, &one);
        EXPECT(one.islands == 1);
        topo_choice_t c;
        topo_choose(&one, &c);
        EXPECT(c.copy_engine_above == MIB_);
        one.host_memory = 1;
        topo_choose(&one, &c);
        EXPECT(c.copy_engine_above == SIZE_MAX && !has_algo(&c.table, SYMMEM_ALGO_COPY_ENGINE));
    }
    /* copy_engine_above is the all-reduce's bound where the other ops' differ: 2 ranks, SM 89 and copy engine
     * 130 GB/s give 1.69 MB (2 MiB) for the all-reduce's 2 copies and 2.26 MB (4 MiB) for reduce-scatter's 1 */
    {
        const topo_choice_t c = choose_with(2, SYMMEM_LINK_PCIE, 89.0, 89.0, 130.0);
        EXPECT(c.copy_engine_above == 2 * MIB_);
        EXPECT(topo_copy_engine_above_bytes(2, SYMMEM_COLL_REDUCE_SCATTER, 89.0, 130.0) == 4 * MIB_);
        EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, 3 * MIB_) == SYMMEM_ALGO_COPY_ENGINE);
        EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_REDUCE_SCATTER, 3 * MIB_) != SYMMEM_ALGO_COPY_ENGINE);
        EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_REDUCE_SCATTER, 5 * MIB_) == SYMMEM_ALGO_COPY_ENGINE);
    }
    /* never across islands (two sockets): the island schedule's rules stand, with or without the figure */
    {
        const int numa[8] = {0, 0, 0, 0, 1, 1, 1, 1};
        topo_choice_facts_t with = {.nranks = 8, .link = SYMMEM_LINK_PCIE, .read_gbs = 20.0, .write_gbs = 25.0,
                                    .ce_gbs = 50.0};
        topo_island_facts(8, numa, &with);
        topo_choice_facts_t without = with;
        without.ce_gbs = 0.0;
        topo_choice_t a, b;
        topo_choose(&with, &a);
        topo_choose(&without, &b);
        EXPECT(a.copy_engine_above == SIZE_MAX && topo_table_hash(&a.table) == topo_table_hash(&b.table));
        EXPECT(!has_algo(&a.table, SYMMEM_ALGO_COPY_ENGINE) && has_algo(&a.table, SYMMEM_ALGO_ISLAND));
    }
    /* the communicator's path: the probe's figures through symmem_coll_tune_measured, AUTO resolving */
    symmem_coll_tuning_t tu;
    const topo_choice_facts_t none = {.nranks = 8, .link = SYMMEM_LINK_PCIE},
                              probed = {.nranks = 8, .link = SYMMEM_LINK_PCIE, .read_gbs = 20.0, .write_gbs = 25.0,
                                        .ce_gbs = 50.0};
    symmem_coll_tune_init(&tu, "fixture", &none);
    EXPECT(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 64 * MIB_) == SYMMEM_ALGO_STAGED);
    EXPECT(symmem_coll_tune_measured(&tu, &probed) > 0);
    EXPECT(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, 64 * MIB_) == SYMMEM_ALGO_COPY_ENGINE);
    EXPECT(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SYMMEM_FORM_ORDINARY, MIB_) == SYMMEM_ALGO_STAGED);
    EXPECT(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_GATHER, SYMMEM_FORM_ORDINARY, 16 * MIB_) == SYMMEM_ALGO_COPY_ENGINE);
    EXPECT(symmem_coll_choose(&tu, SYMMEM_COLL_REDUCE_SCATTER, SYMMEM_FORM_ORDINARY, 12 * KIB_) == SYMMEM_ALGO_ONESHOT_PUSH);
    printf("%s copy-engine two-shot rule\n", test_failures ? "FAIL" : "ok  ");
}

/* ---- the island rule ----------------------------------------------------------------------- */

/* The islands from the ranks' keys: the first n keys only, sizes in order of first appearance; the island
 * floors price one-shot push, staged and island only (-1 for any other algorithm). */
static void island_facts_and_floors(void)
{
    const int key[5] = {3, 7, 3, 3, 9}; /* key[4] is past the 4 ranks */
    topo_choice_facts_t f = {.nranks = 4, .link = SYMMEM_LINK_PCIE};
    topo_island_facts(4, key, &f);
    EXPECT(f.islands == 2 && f.island_size[0] == 3 && f.island_size[1] == 1 && f.island_size[2] == 0);
    for (int a = SYMMEM_ALGO_AUTO; a < SYMMEM_ALGO_COUNT; a++) {
        const double us = topo_island_floor_us(&f, SYMMEM_COLL_ALL_REDUCE, (symmem_algo_t)a, 64 * KIB_);
        const int priced = a == SYMMEM_ALGO_ONESHOT_PUSH || a == SYMMEM_ALGO_STAGED || a == SYMMEM_ALGO_ISLAND;
        EXPECT_MSG(priced ? us > 0.0 : us == -1.0, "%s: %.3f", symmem_algo_name((symmem_algo_t)a), us);
    }
}

/* The least floor of one-shot push, staged and island; a tie keeps `keep` (what the rules before said). */
static symmem_algo_t least_floor(const topo_choice_facts_t *f, symmem_coll_kind_t kind, size_t bytes, symmem_algo_t keep)
{
    const symmem_algo_t cand[3] = {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_STAGED, SYMMEM_ALGO_ISLAND};
    symmem_algo_t best = keep;
    double least = topo_island_floor_us(f, kind, keep, bytes);
    if (least < 0) best = cand[0], least = topo_island_floor_us(f, kind, best, bytes);
    for (int i = 0; i < 3; i++)
        if (topo_island_floor_us(f, kind, cand[i], bytes) < least)
            best = cand[i], least = topo_island_floor_us(f, kind, cand[i], bytes);
    return best;
}

/* The PCIe rules without islands (what a tie keeps). */
static symmem_algo_t pcie_rule(int n, symmem_coll_kind_t kind, size_t bytes)
{
    topo_choice_t c;
    const topo_choice_facts_t f = {.nranks = n, .link = SYMMEM_LINK_PCIE};
    topo_choose(&f, &c);
    return topo_table_lookup(&c.table, kind, bytes);
}

/* The table follows the least floor at every size from 1 KiB to 1 GiB, up to the KiB rounding of bounds. */
static void follows_floors(const topo_choice_facts_t *f, const topo_table_t *t)
{
    for (int k = 0; k <= SYMMEM_COLL_ALL_GATHER; k++)
        for (size_t b = KIB_; b <= ((size_t)1 << 30); b = b * 9 / 8 + 1) {
            const symmem_coll_kind_t kind = (symmem_coll_kind_t)k;
            const symmem_algo_t got = topo_table_lookup(t, kind, b);
            const size_t lo = b / KIB_ * KIB_, hi = lo + KIB_;
            EXPECT(got == least_floor(f, kind, b, pcie_rule(f->nranks, kind, b)) ||
                  got == least_floor(f, kind, lo, pcie_rule(f->nranks, kind, lo)) ||
                  got == least_floor(f, kind, hi, pcie_rule(f->nranks, kind, hi)));
        }
}

/* Every bound of an island table is where the least floor changes, to the KiB it is rounded down to: the
 * rule's algorithm is the least floor at its bound, and the next rule's a KiB above it. */
static void bounds_are_crossovers(const topo_choice_facts_t *f, const topo_table_t *t)
{
    int bounds = 0;
    for (int i = 0; i + 1 < t->nrules; i++) {
        const topo_rule_t *r = &t->rules[i], *next = &t->rules[i + 1];
        if (next->kind != r->kind) continue;
        const symmem_coll_kind_t kind = (symmem_coll_kind_t)r->kind;
        const size_t m = r->max_bytes;
        EXPECT_MSG(least_floor(f, kind, m, pcie_rule(f->nranks, kind, m)) == r->algo &&
                       least_floor(f, kind, m + KIB_, pcie_rule(f->nranks, kind, m + KIB_)) == next->algo,
                   "%s rule up to %zu B (%s, then %s) is not where the floors cross", symmem_coll_kind_name(kind), m,
                   symmem_algo_name(r->algo), symmem_algo_name(next->algo));
        bounds++;
    }
    EXPECT(bounds >= 1);
}

/* The two-socket 8-GPU fixture as a communicator sees it (NUMA nodes 0-3 | 4-7): at the user story's sizes
 * the all-reduce runs what the floors of bench/NOTES.md ("Island schedule: floors") make least, and the
 * floors are the ones written there (one-shot push, staged, island in microseconds). */
static void island_choice_two_sockets(const char *fixtures)
{
    char root[4096];
    snprintf(root, sizeof root, "%s/pcie-2socket-8gpu", fixtures);
    symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
    o.sysfs_root = root;
    symmem_topo_t t = NULL;
    EXPECT(symmem_topo_discover(&o, &t) == SYMMEM_OK);
    if (!t) return;
    symmem_coll_tuning_t tu;
    symmem_placement_t placement;
    int probed = 0;
    communicator_choice(t, &tu, &placement, &probed);
    const int numa[8] = {0, 0, 0, 0, 1, 1, 1, 1};
    topo_choice_facts_t f = {.nranks = 8, .link = SYMMEM_LINK_PCIE};
    topo_island_facts(8, numa, &f);
    EXPECT(f.islands == 2 && f.island_size[0] == 4 && f.island_size[1] == 4);
    static const struct {
        symmem_coll_kind_t kind;
        size_t bytes;
        double oneshot, staged, island;
        symmem_algo_t want;
    } rows[] = {
        {SYMMEM_COLL_ALL_REDUCE, 12 * KIB_, 6.22, 3.83, 4.94, SYMMEM_ALGO_STAGED},
        {SYMMEM_COLL_ALL_REDUCE, 96 * KIB_, 40.62, 12.43, 12.26, SYMMEM_ALGO_ISLAND},
        {SYMMEM_COLL_ALL_REDUCE, 1 * MIB_, 420.73, 107.46, 93.03, SYMMEM_ALGO_ISLAND},
        {SYMMEM_COLL_ALL_REDUCE, 64 * MIB_, 26844.85, 6713.49, 5708.15, SYMMEM_ALGO_ISLAND},
        {SYMMEM_COLL_REDUCE_SCATTER, 1 * MIB_, 53.73, 53.73, 47.16, SYMMEM_ALGO_ISLAND},
        {SYMMEM_COLL_ALL_GATHER, 1 * MIB_, 53.73, 53.73, 39.30, SYMMEM_ALGO_ISLAND},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const symmem_coll_kind_t kind = rows[i].kind;
        const double o1 = topo_island_floor_us(&f, kind, SYMMEM_ALGO_ONESHOT_PUSH, rows[i].bytes);
        const double st = topo_island_floor_us(&f, kind, SYMMEM_ALGO_STAGED, rows[i].bytes);
        const double is = topo_island_floor_us(&f, kind, SYMMEM_ALGO_ISLAND, rows[i].bytes);
        printf("island floors, %s of %zu B: oneshot_push %.2f us, staged %.2f us, island %.2f us\n",
               symmem_coll_kind_name(kind), rows[i].bytes, o1, st, is);
        EXPECT(fabs(o1 - rows[i].oneshot) < 0.05 && fabs(st - rows[i].staged) < 0.05 && fabs(is - rows[i].island) < 0.05);
        /* the communicator's table and symmem-topo's agree with the floors */
        EXPECT(symmem_coll_choose(&tu, kind, SYMMEM_FORM_ORDINARY, rows[i].bytes) == rows[i].want);
        EXPECT(topo_table_lookup(&t->model.table, kind, rows[i].bytes) == rows[i].want);
    }
    follows_floors(&f, &tu.defaults);
    bounds_are_crossovers(&f, &tu.defaults);
    EXPECT_CONTAINS(symmem_topo_recommendation(t), "above island");
    symmem_topo_destroy(t);
}

/* The hosts with more than eight GPUs (pcie-2socket-16gpu: two sockets of two switches of four GPUs;
 * pcie-2socket-10gpu: two sockets of one switch of five), as a communicator with one rank per GPU sees them.
 * What any sound choice must hold there, whatever its exact bounds: the islands are the two sockets; buffers
 * in device memory (every pair has P2P); the island schedule exists for every rank and every operation of
 * that split; the table follows the least floor at every size and runs the island schedule where the floors
 * put it first (mid and large all-reduces: each byte over the socket link once); and every rank builds the
 * same table from its own view (its islands through symmem_island_split_from_numa, as collectives init
 * does), equal to symmem-topo's. The exact bounds are printed, not asserted: they are the model's
 * (topology/choice.c) to set, and the measured-choice work owns them. */
static void island_choice_many_gpus(const char *fixtures, const char *name, int n)
{
    char root[4096];
    snprintf(root, sizeof root, "%s/%s", fixtures, name);
    symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
    o.sysfs_root = root;
    symmem_topo_t t = NULL;
    EXPECT(symmem_topo_discover(&o, &t) == SYMMEM_OK);
    if (!t) return;
    const int fails = test_failures;
    EXPECT(symmem_topo_gpu_count(t) == n);
    symmem_coll_tuning_t tu;
    symmem_placement_t placement;
    int probed = 0;
    communicator_choice(t, &tu, &placement, &probed);
    EXPECT(placement == SYMMEM_PLACEMENT_DEVICE && !probed);
    int numa[SYMMEM_TOPO_MAX_GPUS];
    for (int i = 0; i < n; i++) {
        symmem_topo_gpu_info_t g;
        EXPECT(symmem_topo_gpu_info(t, i, &g) == SYMMEM_OK);
        numa[i] = g.numa_node;
    }
    topo_choice_facts_t f = {.nranks = n, .link = SYMMEM_LINK_PCIE};
    topo_island_facts(n, numa, &f);
    EXPECT(f.islands == 2 && f.island_size[0] == n / 2 && f.island_size[1] == n / 2);
    /* every rank's view: the split collectives init makes from the NUMA nodes, each rank's schedules */
    symmem_island_split_t split;
    symmem_island_split_from_numa(n, numa, &split);
    EXPECT(split.count == 2);
    for (int q = 0; q < n; q++) EXPECT(split.of[q] == (q < n / 2 ? 0 : 1));
    uint64_t first_hash = 0;
    for (int r = 0; r < n; r++) {
        for (int k = 0; k <= SYMMEM_COLL_ALL_GATHER; k++) {
            symmem_island_sched_t sc;
            char err[512];
            const int ok = symmem_island_schedule(&split, (symmem_coll_kind_t)k, r, &sc, err, sizeof err) == 0;
            if (!ok) fprintf(stderr, "%s: rank %d: %s\n", name, r, err);
            EXPECT(ok && sc.nsteps > 0);
        }
        int key[SYMMEM_MAX_RANKS];
        for (int q = 0; q < n; q++) key[q] = split.of[q];
        topo_choice_facts_t mine = {.nranks = n, .link = SYMMEM_LINK_PCIE};
        topo_island_facts(n, key, &mine);
        symmem_coll_tuning_t rt;
        symmem_coll_tune_init(&rt, "fixture", &mine);
        const uint64_t h = topo_table_hash(&rt.defaults);
        if (r == 0) first_hash = h;
        EXPECT(h == first_hash && h == topo_table_hash(&tu.defaults) && h == topo_table_hash(&t->model.table));
    }
    follows_floors(&f, &tu.defaults);
    bounds_are_crossovers(&f, &tu.defaults);
    /* where the floors put the island schedule first, the table runs it */
    static const size_t sizes[] = {96 * KIB_, 1 * MIB_, 64 * MIB_};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const symmem_coll_kind_t kind = SYMMEM_COLL_ALL_REDUCE;
        const double o1 = topo_island_floor_us(&f, kind, SYMMEM_ALGO_ONESHOT_PUSH, sizes[i]);
        const double sg = topo_island_floor_us(&f, kind, SYMMEM_ALGO_STAGED, sizes[i]);
        const double is = topo_island_floor_us(&f, kind, SYMMEM_ALGO_ISLAND, sizes[i]);
        printf("%s island floors, all_reduce of %zu B: oneshot_push %.2f us, staged %.2f us, island %.2f us\n", name,
               sizes[i], o1, sg, is);
        EXPECT(is < o1 && is < sg);
        EXPECT(symmem_coll_choose(&tu, kind, SYMMEM_FORM_ORDINARY, sizes[i]) == SYMMEM_ALGO_ISLAND);
    }
    EXPECT(topo_table_lookup(&tu.defaults, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX) == SYMMEM_ALGO_ISLAND);
    EXPECT(topo_table_lookup(&tu.defaults, SYMMEM_COLL_ALL_GATHER, SIZE_MAX) == SYMMEM_ALGO_ISLAND);
    for (int i = 0; i < tu.defaults.nrules; i++)
        printf("%s table: %s up to %zu B: %s\n", name, symmem_coll_kind_name((symmem_coll_kind_t)tu.defaults.rules[i].kind),
               tu.defaults.rules[i].max_bytes, symmem_algo_name(tu.defaults.rules[i].algo));
    printf("%s %s: islands 2 x %d, island schedule for every rank, every rank's table the same\n",
           test_failures == fails ? "ok  " : "FAIL", name, n / 2);
    symmem_topo_destroy(t);
}

/* Where the island rule does not apply: one island, NVLink, pull preferred; and unequal islands (3+5) still
 * choose by the floors. */
static void island_choice_elsewhere(void)
{
    const int two[8] = {0, 0, 0, 0, 1, 1, 1, 1}, one[8] = {0}, unequal[8] = {0, 0, 0, 1, 1, 1, 1, 1};
    topo_choice_t c;
    topo_choice_facts_t f = {.nranks = 8, .link = SYMMEM_LINK_PCIE};
    topo_island_facts(8, one, &f);
    topo_choose(&f, &c);
    EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, 64 * MIB_) == SYMMEM_ALGO_STAGED);
    f = (topo_choice_facts_t){.nranks = 8, .link = SYMMEM_LINK_NVLINK};
    topo_island_facts(8, two, &f);
    topo_choose(&f, &c);
    EXPECT(!has_algo(&c.table, SYMMEM_ALGO_ISLAND) && !has_algo(&c.table, SYMMEM_ALGO_STAGED));
    f = (topo_choice_facts_t){.nranks = 8, .link = SYMMEM_LINK_PCIE, .read_gbs = 52.0, .write_gbs = 2.6};
    topo_island_facts(8, two, &f);
    topo_choose(&f, &c);
    EXPECT(c.direction == SYMMEM_TOPO_PULL);
    for (int i = 0; i < c.table.nrules; i++) EXPECT(c.table.rules[i].algo != SYMMEM_ALGO_ISLAND);
    f = (topo_choice_facts_t){.nranks = 8, .link = SYMMEM_LINK_PCIE};
    topo_island_facts(8, unequal, &f);
    topo_choose(&f, &c);
    EXPECT(f.islands == 2 && f.island_size[0] == 3 && f.island_size[1] == 5);
    follows_floors(&f, &c.table);
    EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, 64 * MIB_) == SYMMEM_ALGO_ISLAND);
    /* one island gets the cost model's own table (rebuilt here from topo_cost_rules), not the floors'; three
     * ranks over two sockets (the fewest the island rule takes) follow the floors */
    topo_choice_t none;
    f = (topo_choice_facts_t){.nranks = 8, .link = SYMMEM_LINK_PCIE};
    topo_island_facts(8, one, &f);
    topo_choose(&f, &c);
    topo_table_t model = {.nrules = 0};
    topo_cost_machine_t m;
    topo_choice_machine(&f, &m);
    for (int k = 0; k <= SYMMEM_COLL_ALL_GATHER; k++) {
        topo_cost_candidates_t cand;
        topo_choice_candidates(&f, c.prefer, (symmem_coll_kind_t)k, &cand);
        size_t max_bytes[TOPO_TABLE_MAX_RULES];
        symmem_algo_t algo[TOPO_TABLE_MAX_RULES];
        const int nr = topo_cost_rules(&m, (symmem_coll_kind_t)k, &cand, topo_cost_us, max_bytes, algo,
                                       TOPO_TABLE_MAX_RULES);
        for (int i = 0; i < nr; i++) topo_table_add(&model, k, max_bytes[i], algo[i]);
    }
    EXPECT(f.islands == 1 && topo_table_hash(&c.table) == topo_table_hash(&model));
    const int three[3] = {0, 0, 1};
    f = (topo_choice_facts_t){.nranks = 3, .link = SYMMEM_LINK_PCIE};
    topo_choose(&f, &none);
    topo_island_facts(3, three, &f);
    topo_choose(&f, &c);
    follows_floors(&f, &c.table);
    EXPECT(topo_table_hash(&c.table) != topo_table_hash(&none.table));
}

/* ---- the PCIe lab (every rank on one GPU, symmetric memory in pinned host memory) ------------------------------- */
/* The facts a lab communicator of n ranks sees: one GPU (link class NVLink, as topo_link_class says for ranks
 * that share a GPU), host memory, every rank on that GPU's one link; the probe's figures: the link's (host
 * reads 50.8 GB/s, writes 52.3 GB/s on the lab's H200) shared by the n ranks that measure at once. */
static topo_choice_facts_t lab_facts(int n)
{
    topo_choice_facts_t f = {.nranks = n, .link = SYMMEM_LINK_NVLINK, .read_gbs = 50.8 / n, .write_gbs = 52.3 / n,
                             .host_memory = 1, .ranks_per_gpu = n};
    const int one[SYMMEM_MAX_RANKS] = {0};
    topo_island_facts(n, one, &f);
    return f;
}

/* The probe's figures replace the model's defaults: per-rank bandwidths as measured, the duplex factor from
 * the copy that loads and stores at once (1/rw between the full overlap max(1/R, 1/W) and taking turns
 * 1/R + 1/W: 1 at the first, 0 at the second, linear between, clamped outside), and the kernel's fixed cost
 * from the barrier less its trip and flag sync (at least 0.3 us). */
static void machine_from_probe(void)
{
    const double rd = 50.0, wr = 40.0; /* reads the faster way: full overlap costs 1/40 per byte */
    const double full = 1.0 / wr, turns = 1.0 / rd + 1.0 / wr;
    static const struct {
        double got_per_byte, duplex; /* 1/rw as a point between full (0) and turns (1); want */
    } rows[] = {{0.0, 1.0}, {0.25, 0.75}, {0.5, 0.5}, {1.0, 0.0}, {-0.5, 1.0}, {2.0, 0.0}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        topo_choice_facts_t f = lab_facts(4);
        f.read_gbs = rd;
        f.write_gbs = wr;
        f.rw_gbs = 1.0 / (full + rows[i].got_per_byte * (turns - full));
        topo_cost_machine_t m;
        topo_choice_machine(&f, &m);
        EXPECT_MSG(fabs(m.duplex - rows[i].duplex) < 1e-9, "rw %.3f GB/s: duplex %.6f, want %.2f", f.rw_gbs, m.duplex,
                   rows[i].duplex);
        EXPECT(m.read_gbs == rd && m.write_gbs == wr);
        f.read_gbs = wr; /* the same with the directions swapped */
        f.write_gbs = rd;
        topo_choice_machine(&f, &m);
        EXPECT(fabs(m.duplex - rows[i].duplex) < 1e-9);
    }
    /* no copy figure: the host memory's default; no bandwidths: the copy figure alone is not used */
    topo_choice_facts_t f = lab_facts(4);
    topo_cost_machine_t m;
    topo_choice_machine(&f, &m);
    const double def = m.duplex;
    EXPECT(def > 0.0 && def < 1.0);
    f.rw_gbs = wr;
    topo_choice_machine(&f, &m);
    EXPECT(m.duplex == 1.0);
    f.read_gbs = 0.0;
    topo_choice_machine(&f, &m);
    EXPECT(m.duplex == def);
    /* the barrier: 10 us less a 2 us trip and a 2 us sync leaves 6 us per kernel; 1 us leaves the floor */
    f = lab_facts(4);
    topo_choice_machine(&f, &m);
    const double trip = m.trip_us, sync = m.sync_us;
    f.barrier_us = trip + sync + 6.0;
    topo_choice_machine(&f, &m);
    EXPECT(fabs(m.kernel_us - 6.0) < 1e-9);
    f.barrier_us = 1.0;
    topo_choice_machine(&f, &m);
    EXPECT(m.kernel_us == 0.3);
}

/* The model's figures where nothing was measured, by class (topology/choice.c, the built-in table's
 * comment): NVLink, PCIe within a socket and across (the island's trip), every rank on one GPU (its own
 * memory, divided among the ranks), host memory (the duplex); the constants every class shares, in the
 * model's units (us, GB/s = bytes per ns). */
static void machine_defaults(void)
{
    static const struct {
        symmem_link_t link;
        int host_memory, n, per_gpu, islands;
        double write, read, trip, duplex, local;
    } rows[] = {
        {SYMMEM_LINK_NVLINK, 0, 8, 1, 1, 340.0, 300.0, 1.3, 1.0, 4000.0},
        {SYMMEM_LINK_PCIE, 0, 8, 1, 1, 25.0, 25.0, 1.0, 1.0, 4000.0},
        {SYMMEM_LINK_PCIE, 0, 8, 1, 2, 25.0, 25.0, 1.3, 1.0, 4000.0},
        {SYMMEM_LINK_NVLINK, 0, 4, 4, 1, 1500.0 / 4, 1500.0 / 4, 0.8, 1.0, 4000.0 / 4},
        {SYMMEM_LINK_PCIE, 0, 4, 2, 1, 25.0 / 2, 25.0 / 2, 1.0, 1.0, 4000.0 / 2},
        {SYMMEM_LINK_HOST, 1, 4, 1, 1, 25.0, 25.0, 2.0, 0.5, 4000.0},
        {SYMMEM_LINK_NVLINK, 1, 8, 8, 1, 25.0 / 8, 25.0 / 8, 2.0, 0.5, 4000.0 / 8},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        topo_choice_facts_t f = {.nranks = rows[i].n, .link = rows[i].link, .host_memory = rows[i].host_memory,
                                 .ranks_per_gpu = rows[i].per_gpu};
        int key[SYMMEM_MAX_RANKS] = {0};
        for (int r = 0; r < rows[i].n; r++) key[r] = rows[i].islands > 1 && r >= rows[i].n / 2;
        topo_island_facts(rows[i].n, key, &f);
        topo_cost_machine_t m;
        topo_choice_machine(&f, &m);
        EXPECT_MSG(fabs(m.write_gbs - rows[i].write) < 1e-9 && fabs(m.read_gbs - rows[i].read) < 1e-9 &&
                       fabs(m.trip_us - rows[i].trip) < 1e-9 && m.sync_us == m.trip_us &&
                       fabs(m.duplex - rows[i].duplex) < 1e-9 && fabs(m.local_gbs - rows[i].local) < 1e-9,
                   "row %zu: write %.2f read %.2f trip %.2f duplex %.2f local %.1f", i, m.write_gbs, m.read_gbs,
                   m.trip_us, m.duplex, m.local_gbs);
        EXPECT(m.islands == rows[i].islands && m.ranks_per_link == rows[i].per_gpu);
        EXPECT(fabs(m.kernel_us - 1.6) < 1e-9 && fabs(m.ce_copy_us - TOPO_CE_COPY_NS * 1e-3) < 1e-9);
        EXPECT(fabs(m.socket_gbs - 40.0) < 1e-9); /* the link into an island: 40 GB/s, 40 bytes per ns */
        EXPECT(m.ce_gbs == 0.0);                  /* no copy-engine figure: none assumed */
    }
}

/* What the model prices for each op (topology/choice.c, topo_choice_candidates): pull-preferring links the
 * two pulls; otherwise one-shot push, the Lamport two-shot where the link is not PCIe, and the flag two-shot
 * (staged on PCIe, whose peers take one writer at a time); all-gather its two-shot or staged; an all-reduce
 * of ranks that all share one GPU's device memory also the two-shot pull. */
static void candidates_by_link(void)
{
    static const struct {
        symmem_link_t link;
        int host_memory;
        topo_prefer_t prefer;
        symmem_coll_kind_t kind;
        symmem_algo_t want[4];
        int per_gpu; /* ranks_per_gpu of the 4 ranks (0: one each) */
    } rows[] = {
        {SYMMEM_LINK_PCIE, 0, TOPO_PREFER_PULL, SYMMEM_COLL_ALL_REDUCE,
         {SYMMEM_ALGO_ONESHOT_PULL, SYMMEM_ALGO_TWOSHOT_PULL}, 0},
        {SYMMEM_LINK_NVLINK, 0, TOPO_PREFER_PULL, SYMMEM_COLL_ALL_GATHER,
         {SYMMEM_ALGO_ONESHOT_PULL, SYMMEM_ALGO_TWOSHOT_PULL}, 0},
        {SYMMEM_LINK_NVLINK, 0, TOPO_PREFER_KEEP, SYMMEM_COLL_ALL_REDUCE,
         {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_TWOSHOT_PUSH}, 0},
        {SYMMEM_LINK_PCIE, 0, TOPO_PREFER_PUSH, SYMMEM_COLL_REDUCE_SCATTER,
         {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_STAGED}, 0},
        {SYMMEM_LINK_PCIE, 1, TOPO_PREFER_KEEP, SYMMEM_COLL_ALL_REDUCE,
         {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_TWOSHOT_PUSH}, 0},
        {SYMMEM_LINK_NVLINK, 0, TOPO_PREFER_KEEP, SYMMEM_COLL_ALL_GATHER, {SYMMEM_ALGO_TWOSHOT_PUSH, SYMMEM_ALGO_STAGED}, 0},
        {SYMMEM_LINK_PCIE, 0, TOPO_PREFER_KEEP, SYMMEM_COLL_ALL_GATHER, {SYMMEM_ALGO_STAGED}, 0},
        {SYMMEM_LINK_SELF, 0, TOPO_PREFER_KEEP, SYMMEM_COLL_ALL_REDUCE,
         {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_TWOSHOT_PUSH, SYMMEM_ALGO_TWOSHOT_PULL},
         4},
        /* two GPUs of two ranks each: the link between them decides the direction, as without sharing */
        {SYMMEM_LINK_NVLINK, 0, TOPO_PREFER_KEEP, SYMMEM_COLL_ALL_REDUCE,
         {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_TWOSHOT_PUSH}, 2},
        /* the lab: one GPU, host memory behind its PCIe link */
        {SYMMEM_LINK_SELF, 1, TOPO_PREFER_KEEP, SYMMEM_COLL_ALL_REDUCE,
         {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_TWOSHOT_PUSH}, 4},
        {SYMMEM_LINK_SELF, 0, TOPO_PREFER_KEEP, SYMMEM_COLL_REDUCE_SCATTER,
         {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_TWOSHOT_LAMPORT, SYMMEM_ALGO_TWOSHOT_PUSH}, 4},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const topo_choice_facts_t f = {.nranks = 4, .link = rows[i].link, .host_memory = rows[i].host_memory,
                                       .ranks_per_gpu = rows[i].per_gpu};
        topo_cost_candidates_t c;
        memset(&c, 0xab, sizeof c); /* what the caller's memory held must not show through */
        topo_choice_candidates(&f, rows[i].prefer, rows[i].kind, &c);
        int want_n = 0;
        while (want_n < 4 && rows[i].want[want_n] != 0) want_n++;
        int same = c.n == want_n;
        for (int k = 0; same && k < want_n; k++) same = c.algo[k] == rows[i].want[k];
        EXPECT_MSG(same, "row %zu: %d candidates (want %d), the first %s", i, c.n, want_n,
                   c.n > 0 ? symmem_algo_name(c.algo[0]) : "none");
    }
}

/* The model on the lab against what the lab measured (bench/NOTES.md, "The model against the lab's measured
 * rows": one H200, ranks as processes under MPS, bf16 sum, µs per op): it ranks one-shot push behind the
 * two-shots where the lab did (8 ranks from 12 KiB, 4 ranks from 48 KiB), by about the factor measured at 8
 * ranks and 96 KiB (4.05), and predicts the measured times of the rows bandwidth decides within 25%
 * (oneshot_push 8 ranks 96 KiB 256.9, twoshot_push 8 ranks 96 KiB 63.4, 4 ranks 1 MiB 219.3, 8 ranks 1 MiB
 * 508). Its table never runs one-shot push there; two ranks keep it for
 * small messages (the lab: auto within 4% of the best up to 1 MiB). */
static void lab_model(void)
{
    static const struct {
        int n;
        size_t bytes;
        symmem_algo_t algo;
        double measured_us;
    } rows[] = {
        {8, 96 * KIB_, SYMMEM_ALGO_ONESHOT_PUSH, 256.9},
        {8, 96 * KIB_, SYMMEM_ALGO_TWOSHOT_PUSH, 63.4},
        {4, 1 * MIB_, SYMMEM_ALGO_TWOSHOT_PUSH, 219.3},
        {8, 1 * MIB_, SYMMEM_ALGO_TWOSHOT_PUSH, 508.0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const topo_choice_facts_t f = lab_facts(rows[i].n);
        topo_cost_machine_t m;
        topo_choice_machine(&f, &m);
        const double us = topo_cost_us(&m, SYMMEM_COLL_ALL_REDUCE, rows[i].algo, rows[i].bytes);
        printf("lab model, %d ranks, %zu B, %s: %.1f us (measured %.1f)\n", rows[i].n, rows[i].bytes,
               symmem_algo_name(rows[i].algo), us, rows[i].measured_us);
        EXPECT(fabs(us / rows[i].measured_us - 1.0) <= 0.25);
    }
    for (int n = 4; n <= 8; n *= 2) {
        const topo_choice_facts_t f = lab_facts(n);
        topo_cost_machine_t m;
        topo_choice_machine(&f, &m);
        topo_choice_t c;
        topo_choose(&f, &c);
        for (size_t b = (n == 8 ? 12 : 48) * KIB_; b <= 4 * MIB_; b *= 2) {
            const double one = topo_cost_us(&m, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_ONESHOT_PUSH, b);
            const double two = topo_cost_us(&m, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PUSH, b);
            const double lam = topo_cost_us(&m, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_LAMPORT, b);
            EXPECT(two < one && lam < one);
            EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, b) != SYMMEM_ALGO_ONESHOT_PUSH);
        }
        if (n == 8) {
            const double one = topo_cost_us(&m, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_ONESHOT_PUSH, 96 * KIB_);
            const double two = topo_cost_us(&m, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PUSH, 96 * KIB_);
            EXPECT(one / two >= 3.0 && one / two <= 6.0);
        }
        model_follows_table_facts(&f, &c.table);
    }
    topo_choice_t c2;
    const topo_choice_facts_t f2 = lab_facts(2);
    topo_choose(&f2, &c2);
    EXPECT(topo_table_lookup(&c2.table, SYMMEM_COLL_ALL_REDUCE, 12 * KIB_) == SYMMEM_ALGO_ONESHOT_PUSH);
    /* the same GPU in device memory is not the lab: its links are the GPU's own memory */
    topo_choice_facts_t dev = lab_facts(8);
    dev.host_memory = 0;
    dev.read_gbs = dev.write_gbs = 0;
    const topo_choice_facts_t lab8 = lab_facts(8);
    topo_cost_machine_t md, mh;
    topo_choice_machine(&dev, &md);
    topo_choice_machine(&lab8, &mh);
    EXPECT(!md.host_memory && mh.host_memory && md.ranks_per_link == 8 && mh.ranks_per_link == 8);
    EXPECT(topo_cost_us(&md, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_ONESHOT_PUSH, 96 * KIB_) * 5 <
          topo_cost_us(&mh, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_ONESHOT_PUSH, 96 * KIB_));
    printf("%s the PCIe lab's model\n", test_failures ? "FAIL" : "ok  ");
}

/* Ranks that all share one GPU's device memory (co-located for testing): above the autotune's 4 MiB the
 * built-in table answers, and there the two-shot pull measured 4-4.6x faster than the Lamport two-shot the
 * push candidates gave (bench/NOTES.md, "Above the autotune's range on one GPU"); small messages keep the
 * one-shot push; the table follows the model with the pull among its candidates; the lab (host memory) and
 * ranks on separate GPUs keep the pushes. */
static void one_gpu_device_table(void)
{
    for (int n = 2; n <= 16; n *= 2) {
        const topo_choice_facts_t f = {.nranks = n, .link = SYMMEM_LINK_NVLINK, .ranks_per_gpu = n};
        topo_choice_t c;
        topo_choose(&f, &c);
        for (size_t b = 4 * MIB_; b <= 256 * MIB_; b *= 2)
            EXPECT_MSG(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, b) == SYMMEM_ALGO_TWOSHOT_PULL,
                       "%d ranks on one GPU, %zu B: %s", n, b,
                       symmem_algo_name(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, b)));
        EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, 4 * KIB_) == SYMMEM_ALGO_ONESHOT_PUSH);
        model_follows_table_facts(&f, &c.table);
        topo_choice_facts_t lab = f;
        lab.host_memory = 1;
        topo_choose(&lab, &c);
        EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, 64 * MIB_) != SYMMEM_ALGO_TWOSHOT_PULL);
        const topo_choice_facts_t apart = {.nranks = n, .link = SYMMEM_LINK_NVLINK, .ranks_per_gpu = 1};
        topo_choose(&apart, &c);
        EXPECT(topo_table_lookup(&c.table, SYMMEM_COLL_ALL_REDUCE, 64 * MIB_) == SYMMEM_ALGO_TWOSHOT_LAMPORT);
    }
    printf("%s ranks on one GPU in device memory\n", test_failures ? "FAIL" : "ok  ");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    EXPECT(d != NULL);
    if (!d) return 1;
    int machines = 0, measured = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char root[4096];
        struct stat st;
        snprintf(root, sizeof root, "%s/%s", argv[1], e->d_name);
        if (e->d_name[0] == '.' || strcmp(e->d_name, "golden") == 0 || stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
        o.sysfs_root = root;
        symmem_topo_t t = NULL;
        EXPECT(symmem_topo_discover(&o, &t) == SYMMEM_OK);
        if (!t) continue;
        machines++;
        measured += symmem_topo_measured(t);
        if (symmem_topo_gpu_count(t) >= 2) compare(e->d_name, t);
        symmem_topo_destroy(t);
    }
    closedir(d);
    copy_engine_rule();
    EXPECT(machines >= 10 && measured >= 2); /* every fixture; NVLink and PCIe ones with figures */
    island_choice_two_sockets(argv[1]);
    island_choice_many_gpus(argv[1], "pcie-2socket-16gpu", 16);
    island_choice_many_gpus(argv[1], "pcie-2socket-10gpu", 10);
    island_choice_elsewhere();
    island_facts_and_floors();
    lab_model();
    machine_from_probe();
    machine_defaults();
    candidates_by_link();
    one_gpu_device_table();
    printf("%s: %d machines (%d measured), %d failures\n", argv[0], machines, measured, test_failures);
    return test_failures ? 1 : 0;
}
