/* Measured figures per ordered GPU pair and per GPU against pinned host memory, with the CUDA runtime.
 *
 * Every transfer is checked: the source is filled with a fresh pseudo-random pattern (a new seed per rep),
 * and after the transfer the destination is compared against the same pattern on its own GPU, because
 * drivers report P2P that then returns wrong data (ACS/IOMMU). Bandwidth is timed with CUDA events around
 * the transfer only; the figure is the median of KREPS reps after one warm-up rep. Latency is timed inside
 * the kernel (%globaltimer) over many ping-pongs. Every poll gives up after POLL_TIMEOUT_NS and every host
 * wait after SYNC_TIMEOUT_S, so a platform where P2P hangs yields an error, not a hung process.
 *
 * Conventions: read[i][j] is GPU i loading from GPU j's memory (pull), write[i][j] GPU i storing into GPU
 * j's memory (push), ce[i][j] a copy-engine copy from i to j issued on i.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef SYMMEM_HAVE_NUMA
#include <numa.h>
#endif

#include "base/log.h"
#include "base/status.h"
#include "symmem/topo.h"
#include "topology/topo_internal.h"
#include "topology/transfer.h"

namespace {

constexpr size_t KBYTES = size_t(32) << 20; /* per transfer: long enough that launch cost is < 1% on PCIe */
constexpr size_t KVEC = KBYTES / 16;
constexpr int KREPS = 5;
constexpr int KWARM = 1;
constexpr int COPY_THREADS = 256;
constexpr int LAT_ITERS = 2000, LAT_WARM = 200, LAT_REPS = 3;
constexpr unsigned long long POLL_TIMEOUT_NS = 1000000000ull; /* 1 s */
constexpr double SYNC_TIMEOUT_S = 10.0;
constexpr unsigned long long TIMED_OUT = ~0ull;

/* ------------------------------------------------------------------------------------------------------
 * Kernels
 * ---------------------------------------------------------------------------------------------------- */
__device__ __forceinline__ uint32_t pattern(uint64_t seed, uint64_t idx)
{
    uint64_t z = seed + idx * 0x9e3779b97f4a7c15ull; /* splitmix64: cheap, and no two words repeat per seed */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z ^ (z >> 31));
}

__global__ void fill_kernel(uint4 *buf, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        buf[i] = make_uint4(pattern(seed, 4 * i), pattern(seed, 4 * i + 1), pattern(seed, 4 * i + 2),
                            pattern(seed, 4 * i + 3));
}

__global__ void verify_kernel(const uint4 *buf, size_t n, uint64_t seed, unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = buf[i];
        mine += (v.x != pattern(seed, 4 * i)) + (v.y != pattern(seed, 4 * i + 1)) +
                (v.z != pattern(seed, 4 * i + 2)) + (v.w != pattern(seed, 4 * i + 3));
    }
    if (mine) atomicAdd(bad, mine);
}

__device__ __forceinline__ uint32_t ld_acquire(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* One thread. mine: a flag in this side's own memory, written only by the other side; theirs: the other
 * side's flag. Values base+1.. base+iters are written once each, so a stale value never matches. The
 * initiator writes first and times iterations after LAT_WARM; *result gets the elapsed ns, or TIMED_OUT. */
__global__ void pingpong_kernel(uint32_t *mine, uint32_t *theirs, uint32_t base, int iters, int initiator,
                                unsigned long long *result)
{
    unsigned long long t0 = now_ns();
    for (int k = 1; k <= iters; k++) {
        uint32_t v = base + (uint32_t)k;
        if (initiator && k == LAT_WARM + 1) t0 = now_ns();
        if (initiator) st_release(theirs, v);
        unsigned long long start = now_ns();
        while (ld_acquire(mine) != v)
            if (now_ns() - start > POLL_TIMEOUT_NS) {
                *result = TIMED_OUT;
                return;
            }
        if (!initiator) st_release(theirs, v);
    }
    *result = now_ns() - t0;
}

/* ------------------------------------------------------------------------------------------------------
 * Host side
 * ---------------------------------------------------------------------------------------------------- */
/* Plain structs, zeroed with calloc: no C++ runtime is needed, so C programs link the static library. */
struct gpu_res {
    uint4 *a, *b;                /* source and destination buffers, KBYTES each */
    uint32_t *flag;              /* ping-pong flag in this GPU's memory */
    unsigned long long *scratch; /* bad-word counter [0] and ping-pong result [1] */
    cudaStream_t stream;
    cudaEvent_t ev0, ev1, evsync;
    int blocks;
    bool peer_enabled[TOPO_MAX_GPUS]; /* enabled here, so disabled again at teardown */
    bool can[TOPO_MAX_GPUS];          /* peer access to GPU j works from this GPU */
};

struct host_res {
    void *raw; /* numa_alloc_onnode or aligned_alloc */
    size_t bytes;
    int numa;
    uint4 *buf;       /* KBYTES, registered and mapped; the device's address of it (UVA: the same) */
    uint32_t *flags;  /* [0]: GPU -> CPU, [16]: CPU -> GPU (separate cache lines) */
};

struct ctx {
    const topo_gpu_facts_t *facts;
    int n;
    gpu_res g[TOPO_MAX_GPUS];
    uint64_t seed;
    uint32_t flag_base;
    bool hung;                             /* a transfer never completed: freeing would block forever */
    topo_measure_t *m;
};

symmem_status_t cuda_fail(cudaError_t e, const char *what, int a, int b)
{
    return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "topology measurement: %s (GPU %d, GPU %d)", what, a, b);
}

#define MEAS_CUDA(call, what, a, b)                                                                       \
    do {                                                                                                   \
        cudaError_t meas_e_ = (call);                                                                      \
        if (meas_e_ != cudaSuccess) return cuda_fail(meas_e_, what, a, b);                                 \
    } while (0)

uint64_t next_seed(ctx *c)
{
    c->seed = c->seed * 6364136223846793005ull + 1442695040888963407ull;
    return c->seed;
}

double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Wait for the stream's work with a deadline: a P2P transfer that never completes must not hang us. */
symmem_status_t sync_stream(cudaStream_t s, cudaEvent_t ev, const char *what, int a, int b)
{
    MEAS_CUDA(cudaEventRecord(ev, s), "cudaEventRecord", a, b);
    double deadline = now_s() + SYNC_TIMEOUT_S;
    for (;;) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess) return SYMMEM_OK;
        if (e != cudaErrorNotReady) return cuda_fail(e, what, a, b);
        if (now_s() > deadline)
            return symmem_set_error(SYMMEM_TIMEOUT,
                                    "topology measurement: %s (GPU %d, GPU %d) did not complete in %.0f s: P2P "
                                    "between them probably hangs on this platform (check ACS and IOMMU, see "
                                    "symmem-topo --quick warnings); the process should exit now",
                                    what, a, b, SYNC_TIMEOUT_S);
        usleep(50);
    }
}

double median(double *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
            double t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

symmem_status_t enable_peers(ctx *c, int i)
{
    gpu_res &r = c->g[i];
    for (int j = 0; j < c->n; j++) {
        if (j == i || c->facts->p2p[i][j] != 1) continue;
        cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
        if (e == cudaSuccess) r.peer_enabled[j] = r.can[j] = true;
        else if (e == cudaErrorPeerAccessAlreadyEnabled) r.can[j] = true; /* the caller's; leave it enabled */
        else SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "GPU %d -> GPU %d: P2P reported but cudaDeviceEnablePeerAccess failed "
                         "(%s); that pair is not measured", i, j, cudaGetErrorString(e));
        if (e != cudaSuccess) (void)cudaGetLastError();
    }
    return SYMMEM_OK;
}

symmem_status_t setup_gpu(ctx *c, int i)
{
    gpu_res &r = c->g[i];
    MEAS_CUDA(cudaSetDevice(i), "cudaSetDevice", i, i);
    MEAS_CUDA(cudaMalloc(&r.a, KBYTES), "cudaMalloc of the source buffer", i, i);
    MEAS_CUDA(cudaMalloc(&r.b, KBYTES), "cudaMalloc of the destination buffer", i, i);
    MEAS_CUDA(cudaMalloc(&r.flag, 256), "cudaMalloc of the flag", i, i);
    MEAS_CUDA(cudaMemset(r.flag, 0, 256), "cudaMemset of the flag", i, i);
    MEAS_CUDA(cudaMalloc(&r.scratch, 2 * sizeof(unsigned long long)), "cudaMalloc", i, i);
    MEAS_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreate", i, i);
    MEAS_CUDA(cudaEventCreate(&r.ev0), "cudaEventCreate", i, i);
    MEAS_CUDA(cudaEventCreate(&r.ev1), "cudaEventCreate", i, i);
    MEAS_CUDA(cudaEventCreateWithFlags(&r.evsync, cudaEventDisableTiming), "cudaEventCreate", i, i);
    r.blocks = 4 * (c->facts->gpus[i].sm_count > 0 ? c->facts->gpus[i].sm_count : 64);
    return enable_peers(c, i);
}

void teardown_gpu(ctx *c, int i)
{
    gpu_res &r = c->g[i];
    if (cudaSetDevice(i) != cudaSuccess) return;
    for (int j = 0; j < c->n; j++)
        if (r.peer_enabled[j]) cudaDeviceDisablePeerAccess(j);
    cudaFree(r.a), cudaFree(r.b), cudaFree(r.flag), cudaFree(r.scratch);
    if (r.stream) cudaStreamDestroy(r.stream);
    if (r.ev0) cudaEventDestroy(r.ev0);
    if (r.ev1) cudaEventDestroy(r.ev1);
    if (r.evsync) cudaEventDestroy(r.evsync);
    (void)cudaGetLastError();
}

symmem_status_t sync_gpu(ctx *c, int i, const char *what, int peer)
{
    symmem_status_t st = sync_stream(c->g[i].stream, c->g[i].evsync, what, i, peer);
    if (st == SYMMEM_TIMEOUT) c->hung = true;
    return st;
}

symmem_status_t fill(ctx *c, int dev, uint4 *buf, uint64_t seed)
{
    gpu_res &r = c->g[dev];
    MEAS_CUDA(cudaSetDevice(dev), "cudaSetDevice", dev, dev);
    fill_kernel<<<r.blocks, 256, 0, r.stream>>>(buf, KVEC, seed);
    MEAS_CUDA(cudaGetLastError(), "launching the fill kernel", dev, dev);
    return sync_gpu(c, dev, "filling a buffer", dev);
}

/* Compare buf (readable from GPU dev) with the pattern of seed; *ok false on any wrong word. */
symmem_status_t check(ctx *c, int dev, const uint4 *buf, uint64_t seed, bool *ok)
{
    gpu_res &r = c->g[dev];
    unsigned long long bad = 0;
    MEAS_CUDA(cudaSetDevice(dev), "cudaSetDevice", dev, dev);
    MEAS_CUDA(cudaMemsetAsync(r.scratch, 0, sizeof bad, r.stream), "cudaMemsetAsync", dev, dev);
    verify_kernel<<<r.blocks, 256, 0, r.stream>>>(buf, KVEC, seed, r.scratch);
    MEAS_CUDA(cudaGetLastError(), "launching the check kernel", dev, dev);
    SYMMEM_CHECK(sync_gpu(c, dev, "checking received data", dev));
    MEAS_CUDA(cudaMemcpy(&bad, r.scratch, sizeof bad, cudaMemcpyDeviceToHost), "reading the check result", dev, dev);
    if (bad) SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "GPU %d: %llu wrong 32-bit words after a transfer", dev, bad);
    *ok = bad == 0;
    return SYMMEM_OK;
}

struct transfer {
    int issuer;               /* GPU whose SMs or copy engine move the data, and whose events time it */
    uint4 *dst;
    uint4 *src;
    int dst_dev, src_dev;     /* -1: pinned host memory */
    int fill_dev, check_dev;  /* GPUs that write the pattern into src and check it in dst */
    bool ce;
    const char *what;
};

symmem_status_t launch(ctx *c, const transfer &t)
{
    gpu_res &r = c->g[t.issuer];
    if (!t.ce)
        MEAS_CUDA(topo_copy_launch(t.dst, t.src, KBYTES, r.blocks, COPY_THREADS, r.stream), t.what, t.src_dev,
                  t.dst_dev);
    else if (t.dst_dev >= 0 && t.src_dev >= 0)
        MEAS_CUDA(cudaMemcpyPeerAsync(t.dst, t.dst_dev, t.src, t.src_dev, KBYTES, r.stream), t.what, t.src_dev, t.dst_dev);
    else MEAS_CUDA(cudaMemcpyAsync(t.dst, t.src, KBYTES, cudaMemcpyDefault, r.stream), t.what, t.issuer, t.issuer);
    MEAS_CUDA(cudaGetLastError(), t.what, t.src_dev, t.dst_dev);
    return SYMMEM_OK;
}

/* KWARM + KREPS checked transfers; median GB/s of the timed ones into *gbs; *bad = 1 on any wrong data. */
symmem_status_t measure_transfer(ctx *c, const transfer &t, double *gbs, int *bad)
{
    double v[KREPS];
    gpu_res &r = c->g[t.issuer];
    for (int rep = 0; rep < KWARM + KREPS; rep++) {
        uint64_t seed = next_seed(c);
        bool ok = false;
        float ms = 0;
        SYMMEM_CHECK(fill(c, t.fill_dev, t.src, seed));
        MEAS_CUDA(cudaSetDevice(t.issuer), "cudaSetDevice", t.issuer, t.issuer);
        MEAS_CUDA(cudaEventRecord(r.ev0, r.stream), "cudaEventRecord", t.issuer, t.issuer);
        SYMMEM_CHECK(launch(c, t));
        MEAS_CUDA(cudaEventRecord(r.ev1, r.stream), "cudaEventRecord", t.issuer, t.issuer);
        SYMMEM_CHECK(sync_gpu(c, t.issuer, t.what, t.dst_dev));
        MEAS_CUDA(cudaEventElapsedTime(&ms, r.ev0, r.ev1), "cudaEventElapsedTime", t.issuer, t.issuer);
        SYMMEM_CHECK(check(c, t.check_dev, t.dst, seed, &ok));
        if (!ok) *bad = 1;
        if (rep >= KWARM) v[rep - KWARM] = ms > 0 ? (double)KBYTES / (ms * 1e-3) / 1e9 : -1;
    }
    *gbs = median(v, KREPS);
    return SYMMEM_OK;
}

symmem_status_t measure_pair_bw(ctx *c, int i, int j)
{
    if (!c->g[i].can[j]) return SYMMEM_OK;
    topo_measure_t *m = c->m;
    transfer rd = {i, c->g[i].b, c->g[j].a, i, j, j, i, false, "peer read"};
    transfer wr = {i, c->g[j].b, c->g[i].a, j, i, i, j, false, "peer write"};
    transfer ce = {i, c->g[j].b, c->g[i].a, j, i, i, j, true, "peer copy (cudaMemcpyPeerAsync)"};
    SYMMEM_CHECK(measure_transfer(c, rd, &m->read_gbs[i][j], &m->check_failed[i][j]));
    SYMMEM_CHECK(measure_transfer(c, wr, &m->write_gbs[i][j], &m->check_failed[i][j]));
    return measure_transfer(c, ce, &m->ce_gbs[i][j], &m->check_failed[i][j]);
}

symmem_status_t launch_pingpong(ctx *c, int dev, uint32_t *mine, uint32_t *theirs, uint32_t base, int initiator)
{
    gpu_res &r = c->g[dev];
    MEAS_CUDA(cudaSetDevice(dev), "cudaSetDevice", dev, dev);
    pingpong_kernel<<<1, 1, 0, r.stream>>>(mine, theirs, base, LAT_ITERS, initiator, r.scratch + 1);
    MEAS_CUDA(cudaGetLastError(), "launching the ping-pong kernel", dev, dev);
    return SYMMEM_OK;
}

symmem_status_t pingpong_result(ctx *c, int dev, int peer, double *us)
{
    unsigned long long ns = 0;
    MEAS_CUDA(cudaSetDevice(dev), "cudaSetDevice", dev, dev);
    MEAS_CUDA(cudaMemcpy(&ns, c->g[dev].scratch + 1, sizeof ns, cudaMemcpyDeviceToHost), "reading latency", dev, peer);
    if (ns == TIMED_OUT)
        return symmem_set_error(SYMMEM_TIMEOUT,
                                "topology measurement: flag ping-pong GPU %d <-> %s %d: a flag store never arrived "
                                "within 1 s; stores to that memory do not work on this platform (ACS/IOMMU?)",
                                dev, peer < 0 ? "host" : "GPU", peer < 0 ? dev : peer);
    *us = (double)ns / (LAT_ITERS - LAT_WARM) / 2 / 1000.0;
    return SYMMEM_OK;
}

/* One-way latency between GPUs i and j: each polls a flag in its own memory that the other stores into.
 * The responder is launched first so that it already polls when the initiator's first store lands; both
 * kernels run on different GPUs, so they are co-resident. */
symmem_status_t measure_pair_latency(ctx *c, int i, int j)
{
    if (!c->g[i].can[j] || !c->g[j].can[i]) return SYMMEM_OK;
    double v[LAT_REPS];
    for (int rep = 0; rep < LAT_REPS; rep++) {
        uint32_t base = c->flag_base;
        c->flag_base += LAT_ITERS + 1;
        SYMMEM_CHECK(launch_pingpong(c, j, c->g[j].flag, c->g[i].flag, base, 0));
        SYMMEM_CHECK(launch_pingpong(c, i, c->g[i].flag, c->g[j].flag, base, 1));
        SYMMEM_CHECK(sync_gpu(c, i, "flag ping-pong", j));
        SYMMEM_CHECK(sync_gpu(c, j, "flag ping-pong", i));
        SYMMEM_CHECK(pingpong_result(c, i, j, &v[rep]));
    }
    c->m->latency_us[i][j] = c->m->latency_us[j][i] = median(v, LAT_REPS);
    return SYMMEM_OK;
}

/* All GPUs at once, GPU i with (i+1) mod n: read pulls the successor's buffer, write pushes into it. The
 * same transfer as the communicator's init probe (probe.c), with every transfer checked. */
symmem_status_t measure_ring(ctx *c, bool write)
{
    int n = c->n;
    double v[TOPO_MAX_GPUS][KREPS];
    for (int rep = 0; rep < KWARM + KREPS; rep++) {
        uint64_t seed[TOPO_MAX_GPUS];
        for (int i = 0; i < n; i++) SYMMEM_CHECK(fill(c, i, c->g[i].a, seed[i] = next_seed(c)));
        for (int i = 0; i < n; i++) {
            int s = (i + 1) % n;
            if (!c->g[i].can[s]) continue;
            cudaEvent_t ev[2] = {c->g[i].ev0, c->g[i].ev1};
            MEAS_CUDA(cudaSetDevice(i), "cudaSetDevice", i, i);
            MEAS_CUDA(topo_copy_runs(write ? c->g[s].b : c->g[i].b, write ? c->g[i].a : c->g[s].a, KBYTES,
                                     c->g[i].blocks, COPY_THREADS, c->g[i].stream, 0, 1, ev),
                      "the all-at-once transfer", i, s);
        }
        for (int i = 0; i < n; i++) {
            int s = (i + 1) % n;
            double gbs = 0;
            bool ok = true;
            if (!c->g[i].can[s]) continue;
            const cudaEvent_t ev[2] = {c->g[i].ev0, c->g[i].ev1};
            SYMMEM_CHECK(sync_gpu(c, i, "all-at-once transfer", s));
            MEAS_CUDA(topo_copy_gbs(KBYTES, ev, 1, &gbs), "cudaEventElapsedTime", i, s);
            SYMMEM_CHECK(write ? check(c, s, c->g[s].b, seed[i], &ok) : check(c, i, c->g[i].b, seed[s], &ok));
            if (!ok) c->m->check_failed[i][s] = 1;
            if (rep >= KWARM) v[i][rep - KWARM] = gbs;
        }
    }
    for (int i = 0; i < n; i++)
        if (c->g[i].can[(i + 1) % n]) (write ? c->m->ring_write_gbs : c->m->ring_read_gbs)[i] = median(v[i], KREPS);
    return SYMMEM_OK;
}

/* ------------------------------------------------------------------------------------------------------
 * Pinned host memory on the GPU's NUMA node
 * ---------------------------------------------------------------------------------------------------- */
symmem_status_t host_alloc(host_res *h, int numa, int dev)
{
    h->bytes = KBYTES + 4096;
    h->numa = numa;
#ifdef SYMMEM_HAVE_NUMA
    if (numa >= 0 && numa_available() >= 0) h->raw = numa_alloc_onnode(h->bytes, numa);
#endif
    if (!h->raw) {
        h->numa = -1; /* placement left to the kernel's first touch */
        h->raw = aligned_alloc(4096, h->bytes);
    }
    if (!h->raw) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "topology measurement: no host memory for GPU %d", dev);
    memset(h->raw, 0, h->bytes); /* fault the pages in on the bound node before pinning */
    cudaError_t e = cudaHostRegister(h->raw, h->bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess) return cuda_fail(e, "cudaHostRegister of the host buffer", dev, dev);
    e = cudaHostGetDevicePointer((void **)&h->buf, h->raw, 0);
    if (e != cudaSuccess) return cuda_fail(e, "cudaHostGetDevicePointer of the host buffer", dev, dev);
    h->flags = (uint32_t *)((char *)h->raw + KBYTES); /* set last: marks the buffer registered */
    return SYMMEM_OK;
}

void host_free(host_res *h)
{
    if (!h->raw) return;
    if (h->flags) cudaHostUnregister(h->raw);
#ifdef SYMMEM_HAVE_NUMA
    if (h->numa >= 0) {
        numa_free(h->raw, h->bytes);
        return;
    }
#endif
    free(h->raw);
}

/* "0-55,112-167" into a CPU set; 0 when empty or malformed. */
int cpulist_parse(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    int count = 0;
    while (s && *s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s) return 0;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long k = a; k <= b && k < CPU_SETSIZE; k++) CPU_SET((int)k, set), count++;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return 0;
    }
    return count;
}

/* One-way latency between GPU dev and a CPU thread on the GPU's NUMA node: the GPU stores to flags[0] and
 * polls flags[16] in pinned host memory; this thread polls flags[0] and answers in flags[16]. */
symmem_status_t host_latency(ctx *c, host_res *h, int dev, double *us)
{
    uint32_t *to_cpu = h->flags, *to_gpu = h->flags + 16, *d_to_cpu, *d_to_gpu;
    MEAS_CUDA(cudaHostGetDevicePointer((void **)&d_to_cpu, to_cpu, 0), "cudaHostGetDevicePointer", dev, dev);
    MEAS_CUDA(cudaHostGetDevicePointer((void **)&d_to_gpu, to_gpu, 0), "cudaHostGetDevicePointer", dev, dev);
    double v[LAT_REPS];
    for (int rep = 0; rep < LAT_REPS; rep++) {
        uint32_t base = c->flag_base;
        c->flag_base += LAT_ITERS + 1;
        SYMMEM_CHECK(launch_pingpong(c, dev, d_to_gpu, d_to_cpu, base, 1));
        bool late = false;
        for (int k = 1; k <= LAT_ITERS && !late; k++) {
            uint32_t want = base + (uint32_t)k;
            double deadline = now_s() + 1.0;
            unsigned spins = 0;
            while (!late && __atomic_load_n(to_cpu, __ATOMIC_ACQUIRE) != want)
                late = (++spins & 4095) == 0 && now_s() > deadline; /* the kernel times out and reports it */
            if (!late) __atomic_store_n(to_gpu, want, __ATOMIC_RELEASE);
        }
        SYMMEM_CHECK(sync_gpu(c, dev, "host flag ping-pong", -1));
        SYMMEM_CHECK(pingpong_result(c, dev, -1, &v[rep]));
    }
    *us = median(v, LAT_REPS);
    return SYMMEM_OK;
}

symmem_status_t measure_host(ctx *c, int dev, int numa, const char *cpulist, int quick)
{
    host_res h = {};
    topo_measure_t *m = c->m;
    cpu_set_t old, want;
    int pinned = cpulist_parse(cpulist, &want) > 0 && sched_getaffinity(0, sizeof old, &old) == 0 &&
                 sched_setaffinity(0, sizeof want, &want) == 0; /* the CPU side runs next to the GPU */
    symmem_status_t st = host_alloc(&h, numa, dev);
    int bad = 0;
    if (st == SYMMEM_OK && !quick) {
        uint4 *d = c->g[dev].a, *b = c->g[dev].b;
        transfer rd = {dev, b, h.buf, dev, -1, dev, dev, false, "host read"};
        transfer wr = {dev, h.buf, d, -1, dev, dev, dev, false, "host write"};
        transfer h2d = {dev, b, h.buf, dev, -1, dev, dev, true, "host to device copy"};
        transfer d2h = {dev, h.buf, d, -1, dev, dev, dev, true, "device to host copy"};
        SYMMEM_CHECK_GOTO(measure_transfer(c, rd, &m->host_read_gbs[dev], &bad), st, out);
        SYMMEM_CHECK_GOTO(measure_transfer(c, wr, &m->host_write_gbs[dev], &bad), st, out);
        SYMMEM_CHECK_GOTO(measure_transfer(c, h2d, &m->host_h2d_gbs[dev], &bad), st, out);
        SYMMEM_CHECK_GOTO(measure_transfer(c, d2h, &m->host_d2h_gbs[dev], &bad), st, out);
        if (bad)
            st = symmem_set_error(SYMMEM_CUDA_ERROR, "topology measurement: GPU %d read back wrong data from pinned "
                                  "host memory: the GPU or its PCIe link is faulty", dev);
    }
    if (st == SYMMEM_OK) st = host_latency(c, &h, dev, &m->host_latency_us[dev]);
out:
    if (!c->hung) host_free(&h);
    if (pinned) sched_setaffinity(0, sizeof old, &old);
    return st;
}

symmem_status_t measure_all(ctx *c, const int *numa, const char *const *cpulists, int quick)
{
    for (int i = 0; i < c->n; i++) SYMMEM_CHECK(setup_gpu(c, i));
    for (int i = 0; i < c->n; i++)
        for (int j = i + 1; j < c->n; j++) SYMMEM_CHECK(measure_pair_latency(c, i, j));
    for (int i = 0; i < c->n && !quick; i++)
        for (int j = 0; j < c->n; j++)
            if (i != j) SYMMEM_CHECK(measure_pair_bw(c, i, j));
    if (!quick && c->n >= 2) {
        SYMMEM_CHECK(measure_ring(c, false));
        SYMMEM_CHECK(measure_ring(c, true));
    }
    for (int i = 0; i < c->n; i++) SYMMEM_CHECK(measure_host(c, i, numa[i], cpulists[i], quick));
    return SYMMEM_OK;
}

} // namespace

extern "C" symmem_status_t topo_measure_run(const topo_gpu_facts_t *facts, const int *numa_nodes,
                                            const char *const *cpulists, int quick, topo_measure_t *m)
{
    int saved = 0;
    if (cudaGetDevice(&saved) != cudaSuccess) saved = 0;
    ctx *c = (ctx *)calloc(1, sizeof(ctx));
    if (!c) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "topology measurement: out of memory");
    c->facts = facts;
    c->n = facts->ngpus;
    c->m = m;
    c->seed = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid(); /* fresh patterns per run */
    c->flag_base = 0;
    double t0 = now_s();
    topo_measure_clear(m);
    m->ngpus = c->n;
    m->quick = quick;
    symmem_status_t st = measure_all(c, numa_nodes, cpulists, quick);
    /* After a hang, freeing would wait for a kernel that never ends; leak instead and let the caller exit. */
    if (!c->hung)
        for (int i = 0; i < c->n; i++) teardown_gpu(c, i);
    cudaSetDevice(saved);
    m->measured = st == SYMMEM_OK;
    SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "measured %d GPUs%s in %.2f s: %s", c->n, quick ? " (quick)" : "",
                now_s() - t0, symmem_status_name(st));
    free(c);
    return st;
}
