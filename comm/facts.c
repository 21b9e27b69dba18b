/* What the ranks of a communicator agree on at init: every rank's host, process, GPU, PCI id and NUMA node,
 * then how their GPUs reach each other (P2P, NVLink: topology/ranks.h), so the link class, the fingerprint
 * and where buffers live. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/cudrv.h"
#include "base/hash.h"
#include "base/log.h"
#include "base/status.h"
#include "boot/bootstrap.h"
#include "comm/facts.h"
#include "topology/choice.h"
#include "topology/ranks.h"

static uint64_t host_hash(void)
{
    char host[256] = "", boot[64] = "";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
        fclose(f);
    }
    return symmem_fnv64(symmem_fnv64(SYMMEM_FNV64_INIT, host, strlen(host)), boot, strlen(boot));
}

static symmem_status_t cuda_rt_error(cudaError_t e, const char *call, int device)
{
    symmem_status_t st = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? SYMMEM_NO_DEVICE
                         : e == cudaErrorMemoryAllocation                          ? SYMMEM_OUT_OF_MEMORY
                                                                                   : SYMMEM_CUDA_ERROR;
    return symmem_cudart_error(st, e, NULL, "%s (device %d)", call, device);
}

symmem_status_t symmem_comm_check_device(const symmem_comm_opts_t *o)
{
    if (o->backend != SYMMEM_BACKEND_CUDA) return SYMMEM_OK;
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return cuda_rt_error(e, "cudaGetDeviceCount", o->device);
    if (o->device >= count)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "device %d does not exist: this process sees %d GPU(s) (CUDA_VISIBLE_DEVICES=%s)",
                                o->device, count, getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES")
                                                                                 : "unset");
    return SYMMEM_OK;
}

static symmem_status_t gpu_facts(int device, symmem_peer_info_t *info)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return cuda_rt_error(e, "cudaGetDeviceCount", device);
    if (device < 0 && (e = cudaGetDevice(&device)) != cudaSuccess) return cuda_rt_error(e, "cudaGetDevice", -1);
    if (device >= count)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "device %d does not exist: this process sees %d GPU(s)",
                                device, count);
    if ((e = cudaSetDevice(device)) != cudaSuccess) return cuda_rt_error(e, "cudaSetDevice", device);
    if ((e = cudaFree(NULL)) != cudaSuccess) return cuda_rt_error(e, "context creation (cudaFree(0))", device);
    info->device = device;
    if ((e = cudaDeviceGetPCIBusId(info->pci_bus_id, sizeof info->pci_bus_id, device)) != cudaSuccess)
        return cuda_rt_error(e, "cudaDeviceGetPCIBusId", device);
    for (char *p = info->pci_bus_id; *p; p++) *p = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p);
    CUdevice cu;
    SYMMEM_CU_CHECK(drv, cuDeviceGet(&cu, device), "");
    struct { CUdevice_attribute a; int32_t *out; } q[] = {
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info->sm_count},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info->cc_major},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info->cc_minor},
        {CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, &info->numa_node},
        {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, &info->fabric_ok},
        {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, &info->gdr_ok},
        {CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, &info->host_numa_ok},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        int v = 0;
        /* Older drivers reject newer attributes: treat as "not supported" rather than failing. */
        if (drv->cuDeviceGetAttribute(&v, q[i].a, cu) != CUDA_SUCCESS) v = (q[i].a == CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID) ? -1 : 0;
        *q[i].out = v;
    }
    if (info->numa_node < 0) info->numa_node = topo_numa_node_of_pci(info->pci_bus_id);
    return SYMMEM_OK;
}

/* My row of the reachability matrix: can my GPU map rank j's memory (p2p), and how (link). */
static void my_row(symmem_comm_t c, int32_t *p2p, int32_t *links)
{
    if (c->backend == SYMMEM_BACKEND_HOST) {
        for (int j = 0; j < c->nranks; j++) {
            c->link[j] = j == c->rank ? SYMMEM_LINK_SELF : SYMMEM_LINK_NONE;
            c->native_atomics[j] = 1;
            p2p[j] = 1;
            links[j] = (int32_t)c->link[j];
        }
        return;
    }
    const char *ids[SYMMEM_MAX_RANKS];
    int can[SYMMEM_MAX_RANKS];
    for (int j = 0; j < c->nranks; j++) ids[j] = c->peers[j].pci_bus_id;
    topo_rank_links(c->rank, c->nranks, c->device, ids, c->link, c->native_atomics, can);
    for (int j = 0; j < c->nranks; j++) p2p[j] = can[j], links[j] = (int32_t)c->link[j];
}

symmem_status_t symmem_comm_agree_facts(symmem_comm_t c, const symmem_comm_opts_t *o)
{
    symmem_peer_info_t me;
    memset(&me, 0, sizeof me);
    me.host_hash = host_hash();
    me.pid = (int32_t)getpid();
    me.backend = (int32_t)c->backend;
    me.placement = (int32_t)o->placement;
    me.device = -1;
    me.numa_node = -1;
    if (c->backend == SYMMEM_BACKEND_CUDA) SYMMEM_CHECK(gpu_facts(o->device, &me));
    c->device = me.device;
    SYMMEM_CHECK(symmem_boot_allgather(c->boot, &me, c->peers, sizeof me, "communicator init"));
    for (int r = 0; r < c->nranks; r++) {
        const symmem_peer_info_t *p = &c->peers[r];
        if (p->host_hash != me.host_hash)
            return symmem_set_error(SYMMEM_INVALID_USAGE, "rank %d runs on another host: symmem ranks share one host", r);
        if (p->backend != me.backend || p->placement != me.placement)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "rank %d uses backend %d / placement %d, this rank %d / %d: all ranks must agree",
                                    r, p->backend, p->placement, me.backend, me.placement);
    }
    return SYMMEM_OK;
}

symmem_status_t symmem_comm_agree_reachability(symmem_comm_t c)
{
    /* Every rank's row, so that every rank derives the same all_p2p, link class and fingerprint. */
    struct row {
        int32_t p2p[SYMMEM_MAX_RANKS];
        int32_t links[SYMMEM_MAX_RANKS];
    } mine, all[SYMMEM_MAX_RANKS];
    int32_t links[SYMMEM_MAX_RANKS * SYMMEM_MAX_RANKS];
    memset(&mine, 0, sizeof mine);
    my_row(c, mine.p2p, mine.links);
    SYMMEM_CHECK(symmem_boot_allgather(c->boot, &mine, all, sizeof mine, "communicator init"));
    c->all_p2p = 1;
    for (int i = 0; i < c->nranks; i++)
        for (int j = 0; j < c->nranks; j++) {
            links[i * SYMMEM_MAX_RANKS + j] = all[i].links[j];
            if (all[i].p2p[j]) continue;
            if (c->all_p2p)
                SYMMEM_INFO(SYMMEM_SUBSYS_ALLOC, "GPU %s (rank %d) cannot access GPU %s (rank %d) peer-to-peer",
                            c->peers[i].pci_bus_id, i, c->peers[j].pci_bus_id, j);
            c->all_p2p = 0;
        }
    /* Read by the collectives (launch mode, the MPS warning) and by the fingerprint. */
    c->min_sm_count = 0;
    c->ranks_per_device = 1;
    for (int r = 0; r < c->nranks && c->backend == SYMMEM_BACKEND_CUDA; r++) {
        int same = 0;
        for (int q = 0; q < c->nranks; q++) same += strcmp(c->peers[q].pci_bus_id, c->peers[r].pci_bus_id) == 0;
        if (c->min_sm_count == 0 || c->peers[r].sm_count < c->min_sm_count) c->min_sm_count = c->peers[r].sm_count;
        if (same > c->ranks_per_device) c->ranks_per_device = same;
    }
    c->link_class = topo_link_class(c->nranks, links, SYMMEM_MAX_RANKS, c->all_p2p);
    c->placement = (symmem_placement_t)c->peers[c->rank].placement;
    if (c->placement == SYMMEM_PLACEMENT_AUTO && c->backend == SYMMEM_BACKEND_CUDA)
        c->placement = topo_choose_placement(c->link_class);
    if (c->backend == SYMMEM_BACKEND_CUDA)
        topo_comm_fingerprint(c->fingerprint, sizeof c->fingerprint, c->nranks, c->ranks_per_device,
                              c->peers[0].cc_major, c->peers[0].cc_minor, c->min_sm_count, c->link_class, links,
                              SYMMEM_MAX_RANKS);
    return SYMMEM_OK;
}
