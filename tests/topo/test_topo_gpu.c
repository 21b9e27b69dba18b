/* On real GPUs: the probe finds every CUDA device at its bus id, measures every figure with data checks
 * passing, caches the figures under the fingerprint and reads them back, and --quick measures latency only.
 * Exits 77 (skip) where CUDA reports no device. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "symmem/symmem.h"
#include "test_util.h"

static symmem_topo_t measure(int quick, int use_cache, const char *cache_dir)
{
    symmem_topo_options_t o = SYMMEM_TOPO_OPTIONS_INIT;
    o.sysfs_root = "/";
    o.measure = 1;
    o.quick = quick;
    o.use_cache = use_cache;
    o.cache_dir = cache_dir;
    symmem_topo_t t = NULL;
    symmem_status_t st = symmem_topo_discover(&o, &t);
    if (st != SYMMEM_OK) fprintf(stderr, "discover: %s: %s\n", symmem_status_name(st), symmem_last_error());
    EXPECT(st == SYMMEM_OK);
    return t;
}

static void check_gpus(symmem_topo_t t, int n)
{
    EXPECT(symmem_topo_gpu_count(t) == n && symmem_topo_measured(t));
    for (int i = 0; i < n && i < symmem_topo_gpu_count(t); i++) {
        symmem_topo_gpu_info_t g;
        char bus[32];
        EXPECT(symmem_topo_gpu_info(t, i, &g) == SYMMEM_OK);
        EXPECT(cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess);
        EXPECT(strcasecmp(bus + strlen(bus) - 12, g.bus_id) == 0); /* "0000:17:00.0" after any longer domain */
        EXPECT(g.cc_major > 0 && g.memory_bytes > 0 && g.sm_count > 0);
        EXPECT(g.host_read_gbs > 0 && g.host_write_gbs > 0 && g.host_h2d_gbs > 0 && g.host_d2h_gbs > 0);
        EXPECT(g.host_latency_us > 0 && g.host_latency_us < 1000);
        printf("GPU %d %s %s: host read %.1f write %.1f h2d %.1f d2h %.1f GB/s, latency %.2f us, ring %.1f/%.1f\n", i,
               g.name, g.bus_id, g.host_read_gbs, g.host_write_gbs, g.host_h2d_gbs, g.host_d2h_gbs,
               g.host_latency_us, g.ring_read_gbs, g.ring_write_gbs);
    }
}

static void check_pairs(symmem_topo_t t, int n, int quick)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            symmem_topo_pair_info_t p;
            EXPECT(symmem_topo_pair_info(t, i, j, &p) == SYMMEM_OK);
            if (i == j || p.p2p_access != 1) continue;
            EXPECT(p.data_check_failed == 0);
            EXPECT(p.latency_us > 0 && p.latency_us < 100);
            if (quick) {
                EXPECT(p.read_gbs < 0 && p.write_gbs < 0 && p.ce_gbs < 0);
                continue;
            }
            EXPECT(p.read_gbs > 0 && p.write_gbs > 0 && p.ce_gbs > 0);
            printf("GPU %d -> %d (%s): read %.1f write %.1f ce %.1f GB/s, latency %.2f us\n", i, j,
                   symmem_topo_class_name(p.path), p.read_gbs, p.write_gbs, p.ce_gbs, p.latency_us);
        }
}

int main(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    char dir[] = "/tmp/symmem-topo-cache-XXXXXX", file[256], cmd[300];
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    symmem_topo_t t = measure(0, 1, dir);
    if (!t) return 1;
    check_gpus(t, n);
    check_pairs(t, n, 0);
    EXPECT(symmem_topo_write_text(t, stdout) == SYMMEM_OK);
    snprintf(file, sizeof file, "%s/topo-%s.json", dir, symmem_topo_fingerprint(t));
    EXPECT(access(file, R_OK) == 0);
    /* The second discovery reads the cache: the same figures (to the cache's 2 decimals). */
    symmem_topo_t c = measure(0, 1, dir);
    if (c && n > 1) {
        symmem_topo_pair_info_t a, b;
        EXPECT(symmem_topo_pair_info(t, 0, 1, &a) == SYMMEM_OK && symmem_topo_pair_info(c, 0, 1, &b) == SYMMEM_OK);
        EXPECT(fabs(a.read_gbs - b.read_gbs) < 0.01 && fabs(a.latency_us - b.latency_us) < 0.01);
    }
    symmem_topo_destroy(c);
    symmem_topo_t q = measure(1, 0, NULL);
    if (q) check_pairs(q, n, 1);
    symmem_topo_destroy(q);
    symmem_topo_destroy(t);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    printf("test_topo_gpu: %d failures\n", test_failures);
    return test_failures ? 1 : 0;
}
