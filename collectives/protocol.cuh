/* The protocol primitives every collective kernel shares (kernels.cu, fused_kernels.cu): the per-kernel
 * context, the state protocol (prologue, late_check, block_end), flag sync points with timeouts and tag
 * checks, the error report, the Lamport take and round headers, and the NaN outputs after an error.
 * docs/collectives.md, "Synchronisation protocol", has the long form. Internal. */
#ifndef SYMMEM_COLLECTIVES_PROTOCOL_CUH
#define SYMMEM_COLLECTIVES_PROTOCOL_CUH

#include <stdint.h>

#include "collectives/kernel_abi.h"
#include "collectives/device.cuh"

namespace symmem_k {

typedef symmem_coll_params_t P;

struct Ctx {
    uint64_t epoch; /* epoch at kernel start (even) */
    uint64_t call;  /* sequence number of this operation */
    uint64_t lseq;  /* Lamport round at kernel start */
    /* thread 0 only: whether late_check is still to run */
    bool unchecked;
    /* thread 0 only, with a late publish (SYMMEM_COLL_PF_LATE_PUBLISH): what the kernel leaves behind */
    uint64_t next_epoch, next_lseq, next_calls, next_blocks;
};

__device__ __forceinline__ uint64_t *flag_slot(char *ws, int block, int src)
{
    return reinterpret_cast<uint64_t *>(ws) + (size_t)block * SYMMEM_MAX_RANKS + src;
}

__device__ __forceinline__ bool aborted(const P &p) { return *reinterpret_cast<volatile uint32_t *>(&p.st->abort) != 0; }

/* Record an error (first caller wins) and raise the abort flag. */
inline __device__ __noinline__ void report(const P &p, const Ctx &c, uint32_t status, uint32_t reason, int peer,
                                    uint64_t epoch, uint64_t seen)
{
    if (atomicCAS(&p.st->abort, 0u, 1u) != 0u) return;
    volatile symmem_coll_error_record_t *r = p.err;
    r->reason = reason;
    r->kind = p.kind;
    r->algo = p.algo;
    r->rank = p.rank;
    r->peer = peer;
    r->call = c.call;
    r->epoch = epoch;
    r->seen = seen;
    r->block = blockIdx.x;
    r->tag = p.tag;
    /* Nonzero: only that many blocks of this kernel had counted themselves so far, i.e. the rest never
     * became resident (the state protocol resets `started` when the last block counts: at its arrival, or,
     * with a late publish, at its first sync point or push, which no wait precedes). */
    r->started = gridDim.x == 1 ? 0u : *reinterpret_cast<volatile uint32_t *>(&p.st->started);
    r->grid = gridDim.x;
    __threadfence_system();
    r->status = status;
    __threadfence_system();
}

/* Poll my flag from `peer` until it reaches epoch e. A flag at exactly e must carry my tag (same
 * arguments); a later epoch means the peer is already past this point (its tag is another call's). */
template <bool ACQUIRE = true>
__device__ __forceinline__ bool wait_flag(const P &p, const Ctx &c, const uint64_t *f, uint64_t e, int peer)
{
    const uint64_t want = e << 16;
    uint64_t start = 0, v;
    for (uint32_t spin = 0;; spin++) {
        if (ACQUIRE) {
            v = symmem_ld_acquire_u64(f);
        } else {
            v = symmem_ld_relaxed_u64(f);
        }
        if ((int64_t)((v & ~(uint64_t)0xffff) - want) >= 0) break;
        if ((spin & 63u) == 63u) {
            if (aborted(p)) return false;
            const uint64_t now = symmem_globaltimer_ns();
            if (start == 0) {
                start = now;
            } else if (p.timeout_ns && now - start > p.timeout_ns) {
                report(p, c, SYMMEM_TIMEOUT, SYMMEM_COLL_ERR_TIMEOUT, peer, e, v);
                return false;
            }
        }
    }
    if ((v >> 16) == e && (uint32_t)(v & 0xffffu) != p.tag) {
        report(p, c, SYMMEM_INVALID_USAGE, SYMMEM_COLL_ERR_MISMATCH, peer, e, v);
        return false;
    }
    return true;
}

/* The state protocol. Every value a kernel leaves in the state is known when it starts (epochs and Lamport
 * rounds used are functions of the parameters), so the state advances at kernel start, before the kernel
 * waits for its predecessor, and that wait is the only thing left on the critical path:
 *  1. thread 0 of every block reads the state (epoch, lseq, calls, blocks, abort), then counts its block
 *     in `started` (the atomic is issued after the loads returned: their values went to shared memory);
 *  2. the block that finds itself the last to count writes the new state (every block has read the old
 *     one by then), resets `started`, and fences (sm_90+; older GPUs have no PDL, so no early reader):
 *     the new state is visible on the whole GPU before
 *  3. thread 0 executes griddepcontrol.launch_dependents (per block: the first execution in a block
 *     counts, so no other thread may execute it). With programmatic dependent launch (PDL) the next
 *     kernel of the stream is launched only once every block of this one has done so, hence after the
 *     new state is visible: it runs its own steps 1-3 while this kernel still moves data;
 *  4. every thread waits for the predecessor (griddepcontrol.wait: completion and visibility of all its
 *     memory operations; a no-op without PDL, where the kernel starts only after it anyway).
 * A predecessor that is not one of ours (a user kernel, a copy) starts after our previous kernel
 * triggered, so the chain of launches still orders every early read after the publish it needs. The
 * steps before the wait cost nothing in a CUDA graph or a back-to-back stream, where they overlap the
 * predecessor's tail (taking them off the path after the wait saved 0.45-0.6 us per small call on two
 * H200s); a kernel that starts on an idle stream pays them (a few L2 round trips).
 * Errors: a block that counts `started` >= the grid size shares its state with another kernel of this
 * communicator (used from two streams at once): reported, the kernel exits. At its end every block adds
 * one to `ended` without waiting; late_check() (called where thread 0 would otherwise only wait: after its
 * first flag store or its pushes, at the latest at the block's end, so after the wait) loads `ended` and
 * reports `ended` < `blocks` read before the wait: an earlier kernel of this communicator is
 * still running though this one's predecessor completed, i.e. another stream. That kernel then stops at
 * its next poll (the abort flag). (`ended` may be ahead of `blocks`: this kernel's own first blocks can
 * end first.) An aborted communicator's state no longer matters: every kernel exits at its prologue or
 * its next poll.
 * Late publish (SYMMEM_COLL_PF_LATE_PUBLISH: no kernel of this communicator is launched with PDL, as where
 * ranks share a GPU): the next kernel of the stream starts only once this one completed, so nothing reads
 * the state early, and the count of step 1 and step 2 move into late_check() (where thread 0 would only
 * wait: its round trip overlaps the flags'), after the block's reads returned as before: the count, a count
 * >= the grid size reported, the last block's new state, without a fence (the kernel's completion orders it
 * before the next kernel's reads). The kernel never triggers: its dependents, if any were launched with PDL
 * after all, start at its completion. What is left before the block's first flag store is one round trip,
 * the loads of step 1, where the count and the last block's fence added more. (The count's value cannot
 * wait in the context from the prologue on: the context lives in local memory, for report(), and storing
 * the value there waits for the atomic.) */
__device__ __forceinline__ uint64_t *state_blocks()
{
    __shared__ uint64_t v; /* `blocks` as read by thread 0, for its late_check */
    return &v;
}

__device__ __forceinline__ bool prologue(const P &p, Ctx &c, uint64_t epochs_used, uint64_t lamport_rounds)
{
    __shared__ uint64_t sh[3];
    __shared__ uint32_t sh_abort;
    const bool late = (p.flags & SYMMEM_COLL_PF_LATE_PUBLISH) != 0;
    c.unchecked = false;
    if (threadIdx.x == 0) {
        volatile symmem_coll_dev_state_t *st = p.st;
        const uint32_t ab = st->abort;
        const uint64_t epoch = st->epoch, calls = st->calls, lseq = st->lseq, blocks = st->blocks;
        sh_abort = ab;
        sh[0] = epoch;
        sh[1] = calls;
        sh[2] = lseq;
        *state_blocks() = blocks;
        if (ab == 0) {
            c.call = calls;
            c.epoch = epoch;
            c.next_epoch = epoch + epochs_used;
            c.next_lseq = lseq + lamport_rounds;
            c.next_calls = calls + 1;
            c.next_blocks = blocks + gridDim.x;
            c.unchecked = true;
            if (!late) {
                /* issued once the loads returned: their values went to shared memory */
                const uint32_t started = gridDim.x == 1 ? 0u : atomicAdd(&p.st->started, 1u);
                if (started >= gridDim.x) {
                    report(p, c, SYMMEM_INVALID_USAGE, SYMMEM_COLL_ERR_CONCURRENT, -1, epoch, started);
                    sh_abort = 1;
                    c.unchecked = false;
                } else if (started == gridDim.x - 1) {
                    st->epoch = c.next_epoch;
                    st->lseq = c.next_lseq;
                    st->calls = c.next_calls;
                    st->blocks = c.next_blocks;
                    if (gridDim.x > 1) st->started = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                    __threadfence(); /* for the next kernel's early read (PDL exists from sm_90 on) */
#endif
                }
            }
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        if (!late) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    }
    __syncthreads();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (!late) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    c.epoch = sh[0];
    c.call = sh[1];
    c.lseq = sh[2];
    return sh_abort == 0;
}

/* Thread 0: the concurrency checks of the state protocol and, with a late publish, the count and the
 * publish, once per kernel, where its round trip overlaps a wait. Its loads are issued here, not in the
 * prologue: the context lives in local memory (report() takes it), and a value stored there from a load in
 * flight would make thread 0, and with it the block's next barrier, wait for that load. */
__device__ __forceinline__ void late_check(const P &p, Ctx &c)
{
    if (!c.unchecked) return;
    c.unchecked = false;
    const uint64_t ended = reinterpret_cast<volatile symmem_coll_dev_state_t *>(p.st)->ended;
    if (p.flags & SYMMEM_COLL_PF_LATE_PUBLISH) {
        const uint32_t started = gridDim.x == 1 ? 0u : atomicAdd(&p.st->started, 1u);
        if (started >= gridDim.x) {
            report(p, c, SYMMEM_INVALID_USAGE, SYMMEM_COLL_ERR_CONCURRENT, -1, c.epoch, started);
            return;
        }
        if (started == gridDim.x - 1) {
            volatile symmem_coll_dev_state_t *st = p.st;
            st->epoch = c.next_epoch;
            st->lseq = c.next_lseq;
            st->calls = c.next_calls;
            st->blocks = c.next_blocks;
            if (gridDim.x > 1) st->started = 0;
        }
    }
    const uint64_t blocks = *state_blocks();
    if ((int64_t)(ended - blocks) < 0)
        report(p, c, SYMMEM_INVALID_USAGE, SYMMEM_COLL_ERR_CONCURRENT, -1, c.epoch, blocks - ended);
}

/* End of a block that passed the prologue, on every path (success or failure): the concurrency check if
 * not done yet, and count the block in `ended` (a reduction: thread 0 does not wait for it). */
__device__ __forceinline__ void block_end(const P &p, Ctx &c)
{
    __syncthreads();
    if (threadIdx.x != 0) return;
    late_check(p, c);
    atomicAdd(reinterpret_cast<unsigned long long *>(&p.st->ended), 1ull);
}

/* Sync point with epoch e among the same-numbered blocks of all ranks. False: abort (return at once).
 * `entry`: the kernel's first sync point, before which this block stored nothing that peers read after it;
 * where the data lies in device memory (SYMMEM_COLL_PF_DEVICE_DATA) its flags go relaxed, without the
 * release's system-wide fence (MEMBAR.SYS on sm_90) and the acquire's L1 invalidation, because what the
 * peers read after it (this rank's input, and the output they store into) only the kernels before this one
 * on its stream touched, and those completed before this kernel started (PDL: before griddepcontrol.wait
 * returned), so their stores are in this GPU's L2, where a peer's loads and stores of this GPU's memory are
 * served; the poll's exit is a branch every later load of the block follows (no GPU issues loads past an
 * unresolved branch) and the barrier after it keeps the compiler from hoisting them. Host memory (the PCIe
 * lab) keeps the release: a completed kernel's posted writes to it are not ordered that way. */
__device__ __forceinline__ bool sync_peers(const P &p, Ctx &c, uint64_t e, bool entry = false)
{
    __syncthreads();
    bool ok = true;
    const int t = threadIdx.x;
    const bool flagger = t < p.nranks && t != p.rank;
    const bool relaxed = entry && (p.flags & SYMMEM_COLL_PF_DEVICE_DATA) != 0;
    uint64_t *const out = flag_slot(p.ws[t < p.nranks ? t : 0], blockIdx.x, p.rank);
    const uint64_t value = (e << 16) | p.tag;
    if (flagger) {
        if (relaxed)
            symmem_st_relaxed_u64(out, value);
        else
            symmem_st_release_u64(out, value);
    }
    if (t == 0) late_check(p, c); /* while the flags travel */
    if (flagger) {
        const uint64_t *in = flag_slot(p.ws[p.rank], blockIdx.x, t);
        ok = relaxed ? wait_flag<false>(p, c, in, e, t) : wait_flag<true>(p, c, in, e, t);
    }
    return __syncthreads_and(ok) != 0;
}

/* ---- Lamport: pushes without flags or barriers -------------------------------------------------------
 * The sender stores 16-byte packs (no word the empty sentinel: fix_pack) into a slot of the receiver's
 * Lamport buffer; the receiver polls its own memory until no word is the sentinel, then rewrites the pack
 * to empty in place (the reading thread clears what it read), so buffers are empty again without any
 * barrier. Round j uses Lamport buffer j % 3 (lseq counts rounds on the device). Triple buffering: a peer
 * writes buffer j % 3 again in round j + 3, which it reaches only after reading what I pushed in rounds
 * j+1 and j+2, which this block pushes after it finished (and cleared) round j; __syncthreads() between
 * rounds orders the block's clears before its next pushes. Every slot pushed in a round is polled (and
 * cleared) in that round: sender and receiver compute the same shard_valid. */

/* Take the pack at `a` (my memory) once no word is the sentinel, and mark it empty again. On abort or
 * timeout (reported, naming `src` and round j) sets `fail` and returns zeros; a set `fail` stops waiting. */
__device__ __forceinline__ uint4 lamport_take(const P &p, const Ctx &c, char *a, int src, uint64_t j, bool &fail)
{
    uint64_t start = 0;
    for (uint32_t spin = 0;; spin++) {
        const uint4 v = ld_volatile16(a);
        if (lamport_full(v)) {
            st16(a, lamport_empty4());
            return v;
        }
        if (fail) return zero4();
        if ((spin & 63u) == 63u) {
            if (aborted(p)) {
                fail = true;
                return zero4();
            }
            const uint64_t now = symmem_globaltimer_ns();
            if (start == 0) {
                start = now;
            } else if (p.timeout_ns && now - start > p.timeout_ns) {
                report(p, c, SYMMEM_TIMEOUT, SYMMEM_COLL_ERR_TIMEOUT, src, j, ((uint64_t)v.x << 32) | v.y);
                fail = true;
                return zero4();
            }
        }
    }
}

/* Reduce the n ranks' packs in rank order, as reduce_ranks does (the same operations in the same order, so
 * the same bits), where rank src's pack is the Lamport pack at addr(src) (taken: lamport_take) except for
 * rank `own`, whose pack is own_pack() (own < 0: every rank's is taken). The first load of every pack of a
 * group of four is issued before any is examined: a poll loop cannot start before the one ahead of it
 * exits (its exit depends on its load), so taking one pack after another costs a memory round trip per
 * rank, this about one per group. */
template <typename T, int OP, typename Addr, typename Own>
__device__ __forceinline__ uint4 lamport_reduce(const P &p, const Ctx &c, int n, int own, Addr addr, Own own_pack,
                                                uint64_t j, bool &fail)
{
    constexpr int V = Pack<T>::V, G = 4;
    float acc[V];
    for (int s0 = 0; s0 < n; s0 += G) {
        uint4 v[G];
#pragma unroll
        for (int k = 0; k < G; k++) {
            const int s = s0 + k;
            if (s < n) v[k] = s == own ? own_pack() : ld_volatile16(addr(s));
        }
#pragma unroll
        for (int k = 0; k < G; k++) {
            const int s = s0 + k;
            if (s >= n) continue;
            if (s != own) {
                if (lamport_full(v[k]))
                    st16(addr(s), lamport_empty4());
                else
                    v[k] = lamport_take(p, c, addr(s), s, j, fail);
            }
            float f[V];
            Conv<T>::unpack(v[k], f);
#pragma unroll
            for (int e = 0; e < V; e++) acc[e] = s == 0 ? f[e] : redop<OP>(acc[e], f[e]);
        }
    }
    return Conv<T>::pack(acc);
}

/* Take the packs e < E of a batch whose bit is set in `want` (pack e at addr(e) in my memory, pushed by rank
 * src(e)) once no word of it is the sentinel, and mark each empty again. v[e] holds the caller's first load
 * of pack e. Every pack still missing is reloaded in the same pass, so packs that arrive together cost one
 * memory round trip between them, where lamport_take after lamport_take costs one each after the first
 * arrives. Abort and timeout as lamport_take (the report names the first missing pack's rank); the missing
 * packs are zeros then. */
template <int E, typename Addr, typename Src>
__device__ __forceinline__ void lamport_take_batch(const P &p, const Ctx &c, uint4 (&v)[E], uint32_t want, Addr addr,
                                                   Src src, uint64_t j, bool &fail)
{
    uint32_t pending = 0;
#pragma unroll
    for (int e = 0; e < E; e++) {
        if (!((want >> e) & 1u)) continue;
        if (lamport_full(v[e]))
            st16(addr(e), lamport_empty4());
        else
            pending |= 1u << e;
    }
    if (pending != 0 && (pending & (pending - 1)) == 0) {
        /* one pack missing: lamport_take's tight loop, since with a single pack to watch this pass's mask
         * only adds work per poll (the grouped form was 4-10% slower there on one H200) */
#pragma unroll
        for (int e = 0; e < E; e++)
            if (pending == 1u << e) v[e] = lamport_take(p, c, addr(e), src(e), j, fail);
        return;
    }
    uint64_t start = 0;
    for (uint32_t spin = 0; pending != 0 && !fail; spin++) {
        if ((spin & 63u) == 63u) {
            if (aborted(p)) {
                fail = true;
                break;
            }
            const uint64_t now = symmem_globaltimer_ns();
            if (start == 0) {
                start = now;
            } else if (p.timeout_ns && now - start > p.timeout_ns) {
                const int e = __ffs(pending) - 1;
                uint4 w = zero4();
#pragma unroll
                for (int k = 0; k < E; k++)
                    if (k == e) w = v[k];
                int s = 0;
#pragma unroll
                for (int k = 0; k < E; k++)
                    if (k == e) s = src(k);
                report(p, c, SYMMEM_TIMEOUT, SYMMEM_COLL_ERR_TIMEOUT, s, j, ((uint64_t)w.x << 32) | w.y);
                fail = true;
                break;
            }
        }
#pragma unroll
        for (int e = 0; e < E; e++)
            if ((pending >> e) & 1u) v[e] = ld_volatile16(addr(e));
#pragma unroll
        for (int e = 0; e < E; e++) {
            if (!((pending >> e) & 1u) || !lamport_full(v[e])) continue;
            st16(addr(e), lamport_empty4());
            pending &= ~(1u << e);
        }
    }
    if (pending != 0) {
#pragma unroll
        for (int e = 0; e < E; e++)
            if ((pending >> e) & 1u) v[e] = zero4();
    }
}

/* lamport_reduce for B packs at once (pack i of the batch valid where bit i of `valid` is set): acc[i] =
 * the n ranks' pack i reduced in rank order (the operations and order of reduce_ranks, so the same bits),
 * rank src's pack i at addr(i, src) (taken) except for rank `own`, whose pack is own_pack(i) (own < 0: every
 * rank's is taken). GS ranks at a time, the first loads of their packs of every valid i issued together and
 * the missing ones polled together (lamport_take_batch): a thread holding B packs of a row waits about one
 * round trip per group of GS ranks, not one per pack. acc[i] of an invalid pack is left as it was. */
template <typename T, int OP, int B, int GS, typename Addr, typename Own>
__device__ __forceinline__ void lamport_reduce_packs(const P &p, const Ctx &c, int n, int own, uint32_t valid, Addr addr,
                                                     Own own_pack, uint64_t j, bool &fail,
                                                     float (&acc)[B][Pack<T>::V])
{
    constexpr int V = Pack<T>::V, E = GS * B;
    static_assert(E <= 32, "one bit per pack of the batch");
    for (int s0 = 0; s0 < n; s0 += GS) {
        uint4 v[E];
        uint32_t want = 0;
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int s = s0 + e / B, i = e % B;
            v[e] = zero4();
            if (s >= n || !((valid >> i) & 1u)) continue;
            if (s == own) {
                v[e] = own_pack(i);
            } else {
                v[e] = ld_volatile16(addr(i, s));
                want |= 1u << e;
            }
        }
        lamport_take_batch<E>(
            p, c, v, want, [&](int e) { return addr(e % B, s0 + e / B); }, [&](int e) { return s0 + e / B; }, j, fail);
#pragma unroll
        for (int e = 0; e < E; e++) {
            const int s = s0 + e / B, i = e % B;
            if (s >= n || !((valid >> i) & 1u)) continue;
            float f[V];
            Conv<T>::unpack(v[e], f);
#pragma unroll
            for (int x = 0; x < V; x++) acc[i][x] = s == 0 ? f[x] : redop<OP>(acc[i][x], f[x]);
        }
    }
}

/* Round headers (SYMMEM_LAMPORT_CHECK=1, p.lam_check: the CHK instantiation). Lamport payload carries no
 * tag, so a peer that made a different call (another count, algorithm, dtype, op: the tag) would have its
 * slots read as data,
 * silently, and could leave payload behind that a later call would take for its own. With the check on,
 * thread t < n (t != r) of every block also pushes (tag, round) into header slot [block][r] of rank t for
 * the round's buffer, with the data, and before reading any payload the same threads take the headers
 * their peers pushed and compare: a difference is SYMMEM_INVALID_USAGE (reported by both sides) before the
 * block stores any result (it then stores NaN: poison_output). It costs ~0.35 us below 256 KiB (the block
 * waits for the header and a barrier
 * before its payload polls; a header warp beside the data threads cost less there but took 32 data
 * threads from every block, +9% at 64 MiB on two H200s), hence off by default. Headers are
 * taken and cleared like payload and rotate with the buffers. */
__device__ __forceinline__ char *lamport_hdr(const P &p, int owner, uint64_t j, int src)
{
    return p.ws[owner] + p.lam_hdr_off + (j % 3) * SYMMEM_COLL_LAMPORT_HDR_BYTES +
           ((uint64_t)blockIdx.x * SYMMEM_MAX_RANKS + src) * 16;
}
/* No word is the sentinel: the tag has 16 bits, the round is cut to 31. */
__device__ __forceinline__ uint4 lamport_hdr_value(const P &p, uint64_t j)
{
    return make_uint4(p.tag, (uint32_t)(j & 0x7fffffffu), 0u, 0u);
}
template <bool CHK> __device__ __forceinline__ void lamport_hdr_push(const P &p, uint64_t j)
{
    const int t = threadIdx.x;
    if (CHK && t < p.nranks && t != p.rank) st16(lamport_hdr(p, t, j, p.rank), lamport_hdr_value(p, j));
}
/* False (on every thread of the block): a mismatch (reported here), an abort or a timeout. */
template <bool CHK> __device__ __forceinline__ bool lamport_hdr_check(const P &p, const Ctx &c, uint64_t j)
{
    if (!CHK) return true;
    const int t = threadIdx.x;
    bool fail = false;
    if (t < p.nranks && t != p.rank) {
        const uint4 v = lamport_take(p, c, lamport_hdr(p, p.rank, j, t), t, j, fail);
        const uint4 w = lamport_hdr_value(p, j);
        if (!fail && (v.x != w.x || v.y != w.y)) {
            /* seen: the peer's round << 16 | its tag, as a flag would read */
            report(p, c, SYMMEM_INVALID_USAGE, SYMMEM_COLL_ERR_MISMATCH, t, j, ((uint64_t)v.y << 16) | (v.x & 0xffffu));
            fail = true;
        }
    }
    return __syncthreads_or(fail) == 0;
}

/* The defined output of a failed communicator (docs/collectives.md, "After an error"): every element of the
 * receive buffer (poison_elems: of each output buffer) becomes a quiet NaN. A kernel that starts after the communicator failed (the abort flag is
 * up at its prologue) does this with all its blocks, grid-stride, after griddepcontrol.wait (its
 * predecessor, which may still read or write that buffer, has completed), so its whole output is NaN: a
 * CUDA-graph replay after a timeout yields NaN rather than partial sums that differ between ranks. A block
 * of the kernel that fails stores its part the same way; parts other blocks finished earlier may stand. */
template <typename T> __device__ __forceinline__ void poison_elems(void *buf, uint64_t n, bool aligned)
{
    constexpr int V = Pack<T>::V;
    float f[V];
#pragma unroll
    for (int k = 0; k < V; k++) f[k] = __int_as_float(0x7fc00000);
    const uint4 nan = Conv<T>::pack(f);
    const uint64_t packs = (n + V - 1) / V;
    for (uint64_t pk = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; pk < packs; pk += (uint64_t)gridDim.x * blockDim.x)
        store_user<T>(buf, pk * V, nan, (int)min((uint64_t)V, n - pk * V), aligned);
}
template <typename T> __device__ __noinline__ void poison_output(const P &p)
{
    poison_elems<T>(p.recv, p.kind == SYMMEM_COLL_REDUCE_SCATTER ? p.stride : p.total, p.aligned != 0);
}

} // namespace symmem_k

#endif
