/* symmem-alloc-bench: cost of a symmetric allocation across ranks (symmem_alloc: cuMemCreate, export,
 * fd exchange over Unix sockets, import and map of every peer; collective, returns when every rank has
 * mapped every peer) and of symmem_free, for 2 MiB ... 4 GiB, one process per GPU (launched by the tool,
 * the parent never touches CUDA). With --torch-json FILE (written by torch_alloc_bench.py on the same
 * machine) it adds torch.distributed._symmetric_memory.empty + rendezvous and the ratio symmem / torch.
 * Time per size: every rank waits at a host barrier, times its own call; a repetition's time is the slowest
 * rank's; the median over repetitions is printed.
 * Usage: symmem-alloc-bench [-N ranks] [-b MIN] [-e MAX] [-r reps] [--torch-json FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define MAX_SIZES 64

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * ts.tv_sec + 1e-6 * ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Reads {"2097152": 12.5, ...} (bytes: milliseconds); returns the value for `bytes` or -1. */
static double torch_ms(const char *json, size_t bytes)
{
    if (!json) return -1;
    char key[48];
    snprintf(key, sizeof key, "\"%zu\"", bytes);
    const char *p = strstr(json, key);
    if (!p) return -1;
    p = strchr(p + strlen(key), ':');
    return p ? strtod(p + 1, NULL) : -1;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static double to_ms(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}
static uint64_t from_ms(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* This process's rank (a child of cc_launch): CUDA, the channel, the communicator; *tinit the init's time. */
static int start_rank(cc_ctx_t *ctx, int nranks, int child, double *tinit)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->name = "alloc-bench";
    ctx->timeout_s = 600;
    ctx->multiproc = 1;
    ctx->nranks = ctx->nprocs = nranks;
    ctx->proc = child;
    ctx->nlocal = 1;
    ctx->shm = cc_shm_attach("SYMMEM_BENCH");
    int ndev = 0;
    if (!ctx->shm || cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0) return CC_EXIT_SKIP;
    ctx->ngpus = ndev;
    cc_rank_t *R = &ctx->r[0];
    R->rank = child;
    R->device = child % ndev;
    if (cudaSetDevice(R->device) != cudaSuccess || cudaFree(NULL) != cudaSuccess) return 1;
    if (cc_barrier(ctx) != 0) return 1;
    symmem_unique_id_t id;
    symmem_options_t so = SYMMEM_OPTIONS_INIT;
    so.device = R->device;
    const char *ids = getenv("SYMMEM_UNIQUE_ID");
    symmem_status_t st = ids ? symmem_unique_id_from_string(ids, &id) : SYMMEM_INVALID_ARGUMENT;
    double ti0 = now_ms();
    if (st == SYMMEM_OK) st = symmem_comm_init(nranks, child, &id, &so, &R->comm);
    *tinit = now_ms() - ti0;
    if (st != SYMMEM_OK) {
        fprintf(stderr, "rank %d: symmem_comm_init: %s: %s\n", child, symmem_status_name(st), symmem_last_error());
        cc_shm_abort(ctx->shm);
        return 1;
    }
    return 0;
}

/* One size, r_here repetitions: ta[k], tf[k] = the slowest rank's symmem_alloc and symmem_free times. 0 or 1
 * (this rank failed). */
static int measure_size(cc_ctx_t *ctx, size_t size, int r_here, double *ta, double *tf)
{
    cc_rank_t *R = &ctx->r[0];
    int failed = 0;
    for (int k = 0; k < r_here && !failed; k++) {
        symmem_buffer_t buf = NULL;
        if (cc_barrier(ctx) != 0) return 1;
        double t0 = now_ms();
        symmem_status_t st = symmem_alloc(R->comm, size, &buf);
        double t1 = now_ms();
        if (st != SYMMEM_OK) {
            fprintf(stderr, "rank %d: symmem_alloc(%zu): %s: %s\n", ctx->proc, size, symmem_status_name(st),
                    symmem_last_error());
            failed = 1;
        }
        if (cc_barrier(ctx) != 0) failed = 1;
        double t2 = now_ms();
        if (buf && symmem_free(buf) != SYMMEM_OK) failed = 1;
        double t3 = now_ms();
        uint64_t mine[2] = {from_ms(t1 - t0), from_ms(t3 - t2)}, all[2 * CC_MAX_RANKS];
        if (cc_shm_allgather(ctx->shm, ctx->proc, ctx->nprocs, mine, sizeof mine, all) != 0) return 1;
        ta[k] = tf[k] = 0;
        for (int r = 0; r < ctx->nranks; r++) {
            if (to_ms(all[2 * r]) > ta[k]) ta[k] = to_ms(all[2 * r]);
            if (to_ms(all[2 * r + 1]) > tf[k]) tf[k] = to_ms(all[2 * r + 1]);
        }
    }
    return failed;
}

int main(int argc, char **argv)
{
    int nranks = 2, reps = 5;
    size_t minb = (size_t)2 << 20, maxb = (size_t)4 << 30;
    const char *torch_json = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (!strcmp(argv[i], "-N")) nranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r")) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b")) minb = strtoull(argv[++i], NULL, 0) << 20;
        else if (!strcmp(argv[i], "-e")) maxb = strtoull(argv[++i], NULL, 0) << 20;
        else if (!strcmp(argv[i], "--torch-json")) torch_json = argv[++i];
    }
    if (reps < 1 || reps > 64 || nranks < 1 || nranks > CC_MAX_RANKS || minb == 0) {
        fprintf(stderr, "usage: symmem-alloc-bench [-N ranks] [-b MIN_MiB] [-e MAX_MiB] [-r reps] [--torch-json FILE]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int child = cc_child_rank("SYMMEM_BENCH");
    if (child < 0) {
        if (cc_probe_gpu_count() <= 0) {
            printf("symmem-alloc-bench: no CUDA device; nothing to measure\n");
            return CC_EXIT_SKIP;
        }
        return cc_launch("SYMMEM_BENCH", nranks, argv, NULL, 0);
    }
    cc_ctx_t ctx;
    double tinit = 0;
    const int started = start_rank(&ctx, nranks, child, &tinit);
    if (started != 0) return started;
    const char *json = child == 0 ? slurp(torch_json ? torch_json : "") : NULL;
    if (child == 0) {
        printf("# symmem-alloc-bench: symmem_alloc (alloc + export + exchange + import + map every peer) and "
               "symmem_free, %d ranks (one process each) on %d GPU(s), median of %d, slowest rank\n", nranks,
               ctx.ngpus, reps);
        printf("# symmem_comm_init took %.1f ms on rank 0\n", tinit);
        if (torch_json && !json) printf("# torch results: %s unreadable, column left empty\n", torch_json);
        printf("#%11s %14s %12s %16s %8s\n", "size(B)", "symmem(ms)", "free(ms)", "torch(ms)", "ratio");
    }
    int failed = 0;
    for (size_t size = minb; size <= maxb && !failed; size *= 2) {
        int r_here = size > ((size_t)256 << 20) && reps > 3 ? 3 : reps;
        double ta[64], tf[64];
        failed = measure_size(&ctx, size, r_here, ta, tf);
        failed = cc_sum_u64(&ctx, (uint64_t)failed) != 0;
        if (failed) break;
        if (child == 0) {
            double a = median(ta, r_here), f = median(tf, r_here), t = torch_ms(json, size);
            char tcol[32] = "-", rcol[32] = "-";
            if (t > 0) {
                snprintf(tcol, sizeof tcol, "%.3f", t);
                snprintf(rcol, sizeof rcol, "%.2f", a / t);
            }
            printf(" %11zu %14.3f %12.3f %16s %8s\n", size, a, f, tcol, rcol);
        }
    }
    cc_barrier(&ctx);
    symmem_comm_destroy(ctx.r[0].comm);
    if (child == 0) printf("# %s\n", failed ? "FAILED" : "done");
    return failed;
}
