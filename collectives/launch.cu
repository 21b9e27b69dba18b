/* Launching the collective kernels: the family's kernel for the call's dtype and op (kernel_abi.h's
 * accessors, one family per file), the barrier and the workspace fill kernels, and loading every kernel of
 * the library at communicator init. */
#include <cuda_runtime.h>

#include "collectives/device.cuh"
#include "collectives/kernel_abi.h"
#include "collectives/protocol.cuh"
#include "topology/transfer.h"

namespace symmem_k {

__global__ void barrier_kernel(const __grid_constant__ symmem_coll_params_t p)
{
    Ctx c;
    if (!prologue(p, c, 2, 0)) return;
    sync_peers(p, c, c.epoch + 1);
    block_end(p, c);
}

__global__ void fill_empty_kernel(uint4 *p, size_t packs)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < packs; i += (size_t)gridDim.x * blockDim.x)
        p[i] = lamport_empty4();
}

} // namespace symmem_k

#define SYMMEM_K_BARRIER_THREADS (32 * ((SYMMEM_MAX_RANKS + 31) / 32))

/* Load one kernel into the current device's context now (cudaFuncGetAttributes needs the loaded function,
 * so it forces CUDA's lazy loading), and note its registers and how many of its blocks fit on one SM. */
extern "C" int symmem_coll_preload_one(const void *fn, int threads, symmem_coll_preload_info_t *info)
{
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, fn);
    if (e != cudaSuccess) return (int)e;
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, 0);
    if (e != cudaSuccess) return (int)e;
    info->kernels++;
    if (a.numRegs > info->max_regs) info->max_regs = a.numRegs;
    if (info->min_blocks_per_sm < 0 || per_sm < info->min_blocks_per_sm) info->min_blocks_per_sm = per_sm;
    return 0;
}

/* Why this exists: since CUDA 12.2 kernels are loaded lazily, at their first launch in a context, and
 * loading a kernel may wait until the kernels running in that context finish (CUDA programming guide,
 * "Lazy Loading", concurrent execution hazard). Our kernels spin until the peers' kernels arrive. When one
 * host thread drives several ranks (symmem_comm_init_all), it enqueues rank 0's operation, then rank 1's,
 * ...: if a kernel is loaded for the first time while rank 0's collective on that GPU waits for a
 * co-located rank's kernel that the thread has not enqueued yet, the load waits for the collective and the
 * collective for the load -- until the timeout. Loading every kernel of the library at communicator init
 * removes the library's own kernels from that hazard (user kernels: docs/collectives.md, "Streams"). */
extern "C" int symmem_coll_preload(symmem_coll_preload_info_t *info)
{
    info->kernels = 0;
    info->max_regs = 0;
    info->min_blocks_per_sm = -1;
    int e = 0;
#define SYMMEM_K_PRELOAD_FAMILY_(name, value, file)                                                        \
    if (e == 0) e = symmem_coll_##file##_preload(info);
    SYMMEM_COLL_FAMILY_LIST(SYMMEM_K_PRELOAD_FAMILY_)
#undef SYMMEM_K_PRELOAD_FAMILY_
    /* the two-shot pull's own kernels count like the families': the grid rule's blocks per SM is the fewest of
     * any kernel a call may launch (one, by their launch bounds: SYMMEM_COLL_WIDE_THREADS, SYMMEM_COLL_THREADS) */
    if (e == 0) e = symmem_coll_pull_wide_preload(info);
    if (e == 0) e = symmem_coll_pull_zc_preload(info);
    /* the barrier, the fill and the probe's copy do not count for min_blocks_per_sm (small or optional) */
    symmem_coll_preload_info_t small = {0, 0, -1};
    if (e == 0)
        e = symmem_coll_preload_one(reinterpret_cast<const void *>(&symmem_k::barrier_kernel), SYMMEM_K_BARRIER_THREADS,
                                    &small);
    if (e == 0) e = symmem_coll_preload_one(reinterpret_cast<const void *>(&symmem_k::fill_empty_kernel), 256, &small);
    if (e == 0 && (e = (int)topo_copy_preload()) == 0) small.kernels++; /* the init probe's (topology/probe.c) */
    if (e == 0) info->kernels += small.kernels;
    return e;
}

extern "C" int symmem_coll_launch_fn(const void *fn, void *params, int grid, int threads, void *stream, int pdl)
{
    void *args[] = {params};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.stream = static_cast<cudaStream_t>(stream);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return (int)cudaLaunchKernelExC(&cfg, fn, args);
}

static cudaError_t launch(const void *fn, const symmem_coll_params_t *p, int grid, int threads, void *stream, int pdl)
{
    return (cudaError_t)symmem_coll_launch_fn(fn, const_cast<symmem_coll_params_t *>(p), grid, threads, stream, pdl);
}

/* The kernel entry of each family (the descriptor's `family`: algos.h), generated from the family list, whose
 * values count up from 0 in order. */
typedef const void *(*family_kernel_fn)(int dtype, int op, int checked);
static const family_kernel_fn family_kernel[SYMMEM_COLL_FAM_COUNT] = {
#define SYMMEM_K_FAMILY_ENTRY_(name, value, file) symmem_coll_##file##_kernel,
    SYMMEM_COLL_FAMILY_LIST(SYMMEM_K_FAMILY_ENTRY_)
#undef SYMMEM_K_FAMILY_ENTRY_
};
#define SYMMEM_K_FAMILY_ORDER_(name, value, file) +((value) == SYMMEM_COLL_FAM_##name ? 0 : 1)
static_assert(SYMMEM_COLL_FAM_PULL == 0 && 0 SYMMEM_COLL_FAMILY_LIST(SYMMEM_K_FAMILY_ORDER_) == 0,
              "SYMMEM_COLL_FAMILY_LIST counts up from 0");
#undef SYMMEM_K_FAMILY_ORDER_

extern "C" int symmem_coll_launch(const symmem_coll_params_t *p, int family, int grid, int threads, void *stream, int pdl)
{
    /* all-gather moves bytes: it runs in the SUM instantiation of its dtype */
    const int op = p->kind == SYMMEM_COLL_ALL_GATHER ? (int)SYMMEM_OP_SUM : p->op;
    /* the island, copy-engine and wire families' kernels take more than these parameters (their schedule, a
     * step): symmem_coll_island_launch, symmem_ce_launch_kernel, symmem_coll_wire_launch */
    const void *fn = family >= 0 && family < SYMMEM_COLL_FAM_COUNT && family != SYMMEM_COLL_FAM_ISLAND &&
                             family != SYMMEM_COLL_FAM_COPY && family != SYMMEM_COLL_FAM_WIRE
                         ? family_kernel[family](p->dtype, op, p->lam_check)
                         : nullptr;
    if (!fn || threads < 32 || threads > SYMMEM_COLL_THREADS || threads % 32) return (int)cudaErrorInvalidValue;
    return (int)launch(fn, p, grid, threads, stream, pdl);
}

extern "C" int symmem_coll_launch_wide(const symmem_coll_params_t *p, int grid, int threads, void *stream, int pdl)
{
    const void *fn = p->kind == SYMMEM_COLL_ALL_REDUCE && !p->zero_copy_out
                         ? symmem_coll_pull_wide_kernel(p->dtype, p->op, p->zero_copy_in)
                         : nullptr;
    if (!fn || threads < 32 || threads > SYMMEM_COLL_WIDE_THREADS || threads % 32)
        return (int)cudaErrorInvalidValue;
    return (int)launch(fn, p, grid, threads, stream, pdl);
}

extern "C" int symmem_coll_launch_zc(const symmem_coll_params_t *p, int grid, int threads, void *stream, int pdl)
{
    const void *fn = p->kind == SYMMEM_COLL_ALL_REDUCE && p->zero_copy_in && p->zero_copy_out
                         ? symmem_coll_pull_zc_kernel(p->dtype, p->op, p->nranks)
                         : nullptr;
    if (!fn || threads < 32 || threads > SYMMEM_COLL_THREADS || threads % 32) return (int)cudaErrorInvalidValue;
    return (int)launch(fn, p, grid, threads, stream, pdl);
}

extern "C" int symmem_coll_launch_barrier(const symmem_coll_params_t *p, void *stream, int pdl)
{
    /* one block; the flag threads are 0..n-1 */
    return (int)launch(reinterpret_cast<const void *>(&symmem_k::barrier_kernel), p, 1, SYMMEM_K_BARRIER_THREADS,
                       stream, pdl);
}

extern "C" int symmem_coll_launch_fill_empty(void *ptr, size_t bytes, void *stream)
{
    const size_t packs = bytes / 16;
    if (packs == 0) return 0;
    symmem_k::fill_empty_kernel<<<(unsigned)((packs + 255) / 256 < 1024 ? (packs + 255) / 256 : 1024), 256, 0,
                                  static_cast<cudaStream_t>(stream)>>>(static_cast<uint4 *>(ptr), packs);
    return (int)cudaGetLastError();
}
