/* The example's own kernel (ring_kernel.cu), callable from C. */
#ifndef SYMMEM_EXAMPLE_RING_KERNEL_H
#define SYMMEM_EXAMPLE_RING_KERNEL_H
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif
/* Loads the kernel on the current device now (see ring_kernel.cu for why before any launch). */
cudaError_t ring_kernel_load(void);
/* Rank `rank` stores data[i] + rank into the next rank's inbox, then signals it with `epoch`; it waits for the
 * previous rank's signal and checks what arrived: *ok = 1 right, 0 wrong, -1 timed out. */
cudaError_t ring_kernel_launch(void *const *inbox_peers, void *const *signal_peers, int rank, int nranks,
                               const float *data, size_t count, uint64_t epoch, int *ok, cudaStream_t stream);
#ifdef __cplusplus
}
#endif
#endif
