/* symmem-bench's pieces (see symmem_bench.c for the method): the options, the per-collective descriptors
 * (one file each: coll_<name>.c), the measurement (measure.c), the ranks and buffers (setup.c), the output
 * (report.c) and the algorithm table and its tuner (tuner.c, the one file that uses the collectives'
 * internal tuning API, collectives/tune.h). Adding a collective: one bench_coll_t in its own file and
 * its row in bench_colls (symmem_bench.c). */
#ifndef SYMMEM_BENCH_BENCH_H
#define SYMMEM_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "base/kinds.h"
#include "harness.h"

#ifdef SYMMEM_HAVE_NCCL
#include <nccl.h>
#endif

/* Sizes kept for the summaries; --tune refuses a size list longer than this. */
#define BENCH_MAX_SIZES 256

/* The geometry of one size. */
typedef struct geom {
    size_t count; /* argument to the call: per-rank count for RS/AG */
    size_t total; /* elements of the largest buffer (the "count" column) */
    size_t sbytes, rbytes;
    size_t bytes; /* the "size" column */
    int sets;     /* buffer sets rotated through */
} geom_t;

/* One collective as the benchmark drives it. */
typedef struct bench_coll {
    symmem_coll_kind_t kind; /* its name: symmem_coll_kind_name(kind) */
    int reduces;             /* takes a reduction op (the redop column) */
    int tunable;             /* has an algorithm table (--tune) */
    int sized;               /* has a size (0: measured once, "size" 0) */
    int bitwise;             /* every rank's output must be the same bits */
    int bus_passes;          /* busbw = algbw * bus_passes * (n-1)/n: 2 all-reduce, 1 the others */
    /* The call's count, the element total and the buffer bytes for a size (nccl-tests convention: size is
     * the largest buffer). Leaves count 0 when the size is too small for nranks. */
    void (*shape)(size_t size, size_t elem_size, size_t nranks, geom_t *g);
    symmem_status_t (*call)(const cc_rank_t *R, const void *send, void *recv, size_t count, symmem_dtype_t dt,
                            symmem_redop_t op, symmem_algo_t algo);
#ifdef SYMMEM_HAVE_NCCL
    ncclResult_t (*nccl)(const void *send, void *recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                         ncclComm_t comm, cudaStream_t stream);
#endif
    /* Wrong elements in `out` (copied from rank `rank`'s output; `local` its index in this process). NULL:
     * no data to check (barrier). */
    size_t (*check)(const void *out, symmem_dtype_t dt, symmem_redop_t op, size_t count, int rank, int local,
                    int nranks, uint64_t seed);
} bench_coll_t;

extern const bench_coll_t bench_all_reduce, bench_reduce_scatter, bench_all_gather, bench_barrier;
/* By kind; NULL for a kind the benchmark does not drive (the fused call: symmem-fused-bench). */
extern const bench_coll_t *const bench_colls[SYMMEM_COLL_KIND_COUNT];

/* -a (nccl-tests' --average): which rank's time a row reports. */
enum { BENCH_AVERAGE_RANK0 = 0, BENCH_AVERAGE_MEAN = 1, BENCH_AVERAGE_MIN = 2, BENCH_AVERAGE_MAX = 3 };

typedef struct opts {
    size_t minb, maxb, step; /* -b, -e, -i */
    double factor;           /* -f; 1: sizes step by -i */
    int iters, warmup, replays, check, graph, zero_copy, nranks, inprocess, nccl, tune;
    int align;             /* one untimed replay (eager: operation) before each timed one */
    int model;             /* --model: the cost model's prediction beside each row, floors and a markdown summary */
    int average;           /* -a: BENCH_AVERAGE_* */
    int blocking;          /* -z 1: every eager operation waited for before the next is launched */
    int cycles;            /* -N: sweeps (0: until interrupted) */
    int timeout_s;         /* -T: the communicator's timeout; 0: SYMMEM_TIMEOUT_MS */
    int nthreads, ngpus;   /* -t, -g (0: not given): ranks = t x g in this process */
    int dry_run;           /* --dry-run: print the plan, touch no GPU */
    int factor_given, step_given, graph_given;
    symmem_placement_t placement; /* --placement: the communicator's (options API); DEFAULT: SYMMEM_PLACEMENT */
    const char *tune_file; /* --tune FILE; NULL: $SYMMEM_TUNE_FILE, else <cache dir>/tune.txt */
    int algo_given;        /* --algo was on the command line (--tune ignores it) */
    symmem_dtype_t dts[SYMMEM_DTYPE_COUNT]; /* -d (all: every one); dt is the one being run */
    symmem_redop_t ops[SYMMEM_REDOP_COUNT]; /* -o (all: every one); op is the one being run */
    int ndts, nops;
    symmem_dtype_t dt;
    symmem_redop_t op;
    const bench_coll_t *coll;
    int algos[SYMMEM_ALGO_COUNT];
    int nalgos;
} opts_t;

typedef struct bench {
    opts_t o;
    cc_ctx_t ctx;
    size_t slot_bytes; /* per buffer set: send region then recv region */
    int max_sets;
    symmem_buffer_t sym[CC_MAX_RANKS];
    unsigned char *dev[CC_MAX_RANKS];  /* copy-in buffers (-z 0) */
    unsigned char *ndev[CC_MAX_RANKS]; /* NCCL's buffers */
    size_t l2;
    int have_nccl;
#ifdef SYMMEM_HAVE_NCCL
    ncclComm_t nccl[CC_MAX_RANKS];
#endif
} bench_t;

/* One measured configuration. */
typedef struct result {
    double us;
    uint64_t wrong;
    int ok; /* 0: not run (unsupported or failed to enqueue) */
} result_t;

/* One size of the run: what the summaries (best-vs-NCCL, tuning) need. */
typedef struct size_rec {
    geom_t g;
    size_t key; /* table key (symmem_coll_message_bytes) */
    result_t nccl;
    result_t res[SYMMEM_ALGO_COUNT]; /* by algorithm; ok == 0 where not measured */
    int best;                        /* fastest correct entry of -a, -1: none */
    double best_us;
    char best_label[32];
    int before;     /* --tune: what auto chose before this pass */
    int winner;     /* --tune: rank 0's decision, broadcast; -1: no correct algorithm at this size */
    int after_algo; /* --tune: what auto chooses with the new table */
    result_t after; /* --tune: auto with the new table */
} size_rec_t;

/* The sizes -b, -b*f, ... up to -e, or -b, -b+i, ... where -f is 1 (the loop every part walks). */
#define BENCH_FOR_SIZES(o, s)                                                                              \
    for (double s = (double)(o)->minb; s <= (double)(o)->maxb * 1.0000001;                                 \
         s = (o)->factor > 1.0 ? s * (o)->factor : s + (double)(o)->step)

/* options.c: 0, 1 (printed the help: exit 0) or -1 (message printed). */
int bench_parse_args(int argc, char **argv, opts_t *o);
/* --dry-run: what the options run, one "  key  value" line each (bench/check_options.sh reads them). */
void bench_print_plan(const opts_t *o);

/* setup.c: the ranks (one per process, child_rank; or all in this one), buffers, NCCL. 0, 77 or 1. */
int bench_setup(bench_t *b, int child_rank);
void bench_teardown(bench_t *b);

/* measure.c */
size_t bench_align4k(size_t x);
/* The geometry of `size`; -1 when the size is too small for the rank count. */
int bench_geometry(const bench_t *b, size_t size, geom_t *g);
/* Check (-c 1) then time one configuration; nccl: the NCCL baseline instead of symmem's `algo`. */
result_t bench_measure(bench_t *b, const geom_t *g, int algo, int nccl, uint64_t seed);

/* report.c */
void bench_print_columns(const bench_t *b);
void bench_print_header(const bench_t *b);
/* model_us, floor_us: the cost model's prediction and floor for the row (--model), negative: "-". */
void bench_print_row(const bench_t *b, const geom_t *g, const char *label, const result_t *sr, const result_t *nr,
                     double busf, double model_us, double floor_us);
void bench_print_best(const bench_t *b, const size_rec_t *recs, int nrec);
/* --model: per size, auto (its choice and time) against the best forced algorithm, the model's floor, as
 * markdown rows (bench/lab_sweep.sh collects them), and a pass/fail line for auto <= 1.10x best. */
void bench_print_model_summary(const bench_t *b, const size_rec_t *recs, int nrec);

/* tuner.c: the algorithm table (what auto resolves to) and --tune. */
/* The byte count the library looks the table up by, from the same count argument the call gets. */
size_t bench_table_key(const bench_t *b, const geom_t *g);
/* What SYMMEM_ALGO_AUTO resolves to on this process's first rank (every rank holds the same table). */
int bench_auto_choice(const bench_t *b, const geom_t *g);
/* What the cost model's table alone (no tuning file, no autotune) chooses at this size. */
int bench_model_choice(const bench_t *b, const geom_t *g);
/* The cost model's microseconds for `algo` (AUTO: what auto resolves to) at this size on the communicator's
 * machine; floor: links and trips only. Negative: no prediction (barrier, no collectives). */
double bench_model_us(const bench_t *b, const geom_t *g, int algo, int floor);
/* For the header: where symmetric memory lives, how many ranks share a GPU's link, what the autotune did
 * at init (symmem_autotune_state_t), the probe's loads-and-stores figure and barrier. 0 without collectives. */
int bench_model_facts(const bench_t *b, int *host_memory, int *ranks_per_link, int *autotune, double *rw_gbs,
                      double *barrier_us);
/* The algorithm column: the name, or "auto:<chosen>" (the barrier has no algorithm to choose). Call it
 * while the table is the one the measurement uses. */
const char *bench_algo_label(const bench_t *b, const geom_t *g, int algo, char *buf, size_t len);
/* For the header: the communicator's topology fingerprint, the default table file (when it exists, else
 * ""), the init probe's figures. Returns 1 when there are probe figures. */
int bench_table_facts(const bench_t *b, const char **fingerprint, char *table_file, size_t len, double *probe_rd,
                       double *probe_wr);
/* --tune FILE, else where the library looks by default (SYMMEM_TUNE_FILE, else <cache dir>/tune.txt). */
const char *bench_tune_path(const opts_t *o);
/* Before measuring: load FILE when it exists (agreed; -1: unusable). */
int bench_tune_begin(bench_t *b);
/* After the measuring pass: decide, build, set, save, print, re-measure auto. 0 or -1. */
int bench_tune_finish(bench_t *b, size_rec_t *recs, int nrec, double busf, uint64_t *wrong_total);

#endif
