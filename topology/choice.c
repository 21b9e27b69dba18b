/* The algorithm choice (see choice.h): the table, the push/pull rule, the built-in rules by link class and
 * rank count, and the fused call's one-shot/two-shot crossover. */
#include "topology/choice.h"

#include <string.h>

#include "base/hash.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* ---- the table ------------------------------------------------------------------------------------------ */
int topo_table_add(topo_table_t *t, int kind, size_t max_bytes, symmem_algo_t algo)
{
    int i = 0;
    for (; i < t->nrules; i++) {
        topo_rule_t *r = &t->rules[i];
        if (r->kind == kind && r->max_bytes == max_bytes) {
            r->algo = algo;
            return 0;
        }
        if (r->kind > kind || (r->kind == kind && r->max_bytes > max_bytes)) break;
    }
    if (t->nrules >= TOPO_TABLE_MAX_RULES) return -1;
    memmove(&t->rules[i + 1], &t->rules[i], (size_t)(t->nrules - i) * sizeof t->rules[0]);
    t->rules[i].kind = kind;
    t->rules[i].max_bytes = max_bytes;
    t->rules[i].algo = algo;
    t->nrules++;
    return 0;
}

symmem_algo_t topo_table_lookup(const topo_table_t *t, symmem_coll_kind_t kind, size_t bytes)
{
    symmem_algo_t last = SYMMEM_ALGO_AUTO;
    for (int i = 0; i < t->nrules; i++) {
        const topo_rule_t *r = &t->rules[i];
        if (r->kind != (int)kind) continue;
        if (bytes <= r->max_bytes) return r->algo;
        last = r->algo;
    }
    return last;
}

uint64_t topo_table_hash(const topo_table_t *t)
{
    uint64_t h = SYMMEM_FNV64_INIT;
    for (int i = 0; i < t->nrules; i++) {
        h = symmem_fnv64_u64(h, (uint64_t)t->rules[i].kind);
        h = symmem_fnv64_u64(h, (uint64_t)t->rules[i].max_bytes);
        h = symmem_fnv64_u64(h, (uint64_t)t->rules[i].algo);
    }
    return h;
}

/* ---- push or pull ----------------------------------------------------------------------------------------- */
topo_prefer_t topo_prefer_from_figures(double read_gbs, double write_gbs)
{
    /* NaN fails every comparison; infinities are not figures either */
    if (!(read_gbs > 0.0 && write_gbs > 0.0) || read_gbs > 1e300 || write_gbs > 1e300) return TOPO_PREFER_KEEP;
    if (write_gbs < TOPO_PREFER_MARGIN * read_gbs) return TOPO_PREFER_PULL;
    if (read_gbs < TOPO_PREFER_MARGIN * write_gbs) return TOPO_PREFER_PUSH;
    return TOPO_PREFER_KEEP;
}

const char *topo_prefer_name(topo_prefer_t prefer)
{
    switch (prefer) {
    case TOPO_PREFER_PULL: return "pull";
    case TOPO_PREFER_PUSH: return "push";
    default: return "the built-in defaults";
    }
}

int topo_probe_useful(symmem_link_t link) { return link == SYMMEM_LINK_PCIE; }

symmem_placement_t topo_choose_placement(symmem_link_t link)
{
    return link == SYMMEM_LINK_HOST || link == SYMMEM_LINK_NONE ? SYMMEM_PLACEMENT_HOST_NUMA
                                                                  : SYMMEM_PLACEMENT_DEVICE;
}

/* ---- the built-in rules ------------------------------------------------------------------------------------- */
/* Reasoning (docs/collectives.md; the measurements behind each bound are in bench/NOTES.md):
 *  - small messages: latency is the kernel launch plus one one-way trip, which only the Lamport one-shot
 *    push achieves (no flag round trip, no barrier);
 *  - large: two-shot (2(n-1)/n of the message into each GPU against one-shot's n-1), pushed: stores go
 *    through NVLink better than loads, and PCIe posted writes do not wait for a round trip;
 *  - PCIe: one-shot only while (n-1)*S is a few microseconds of wire, then the staged permutation, so that
 *    each GPU has one inbound and one outbound stream (root complexes collapse under all-to-all traffic);
 *  - no P2P (host memory): two-shot push, the fewest crossings of the host bus. */
static void rules_host(topo_table_t *t)
{
    topo_table_add(t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
    topo_table_add(t, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
    topo_table_add(t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
}

static void rules_pcie(topo_table_t *t, int n)
{
    topo_table_add(t, SYMMEM_COLL_ALL_REDUCE, n <= 4 ? 64 * KIB : 32 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
    topo_table_add(t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_STAGED);
    topo_table_add(t, SYMMEM_COLL_REDUCE_SCATTER, 64 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
    topo_table_add(t, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_STAGED);
    topo_table_add(t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_STAGED);
}

/* NVLink, or every rank on one GPU. Two ranks: one-shot and two-shot move the same bytes, so the Lamport
 * push (no sync at all) up to 2 MiB, then the Lamport two-shot (no sync either, half the bytes per step).
 * More ranks: one-shot moves (n-1)S per GPU against two-shot's 2(n-1)S/n, so two-shot takes over early: the
 * Lamport two-shot up to 4 MiB, two-shot push above. All-gather at two ranks: push while latency-bound, then
 * the two-shot push, then pull once the wire dominates. symmem-bench --tune measures the real machine. */
static void rules_nvlink(topo_table_t *t, int n)
{
    if (n <= 2) {
        topo_table_add(t, SYMMEM_COLL_ALL_REDUCE, 2 * MIB, SYMMEM_ALGO_ONESHOT_PUSH);
        topo_table_add(t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_LAMPORT);
    } else {
        topo_table_add(t, SYMMEM_COLL_ALL_REDUCE, n <= 4 ? 256 * KIB : 128 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
        topo_table_add(t, SYMMEM_COLL_ALL_REDUCE, 4 * MIB, SYMMEM_ALGO_TWOSHOT_LAMPORT);
        topo_table_add(t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
    }
    topo_table_add(t, SYMMEM_COLL_REDUCE_SCATTER, 256 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
    topo_table_add(t, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
    if (n <= 2) {
        topo_table_add(t, SYMMEM_COLL_ALL_GATHER, 256 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
        topo_table_add(t, SYMMEM_COLL_ALL_GATHER, 8 * MIB, SYMMEM_ALGO_TWOSHOT_PUSH);
        topo_table_add(t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_ONESHOT_PULL);
    } else {
        topo_table_add(t, SYMMEM_COLL_ALL_GATHER, 256 * KIB, SYMMEM_ALGO_ONESHOT_PULL);
        topo_table_add(t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
    }
}

/* Pull instead: one-shot push becomes one-shot pull, the two-shot pushes (staged and Lamport included)
 * two-shot pull, every op; the bounds stay. */
static void rules_to_pull(topo_table_t *t)
{
    for (int i = 0; i < t->nrules; i++) {
        topo_rule_t *r = &t->rules[i];
        if (r->algo == SYMMEM_ALGO_ONESHOT_PUSH) r->algo = SYMMEM_ALGO_ONESHOT_PULL;
        else if (r->algo == SYMMEM_ALGO_TWOSHOT_PUSH || r->algo == SYMMEM_ALGO_STAGED ||
                 r->algo == SYMMEM_ALGO_TWOSHOT_LAMPORT)
            r->algo = SYMMEM_ALGO_TWOSHOT_PULL;
    }
}

/* One-way latency x bandwidth per GPU of a link class, in bytes: the data a GPU could receive in the time
 * of one extra one-way trip, which is what two-shot pays over one-shot. NVLink (also ranks that share a
 * GPU): 1.3 us x 340 GB/s (symmem-topo on 2x H200: flag one-way latency, SM peer read/write). PCIe:
 * 1.0 us x 40 GB/s (posted write 0.63-1.36 us, SM stores 20-52 GB/s on published boxes). No P2P (pinned
 * host memory): 2.0 us x 20 GB/s. */
static uint64_t latency_bandwidth_bytes(symmem_link_t link)
{
    switch (link) {
    case SYMMEM_LINK_SELF:
    case SYMMEM_LINK_NVLINK: return 442000;
    case SYMMEM_LINK_PCIE: return 40000;
    default: return 40000;
    }
}

size_t topo_fused_crossover_bytes(int n, symmem_link_t link)
{
    if (n <= 2) return SIZE_MAX; /* two-shot moves the same bytes as one-shot there, one trip later */
    const uint64_t un = (uint64_t)n;
    return (size_t)(un * latency_bandwidth_bytes(link) / ((un - 1) * (un - 2)));
}

/* ---- the copy-engine two-shot ----------------------------------------------------------------------------------- */
static int figure_ok(double v) { return v > 0.0 && v <= 1e300; }

size_t topo_copy_engine_above_bytes(int n, int kind, double sm_gbs, double ce_gbs)
{
    if (n < 2 || !figure_ok(sm_gbs) || !figure_ok(ce_gbs) || !(sm_gbs < TOPO_PREFER_MARGIN * ce_gbs)) return SIZE_MAX;
    const double copies = kind == SYMMEM_COLL_ALL_REDUCE ? 2.0 * (n - 1) : (double)(n - 1);
    const double wire = copies / n;                       /* bytes through each GPU per byte of the message */
    const double saved_ns = wire * (1.0 / sm_gbs - 1.0 / ce_gbs); /* per byte (1 GB/s = 1 byte/ns) */
    const double cost_ns = copies * TOPO_CE_COPY_NS + 2.0 * TOPO_CE_SYNC_NS;
    const double s = cost_ns / saved_ns;
    size_t b = MIB;
    while ((double)b < s && b < ((size_t)1 << 40)) b *= 2;
    return b;
}

/* Messages of `kind` larger than `above` run `algo`; the table's rules up to `above` stand. */
static void table_above(topo_table_t *t, int kind, size_t above, symmem_algo_t algo)
{
    const symmem_algo_t below = topo_table_lookup(t, (symmem_coll_kind_t)kind, above);
    int w = 0;
    for (int i = 0; i < t->nrules; i++)
        if (t->rules[i].kind != kind || t->rules[i].max_bytes < above) t->rules[w++] = t->rules[i];
    t->nrules = w;
    topo_table_add(t, kind, above, below);
    topo_table_add(t, kind, SIZE_MAX, algo);
}

/* The copy-engine two-shot where the probe measured it faster (choice.h); c->copy_engine_above says from where. */
static void topo_copy_engine_rule(const topo_choice_facts_t *f, topo_choice_t *c)
{
    c->copy_engine_above = SIZE_MAX;
    if (f->link != SYMMEM_LINK_PCIE || !c->measured) return;
    const double sm = c->direction == SYMMEM_TOPO_PULL ? f->read_gbs : f->write_gbs;
    for (int k = SYMMEM_COLL_ALL_REDUCE; k <= SYMMEM_COLL_ALL_GATHER; k++) {
        const size_t above = topo_copy_engine_above_bytes(f->nranks, k, sm, f->ce_gbs);
        if (above == SIZE_MAX) continue;
        table_above(&c->table, k, above, SYMMEM_ALGO_COPY_ENGINE);
        if (k == SYMMEM_COLL_ALL_REDUCE) c->copy_engine_above = above;
    }
}

void topo_choose(const topo_choice_facts_t *f, topo_choice_t *c)
{
    memset(c, 0, sizeof *c);
    c->prefer = topo_prefer_from_figures(f->read_gbs, f->write_gbs);
    c->measured = f->read_gbs > 0.0 && f->write_gbs > 0.0 && f->read_gbs <= 1e300 && f->write_gbs <= 1e300;
    c->direction = c->prefer == TOPO_PREFER_PULL ? SYMMEM_TOPO_PULL : SYMMEM_TOPO_PUSH;
    c->placement = topo_choose_placement(f->link);
    if (f->link == SYMMEM_LINK_HOST || f->link == SYMMEM_LINK_NONE) rules_host(&c->table);
    else if (f->link == SYMMEM_LINK_PCIE) rules_pcie(&c->table, f->nranks);
    else rules_nvlink(&c->table, f->nranks);
    if (c->direction == SYMMEM_TOPO_PULL) rules_to_pull(&c->table);
    c->staged = topo_table_lookup(&c->table, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX) == SYMMEM_ALGO_STAGED;
    c->fused_oneshot_max = topo_fused_crossover_bytes(f->nranks, f->link);
    /* the copy-engine two-shot: above the SM schedule chosen so far (staged says what runs below it) */
    topo_copy_engine_rule(f, c);
}
