/* The one SM transfer every peer bandwidth figure is measured with: symmem-topo's pair, host and ring
 * figures (measure.cu) and the communicator's init probe (probe.c). Grid-stride 16-byte copies, four
 * independent loads in flight per thread (PCIe peer loads need many outstanding requests to reach the
 * link's bandwidth); a read figure is a copy from peer memory into local memory, a write figure a copy from
 * local memory into peer memory. */
#ifndef SYMMEM_TOPOLOGY_TRANSFER_H
#define SYMMEM_TOPOLOGY_TRANSFER_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copy `bytes` (a multiple of 16, both ends 16-byte aligned) from src to dst with `grid` blocks of `threads`
 * threads on `stream`. The launch's cudaError_t. */
cudaError_t topo_copy_launch(void *dst, const void *src, size_t bytes, int grid, int threads, cudaStream_t stream);
/* `warm` untimed copies, then `runs` copies back to back, copy k between ev[k] and ev[k + 1] (runs + 1
 * events). Nothing waits: the caller waits for ev[runs] its own way, then reads the figure with
 * topo_copy_gbs. */
cudaError_t topo_copy_runs(void *dst, const void *src, size_t bytes, int grid, int threads, cudaStream_t stream,
                           int warm, int runs, cudaEvent_t *ev);
/* The same with the copy engine: `warm` untimed cudaMemcpyAsync of `bytes` from src to dst, then `runs`
 * timed ones between the events (peer copies: the copy-engine figure of the init probe and of the copy
 * ring's choice, topology/choice.h). */
cudaError_t topo_ce_runs(void *dst, const void *src, size_t bytes, cudaStream_t stream, int warm, int runs,
                         cudaEvent_t *ev);
/* The median GB/s (1e9 bytes per second) of the runs of topo_copy_runs, once ev[runs] has completed. */
cudaError_t topo_copy_gbs(size_t bytes, const cudaEvent_t *ev, int runs, double *gbs);
/* Load the copy kernel into the current device's context now (CUDA loads kernels lazily, and a load can wait
 * for the context's running kernels: see collectives/launch.cu). */
cudaError_t topo_copy_preload(void);

#ifdef __cplusplus
}
#endif
#endif
