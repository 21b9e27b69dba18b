/* Random data, the float64 reference and the comparison of the collective tests and the benchmarks.
 * See harness.h. */
#include "harness.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ======================================================================================================
 * Number formats.
 * ==================================================================================================== */
static uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t cc_float_to_bf16(float f)
{
    uint32_t u = f2u(f);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cc_bf16_to_float(uint16_t h) { return u2f((uint32_t)h << 16); }

float cc_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t cc_float_to_half(float f)
{
    uint32_t u = f2u(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
    float a = fabsf(f);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u); /* rounds to infinity */
    if (a < ldexpf(1.0f, -14)) {
        /* subnormal: multiples of 2^-24, round to nearest even */
        float q = a * 16777216.0f; /* exact */
        float r = nearbyintf(q);   /* default rounding mode: nearest even */
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t au = f2u(a);
    uint32_t exp = (au >> 23) - 112u;
    uint32_t man = au & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++; /* may carry into the exponent: correct */
    return (uint16_t)(sign | h);
}

double cc_load(const void *p, symmem_dtype_t dt, size_t i)
{
    switch (dt) {
    case SYMMEM_FLOAT32: return ((const float *)p)[i];
    case SYMMEM_FLOAT16: return cc_half_to_float(((const uint16_t *)p)[i]);
    case SYMMEM_BFLOAT16: return cc_bf16_to_float(((const uint16_t *)p)[i]);
    default: return NAN;
    }
}

void cc_store(void *p, symmem_dtype_t dt, size_t i, double v)
{
    switch (dt) {
    case SYMMEM_FLOAT32: ((float *)p)[i] = (float)v; break;
    case SYMMEM_FLOAT16: ((uint16_t *)p)[i] = cc_float_to_half((float)v); break;
    case SYMMEM_BFLOAT16: ((uint16_t *)p)[i] = cc_float_to_bf16((float)v); break;
    default: break;
    }
}

void cc_fill(void *dst, symmem_dtype_t dt, size_t count, uint64_t seed, int rank, uint64_t index0)
{
    for (size_t k = 0; k < count; k++) {
        float v = cc_value(seed, rank, index0 + k, dt);
        switch (dt) {
        case SYMMEM_FLOAT32: ((float *)dst)[k] = v; break;
        case SYMMEM_FLOAT16: ((uint16_t *)dst)[k] = cc_float_to_half(v); break;
        default: ((uint16_t *)dst)[k] = cc_float_to_bf16(v); break;
        }
    }
}

/* ======================================================================================================
 * Reference and comparison.
 * ==================================================================================================== */
static double cc_dtype_max(symmem_dtype_t dt)
{
    /* Largest finite value, plus half an ulp: references at or beyond it round to infinity. */
    if (dt == SYMMEM_FLOAT16) return 65520.0;
    if (dt == SYMMEM_BFLOAT16) return ldexp(1.0, 128) - ldexp(1.0, 119); /* (2 - 2^-8) * 2^127 */
    return ldexp(1.0, 128) - ldexp(1.0, 103);                             /* (2 - 2^-24) * 2^127 */
}

int cc_elem_ok(double got, const double *in, int n, symmem_redop_t op, symmem_dtype_t dt, double *ref_out)
{
    if (op == SYMMEM_OP_SUM) {
        double ref = 0, sabs = 0;
        for (int r = 0; r < n; r++) {
            ref += in[r];
            sabs += fabs(in[r]);
        }
        if (ref_out) *ref_out = ref;
        if (isnan(ref)) return isnan(got);
        if (isinf(ref) || fabs(ref) >= cc_dtype_max(dt)) return isinf(got) && (got > 0) == (ref > 0);
        if (isnan(got) || isinf(got)) return 0;
        double rel = dt == SYMMEM_FLOAT32 ? ldexp(1.0, -23) : dt == SYMMEM_FLOAT16 ? ldexp(1.0, -10) : ldexp(1.0, -8);
        double tol = rel * fabs(ref) + 2.0 * n * ldexp(1.0, -24) * sabs + (dt == SYMMEM_FLOAT16 ? ldexp(1.0, -24) : 0);
        /* 16-bit types: partial sums rounded to the dtype on the way (the island schedule's per-island
         * partials, as NCCL's ring rounds every hop) add at most half an ulp of each partial, which is at
         * most u = 2^-p times its magnitude (p the significand width with the hidden bit: bf16 8, fp16 11),
         * and the partials' magnitudes sum to at most sabs */
        if (dt != SYMMEM_FLOAT32) tol += ldexp(1.0, -(dt == SYMMEM_FLOAT16 ? 11 : 8)) * sabs;
        return fabs(got - ref) <= tol;
    }
    int is_max = op == SYMMEM_OP_MAX, any_nan = 0, have = 0;
    double best = 0;
    for (int r = 0; r < n; r++) {
        if (isnan(in[r])) {
            any_nan = 1;
            continue;
        }
        if (!have || (is_max ? in[r] > best : in[r] < best)) best = in[r];
        have = 1;
    }
    if (ref_out) *ref_out = any_nan ? NAN : best;
    if (!have) return isnan(got);
    if (any_nan && isnan(got)) return 1;
    return got == best;
}

size_t cc_check_reduce(const void *out, symmem_dtype_t dt, symmem_redop_t op, size_t count, uint64_t index0,
                       int nranks, uint64_t seed, cc_bad_t *bad)
{
    size_t wrong = 0;
    double in[CC_MAX_RANKS];
    for (size_t k = 0; k < count; k++) {
        for (int r = 0; r < nranks; r++) in[r] = cc_value(seed, r, index0 + k, dt);
        double got = cc_load(out, dt, k), ref;
        if (!cc_elem_ok(got, in, nranks, op, dt, &ref)) {
            if (wrong == 0 && bad) {
                bad->first = k;
                bad->got = got;
                bad->want = ref;
            }
            wrong++;
        }
    }
    if (bad) bad->wrong = wrong;
    return wrong;
}

size_t cc_check_gather(const void *out, symmem_dtype_t dt, size_t count, int nranks, uint64_t seed, cc_bad_t *bad)
{
    size_t wrong = 0;
    for (int r = 0; r < nranks; r++)
        for (size_t k = 0; k < count; k++) {
            double want = cc_value(seed, r, k, dt), got = cc_load(out, dt, (size_t)r * count + k);
            if (!(got == want)) {
                if (wrong == 0 && bad) {
                    bad->first = (size_t)r * count + k;
                    bad->got = got;
                    bad->want = want;
                }
                wrong++;
            }
        }
    if (bad) bad->wrong = wrong;
    return wrong;
}

uint64_t cc_hash(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    uint64_t h = 0x243f6a8885a308d3ull ^ bytes;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = cc_mix64(h ^ w);
    }
    uint64_t w = 0;
    memcpy(&w, b + i, bytes - i);
    return cc_mix64(h ^ w ^ 0x13198a2e03707344ull);
}

