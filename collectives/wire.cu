/* The wire family (wire.h): the island schedule's all-reduce (island.h) executed over quantized slots, on the
 * protocol every family shares (protocol.cuh: the state protocol, flag syncs with tags and timeouts, the
 * error record, NaN outputs after an error). As island.cu, round after round every thread runs this rank's
 * steps over its positions of the round (kernel.cuh's Geo: block b handles the same positions on every rank
 * and in every round), a SYNC step being a sync point of the round's epochs; workspace reuse across rounds
 * and calls is the halves' argument of kernel.cuh (SYMMEM_ISLAND_EPOCHS_PER_ROUND epochs a round, an odd
 * number of pairs), and the schedule's hazard rules are those tests/unit/test_island_sched.c checks.
 *
 * A thread's position is SYMMEM_WIRE_THREAD_PACKS consecutive packs (16 values, 16 bytes of every slot, so
 * each slot load and store is one 16-byte access). What a step does at one position:
 *  - sources: my input (exact) or a slot of my half (dequantized), added in the listed order in fp32;
 *  - a MOVE from a slot into my output stores the dequantized values as they travelled;
 *  - any other step (a MOVE of my input to a slot, a REDUCE) quantizes the sum per group: the group's
 *    threads (G / 16 consecutive lanes of a warp) agree on its largest magnitude through shuffles, and then
 *    the slots get q and the scale, my output gets deq(q), which is what every other rank computes from q.
 * The quantizer is wire.h's, the same code as the CPU model's (a group's largest magnitude is the same
 * whatever order its values are compared in). Shuffles need every lane of a warp: a warp's lanes walk the
 * positions together (the loop bound is rounded up to a multiple of 32; packs past the round or the shard
 * count as zeros and store nothing but the zero bytes of a position's 16 that some valid pack shares).
 *
 * Where the slots are host memory every slot load is a round trip over the link, so a thread issues the
 * loads of several sources, or of several gathers (MOVEs from a slot into my output, batched across steps),
 * before it uses any.
 *
 * Steps between two syncs touch disjoint memory, so each rank runs them in an order rotated by its rank:
 * the first phase's moves (my input of shard x into x's owner, x ascending) then go to owner (r + 1 + q) mod
 * n in pass q with one island, a permutation, instead of every rank storing into rank 0 first. */
#include "collectives/kernel.cuh"
#include "collectives/wire.h"

namespace symmem_k {

typedef symmem_coll_wire_params_t WP;

/* Packs per thread position, and the loads (sources of a step, or gathers) a thread has in flight at once. */
constexpr int TP = SYMMEM_WIRE_THREAD_PACKS;
constexpr int WIRE_LOADS = 4;
static_assert(TP * SYMMEM_WIRE_PACK_VALUES == 16, "a position is 16 bytes of int8");

/* A position's 16 values of a slot (as they travelled) and the scale of their group, dequantized. */
__device__ __forceinline__ void wire_unpack(uint4 q, float scale, float *f)
{
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 16; k++)
        f[k] = symmem_wire_dequant((int)(int8_t)((w[k / 4] >> (8 * (k % 4))) & 0xffu), scale);
}

/* Position t of a round in shard s: its first pack, its first element of the message, and each pack's valid
 * elements (0..V; valid packs are a prefix of the round, and 0 past the round or the shard). */
struct WirePos {
    uint64_t pk, elem;
    int nv[TP];
};
template <int V> __device__ __forceinline__ WirePos wire_pos(const P &p, const Geo &g, int s, uint64_t off, uint64_t t)
{
    WirePos w;
    w.pk = t * TP;
    const uint64_t i = off + w.pk * V;
    w.elem = (uint64_t)s * p.stride + i;
#pragma unroll
    for (int h = 0; h < TP; h++) w.nv[h] = w.pk + h < g.segp ? shard_valid<V>(p, s, i + h * V) : 0;
    return w;
}

template <typename T> __device__ __forceinline__ void load_in(const Geo &g, const WirePos &w, uint4 *v)
{
    constexpr int V = Pack<T>::V;
#pragma unroll
    for (int h = 0; h < TP; h++)
        v[h] = w.nv[h] > 0 ? load_user<T>(g.send, w.elem + h * V, w.nv[h], g.aligned, false) : zero4();
}

template <typename T> __device__ __forceinline__ void store_out(const Geo &g, const WirePos &w, const float *f)
{
    constexpr int V = Pack<T>::V;
#pragma unroll
    for (int h = 0; h < TP; h++)
        if (w.nv[h] > 0) store_user<T>(g.recv, w.elem + h * V, Conv<T>::pack(f + h * V), w.nv[h], g.aligned);
}

/* A MOVE from a slot of my half into my output and nowhere else: a load and a store, no quantizer and no
 * shuffles, so consecutive ones run batched (wire_gathers). */
__device__ __forceinline__ bool is_gather_out(const symmem_island_step_t &st)
{
    return st.kind == SYMMEM_ISLAND_MOVE && st.nsrc == 1 && SYMMEM_ISLAND_END_WHERE(st.src[0]) == SYMMEM_ISLAND_WS &&
           st.ndst == 1 && SYMMEM_ISLAND_END_WHERE(st.dst[0]) == SYMMEM_ISLAND_OUT;
}

/* cnt (1..WIRE_LOADS) gathers at position t: every slot's loads in flight before the first store. */
template <typename T>
__device__ __forceinline__ void wire_gathers(const WP &wp, const Geo &g, const symmem_island_step_t *const *st, int cnt,
                                             uint64_t half_start, uint64_t off, uint64_t t, uint64_t scale_off)
{
    constexpr int V = Pack<T>::V;
    const P &p = wp.c;
    const char *mine = p.ws[g.r] + half_start;
    WirePos w[WIRE_LOADS];
    uint4 raw[WIRE_LOADS];
    float sc[WIRE_LOADS];
#pragma unroll
    for (int u = 0; u < WIRE_LOADS; u++) {
        raw[u] = zero4();
        sc[u] = 0.0f;
        if (u >= cnt) continue;
        w[u] = wire_pos<V>(p, g, st[u]->shard, off, t);
        if (w[u].nv[0] <= 0) continue;
        const char *slot = mine + (uint64_t)SYMMEM_ISLAND_END_SLOT(st[u]->src[0]) * wp.slot_bytes;
        raw[u] = ld_cg16(slot + w[u].pk * 8);
        sc[u] = __ldcg(reinterpret_cast<const float *>(slot + scale_off) + w[u].pk / wp.lanes);
    }
#pragma unroll
    for (int u = 0; u < WIRE_LOADS; u++) {
        if (u >= cnt || w[u].nv[0] <= 0) continue;
        float f[TP * V];
        wire_unpack(raw[u], sc[u], f);
        store_out<T>(g, w[u], f);
    }
}

/* One step at position t of the round (every lane of the warp calls it: the quantizing steps shuffle). */
template <typename T>
__device__ __forceinline__ void wire_step(const WP &wp, const Geo &g, const symmem_island_step_t &st,
                                          uint64_t half_start, uint64_t off, uint64_t t, uint64_t scale_off)
{
    constexpr int V = Pack<T>::V, TV = TP * V;
    static_assert(V == SYMMEM_WIRE_PACK_VALUES, "the wire carries 16-bit dtypes");
    const P &p = wp.c;
    const WirePos w = wire_pos<V>(p, g, st.shard, off, t);
    const uint32_t lanes = wp.lanes;
    const char *mine = p.ws[g.r] + half_start;
    float acc[TV];
#pragma unroll
    for (int k = 0; k < TV; k++) acc[k] = 0.0f;
    /* WIRE_LOADS sources' loads in flight before any is added */
    for (int j0 = 0; j0 < st.nsrc && w.nv[0] > 0; j0 += WIRE_LOADS) {
        uint4 raw[WIRE_LOADS], in[TP];
        float sc[WIRE_LOADS];
#pragma unroll
        for (int h = 0; h < TP; h++) in[h] = zero4();
#pragma unroll
        for (int u = 0; u < WIRE_LOADS; u++) {
            raw[u] = zero4();
            sc[u] = 0.0f;
            if (j0 + u >= st.nsrc) continue;
            const uint16_t e = st.src[j0 + u];
            if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_IN) {
                load_in<T>(g, w, in); /* my input of the shard: the same wherever the list names it */
            } else {
                const char *slot = mine + (uint64_t)SYMMEM_ISLAND_END_SLOT(e) * wp.slot_bytes;
                raw[u] = ld_cg16(slot + w.pk * 8);
                sc[u] = __ldcg(reinterpret_cast<const float *>(slot + scale_off) + w.pk / lanes);
            }
        }
#pragma unroll
        for (int u = 0; u < WIRE_LOADS; u++) {
            const int j = j0 + u;
            if (j >= st.nsrc) continue;
            float f[TV];
            if (SYMMEM_ISLAND_END_WHERE(st.src[j]) == SYMMEM_ISLAND_IN) {
#pragma unroll
                for (int h = 0; h < TP; h++) Conv<T>::unpack(in[h], f + h * V);
            } else {
                wire_unpack(raw[u], sc[u], f);
            }
#pragma unroll
            for (int k = 0; k < TV; k++) acc[k] = j == 0 ? f[k] : SYMMEM_WIRE_ADD(acc[k], f[k]);
        }
    }
    /* a pack past the shard is zeros whatever its slot bytes dequantize to (q = 0 times a NaN scale is NaN) */
#pragma unroll
    for (int h = 1; h < TP; h++)
        if (w.nv[h] <= 0)
#pragma unroll
            for (int k = 0; k < V; k++) acc[h * V + k] = 0.0f;
    /* a move out of a slot (the gather): the values as they travelled, no second trip through the quantizer */
    const bool gather = st.kind == SYMMEM_ISLAND_MOVE && SYMMEM_ISLAND_END_WHERE(st.src[0]) == SYMMEM_ISLAND_WS;
    uint4 q = zero4();
    float scale = 0.0f;
    if (!gather) {
        float m = 0.0f;
#pragma unroll
        for (int k = 0; k < TV; k++) m = symmem_wire_amax(m, fabsf(acc[k]));
        /* the group's lanes / TP threads: consecutive lanes, the first at a multiple of their count */
        for (uint32_t o = lanes / TP >> 1; o > 0; o >>= 1)
            m = symmem_wire_amax(m, __shfl_xor_sync(0xffffffffu, m, (int)o));
        const symmem_wire_scale_t sc = symmem_wire_scale_of(m);
        scale = sc.scale;
        uint32_t qw[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int k = 0; k < TV; k++) {
            const int qk = symmem_wire_quant(acc[k], sc.inv);
            qw[k / 4] |= ((uint32_t)qk & 0xffu) << (8 * (k % 4));
            acc[k] = symmem_wire_dequant(qk, sc.scale);
        }
        q = make_uint4(qw[0], qw[1], qw[2], qw[3]);
    }
    if (w.nv[0] <= 0) return;
    for (int j = 0; j < st.ndst; j++) {
        const uint16_t e = st.dst[j];
        if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_OUT) {
            store_out<T>(g, w, acc);
        } else {
            char *slot =
                p.ws[SYMMEM_ISLAND_END_RANK(e)] + half_start + (uint64_t)SYMMEM_ISLAND_END_SLOT(e) * wp.slot_bytes;
            /* all 16 bytes, an invalid second pack's as zeros: its bytes are this slot's and nobody reads them */
            st16(slot + w.pk * 8, q);
            /* the group's first thread: valid packs are a prefix of the round, so it has one when any does */
            if (w.pk % lanes == 0) reinterpret_cast<float *>(slot + scale_off)[w.pk / lanes] = scale;
        }
    }
}

template <typename T> __device__ __forceinline__ bool run_wire(const WP &wp, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const P &p = wp.c;
    const Geo g(p);
    const uint64_t positions = (g.segp + TP - 1) / TP, padded = (positions + 31) / 32 * 32,
                   scale_off = symmem_wire_data_bytes(g.segp);
    const uint32_t nsteps = wp.s.nsteps;
    uint64_t e = c.epoch;
    for (uint32_t rd = 0; rd < p.rounds; rd++, e += SYMMEM_ISLAND_EPOCHS_PER_ROUND) {
        const uint64_t half_start = half_off(p, e), off = (uint64_t)rd * g.segp * V;
        for (uint32_t a = 0; a < nsteps;) {
            if (wp.s.step[a].kind == SYMMEM_ISLAND_SYNC) {
                if (!sync_peers(p, c, e + 1 + 2 * (uint64_t)wp.s.step[a].shard)) return false;
                a++;
                continue;
            }
            uint32_t b = a;
            while (b < nsteps && wp.s.step[b].kind != SYMMEM_ISLAND_SYNC) b++;
            const uint32_t m = b - a, rot = (uint32_t)g.r % m;
            for (uint32_t j = 0; j < m;) {
                const symmem_island_step_t *batch[WIRE_LOADS];
                int cnt = 0;
                while (cnt < WIRE_LOADS && j < m && is_gather_out(wp.s.step[a + (j + rot) % m]))
                    batch[cnt++] = &wp.s.step[a + (j++ + rot) % m];
                if (cnt > 0) {
                    for (uint64_t t = g.tid; t < positions; t += g.nthreads)
                        wire_gathers<T>(wp, g, batch, cnt, half_start, off, t, scale_off);
                    continue;
                }
                const symmem_island_step_t &st = wp.s.step[a + (j++ + rot) % m];
                for (uint64_t t = g.tid; t < padded; t += g.nthreads)
                    wire_step<T>(wp, g, st, half_start, off, t, scale_off);
            }
            a = b;
        }
    }
    return true;
}

template <typename T>
__global__ void __launch_bounds__(SYMMEM_COLL_THREADS, 1) wire_kernel(const __grid_constant__ WP wp)
{
    const P &p = wp.c;
    Ctx c;
    if (!prologue(p, c, p.epochs, 0)) {
        poison_output<T>(p);
        return;
    }
    const bool ok = run_wire<T>(wp, c);
    if (!ok) poison_output<T>(p);
    block_end(p, c);
}

/* The kernel of a dtype, from the public list: the 16-bit ones, sum only (nullptr otherwise). */
template <typename T> const void *wire_for_type()
{
    if constexpr (sizeof(T) == 2) return reinterpret_cast<const void *>(&wire_kernel<T>);
    else return nullptr;
}

const void *wire_for(int dtype, int op)
{
    if (op != SYMMEM_OP_SUM) return nullptr;
    switch (dtype) {
#define SYMMEM_K_WIRE_DTYPE_(name, value, ctype, bytes)                                                    \
    case value: return wire_for_type<ctype>();
        SYMMEM_DTYPE_LIST(SYMMEM_K_WIRE_DTYPE_)
#undef SYMMEM_K_WIRE_DTYPE_
    default: return nullptr;
    }
}

} // namespace symmem_k

/* The family's accessors (kernel_abi.h). Its kernels take the schedule beside the parameters, so they are
 * launched by symmem_coll_wire_launch, never by symmem_coll_launch (which refuses the family). */
extern "C" const void *symmem_coll_wire_kernel(int dtype, int op, int checked)
{
    (void)checked;
    return symmem_k::wire_for(dtype, op);
}

extern "C" int symmem_coll_wire_preload(symmem_coll_preload_info_t *info)
{
    int e = 0;
    for (int dtype = 0; dtype < SYMMEM_DTYPE_COUNT && e == 0; dtype++)
        if (const void *fn = symmem_k::wire_for(dtype, SYMMEM_OP_SUM))
            e = symmem_coll_preload_one(fn, SYMMEM_COLL_THREADS, info);
    return e;
}

extern "C" int symmem_coll_wire_launch(const symmem_coll_wire_params_t *p, int grid, int threads, void *stream, int pdl)
{
    const void *fn = p->c.kind == SYMMEM_COLL_ALL_REDUCE ? symmem_k::wire_for(p->c.dtype, p->c.op) : nullptr;
    /* a group is whole positions (lanes / SYMMEM_WIRE_THREAD_PACKS threads) within one warp */
    const uint32_t tpg = p->lanes / SYMMEM_WIRE_THREAD_PACKS;
    if (!fn || threads < 32 || threads > SYMMEM_COLL_THREADS || threads % 32 || p->lanes % SYMMEM_WIRE_THREAD_PACKS ||
        tpg < 1 || 32 % tpg)
        return (int)cudaErrorInvalidValue;
    return symmem_coll_launch_fn(fn, const_cast<symmem_coll_wire_params_t *>(p), grid, threads, stream, pdl);
}
