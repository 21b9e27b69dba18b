/* The recommendation: what a communicator over all of this machine's GPUs (one rank each) would choose,
 * from the very function the communicator chooses with (choice.h, topo_choose), fed the facts the
 * communicator would see: the worst link of the pairs, and the ring figures where the init probe would
 * measure them. Then the same in words: push or pull, staged or not, where buffers live, the NUMA islands,
 * the algorithm table. Pure: part of the model. The tuning table (symmem-bench --tune) has the last word
 * per message size; this is the starting point. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmem/topo.h"
#include "topology/choice.h"
#include "topology/ranks.h"
#include "topology/topo_internal.h"

typedef struct advice_stats {
    int pairs, no_p2p, unknown_p2p, first_no_p2p_i, first_no_p2p_j;
    double ring_read, ring_write; /* the slowest GPU's; -1 unless every GPU has both */
} advice_stats_t;

static void gather(const topo_model_t *m, advice_stats_t *s)
{
    memset(s, 0, sizeof *s);
    s->ring_read = s->ring_write = -1;
    int ring = m->measured;
    for (int i = 0; i < m->ngpus; i++) {
        const symmem_topo_gpu_info_t *g = &m->gpus[i];
        ring &= g->ring_read_gbs > 0 && g->ring_write_gbs > 0;
        if (ring && (s->ring_read < 0 || g->ring_read_gbs < s->ring_read)) s->ring_read = g->ring_read_gbs;
        if (ring && (s->ring_write < 0 || g->ring_write_gbs < s->ring_write)) s->ring_write = g->ring_write_gbs;
        for (int j = 0; j < m->ngpus; j++) {
            const symmem_topo_pair_info_t *p = &m->pairs[i][j];
            if (i == j) continue;
            s->pairs++;
            if (p->p2p_access == 0 || p->data_check_failed) {
                if (s->no_p2p++ == 0) s->first_no_p2p_i = i, s->first_no_p2p_j = j;
            }
            s->unknown_p2p += p->p2p_access < 0;
        }
    }
    if (!ring) s->ring_read = s->ring_write = -1;
}

/* What the communicator's init sees: the link matrix as topo_rank_links would fill it, its worst link, and
 * the probe's figures only where SYMMEM_COLL_PROBE=auto measures. */
static void comm_facts(const topo_model_t *m, const advice_stats_t *s, topo_choice_facts_t *f)
{
    int32_t links[TOPO_MAX_GPUS * TOPO_MAX_GPUS] = {0}; /* only the ngpus x ngpus corner is read */
    memset(f, 0, sizeof *f); /* one rank per GPU, device memory, no probe barrier */
    for (int i = 0; i < m->ngpus; i++)
        for (int j = 0; j < m->ngpus; j++) links[i * TOPO_MAX_GPUS + j] = (int32_t)topo_model_pair_link(m, i, j);
    f->nranks = m->ngpus;
    f->link = topo_link_class(m->ngpus, links, TOPO_MAX_GPUS, s->no_p2p == 0);
    const int probed = topo_probe_useful(f->link) && s->ring_read > 0;
    f->read_gbs = probed ? s->ring_read : 0.0;
    f->write_gbs = probed ? s->ring_write : 0.0;
    f->ce_gbs = 0.0; /* symmem-topo's copy-engine figures are one pair at a time: the communicator's probe decides */
    /* the islands a communicator finds without SYMMEM_ISLANDS: each GPU's NUMA node */
    int numa[TOPO_MAX_GPUS];
    for (int i = 0; i < m->ngpus; i++) numa[i] = m->gpus[i].numa_node < 0 ? -1 : m->gpus[i].numa_node;
    topo_island_facts(m->ngpus, numa, f);
}

/* Islands: GPUs joined by any path better than SYS, numbered; returns the count. */
static int islands(const topo_model_t *m, int *island)
{
    int n = 0;
    for (int i = 0; i < m->ngpus; i++) island[i] = -1;
    for (int i = 0; i < m->ngpus; i++) {
        if (island[i] >= 0) continue;
        island[i] = n;
        for (int j = i + 1; j < m->ngpus; j++)
            if (island[j] < 0 && m->pairs[i][j].path != SYMMEM_TOPO_SYS) island[j] = n;
        n++;
    }
    return n;
}

static void add(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void add(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

static void why_direction(const topo_choice_facts_t *f, const topo_choice_t *c, const advice_stats_t *s, char *why,
                          size_t len)
{
    if (c->measured)
        topo_fmt(why, len, "measured: peer reads %.1f GB/s, peer writes %.1f GB/s (every GPU at once with its "
                           "successor, the slowest GPU): %s",
                 f->read_gbs, f->write_gbs,
                 c->prefer == TOPO_PREFER_PULL   ? "writes below 70% of reads, so pull"
                 : c->prefer == TOPO_PREFER_PUSH ? "reads below 70% of writes, so push"
                                                 : "no clear winner, so push (the cost model prices it with these figures)");
    else if (f->link == SYMMEM_LINK_HOST)
        topo_fmt(why, len, "some pair has no P2P: pushes through pinned host memory, where every access crosses "
                           "the GPU's link (the cost model's table)");
    else if (f->link == SYMMEM_LINK_PCIE)
        topo_fmt(why, len, "PCIe posted writes do not wait for a round trip, so pushes usually win; not measured, "
                           "and PCIe boxes differ up to 20x between reads and writes: run symmem-topo to measure "
                           "(a communicator measures at init)");
    else
        topo_fmt(why, len, "NVLink: stores go through NVLink better than loads (the cost model's defaults)%s",
                 s->ring_read > 0 ? "; measured figures decide on PCIe only" : "");
}

static void why_staged(const topo_choice_facts_t *f, const topo_choice_t *c, char *why, size_t len)
{
    if (c->staged)
        topo_fmt(why, len, "%d GPUs on PCIe: large all-reduces push as a permutation, every GPU one inbound and "
                           "one outbound peer per pass (all-to-all traffic contends at the root complex), and "
                           "move 2(n-1)/n of the message through each GPU against one-shot's n-1",
                 f->nranks);
    else if (topo_table_lookup(&c->table, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX) == SYMMEM_ALGO_ISLAND)
        topo_fmt(why, len, "%d NUMA islands: large all-reduces run the island schedule (reduce inside each island, "
                           "each partial over the socket link once), by the floors of bench/NOTES.md",
                 f->islands);
    else if (c->direction == SYMMEM_TOPO_PULL)
        topo_fmt(why, len, "pulls: every GPU loads what it needs itself");
    else if (f->link == SYMMEM_LINK_HOST)
        topo_fmt(why, len, "no P2P: through pinned host memory");
    else if (f->link == SYMMEM_LINK_PCIE)
        topo_fmt(why, len, "two GPUs on PCIe: one-shot push moves the same bytes as a permutation with one trip "
                           "instead of two syncs");
    else
        topo_fmt(why, len, "NVLink carries every pair at once");
}

static void describe_islands(topo_model_t *m, char *out, size_t len)
{
    int island[TOPO_MAX_GPUS];
    m->advice.islands = islands(m, island);
    out[0] = '\0';
    if (m->advice.islands <= 1) {
        add(out, len, "1 - no pair crosses the CPU sockets' link");
        return;
    }
    add(out, len, "%d (GPUs", m->advice.islands);
    for (int k = 0; k < m->advice.islands; k++) {
        add(out, len, "%s", k ? " |" : "");
        for (int i = 0; i < m->ngpus; i++)
            if (island[i] == k) add(out, len, " %d", i);
    }
    add(out, len, ") - reduce inside each NUMA node first, then cross the socket link once");
}

static void size_text(size_t b, char *out, size_t len)
{
    if (b >= ((size_t)1 << 20) && b % ((size_t)1 << 20) == 0) topo_fmt(out, len, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) topo_fmt(out, len, "%zu KiB", b >> 10);
    else topo_fmt(out, len, "%zu B", b);
}

/* "all_reduce up to 2 MiB oneshot_push, above twoshot_lamport" per op, as the table has it. */
static void describe_table(const topo_choice_t *c, char *out, size_t len)
{
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++) {
        add(out, len, "%-11s%-15s", k ? "" : "table:", symmem_coll_kind_name((symmem_coll_kind_t)k));
        int first = 1;
        for (int i = 0; i < c->table.nrules; i++) {
            const topo_rule_t *r = &c->table.rules[i];
            if (r->kind != k) continue;
            char sz[32];
            size_text(r->max_bytes, sz, sizeof sz);
            if (r->max_bytes == SIZE_MAX) add(out, len, "%s%s", first ? "" : ", above ", symmem_algo_name(r->algo));
            else add(out, len, "%sup to %s %s", first ? "" : ", ", sz, symmem_algo_name(r->algo));
            first = 0;
        }
        add(out, len, "\n");
    }
    char sz[32];
    size_text(c->fused_oneshot_max, sz, sizeof sz);
    if (c->fused_oneshot_max == SIZE_MAX) add(out, len, "%-11s%s at every size\n", "", "all_reduce_add_rmsnorm oneshot_push");
    else add(out, len, "%-11sall_reduce_add_rmsnorm up to %s oneshot_push, above twoshot_lamport\n", "", sz);
}

void topo_advice_build(topo_model_t *m)
{
    char dir_why[384], staged_why[256], isl[256];
    advice_stats_t s;
    memset(&m->advice, 0, sizeof m->advice);
    memset(&m->table, 0, sizeof m->table);
    m->advice.placement = SYMMEM_PLACEMENT_DEVICE;
    m->recommendation[0] = '\0';
    if (m->ngpus == 0) {
        topo_fmt(m->recommendation, sizeof m->recommendation, "no GPU found: nothing to recommend.\n");
        return;
    }
    if (m->ngpus == 1) {
        m->advice.islands = 1;
        topo_fmt(m->recommendation, sizeof m->recommendation, "one GPU: no peer traffic, nothing to choose.\n");
        return;
    }
    gather(m, &s);
    topo_choice_facts_t f;
    comm_facts(m, &s, &f);
    topo_choice_t c;
    topo_choose(&f, &c);
    m->advice.direction = c.direction;
    m->advice.staged = c.staged;
    m->advice.placement = c.placement;
    m->advice.measured = c.measured;
    m->table = c.table;
    why_direction(&f, &c, &s, dir_why, sizeof dir_why);
    why_staged(&f, &c, staged_why, sizeof staged_why);
    describe_islands(m, isl, sizeof isl);
    char *r = m->recommendation;
    size_t len = sizeof m->recommendation;
    add(r, len, "direction: %s - %s\n", c.direction == SYMMEM_TOPO_PUSH ? "push" : "pull", dir_why);
    add(r, len, "staged:    %s - %s\n", c.staged ? "yes" : "no", staged_why);
    if (c.placement == SYMMEM_PLACEMENT_HOST_NUMA)
        add(r, len, "placement: pinned host memory on each GPU's NUMA node - GPU %d cannot reach GPU %d directly "
                    "(%d of %d ordered pairs lack working P2P)\n",
            s.first_no_p2p_i, s.first_no_p2p_j, s.no_p2p, s.pairs);
    else if (s.unknown_p2p > 0)
        add(r, len, "placement: device memory - P2P support unknown (no GPU facts); symmem checks it at run time "
                    "and falls back to pinned host memory\n");
    else
        add(r, len, "placement: device memory - every pair reports P2P access\n");
    add(r, len, "islands:   %s\n", isl);
    describe_table(&c, r, len);
}
