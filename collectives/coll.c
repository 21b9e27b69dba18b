/* The collectives' entry points (symmem_all_reduce, symmem_reduce_scatter, symmem_all_gather,
 * symmem_barrier): argument checks, the plan of the call (the algorithm, zero copy, geometry: plan.c) into
 * the kernel's parameters, the tag, the launch. The layout of collectives/ is in coll_internal.h. */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/algos.h"
#include "collectives/coll_internal.h"
#include "collectives/copy_engine.h"

static int ranges_overlap(const char *a, size_t na, const char *b, size_t nb) { return a < b + nb && b < a + na; }

static symmem_status_t check_args(symmem_comm_t comm, const symmem_coll_call_t *c, size_t *in_bytes, size_t *out_bytes)
{
    const size_t elem_size = symmem_dtype_size(c->dtype);
    const size_t n = (size_t)comm->nranks;
    if (elem_size == 0)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: invalid dtype %d", c->name, (int)c->dtype);
    if (c->kind != SYMMEM_COLL_ALL_GATHER && ((int)c->op < 0 || c->op >= SYMMEM_REDOP_COUNT))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: invalid reduction op %d", c->name, (int)c->op);
    if (!symmem_algo_listed((int)c->algo))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: invalid algorithm %d", c->name, (int)c->algo);
    if (c->count > (SIZE_MAX / 2) / elem_size / n)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: count %zu is too large", c->name, c->count);
    if (!c->send || !c->recv)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: %s is NULL", c->name, !c->send ? "sendbuf" : "recvbuf");
    if ((uintptr_t)c->send % elem_size || (uintptr_t)c->recv % elem_size)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "%s: sendbuf %p / recvbuf %p is not aligned to the %zu-byte element size of %s (any "
                                "element-aligned pointer works; 16-byte alignment is fastest)",
                                c->name, c->send, c->recv, elem_size, symmem_dtype_name(c->dtype));
    const size_t b = c->count * elem_size;
    *in_bytes = c->kind == SYMMEM_COLL_REDUCE_SCATTER ? b * n : b;
    *out_bytes = c->kind == SYMMEM_COLL_ALL_GATHER ? b * n : b;
    /* In place only in the exact forms (as NCCL): all-reduce send == recv, reduce-scatter recv = send +
     * rank*count, all-gather send = recv + rank*count; any other overlap would race. */
    const char *s = c->send, *r = c->recv;
    const size_t mine = (size_t)comm->rank * b;
    int ok_in_place = 0;
    if (c->kind == SYMMEM_COLL_ALL_REDUCE) ok_in_place = s == r;
    else if (c->kind == SYMMEM_COLL_REDUCE_SCATTER) ok_in_place = r == s + mine;
    else ok_in_place = s == r + mine;
    if (!ok_in_place && ranges_overlap(s, *in_bytes, r, *out_bytes))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "%s: sendbuf %p (%zu bytes) and recvbuf %p (%zu bytes) overlap, and not in the in-place "
                                "form (all_reduce: send == recv; reduce_scatter: recv == send + rank*count; all_gather: "
                                "send == recv + rank*count)",
                                c->name, c->send, *in_bytes, c->recv, *out_bytes);
    return SYMMEM_OK;
}

/* The plan: zero copy in (pull: peers' inputs read in place) and out (results stored into peers' outputs),
 * both decided before the round size, which they change, as the descriptor allows; then the geometry.
 * *region_hash collects what the tag must cover of the zero-copy regions. */
static symmem_status_t plan_call(symmem_comm_t comm, const symmem_coll_call_t *c, size_t in_bytes, size_t out_bytes,
                                 symmem_coll_params_t *p, symmem_coll_geom_t *geo, uint32_t *region_hash)
{
    const struct symmem_coll *co = comm->coll;
    const symmem_coll_algo_op_t *d = symmem_coll_algo(c->kind, (symmem_algo_t)p->algo);
    *region_hash = 0;
    if (d->zero_copy_in != SYMMEM_COLL_ZC_NO)
        p->zero_copy_in = symmem_coll_zero_copy_in(comm, c, in_bytes, out_bytes, d->zero_copy_in == SYMMEM_COLL_ZC_ANY,
                                                   p, region_hash);
    if (d->zero_copy_out == SYMMEM_COLL_ZO_YES || (d->zero_copy_out == SYMMEM_COLL_ZO_WITH_ZC && p->zero_copy_in))
        p->zero_copy_out = symmem_coll_zero_copy_out(comm, c, out_bytes, p, region_hash);
    const int no_ws = d->zero_copy_out == SYMMEM_COLL_ZO_WITH_ZC && p->zero_copy_in && p->zero_copy_out;
    /* the island algorithm's rounds are as large as the slots its split's schedule names allow */
    const uint64_t units =
        d->family == SYMMEM_COLL_FAM_ISLAND && !co->island_error[0] ? co->island_sched[c->kind].slots : 0;
    const int geometry_status =
        symmem_coll_geometry(&co->layout, &co->grid, comm->nranks, c->kind, (symmem_algo_t)p->algo, c->count,
                             symmem_dtype_size(c->dtype), p->zero_copy_in, p->zero_copy_out, no_ws, units, geo);
    if (geometry_status == 1)
        return symmem_set_error(SYMMEM_INVALID_USAGE,
                                "%s: the workspace (%zu bytes) is too small for %s with %d ranks; raise "
                                "SYMMEM_WORKSPACE_BYTES",
                                c->name, co->layout.ws_bytes, symmem_algo_name((symmem_algo_t)p->algo), comm->nranks);
    if (geometry_status != 0) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: message too large", c->name);
    p->stride = geo->stride;
    p->total = geo->total;
    p->segp = geo->segp;
    p->rounds = (uint32_t)geo->rounds;
    p->epochs = (uint32_t)geo->epochs;
    return SYMMEM_OK;
}

/* The island family's kernels take this rank's schedule of the operation beside the parameters. */
static int launch_island(const struct symmem_coll *co, const symmem_coll_params_t *p, const symmem_coll_geom_t *geo,
                         symmem_stream_t stream)
{
    symmem_coll_island_params_t ip;
    ip.c = *p;
    ip.s = co->island_sched[p->kind];
    return symmem_coll_island_launch(&ip, geo->grid, geo->threads, stream, co->pdl);
}

static symmem_status_t run_collective(symmem_comm_t comm, const symmem_coll_call_t *c)
{
    struct symmem_coll *co = comm->coll;
    size_t in_bytes = 0, out_bytes = 0;
    SYMMEM_CHECK(check_args(comm, c, &in_bytes, &out_bytes));
    if (c->count == 0) return SYMMEM_OK;
    const size_t bytes = symmem_coll_message_bytes(comm->nranks, c->kind, c->count, c->dtype);
    symmem_algo_t algo =
        c->algo != SYMMEM_ALGO_AUTO ? c->algo : symmem_coll_choose(&co->tuning, c->kind, symmem_coll_form(comm, c), bytes);
    /* a table (tuning file, SYMMEM_ALGO) naming the island algorithm where it is unavailable (warned at init):
     * AUTO runs the staged permutation instead; an explicit request fails below with the reason */
    if (c->algo == SYMMEM_ALGO_AUTO && algo == SYMMEM_ALGO_ISLAND && co->island_error[0]) algo = SYMMEM_ALGO_STAGED;
    if (symmem_algo_lossy(algo)) { /* the compressed wire (wire.c), or the exact path below its threshold */
        SYMMEM_CHECK(symmem_coll_wire_route_call(comm, c, bytes, &algo));
        if (symmem_algo_lossy(algo)) return symmem_coll_wire_run(comm, c, algo);
    }
    symmem_coll_params_t p;
    symmem_coll_geom_t geo;
    uint32_t region_hash;
    symmem_coll_call_params(comm, c, algo, &p);
    SYMMEM_CHECK(plan_call(comm, c, in_bytes, out_bytes, &p, &geo, &region_hash));
    if (geo.family == SYMMEM_COLL_FAM_ISLAND) {
        if (co->island_error[0])
            return symmem_set_error(SYMMEM_UNSUPPORTED, "%s (island): %s", c->name, co->island_error);
        region_hash =
            symmem_fnv32_u64(region_hash, co->islands_hash); /* ranks that split differently: a mismatch, not a hang */
    }
    p.tag = symmem_coll_tag(c, &p, geo.grid, geo.threads, region_hash);
    SYMMEM_TRACE(SYMMEM_SUBSYS_COLL, "%s count %zu %s %s algo %s grid %dx%d rounds %u segp %" PRIu64 " zc %d zo %d",
                 c->name, c->count, symmem_dtype_name(c->dtype), symmem_redop_name(p.op), symmem_algo_name(algo),
                 geo.grid, geo.threads, p.rounds, p.segp, p.zero_copy_in, p.zero_copy_out);
    symmem_coll_check_stream(comm, c->stream, c->name);
    if (geo.family == SYMMEM_COLL_FAM_COPY) { /* copies and step kernels, not one kernel (copy_engine.h) */
        SYMMEM_CHECK(symmem_ce_run(comm, c, &p, &geo));
        symmem_coll_record_launch(co, p.tag, c->kind, algo, c->dtype, c->count);
        return SYMMEM_OK;
    }
    const cudaError_t e =
        (cudaError_t)(geo.family == SYMMEM_COLL_FAM_ISLAND ? launch_island(co, &p, &geo, c->stream)
                      : geo.wide     ? symmem_coll_launch_wide(&p, geo.grid, geo.threads, c->stream, co->pdl)
                      : geo.zc_packs ? symmem_coll_launch_zc(&p, geo.grid, geo.threads, c->stream, co->pdl)
                                     : symmem_coll_launch(&p, geo.family, geo.grid, geo.threads, c->stream, co->pdl));
    if (e != cudaSuccess)
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "%s (%s): kernel launch", c->name,
                                   symmem_algo_name(algo));
    symmem_coll_record_launch(co, p.tag, c->kind, algo, c->dtype, c->count);
    return SYMMEM_OK;
}

static symmem_status_t entry(symmem_comm_t comm, const symmem_coll_call_t *c)
{
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(comm, c->name, &e));
    symmem_status_t st = symmem_coll_check_usable(comm, c->name);
    /* a captured call on ordinary memory: the ranks map each other's buffers first (graphreg.h); the
     * library's own calls (symmem_coll_run: the autotune's graphs) keep the form they measure */
    symmem_coll_reg_t reg;
    symmem_coll_call_t mapped;
    if (st == SYMMEM_OK && symmem_coll_reg_wanted(comm, c)) {
        st = symmem_coll_reg_exchange(comm, c, &reg);
        mapped = *c;
        mapped.reg = &reg;
        c = &mapped;
    }
    if (st == SYMMEM_OK) st = run_collective(comm, c);
    symmem_entry_end(&e);
    return st;
}

symmem_status_t symmem_all_reduce(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                  symmem_dtype_t dtype, symmem_redop_t op, symmem_algo_t algo, symmem_stream_t stream)
{
    const symmem_coll_call_t c = {SYMMEM_COLL_ALL_REDUCE, sendbuf, recvbuf, count, dtype, op, algo, stream,
                                  "symmem_all_reduce", NULL};
    return entry(comm, &c);
}

symmem_status_t symmem_reduce_scatter(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                      symmem_dtype_t dtype, symmem_redop_t op, symmem_algo_t algo,
                                      symmem_stream_t stream)
{
    const symmem_coll_call_t c = {SYMMEM_COLL_REDUCE_SCATTER, sendbuf, recvbuf, count, dtype, op, algo, stream,
                           "symmem_reduce_scatter", NULL};
    return entry(comm, &c);
}

symmem_status_t symmem_all_gather(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                  symmem_dtype_t dtype, symmem_algo_t algo, symmem_stream_t stream)
{
    const symmem_coll_call_t c = {SYMMEM_COLL_ALL_GATHER, sendbuf, recvbuf, count, dtype, SYMMEM_OP_SUM, algo, stream,
                           "symmem_all_gather", NULL};
    return entry(comm, &c);
}

symmem_status_t symmem_coll_run(symmem_comm_t comm, const symmem_coll_call_t *c) { return run_collective(comm, c); }

symmem_status_t symmem_coll_enqueue_barrier(symmem_comm_t comm, symmem_stream_t stream, const char *name)
{
    struct symmem_coll *co = comm->coll;
    symmem_coll_params_t p;
    symmem_coll_params_base(comm, &p);
    p.kind = SYMMEM_COLL_BARRIER;
    p.algo = SYMMEM_ALGO_AUTO;
    p.tag = symmem_hash_fold16(symmem_fnv32_u64(SYMMEM_FNV32_INIT, SYMMEM_COLL_BARRIER));
    symmem_coll_check_stream(comm, stream, name);
    const cudaError_t ce = (cudaError_t)symmem_coll_launch_barrier(&p, stream, co->pdl);
    if (ce != cudaSuccess)
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, ce, NULL, "%s: kernel launch", name);
    symmem_coll_record_launch(co, p.tag, SYMMEM_COLL_BARRIER, SYMMEM_ALGO_AUTO, SYMMEM_FLOAT32, 0);
    return SYMMEM_OK;
}

symmem_status_t symmem_barrier(symmem_comm_t comm, symmem_stream_t stream)
{
    symmem_entry_t e;
    SYMMEM_CHECK(symmem_entry_begin(comm, "symmem_barrier", &e));
    symmem_status_t st = symmem_coll_check_usable(comm, "symmem_barrier");
    if (st == SYMMEM_OK) st = symmem_coll_enqueue_barrier(comm, stream, "symmem_barrier");
    symmem_entry_end(&e);
    return st;
}

size_t symmem_comm_graph_mappings(symmem_comm_t comm)
{
    if (!symmem_comm_live(comm)) {
        symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_graph_mappings: %p is not a live communicator",
                         (void *)comm);
        return 0;
    }
    return symmem_coll_reg_mappings(comm->coll);
}

/* The largest all-reduce that runs in one round of two-shot pull, the layout with the most workspace per pack
 * of the all-reduces (what integrations size their eligibility by). */
size_t symmem_comm_max_message_bytes(symmem_comm_t comm)
{
    if (!symmem_comm_live(comm)) {
        symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_max_message_bytes: %p is not a live communicator",
                         (void *)comm);
        return 0;
    }
    if (!comm->coll) return 0; /* the host backend has no collectives */
    const struct symmem_coll *co = comm->coll;
    const symmem_coll_algo_op_t *d = symmem_coll_algo(SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_TWOSHOT_PULL);
    const uint64_t n = (uint64_t)comm->nranks, u = symmem_coll_packs_count(&d->packs, n);
    return (size_t)(co->layout.half_bytes / (16 * u) * 16 * n);
}
