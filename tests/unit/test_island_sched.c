/* The island schedule (collectives/island.h) executed on the CPU exactly as the kernel (island.cu) executes
 * it: every rank's steps, round by round, over host arrays standing for the user buffers and every rank's
 * workspace (two data halves of slots x positions), the halves chosen from the epochs as the kernels do
 * (kernel.cuh, half_off), with sequences of calls back to back (and calls of a two-shot-shaped other
 * algorithm between them) so that reuse across rounds and calls is exercised. Checked:
 *  - results bit for bit against a float64 reference (integer-valued data: every order of fp32 sums is
 *    exact), for sum, max and min, odd counts, partial packs, in place and out of place, guard elements
 *    untouched; and with non-integer data, every rank's all-reduce and all-gather bytes identical;
 *  - the protocol: every rank reaches the same syncs in the same order (else the kernels would mismatch);
 *    no workspace location is written and accessed (read or written) by anyone between the same two syncs;
 *    every read finds the value written in the same call and round (no stale or missing data).
 * Syncs are modelled as barriers of all ranks: in the kernel block b waits only for every rank's block b,
 * but every step maps position pk of its sources to position pk of its destinations and block b owns the
 * same positions everywhere, so per position the two are the same.
 * Splits: every set partition of 2..5 ranks, every contiguous split and random ones of 6..8, some of 16. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/island.h"
#include "test_util.h"

#define V 4 /* fp32 elements per 16-byte pack */
#define GUARD 5
#define GUARD_BITS 0x7fa5a5a5u

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The kernels' reduction operators (device.cuh, redop). */
static float redop(int op, float a, float b)
{
    if (op == SYMMEM_OP_SUM) return a + b;
    if (op == SYMMEM_OP_MAX) return (a != a || a >= b) ? a : b;
    return (a != a || a <= b) ? a : b;
}

/* ---- the machine: user buffers and workspaces -------------------------------------------------------------- */
typedef struct loc {
    float v[V];
    int64_t tag;        /* call * 2^20 + round of the last write; -1 never written */
    int64_t wphase, rphase;
} loc_t;

typedef struct call {
    int other; /* a two-shot-shaped call of another algorithm: writes every slot before its first sync */
    symmem_coll_kind_t kind;
    int op, inplace, integer;
    uint64_t count, stride, total, segp, rounds;
    uint64_t e0; /* epoch at its start */
    float *buf[SYMMEM_MAX_RANKS];   /* each rank's whole user region (in place: one) */
    float *in[SYMMEM_MAX_RANKS], *out[SYMMEM_MAX_RANKS];
    float *in_copy[SYMMEM_MAX_RANKS]; /* the inputs as given, for the reference */
    uint64_t in_len, out_len;
} call_t;

typedef struct machine {
    int n, slots, maxsegp;
    loc_t *ws; /* [rank][half][slot][pk] */
    int64_t phase;
    const symmem_island_split_t *split;
    symmem_island_sched_t sched[3][SYMMEM_MAX_RANKS];
    char what[256];
} machine_t;

static loc_t *wsloc(machine_t *m, int rank, int half, int slot, uint64_t pk)
{
    CHECK(rank >= 0 && rank < m->n && slot >= 0 && slot < m->slots && pk < (uint64_t)m->maxsegp);
    return &m->ws[(((size_t)rank * 2 + half) * m->slots + slot) * m->maxsegp + pk];
}

#define FAIL_IF(cond, ...)                                                                                 \
    do {                                                                                                   \
        if (cond) {                                                                                        \
            fprintf(stderr, "%s: ", m->what);                                                              \
            fprintf(stderr, __VA_ARGS__);                                                                  \
            fprintf(stderr, "\n");                                                                         \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

static void ws_read(machine_t *m, loc_t *l, int64_t tag, float *v)
{
    FAIL_IF(l->wphase == m->phase, "a workspace location is read between the same two syncs it is written in");
    FAIL_IF(l->tag != tag, "a read finds data of another call or round (tag %lld, want %lld)", (long long)l->tag,
            (long long)tag);
    l->rphase = m->phase;
    memcpy(v, l->v, sizeof l->v);
}
static void ws_write(machine_t *m, loc_t *l, int64_t tag, const float *v)
{
    FAIL_IF(l->wphase == m->phase, "a workspace location is written twice between the same two syncs");
    FAIL_IF(l->rphase == m->phase, "a workspace location is written between the same two syncs it is read in");
    l->wphase = m->phase;
    l->tag = tag;
    memcpy(l->v, v, sizeof l->v);
}

/* Valid elements (0..V) of shard s at element i of the shard (kernel.cuh, shard_valid). */
static int shard_valid(const call_t *c, int s, uint64_t i)
{
    const uint64_t start = (uint64_t)s * c->stride;
    if (start >= c->total) return 0;
    const uint64_t len = c->stride < c->total - start ? c->stride : c->total - start;
    if (i >= len) return 0;
    return (int)(len - i < V ? len - i : V);
}

/* ---- executing one step at one position (island.cu, run_step) -------------------------------------------- */
static void exec_step(machine_t *m, const call_t *c, int r, const symmem_island_step_t *st, int half, int64_t tag,
                      uint64_t off, uint64_t pk)
{
    const int s = st->shard;
    const uint64_t i = off + pk * V;
    const int nv = shard_valid(c, s, i);
    if (nv <= 0) return;
    const int ag = c->kind == SYMMEM_COLL_ALL_GATHER, rs = c->kind == SYMMEM_COLL_REDUCE_SCATTER;
    const uint64_t in_e = ag ? i : (uint64_t)s * c->stride + i, out_e = rs ? i : (uint64_t)s * c->stride + i;
    float acc[V] = {0};
    for (int j = 0; j < st->nsrc; j++) {
        const uint16_t e = st->src[j];
        float v[V] = {0};
        if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_IN) {
            for (int k = 0; k < nv; k++) v[k] = c->in[r][in_e + k];
        } else {
            FAIL_IF(SYMMEM_ISLAND_END_WHERE(e) != SYMMEM_ISLAND_WS || SYMMEM_ISLAND_END_RANK(e) != r,
                    "a source is neither my input nor my own workspace");
            ws_read(m, wsloc(m, r, half, SYMMEM_ISLAND_END_SLOT(e), pk), tag, v);
        }
        for (int k = 0; k < V; k++) acc[k] = j == 0 ? v[k] : redop(c->op, acc[k], v[k]);
    }
    FAIL_IF(st->kind == SYMMEM_ISLAND_MOVE && st->nsrc != 1, "a MOVE with %d sources", st->nsrc);
    for (int j = 0; j < st->ndst; j++) {
        const uint16_t e = st->dst[j];
        if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_OUT) {
            /* in place, my input of the shard is its output: the kernel skips the copy onto itself */
            if (c->inplace && st->nsrc == 1 && SYMMEM_ISLAND_END_WHERE(st->src[0]) == SYMMEM_ISLAND_IN) {
                for (int k = 0; k < nv; k++) FAIL_IF(&c->out[r][out_e + k] != &c->in[r][in_e + k], "in place: not the same");
                continue;
            }
            for (int k = 0; k < nv; k++) c->out[r][out_e + k] = acc[k];
        } else {
            FAIL_IF(SYMMEM_ISLAND_END_WHERE(e) != SYMMEM_ISLAND_WS, "a destination is my input");
            ws_write(m, wsloc(m, SYMMEM_ISLAND_END_RANK(e), half, SYMMEM_ISLAND_END_SLOT(e), pk), tag, acc);
        }
    }
}

/* ---- the programs: every rank's steps over a sequence of calls, cut at the syncs ------------------------- */
typedef struct cursor {
    int call;
    uint64_t round;
    uint32_t step;
} cursor_t;

/* The other algorithm's round: before its sync A it writes slot r of every rank (all slots, so any island
 * data still unread there would be caught), after it every rank reads them, a sync B, reads again. Steps:
 * 0 write, 1 sync, 2 read, 3 sync, 4 read. */
static void other_step(machine_t *m, const call_t *c, int r, uint32_t stp, int half, int64_t tag)
{
    float v[V] = {(float)r, 1, 2, 3};
    for (uint64_t pk = 0; pk < c->segp; pk++) {
        if (stp == 0) {
            for (int d = 0; d < m->n; d++)
                for (int sl = r; sl < m->slots; sl += m->n) ws_write(m, wsloc(m, d, half, sl, pk), tag, v);
        } else {
            for (int sl = 0; sl < m->slots; sl++) ws_read(m, wsloc(m, r, half, sl, pk), tag, v);
        }
    }
}

static int half_of(uint64_t e) { return (int)((e >> 1) & 1); }

/* Run rank r until its next sync (returned: its identity) or the end (-1). */
static int64_t run_until_sync(machine_t *m, call_t *calls, int ncalls, int r, cursor_t *cu)
{
    while (cu->call < ncalls) {
        call_t *c = &calls[cu->call];
        const uint64_t epr = c->other ? 2 : SYMMEM_ISLAND_EPOCHS_PER_ROUND;
        const uint64_t e = c->e0 + cu->round * epr;
        const int half = half_of(e);
        const int64_t tag = (int64_t)cu->call * (1 << 20) + (int64_t)cu->round;
        const uint32_t nsteps = c->other ? 5 : m->sched[c->kind][r].nsteps;
        if (cu->step >= nsteps) {
            cu->step = 0;
            if (++cu->round >= c->rounds) {
                cu->round = 0;
                cu->call++;
            }
            continue;
        }
        const uint32_t stp = cu->step++;
        if (c->other) {
            if (stp == 1 || stp == 3) return (int64_t)(e + (stp == 1 ? 1 : 2)); /* sync A e+1, sync B e+2 */
            other_step(m, c, r, stp, half, tag);
            continue;
        }
        const symmem_island_step_t *st = &m->sched[c->kind][r].step[stp];
        if (st->kind == SYMMEM_ISLAND_SYNC) return (int64_t)(e + 1 + 2 * (uint64_t)st->shard);
        const uint64_t off = cu->round * c->segp * V;
        for (uint64_t pk = 0; pk < c->segp; pk++) exec_step(m, c, r, st, half, tag, off, pk);
    }
    return -1;
}

static void run_all(machine_t *m, call_t *calls, int ncalls)
{
    cursor_t cu[SYMMEM_MAX_RANKS];
    memset(cu, 0, sizeof cu);
    for (m->phase = 1;; m->phase++) {
        int64_t at = -2;
        for (int r = 0; r < m->n; r++) {
            const int64_t e = run_until_sync(m, calls, ncalls, r, &cu[r]);
            FAIL_IF(at != -2 && e != at, "rank %d reaches sync %lld where rank 0 reaches %lld", r, (long long)e,
                    (long long)at);
            at = e;
        }
        if (at == -1) break;
    }
}

/* ---- calls, data, reference -------------------------------------------------------------------------------- */
static float value(const call_t *c)
{
    if (c->integer) return (float)((int)(rnd() % 129) - 64);
    return ((float)(rnd() % 2000001) - 1000000.0f) / 4096.0f / 7.0f;
}

static void setup_call(machine_t *m, call_t *c, symmem_coll_kind_t kind, uint64_t count, uint64_t segp, int op,
                       int inplace, int integer, uint64_t e0)
{
    const int n = m->n;
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->count = count;
    c->op = op;
    c->inplace = inplace;
    c->integer = integer;
    c->e0 = e0;
    if (kind == SYMMEM_COLL_ALL_REDUCE) {
        c->stride = (count + (uint64_t)n - 1) / (uint64_t)n;
        c->stride = (c->stride + V - 1) / V * V;
        c->total = count;
    } else {
        c->stride = count;
        c->total = count * (uint64_t)n;
    }
    const uint64_t needp = (c->stride + V - 1) / V;
    c->segp = needp < segp ? needp : segp;
    c->rounds = (needp + c->segp - 1) / c->segp;
    c->in_len = kind == SYMMEM_COLL_REDUCE_SCATTER ? count * (uint64_t)n : count;
    c->out_len = kind == SYMMEM_COLL_ALL_GATHER ? count * (uint64_t)n : count;
    const uint64_t region = c->in_len > c->out_len ? c->in_len : c->out_len;
    for (int r = 0; r < n; r++) {
        const uint64_t len = inplace ? region : c->in_len + c->out_len;
        c->buf[r] = malloc((len + 2 * GUARD) * sizeof(float));
        CHECK(c->buf[r]);
        for (uint64_t k = 0; k < len + 2 * GUARD; k++) c->buf[r][k] = from_bits(GUARD_BITS);
        float *base = c->buf[r] + GUARD;
        if (!inplace) {
            c->in[r] = base;
            c->out[r] = base + c->in_len;
        } else if (kind == SYMMEM_COLL_ALL_REDUCE) {
            c->in[r] = c->out[r] = base;
        } else if (kind == SYMMEM_COLL_REDUCE_SCATTER) {
            c->in[r] = base;
            c->out[r] = base + (uint64_t)r * count;
        } else {
            c->out[r] = base;
            c->in[r] = base + (uint64_t)r * count;
        }
        c->in_copy[r] = malloc((c->in_len + 1) * sizeof(float));
        CHECK(c->in_copy[r]);
        for (uint64_t k = 0; k < c->in_len; k++) c->in_copy[r][k] = c->in[r][k] = value(c);
    }
}

static void setup_other(machine_t *m, call_t *c, uint64_t e0)
{
    memset(c, 0, sizeof *c);
    c->other = 1;
    c->segp = (uint64_t)m->maxsegp;
    c->rounds = 1 + rnd() % 2;
    c->e0 = e0;
}

static uint64_t call_epochs(const call_t *c)
{
    return c->rounds * (c->other ? 2 : SYMMEM_ISLAND_EPOCHS_PER_ROUND);
}

static double ref_reduce(const call_t *c, uint64_t idx)
{
    double acc = c->in_copy[0][idx];
    for (int q = 1; q < SYMMEM_MAX_RANKS && c->in_copy[q]; q++) {
        const double v = c->in_copy[q][idx];
        if (c->op == SYMMEM_OP_SUM) acc += v;
        else if (c->op == SYMMEM_OP_MAX) acc = (acc != acc || acc >= v) ? acc : v;
        else acc = (acc != acc || acc <= v) ? acc : v;
    }
    return acc;
}

static void verify(machine_t *m, const call_t *c)
{
    const int n = m->n;
    for (int r = 0; r < n; r++) {
        const uint64_t len = c->inplace ? (c->in_len > c->out_len ? c->in_len : c->out_len) : c->in_len + c->out_len;
        for (int g = 0; g < GUARD; g++) {
            FAIL_IF(bits(c->buf[r][g]) != GUARD_BITS, "rank %d: guard before the buffer overwritten", r);
            FAIL_IF(bits(c->buf[r][GUARD + len + g]) != GUARD_BITS, "rank %d: guard after the buffer overwritten", r);
        }
        for (uint64_t e = 0; e < c->out_len; e++) {
            double want;
            if (c->kind == SYMMEM_COLL_ALL_REDUCE) want = ref_reduce(c, e);
            else if (c->kind == SYMMEM_COLL_REDUCE_SCATTER) want = ref_reduce(c, (uint64_t)r * c->count + e);
            else want = c->in_copy[e / c->count][e % c->count];
            const float got = c->out[r][e];
            if (c->integer || c->kind == SYMMEM_COLL_ALL_GATHER || c->op != SYMMEM_OP_SUM)
                FAIL_IF(bits(got) != bits((float)want), "%s: rank %d element %llu: %.9g, want %.9g",
                        c->kind == SYMMEM_COLL_ALL_REDUCE ? "all_reduce" : c->kind == SYMMEM_COLL_REDUCE_SCATTER
                                                                              ? "reduce_scatter" : "all_gather",
                        r, (unsigned long long)e, got, want);
            else
                FAIL_IF(fabs(got - want) > 1e-5 * (1.0 + fabs(want)) * n, "rank %d element %llu: %.9g, want %.9g", r,
                        (unsigned long long)e, got, want);
            /* every rank ends with identical bytes */
            if (c->kind != SYMMEM_COLL_REDUCE_SCATTER && r > 0)
                FAIL_IF(bits(got) != bits(c->out[0][e]), "rank %d's element %llu differs from rank 0's", r,
                        (unsigned long long)e);
        }
    }
}

static void free_call(call_t *c)
{
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++) {
        free(c->buf[r]);
        free(c->in_copy[r]);
    }
}

/* ---- one split -------------------------------------------------------------------------------------------- */
static const uint64_t counts[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 33, 64, 100, 257};

/* Returns 1 when the split was scheduled and run, 0 when refused (checked to be for its slot count). */
static int run_split(const symmem_island_split_t *s, int sequences)
{
    machine_t *m = calloc(1, sizeof *m);
    CHECK(m);
    m->n = s->nranks;
    m->split = s;
    char list[128], err[512];
    symmem_island_split_format(s, list, sizeof list);
    snprintf(m->what, sizeof m->what, "split %s", list);
    /* the format parses back to the same split */
    symmem_island_split_t back;
    CHECK(symmem_island_split_parse(list, s->nranks, &back, err, sizeof err) == 0);
    CHECK(back.count == s->count && memcmp(back.of, s->of, sizeof back.of) == 0);
    int refused = 0;
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < m->n; r++)
            refused |= symmem_island_schedule(s, (symmem_coll_kind_t)k, r, &m->sched[k][r], err, sizeof err) != 0;
    if (refused) {
        /* only for the slot bound, and then for every kind and rank */
        CHECK(strstr(err, "workspace slots") != NULL);
        free(m);
        return 0;
    }
    m->slots = 0;
    for (int k = 0; k < 3; k++) {
        int top = 0; /* 1 + the highest slot any rank names: what the operation's units must be */
        for (int r = 0; r < m->n; r++) {
            const symmem_island_sched_t *sc = &m->sched[k][r];
            CHECK(sc->slots <= (uint32_t)(SYMMEM_ISLAND_SLOTS_PER_RANK * m->n) && sc->slots == m->sched[k][0].slots);
            CHECK(sc->nsteps <= (uint32_t)(2 * m->n + 3));
            int syncs = 0;
            for (uint32_t i = 0; i < sc->nsteps; i++) {
                const symmem_island_step_t *st = &sc->step[i];
                if (st->kind == SYMMEM_ISLAND_SYNC) {
                    CHECK(st->shard == syncs && syncs < SYMMEM_ISLAND_MAX_SYNCS);
                    syncs++;
                }
                for (int j = 0; j < st->nsrc + st->ndst; j++) {
                    const uint16_t e = j < st->nsrc ? st->src[j] : st->dst[j - st->nsrc];
                    if (SYMMEM_ISLAND_END_WHERE(e) != SYMMEM_ISLAND_WS) continue;
                    CHECK(SYMMEM_ISLAND_END_SLOT(e) < (int)sc->slots);
                    if (SYMMEM_ISLAND_END_SLOT(e) + 1 > top) top = SYMMEM_ISLAND_END_SLOT(e) + 1;
                }
            }
        }
        CHECK((int)m->sched[k][0].slots == (top > 0 ? top : 1)); /* no slot granted that no rank uses */
        if ((int)m->sched[k][0].slots > m->slots) m->slots = (int)m->sched[k][0].slots;
    }
    for (int q = 0; q < sequences; q++) {
        m->maxsegp = 1 + (int)(rnd() % 4);
        m->ws = calloc((size_t)m->n * 2 * m->slots * m->maxsegp, sizeof(loc_t));
        CHECK(m->ws);
        for (size_t i = 0; i < (size_t)m->n * 2 * m->slots * m->maxsegp; i++) {
            m->ws[i].tag = -1;
            m->ws[i].wphase = m->ws[i].rphase = -1;
        }
        enum { NCALLS = 10 };
        call_t calls[NCALLS];
        uint64_t e = 2 * (rnd() % 3);
        for (int c = 0; c < NCALLS; c++) {
            if (c % 4 == 3) setup_other(m, &calls[c], e);
            else
                setup_call(m, &calls[c], (symmem_coll_kind_t)(rnd() % 3), counts[rnd() % (sizeof counts / sizeof counts[0])],
                           (uint64_t)m->maxsegp, (int)(rnd() % 3), (int)(rnd() % 2), (int)(rnd() % 4 != 0), e);
            e += call_epochs(&calls[c]);
        }
        run_all(m, calls, NCALLS);
        for (int c = 0; c < NCALLS; c++) {
            if (!calls[c].other) verify(m, &calls[c]);
            free_call(&calls[c]);
        }
        free(m->ws);
    }
    free(m);
    return 1;
}

static void split_from_keys(int n, const int *key, symmem_island_split_t *s)
{
    symmem_island_split_from_numa(n, key, s);
}

/* Every set partition of n ranks (restricted growth strings). */
static int all_partitions(int n, int *run, int *refused)
{
    int a[SYMMEM_MAX_RANKS] = {0}, maxv[SYMMEM_MAX_RANKS] = {0};
    int total = 0;
    for (;;) {
        symmem_island_split_t s;
        split_from_keys(n, a, &s);
        const int ok = run_split(&s, 2);
        *run += ok;
        *refused += !ok;
        total++;
        int i = n - 1;
        while (i > 0 && a[i] > maxv[i - 1]) i--;
        if (i == 0) break;
        a[i]++;
        maxv[i] = a[i] > maxv[i - 1] ? a[i] : maxv[i - 1];
        for (int j = i + 1; j < n; j++) a[j] = 0, maxv[j] = maxv[i];
    }
    return total;
}

static void splits_small(void)
{
    for (int n = 2; n <= 5; n++) {
        int run = 0, refused = 0;
        const int total = all_partitions(n, &run, &refused);
        printf("n=%d: %d set partitions, %d scheduled and checked, %d refused\n", n, total, run, refused);
        CHECK(run > 0);
    }
}

static void splits_contiguous(void)
{
    for (int n = 6; n <= 8; n++) {
        int run = 0, refused = 0;
        for (unsigned cuts = 0; cuts < (1u << (n - 1)); cuts++) {
            int key[SYMMEM_MAX_RANKS], isl = 0;
            for (int q = 0; q < n; q++) {
                if (q > 0 && (cuts >> (q - 1)) & 1) isl++;
                key[q] = isl;
            }
            symmem_island_split_t s;
            split_from_keys(n, key, &s);
            const int ok = run_split(&s, 3);
            run += ok;
            refused += !ok;
        }
        for (int t = 0; t < 60; t++) {
            int key[SYMMEM_MAX_RANKS];
            const int k = 1 + (int)(rnd() % (unsigned)n);
            for (int q = 0; q < n; q++) key[q] = (int)(rnd() % (unsigned)k);
            symmem_island_split_t s;
            split_from_keys(n, key, &s);
            const int ok = run_split(&s, 3);
            run += ok;
            refused += !ok;
        }
        printf("n=%d: %u contiguous and 60 random splits, %d scheduled and checked, %d refused\n", n, 1u << (n - 1),
               run, refused);
    }
}

/* The splits the issue names must be scheduled, not refused; and 9..16 ranks. */
static void splits_required(void)
{
    static const struct {
        int n;
        const char *list;
    } req[] = {{8, "0-3,4-7"},  {8, "0-1,2-3,4-5,6-7"}, {8, "0-2,3-7"}, {8, "0-7"},       {8, "0-1+4-5,2-3+6-7"},
               {6, "0-2,3-5"},  {6, "0-1,2-3,4-5"},     {7, "0-2,3-6"}, {5, "0-1,2-4"},   {3, "0,1-2"},
               {2, "0,1"},      {1, "0"},          {4, "0-1,2-3"},         {16, "0-7,8-15"}, {16, "0-3,4-7,8-11,12-15"},
               /* the GPU tests' splits of 16-, 12-, 10- and 9-GPU hosts (tests/coll/CMakeLists.txt, ranks16) */
               {16, "0-4,5-15"}, {12, "0-3,4-7,8-11"}, {10, "0-4,5-9"}, {9, "0-3,4-8"}};
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) {
        symmem_island_split_t s;
        char err[512];
        CHECK(symmem_island_split_parse(req[i].list, req[i].n, &s, err, sizeof err) == 0);
        if (run_split(&s, 12) != 1) {
            fprintf(stderr, "split %s of %d ranks was refused\n", req[i].list, req[i].n);
            exit(1);
        }
    }
}

static void parse_errors(void)
{
    symmem_island_split_t s;
    char err[512];
    CHECK(symmem_island_split_parse("0-3,4-7", 8, &s, err, sizeof err) == 0 && s.count == 2 && s.of[3] == 0 && s.of[4] == 1);
    CHECK(symmem_island_split_parse("4-7,0-3", 8, &s, err, sizeof err) == 0 && s.of[0] == 0 && s.of[7] == 1);
    CHECK(symmem_island_split_parse("0+2,1+3", 4, &s, err, sizeof err) == 0 && s.of[2] == 0 && s.of[1] == 1);
    CHECK(symmem_island_split_parse("0-3,3-7", 8, &s, err, sizeof err) != 0 && strstr(err, "rank 3 is listed twice"));
    CHECK(symmem_island_split_parse("0-3", 8, &s, err, sizeof err) != 0 && strstr(err, "rank 4 is in no island"));
    CHECK(symmem_island_split_parse("0-8", 8, &s, err, sizeof err) != 0 && strstr(err, "not within ranks 0-7"));
    CHECK(symmem_island_split_parse("0-3;4-7", 8, &s, err, sizeof err) != 0 && strstr(err, "is not an island list"));
    CHECK(symmem_island_split_parse("", 8, &s, err, sizeof err) != 0);
    CHECK(symmem_island_split_parse("3-1,0,4-7", 8, &s, err, sizeof err) != 0);
    /* NUMA nodes: unknown ones together, numbering by lowest rank */
    const int numa[6] = {1, 1, 0, -1, 0, -1};
    symmem_island_split_from_numa(6, numa, &s);
    CHECK(s.count == 3 && s.of[0] == 0 && s.of[2] == 1 && s.of[3] == 2 && s.of[4] == 1 && s.of[5] == 2);
    /* the refusal names the split and what to do */
    symmem_island_sched_t sc;
    const int one_each[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    symmem_island_split_from_numa(8, one_each, &s);
    CHECK(symmem_island_schedule(&s, SYMMEM_COLL_ALL_REDUCE, 0, &sc, err, sizeof err) != 0);
    CHECK(strstr(err, "0,1,2,3,4,5,6,7") && strstr(err, "fewer, larger islands"));
}

/* Random strings over the list's alphabet: the parser either returns a split in which every rank has exactly
 * one island numbered by lowest rank, or an error with a message; the format of a parsed split parses back
 * to the same split. */
static void parse_random(void)
{
    static const char alphabet[] = "0123456789-+,,--++ x";
    int parsed = 0;
    for (int t = 0; t < 200000; t++) {
        char text[24], err[512] = "";
        const int len = (int)(rnd() % 16);
        for (int i = 0; i < len; i++) text[i] = alphabet[rnd() % (sizeof alphabet - 1)];
        text[len] = '\0';
        const int n = 1 + (int)(rnd() % SYMMEM_MAX_RANKS);
        symmem_island_split_t s;
        if (symmem_island_split_parse(text, n, &s, err, sizeof err) != 0) {
            CHECK(err[0] != '\0' && strstr(err, text) != NULL);
            continue;
        }
        parsed++;
        CHECK(s.nranks == n && s.count >= 1 && s.count <= n);
        int seen_max = -1;
        for (int q = 0; q < n; q++) {
            CHECK(s.of[q] < s.count && s.of[q] <= seen_max + 1); /* numbered by lowest rank */
            if (s.of[q] > seen_max) seen_max = s.of[q];
        }
        char list[128];
        symmem_island_split_t back;
        symmem_island_split_format(&s, list, sizeof list);
        CHECK(symmem_island_split_parse(list, n, &back, err, sizeof err) == 0);
        CHECK(back.count == s.count && memcmp(back.of, s.of, sizeof s.of) == 0);
    }
    printf("parser: 200000 random lists, %d parsed\n", parsed);
    CHECK(parsed > 0);
    /* valid lists written any way: islands in any order, each as single ranks joined by '+' in any order */
    for (int t = 0; t < 20000; t++) {
        const int n = 1 + (int)(rnd() % SYMMEM_MAX_RANKS), k = 1 + (int)(rnd() % (unsigned)n);
        int key[SYMMEM_MAX_RANKS], perm[SYMMEM_MAX_RANKS];
        for (int q = 0; q < n; q++) key[q] = (int)(rnd() % (unsigned)k), perm[q] = q;
        for (int q = n - 1; q > 0; q--) {
            const int j = (int)(rnd() % (unsigned)(q + 1)), x = perm[q];
            perm[q] = perm[j], perm[j] = x;
        }
        char text[256] = "", err[512];
        size_t used = 0;
        for (int i = 0; i < k; i++) {
            int first = 1;
            for (int j = 0; j < n; j++)
                if (key[perm[j]] == i) {
                    used += (size_t)snprintf(text + used, sizeof text - used, "%s%d", first ? (used ? "," : "") : "+", perm[j]);
                    first = 0;
                }
        }
        symmem_island_split_t s, want;
        symmem_island_split_from_numa(n, key, &want); /* unused keys leave no island */
        CHECK(symmem_island_split_parse(text, n, &s, err, sizeof err) == 0);
        CHECK(s.count == want.count && memcmp(s.of, want.of, sizeof s.of) == 0);
    }
}

/* What each byte does on the 4+4 split: the all-reduce's steps per rank move exactly one partial per owned
 * shard across the socket link, so the bytes crossing it per direction are the message once. */
static void crossings(void)
{
    symmem_island_split_t s;
    char err[512];
    CHECK(symmem_island_split_parse("0-3,4-7", 8, &s, err, sizeof err) == 0);
    int cross_shards = 0;
    for (int r = 0; r < 8; r++) {
        symmem_island_sched_t sc;
        CHECK(symmem_island_schedule(&s, SYMMEM_COLL_ALL_REDUCE, r, &sc, err, sizeof err) == 0);
        for (uint32_t i = 0; i < sc.nsteps; i++)
            for (int j = 0; j < sc.step[i].ndst; j++) {
                const uint16_t e = sc.step[i].dst[j];
                if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_WS && s.of[SYMMEM_ISLAND_END_RANK(e)] != s.of[r])
                    cross_shards++;
            }
    }
    /* 8 shards, each partial crosses once each way: 16 shard transfers = 2 messages (one per direction) */
    CHECK(cross_shards == 16);
    /* owners: every rank its own shard in its island, and the 4 foreign shards spread one per rank */
    for (int x = 0; x < 8; x++) {
        CHECK(symmem_island_owner(&s, s.of[x], x) == x);
        CHECK(symmem_island_owner(&s, 1 - s.of[x], x) == (x + 4) % 8);
    }
}

int main(void)
{
    parse_errors();
    parse_random();
    crossings();
    splits_required();
    splits_small();
    splits_contiguous();
    printf("test_island_sched: ok\n");
    return 0;
}
