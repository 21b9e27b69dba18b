/* The pull family: one-shot pull (every rank reduces every shard from every rank's staging or input) and
 * two-shot pull (each rank reduces its own shard, then gathers the others'); reduce-scatter and all-gather
 * with the same loops. Protocol: kernel.cuh, protocol.cuh. */
#include "collectives/kernel.cuh"

namespace symmem_k {

/* Two-shot all-reduce reading every rank's input in place (zero copy in) into an output that is not
 * symmetric: per round, reduce my shard straight from every rank's input into my output and into my result
 * slot of the workspace (the half layout of run_pull: the result after the n staging slots, which stay
 * unused, so that the geometry and the tag are the family's), sync, then gather the other shards from the
 * peers' result slots. Two syncs a round, as run_pull: the first (every input ready; the peers are done with
 * this half two rounds ago), the second (every result of the round stored; every peer done reading my input
 * of the round, so my kernel may end after the last). Only in its own kernel (pull_wide_kernel): run_pull keeps
 * the same steps inline in its round loop, because called from there this function made the family's 16-bit
 * kernels spill (220 bytes at their 128-register bound), and inline they compile as before, byte for byte. */
template <typename T, int OP> __device__ __forceinline__ bool run_pull_two_zero_copy_in(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V, B = 4;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    char *recv = g.recv;
    uint64_t e = c.epoch;
    for (uint32_t rd = 0; rd < p.rounds; rd++, e += 2) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t result = half_off(p, e) + n * segp * 16; /* my result slot's start, in every workspace */
        if (!sync_peers(p, c, e + 1)) return false;
        for (uint64_t pk = tid; pk < segp; pk += nthreads) {
            const uint64_t i = off + pk * V;
            const int nv = shard_valid<V>(p, r, i);
            if (nv <= 0) continue;
            const uint64_t user_elem = r * p.stride + i;
            const uint4 out = reduce_ranks<T, OP>(
                n, [&](int src) { return load_user<T>(p.peer_send[src], user_elem, nv, aligned, src != r); });
            store_user<T>(recv, user_elem, out, nv, aligned);
            st16(p.ws[r] + result + pk * 16, out);
        }
        if (!sync_peers(p, c, e + 2)) return false;
        for (uint64_t pk = tid; pk < segp; pk += nthreads) {
            const uint64_t i = off + pk * V;
            /* batched: up to B peers' reduced packs in flight, then their stores (as run_pull) */
            for (int k0 = 1; k0 < n; k0 += B) {
                uint4 v[B];
                int nvs[B];
#pragma unroll
                for (int j = 0; j < B; j++) {
                    const int s = (r + k0 + j) % n;
                    nvs[j] = k0 + j < n ? shard_valid<V>(p, s, i) : 0;
                    if (nvs[j] > 0) v[j] = ld_cg16(p.ws[s] + result + pk * 16);
                }
#pragma unroll
                for (int j = 0; j < B; j++) {
                    const int s = (r + k0 + j) % n;
                    if (nvs[j] > 0) store_user<T>(recv, s * p.stride + i, v[j], nvs[j], aligned);
                }
            }
        }
    }
    return true;
}

/* ---- pull: one-shot (every rank reduces every shard) and two-shot (reduce own shard, gather) ---------- */
/* Half layout: staging[s][segp] packs (my input, shard-major; all-gather: my shard only), then for
 * two-shot all-reduce result[segp] (my reduced shard). */
/* One function on purpose (past ~80 lines): the round loop's syncs and the halves' reuse argument read top
 * to bottom, and split into phases the float kernels took more registers (ptxas -v: the 16-bit ones are at
 * the 128-register launch bound already). */
template <typename T, int OP> __device__ __forceinline__ bool run_pull(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool all_gather = g.all_gather, reduce_scatter = g.reduce_scatter, aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    const char *send = g.send;
    char *recv = g.recv;
    const bool two = p.kind == SYMMEM_COLL_ALL_REDUCE && p.algo == SYMMEM_ALGO_TWOSHOT_PULL;
    const bool zero_copy_in = p.zero_copy_in != 0;
    uint64_t e = c.epoch;
    if (two && p.zero_copy_out) {
        /* Zero copy both ways (plan.c: zero copy in and out): reduce my shard straight from every rank's
         * input and store the result straight into every rank's output. No workspace, one round, two syncs:
         * A (every input ready, every output free: each peer's kernel has started) and B (every peer's
         * stores into my output have landed). In place is safe: position i of shard s is read and written,
         * on every rank, only by rank s's thread that owns it, which loads before it stores. */
        if (!sync_peers(p, c, e + 1)) return false;
        for (uint64_t pk = tid; pk < segp; pk += nthreads) {
            const uint64_t i = pk * V;
            const int nv = shard_valid<V>(p, r, i);
            if (nv <= 0) continue;
            const uint64_t user_elem = r * p.stride + i;
            const uint4 out = reduce_ranks<T, OP>(
                n, [&](int src) { return load_user<T>(p.peer_send[src], user_elem, nv, aligned, src != r); });
            store_user<T>(recv, user_elem, out, nv, aligned);
            for (int k = 1; k < n; k++) store_user<T>(p.peer_recv[(r + k) % n], user_elem, out, nv, aligned);
        }
        return sync_peers(p, c, e + 2);
    }
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
        if (!sync_peers(p, c, e + 1)) return false;
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
        const int first_shard = (two || reduce_scatter) ? r : 0, end_shard = (two || reduce_scatter) ? r + 1 : n;
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
                if (two) st16(mine + (n * segp + pk) * 16, out);
            }
        }
        if (!two) continue;
        if (!sync_peers(p, c, e + 2)) return false;
        for (uint64_t pk = tid; pk < segp; pk += nthreads) {
            const uint64_t i = off + pk * V;
            /* batched: up to four peers' reduced packs in flight, then their stores (as push_shards) */
            for (int k0 = 1; k0 < n; k0 += 4) {
                uint4 v[4];
                int nvs[4];
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int s = (r + k0 + j) % n;
                    nvs[j] = k0 + j < n ? shard_valid<V>(p, s, i) : 0;
                    if (nvs[j] > 0) v[j] = ld_cg16(p.ws[s] + half_start + (n * segp + pk) * 16);
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int s = (r + k0 + j) % n;
                    if (nvs[j] > 0) store_user<T>(recv, s * p.stride + i, v[j], nvs[j], aligned);
                }
            }
        }
    }
    /* peers read my send buffer: they must be done before my kernel ends (the descriptor's end sync) */
    if (zero_copy_in && !two && !sync_peers(p, c, e + 1)) return false;
    return true;
}


template <> struct Family<SYMMEM_COLL_FAM_PULL> {
    template <typename T, int OP> static __device__ __forceinline__ bool run(const P &p, Ctx &c)
    {
        return run_pull<T, OP>(p, c);
    }
};

/* The two-shot pull that reads symmetric inputs in place into an ordinary output, as kernels of their own
 * (plan.c picks them: geometry's `wide`), compiled for SYMMEM_COLL_WIDE_THREADS, as many threads as its two loops'
 * registers allow, so a block still fills one SM and holds 1.5x the loads in flight of the family's kernel. (With
 * zero copy out too the family's kernel stays: a wider one was slower there, bench/NOTES.md.) */
template <typename T, int OP>
__global__ void __launch_bounds__(SYMMEM_COLL_WIDE_THREADS, 1) pull_wide_kernel(const __grid_constant__ symmem_coll_params_t p)
{
    Ctx c;
    if (!prologue(p, c, p.epochs, 0)) {
        poison_output<T>(p);
        return;
    }
    if (!run_pull_two_zero_copy_in<T, OP>(p, c)) poison_output<T>(p);
    block_end(p, c);
}

template <typename T> const void *pull_wide_for_op(int op)
{
    switch (op) {
#define SYMMEM_K_OP_(name, value)                                                                          \
    case value: return reinterpret_cast<const void *>(&pull_wide_kernel<T, value>);
        SYMMEM_REDOP_LIST(SYMMEM_K_OP_)
#undef SYMMEM_K_OP_
    default: return nullptr;
    }
}

const void *pull_wide_for(int dtype, int op)
{
    switch (dtype) {
#define SYMMEM_K_DTYPE_(name, value, ctype, bytes)                                                         \
    case value: return pull_wide_for_op<ctype>(op);
        SYMMEM_DTYPE_LIST(SYMMEM_K_DTYPE_)
#undef SYMMEM_K_DTYPE_
    default: return nullptr;
    }
}

} // namespace symmem_k

SYMMEM_COLL_FAMILY_KERNELS(pull, SYMMEM_COLL_FAM_PULL, SYMMEM_COLL_FAM_PULL)

extern "C" const void *symmem_coll_pull_wide_kernel(int dtype, int op)
{
    return symmem_k::pull_wide_for(dtype, op);
}

extern "C" int symmem_coll_pull_wide_preload(symmem_coll_preload_info_t *info)
{
    int e = 0;
    for (int dtype = 0; dtype < SYMMEM_DTYPE_COUNT && e == 0; dtype++)
        for (int op = 0; op < SYMMEM_REDOP_COUNT && e == 0; op++)
            e = symmem_coll_preload_one(symmem_coll_pull_wide_kernel(dtype, op), SYMMEM_COLL_WIDE_THREADS, info);
    return e;
}
