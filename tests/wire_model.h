/* The compressed wire's all-reduce (collectives/wire.h) computed on the CPU step by step as its kernel
 * (collectives/wire.cu) computes it: the island schedule of every rank (island.h), round by round, sync
 * segment by segment, every step at every position of the round, the groups of G / 8 packs quantized with
 * wire.h's own quantizer. So a GPU test can compare the kernel's output with this model bit for bit, and the
 * CPU test checks the algorithm (not only the quantizer) against the bound.
 *
 * Also the data the tests and the error table use (normal, heavy-tailed, the TP forward shape), the float64
 * reference, the bound's W_i (the sum over ranks of each rank's largest |input| within G - 1 elements of i)
 * and the error figures. Header-only (static functions) for tests/unit/test_wire.c and tests/coll/coll_wire.c;
 * hosts with FMA must build it with -ffp-contract=off (wire.h, SYMMEM_WIRE_MUL). */
#ifndef SYMMEM_TESTS_WIRE_MODEL_H
#define SYMMEM_TESTS_WIRE_MODEL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/island.h"
#include "collectives/wire.h"
#include "harness.h"

/* ---- 16-bit values ---------------------------------------------------------------------------------------- */
static inline float wm_to_f(symmem_dtype_t dt, uint16_t h)
{
    return dt == SYMMEM_BFLOAT16 ? cc_bf16_to_float(h) : cc_half_to_float(h);
}
static inline uint16_t wm_from_f(symmem_dtype_t dt, float f)
{
    return dt == SYMMEM_BFLOAT16 ? cc_float_to_bf16(f) : cc_float_to_half(f);
}

/* ---- the model -------------------------------------------------------------------------------------------- */
typedef struct wire_model {
    int n;
    symmem_dtype_t dt;
    uint64_t count;               /* elements per rank */
    uint64_t stride, segp, rounds; /* the plan (symmem_wire_geometry, or symmem_coll_wire_describe) */
    uint32_t lanes;               /* G / 8 */
    symmem_island_split_t split;  /* the islands the schedule follows */
} wire_model_t;

/* One rank's workspace half as the model keeps it: per slot, segp packs of 8 int8 and the groups' scales. */
typedef struct wm_ws {
    int8_t *q;    /* [slot][segp * 8] */
    float *scale; /* [slot][groups] */
} wm_ws_t;

static inline int wm_valid(const wire_model_t *m, int s, uint64_t i)
{
    const uint64_t start = (uint64_t)s * m->stride;
    if (start >= m->count) return 0;
    const uint64_t len = m->stride < m->count - start ? m->stride : m->count - start;
    if (i >= len) return 0;
    return (int)(len - i < 8 ? len - i : 8);
}

/* One step at the `lanes` positions of group grp of round `off` (wire.cu, wire_step). */
static void wm_step(const wire_model_t *m, int r, const symmem_island_step_t *st, uint64_t off, uint64_t grp,
                    uint64_t groups, wm_ws_t *ws, const uint16_t *const *in, uint16_t *const *out)
{
    enum { MAXL = 16 };
    float acc[MAXL][8];
    int nv[MAXL];
    const int s = st->shard;
    const int gather = st->kind == SYMMEM_ISLAND_MOVE && SYMMEM_ISLAND_END_WHERE(st->src[0]) == SYMMEM_ISLAND_WS;
    float amax = 0.0f;
    for (uint32_t l = 0; l < m->lanes; l++) {
        const uint64_t pk = grp * m->lanes + l, i = off + pk * 8;
        nv[l] = pk < m->segp ? wm_valid(m, s, i) : 0;
        for (int k = 0; k < 8; k++) acc[l][k] = 0.0f;
        for (int j = 0; j < st->nsrc && nv[l] > 0; j++) {
            const uint16_t e = st->src[j];
            float f[8];
            if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_IN) {
                for (int k = 0; k < 8; k++)
                    f[k] = k < nv[l] ? wm_to_f(m->dt, in[r][(uint64_t)s * m->stride + i + k]) : 0.0f;
            } else {
                const int sl = SYMMEM_ISLAND_END_SLOT(e);
                const float sc = ws[r].scale[(uint64_t)sl * groups + pk / m->lanes];
                for (int k = 0; k < 8; k++)
                    f[k] = symmem_wire_dequant(ws[r].q[((uint64_t)sl * m->segp + pk) * 8 + k], sc);
            }
            for (int k = 0; k < 8; k++) acc[l][k] = j == 0 ? f[k] : SYMMEM_WIRE_ADD(acc[l][k], f[k]);
        }
        for (int k = 0; k < 8; k++) amax = symmem_wire_amax(amax, fabsf(acc[l][k]));
    }
    int8_t q[MAXL][8];
    const symmem_wire_scale_t sc = symmem_wire_scale_of(amax);
    for (uint32_t l = 0; l < m->lanes && !gather; l++)
        for (int k = 0; k < 8; k++) {
            q[l][k] = (int8_t)symmem_wire_quant(acc[l][k], sc.inv);
            acc[l][k] = symmem_wire_dequant(q[l][k], sc.scale);
        }
    for (uint32_t l = 0; l < m->lanes; l++) {
        if (nv[l] <= 0) continue;
        const uint64_t pk = grp * m->lanes + l, i = off + pk * 8;
        for (int j = 0; j < st->ndst; j++) {
            const uint16_t e = st->dst[j];
            if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_OUT) {
                for (int k = 0; k < nv[l]; k++) out[r][(uint64_t)s * m->stride + i + k] = wm_from_f(m->dt, acc[l][k]);
            } else {
                const int d = SYMMEM_ISLAND_END_RANK(e), sl = SYMMEM_ISLAND_END_SLOT(e);
                memcpy(&ws[d].q[((uint64_t)sl * m->segp + pk) * 8], q[l], 8);
                if (l == 0) ws[d].scale[(uint64_t)sl * groups + grp] = sc.scale;
            }
        }
    }
}

/* Every rank's output of the all-reduce of in[r] (count 16-bit values each) into out[r] (distinct arrays, or
 * in == out for in place). 0, or -1 when a schedule cannot be built (message on stderr). */
static int wire_model_run(const wire_model_t *m, const uint16_t *const *in, uint16_t *const *out)
{
    symmem_island_sched_t *sched = (symmem_island_sched_t *)calloc(SYMMEM_MAX_RANKS, sizeof *sched);
    char err[256];
    if (!sched) {
        fprintf(stderr, "wire model: out of memory\n");
        exit(1);
    }
    uint32_t slots = 1;
    for (int r = 0; r < m->n; r++) {
        if (symmem_island_schedule(&m->split, SYMMEM_COLL_ALL_REDUCE, r, &sched[r], err, sizeof err) != 0) {
            fprintf(stderr, "wire model: %s\n", err);
            free(sched);
            return -1;
        }
        if (sched[r].slots > slots) slots = sched[r].slots;
    }
    const uint64_t groups = (m->segp + m->lanes - 1) / m->lanes;
    wm_ws_t ws[SYMMEM_MAX_RANKS];
    for (int r = 0; r < m->n; r++) {
        ws[r].q = (int8_t *)calloc((size_t)slots * m->segp * 8, 1);
        ws[r].scale = (float *)calloc((size_t)slots * groups, sizeof(float));
        if (!ws[r].q || !ws[r].scale) {
            fprintf(stderr, "wire model: out of memory\n");
            exit(1);
        }
    }
    for (uint64_t rd = 0; rd < m->rounds; rd++) {
        const uint64_t off = rd * m->segp * 8;
        /* segment by segment: every rank's steps up to its next sync (the syncs are the same on every rank) */
        uint32_t at[SYMMEM_MAX_RANKS] = {0};
        for (;;) {
            int more = 0;
            for (int r = 0; r < m->n; r++) {
                while (at[r] < sched[r].nsteps && sched[r].step[at[r]].kind != SYMMEM_ISLAND_SYNC) {
                    for (uint64_t g = 0; g < groups; g++)
                        wm_step(m, r, &sched[r].step[at[r]], off, g, groups, ws, in, out);
                    at[r]++;
                }
            }
            for (int r = 0; r < m->n; r++)
                if (at[r] < sched[r].nsteps) at[r]++, more = 1; /* past the sync */
            if (!more) break;
        }
    }
    for (int r = 0; r < m->n; r++) free(ws[r].q), free(ws[r].scale);
    free(sched);
    return 0;
}

/* ---- data ------------------------------------------------------------------------------------------------- */
/* The error table's data kinds (docs/collectives.md, "Compressed wire"):
 *  NORMAL  every rank's input N(0, 1);
 *  HEAVY   N(0, 1) with outliers, as activations have: each element is, with probability 4 / WM_ROW, an
 *          outlier of magnitude 50..150 (about 4 per row of 7168 per rank);
 *  TP      the tensor-parallel forward: rows of WM_ROW (hidden 7168) channels, each rank's partial sum
 *          N(0, 1 / n) times its channel's scale, one channel in 512 with scale 20 (the same channels on
 *          every rank and row, as outlier features are). */
enum { WM_NORMAL = 0, WM_HEAVY = 1, WM_TP = 2, WM_KINDS = 3 };
#define WM_ROW 7168
static const char *const wm_kind_name[WM_KINDS] = {"normal", "heavy-tailed", "tp-forward"};

static inline uint64_t wm_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
/* A uniform double in (0, 1) from (seed, rank, index, stream). */
static inline double wm_unit(uint64_t seed, int rank, uint64_t i, int stream)
{
    const uint64_t h = wm_mix(seed ^ wm_mix(((uint64_t)rank << 56) ^ ((uint64_t)stream << 48) ^ i));
    return ((double)(h >> 11) + 0.5) / 9007199254740992.0;
}
static inline double wm_normal(uint64_t seed, int rank, uint64_t i)
{
    const double u = wm_unit(seed, rank, i, 0), v = wm_unit(seed, rank, i, 1);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Rank r's input element i of the kind (as a double before rounding to the dtype). */
static inline double wm_value(int kind, uint64_t seed, int rank, int n, uint64_t i)
{
    const double x = wm_normal(seed, rank, i);
    if (kind == WM_HEAVY) {
        if (wm_unit(seed, rank, i, 2) < 4.0 / WM_ROW) {
            const double mag = 50.0 + 100.0 * wm_unit(seed, rank, i, 3);
            return wm_unit(seed, rank, i, 4) < 0.5 ? -mag : mag;
        }
        return x;
    }
    if (kind == WM_TP) {
        const uint64_t ch = i % WM_ROW;
        const double scale = wm_mix(seed ^ (ch * 0x9e3779b97f4a7c15ull)) % 512 == 0 ? 20.0 : 1.0;
        return x * scale / sqrt((double)n);
    }
    return x;
}

static void wm_fill(int kind, symmem_dtype_t dt, uint64_t seed, int rank, int n, uint64_t count, uint16_t *dst)
{
    for (uint64_t i = 0; i < count; i++) dst[i] = wm_from_f(dt, (float)wm_value(kind, seed, rank, n, i));
}

/* ---- the bound and the error figures ------------------------------------------------------------------- */
/* w[i] += max |x[j]| over |j - i| < group, j in [0, count): van Herk's blocks of 2 * group - 1 (prefix and
 * suffix maxima) for the full windows, the few clipped ones at the ends directly. tmp: 2 * count floats. */
static void wm_add_window_max(const uint16_t *x, symmem_dtype_t dt, uint64_t count, uint32_t group, double *w,
                              float *tmp)
{
    const uint64_t b = 2 * (uint64_t)group - 1;
    float *pre = tmp, *suf = tmp + count;
    for (uint64_t i = 0; i < count; i++) {
        const float a = fabsf(wm_to_f(dt, x[i]));
        pre[i] = i % b == 0 ? a : fmaxf(pre[i - 1], a);
    }
    for (uint64_t i = count; i-- > 0;) {
        const float a = fabsf(wm_to_f(dt, x[i]));
        suf[i] = (i + 1) % b == 0 || i + 1 == count ? a : fmaxf(suf[i + 1], a);
    }
    for (uint64_t i = 0; i < count; i++) {
        const uint64_t lo = i + 1 >= group ? i + 1 - group : 0, hi = i + group - 1 < count ? i + group - 1 : count - 1;
        float mx = 0.0f;
        if (hi - lo + 1 == b) {
            mx = fmaxf(suf[lo], pre[hi]);
        } else {
            for (uint64_t j = lo; j <= hi; j++) mx = fmaxf(mx, fabsf(wm_to_f(dt, x[j])));
        }
        w[i] += mx;
    }
}

typedef struct wm_err {
    double max_over_bound; /* max_i |err_i| / (c W_i + a): at most 1 where the bound holds */
    double max_rel;        /* max_i |err_i| / max_i |ref_i| */
    double mean_rel;       /* sum |err_i| / sum |ref_i| */
    double max_scaled;     /* max_i |err_i| / W_i: compare with c */
    uint64_t worst;        /* the i of max_over_bound */
    uint64_t nonfinite;    /* outputs that are NaN or infinite */
} wm_err_t;

/* The error of `got` (count values of every rank's all-reduce) against the float64 sum of in[0..n), with the
 * bound's c and a for `quantizations`. tmp: count doubles for W plus 2 * count floats (allocated here). */
static wm_err_t wm_error(const uint16_t *const *in, int n, symmem_dtype_t dt, uint64_t count, uint32_t group,
                         int quantizations, const uint16_t *got)
{
    wm_err_t e = {0, 0, 0, 0, 0, 0};
    double *w = (double *)calloc(count ? count : 1, sizeof(double));
    float *tmp = (float *)malloc(2 * (count ? count : 1) * sizeof(float));
    if (!w || !tmp) {
        fprintf(stderr, "wire model: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < n; r++) wm_add_window_max(in[r], dt, count, group, w, tmp);
    const double c = symmem_wire_bound_c(dt, quantizations), a = symmem_wire_bound_a(dt);
    double max_ref = 0, sum_err = 0, sum_ref = 0, max_err = 0;
    for (uint64_t i = 0; i < count; i++) {
        double ref = 0;
        for (int r = 0; r < n; r++) ref += wm_to_f(dt, in[r][i]);
        const double g = wm_to_f(dt, got[i]);
        if (!isfinite(g)) {
            e.nonfinite++;
            continue;
        }
        const double err = fabs(g - ref);
        const double ob = err / (c * w[i] + a);
        if (ob > e.max_over_bound) e.max_over_bound = ob, e.worst = i;
        if (w[i] > 0 && err / w[i] > e.max_scaled) e.max_scaled = err / w[i];
        if (err > max_err) max_err = err;
        if (fabs(ref) > max_ref) max_ref = fabs(ref);
        sum_err += err;
        sum_ref += fabs(ref);
    }
    e.max_rel = max_ref > 0 ? max_err / max_ref : max_err;
    e.mean_rel = sum_ref > 0 ? sum_err / sum_ref : sum_err;
    free(w);
    free(tmp);
    return e;
}

#endif
