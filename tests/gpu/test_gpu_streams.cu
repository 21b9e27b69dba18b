/* Two communicators of the same ranks, each on its own stream, with all-reduces enqueued alternately and
 * no host synchronisation: they must run concurrently without interfering (each communicator has its own
 * workspace, flags and sequence numbers). Every output is checked exactly (small integers in fp32).
 * 2 processes on 2 GPUs; exits 77 with fewer than 2 GPUs. */
#include "core/comm.h"
#include "gpu_util.h"

static int g_ngpus;

enum { ITERS = 40 };
static const size_t kCounts[] = {1000, 300001}; /* one block, and many blocks */

__host__ __device__ static inline float input_value(int comm, int rank, size_t i, int k)
{
    return (float)((comm * 7 + rank * 3 + (int)(i % 11) + k) % 23 - 11);
}

__global__ static void fill_inputs(float *p, size_t n, int comm, int rank, int k)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = input_value(comm, rank, i, k);
}

static void rank_main(int rank, int nranks, const symmem_unique_id_t *ids)
{
    gpu_safe_environment();
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.device = rank % g_ngpus;
    symmem_comm_t comm[2];
    for (int c = 0; c < 2; c++) CHECK_OK(symmem_comm_init(nranks, rank, &ids[c], &o, &comm[c]));
    cudaStream_t s[2];
    for (int c = 0; c < 2; c++) CUDA_CHECK(cudaStreamCreateWithFlags(&s[c], cudaStreamNonBlocking));
    for (size_t t = 0; t < sizeof kCounts / sizeof kCounts[0]; t++) {
        const size_t n = kCounts[t];
        float *in[2], *out[2];
        for (int c = 0; c < 2; c++) {
            CUDA_CHECK(cudaMalloc(&in[c], ITERS * n * sizeof(float)));
            CUDA_CHECK(cudaMalloc(&out[c], ITERS * n * sizeof(float)));
            CUDA_CHECK(cudaMemset(out[c], 0xff, ITERS * n * sizeof(float))); /* NaN until written */
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        CHECK_OK(symmem_comm_barrier(comm[0]));
        /* Alternate the two communicators, never waiting on the host. */
        for (int k = 0; k < ITERS; k++)
            for (int c = 0; c < 2; c++) {
                fill_inputs<<<64, 256, 0, s[c]>>>(in[c] + (size_t)k * n, n, c, rank, k);
                CHECK_OK(symmem_all_reduce(comm[c], in[c] + (size_t)k * n, out[c] + (size_t)k * n, n, SYMMEM_FLOAT32,
                                           SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, s[c]));
            }
        for (int c = 0; c < 2; c++) CUDA_CHECK(cudaStreamSynchronize(s[c]));
        for (int c = 0; c < 2; c++) CHECK_OK(symmem_comm_get_async_error(comm[c]));
        float *h = (float *)malloc(ITERS * n * sizeof(float));
        CHECK(h);
        size_t wrong = 0;
        for (int c = 0; c < 2; c++) {
            CUDA_CHECK(cudaMemcpy(h, out[c], ITERS * n * sizeof(float), cudaMemcpyDeviceToHost));
            for (int k = 0; k < ITERS; k++)
                for (size_t i = 0; i < n; i++) {
                    float want = 0;
                    for (int r = 0; r < nranks; r++) want += input_value(c, r, i, k);
                    wrong += h[(size_t)k * n + i] != want;
                }
        }
        free(h);
        if (wrong) fprintf(stderr, "rank %d: %zu wrong elements (count %zu)\n", rank, wrong, n);
        CHECK(wrong == 0);
        if (rank == 0)
            printf("  2 communicators on 2 streams, %d interleaved all-reduces each of %zu floats: exact\n", ITERS, n);
        for (int c = 0; c < 2; c++) {
            CUDA_CHECK(cudaFree(in[c]));
            CUDA_CHECK(cudaFree(out[c]));
        }
    }
    for (int c = 0; c < 2; c++) {
        CUDA_CHECK(cudaStreamDestroy(s[c]));
        CHECK_OK(symmem_comm_destroy(comm[c]));
    }
}

static void two_communicators_two_streams(void)
{
    symmem_unique_id_t ids[2];
    for (int c = 0; c < 2; c++) CHECK_OK(symmem_get_unique_id(&ids[c]));
    pid_t pids[2];
    for (int r = 0; r < 2; r++)
        if ((pids[r] = fork()) == 0) {
            rank_main(r, 2, ids);
            _exit(0);
        }
    int bad = 0;
    for (int r = 0; r < 2; r++) {
        int st;
        waitpid(pids[r], &st, 0);
        bad += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    CHECK(bad == 0);
}

int main(void)
{
    g_ngpus = gpu_count_forked();
    if (g_ngpus < 2) {
        printf("fewer than 2 GPUs (%d): skipping the concurrent-communicators test\n", g_ngpus);
        return TEST_SKIP_CODE;
    }
    static const test_case_t cases[] = {{"two_communicators_two_streams", two_communicators_two_streams, 180}};
    return test_run_all(cases, 1);
}
