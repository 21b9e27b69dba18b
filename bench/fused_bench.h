/* symmem-fused-bench's baseline kernels (fused_bench_kernels.cu), on `s`; each returns the launch error. */
#ifndef SYMMEM_BENCH_FUSED_BENCH_H
#define SYMMEM_BENCH_FUSED_BENCH_H

#include <stddef.h>

#include <cuda_runtime.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* residual[i] = round(residual[i] + h[i]) for i < count. */
cudaError_t fb_add(void *residual, const void *h, size_t count, symmem_dtype_t dt, cudaStream_t s);
/* Per row: h != NULL: residual = round(residual + h) first; then out = rmsnorm(residual) * weight, with the
 * fused kernel's block shape and fp32 operations. */
cudaError_t fb_rows(void *residual, const void *h, const void *weight, void *out, size_t tokens, size_t hidden,
                    float eps, symmem_dtype_t dt, cudaStream_t s);
/* Load the kernels above now (see cc_dev_preload). */
cudaError_t fb_preload(void);

#ifdef __cplusplus
}
#endif
#endif
