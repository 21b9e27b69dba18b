/* The copy-engine two-shot's schedule (collectives/copy_engine.h), executed on host arrays exactly as the host
 * launcher and the step kernel execute it on the GPU: a copy step moves bytes, a kernel step is a sync of
 * every rank followed by its jobs (fp32 folds in the sources' order, one source a byte copy), and an
 * end sync where it says so. For every world size 2..8 (and 16), every kind, dtype and op, odd counts, in
 * place and out of place, and workspaces small enough for many rounds, it checks
 *   - the results bit for bit against a reference computed from the inputs alone (fp32 folded in rank
 *     order 0..n-1, rounded once: what every other algorithm returns), and against float64 within the
 *     harness's bound; every rank's output identical;
 *   - the ordering: every workspace byte read was written in this call by an earlier phase (phases are
 *     the intervals between syncs; a sync means every rank's stream reached it), no byte is written while
 *     another rank may still read or write it in the same phase, nothing touches the workspace before the
 *     first sync or after the last one (calls of other algorithms around it need nothing from it), every
 *     rank runs the same kernels, no step touches another rank's user buffers, the jobs of one kernel do
 *     not overlap (a destination equals a source only as the same range: in place), and copies never
 *     overlap their own source;
 *   - the geometry: the footprint fits the descriptor's units in one half, the epochs are the plan's.
 * Phases run their ranks in a shuffled order: the order checks say it cannot matter. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/algos.h"
#include "collectives/copy_engine.h"
#include "collectives/plan.h"
#include "harness.h"
#include "test_util.h"
#include "values.h"

#define MAXN 16
/* ---- fp32 in the kernels' way: 16-bit types widened, folded, rounded to nearest even ------------------ */
static float to_f(const unsigned char *p, symmem_dtype_t dt)
{
    if (dt == SYMMEM_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return dt == SYMMEM_BFLOAT16 ? cc_bf16_to_float(h) : cc_half_to_float(h);
}
static void from_f(unsigned char *p, symmem_dtype_t dt, float f)
{
    if (dt == SYMMEM_FLOAT32) {
        memcpy(p, &f, 4);
        return;
    }
    const uint16_t h = dt == SYMMEM_BFLOAT16 ? cc_float_to_bf16(f) : cc_float_to_half(f);
    memcpy(p, &h, 2);
}
/* device.cuh's redop: NaN propagates, ties keep the earlier operand */
static float redop(symmem_redop_t op, float a, float b)
{
    if (op == SYMMEM_OP_SUM) return a + b;
    if (op == SYMMEM_OP_MAX) return (a != a || a >= b) ? a : b;
    return (a != a || a <= b) ? a : b;
}

/* ---- the world: every rank's buffers and the workspace shadow ------------------------------------------ */
typedef struct shadow {
    int wphase, wrank; /* last write: phase, rank (-1: never written in this call) */
    int rphase;        /* latest phase that read it (-1: none), and which ranks read in that phase */
    uint32_t rmask;
} shadow_t;

typedef struct world {
    int n;
    symmem_dtype_t dt;
    symmem_redop_t op;
    size_t es, ws_bytes;
    unsigned char *send[MAXN], *recv[MAXN], *ws[MAXN];
    size_t send_bytes, recv_bytes;
    shadow_t *sh[MAXN];
    int phase, last_phase;
} world_t;

static unsigned char *at(world_t *w, int rank, const symmem_ce_ref_t *r, size_t bytes, int exec)
{
    if (r->buf == SYMMEM_CE_WS) {
        EXPECT_MSG(r->rank >= 0 && r->rank < w->n && r->off + bytes <= w->ws_bytes, "workspace ref rank %d off %llu + %zu",
               r->rank, (unsigned long long)r->off, bytes);
        return w->ws[r->rank] + r->off;
    }
    EXPECT_MSG(r->rank == exec, "rank %d's step names rank %d's user buffer", exec, r->rank);
    const size_t lim = r->buf == SYMMEM_CE_SEND ? w->send_bytes : w->recv_bytes;
    EXPECT_MSG(r->off + bytes <= lim, "user buffer ref off %llu + %zu > %zu", (unsigned long long)r->off, bytes, lim);
    return (r->buf == SYMMEM_CE_SEND ? w->send : w->recv)[rank] + r->off;
}

static void ws_read(world_t *w, int exec, const symmem_ce_ref_t *r, size_t bytes)
{
    if (r->buf != SYMMEM_CE_WS) return;
    EXPECT_MSG(w->phase > 0 && w->phase < w->last_phase, "rank %d reads a workspace outside the call's syncs (phase %d)",
           exec, w->phase);
    for (size_t b = 0; b < bytes; b++) {
        shadow_t *s = &w->sh[r->rank][r->off + b];
        EXPECT_MSG(s->wphase >= 0, "rank %d reads byte %llu of rank %d's workspace, never written in this call", exec,
               (unsigned long long)(r->off + b), r->rank);
        EXPECT_MSG(s->wphase < w->phase || s->wrank == exec,
               "rank %d reads byte %llu of rank %d's workspace in phase %d, written by rank %d in the same phase", exec,
               (unsigned long long)(r->off + b), r->rank, w->phase, s->wrank);
        if (s->rphase != w->phase) s->rmask = 0;
        s->rphase = w->phase;
        s->rmask |= 1u << exec;
        if (test_failures > TEST_EXPECT_SHOWN) return;
    }
}

static void ws_write(world_t *w, int exec, const symmem_ce_ref_t *r, size_t bytes)
{
    if (r->buf != SYMMEM_CE_WS) return;
    EXPECT_MSG(w->phase > 0 && w->phase < w->last_phase, "rank %d writes a workspace outside the call's syncs (phase %d)",
           exec, w->phase);
    for (size_t b = 0; b < bytes; b++) {
        shadow_t *s = &w->sh[r->rank][r->off + b];
        EXPECT_MSG(s->rphase < w->phase || (s->rmask & ~(1u << exec)) == 0,
               "rank %d writes byte %llu of rank %d's workspace in phase %d, which another rank reads then", exec,
               (unsigned long long)(r->off + b), r->rank, w->phase);
        EXPECT_MSG(s->wphase < w->phase || s->wrank == exec,
               "ranks %d and %d write byte %llu of rank %d's workspace in phase %d", exec, s->wrank,
               (unsigned long long)(r->off + b), r->rank, w->phase);
        s->wphase = w->phase;
        s->wrank = exec;
        if (test_failures > TEST_EXPECT_SHOWN) return;
    }
}

static int same_mem(world_t *w, int exec, const symmem_ce_ref_t *a, const symmem_ce_ref_t *b, size_t na, size_t nb,
                    int *identical)
{
    const unsigned char *pa = at(w, exec, a, na, exec), *pb = at(w, exec, b, nb, exec);
    *identical = pa == pb && na == nb;
    return pa < pb + nb && pb < pa + na;
}

static void run_copy(world_t *w, int exec, const symmem_ce_step_t *s)
{
    int ident;
    EXPECT_MSG(!same_mem(w, exec, &s->dst, &s->src, s->bytes, s->bytes, &ident), "rank %d copies onto its own source", exec);
    ws_read(w, exec, &s->src, s->bytes);
    ws_write(w, exec, &s->dst, s->bytes);
    memmove(at(w, exec, &s->dst, s->bytes, exec), at(w, exec, &s->src, s->bytes, exec), s->bytes);
}

static void run_jobs(world_t *w, int exec, const symmem_ce_step_t *s)
{
    const size_t es = w->es;
    /* one kernel's jobs run at the same time: no job's destination may meet another's sources or
     * destination, and a source meets its own destination only as the same range */
    for (int a = 0; a < s->njobs; a++) {
        const symmem_ce_job_t *ja = &s->jobs[a];
        EXPECT_MSG(ja->nsrc >= 1 && ja->nsrc <= w->n, "job of %d sources", ja->nsrc);
        for (int b = 0; b < s->njobs; b++) {
            const symmem_ce_job_t *jb = &s->jobs[b];
            int ident;
            if (b != a) EXPECT_MSG(!same_mem(w, exec, &ja->dst, &jb->dst, ja->elems * es, jb->elems * es, &ident), "jobs %d, %d: destinations overlap", a, b);
            for (int q = 0; q < jb->nsrc; q++)
                if (same_mem(w, exec, &ja->dst, &jb->src[q], ja->elems * es, jb->elems * es, &ident))
                    EXPECT_MSG(b == a && ident, "job %d writes what job %d reads (source %d)", a, b, q);
        }
    }
    for (int a = 0; a < s->njobs; a++) {
        const symmem_ce_job_t *j = &s->jobs[a];
        for (int q = 0; q < j->nsrc; q++) ws_read(w, exec, &j->src[q], j->elems * es);
        ws_write(w, exec, &j->dst, j->elems * es);
        unsigned char *dst = at(w, exec, &j->dst, j->elems * es, exec);
        const unsigned char *src[MAXN];
        for (int q = 0; q < j->nsrc; q++) src[q] = at(w, exec, &j->src[q], j->elems * es, exec);
        for (uint64_t i = 0; i < j->elems; i++) { /* every source loaded before the store, as each thread does */
            if (j->nsrc == 1) {
                memmove(dst + i * es, src[0] + i * es, es);
                continue;
            }
            float acc = to_f(src[0] + i * es, w->dt);
            for (int q = 1; q < j->nsrc; q++) acc = redop(w->op, acc, to_f(src[q] + i * es, w->dt));
            from_f(dst + i * es, w->dt, acc);
        }
    }
}

/* One rank's whole call as the host launcher enqueues it: the start kernel, then every round's steps. */
typedef struct rank_plan {
    int nsteps;
    symmem_ce_step_t *steps;
} rank_plan_t;

static void plan_rank(const symmem_ce_call_t *c, rank_plan_t *rp)
{
    static symmem_ce_step_t round[SYMMEM_CE_MAX_STEPS];
    size_t cap = 64;
    rp->steps = malloc(cap * sizeof *rp->steps);
    symmem_ce_plan_start(&rp->steps[0]);
    rp->nsteps = 1;
    for (uint64_t k = 0; k < c->rounds; k++) {
        const int ns = symmem_ce_plan_round(c, k, round);
        EXPECT_MSG(ns >= 1 && ns <= 2 * c->n, "round %llu: %d steps", (unsigned long long)k, ns);
        if ((size_t)(rp->nsteps + ns) > cap) {
            cap = 2 * cap + (size_t)ns;
            rp->steps = realloc(rp->steps, cap * sizeof *rp->steps);
        }
        memcpy(rp->steps + rp->nsteps, round, (size_t)ns * sizeof *round);
        rp->nsteps += ns;
    }
}

/* Phase of every step's start and the sync count; the kernels' sync pattern must be every rank's. */
static int syncs_of(const rank_plan_t *rp, uint32_t *pattern, int maxk)
{
    int syncs = 0, k = 0;
    for (int i = 0; i < rp->nsteps; i++)
        if (rp->steps[i].type == SYMMEM_CE_KERNEL) {
            syncs += 1 + (rp->steps[i].end_sync != 0);
            if (k < maxk) pattern[k] = (uint32_t)rp->steps[i].end_sync;
            k++;
        }
    return syncs;
}

typedef struct cfg {
    int n, kind, in_place;
    symmem_dtype_t dt;
    symmem_redop_t op;
    uint64_t count;
    size_t half_bytes;
    uint64_t seed;
} cfg_t;

static uint64_t rng_state = 0x1234567;
static uint64_t rng(void) { return rng_state = cc_mix64(rng_state + 0x9e3779b97f4a7c15ull); }

static void run_case(const cfg_t *cf)
{
    const int n = cf->n;
    const size_t es = symmem_dtype_size(cf->dt);
    const int ar = cf->kind == SYMMEM_COLL_ALL_REDUCE, rs = cf->kind == SYMMEM_COLL_REDUCE_SCATTER;
    /* the geometry the library plans with: a layout whose halves are cf->half_bytes */
    symmem_coll_layout_t lay;
    memset(&lay, 0, sizeof lay);
    lay.data_off = 4096;
    lay.half_bytes = cf->half_bytes;
    lay.ws_bytes = lay.data_off + 2 * lay.half_bytes;
    const symmem_coll_grid_t grid = {64, 128};
    symmem_coll_geom_t g;
    const int gst = symmem_coll_geometry(&lay, &grid, n, (symmem_coll_kind_t)cf->kind, SYMMEM_ALGO_COPY_ENGINE,
                                         cf->count, es, 0, 0, 0, 0, &g);
    EXPECT_MSG(gst == 0, "geometry failed (%d)", gst);
    if (gst != 0) return;
    EXPECT_MSG(g.family == SYMMEM_COLL_FAM_COPY, "family %d", g.family);
    EXPECT_MSG(g.units == (uint64_t)(ar ? 2 * n : n) && g.units * g.segp * 16 <= lay.half_bytes, "units %llu segp %llu",
           (unsigned long long)g.units, (unsigned long long)g.segp);
    EXPECT_MSG(g.epochs + 2 == symmem_ce_epochs(cf->kind, g.rounds), "epochs %llu", (unsigned long long)g.epochs);

    world_t w;
    memset(&w, 0, sizeof w);
    w.n = n, w.dt = cf->dt, w.op = cf->op, w.es = es, w.ws_bytes = lay.ws_bytes;
    const uint64_t in_elems = rs ? (uint64_t)n * cf->count : cf->count;
    const uint64_t out_elems = cf->kind == SYMMEM_COLL_ALL_GATHER ? (uint64_t)n * cf->count : cf->count;
    w.send_bytes = in_elems * es, w.recv_bytes = out_elems * es;
    /* in place: all-reduce send == recv; reduce-scatter recv = send + rank*count; all-gather send = recv +
     * rank*count. The harness of the world: one allocation per rank holding the larger buffer. */
    unsigned char *block[MAXN];
    for (int r = 0; r < n; r++) {
        const size_t big = w.send_bytes > w.recv_bytes ? w.send_bytes : w.recv_bytes;
        block[r] = malloc(cf->in_place ? big : w.send_bytes + w.recv_bytes);
        if (!cf->in_place) {
            w.send[r] = block[r];
            w.recv[r] = block[r] + w.send_bytes;
        } else if (ar) {
            w.send[r] = w.recv[r] = block[r];
        } else if (rs) {
            w.send[r] = block[r];
            w.recv[r] = block[r] + (size_t)r * cf->count * es;
        } else {
            w.recv[r] = block[r];
            w.send[r] = block[r] + (size_t)r * cf->count * es;
        }
        memset(block[r], 0xA5, cf->in_place ? big : w.send_bytes + w.recv_bytes);
        for (uint64_t i = 0; i < in_elems; i++)
            from_f(w.send[r] + i * es, cf->dt, cc_value(cf->seed, r, i, cf->dt));
        w.ws[r] = malloc(w.ws_bytes);
        memset(w.ws[r], 0xFF, w.ws_bytes); /* NaN patterns: a stale read shows */
        w.sh[r] = malloc(w.ws_bytes * sizeof(shadow_t));
        for (size_t b = 0; b < w.ws_bytes; b++) w.sh[r][b] = (shadow_t){-1, -1, -1, 0};
    }
    /* every rank's plan; the same kernels and syncs on every rank */
    rank_plan_t rp[MAXN];
    uint32_t pat0[4096], pat[4096];
    int syncs = 0;
    for (int r = 0; r < n; r++) {
        const symmem_ce_call_t c = {.kind = cf->kind,
                                    .n = n,
                                    .rank = r,
                                    .stride = g.stride,
                                    .total = g.total,
                                    .segp = g.segp,
                                    .rounds = g.rounds,
                                    .elem_size = es,
                                    .data_off = lay.data_off,
                                    .half_bytes = lay.half_bytes,
                                    .in_place = cf->in_place && cf->kind == SYMMEM_COLL_ALL_GATHER};
        plan_rank(&c, &rp[r]);
        const int sy = syncs_of(&rp[r], r ? pat : pat0, 4096);
        if (r == 0) syncs = sy;
        EXPECT_MSG(sy == syncs && (r == 0 || memcmp(pat, pat0, sizeof(uint32_t) * (size_t)(sy < 4096 ? sy : 4096)) == 0),
               "rank %d's kernels differ from rank 0's", r);
        int kernels = 0;
        for (int i = 0; i < rp[r].nsteps; i++) kernels += rp[r].steps[i].type == SYMMEM_CE_KERNEL;
        EXPECT_MSG(2 * (uint64_t)kernels == symmem_ce_epochs(cf->kind, g.rounds), "rank %d: %d kernels", r, kernels);
    }
    /* phase by phase; ranks in a shuffled order each phase */
    w.last_phase = syncs;
    int pos[MAXN] = {0}, inkernel[MAXN] = {0}; /* step index; 1: its jobs are next, 2: its end sync is next */
    for (w.phase = 0; w.phase <= syncs; w.phase++) {
        int order[MAXN];
        for (int r = 0; r < n; r++) order[r] = r;
        for (int r = n - 1; r > 0; r--) {
            const int j = (int)(rng() % (uint64_t)(r + 1)), t = order[r];
            order[r] = order[j], order[j] = t;
        }
        for (int oi = 0; oi < n; oi++) {
            const int r = order[oi];
            for (;;) { /* until this rank reaches its next sync */
                if (pos[r] >= rp[r].nsteps) break;
                const symmem_ce_step_t *s = &rp[r].steps[pos[r]];
                if (s->type == SYMMEM_CE_COPY) {
                    run_copy(&w, r, s);
                    pos[r]++;
                    continue;
                }
                if (inkernel[r] == 0) { /* the kernel's first sync ends this phase */
                    inkernel[r] = 1;
                    break;
                }
                if (inkernel[r] == 1) {
                    run_jobs(&w, r, s);
                    if (s->end_sync) {
                        inkernel[r] = 2;
                        break;
                    }
                }
                inkernel[r] = 0;
                pos[r]++;
            }
        }
    }
    for (int r = 0; r < n; r++) EXPECT_MSG(pos[r] == rp[r].nsteps, "rank %d stopped at step %d of %d", r, pos[r], rp[r].nsteps);

    /* results: bit for bit the rank-order fp32 fold, within float64's bound, identical on every rank */
    unsigned char want[16];
    for (int r = 0; r < n && test_failures <= TEST_EXPECT_SHOWN; r++) {
        for (uint64_t i = 0; i < out_elems; i++) {
            const unsigned char *got = w.recv[r] + i * es;
            if (cf->kind == SYMMEM_COLL_ALL_GATHER) {
                const uint64_t s = i / cf->count, k = i % cf->count;
                from_f(want, cf->dt, cc_value(cf->seed, (int)s, k, cf->dt));
            } else {
                const uint64_t idx = rs ? (uint64_t)r * cf->count + i : i;
                double in[MAXN], ref;
                float acc = cc_value(cf->seed, 0, idx, cf->dt);
                in[0] = acc;
                for (int q = 1; q < n; q++) {
                    in[q] = cc_value(cf->seed, q, idx, cf->dt);
                    acc = redop(cf->op, acc, (float)in[q]);
                }
                from_f(want, cf->dt, acc);
                EXPECT_MSG(cc_elem_ok(to_f(got, cf->dt), in, n, cf->op, cf->dt, &ref), "rank %d elem %llu: %g, float64 %g", r,
                       (unsigned long long)i, (double)to_f(got, cf->dt), ref);
            }
            EXPECT_MSG(memcmp(got, want, es) == 0, "n %d kind %d dt %d op %d count %llu in_place %d half %zu: rank %d elem %llu: %.9g, want %.9g",
                   n, cf->kind, cf->dt, cf->op, (unsigned long long)cf->count, cf->in_place, cf->half_bytes, r,
                   (unsigned long long)i, (double)to_f(got, cf->dt), (double)to_f(want, cf->dt));
            if (test_failures > TEST_EXPECT_SHOWN) break;
        }
        if (!rs) EXPECT_MSG(memcmp(w.recv[r], w.recv[0], w.recv_bytes) == 0, "rank %d's output differs from rank 0's", r);
    }
    for (int r = 0; r < n; r++) {
        free(block[r]);
        free(w.ws[r]);
        free(w.sh[r]);
        free(rp[r].steps);
    }
}

int main(void)
{
    const uint64_t counts[] = {1, 2, 3, 7, 8, 9, 15, 17, 31, 63, 64, 65, 255, 257, 1000, 1023, 4097};
    const size_t halves[] = {4096, 16384, 65536}; /* many rounds, a few, one or a few */
    int cases = 0;
    const int ns[] = {2, 3, 4, 5, 6, 7, 8, 16};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (int kind = 0; kind <= SYMMEM_COLL_ALL_GATHER; kind++)
            for (int dt = 0; dt < SYMMEM_DTYPE_COUNT; dt++)
                for (int op = 0; op < (kind == SYMMEM_COLL_ALL_GATHER ? 1 : SYMMEM_REDOP_COUNT); op++)
                    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                        for (int ip = 0; ip <= 1; ip++) {
                            const int n = ns[ni];
                            const size_t half = halves[(ci + (size_t)ip + (size_t)op) % 3];
                            /* the smallest half must hold one pack per unit: 2n packs */
                            if (half < (size_t)(2 * n * 16)) continue;
                            if (n == 16 && (ci % 4 != 0 || dt != SYMMEM_BFLOAT16)) continue; /* a sample */
                            /* every count in bf16; the other dtypes (the same schedule, other element
                             * sizes) at every other count */
                            if (dt != SYMMEM_BFLOAT16 && (ci + (size_t)ip) % 2) continue;
                            const cfg_t cf = {n, kind, ip, (symmem_dtype_t)dt, (symmem_redop_t)op, counts[ci],
                                              half, cc_mix64(0xc0ffee + (uint64_t)cases)};
                            run_case(&cf);
                            cases++;
                            if (test_failures > TEST_EXPECT_SHOWN) {
                                fprintf(stderr, "stopping after %d failures\n", test_failures);
                                return 1;
                            }
                        }
    /* rounds: a message of many rounds at 8 ranks, bf16 sum (the round boundaries in every shard) */
    for (int kind = 0; kind <= SYMMEM_COLL_ALL_GATHER; kind++) {
        const cfg_t cf = {8, kind, kind == 1, SYMMEM_BFLOAT16, SYMMEM_OP_SUM, 100003, 8192, 0xabcdefull + (uint64_t)kind};
        run_case(&cf);
        cases++;
    }
    printf("test_copy_engine: %d cases, %d failures\n", cases, test_failures);
    return test_failures ? 1 : 0;
}
