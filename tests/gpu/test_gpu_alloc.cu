/* Symmetric allocation on real GPUs: every rank writes a rank-specific pattern into its buffer with a
 * kernel, and a kernel on every rank reads every peer's buffer through its P2P mapping and checks it.
 * One process per rank (2 ranks), several ranks per process and per GPU (4 and 8 ranks on the GPUs
 * present), sizes from 1 byte to 4 GiB, host-NUMA placement, and 10,000 alloc/free cycles with device
 * memory and file descriptors back to where they started. Exits 77 (skip) without a GPU. */
#include <pthread.h>
#include <string.h>

#include "boot/comm_state.h"
#include "gpu_util.h"

static int g_ngpus;

static unsigned long long verify_all_peers(symmem_comm_t c, symmem_buffer_t b, uint32_t round, cudaStream_t s,
                                           unsigned long long *d_wrong)
{
    CHECK_CUDA(cudaMemsetAsync(d_wrong, 0, sizeof *d_wrong, s));
    for (int p = 0; p < symmem_comm_size(c); p++)
        gpu_verify_kernel<<<264, 512, 0, s>>>((const unsigned char *)symmem_buffer_peer_ptr(b, p),
                                                symmem_buffer_size(b), p, round, d_wrong);
    gpu_count_nonzero_kernel<<<8, 256, 0, s>>>((const unsigned char *)symmem_buffer_signal_ptr(b, symmem_comm_rank(c)),
                                               SYMMEM_SIGNAL_BYTES, d_wrong);
    CHECK_CUDA(cudaGetLastError());
    unsigned long long wrong = 0;
    CHECK_CUDA(cudaMemcpyAsync(&wrong, d_wrong, sizeof wrong, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    return wrong;
}

/* ---- one process per rank ----------------------------------------------------------------------------- */

static void rank_pattern(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = gpu_rank_comm(rank, nranks, id, g_ngpus, 120000);
    CHECK(symmem_comm_device(c) == rank % g_ngpus);
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreate(&s));
    unsigned long long *d_wrong;
    CHECK_CUDA(cudaMalloc(&d_wrong, sizeof *d_wrong));
    static const size_t sizes[] = {1, 7, 4095, 2u << 20, (2u << 20) + 1, (64u << 20) + 3, 1ull << 30, 4ull << 30};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        symmem_buffer_t b;
        CHECK_OK(symmem_alloc(c, sizes[k], &b));
        CHECK(symmem_buffer_placement(b) == SYMMEM_PLACEMENT_DEVICE);
        gpu_fill_kernel<<<264, 512, 0, s>>>((unsigned char *)symmem_buffer_ptr(b), sizes[k], rank, (uint32_t)k);
        CHECK_CUDA(cudaStreamSynchronize(s));
        CHECK_OK(symmem_comm_barrier(c));
        unsigned long long wrong = verify_all_peers(c, b, (uint32_t)k, s, d_wrong);
        if (wrong) fprintf(stderr, "rank %d: %llu wrong words at size %zu\n", rank, wrong, sizes[k]);
        CHECK(wrong == 0);
        CHECK_OK(symmem_comm_barrier(c)); /* peers finish reading before anyone frees */
        CHECK_OK(symmem_free(b));
        if (rank == 0) printf("  %d processes: %zu bytes mapped on every rank and checked\n", nranks, sizes[k]);
    }
    symmem_link_t link;
    CHECK_OK(symmem_comm_peer_link(c, (rank + 1) % nranks, &link, NULL));
    if (rank == 0) printf("  link to rank 1: %d (0 self, 1 nvlink, 2 pcie, 3 host)\n", (int)link);
    CHECK_CUDA(cudaFree(d_wrong));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_OK(symmem_comm_destroy(c));
}

static int spawn(int nranks, void (*fn)(int, int, const symmem_unique_id_t *))
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    return gpu_fork_ranks(nranks, fn, &id);
}

static void two_processes_1b_to_4gib(void) { CHECK(spawn(2, rank_pattern) == 0); }

/* ---- several ranks in one process, several per GPU ---------------------------------------------------- */

static void inprocess(int nranks, symmem_placement_t placement)
{
    gpu_safe_environment();
    int devices[16];
    for (int r = 0; r < nranks; r++) devices[r] = r % g_ngpus;
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.placement = placement;
    o.timeout_ms = 120000;
    symmem_comm_t comms[16];
    symmem_status_t st = symmem_comm_init_all(nranks, devices, &o, comms);
    CHECK_OK(st);
    static const size_t sizes[] = {1, 4097, (2u << 20) + 5, 256u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        symmem_buffer_t bufs[16];
        CHECK_OK(symmem_group_start());
        for (int r = 0; r < nranks; r++) CHECK_OK(symmem_alloc(comms[r], sizes[k], &bufs[r]));
        st = symmem_group_end();
        if (st == SYMMEM_UNSUPPORTED && placement == SYMMEM_PLACEMENT_HOST_NUMA) {
            printf("  host-NUMA placement unsupported here: %s\n", symmem_last_error());
            exit(TEST_SKIP_CODE);
        }
        CHECK_OK(st);
        for (int r = 0; r < nranks; r++) {
            CHECK(symmem_buffer_placement(bufs[r]) ==
                  (placement == SYMMEM_PLACEMENT_HOST_NUMA ? SYMMEM_PLACEMENT_HOST_NUMA : SYMMEM_PLACEMENT_DEVICE));
            CHECK_CUDA(cudaSetDevice(devices[r]));
            gpu_fill_kernel<<<132, 512>>>((unsigned char *)symmem_buffer_ptr(bufs[r]), sizes[k], r, (uint32_t)k);
            CHECK_CUDA(cudaDeviceSynchronize());
        }
        for (int r = 0; r < nranks; r++) {
            CHECK_CUDA(cudaSetDevice(devices[r]));
            unsigned long long *d_wrong;
            CHECK_CUDA(cudaMalloc(&d_wrong, sizeof *d_wrong));
            unsigned long long wrong = verify_all_peers(comms[r], bufs[r], (uint32_t)k, 0, d_wrong);
            CHECK_CUDA(cudaFree(d_wrong));
            if (wrong) fprintf(stderr, "rank %d: %llu wrong at size %zu\n", r, wrong, sizes[k]);
            CHECK(wrong == 0);
        }
        for (int r = 0; r < nranks; r++) CHECK_OK(symmem_free(bufs[r]));
        printf("  %d ranks on %d GPU(s)%s: %zu bytes checked\n", nranks, g_ngpus,
               placement == SYMMEM_PLACEMENT_HOST_NUMA ? " (host-NUMA memory)" : "", sizes[k]);
    }
    for (int r = 0; r < nranks; r++) CHECK_OK(symmem_comm_destroy(comms[r]));
}

static void four_ranks_inprocess(void) { inprocess(4, SYMMEM_PLACEMENT_DEVICE); }
static void eight_ranks_inprocess(void) { inprocess(8, SYMMEM_PLACEMENT_DEVICE); }
static void host_numa_placement(void) { inprocess(2, SYMMEM_PLACEMENT_HOST_NUMA); }

/* ---- leaks ---------------------------------------------------------------------------------------------- */

static void rank_cycles(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = gpu_rank_comm(rank, nranks, id, g_ngpus, 0);
    symmem_buffer_t b;
    CHECK_OK(symmem_alloc(c, 1 << 20, &b)); /* first allocation creates lazily made driver state */
    CHECK_OK(symmem_free(b));
    CHECK_OK(symmem_comm_barrier(c));
    size_t free0, total;
    CHECK_CUDA(cudaMemGetInfo(&free0, &total));
    int fds0 = test_open_fds();
    for (int i = 0; i < 10000; i++) {
        CHECK_OK(symmem_alloc(c, (size_t)(1 + i % 3) << 20, &b));
        CHECK_OK(symmem_free(b));
    }
    CHECK_OK(symmem_comm_barrier(c));
    size_t free1;
    CHECK_CUDA(cudaMemGetInfo(&free1, &total));
    int fds1 = test_open_fds();
    if (rank == 0)
        printf("  10000 cycles: free device memory %zu -> %zu bytes, open fds %d -> %d\n", free0, free1, fds0, fds1);
    CHECK(fds1 == fds0);
    CHECK(free1 == free0);
    CHECK_OK(symmem_comm_destroy(c));
}
static void ten_thousand_cycles_leak_nothing(void) { CHECK(spawn(2, rank_cycles) == 0); }

/* Out of device memory: every rank fails cleanly, naming the rank, and the communicator stays usable. */
static void rank_oom(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = gpu_rank_comm(rank, nranks, id, g_ngpus, 0);
    size_t free_b, total;
    CHECK_CUDA(cudaMemGetInfo(&free_b, &total));
    symmem_buffer_t b;
    /* Within the device's size (so the size check passes) but more than is free once a context and
     * the collective workspace exist. */
    symmem_status_t st = symmem_alloc(c, total - (64u << 20), &b);
    CHECK(st == SYMMEM_OUT_OF_MEMORY || st == SYMMEM_CUDA_ERROR || st == SYMMEM_OK);
    if (st == SYMMEM_OK) {
        CHECK_OK(symmem_free(b)); /* a device with that much free: nothing to test */
    } else {
        CHECK_ERR_HAS("rank");
    }
    CHECK_OK(symmem_alloc(c, 1 << 20, &b));
    CHECK_OK(symmem_free(b));
    CHECK_OK(symmem_comm_destroy(c));
}
static void out_of_memory_is_clean(void) { CHECK(spawn(2, rank_oom) == 0); }

int main(void)
{
    g_ngpus = gpu_count_forked();
    if (g_ngpus == 0) {
        printf("no GPU: skipping the GPU allocation tests\n");
        return TEST_SKIP_CODE;
    }
    static const test_case_t cases[] = {
        {"two_processes_1b_to_4gib", two_processes_1b_to_4gib, 300},
        {"four_ranks_inprocess", four_ranks_inprocess, 200},
        {"eight_ranks_inprocess", eight_ranks_inprocess, 300},
        {"host_numa_placement", host_numa_placement, 200},
        {"out_of_memory_is_clean", out_of_memory_is_clean, 120},
        {"ten_thousand_cycles_leak_nothing", ten_thousand_cycles_leak_nothing, 400},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
