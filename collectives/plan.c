/* The plan of a call: the workspace layout, threads per block, the geometry of a call from its
 * algorithm's descriptor (algos.h), which buffers it may read and write in place (zero copy) with the
 * tag every rank's call must match, and the call's parameters and form, which every launcher (coll.c,
 * wire.c, fused.c) starts from. Everything but the lookups of buffers and the communicator's fields is pure
 * (plan.h). */
#include "collectives/plan.h"

#include <inttypes.h>
#include <string.h>

#include "alloc/alloc.h"
#include "base/hash.h"
#include "base/log.h"
#include "base/param.h"
#include "collectives/algos.h"
#include "collectives/coll_internal.h"

static size_t align_down(size_t v, size_t a) { return v / a * a; }
static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t symmem_coll_lamport_buf_bytes(size_t ws)
{
    size_t lam = 4096;
    while (lam <= ws / 16) lam *= 2; /* lam * 2 <= ws / 8, without overflow */
    return lam + SYMMEM_COLL_LAMPORT_SLACK;
}

symmem_coll_layout_t symmem_coll_layout(size_t ws)
{
    symmem_coll_layout_t l;
    l.ws_bytes = ws;
    l.lam_hdr_off = SYMMEM_COLL_FLAG_BYTES;
    l.lam_off = l.lam_hdr_off + 3 * SYMMEM_COLL_LAMPORT_HDR_BYTES;
    l.lam_buf_bytes = symmem_coll_lamport_buf_bytes(ws);
    l.data_off = align_up(l.lam_off + 3 * l.lam_buf_bytes, 4096);
    l.half_bytes = align_down((ws - l.data_off) / 2, 4096);
    return l;
}

int symmem_coll_min_block_threads(void)
{
    const int64_t v = symmem_param_int(SYMMEM_PARAM_MIN_BLOCK_THREADS);
    const int64_t t = v <= 32 ? 32 : v >= SYMMEM_COLL_THREADS ? SYMMEM_COLL_THREADS : (v + 31) / 32 * 32;
    if (t != v)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                    "SYMMEM_MIN_BLOCK_THREADS=%" PRId64 " is not a multiple of 32 in [32, %d]; using %" PRId64, v,
                    SYMMEM_COLL_THREADS, t);
    return (int)t;
}

int symmem_coll_block_threads_up_to(const symmem_coll_grid_t *grid, uint64_t positions, int most)
{
    const uint64_t g = grid->max_grid > 0 ? (uint64_t)grid->max_grid : 1;
    uint64_t t = positions / g + (positions % g != 0);
    if (t > (uint64_t)most) t = (uint64_t)most; /* before rounding: no overflow for any count */
    t = (t + 31) / 32 * 32;
    if (t < (uint64_t)grid->min_threads) t = (uint64_t)grid->min_threads;
    if (t > (uint64_t)most) t = (uint64_t)most;
    return (int)t;
}

int symmem_coll_block_threads(const symmem_coll_grid_t *grid, uint64_t positions)
{
    return symmem_coll_block_threads_up_to(grid, positions, SYMMEM_COLL_THREADS);
}

/* Workspace packs per shard position (one data half, or one Lamport buffer for the Lamport family). */
static uint64_t units_of(const symmem_coll_algo_op_t *d, int n, int zero_copy_out)
{
    const int results_out = zero_copy_out && d->zero_copy_out != SYMMEM_COLL_ZO_NO;
    return symmem_coll_packs_count(results_out ? &d->packs_zero_copy_out : &d->packs, (uint64_t)n);
}

int symmem_coll_geometry(const symmem_coll_layout_t *ws, const symmem_coll_grid_t *grid, int n, symmem_coll_kind_t kind,
                         symmem_algo_t algo, uint64_t count, size_t elem_size, int zero_copy_in, int zero_copy_out,
                         int no_ws, uint64_t units, symmem_coll_geom_t *g)
{
    const uint64_t V = 16 / elem_size;
    const symmem_coll_algo_op_t *d = symmem_coll_algo(kind, algo);
    memset(g, 0, sizeof *g);
    if (!d || d->family == SYMMEM_COLL_FAM_NONE) return 1;
    g->family = d->family;
    if (kind == SYMMEM_COLL_ALL_REDUCE) {
        g->stride = (count + (uint64_t)n - 1) / (uint64_t)n;
        g->stride = (g->stride + V - 1) / V * V;
        g->total = count;
    } else {
        g->stride = count;
        g->total = count * (uint64_t)n;
    }
    const uint64_t granted = units_of(d, n, zero_copy_out);
    if (units > granted) return 1;
    g->units = no_ws ? 0 : units ? units : granted;
    const uint64_t cap = g->family == SYMMEM_COLL_FAM_LAMPORT ? ws->lam_buf_bytes : ws->half_bytes;
    const uint64_t segp_cap = no_ws ? UINT64_MAX : cap / (16 * g->units);
    if (segp_cap == 0) return 1;
    const uint64_t needp = (g->stride + V - 1) / V;
    g->segp = needp < segp_cap ? needp : segp_cap;
    g->rounds = (needp + g->segp - 1) / g->segp;
    /* the kernel counts rounds and epochs in 32 bits */
    const uint64_t end = zero_copy_in ? d->zero_copy_in_end_epochs : 0;
    if (g->rounds > UINT32_MAX || g->rounds > (UINT32_MAX - end) / (d->epochs_per_round ? d->epochs_per_round : 1))
        return 2;
    g->epochs = g->rounds * d->epochs_per_round + end;
    /* Grid: a deterministic function of (algorithm, size, ranks, max_grid, min_threads), so every rank
     * launches the same. */
    g->positions = d->every_shard ? (uint64_t)n * g->segp : g->segp;
    /* the two-shot pull all-reduce has kernels of its own (kernel_abi.h): with zero copy both ways one whose
     * threads take several packs a pass (the grid covers the passes), into an ordinary output one with wider
     * blocks (more loads in flight on the same blocks) */
    const int two_pull = kind == SYMMEM_COLL_ALL_REDUCE && algo == SYMMEM_ALGO_TWOSHOT_PULL;
    if (two_pull && zero_copy_in && zero_copy_out) {
        g->zc_packs = symmem_coll_zc_packs(n);
        g->positions = (g->positions + (uint64_t)g->zc_packs - 1) / (uint64_t)g->zc_packs;
    }
    g->wide = two_pull && !zero_copy_out;
    g->threads = symmem_coll_block_threads_up_to(grid, g->positions,
                                                 g->wide ? SYMMEM_COLL_WIDE_THREADS : SYMMEM_COLL_THREADS);
    uint64_t blocks = (g->positions + (uint64_t)g->threads - 1) / (uint64_t)g->threads;
    if (blocks > (uint64_t)grid->max_grid) blocks = (uint64_t)grid->max_grid;
    g->grid = blocks < 1 ? 1 : (int)blocks;
    return 0;
}

/* ---- zero copy and the tag ------------------------------------------------------------------------------------ */
static int ranges_overlap(const char *a, size_t na, const char *b, size_t nb) { return a < b + nb && b < a + na; }

/* Whether `bytes` starting at ptr - lead lie inside one symmetric buffer of `comm`: *buf and *region (the
 * offset of ptr - lead from the buffer's base on this rank, which the zero-copy rules ask to be the same
 * on every rank). */
static int sym_region(symmem_comm_t comm, const void *ptr, size_t lead, size_t bytes, symmem_buffer_t *buf,
                      size_t *region)
{
    *buf = symmem_alloc_find(comm, ptr);
    if (!*buf) return 0;
    const size_t size = (*buf)->size;
    const size_t off = (size_t)((const char *)ptr - (const char *)(*buf)->peers[comm->rank]);
    if (off < lead) return 0; /* e.g. in-place all-gather whose receive buffer starts before this buffer */
    *region = off - lead;
    return bytes <= size && *region <= size - bytes;
}

/* A zero-copy region as the tag must cover it: its offset and which buffer (two of one size told apart). */
static uint32_t hash_region(uint32_t h, symmem_buffer_t buf, size_t region)
{
    h = symmem_fnv32_u64(h, region);
    h = symmem_fnv32_u64(h, buf->size);
    h = symmem_fnv32_u64(h, buf->mapped_size);
    return symmem_fnv32_u64(h, buf->seq);
}

/* A side mapped by graph registration (graphreg.h), as the tag covers it: the exchange's number, which every
 * rank of the same call has. */
static uint32_t hash_mapped(uint32_t h, const symmem_coll_reg_t *reg, int side)
{
    h = symmem_fnv32_u64(h, 0x67726567u + (uint32_t)side); /* "greg" */
    return symmem_fnv32_u64(h, reg->seq);
}

/* Pull algorithms may read the senders' inputs in place when they lie in a symmetric buffer of this
 * communicator ("zero copy"): p->peer_send[q] is where rank q's input is mapped here. Every rank computes every
 * peer_send[q] from ITS OWN view of the shared buffer, so the rule every rank must follow is stated for the buffer
 * region all ranks share (the same symmetric buffer, the same offset `region` on every rank):
 *  - all-reduce, reduce-scatter (in place too: recv = send + rank*count, the region starts at send) and
 *    out-of-place all-gather: the region is the input; rank q's input is at region:
 *    peer_send[q] = peer_base(q) + region, region = send - base.
 *  - in-place all-gather (send = recv + rank*count*elem_size): the region is the RECEIVE buffer; rank q's input is
 *    its own chunk q of it: peer_send[q] = peer_base(q) + region + q*in_bytes, region = recv - base. (Using send's
 *    offset, region + rank*in_bytes, differs on every rank -- a false tag mismatch -- and would point peer_send[q]
 *    at chunk `rank` of rank q, which rank q is overwriting.)
 * The tag hashes the region's offset, the form (in-place all-gather or not) and the buffer's sizes: ranks
 * that pass other offsets or forms stop with SYMMEM_INVALID_USAGE instead of reading the wrong memory.
 * any_size 0 (SYMMEM_COLL_ZC_LARGE): only from SYMMEM_COLL_ZC_MIN_BYTES on, and not for a one-shot
 * all-reduce in place. Returns 1 (zero copy, p->peer_send filled, *h updated) or 0 (copy-in path; the same
 * decision on every rank that follows the rule, and a different one shows up in the tag through zero_copy_in). */
int symmem_coll_zero_copy_in(symmem_comm_t comm, const symmem_coll_call_t *c, size_t in_bytes, size_t out_bytes,
                             int any_size, symmem_coll_params_t *p, uint32_t *h)
{
    const int ag_in_place = c->kind == SYMMEM_COLL_ALL_GATHER && p->in_place;
    const size_t lead = ag_in_place ? (size_t)comm->rank * in_bytes : 0; /* send - start of the region */
    symmem_buffer_t buf = NULL;
    size_t region = 0;
    const int mapped = c->reg && c->reg->send; /* graphreg.h: an all-reduce's, never an in-place all-gather's */
    if (!mapped && !sym_region(comm, c->send, lead, ag_in_place ? out_bytes : in_bytes, &buf, &region)) return 0;
    if (!any_size) {
        if (in_bytes < SYMMEM_COLL_ZC_MIN_BYTES) return 0;
        /* one-shot all-reduce in place: peers would read my input while I overwrite it */
        if (c->kind == SYMMEM_COLL_ALL_REDUCE && ranges_overlap(c->send, in_bytes, c->recv, out_bytes)) return 0;
    }
    if (mapped) {
        for (int q = 0; q < comm->nranks; q++) p->peer_send[q] = c->reg->peer_send[q];
        *h = hash_mapped(*h, c->reg, 0);
        return 1;
    }
    for (int q = 0; q < comm->nranks; q++)
        p->peer_send[q] = (const char *)buf->peers[q] + region + (ag_in_place ? (size_t)q * in_bytes : 0);
    *h = symmem_fnv32_u64(hash_region(*h, buf, region), (uint64_t)ag_in_place);
    return 1;
}

/* Two-shot all-reduce (push, staged, and pull when it also reads in place) may store each reduced shard
 * straight into every rank's receive buffer when that lies in a symmetric buffer of this communicator ("zero
 * copy out"): p->peer_recv[q] is where rank q's receive buffer is mapped here, at the same offset `region` = recv -
 * base on every rank (the rule; the tag hashes the region and the buffer, so ranks that break it stop with
 * SYMMEM_INVALID_USAGE). It saves the gather area's copy-out and the sync after every round but the last: a
 * peer stores into my receive buffer only after the round's first sync, which I signal after my kernel
 * started (so the stream work before it is done) and after reading my input of that round (so in place is
 * safe), and my kernel ends only after the last round's second sync, which every peer signals after its
 * stores into my buffer. Two-shot pull with zero copy both ways needs no workspace at all (pull.cu,
 * run_pull). Returns 1 (p->peer_recv filled, *h updated) or 0. */
int symmem_coll_zero_copy_out(symmem_comm_t comm, const symmem_coll_call_t *c, size_t out_bytes,
                              symmem_coll_params_t *p, uint32_t *h)
{
    if (c->reg && c->reg->recv) {
        for (int q = 0; q < comm->nranks; q++) p->peer_recv[q] = c->reg->peer_recv[q];
        *h = hash_mapped(*h, c->reg, 1);
        return 1;
    }
    symmem_buffer_t buf;
    size_t region;
    if (!sym_region(comm, c->recv, 0, out_bytes, &buf, &region)) return 0;
    for (int q = 0; q < comm->nranks; q++) p->peer_recv[q] = (char *)buf->peers[q] + region;
    *h = hash_region(*h, buf, region);
    return 1;
}

uint32_t symmem_coll_tag(const symmem_coll_call_t *c, const symmem_coll_params_t *p, int grid, int threads,
                         uint32_t region_hash)
{
    uint32_t h = SYMMEM_FNV32_INIT;
    h = symmem_fnv32_u64(h, (uint64_t)c->kind);
    h = symmem_fnv32_u64(h, (uint64_t)p->algo);
    h = symmem_fnv32_u64(h, (uint64_t)c->dtype);
    h = symmem_fnv32_u64(h, (uint64_t)p->op);
    h = symmem_fnv32_u64(h, c->count);
    h = symmem_fnv32_u64(h, (uint64_t)grid);
    h = symmem_fnv32_u64(h, (uint64_t)threads);
    h = symmem_fnv32_u64(h, p->segp);
    h = symmem_fnv32_u64(h, (uint64_t)p->zero_copy_in);
    h = symmem_fnv32_u64(h, (uint64_t)p->zero_copy_out);
    h = symmem_fnv32_u64(h, region_hash);
    return symmem_hash_fold16(h);
}

/* ---- a call's parameters and form: what coll.c, wire.c and fused.c plan a call from ---------------------------- */
void symmem_coll_params_base(symmem_comm_t comm, symmem_coll_params_t *p)
{
    const struct symmem_coll *co = comm->coll;
    memset(p, 0, sizeof *p);
    for (int q = 0; q < comm->nranks; q++) p->ws[q] = co->ws_peers[q];
    p->st = co->dev_state;
    p->err = co->err_dev;
    p->rank = comm->rank;
    p->nranks = comm->nranks;
    p->data_off = co->layout.data_off;
    p->half_bytes = co->layout.half_bytes;
    p->lam_hdr_off = co->layout.lam_hdr_off;
    p->lam_check = co->lam_check;
    p->lam_off = co->layout.lam_off;
    p->lam_buf_bytes = co->layout.lam_buf_bytes;
    p->timeout_ns = comm->timeout_ms > 0 ? (uint64_t)comm->timeout_ms * 1000000u : 0;
    /* protocol.cuh: what the setup lets the state protocol and the first sync skip */
    if (!co->pdl) p->flags |= SYMMEM_COLL_PF_LATE_PUBLISH;
    if (comm->placement == SYMMEM_PLACEMENT_DEVICE) p->flags |= SYMMEM_COLL_PF_DEVICE_DATA;
}

void symmem_coll_call_params(symmem_comm_t comm, const symmem_coll_call_t *c, symmem_algo_t algo,
                             symmem_coll_params_t *p)
{
    const size_t elem_size = symmem_dtype_size(c->dtype);
    symmem_coll_params_base(comm, p);
    p->send = c->send;
    p->recv = c->recv;
    p->kind = c->kind;
    p->algo = algo;
    p->dtype = c->dtype;
    p->op = c->kind == SYMMEM_COLL_ALL_GATHER ? SYMMEM_OP_SUM : c->op;
    p->aligned = ((uintptr_t)c->send % 16 == 0 && (uintptr_t)c->recv % 16 == 0 &&
                  (c->kind == SYMMEM_COLL_ALL_REDUCE || (c->count * elem_size) % 16 == 0));
    p->in_place = c->kind == SYMMEM_COLL_ALL_REDUCE ? c->send == c->recv
                : c->kind == SYMMEM_COLL_ALL_GATHER
                    ? (const char *)c->send == (const char *)c->recv + (size_t)comm->rank * c->count * elem_size
                    : 0;
}

symmem_form_t symmem_coll_form(symmem_comm_t comm, const symmem_coll_call_t *c)
{
    const int in = (c->reg && c->reg->send) || symmem_alloc_find(comm, c->send) != NULL,
              out = (c->reg && c->reg->recv) || symmem_alloc_find(comm, c->recv) != NULL;
    return (symmem_form_t)((in ? SYMMEM_FORM_SYMMETRIC_INPUT : 0) | (out ? SYMMEM_FORM_SYMMETRIC_OUTPUT : 0));
}
