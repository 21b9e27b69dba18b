/* symmem-bench's command line: nccl-tests' options with nccl-tests' meanings where symmem has one (so a line
 * from an nccl-tests run reads the same here), long options for what symmem-bench has beyond them, and a
 * message that names the replacement for each short option that meant something else before.
 *
 * The names it accepts come from the lists that define them: dtypes (SYMMEM_DTYPE_LIST: "float" or
 * "float32", "half" or "float16", "bfloat16", and the short bf16/fp16/fp32), ops (symmem_redop_name),
 * algorithms (symmem_algo_from_name), collectives (bench_colls, by symmem_coll_kind_name); sizes are parsed
 * as the library parses SIZE parameters (symmem_parse_size: "4096", "64K", "16M", "1G"). */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/kinds.h"
#include "base/param.h"
#include "bench.h"

static void print_names(const char *dflt, int n, const char *(*name)(int))
{
    for (int k = 0; k < n; k++)
        if (name(k)) printf("%s%s%s", k ? ", " : "", name(k), !strcmp(name(k), dflt) ? " (default)" : "");
}
static const char *dtype_at(int k) { return symmem_dtype_name((symmem_dtype_t)k); }
static const char *redop_at(int k) { return symmem_redop_name((symmem_redop_t)k); }
static const char *coll_at(int k) { return bench_colls[k] ? symmem_coll_kind_name((symmem_coll_kind_t)k) : NULL; }

static void usage(void)
{
    printf("usage: symmem-bench [options]\n"
           "Times symmem's collectives against NCCL on the same GPUs, in nccl-tests' table. Options as nccl-tests\n"
           "reads them (long forms too, e.g. --minbytes), where symmem has a meaning for them:\n"
           "  -b, --minbytes SIZE      smallest size (default 1K; K/M/G suffixes)\n"
           "  -e, --maxbytes SIZE      largest size (default 256M)\n"
           "  -f, --stepfactor F       size multiplier (default 2); 1: add -i instead\n"
           "  -i, --stepbytes SIZE     size increment where -f is 1 (default 1M; -i alone sets -f 1)\n"
           "  -t, --nthreads N         threads of this process; with -g, ranks = N x G, all in this process\n"
           "  -g, --ngpus G            GPUs per thread: -g 1 alone is one rank; rank r uses GPU r %% GPU count\n"
           "  -n, --iters N            operations per timed graph or eager batch (default 20)\n"
           "  -w, --warmup_iters N     warm-up operations (default 5)\n"
           "  -c, --check N            0: no check; else check results (#wrong) once per row (default 1)\n"
           "  -d, --datatype TYPE      ");
    print_names("bfloat16", SYMMEM_DTYPE_COUNT, dtype_at);
    printf(", or all\n"
           "  -o, --op OP              ");
    print_names("sum", SYMMEM_REDOP_COUNT, redop_at);
    printf(", or all\n"
           "  -a, --average 0|1|2|3    the time reported across ranks: 0 rank 0's, 1 the mean, 2 the fastest,\n"
           "                           3 the slowest (default 3: a collective ends with its slowest rank;\n"
           "                           nccl-tests' default is 1)\n"
           "  -z, --blocking 0|1       1: wait for every operation before the next is launched (eager)\n"
           "  -G, --cudagraph N        time N launches of a CUDA graph of -n operations (default 10); 0: eager\n"
           "                           launches, timed --replays times (nccl-tests' default is 0)\n"
           "  -R, --local_register 0|2 where input and output live: 2 symmetric buffers (default: symmem reads\n"
           "                           them in place), 0 ordinary cudaMalloc memory (copied in and out)\n"
           "  -N, --run_cycles N       run the whole sweep N times (default 1; 0: until interrupted)\n"
           "  -T, --timeout SECONDS    the communicator's timeout (SYMMEM_TIMEOUT_MS): a hung collective fails\n"
           "                           with the missing rank after this long\n"
           "symmem-bench's own:\n"
           "  --coll NAME              ");
    print_names("all_reduce", SYMMEM_COLL_KIND_COUNT, coll_at);
    printf("\n  --algo LIST              auto (default), all, or one or more (comma-separated) of:\n"
           "                          ");
    for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++)
        if (symmem_algo_listed(a) && !symmem_algo_lossy(a))
            printf("%s %s", a == SYMMEM_ALGO_AUTO + 1 ? "" : ",", symmem_algo_name((symmem_algo_t)a));
    printf("\n"
           "                           auto rows show the algorithm the table chose, e.g. auto:twoshot_pull\n"
           "  --nranks N               ranks (default: one per GPU, two on one GPU), a process each\n"
           "  --inprocess              the ranks as threads of one process (symmem_comm_init_all); N may exceed\n"
           "                           the GPU count (then a correctness run: ranks share GPUs)\n"
           "  --replays N              timed replays (eager: batches); the median is reported (default 10)\n"
           "  --nccl 0|1               NCCL baseline in the same run (default 1 when built with NCCL)\n"
           "  --align 0|1              one untimed replay before each timed one, so ranks start the clock\n"
           "                           together (default 1)\n"
           "  --placement auto|device|host_numa  where the communicator puts symmetric memory (options API;\n"
           "                           default SYMMEM_PLACEMENT). host_numa with every rank on one GPU is the PCIe\n"
           "                           lab: every peer access crosses that GPU's PCIe link to pinned host memory\n"
           "  --model 0|1              the cost model's prediction beside each row, its floor in the summary, and\n"
           "                           a markdown summary: auto against the best forced algorithm per size\n"
           "  --tune [FILE]            tune the algorithm table for --coll/-d/-o over the -b..-e sizes: time\n"
           "                           every algorithm (--algo is ignored), take per size the fastest with\n"
           "                           #wrong 0, write the table to FILE (default $SYMMEM_TUNE_FILE, else\n"
           "                           <cache dir>/tune.txt, which the library loads), print it, and re-run auto\n"
           "                           with it vs NCCL. Also --tune=FILE\n"
           "  --dry-run                say what the command line runs (ranks, sizes, timing) and exit, no GPU\n"
           "nccl-tests' -m, -p, -r, -y, -C, -S, -J, -x, -D, -V, -M, -u, -I, -K have no counterpart here: refused.\n"
           "Size is the largest buffer of the operation (nccl-tests convention): the all-reduce input, the\n"
           "reduce-scatter input, the all-gather output. busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (others).\n"
           "Exit status: 0 every row ran and was correct; 1 a wrong result (#wrong > 0) or a failed run; 2 a usage\n"
           "error; 77 no CUDA device (nothing measured, as a ctest skip).\n");
}

/* A dtype by its name (symmem_dtype_name), its list name in lower case, or the short bf16/fp16/fp32. */
static int dtype_from_name(const char *v, symmem_dtype_t *dt)
{
    static const struct { const char *name, *lower; symmem_dtype_t dt; } names[] = {
#define DT_NAMES_(name, value, ctype, bytes) {#ctype, #name, SYMMEM_##name},
        SYMMEM_DTYPE_LIST(DT_NAMES_)
#undef DT_NAMES_
    };
    static const struct { const char *brief; symmem_dtype_t dt; } briefs[] = {
        {"fp32", SYMMEM_FLOAT32}, {"fp16", SYMMEM_FLOAT16}, {"bf16", SYMMEM_BFLOAT16}};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (!strcasecmp(v, names[k].name) || !strcasecmp(v, names[k].lower)) return *dt = names[k].dt, 0;
    for (size_t k = 0; k < sizeof briefs / sizeof *briefs; k++)
        if (!strcasecmp(v, briefs[k].brief)) return *dt = briefs[k].dt, 0;
    return -1;
}

static int redop_from_name(const char *v, symmem_redop_t *op)
{
    for (int k = 0; k < SYMMEM_REDOP_COUNT; k++)
        if (!strcasecmp(v, symmem_redop_name((symmem_redop_t)k))) return *op = (symmem_redop_t)k, 0;
    return -1;
}

static int coll_from_name(const char *v, const bench_coll_t **coll)
{
    for (int k = 0; k < SYMMEM_COLL_KIND_COUNT; k++)
        if (bench_colls[k] && !strcasecmp(v, symmem_coll_kind_name((symmem_coll_kind_t)k)))
            return *coll = bench_colls[k], 0;
    return -1;
}

/* --algo: "all", or one name or a comma-separated list, each kept once. */
static int parse_algos(const char *v, opts_t *o)
{
    o->algo_given = 1;
    if (!strcasecmp(v, "all")) {
        o->nalgos = 0;
        for (int k = 0; k < SYMMEM_ALGO_COUNT; k++)
            if (symmem_algo_listed(k) && !symmem_algo_lossy(k)) o->algos[o->nalgos++] = k;
        return 0;
    }
    o->nalgos = 0;
    for (const char *p = v; *p;) {
        const size_t len = strcspn(p, ",");
        char name[32];
        symmem_algo_t al;
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), p);
        if (len >= sizeof name || symmem_algo_from_name(name, &al) != SYMMEM_OK) {
            fprintf(stderr, "symmem-bench: unknown algorithm %.*s\n", (int)len, p);
            return -1;
        }
        if (symmem_algo_lossy((int)al)) { /* its results are not exact: the bench's check would call them wrong */
            fprintf(stderr, "symmem-bench: %s is lossy; bench/torch_wire_bench.py times it beside the exact "
                            "algorithms and measures its error\n", name);
            return -1;
        }
        int seen = 0;
        for (int k = 0; k < o->nalgos; k++) seen |= o->algos[k] == (int)al;
        if (!seen) o->algos[o->nalgos++] = (int)al;
        p += len;
        if (*p == ',') p++;
    }
    if (o->nalgos == 0) {
        fprintf(stderr, "symmem-bench: --algo needs an algorithm\n");
        return -1;
    }
    return 0;
}

static void set_defaults(opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->minb = 1024;
    o->maxb = (size_t)256 << 20;
    o->factor = 2;
    o->step = (size_t)1 << 20;
    o->iters = 20;
    o->warmup = 5;
    o->replays = 10;
    o->check = 1;
    o->graph = 1;
    o->align = 1;
    o->zero_copy = 1;
    o->nranks = 0;
    o->average = BENCH_AVERAGE_MAX;
    o->cycles = 1;
#ifdef SYMMEM_HAVE_NCCL
    o->nccl = 1;
#endif
    o->dts[0] = SYMMEM_BFLOAT16;
    o->ndts = 1;
    o->ops[0] = SYMMEM_OP_SUM;
    o->nops = 1;
    o->dt = SYMMEM_BFLOAT16;
    o->op = SYMMEM_OP_SUM;
    o->coll = &bench_all_reduce;
    o->algos[0] = SYMMEM_ALGO_AUTO;
    o->nalgos = 1;
}

/* Every option that takes a value: its short and long names (either may be NULL), and what it is. */
typedef enum {
    OPT_MINB, OPT_MAXB, OPT_STEP, OPT_FACTOR, OPT_THREADS, OPT_GPUS, OPT_ITERS, OPT_WARMUP, OPT_CHECK, OPT_DTYPE,
    OPT_OP, OPT_AVERAGE, OPT_BLOCKING, OPT_GRAPH, OPT_REGISTER, OPT_CYCLES, OPT_TIMEOUT,
    OPT_COLL, OPT_ALGO, OPT_NRANKS, OPT_REPLAYS, OPT_NCCL, OPT_ALIGN, OPT_PLACEMENT, OPT_MODEL
} opt_id_t;

static const struct valued {
    const char *brief, *name;
    opt_id_t id;
} valued[] = {
    {"-b", "--minbytes", OPT_MINB},      {"-e", "--maxbytes", OPT_MAXB},         {"-i", "--stepbytes", OPT_STEP},
    {"-f", "--stepfactor", OPT_FACTOR},  {"-t", "--nthreads", OPT_THREADS},      {"-g", "--ngpus", OPT_GPUS},
    {"-n", "--iters", OPT_ITERS},        {"-w", "--warmup_iters", OPT_WARMUP},   {"-c", "--check", OPT_CHECK},
    {"-d", "--datatype", OPT_DTYPE},     {"-o", "--op", OPT_OP},                 {"-a", "--average", OPT_AVERAGE},
    {"-z", "--blocking", OPT_BLOCKING},  {"-G", "--cudagraph", OPT_GRAPH},       {"-R", "--local_register", OPT_REGISTER},
    {"-N", "--run_cycles", OPT_CYCLES},  {"-T", "--timeout", OPT_TIMEOUT},       {NULL, "--coll", OPT_COLL},
    {NULL, "--algo", OPT_ALGO},          {NULL, "--nranks", OPT_NRANKS},         {NULL, "--replays", OPT_REPLAYS},
    {NULL, "--nccl", OPT_NCCL},          {NULL, "--align", OPT_ALIGN},           {NULL, "--placement", OPT_PLACEMENT},
    {NULL, "--model", OPT_MODEL},
};

/* nccl-tests' options that symmem-bench has no meaning for: refused by name rather than taken for another. */
static const struct foreign {
    const char *brief, *name;
} foreign[] = {{"-m", "--agg_iters"},        {"-p", "--parallel_init"},        {"-r", "--root"},
               {"-y", "--stream_null"},      {"-C", "--report_cputime"},       {"-S", "--report_timestamps"},
               {"-J", "--output_file"},      {"-x", "--cta_policy"},           {"-D", "--device_implementation"},
               {"-V", "--device_cta_count"}, {"-M", "--memory"},               {"-u", "--unalign"},
               {"-I", "--per_iter_timing"},  {"-K", "--per_iter_skip"}};

static const struct valued *find_valued(const char *a)
{
    for (size_t k = 0; k < sizeof valued / sizeof *valued; k++)
        if ((valued[k].brief && !strcmp(a, valued[k].brief)) || !strcmp(a, valued[k].name)) return &valued[k];
    return NULL;
}

/* A whole decimal integer in [lo, hi], or -1 after a message naming the option. */
static int int_value(const char *opt, const char *v, long lo, long hi, int *out)
{
    char *end;
    const long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        fprintf(stderr, "symmem-bench: %s takes an integer in %ld..%ld, not %s\n", opt, lo, hi, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* Whether v is a whole number (so -a and -t values can be told from the names they took before). */
static int numeric(const char *v)
{
    if (!*v) return 0;
    for (const char *p = v; *p; p++)
        if (!isdigit((unsigned char)*p)) return 0;
    return 1;
}

static int parse_list_of_dtypes(const char *v, opts_t *o)
{
    if (!strcasecmp(v, "all")) {
        o->ndts = 0;
        for (int k = 0; k < SYMMEM_DTYPE_COUNT; k++) o->dts[o->ndts++] = (symmem_dtype_t)k;
        return 0;
    }
    o->ndts = 1;
    if (dtype_from_name(v, &o->dts[0]) == 0) return 0;
    fprintf(stderr, "symmem-bench: -d %s: symmem's collectives take ", v);
    for (int k = 0; k < SYMMEM_DTYPE_COUNT; k++)
        fprintf(stderr, "%s%s", k ? ", " : "", symmem_dtype_name((symmem_dtype_t)k));
    fprintf(stderr, " (or all)\n");
    return -1;
}

static int parse_list_of_ops(const char *v, opts_t *o)
{
    if (!strcasecmp(v, "all")) {
        o->nops = 0;
        for (int k = 0; k < SYMMEM_REDOP_COUNT; k++) o->ops[o->nops++] = (symmem_redop_t)k;
        return 0;
    }
    o->nops = 1;
    if (redop_from_name(v, &o->ops[0]) == 0) return 0;
    fprintf(stderr, "symmem-bench: -o %s: symmem reduces with ", v);
    for (int k = 0; k < SYMMEM_REDOP_COUNT; k++) fprintf(stderr, "%s%s", k ? ", " : "", symmem_redop_name((symmem_redop_t)k));
    fprintf(stderr, " (or all)\n");
    return -1;
}

/* Option `a` (found in `valued`) with its value v. 0, or -1 after a message. */
static int parse_valued(const char *a, const struct valued *opt, const char *v, opts_t *o)
{
    int x = 0;
    switch (opt->id) {
    case OPT_MINB:
    case OPT_MAXB:
    case OPT_STEP: {
        size_t *dst = opt->id == OPT_MINB ? &o->minb : opt->id == OPT_MAXB ? &o->maxb : &o->step;
        if (symmem_parse_size(v, dst) == 0) {
            if (opt->id == OPT_STEP) o->step_given = 1;
            return 0;
        }
        fprintf(stderr, "symmem-bench: %s: bad size %s (like 4096, 64K, 16M, 1G)\n", a, v);
        return -1;
    }
    case OPT_FACTOR: {
        char *end;
        o->factor = strtod(v, &end);
        if (*end || o->factor < 1.0) {
            fprintf(stderr, "symmem-bench: %s takes a factor of at least 1, not %s\n", a, v);
            return -1;
        }
        o->factor_given = 1;
        return 0;
    }
    case OPT_THREADS:
        if (!numeric(v)) {
            fprintf(stderr, "symmem-bench: -t is nccl-tests' --nthreads (a number); the collective is --coll %s\n", v);
            return -1;
        }
        return int_value(a, v, 1, CC_MAX_RANKS, &o->nthreads);
    case OPT_GPUS: return int_value(a, v, 1, CC_MAX_RANKS, &o->ngpus);
    case OPT_ITERS: return int_value(a, v, 1, 1 << 20, &o->iters);
    case OPT_WARMUP: return int_value(a, v, 0, 1 << 20, &o->warmup);
    case OPT_CHECK:
        if (int_value(a, v, 0, 1 << 20, &x) != 0) return -1;
        o->check = x != 0;
        return 0;
    case OPT_DTYPE: return parse_list_of_dtypes(v, o);
    case OPT_OP: return parse_list_of_ops(v, o);
    case OPT_AVERAGE:
        if (!numeric(v)) {
            fprintf(stderr, "symmem-bench: -a is nccl-tests' --average (0..3); the algorithm is --algo %s\n", v);
            return -1;
        }
        return int_value(a, v, 0, 3, &o->average);
    case OPT_BLOCKING:
        if (int_value(a, v, 0, 1, &o->blocking) != 0) return -1;
        return 0;
    case OPT_GRAPH:
        if (int_value(a, v, 0, 1 << 20, &x) != 0) return -1;
        o->graph = x > 0;
        if (x > 0) o->replays = x;
        o->graph_given = 1;
        return 0;
    case OPT_REGISTER:
        if (int_value(a, v, 0, 2, &x) != 0) return -1;
        if (x == 1) {
            fprintf(stderr, "symmem-bench: -R 1 (NCCL's local registration) has no symmem counterpart: -R 2 "
                            "symmetric buffers, -R 0 ordinary memory\n");
            return -1;
        }
        o->zero_copy = x == 2;
        return 0;
    case OPT_CYCLES: return int_value(a, v, 0, 1 << 30, &o->cycles);
    case OPT_TIMEOUT: return int_value(a, v, 1, 2147483, &o->timeout_s);
    case OPT_COLL:
        if (coll_from_name(v, &o->coll) == 0) return 0;
        fprintf(stderr, "symmem-bench: unknown collective %s (", v);
        for (int k = 0, n = 0; k < SYMMEM_COLL_KIND_COUNT; k++)
            if (coll_at(k)) fprintf(stderr, "%s%s", n++ ? ", " : "", coll_at(k));
        fprintf(stderr, ")\n");
        return -1;
    case OPT_ALGO: return parse_algos(v, o);
    case OPT_NRANKS: return int_value(a, v, 1, CC_MAX_RANKS, &o->nranks);
    case OPT_REPLAYS: return int_value(a, v, 1, 1 << 20, &o->replays);
    case OPT_NCCL:
    case OPT_ALIGN:
    case OPT_MODEL:
        if (int_value(a, v, 0, 1, &x) != 0) return -1;
        *(opt->id == OPT_NCCL ? &o->nccl : opt->id == OPT_ALIGN ? &o->align : &o->model) = x;
        return 0;
    case OPT_PLACEMENT:
        if (!strcasecmp(v, "auto")) o->placement = SYMMEM_PLACEMENT_AUTO;
        else if (!strcasecmp(v, "device")) o->placement = SYMMEM_PLACEMENT_DEVICE;
        else if (!strcasecmp(v, "host_numa") || !strcasecmp(v, "host")) o->placement = SYMMEM_PLACEMENT_HOST_NUMA;
        else {
            fprintf(stderr, "symmem-bench: unknown placement %s (auto, device, host_numa)\n", v);
            return -1;
        }
        return 0;
    }
    return -1;
}

/* The combinations that cannot run; the rank count from -t and -g; --tune's algorithm list (every concrete
 * algorithm). 0 or -1. */
static int check_options(opts_t *o)
{
    if (o->step_given && !o->factor_given) o->factor = 1; /* nccl-tests: -i steps where -f is 1 */
    if (o->minb > o->maxb || o->minb == 0 || (o->factor <= 1.0 && o->step == 0)) {
        fprintf(stderr, "symmem-bench: inconsistent sizes (0 < -b <= -e; -f above 1, or -f 1 with -i above 0)\n");
        return -1;
    }
    if (o->blocking && o->graph) {
        if (o->graph_given) {
            fprintf(stderr, "symmem-bench: -z 1 waits between launches, which a CUDA graph cannot: use -G 0\n");
            return -1;
        }
        o->graph = 0; /* -z 1 alone: eager, as nccl-tests (-G 0 by default) runs it */
    }
    if (o->nthreads || o->ngpus) {
        if (o->nranks) {
            fprintf(stderr, "symmem-bench: give the ranks either as -t/-g (all in this process) or as --nranks\n");
            return -1;
        }
        const int t = o->nthreads ? o->nthreads : 1, g = o->ngpus ? o->ngpus : 1;
        if (t * g > CC_MAX_RANKS) {
            fprintf(stderr, "symmem-bench: -t %d x -g %d is %d ranks; symmem takes at most %d\n", t, g, t * g,
                    CC_MAX_RANKS);
            return -1;
        }
        o->nranks = t * g;
        o->inprocess = 1;
    }
    if (!o->tune) return 0;
    if (o->ndts != 1 || o->nops != 1) {
        fprintf(stderr, "symmem-bench: --tune builds the table of one dtype and one op: not -d all or -o all\n");
        return -1;
    }
    if (o->cycles != 1) {
        fprintf(stderr, "symmem-bench: --tune runs once: not with -N\n");
        return -1;
    }
    if (!o->coll->tunable) {
        int tunable[SYMMEM_COLL_KIND_COUNT], n = 0;
        for (int k = 0; k < SYMMEM_COLL_KIND_COUNT; k++)
            if (bench_colls[k] && bench_colls[k]->tunable) tunable[n++] = k;
        fprintf(stderr, "symmem-bench: --tune needs --coll");
        for (int j = 0; j < n; j++)
            fprintf(stderr, "%s %s", j == 0 ? "" : j + 1 < n ? "," : " or", symmem_coll_kind_name((symmem_coll_kind_t)tunable[j]));
        fprintf(stderr, "\n");
        return -1;
    }
    if (o->tune_file && !o->tune_file[0]) {
        fprintf(stderr, "symmem-bench: --tune= needs a file name\n");
        return -1;
    }
    int nsizes = 0;
    BENCH_FOR_SIZES(o, s)
    {
        if (++nsizes > BENCH_MAX_SIZES) break;
    }
    if (nsizes > BENCH_MAX_SIZES) {
        fprintf(stderr, "symmem-bench: --tune measures at most %d sizes; raise -f or narrow -b/-e\n", BENCH_MAX_SIZES);
        return -1;
    }
    /* every concrete exact algorithm; auto is what is being built */
    o->nalgos = 0;
    for (int k = SYMMEM_ALGO_AUTO + 1; k < SYMMEM_ALGO_COUNT; k++)
        if (symmem_algo_listed(k) && !symmem_algo_lossy(k)) o->algos[o->nalgos++] = k;
    return 0;
}

int bench_parse_args(int argc, char **argv, opts_t *o)
{
    set_defaults(o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const struct valued *opt;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 1;
        } else if (!strcmp(a, "--inprocess")) {
            o->inprocess = 1;
        } else if (!strcmp(a, "--dry-run")) {
            o->dry_run = 1;
        } else if (!strcmp(a, "--tune")) {
            o->tune = 1;
            if (v && v[0] != '-') { /* optional FILE */
                o->tune_file = v;
                i++;
            }
        } else if (!strncmp(a, "--tune=", 7)) {
            o->tune = 1;
            o->tune_file = a + 7;
        } else if ((opt = find_valued(a)) != NULL) {
            if (!v) {
                fprintf(stderr, "symmem-bench: %s needs a value\n", a);
                return -1;
            }
            if (parse_valued(a, opt, v, o) != 0) return -1;
            i++;
        } else {
            for (size_t k = 0; k < sizeof foreign / sizeof *foreign; k++)
                if (!strcmp(a, foreign[k].brief) || !strcmp(a, foreign[k].name)) {
                    fprintf(stderr, "symmem-bench: nccl-tests' %s (%s) has no counterpart in symmem-bench (-h for "
                                    "its options)\n",
                            foreign[k].brief, foreign[k].name + 2);
                    return -1;
                }
            fprintf(stderr, "symmem-bench: unknown option %s (-h for help)\n", a);
            return -1;
        }
    }
    if (check_options(o) != 0) return -1;
    o->dt = o->dts[0];
    o->op = o->ops[0];
    return 0;
}

static void print_size(size_t b)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    int u = 0;
    while (u < 3 && b >= 1024 && b % 1024 == 0) b /= 1024, u++;
    printf("%zu %s", b, units[u]);
}

void bench_print_plan(const opts_t *o)
{
    static const char *const averages[] = {"rank 0's", "the mean", "the fastest rank's", "the slowest rank's"};
    int nsizes = 0;
    BENCH_FOR_SIZES(o, s) nsizes++;
    printf("symmem-bench --dry-run: what this command line runs (nothing is measured)\n");
    printf("  collective  %s\n", symmem_coll_kind_name(o->coll->kind));
    printf("  dtypes      ");
    for (int k = 0; k < o->ndts; k++) printf("%s%s", k ? ", " : "", symmem_dtype_name(o->dts[k]));
    printf("\n  ops         ");
    for (int k = 0; k < o->nops; k++) printf("%s%s", k ? ", " : "", symmem_redop_name(o->ops[k]));
    printf("\n  sizes       ");
    print_size(o->minb);
    printf(" .. ");
    print_size(o->maxb);
    if (o->factor > 1.0) printf(", x%g", o->factor);
    else {
        printf(", +");
        print_size(o->step);
    }
    printf(" (%d sizes)\n", nsizes);
    if (o->nranks > 0)
        printf("  ranks       %d, %s\n", o->nranks, o->inprocess ? "threads of this process" : "a process each");
    else
        printf("  ranks       one per GPU (two on one GPU), %s\n", o->inprocess ? "threads of this process" : "a process each");
    if (o->graph)
        printf("  timing      CUDA graphs of %d operations (-n), %d timed launches (-G), %d warm-up operations (-w)\n",
               o->iters, o->replays, o->warmup);
    else
        printf("  timing      eager launches%s: %d timed batches (--replays) of %d operations (-n), %d warm-up "
               "operations (-w)\n",
               o->blocking ? ", each waited for (-z 1)" : "", o->replays, o->iters, o->warmup);
    printf("  reported    per rank the median over launches; of those, %s (-a %d)\n", averages[o->average], o->average);
    printf("  check       %s (-c)\n", o->check ? "on" : "off");
    printf("  buffers     %s (-R %d)\n", o->zero_copy ? "symmetric" : "cudaMalloc, copied in and out",
           o->zero_copy ? 2 : 0);
    printf("  cycles      %d (-N)%s\n", o->cycles, o->cycles == 0 ? ": until interrupted" : "");
    printf("  algorithms  ");
    if (o->tune) printf("every one, for --tune");
    else
        for (int k = 0; k < o->nalgos; k++) printf("%s%s", k ? ", " : "", symmem_algo_name((symmem_algo_t)o->algos[k]));
    printf("\n  nccl        %s\n", o->nccl ? "the baseline in the same run" : "off");
    if (o->timeout_s) printf("  timeout     %d s (-T)\n", o->timeout_s);
}
