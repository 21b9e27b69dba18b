/* What the data kernels of every family share (pull.cu, push.cu, lamport.cu): the kernel template, the
 * geometry each thread derives from the parameters, the reduce-scatter push, and the instantiation tables
 * generated from the public dtype and redop lists (all-gather runs in the SUM instantiation of its dtype).
 * A family's file defines its Family<FAM>::run and instantiates its kernels with SYMMEM_COLL_FAMILY_KERNELS.
 *
 * Synchronisation (docs/collectives.md has the long form):
 *  - sync point: block b of rank r stores (epoch << 16 | tag) with st.release.sys into flags[b][r] of every
 *    peer, then polls its own flags[b][src] with ld.acquire.sys until each reaches the epoch. Only threads
 *    0..n-1 touch flags; __syncthreads() before (so the whole block's data precedes the release) and after
 *    (so the whole block's reads follow the acquire). A kernel's first sync point, where the block stored
 *    nothing before it and the data is device memory, goes relaxed (protocol.cuh, sync_peers: `entry`).
 *  - epochs are 64-bit and monotonic: the device state holds the last one used, every block reads it at
 *    kernel start, the last block to read it writes the value the kernel will end at (the state protocol
 *    below). Each round of any algorithm consumes two
 *    epochs (sync A = e+1, optional sync B = e+2; the island schedule six: syncs e+1, e+3, e+5), an odd
 *    number of pairs, so the state stays even and round k of a call uses data half ((e_k / 2) & 1):
 *    consecutive rounds, also across calls, alternate halves.
 *  - reuse argument (why a fast rank never overwrites data a slow rank still reads): in every algorithm a
 *    round's data is written either before the round's first sync (into half h) or after a sync the
 *    readers have passed, and read before the readers' next sync signal. A rank writes half h again only
 *    two rounds later, after passing the intermediate round's sync A, which every peer signals only after
 *    finishing its reads of half h (each block waits for every peer's same-numbered block, and block b
 *    handles the same positions on every rank and in every round of a kernel; across kernels, the previous
 *    kernel on this stream has completed entirely). Reads after a round's last sync are the only ones that
 *    can still run when the next round (or call) starts writing, and those are in the other half.
 *  - zero copy (pull, send buffer symmetric): peers read my user buffer, so the call ends with one more
 *    sync (each peer finished reading) unless a later sync of the call already implies it (two-shot AR).
 *  - timeouts: every poll loop checks %globaltimer every 64 spins and the local abort flag; on timeout the
 *    first failing block records the error in host-mapped memory, raises abort, and all blocks return. */
#ifndef SYMMEM_COLLECTIVES_KERNEL_CUH
#define SYMMEM_COLLECTIVES_KERNEL_CUH

#include <cuda_runtime.h>

#include "collectives/device.cuh"
#include "collectives/kernel_abi.h"
#include "collectives/protocol.cuh"

namespace symmem_k {

/* The Lamport family with round headers (p.lam_check, SYMMEM_LAMPORT_CHECK=1): its own instantiation, so
 * that the unchecked kernels carry no test of the switch (a run-time test cost 0.07-0.1 us per small call). */
constexpr int FAM_LAMPORT_CHECKED = SYMMEM_COLL_FAM_COUNT;

/* What every data kernel derives from its parameters: this thread's first position and the grid stride
 * (block b handles the same positions in every round and on every rank), the call's kind flags, and the
 * user buffers. The data paths copy the fields they use into locals of the same names: their loops and the
 * reduce lambdas (which capture by reference; C++17 lambdas cannot capture structured bindings) read them as
 * plain scalars; the copies vanish once inlined. */
struct Geo {
    int n, r;
    bool all_gather, reduce_scatter, aligned;
    uint64_t segp, tid, nthreads;
    const char *send;
    char *recv;
    __device__ __forceinline__ explicit Geo(const P &p)
        : n(p.nranks), r(p.rank), all_gather(p.kind == SYMMEM_COLL_ALL_GATHER),
          reduce_scatter(p.kind == SYMMEM_COLL_REDUCE_SCATTER), aligned(p.aligned != 0), segp(p.segp),
          tid((uint64_t)blockIdx.x * blockDim.x + threadIdx.x), nthreads((uint64_t)gridDim.x * blockDim.x),
          send(static_cast<const char *>(p.send)), recv(static_cast<char *>(p.recv))
    {
    }
};

/* Offset of the data half used by the round whose first sync is epoch e + 1 (rounds alternate halves). */
__device__ __forceinline__ uint64_t half_off(const P &p, uint64_t e)
{
    return p.data_off + (((e >> 1) & 1) ? p.half_bytes : 0);
}

/* Valid elements (0..V) of shard s starting at element i of the shard. */
template <int V> __device__ __forceinline__ int shard_valid(const P &p, int s, uint64_t i)
{
    const uint64_t start = (uint64_t)s * p.stride;
    if (start >= p.total) return 0;
    const uint64_t len = min(p.stride, p.total - start);
    return i >= len ? 0 : (int)min((uint64_t)V, len - i);
}

/* Reduce-scatter push of pack pk of every shard: shard d of my input (element i of the shard) into slot r
 * of rank d, at byte offset `base` of d's workspace, for every peer d; four loads in flight, then four
 * stores. FIX: the Lamport algorithms send fix_pack'ed packs (no word equal to the empty sentinel). */
template <typename T, bool FIX>
__device__ __forceinline__ void push_shards(const P &p, const Geo &g, uint64_t base, uint64_t i, uint64_t pk)
{
    constexpr int V = Pack<T>::V;
    const int n = g.n, r = g.r;
    for (int k0 = 1; k0 < n; k0 += 4) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int d = (r + k0 + j) % n;
            const int nv = k0 + j < n ? shard_valid<V>(p, d, i) : 0;
            if (nv <= 0) v[j] = zero4();
            else {
                v[j] = load_user<T>(g.send, d * p.stride + i, nv, g.aligned, false);
                if (FIX) v[j] = fix_pack<T>(v[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int d = (r + k0 + j) % n;
            if (k0 + j < n && shard_valid<V>(p, d, i) > 0) st16(p.ws[d] + base + (r * g.segp + pk) * 16, v[j]);
        }
    }
}


/* A family's data path: Family<FAM>::run<T, OP>(p, c), true when it completed, false after an abort or an
 * error it reported (the kernel then stores NaN in its output). Defined in the family's file. */
template <int FAM> struct Family;

/* The data kernel of every family: the state protocol's prologue with the epochs and Lamport rounds the
 * kernel consumes (p.epochs, from the descriptor: algos.h; a Lamport-family round is one Lamport round), the
 * family's data path, the block's end. */
template <typename T, int OP, int FAM>
__global__ void __launch_bounds__(SYMMEM_COLL_THREADS, 1) coll_kernel(const __grid_constant__ symmem_coll_params_t p)
{
    Ctx c;
    const bool lamport = FAM == SYMMEM_COLL_FAM_LAMPORT || FAM == FAM_LAMPORT_CHECKED;
    if (!prologue(p, c, p.epochs, lamport ? p.rounds : 0)) {
        poison_output<T>(p);
        return;
    }
    const bool ok = Family<FAM>::template run<T, OP>(p, c);
    if (!ok) poison_output<T>(p);
    block_end(p, c);
}

/* Instantiation tables, generated from the public lists (never a second list kept by hand). */
#define SYMMEM_K_DTYPE_CHECK_(name, value, ctype, bytes)                                                   \
    static_assert(sizeof(ctype) == (bytes), "SYMMEM_DTYPE_LIST size of " #name);
SYMMEM_DTYPE_LIST(SYMMEM_K_DTYPE_CHECK_)
#undef SYMMEM_K_DTYPE_CHECK_

/* The kernel a picker names for a call's dtype and op: pick.get<T, OP>() for the C type of `dtype` and the
 * operator `op`, NULL outside the public lists. The one dtype x op dispatch of every kernel table (a family's,
 * the two-shot pull's own kernels, the copy engine's, the island schedule's); a picker adds what else selects
 * the kernel (a family, a bound on the rank count). */
template <typename T, typename Pick> const void *kernel_by_op(int op, const Pick &pick)
{
    switch (op) {
#define SYMMEM_K_OP_(name, value)                                                                          \
    case value: return pick.template get<T, value>();
        SYMMEM_REDOP_LIST(SYMMEM_K_OP_)
#undef SYMMEM_K_OP_
    default: return nullptr;
    }
}

template <typename Pick> const void *kernel_by_dtype_op(int dtype, int op, const Pick &pick)
{
    switch (dtype) {
#define SYMMEM_K_DTYPE_(name, value, ctype, bytes)                                                         \
    case value: return kernel_by_op<ctype>(op, pick);
        SYMMEM_DTYPE_LIST(SYMMEM_K_DTYPE_)
#undef SYMMEM_K_DTYPE_
    default: return nullptr;
    }
}

template <int FAM> struct FamilyKernel {
    template <typename T, int OP> const void *get() const
    {
        return reinterpret_cast<const void *>(&coll_kernel<T, OP, FAM>);
    }
};

template <int FAM> const void *kernel_for(int dtype, int op)
{
    return kernel_by_dtype_op(dtype, op, FamilyKernel<FAM>{});
}

/* Load every dtype x op kernel of a family now (symmem_coll_preload). */
template <int FAM> int preload_family(symmem_coll_preload_info_t *info)
{
    int e = 0;
    for (int dtype = 0; dtype < SYMMEM_DTYPE_COUNT && e == 0; dtype++)
        for (int op = 0; op < SYMMEM_REDOP_COUNT && e == 0; op++)
            e = symmem_coll_preload_one(kernel_for<FAM>(dtype, op), SYMMEM_COLL_THREADS, info);
    return e;
}

/* Whether a family has a separate checked instantiation (a function, not `FAM_CHECKED != FAM` in the macro:
 * clang warns about the self-comparison when both are the same token). */
template <int FAM, int FAM_CHECKED> constexpr bool has_checked() { return FAM_CHECKED != FAM; }

} // namespace symmem_k

/* A family's accessors (kernel_abi.h declares them): its kernel for a dtype and op, the checked one (the
 * Lamport round headers) where the family has one (FAM_CHECKED != FAM), and loading all of them. */
#define SYMMEM_COLL_FAMILY_KERNELS(file, FAM, FAM_CHECKED)                                                 \
    extern "C" const void *symmem_coll_##file##_kernel(int dtype, int op, int checked)                     \
    {                                                                                                      \
        return checked ? symmem_k::kernel_for<FAM_CHECKED>(dtype, op) : symmem_k::kernel_for<FAM>(dtype, op); \
    }                                                                                                      \
    extern "C" int symmem_coll_##file##_preload(symmem_coll_preload_info_t *info)                          \
    {                                                                                                      \
        int e = symmem_k::preload_family<FAM>(info);                                                       \
        if (e == 0 && symmem_k::has_checked<FAM, FAM_CHECKED>()) e = symmem_k::preload_family<FAM_CHECKED>(info); \
        return e;                                                                                          \
    }

#endif
