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

#include "collectives/tune.h"
#include "symmem/symmem.h"
#include "topo/topo_test.h"
#include "topology/ranks.h"
#include "topology/topo_internal.h"

/* The communicator's side, from the public per-pair and per-GPU facts of the model. */
static void communicator_choice(symmem_topo_t t, symmem_coll_tuning_t *tu, symmem_placement_t *placement,
                                int *probed)
{
    const int n = symmem_topo_gpu_count(t);
    int32_t links[SYMMEM_TOPO_MAX_GPUS * SYMMEM_TOPO_MAX_GPUS];
    int all_p2p = 1;
    double rd = -1, wr = -1;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            symmem_link_t l;
            CHECK(symmem_topo_pair_link(t, i, j, &l) == SYMMEM_OK);
            links[i * SYMMEM_TOPO_MAX_GPUS + j] = (int32_t)l;
            all_p2p &= l != SYMMEM_LINK_HOST; /* topo_rank_links: p2p 0 exactly when the link is HOST */
        }
        symmem_topo_gpu_info_t g;
        CHECK(symmem_topo_gpu_info(t, i, &g) == SYMMEM_OK);
        if (i == 0 || g.ring_read_gbs < rd) rd = g.ring_read_gbs;
        if (i == 0 || g.ring_write_gbs < wr) wr = g.ring_write_gbs;
    }
    const symmem_link_t cls = topo_link_class(n, links, SYMMEM_TOPO_MAX_GPUS, all_p2p);
    *placement = topo_choose_placement(cls);
    const topo_choice_facts_t facts = {.nranks = n, .link = cls};
    symmem_coll_tune_init(tu, "fixture", &facts);
    *probed = topo_probe_useful(cls) && n >= 2 && rd > 0 && wr > 0;
    if (*probed) {
        const topo_choice_facts_t measured = {.nranks = n, .link = cls, .read_gbs = rd, .write_gbs = wr};
        symmem_coll_tune_measured(tu, &measured);
    }
}

static void compare(const char *name, symmem_topo_t t)
{
    symmem_topo_advice_t a;
    symmem_coll_tuning_t tu;
    symmem_placement_t placement;
    int probed = 0;
    CHECK(symmem_topo_get_advice(t, &a) == SYMMEM_OK);
    communicator_choice(t, &tu, &placement, &probed);
    const topo_table_t *rec = &t->model.table; /* the table symmem-topo reports (JSON "table") */
    const symmem_topo_direction_t dir = tu.prefer == TOPO_PREFER_PULL ? SYMMEM_TOPO_PULL : SYMMEM_TOPO_PUSH;
    const int staged = symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX) == SYMMEM_ALGO_STAGED;
    int fails = test_failures;
    CHECK(a.direction == dir);
    CHECK(a.staged == staged);
    CHECK(a.placement == placement);
    CHECK(a.measured == probed);
    CHECK(rec->nrules == tu.defaults.nrules);
    for (int i = 0; i < rec->nrules && i < tu.defaults.nrules; i++) {
        CHECK(rec->rules[i].kind == tu.defaults.rules[i].kind);
        CHECK(rec->rules[i].max_bytes == tu.defaults.rules[i].max_bytes);
        CHECK(rec->rules[i].algo == tu.defaults.rules[i].algo);
    }
    /* what AUTO runs at every bound and around it, against what the report's table says */
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++)
        for (int i = 0; i < rec->nrules; i++) {
            const size_t b = rec->rules[i].max_bytes, sizes[3] = {b == SIZE_MAX ? b : b + 1, b, b ? b - 1 : 0};
            for (int s = 0; s < 3; s++)
                CHECK(symmem_coll_choose(&tu, (symmem_coll_kind_t)k, sizes[s]) ==
                      topo_table_lookup(rec, (symmem_coll_kind_t)k, sizes[s]));
        }
    /* and the words say the same: every algorithm of the table is named in the recommendation */
    for (int i = 0; i < rec->nrules; i++) CHECK_CONTAINS(symmem_topo_recommendation(t), symmem_algo_name(rec->rules[i].algo));
    printf("%s %s: %d GPUs, %s, %s%s, %d rules\n", test_failures == fails ? "ok  " : "FAIL", name,
           symmem_topo_gpu_count(t), a.direction == SYMMEM_TOPO_PUSH ? "push" : "pull", a.staged ? "staged" : "not staged",
           probed ? ", from measured ring figures" : "", rec->nrules);
}

/* ---- the copy-engine two-shot's rule (topology/choice.h, topo_copy_engine_rule) -------------------------------- */
#define KIB_ ((size_t)1 << 10)
#define MIB_ ((size_t)1 << 20)

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
    CHECK(c.copy_engine_above == want_above);
    CHECK(c.direction == sm.direction && c.staged == sm.staged);
    if (want_above == SIZE_MAX) {
        CHECK(topo_table_hash(&c.table) == topo_table_hash(&sm.table) && !has_algo(&c.table, SYMMEM_ALGO_COPY_ENGINE));
        return;
    }
    const size_t sizes[] = {1, 12 * KIB_, 96 * KIB_, want_above / 2, want_above - 1, want_above};
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            CHECK(topo_table_lookup(&c.table, (symmem_coll_kind_t)k, sizes[i]) ==
                  topo_table_lookup(&sm.table, (symmem_coll_kind_t)k, sizes[i]));
        /* reduce-scatter and all-gather have their own bound (half the copies, half the saving: the same
         * power of two in every case below) */
        CHECK(topo_table_lookup(&c.table, (symmem_coll_kind_t)k, want_above + 1) == SYMMEM_ALGO_COPY_ENGINE);
        CHECK(topo_table_lookup(&c.table, (symmem_coll_kind_t)k, 64 * MIB_) == SYMMEM_ALGO_COPY_ENGINE);
        CHECK(topo_table_lookup(&c.table, (symmem_coll_kind_t)k, SIZE_MAX) == SYMMEM_ALGO_COPY_ENGINE);
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
    CHECK(topo_copy_engine_above_bytes(8, SYMMEM_COLL_ALL_REDUCE, 25.0, 50.0) == MIB_);
    CHECK(topo_copy_engine_above_bytes(8, SYMMEM_COLL_REDUCE_SCATTER, 25.0, 50.0) == MIB_);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, 50.0, MIB_);
    /* a narrower gap moves the bound up: sm 27, ce 40 (27 < 0.7 * 40 = 28): saving 1.75 * (1/27 - 1/40) =
     * 0.02106 ns/B, S = 30000 / 0.02106 = 1.42 MB: 2 MiB; reduce-scatter 16000 / 0.01053 = 1.52 MB: 2 MiB */
    CHECK(topo_copy_engine_above_bytes(8, SYMMEM_COLL_ALL_REDUCE, 27.0, 40.0) == 2 * MIB_);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 27.0, 40.0, 2 * MIB_);
    /* a wide gap never goes below 1 MiB: sm 10, ce 50 gives S = 30000 / 0.14 = 214 KB */
    CHECK(topo_copy_engine_above_bytes(8, SYMMEM_COLL_ALL_REDUCE, 10.0, 50.0) == MIB_);
    /* the margin: the copy engine must be faster than the SM figure by the push/pull margin (sm < 0.7 ce) */
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 36.0, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 35.0, 50.0, SIZE_MAX); /* strict: 35 = 0.7 * 50 */
    CHECK(topo_copy_engine_above_bytes(8, SYMMEM_COLL_ALL_REDUCE, 34.0, 50.0) != SIZE_MAX);
    /* the SM figure compared is the direction's: a pulling table (stores 2.6, loads 40) compares loads */
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 40.0, 2.6, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 25.0, 2.6, 50.0, MIB_);
    /* every rank count: a power of two of at least 1 MiB, the SM table below it */
    for (int n = 2; n <= 8; n++) {
        const size_t a = topo_copy_engine_above_bytes(n, SYMMEM_COLL_ALL_REDUCE, 25.0, 50.0);
        CHECK(a >= MIB_ && a != SIZE_MAX && (a & (a - 1)) == 0);
        copy_engine_against_sm_table(n, SYMMEM_LINK_PCIE, 20.0, 25.0, 50.0, a);
    }
    /* never without the probe's figures (SM or copy engine), never off PCIe */
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 0.0, 0.0, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, 0.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, -1.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, NAN, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_PCIE, 20.0, 25.0, INFINITY, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_NVLINK, 300.0, 340.0, 1000.0, SIZE_MAX);
    copy_engine_against_sm_table(8, SYMMEM_LINK_HOST, 10.0, 10.0, 50.0, SIZE_MAX);
    copy_engine_against_sm_table(1, SYMMEM_LINK_PCIE, 20.0, 25.0, 50.0, SIZE_MAX);
    /* the communicator's path: the probe's figures through symmem_coll_tune_measured, AUTO resolving */
    symmem_coll_tuning_t tu;
    const topo_choice_facts_t none = {.nranks = 8, .link = SYMMEM_LINK_PCIE},
                              probed = {.nranks = 8, .link = SYMMEM_LINK_PCIE, .read_gbs = 20.0, .write_gbs = 25.0,
                                        .ce_gbs = 50.0};
    symmem_coll_tune_init(&tu, "fixture", &none);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, 64 * MIB_) == SYMMEM_ALGO_STAGED);
    CHECK(symmem_coll_tune_measured(&tu, &probed) > 0);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, 64 * MIB_) == SYMMEM_ALGO_COPY_ENGINE);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_REDUCE, MIB_) == SYMMEM_ALGO_STAGED);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_ALL_GATHER, 16 * MIB_) == SYMMEM_ALGO_COPY_ENGINE);
    CHECK(symmem_coll_choose(&tu, SYMMEM_COLL_REDUCE_SCATTER, 12 * KIB_) == SYMMEM_ALGO_ONESHOT_PUSH);
    printf("%s copy-engine two-shot rule\n", test_failures ? "FAIL" : "ok  ");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    CHECK(d != NULL);
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
        CHECK(symmem_topo_discover(&o, &t) == SYMMEM_OK);
        if (!t) continue;
        machines++;
        measured += symmem_topo_measured(t);
        if (symmem_topo_gpu_count(t) >= 2) compare(e->d_name, t);
        symmem_topo_destroy(t);
    }
    closedir(d);
    copy_engine_rule();
    CHECK(machines >= 8 && measured >= 2); /* every fixture; NVLink and PCIe ones with figures */
    printf("%s: %d machines (%d measured), %d failures\n", argv[0], machines, measured, test_failures);
    return test_failures ? 1 : 0;
}
