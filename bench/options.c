/* symmem-bench's command line. The names it accepts come from the lists that define them: dtypes
 * (SYMMEM_DTYPE_LIST: "float" or "float32", "half" or "float16", "bfloat16", and the short bf16/fp16/fp32),
 * ops (symmem_redop_name), algorithms (symmem_algo_from_name), collectives (bench_colls, by
 * symmem_coll_kind_name); sizes are parsed as the library parses SIZE parameters (symmem_parse_size:
 * "4096", "64K", "16M", "1G"). */
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
           "  -b SIZE     min bytes (default 1K; K/M/G suffixes)\n"
           "  -e SIZE     max bytes (default 256M)\n"
           "  -f FACTOR   size multiplier (default 2)\n"
           "  -n N        operations per timed graph / eager batch (default 20)\n"
           "  -w N        warm-up operations (default 5)\n"
           "  -R N        timed replays, median reported (default 10)\n"
           "  -c 0|1      check results (default 1)\n"
           "  -d TYPE     ");
    print_names("bfloat16", SYMMEM_DTYPE_COUNT, dtype_at);
    printf("\n  -o OP       ");
    print_names("sum", SYMMEM_REDOP_COUNT, redop_at);
    printf("\n  -a ALGO     auto (default), all, or one or more (comma-separated) of:");
    for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++)
        if (symmem_algo_listed(a) && !symmem_algo_lossy(a))
            printf("%s %s", a == SYMMEM_ALGO_AUTO + 1 ? "" : ",", symmem_algo_name((symmem_algo_t)a));
    printf("\n"
           "              auto rows show the algorithm the table chose, e.g. auto:twoshot_pull\n"
           "  -t COLL     ");
    print_names("all_reduce", SYMMEM_COLL_KIND_COUNT, coll_at);
    printf("\n"
           "  -g          time CUDA-graph replays (default);  -G 0 eager launches, -G 1 graphs\n"
           "  -z 0|1      input/output in a symmetric buffer (1, default: zero copy) or cudaMalloc memory (0)\n"
           "  -N N        ranks (default: number of GPUs); one process per rank\n"
           "  --inprocess ranks as one process (symmem_comm_init_all); N may exceed the GPU count\n"
           "  --nccl 0|1  NCCL baseline in the same run (default 1 when built with NCCL)\n"
           "  --align 0|1 one untimed replay before each timed one, so ranks start the clock together (default 1)\n"
           "  --placement auto|device|host_numa  where the communicator puts symmetric memory (options API; default\n"
           "              SYMMEM_PLACEMENT). host_numa with every rank on one GPU is the PCIe lab: every peer access\n"
           "              crosses that GPU's PCIe link to pinned host memory (the header says what it is and is not)\n"
           "  --model 0|1 the cost model's prediction beside each row (model column), its floor in the summary, and\n"
           "              a markdown summary: auto against the best forced algorithm per size (use with -a all)\n"
           "  --tune [FILE]  tune the algorithm table for -t/-d/-o over the -b..-e sizes: time every algorithm\n"
           "              (-a is ignored), take per size the fastest with #wrong 0 (slowest-rank time), set it on\n"
           "              every rank as contiguous size ranges, write the table to FILE (default\n"
           "              $SYMMEM_TUNE_FILE, else <cache dir>/tune.txt, which the library loads by default; the\n"
           "              section of this topology, this op's rules replaced, other ops and sections kept), print\n"
           "              it, and re-run auto with it vs NCCL. Also --tune=FILE\n"
           "Size is the largest buffer of the operation (nccl-tests convention): the all-reduce input, the\n"
           "reduce-scatter input, the all-gather output. busbw = algbw * 2(n-1)/n (all-reduce), (n-1)/n (others).\n");
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

/* -a: "all", or one name or a comma-separated list, each kept once. */
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
        fprintf(stderr, "symmem-bench: -a needs an algorithm\n");
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
    o->iters = 20;
    o->warmup = 5;
    o->replays = 10;
    o->check = 1;
    o->graph = 1;
    o->align = 1;
    o->zero_copy = 1;
    o->nranks = 0;
#ifdef SYMMEM_HAVE_NCCL
    o->nccl = 1;
#endif
    o->dt = SYMMEM_BFLOAT16;
    o->op = SYMMEM_OP_SUM;
    o->coll = &bench_all_reduce;
    o->algos[0] = SYMMEM_ALGO_AUTO;
    o->nalgos = 1;
}

/* The options that take an integer (atoi, as before); flag: stored as 0/1. */
static const struct int_opt {
    const char *name;
    size_t off;
    int flag;
} int_opts[] = {
    {"-n", offsetof(opts_t, iters), 0},     {"-w", offsetof(opts_t, warmup), 0},
    {"-R", offsetof(opts_t, replays), 0},   {"-c", offsetof(opts_t, check), 0},
    {"-G", offsetof(opts_t, graph), 1},     {"-z", offsetof(opts_t, zero_copy), 1},
    {"-N", offsetof(opts_t, nranks), 0},    {"--nccl", offsetof(opts_t, nccl), 1},
    {"--align", offsetof(opts_t, align), 1},      {"--model", offsetof(opts_t, model), 1},
};

/* The options that take a value besides int_opts. */
static const char *const valued_opts[] = {"-b", "-e", "-f", "-d", "-o", "-t", "-a", "--placement"};

static int takes_value(const char *a)
{
    for (size_t k = 0; k < sizeof int_opts / sizeof *int_opts; k++)
        if (!strcmp(a, int_opts[k].name)) return 1;
    for (size_t k = 0; k < sizeof valued_opts / sizeof *valued_opts; k++)
        if (!strcmp(a, valued_opts[k])) return 1;
    return 0;
}

/* Option `a` (one that takes_value) with its value v. 0, or -1 after a message. */
static int parse_valued(const char *a, const char *v, opts_t *o)
{
    for (size_t k = 0; k < sizeof int_opts / sizeof *int_opts; k++)
        if (!strcmp(a, int_opts[k].name)) {
            const int x = atoi(v);
            *(int *)((char *)o + int_opts[k].off) = int_opts[k].flag ? x != 0 : x;
            return 0;
        }
    const char *what = NULL;
    if (!strcmp(a, "-b") || !strcmp(a, "-e")) {
        if (symmem_parse_size(v, !strcmp(a, "-b") ? &o->minb : &o->maxb) != 0) what = "bad size";
    } else if (!strcmp(a, "-f")) {
        o->factor = atof(v);
    } else if (!strcmp(a, "-d")) {
        if (dtype_from_name(v, &o->dt) != 0) what = "unknown dtype";
    } else if (!strcmp(a, "-o")) {
        if (redop_from_name(v, &o->op) != 0) what = "unknown op";
    } else if (!strcmp(a, "-t")) {
        if (coll_from_name(v, &o->coll) != 0) what = "unknown collective";
    } else if (!strcmp(a, "--placement")) {
        if (!strcasecmp(v, "auto")) o->placement = SYMMEM_PLACEMENT_AUTO;
        else if (!strcasecmp(v, "device")) o->placement = SYMMEM_PLACEMENT_DEVICE;
        else if (!strcasecmp(v, "host_numa") || !strcasecmp(v, "host")) o->placement = SYMMEM_PLACEMENT_HOST_NUMA;
        else what = "unknown placement (auto, device, host_numa)";
    } else {
        return parse_algos(v, o); /* -a */
    }
    if (!what) return 0;
    fprintf(stderr, "symmem-bench: %s %s\n", what, v);
    return -1;
}

/* The combinations that cannot run; --tune's algorithm list (every concrete algorithm). 0 or -1. */
static int check_options(opts_t *o)
{
    if (o->iters < 1 || o->replays < 1 || o->factor <= 1.0 || o->minb > o->maxb || o->minb == 0) {
        fprintf(stderr, "symmem-bench: inconsistent options (-n/-R >= 1, -f > 1, 0 < -b <= -e)\n");
        return -1;
    }
    if (!o->tune) return 0;
    if (!o->coll->tunable) {
        int tunable[SYMMEM_COLL_KIND_COUNT], n = 0;
        for (int k = 0; k < SYMMEM_COLL_KIND_COUNT; k++)
            if (bench_colls[k] && bench_colls[k]->tunable) tunable[n++] = k;
        fprintf(stderr, "symmem-bench: --tune needs -t");
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
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            return 1;
        } else if (!strcmp(a, "-g")) {
            o->graph = 1;
        } else if (!strcmp(a, "--inprocess")) {
            o->inprocess = 1;
        } else if (!strcmp(a, "--tune")) {
            o->tune = 1;
            if (v && v[0] != '-') { /* optional FILE */
                o->tune_file = v;
                i++;
            }
        } else if (!strncmp(a, "--tune=", 7)) {
            o->tune = 1;
            o->tune_file = a + 7;
        } else if (takes_value(a)) {
            if (!v) {
                fprintf(stderr, "symmem-bench: %s needs a value\n", a);
                return -1;
            }
            if (parse_valued(a, v, o) != 0) return -1;
            i++;
        } else {
            fprintf(stderr, "symmem-bench: unknown option %s (-h for help)\n", a);
            return -1;
        }
    }
    return check_options(o);
}
