/* symmem-topo: what this box can do for peer-to-peer traffic. Prints the topology model (a table like
 * `nvidia-smi topo -m`, the P2P attributes, measured matrices, warnings and the recommendation) as text or
 * JSON, or captures the machine's tree for a bug report / test fixture. Library logs go to stderr (or
 * SYMMEM_LOG_FILE), never to stdout. Exit codes are listed in usage() and docs/topology.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmem/symmem.h"

enum {
    EXIT_OK = 0,
    EXIT_ERROR = 1,
    EXIT_USAGE = 2,
    EXIT_NO_GPU = 3,
    EXIT_BAD_DATA = 4,
};

static void usage(FILE *out)
{
    fputs("usage: symmem-topo [options]\n"
          "Reports the GPUs of this machine, the path between each pair (like nvidia-smi topo -m), the P2P\n"
          "attributes, platform settings that break or slow P2P (IOMMU, ACS), measured peer read/write/copy\n"
          "bandwidth and flag latency per pair, and what symmem will use here.\n"
          "\n"
          "  --json             JSON (schema symmem-topo/1) instead of text\n"
          "  --quick            measure latency only, no bandwidth\n"
          "  --no-measure       facts and model only, measure nothing\n"
          "  --no-cache         measure now even if figures for this machine are cached\n"
          "  --cache-dir DIR    cache directory (default SYMMEM_TOPO_CACHE_DIR, $XDG_CACHE_HOME/symmem,\n"
          "                     ~/.cache/symmem)\n"
          "  --sysfs-root DIR   read a captured tree instead of this machine (GPU facts from DIR/gpus.json)\n"
          "  --capture DIR      copy the sysfs files read and the GPU facts (and figures) into DIR, to send\n"
          "                     as a test fixture; replay with --sysfs-root DIR\n"
          "  -h, --help         this help\n"
          "\n"
          "exit status: 0 ok; 1 error (message on stderr); 2 usage error; 3 no GPU found (the PCI/NUMA\n"
          "report is still printed); 4 a measured transfer returned wrong data (P2P is broken for some pair).\n"
          "Environment: SYMMEM_SYSFS_ROOT, SYMMEM_TOPO_CACHE_DIR, SYMMEM_LOG_LEVEL (logs go to stderr).\n",
          out);
}

typedef struct tool_args {
    symmem_topo_options_t opts;
    int json;
    const char *capture;
} tool_args_t;

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, tool_args_t *a)
{
    symmem_topo_options_init(&a->opts);
    a->opts.measure = 1;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) return usage(stdout), EXIT_OK;
        else if (!strcmp(s, "--json")) a->json = 1;
        else if (!strcmp(s, "--quick")) a->opts.quick = 1;
        else if (!strcmp(s, "--no-measure")) a->opts.measure = 0;
        else if (!strcmp(s, "--no-cache")) a->opts.use_cache = 0;
        else if (!strcmp(s, "--cache-dir") && has_value) a->opts.cache_dir = argv[++i];
        else if (!strcmp(s, "--sysfs-root") && has_value) a->opts.sysfs_root = argv[++i];
        else if (!strcmp(s, "--capture") && has_value) a->capture = argv[++i];
        else {
            int takes_value = !strcmp(s, "--cache-dir") || !strcmp(s, "--sysfs-root") || !strcmp(s, "--capture");
            fprintf(stderr, "symmem-topo: %s '%s'\n", takes_value ? "missing value for" : "unknown argument", s);
            usage(stderr);
            return EXIT_USAGE;
        }
    }
    return -1;
}

static int fail(const char *what, symmem_status_t st)
{
    fprintf(stderr, "symmem-topo: %s failed: %s: %s\n", what, symmem_status_name(st), symmem_last_error());
    return EXIT_ERROR;
}

static int any_bad_data(symmem_topo_t topo)
{
    int n = symmem_topo_gpu_count(topo);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            symmem_topo_pair_info_t p;
            if (symmem_topo_pair_info(topo, i, j, &p) == SYMMEM_OK && p.data_check_failed) return 1;
        }
    return 0;
}

int main(int argc, char **argv)
{
    tool_args_t a;
    memset(&a, 0, sizeof a);
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (a.capture) {
        symmem_status_t st = symmem_topo_capture(&a.opts, a.capture);
        if (st != SYMMEM_OK) return fail("capture", st);
        printf("captured into %s; replay with: symmem-topo --sysfs-root %s\n", a.capture, a.capture);
        return EXIT_OK;
    }
    symmem_topo_t topo = NULL;
    symmem_status_t st = symmem_topo_discover(&a.opts, &topo);
    if (st != SYMMEM_OK) return fail("topology discovery", st);
    st = a.json ? symmem_topo_write_json(topo, stdout) : symmem_topo_write_text(topo, stdout);
    if (st != SYMMEM_OK) {
        symmem_topo_destroy(topo);
        return fail("writing the report", st);
    }
    rc = symmem_topo_gpu_count(topo) == 0 ? EXIT_NO_GPU : any_bad_data(topo) ? EXIT_BAD_DATA : EXIT_OK;
    symmem_topo_destroy(topo);
    return rc;
}
