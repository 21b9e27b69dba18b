/* The compressed wire, host side (wire.h): which calls it serves and where the exact path runs instead, the
 * geometry of its quantized rounds, the communicator's settings and one-island schedule, and the call. */
#include "collectives/wire.h"

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"

/* ---- the plan (pure) ------------------------------------------------------------------------------------ */
int symmem_wire_route(symmem_coll_kind_t kind, symmem_redop_t op, symmem_dtype_t dtype, int nranks, size_t bytes,
                      size_t min_bytes, char *err, size_t errlen)
{
    if (kind != SYMMEM_COLL_ALL_REDUCE) {
        snprintf(err, errlen,
                 "the compressed wire serves all_reduce only; %s runs exactly with any other algorithm (AUTO)",
                 symmem_coll_kind_name(kind));
        return -1;
    }
    if (op != SYMMEM_OP_SUM) {
        snprintf(err, errlen,
                 "the compressed wire serves sum only (the %s of dequantized values is not the inputs' %s): use an "
                 "exact algorithm (AUTO)",
                 symmem_redop_name(op), symmem_redop_name(op));
        return -1;
    }
    if (dtype != SYMMEM_BFLOAT16 && dtype != SYMMEM_FLOAT16) {
        snprintf(err, errlen, "the compressed wire takes bfloat16 and float16, not %s: use an exact algorithm (AUTO)",
                 symmem_dtype_name(dtype));
        return -1;
    }
    if (nranks < 2 || bytes < min_bytes) return 0;
    return 1;
}

/* The most packs per slot for which `slots` quantized slots fit `half` bytes (0: not even one). */
static uint64_t packs_that_fit(uint64_t half, uint32_t slots, uint32_t lanes)
{
    /* ignoring the slots' rounding to 16 bytes this is an upper bound; the rounding costs at most a few packs */
    uint64_t s = half / slots * lanes / (8 * (uint64_t)lanes + 4);
    while (s > 0 && (uint64_t)slots * symmem_wire_slot_bytes(s, lanes) > half) s--;
    return s;
}

int symmem_wire_geometry(const symmem_coll_layout_t *ws, const symmem_coll_grid_t *grid, int n, uint64_t count,
                         uint32_t slots, uint32_t group, symmem_coll_geom_t *g, uint64_t *slot_bytes)
{
    const uint32_t lanes = group / SYMMEM_WIRE_PACK_VALUES;
    /* the shards and the grid's rules as every all-reduce's, with the descriptor's 16-byte slots */
    const int st = symmem_coll_geometry(ws, grid, n, SYMMEM_COLL_ALL_REDUCE, SYMMEM_ALGO_WIRE_INT8, count, 2, 0, 0, 0,
                                        slots, g);
    if (st != 0) return st;
    if (!symmem_wire_group_ok(group) || slots < 1) return 1;
    const uint64_t cap = packs_that_fit(ws->half_bytes, slots, lanes);
    if (cap == 0) return 1;
    const uint64_t needp = (g->stride + SYMMEM_WIRE_PACK_VALUES - 1) / SYMMEM_WIRE_PACK_VALUES;
    /* several rounds: whole warps and whole groups per round (groups then start at the same offsets of every
     * shard, a multiple of G) */
    const uint64_t segp = needp <= cap ? needp : cap >= 32 ? cap / 32 * 32 : cap >= lanes ? cap / lanes * lanes : cap;
    const uint64_t rounds = (needp + segp - 1) / segp;
    if (rounds > UINT32_MAX / SYMMEM_ISLAND_EPOCHS_PER_ROUND) return 2;
    g->units = slots;
    g->segp = segp;
    g->rounds = rounds;
    g->epochs = rounds * SYMMEM_ISLAND_EPOCHS_PER_ROUND;
    /* a thread's position is SYMMEM_WIRE_THREAD_PACKS packs: 16 bytes of every slot */
    g->positions = (segp + SYMMEM_WIRE_THREAD_PACKS - 1) / SYMMEM_WIRE_THREAD_PACKS;
    g->threads = symmem_coll_block_threads(grid, g->positions);
    uint64_t blocks = (g->positions + (uint64_t)g->threads - 1) / (uint64_t)g->threads;
    if (blocks > (uint64_t)grid->max_grid) blocks = (uint64_t)grid->max_grid;
    g->grid = blocks < 1 ? 1 : (int)blocks;
    *slot_bytes = symmem_wire_slot_bytes(segp, lanes);
    return 0;
}

/* ---- the communicator's settings ------------------------------------------------------------------------ */
void symmem_coll_wire_init(symmem_comm_t comm, struct symmem_coll *co)
{
    symmem_wire_state_t *w = &co->wire;
    int64_t group = symmem_param_int(SYMMEM_PARAM_WIRE_GROUP);
    if (!symmem_wire_group_ok(group)) {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_WIRE_GROUP=%" PRId64 " is not 32, 64 or 128; using %d", group,
                    SYMMEM_WIRE_GROUP_DEFAULT);
        group = SYMMEM_WIRE_GROUP_DEFAULT;
    }
    w->group = (uint32_t)group;
    w->min_bytes = symmem_param_size(SYMMEM_PARAM_WIRE_MIN_BYTES);
    /* every rank in one island (NUMA unknown everywhere): the two-shot push, whatever the machine's islands */
    int unknown[SYMMEM_MAX_RANKS];
    for (int q = 0; q < SYMMEM_MAX_RANKS; q++) unknown[q] = -1;
    symmem_island_split_from_numa(comm->nranks, unknown, &w->one);
    char err[256];
    w->flat_ok = symmem_island_schedule(&w->one, SYMMEM_COLL_ALL_REDUCE, comm->rank, &w->flat, err, sizeof err) == 0;
    if (!w->flat_ok) SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "compressed wire unavailable: %s", err);
}

/* The schedule a call follows: the island schedule where the communicator has several islands and the
 * island algorithm is available (the same on every rank: agreed at init), else the one-island one. */
static const symmem_island_sched_t *pick_schedule(const struct symmem_coll *co, const symmem_island_split_t **split,
                                                  uint64_t *split_hash)
{
    if (!co->island_error[0] && co->islands.count > 1) {
        *split = &co->islands;
        *split_hash = co->islands_hash;
        return &co->island_sched[SYMMEM_COLL_ALL_REDUCE];
    }
    *split = &co->wire.one;
    *split_hash = symmem_island_hash(&co->wire.one);
    return co->wire.flat_ok ? &co->wire.flat : NULL;
}

/* ---- a call ----------------------------------------------------------------------------------------------- */
symmem_status_t symmem_coll_wire_route_call(symmem_comm_t comm, const symmem_coll_call_t *c, size_t bytes,
                                            symmem_algo_t *algo)
{
    struct symmem_coll *co = comm->coll;
    char err[256];
    const int r = symmem_wire_route(c->kind, c->op, c->dtype, comm->nranks, bytes, co->wire.min_bytes, err, sizeof err);
    if (r < 0) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s (%s): %s", c->name, symmem_algo_name(*algo), err);
    if (r > 0) return SYMMEM_OK;
    /* below the threshold: what AUTO runs, with AUTO's fallback where the island algorithm is unavailable */
    *algo = symmem_coll_choose(&co->tuning, c->kind, symmem_coll_form(comm, c), bytes);
    if (symmem_algo_lossy(*algo)) *algo = SYMMEM_ALGO_TWOSHOT_PUSH; /* a table never holds one; never recurse */
    if (*algo == SYMMEM_ALGO_ISLAND && co->island_error[0]) *algo = SYMMEM_ALGO_STAGED;
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_wire_run(symmem_comm_t comm, const symmem_coll_call_t *c, symmem_algo_t algo)
{
    struct symmem_coll *co = comm->coll;
    const symmem_island_split_t *split;
    uint64_t split_hash;
    const symmem_island_sched_t *sched = pick_schedule(co, &split, &split_hash);
    if (!sched)
        return symmem_set_error(SYMMEM_UNSUPPORTED, "%s (%s): no schedule for %d ranks (see the warning at init)",
                                c->name, symmem_algo_name(algo), comm->nranks);
    symmem_coll_wire_params_t wp;
    memset(&wp, 0, sizeof wp);
    symmem_coll_call_params(comm, c, algo, &wp.c);
    symmem_coll_geom_t geo;
    uint64_t slot_bytes = 0;
    const int gs = symmem_wire_geometry(&co->layout, &co->grid, comm->nranks, c->count, sched->slots, co->wire.group,
                                        &geo, &slot_bytes);
    if (gs == 1)
        return symmem_set_error(SYMMEM_INVALID_USAGE,
                                "%s: the workspace (%zu bytes) is too small for %s with %d ranks; raise "
                                "SYMMEM_WORKSPACE_BYTES",
                                c->name, co->layout.ws_bytes, symmem_algo_name(algo), comm->nranks);
    if (gs != 0) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: message too large", c->name);
    wp.c.stride = geo.stride;
    wp.c.total = geo.total;
    wp.c.segp = geo.segp;
    wp.c.rounds = (uint32_t)geo.rounds;
    wp.c.epochs = (uint32_t)geo.epochs;
    wp.s = *sched;
    wp.slot_bytes = slot_bytes;
    wp.lanes = co->wire.group / SYMMEM_WIRE_PACK_VALUES;
    /* ranks that follow other islands or group sizes stop with a mismatch instead of misreading slots */
    const uint32_t h = symmem_fnv32_u64(symmem_fnv32_u64(SYMMEM_FNV32_INIT, split_hash), co->wire.group);
    wp.c.tag = symmem_coll_tag(c, &wp.c, geo.grid, geo.threads, h);
    SYMMEM_TRACE(SYMMEM_SUBSYS_COLL,
                 "%s count %zu %s sum algo %s (%d islands, group %u) grid %dx%d rounds %u segp %" PRIu64
                 " slot %" PRIu64 " bytes",
                 c->name, c->count, symmem_dtype_name(c->dtype), symmem_algo_name(algo), split->count, co->wire.group,
                 geo.grid, geo.threads, wp.c.rounds, wp.c.segp, slot_bytes);
    symmem_coll_check_stream(comm, c->stream, c->name);
    const cudaError_t e = (cudaError_t)symmem_coll_wire_launch(&wp, geo.grid, geo.threads, c->stream, co->pdl);
    if (e != cudaSuccess)
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "%s (%s): kernel launch", c->name,
                                   symmem_algo_name(algo));
    symmem_coll_record_launch(co, wp.c.tag, c->kind, algo, c->dtype, c->count);
    return SYMMEM_OK;
}

int symmem_coll_wire_describe(symmem_comm_t comm, size_t count, symmem_dtype_t dtype, symmem_wire_desc_t *d)
{
    memset(d, 0, sizeof *d);
    if (!comm || !comm->coll) return -1;
    const struct symmem_coll *co = comm->coll;
    char err[256];
    const int r = symmem_wire_route(SYMMEM_COLL_ALL_REDUCE, SYMMEM_OP_SUM, dtype, comm->nranks,
                                    count * symmem_dtype_size(dtype), co->wire.min_bytes, err, sizeof err);
    if (r <= 0) return r;
    const symmem_island_split_t *split;
    uint64_t split_hash;
    const symmem_island_sched_t *sched = pick_schedule(co, &split, &split_hash);
    symmem_coll_geom_t geo;
    if (!sched || symmem_wire_geometry(&co->layout, &co->grid, comm->nranks, count, sched->slots, co->wire.group, &geo,
                                       &d->slot_bytes) != 0)
        return -1;
    d->split = *split;
    d->quantizations = split->count > 1 ? 3 : 2;
    d->group = co->wire.group;
    d->lanes = co->wire.group / SYMMEM_WIRE_PACK_VALUES;
    d->stride = geo.stride;
    d->segp = geo.segp;
    d->rounds = geo.rounds;
    return 1;
}
