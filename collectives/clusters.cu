/* How many thread-block clusters of whole-SM blocks the GPU keeps resident at once: what init measures the
 * GPU's GPC count with (residency.h, symmem_coll_gpcs_from_clusters), since CUDA reports none. Only asked
 * where SYMMEM_CLUSTER_ROOM applies (residency.c: ranks that share a GPU), so one rank per GPU loads no
 * kernel of this file; where it is asked, its kernel is loaded at init, as the collective kernels are
 * (launch.cu, symmem_coll_preload), not while this communicator's collectives run. */
#include <cuda_runtime.h>

#include "collectives/residency.h"

namespace symmem_k {

/* Never launched: the occupancy query needs a kernel, and with the most dynamic shared memory a block may
 * opt in to, each of its blocks takes a whole SM, as a GEMM's blocks in clusters do. */
__global__ void whole_sm_kernel() {}

} // namespace symmem_k

/* Clusters of `size` whole-SM blocks (smem bytes each) resident at once, or -1 where the query fails. */
static int clusters_of(int size, int smem)
{
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = (unsigned)size;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)size);
    cfg.blockDim = dim3(32);
    cfg.dynamicSmemBytes = (size_t)smem;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int n = 0;
    const void *fn = reinterpret_cast<const void *>(&symmem_k::whole_sm_kernel);
    return cudaOccupancyMaxActiveClusters(&n, fn, &cfg) == cudaSuccess ? n : -1;
}

static void count_clusters(int *clusters8, int *clusters16)
{
    int dev = 0, major = 0, smem = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return;
    if (major < 9 || smem <= 0) return; /* clusters came with sm_90 */
    const void *fn = reinterpret_cast<const void *>(&symmem_k::whole_sm_kernel);
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) return;
    *clusters8 = clusters_of(8, smem);
    /* 16 is past the portable cluster size (8): a GPU may refuse it, and the count stays -1 */
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess)
        *clusters16 = clusters_of(16, smem);
}

extern "C" void symmem_coll_cluster_counts(int *clusters8, int *clusters16)
{
    *clusters8 = *clusters16 = -1;
    count_clusters(clusters8, clusters16);
    (void)cudaGetLastError(); /* a failed query only leaves the GPC count unknown: no error may outlive it */
}
