/* Replays every synthetic machine under fixtures/ and compares the text and JSON reports with the golden
 * files in fixtures/golden/. SYMMEM_TEST_UPDATE_GOLDEN=1 rewrites the golden files instead (review the
 * diff, then commit). Besides the byte comparison, a few facts per machine are checked through the API, so a
 * golden file regenerated from a broken model still fails here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmem/symmem.h"
#include "test_util.h"

static char *report(symmem_topo_t topo, int json)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    EXPECT(f != NULL);
    if (!f) return NULL;
    EXPECT((json ? symmem_topo_write_json(topo, f) : symmem_topo_write_text(topo, f)) == SYMMEM_OK);
    fclose(f);
    return buf;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
    fclose(f);
    if (buf) buf[got] = '\0';
    return buf;
}

/* Compare, or rewrite when updating. On a difference print the first differing line of each. */
static void compare(const char *golden_path, const char *got)
{
    const char *update = getenv("SYMMEM_TEST_UPDATE_GOLDEN");
    if (update && strcmp(update, "1") == 0) {
        FILE *f = fopen(golden_path, "w");
        EXPECT(f != NULL);
        if (f) fputs(got, f), fclose(f);
        printf("updated %s\n", golden_path);
        return;
    }
    char *want = slurp(golden_path);
    if (!want) {
        fprintf(stderr, "%s: missing; run with SYMMEM_TEST_UPDATE_GOLDEN=1 to create it\n", golden_path);
        test_failures++;
        return;
    }
    if (strcmp(want, got) != 0) {
        int line = 1;
        const char *a = want, *b = got;
        while (*a && *a == *b) line += *a++ == '\n', b++;
        while (a > want && a[-1] != '\n') a--;
        while (b > got && b[-1] != '\n') b--;
        fprintf(stderr, "%s differs at line %d:\n  golden: %.*s\n  got:    %.*s\n", golden_path, line,
                (int)strcspn(a, "\n"), a, (int)strcspn(b, "\n"), b);
        test_failures++;
    }
    free(want);
}

static symmem_topo_t open_fixture(const char *dir, const char *name)
{
    char root[4096];
    snprintf(root, sizeof root, "%s/%s", dir, name);
    symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
    o.sysfs_root = root;
    o.measure = 1; /* ignored for a captured tree: its figures come from gpus.json */
    symmem_topo_t topo = NULL;
    symmem_status_t st = symmem_topo_discover(&o, &topo);
    if (st != SYMMEM_OK) fprintf(stderr, "%s: %s: %s\n", name, symmem_status_name(st), symmem_last_error());
    EXPECT(st == SYMMEM_OK);
    return topo;
}

static symmem_topo_class_t path(symmem_topo_t t, int i, int j)
{
    symmem_topo_pair_info_t p;
    EXPECT(symmem_topo_pair_info(t, i, j, &p) == SYMMEM_OK);
    return p.path;
}

/* Facts that must hold whatever the golden files say. */
static void check_facts(const char *name, symmem_topo_t t)
{
    symmem_topo_advice_t a;
    EXPECT(symmem_topo_get_advice(t, &a) == SYMMEM_OK);
    EXPECT(strlen(symmem_topo_fingerprint(t)) == 16);
    if (!strcmp(name, "h200-nvlink-vm")) {
        symmem_topo_pair_info_t p;
        EXPECT(symmem_topo_gpu_count(t) == 2);
        EXPECT(symmem_topo_pair_info(t, 0, 1, &p) == SYMMEM_OK && p.path == SYMMEM_TOPO_NVLINK && p.nvlinks == 18);
        /* what a communicator on this VM runs: the NVLink table, which pushes */
        EXPECT(a.direction == SYMMEM_TOPO_PUSH && !a.staged && a.placement == SYMMEM_PLACEMENT_DEVICE);
    } else if (!strcmp(name, "pcie-2socket-8gpu")) {
        EXPECT(symmem_topo_gpu_count(t) == 8);
        EXPECT(path(t, 0, 1) == SYMMEM_TOPO_PHB && path(t, 0, 2) == SYMMEM_TOPO_NODE);
        EXPECT(path(t, 3, 4) == SYMMEM_TOPO_SYS && path(t, 6, 7) == SYMMEM_TOPO_PHB);
        /* two NUMA islands: the largest all-reduces run the island schedule, not the staged permutation */
        EXPECT(a.islands == 2 && !a.staged && a.placement == SYMMEM_PLACEMENT_DEVICE);
        EXPECT(symmem_topo_warning_count(t) == 0); /* ACS on root ports alone is harmless */
    } else if (!strcmp(name, "pcie-2socket-16gpu") || !strcmp(name, "pcie-2socket-10gpu")) {
        /* two sockets of PCIe switches (16 GPUs: two switches of four per socket; 10: one switch of five per
         * socket), no NVLink: one switch PIX, two switches of one socket NODE, across the sockets SYS; every
         * pair P2P; the islands are the sockets, and the largest all-reduces run the island schedule */
        const int n = symmem_topo_gpu_count(t), per_socket = n / 2, per_switch = n == 16 ? 4 : 5;
        EXPECT(n == (!strcmp(name, "pcie-2socket-16gpu") ? 16 : 10));
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (i == j) continue;
                const symmem_topo_class_t want = i / per_socket != j / per_socket ? SYMMEM_TOPO_SYS
                                                 : i / per_switch == j / per_switch ? SYMMEM_TOPO_PIX
                                                                                    : SYMMEM_TOPO_NODE;
                symmem_topo_pair_info_t p;
                EXPECT(symmem_topo_pair_info(t, i, j, &p) == SYMMEM_OK && p.path == want && p.p2p_access == 1 &&
                      p.nvlinks == 0);
            }
        for (int i = 0; i < n; i++) {
            symmem_topo_gpu_info_t g;
            EXPECT(symmem_topo_gpu_info(t, i, &g) == SYMMEM_OK && g.numa_node == i / per_socket);
        }
        EXPECT(a.islands == 2 && !a.staged && a.placement == SYMMEM_PLACEMENT_DEVICE && a.direction == SYMMEM_TOPO_PUSH);
        EXPECT(!a.measured && !symmem_topo_measured(t));
        EXPECT(symmem_topo_warning_count(t) == 0); /* ACS off on the switch ports, on at the root ports only */
        EXPECT_CONTAINS(symmem_topo_recommendation(t), n == 16 ? "2 (GPUs 0 1 2 3 4 5 6 7 | 8 9 10 11 12 13 14 15)"
                                                              : "2 (GPUs 0 1 2 3 4 | 5 6 7 8 9)");
        EXPECT_CONTAINS(symmem_topo_recommendation(t), "above island");
    } else if (!strcmp(name, "pcie-switch-4gpu")) {
        EXPECT(symmem_topo_gpu_count(t) == 4 && path(t, 0, 3) == SYMMEM_TOPO_PIX);
        EXPECT(a.placement == SYMMEM_PLACEMENT_HOST_NUMA);
    } else if (!strcmp(name, "acs-redirect")) {
        EXPECT(path(t, 0, 1) == SYMMEM_TOPO_PIX);
        EXPECT(symmem_topo_warning_count(t) == 3);
        EXPECT_CONTAINS(symmem_topo_warning(t, 0), "ACS redirect is on at PCIe switch port 0000:02:00.0");
        EXPECT_CONTAINS(symmem_topo_warning(t, 2), "iommu=pt");
    } else if (!strcmp(name, "h200x2-captured")) {
        /* captured with symmem-topo --capture on the project's 2x H200 test machine (with its figures) */
        symmem_topo_pair_info_t p;
        double rd = 0, wr = 0, lat = 0;
        int measured = 0;
        EXPECT(symmem_topo_gpu_count(t) == 2 && symmem_topo_measured(t));
        EXPECT(symmem_topo_pair_info(t, 0, 1, &p) == SYMMEM_OK && p.path == SYMMEM_TOPO_NVLINK && p.nvlinks == 18);
        EXPECT(symmem_topo_pair_figures(t, 0, 1, &rd, &wr, &lat, &measured) == SYMMEM_OK && measured);
        EXPECT(rd > 100 && wr > 100 && lat > 0 && lat < 10);
    } else if (!strcmp(name, "pcie-measured-4gpu")) {
        /* stores a twentieth of loads, all at once: what the init probe sees, so pull, and nothing staged */
        EXPECT(symmem_topo_gpu_count(t) == 4 && symmem_topo_measured(t) && path(t, 0, 1) == SYMMEM_TOPO_PHB);
        EXPECT(a.direction == SYMMEM_TOPO_PULL && a.measured && !a.staged && a.placement == SYMMEM_PLACEMENT_DEVICE);
    } else if (!strcmp(name, "no-gpu")) {
        EXPECT(symmem_topo_gpu_count(t) == 0);
        EXPECT_CONTAINS(symmem_topo_recommendation(t), "no GPU found");
    }
}

int main(int argc, char **argv)
{
    static const char *const fixtures[] = {"h200-nvlink-vm",     "h200x2-captured",    "pcie-2socket-8gpu",
                                           "pcie-2socket-16gpu", "pcie-2socket-10gpu", "pcie-switch-4gpu",
                                           "acs-redirect",       "pcie-measured-4gpu", "no-gpu",
                                           "malformed"};
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    for (size_t k = 0; k < sizeof fixtures / sizeof fixtures[0]; k++) {
        symmem_topo_t t = open_fixture(argv[1], fixtures[k]);
        if (!t) continue;
        char golden[4096];
        char *text = report(t, 0), *json = report(t, 1);
        snprintf(golden, sizeof golden, "%s/golden/%s.txt", argv[1], fixtures[k]);
        if (text) compare(golden, text);
        snprintf(golden, sizeof golden, "%s/golden/%s.json", argv[1], fixtures[k]);
        if (json) compare(golden, json);
        check_facts(fixtures[k], t);
        free(text);
        free(json);
        symmem_topo_destroy(t);
    }
    printf("%s: %d failures\n", argv[0], test_failures);
    return test_failures ? 1 : 0;
}
