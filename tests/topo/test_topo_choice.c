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
    int all_p2p = 1, numa[SYMMEM_TOPO_MAX_GPUS];
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
    CHECK(machines >= 8 && measured >= 2); /* every fixture; NVLink and PCIe ones with figures */
    printf("%s: %d machines (%d measured), %d failures\n", argv[0], machines, measured, test_failures);
    return test_failures ? 1 : 0;
}
