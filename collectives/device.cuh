/* Device helpers of the collective kernels: 16-byte packs, dtype conversion, reduction operators, the
 * sentinel rules of the Lamport buffers. Internal (the user-facing device API is symmem_device.cuh). */
#ifndef SYMMEM_COLLECTIVES_DEVICE_CUH
#define SYMMEM_COLLECTIVES_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "collectives/kernel_abi.h"
#include "symmem/symmem_device.cuh"

namespace symmem_k {

typedef __nv_bfloat16 bfloat16;

/* Elements per 16-byte pack. */
template <typename T> struct Pack {
    static constexpr int V = 16 / (int)sizeof(T);
};

__device__ __forceinline__ uint4 zero4() { return make_uint4(0u, 0u, 0u, 0u); }

/* Workspace memory written by peers (or read by peers) goes through L2 only: ld.global.cg never serves a
 * stale line from this SM's L1 (a peer may have rewritten the address since the last round). */
__device__ __forceinline__ uint4 ld_cg16(const void *p) { return __ldcg(reinterpret_cast<const uint4 *>(p)); }
__device__ __forceinline__ void st16(void *p, uint4 v) { *reinterpret_cast<uint4 *>(p) = v; }
/* Lamport polling: every load must reach memory. */
__device__ __forceinline__ uint4 ld_volatile16(const void *p)
{
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

/* ---- user memory: 16-byte vector access when aligned and whole, element by element otherwise ------- */
__device__ __forceinline__ uint32_t ld_u32(const uint32_t *p, bool cg) { return cg ? __ldcg(p) : *p; }
__device__ __forceinline__ uint32_t ld_u16(const unsigned short *p, bool cg) { return cg ? __ldcg(p) : *p; }

/* Load elements [elem, elem + nv) (nv <= V) of the T array at `base` into a pack; missing elements are 0. */
template <typename T>
__device__ __forceinline__ uint4 load_user(const void *base, uint64_t elem, int nv, bool aligned, bool cg)
{
    constexpr int V = Pack<T>::V;
    const T *p = reinterpret_cast<const T *>(base) + elem;
    if (aligned && nv == V) return cg ? __ldcg(reinterpret_cast<const uint4 *>(p)) : *reinterpret_cast<const uint4 *>(p);
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (sizeof(T) == 4) {
            w[k] = k < nv ? ld_u32(reinterpret_cast<const uint32_t *>(p) + k, cg) : 0u;
        } else {
            const unsigned short *h = reinterpret_cast<const unsigned short *>(p);
            uint32_t lo = 2 * k < nv ? ld_u16(h + 2 * k, cg) : 0u;
            uint32_t hi = 2 * k + 1 < nv ? ld_u16(h + 2 * k + 1, cg) : 0u;
            w[k] = lo | (hi << 16);
        }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Store the first nv elements of a pack to elements [elem, elem + nv) of the T array at `base`. */
template <typename T>
__device__ __forceinline__ void store_user(void *base, uint64_t elem, uint4 v, int nv, bool aligned)
{
    constexpr int V = Pack<T>::V;
    T *p = reinterpret_cast<T *>(base) + elem;
    if (aligned && nv == V) {
        *reinterpret_cast<uint4 *>(p) = v;
        return;
    }
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (sizeof(T) == 4) {
            if (k < nv) reinterpret_cast<uint32_t *>(p)[k] = w[k];
        } else {
            unsigned short *h = reinterpret_cast<unsigned short *>(p);
            if (2 * k < nv) h[2 * k] = (unsigned short)(w[k] & 0xffffu);
            if (2 * k + 1 < nv) h[2 * k + 1] = (unsigned short)(w[k] >> 16);
        }
    }
}

/* ---- conversion: a pack of T <-> V floats -------------------------------------------------------------- */
template <typename T> struct Conv;
template <> struct Conv<float> {
    static __device__ __forceinline__ void unpack(uint4 v, float *f)
    {
        f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y);
        f[2] = __uint_as_float(v.z), f[3] = __uint_as_float(v.w);
    }
    static __device__ __forceinline__ uint4 pack(const float *f)
    {
        return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
    }
};
/* 16-bit types: two elements per 32-bit word, low half first; S supplies the scalar conversions. */
template <typename S> struct Conv16 {
    static __device__ __forceinline__ void unpack(uint4 v, float *f)
    {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) f[2 * k] = S::to_f(w[k] & 0xffffu), f[2 * k + 1] = S::to_f(w[k] >> 16);
    }
    static __device__ __forceinline__ uint4 pack(const float *f)
    {
        uint32_t w[4];
#pragma unroll
        for (int k = 0; k < 4; k++) w[k] = S::from_f(f[2 * k]) | (S::from_f(f[2 * k + 1]) << 16);
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
};
struct HalfScalar {
    static __device__ __forceinline__ float to_f(uint32_t u) { return __half2float(__ushort_as_half((unsigned short)u)); }
    static __device__ __forceinline__ uint32_t from_f(float f) { return __half_as_ushort(__float2half_rn(f)); }
};
struct Bf16Scalar {
    static __device__ __forceinline__ float to_f(uint32_t u) { return __uint_as_float(u << 16); }
    static __device__ __forceinline__ uint32_t from_f(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
};
template <> struct Conv<half> : Conv16<HalfScalar> {};
template <> struct Conv<bfloat16> : Conv16<Bf16Scalar> {};

/* ---- reduction operators, in fp32. max/min propagate NaN (IEEE 754-2019 maximum/minimum: a NaN operand
 * gives NaN), unlike fmaxf. Ties between -0 and +0 keep the earlier rank's value (the order is fixed). -- */
template <int OP> __device__ __forceinline__ float redop(float a, float b)
{
    if (OP == SYMMEM_OP_SUM) return __fadd_rn(a, b);
    if (OP == SYMMEM_OP_MAX) return (a != a || a >= b) ? a : b;
    return (a != a || a <= b) ? a : b;
}

/* ---- Lamport sentinel: the 32-bit word 0x80000000 marks "empty". Payload -0.0 is rewritten to +0.0 before
 * it is sent (fp32: the word 0x80000000; 16-bit types: each 0x8000 half) so no payload word is ever the
 * sentinel: for 16-bit pairs the word 0x80000000 would need a -0.0 in the high half. */
template <typename T> __device__ __forceinline__ uint32_t fix_word(uint32_t w)
{
    if (sizeof(T) == 4) return w == 0x80000000u ? 0u : w;
    if ((w & 0xffffu) == 0x8000u) w &= 0xffff0000u;
    if ((w >> 16) == 0x8000u) w &= 0x0000ffffu;
    return w;
}
template <typename T> __device__ __forceinline__ uint4 fix_pack(uint4 v)
{
    return make_uint4(fix_word<T>(v.x), fix_word<T>(v.y), fix_word<T>(v.z), fix_word<T>(v.w));
}
__device__ __forceinline__ bool lamport_full(uint4 v)
{
    return v.x != SYMMEM_COLL_LAMPORT_EMPTY && v.y != SYMMEM_COLL_LAMPORT_EMPTY && v.z != SYMMEM_COLL_LAMPORT_EMPTY &&
           v.w != SYMMEM_COLL_LAMPORT_EMPTY;
}
__device__ __forceinline__ uint4 lamport_empty4()
{
    return make_uint4(SYMMEM_COLL_LAMPORT_EMPTY, SYMMEM_COLL_LAMPORT_EMPTY, SYMMEM_COLL_LAMPORT_EMPTY,
                      SYMMEM_COLL_LAMPORT_EMPTY);
}

/* Reduce n packs in rank order 0, 1, ..., n-1 (the fixed order that makes every rank's result bitwise
 * identical), accumulating in fp32. load(src) returns rank src's pack; loads are issued in groups of four
 * before they are used so several are in flight. */
template <typename T, int OP, typename Load> __device__ __forceinline__ uint4 reduce_ranks(int n, Load load)
{
    constexpr int V = Pack<T>::V;
    float acc[V];
    Conv<T>::unpack(load(0), acc);
    for (int s0 = 1; s0 < n; s0 += 4) {
        uint4 v[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (s0 + j < n) v[j] = load(s0 + j);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (s0 + j < n) {
                float f[V];
                Conv<T>::unpack(v[j], f);
#pragma unroll
                for (int k = 0; k < V; k++) acc[k] = redop<OP>(acc[k], f[k]);
            }
        }
    }
    return Conv<T>::pack(acc);
}

} // namespace symmem_k

#endif
