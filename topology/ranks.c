/* A communicator's ranks in the machine model (see ranks.h). */
#include "topology/ranks.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/status.h"
#include "topology/topo_internal.h"

symmem_link_t topo_link_of(int same_gpu, int p2p, int nvlink)
{
    if (same_gpu) return SYMMEM_LINK_SELF;
    if (!p2p) return SYMMEM_LINK_HOST;
    return nvlink ? SYMMEM_LINK_NVLINK : SYMMEM_LINK_PCIE;
}

/* NVLink links between rank `rank`'s GPU and each rank's, from NVML (0 where NVML is absent or says none). */
static void nvlink_row(int rank, int n, const char *const *bus_ids, int *row)
{
    int links[SYMMEM_MAX_RANKS * SYMMEM_MAX_RANKS];
    if (!topo_nvml_links_by_bus(bus_ids, n, links)) {
        SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "NVML unavailable: GPU pairs with P2P are classed PCIe");
        memset(links, 0, sizeof links);
    }
    for (int j = 0; j < n; j++) row[j] = links[rank * n + j];
}

void topo_rank_links(int rank, int n, int device, const char *const *bus_ids, symmem_link_t *link,
                     int *native_atomics, int *p2p)
{
    int nvlinks[SYMMEM_MAX_RANKS] = {0};
    nvlink_row(rank, n, bus_ids, nvlinks);
    for (int j = 0; j < n; j++) {
        const int same = strcmp(bus_ids[j], bus_ids[rank]) == 0;
        int dev = -1, can = 1, atomics = 1;
        if (!same && cudaDeviceGetByPCIBusId(&dev, bus_ids[j]) != cudaSuccess) {
            /* The peer's GPU is hidden from this process (CUDA_VISIBLE_DEVICES): the driver cannot be asked;
             * assume P2P and let the mapping report a failure. */
            (void)cudaGetLastError();
            SYMMEM_INFO(SYMMEM_SUBSYS_ALLOC, "GPU %s of rank %d is not visible here; assuming P2P", bus_ids[j], j);
            atomics = 0;
        } else if (!same) {
            if (cudaDeviceCanAccessPeer(&can, device, dev) != cudaSuccess) can = 0;
            if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, device, dev) != cudaSuccess)
                atomics = 0;
            (void)cudaGetLastError();
        }
        p2p[j] = can;
        native_atomics[j] = atomics;
        link[j] = topo_link_of(same, can, nvlinks[j] > 0);
    }
}

int topo_numa_node_of_pci(const char *bus_id)
{
    topo_sysfs_t fs;
    char rel[128], buf[32];
    if (topo_sysfs_open(&fs, NULL) != SYMMEM_OK) {
        symmem_clear_error(); /* logged where it was found; the node stays unknown */
        return -1;
    }
    topo_fmt(rel, sizeof rel, "sys/bus/pci/devices/%s/numa_node", bus_id);
    int node = -1;
    if (topo_sysfs_read_text(&fs, rel, buf, sizeof buf) == 0 && sscanf(buf, "%d", &node) != 1) node = -1;
    topo_sysfs_close(&fs);
    return node;
}

symmem_link_t topo_link_class(int n, const int32_t *links, int stride, int all_p2p)
{
    symmem_link_t worst = SYMMEM_LINK_NVLINK;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const int l = links[i * stride + j];
            if (i == j || l == SYMMEM_LINK_SELF) continue;
            if (l == SYMMEM_LINK_HOST || l == SYMMEM_LINK_NONE) worst = SYMMEM_LINK_HOST;
            else if (l == SYMMEM_LINK_PCIE && worst != SYMMEM_LINK_HOST) worst = SYMMEM_LINK_PCIE;
        }
    /* Host-placed memory (no P2P between some pair) behaves like the host link for every pair. */
    return all_p2p ? worst : SYMMEM_LINK_HOST;
}

void topo_comm_fingerprint(char *out, size_t len, int n, int ranks_per_device, int cc_major, int cc_minor,
                           int min_sm_count, symmem_link_t link_class, const int32_t *links, int stride)
{
    uint32_t h = SYMMEM_FNV32_INIT;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) h = symmem_fnv32_word(h, (uint32_t)links[i * stride + j]);
    topo_fmt(out, len, "n%d.rpd%d.sm%d%dx%d.%s.%08x", n, ranks_per_device, cc_major, cc_minor, min_sm_count,
             topo_link_name(link_class), h);
}

const char *topo_link_name(symmem_link_t link)
{
    switch (link) {
    case SYMMEM_LINK_SELF: return "self";
    case SYMMEM_LINK_NVLINK: return "nvlink";
    case SYMMEM_LINK_PCIE: return "pcie";
    case SYMMEM_LINK_HOST: return "host";
    default: return "none";
    }
}
