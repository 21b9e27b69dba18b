/* GPU facts from the CUDA runtime (linked statically, so the library loads without a driver and this
 * reports "no GPU" cleanly): name, compute capability, memory, PCI bus id, and the driver's P2P attributes
 * per ordered pair. No context is needed for these queries, so nothing here allocates GPU memory. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "symmem/topo.h"
#include "topology/topo_internal.h"

static symmem_status_t query_gpu(int dev, topo_gpu_fact_t *g)
{
    cudaDeviceProp prop;
    char bus[32];
    cudaError_t e = cudaGetDeviceProperties(&prop, dev);
    if (e == cudaSuccess) e = cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev);
    if (e != cudaSuccess)
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "topology: querying CUDA device %d", dev);
    topo_fmt(g->name, sizeof g->name, "%s", prop.name);
    g->cc_major = prop.major;
    g->cc_minor = prop.minor;
    g->memory_bytes = prop.totalGlobalMem;
    g->sm_count = prop.multiProcessorCount;
    if (topo_bdf_normalise(bus, g->bus_id) != 0)
        return symmem_set_error(SYMMEM_CUDA_ERROR, "topology: CUDA device %d has an unexpected PCI bus id '%s'",
                                dev, bus);
    return SYMMEM_OK;
}

static symmem_status_t query_pair(int i, int j, topo_gpu_facts_t *f)
{
    const cudaDeviceP2PAttr attrs[3] = {cudaDevP2PAttrAccessSupported, cudaDevP2PAttrNativeAtomicSupported,
                                        cudaDevP2PAttrPerformanceRank};
    int *dst[3] = {&f->p2p[i][j], &f->atomics[i][j], &f->perf_rank[i][j]};
    for (int k = 0; k < 3; k++) {
        int v = -1;
        cudaError_t e = cudaDeviceGetP2PAttribute(&v, attrs[k], i, j);
        if (e != cudaSuccess)
            return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "topology: cudaDeviceGetP2PAttribute(%d, %d -> %d)",
                                       (int)attrs[k], i, j);
        *dst[k] = v;
    }
    return SYMMEM_OK;
}

extern "C" symmem_status_t topo_gpu_query(topo_gpu_facts_t *f)
{
    int n = 0;
    topo_gpu_facts_reset(f);
    topo_fmt(f->source, sizeof f->source, "cuda");
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        /* No driver, no device, or a driver too old: all mean "no GPU" to the probe, not a failure. Without
         * any driver CUDA says "driver version is insufficient", so the driver version tells them apart. */
        int driver = 0;
        if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
        if (driver == 0)
            topo_fmt(f->note, sizeof f->note, "no NVIDIA driver found (libcuda.so.1 cannot be loaded)");
        else if (e == cudaErrorInsufficientDriver)
            topo_fmt(f->note, sizeof f->note, "NVIDIA driver for CUDA %d.%d is older than this build's CUDA runtime %d.%d: update the driver",
                     driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        else
            topo_fmt(f->note, sizeof f->note, "CUDA reports %s", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        (void)cudaGetLastError();
        SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "no GPU: %s", f->note);
        return SYMMEM_OK;
    }
    if (n > TOPO_MAX_GPUS) {
        SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "%d CUDA devices; the topology model holds the first %d", n, TOPO_MAX_GPUS);
        n = TOPO_MAX_GPUS;
    }
    cudaDriverGetVersion(&f->cuda_driver_version);
    for (int i = 0; i < n; i++) SYMMEM_CHECK(query_gpu(i, &f->gpus[i]));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j) SYMMEM_CHECK(query_pair(i, j, f));
    f->ngpus = n;
    f->present = 1;
    return SYMMEM_OK;
}
