/* The collective kernels: pull (one-shot and two-shot), push (two-shot and staged) and Lamport (one-shot
 * push without flags), plus the barrier. One template per family, instantiated for every dtype x redop of
 * the public X-macro lists; all-gather runs in the SUM instantiation of its dtype.
 *
 * Synchronisation (docs/collectives.md has the long form):
 *  - sync point: block b of rank r stores (epoch << 16 | tag) with st.release.sys into flags[b][r] of every
 *    peer, then polls its own flags[b][src] with ld.acquire.sys until each reaches the epoch. Only threads
 *    0..n-1 touch flags; __syncthreads() before (so the whole block's data precedes the release) and after
 *    (so the whole block's reads follow the acquire).
 *  - epochs are 64-bit and monotonic: the device state holds the last one used, every block reads it at
 *    kernel start, the last block to read it writes the value the kernel will end at (the state protocol
 *    below). Each round of any algorithm consumes two
 *    epochs (sync A = e+1, optional sync B = e+2), so the state stays even and round k of a call uses data
 *    half ((e_k / 2) & 1): consecutive rounds, also across calls, alternate halves.
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
#include <cuda_runtime.h>

#include "collectives/coll_internal.h"
#include "collectives/device.cuh"
#include "collectives/protocol.cuh"
#include "topology/transfer.h"

namespace symmem_k {

/* The Lamport family with round headers (p.lam_check, SYMMEM_LAMPORT_CHECK=1): its own instantiation, so
 * that the unchecked kernels carry no test of the switch (0.07-0.1 us per small call, session 6 run 2). */
constexpr int FAM_LAMPORT_CHECKED = SYMMEM_COLL_FAM_COUNT;

/* What every data kernel derives from its parameters: this thread's first position and the grid stride
 * (block b handles the same positions in every round and on every rank), the call's kind flags, and the
 * user buffers. */
struct Geo {
    int n, r;
    bool ag, rs, al;
    uint64_t segp, t0, nt;
    const char *send;
    char *recv;
    __device__ __forceinline__ explicit Geo(const P &p)
        : n(p.nranks), r(p.rank), ag(p.kind == SYMMEM_COLL_ALL_GATHER), rs(p.kind == SYMMEM_COLL_REDUCE_SCATTER),
          al(p.aligned != 0), segp(p.segp), t0((uint64_t)blockIdx.x * blockDim.x + threadIdx.x),
          nt((uint64_t)gridDim.x * blockDim.x), send(static_cast<const char *>(p.send)),
          recv(static_cast<char *>(p.recv))
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
                v[j] = load_user<T>(g.send, d * p.stride + i, nv, g.al, false);
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

/* ---- pull: one-shot (every rank reduces every shard) and two-shot (reduce own shard, gather) ---------- */
/* Half layout: staging[s][segp] packs (my input, shard-major; all-gather: my shard only), then for
 * two-shot all-reduce result[segp] (my reduced shard). */
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
        /* Zero copy both ways (coll.c: zero_copy, zero_copy_out): reduce my shard straight from every rank's
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
    /* peers read my send buffer: they must be done before my kernel ends (epochs_of counts this sync) */
    if (zc && !two && !sync_peers(p, c, e + 1)) return false;
    return true;
}

/* ---- push: two-shot (stores to every peer interleaved) and staged (pass q: only to rank (r+1+q) mod n) */
/* Half layout: slots[src][segp] (reduce-scatter input pushed by src; not for all-gather), then
 * gather[s][segp] (reduced shard s pushed by its owner; all-reduce and all-gather). */
template <typename T, int OP> __device__ __forceinline__ bool run_push(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool ag = g.ag, rs = g.rs, al = g.al;
    const uint64_t segp = g.segp, t0 = g.t0, nt = g.nt;
    const char *send = g.send;
    char *recv = g.recv;
    const bool staged = p.algo == SYMMEM_ALGO_STAGED;
    const bool zo = p.zo_on != 0; /* all-reduce: results straight into every rank's recv (coll.c, zero_copy_out) */
    const uint64_t gat = ag ? 0 : (uint64_t)n * segp * 16; /* offset of gather[] in a half */
    uint64_t e = c.epoch;
    for (uint32_t rd = 0; rd < p.rounds; rd++, e += 2) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t hoff = half_off(p, e);
        char *mine = p.ws[r] + hoff;
        if (ag) {
            /* my shard to every peer's gather[r] (and to my own output) */
            if (staged) {
                for (int q = 0; q < n - 1; q++) {
                    const int d = (r + 1 + q) % n;
                    for (uint64_t pk = t0; pk < segp; pk += nt) {
                        const uint64_t i = off + pk * V;
                        const int nv = shard_valid<V>(p, r, i);
                        if (nv > 0) st16(p.ws[d] + hoff + gat + (r * segp + pk) * 16, load_user<T>(send, i, nv, al, false));
                    }
                }
            }
            for (uint64_t pk = t0; pk < segp; pk += nt) {
                const uint64_t i = off + pk * V;
                const int nv = shard_valid<V>(p, r, i);
                if (nv <= 0) continue;
                const uint4 v = load_user<T>(send, i, nv, al, false);
                if (!staged)
                    for (int k = 1; k < n; k++) st16(p.ws[(r + k) % n] + hoff + gat + (r * segp + pk) * 16, v);
                if (!p.in_place) store_user<T>(recv, r * p.stride + i, v, nv, al);
            }
        } else {
            /* reduce-scatter push: shard d of my input into slot r of rank d */
            if (staged) {
                for (int q = 0; q < n - 1; q++) {
                    const int d = (r + 1 + q) % n;
                    for (uint64_t pk = t0; pk < segp; pk += nt) {
                        const uint64_t i = off + pk * V;
                        const int nv = shard_valid<V>(p, d, i);
                        if (nv > 0) st16(p.ws[d] + hoff + (r * segp + pk) * 16, load_user<T>(send, d * p.stride + i, nv, al, false));
                    }
                }
            } else {
                for (uint64_t pk = t0; pk < segp; pk += nt) push_shards<T, false>(p, g, hoff, off + pk * V, pk);
            }
        }
        if (!sync_peers(p, c, e + 1)) return false;
        if (!ag) {
            /* reduce my shard: my own input and the slots the peers pushed, in rank order */
            for (uint64_t pk = t0; pk < segp; pk += nt) {
                const uint64_t i = off + pk * V;
                const int nv = shard_valid<V>(p, r, i);
                if (nv <= 0) continue;
                const uint64_t ue = r * p.stride + i;
                const uint4 out = reduce_ranks<T, OP>(n, [&](int src) {
                    return src == r ? load_user<T>(send, ue, nv, al, false) : ld_cg16(mine + (src * segp + pk) * 16);
                });
                store_user<T>(recv, rs ? i : ue, out, nv, al);
                if (rs) continue;
                if (staged) st16(mine + gat + (r * segp + pk) * 16, out); /* pushed pass by pass below */
                else if (zo)
                    for (int k = 1; k < n; k++) store_user<T>(p.zo[(r + k) % n], ue, out, nv, al);
                else
                    for (int k = 1; k < n; k++) st16(p.ws[(r + k) % n] + hoff + gat + (r * segp + pk) * 16, out);
            }
            if (rs) continue;
            if (staged) {
                for (int q = 0; q < n - 1; q++) {
                    const int d = (r + 1 + q) % n;
                    for (uint64_t pk = t0; pk < segp; pk += nt) {
                        const uint64_t i = off + pk * V;
                        const int nv = shard_valid<V>(p, r, i);
                        if (nv > 0) {
                            const uint64_t o = gat + (r * segp + pk) * 16;
                            const uint4 v = ld_cg16(mine + o); /* same thread wrote it above */
                            if (zo) store_user<T>(p.zo[d], r * p.stride + i, v, nv, al);
                            else st16(p.ws[d] + hoff + o, v);
                        }
                    }
                }
            }
            if (zo) {
                /* Every result is in place already: no gather. Only the call's last round waits (sync B), so
                 * that every peer's stores into my recv precede my kernel's end; the rounds before need no
                 * second sync (the next round's sync A keeps the halves' reuse safe). */
                if (rd + 1 == p.rounds && !sync_peers(p, c, e + 2)) return false;
                continue;
            }
            if (!sync_peers(p, c, e + 2)) return false;
        }
        /* gather: the shards the peers pushed into my memory */
        for (uint64_t pk = t0; pk < segp; pk += nt) {
            const uint64_t i = off + pk * V;
            for (int k = 1; k < n; k++) {
                const int s = (r + k) % n;
                const int nv = shard_valid<V>(p, s, i);
                if (nv > 0) store_user<T>(recv, s * p.stride + i, ld_cg16(mine + gat + (s * segp + pk) * 16), nv, al);
            }
        }
    }
    return true;
}

/* One-shot (all-reduce: every rank pushes the whole round into slot r of every peer, n shards; reduce-
 * scatter: shard d for rank d), then every rank reduces what it needs from its own slots. */
template <typename T, int OP, bool CHK> __device__ __forceinline__ bool run_lamport(const P &p, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const Geo g(p);
    const int n = g.n, r = g.r;
    const bool rs = g.rs, al = g.al;
    const uint64_t segp = g.segp, t0 = g.t0, nt = g.nt;
    const char *send = g.send;
    char *recv = g.recv;
    const uint64_t npos = rs ? segp : (uint64_t)n * segp, slot = npos * 16;
    uint64_t j = c.lseq;
    for (uint32_t rd = 0; rd < p.rounds; rd++, j++) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t boff = p.lam_off + (j % 3) * p.lam_buf_bytes;
        lamport_hdr_push<CHK>(p, j);
        for (uint64_t q = t0; q < npos; q += nt) {
            if (rs) {
                push_shards<T, true>(p, g, boff, off + q * V, q); /* slot = segp packs here */
            } else {
                const int s = (int)(q / segp);
                const uint64_t i = off + (q % segp) * V;
                const int nv = shard_valid<V>(p, s, i);
                if (nv <= 0) continue;
                const uint4 v = fix_pack<T>(load_user<T>(send, s * p.stride + i, nv, al, false));
                for (int k = 1; k < n; k++) st16(p.ws[(r + k) % n] + boff + r * slot + q * 16, v);
            }
        }
        if (threadIdx.x == 0) late_check(p, c); /* while the pushes travel */
        if (!lamport_hdr_check<CHK>(p, c, j)) return false;
        bool fail = false;
        char *mine = p.ws[r] + boff;
        for (uint64_t q = t0; q < npos && !fail; q += nt) {
            const int s = rs ? r : (int)(q / segp);
            const uint64_t i = off + (rs ? q : q % segp) * V;
            const int nv = shard_valid<V>(p, s, i);
            if (nv <= 0) continue;
            const uint64_t ue = s * p.stride + i;
            const uint4 out = reduce_ranks<T, OP>(n, [&](int src) -> uint4 {
                if (src == r) return fix_pack<T>(load_user<T>(send, ue, nv, al, false));
                return lamport_take(p, c, mine + src * slot + q * 16, src, j, fail);
            });
            if (!fail) store_user<T>(recv, rs ? i : ue, out, nv, al);
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
    const bool al = g.al;
    const uint64_t segp = g.segp, t0 = g.t0, nt = g.nt;
    const char *send = g.send;
    char *recv = g.recv;
    const uint64_t gat = (uint64_t)n * segp * 16; /* offset of gather[] in a Lamport buffer */
    uint64_t j = c.lseq;
    for (uint32_t rd = 0; rd < p.rounds; rd++, j++) {
        const uint64_t off = (uint64_t)rd * segp * V;
        const uint64_t boff = p.lam_off + (j % 3) * p.lam_buf_bytes;
        char *mine = p.ws[r] + boff;
        lamport_hdr_push<CHK>(p, j);
        for (uint64_t pk = t0; pk < segp; pk += nt) push_shards<T, true>(p, g, boff, off + pk * V, pk);
        if (threadIdx.x == 0) late_check(p, c); /* while the pushes travel */
        if (!lamport_hdr_check<CHK>(p, c, j)) return false;
        bool fail = false;
        /* my shard: reduce in rank order, push the result to every peer's gather[r], keep my copy */
        for (uint64_t pk = t0; pk < segp && !fail; pk += nt) {
            const uint64_t i = off + pk * V;
            const int nv = shard_valid<V>(p, r, i);
            if (nv <= 0) continue;
            const uint64_t ue = r * p.stride + i;
            const uint4 out = fix_pack<T>(reduce_ranks<T, OP>(n, [&](int src) -> uint4 {
                if (src == r) return fix_pack<T>(load_user<T>(send, ue, nv, al, false));
                return lamport_take(p, c, mine + (src * segp + pk) * 16, src, j, fail);
            }));
            if (fail) break;
            for (int k = 1; k < n; k++) st16(p.ws[(r + k) % n] + boff + gat + (r * segp + pk) * 16, out);
            store_user<T>(recv, ue, out, nv, al);
        }
        /* the other shards, as their owners pushed them */
        for (uint64_t pk = t0; pk < segp && !fail; pk += nt) {
            const uint64_t i = off + pk * V;
            for (int k = 1; k < n && !fail; k++) {
                const int s = (r + k) % n;
                const int nv = shard_valid<V>(p, s, i);
                if (nv <= 0) continue;
                const uint4 v = lamport_take(p, c, mine + gat + (s * segp + pk) * 16, s, j, fail);
                if (!fail) store_user<T>(recv, s * p.stride + i, v, nv, al);
            }
        }
        if (__syncthreads_or(fail)) return false;
    }
    return true;
}

/* Epochs and Lamport rounds a kernel consumes, from its parameters alone (what the state protocol
 * publishes; each run_* uses exactly these). */
template <int FAM> __device__ __forceinline__ uint64_t epochs_of(const P &p)
{
    if (FAM == SYMMEM_COLL_FAM_LAMPORT || FAM == FAM_LAMPORT_CHECKED) return 0;
    const bool extra = FAM == SYMMEM_COLL_FAM_PULL && p.zc_on &&
                       !(p.kind == SYMMEM_COLL_ALL_REDUCE && p.algo == SYMMEM_ALGO_TWOSHOT_PULL);
    return 2 * (uint64_t)p.rounds + (extra ? 2 : 0);
}

template <typename T, int OP, int FAM>
__global__ void __launch_bounds__(SYMMEM_COLL_THREADS, 1) coll_kernel(const __grid_constant__ symmem_coll_params_t p)
{
    Ctx c;
    const bool lamport = FAM == SYMMEM_COLL_FAM_LAMPORT || FAM == FAM_LAMPORT_CHECKED;
    if (!prologue(p, c, epochs_of<FAM>(p), lamport ? p.rounds : 0)) {
        poison_output<T>(p);
        return;
    }
    bool ok;
    if (FAM == SYMMEM_COLL_FAM_PULL) ok = run_pull<T, OP>(p, c);
    else if (FAM == SYMMEM_COLL_FAM_PUSH) ok = run_push<T, OP>(p, c);
    else if (p.kind == SYMMEM_COLL_ALL_REDUCE && p.algo == SYMMEM_ALGO_TWOSHOT_LAMPORT)
        ok = run_lamport_two<T, OP, FAM == FAM_LAMPORT_CHECKED>(p, c);
    else ok = run_lamport<T, OP, FAM == FAM_LAMPORT_CHECKED>(p, c);
    if (!ok) poison_output<T>(p);
    block_end(p, c);
}

__global__ void barrier_kernel(const __grid_constant__ symmem_coll_params_t p)
{
    Ctx c;
    if (!prologue(p, c, 2, 0)) return;
    sync_peers(p, c, c.epoch + 1);
    block_end(p, c);
}

__global__ void fill_empty_kernel(uint4 *p, size_t n16)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x)
        p[i] = lamport_empty4();
}

/* Instantiation tables, generated from the public lists (never a second list kept by hand). */
#define SYMMEM_K_DTYPE_CHECK_(name, value, ctype, bytes)                                                   \
    static_assert(sizeof(ctype) == (bytes), "SYMMEM_DTYPE_LIST size of " #name);
SYMMEM_DTYPE_LIST(SYMMEM_K_DTYPE_CHECK_)
#undef SYMMEM_K_DTYPE_CHECK_

template <typename T, int FAM> const void *kernel_for_op(int op)
{
    switch (op) {
#define SYMMEM_K_OP_(name, value)                                                                          \
    case value: return reinterpret_cast<const void *>(&coll_kernel<T, value, FAM>);
        SYMMEM_REDOP_LIST(SYMMEM_K_OP_)
#undef SYMMEM_K_OP_
    default: return nullptr;
    }
}

template <int FAM> const void *kernel_for(int dtype, int op)
{
    switch (dtype) {
#define SYMMEM_K_DTYPE_(name, value, ctype, bytes)                                                         \
    case value: return kernel_for_op<ctype, FAM>(op);
        SYMMEM_DTYPE_LIST(SYMMEM_K_DTYPE_)
#undef SYMMEM_K_DTYPE_
    default: return nullptr;
    }
}

} // namespace symmem_k

namespace symmem_k {

/* Load one kernel into the current device's context now (cudaFuncGetAttributes needs the loaded function,
 * so it forces CUDA's lazy loading), and note its registers and how many of its blocks fit on one SM. */
static int preload_one(const void *fn, int threads, symmem_coll_preload_info_t *info)
{
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, fn);
    if (e != cudaSuccess) return (int)e;
    int per_sm = 0;
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, 0);
    if (e != cudaSuccess) return (int)e;
    info->kernels++;
    if (a.numRegs > info->max_regs) info->max_regs = a.numRegs;
    if (info->min_blocks_per_sm < 0 || per_sm < info->min_blocks_per_sm) info->min_blocks_per_sm = per_sm;
    return 0;
}

template <typename T, int FAM> static int preload_ops(symmem_coll_preload_info_t *info)
{
    int e = 0;
#define SYMMEM_K_PRELOAD_OP_(name, value)                                                                  \
    if (e == 0) e = preload_one(reinterpret_cast<const void *>(&coll_kernel<T, value, FAM>), SYMMEM_COLL_THREADS, info);
    SYMMEM_REDOP_LIST(SYMMEM_K_PRELOAD_OP_)
#undef SYMMEM_K_PRELOAD_OP_
    return e;
}

template <int FAM> static int preload_family(symmem_coll_preload_info_t *info)
{
    int e = 0;
#define SYMMEM_K_PRELOAD_DT_(name, value, ctype, bytes)                                                    \
    if (e == 0) e = preload_ops<ctype, FAM>(info);
    SYMMEM_DTYPE_LIST(SYMMEM_K_PRELOAD_DT_)
#undef SYMMEM_K_PRELOAD_DT_
    return e;
}

} // namespace symmem_k

#define SYMMEM_K_BARRIER_THREADS (32 * ((SYMMEM_MAX_RANKS + 31) / 32))

/* Why this exists: since CUDA 12.2 kernels are loaded lazily, at their first launch in a context, and
 * loading a kernel may wait until the kernels running in that context finish (CUDA programming guide,
 * "Lazy Loading", concurrent execution hazard). Our kernels spin until the peers' kernels arrive. When one
 * host thread drives several ranks (symmem_comm_init_all), it enqueues rank 0's operation, then rank 1's,
 * ...: if a kernel is loaded for the first time while rank 0's collective on that GPU waits for a
 * co-located rank's kernel that the thread has not enqueued yet, the load waits for the collective and the
 * collective for the load -- until the timeout. Loading every kernel of the library at communicator init
 * removes the library's own kernels from that hazard (user kernels: docs/collectives.md, "Streams"). */
extern "C" int symmem_coll_preload(symmem_coll_preload_info_t *info)
{
    using namespace symmem_k;
    info->kernels = 0;
    info->max_regs = 0;
    info->min_blocks_per_sm = -1;
    int e = preload_family<SYMMEM_COLL_FAM_PULL>(info);
    if (e == 0) e = preload_family<SYMMEM_COLL_FAM_PUSH>(info);
    if (e == 0) e = preload_family<SYMMEM_COLL_FAM_LAMPORT>(info);
    if (e == 0) e = preload_family<FAM_LAMPORT_CHECKED>(info);
    /* the barrier, the fill and the probe's copy do not count for min_blocks_per_sm (small or optional) */
    symmem_coll_preload_info_t small = {0, 0, -1};
    if (e == 0) e = preload_one(reinterpret_cast<const void *>(&barrier_kernel), SYMMEM_K_BARRIER_THREADS, &small);
    if (e == 0) e = preload_one(reinterpret_cast<const void *>(&fill_empty_kernel), 256, &small);
    if (e == 0 && (e = (int)topo_copy_preload()) == 0) small.kernels++; /* the init probe's (topology/probe.c) */
    if (e == 0) info->kernels += small.kernels;
    return e;
}

static cudaError_t launch(const void *fn, const symmem_coll_params_t *p, int grid, int threads, void *stream, int pdl)
{
    void *args[] = {const_cast<symmem_coll_params_t *>(p)};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.stream = static_cast<cudaStream_t>(stream);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelExC(&cfg, fn, args);
}

extern "C" int symmem_coll_launch(const symmem_coll_params_t *p, int family, int grid, int threads, void *stream, int pdl)
{
    using namespace symmem_k;
    /* all-gather moves bytes: it runs in the SUM instantiation of its dtype */
    const int op = p->kind == SYMMEM_COLL_ALL_GATHER ? (int)SYMMEM_OP_SUM : p->op;
    const void *fn = nullptr;
    switch (family) {
    case SYMMEM_COLL_FAM_PULL: fn = kernel_for<SYMMEM_COLL_FAM_PULL>(p->dtype, op); break;
    case SYMMEM_COLL_FAM_PUSH: fn = kernel_for<SYMMEM_COLL_FAM_PUSH>(p->dtype, op); break;
    case SYMMEM_COLL_FAM_LAMPORT:
        fn = p->lam_check ? kernel_for<FAM_LAMPORT_CHECKED>(p->dtype, op) : kernel_for<SYMMEM_COLL_FAM_LAMPORT>(p->dtype, op);
        break;
    default: break;
    }
    if (!fn || threads < 32 || threads > SYMMEM_COLL_THREADS || threads % 32) return (int)cudaErrorInvalidValue;
    return (int)launch(fn, p, grid, threads, stream, pdl);
}

extern "C" int symmem_coll_launch_barrier(const symmem_coll_params_t *p, void *stream, int pdl)
{
    /* one block; the flag threads are 0..n-1 */
    return (int)launch(reinterpret_cast<const void *>(&symmem_k::barrier_kernel), p, 1, SYMMEM_K_BARRIER_THREADS,
                       stream, pdl);
}

extern "C" int symmem_coll_launch_fill_empty(void *ptr, size_t bytes, void *stream)
{
    const size_t n16 = bytes / 16;
    if (n16 == 0) return 0;
    symmem_k::fill_empty_kernel<<<(unsigned)((n16 + 255) / 256 < 1024 ? (n16 + 255) / 256 : 1024), 256, 0,
                                  static_cast<cudaStream_t>(stream)>>>(static_cast<uint4 *>(ptr), n16);
    return (int)cudaGetLastError();
}
