/*
 * symmem device API: what a user's own kernel needs to talk to its peers through symmetric memory.
 *
 * Host side, get the peer table once: `void *const *peers = symmem_buffer_device_peers(buf);` (a device
 * array of SYMMEM_MAX_RANKS pointers, entry r = rank r's part of `buf` as mapped on this GPU) and pass it to
 * the kernel. `symmem_buffer_device_signals(buf)` gives the same for the zeroed signal areas
 * (SYMMEM_SIGNAL_BYTES each), which are the natural place for flags.
 *
 * Synchronisation rules (the ones symmem's own collectives follow, see docs/collectives.md):
 *  - No remote atomics: they are not native on most PCIe platforms. A sender STORES a flag into the
 *    receiver's memory with release semantics at system scope; the receiver POLLS ITS OWN memory with
 *    acquire semantics. Data stores made before the release (by this thread, or by any thread of the block
 *    when a __syncthreads() separates them from the release) are visible to the receiver after its acquire
 *    (and, for other threads of the receiving block, after a __syncthreads() that follows the acquire).
 *  - Use monotonic 64-bit epochs, compared with symmem_epoch_reached(), never "flag == 1" toggles: a stale
 *    flag from an earlier round is then harmless, and a CUDA-graph replay must advance the epoch on the
 *    device (keep the counter in device memory), never bake it in at capture.
 *  - Poll with a timeout (symmem_wait_epoch) so that a peer that never arrives ends in an error, not a hang.
 *    Do not __trap(): that destroys the CUDA context of every rank in the process.
 *
 * Everything here is header-only, `static __device__ inline`, usable from any .cu file (sm_70 and newer).
 */
#ifndef SYMMEM_SYMMEM_DEVICE_CUH
#define SYMMEM_SYMMEM_DEVICE_CUH

#include <stddef.h>
#include <stdint.h>

#include "symmem/symmem.h"

#ifdef __CUDACC__

/* Rank `peer`'s copy of the object at `offset` bytes into a symmetric buffer. `peers` is
 * symmem_buffer_device_peers(buf). */
static __device__ __forceinline__ void *symmem_peer_ptr(void *const *peers, int peer, size_t offset)
{
    return (char *)peers[peer] + offset;
}

/* Translate a pointer into this rank's part of a buffer into the same object in `peer`'s part. */
static __device__ __forceinline__ void *symmem_peer_of(void *const *peers, int my_rank, int peer, const void *local)
{
    return (char *)peers[peer] + ((const char *)local - (const char *)peers[my_rank]);
}

/* Store `v` with release semantics at system scope: every write this thread made before (and, after a
 * __syncthreads(), every write of its block) is visible to a thread that observes `v` with an acquire. */
static __device__ __forceinline__ void symmem_st_release_u64(uint64_t *addr, uint64_t v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(addr), "l"(v) : "memory");
}
static __device__ __forceinline__ void symmem_st_release_u32(uint32_t *addr, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(addr), "r"(v) : "memory");
}

/* Load with acquire semantics at system scope: reads made after it see what the releasing writer wrote
 * before its release. */
static __device__ __forceinline__ uint64_t symmem_ld_acquire_u64(const uint64_t *addr)
{
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
    return v;
}
static __device__ __forceinline__ uint32_t symmem_ld_acquire_u32(const uint32_t *addr)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
    return v;
}

/* Relaxed at system scope: the flag itself is coherent across GPUs, but nothing is ordered around it (no
 * fence before the store, no invalidation after the load). Enough only where what the flag guards needs no
 * ordering by it: e.g. a first sync point before which the block stored nothing its peers read, on data in
 * device memory that only kernels completed before this one wrote (docs/collectives.md, "Synchronisation
 * protocol"). Otherwise use the release/acquire pair above. */
static __device__ __forceinline__ void symmem_st_relaxed_u64(uint64_t *addr, uint64_t v)
{
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(addr), "l"(v) : "memory");
}
static __device__ __forceinline__ uint64_t symmem_ld_relaxed_u64(const uint64_t *addr)
{
    uint64_t v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(addr) : "memory");
    return v;
}

/* Nanoseconds from the GPU's global timer (for timeouts). */
static __device__ __forceinline__ uint64_t symmem_globaltimer_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Wrap-safe "flag has reached epoch `want`" for monotonic 64-bit epochs. */
static __device__ __forceinline__ int symmem_epoch_reached(uint64_t flag, uint64_t want)
{
    return (int64_t)(flag - want) >= 0;
}

/* Signal: store `epoch` into the flag slot `remote_flag` (an address in the receiver's memory, e.g.
 * symmem_peer_ptr(signals, peer, my_rank * 8)). Call after __syncthreads() when other threads of the block
 * wrote the data this flag publishes. */
static __device__ __forceinline__ void symmem_signal(uint64_t *remote_flag, uint64_t epoch)
{
    symmem_st_release_u64(remote_flag, epoch);
}

/* Wait until the local flag `my_flag` reaches `epoch`. Returns 1 when it did, 0 after `timeout_ns`
 * nanoseconds (0: wait forever) or when `*abort` (optional, may be NULL) becomes nonzero. Follow it with
 * __syncthreads() before other threads of the block read the published data. */
static __device__ __forceinline__ int symmem_wait_epoch(const uint64_t *my_flag, uint64_t epoch, uint64_t timeout_ns,
                                                        const volatile uint32_t *abort)
{
    uint64_t start = 0;
    for (uint32_t spin = 0;; spin++) {
        if (symmem_epoch_reached(symmem_ld_acquire_u64(my_flag), epoch)) return 1;
        if ((spin & 63) == 63) {
            if (abort && *abort) return 0;
            uint64_t now = symmem_globaltimer_ns();
            if (start == 0) start = now;
            else if (timeout_ns && now - start > timeout_ns) return 0;
        }
    }
}

#endif /* __CUDACC__ */
#endif /* SYMMEM_SYMMEM_DEVICE_CUH */
