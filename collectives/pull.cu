/* The pull family: one-shot pull (every rank reduces every shard from every rank's staging or input) and
 * two-shot pull (each rank reduces its own shard, then gathers the others'); reduce-scatter and all-gather
 * with the same loops. Protocol: kernel.cuh, protocol.cuh. */
#include "collectives/kernel.cuh"

namespace symmem_k {

/* ---- pull: one-shot (every rank reduces every shard) and two-shot (reduce own shard, gather) ---------- */
/* Half layout: staging[s][segp] packs (my input, shard-major; all-gather: my shard only), then for
 * two-shot all-reduce result[segp] (my reduced shard). */
/* One function on purpose (past ~80 lines): the round loop's syncs and the halves' reuse argument read top
 * to bottom, and split into phases the float kernels were compiled with 94 registers instead of 86. */
template <typename T, int OP> __device__ __forceinline__ bool run_pull(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool ag = g.ag, rs = g.rs, al = g.al;
    const uint64_t segp = g.segp, t0 = g.t0, nt = g.nt;
    const char *send = g.send;
    char *recv = g.recv;
    const bool two = p.kind == SYMMEM_COLL_ALL_REDUCE && p.algo == SYMMEM_ALGO_TWOSHOT_PULL;
    const bool zc = p.zc_on != 0;
    uint64_t e = c.epoch;
    if (two && p.zo_on) {
        /* Zero copy both ways (plan.c: zero copy in and out): reduce my shard straight from every rank's
         * input and store the result straight into every rank's output. No workspace, one round, two syncs:
         * A (every input ready, every output free: each peer's kernel has started) and B (every peer's
         * stores into my output have landed). In place is safe: position i of shard s is read and written,
         * on every rank, only by rank s's thread that owns it, which loads before it stores. */
        if (!sync_peers(p, c, e + 1)) return false;
        for (uint64_t pk = t0; pk < segp; pk += nt) {
            const uint64_t i = pk * V;
            const int nv = shard_valid<V>(p, r, i);
            if (nv <= 0) continue;
            const uint64_t ue = r * p.stride + i;
            const uint4 out = reduce_ranks<T, OP>(n, [&](int src) { return load_user<T>(p.zc[src], ue, nv, al, src != r); });
            store_user<T>(recv, ue, out, nv, al);
            for (int k = 1; k < n; k++) store_user<T>(p.zo[(r + k) % n], ue, out, nv, al);
        }
        return sync_peers(p, c, e + 2);
    }
    for (uint32_t rd = 0; rd < p.rounds; rd++, e += 2) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t hoff = half_off(p, e);
        char *mine = p.ws[r] + hoff;
        if (!zc) { /* copy-in, fused: my input into my staging */
            for (uint64_t pk = t0; pk < segp; pk += nt) {
                const uint64_t i = off + pk * V;
                if (ag) {
                    const int nv = shard_valid<V>(p, r, i);
                    if (nv > 0) st16(mine + pk * 16, load_user<T>(send, i, nv, al, false));
                } else {
                    for (int s = 0; s < n; s++) {
                        const int nv = shard_valid<V>(p, s, i);
                        if (nv > 0) st16(mine + (s * segp + pk) * 16, load_user<T>(send, s * p.stride + i, nv, al, false));
                    }
                }
            }
        }
        if (!sync_peers(p, c, e + 1)) return false;
        if (ag) {
            for (uint64_t pk = t0; pk < segp; pk += nt) {
                const uint64_t i = off + pk * V;
                const int nv = shard_valid<V>(p, r, i);
                if (nv <= 0) continue;
                for (int s = 0; s < n; s++) {
                    if (s == r && p.in_place) continue;
                    uint4 v;
                    if (s == r) v = load_user<T>(send, i, nv, al, false);
                    else if (zc) v = load_user<T>(p.zc[s], i, nv, al, true);
                    else v = ld_cg16(p.ws[s] + hoff + pk * 16);
                    store_user<T>(recv, s * p.stride + i, v, nv, al);
                }
            }
            continue;
        }
        const int s_lo = (two || rs) ? r : 0, s_hi = (two || rs) ? r + 1 : n;
        for (uint64_t pk = t0; pk < segp; pk += nt) {
            const uint64_t i = off + pk * V;
            for (int s = s_lo; s < s_hi; s++) {
                const int nv = shard_valid<V>(p, s, i);
                if (nv <= 0) continue;
                const uint64_t ue = s * p.stride + i, so = (s * segp + pk) * 16;
                const uint4 out = reduce_ranks<T, OP>(n, [&](int src) {
                    return zc ? load_user<T>(p.zc[src], ue, nv, al, src != r) : ld_cg16(p.ws[src] + hoff + so);
                });
                store_user<T>(recv, rs ? i : ue, out, nv, al);
                if (two) st16(mine + (n * segp + pk) * 16, out);
            }
        }
        if (!two) continue;
        if (!sync_peers(p, c, e + 2)) return false;
        for (uint64_t pk = t0; pk < segp; pk += nt) {
            const uint64_t i = off + pk * V;
            for (int k = 1; k < n; k++) {
                const int s = (r + k) % n;
                const int nv = shard_valid<V>(p, s, i);
                if (nv > 0) store_user<T>(recv, s * p.stride + i, ld_cg16(p.ws[s] + hoff + (n * segp + pk) * 16), nv, al);
            }
        }
    }
    /* peers read my send buffer: they must be done before my kernel ends (the descriptor's end sync) */
    if (zc && !two && !sync_peers(p, c, e + 1)) return false;
    return true;
}


template <> struct Family<SYMMEM_COLL_FAM_PULL> {
    template <typename T, int OP> static __device__ __forceinline__ bool run(const P &p, Ctx &c)
    {
        return run_pull<T, OP>(p, c);
    }
};

} // namespace symmem_k

SYMMEM_COLL_FAMILY_KERNELS(pull, SYMMEM_COLL_FAM_PULL, SYMMEM_COLL_FAM_PULL)
