/* The pull family: one-shot pull (every rank reduces every shard from every rank's staging or input) and
 * two-shot pull (each rank reduces its own shard, then gathers the others'); reduce-scatter and all-gather
 * with the same loops. Protocol: kernel.cuh, protocol.cuh. */
#include "collectives/kernel.cuh"

namespace symmem_k {

/* Packs of shard s, from element `off` of the shard on, whose V elements are all valid and that 16-byte accesses
 * may take (none unless the call's buffers are aligned), at most `most`. */
template <int V> __device__ __forceinline__ uint64_t whole_packs(const P &p, int s, uint64_t off, uint64_t most)
{
    const uint64_t start = (uint64_t)s * p.stride;
    if (!p.aligned || start >= p.total) return 0;
    const uint64_t len = min(p.stride, p.total - start);
    return len <= off ? 0 : min((len - off) / V, most);
}

/* Two-shot all-reduce into an output that is not symmetric, per round: my input's n shards into my staging
 * slots (unless ZC: the inputs are symmetric and read in place, zero copy in), sync, reduce my shard from every
 * rank's staging slot (ZC: input) into my output and into my result slot of the workspace, sync, then gather the
 * other shards from the peers' result slots. The half layout of run_pull (n staging slots, then the result;
 * with ZC the staging slots stay unused, so that the geometry and the tag are the family's). Two syncs a
 * round, as run_pull: the first (every staged input ready; the peers are done with this half two rounds ago),
 * the second (every result of the round stored; with ZC every peer done reading my input of the round, so my
 * kernel may end after the last). Only in its own kernel (pull_wide_kernel). Each loop takes the whole packs
 * first with nothing but 16-byte accesses (as run_pull_zc, below, and for its reason), then the rest (a
 * shard's partial last pack, or every pack of unaligned buffers) one at a time. */
template <typename T, int OP, bool ZC> __device__ __forceinline__ bool run_pull_two(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V, B = 4;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    const char *send = g.send;
    char *recv = g.recv;
    uint64_t e = c.epoch;
    for (uint32_t rd = 0; rd < p.rounds; rd++, e += 2) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t half = half_off(p, e), result = half + n * segp * 16; /* in every workspace */
        /* whole packs of my shard, and of every shard (the last shard is the shortest) */
        const uint64_t mine_whole = whole_packs<V>(p, r, off, segp), all_whole = whole_packs<V>(p, n - 1, off, segp);
        if (!ZC) { /* copy-in: shard s of my input into my staging slot s; B shards' loads in flight, then stores */
            char *staging = p.ws[r] + half;
            for (uint64_t pk = tid; pk < all_whole; pk += nthreads) {
                for (int s0 = 0; s0 < n; s0 += B) {
                    uint4 v[B];
#pragma unroll
                    for (int j = 0; j < B; j++)
                        if (s0 + j < n)
                            v[j] = *reinterpret_cast<const uint4 *>(send +
                                                                    ((s0 + j) * p.stride + off + pk * V) * sizeof(T));
#pragma unroll
                    for (int j = 0; j < B; j++)
                        if (s0 + j < n) st16(staging + ((s0 + j) * segp + pk) * 16, v[j]);
                }
            }
            for (uint64_t pk = symmem_coll_first_at(tid, all_whole, nthreads); pk < segp; pk += nthreads) {
                for (int s = 0; s < n; s++) {
                    const int nv = shard_valid<V>(p, s, off + pk * V);
                    if (nv > 0)
                        st16(staging + (s * segp + pk) * 16,
                             load_user<T>(send, s * p.stride + off + pk * V, nv, aligned, false));
                }
            }
        }
        if (!sync_peers(p, c, e + 1, ZC && rd == 0)) return false; /* ZC round 0: nothing stored before */
        /* my shard from every rank: its input (ZC) or its staging slot r, always whole 16-byte packs */
        const auto load_src = [&](int src, uint64_t pk, uint64_t at) {
            if (!ZC) return ld_cg16(p.ws[src] + half + (r * segp + pk) * 16);
            return src == r ? *reinterpret_cast<const uint4 *>(p.peer_send[src] + at) : ld_cg16(p.peer_send[src] + at);
        };
        for (uint64_t pk = tid; pk < mine_whole; pk += nthreads) {
            const uint64_t at = (r * p.stride + off + pk * V) * sizeof(T);
            const uint4 out = reduce_ranks<T, OP>(n, [&](int src) { return load_src(src, pk, at); });
            st16(recv + at, out);
            st16(p.ws[r] + result + pk * 16, out);
        }
        for (uint64_t pk = symmem_coll_first_at(tid, mine_whole, nthreads); pk < segp; pk += nthreads) {
            const uint64_t i = off + pk * V;
            const int nv = shard_valid<V>(p, r, i);
            if (nv <= 0) continue;
            const uint64_t user_elem = r * p.stride + i;
            const uint4 out = reduce_ranks<T, OP>(n, [&](int src) {
                return ZC ? load_user<T>(p.peer_send[src], user_elem, nv, aligned, src != r) : load_src(src, pk, 0);
            });
            store_user<T>(recv, user_elem, out, nv, aligned);
            st16(p.ws[r] + result + pk * 16, out);
        }
        if (!sync_peers(p, c, e + 2)) return false;
        /* batched: up to B peers' reduced packs in flight, then their stores */
        for (uint64_t pk = tid; pk < all_whole; pk += nthreads) {
            for (int k0 = 1; k0 < n; k0 += B) {
                uint4 v[B];
#pragma unroll
                for (int j = 0; j < B; j++)
                    if (k0 + j < n) v[j] = ld_cg16(p.ws[(r + k0 + j) % n] + result + pk * 16);
#pragma unroll
                for (int j = 0; j < B; j++) {
                    const int s = (r + k0 + j) % n;
                    if (k0 + j < n) st16(recv + (s * p.stride + off + pk * V) * sizeof(T), v[j]);
                }
            }
        }
        for (uint64_t pk = symmem_coll_first_at(tid, all_whole, nthreads); pk < segp; pk += nthreads) {
            const uint64_t i = off + pk * V;
            for (int k = 1; k < n; k++) {
                const int s = (r + k) % n, nv = shard_valid<V>(p, s, i);
                if (nv > 0) store_user<T>(recv, s * p.stride + i, ld_cg16(p.ws[s] + result + pk * 16), nv, aligned);
            }
        }
    }
    return true;
}

/* ---- pull: one-shot all-reduce (every rank reduces every shard), reduce-scatter, all-gather ------------ */
/* Half layout: staging[s][segp] packs (my input, shard-major; all-gather: my shard only), then for the
 * two-shot all-reduce (run_pull_two) result[segp] (my reduced shard). */
/* One function on purpose (past ~80 lines): the round loop's syncs and the halves' reuse argument read top
 * to bottom, and split into phases the float kernels took more registers (ptxas -v: the 16-bit ones are at
 * the 128-register launch bound already). */
/* The two-shot all-reduce never runs here: it has kernels of its own (pull_wide_kernel, pull_zc_kernel). */
template <typename T, int OP> __device__ __forceinline__ bool run_pull(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool all_gather = g.all_gather, reduce_scatter = g.reduce_scatter, aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    const char *send = g.send;
    char *recv = g.recv;
    const bool zero_copy_in = p.zero_copy_in != 0;
    uint64_t e = c.epoch;
    for (uint32_t rd = 0; rd < p.rounds; rd++, e += 2) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t half_start = half_off(p, e);
        char *mine = p.ws[r] + half_start;
        if (!zero_copy_in) { /* copy-in, fused: my input into my staging */
            for (uint64_t pk = tid; pk < segp; pk += nthreads) {
                const uint64_t i = off + pk * V;
                if (all_gather) {
                    const int nv = shard_valid<V>(p, r, i);
                    if (nv > 0) st16(mine + pk * 16, load_user<T>(send, i, nv, aligned, false));
                } else {
                    /* batched: up to four shards' loads in flight, then their stores (the stores may alias
                     * the loads for all the compiler knows, so it keeps them in the order written) */
                    for (int s0 = 0; s0 < n; s0 += 4) {
                        uint4 v[4];
                        int nvs[4];
#pragma unroll
                        for (int j = 0; j < 4; j++) {
                            nvs[j] = s0 + j < n ? shard_valid<V>(p, s0 + j, i) : 0;
                            if (nvs[j] > 0) v[j] = load_user<T>(send, (s0 + j) * p.stride + i, nvs[j], aligned, false);
                        }
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            if (nvs[j] > 0) st16(mine + ((s0 + j) * segp + pk) * 16, v[j]);
                    }
                }
            }
        }
        /* round 0 reading inputs in place: nothing stored before (sync_peers, `entry`) */
        if (!sync_peers(p, c, e + 1, rd == 0 && zero_copy_in)) return false;
        if (all_gather) {
            for (uint64_t pk = tid; pk < segp; pk += nthreads) {
                const uint64_t i = off + pk * V;
                const int nv = shard_valid<V>(p, r, i);
                if (nv <= 0) continue;
                for (int s = 0; s < n; s++) {
                    if (s == r && p.in_place) continue;
                    uint4 v;
                    if (s == r) v = load_user<T>(send, i, nv, aligned, false);
                    else if (zero_copy_in) v = load_user<T>(p.peer_send[s], i, nv, aligned, true);
                    else v = ld_cg16(p.ws[s] + half_start + pk * 16);
                    store_user<T>(recv, s * p.stride + i, v, nv, aligned);
                }
            }
            continue;
        }
        const int first_shard = reduce_scatter ? r : 0, end_shard = reduce_scatter ? r + 1 : n;
        for (uint64_t pk = tid; pk < segp; pk += nthreads) {
            const uint64_t i = off + pk * V;
            for (int s = first_shard; s < end_shard; s++) {
                const int nv = shard_valid<V>(p, s, i);
                if (nv <= 0) continue;
                const uint64_t user_elem = s * p.stride + i, slot_start = (s * segp + pk) * 16;
                const uint4 out = reduce_ranks<T, OP>(n, [&](int src) {
                    return zero_copy_in ? load_user<T>(p.peer_send[src], user_elem, nv, aligned, src != r)
                                        : ld_cg16(p.ws[src] + half_start + slot_start);
                });
                store_user<T>(recv, reduce_scatter ? i : user_elem, out, nv, aligned);
            }
        }
    }
    /* peers read my send buffer: they must be done before my kernel ends (the descriptor's end sync) */
    if (zero_copy_in && !sync_peers(p, c, e + 1)) return false;
    return true;
}


template <> struct Family<SYMMEM_COLL_FAM_PULL> {
    template <typename T, int OP> static __device__ __forceinline__ bool run(const P &p, Ctx &c)
    {
        return run_pull<T, OP>(p, c);
    }
};

/* The two-shot pull all-reduce into an ordinary output (run_pull_two), as kernels of their own (plan.c picks them:
 * geometry's `wide`), compiled for SYMMEM_COLL_WIDE_THREADS, as many threads as its loops' registers allow, so a
 * block still fills one SM and holds more loads in flight than the family's kernel. */
template <typename T, int OP, bool ZC>
__global__ void __launch_bounds__(SYMMEM_COLL_WIDE_THREADS, 1) pull_wide_kernel(const __grid_constant__ symmem_coll_params_t p)
{
    Ctx c;
    if (!prologue(p, c, p.epochs, 0)) {
        poison_output<T>(p);
        return;
    }
    if (!run_pull_two<T, OP, ZC>(p, c)) poison_output<T>(p);
    block_end(p, c);
}

/* pull_wide_kernel for whether the call reads its inputs in place */
struct WideKernel {
    bool zc;
    template <typename T, int OP> const void *get() const
    {
        return zc ? reinterpret_cast<const void *>(&pull_wide_kernel<T, OP, true>)
                  : reinterpret_cast<const void *>(&pull_wide_kernel<T, OP, false>);
    }
};

/* The two-shot pull all-reduce with zero copy both ways (plan.c: zero copy in and out), as kernels of their own,
 * one per bound R on the rank count (2, 4, 8, 16): reduce my shard straight from every rank's input and store
 * the result straight into every rank's output. No workspace, one round, two syncs: A (every input ready, every
 * output free: each peer's kernel has started) and B (every peer's stores into my output have landed). A
 * thread takes U packs a pass (kernel_abi.h, symmem_coll_zc_packs) and issues the loads of all of them from
 * every rank before it unpacks the first (the rank loop unrolled to R, so none waits for another), then reduces
 * each in rank order (the operations and order of reduce_ranks: the same bits) and stores it to every rank.
 * That loop takes only whole packs of 16-byte aligned buffers, with nothing but 16-byte accesses in it: with
 * the element-by-element fallback of load_user and store_user inline, the same kernel at four packs a pass
 * took 30.7 instead of 19.0 us at 4 MiB on 4 co-located ranks (bench/NOTES.md, "Whole-pack loops"); the rest (a
 * partial last pack, unaligned buffers) follows one pack at a time. In place is safe: position i of shard s is
 * read and written, on every rank, only by rank s's thread that owns it, which loads before it stores. */
template <typename T, int OP, int R> __device__ __forceinline__ bool run_pull_zc(const P &p, Ctx &c)
{
    /* G ranks' loads in flight together: all of them up to 8 ranks; at 16, two groups of 8 (16 packs' loads
     * and their 64-bit addresses spill at the 128-register bound) */
    constexpr int V = Pack<T>::V, U = R <= 8 ? 2 : 1, G = R < 8 ? R : 8; /* U: symmem_coll_zc_packs */
    static_assert(R % G == 0 && (G == R || U == 1), "whole groups; one pack a pass where loads come in groups");
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    char *recv = g.recv;
    const uint64_t mine = (uint64_t)r * p.stride; /* my shard's first element */
    const uint64_t whole = whole_packs<V>(p, r, 0, segp); /* the rest: below */
    if (!sync_peers(p, c, c.epoch + 1, true)) return false; /* nothing stored before: sync_peers, `entry` */
    for (uint64_t pk0 = tid; pk0 < whole; pk0 += nthreads * U) {
        float acc[U][V];
#pragma unroll
        for (int s0 = 0; s0 < R; s0 += G) {
            if (s0 >= n) break;
            uint4 v[U][G];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const uint64_t at = (mine + (pk0 + (uint64_t)u * nthreads) * V) * sizeof(T);
#pragma unroll
                for (int j = 0; j < G; j++) {
                    const int s = s0 + j;
                    if (s < n && pk0 + (uint64_t)u * nthreads < whole)
                        v[u][j] = s == r ? *reinterpret_cast<const uint4 *>(p.peer_send[s] + at)
                                         : ld_cg16(p.peer_send[s] + at);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int j = 0; j < G; j++) {
                    const int s = s0 + j;
                    if (s >= n) continue;
                    float f[V];
                    Conv<T>::unpack(v[u][j], f);
#pragma unroll
                    for (int k = 0; k < V; k++) acc[u][k] = s == 0 ? f[k] : redop<OP>(acc[u][k], f[k]);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (pk0 + (uint64_t)u * nthreads >= whole) continue;
            const uint64_t at = (mine + (pk0 + (uint64_t)u * nthreads) * V) * sizeof(T);
            const uint4 out = Conv<T>::pack(acc[u]);
            st16(recv + at, out);
            for (int k = 1; k < n; k++) st16(p.peer_recv[(r + k) % n] + at, out);
        }
    }
    /* the shard's last pack where it is partial, or every pack of a call whose buffers 16-byte accesses cannot
     * take: one at a time, element by element where they must */
    for (uint64_t pk = symmem_coll_first_at(tid, whole, nthreads); pk < segp; pk += nthreads) {
        const int nv = shard_valid<V>(p, r, pk * V);
        if (nv <= 0) continue;
        const uint64_t elem = mine + pk * V;
        const uint4 out = reduce_ranks<T, OP>(
            n, [&](int src) { return load_user<T>(p.peer_send[src], elem, nv, aligned, src != r); });
        store_user<T>(recv, elem, out, nv, aligned);
        for (int k = 1; k < n; k++) store_user<T>(p.peer_recv[(r + k) % n], elem, out, nv, aligned);
    }
    return sync_peers(p, c, c.epoch + 2);
}

template <typename T, int OP, int R>
__global__ void __launch_bounds__(SYMMEM_COLL_THREADS, 1) pull_zc_kernel(const __grid_constant__ symmem_coll_params_t p)
{
    Ctx c;
    if (!prologue(p, c, p.epochs, 0)) {
        poison_output<T>(p);
        return;
    }
    if (!run_pull_zc<T, OP, R>(p, c)) poison_output<T>(p);
    block_end(p, c);
}

template <typename T, int OP> const void *pull_zc_for_ranks(int nranks)
{
    if (nranks < 2 || nranks > SYMMEM_MAX_RANKS) return nullptr;
    switch (symmem_coll_zc_ranks(nranks)) {
    case 2: return reinterpret_cast<const void *>(&pull_zc_kernel<T, OP, 2>);
    case 4: return reinterpret_cast<const void *>(&pull_zc_kernel<T, OP, 4>);
    case 8: return reinterpret_cast<const void *>(&pull_zc_kernel<T, OP, 8>);
    case 16: return reinterpret_cast<const void *>(&pull_zc_kernel<T, OP, 16>);
    default: return nullptr;
    }
}
static_assert(SYMMEM_MAX_RANKS <= 16, "pull_zc_for_ranks has bounds up to 16 ranks");

/* pull_zc_kernel for the call's rank count */
struct ZcKernel {
    int nranks;
    template <typename T, int OP> const void *get() const { return pull_zc_for_ranks<T, OP>(nranks); }
};

} // namespace symmem_k

SYMMEM_COLL_FAMILY_KERNELS(pull, SYMMEM_COLL_FAM_PULL, SYMMEM_COLL_FAM_PULL)

extern "C" const void *symmem_coll_pull_wide_kernel(int dtype, int op, int zero_copy_in)
{
    return symmem_k::kernel_by_dtype_op(dtype, op, symmem_k::WideKernel{zero_copy_in != 0});
}

extern "C" int symmem_coll_pull_wide_preload(symmem_coll_preload_info_t *info)
{
    int e = 0;
    for (int dtype = 0; dtype < SYMMEM_DTYPE_COUNT && e == 0; dtype++)
        for (int op = 0; op < SYMMEM_REDOP_COUNT && e == 0; op++)
            for (int zc = 0; zc < 2 && e == 0; zc++)
                e = symmem_coll_preload_one(symmem_coll_pull_wide_kernel(dtype, op, zc), SYMMEM_COLL_WIDE_THREADS,
                                            info);
    return e;
}

extern "C" const void *symmem_coll_pull_zc_kernel(int dtype, int op, int nranks)
{
    return symmem_k::kernel_by_dtype_op(dtype, op, symmem_k::ZcKernel{nranks});
}

extern "C" int symmem_coll_pull_zc_preload(symmem_coll_preload_info_t *info)
{
    int e = 0;
    for (int dtype = 0; dtype < SYMMEM_DTYPE_COUNT && e == 0; dtype++)
        for (int op = 0; op < SYMMEM_REDOP_COUNT && e == 0; op++)
            for (int bound = 2; bound <= SYMMEM_MAX_RANKS && e == 0; bound *= 2)
                e = symmem_coll_preload_one(symmem_coll_pull_zc_kernel(dtype, op, bound), SYMMEM_COLL_THREADS, info);
    return e;
}
