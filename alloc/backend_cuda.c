/* CUDA backend: cuMem physical allocations pinned on the rank's GPU (or on a host NUMA node), exported as
 * POSIX file descriptors (plus fabric where the GPU supports it, so the memory is also what NCCL's cuMem
 * path expects), mapped into one address reservation per buffer. A handle is a CUmemGenericAllocationHandle.
 * Every call runs with the communicator's device current (the public entry guard sets it). */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc/cudrv.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"

static void fill_prop(symmem_comm_t c, symmem_placement_t pl, int node, int fabric, CUmemAllocationProp *p)
{
    memset(p, 0, sizeof *p);
    p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    if (pl == SYMMEM_PLACEMENT_HOST_NUMA) {
        p->location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        p->location.id = node;
    } else {
        p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p->location.id = c->device;
        p->allocFlags.gpuDirectRDMACapable =
            (unsigned char)(c->peers[c->rank].gdr_ok && symmem_param_int(SYMMEM_PARAM_GDR) != 0);
    }
    p->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (fabric) p->requestedHandleTypes |= CU_MEM_HANDLE_TYPE_FABRIC;
}

static symmem_status_t c_granularity(symmem_comm_t c, symmem_placement_t pl, int node, size_t *gran)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    CUmemAllocationProp p;
    fill_prop(c, pl, node, 0, &p);
    size_t g = 0;
    SYMMEM_CU_CHECK(drv, cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "");
    *gran = g;
    return SYMMEM_OK;
}

static size_t c_capacity(symmem_comm_t c, symmem_placement_t pl)
{
    (void)c;
    if (pl == SYMMEM_PLACEMENT_HOST_NUMA)
        return (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return SIZE_MAX;
    }
    return total;
}

static symmem_status_t c_create(symmem_comm_t c, symmem_placement_t pl, int node, size_t bytes, uint64_t *handle)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    int fabric = c->peers[c->rank].fabric_ok && pl != SYMMEM_PLACEMENT_HOST_NUMA &&
                 symmem_param_int(SYMMEM_PARAM_FABRIC) != 0;
    CUmemAllocationProp p;
    fill_prop(c, pl, node, fabric, &p);
    CUmemGenericAllocationHandle h;
    CUresult r = drv->cuMemCreate(&h, bytes, &p, 0);
    if (r != CUDA_SUCCESS && fabric && r != CUDA_ERROR_OUT_OF_MEMORY) {
        /* Fabric handles need IMEX/fabric manager support that a VM or a PCIe box may lack even when the
         * attribute says "supported": fall back to POSIX fds alone. */
        SYMMEM_INFO(SYMMEM_SUBSYS_ALLOC, "cuMemCreate with fabric handles failed (%d); retrying with POSIX fds only", (int)r);
        fill_prop(c, pl, node, 0, &p);
        r = drv->cuMemCreate(&h, bytes, &p, 0);
    }
    if (r != CUDA_SUCCESS) {
        char hint[160];
        if (pl == SYMMEM_PLACEMENT_HOST_NUMA)
            snprintf(hint, sizeof hint, "allocating %zu bytes of pinned host memory on NUMA node %d", bytes, node);
        else
            snprintf(hint, sizeof hint, "allocating %zu bytes on GPU %d", bytes, c->device);
        return symmem_cudrv_error(r, "cuMemCreate", hint);
    }
    *handle = (uint64_t)h;
    return SYMMEM_OK;
}

static symmem_status_t c_export(uint64_t handle, int *fd)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    int f = -1;
    SYMMEM_CU_CHECK(drv, cuMemExportToShareableHandle(&f, (CUmemGenericAllocationHandle)handle,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0), "");
    *fd = f;
    return SYMMEM_OK;
}

static symmem_status_t c_import(int fd, uint64_t *handle)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    CUmemGenericAllocationHandle h;
    SYMMEM_CU_CHECK(drv, cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                    "importing a peer's memory");
    *handle = (uint64_t)h;
    return SYMMEM_OK;
}

static void c_release(uint64_t handle)
{
    const symmem_cudrv_t *drv;
    if (symmem_cudrv_get(&drv) == SYMMEM_OK) drv->cuMemRelease((CUmemGenericAllocationHandle)handle);
}

static symmem_status_t c_reserve(size_t bytes, size_t align, char **va)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    CUdeviceptr p = 0;
    SYMMEM_CU_CHECK(drv, cuMemAddressReserve(&p, bytes, align, 0, 0), "reserving virtual address space");
    *va = (char *)(uintptr_t)p;
    return SYMMEM_OK;
}

static void c_unreserve(char *va, size_t bytes)
{
    const symmem_cudrv_t *drv;
    if (symmem_cudrv_get(&drv) == SYMMEM_OK) drv->cuMemAddressFree((CUdeviceptr)(uintptr_t)va, bytes);
}

/* A peer's allocation must cover the whole stride. cuMemMap refuses a size beyond the allocation; the
 * range the driver then reports for the mapping is checked as well, so a short allocation is never used
 * even if a driver accepted it. (A driver that cannot answer the query leaves the cuMemMap check alone.) */
static symmem_status_t c_map(char *va, size_t bytes, uint64_t handle)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    SYMMEM_CU_CHECK(drv, cuMemMap((CUdeviceptr)(uintptr_t)va, bytes, 0, (CUmemGenericAllocationHandle)handle, 0),
                    "mapping an allocation of the stride's size (a peer's allocation may be smaller)");
    CUdeviceptr base = 0;
    size_t size = 0;
    CUdeviceptr start = (CUdeviceptr)(uintptr_t)va;
    if (drv->cuMemGetAddressRange(&base, &size, start) == CUDA_SUCCESS && (base > start || base + size < start + bytes)) {
        drv->cuMemUnmap(start, bytes);
        return symmem_set_error(SYMMEM_PEER_FAILURE,
                                "a peer's allocation covers %zu bytes at offset %lld of the mapping, less than the "
                                "%zu-byte stride: refused",
                                size, (long long)(base - start), bytes);
    }
    return SYMMEM_OK;
}

static void c_unmap(char *va, size_t bytes)
{
    const symmem_cudrv_t *drv;
    if (symmem_cudrv_get(&drv) == SYMMEM_OK) drv->cuMemUnmap((CUdeviceptr)(uintptr_t)va, bytes);
}

static symmem_status_t c_set_access(symmem_comm_t c, symmem_placement_t pl, char *va, size_t bytes)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    CUmemAccessDesc d[2];
    memset(d, 0, sizeof d);
    d[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d[0].location.id = c->device;
    d[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    SYMMEM_CU_CHECK(drv, cuMemSetAccess((CUdeviceptr)(uintptr_t)va, bytes, d, 1),
                    "mapping peers' memory for this GPU: check P2P between the GPUs (symmem-topo) or use "
                    "SYMMEM_PLACEMENT=host_numa");
    if (pl == SYMMEM_PLACEMENT_HOST_NUMA) {
        /* Host-placed buffers are CPU-readable too, where the driver allows it. */
        d[0].location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
        if (drv->cuMemSetAccess((CUdeviceptr)(uintptr_t)va, bytes, d, 1) != CUDA_SUCCESS)
            SYMMEM_DEBUG(SYMMEM_SUBSYS_ALLOC, "host access to host-NUMA buffer not granted");
    }
    return SYMMEM_OK;
}

/* Run one memset or copy on a private non-blocking stream and wait for it: the legacy default stream
 * would also wait for every blocking stream of the device, e.g. collectives of other ranks of this
 * process still in flight, and could then wait forever on a rank that is itself blocked here. */
static symmem_status_t private_stream_op(void *dst, const void *src, size_t bytes, const char *what)
{
    cudaStream_t s;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "%s: cudaStreamCreateWithFlags", what);
    e = src ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s) : cudaMemsetAsync(dst, 0, bytes, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    if (e != cudaSuccess) return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "%s", what);
    return SYMMEM_OK;
}

static symmem_status_t c_zero(void *ptr, size_t bytes) { return private_stream_op(ptr, NULL, bytes, "zeroing the signal area"); }

static symmem_status_t c_make_table(void *const *host, size_t n, void ***out)
{
    void **t = NULL;
    cudaError_t e = cudaMalloc((void **)&t, n * sizeof *t);
    if (e != cudaSuccess)
        return symmem_cudart_error(e == cudaErrorMemoryAllocation ? SYMMEM_OUT_OF_MEMORY : SYMMEM_CUDA_ERROR, e, NULL,
                                   "cudaMalloc of the device pointer table");
    symmem_status_t st = private_stream_op(t, host, n * sizeof *t, "device pointer table");
    if (st != SYMMEM_OK) {
        cudaFree(t);
        return st;
    }
    *out = t;
    return SYMMEM_OK;
}

static void c_free_table(void **t) { cudaFree(t); }

const symmem_mem_ops_t symmem_mem_ops_cuda = {
    "cuda",  c_granularity, c_capacity, c_create, c_export,     c_import, c_release,  c_reserve,
    c_unreserve, c_map,     c_unmap,    c_set_access, c_zero, c_make_table, c_free_table,
};
