/* The island schedule (SYMMEM_ALGO_ISLAND): all-reduce, reduce-scatter and all-gather for machines whose
 * GPUs form islands (one CPU socket, one PCI root complex each) joined by a slower link, such that every
 * byte crosses that link once. All-reduce: reduce inside each island (every rank of an island owns some
 * shards), one exchange of island partials per owner pair across the link, the owners' sums gathered inside
 * each island. Reduce-scatter and all-gather are its halves (docs/collectives.md, "Island schedule").
 *
 * The schedule is a plain description, built here by a pure function and executed as is: by the kernel
 * (island.cu, a thin interpreter on the flag protocol of protocol.cuh) and by the CPU test that checks it
 * (tests/unit/test_island_sched.c: every split, every world size, bit for bit, and the workspace hazard
 * rules). A rank's schedule is a list of steps: a MOVE or REDUCE of one shard (sources in the order they are
 * reduced, destinations), or a SYNC (every rank's same-numbered block). Every step works on the same
 * positions of a shard, round by round (kernel.cuh: block b handles the same positions everywhere), so
 * one description serves every message size. Plain C: host, kernel and test share the structs. */
#ifndef SYMMEM_COLLECTIVES_ISLAND_H
#define SYMMEM_COLLECTIVES_ISLAND_H

#include <stddef.h>
#include <stdint.h>

#include "base/kinds.h"
#include "collectives/kernel_abi.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- islands -------------------------------------------------------------------------------------------- */
/* Which island each rank is in, numbered 0..count-1 in the order of each island's lowest rank. */
typedef struct symmem_island_split {
    int nranks, count;
    uint8_t of[SYMMEM_MAX_RANKS];
} symmem_island_split_t;

/* Islands from each rank's host NUMA node (numa[q], -1 unknown: the unknown ones form one island). */
void symmem_island_split_from_numa(int nranks, const int *numa, symmem_island_split_t *s);
/* Parse an island list (SYMMEM_ISLANDS): islands separated by ',', each a rank "a" or a range "a-b", or
 * several of them joined by '+' ("0-3,4-7"; "0-2,3-7"; "0-1+4-5,2-3+6-7"); every rank 0..nranks-1 exactly
 * once. 0, or -1 with a message in err (what is wrong, the expected form). */
int symmem_island_split_parse(const char *text, int nranks, symmem_island_split_t *s, char *err, size_t errlen);
/* "0-3,4-7" style, the inverse of the parser (ranks of an island in order, runs as ranges). */
void symmem_island_split_format(const symmem_island_split_t *s, char *out, size_t len);

/* ---- the schedule --------------------------------------------------------------------------------------- */
#define SYMMEM_ISLAND_MAX_STEPS 40 /* 2n + 3 at most (island.c), n <= SYMMEM_MAX_RANKS */
#define SYMMEM_ISLAND_MAX_ENDS SYMMEM_MAX_RANKS
/* SYMMEM_ISLAND_MAX_SYNCS (sync slots per round) and SYMMEM_ISLAND_SLOTS_PER_RANK (a schedule uses at most
 * that many times n workspace packs per shard position and round; splits that need more are refused) are
 * algos.h's, whose descriptor row is made of them. */

enum { SYMMEM_ISLAND_MOVE = 1, SYMMEM_ISLAND_REDUCE = 2, SYMMEM_ISLAND_SYNC = 3 };
/* An end of a step, 16 bits: where (2 bits), rank (6 bits: of a workspace slot), slot (8 bits).
 * IN: this rank's input of the step's shard (user memory); OUT: this rank's output of it; WS: slot `slot`
 * of rank `rank`'s workspace data half (sources: always this rank's own workspace). */
enum { SYMMEM_ISLAND_IN = 1, SYMMEM_ISLAND_OUT = 2, SYMMEM_ISLAND_WS = 3 };
#define SYMMEM_ISLAND_END(where, rank, slot) ((uint16_t)(((where) << 14) | ((rank) << 8) | (slot)))
#define SYMMEM_ISLAND_END_WHERE(e) ((int)((e) >> 14))
#define SYMMEM_ISLAND_END_RANK(e) ((int)(((e) >> 8) & 0x3f))
#define SYMMEM_ISLAND_END_SLOT(e) ((int)((e) & 0xff))

typedef struct symmem_island_step {
    uint8_t kind;  /* SYMMEM_ISLAND_MOVE (one source), REDUCE (sources reduced in the listed order), SYNC */
    uint8_t shard; /* the shard it moves (MOVE/REDUCE); the sync's index 0..2 (SYNC: epoch e + 1 + 2*index) */
    uint8_t nsrc, ndst;
    uint16_t src[SYMMEM_ISLAND_MAX_ENDS];
    uint16_t dst[SYMMEM_ISLAND_MAX_ENDS];
} symmem_island_step_t;
SYMMEM_STATIC_ASSERT(sizeof(symmem_island_step_t) == 4 + 4 * SYMMEM_ISLAND_MAX_ENDS, "steps are passed to kernels");

/* One rank's schedule of one operation: steps, in order, for every round. */
typedef struct symmem_island_sched {
    uint32_t nsteps;
    uint32_t slots; /* workspace slots per shard position the operation uses on any rank: 1 + the highest
                     * slot any rank's schedule of it names (the same on every rank; the call's units) */
    symmem_island_step_t step[SYMMEM_ISLAND_MAX_STEPS];
} symmem_island_sched_t;

/* The sync epochs a round consumes, SYMMEM_ISLAND_EPOCHS_PER_ROUND (algos.h): 2 per sync slot, 3 slots. An
 * odd number of two-epoch units, so consecutive rounds (and calls) alternate data halves as every other
 * algorithm's do (kernel.cuh, half_off: ((e >> 1) & 1)). */
SYMMEM_STATIC_ASSERT((SYMMEM_ISLAND_EPOCHS_PER_ROUND / 2) % 2 == 1, "rounds alternate data halves");

/* Rank `rank`'s schedule of `kind` (all_reduce, reduce_scatter, all_gather) for the split. 0; -1 with a
 * message in err when the split cannot be scheduled (more slots than SYMMEM_ISLAND_SLOTS_PER_RANK * n). */
int symmem_island_schedule(const symmem_island_split_t *s, symmem_coll_kind_t kind, int rank,
                           symmem_island_sched_t *out, char *err, size_t errlen);

/* Owner of shard `shard` in island `island` (island.c states the rule). */
int symmem_island_owner(const symmem_island_split_t *s, int island, int shard);

/* A hash of the split (the tag covers it: ranks that split differently stop with a mismatch). */
uint64_t symmem_island_hash(const symmem_island_split_t *s);

/* ---- kernels (island.cu) ---------------------------------------------------------------------------------- */
/* Kernel arguments: the protocol's parameters (kind, shards, rounds, epochs as for every algorithm; peer_send/peer_recv
 * unused) and this rank's schedule. */
typedef struct symmem_coll_island_params {
    symmem_coll_params_t c;
    symmem_island_sched_t s;
} symmem_coll_island_params_t;
SYMMEM_STATIC_ASSERT(sizeof(symmem_coll_island_params_t) <= 4096, "kernel parameters fit every architecture's limit");

/* Launch the island kernel of p->c.dtype x p->c.op; the cudaError_t. */
int symmem_coll_island_launch(const symmem_coll_island_params_t *p, int grid, int threads, void *stream, int pdl);

#ifdef __cplusplus
}
#endif
#endif
