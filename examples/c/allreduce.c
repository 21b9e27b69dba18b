/* symmem from C: two ranks in this process (symmem_comm_init_all), symmetric buffers, an all-reduce, and a
 * kernel of your own that stores into the next rank's buffer and signals it (ring_kernel.cu, written with
 * <symmem/symmem_device.cuh>). Every result is checked.
 *
 * Without a GPU it runs what the host backend offers, the allocation and the peer mappings in host memory,
 * and says that the all-reduce and the kernel were skipped. `--gpu` makes a missing GPU exit 77 (skipped).
 * Two ranks on one GPU work too (both are threads of this process, so no MPS is needed).
 *
 *   cmake -S examples/c -B build-example -DCMAKE_PREFIX_PATH=<where symmem is installed>
 *   cmake --build build-example && ./build-example/symmem_example_c */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <symmem/symmem.h>

#include "ring_kernel.h"

#define NRANKS 2
#define COUNT 4096

static int failed(const char *what, symmem_status_t st)
{
    fprintf(stderr, "example: %s: %s: %s\n", what, symmem_status_name(st), symmem_last_error());
    return 1;
}

#define SYMMEM_TRY(call)                                                                                       \
    do {                                                                                                       \
        symmem_status_t st_ = (call);                                                                          \
        if (st_ != SYMMEM_OK) return failed(#call, st_);                                                       \
    } while (0)
#define CUDA_TRY(call)                                                                                         \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "example: %s: %s\n", #call, cudaGetErrorString(e_));                               \
            return 1;                                                                                          \
        }                                                                                                      \
    } while (0)

/* Host backend: each rank's part is host memory that every rank maps; rank 0 sums both parts by hand. */
static int host_part(symmem_buffer_t *data)
{
    for (int r = 0; r < NRANKS; r++) {
        float *mine = symmem_buffer_ptr(data[r]);
        for (int i = 0; i < COUNT; i++) mine[i] = (float)(r + 1);
    }
    const float *peer = symmem_buffer_peer_ptr(data[0], 1), *own = symmem_buffer_ptr(data[0]);
    for (int i = 0; i < COUNT; i++)
        if (own[i] + peer[i] != 3.0f) return fprintf(stderr, "example: element %d: %g\n", i, own[i] + peer[i]), 1;
    printf("host backend: rank 0 read rank 1's buffer through its peer mapping and summed them: ok\n");
    printf("the all-reduce and the kernel need a GPU: skipped here\n");
    return 0;
}

static int gpu_part(symmem_comm_t *comms, symmem_buffer_t *data, symmem_buffer_t *inbox, const int *devices)
{
    cudaStream_t streams[NRANKS];
    int *ok[NRANKS];
    static float host[COUNT];
    for (int r = 0; r < NRANKS; r++) {
        CUDA_TRY(cudaSetDevice(devices[r]));
        CUDA_TRY(ring_kernel_load());
        CUDA_TRY(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
        CUDA_TRY(cudaMalloc((void **)&ok[r], sizeof(int)));
        CUDA_TRY(cudaMemsetAsync(ok[r], 0, sizeof(int), streams[r]));
        for (int i = 0; i < COUNT; i++) host[i] = (float)(r + 1);
        /* on the rank's stream, so that the all-reduce after it sees the data (pageable memory: staged
         * before the call returns, so `host` may be refilled) */
        CUDA_TRY(cudaMemcpyAsync(symmem_buffer_ptr(data[r]), host, sizeof host, cudaMemcpyHostToDevice, streams[r]));
    }
    /* Stream-ordered: each call enqueues rank r's kernel on its stream and returns; the kernels of both ranks
     * then meet on the GPUs. In place, on the symmetric buffers (zero copy). */
    for (int r = 0; r < NRANKS; r++)
        SYMMEM_TRY(symmem_all_reduce(comms[r], symmem_buffer_ptr(data[r]), symmem_buffer_ptr(data[r]), COUNT,
                                     SYMMEM_FLOAT32, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, (symmem_stream_t)streams[r]));
    /* Your kernel, after the all-reduce on the same stream: each rank sends result + rank to the next rank. */
    for (int r = 0; r < NRANKS; r++) {
        CUDA_TRY(cudaSetDevice(devices[r]));
        CUDA_TRY(ring_kernel_launch(symmem_buffer_device_peers(inbox[r]), symmem_buffer_device_signals(inbox[r]), r,
                                    NRANKS, symmem_buffer_ptr(data[r]), COUNT, 1, ok[r], streams[r]));
    }
    int bad = 0;
    for (int r = 0; r < NRANKS; r++) {
        CUDA_TRY(cudaSetDevice(devices[r]));
        CUDA_TRY(cudaStreamSynchronize(streams[r]));
        SYMMEM_TRY(symmem_comm_get_async_error(comms[r]));
        int flag = 0;
        CUDA_TRY(cudaMemcpy(host, symmem_buffer_ptr(data[r]), sizeof host, cudaMemcpyDeviceToHost));
        CUDA_TRY(cudaMemcpy(&flag, ok[r], sizeof flag, cudaMemcpyDeviceToHost));
        int wrong = 0;
        for (int i = 0; i < COUNT; i++) wrong += host[i] != 3.0f;
        printf("rank %d on cuda:%d: all-reduce %s (%d of %d elements wrong); ring kernel %s\n", r, devices[r],
               wrong ? "WRONG" : "ok", wrong, COUNT, flag == 1 ? "ok" : flag == 0 ? "WRONG data" : "timed out");
        bad |= wrong || flag != 1;
        cudaFree(ok[r]);
        cudaStreamDestroy(streams[r]);
    }
    return bad;
}

int main(int argc, char **argv)
{
    const int need_gpu = argc > 1 && !strcmp(argv[1], "--gpu");
    int ngpus = 0;
    if (cudaGetDeviceCount(&ngpus) != cudaSuccess) ngpus = 0;
    if (ngpus == 0 && need_gpu) return printf("no GPU: skipped\n"), 77;
    int devices[NRANKS] = {0, ngpus > 1 ? 1 : 0};
    symmem_options_t opts = SYMMEM_OPTIONS_INIT;
    opts.backend = ngpus ? SYMMEM_BACKEND_CUDA : SYMMEM_BACKEND_HOST;
    symmem_comm_t comms[NRANKS];
    SYMMEM_TRY(symmem_comm_init_all(NRANKS, ngpus ? devices : NULL, &opts, comms));

    /* Collective host calls of several ranks from one thread go inside a group. */
    symmem_buffer_t data[NRANKS], inbox[NRANKS];
    SYMMEM_TRY(symmem_group_start());
    for (int r = 0; r < NRANKS; r++) {
        SYMMEM_TRY(symmem_alloc(comms[r], COUNT * sizeof(float), &data[r]));
        SYMMEM_TRY(symmem_alloc(comms[r], COUNT * sizeof(float), &inbox[r]));
    }
    SYMMEM_TRY(symmem_group_end());

    int rc = ngpus ? gpu_part(comms, data, inbox, devices) : host_part(data);
    for (int r = 0; r < NRANKS; r++) {
        symmem_free(data[r]);
        symmem_free(inbox[r]);
        symmem_comm_destroy(comms[r]);
    }
    printf("%s\n", rc ? "FAILED" : "example passed");
    return rc;
}
