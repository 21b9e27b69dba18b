/* Broken input must give a clear message (or a graceful skip with a warning), never a crash: the malformed
 * fixture, roots that are not sysfs trees, malformed gpus.json files, bad options and indices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symmem/symmem.h"
#include "test_util.h"

static int warned(symmem_topo_t t, const char *needle)
{
    for (int i = 0; i < symmem_topo_warning_count(t); i++)
        if (strstr(symmem_topo_warning(t, i), needle)) return 1;
    return 0;
}

static symmem_status_t discover_root(const char *root, symmem_topo_t *t)
{
    symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
    o.sysfs_root = root;
    return symmem_topo_discover(&o, t);
}

static void test_malformed_fixture(const char *fixtures)
{
    char root[4096];
    snprintf(root, sizeof root, "%s/malformed", fixtures);
    symmem_topo_t t = NULL;
    EXPECT(discover_root(root, &t) == SYMMEM_OK);
    if (!t) return;
    EXPECT(symmem_topo_gpu_count(t) == 2); /* 01:00.0 (bad class), 05:00.0 (dangling), 06:00.0 (no vendor) skipped */
    EXPECT(warned(t, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/class: expected a hex number like 0x10de, "
                    "found 'zz-not-hex'; device skipped"));
    EXPECT(warned(t, "numa_node: expected a NUMA node number or -1, found 'banana'"));
    EXPECT(warned(t, "/sys/bus/pci/devices/0000:05:00.0: cannot resolve the device link"));
    EXPECT(warned(t, "0000:06:00.0/vendor: expected a hex number like 0x10de, found ''"));
    EXPECT(warned(t, "ACS state of the PCIe switch ports between GPUs is unknown"));
    symmem_topo_gpu_info_t g;
    symmem_topo_pair_info_t p;
    EXPECT(symmem_topo_gpu_info(t, 0, &g) == SYMMEM_OK && g.numa_node == -1 && g.pcie_gen == 0 && g.pcie_max_gen == 5);
    EXPECT(symmem_topo_pair_info(t, 0, 1, &p) == SYMMEM_OK && p.acs_redirect == -1 && p.p2p_access == -1);
    symmem_topo_destroy(t);
}

static void write_file(const char *dir, const char *rel, const char *text)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    EXPECT(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

/* gpus.json variants in a tree with an empty PCI device list: each must fail with the given message. */
static void test_bad_gpus_json(const char *tmp)
{
    static const struct { const char *json, *message; } cases[] = {
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [{\"name\": \"x\" \"bus_id\": \"0000:01:00.0\"}]}",
         "not valid JSON: line 1 column 51: expected ',' or '}'"},
        {"{\"schema\": \"symmem-gpus/1\",\n \"gpus\": [{\"name\": \"trunc", "line 2 column 26: unterminated string"},
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [{\"name\": \"x\", \"bus_id\": \"zz\"}]}",
         "gpus[0].bus_id 'zz' is not a PCI address like 0000:17:00.0"},
        {"{\"schema\": \"nvidia-smi\", \"gpus\": []}", "\"schema\" is 'nvidia-smi', expected 'symmem-gpus/1'"},
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [{\"bus_id\": \"0000:01:00.0\"}], \"pairs\": [{\"gpu\": 0, "
         "\"peer\": 3}]}",
         "pairs[0] names gpu 0 and peer 3"},
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": 7}", "\"gpus\" must be an array"},
        {"", "line 1 column 1: unexpected end of file"},
        /* numbers that do not fit the fields: converting them would be undefined behaviour */
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [{\"bus_id\": \"0000:01:00.0\", \"cc_major\": 1e300}]}",
         "gpus[0].cc_major = 1e+300 is out of range [0, 1000]"},
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [{\"bus_id\": \"0000:01:00.0\", \"memory_bytes\": -1}]}",
         "gpus[0].memory_bytes = -1 is out of range"},
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [{\"bus_id\": \"0000:01:00.0\", \"sm_count\": 3e9}]}",
         "gpus[0].sm_count = 3e+09 is out of range"},
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [{\"bus_id\": \"0000:01:00.0\"}, {\"bus_id\": \"0000:02:00.0\"}], "
         "\"pairs\": [{\"gpu\": 0, \"peer\": 1, \"nvlinks\": -1e20}]}",
         "pairs[0].nvlinks = -1e+20 is out of range"},
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [{\"bus_id\": \"0000:01:00.0\"}], \"pairs\": [{\"gpu\": 4e9, "
         "\"peer\": 0}]}",
         "pairs[0] names gpu -1 and peer 0"},
        {"{\"schema\": \"symmem-gpus/1\", \"gpus\": [], \"cuda_driver_version\": 1e12}",
         "cuda_driver_version = 1e+12 is out of range"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        write_file(tmp, "gpus.json", cases[k].json);
        symmem_topo_t t = NULL;
        symmem_status_t st = discover_root(tmp, &t);
        EXPECT(st == SYMMEM_INVALID_ARGUMENT && t == NULL);
        EXPECT_CONTAINS(symmem_last_error(), cases[k].message);
        EXPECT_CONTAINS(symmem_last_error(), "gpus.json");
    }
}

/* The platform line counts the nodes of the kernel's online list, so "0" reads as one node, not zero. */
static void test_numa_lists(const char *tmp)
{
    static const struct { const char *online, *line; } cases[] = {
        {"0\n", "  NUMA nodes: 1 (node 0)\n"},
        {"0-1\n", "  NUMA nodes: 2 (nodes 0-1)\n"},
        {"0,2-3,7\n", "  NUMA nodes: 4 (nodes 0,2-3,7)\n"},
        {"3-1\n", "  NUMA nodes: unknown (online list '3-1')\n"},
        {"zero\n", "  NUMA nodes: unknown (online list 'zero')\n"},
    };
    char dir[4096];
    const char *parts[] = {"sys/devices", "sys/devices/system", "sys/devices/system/node"};
    for (int i = 0; i < 3; i++) snprintf(dir, sizeof dir, "%s/%s", tmp, parts[i]), mkdir(dir, 0755);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        write_file(tmp, "sys/devices/system/node/online", cases[k].online);
        symmem_topo_t t = NULL;
        EXPECT(discover_root(tmp, &t) == SYMMEM_OK);
        if (!t) continue;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        EXPECT(f && symmem_topo_write_text(t, f) == SYMMEM_OK);
        if (f) fclose(f);
        EXPECT_CONTAINS(text, cases[k].line);
        free(text);
        symmem_topo_destroy(t);
    }
    snprintf(dir, sizeof dir, "%s/sys/devices/system/node/online", tmp);
    unlink(dir);
}

static void test_bad_roots(const char *tmp)
{
    symmem_topo_t t = NULL;
    EXPECT(discover_root("/nonexistent/symmem-topo-root", &t) == SYMMEM_SYSTEM_ERROR && t == NULL);
    EXPECT_CONTAINS(symmem_last_error(), "sysfs root '/nonexistent/symmem-topo-root' cannot be opened");
    EXPECT(discover_root(tmp, &t) == SYMMEM_SYSTEM_ERROR && t == NULL); /* no sys/bus/pci/devices yet */
    EXPECT_CONTAINS(symmem_last_error(), "cannot list the PCI devices in");
    EXPECT_CONTAINS(symmem_last_error(), "a captured tree needs sys/bus/pci/devices");
}

static void test_api_misuse(const char *fixtures)
{
    symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
    symmem_topo_t t = NULL;
    o.magic = 0;
    EXPECT(symmem_topo_discover(&o, &t) == SYMMEM_INVALID_ARGUMENT && t == NULL);
    EXPECT_CONTAINS(symmem_last_error(), "options not initialised");
    EXPECT(symmem_topo_discover(NULL, NULL) == SYMMEM_INVALID_ARGUMENT);
    symmem_topo_destroy(NULL);
    char root[4096];
    snprintf(root, sizeof root, "%s/h200-nvlink-vm", fixtures);
    EXPECT(discover_root(root, &t) == SYMMEM_OK);
    if (!t) return;
    symmem_topo_pair_info_t p;
    memset(&p, 0x5a, sizeof p);
    EXPECT(symmem_topo_pair_info(t, 0, 2, &p) == SYMMEM_INVALID_ARGUMENT);
    EXPECT(p.nvlinks == 0x5a5a5a5a); /* outputs untouched on failure */
    EXPECT_CONTAINS(symmem_last_error(), "GPU 0 / peer 2 out of range (the model has 2 GPUs)");
    EXPECT(symmem_topo_warning(t, 99) == NULL);
    double r = 0, w = 0, l = 0;
    int measured = -1;
    symmem_link_t link;
    EXPECT(symmem_topo_pair_figures(t, 0, 1, &r, &w, &l, &measured) == SYMMEM_OK);
    EXPECT(measured == 0 && r == 360.0 && w == 360.0 && l > 0); /* estimate: 18 NVLink links x 20 GB/s */
    EXPECT(symmem_topo_pair_link(t, 0, 1, &link) == SYMMEM_OK && link == SYMMEM_LINK_NVLINK);
    EXPECT(symmem_topo_pair_link(t, 1, 1, &link) == SYMMEM_OK && link == SYMMEM_LINK_SELF);
    symmem_topo_destroy(t);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    char tmp[] = "/tmp/symmem-topo-errors-XXXXXX";
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    test_malformed_fixture(argv[1]);
    test_bad_roots(tmp);
    char dir[4096];
    const char *parts[] = {"sys", "sys/bus", "sys/bus/pci", "sys/bus/pci/devices"};
    for (int i = 0; i < 4; i++) snprintf(dir, sizeof dir, "%s/%s", tmp, parts[i]), mkdir(dir, 0755);
    test_numa_lists(tmp);
    test_bad_gpus_json(tmp);
    test_api_misuse(argv[1]);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    printf("%s: %d failures\n", argv[0], test_failures);
    return test_failures ? 1 : 0;
}
