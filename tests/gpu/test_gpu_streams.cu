/* Two communicators of the same ranks, each on its own stream, with all-reduces enqueued alternately and
 * no host synchronisation: they must run concurrently without interfering (each communicator has its own
 * workspace, flags and sequence numbers). Every output is checked exactly (small integers in fp32).
 * A second case checks that one communicator used from two unordered streams is reported. 2 processes on
 * 2 GPUs; exits 77 with fewer than 2 GPUs. */
#include "boot/comm_state.h"
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
    symmem_comm_t comm[2];
    for (int c = 0; c < 2; c++) comm[c] = gpu_rank_comm(rank, nranks, &ids[c], g_ngpus, 0);
    cudaStream_t s[2];
    for (int c = 0; c < 2; c++) CHECK_CUDA(cudaStreamCreateWithFlags(&s[c], cudaStreamNonBlocking));
    for (size_t t = 0; t < sizeof kCounts / sizeof kCounts[0]; t++) {
        const size_t n = kCounts[t];
        float *in[2], *out[2];
        for (int c = 0; c < 2; c++) {
            CHECK_CUDA(cudaMalloc(&in[c], ITERS * n * sizeof(float)));
            CHECK_CUDA(cudaMalloc(&out[c], ITERS * n * sizeof(float)));
            CHECK_CUDA(cudaMemset(out[c], 0xff, ITERS * n * sizeof(float))); /* NaN until written */
        }
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_OK(symmem_comm_barrier(comm[0]));
        /* Alternate the two communicators, never waiting on the host. */
        for (int k = 0; k < ITERS; k++)
            for (int c = 0; c < 2; c++) {
                fill_inputs<<<64, 256, 0, s[c]>>>(in[c] + (size_t)k * n, n, c, rank, k);
                CHECK_OK(symmem_all_reduce(comm[c], in[c] + (size_t)k * n, out[c] + (size_t)k * n, n, SYMMEM_FLOAT32,
                                           SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, s[c]));
            }
        for (int c = 0; c < 2; c++) CHECK_CUDA(cudaStreamSynchronize(s[c]));
        for (int c = 0; c < 2; c++) CHECK_OK(symmem_comm_get_async_error(comm[c]));
        float *h = (float *)malloc(ITERS * n * sizeof(float));
        CHECK(h);
        size_t wrong = 0;
        for (int c = 0; c < 2; c++) {
            CHECK_CUDA(cudaMemcpy(h, out[c], ITERS * n * sizeof(float), cudaMemcpyDeviceToHost));
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
            CHECK_CUDA(cudaFree(in[c]));
            CHECK_CUDA(cudaFree(out[c]));
        }
    }
    for (int c = 0; c < 2; c++) {
        CHECK_CUDA(cudaStreamDestroy(s[c]));
        CHECK_OK(symmem_comm_destroy(comm[c]));
    }
}

/* The same communicator on two streams with no ordering between them (a usage error): rank 0 enqueues an
 * all-reduce on stream A; its kernel waits for rank 1, which sleeps first, so it is certainly still running
 * when rank 0 enqueues a second all-reduce on stream B 100 ms later. The second kernel must find the first
 * one's blocks not ended and report it (SYMMEM_INVALID_USAGE naming the overlap), aborting both, instead of
 * sharing the epoch and buffers; the communicator stays in that error state. Rank 1 only has to finish
 * (its single call completes or times out) and tear down. */
static void same_communicator_rank(int rank, int nranks, const symmem_unique_id_t *ids)
{
    symmem_comm_t comm = gpu_rank_comm(rank, nranks, &ids[0], g_ngpus, 3000);
    cudaStream_t s[2];
    for (int c = 0; c < 2; c++) CHECK_CUDA(cudaStreamCreateWithFlags(&s[c], cudaStreamNonBlocking));
    const size_t n = 256;
    float *buf;
    CHECK_CUDA(cudaMalloc(&buf, 4 * n * sizeof(float)));
    fill_inputs<<<4, 256>>>(buf, 4 * n, 0, rank, 0);
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_OK(symmem_comm_barrier(comm));
    if (rank == 0) {
        CHECK_OK(symmem_all_reduce(comm, buf, buf + n, n, SYMMEM_FLOAT32, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, s[0]));
        usleep(100 * 1000);
        CHECK_OK(symmem_all_reduce(comm, buf + 2 * n, buf + 3 * n, n, SYMMEM_FLOAT32, SYMMEM_OP_SUM,
                                   SYMMEM_ALGO_AUTO, s[1]));
        for (int c = 0; c < 2; c++) CHECK_CUDA(cudaStreamSynchronize(s[c]));
        const symmem_status_t st = symmem_comm_get_async_error(comm);
        const char *msg = symmem_last_error();
        printf("  rank 0: %s: %s\n", symmem_status_string(st), msg ? msg : "(none)");
        CHECK(st == SYMMEM_INVALID_USAGE);
        CHECK(msg && strstr(msg, "at the same time"));
        /* and it stays failed */
        CHECK(symmem_all_reduce(comm, buf, buf + n, n, SYMMEM_FLOAT32, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, s[0]) ==
              SYMMEM_INVALID_USAGE);
    } else {
        usleep(1000 * 1000);
        (void)symmem_all_reduce(comm, buf, buf + n, n, SYMMEM_FLOAT32, SYMMEM_OP_SUM, SYMMEM_ALGO_AUTO, s[0]);
        CHECK_CUDA(cudaStreamSynchronize(s[0]));
        (void)symmem_comm_get_async_error(comm);
    }
    CHECK_CUDA(cudaFree(buf));
    for (int c = 0; c < 2; c++) CHECK_CUDA(cudaStreamDestroy(s[c]));
    (void)symmem_comm_destroy(comm);
}

static void same_communicator_two_streams_reported(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    CHECK(gpu_fork_ranks(2, same_communicator_rank, &id) == 0);
}

static void two_communicators_two_streams(void)
{
    symmem_unique_id_t ids[2];
    for (int c = 0; c < 2; c++) CHECK_OK(symmem_get_unique_id(&ids[c]));
    CHECK(gpu_fork_ranks(2, rank_main, ids) == 0);
}

int main(void)
{
    g_ngpus = gpu_count_forked();
    if (g_ngpus < 2) {
        printf("fewer than 2 GPUs (%d): skipping the concurrent-communicators test\n", g_ngpus);
        return TEST_SKIP_CODE;
    }
    static const test_case_t cases[] = {{"two_communicators_two_streams", two_communicators_two_streams, 180},
                                        {"same_communicator_two_streams_reported",
                                         same_communicator_two_streams_reported, 120}};
    return test_run_all(cases, 2);
}
