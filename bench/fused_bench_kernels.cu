/* The unfused baselines of symmem-fused-bench: what a framework runs after a plain all-reduce h = AR(x).
 *  - add:         residual = round(residual + h), elementwise (torch's add), 16-byte vectors;
 *  - rmsnorm:     out = residual * weight / sqrt(mean(residual^2) + eps), a block per row (torch's rms_norm);
 *  - add_rmsnorm: both in one kernel, a block per row (vLLM's / SGLang's fused_add_rms_norm).
 * The row kernels use the fused kernel's block shape (symmem_fused_block), pack-to-thread mapping and fp32
 * operations in the same order, so the three-kernel sequence over symmem_all_reduce gives the fused call's
 * bits: the benchmark checks that on every shape it times. */
#include <cuda_runtime.h>

#include "collectives/device.cuh"
#include "collectives/fused.h"
#include "fused_bench.h"

namespace {

using namespace symmem_k;

template <typename T> __global__ void add_kernel(void *residual, const void *h, uint64_t count, int aligned)
{
    constexpr int V = Pack<T>::V;
    const uint64_t packs = (count + V - 1) / V;
    for (uint64_t pk = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; pk < packs; pk += (uint64_t)gridDim.x * blockDim.x) {
        const int nv = (int)min((uint64_t)V, count - pk * V);
        float a[V], b[V];
        Conv<T>::unpack(load_user<T>(residual, pk * V, nv, aligned != 0, false), a);
        Conv<T>::unpack(load_user<T>(h, pk * V, nv, aligned != 0, false), b);
#pragma unroll
        for (int e = 0; e < V; e++) a[e] = __fadd_rn(a[e], b[e]);
        store_user<T>(residual, pk * V, Conv<T>::pack(a), nv, aligned != 0);
    }
}

/* Row `blockIdx.x`: with h, residual = round(residual + h) first (add_rmsnorm); then the norm of residual. */
template <typename T, bool ADD>
__global__ void __launch_bounds__(SYMMEM_COLL_THREADS) row_kernel(void *residual, const void *h, const void *weight,
                                                                  void *out, uint32_t hidden, uint32_t P, uint32_t ppt,
                                                                  float eps, int aligned)
{
    constexpr int V = Pack<T>::V, MAXP = SYMMEM_FUSED_ELEMS_PER_THREAD / V;
    const bool al = aligned != 0;
    const uint64_t row = blockIdx.x;
    float v[MAXP][V];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < MAXP; i++) {
#pragma unroll
        for (int e = 0; e < V; e++) v[i][e] = 0.0f;
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        if ((uint32_t)i >= ppt || k >= P) continue;
        const uint64_t el = row * hidden + (uint64_t)k * V;
        const int nv = (int)min((uint32_t)V, hidden - k * (uint32_t)V);
        uint4 rn = load_user<T>(residual, el, nv, al, false);
        if (ADD) {
            float rf[V], hf[V];
            Conv<T>::unpack(rn, rf);
            Conv<T>::unpack(load_user<T>(h, el, nv, al, false), hf);
#pragma unroll
            for (int e = 0; e < V; e++) rf[e] = __fadd_rn(rf[e], hf[e]);
            rn = Conv<T>::pack(rf);
            store_user<T>(residual, el, rn, nv, al);
        }
        Conv<T>::unpack(rn, v[i]);
#pragma unroll
        for (int e = 0; e < V; e++) ss = __fmaf_rn(v[i][e], v[i][e], ss);
    }
    __shared__ float part[SYMMEM_COLL_THREADS / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    float s = part[0];
    for (int w = 1; w < (int)((blockDim.x + 31) >> 5); w++) s = __fadd_rn(s, part[w]);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s, (float)hidden), eps)));
#pragma unroll
    for (int i = 0; i < MAXP; i++) {
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        if ((uint32_t)i >= ppt || k >= P) continue;
        const uint64_t el = row * hidden + (uint64_t)k * V;
        const int nv = (int)min((uint32_t)V, hidden - k * (uint32_t)V);
        float w[V], o[V];
        Conv<T>::unpack(load_user<T>(weight, (uint64_t)k * V, nv, al, false), w);
#pragma unroll
        for (int e = 0; e < V; e++) o[e] = __fmul_rn(__fmul_rn(v[i][e], inv), w[e]);
        store_user<T>(out, el, Conv<T>::pack(o), nv, al);
    }
}

template <typename T> const void *row_fn(bool add)
{
    return add ? reinterpret_cast<const void *>(&row_kernel<T, true>) : reinterpret_cast<const void *>(&row_kernel<T, false>);
}

const void *pick_row(symmem_dtype_t dt, bool add)
{
    return dt == SYMMEM_FLOAT32 ? row_fn<float>(add) : dt == SYMMEM_FLOAT16 ? row_fn<half>(add) : row_fn<bfloat16>(add);
}

} // namespace

extern "C" cudaError_t fb_add(void *residual, const void *h, size_t count, symmem_dtype_t dt, cudaStream_t s)
{
    const size_t V = 16 / symmem_dtype_size(dt), packs = (count + V - 1) / V;
    const int aligned = (uintptr_t)residual % 16 == 0 && (uintptr_t)h % 16 == 0;
    const unsigned grid = (unsigned)((packs + 255) / 256 < 1024 ? (packs + 255) / 256 : 1024);
    if (dt == SYMMEM_FLOAT32) add_kernel<float><<<grid, 256, 0, s>>>(residual, h, count, aligned);
    else if (dt == SYMMEM_FLOAT16) add_kernel<half><<<grid, 256, 0, s>>>(residual, h, count, aligned);
    else add_kernel<bfloat16><<<grid, 256, 0, s>>>(residual, h, count, aligned);
    return cudaGetLastError();
}

extern "C" cudaError_t fb_rows(void *residual, const void *h, const void *weight, void *out, size_t tokens,
                               size_t hidden, float eps, symmem_dtype_t dt, cudaStream_t s)
{
    uint32_t P, ppt;
    int threads;
    if (symmem_fused_block(hidden, symmem_dtype_size(dt), &P, &ppt, &threads) != 0) return cudaErrorInvalidValue;
    const size_t es = symmem_dtype_size(dt);
    int aligned = (uintptr_t)residual % 16 == 0 && (uintptr_t)weight % 16 == 0 && (uintptr_t)out % 16 == 0 &&
                  (hidden * es) % 16 == 0 && (!h || (uintptr_t)h % 16 == 0);
    uint32_t hid = (uint32_t)hidden;
    void *args[] = {&residual, (void *)&h, (void *)&weight, &out, &hid, &P, &ppt, &eps, &aligned};
    return cudaLaunchKernel(pick_row(dt, h != nullptr), dim3((unsigned)tokens), dim3((unsigned)threads), args, 0, s);
}

extern "C" cudaError_t fb_preload(void)
{
    const void *fns[] = {pick_row(SYMMEM_FLOAT32, false), pick_row(SYMMEM_FLOAT32, true), pick_row(SYMMEM_FLOAT16, false),
                         pick_row(SYMMEM_FLOAT16, true), pick_row(SYMMEM_BFLOAT16, false), pick_row(SYMMEM_BFLOAT16, true),
                         reinterpret_cast<const void *>(&add_kernel<float>), reinterpret_cast<const void *>(&add_kernel<half>),
                         reinterpret_cast<const void *>(&add_kernel<bfloat16>)};
    for (const void *fn : fns) {
        cudaFuncAttributes a;
        const cudaError_t e = cudaFuncGetAttributes(&a, fn);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
