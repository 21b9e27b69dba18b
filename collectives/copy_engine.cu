/* The copy-engine two-shot's step kernel (copy_engine.h): a kernel step of the description, nothing more. The
 * state protocol's prologue (two epochs), the flag sync of every other kernel (sync_peers: this rank's
 * stream has reached the step, and so has every peer's), the step's jobs, the optional end sync, the
 * block's end; after an abort or an error, the NaN output of every kernel. The data movement between ranks
 * is the copy engines' (copy_engine.c); the jobs read and write this rank's own memory only. */
#include "collectives/copy_engine.h"
#include "collectives/kernel.cuh"

namespace symmem_k {

/* dst[i] = fold of the sources in their order (fp32), or with one source its bytes unchanged (a copy must
 * keep NaN payloads and -0.0). Block b takes packs b*threads + t, grid-stride, of every job in turn; jobs
 * of one step never overlap one another (the CPU test checks the plan), and a destination equals a source
 * only where it is the same range (in place: the thread loads every source of a pack before it stores). */
template <typename T, int OP>
__device__ __forceinline__ void run_job(const symmem_ce_kjob_t &j, uint64_t tid, uint64_t nthreads)
{
    constexpr int V = Pack<T>::V;
    const bool aligned = j.aligned != 0;
    const uint64_t packs = (j.elems + V - 1) / V;
    for (uint64_t pk = tid; pk < packs; pk += nthreads) {
        const uint64_t i = pk * V;
        const int nv = (int)min((uint64_t)V, j.elems - i);
        uint4 out;
        if (j.nsrc == 1) out = load_user<T>(j.src[0], i, nv, aligned, true);
        else out = reduce_ranks<T, OP>(j.nsrc, [&](int q) { return load_user<T>(j.src[q], i, nv, aligned, true); });
        store_user<T>(j.dst, i, out, nv, aligned);
    }
}

template <typename T, int OP>
__global__ void __launch_bounds__(SYMMEM_COLL_THREADS, 1) copy_engine_kernel(const __grid_constant__ symmem_ce_kparams_t k)
{
    const P &p = k.p;
    Ctx c;
    if (!prologue(p, c, 2, 0)) {
        poison_output<T>(p);
        return;
    }
    bool ok = sync_peers(p, c, c.epoch + 1);
    const uint64_t tid = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x, nthreads = (uint64_t)gridDim.x * blockDim.x;
    for (int job = 0; ok && job < k.njobs; job++) run_job<T, OP>(k.jobs[job], tid, nthreads);
    if (ok && k.end_sync) ok = sync_peers(p, c, c.epoch + 2);
    if (!ok) poison_output<T>(p);
    block_end(p, c);
}

struct CopyEngineKernel {
    template <typename T, int OP> const void *get() const
    {
        return reinterpret_cast<const void *>(&copy_engine_kernel<T, OP>);
    }
};

const void *ce_kernel_for(int dtype, int op) { return kernel_by_dtype_op(dtype, op, CopyEngineKernel{}); }

} // namespace symmem_k

/* The family's accessors (kernel_abi.h): the step kernel per dtype x op, and loading all of them (the
 * kernels take other parameters than coll_kernel's, so only copy_engine.c launches them). */
extern "C" const void *symmem_coll_copy_engine_kernel(int dtype, int op, int checked)
{
    (void)checked;
    return symmem_k::ce_kernel_for(dtype, op);
}

extern "C" int symmem_coll_copy_engine_preload(symmem_coll_preload_info_t *info)
{
    int e = 0;
    for (int dtype = 0; dtype < SYMMEM_DTYPE_COUNT && e == 0; dtype++)
        for (int op = 0; op < SYMMEM_REDOP_COUNT && e == 0; op++)
            e = symmem_coll_preload_one(symmem_k::ce_kernel_for(dtype, op), SYMMEM_COLL_THREADS, info);
    return e;
}

extern "C" int symmem_ce_launch_kernel(const symmem_ce_kparams_t *k, int grid, int threads, void *stream)
{
    /* all-gather moves bytes: the SUM instantiation of its dtype (its jobs have one source) */
    const int op = k->p.kind == SYMMEM_COLL_ALL_GATHER ? (int)SYMMEM_OP_SUM : k->p.op;
    const void *fn = symmem_k::ce_kernel_for(k->p.dtype, op);
    if (!fn || grid < 1 || grid > SYMMEM_COLL_MAX_GRID || threads < 32 || threads > SYMMEM_COLL_THREADS || threads % 32)
        return (int)cudaErrorInvalidValue;
    void *args[] = {const_cast<symmem_ce_kparams_t *>(k)};
    /* no programmatic dependent launch: copies stand between these kernels, and a sync must signal only
     * once everything before it on the stream has completed */
    return (int)cudaLaunchKernel(fn, dim3((unsigned)grid), dim3((unsigned)threads), args, 0,
                                 static_cast<cudaStream_t>(stream));
}
