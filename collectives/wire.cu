/* The wire family (wire.h): the island schedule's all-reduce (island.h) executed over quantized slots, on the
 * protocol every family shares (protocol.cuh: the state protocol, flag syncs with tags and timeouts, the
 * error record, NaN outputs after an error). As island.cu, round after round every thread runs this rank's
 * steps over its positions of the round (kernel.cuh's Geo: block b handles the same positions on every rank
 * and in every round), a SYNC step being a sync point of the round's epochs; workspace reuse across rounds
 * and calls is the halves' argument of kernel.cuh (SYMMEM_ISLAND_EPOCHS_PER_ROUND epochs a round, an odd
 * number of pairs), and the schedule's hazard rules are those tests/unit/test_island_sched.c checks.
 *
 * What a step does at one position (a pack of 8 values):
 *  - sources: my input (exact) or a slot of my half (dequantized), added in the listed order in fp32;
 *  - a MOVE from a slot into my output stores the dequantized values as they travelled;
 *  - any other step (a MOVE of my input to a slot, a REDUCE) quantizes the sum per group: the group's lanes
 *    (G / 8 consecutive threads of a warp) agree on its largest magnitude through shuffles, and then the
 *    slots get q and the scale, my output gets deq(q), which is what every other rank computes from q.
 * The quantizer is wire.h's, the same code as the CPU model's. Shuffles need every lane of a warp: a warp's
 * lanes walk the positions together (the loop bound is rounded up to a multiple of 32; positions past the
 * round or the shard count as zeros and store nothing).
 *
 * Steps between two syncs touch disjoint memory, so each rank runs them in an order rotated by its rank:
 * the first phase's moves (my input of shard x into x's owner, x ascending) then go to owner (r + 1 + q) mod
 * n in pass q with one island, a permutation, instead of every rank storing into rank 0 first. */
#include "collectives/kernel.cuh"
#include "collectives/wire.h"

namespace symmem_k {

typedef symmem_coll_wire_params_t WP;

__device__ __forceinline__ void st8(void *p, uint2 v) { *reinterpret_cast<uint2 *>(p) = v; }

/* One position's 8 values of a slot, q[pk] (as they travelled) and the scale of its group, dequantized. */
__device__ __forceinline__ void wire_unpack(uint2 q, float scale, float *f)
{
    const uint32_t w[2] = {q.x, q.y};
#pragma unroll
    for (int k = 0; k < SYMMEM_WIRE_PACK_VALUES; k++)
        f[k] = symmem_wire_dequant((int)(int8_t)((w[k / 4] >> (8 * (k % 4))) & 0xffu), scale);
}

/* One step at position pk of the round (every lane of the warp calls it: the quantizing steps shuffle). */
template <typename T>
__device__ __forceinline__ void wire_step(const WP &wp, const Geo &g, const symmem_island_step_t &st,
                                          uint64_t half_start, uint64_t off, uint64_t pk, uint64_t scale_off)
{
    constexpr int V = Pack<T>::V;
    static_assert(V == SYMMEM_WIRE_PACK_VALUES, "the wire carries 16-bit dtypes");
    const P &p = wp.c;
    const int s = st.shard;
    const uint64_t i = off + pk * V;
    const int nv = pk < g.segp ? shard_valid<V>(p, s, i) : 0;
    const uint64_t elem = (uint64_t)s * p.stride + i;
    const uint32_t lanes = wp.lanes;
    const char *mine = p.ws[g.r] + half_start;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    /* four sources' loads in flight before any is added (in host memory each is a round trip over the link) */
    for (int j0 = 0; j0 < st.nsrc && nv > 0; j0 += 4) {
        uint4 raw[4];
        float sc[4];
#pragma unroll
        for (int u = 0; u < 4; u++) {
            raw[u] = zero4();
            sc[u] = 0.0f;
            if (j0 + u >= st.nsrc) continue;
            const uint16_t e = st.src[j0 + u];
            if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_IN) {
                raw[u] = load_user<T>(g.send, elem, nv, g.aligned, false);
            } else {
                const char *slot = mine + (uint64_t)SYMMEM_ISLAND_END_SLOT(e) * wp.slot_bytes;
                const uint2 q = __ldcg(reinterpret_cast<const uint2 *>(slot + pk * 8));
                raw[u] = make_uint4(q.x, q.y, 0u, 0u);
                sc[u] = __ldcg(reinterpret_cast<const float *>(slot + scale_off) + pk / lanes);
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int j = j0 + u;
            if (j >= st.nsrc) continue;
            float f[V];
            if (SYMMEM_ISLAND_END_WHERE(st.src[j]) == SYMMEM_ISLAND_IN) Conv<T>::unpack(raw[u], f);
            else wire_unpack(make_uint2(raw[u].x, raw[u].y), sc[u], f);
#pragma unroll
            for (int k = 0; k < V; k++) acc[k] = j == 0 ? f[k] : SYMMEM_WIRE_ADD(acc[k], f[k]);
        }
    }
    /* a move out of a slot (the gather): the values as they travelled, no second trip through the quantizer */
    const bool gather = st.kind == SYMMEM_ISLAND_MOVE && SYMMEM_ISLAND_END_WHERE(st.src[0]) == SYMMEM_ISLAND_WS;
    uint2 q = make_uint2(0u, 0u);
    float scale = 0.0f;
    if (!gather) {
        float m = 0.0f;
#pragma unroll
        for (int k = 0; k < V; k++) m = symmem_wire_amax(m, fabsf(acc[k]));
        for (uint32_t o = lanes >> 1; o > 0; o >>= 1) m = symmem_wire_amax(m, __shfl_xor_sync(0xffffffffu, m, (int)o));
        const symmem_wire_scale_t sc = symmem_wire_scale_of(m);
        scale = sc.scale;
        uint32_t w[2] = {0u, 0u};
#pragma unroll
        for (int k = 0; k < V; k++) {
            const int qk = symmem_wire_quant(acc[k], sc.inv);
            w[k / 4] |= ((uint32_t)qk & 0xffu) << (8 * (k % 4));
            acc[k] = symmem_wire_dequant(qk, sc.scale);
        }
        q = make_uint2(w[0], w[1]);
    }
    if (nv <= 0) return;
    for (int j = 0; j < st.ndst; j++) {
        const uint16_t e = st.dst[j];
        if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_OUT) {
            store_user<T>(g.recv, elem, Conv<T>::pack(acc), nv, g.aligned);
        } else {
            char *slot =
                p.ws[SYMMEM_ISLAND_END_RANK(e)] + half_start + (uint64_t)SYMMEM_ISLAND_END_SLOT(e) * wp.slot_bytes;
            st8(slot + pk * 8, q);
            /* the group's first lane: valid packs are a prefix of the round, so it is valid when any is */
            if (pk % lanes == 0) reinterpret_cast<float *>(slot + scale_off)[pk / lanes] = scale;
        }
    }
}

template <typename T> __device__ __forceinline__ bool run_wire(const WP &wp, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const P &p = wp.c;
    const Geo g(p);
    const uint64_t padded = (g.segp + 31) / 32 * 32, scale_off = symmem_wire_data_bytes(g.segp);
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
            for (uint32_t j = 0; j < m; j++) {
                const symmem_island_step_t &st = wp.s.step[a + (j + rot) % m];
                for (uint64_t pk = g.tid; pk < padded; pk += g.nthreads)
                    wire_step<T>(wp, g, st, half_start, off, pk, scale_off);
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
    if (!fn || threads < 32 || threads > SYMMEM_COLL_THREADS || threads % 32 || p->lanes < 1 || 32 % p->lanes)
        return (int)cudaErrorInvalidValue;
    return symmem_coll_launch_fn(fn, const_cast<symmem_coll_wire_params_t *>(p), grid, threads, stream, pdl);
}
