/* The copy-engine two-shot's schedule (copy_engine.h): pure, the same function for the host launcher and the CPU
 * test. Layout of a data half (one per round, alternating: round k uses half k % 2), 16-byte packs:
 *   all-reduce:      slots[src][segp], then gather[s][segp]  (2n units: the descriptor's units_n = 2)
 *   reduce-scatter:  slots[src][segp]                         (n units)
 *   all-gather:      gather[s][segp]                          (n units)
 * slot src of rank d holds segment `round` of shard d of rank src's input; gather slot s of rank d holds
 * segment `round` of shard s of the result (reduced by rank s; all-gather: rank s's input). */
#include <string.h>

#include "collectives/copy_engine.h"

int symmem_ce_kernels_per_round(int kind) { return kind == SYMMEM_COLL_ALL_REDUCE ? 2 : 1; }

uint64_t symmem_ce_epochs(int kind, uint64_t rounds)
{
    return 2 * (1 + rounds * (uint64_t)symmem_ce_kernels_per_round(kind));
}

static symmem_ce_ref_t ref(int32_t buf, int32_t rank, uint64_t off)
{
    symmem_ce_ref_t r = {buf, rank, off};
    return r;
}

/* Elements of segment `round` of shard s (0 past the shard's end: the last shard of an all-reduce may be
 * short or empty). */
static uint64_t seg_len(const symmem_ce_call_t *c, int s, uint64_t off)
{
    const uint64_t seg = c->segp * (16 / c->elem_size);
    const uint64_t start = (uint64_t)s * c->stride;
    if (start >= c->total) return 0;
    const uint64_t len = c->stride < c->total - start ? c->stride : c->total - start;
    if (off >= len) return 0;
    return len - off < seg ? len - off : seg;
}

/* Workspace offset of unit u (slot or gather index) of this round's half. */
static uint64_t unit_off(const symmem_ce_call_t *c, uint64_t round, uint64_t u)
{
    return c->data_off + (round & 1) * c->half_bytes + u * c->segp * 16;
}

static symmem_ce_step_t *add_step(symmem_ce_step_t *out, int *k, int type)
{
    symmem_ce_step_t *s = &out[(*k)++];
    memset(s, 0, sizeof *s);
    s->type = type;
    return s;
}

static void add_copy(symmem_ce_step_t *out, int *k, symmem_ce_ref_t dst, symmem_ce_ref_t src, uint64_t bytes)
{
    if (bytes == 0) return;
    symmem_ce_step_t *s = add_step(out, k, SYMMEM_CE_COPY);
    s->dst = dst;
    s->src = src;
    s->bytes = bytes;
}

void symmem_ce_plan_start(symmem_ce_step_t *out)
{
    memset(out, 0, sizeof *out);
    out->type = SYMMEM_CE_KERNEL;
}

int symmem_ce_plan_round(const symmem_ce_call_t *c, uint64_t round, symmem_ce_step_t *out)
{
    const int n = c->n, r = c->rank;
    const int ar = c->kind == SYMMEM_COLL_ALL_REDUCE, rs = c->kind == SYMMEM_COLL_REDUCE_SCATTER;
    const uint64_t elem_size = c->elem_size,
                   off = round * c->segp * (16 / elem_size); /* element offset within every shard */
    const int last = round + 1 == c->rounds;
    const uint64_t gather0 = ar ? (uint64_t)n : 0; /* first gather unit */
    int k = 0;
    if (ar || rs) {
        /* reduce-scatter: segment of shard d of my input into slot r of rank d, pass p to rank r + p */
        for (int p = 1; p < n; p++) {
            const int d = (r + p) % n;
            add_copy(out, &k, ref(SYMMEM_CE_WS, d, unit_off(c, round, (uint64_t)r)),
                     ref(SYMMEM_CE_SEND, r, ((uint64_t)d * c->stride + off) * elem_size),
                     seg_len(c, d, off) * elem_size);
        }
        symmem_ce_step_t *kr = add_step(out, &k, SYMMEM_CE_KERNEL);
        kr->end_sync = rs && last;
        const uint64_t len = seg_len(c, r, off), mine = ((uint64_t)r * c->stride + off) * elem_size;
        if (len > 0) {
            symmem_ce_job_t *j = &kr->jobs[kr->njobs++];
            j->dst = ref(SYMMEM_CE_RECV, r, ar ? mine : off * elem_size);
            j->elems = len;
            j->nsrc = n;
            for (int q = 0; q < n; q++) /* rank order: the reduction order of every algorithm */
                j->src[q] =
                    q == r ? ref(SYMMEM_CE_SEND, r, mine) : ref(SYMMEM_CE_WS, r, unit_off(c, round, (uint64_t)q));
        }
        if (rs) return k;
    }
    /* all-gather: my segment (all-reduce: my reduced segment, now in my output) into gather slot r of rank d */
    const uint64_t mlen = seg_len(c, r, off);
    const symmem_ce_ref_t msrc = ar ? ref(SYMMEM_CE_RECV, r, ((uint64_t)r * c->stride + off) * elem_size)
                                    : ref(SYMMEM_CE_SEND, r, off * elem_size);
    for (int p = 1; p < n; p++) {
        const int d = (r + p) % n;
        add_copy(out, &k, ref(SYMMEM_CE_WS, d, unit_off(c, round, gather0 + (uint64_t)r)), msrc, mlen * elem_size);
    }
    symmem_ce_step_t *kg = add_step(out, &k, SYMMEM_CE_KERNEL);
    kg->end_sync = last;
    for (int s = 0; s < n; s++) {
        const uint64_t len = seg_len(c, s, off);
        if (len == 0 || (s == r && (ar || c->in_place))) continue; /* mine is in place already */
        symmem_ce_job_t *j = &kg->jobs[kg->njobs++];
        j->dst = ref(SYMMEM_CE_RECV, r, ((uint64_t)s * c->stride + off) * elem_size);
        j->elems = len;
        j->nsrc = 1;
        j->src[0] = s == r ? msrc : ref(SYMMEM_CE_WS, r, unit_off(c, round, gather0 + (uint64_t)s));
    }
    return k;
}
