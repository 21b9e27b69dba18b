/* The recommendation: from the model's pairs (and measured figures when present), what symmem uses on this
 * box (pull or push, staged or not, where buffers live, NUMA islands) and why, in words. Pure: part of the
 * model. The collectives' tuning table has the last word per message size; this is the starting point. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmem/topo.h"
#include "topology/topo_internal.h"

/* The all-at-once figure below this fraction of the one-pair figure means the root complex collapses
 * under all-to-all traffic, so exchanges run as a permutation (one inbound, one outbound stream per GPU). */
#define COLLAPSE_FRACTION 0.6
/* A direction must win by this much to beat the default (a measurement's noise is a few percent). */
#define DIRECTION_MARGIN 1.10

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of the positive values, or -1 when there are none. */
static double median(double *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (v[i] > 0) v[k++] = v[i];
    if (k == 0) return -1;
    qsort(v, (size_t)k, sizeof *v, cmp_double);
    return k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2;
}

typedef struct advice_stats {
    int pairs, nvlink_pairs, no_p2p, unknown_p2p, first_no_p2p_i, first_no_p2p_j;
    double read, write, ring_read, ring_write; /* medians; -1 unmeasured */
} advice_stats_t;

static void gather(const topo_model_t *m, advice_stats_t *s)
{
    double rd[TOPO_MAX_GPUS * TOPO_MAX_GPUS], wr[TOPO_MAX_GPUS * TOPO_MAX_GPUS]; /* 16 KiB: fine on a stack */
    double rr[TOPO_MAX_GPUS], rw[TOPO_MAX_GPUS];
    memset(s, 0, sizeof *s);
    int k = 0;
    for (int i = 0; i < m->ngpus; i++) {
        rr[i] = m->gpus[i].ring_read_gbs;
        rw[i] = m->gpus[i].ring_write_gbs;
        for (int j = 0; j < m->ngpus; j++) {
            const symmem_topo_pair_info_t *p = &m->pairs[i][j];
            if (i == j) continue;
            s->pairs++;
            s->nvlink_pairs += p->path == SYMMEM_TOPO_NVLINK;
            if (p->p2p_access == 0 || p->data_check_failed) {
                if (s->no_p2p++ == 0) s->first_no_p2p_i = i, s->first_no_p2p_j = j;
            }
            s->unknown_p2p += p->p2p_access < 0;
            rd[k] = p->read_gbs;
            wr[k++] = p->write_gbs;
        }
    }
    s->read = median(rd, k);
    s->write = median(wr, k);
    s->ring_read = median(rr, m->ngpus);
    s->ring_write = median(rw, m->ngpus);
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

static void choose_direction(topo_model_t *model, const advice_stats_t *s, char *why, size_t len)
{
    if (s->read > 0 && s->write > 0) {
        model->advice.measured = 1;
        model->advice.direction = s->write > s->read * DIRECTION_MARGIN ? SYMMEM_TOPO_PUSH : SYMMEM_TOPO_PULL;
        topo_fmt(why, len, "measured: peer %s %.1f GB/s against %.1f GB/s for peer %s (median over pairs)",
                 model->advice.direction == SYMMEM_TOPO_PUSH ? "writes" : "reads",
                 model->advice.direction == SYMMEM_TOPO_PUSH ? s->write : s->read,
                 model->advice.direction == SYMMEM_TOPO_PUSH ? s->read : s->write,
                 model->advice.direction == SYMMEM_TOPO_PUSH ? "reads" : "writes");
    } else if (s->nvlink_pairs == s->pairs) {
        model->advice.direction = SYMMEM_TOPO_PULL;
        topo_fmt(why, len, "every pair is NVLink, where peer loads run near link speed (not measured)");
    } else {
        model->advice.direction = SYMMEM_TOPO_PUSH;
        topo_fmt(why, len, "PCIe posted writes do not wait for a round trip, so pushes usually win; not measured, "
                           "and PCIe boxes differ up to 20x between reads and writes: run symmem-topo to measure");
    }
}

static void choose_staged(topo_model_t *m, const advice_stats_t *s, char *why, size_t len)
{
    int push = m->advice.direction == SYMMEM_TOPO_PUSH;
    double one = push ? s->write : s->read, all = push ? s->ring_write : s->ring_read;
    m->advice.staged = 0;
    if (s->nvlink_pairs == s->pairs) {
        topo_fmt(why, len, "NVLink carries every pair at once");
    } else if (m->ngpus <= 2) {
        topo_fmt(why, len, "two GPUs: each direction has one peer");
    } else if (one > 0 && all > 0) {
        m->advice.staged = all < COLLAPSE_FRACTION * one;
        topo_fmt(why, len, "all GPUs at once measure %.1f GB/s each against %.1f GB/s one pair at a time%s", all, one,
                 m->advice.staged ? ": the root complex collapses under all-to-all traffic" : "");
    } else {
        m->advice.staged = 1;
        topo_fmt(why, len, "%d GPUs on PCIe: all-to-all traffic contends at the root complex, so each pass gives "
                           "every GPU one inbound and one outbound peer (not measured)", m->ngpus);
    }
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

void topo_advice_build(topo_model_t *m)
{
    char dir_why[256], staged_why[256], isl[256];
    advice_stats_t s;
    memset(&m->advice, 0, sizeof m->advice);
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
    choose_direction(m, &s, dir_why, sizeof dir_why);
    choose_staged(m, &s, staged_why, sizeof staged_why);
    describe_islands(m, isl, sizeof isl);
    char *r = m->recommendation;
    size_t len = sizeof m->recommendation;
    add(r, len, "direction: %s - %s\n", m->advice.direction == SYMMEM_TOPO_PUSH ? "push" : "pull", dir_why);
    add(r, len, "staged:    %s - %s\n", m->advice.staged ? "yes" : "no", staged_why);
    if (s.no_p2p > 0) {
        m->advice.placement = SYMMEM_PLACEMENT_HOST_NUMA;
        add(r, len, "placement: pinned host memory on each GPU's NUMA node - GPU %d cannot reach GPU %d directly "
                    "(%d of %d ordered pairs lack working P2P)\n",
            s.first_no_p2p_i, s.first_no_p2p_j, s.no_p2p, s.pairs);
    } else if (s.unknown_p2p > 0) {
        add(r, len, "placement: device memory - P2P support unknown (no GPU facts); symmem checks it at run time "
                    "and falls back to pinned host memory\n");
    } else {
        add(r, len, "placement: device memory - every pair reports P2P access\n");
    }
    add(r, len, "islands:   %s\n", isl);
}
