/* The algorithm choice: from facts every rank of a communicator shares (rank count, worst link, the ring
 * figures the init probe measured) to the built-in algorithm table, push or pull, staged or not, where
 * buffers live. One function, topo_choose, serves both the communicator (its default table, SYMMEM_ALGO_AUTO)
 * and symmem-topo (the recommendation for a machine's GPUs taken as one communicator), so the two cannot
 * disagree; tests/topo/test_topo_choice.c runs both on every fixture. Pure: plain inputs, no I/O.
 *
 * Adding a rule (an island schedule, a copy-engine path): a fact in topo_choice_facts_t, a step in
 * topo_choose (choice.c), and the algorithm in SYMMEM_ALGO_LIST with its descriptor (collectives/algos.h). */
#ifndef SYMMEM_TOPOLOGY_CHOICE_H
#define SYMMEM_TOPOLOGY_CHOICE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kinds.h"
#include "symmem/symmem.h"
#include "topology/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the algorithm table ---------------------------------------------------------------------------- */
/* Rules "messages of `kind` of at most max_bytes (SIZE_MAX: no bound), in calls of `form`, use `algo`",
 * sorted by kind, form, then max_bytes. A rule's form is a symmem_form_t (which of the call's input and
 * output lie in a symmetric buffer: the algorithms read and write those in place, so each form ranks them
 * differently), or TOPO_FORM_ANY for every form. The built-in table comes from topo_choose and has rules of
 * any form; the tuning file and the autotune (collectives/tune.c) give the forms they measured. */
#define TOPO_TABLE_MAX_RULES 256
#define TOPO_FORM_ANY (-1)
typedef struct topo_rule {
    int kind; /* symmem_coll_kind_t */
    int form; /* symmem_form_t, or TOPO_FORM_ANY */
    size_t max_bytes;
    symmem_algo_t algo;
} topo_rule_t;

typedef struct topo_table {
    int nrules;
    topo_rule_t rules[TOPO_TABLE_MAX_RULES];
} topo_table_t;

/* Replace the rule with the same kind, form and bound, else insert it in order; 0, or -1 when the table is
 * full. topo_table_add is the form TOPO_FORM_ANY. */
int topo_table_add_form(topo_table_t *t, int kind, int form, size_t max_bytes, symmem_algo_t algo);
int topo_table_add(topo_table_t *t, int kind, size_t max_bytes, symmem_algo_t algo);
/* The first rule of `kind` and `form` whose bound holds `bytes`; above every bound the largest rule. Where
 * the table has no rule of that kind and form, the same among its rules of TOPO_FORM_ANY; AUTO when there is
 * none either. A rule of one concrete form never answers for another. topo_table_lookup is the form
 * TOPO_FORM_ANY. */
symmem_algo_t topo_table_lookup_form(const topo_table_t *t, symmem_coll_kind_t kind, int form, size_t bytes);
symmem_algo_t topo_table_lookup(const topo_table_t *t, symmem_coll_kind_t kind, size_t bytes);
/* Whether the table has a rule of `kind` and exactly `form`. */
int topo_table_has_form(const topo_table_t *t, symmem_coll_kind_t kind, int form);
/* Over kinds, bounds and algorithms (ranks compare it at init). */
uint64_t topo_table_hash(const topo_table_t *t);

/* ---- push or pull, from measured figures ------------------------------------------------------------- */
typedef enum topo_prefer {
    TOPO_PREFER_KEEP = 0, /* no clear winner (or no valid figures): the built-in table stands (it pushes) */
    TOPO_PREFER_PULL = 1, /* peer stores are slow: write < TOPO_PREFER_MARGIN * read */
    TOPO_PREFER_PUSH = 2, /* peer loads are slow: read < TOPO_PREFER_MARGIN * write (the table pushes already) */
} topo_prefer_t;
/* A direction must win by 30% before it overrides the built-in table: the probe is short, and the table's
 * choices also weigh latency, which bandwidth figures do not see. */
#define TOPO_PREFER_MARGIN 0.7
/* Any unit; non-positive or non-finite figures: KEEP. */
topo_prefer_t topo_prefer_from_figures(double read_gbs, double write_gbs);
/* "pull", "push", "the built-in defaults" */
const char *topo_prefer_name(topo_prefer_t prefer);
/* Whether peer bandwidth decides anything on this link class, i.e. whether the init probe runs by default
 * (SYMMEM_COLL_PROBE=auto) and symmem-topo counts its measured ring figures: PCIe only (the NVLink table was
 * measured on NVLink, and without P2P there is no peer access to measure). */
int topo_probe_useful(symmem_link_t link);

/* ---- the choice --------------------------------------------------------------------------------------- */
typedef struct topo_choice_facts {
    int nranks;
    symmem_link_t link;         /* the worst link between two ranks (topo_link_class) */
    double read_gbs, write_gbs; /* SM peer loads / stores, every rank at once with its successor, the minimum
                                   over ranks (the init probe; symmem-topo's ring figures); <= 0: none */
    /* The copy-engine two-shot's fact (topo_copy_engine_rule): copy-engine peer copies (cudaMemcpyAsync from local
     * into the successor's memory), every rank at once, the minimum over ranks; measured by the init probe
     * beside the SM figures, not by symmem-topo (its copy-engine figures are one pair at a time); <= 0:
     * none, and the copy-engine two-shot is never chosen. */
    double ce_gbs;
    /* The island schedule (SYMMEM_ALGO_ISLAND, collectives/island.h): the ranks' islands (CPU sockets: NUMA
     * nodes, or SYMMEM_ISLANDS) and each island's size; islands <= 1: none, or no schedule for the split. */
    int islands;
    uint8_t island_size[SYMMEM_MAX_RANKS];
    /* Where symmetric memory lives and who shares a link (the cost model, cost.h): */
    int host_memory;   /* pinned host memory (SYMMEM_PLACEMENT=host_numa): every access to it, a rank's own
                          included, crosses its GPU's link (also implied by link HOST) */
    int ranks_per_gpu; /* most ranks on one GPU (<= 1: one each; nranks: every rank on one GPU, as in the
                          PCIe lab, whose ranks then share that GPU's one link) */
    double rw_gbs;     /* the probe's SM copy from the successor's memory into the successor's memory, loads
                          and stores at once (how far they overlap on the link); <= 0: none */
    double barrier_us; /* the probe's barrier kernel among back-to-back ones, the slowest rank (a kernel's
                          fixed cost, one sync); <= 0: none */
} topo_choice_facts_t;

typedef struct topo_choice {
    topo_prefer_t prefer;              /* what the figures said (KEEP without figures) */
    int measured;                      /* figures were given and valid */
    symmem_topo_direction_t direction; /* PULL when the figures prefer pull, else PUSH */
    int staged;                        /* the largest all-reduces run as a permutation of pushes */
    symmem_placement_t placement;      /* HOST_NUMA when some pair has no P2P (link HOST), else DEVICE */
    topo_table_t table;                /* the built-in table */
    size_t fused_oneshot_max;          /* all_reduce_add_rmsnorm: one-shot up to here (SIZE_MAX: always) */
    size_t copy_engine_above;            /* collectives larger than this run the copy-engine two-shot (SIZE_MAX: none) */
} topo_choice_t;

void topo_choose(const topo_choice_facts_t *facts, topo_choice_t *out);

/* The machine the cost model prices for these facts (cost.h): per-link-class defaults (choice.c states each
 * figure and where it comes from), replaced by the facts' measured figures where they are valid. */
void topo_choice_machine(const topo_choice_facts_t *facts, topo_cost_machine_t *m);
/* The algorithms the built-in table chooses among for `kind` (in order of preference on a tie): the push
 * algorithms, or the pull ones where the figures prefer pull; on PCIe (device memory) one-shot push and the
 * staged permutation only (root complexes under all-to-all traffic, which the model does not see); an
 * all-reduce of ranks that all share one GPU's device memory also the two-shot pull. */
void topo_choice_candidates(const topo_choice_facts_t *facts, topo_prefer_t prefer, symmem_coll_kind_t kind,
                            topo_cost_candidates_t *out);

/* The placement the choice makes for a link class (SYMMEM_PLACEMENT=auto). */
symmem_placement_t topo_choose_placement(symmem_link_t link);

/* Fill facts->islands and island_size from one key per rank (ranks with equal keys share an island: the
 * communicator passes its split, symmem-topo each GPU's NUMA node, -1 unknown counting as one node). */
void topo_island_facts(int nranks, const int *key, topo_choice_facts_t *facts);

/* The floors of the island rule (choice.c, rules_islands; bench/NOTES.md, "Island schedule: floors"): the
 * least time in microseconds an operation of `kind` on `bytes` (as the table counts them) can take with
 * `algo` (ONESHOT_PUSH, STAGED or ISLAND) on a PCIe machine of the facts' islands, from the bytes into each
 * GPU, the bytes over the link into each island, and the syncs; negative for other algorithms. */
double topo_island_floor_us(const topo_choice_facts_t *facts, symmem_coll_kind_t kind, symmem_algo_t algo,
                            size_t bytes);

/* all_reduce_add_rmsnorm: one-shot moves (n-1)*S into each GPU after one one-way trip, two-shot 2(n-1)/n*S
 * after two, so two-shot pays from S* = n*L*B / ((n-1)(n-2)) bytes (L one-way latency, B bandwidth per GPU
 * of the link class); never at n <= 2 (SIZE_MAX). */
size_t topo_fused_crossover_bytes(int nranks, symmem_link_t link);

/* ---- the copy-engine two-shot (SYMMEM_ALGO_COPY_ENGINE) -------------------------------------------------------
 * Chosen only on PCIe, only where the init probe measured copy-engine copies faster than the SM transfer
 * the table's large messages use (peer stores when it pushes, loads when it pulls) by the push/pull margin:
 * sm < TOPO_PREFER_MARGIN * ce; then for every collective larger than topo_copy_engine_above_bytes. */
/* The size above which the copy-engine two-shot beats the SM schedule, from the floors (docs/collectives.md,
 * "Copy-engine two-shot"): both move 2(n-1)/n of an all-reduce's bytes through each GPU ((n-1)/n for
 * reduce-scatter and all-gather), the copy engines at ce_gbs, the SM schedule at sm_gbs; the copy engines pay per round
 * 2(n-1) copies of TOPO_CE_COPY_NS fixed cost each (n-1 for reduce-scatter, all-gather) and two more syncs
 * of TOPO_CE_SYNC_NS (the start and the end). Rounded up to a power of two, at least 1 MiB; SIZE_MAX when
 * the copy engines are not faster (or figures are missing). */
#define TOPO_CE_COPY_NS 2000.0
#define TOPO_CE_SYNC_NS 1000.0
size_t topo_copy_engine_above_bytes(int nranks, int kind, double sm_gbs, double ce_gbs);

/* ---- where a framework hands all-reduces to its other backend ------------------------------------------- */
/* The largest all-reduce a framework with another backend (NCCL's ring) should send to symmem when the
 * ranks' worst link is `link`: SIZE_MAX where symmem is the better choice at every size its workspace takes,
 * 0 for SYMMEM_LINK_NONE (no collectives). symmem_link_preferred_max_bytes and
 * symmem_comm_preferred_max_bytes (comm/binding.c) give it to bindings. */
size_t topo_handoff_bytes(symmem_link_t link);

#ifdef __cplusplus
}
#endif
#endif
