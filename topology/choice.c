/* The algorithm choice (see choice.h): the table, the push/pull rule, the built-in table as the cost model's
 * output (cost.h) with its default figures, the island and copy-engine rules, and the fused call's
 * one-shot/two-shot crossover. */
#include "topology/choice.h"

#include <string.h>

#include "base/hash.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

/* ---- the table ------------------------------------------------------------------------------------------ */
int topo_table_add_form(topo_table_t *t, int kind, int form, size_t max_bytes, symmem_algo_t algo)
{
    int i = 0;
    for (; i < t->nrules; i++) {
        topo_rule_t *r = &t->rules[i];
        if (r->kind == kind && r->form == form && r->max_bytes == max_bytes) {
            r->algo = algo;
            return 0;
        }
        if (r->kind > kind || (r->kind == kind && (r->form > form || (r->form == form && r->max_bytes > max_bytes))))
            break;
    }
    if (t->nrules >= TOPO_TABLE_MAX_RULES) return -1;
    memmove(&t->rules[i + 1], &t->rules[i], (size_t)(t->nrules - i) * sizeof t->rules[0]);
    t->rules[i].kind = kind;
    t->rules[i].form = form;
    t->rules[i].max_bytes = max_bytes;
    t->rules[i].algo = algo;
    t->nrules++;
    return 0;
}

int topo_table_add(topo_table_t *t, int kind, size_t max_bytes, symmem_algo_t algo)
{
    return topo_table_add_form(t, kind, TOPO_FORM_ANY, max_bytes, algo);
}

int topo_table_has_form(const topo_table_t *t, symmem_coll_kind_t kind, int form)
{
    for (int i = 0; i < t->nrules; i++)
        if (t->rules[i].kind == (int)kind && t->rules[i].form == form) return 1;
    return 0;
}

static symmem_algo_t lookup_exact(const topo_table_t *t, symmem_coll_kind_t kind, int form, size_t bytes)
{
    symmem_algo_t last = SYMMEM_ALGO_AUTO;
    for (int i = 0; i < t->nrules; i++) {
        const topo_rule_t *r = &t->rules[i];
        if (r->kind != (int)kind || r->form != form) continue;
        if (bytes <= r->max_bytes) return r->algo;
        last = r->algo;
    }
    return last;
}

symmem_algo_t topo_table_lookup_form(const topo_table_t *t, symmem_coll_kind_t kind, int form, size_t bytes)
{
    const symmem_algo_t a = lookup_exact(t, kind, form, bytes);
    return a != SYMMEM_ALGO_AUTO || form == TOPO_FORM_ANY ? a : lookup_exact(t, kind, TOPO_FORM_ANY, bytes);
}

symmem_algo_t topo_table_lookup(const topo_table_t *t, symmem_coll_kind_t kind, size_t bytes)
{
    return lookup_exact(t, kind, TOPO_FORM_ANY, bytes);
}

uint64_t topo_table_hash(const topo_table_t *t)
{
    uint64_t h = SYMMEM_FNV64_INIT;
    for (int i = 0; i < t->nrules; i++) {
        h = symmem_fnv64_u64(h, (uint64_t)t->rules[i].kind);
        h = symmem_fnv64_u64(h, (uint64_t)(int64_t)t->rules[i].form);
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

/* ---- the built-in table: the cost model's output ------------------------------------------------------------ */
/* The figures the model prices with where nothing was measured, per GPU link and direction (divided among
 * the ranks that share a GPU); the probe's figures replace them where it measured (bench/NOTES.md, "The cost
 * model", has the sources):
 *  - NVLink: stores 340 GB/s, loads 300 GB/s (the ring probe on 2x H200: 331-335 and 307 GB/s), a one-way
 *    trip 1.3 us (symmem-topo's flag latency there);
 *  - PCIe, device memory: 25 GB/s each way with every peer driven at once (25.4 GB/s on the boxes of
 *    ANCHORS.md), a trip 1.0 us (posted writes 0.63-1.36 us), 1.3 us across sockets (a sync waits for the
 *    farthest rank);
 *  - every rank on one GPU, device memory: the GPU's own memory, 1500 GB/s of SM copies, a trip 0.8 us
 *    (a store and a poll through L2);
 *  - host memory (SYMMEM_PLACEMENT=host_numa, or no P2P): the GPU's PCIe link, 25 GB/s each way (Gen4 x16;
 *    Gen5 in the lab: 50.8 / 52.3 GB/s), loads and stores at once taking turns half of the time (duplex
 *    0.5), a trip 2.0 us (a posted write, then the poll's read round trip: 1.44 us host latency measured
 *    by symmem-topo);
 *  - a rank's own passes over device memory 4000 GB/s per GPU (fitted on 2x H200: one-shot push against the
 *    Lamport two-shot at 1-4 MiB); a kernel among back-to-back ones 1.6 us (a 1 KiB all-reduce replayed in
 *    a graph takes 2.9 us with its 1.3 us trip); a flag sync one trip more than an arrival (its release
 *    fence: sync_us = trip_us); a copy-engine copy TOPO_CE_COPY_NS; the link into an island 40 GB/s
 *    (ISL_LINK_BYTES_PER_US). */
#define DEF_NVLINK_WRITE 340.0
#define DEF_NVLINK_READ 300.0
#define DEF_NVLINK_TRIP 1.3
#define DEF_PCIE_GBS 25.0
#define DEF_PCIE_TRIP 1.0
#define DEF_SAME_GPU_GBS 1500.0
#define DEF_SAME_GPU_TRIP 0.8
#define DEF_HOST_GBS 25.0
#define DEF_HOST_DUPLEX 0.5
#define DEF_HOST_TRIP 2.0
#define DEF_LOCAL_GBS 4000.0
#define DEF_KERNEL_US 1.6
/* The island floors' figures (below): a trip across the sockets, SM stores into one GPU with its peers
 * driven at once, the link into an island. */
#define ISL_TRIP_US 1.3
#define ISL_GPU_BYTES_PER_US 25e3
#define ISL_LINK_BYTES_PER_US 40e3

static int figure_ok(double v) { return v > 0.0 && v <= 1e300; }

/* The duplex factor from a copy that loads and stores at once (rw GB/s, each byte loaded and stored): one
 * byte takes 1/rw; with full overlap it would take max(1/W, 1/R), taking turns 1/W + 1/R. */
static double duplex_from(double rd, double wr, double rw)
{
    const double full = 1.0 / (rd < wr ? rd : wr), half = 1.0 / rd + 1.0 / wr, got = 1.0 / rw;
    const double d = (half - got) / (half - full);
    return d < 0 ? 0 : d > 1 ? 1 : d;
}

/* Symmetric memory in pinned host memory: asked for, or no P2P between some pair. */
static int facts_host_memory(const topo_choice_facts_t *f)
{
    return f->host_memory || f->link == SYMMEM_LINK_HOST || f->link == SYMMEM_LINK_NONE;
}

/* Every rank on one GPU, in its device memory: peers' loads and stores are that GPU's own memory. */
static int facts_one_gpu_device(const topo_choice_facts_t *f)
{
    return !facts_host_memory(f) && f->ranks_per_gpu >= f->nranks;
}

void topo_choice_machine(const topo_choice_facts_t *f, topo_cost_machine_t *m)
{
    memset(m, 0, sizeof *m);
    const int n = f->nranks, rpg = f->ranks_per_gpu > 1 ? f->ranks_per_gpu : 1;
    m->nranks = n;
    m->host_memory = facts_host_memory(f);
    m->ranks_per_link = rpg;
    m->duplex = 1.0;
    double wr, rd;
    if (m->host_memory) {
        wr = rd = DEF_HOST_GBS;
        m->duplex = DEF_HOST_DUPLEX;
        m->trip_us = DEF_HOST_TRIP;
    } else if (rpg >= n) {
        wr = rd = DEF_SAME_GPU_GBS;
        m->trip_us = DEF_SAME_GPU_TRIP;
    } else if (f->link == SYMMEM_LINK_PCIE) {
        wr = rd = DEF_PCIE_GBS;
        m->trip_us = f->islands > 1 ? ISL_TRIP_US : DEF_PCIE_TRIP;
    } else {
        wr = DEF_NVLINK_WRITE;
        rd = DEF_NVLINK_READ;
        m->trip_us = DEF_NVLINK_TRIP;
    }
    m->write_gbs = wr / rpg;
    m->read_gbs = rd / rpg;
    m->local_gbs = DEF_LOCAL_GBS / rpg;
    m->kernel_us = DEF_KERNEL_US;
    m->sync_us = m->trip_us;
    m->ce_copy_us = TOPO_CE_COPY_NS * 1e-3;
    m->socket_gbs = ISL_LINK_BYTES_PER_US * 1e-3;
    m->islands = f->islands;
    memcpy(m->island_size, f->island_size, sizeof m->island_size);
    /* the probe's figures are per rank with every rank at once already */
    if (figure_ok(f->read_gbs) && figure_ok(f->write_gbs)) {
        m->read_gbs = f->read_gbs;
        m->write_gbs = f->write_gbs;
        if (figure_ok(f->rw_gbs)) m->duplex = duplex_from(f->read_gbs, f->write_gbs, f->rw_gbs);
    }
    if (figure_ok(f->ce_gbs)) m->ce_gbs = f->ce_gbs;
    if (figure_ok(f->barrier_us)) {
        const double k = f->barrier_us - m->trip_us - m->sync_us;
        m->kernel_us = k > 0.3 ? k : 0.3;
    }
}

void topo_choice_candidates(const topo_choice_facts_t *f, topo_prefer_t prefer, symmem_coll_kind_t kind,
                            topo_cost_candidates_t *out)
{
    const int pcie = f->link == SYMMEM_LINK_PCIE && !f->host_memory;
    out->n = 0;
    if (prefer == TOPO_PREFER_PULL) {
        out->algo[out->n++] = SYMMEM_ALGO_ONESHOT_PULL;
        out->algo[out->n++] = SYMMEM_ALGO_TWOSHOT_PULL;
        return;
    }
    /* all-gather: the push algorithms but staged run one flag push, listed first so the table names
     * the two-shot (or staged) schedule */
    if (kind == SYMMEM_COLL_ALL_GATHER) {
        out->algo[out->n++] = pcie ? SYMMEM_ALGO_STAGED : SYMMEM_ALGO_TWOSHOT_PUSH;
        if (!pcie) out->algo[out->n++] = SYMMEM_ALGO_STAGED;
        return;
    }
    out->algo[out->n++] = SYMMEM_ALGO_ONESHOT_PUSH;
    if (!pcie) out->algo[out->n++] = SYMMEM_ALGO_TWOSHOT_LAMPORT;
    out->algo[out->n++] = pcie ? SYMMEM_ALGO_STAGED : SYMMEM_ALGO_TWOSHOT_PUSH;
    /* Every rank on one GPU, device memory: a peer's load and store are the GPU's own memory either way, so no
     * direction is preferred and the probe, which would say, does not run there. The two-shot pull is priced
     * beside the pushes: forced on such ranks it beat the Lamport two-shot from 2 MiB on, by up to 2.3x at 4
     * MiB, which the built-in table otherwise keeps above the autotune's range (bench/NOTES.md, "Above the
     * autotune's range on one GPU"). */
    if (kind == SYMMEM_COLL_ALL_REDUCE && f->nranks > 1 && facts_one_gpu_device(f))
        out->algo[out->n++] = SYMMEM_ALGO_TWOSHOT_PULL;
}

/* Every op's rules: the least predicted time among the candidates at every size (topo_cost_rules). */
static void rules_model(topo_table_t *t, const topo_choice_facts_t *f, topo_prefer_t prefer)
{
    topo_cost_machine_t m;
    topo_choice_machine(f, &m);
    for (int k = 0; k <= SYMMEM_COLL_ALL_GATHER; k++) {
        topo_cost_candidates_t c;
        topo_choice_candidates(f, prefer, (symmem_coll_kind_t)k, &c);
        size_t max_bytes[TOPO_TABLE_MAX_RULES / 3];
        symmem_algo_t algo[TOPO_TABLE_MAX_RULES / 3];
        const int nr = topo_cost_rules(&m, (symmem_coll_kind_t)k, &c, topo_cost_us, max_bytes, algo,
                                       TOPO_TABLE_MAX_RULES / 3);
        for (int i = 0; i < nr; i++) topo_table_add(t, k, max_bytes[i], algo[i]);
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
    if (f->link != SYMMEM_LINK_PCIE || f->host_memory || !c->measured) return;
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

/* The island floors (bench/NOTES.md, "Island schedule: floors"): the cost model's floor (topo_cost_floor_us:
 * links and trips, no fixed costs) on the machine of the floors' figures (ANCHORS.md, PCIe Gen5 boxes of
 * the user story): a one-way trip across the CPU sockets 1.3 us (flag latency across NUMA 1.27-1.36 us;
 * every sync of ours waits for every rank, so for the farthest one); SM stores into one GPU with several
 * peers driven at once 25 GB/s (25.4 measured); the link between two islands 40 GB/s per direction for all
 * the pairs that cross it (P2P across NUMA 39-51 GB/s for one pair: the link is taken as no wider than one
 * pair). Per operation of S bytes over n ranks in k islands of sizes m_i (m the smallest, c = max
 * m_i(n - m_i)) that gives:
 *  all-reduce      one-shot push: 1 trip, (n-1)S into each GPU, cS over the link into an island;
 *                  staged: 2 syncs, per phase (n-1)S/n and cS/n;
 *                  island: 3 syncs (2 with one island), 2(1-1/m)S and (k-1)S/m into a GPU, (k-1)S over the link;
 *  reduce-scatter  one-shot push and staged: 1 trip or sync, (n-1)S/n and cS/n;
 *                  island: 2 syncs, (1-1/m)S + (k-1)S/n into a GPU, (k-1)m_max S/n over the link;
 *  all-gather      one-shot push and staged (both the flag push): 1 sync, (n-1)S/n and cS/n;
 *                  island: 2 syncs, (n-1)S/n into a GPU, (n-m)S/n over the link (each shard crosses once). */
double topo_island_floor_us(const topo_choice_facts_t *f, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes)
{
    if (algo != SYMMEM_ALGO_ONESHOT_PUSH && algo != SYMMEM_ALGO_STAGED && algo != SYMMEM_ALGO_ISLAND) return -1;
    topo_cost_machine_t m;
    memset(&m, 0, sizeof m);
    m.nranks = f->nranks;
    m.ranks_per_link = 1;
    m.write_gbs = m.read_gbs = ISL_GPU_BYTES_PER_US * 1e-3;
    m.duplex = 1.0;
    m.trip_us = ISL_TRIP_US;
    m.socket_gbs = ISL_LINK_BYTES_PER_US * 1e-3;
    m.islands = f->islands;
    memcpy(m.island_size, f->island_size, sizeof m.island_size);
    return topo_cost_floor_us(&m, kind, algo, bytes);
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
    rules_model(&c->table, f, c->prefer);
    if (c->direction == SYMMEM_TOPO_PUSH && !f->host_memory) rules_islands(&c->table, f); /* the island schedule pushes */
    c->staged = topo_table_lookup(&c->table, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX) == SYMMEM_ALGO_STAGED;
    c->fused_oneshot_max = topo_fused_crossover_bytes(f->nranks, f->link);
    /* the copy-engine two-shot: above the SM schedule chosen so far (staged says what runs below it) */
    topo_copy_engine_rule(f, c);
}

/* ---- where a framework hands all-reduces to its other backend ------------------------------------------------- */

/* NVLink (and ranks sharing a GPU): symmem took 0.47-0.80x NCCL's time from 1 KiB to 64 MiB on 2x H200
 * (bench/NOTES.md, "Conclusions"), so it keeps every size its workspace takes. PCIe and pinned host memory have no
 * measurement against NCCL yet: the bounds cover decode and speculative-verify messages (12-112 KiB at TP8,
 * hidden 6144) with room and leave prefill-sized ones to NCCL's ring, which uses the link's bandwidth well
 * there; host memory halves it, every access crossing the GPU's link both ways. A framework's own setting
 * (SYMMEM_SGLANG_MAX_BYTES, SYMMEM_VLLM_MAX_BYTES) replaces the bound where a run measured better. */
size_t topo_handoff_bytes(symmem_link_t link)
{
    switch (link) {
    case SYMMEM_LINK_SELF:
    case SYMMEM_LINK_NVLINK: return SIZE_MAX;
    case SYMMEM_LINK_PCIE: return 512 * KIB;
    case SYMMEM_LINK_HOST: return 256 * KIB;
    default: return 0; /* the host backend has no collectives */
    }
}
