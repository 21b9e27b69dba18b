/* AUTO that learns the machine (SYMMEM_AUTOTUNE; docs/collectives.md, "How AUTO chooses"): at the first
 * communicator init under a tuning key (collectives/tune.h, symmem_coll_tune_key) without a table for it, the
 * ranks measure the candidates the cost model leaves (topology/cost.h) in each form of call (symmem_form_t:
 * ordinary tensors, a symmetric input, both symmetric) at every power-of-two size from 1 KiB to 4 MiB of
 * each op, then bisect between neighbouring sizes whose winners differ until the cut is measured, within a
 * budget, and take per size the fastest by the slowest rank; the table is saved where symmem-bench --tune
 * saves it and loaded by every later init. A framework adds the exact sizes it calls with
 * (symmem_tune_sizes: symmem_autotune_pins below).
 *
 * Every decision is the same on every rank: the plan (sizes, forms and candidates) is a pure function of
 * agreed facts, checked by hash; each step's times are allgathered and the maximum over ranks decides (so
 * the bisection's next sizes are the same everywhere); the budget is checked against the largest elapsed
 * time over ranks; the final table is compared by hash (ranks that differ drop it for the model's). This
 * file is the part without CUDA: the decision, the plan, the agreement and the table, driven by a measuring
 * callback (autotune_gpu.c times CUDA graphs of the collectives; the CPU tests inject times). */
#ifndef SYMMEM_COLLECTIVES_AUTOTUNE_H
#define SYMMEM_COLLECTIVES_AUTOTUNE_H

#include <stddef.h>
#include <stdint.h>

#include "base/kinds.h"
#include "collectives/tune.h"
#include "symmem/symmem.h"
#include "topology/cost.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SYMMEM_AUTOTUNE */
typedef enum symmem_autotune_mode {
    SYMMEM_AUTOTUNE_OFF = 0,   /* never: the model's table (or the tuning file's) */
    SYMMEM_AUTOTUNE_AUTO = 1,  /* when no tuning file has a table for this key */
    SYMMEM_AUTOTUNE_FORCE = 2, /* at every init, replacing the saved table */
} symmem_autotune_mode_t;
/* The parameter's value ("auto", "off"/"0", "force"/"1"); anything else warns once and means auto. */
symmem_autotune_mode_t symmem_autotune_mode(void);

/* What the autotune did at a communicator's init (symmem_coll_autotune_state). */
typedef enum symmem_autotune_state {
    SYMMEM_AUTOTUNE_NOT_RUN = 0,  /* off, one rank, SYMMEM_ALGO set, host backend */
    SYMMEM_AUTOTUNE_LOADED = 1,   /* a tuning file had the table for this key: nothing measured */
    SYMMEM_AUTOTUNE_MEASURED = 2, /* measured at this init (and saved, unless saving failed: the log says) */
    SYMMEM_AUTOTUNE_SKIPPED = 3,  /* wanted but not done (a graph capture running, a rank that could not,
                                     a failure): the model's table */
} symmem_autotune_state_t;
const char *symmem_autotune_state_name(symmem_autotune_state_t s);

/* ---- the decision (pure) ---------------------------------------------------------------------------------- */
/* What one rank knows when it decides whether to measure. */
typedef struct symmem_autotune_wish_in {
    symmem_autotune_mode_t mode;
    int nranks;
    int env_algo;     /* SYMMEM_ALGO names an algorithm: it overrides every table */
    int table_loaded; /* the tuning file had rules for this key (agreed across ranks) */
    int capturing;    /* a CUDA graph capture is running that this init could disturb */
    int host_backend; /* no GPU kernels to time */
    int shared_queues; /* ranks of this process on its GPU could share hardware queues (coll_internal.h,
                          symmem_coll_private_streams_safe): measuring could wait for itself */
} symmem_autotune_wish_in_t;
/* 1 (measure) or 0, with *state what init reports when nothing is measured and *why a short reason
 * ("SYMMEM_AUTOTUNE=off", "a CUDA graph capture is running", ...). */
int symmem_autotune_wish(const symmem_autotune_wish_in_t *in, symmem_autotune_state_t *state, const char **why);

/* ---- the plan ---------------------------------------------------------------------------------------------- */
typedef struct symmem_autotune_cfg {
    double budget_ms;     /* no step starts once the slowest rank has spent this long (SYMMEM_AUTOTUNE_BUDGET_MS) */
    size_t min_bytes;     /* measured sizes: powers of two from here... */
    size_t max_bytes;     /* ...to here (as the table counts them) */
    unsigned forms[SYMMEM_COLL_BARRIER]; /* per op, the forms measured (a mask of SYMMEM_FORM_BIT) */
    int refine;           /* bisection rounds between neighbouring sizes whose winners differ (0: none) */
    double refine_ratio;  /* no bisection between sizes closer than this ratio */
    double keep_factor;   /* candidates: predicted within this factor of the least prediction... */
    double keep_us;       /* ...or within this many microseconds of it */
    double tie;           /* measured within this fraction of the fastest, the model's choice stands */
    double graph_us;      /* a candidate's graph holds as many operations as fit in this much predicted time... */
    int min_ops;          /* ...at least this many... */
    int max_ops;          /* ...and at most this many (symmem_autotune_graph_ops) */
    double skip_factor;   /* not measured: read over this factor of the fastest at half the size (0: off) */
    double agree;         /* the measuring side repeats a candidate's timing until two medians agree within this
                             fraction... */
    int max_rounds;       /* ...or it has timed this many */
    double warmup_ms;     /* before the first step, the ranks run collectives for this long (a cold GPU, a fresh
                             MPS server, reads slow) */
} symmem_autotune_cfg_t;
/* The budget (the parameter), 1 KiB to 4 MiB; all-reduce in three forms (ordinary, symmetric input,
 * symmetric both: what frameworks, symmetric tensors and C users with symmetric buffers pass), reduce-scatter
 * and all-gather in two (ordinary, symmetric input); two bisection rounds (the cut known to 2^(1/4), 19%);
 * candidates within a factor 4 or 20 us of the least prediction, ties within 3%, graphs of 2500 us of
 * predicted time in 4 to 32 operations (20 or more wherever one operation is predicted under 125 us: every
 * decode size), skips over 2x, medians repeated until two agree within 3% (at most 4), 100 ms of warm-up.
 * The keep factor is wide because the model is least sure exactly where the choice is hard (bench/NOTES.md,
 * "The cost model"), and it prices every form as the symmetric one. */
void symmem_autotune_cfg_default(symmem_autotune_cfg_t *cfg);

/* Operations per graph for a step whose least prediction is pred_us: floor(graph_us / pred_us) within [min_ops,
 * max_ops] (max_ops where the prediction is not positive). Per operation, an algorithm's time depends on how
 * many run back to back (autotune_gpu.c, time_graph): graphs of 8 read what the bench's graphs of 10 read, to
 * within 4% per algorithm on the lab, where graphs of 4 read up to 15% slow, and a model's step holds 50 or
 * more; with the defaults every size predicted under 125 us (2.5 ms in 20) gets 20 to 32, and fewer operations
 * above keep the measuring time bounded (bench/NOTES.md, "The autotune's graph length"). Pure. */
int symmem_autotune_graph_ops(const symmem_autotune_cfg_t *cfg, double pred_us);

#define SYMMEM_AUTOTUNE_MAX_STEPS 256
typedef struct symmem_autotune_step {
    int32_t kind;        /* symmem_coll_kind_t */
    int32_t form;        /* symmem_form_t: which of the call's buffers the measurement puts in symmetric memory */
    int32_t ncand;
    int32_t pinned;      /* a size a framework declared (symmem_tune_sizes): its rule is exact, not a range */
    uint64_t bytes;
    int32_t algo[SYMMEM_ALGO_COUNT]; /* candidates, least predicted first */
    double pred_us[SYMMEM_ALGO_COUNT];
    int32_t ops;                     /* operations per timed graph, every candidate: symmem_autotune_graph_ops of
                                        the least prediction (one length for all, since the length itself
                                        biases a reading: bench/NOTES.md) */
} symmem_autotune_step_t;

typedef struct symmem_autotune_plan {
    int32_t nsteps;
    symmem_autotune_step_t step[SYMMEM_AUTOTUNE_MAX_STEPS];
} symmem_autotune_plan_t;

/* The steps: all-reduce, then reduce-scatter, then all-gather; for each, every form of cfg->forms in the
 * order of symmem_form_t; for each, every power of two from min_bytes to max_bytes; at each, the algorithms
 * available[algo] != 0 that the model prices within the keep rule, and the model table's own choice
 * (defaults) whatever its price. Steps of one op and form are consecutive. Pure. */
void symmem_autotune_plan(const topo_cost_machine_t *m, const topo_table_t *defaults, const int *available,
                          const symmem_autotune_cfg_t *cfg, symmem_autotune_plan_t *plan);
/* One step of the plan's kind (for the bisection and the declared sizes): the candidates as the plan would
 * give them at `bytes`. Pure. */
void symmem_autotune_plan_step(const topo_cost_machine_t *m, const topo_table_t *defaults, const int *available,
                               const symmem_autotune_cfg_t *cfg, symmem_coll_kind_t kind, symmem_form_t form,
                               size_t bytes, symmem_autotune_step_t *st);

/* ---- measured points and the rules made of them ------------------------------------------------------------- */
/* One measured size of one op and form: its winner (negative: nothing ran), and whether it was declared. */
typedef struct symmem_autotune_point {
    uint64_t bytes;
    int32_t winner;
    int32_t pinned;
} symmem_autotune_point_t;

/* The sizes to measure between neighbouring points (ascending, winners >= 0 only) whose winners differ and
 * that lie more than cfg->refine_ratio apart: the geometric midpoint, rounded down to a multiple of `unit`
 * bytes (what a call of the op can have), if it lies strictly between them; with the two winners as the only
 * candidates (*a, *b). Up to `max`; returns how many. Pure. */
int symmem_autotune_cuts(const symmem_autotune_point_t *pts, int n, double refine_ratio, size_t unit, uint64_t *mid,
                         int32_t *a, int32_t *b, int max);

/* THE table builder (the autotune's and symmem-bench --tune's): the rules of one op and form from its
 * points (any order; those without a winner skipped), added to `out`. Between two neighbouring points with
 * different winners the bound is their geometric midpoint (symmem_autotune_mid), except beside a declared
 * point, which holds exactly its own size; a run of one winner is one rule; the last point's winner holds up
 * to the midpoint to twice its size, and above that the model's rules (defaults) stand. Returns 0, or -1 when
 * `out` is full. Pure. */
int symmem_autotune_rules(topo_table_t *out, const topo_table_t *defaults, symmem_coll_kind_t kind, symmem_form_t form,
                          const symmem_autotune_point_t *pts, int n);
/* The whole decision from measured times, for one op and form: per size bytes[i], the slowest rank's time of
 * each algorithm us[i][algo] (<= 0: not run, or wrong), the winner as a step decides it (symmem_autotune_winner
 * with the model's choice and `tie`), then the rules (symmem_autotune_rules). What symmem-bench --tune makes
 * of its measurements, and what the autotune makes of the same times. 0, or -1 when `out` is full. Pure. */
/* One size's winner from its times (us[algo], the slowest rank's; <= 0: not run or wrong): the fastest, unless
 * the model's choice at that size is within `tie` of it (symmem_autotune_winner); -1 when none ran. Pure. */
int symmem_autotune_decide(const topo_table_t *defaults, symmem_coll_kind_t kind, uint64_t bytes,
                           const double *us, double tie);
int symmem_autotune_table_from_times(topo_table_t *out, const topo_table_t *defaults, symmem_coll_kind_t kind,
                                     symmem_form_t form, const uint64_t *bytes, const double (*us)[SYMMEM_ALGO_COUNT],
                                     int n, double tie);
/* floor(sqrt(lo * hi)) within [lo, hi): the bound between two measured sizes (lo < hi, up to 2^62). */
size_t symmem_autotune_mid(size_t lo, size_t hi);

/* A declared size's rule in a table that has others: `bytes` of `kind` in `form` uses `algo`, every other
 * size keeps what the table (with `defaults` under it) gave it. Where the table has no rule of that op and
 * form yet, the rules that answered for it (symmem_coll_table_form's, or the defaults) are copied in first.
 * 0, or -1 when the table is full (unchanged then). Pure. */
int symmem_autotune_pin(symmem_coll_tuning_t *tu, symmem_coll_kind_t kind, symmem_form_t form, size_t bytes,
                        symmem_algo_t algo);
/* Whether the table holds a measurement for exactly `bytes` (a rule bound at bytes or bytes - 1: what a pin, or
 * a declared point of the builder, leaves). Pure. */
int symmem_autotune_pinned(const topo_table_t *t, symmem_coll_kind_t kind, symmem_form_t form, size_t bytes);

/* Which candidates of a step are not measured: skip[i] = 1 for a candidate other than the model's choice that
 * the slowest rank read at more than factor times the fastest reading at half the size (half_us, indexed by
 * algorithm: the previous step of the same op when it measured half this size; NULL, or no reading > 0: no
 * skip). A candidate skipped there has no reading, so it is measured here: a slow candidate is read at every
 * other size at least, and one that gains with size (the copy engine) is never left out for good. Replayed
 * over 1048 logged steps of 28 lab and device runs, a factor of 2 changed no choice and left out 19% of the
 * measuring time (bench/NOTES.md, "Skipping what measured slow"). Returns how many are skipped. Pure. */
int symmem_autotune_skips(const symmem_autotune_step_t *step, const double *half_us, symmem_algo_t model_choice,
                          double factor, int *skip);

/* ---- measuring and agreeing -------------------------------------------------------------------------------- */
/* The measuring side, called by every rank for every step in the same order: fill us[i] with this rank's
 * microseconds per operation of algo[i] (negative: it could not run here); 0, or -1 when this rank can
 * measure nothing more (its CUDA state is broken; the run stops at the end of the step on every rank).
 * elapsed_ms: time spent since the run started (the budget). */
typedef struct symmem_autotune_ops {
    int (*measure)(void *ctx, const symmem_autotune_step_t *step, double *us);
    double (*elapsed_ms)(void *ctx);
    void *ctx;
} symmem_autotune_ops_t;

typedef struct symmem_autotune_result {
    int steps;          /* steps run (agreed) */
    int planned;        /* steps in the plan (the bisection's come on top) */
    int refined;        /* bisection steps run */
    int measurements;   /* candidates measured */
    int skipped;        /* candidates not measured (symmem_autotune_skips) */
    int budget_stop;    /* the budget ended the run early */
    int failed;         /* a rank could not measure (the table holds what was decided before) */
    int changed;        /* measured sizes whose winner differs from the model's choice */
    double elapsed_ms;  /* the slowest rank's */
    uint64_t hash;      /* of the table set (agreed) */
    int agreed;         /* 1: every rank set the same table; 0: dropped, the model's table stands */
} symmem_autotune_result_t;

/* Collective over comm (host-side allgathers only, so it runs on the host backend too): the plan, every
 * step measured on every rank and decided from the maximum over ranks, each op and form bisected where
 * neighbouring winners differ, the budget checked on the slowest rank's clock, then tu->table replaced by the
 * tuned rules (symmem_autotune_rules) and compared by hash. SYMMEM_OK with *res filled (res->agreed 0: the
 * table was dropped on every rank); an error when the host exchange itself failed (the communicator is then
 * in its error state). */
symmem_status_t symmem_autotune_run(symmem_comm_t comm, symmem_coll_tuning_t *tu, const topo_cost_machine_t *m,
                                    const int *available, const symmem_autotune_ops_t *ops,
                                    const symmem_autotune_cfg_t *cfg, symmem_autotune_result_t *res);

/* Collective: the declared all-reduce sizes (bytes[0..n), the same on every rank: checked by hash, a
 * difference is SYMMEM_INVALID_USAGE) in each form of `forms`, measured as the autotune measures a size, each
 * winner pinned into tu->table (symmem_autotune_pin); sizes already pinned are skipped. *measured: how many
 * sizes were measured. The budget applies. */
symmem_status_t symmem_autotune_pins(symmem_comm_t comm, symmem_coll_tuning_t *tu, const topo_cost_machine_t *m,
                                     const int *available, const symmem_autotune_ops_t *ops,
                                     const symmem_autotune_cfg_t *cfg, const size_t *bytes, int n, unsigned forms,
                                     symmem_autotune_result_t *res);

/* The winner of one step from the slowest rank's times (negative: did not run on some rank): the fastest,
 * unless the model's choice is within cfg->tie of it; -1 when none ran. Pure. */
int symmem_autotune_winner(const symmem_autotune_step_t *step, const double *slowest_us, symmem_algo_t model_choice,
                           double tie);

/* One step's measurement and decision, for the DEBUG line each step logs on rank 0: "all_reduce 2 MiB: staged
 * 1048.6 us x4, copy_engine 1010.2 us x4, twoshot_push skipped, island not run -> copy_engine (the model:
 * twoshot_push)" (the slowest rank's medians, each with its graph's operations; skip may be NULL; winner -1:
 * nothing ran). */
void symmem_autotune_step_describe(const symmem_autotune_step_t *step, const double *slowest_us, const int *skip,
                                   int winner, symmem_algo_t model_choice, char *out, size_t len);

/* "all_reduce up to 12 KiB oneshot_push, up to 96 KiB twoshot_lamport, above twoshot_push; reduce_scatter ..."
 * for the log. */
void symmem_autotune_describe(const topo_table_t *t, char *out, size_t len);

#ifdef __cplusplus
}
#endif
#endif
