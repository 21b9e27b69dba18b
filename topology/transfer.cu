/* The SM transfer of every bandwidth figure (see transfer.h). */
#include "topology/transfer.h"

#include <cuda_runtime.h>
#include <stdint.h>

namespace {

__global__ void copy_kernel(uint4 *dst, const uint4 *src, size_t n)
{
    size_t stride = (size_t)gridDim.x * blockDim.x, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a, dst[i + stride] = b, dst[i + 2 * stride] = c, dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}

} // namespace

extern "C" cudaError_t topo_copy_launch(void *dst, const void *src, size_t bytes, int grid, int threads,
                                        cudaStream_t stream)
{
    if (bytes % 16 || grid < 1 || threads < 1) return cudaErrorInvalidValue;
    copy_kernel<<<(unsigned)grid, (unsigned)threads, 0, stream>>>(static_cast<uint4 *>(dst),
                                                                 static_cast<const uint4 *>(src), bytes / 16);
    return cudaGetLastError();
}

extern "C" cudaError_t topo_copy_runs(void *dst, const void *src, size_t bytes, int grid, int threads,
                                      cudaStream_t stream, int warm, int runs, cudaEvent_t *ev)
{
    cudaError_t e = cudaSuccess;
    for (int k = 0; k < warm && e == cudaSuccess; k++) e = topo_copy_launch(dst, src, bytes, grid, threads, stream);
    for (int k = 0; k <= runs && e == cudaSuccess; k++) {
        e = cudaEventRecord(ev[k], stream);
        if (e == cudaSuccess && k < runs) e = topo_copy_launch(dst, src, bytes, grid, threads, stream);
    }
    return e;
}

extern "C" cudaError_t topo_ce_runs(void *dst, const void *src, size_t bytes, cudaStream_t stream, int warm, int runs,
                                    cudaEvent_t *ev)
{
    cudaError_t e = cudaSuccess;
    for (int k = 0; k < warm && e == cudaSuccess; k++) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
    for (int k = 0; k <= runs && e == cudaSuccess; k++) {
        e = cudaEventRecord(ev[k], stream);
        if (e == cudaSuccess && k < runs) e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
    }
    return e;
}

extern "C" cudaError_t topo_copy_gbs(size_t bytes, const cudaEvent_t *ev, int runs, double *gbs)
{
    float ms[64];
    if (runs < 1 || runs > 64) return cudaErrorInvalidValue;
    for (int k = 0; k < runs; k++) {
        const cudaError_t e = cudaEventElapsedTime(&ms[k], ev[k], ev[k + 1]);
        if (e != cudaSuccess) return e;
    }
    for (int i = 1; i < runs; i++) /* insertion sort: a handful of runs */
        for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) {
            const float t = ms[j];
            ms[j] = ms[j - 1];
            ms[j - 1] = t;
        }
    const double med = runs % 2 ? ms[runs / 2] : 0.5 * ((double)ms[runs / 2 - 1] + ms[runs / 2]);
    *gbs = med > 0 ? (double)bytes / (med * 1e-3) / 1e9 : 0.0;
    return cudaSuccess;
}

extern "C" cudaError_t topo_copy_preload(void)
{
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, reinterpret_cast<const void *>(&copy_kernel));
}
