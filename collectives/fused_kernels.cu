/* Kernels of the fused all-reduce + residual add + RMSNorm (symmem_all_reduce_add_rmsnorm), one-shot and
 * two-shot, one Lamport round per kernel (the host splits large calls into several kernels), on the
 * protocol of protocol.cuh. Layout and shapes: fused.h; reasoning: docs/collectives.md, "Fused all-reduce
 * + residual add + RMSNorm".
 *
 * Work split. The pushes are spread over every thread of the grid, by 16-byte pack (one-shot: one store
 * per thread and destination; two-shot: the reduce-scatter pushes and the reduction of my shard, pack by
 * pack, as twoshot_lamport), so a call of one token still injects from many SMs. The norm needs the whole
 * reduced row in one place: block b finishes rows b, b + grid, ... (norm_row), each thread holding
 * `ppt` packs of the row in registers between the sum of squares and the scaling.
 *
 * Lamport reuse across kernels (why buffer j % 3 is empty again before any peer pushes into it in round
 * j + 3, whatever other Lamport kernels of the communicator run in between): every pack pushed in a round
 * is taken (and cleared) by its reader in that round; a kernel reads its data only after
 * griddepcontrol.wait, i.e. after the whole previous kernel of its rank completed; and every fused kernel
 * completes on a rank only after every rank's kernel of the same call has pushed (one-shot: every rank
 * reads every peer's slot; two-shot: the owner of pack 0 reads every rank's piece of it and every rank
 * reads the owner's result), as do oneshot_push and twoshot_lamport. So a peer that pushes in round j + 3
 * has completed round j + 2 (or j + 1), which saw pushes I made after my kernel of round j completed. One
 * round per kernel is what lets the pushes ignore which block reads what: the plain Lamport kernels'
 * argument within a kernel (block b pushes and reads the same positions in every round) does not hold
 * for a row-per-block reader fed by pack-spread writers.
 *
 * In place (out == x): every pack of out is stored by a thread that first took an input proving that x's
 * pack is loaded for good: one-shot, my own slot's pack, which (in place only) the one thread that loads
 * x's pack for every destination stores last; two-shot, the owner's result of the pack, which needed my
 * piece of it (pushed by the one thread that loaded it) or, for my own shard, my own load. Without in
 * place the one-shot pushes are split by destination too (a store per thread), each unit loading x, and
 * only to the n - 1 peers: the reducing block reads my own pack from x, which nothing writes. */
#include <cuda_runtime.h>

#include "collectives/kernel_abi.h"
#include "collectives/device.cuh"
#include "collectives/fused.h"
#include "collectives/protocol.cuh"

namespace symmem_k {

typedef symmem_fused_params_t F;

/* Element offset and valid elements of flat pack g of the round (row g / P, pack g % P of the row). */
template <int V> __device__ __forceinline__ uint64_t pack_elem(const F &p, uint32_t g, int &nv)
{
    const uint32_t row = g / p.row_packs, k = g - row * p.row_packs;
    const uint32_t left = p.hidden - k * (uint32_t)V;
    nv = left < (uint32_t)V ? (int)left : V;
    return (uint64_t)row * p.hidden + (uint64_t)k * V;
}

template <typename T> __device__ __forceinline__ uint4 load_x(const F &p, uint32_t g)
{
    int nv;
    const uint64_t e = pack_elem<Pack<T>::V>(p, g, nv);
    return fix_pack<T>(load_user<T>(p.x, e, nv, p.c.aligned != 0, false));
}

/* Ask for the line at p in this SM's L1 without waiting for it (no register holds the value). */
__device__ __forceinline__ void prefetch_l1(const void *p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }

/* Sum of v over the block, the same value on every thread and every rank (a fixed order: butterfly
 * within each warp, then the warps' partial sums in warp order), and the OR of `fail` over the block.
 * `parity` alternates the shared slots between consecutive calls, so one barrier per call suffices. */
__device__ __forceinline__ float block_sum(float v, bool &fail, int parity)
{
    __shared__ float part[2][SYMMEM_COLL_THREADS / 32];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[parity][warp] = v;
    fail = __syncthreads_or(fail) != 0;
    const int nw = (blockDim.x + 31) >> 5;
    float s = part[parity][0];
    for (int w = 1; w < nw; w++) s = __fadd_rn(s, part[parity][w]);
    return s;
}

/* Residual add and RMSNorm of row `row` of the kernel, each thread holding PB packs of the row (PB >= ppt;
 * pack i of the thread is k = threadIdx.x + i * blockDim.x, valid where i < ppt and k < row_packs). fetch(base,
 * valid, h, fail) fills h[i] of every valid pack i with flat pack base + k of the reduced row (rounded to T,
 * fix_pack'ed: the same bits on every rank), unpacked, taking the thread's packs together (one wait per
 * group, not one per pack: lamport_reduce_packs). Every thread of the block calls it. Stores residual =
 * round(residual + h) and out = round(residual * inv * weight), inv = 1 / sqrt(mean(residual^2) + eps) from
 * the rounded residual, all in fp32 with correctly rounded operations. False: a take failed (reported) or
 * the communicator aborted; nothing of out is stored then. */
template <typename T, int PB, typename Fetch>
__device__ __forceinline__ bool norm_row(const F &p, uint32_t row, int parity, Fetch fetch)
{
    constexpr int V = Pack<T>::V;
    const bool aligned = p.c.aligned != 0;
    const uint32_t P = p.row_packs, ppt = p.ppt;
    uint32_t valid = 0;
#pragma unroll
    for (int i = 0; i < PB; i++)
        if ((uint32_t)i < ppt && threadIdx.x + (uint32_t)i * blockDim.x < P) valid |= 1u << i;
    /* residual and weight do not depend on the peers: their loads overlap the wait for the reduced row */
#pragma unroll
    for (int i = 0; i < PB; i++) {
        if (!((valid >> i) & 1u)) continue;
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        int nv;
        const uint64_t elem = pack_elem<V>(p, row * P + k, nv);
        prefetch_l1(static_cast<const T *>(p.residual) + elem);
        prefetch_l1(static_cast<const T *>(p.weight) + (uint64_t)k * V);
    }
    float v[PB][V];
#pragma unroll
    for (int i = 0; i < PB; i++)
#pragma unroll
        for (int e = 0; e < V; e++) v[i][e] = 0.0f;
    bool fail = false;
    fetch(row * P, valid, v, fail);
    float sum_sq = 0.0f;
#pragma unroll
    for (int i = 0; i < PB; i++) {
        if (!((valid >> i) & 1u) || fail) continue;
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        int nv;
        const uint64_t elem = pack_elem<V>(p, row * P + k, nv);
        float rf[V];
        Conv<T>::unpack(load_user<T>(p.residual, elem, nv, aligned, false), rf);
#pragma unroll
        for (int e = 0; e < V; e++) rf[e] = __fadd_rn(rf[e], v[i][e]);
        const uint4 rounded = Conv<T>::pack(rf);
        store_user<T>(p.residual, elem, rounded, nv, aligned);
        Conv<T>::unpack(rounded, v[i]); /* padding elements are 0 in h and in the loaded residual */
#pragma unroll
        for (int e = 0; e < V; e++) sum_sq = __fmaf_rn(v[i][e], v[i][e], sum_sq);
    }
    sum_sq = block_sum(sum_sq, fail, parity);
    if (fail) return false;
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum_sq, (float)p.hidden), p.eps)));
#pragma unroll
    for (int i = 0; i < PB; i++) {
        if (!((valid >> i) & 1u)) continue;
        const uint32_t k = threadIdx.x + (uint32_t)i * blockDim.x;
        int nv;
        const uint64_t elem = pack_elem<V>(p, row * P + k, nv);
        float w[V], o[V];
        Conv<T>::unpack(load_user<T>(p.weight, (uint64_t)k * V, nv, aligned, false), w);
#pragma unroll
        for (int e = 0; e < V; e++) o[e] = __fmul_rn(__fmul_rn(v[i][e], inv), w[e]);
        store_user<T>(p.out, elem, Conv<T>::pack(o), nv, aligned);
    }
    return true;
}

/* Ranks reduced per group of the one-shot's takes: about four first loads in flight per thread (the
 * grouping of lamport_reduce), as PB packs times GS ranks. */
template <int PB> struct TakeGroup {
    static constexpr int GS = PB >= 4 ? 1 : 4 / PB;
};

/* One-shot: my x (fix_pack'ed) into slot r of every peer; then block b reduces its rows in rank order, my
 * own packs read from x, and norms them. In place my own slot is pushed too, last, and read instead of x.
 * Every slot pushed in the round is taken by the block of its row. */
template <typename T, int PB, bool CHK> __device__ __forceinline__ bool run_oneshot(const F &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const int n = p.c.nranks, r = p.c.rank;
    const uint32_t M = p.rows * p.row_packs;
    const uint64_t j = c.lseq;
    const uint64_t lam_buf_start = p.c.lam_off + (j % 3) * p.c.lam_buf_bytes;
    const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x, nthreads = gridDim.x * blockDim.x;
    lamport_hdr_push<CHK>(p.c, j);
    if (p.inplace) {
        /* out == x: one thread loads pack g once and stores it to every rank, its own slot last, so whoever
         * takes my own slot's pack g knows that no load of x's pack g is still to come */
        for (uint32_t g = tid; g < M; g += nthreads) {
            const uint4 v = load_x<T>(p, g);
            for (int k = 1; k <= n; k++) st16(p.c.ws[(r + k) % n] + lam_buf_start + ((uint64_t)r * M + g) * 16, v);
        }
    } else {
        /* unit u: destination (r + 1 + u / M) mod n, pack u % M: one store per thread, consecutive threads
         * store consecutive packs; my own pack is read from x when it is reduced, so n - 1 destinations */
        for (uint32_t u = tid; u < (uint32_t)(n - 1) * M; u += nthreads) {
            const uint32_t peer_index = u / M, g = u - peer_index * M;
            const int d = (r + 1 + (int)peer_index) % n;
            st16(p.c.ws[d] + lam_buf_start + ((uint64_t)r * M + g) * 16, load_x<T>(p, g));
        }
    }
    if (threadIdx.x == 0) late_check(p.c, c); /* while the pushes travel */
    if (!lamport_hdr_check<CHK>(p.c, c, j)) return false;
    char *mine = p.c.ws[r] + lam_buf_start;
    const int own = p.inplace ? -1 : r; /* in place my own pack comes through my slot (see above) */
    int parity = 0;
    for (uint32_t row = blockIdx.x; row < p.rows; row += gridDim.x, parity ^= 1) {
        const bool ok = norm_row<T, PB>(p, row, parity, [&](uint32_t base, uint32_t valid, float (&h)[PB][V], bool &fail) {
            const uint32_t g0 = base + threadIdx.x, step = blockDim.x;
            lamport_reduce_packs<T, SYMMEM_OP_SUM, PB, TakeGroup<PB>::GS>(
                p.c, c, n, own, valid,
                [&](int i, int src) { return mine + ((uint64_t)src * M + g0 + (uint32_t)i * step) * 16; },
                [&](int i) { return load_x<T>(p, g0 + (uint32_t)i * step); }, j, fail, h);
#pragma unroll
            for (int i = 0; i < PB; i++)
                if ((valid >> i) & 1u) Conv<T>::unpack(fix_pack<T>(Conv<T>::pack(h[i])), h[i]);
        });
        if (!ok) return false;
    }
    return true;
}

/* Two-shot: my x pieces to their owners (pack g belongs to rank g / shard_packs), my shard reduced in rank
 * order and its result pushed into gather[] of every rank, my own last; then block b takes its rows from
 * gather[] and norms them. */
template <typename T, int PB, bool CHK> __device__ __forceinline__ bool run_twoshot(const F &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const int n = p.c.nranks, r = p.c.rank;
    const uint32_t M = p.rows * p.row_packs, S = p.shard_packs;
    const uint64_t j = c.lseq;
    const uint64_t lam_buf_start = p.c.lam_off + (j % 3) * p.c.lam_buf_bytes;
    const uint64_t gather_start = (uint64_t)n * S * 16; /* offset of gather[] in the round */
    const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x, nthreads = gridDim.x * blockDim.x;
    lamport_hdr_push<CHK>(p.c, j);
    for (uint32_t g = tid; g < M; g += nthreads) {
        const uint32_t s = g / S;
        if ((int)s == r) continue;
        st16(p.c.ws[s] + lam_buf_start + ((uint64_t)r * S + (g - s * S)) * 16, load_x<T>(p, g));
    }
    if (threadIdx.x == 0) late_check(p.c, c); /* while the pushes travel */
    if (!lamport_hdr_check<CHK>(p.c, c, j)) return false;
    char *mine = p.c.ws[r] + lam_buf_start;
    bool fail = false;
    const uint32_t lo = (uint32_t)r * S, hi = min(M, lo + S);
    for (uint32_t g = lo + tid; g < hi && !fail; g += nthreads) {
        const uint4 h = fix_pack<T>(lamport_reduce<T, SYMMEM_OP_SUM>(
            p.c, c, n, r, [&](int src) { return mine + ((uint64_t)src * S + (g - lo)) * 16; },
            [&]() { return load_x<T>(p, g); }, j, fail));
        if (fail) break;
        for (int k = 1; k <= n; k++) st16(p.c.ws[(r + k) % n] + lam_buf_start + gather_start + (uint64_t)g * 16, h);
    }
    if (__syncthreads_or(fail)) return false;
    int parity = 0;
    for (uint32_t row = blockIdx.x; row < p.rows; row += gridDim.x, parity ^= 1) {
        const bool ok = norm_row<T, PB>(p, row, parity, [&](uint32_t base, uint32_t valid, float (&h)[PB][V], bool &f) {
            const uint32_t g0 = base + threadIdx.x, step = blockDim.x;
            auto addr = [&](int i) { return mine + gather_start + (uint64_t)(g0 + (uint32_t)i * step) * 16; };
            uint4 w[PB];
#pragma unroll
            for (int i = 0; i < PB; i++) w[i] = (valid >> i) & 1u ? ld_volatile16(addr(i)) : zero4();
            lamport_take_batch<PB>(p.c, c, w, valid, addr, [&](int i) { return (int)((g0 + (uint32_t)i * step) / S); },
                                   j, f);
#pragma unroll
            for (int i = 0; i < PB; i++)
                if ((valid >> i) & 1u) Conv<T>::unpack(w[i], h[i]);
        });
        if (!ok) return false;
    }
    return true;
}

/* After an error both outputs of the kernel's rows become NaN (see poison_output). */
template <typename T> __device__ __noinline__ void poison_fused(const F &p)
{
    const uint64_t n = (uint64_t)p.rows * p.hidden;
    poison_elems<T>(p.out, n, p.c.aligned != 0);
    poison_elems<T>(p.residual, n, p.c.aligned != 0);
}

template <typename T, int PB, bool TWO, bool CHK>
__global__ void __launch_bounds__(SYMMEM_COLL_THREADS, 1) fused_kernel(const __grid_constant__ symmem_fused_params_t p)
{
    Ctx c;
    if (!prologue(p.c, c, 0, 1)) {
        poison_fused<T>(p);
        return;
    }
    const bool ok = TWO ? run_twoshot<T, PB, CHK>(p, c) : run_oneshot<T, PB, CHK>(p, c);
    if (!ok) poison_fused<T>(p);
    block_end(p.c, c);
}

/* Packs per thread as a compile-time count: 1, 2, or the most a row can need (a ppt of 3 runs as 4, its
 * fourth pack invalid), so the threads of a narrow row hold no registers for packs they do not have. */
template <typename T> constexpr uint32_t max_ppt() { return SYMMEM_FUSED_ELEMS_PER_THREAD / Pack<T>::V; }

template <typename T, int PB> const void *fused_pb(bool two, bool checked)
{
    if (two) return checked ? reinterpret_cast<const void *>(&fused_kernel<T, PB, true, true>)
                        : reinterpret_cast<const void *>(&fused_kernel<T, PB, true, false>);
    return checked ? reinterpret_cast<const void *>(&fused_kernel<T, PB, false, true>)
               : reinterpret_cast<const void *>(&fused_kernel<T, PB, false, false>);
}

template <typename T> const void *fused_for(uint32_t ppt, bool two, bool checked)
{
    if (ppt < 1 || ppt > max_ppt<T>()) return nullptr;
    if (ppt == 1) return fused_pb<T, 1>(two, checked);
    if (ppt == 2) return fused_pb<T, 2>(two, checked);
    return fused_pb<T, (int)max_ppt<T>()>(two, checked);
}

/* The kernel for a dtype, packs per thread (symmem_fused_block), algorithm and check; nullptr if none. */
const void *fused_kernel_for(int dtype, uint32_t ppt, bool two, bool checked)
{
    switch (dtype) {
#define SYMMEM_K_FUSED_DT_(name, value, ctype, bytes)                                                      \
    case value: return fused_for<ctype>(ppt, two, checked);
        SYMMEM_DTYPE_LIST(SYMMEM_K_FUSED_DT_)
#undef SYMMEM_K_FUSED_DT_
    default: return nullptr;
    }
}

} // namespace symmem_k

extern "C" int symmem_fused_preload(symmem_coll_preload_info_t *info)
{
    int e = 0;
    for (int dtype = 0; dtype < SYMMEM_DTYPE_COUNT && e == 0; dtype++)
        for (uint32_t ppt = 1; ppt <= 3 && e == 0; ppt++) /* 3 stands for every ppt above 2 */
            for (int k = 0; k < 4 && e == 0; k++)
                e = symmem_coll_preload_one(symmem_k::fused_kernel_for(dtype, ppt, (k & 1) != 0, (k & 2) != 0),
                                            SYMMEM_COLL_THREADS, info);
    return e;
}

extern "C" int symmem_fused_launch(const symmem_fused_params_t *p, int grid, int threads, void *stream, int pdl)
{
    const bool two = p->c.algo == SYMMEM_ALGO_TWOSHOT_LAMPORT;
    const void *fn = symmem_k::fused_kernel_for(p->c.dtype, p->ppt, two, p->c.lam_check != 0);
    if (!fn || grid < 1 || threads < 32 || threads > SYMMEM_COLL_THREADS || threads % 32)
        return (int)cudaErrorInvalidValue;
    return symmem_coll_launch_fn(fn, const_cast<symmem_fused_params_t *>(p), grid, threads, stream, pdl);
}
