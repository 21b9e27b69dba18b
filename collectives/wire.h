/* The compressed wire (SYMMEM_ALGO_WIRE_INT8): an all-reduce whose bytes between GPUs are int8 with one fp32
 * scale per group of G values, for bandwidth-bound (prefill-sized) messages on links that lack bandwidth.
 * Lossy, and only where a call asks for it (base/kinds.h, symmem_algo_lossy).
 *
 * The schedule is the island schedule's all-reduce (island.h), executed over quantized slots (wire.cu): with
 * one island that is the two-shot push (every rank's input of shard x to its owner, the owner reduces, the
 * sum to every rank); with several, each byte crosses the link between islands once. Every data movement
 * between ranks goes through a workspace slot, and every slot holds a quantized group:
 *  - a rank quantizes its input of every shard it does not own once (MOVE into the owner's slot);
 *  - an owner dequantizes the pieces and adds them to its own exact input in the schedule's order (rank
 *    order inside an island, island order for the partials) in fp32, and quantizes the sum once: into
 *    every destination slot, and into its own output as the dequantized value the others will compute;
 *  - a rank takes every other shard's result by dequantizing the owner's slot (MOVE into its output).
 * So each shard's result is computed once per island from the same bits in the same order, and every
 * rank's output is deq(q) of the same q: bitwise identical on every rank. With several islands the island
 * partials are quantized too (three quantizations on the way instead of two).
 *
 * This header is plain C, and its quantizer is compiled for both host and device: the kernels (wire.cu),
 * the CPU tests of the round trip and the CPU model of the whole algorithm (tests/wire_model.h) run the
 * same code, so a GPU test can compare its output with the model bit for bit.
 *
 * Error bound (docs/collectives.md, "Compressed wire", derives it): per element i of the result,
 *     |result_i - exact_i| <= c * W_i + a,   W_i = sum over ranks q of max_{|j - i| < G} |x_q,j|
 * with c = symmem_wire_bound_c and a = symmem_wire_bound_a below. */
#ifndef SYMMEM_COLLECTIVES_WIRE_H
#define SYMMEM_COLLECTIVES_WIRE_H

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "collectives/island.h"
#include "collectives/kernel_abi.h"
#include "collectives/plan.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define SYMMEM_WIRE_FN static inline __host__ __device__
#else
#define SYMMEM_WIRE_FN static inline
#endif
/* Products and sums of the quantizer, never contracted into a fused multiply-add: the device and the host
 * model must round alike (hosts with FMA build the code that models this with -ffp-contract=off). */
#if defined(__CUDA_ARCH__)
#define SYMMEM_WIRE_MUL(a, b) __fmul_rn((a), (b))
#define SYMMEM_WIRE_ADD(a, b) __fadd_rn((a), (b))
#else
#define SYMMEM_WIRE_MUL(a, b) ((a) * (b))
#define SYMMEM_WIRE_ADD(a, b) ((a) + (b))
#endif

/* ---- the quantizer --------------------------------------------------------------------------------------- */
#define SYMMEM_WIRE_QMAX 127
/* Groups whose largest magnitude is below 2^-100 travel as zeros: 127 / amax stays finite, and what is lost
 * is below the bound's absolute term. */
#define SYMMEM_WIRE_TINY 7.8886090522101181e-31f /* 2^-100 */
/* Values of a 16-bit dtype per 16-byte pack (8 bytes of int8 in a slot). */
#define SYMMEM_WIRE_PACK_VALUES 8
/* Consecutive packs per kernel thread: 16 bytes of int8, so that every slot load and store is 16 bytes wide
 * as the exact kernels' are. Where slots sit behind a high-latency link (host memory over PCIe) the bytes in
 * flight per load set the bandwidth, and 8-byte loads would get half of it at the same occupancy. */
#define SYMMEM_WIRE_THREAD_PACKS 2
/* The group sizes SYMMEM_WIRE_GROUP accepts, and its default. */
#define SYMMEM_WIRE_GROUP_DEFAULT 32
SYMMEM_WIRE_FN int symmem_wire_group_ok(int64_t g) { return g == 32 || g == 64 || g == 128; }

typedef struct symmem_wire_scale {
    float scale; /* deq(q) = q * scale; NaN for a group with a NaN or infinity, 0 for a tiny group */
    float inv;   /* q = rint(x * inv); 0 where every q is 0 */
} symmem_wire_scale_t;

/* The larger of two magnitudes, NaN if either is NaN (fmaxf would drop it, and a NaN must not vanish). */
SYMMEM_WIRE_FN float symmem_wire_amax(float a, float b) { return (a > b || a != a) ? a : b; }

/* The scale of a group whose largest magnitude is `amax`. */
SYMMEM_WIRE_FN symmem_wire_scale_t symmem_wire_scale_of(float amax)
{
    symmem_wire_scale_t s;
    if (!(amax <= FLT_MAX)) { /* NaN or infinity: the whole group is NaN after the trip */
        s.scale = (float)NAN;
        s.inv = 0.0f;
    } else if (amax < SYMMEM_WIRE_TINY) {
        s.scale = 0.0f;
        s.inv = 0.0f;
    } else {
        s.scale = amax / (float)SYMMEM_WIRE_QMAX;
        s.inv = (float)SYMMEM_WIRE_QMAX / amax;
    }
    return s;
}

/* x as int8 (round to nearest, ties to even), |q| <= 127: |x| <= amax, so x * inv is within one rounding of
 * +-127, and the clamp only removes that rounding. */
SYMMEM_WIRE_FN int symmem_wire_quant(float x, float inv)
{
    if (!(inv > 0.0f)) return 0;
    float y = rintf(SYMMEM_WIRE_MUL(x, inv));
    if (y > (float)SYMMEM_WIRE_QMAX) y = (float)SYMMEM_WIRE_QMAX;
    if (y < -(float)SYMMEM_WIRE_QMAX) y = -(float)SYMMEM_WIRE_QMAX;
    return (int)y;
}

SYMMEM_WIRE_FN float symmem_wire_dequant(int q, float scale) { return SYMMEM_WIRE_MUL((float)q, scale); }

/* ---- the error bound ------------------------------------------------------------------------------------- */
/* c of the bound for a 16-bit dtype after `quantizations` quantizations on the way (2: one island, 3:
 * several): quantizations * 1/254 (half a step of a group whose largest magnitude is at most W) + u (the
 * output's rounding, u = 2^-8 bf16, 2^-11 fp16) + 2e-4 (the fp32 roundings of scales, products and sums,
 * and the products of the terms above; docs/collectives.md derives it). */
SYMMEM_WIRE_FN double symmem_wire_bound_c(int dtype, int quantizations)
{
    const double u = dtype == SYMMEM_BFLOAT16 ? 1.0 / 256 : 1.0 / 2048;
    return quantizations / 254.0 + u + 2e-4;
}
/* a of the bound: the groups sent as zeros (below 2^-100, once per quantization) and, for fp16, the
 * rounding of a subnormal result (half its step, 2^-25). */
SYMMEM_WIRE_FN double symmem_wire_bound_a(int dtype) {
    return dtype == SYMMEM_BFLOAT16 ? 3.1554436208840472e-30 /* 2^-98 */ : 5.9604644775390625e-08 /* 2^-24 */;
}

/* ---- the slots --------------------------------------------------------------------------------------------- */
/* A slot of a round holds segp packs' values as int8, q[pk][8] (8 bytes per pack), then the scales of its
 * groups, scale[ceil(segp / lanes)] (lanes = G / 8 packs per group, groups counted from the round's first
 * pack), each part starting at a multiple of 16 bytes: a kernel thread's 16-byte access of two packs stays
 * inside the q part even where segp is odd. Slot s of a data half starts at s * slot_bytes. */
SYMMEM_WIRE_FN uint64_t symmem_wire_data_bytes(uint64_t segp) { return (segp * 8 + 15) / 16 * 16; }
SYMMEM_WIRE_FN uint64_t symmem_wire_slot_bytes(uint64_t segp, uint32_t lanes)
{
    const uint64_t groups = (segp + lanes - 1) / lanes;
    return symmem_wire_data_bytes(segp) + (groups * 4 + 15) / 16 * 16;
}

/* ---- the plan of a call (wire.c; pure) ------------------------------------------------------------------- */
/* What a call that names a lossy algorithm runs: 1 the compressed wire; 0 the exact algorithm AUTO chooses
 * (a message below min_bytes, or one rank: nothing to send); -1 with the reason in err (it serves sum
 * all-reduces of bf16 or fp16 only). `bytes` is the message (count * element size). */
int symmem_wire_route(symmem_coll_kind_t kind, symmem_redop_t op, symmem_dtype_t dtype, int nranks, size_t bytes,
                      size_t min_bytes, char *err, size_t errlen);

/* The geometry of a call: the shards as every all-reduce's (plan.c), rounds as large as `slots` quantized
 * slots per round fit a data half (a multiple of 32 packs when there are several rounds), three syncs
 * (SYMMEM_ISLAND_EPOCHS_PER_ROUND) per round, a grid over the round's packs. 0 and *g, *slot_bytes filled;
 * 1: the workspace holds not even one pack per slot; 2: too many rounds. */
int symmem_wire_geometry(const symmem_coll_layout_t *ws, const symmem_coll_grid_t *grid, int n, uint64_t count,
                         uint32_t slots, uint32_t group, symmem_coll_geom_t *g, uint64_t *slot_bytes);

/* ---- a communicator's ------------------------------------------------------------------------------------- */
/* Its settings (agreed by every rank at init) and its one-island schedule (struct symmem_coll's `wire`). */
typedef struct symmem_wire_state {
    uint32_t group;            /* SYMMEM_WIRE_GROUP */
    uint64_t min_bytes;        /* SYMMEM_WIRE_MIN_BYTES */
    int flat_ok;               /* `flat` was built */
    symmem_island_split_t one; /* every rank in one island */
    symmem_island_sched_t flat; /* this rank's all-reduce over it: the two-shot push */
} symmem_wire_state_t;

/* What a call of `count` elements of `dtype` with the compressed wire runs on `comm` (the model's inputs:
 * tests/wire_model.h). 1 and *d filled; 0: the exact path runs (route 0); -1: not a wire call or no comm. */
typedef struct symmem_wire_desc {
    symmem_island_split_t split; /* the islands its schedule follows (one: the two-shot push) */
    int quantizations;           /* on the way: 2 with one island, 3 with several */
    uint32_t group, lanes;
    uint64_t stride, segp, rounds, slot_bytes;
} symmem_wire_desc_t;
int symmem_coll_wire_describe(symmem_comm_t comm, size_t count, symmem_dtype_t dtype, symmem_wire_desc_t *d);

/* ---- the kernel ------------------------------------------------------------------------------------------ */
/* Kernel arguments: the protocol's parameters (all-reduce, shards, rounds, epochs as every algorithm's), the
 * rank's schedule (island.h; with one island the two-shot push), the slot size and the group's packs. */
typedef struct symmem_coll_wire_params {
    symmem_coll_params_t c;
    symmem_island_sched_t s;
    uint64_t slot_bytes; /* symmem_wire_slot_bytes(c.segp, lanes) */
    uint32_t lanes;      /* packs per group: G / SYMMEM_WIRE_PACK_VALUES, 4, 8 or 16 (even: a thread's packs
                          * never straddle two groups) */
    uint32_t pad;
} symmem_coll_wire_params_t;
SYMMEM_STATIC_ASSERT(sizeof(symmem_coll_wire_params_t) <= 4096, "kernel parameters fit every architecture's limit");

/* Launch the wire kernel of p->c.dtype (bf16, fp16; sum); the cudaError_t (cudaErrorInvalidValue for any other
 * dtype or op). */
int symmem_coll_wire_launch(const symmem_coll_wire_params_t *p, int grid, int threads, void *stream, int pdl);

#ifdef __cplusplus
}
#endif
#endif
