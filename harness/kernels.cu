/* Device helpers for the collective tests and symmem-bench (declared in harness.h). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "harness.h"

namespace {

__device__ __forceinline__ void store_value(void *dst, int dt, size_t k, float v)
{
    if (dt == SYMMEM_FLOAT32)
        static_cast<float *>(dst)[k] = v;
    else if (dt == SYMMEM_FLOAT16)
        static_cast<__half *>(dst)[k] = __float2half_rn(v);
    else
        static_cast<__nv_bfloat16 *>(dst)[k] = __float2bfloat16_rn(v);
}

__global__ void fill_kernel(void *dst, int dt, size_t count, uint64_t seed, const uint32_t *iter, int rank,
                            uint64_t index0)
{
    uint64_t s = iter ? cc_iter_seed(seed, *iter) : seed;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < count; k += (size_t)gridDim.x * blockDim.x)
        store_value(dst, dt, k, cc_value(s, rank, index0 + k, dt));
}

__global__ void record_kernel(unsigned char *hist, const unsigned char *src, size_t bytes, const uint32_t *iter)
{
    unsigned char *dst = hist + (size_t)(*iter) * bytes;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < bytes; k += (size_t)gridDim.x * blockDim.x)
        dst[k] = src[k];
}

__global__ void incr_kernel(uint32_t *iter) { *iter += 1; }

__global__ void spin_kernel(uint64_t ns, const uint32_t *iter, int modulo, int rank)
{
    if (iter && (int)(*iter % (uint32_t)modulo) != rank) return;
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

/* Work that takes SMs from the collectives, like a GEMM or another stream's kernels: every block holds
 * `smem` bytes of shared memory and its threads for `ns` nanoseconds, waiting on nothing. */
__device__ unsigned occupy_sink;
__global__ void occupy_kernel(uint64_t ns, unsigned *sink)
{
    extern __shared__ unsigned scratch[];
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    unsigned acc = threadIdx.x;
    do {
        scratch[threadIdx.x] = acc;
        acc = acc * 1664525u + scratch[(threadIdx.x + 1) % blockDim.x];
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
    if (acc == 0x9e3779b9u) *sink = acc; /* keeps the loop */
}

struct peer_ptrs {
    const uint64_t *p[CC_MAX_RANKS];
};

__global__ void read_peers_kernel(uint64_t *dst, peer_ptrs peers, int nranks, size_t slot)
{
    int p = threadIdx.x;
    if (p < nranks) {
        /* volatile: read the peer's memory now, not a cached copy */
        dst[p] = *(const volatile uint64_t *)(peers.p[p] + slot);
    }
}

__global__ void write_u64_kernel(uint64_t *p, size_t slot, uint64_t v)
{
    *(volatile uint64_t *)(p + slot) = v;
    __threadfence_system();
}

unsigned grid_for(size_t n)
{
    size_t g = (n + 255) / 256;
    return (unsigned)(g < 1 ? 1 : g > 1024 ? 1024 : g);
}

} // namespace

extern "C" cudaError_t cc_dev_fill(void *dst, symmem_dtype_t dt, size_t count, uint64_t seed, const uint32_t *iter,
                                   int rank, uint64_t index0, cudaStream_t stream)
{
    if (count == 0) return cudaSuccess;
    fill_kernel<<<grid_for(count), 256, 0, stream>>>(dst, (int)dt, count, seed, iter, rank, index0);
    return cudaGetLastError();
}

extern "C" cudaError_t cc_dev_record(void *hist, const void *src, size_t bytes, const uint32_t *iter,
                                     cudaStream_t stream)
{
    record_kernel<<<grid_for(bytes), 256, 0, stream>>>(static_cast<unsigned char *>(hist),
                                                        static_cast<const unsigned char *>(src), bytes, iter);
    return cudaGetLastError();
}

extern "C" cudaError_t cc_dev_incr(uint32_t *iter, cudaStream_t stream)
{
    incr_kernel<<<1, 1, 0, stream>>>(iter);
    return cudaGetLastError();
}

extern "C" cudaError_t cc_dev_spin(uint64_t ns, const uint32_t *iter, int modulo, int rank, cudaStream_t stream)
{
    spin_kernel<<<1, 1, 0, stream>>>(ns, iter, modulo < 1 ? 1 : modulo, rank);
    return cudaGetLastError();
}

extern "C" cudaError_t cc_dev_occupy(uint64_t ns, int blocks, int threads, size_t smem, cudaStream_t stream)
{
    unsigned *p = nullptr;
    cudaError_t e = cudaGetSymbolAddress(reinterpret_cast<void **>(&p), occupy_sink);
    if (e != cudaSuccess) return e;
    if (smem > 48 * 1024) {
        e = cudaFuncSetAttribute(occupy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
    }
    if (smem < threads * sizeof(unsigned)) smem = threads * sizeof(unsigned);
    occupy_kernel<<<blocks, threads, smem, stream>>>(ns, p);
    return cudaGetLastError();
}

extern "C" cudaError_t cc_dev_read_peers(uint64_t *dst, void *const *peer_ptrs_host, int nranks, size_t slot,
                                         cudaStream_t stream)
{
    peer_ptrs pp;
    for (int p = 0; p < CC_MAX_RANKS; p++)
        pp.p[p] = p < nranks ? static_cast<const uint64_t *>(peer_ptrs_host[p]) : nullptr;
    read_peers_kernel<<<1, 32, 0, stream>>>(dst, pp, nranks, slot);
    return cudaGetLastError();
}

extern "C" cudaError_t cc_dev_write_u64(void *p, size_t slot, uint64_t v, cudaStream_t stream)
{
    write_u64_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t *>(p), slot, v);
    return cudaGetLastError();
}

/* Load every helper kernel into the current device's context now. Since CUDA 12.2 a kernel is loaded at
 * its first launch, and loading may wait for the kernels running in the context. In-process runs enqueue
 * rank after rank from one thread, so a helper launched for the first time right after a collective (e.g.
 * coll_b2b's read_peers_kernel after rank 0's barrier) would wait for that collective, which waits for a
 * co-located rank's collective that is enqueued only after the launch returns: a hang until the timeout. */
extern "C" cudaError_t cc_dev_preload(void)
{
    const void *fns[] = {
        reinterpret_cast<const void *>(&fill_kernel),       reinterpret_cast<const void *>(&record_kernel),
        reinterpret_cast<const void *>(&incr_kernel),       reinterpret_cast<const void *>(&spin_kernel),
        reinterpret_cast<const void *>(&read_peers_kernel), reinterpret_cast<const void *>(&write_u64_kernel),
        reinterpret_cast<const void *>(&occupy_kernel),
    };
    for (const void *fn : fns) {
        cudaFuncAttributes a;
        cudaError_t e = cudaFuncGetAttributes(&a, fn);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
