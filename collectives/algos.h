/* The algorithm descriptors: one row per algorithm of SYMMEM_ALGO_LIST (symmem.h), generated from that
 * list, saying for each operation it serves what the host plans with and what the kernels consume: the
 * kernel family (its kernel file and entry), the workspace packs per shard position, whether it may read
 * the senders' inputs in place and store results into the peers' outputs (zero copy in and out), and the
 * sync epochs it uses. Host (plan.c) and kernels (p.epochs) read this table and nothing else about an
 * algorithm's shape.
 *
 * Adding an algorithm: its entry in SYMMEM_ALGO_LIST, a row SYMMEM_COLL_DESC_<NAME> below (without it the
 * table does not compile), and its kernel file; a new kernel template is one more family in
 * SYMMEM_COLL_FAMILY_LIST. Then a rule in the choice (topology/choice.c) if AUTO should pick it. */
#ifndef SYMMEM_COLLECTIVES_ALGOS_H
#define SYMMEM_COLLECTIVES_ALGOS_H

#include <stdint.h>

#include "base/kinds.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel families: one kernel template each (collectives/<file>.cu), instantiated per dtype x op:
 * X(NAME, value, file). The Lamport family has a second instantiation with the round headers of
 * SYMMEM_LAMPORT_CHECK (launch.cu). The copy-engine family's kernel is a step of a host-driven schedule
 * (copy_engine.h), launched by copy_engine.c with parameters of its own, never by symmem_coll_launch; the
 * island and wire families' kernels take a schedule beside the parameters (island.h, wire.h). */
#define SYMMEM_COLL_FAMILY_LIST(X)                                                                         \
    X(PULL, 0, pull)                                                                                       \
    X(PUSH, 1, push)                                                                                       \
    X(LAMPORT, 2, lamport)                                                                                 \
    X(ISLAND, 3, island)                                                                                   \
    X(COPY, 4, copy_engine)                                                                                \
    X(WIRE, 5, wire)

typedef enum symmem_coll_family {
    SYMMEM_COLL_FAM_NONE = -1, /* the row serves no such operation (AUTO) */
#define SYMMEM_COLL_FAM_ENUM_(name, value, file) SYMMEM_COLL_FAM_##name = value,
    SYMMEM_COLL_FAMILY_LIST(SYMMEM_COLL_FAM_ENUM_)
#undef SYMMEM_COLL_FAM_ENUM_
    SYMMEM_COLL_FAM_COUNT
} symmem_coll_family_t;

/* Zero copy in: the pull kernels may read every rank's input where it lies, when it lies in a symmetric
 * buffer of the communicator (plan.c states the rule ranks must follow). */
enum {
    SYMMEM_COLL_ZC_NO = 0,
    SYMMEM_COLL_ZC_LARGE = 1, /* from SYMMEM_COLL_ZC_MIN_BYTES on: it costs one more sync at the end */
    SYMMEM_COLL_ZC_ANY = 2,   /* at any size: a later sync of the call already implies it */
};
/* Zero copy out: the results are stored straight into every rank's receive buffer when it is symmetric. */
enum {
    SYMMEM_COLL_ZO_NO = 0,
    SYMMEM_COLL_ZO_YES = 1,
    SYMMEM_COLL_ZO_WITH_ZC = 2, /* only when it also reads in place; both ways, it needs no workspace */
};

/* Workspace packs (16 bytes) per shard position and round, in a data half (a Lamport buffer for the Lamport
 * family), for n ranks: per_n2 * n^2 + per_n * n + fixed (symmem_coll_packs_count). */
typedef struct symmem_coll_packs {
    uint8_t per_n2, per_n, fixed;
} symmem_coll_packs_t;

/* One operation's row of an algorithm. Epochs: epochs_per_round per round, plus zero_copy_in_end_epochs when
 * it reads in place (the end sync); every Lamport-family round also consumes one Lamport round. */
typedef struct symmem_coll_algo_op {
    int8_t family;                           /* symmem_coll_family_t */
    symmem_coll_packs_t packs;               /* the workspace it stages through */
    symmem_coll_packs_t packs_zero_copy_out; /* the same when it stores results into the peers' outputs */
    uint8_t zero_copy_in;                    /* SYMMEM_COLL_ZC_* */
    uint8_t zero_copy_out;                   /* SYMMEM_COLL_ZO_* */
    uint8_t epochs_per_round, zero_copy_in_end_epochs;
    uint8_t every_shard; /* the grid covers all n shards of a round (every rank reduces every shard) */
} symmem_coll_algo_op_t;

static inline uint64_t symmem_coll_packs_count(const symmem_coll_packs_t *packs, uint64_t n)
{
    return packs->per_n2 * n * n + packs->per_n * n + packs->fixed;
}

/* The table's cells, by field name; a field left out is 0 (no packs, ZC_NO, ZO_NO, no epochs). The family
 * comes first and always: 0 would silently be the pull family. */
#define SYMMEM_COLL_OP(fam, ...) {.family = SYMMEM_COLL_FAM_##fam, __VA_ARGS__}
#define SYMMEM_COLL_OP_NONE {.family = SYMMEM_COLL_FAM_NONE}
/* A row: exactly one cell per operation (a missing or an extra one does not compile). */
#define SYMMEM_COLL_ROW(all_reduce, reduce_scatter, all_gather)                                            \
    {[SYMMEM_COLL_ALL_REDUCE] = all_reduce, [SYMMEM_COLL_REDUCE_SCATTER] = reduce_scatter,                 \
     [SYMMEM_COLL_ALL_GATHER] = all_gather}

/* The cells that several rows share. */
/* pull, staging[s][segp]: one sync per round, and one at the end with zero copy in */
#define SYMMEM_COLL_OP_PULL_STAGED_                                                                        \
    SYMMEM_COLL_OP(PULL, .packs = {.per_n = 1}, .packs_zero_copy_out = {.per_n = 1},                       \
                   .zero_copy_in = SYMMEM_COLL_ZC_LARGE, .epochs_per_round = 2, .zero_copy_in_end_epochs = 2)
/* pull all-gather: staging of my shard only */
#define SYMMEM_COLL_OP_PULL_GATHER_                                                                        \
    SYMMEM_COLL_OP(PULL, .packs = {.fixed = 1}, .packs_zero_copy_out = {.fixed = 1},                       \
                   .zero_copy_in = SYMMEM_COLL_ZC_LARGE, .epochs_per_round = 2, .zero_copy_in_end_epochs = 2)
/* push with flags, slots[src][segp] (reduce-scatter) or gather[s][segp] (all-gather): one sync per round */
#define SYMMEM_COLL_OP_PUSH_SLOTS_                                                                         \
    SYMMEM_COLL_OP(PUSH, .packs = {.per_n = 1}, .packs_zero_copy_out = {.per_n = 1}, .epochs_per_round = 2)
/* Lamport, slots[src][segp]: no sync at all */
#define SYMMEM_COLL_OP_LAMPORT_SLOTS_                                                                      \
    SYMMEM_COLL_OP(LAMPORT, .packs = {.per_n = 1}, .packs_zero_copy_out = {.per_n = 1})

/* The rows: one per algorithm, SYMMEM_COLL_DESC_<NAME>. The half layouts each kernel file states (pull.cu,
 * push.cu, lamport.cu) are what the pack counts measure; tests/unit/test_coll_model.c restates them from
 * the kernels and compares. */
#define SYMMEM_COLL_DESC_AUTO SYMMEM_COLL_ROW(SYMMEM_COLL_OP_NONE, SYMMEM_COLL_OP_NONE, SYMMEM_COLL_OP_NONE)
#define SYMMEM_COLL_DESC_ONESHOT_PULL                                                                      \
    SYMMEM_COLL_ROW(SYMMEM_COLL_OP_PULL_STAGED_, SYMMEM_COLL_OP_PULL_STAGED_, SYMMEM_COLL_OP_PULL_GATHER_)
/* all-reduce: Lamport slots[src][n * segp], every rank reduces every shard; reduce-scatter: Lamport
 * slots[src][segp]; all-gather: flag push into gather[s][segp] */
#define SYMMEM_COLL_DESC_ONESHOT_PUSH                                                                      \
    SYMMEM_COLL_ROW(SYMMEM_COLL_OP(LAMPORT, .packs = {.per_n2 = 1}, .every_shard = 1),                     \
                    SYMMEM_COLL_OP_LAMPORT_SLOTS_, SYMMEM_COLL_OP_PUSH_SLOTS_)
/* all-reduce: staging + result[segp], reads symmetric inputs in place at any size and then may store into
 * symmetric outputs too (both: no workspace); the others as one-shot pull */
#define SYMMEM_COLL_DESC_TWOSHOT_PULL                                                                      \
    SYMMEM_COLL_ROW(SYMMEM_COLL_OP(PULL, .packs = {.per_n = 1, .fixed = 1},                                \
                                   .packs_zero_copy_out = {.per_n = 1, .fixed = 1},                        \
                                   .zero_copy_in = SYMMEM_COLL_ZC_ANY, .zero_copy_out = SYMMEM_COLL_ZO_WITH_ZC, \
                                   .epochs_per_round = 2),                                                 \
                    SYMMEM_COLL_OP_PULL_STAGED_, SYMMEM_COLL_OP_PULL_GATHER_)
/* all-reduce: slots[src][segp] + gather[s][segp], no gather area when the results go straight out */
#define SYMMEM_COLL_DESC_TWOSHOT_PUSH                                                                      \
    SYMMEM_COLL_ROW(SYMMEM_COLL_OP(PUSH, .packs = {.per_n = 2}, .packs_zero_copy_out = {.per_n = 1},       \
                                   .zero_copy_out = SYMMEM_COLL_ZO_YES, .epochs_per_round = 2),            \
                    SYMMEM_COLL_OP_PUSH_SLOTS_, SYMMEM_COLL_OP_PUSH_SLOTS_)
/* as two-shot push, but the gather area stays with zero copy out (the result is staged there first) */
#define SYMMEM_COLL_DESC_STAGED                                                                            \
    SYMMEM_COLL_ROW(SYMMEM_COLL_OP(PUSH, .packs = {.per_n = 2}, .packs_zero_copy_out = {.per_n = 2},       \
                                   .zero_copy_out = SYMMEM_COLL_ZO_YES, .epochs_per_round = 2),            \
                    SYMMEM_COLL_OP_PUSH_SLOTS_, SYMMEM_COLL_OP_PUSH_SLOTS_)
/* all-reduce: Lamport slots[src][segp] + gather[s][segp]; reduce-scatter: its first half (= one-shot push);
 * all-gather: its second half, the flag push */
#define SYMMEM_COLL_DESC_TWOSHOT_LAMPORT                                                                   \
    SYMMEM_COLL_ROW(SYMMEM_COLL_OP(LAMPORT, .packs = {.per_n = 2}, .packs_zero_copy_out = {.per_n = 2}),   \
                    SYMMEM_COLL_OP_LAMPORT_SLOTS_, SYMMEM_COLL_OP_PUSH_SLOTS_)
/* copy-engine two-shot (copy_engine.h): all-reduce slots[src][segp] + gather[s][segp]; reduce-scatter the slots,
 * all-gather the gather slots; two epochs per kernel (two kernels a round for all-reduce, one for the
 * others; the start sync's two more are the plan's: symmem_ce_epochs) */
#define SYMMEM_COLL_DESC_COPY_ENGINE                                                                       \
    SYMMEM_COLL_ROW(SYMMEM_COLL_OP(COPY, .packs = {.per_n = 2}, .packs_zero_copy_out = {.per_n = 2},       \
                                   .epochs_per_round = 4),                                                 \
                    SYMMEM_COLL_OP(COPY, .packs = {.per_n = 1}, .packs_zero_copy_out = {.per_n = 1},       \
                                   .epochs_per_round = 2),                                                 \
                    SYMMEM_COLL_OP(COPY, .packs = {.per_n = 1}, .packs_zero_copy_out = {.per_n = 1},       \
                                   .epochs_per_round = 2))

/* island: every operation runs the schedule of collectives/island.h in at most SYMMEM_ISLAND_SLOTS_PER_RANK * n
 * slots per shard position (G, A and X slots: island.c; a call plans with the slots its split's schedule
 * uses, symmem_island_sched_t.slots), SYMMEM_ISLAND_MAX_SYNCS sync slots per round, two epochs each; its
 * kernels take the schedule (symmem_coll_island_launch). The bounds are here, where the row needs them. */
#define SYMMEM_ISLAND_SLOTS_PER_RANK 4
#define SYMMEM_ISLAND_MAX_SYNCS 3
#define SYMMEM_ISLAND_EPOCHS_PER_ROUND (2 * SYMMEM_ISLAND_MAX_SYNCS)
#define SYMMEM_COLL_OP_ISLAND_                                                                             \
    SYMMEM_COLL_OP(ISLAND, .packs = {.per_n = SYMMEM_ISLAND_SLOTS_PER_RANK},                               \
                   .packs_zero_copy_out = {.per_n = SYMMEM_ISLAND_SLOTS_PER_RANK},                         \
                   .epochs_per_round = SYMMEM_ISLAND_EPOCHS_PER_ROUND)
#define SYMMEM_COLL_DESC_ISLAND SYMMEM_COLL_ROW(SYMMEM_COLL_OP_ISLAND_, SYMMEM_COLL_OP_ISLAND_, SYMMEM_COLL_OP_ISLAND_)

/* the compressed wire (wire.h): all-reduce only, the island schedule's all-reduce over quantized slots. Its
 * slots hold about 9 bytes per 16-byte pack of input, so its rounds are planned by symmem_wire_geometry from
 * the schedule's slots; the packs here bound what the generic geometry would grant it. */
#define SYMMEM_COLL_DESC_WIRE_INT8                                                                         \
    SYMMEM_COLL_ROW(SYMMEM_COLL_OP(WIRE, .packs = {.per_n = SYMMEM_ISLAND_SLOTS_PER_RANK},                 \
                                   .packs_zero_copy_out = {.per_n = SYMMEM_ISLAND_SLOTS_PER_RANK},         \
                                   .epochs_per_round = SYMMEM_ISLAND_EPOCHS_PER_ROUND),                    \
                    SYMMEM_COLL_OP_NONE, SYMMEM_COLL_OP_NONE)

/* The row of `algo` for `kind` (all_reduce, reduce_scatter, all_gather); NULL outside the table. */
const symmem_coll_algo_op_t *symmem_coll_algo(symmem_coll_kind_t kind, symmem_algo_t algo);
/* Its family (SYMMEM_COLL_FAM_NONE outside the table). */
int symmem_coll_family_of(symmem_coll_kind_t kind, symmem_algo_t algo);

#ifdef __cplusplus
}
#endif
#endif
