/* Residency (residency.c): the ranks of a collective wait for each other inside its kernel, so every block of
 * every rank's kernel must be resident on its GPU at once, beside whatever else runs there. What keeps it so
 * lives in residency.c alone (docs/collectives.md, "Residency"):
 *  - the blocks per kernel (the grid rule): a share of what the GPU keeps resident, divided among the ranks
 *    of the communicator on that GPU, less the SMs those ranks leave idle for kernels in clusters
 *    (SYMMEM_CLUSTER_ROOM, per GPC, with the GPC count measured at init);
 *  - the ranks of this process on this GPU (counted once at init): hardware work queues, MPS, the legacy
 *    default stream;
 *  - the communicators of this process that share a GPU, whose kernels must fit together;
 *  - what a timeout's message says when residency is the likely cause. */
#ifndef SYMMEM_COLLECTIVES_RESIDENCY_H
#define SYMMEM_COLLECTIVES_RESIDENCY_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/kernel_abi.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

struct symmem_coll;

/* ---- the grid rule (pure: the unit tests need no GPU) ------------------------------------------------------- */
/* Blocks per collective kernel. The ranks of a communicator that share a GPU wait for each other inside their
 * kernels, so all their blocks must be resident at once, beside other work: share_pct percent of what the GPU
 * keeps resident (blocks_per_sm blocks of SYMMEM_COLL_THREADS threads on each of sm_count SMs), divided among
 * the ranks_here ranks on the GPU; at most max_blocks (SYMMEM_MAX_BLOCKS; 0: no bound) and
 * SYMMEM_COLL_MAX_GRID, at least 1. */
int symmem_coll_grid_rule(int blocks_per_sm, int sm_count, int ranks_here, int share_pct, int max_blocks);
/* The same rule with room for kernels in clusters (SYMMEM_CLUSTER_ROOM). Such a kernel (a cuBLAS GEMM whose
 * blocks each take a whole SM, in clusters of 8) starts a cluster only where one GPC has that many idle SMs,
 * which the co-located ranks' waiting blocks may hold. Where ranks_here > 1, room > 0 and gpcs > 0 (the GPC
 * count known), the ranks on the GPU hold at most symmem_coll_room_pool blocks together, counting each block
 * as an SM of its own: (room - 1) * gpcs + 1 SMs stay idle, and since the GPCs cannot all have fewer than room
 * of them idle, a cluster of room blocks can start in one of them. The communicator takes share_pct percent of
 * those blocks, divided among its ranks_here ranks; then max_blocks and SYMMEM_COLL_MAX_GRID as above, and at
 * least 1 per rank even where the room leaves less. Otherwise (one rank on the GPU, room 0, GPCs unknown)
 * symmem_coll_grid_rule's result. H200 (132 SMs, 8 GPCs), room 8, share 75: 75 blocks, 56 for the
 * communicator, 28 per rank at 2 ranks, 3 at 16. */
int symmem_coll_grid_rule_room(int blocks_per_sm, int sm_count, int ranks_here, int share_pct, int max_blocks, int room,
                               int gpcs);
/* The share of the pool that SYMMEM_GRID_SHARE's default stands for (the variable unset): 75% of the blocks the
 * GPU keeps resident, at most the whole pool. Without the room (one rank on the GPU, room 0, GPCs unknown) the
 * pool is those blocks, so 75. Where the room applies its idle SMs already leave more than a quarter of the
 * GPU to other work on a GPU of 8 GPCs (57 of 132 SMs at room 8), and a share of the pool on top of them would
 * only idle more: the default is then 100 (the whole pool, 75 blocks) wherever the pool is at most 75% of the
 * GPU. A share the user sets stays a share of the pool, so that communicators whose shares add up to at most
 * 100 still leave the room idle together. In 1..100. */
int symmem_coll_default_share(int blocks_per_sm, int sm_count, int ranks_here, int room, int gpcs);
/* SYMMEM_GRID_SHARE's default in base/param.h, as a number (test_residency checks the two agree). */
#define SYMMEM_COLL_DEFAULT_SHARE 75
/* The blocks that co-located ranks hold together under the room, before the share: sm_count less
 * (room - 1) * gpcs + 1 idle SMs (room > 0), at least 0 (what symmem_coll_grid_rule_room divides, and what
 * init's INFO line reports). */
int64_t symmem_coll_room_pool(int sm_count, int room, int gpcs);
/* The GPU's GPC count, which CUDA does not report, from how many clusters of 8 and of 16 whole-SM blocks it
 * keeps resident at once (symmem_coll_cluster_counts; negative: that size refused or its query failed).
 * A GPC of s SMs holds floor(s/8) clusters of 8 and floor(s/16) of 16, one more of 8 wherever 8 <= s <= 23:
 * where every GPC has 8..23 SMs, the difference is the GPC count. 0 (unknown) where either count is negative
 * or the difference is not in 1..sm_count/8. */
int symmem_coll_gpcs_from_clusters(int clusters8, int clusters16, int sm_count);
/* How many clusters of 8 and of 16 blocks that each take a whole SM the current device keeps resident at once
 * (cudaOccupancyMaxActiveClusters, clusters.cu): -1 for a size the device refuses (no clusters before compute
 * capability 9; 16 is a non-portable size) or whose query fails. Never fails: any CUDA error is cleared. */
void symmem_coll_cluster_counts(int *clusters8, int *clusters16);

/* ---- this rank's grid, at init ------------------------------------------------------------------------------ */
/* What this rank's GPU gave the grid rule, kept for the INFO line once the ranks have agreed on the grid. */
typedef struct symmem_coll_residency {
    int room;                  /* SYMMEM_CLUSTER_ROOM, at least 0: idle SMs per GPC left for kernels in clusters */
    int ranks_here;            /* ranks of the communicator on this GPU (any process) */
    int gpcs;                  /* the GPU's GPCs; 0: unknown, or not measured (the room does not apply) */
    int clusters8, clusters16; /* what gpcs came from (symmem_coll_cluster_counts) */
    int share;                 /* SYMMEM_GRID_SHARE, clamped to 1..100; unset: symmem_coll_default_share */
    int share_set;             /* SYMMEM_GRID_SHARE was set (else the default share) */
} symmem_coll_residency_t;
/* Local: this rank's bound on the blocks per kernel from its own GPU (the ranks then take the minimum);
 * *capacity: the blocks of SYMMEM_COLL_THREADS threads the GPU keeps resident. Measures the GPC count only
 * where the room applies (more than one rank on the GPU, a room above 0), so that one rank per GPU loads no
 * query kernel. Warns about a SYMMEM_GRID_SHARE or SYMMEM_CLUSTER_ROOM out of range. */
int symmem_coll_residency_grid(symmem_comm_t comm, int blocks_per_sm, int *capacity, symmem_coll_residency_t *r);
/* Local: says (INFO, DEBUG) what SYMMEM_CLUSTER_ROOM did, with the agreed blocks per kernel. */
void symmem_coll_residency_log(symmem_comm_t comm, const symmem_coll_residency_t *r, int grid);

/* ---- the ranks of this process on this GPU ---------------------------------------------------------------- */
/* Local, at init once co->mps is known: finds the lowest other rank of this process on this GPU
 * (co->colocated_peer, -1 if none) and counts the ranks of this process there (co->colocated_ranks), once.
 * Their streams need hardware work queues of their own (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default; under MPS
 * a client's queues come from a shared pool): where there may be too few, the lowest of them warns, before a
 * collective can time out. */
void symmem_coll_residency_colocated(symmem_comm_t comm, struct symmem_coll *co);
/* Local: whether kernels that wait for each other may run from private streams that this rank creates at
 * init (the probe's barrier, the autotune's graphs): always for the only rank of this process on its GPU;
 * for several, only when every one of them can have a hardware work queue of its own
 * (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default; under MPS it must be set above the ranks per GPU): two
 * waiting ranks' streams in one queue wait for each other until the timeout. The ranks create such streams
 * between two host barriers, so that consecutive creations get distinct queues. */
int symmem_coll_private_streams_safe(symmem_comm_t comm, const struct symmem_coll *co);
/* Local: two ranks of this process on one GPU on the legacy default stream can only time out: warned once. */
void symmem_coll_check_stream(symmem_comm_t comm, symmem_stream_t stream, const char *call);

/* ---- the communicators of this process that share a GPU --------------------------------------------------- */
/* Local, at the end of a CUDA communicator's collectives init: enters it in the process's list of
 * communicators by GPU, and warns when those of this process on its GPU could hold more blocks together
 * (each one's blocks per kernel) than the GPU keeps resident. */
void symmem_coll_residency_add(symmem_comm_t comm);
/* Local, before the communicator's collectives state is freed; a no-op for one never added. */
void symmem_coll_residency_remove(symmem_comm_t comm);

/* ---- timeouts --------------------------------------------------------------------------------------------- */
/* Appends to the message of a timeout record (msg, of len bytes) what residency may have to do with it: blocks
 * of the kernel that never started; a peer on this GPU whose own kernels may need the SMs this call's blocks
 * hold. Nothing for other records. */
void symmem_coll_residency_explain(symmem_comm_t comm, const volatile symmem_coll_error_record_t *rec, char *msg,
                                   size_t len);

#ifdef __cplusplus
}
#endif
#endif
