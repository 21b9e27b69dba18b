/* The collective kernels' boundary with the host: the launch bounds, the workspace's fixed areas, the
 * device state, the error record, the kernel parameters, the launch and preload calls (launch.cu), and the
 * cluster count behind SYMMEM_CLUSTER_ROOM (clusters.cu).
 * Plain C, so the same structs describe both sides; structs that cross the boundary carry static asserts on
 * their layout. docs/collectives.md has the protocol. */
#ifndef SYMMEM_COLLECTIVES_KERNEL_ABI_H
#define SYMMEM_COLLECTIVES_KERNEL_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "base/kinds.h"
#include "collectives/algos.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
#define SYMMEM_STATIC_ASSERT static_assert
extern "C" {
#else
#define SYMMEM_STATIC_ASSERT _Static_assert
#endif

/* Most threads per block of a data kernel (the launch bound). A call uses fewer when its positions spread
 * over max_grid blocks need fewer, but never fewer than the communicator's min_threads (plan.c,
 * symmem_coll_block_threads). */
#define SYMMEM_COLL_THREADS 512
/* Threads per block of the kernels compiled for wider blocks: the two-shot pull all-reduce into an ordinary
 * output (pull.cu, pull_wide_kernel), whose loops fit the registers of 640 threads (sm_90: 89-96, no spills in
 * the 16-bit kernels, 10 bytes in the float one that copies its input in); still one block per SM, so the grid
 * rule's count of blocks is unchanged. 512 threads measured slower for both of its inputs at 0.5-4 MiB and
 * 768 spilled (bench/NOTES.md). */
#define SYMMEM_COLL_WIDE_THREADS 640
/* The two-shot pull all-reduce with zero copy both ways (pull.cu, pull_zc_kernel) is compiled for rank counts up
 * to 2, 4, 8 and 16 (symmem_coll_zc_ranks), and each thread reduces symmem_coll_zc_packs(n) packs a pass, the
 * loads of every rank for all of them issued before the first is used: two packs up to 8 ranks (16 loads of 16
 * bytes in flight a thread at 8), one at 16, its loads in two groups of 8 (more would not fit the registers).
 * On 4 co-located ranks two packs took 4 MiB from 19.6 to 17.9 us against one, and cost 0.4 us at 64-256 KiB;
 * four were slower than two (bench/NOTES.md). */
static inline int symmem_coll_zc_ranks(int n) { return n <= 2 ? 2 : n <= 4 ? 4 : n <= 8 ? 8 : 16; }
static inline int symmem_coll_zc_packs(int n) { return n <= 8 ? 2 : 1; }
#ifdef __CUDACC__
#define SYMMEM_COLL_HD __host__ __device__
#else
#define SYMMEM_COLL_HD
#endif
/* The first position from `from` on that thread `tid` (< nthreads) takes in a grid-stride loop over `nthreads`
 * threads. The two-shot pull's kernels split a loop in two (the whole packs, then the rest), and the second loop
 * starts here so that every position keeps its thread, and so its block, in both: a sync orders only the
 * same-numbered blocks of the ranks, so the block that stages or reduces a position on one rank must be the one
 * that reads it on every rank (kernel.cuh, "reuse argument"). */
static inline SYMMEM_COLL_HD uint64_t symmem_coll_first_at(uint64_t tid, uint64_t from, uint64_t nthreads)
{
    return tid >= from ? tid : tid + (from - tid + nthreads - 1) / nthreads * nthreads;
}
/* Flag slots exist for this many blocks; grids never exceed it. */
#define SYMMEM_COLL_MAX_GRID 256

/* Workspace layout (each rank's part of the symmetric workspace buffer; offsets are the same everywhere):
 *   [0, FLAG_BYTES)                    flags[block][src]: uint64, written only by rank `src` (remote
 *                                      st.release.sys), polled only by the owner. Value = epoch << 16 | tag.
 *   [lam_hdr_off, +3*LAMPORT_HDR_BYTES) Lamport round headers hdr[buffer][block][src]: one 16-byte pack
 *                                      (tag, round) per block and sender, pushed and cleared like payload.
 *   [lam_off, +3*lam_buf_bytes)        Lamport buffers 0,1,2: payload or the sentinel word 0x80000000, never
 *                                      flags (a stale payload word must never end a flag poll or vice versa).
 *   [data_off, +2*half_bytes)          staging/result/slot data, two halves used by alternate rounds. */
#define SYMMEM_COLL_FLAG_BYTES ((size_t)SYMMEM_COLL_MAX_GRID * SYMMEM_MAX_RANKS * 8)
#define SYMMEM_COLL_LAMPORT_HDR_BYTES ((size_t)SYMMEM_COLL_MAX_GRID * SYMMEM_MAX_RANKS * 16)
#define SYMMEM_COLL_LAMPORT_EMPTY 0x80000000u

/* Per-communicator device state, in this rank's local device memory (never remote). Read by every block
 * at kernel start; the last block of a kernel to read it writes, when it ends, the values that kernel leaves
 * behind (all known at start: see the state protocol in protocol.cuh), so the values advance on the device and
 * CUDA-graph replays stay correct. */
typedef struct symmem_coll_dev_state {
    uint64_t epoch;   /* sync epochs used so far (always even: every round consumes two, an island round six) */
    uint64_t calls;   /* kernels started on this communicator (the "sequence number" in error messages) */
    uint64_t lseq;    /* Lamport rounds so far: round j uses Lamport buffer j % 3 */
    uint64_t blocks;  /* blocks of all those kernels */
    uint64_t ended;   /* blocks that ended: below `blocks` at a kernel's start means an earlier kernel of this
                         communicator is still running (used from two streams) */
    uint32_t started; /* blocks of the running kernel that read the state */
    uint32_t abort;   /* nonzero once any kernel of this communicator failed: every kernel exits at once */
} symmem_coll_dev_state_t;
SYMMEM_STATIC_ASSERT(sizeof(symmem_coll_dev_state_t) == 48, "device state layout is shared with kernels");

/* Error record in host-mapped pinned memory, written by the one block that wins the abort flag. `status`
 * is written last (after a system fence), so a host that sees it nonzero sees the other fields. */
typedef struct symmem_coll_error_record {
    uint32_t status;      /* symmem_status_t; 0: no error */
    uint32_t reason;      /* SYMMEM_COLL_ERR_* */
    int32_t kind;         /* symmem_coll_kind_t of the failed operation */
    int32_t algo;         /* symmem_algo_t */
    int32_t rank;         /* the rank that recorded it */
    int32_t peer;         /* the rank it waited for, -1 if none */
    uint64_t call;        /* sequence number of the failed operation on this communicator */
    uint64_t epoch;       /* the epoch (or Lamport round) it waited for */
    uint64_t seen;        /* what it last saw in the flag (epoch << 16 | tag) */
    uint32_t block;       /* block index */
    uint32_t tag;         /* the tag this rank expected */
    uint32_t started;     /* blocks of the failed kernel that had started (0: all of them) */
    uint32_t grid;        /* blocks the failed kernel was launched with */
} symmem_coll_error_record_t;
SYMMEM_STATIC_ASSERT(sizeof(symmem_coll_error_record_t) == 64, "error record layout is shared with kernels");

enum {
    SYMMEM_COLL_ERR_TIMEOUT = 1,    /* a peer's flag or payload did not arrive in time */
    SYMMEM_COLL_ERR_MISMATCH = 2,   /* a peer arrived at the same epoch with different arguments */
    SYMMEM_COLL_ERR_CONCURRENT = 3, /* two kernels of one communicator ran at the same time */
};

/* Kernel arguments (passed by value as a __grid_constant__ parameter). All sizes in elements unless named
 * *_bytes. "Shard" s is the s-th of nranks pieces of the message as laid out in the user's buffers:
 *   all-reduce: shard s = elements [s*stride, min((s+1)*stride, total)), stride = ceil(count/n/pack)*pack
 *   reduce-scatter: input shard s = [s*count, (s+1)*count), stride = count, output = my shard only
 *   all-gather: output shard s = [s*count, (s+1)*count), stride = count, input = my shard only
 * A round moves elements [round*seg, round*seg + seg) of every shard (seg = segp packs). */
typedef struct symmem_coll_params {
    const void *send;
    void *recv;
    char *ws[SYMMEM_MAX_RANKS];       /* every rank's workspace, mapped here */
    const char *peer_send[SYMMEM_MAX_RANKS]; /* pull zero copy: every rank's send buffer mapped here */
    char *peer_recv[SYMMEM_MAX_RANKS];       /* zero copy out: every rank's recv buffer mapped here */
    symmem_coll_dev_state_t *st;      /* this rank's device state */
    symmem_coll_error_record_t *err;  /* host-mapped error record */
    uint64_t stride;                  /* elements between shards in the user's buffers */
    uint64_t total;                   /* valid elements of the sharded user buffer */
    uint64_t segp;                    /* packs (16 bytes) per shard per round */
    uint64_t data_off;                /* workspace offset of the two data halves */
    uint64_t half_bytes;              /* bytes of one half */
    uint64_t lam_hdr_off;             /* workspace offset of the Lamport round headers of buffer 0 */
    uint64_t lam_off;                 /* workspace offset of Lamport buffer 0 */
    uint64_t lam_buf_bytes;           /* bytes of one Lamport buffer */
    uint64_t timeout_ns;              /* 0: wait forever */
    uint32_t rounds;
    int32_t rank, nranks;
    int32_t kind, algo, dtype, op;
    int32_t aligned;       /* user pointers and shard starts are 16-byte aligned: vector loads of user memory */
    int32_t zero_copy_in;  /* pull: peers read my send buffer directly */
    int32_t in_place;      /* the output of my own shard is my input (skip copying it onto itself) */
    uint32_t tag;          /* 16-bit hash of the arguments every rank must agree on */
    int32_t zero_copy_out; /* two-shot all-reduce (push, staged; pull with zero_copy_in): results stored straight
                              into every rank's recv (plan.c, symmem_coll_zero_copy_out) */
    int32_t lam_check;     /* Lamport kernels exchange and compare round headers (protocol.cuh) */
    uint32_t epochs;       /* flag sync epochs the kernel consumes: the descriptor's count (algos.h) for its rounds;
                              every path of its run_* uses exactly these */
    uint32_t flags;        /* SYMMEM_COLL_PF_*: what the communicator's setup lets the protocol skip */
} symmem_coll_params_t;
/* The fused kernels' parameters start with these (fused.h): the layout is fixed. */
SYMMEM_STATIC_ASSERT(sizeof(symmem_coll_params_t) == 552 && offsetof(symmem_coll_params_t, flags) == 544,
                     "kernel parameter layout is shared with kernels");

/* symmem_coll_params_t.flags (protocol.cuh says why each is safe) */
enum {
    /* No kernel of this communicator is launched with programmatic dependent launch, so the next one starts
     * only after this one completed: a kernel publishes the state it leaves behind late (the block's late
     * check), not before its blocks go on, and never triggers its dependents early. */
    SYMMEM_COLL_PF_LATE_PUBLISH = 1u,
    /* The symmetric buffers are device memory: a kernel's first sync point, before which it stored nothing,
     * needs no release (what peers read after it, the previous kernels wrote, and they completed). */
    SYMMEM_COLL_PF_DEVICE_DATA = 2u,
};

/* The kernels of each family, per dtype x op (pull.cu, push.cu, lamport.cu; checked: the Lamport round
 * headers' instantiation), NULL outside the lists; and loading all of them now (symmem_coll_preload). */
typedef struct symmem_coll_preload_info symmem_coll_preload_info_t;
#define SYMMEM_COLL_FAMILY_DECL_(name, value, file)                                                        \
    const void *symmem_coll_##file##_kernel(int dtype, int op, int checked);                               \
    int symmem_coll_##file##_preload(symmem_coll_preload_info_t *info);
SYMMEM_COLL_FAMILY_LIST(SYMMEM_COLL_FAMILY_DECL_)
#undef SYMMEM_COLL_FAMILY_DECL_

/* Launch one collective kernel (launch.cu). `family`, `dtype`, `op` select the instantiation;
 * returns the cudaError_t of the launch. `pdl` launches with programmatic stream serialization
 * (programmatic dependent launch, sm_90+): the kernel may start while the previous kernel of the stream
 * finishes and waits for it with griddepcontrol.wait before touching memory, which hides launch latency.
 * Only when no other rank shares the GPU: an early-launched kernel holds SM resources while it waits,
 * which a co-located rank's spinning kernel could need. */
int symmem_coll_launch(const symmem_coll_params_t *p, int family, int grid, int threads, void *stream, int pdl);
/* The two-shot pull all-reduce into an ordinary output, in blocks of up to SYMMEM_COLL_WIDE_THREADS (pull.cu),
 * per dtype x op x whether it reads its inputs in place (NULL outside the lists), loading all of them now, and
 * launching the one for p->zero_copy_in (the cudaError_t; threads a multiple of 32 up to
 * SYMMEM_COLL_WIDE_THREADS). */
const void *symmem_coll_pull_wide_kernel(int dtype, int op, int zero_copy_in);
int symmem_coll_pull_wide_preload(symmem_coll_preload_info_t *info);
int symmem_coll_launch_wide(const symmem_coll_params_t *p, int grid, int threads, void *stream, int pdl);
/* The two-shot pull all-reduce with zero copy both ways, compiled per bound on the rank count (pull.cu), per
 * dtype x op x bound (NULL outside the lists or above SYMMEM_MAX_RANKS), loading all of them now, and launching
 * the one for p->nranks (the cudaError_t; threads a multiple of 32 up to SYMMEM_COLL_THREADS). */
const void *symmem_coll_pull_zc_kernel(int dtype, int op, int nranks);
int symmem_coll_pull_zc_preload(symmem_coll_preload_info_t *info);
int symmem_coll_launch_zc(const symmem_coll_params_t *p, int grid, int threads, void *stream, int pdl);
/* Launch kernel `fn` whose one argument is the struct at `params` (a family's parameters: the kernels take
 * them as a __grid_constant__ struct), with programmatic stream serialization when pdl; the cudaError_t. */
int symmem_coll_launch_fn(const void *fn, void *params, int grid, int threads, void *stream, int pdl);
/* The barrier kernel: one block, one sync. */
int symmem_coll_launch_barrier(const symmem_coll_params_t *p, void *stream, int pdl);
/* Fill `bytes` at `ptr` (16-byte multiple, aligned) with the Lamport empty word, on `stream`. */
int symmem_coll_launch_fill_empty(void *ptr, size_t bytes, void *stream);

/* What symmem_coll_preload learnt about the kernels. */
struct symmem_coll_preload_info {
    int kernels;           /* kernels loaded */
    int max_regs;          /* most registers per thread of any kernel */
    int min_blocks_per_sm; /* fewest blocks of any data kernel (SYMMEM_COLL_THREADS threads; the wide ones
                              SYMMEM_COLL_WIDE_THREADS) that fit on one SM */
};
/* Note one loaded kernel (its registers, how many blocks of `threads` fit on one SM); the cudaError_t. */
int symmem_coll_preload_one(const void *fn, int threads, symmem_coll_preload_info_t *info);
/* Load every kernel of the collectives into the current device's context now, not at its first launch
 * (CUDA lazy loading can wait for running kernels: see launch.cu). Returns the first cudaError_t. */
int symmem_coll_preload(symmem_coll_preload_info_t *info);

#ifdef __cplusplus
}
#endif
#endif
