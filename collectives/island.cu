/* The island family: an interpreter of the schedule island.c builds (island.h), on the protocol every
 * family shares (protocol.cuh: the state protocol, flag syncs with tags and timeouts, the error record, NaN
 * outputs after an error). Round after round, every thread runs this rank's steps in order over its
 * positions of the round (kernel.cuh's Geo: block b handles the same positions on every rank and in every
 * round); a SYNC step is a sync point of the round's epochs. The schedule's hazard rules (each slot written
 * once per round, read only after a sync that follows the write) are checked on the CPU by
 * tests/unit/test_island_sched.c, which executes the same steps. Workspace reuse across rounds and calls is
 * the halves' argument of kernel.cuh: a round consumes SYMMEM_ISLAND_EPOCHS_PER_ROUND epochs, an odd number
 * of pairs, so consecutive rounds and calls alternate halves, and every round has a sync, so a rank writes
 * a half again only after every peer signalled that it finished the round before (of any algorithm) that
 * used it. */
#include "collectives/island.h"
#include "collectives/kernel.cuh"

namespace symmem_k {

typedef symmem_coll_island_params_t IP;

/* One step at one position: load the sources (my input, or a slot of my half), reduce them in the listed
 * order (one source: moved as is, bits untouched), store to the destinations (my output, or a slot of a
 * rank's half). In place, my input of a shard is its output: a move from one to the other is skipped. */
template <typename T, int OP>
__device__ __forceinline__ void run_step(const P &p, const Geo &g, const symmem_island_step_t &st, uint64_t half_start,
                                         uint64_t off, uint64_t pk)
{
    constexpr int V = Pack<T>::V;
    const int s = st.shard;
    const uint64_t i = off + pk * V;
    const int nv = shard_valid<V>(p, s, i);
    if (nv <= 0) return;
    const uint64_t in_elem = g.all_gather ? i : s * p.stride + i, out_elem = g.reduce_scatter ? i : s * p.stride + i;
    char *mine = p.ws[g.r] + half_start;
    auto load = [&](int j) {
        const uint16_t e = st.src[j];
        return SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_IN
                   ? load_user<T>(g.send, in_elem, nv, g.aligned, false)
                   : ld_cg16(mine + ((uint64_t)SYMMEM_ISLAND_END_SLOT(e) * g.segp + pk) * 16);
    };
    const uint4 v = st.nsrc == 1 ? load(0) : reduce_ranks<T, OP>(st.nsrc, load);
    const bool self_copy = p.in_place && st.nsrc == 1 && SYMMEM_ISLAND_END_WHERE(st.src[0]) == SYMMEM_ISLAND_IN;
    for (int j = 0; j < st.ndst; j++) {
        const uint16_t e = st.dst[j];
        if (SYMMEM_ISLAND_END_WHERE(e) == SYMMEM_ISLAND_OUT) {
            if (!self_copy) store_user<T>(g.recv, out_elem, v, nv, g.aligned);
        } else {
            st16(p.ws[SYMMEM_ISLAND_END_RANK(e)] + half_start +
                     ((uint64_t)SYMMEM_ISLAND_END_SLOT(e) * g.segp + pk) * 16,
                 v);
        }
    }
}

template <typename T, int OP> __device__ __forceinline__ bool run_island(const IP &ip, Ctx &c)
{
    constexpr int V = Pack<T>::V;
    const P &p = ip.c;
    const Geo g(p);
    uint64_t e = c.epoch;
    for (uint32_t rd = 0; rd < p.rounds; rd++, e += SYMMEM_ISLAND_EPOCHS_PER_ROUND) {
        const uint64_t half_start = half_off(p, e), off = (uint64_t)rd * g.segp * V;
        for (uint32_t k = 0; k < ip.s.nsteps; k++) {
            const symmem_island_step_t &st = ip.s.step[k];
            if (st.kind == SYMMEM_ISLAND_SYNC) {
                if (!sync_peers(p, c, e + 1 + 2 * (uint64_t)st.shard)) return false;
                continue;
            }
            for (uint64_t pk = g.tid; pk < g.segp; pk += g.nthreads) run_step<T, OP>(p, g, st, half_start, off, pk);
        }
    }
    return true;
}

template <typename T, int OP>
__global__ void __launch_bounds__(SYMMEM_COLL_THREADS, 1) island_kernel(const __grid_constant__ IP ip)
{
    const P &p = ip.c;
    Ctx c;
    if (!prologue(p, c, p.epochs, 0)) {
        poison_output<T>(p);
        return;
    }
    const bool ok = run_island<T, OP>(ip, c);
    if (!ok) poison_output<T>(p);
    block_end(p, c);
}

struct IslandKernel {
    template <typename T, int OP> const void *get() const
    {
        return reinterpret_cast<const void *>(&island_kernel<T, OP>);
    }
};

const void *island_for(int dtype, int op) { return kernel_by_dtype_op(dtype, op, IslandKernel{}); }

} // namespace symmem_k

/* The family's accessors (kernel_abi.h). Its kernels take the schedule beside the parameters, so they are
 * launched by symmem_coll_island_launch, never by symmem_coll_launch (which refuses the family). */
extern "C" const void *symmem_coll_island_kernel(int dtype, int op, int checked)
{
    (void)checked;
    return symmem_k::island_for(dtype, op);
}

extern "C" int symmem_coll_island_preload(symmem_coll_preload_info_t *info)
{
    int e = 0;
    for (int dtype = 0; dtype < SYMMEM_DTYPE_COUNT && e == 0; dtype++)
        for (int op = 0; op < SYMMEM_REDOP_COUNT && e == 0; op++)
            e = symmem_coll_preload_one(symmem_k::island_for(dtype, op), SYMMEM_COLL_THREADS, info);
    return e;
}

extern "C" int symmem_coll_island_launch(const symmem_coll_island_params_t *p, int grid, int threads, void *stream,
                                         int pdl)
{
    /* all-gather moves bytes: the SUM instantiation of its dtype, as every family */
    const int op = p->c.kind == SYMMEM_COLL_ALL_GATHER ? (int)SYMMEM_OP_SUM : p->c.op;
    const void *fn = symmem_k::island_for(p->c.dtype, op);
    if (!fn || threads < 32 || threads > SYMMEM_COLL_THREADS || threads % 32) return (int)cudaErrorInvalidValue;
    return symmem_coll_launch_fn(fn, const_cast<symmem_coll_island_params_t *>(p), grid, threads, stream, pdl);
}
