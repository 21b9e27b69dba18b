/* NCCL interoperability: NCCL (NCCL_CUMEM_ENABLE=1) registers a symmem buffer with ncclCommRegister and,
 * where NCCL has it, ncclCommWindowRegister, and all-reduces out of it; results are checked. One process
 * per rank, ranks on the GPUs present (several per GPU if fewer GPUs than ranks: NCCL refuses that, so the
 * test needs 2 GPUs and skips otherwise). */
#include <nccl.h>

#include "boot/comm_state.h"
#include "gpu_util.h"

static int g_ngpus;

__global__ static void fill_float(float *p, size_t n, int rank)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (float)((i * 7 + (size_t)rank * 13) % 1000) * 0.25f;
}

__global__ static void check_sum(const float *p, size_t n, int nranks, unsigned long long *wrong)
{
    unsigned long long bad = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float want = 0.0f;
        for (int r = 0; r < nranks; r++) want += (float)((i * 7 + (size_t)r * 13) % 1000) * 0.25f;
        bad += p[i] != want; /* quarter-integers below 2^24: exact in fp32 in any order */
    }
    if (bad) atomicAdd(wrong, bad);
}

static unsigned long long allreduce_and_check(ncclComm_t nc, float *p, size_t n, int rank, int nranks,
                                              cudaStream_t s)
{
    fill_float<<<132, 256, 0, s>>>(p, n, rank);
    CHECK_NCCL(ncclAllReduce(p, p, n, ncclFloat, ncclSum, nc, s));
    unsigned long long *d_wrong, wrong = 0;
    CHECK_CUDA(cudaMalloc(&d_wrong, sizeof *d_wrong));
    CHECK_CUDA(cudaMemsetAsync(d_wrong, 0, sizeof *d_wrong, s));
    check_sum<<<132, 256, 0, s>>>(p, n, nranks, d_wrong);
    CHECK_CUDA(cudaMemcpyAsync(&wrong, d_wrong, sizeof wrong, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaFree(d_wrong));
    return wrong;
}

static void rank_main(int rank, int nranks, const symmem_unique_id_t *id)
{
    setenv("NCCL_CUMEM_ENABLE", "1", 1);
    symmem_comm_t c = gpu_rank_comm(rank, nranks, id, g_ngpus, 0);
    /* NCCL's id travels over symmem's own bootstrap. */
    ncclUniqueId nid, all[2];
    if (rank == 0) CHECK_NCCL(ncclGetUniqueId(&nid));
    CHECK_OK(symmem_comm_allgather(c, &nid, all, sizeof nid));
    ncclComm_t nc;
    CHECK_NCCL(ncclCommInitRank(&nc, nranks, all[0], rank));
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s));
    const size_t n = (8u << 20) / sizeof(float) + 3;
    symmem_buffer_t b;
    CHECK_OK(symmem_alloc(c, n * sizeof(float), &b));
    void *handle = NULL;
    CHECK_OK(symmem_nccl_register(b, nc, &handle));
    CHECK(handle != NULL);
    unsigned long long wrong = allreduce_and_check(nc, (float *)symmem_buffer_ptr(b), n, rank, nranks, s);
    CHECK(wrong == 0);
    CHECK_OK(symmem_nccl_deregister(nc, handle));
    if (rank == 0) printf("  ncclCommRegister: all-reduce of %zu floats out of a symmem buffer correct\n", n);
    void *win = NULL;
    symmem_status_t st = symmem_nccl_window_register(b, nc, 1 /* NCCL_WIN_COLL_SYMMETRIC */, &win);
    if (st == SYMMEM_UNSUPPORTED) {
        if (rank == 0) printf("  ncclCommWindowRegister not available: %s\n", symmem_last_error());
    } else {
        CHECK_OK(st);
        CHECK(win != NULL);
        wrong = allreduce_and_check(nc, (float *)symmem_buffer_ptr(b), n, rank, nranks, s);
        CHECK(wrong == 0);
        CHECK_OK(symmem_nccl_window_deregister(nc, win));
        if (rank == 0) printf("  ncclCommWindowRegister: symmetric window all-reduce correct\n");
    }
    /* Wrong input is refused before reaching NCCL. */
    CHECK_ST(symmem_nccl_register(NULL, nc, &handle), SYMMEM_INVALID_ARGUMENT);
    CHECK_NCCL(ncclCommDestroy(nc));
    CHECK_OK(symmem_free(b));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_OK(symmem_comm_destroy(c));
}

static void nccl_registers_symmem_buffers(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    CHECK(gpu_fork_ranks(2, rank_main, &id) == 0);
}

int main(void)
{
    g_ngpus = gpu_count_forked();
    if (g_ngpus < 2) {
        printf("fewer than 2 GPUs (%d): skipping the NCCL registration test\n", g_ngpus);
        return TEST_SKIP_CODE;
    }
    static const test_case_t cases[] = {{"nccl_registers_symmem_buffers", nccl_registers_symmem_buffers, 180}};
    return test_run_all(cases, 1);
}
