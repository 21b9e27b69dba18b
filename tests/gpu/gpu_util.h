/* Helpers for GPU tests: device counting without initialising CUDA in the parent (CUDA is not fork-safe,
 * so every test process forks its ranks before touching CUDA) and rank launching, both the harness's
 * (harness/harness.h); pattern kernels. */
#ifndef SYMMEM_TEST_GPU_UTIL_H
#define SYMMEM_TEST_GPU_UTIL_H

#include <cuda_runtime.h>
#include <stdint.h>

#include "harness.h"
#include "symmem/symmem.h"
#include "test_util.h"

/* Number of GPUs, counted in a child process so this process stays CUDA-free; 0 if none or no driver. */
static inline int gpu_count_forked(void) { return cc_probe_gpu_count(); }

typedef struct gpu_ranks {
    void (*fn)(int, int, const symmem_unique_id_t *);
    int nranks;
    const symmem_unique_id_t *ids;
} gpu_ranks_t;

static inline void gpu_rank_main(int rank, void *arg)
{
    const gpu_ranks_t *g = (const gpu_ranks_t *)arg;
    g->fn(rank, g->nranks, g->ids);
}

/* Run fn(rank, nranks, ids) in nranks forked processes (the harness's launcher, cc_spawn) and wait for all
 * of them. 0 when every rank exited 0. */
static inline int gpu_fork_ranks(int nranks, void (*fn)(int, int, const symmem_unique_id_t *),
                                 const symmem_unique_id_t *ids)
{
    gpu_ranks_t g = {fn, nranks, ids};
    return cc_spawn(nranks, gpu_rank_main, &g, 0);
}

/* Keep NVLink multicast off in this process and its children whatever the caller's environment. */
static inline void gpu_safe_environment(void)
{
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
    setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
}

/* In a forked rank: the safe environment, then this rank's communicator on GPU rank % ngpus (timeout_ms
 * 0: the library's default). Exits the rank on failure (CHECK_OK). */
static inline symmem_comm_t gpu_rank_comm(int rank, int nranks, const symmem_unique_id_t *id, int ngpus, int timeout_ms)
{
    gpu_safe_environment();
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.device = rank % ngpus;
    if (timeout_ms > 0) o.timeout_ms = timeout_ms;
    symmem_comm_t c = NULL;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    return c;
}

__host__ __device__ static inline uint32_t gpu_pattern(int rank, size_t i, uint32_t round)
{
    uint64_t x = ((uint64_t)rank << 48) ^ (uint64_t)i ^ ((uint64_t)round << 40);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 29;
    return (uint32_t)x;
}

/* Fill `bytes` at p with rank's pattern (words, then a tail byte per leftover byte). */
__global__ static void gpu_fill_kernel(unsigned char *p, size_t bytes, int rank, uint32_t round)
{
    size_t words = bytes / 4, stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += stride)
        ((uint32_t *)p)[i] = gpu_pattern(rank, i, round);
    if (blockIdx.x == 0 && threadIdx.x < bytes % 4)
        p[words * 4 + threadIdx.x] = (unsigned char)gpu_pattern(rank, words + threadIdx.x, round);
}

/* Count words of peer memory that differ from the peer's pattern (reads go over P2P). */
__global__ static void gpu_verify_kernel(const unsigned char *p, size_t bytes, int rank, uint32_t round,
                                         unsigned long long *wrong)
{
    size_t words = bytes / 4, stride = (size_t)gridDim.x * blockDim.x;
    unsigned long long bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < words; i += stride)
        bad += ((const uint32_t *)p)[i] != gpu_pattern(rank, i, round);
    if (blockIdx.x == 0 && threadIdx.x < bytes % 4)
        bad += p[words * 4 + threadIdx.x] != (unsigned char)gpu_pattern(rank, words + threadIdx.x, round);
    if (bad) atomicAdd(wrong, bad);
}

__global__ static void gpu_count_nonzero_kernel(const unsigned char *p, size_t bytes, unsigned long long *nonzero)
{
    unsigned long long n = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes; i += (size_t)gridDim.x * blockDim.x)
        n += p[i] != 0;
    if (n) atomicAdd(nonzero, n);
}

#endif
