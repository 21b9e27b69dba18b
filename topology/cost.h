/* The cost model: what one collective takes with one algorithm on one machine, from the crossings it makes
 * (one-way trips of data or flags, flag syncs, kernels, copy-engine copies) and the bytes each link
 * carries, with the ranks that share each link (a GPU's own link, which all ranks of the PCIe lab share; the
 * link between islands), fed by measured constants where there are some (the init probe's bandwidths, the
 * barrier it times) and by per-link-class defaults where there are none. The algorithm choice
 * (choice.c, topo_choose) is its output; symmem-bench --model prints it next to measured times; the
 * autotune (collectives/autotune.h) measures only the candidates it leaves. Pure: plain inputs, no I/O.
 *
 * How an algorithm is described (topo_cost_flow): per rank, in bytes per byte of the operation's size S (as
 * the table counts it: the all-reduce's message, the whole n-shard buffer of reduce-scatter and
 * all-gather), for each data phase between two crossings,
 *   rw, rr  SM stores into / loads from peers' symmetric memory,
 *   ce      copy-engine copies into peers' memory,
 *   lw, lr  stores into / loads from the rank's own symmetric memory: its workspace (staging, slots,
 *           gather areas) and the user's input and output, which lie in a symmetric buffer in the cases
 *           the model describes (zero copy: symmem-bench's default, the autotune's buffers),
 *   lp      Lamport slots polled and cleared (each byte loaded and stored once more in its own memory),
 *   sock    bytes over the link into one island, where the phase is not an all-to-all (the island
 *           schedule); otherwise the all-to-all share of rw + rr + ce,
 * and the crossings: trips (one-way trips on the critical path: a Lamport arrival or a flag sync), syncs (of
 * those, the flag syncs, which also pay a release fence and the block's barrier), kernels and copies.
 *
 * How a machine prices it (topo_cost_us): a phase takes the longest of
 *   its GPU link: symmetric memory in device memory: rw / write_gbs and rr / read_gbs (peers' stores into
 *                 this GPU arrive over the same link, which the probe's figures include: every rank stores
 *                 into its successor at once); in pinned host memory (SYMMEM_PLACEMENT=host_numa): every
 *                 access to symmetric memory, the rank's own included, crosses the GPU's link: stores
 *                 rw + lw + ce out, loads rr + lr in; loads and stores at once overlap by `duplex`,
 *   its socket link (islands: the smallest island's link, m(n - m) of every all-to-all byte),
 * plus, in device memory, (lw + lr) / local_gbs (the rank's own passes over HBM; Lamport polls and clears
 * hit the L2 that the peers' stores just filled and cost nothing there; in host memory they cross the link
 * both ways like every other access). Figures are per rank with
 * every rank at once (what the probe measures), so ranks that share a link share its capacity. The
 * operation then takes kernels * kernel_us + trips * trip_us + syncs * sync_us + copies * ce_copy_us + the
 * phases. The floor (topo_cost_floor_us) is the same without the fixed costs (kernels, fences, copies) and
 * without local passes: what the links and the trips allow.
 *
 * What it does not see (bench/NOTES.md, "The cost model"): rounds (a message larger than the workspace
 * takes several, each with its trips: at most a few microseconds against milliseconds of data there),
 * polls that find nothing yet, contention inside a root complex under all-to-all traffic (why PCIe
 * prefers the staged permutation on a tie), the caches. */
#ifndef SYMMEM_TOPOLOGY_COST_H
#define SYMMEM_TOPOLOGY_COST_H

#include <stddef.h>
#include <stdint.h>

#include "base/kinds.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the machine ------------------------------------------------------------------------------------------ */
typedef struct topo_cost_machine {
    int nranks;
    int host_memory;    /* symmetric memory is pinned host memory: every access to it crosses the GPU's link */
    int ranks_per_link; /* ranks whose traffic shares one GPU's link (ranks per GPU) */
    double write_gbs;   /* per rank, every rank at once: SM stores into the memory its peers' accesses reach */
    double read_gbs;    /* the same for SM loads */
    double duplex;      /* loads and stores at once: 1 they overlap fully, 0 they take turns (host memory) */
    double local_gbs;   /* per rank: its own passes over device memory; <= 0: free (floors) */
    double ce_gbs;      /* per rank: copy-engine copies into peers, every rank at once; <= 0: none measured */
    double trip_us;     /* one-way trip: a store until the peer's poll sees it */
    double sync_us;     /* a flag sync beyond its trip: release fence, the block's barrier */
    double kernel_us;   /* a kernel's fixed cost among back-to-back ones (start, state protocol, drain) */
    double ce_copy_us;  /* a copy-engine copy's fixed cost */
    double socket_gbs;  /* the link into one island, per direction, all the pairs that cross it */
    int islands;        /* <= 1: none */
    uint8_t island_size[SYMMEM_MAX_RANKS];
} topo_cost_machine_t;

/* ---- an algorithm's crossings and bytes --------------------------------------------------------------------- */
#define TOPO_COST_MAX_PHASES 3
typedef struct topo_cost_phase {
    double rw, rr, ce, lw, lr, lp; /* per rank, bytes per byte of S (see above) */
    double sock;               /* own_sock: over the link into one island per byte of S */
    int own_sock;              /* 0: the link into an island carries the all-to-all share of rw + rr + ce */
} topo_cost_phase_t;

typedef struct topo_cost_flow {
    int nphases;
    topo_cost_phase_t ph[TOPO_COST_MAX_PHASES];
    double trips;   /* one-way trips on the critical path (Lamport arrivals and flag syncs) */
    double syncs;   /* flag syncs among them */
    double kernels; /* kernel launches */
    double copies;  /* copy-engine copies */
} topo_cost_flow_t;

/* The flow of `algo` for `kind` (all_reduce, reduce_scatter, all_gather) on n ranks at `bytes` (the pull
 * kernels change form at SYMMEM_COLL_ZC_MIN_BYTES); the machine's islands for the island schedule. 0, or -1
 * where the model has no such algorithm (AUTO, barrier, a value outside the list). */
int topo_cost_flow(const topo_cost_machine_t *m, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes,
                   topo_cost_flow_t *out);

/* Microseconds for one operation of `bytes` (as the table counts them); negative where topo_cost_flow has
 * no flow. */
double topo_cost_us(const topo_cost_machine_t *m, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes);
/* The same without the fixed costs (kernels, fences, copies) and local passes: links and trips only. */
double topo_cost_floor_us(const topo_cost_machine_t *m, symmem_coll_kind_t kind, symmem_algo_t algo,
                          size_t bytes);

/* ---- the table ---------------------------------------------------------------------------------------------- */
/* The candidates of a table, in order of preference: on a tie (within TOPO_COST_TIE, relative) the earlier
 * one stands. */
#define TOPO_COST_TIE 1e-9
typedef struct topo_cost_candidates {
    int n;
    symmem_algo_t algo[SYMMEM_ALGO_COUNT];
} topo_cost_candidates_t;

/* The least predicted time among `c` at `bytes`; *us its time (may be NULL). AUTO when c is empty. */
symmem_algo_t topo_cost_best(const topo_cost_machine_t *m, symmem_coll_kind_t kind, const topo_cost_candidates_t *c,
                             size_t bytes, double *us);

/* Rules for `kind` into `rules` (max_bytes ascending, the last SIZE_MAX), the least predicted time among `c`
 * at every size from 1 KiB to 1 GiB: the bounds where the winner changes, found by bisection inside steps of
 * 1/16 and rounded down to a KiB; the last rule covers every larger size, the first every smaller one.
 * `price`: topo_cost_us or topo_cost_floor_us. Returns the number of rules (at most max). */
typedef double (*topo_cost_price_fn)(const topo_cost_machine_t *m, symmem_coll_kind_t kind, symmem_algo_t algo,
                                     size_t bytes);
int topo_cost_rules(const topo_cost_machine_t *m, symmem_coll_kind_t kind, const topo_cost_candidates_t *c,
                    topo_cost_price_fn price, size_t *max_bytes, symmem_algo_t *algo, int max);

#ifdef __cplusplus
}
#endif
#endif
