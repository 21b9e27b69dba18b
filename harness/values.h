/* Test data for the collective tests and symmem-bench: one value function shared by host and device code.
 *
 * Element i of rank r's input under seed s is cc_value(s, r, i, dtype): a counter-based hash, so any
 * element of any rank can be regenerated anywhere (the host reference regenerates every rank's input
 * element by element; a kernel captured in a CUDA graph writes fresh inputs on the device), and two ranks
 * never get the same data. Values are m * 2^e with |m| < 2^bits, bits = the dtype's significand width, so
 * every value is exactly representable in its dtype and host and device agree bit for bit. Never zero,
 * magnitudes spread over 4 binades, both signs (sums cancel, as real activations do).
 */
#ifndef SYMMEM_HARNESS_VALUES_H
#define SYMMEM_HARNESS_VALUES_H

#include <math.h>
#include <stdint.h>

#include "symmem/symmem.h"

#if defined(__CUDACC__)
#define CC_HD __host__ __device__ __forceinline__
#else
#define CC_HD static inline
#endif

CC_HD uint64_t cc_mix64(uint64_t x)
{
    /* splitmix64 finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Significand bits a value may use so that it is exact in `dtype`. */
CC_HD int cc_value_bits(int dtype)
{
    return dtype == SYMMEM_FLOAT32 ? 24 : dtype == SYMMEM_FLOAT16 ? 11 : 8;
}

/* The input value (as a float, exact in `dtype`). fp16: |v| in [2^-13, 2): never subnormal, never near
 * overflow even summed over 16 ranks. bf16: [2^-10, 4). fp32: [2^-26, 4). */
CC_HD float cc_value(uint64_t seed, int rank, uint64_t i, int dtype)
{
    uint64_t h = cc_mix64(seed + cc_mix64(((uint64_t)(rank + 1) << 48) ^ (i * 0x9e3779b97f4a7c15ull)));
    int bits = cc_value_bits(dtype);
    uint32_t m = (uint32_t)(h >> 40) & ((1u << bits) - 1u);
    if (m == 0) m = 1;
    int e = (int)((h >> 4) & 3u) - 2 - bits;
    float v = ldexpf((float)m, e);
    return (h & 1u) ? -v : v;
}

/* Seed of iteration `iter` of a test that changes its inputs on every replay. */
CC_HD uint64_t cc_iter_seed(uint64_t base, uint64_t iter)
{
    return cc_mix64(base ^ (iter * 0xd1b54a32d192ed03ull + 0x632be59bd9b4e019ull));
}

#endif
