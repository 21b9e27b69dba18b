/* Collectives internals shared by the host side (coll.c, tune.c) and the kernels (kernels.cu).
 * Everything here is plain C so the same structs describe both sides; structs that cross the host/device
 * boundary carry static asserts on their layout. See docs/collectives.md for the protocol. */
#ifndef SYMMEM_COLLECTIVES_COLL_INTERNAL_H
#define SYMMEM_COLLECTIVES_COLL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/coll.h"
#include "collectives/tune.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
#define SYMMEM_STATIC_ASSERT static_assert
extern "C" {
#else
#define SYMMEM_STATIC_ASSERT _Static_assert
#endif

/* Most threads per block of a data kernel (the launch bound). A call uses fewer when its positions spread
 * over max_grid blocks need fewer, but never fewer than the communicator's min_threads (coll.c,
 * block_threads). */
#define SYMMEM_COLL_THREADS 512
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

/* Kernel families. ALGO -> family: pull (oneshot_pull, twoshot_pull), push (twoshot_push, staged, and
 * all-gather's oneshot_push and twoshot_lamport), lamport (oneshot_push and twoshot_lamport of all-reduce
 * and reduce-scatter). */
typedef enum {
    SYMMEM_COLL_FAM_PULL = 0,
    SYMMEM_COLL_FAM_PUSH = 1,
    SYMMEM_COLL_FAM_LAMPORT = 2,
    SYMMEM_COLL_FAM_COUNT
} symmem_coll_family_t;

/* Per-communicator device state, in this rank's local device memory (never remote). Read by every block
 * at kernel start; the last block of a kernel to read it writes, when it ends, the values that kernel leaves
 * behind (all known at start: see the state protocol in kernels.cu), so the values advance on the device and
 * CUDA-graph replays stay correct. */
typedef struct symmem_coll_dev_state {
    uint64_t epoch;   /* sync epochs used so far (always even: every round consumes two) */
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
    const char *zc[SYMMEM_MAX_RANKS]; /* pull zero copy: every rank's send buffer mapped here */
    char *zo[SYMMEM_MAX_RANKS];       /* zero copy out: every rank's recv buffer mapped here */
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
    int32_t aligned; /* user pointers and shard starts are 16-byte aligned: vector loads of user memory */
    int32_t zc_on;   /* pull: peers read my send buffer directly */
    int32_t in_place;/* the output of my own shard is my input (skip copying it onto itself) */
    uint32_t tag;    /* 16-bit hash of the arguments every rank must agree on */
    int32_t zo_on;   /* two-shot all-reduce (push, staged; pull with zc_on): results stored straight into every
                        rank's recv (coll.c, zero_copy_out) */
    int32_t lam_check; /* Lamport kernels exchange and compare round headers (kernels.cu) */
} symmem_coll_params_t;

/* Launch one collective kernel (kernels.cu). `family`, `dtype`, `op` select the instantiation;
 * returns the cudaError_t of the launch. `pdl` launches with programmatic stream serialization
 * (programmatic dependent launch, sm_90+): the kernel may start while the previous kernel of the stream
 * finishes and waits for it with griddepcontrol.wait before touching memory, which hides launch latency.
 * Only when no other rank shares the GPU: an early-launched kernel holds SM resources while it waits,
 * which a co-located rank's spinning kernel could need. */
int symmem_coll_launch(const symmem_coll_params_t *p, int family, int grid, int threads, void *stream, int pdl);
/* The barrier kernel: one block, one sync. */
int symmem_coll_launch_barrier(const symmem_coll_params_t *p, void *stream, int pdl);
/* Fill `bytes` at `ptr` (16-byte multiple, aligned) with the Lamport empty word, on `stream`. */
int symmem_coll_launch_fill_empty(void *ptr, size_t bytes, void *stream);

/* What symmem_coll_preload learnt about the kernels. */
typedef struct symmem_coll_preload_info {
    int kernels;           /* kernels loaded */
    int max_regs;          /* most registers per thread of any kernel */
    int min_blocks_per_sm; /* fewest blocks of SYMMEM_COLL_THREADS of any data kernel that fit on one SM */
} symmem_coll_preload_info_t;
/* Load every kernel of the collectives into the current device's context now, not at its first launch
 * (CUDA lazy loading can wait for running kernels: see kernels.cu). Returns the first cudaError_t. */
int symmem_coll_preload(symmem_coll_preload_info_t *info);

#define SYMMEM_COLL_HIST 16
/* The collectives' per-communicator state (comm->coll). */
struct symmem_coll {
    symmem_buffer_t ws;                /* symmetric workspace */
    char *ws_peers[SYMMEM_MAX_RANKS];  /* every rank's workspace, mapped here */
    size_t ws_bytes;
    size_t lam_hdr_off, lam_off, lam_buf_bytes, data_off, half_bytes;
    symmem_coll_dev_state_t *dev_state;    /* device memory */
    symmem_coll_error_record_t *err;       /* host-mapped pinned memory, host address */
    symmem_coll_error_record_t *err_dev;   /* the same record, device address */
    int max_grid;                          /* blocks per kernel: symmem_coll_grid_rule, agreed (minimum) */
    int capacity;                          /* blocks of SYMMEM_COLL_THREADS threads this GPU keeps resident */
    int mps;                               /* this GPU's contexts are shared through MPS */
    int min_threads;                       /* fewest threads per block (SYMMEM_MIN_BLOCK_THREADS, agreed) */
    int pdl;                               /* launch with programmatic stream serialization (sm_90+, 1 rank per GPU) */
    int lam_check;                         /* Lamport round headers (SYMMEM_LAMPORT_CHECK; on if any rank asks) */
    symmem_coll_tuning_t tuning;           /* the algorithm table (tune.h), the same on every rank */
    int error_reported;                    /* the kernel error record was turned into comm->async_error */
    /* A peer rank in this process on this GPU (symmem_comm_init_all with several ranks per GPU): its
     * kernels and ours must run at the same time, which only separate non-legacy streams allow. */
    int colocated_peer;                    /* lowest such rank, -1 if none */
    int legacy_stream_warned;
    /* The last operations launched, for error messages: a flag's tag says which one a late peer last
     * signalled. Host side only; written by the (single) thread that drives this rank. */
    struct symmem_coll_hist {
        uint32_t tag;
        int32_t kind, algo, dtype;
        uint64_t count;
    } hist[SYMMEM_COLL_HIST];
    uint64_t launches; /* launches recorded in hist (hist[launches % SYMMEM_COLL_HIST] is the next slot) */
    /* Peer-bandwidth probe at init (SYMMEM_COLL_PROBE): agreed by every rank before the workspace exists. */
    int probe;            /* 1: measure (every rank, decided in agree_across_ranks) */
    int probed;           /* the figures below were measured */
    double probe_read_gbs, probe_write_gbs; /* SM peer load / store GB/s, all ranks at once, min over ranks */
};

/* Bytes of one Lamport buffer in a workspace of `ws` bytes (>= 4 MiB): the largest power of two at most
 * ws/8 (8 MiB of the default 64 MiB; the three take 37.5%), plus SYMMEM_COLL_LAMPORT_SLACK. Powers of two so
 * that power-of-two messages fill whole rounds: twoshot_lamport moves half a buffer per round, and a
 * message just over a round pays a whole extra round (~3 us on NVLink, bench/NOTES.md session 5). The
 * slack absorbs the rounding of shards up to a 16-byte pack (under 16 bytes per shard and slot: at most
 * n^2 * 16 bytes for one-shot, 2n * 16 for two-shot), so that holds at every rank count up to 16, not
 * only at powers of two. */
#define SYMMEM_COLL_LAMPORT_SLACK ((size_t)16 << 10)
size_t symmem_coll_lamport_buf_bytes(size_t ws);

/* Smallest SYMMEM_WORKSPACE_BYTES (smaller values are raised to it). */
#define SYMMEM_COLL_MIN_WORKSPACE ((size_t)4 << 20)
/* Fill the workspace layout of `co` (offsets and sizes of the areas above) for `ws` bytes (>= the minimum). */
void symmem_coll_layout(struct symmem_coll *co, size_t ws);

/* The geometry of one call, a function of agreed values only (every rank computes the same). */
typedef struct symmem_coll_geom {
    int fam;            /* symmem_coll_family_t */
    uint64_t stride;    /* elements between shards */
    uint64_t total;     /* valid elements of the sharded buffer */
    uint64_t units;     /* 16-byte packs of workspace per shard position (0: no workspace) */
    uint64_t segp;      /* packs per shard per round */
    uint64_t rounds;
    uint64_t positions; /* 16-byte positions the grid covers per round */
    int threads, grid;  /* threads per block, blocks */
} symmem_coll_geom_t;
/* 0 and *g filled; 1: the workspace holds not even one pack per shard; 2: more than 2^32-1 rounds.
 * zo_on: the results go straight into the peers' receive buffers; no_ws: the call uses no workspace. */
int symmem_coll_geometry(const struct symmem_coll *co, int n, symmem_coll_kind_t kind, symmem_algo_t algo,
                         uint64_t count, size_t elem_size, int zo_on, int no_ws, symmem_coll_geom_t *g);

/* Blocks per collective kernel (docs/collectives.md, "Residency"). The ranks of a communicator that share
 * a GPU wait for each other inside their kernels, so all their blocks must be resident at once, beside
 * other work: share_pct percent of what the GPU keeps resident (blocks_per_sm blocks of
 * SYMMEM_COLL_THREADS threads on each of sm_count SMs), divided among the ranks_here ranks on the GPU;
 * at most max_blocks (SYMMEM_MAX_BLOCKS; 0: no bound) and SYMMEM_COLL_MAX_GRID, at least 1. Pure. */
int symmem_coll_grid_rule(int blocks_per_sm, int sm_count, int ranks_here, int share_pct, int max_blocks);

/* SYMMEM_MIN_BLOCK_THREADS made a multiple of 32 in [32, SYMMEM_COLL_THREADS] (a warning when it was not). */
int symmem_coll_min_block_threads(void);
/* Threads per block of a kernel over `positions` 16-byte positions: enough that co->max_grid blocks cover
 * them in one pass, at least co->min_threads, at most SYMMEM_COLL_THREADS, a multiple of 32. */
int symmem_coll_block_threads(const struct symmem_coll *co, uint64_t positions);

/* coll.c's checks and bookkeeping, for the entry points outside it (fused.c): the communicator is usable
 * (CUDA backend, collectives initialised, not in its error state); the legacy-stream warning for
 * co-located ranks; the launch history that error messages name operations from. */
symmem_status_t symmem_coll_check_usable(symmem_comm_t comm, const char *call);
void symmem_coll_check_stream(symmem_comm_t comm, symmem_stream_t stream, const char *call);
void symmem_coll_record_launch(struct symmem_coll *co, uint32_t tag, symmem_coll_kind_t kind, symmem_algo_t algo,
                               symmem_dtype_t dtype, size_t count);

#ifdef __cplusplus
}
#endif
#endif
