/* The collectives' host side inside collectives/: the per-communicator state (comm->coll) and what the
 * files of the host side need from each other: init agreement (agree.c), the workspace (workspace.c), the
 * error record and launch history (errors.c), the checks every entry point starts with. The kernels'
 * boundary is kernel_abi.h, the pure plan of a call plan.h, the algorithm table tune.h, what keeps every
 * rank's kernel resident residency.h. */
#ifndef SYMMEM_COLLECTIVES_COLL_INTERNAL_H
#define SYMMEM_COLLECTIVES_COLL_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "collectives/coll.h"
#include "collectives/graphreg.h"
#include "collectives/island.h"
#include "collectives/kernel_abi.h"
#include "collectives/plan.h"
#include "collectives/residency.h"
#include "collectives/tune.h"
#include "collectives/wire.h"
#include "topology/choice.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SYMMEM_COLL_HIST 16
/* The collectives' per-communicator state (comm->coll). Written at init; afterwards only the launch
 * history and the error bookkeeping change. */
struct symmem_coll {
    symmem_buffer_t ws;                  /* symmetric workspace */
    char *ws_peers[SYMMEM_MAX_RANKS];    /* every rank's workspace, mapped here */
    symmem_coll_layout_t layout;         /* its areas */
    symmem_coll_dev_state_t *dev_state;  /* device memory */
    symmem_coll_error_record_t *err;     /* host-mapped pinned memory, host address */
    symmem_coll_error_record_t *err_dev; /* the same record, device address */
    symmem_coll_grid_t grid;             /* blocks per kernel (residency.h), threads per block: agreed */
    int capacity;                        /* blocks of SYMMEM_COLL_THREADS threads this GPU keeps resident */
    int mps;                             /* this GPU's contexts are shared through MPS */
    int pdl;                             /* programmatic stream serialization (sm_90+, 1 rank per GPU) */
    int lam_check;                       /* Lamport round headers (SYMMEM_LAMPORT_CHECK; on if any rank asks) */
    symmem_coll_tuning_t tuning;         /* the algorithm table (tune.h), the same on every rank */
    int error_reported;                  /* the kernel error record was turned into comm->async_error */
    /* A peer rank in this process on this GPU (symmem_comm_init_all with several ranks per GPU): its
     * kernels and ours must run at the same time, which only separate non-legacy streams allow. */
    int colocated_peer;  /* lowest such rank, -1 if none */
    int colocated_ranks; /* ranks of this process on this GPU, this one included (symmem_coll_residency_colocated) */
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
    int probe;                              /* 1: measure (every rank, decided in agree.c) */
    int probed;                             /* the figures below were measured */
    double probe_read_gbs, probe_write_gbs; /* SM peer load / store GB/s, all ranks at once, min over ranks */
    double probe_ce_gbs;                    /* copy-engine peer copies, the same way (the copy-engine two-shot's choice) */
    double probe_rw_gbs;                    /* SM loads and stores at once, the same way (the model's duplex) */
    double probe_barrier_us;                /* a barrier kernel among back-to-back ones, the slowest rank */
    /* The cost model's machine (topology/cost.h) for this communicator: its facts and, where the probe ran,
     * its figures; the same on every rank. What the autotune prunes with and symmem-bench --model prints. */
    topo_cost_machine_t machine;
    int autotune_state;                     /* symmem_autotune_state_t (collectives/autotune.h) */
    /* The island algorithm (island.h): the split (SYMMEM_ISLANDS, else NUMA nodes: the same facts on every
     * rank; the tag covers its hash), this rank's schedules of all_reduce, reduce_scatter, all_gather, or
     * why there are none (island_error non-empty: its calls fail with that). */
    symmem_island_split_t islands;
    uint64_t islands_hash;
    symmem_island_sched_t island_sched[3];
    char island_error[384];
    symmem_wire_state_t wire; /* the compressed wire's settings and one-island schedule (wire.c) */
    /* Ordinary buffers of captured all-reduces mapped into the peers (graphreg.h): on where every rank asks
     * (SYMMEM_GRAPH_REGISTER), no two ranks share a process and the buffers are device memory every GPU maps
     * (agree.c); the exchanges so far; the peers' allocations this rank has mapped. */
    int graph_reg;
    uint64_t reg_seq;
    struct symmem_reg_map *reg_maps;
    size_t reg_nmaps, reg_cap;
    int reg_full_warned;
};

/* ---- a call (coll.c, plan.c) --------------------------------------------------------------------------------- */
typedef struct symmem_coll_call {
    symmem_coll_kind_t kind;
    const void *send;
    void *recv;
    size_t count;
    symmem_dtype_t dtype;
    symmem_redop_t op;
    symmem_algo_t algo;
    symmem_stream_t stream;
    const char *name; /* the public call, for messages */
    const struct symmem_coll_reg *reg; /* its ordinary buffers mapped into the peers (graphreg.h), or NULL */
} symmem_coll_call_t;
/* The call's form for AUTO's table (symmem_form_t): whether its input and its output lie in a symmetric buffer
 * of the communicator (the lookup the zero-copy rules below start from). */
symmem_form_t symmem_coll_form(symmem_comm_t comm, const symmem_coll_call_t *c);
/* The parameters of a call of `algo` (plan.c): the communicator's (symmem_coll_params_base), then the call's
 * buffers, kind, algorithm, dtype, op, alignment and in place; no plan yet. */
void symmem_coll_call_params(symmem_comm_t comm, const symmem_coll_call_t *c, symmem_algo_t algo,
                             symmem_coll_params_t *p);
/* Zero copy in (plan.c): the senders' inputs read in place when they lie in a symmetric buffer at the same
 * region on every rank (p->peer_send filled, *h gets what the tag must cover); any_size: the descriptor's
 * SYMMEM_COLL_ZC_ANY. Zero copy out: the results stored straight into every rank's receive buffer (p->peer_recv).
 * 1 when taken, 0 for the copy path. */
int symmem_coll_zero_copy_in(symmem_comm_t comm, const symmem_coll_call_t *c, size_t in_bytes, size_t out_bytes,
                             int any_size, symmem_coll_params_t *p, uint32_t *h);
int symmem_coll_zero_copy_out(symmem_comm_t comm, const symmem_coll_call_t *c, size_t out_bytes,
                              symmem_coll_params_t *p, uint32_t *h);
/* A call as the public entry points run it, without their entry checks: for the library's own calls at
 * init (the probe's barriers, the autotune's measurements), whose communicator is not handed out yet.
 * Stream-ordered and capturable as the public calls. */
symmem_status_t symmem_coll_run(symmem_comm_t comm, const symmem_coll_call_t *c);
symmem_status_t symmem_coll_enqueue_barrier(symmem_comm_t comm, symmem_stream_t stream, const char *name);
/* The 16-bit tag of a planned call: what every rank's call must agree on (the kernels compare it). */
uint32_t symmem_coll_tag(const symmem_coll_call_t *c, const symmem_coll_params_t *p, int grid, int threads,
                         uint32_t region_hash);

/* ---- init (agree.c, workspace.c) ------------------------------------------------------------------------ */
/* Collective. This rank's wishes (grid from its GPU and the kernels' occupancy, block threads, launch mode,
 * Lamport check, SYMMEM_ALGO, the table loaded, the probe), then the agreement with every rank: the minima
 * of the grid limits, PDL only if every rank can, the check if any rank asks, the probe if all do;
 * SYMMEM_ALGO must match; differing tables fall back to the built-in one. */
symmem_status_t symmem_coll_agree(symmem_comm_t comm, struct symmem_coll *co, int blocks_per_sm);
/* Collective. Allocate the workspace (SYMMEM_WORKSPACE_BYTES), the device state and the error record;
 * zero the flags and the state, fill the Lamport areas with the empty word, and barrier: no peer pushes
 * before every rank's workspace is ready. */
symmem_status_t symmem_coll_workspace_init(symmem_comm_t comm, struct symmem_coll *co);
/* Local. Free what symmem_coll_workspace_init made; safe on a partly made workspace. */
void symmem_coll_workspace_fini(struct symmem_coll *co);

/* ---- entry points' checks and bookkeeping (errors.c) ---------------------------------------------------- */
/* The communicator is usable: CUDA backend, collectives initialised, no kernel error, not in its error
 * state (the message says why, once). */
symmem_status_t symmem_coll_check_usable(symmem_comm_t comm, const char *call);
/* Remember what was launched with which tag (error messages name the operation a late peer last signalled). */
void symmem_coll_record_launch(struct symmem_coll *co, uint32_t tag, symmem_coll_kind_t kind, symmem_algo_t algo,
                               symmem_dtype_t dtype, size_t count);
/* The parameters every kernel of the communicator shares: workspaces, state, error record, rank, layout,
 * timeout, Lamport check; the call's fields zero. */
void symmem_coll_params_base(symmem_comm_t comm, symmem_coll_params_t *p);

/* ---- the island algorithm's split and schedules, the choice's facts (agree.c) ----------------------------- */
/* Local, from facts every rank shares: the islands (SYMMEM_ISLANDS or the ranks' NUMA nodes) and this rank's
 * schedules into co; a split that cannot be scheduled (or a malformed SYMMEM_ISLANDS) leaves island_error
 * set and warns. */
void symmem_coll_island_init(symmem_comm_t comm, struct symmem_coll *co);
/* The facts of the choice (topology/choice.h) for this communicator: ranks, link class, the figures given (SM read,
 * write, copy engine), its islands (one when the island algorithm is unavailable). */
void symmem_coll_choice_facts(symmem_comm_t comm, const struct symmem_coll *co, double rd, double wr, double ce,
                              topo_choice_facts_t *f);

/* Which algorithms can run here (av[algo] != 0), from facts every rank agreed on: the island schedule where
 * the split has one, the copy engine unless the init probe found its copies failing. What the autotune
 * measures and what a loaded table keeps (agree.c). */
void symmem_coll_available(const struct symmem_coll *co, int *av);

/* ---- the compressed wire (wire.c) --------------------------------------------------------------------------- */
/* Local, before the agreement: SYMMEM_WIRE_GROUP and SYMMEM_WIRE_MIN_BYTES into co->wire, its one-island
 * schedule. */
void symmem_coll_wire_init(symmem_comm_t comm, struct symmem_coll *co);
/* A call that names a lossy algorithm: SYMMEM_INVALID_ARGUMENT where the wire does not serve it (the reason);
 * otherwise *algo stays (the wire runs) or becomes the exact algorithm AUTO chooses (below
 * SYMMEM_WIRE_MIN_BYTES, one rank). `bytes`: symmem_coll_message_bytes. */
symmem_status_t symmem_coll_wire_route_call(symmem_comm_t comm, const symmem_coll_call_t *c, size_t bytes,
                                            symmem_algo_t *algo);
/* Plan and launch the wire kernel for a call that symmem_coll_wire_route_call kept. */
symmem_status_t symmem_coll_wire_run(symmem_comm_t comm, const symmem_coll_call_t *c, symmem_algo_t algo);

/* ---- the autotune at init (autotune_gpu.c; collectives/autotune.h) ---------------------------------------- */
/* Collective, at the end of init (workspace ready, probe done): decide with every rank whether to measure
 * the table, measure, agree, save, and log what was chosen and why. A failure to measure leaves the model's
 * table (warned); an error only when the communicator itself failed (a peer gone, a kernel timed out). */
symmem_status_t symmem_coll_autotune_init(symmem_comm_t comm, struct symmem_coll *co);

#ifdef __cplusplus
}
#endif
#endif
