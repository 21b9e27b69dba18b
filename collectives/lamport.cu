/* The Lamport family: pushes without flags (protocol.cuh, "Lamport"). One-shot push (all-reduce: every rank
 * pushes the whole round into slot r of every peer; reduce-scatter: shard d to rank d) and the two-shot
 * all-reduce (a Lamport reduce-scatter, then each owner pushes its reduced shard); instantiated twice, without
 * and with the round headers of SYMMEM_LAMPORT_CHECK. */
#include "collectives/kernel.cuh"

namespace symmem_k {

/* One-shot (all-reduce: every rank pushes the whole round into slot r of every peer, n shards; reduce-
 * scatter: shard d for rank d), then every rank reduces what it needs from its own slots. */
template <typename T, int OP, bool CHK> __device__ __forceinline__ bool run_lamport(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool reduce_scatter = g.reduce_scatter, aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    const char *send = g.send;
    char *recv = g.recv;
    const uint64_t npos = reduce_scatter ? segp : (uint64_t)n * segp, slot = npos * 16;
    uint64_t j = c.lseq;
    for (uint32_t rd = 0; rd < p.rounds; rd++, j++) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t lam_buf_start = p.lam_off + (j % 3) * p.lam_buf_bytes;
        lamport_hdr_push<CHK>(p, j);
        for (uint64_t q = tid; q < npos; q += nthreads) {
            if (reduce_scatter) {
                push_shards<T, true>(p, g, lam_buf_start, off + q * V, q); /* slot = segp packs here */
            } else {
                const int s = (int)(q / segp);
                const uint64_t i = off + (q % segp) * V;
                const int nv = shard_valid<V>(p, s, i);
                if (nv <= 0) continue;
                const uint4 v = fix_pack<T>(load_user<T>(send, s * p.stride + i, nv, aligned, false));
                for (int k = 1; k < n; k++) st16(p.ws[(r + k) % n] + lam_buf_start + r * slot + q * 16, v);
            }
        }
        if (threadIdx.x == 0) late_check(p, c); /* while the pushes travel */
        if (!lamport_hdr_check<CHK>(p, c, j)) return false;
        bool fail = false;
        char *mine = p.ws[r] + lam_buf_start;
        for (uint64_t q = tid; q < npos && !fail; q += nthreads) {
            const int s = reduce_scatter ? r : (int)(q / segp);
            const uint64_t i = off + (reduce_scatter ? q : q % segp) * V;
            const int nv = shard_valid<V>(p, s, i);
            if (nv <= 0) continue;
            const uint64_t user_elem = s * p.stride + i;
            const uint4 out = lamport_reduce<T, OP>(
                p, c, n, r, [&](int src) { return mine + src * slot + q * 16; },
                [&]() { return fix_pack<T>(load_user<T>(send, user_elem, nv, aligned, false)); }, j, fail);
            if (!fail) store_user<T>(recv, reduce_scatter ? i : user_elem, out, nv, aligned);
        }
        if (__syncthreads_or(fail)) return false;
    }
    return true;
}

/* Two-shot all-reduce without flags: a Lamport reduce-scatter (shard d of my input into slot r of rank d),
 * each owner reduces its shard and pushes the result into gather slot r of every peer (Lamport again), and
 * every rank copies the shards it polled into its output. Per round each GPU receives 2(n-1)/n of the
 * round, as the other two-shots, with no sync at all. Buffer layout: slots[src][segp], then
 * gather[s][segp]. The result is fix_pack'ed before it is sent, and the owner stores that same pack into
 * its own output, so every rank holds the same bits (a -0.0 result becomes +0.0, as in oneshot_push).
 * In place is safe: position i of every shard is read and written on this rank only by the thread that
 * owns position i, and it loads each input before it stores that output. Reuse of buffer j % 3 (the
 * family's comment above): every thread of a block that pushes to me in round j+3 read, in round j+2,
 * a slot this block of mine pushed in round j+2 (its own shard's slot from me, or my shard's result),
 * pushed after my block finished round j. */
template <typename T, int OP, bool CHK> __device__ __forceinline__ bool run_lamport_two(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool aligned = g.aligned;
    const uint64_t segp = g.segp, tid = g.tid, nthreads = g.nthreads;
    const char *send = g.send;
    char *recv = g.recv;
    const uint64_t gather_start = (uint64_t)n * segp * 16; /* offset of gather[] in a Lamport buffer */
    uint64_t j = c.lseq;
    for (uint32_t rd = 0; rd < p.rounds; rd++, j++) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t lam_buf_start = p.lam_off + (j % 3) * p.lam_buf_bytes;
        char *mine = p.ws[r] + lam_buf_start;
        lamport_hdr_push<CHK>(p, j);
        for (uint64_t pk = tid; pk < segp; pk += nthreads) push_shards<T, true>(p, g, lam_buf_start, off + pk * V, pk);
        if (threadIdx.x == 0) late_check(p, c); /* while the pushes travel */
        if (!lamport_hdr_check<CHK>(p, c, j)) return false;
        bool fail = false;
        /* my shard: reduce in rank order, push the result to every peer's gather[r], keep my copy */
        for (uint64_t pk = tid; pk < segp && !fail; pk += nthreads) {
            const uint64_t i = off + pk * V;
            const int nv = shard_valid<V>(p, r, i);
            if (nv <= 0) continue;
            const uint64_t user_elem = r * p.stride + i;
            const uint4 out = fix_pack<T>(lamport_reduce<T, OP>(
                p, c, n, r, [&](int src) { return mine + (src * segp + pk) * 16; },
                [&]() { return fix_pack<T>(load_user<T>(send, user_elem, nv, aligned, false)); }, j, fail));
            if (fail) break;
            for (int k = 1; k < n; k++)
                st16(p.ws[(r + k) % n] + lam_buf_start + gather_start + (r * segp + pk) * 16, out);
            store_user<T>(recv, user_elem, out, nv, aligned);
        }
        /* the other shards, as their owners pushed them: the first loads of a group of four in flight
         * together (lamport_reduce says why) */
        for (uint64_t pk = tid; pk < segp && !fail; pk += nthreads) {
            const uint64_t i = off + pk * V;
            if (n == 2) {
                /* one peer, nothing to group: lamport_take's tight loop, since the group's masked pass below
                 * only adds work per poll when it watches a single pack (a 16 MiB all-reduce was 6% faster
                 * this way on one H200) */
                const int s = 1 - r;
                const int nv = shard_valid<V>(p, s, i);
                if (nv <= 0) continue;
                const uint4 v = lamport_take(p, c, mine + gather_start + (s * segp + pk) * 16, s, j, fail);
                if (!fail) store_user<T>(recv, s * p.stride + i, v, nv, aligned);
                continue;
            }
            for (int k0 = 1; k0 < n && !fail; k0 += 4) {
                /* peers r + k0 .. r + k0 + 3, wrapped without a division: this loop is on the bandwidth-
                 * bound path of large messages, where instructions per pack count */
                const int s0 = r + k0 < n ? r + k0 : r + k0 - n;
                uint4 v[4];
                int nv[4];
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const int s = s0 + u < n ? s0 + u : s0 + u - n;
                    nv[u] = k0 + u < n ? shard_valid<V>(p, s, i) : 0;
                    if (nv[u] > 0) v[u] = ld_volatile16(mine + gather_start + (s * segp + pk) * 16);
                }
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    if (nv[u] <= 0) continue;
                    const int s = s0 + u < n ? s0 + u : s0 + u - n;
                    char *a = mine + gather_start + (s * segp + pk) * 16;
                    if (lamport_full(v[u]))
                        st16(a, lamport_empty4());
                    else
                        v[u] = lamport_take(p, c, a, s, j, fail);
                    if (!fail) store_user<T>(recv, s * p.stride + i, v[u], nv[u], aligned);
                }
            }
        }
        if (__syncthreads_or(fail)) return false;
    }
    return true;
}

/* The two-shot all-reduce has its own loop; reduce-scatter's twoshot_lamport is its first half, which is
 * one-shot push's. */
template <bool CHK> struct LamportFamily {
    template <typename T, int OP> static __device__ __forceinline__ bool run(const P &p, Ctx &c)
    {
        if (p.kind == SYMMEM_COLL_ALL_REDUCE && p.algo == SYMMEM_ALGO_TWOSHOT_LAMPORT)
            return run_lamport_two<T, OP, CHK>(p, c);
        return run_lamport<T, OP, CHK>(p, c);
    }
};
template <> struct Family<SYMMEM_COLL_FAM_LAMPORT> : LamportFamily<false> {};
template <> struct Family<FAM_LAMPORT_CHECKED> : LamportFamily<true> {};

} // namespace symmem_k

SYMMEM_COLL_FAMILY_KERNELS(lamport, SYMMEM_COLL_FAM_LAMPORT, symmem_k::FAM_LAMPORT_CHECKED)
