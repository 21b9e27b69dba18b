/* The push family: two-shot push (reduce-scatter by stores into every peer, reduce my shard, push the result
 * to every peer) and staged (the same as a permutation: pass q stores only to rank (r+1+q) mod n), plus the
 * flag-synchronised all-gather of one-shot push and of the Lamport two-shot. Protocol: kernel.cuh,
 * protocol.cuh. */
#include "collectives/kernel.cuh"

namespace symmem_k {

/* ---- push: two-shot (stores to every peer interleaved) and staged (pass q: only to rank (r+1+q) mod n) */
/* Half layout: slots[src][segp] (reduce-scatter input pushed by src; not for all-gather), then
 * gather[s][segp] (reduced shard s pushed by its owner; all-reduce and all-gather). */

/* Where one round works: its first element in every shard, its data half, my part of that half, where
 * gather[] starts in a half; the call's shape (staged; zero_copy_out: all-reduce results go straight into every rank's
 * recv, plan.c's zero_copy_out). */
struct PushRound {
    uint64_t off, half_start;
    char *mine;
    uint64_t gather_start;
    bool staged, zero_copy_out;
};

/* Before sync A. All-gather: my shard to every peer's gather[r] (and to my own output). Reduce-scatter
 * push: shard d of my input into slot r of rank d. */
template <typename T> __device__ __forceinline__ void push_inputs(const P &p, const Geo &g, const PushRound &R)
{
    constexpr int V = Pack<T>::V;
    const int n = g.n, r = g.r;
    const bool all_gather = g.all_gather, aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    const char *send = g.send;
    char *recv = g.recv;
    const uint64_t off = R.off, half_start = R.half_start, gather_start = R.gather_start;
    const bool staged = R.staged;
    if (all_gather) {
        if (staged) {
            for (int q = 0; q < n - 1; q++) {
                const int d = (r + 1 + q) % n;
                for (uint64_t pk = tid; pk < segp; pk += nthreads) {
                    const uint64_t i = off + pk * V;
                    const int nv = shard_valid<V>(p, r, i);
                    if (nv > 0)
                        st16(p.ws[d] + half_start + gather_start + (r * segp + pk) * 16,
                             load_user<T>(send, i, nv, aligned, false));
                }
            }
        }
        for (uint64_t pk = tid; pk < segp; pk += nthreads) {
            const uint64_t i = off + pk * V;
            const int nv = shard_valid<V>(p, r, i);
            if (nv <= 0) continue;
            const uint4 v = load_user<T>(send, i, nv, aligned, false);
            if (!staged)
                for (int k = 1; k < n; k++)
                    st16(p.ws[(r + k) % n] + half_start + gather_start + (r * segp + pk) * 16, v);
            if (!p.in_place) store_user<T>(recv, r * p.stride + i, v, nv, aligned);
        }
    } else if (staged) {
        for (int q = 0; q < n - 1; q++) {
            const int d = (r + 1 + q) % n;
            for (uint64_t pk = tid; pk < segp; pk += nthreads) {
                const uint64_t i = off + pk * V;
                const int nv = shard_valid<V>(p, d, i);
                if (nv > 0)
                    st16(p.ws[d] + half_start + (r * segp + pk) * 16,
                         load_user<T>(send, d * p.stride + i, nv, aligned, false));
            }
        }
    } else {
        for (uint64_t pk = tid; pk < segp; pk += nthreads) push_shards<T, false>(p, g, half_start, off + pk * V, pk);
    }
}

/* After sync A (reduce-scatter, all-reduce): reduce my shard from my own input and the slots the peers
 * pushed, in rank order, into my output; all-reduce also sends the result: into my gather[r] for the staged
 * passes, straight into every peer's recv (zero_copy_out), or into every peer's gather[r]. */
template <typename T, int OP> __device__ __forceinline__ void push_reduce(const P &p, const Geo &g, const PushRound &R)
{
    constexpr int V = Pack<T>::V;
    const int n = g.n, r = g.r;
    const bool reduce_scatter = g.reduce_scatter, aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    const char *send = g.send;
    char *recv = g.recv;
    char *mine = R.mine;
    const uint64_t off = R.off, half_start = R.half_start, gather_start = R.gather_start;
    for (uint64_t pk = tid; pk < segp; pk += nthreads) {
        const uint64_t i = off + pk * V;
        const int nv = shard_valid<V>(p, r, i);
        if (nv <= 0) continue;
        const uint64_t user_elem = r * p.stride + i;
        const uint4 out = reduce_ranks<T, OP>(n, [&](int src) {
            return src == r ? load_user<T>(send, user_elem, nv, aligned, false)
                            : ld_cg16(mine + (src * segp + pk) * 16);
        });
        store_user<T>(recv, reduce_scatter ? i : user_elem, out, nv, aligned);
        if (reduce_scatter) continue;
        if (R.staged) st16(mine + gather_start + (r * segp + pk) * 16, out); /* pushed pass by pass: push_staged */
        else if (R.zero_copy_out)
            for (int k = 1; k < n; k++) store_user<T>(p.peer_recv[(r + k) % n], user_elem, out, nv, aligned);
        else
            for (int k = 1; k < n; k++) st16(p.ws[(r + k) % n] + half_start + gather_start + (r * segp + pk) * 16, out);
    }
}

/* Staged all-reduce: my reduced shard to rank (r+1+q) mod n in pass q. */
template <typename T> __device__ __forceinline__ void push_staged(const P &p, const Geo &g, const PushRound &R)
{
    constexpr int V = Pack<T>::V;
    const int n = g.n, r = g.r;
    const bool aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    char *mine = R.mine;
    const uint64_t off = R.off, half_start = R.half_start, gather_start = R.gather_start;
    for (int q = 0; q < n - 1; q++) {
        const int d = (r + 1 + q) % n;
        for (uint64_t pk = tid; pk < segp; pk += nthreads) {
            const uint64_t i = off + pk * V;
            const int nv = shard_valid<V>(p, r, i);
            if (nv > 0) {
                const uint64_t o = gather_start + (r * segp + pk) * 16;
                const uint4 v = ld_cg16(mine + o); /* same thread wrote it in push_reduce */
                if (R.zero_copy_out) store_user<T>(p.peer_recv[d], r * p.stride + i, v, nv, aligned);
                else st16(p.ws[d] + half_start + o, v);
            }
        }
    }
}

/* The gather: the shards the peers pushed into my memory, into my output. */
template <typename T> __device__ __forceinline__ void push_gather(const P &p, const Geo &g, const PushRound &R)
{
    constexpr int V = Pack<T>::V;
    const int n = g.n, r = g.r;
    const bool aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    char *recv = g.recv;
    char *mine = R.mine;
    const uint64_t off = R.off, gather_start = R.gather_start;
    for (uint64_t pk = tid; pk < segp; pk += nthreads) {
        const uint64_t i = off + pk * V;
        for (int k = 1; k < n; k++) {
            const int s = (r + k) % n;
            const int nv = shard_valid<V>(p, s, i);
            if (nv > 0)
                store_user<T>(recv, s * p.stride + i, ld_cg16(mine + gather_start + (s * segp + pk) * 16), nv, aligned);
        }
    }
}

template <typename T, int OP> __device__ __forceinline__ bool run_push(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const Geo g(p);
    const bool all_gather = g.all_gather, reduce_scatter = g.reduce_scatter;
    const uint64_t segp = g.segp;
    const bool staged = p.algo == SYMMEM_ALGO_STAGED;
    const bool zero_copy_out = p.zero_copy_out != 0;
    const uint64_t gather_start = all_gather ? 0 : (uint64_t)g.n * segp * 16; /* offset of gather[] in a half */
    uint64_t e = c.epoch;
    for (uint32_t rd = 0; rd < p.rounds; rd++, e += 2) {
        const uint64_t half_start = half_off(p, e);
        const PushRound R = {
            (uint64_t)rd * segp * V, half_start, p.ws[g.r] + half_start, gather_start, staged, zero_copy_out};
        push_inputs<T>(p, g, R);
        if (!sync_peers(p, c, e + 1)) return false;
        if (!all_gather) {
            push_reduce<T, OP>(p, g, R);
            if (reduce_scatter) continue;
            if (staged) push_staged<T>(p, g, R);
            if (zero_copy_out) {
                /* Every result is in place already: no gather. Only the call's last round waits (sync B), so
                 * that every peer's stores into my recv precede my kernel's end; the rounds before need no
                 * second sync (the next round's sync A keeps the halves' reuse safe). */
                if (rd + 1 == p.rounds && !sync_peers(p, c, e + 2)) return false;
                continue;
            }
            if (!sync_peers(p, c, e + 2)) return false;
        }
        push_gather<T>(p, g, R);
    }
    return true;
}

template <> struct Family<SYMMEM_COLL_FAM_PUSH> {
    template <typename T, int OP> static __device__ __forceinline__ bool run(const P &p, Ctx &c)
    {
        return run_push<T, OP>(p, c);
    }
};

} // namespace symmem_k

SYMMEM_COLL_FAMILY_KERNELS(push, SYMMEM_COLL_FAM_PUSH, SYMMEM_COLL_FAM_PUSH)
