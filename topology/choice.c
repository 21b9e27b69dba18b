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
    /* Across islands its all-to-all passes carry up to max m_i(n - m_i)/n of the message over the link
     * between them, where the island schedule carries each byte once; the probe's figures (successor
     * copies) do not see that link's share, so the island schedule's rules stand. */
    if (f->islands > 1) return;
    const double sm = c->direction == SYMMEM_TOPO_PULL ? f->read_gbs : f->write_gbs;
    for (int k = SYMMEM_COLL_ALL_REDUCE; k <= SYMMEM_COLL_ALL_GATHER; k++) {
        const size_t above = topo_copy_engine_above_bytes(f->nranks, k, sm, f->ce_gbs);
        if (above == SIZE_MAX) continue;
        table_above(&c->table, k, above, SYMMEM_ALGO_COPY_ENGINE);
        if (k == SYMMEM_COLL_ALL_REDUCE) c->copy_engine_above = above;
    }
}

/* ---- the island rule ------------------------------------------------------------------------------------------ */
void topo_island_facts(int n, const int *key, topo_choice_facts_t *f)
{
    int first[SYMMEM_MAX_RANKS];
    f->islands = 0;
    memset(f->island_size, 0, sizeof f->island_size);
    for (int q = 0; q < n && q < SYMMEM_MAX_RANKS; q++) {
        int i = 0;
        while (i < f->islands && key[first[i]] != key[q]) i++;
        if (i == f->islands) first[f->islands++] = q;
        f->island_size[i]++;
    }
}

/* The floors' figures (ANCHORS.md, PCIe Gen5 boxes of the user story): a one-way trip across the CPU
 * sockets 1.3 us (flag latency across NUMA 1.27-1.36 us; every sync of ours waits for every rank, so for
 * the farthest one); SM stores into one GPU with several peers driven at once 25 GB/s (25.4 measured); the
 * link between two islands 40 GB/s per direction for all the pairs that cross it (P2P across NUMA 39-51 GB/s
 * for one pair: the link is taken as no wider than one pair). */
#define ISL_TRIP_US 1.3
#define ISL_GPU_BYTES_PER_US 25e3
#define ISL_LINK_BYTES_PER_US 40e3

static double max2(double a, double b) { return a > b ? a : b; }

/* Per operation of S bytes (as the table counts them: all-reduce the message, reduce-scatter and all-gather
 * the whole n-shard buffer) over n ranks in k islands of sizes m_i; m is the smallest island (its owners own
 * the most shards, its ranks receive the most foreign data), c = max m_i(n - m_i) (bench/NOTES.md, "Island
 * schedule: floors"):
 *  all-reduce      one-shot push: 1 trip, (n-1)S into each GPU, cS over the link into an island;
 *                  staged: 2 syncs, per phase (n-1)S/n and cS/n;
 *                  island: 3 syncs (2 with one island), 2(1-1/m)S and (k-1)S/m into a GPU, (k-1)S over the link;
 *  reduce-scatter  one-shot push and staged: 1 trip or sync, (n-1)S/n and cS/n;
 *                  island: 2 syncs, (1-1/m)S + (k-1)S/n into a GPU, (k-1)m_max S/n over the link;
 *  all-gather      one-shot push and staged (both the flag push): 1 sync, (n-1)S/n and cS/n;
 *                  island: 2 syncs, (n-1)S/n into a GPU, (n-m)S/n over the link (each shard crosses once). */
double topo_island_floor_us(const topo_choice_facts_t *f, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes)
{
    const double S = (double)bytes, n = f->nranks, B = ISL_GPU_BYTES_PER_US, X = ISL_LINK_BYTES_PER_US;
    const double L = ISL_TRIP_US;
    const int k = f->islands > 1 ? f->islands : 1;
    double c = 0, m = n, mmax = n;
    if (k > 1) {
        mmax = 0;
        for (int i = 0; i < k; i++) {
            const double mi = f->island_size[i];
            c = max2(c, mi * (n - mi));
            if (mi < m) m = mi;
            mmax = max2(mmax, mi);
        }
    }
    const double per_gpu = (n - 1) * S / (n * B), link = c * S / (n * X); /* one all-to-all phase */
    if (algo != SYMMEM_ALGO_ONESHOT_PUSH && algo != SYMMEM_ALGO_STAGED && algo != SYMMEM_ALGO_ISLAND) return -1;
    switch (kind) {
    case SYMMEM_COLL_ALL_REDUCE:
        if (algo == SYMMEM_ALGO_ONESHOT_PUSH) return L + max2((n - 1) * S / B, c * S / X);
        if (algo == SYMMEM_ALGO_STAGED) return 2 * L + 2 * max2(per_gpu, link);
        if (k == 1) return 2 * L + 2 * (1 - 1 / n) * S / B;
        return 3 * L + 2 * (1 - 1 / m) * S / B + max2((k - 1) * S / (m * B), (k - 1) * S / X);
    case SYMMEM_COLL_REDUCE_SCATTER:
        if (algo != SYMMEM_ALGO_ISLAND) return L + max2(per_gpu, link);
        if (k == 1) return L + (1 - 1 / n) * S / B;
        return 2 * L + (1 - 1 / m) * S / B + max2((k - 1) * S / (n * B), (k - 1) * mmax * S / (n * X));
    case SYMMEM_COLL_ALL_GATHER:
        if (algo != SYMMEM_ALGO_ISLAND) return L + max2(per_gpu, link);
        if (k == 1) return L + per_gpu;
        return 2 * L + max2(per_gpu, (n - m) * S / (n * X));
    default: return -1;
    }
}

/* The least floor at `bytes`; a tie keeps what the rules before (`base`) say: the floors see bytes and
 * syncs, not what the PCIe rules weighed beyond them (root complexes under all-to-all traffic). */
static symmem_algo_t floor_best(const topo_choice_facts_t *f, const topo_table_t *base, symmem_coll_kind_t kind,
                                size_t bytes)
{
    static const symmem_algo_t cand[3] = {SYMMEM_ALGO_ONESHOT_PUSH, SYMMEM_ALGO_STAGED, SYMMEM_ALGO_ISLAND};
    symmem_algo_t best = topo_table_lookup(base, kind, bytes);
    double least = topo_island_floor_us(f, kind, best, bytes);
    if (least < 0) best = cand[0], least = topo_island_floor_us(f, kind, best, bytes);
    for (int i = 0; i < 3; i++) {
        const double v = topo_island_floor_us(f, kind, cand[i], bytes);
        if (v < least) best = cand[i], least = v;
    }
    return best;
}

/* PCIe with two or more islands, pushing: each operation's rules become the least floor of one-shot push,
 * staged and island at every size from 1 KiB to 1 GiB, the bounds at the changes (found by bisection inside
 * steps of 1/16, rounded down to a KiB), the last rule for every larger size. */
static void rules_islands(topo_table_t *t, const topo_choice_facts_t *f)
{
    if (f->link != SYMMEM_LINK_PCIE || f->islands < 2 || f->nranks < 3 || f->nranks > SYMMEM_MAX_RANKS) return;
    const topo_table_t base = *t;
    t->nrules = 0;
    for (int kind = 0; kind <= SYMMEM_COLL_ALL_GATHER; kind++) {
        const symmem_coll_kind_t kd = (symmem_coll_kind_t)kind;
        size_t lo = KIB;
        symmem_algo_t cur = floor_best(f, &base, kd, lo);
        for (size_t hi = lo + lo / 16; lo < ((size_t)1 << 30); lo = hi, hi += hi / 16) {
            const symmem_algo_t next = floor_best(f, &base, kd, hi);
            if (next == cur) continue;
            size_t a = lo, b = hi; /* best(a) == cur, best(b) != cur */
            while (b - a > 1) {
                const size_t mid = a + (b - a) / 2;
                if (floor_best(f, &base, kd, mid) == cur) a = mid;
                else b = mid;
            }
            if (a / KIB * KIB > 0) topo_table_add(t, kind, a / KIB * KIB, cur);
            cur = next;
        }
        topo_table_add(t, kind, SIZE_MAX, cur);
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
    else rules_islands(&c->table, f); /* the island schedule pushes */
    c->staged = topo_table_lookup(&c->table, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX) == SYMMEM_ALGO_STAGED;
    c->fused_oneshot_max = topo_fused_crossover_bytes(f->nranks, f->link);
    /* the copy-engine two-shot: above the SM schedule chosen so far (staged says what runs below it) */
    topo_copy_engine_rule(f, c);
}
