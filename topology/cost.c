/* The cost model (see cost.h): each algorithm's crossings and bytes, read off its kernels (the file named
 * at each flow), and their price on a machine. */
#include "topology/cost.h"

#include <string.h>

#define KIB ((size_t)1 << 10)

/* ---- flows -------------------------------------------------------------------------------------------------- */
/* Per rank, per byte of S; n ranks, f = (n-1)/n (the peers' share of a sharded buffer), a = 1/n (one shard).
 * The user's input and output are in the rank's own symmetric memory (lr/lw). */
typedef struct flow_args {
    double n, f, a;
    int k;        /* islands (1: none) */
    double m, mx; /* smallest, largest island */
    size_t bytes;
} flow_args_t;

static topo_cost_phase_t ph(double rw, double rr, double ce, double lw, double lr)
{
    topo_cost_phase_t p = {rw, rr, ce, lw, lr, 0.0, 0.0, 0};
    return p;
}

/* A Lamport phase: lp of the rank's slots polled and cleared besides its other accesses. */
static topo_cost_phase_t ph_lam(double rw, double lw, double lr, double lp)
{
    topo_cost_phase_t p = {rw, 0.0, 0.0, lw, lr, lp, 0.0, 0};
    return p;
}

static topo_cost_phase_t ph_sock(double rw, double lw, double lr, double sock)
{
    topo_cost_phase_t p = {rw, 0.0, 0.0, lw, lr, 0.0, sock, 1};
    return p;
}

static void set(topo_cost_flow_t *o, double trips, double syncs, double kernels, double copies)
{
    o->trips = trips;
    o->syncs = syncs;
    o->kernels = kernels;
    o->copies = copies;
}

static void add(topo_cost_flow_t *o, topo_cost_phase_t p) { o->ph[o->nphases++] = p; }

/* All-reduce of S. */
static int flow_all_reduce(const flow_args_t *x, symmem_algo_t algo, topo_cost_flow_t *o)
{
    const double n = x->n, f = x->f, a = x->a;
    switch (algo) {
    case SYMMEM_ALGO_ONESHOT_PUSH:
        /* lamport.cu, run_lamport: the whole message into every peer's slot (input read once to push, once
         * to reduce), n-1 slots polled and cleared, the output written; one Lamport arrival */
        add(o, ph_lam(n - 1, 1, 2, n - 1));
        set(o, 1, 0, 1, 0);
        return 0;
    case SYMMEM_ALGO_TWOSHOT_LAMPORT:
        /* lamport.cu, run_lamport_two: shards to their owners (polled, cleared), reduced, the result to
         * every peer's gather slot (polled, cleared) and into the output; two arrivals, no flag */
        add(o, ph_lam(f, 0, f + a, f));
        add(o, ph_lam(f, 1, 0, f));
        set(o, 2, 0, 1, 0);
        return 0;
    case SYMMEM_ALGO_TWOSHOT_PUSH:
        /* push.cu, run_push with zero copy out: shards into the owners' slots; sync A; my shard reduced
         * from my input and the slots, stored into every rank's output; sync B */
        add(o, ph(f, 0, 0, 0, f));
        add(o, ph(f, 0, 0, a, f + a));
        set(o, 2, 2, 1, 0);
        return 0;
    case SYMMEM_ALGO_STAGED:
        /* push.cu, push_staged: as two-shot push, the result staged in my gather area and read back once
         * per pass (one peer per pass) */
        add(o, ph(f, 0, 0, 0, f));
        add(o, ph(f, 0, 0, a + a, f + a + f));
        set(o, 2, 2, 1, 0);
        return 0;
    case SYMMEM_ALGO_ONESHOT_PULL:
        /* pull.cu, run_pull: below the zero-copy size the input is copied into my staging first; then
         * every rank reads every shard of every rank; reading in place costs the end sync instead */
        if (x->bytes < SYMMEM_COLL_ZC_MIN_BYTES) {
            add(o, ph(0, 0, 0, 1, 1));
            add(o, ph(0, n - 1, 0, 1, 1));
            set(o, 1, 1, 1, 0);
        } else {
            add(o, ph(0, n - 1, 0, 1, 1));
            set(o, 2, 2, 1, 0);
        }
        return 0;
    case SYMMEM_ALGO_TWOSHOT_PULL:
        /* pull.cu, zero copy both ways: my shard read from every rank's input, stored into every rank's
         * output, between two syncs */
        add(o, ph(f, f, 0, a, a));
        set(o, 2, 2, 1, 0);
        return 0;
    case SYMMEM_ALGO_COPY_ENGINE:
        /* copy_engine.h: start sync; shards copied to their owners; sync, reduce, the result copied to
         * every peer; sync, gather into the output; the last sync. Three kernels, 2(n-1) copies. */
        add(o, ph(0, 0, f, 0, f));
        add(o, ph(0, 0, f, a, f + a + f));
        add(o, ph(0, 0, 0, f, f));
        set(o, 4, 4, 3, 2 * (n - 1));
        return 0;
    case SYMMEM_ALGO_ISLAND:
        /* island.h: one island is a two-shot; k islands reduce inside each (2(1-1/m) of S into each GPU),
         * exchange the island partials over the link ((k-1)S), gather inside; three syncs */
        if (x->k <= 1) {
            add(o, ph(f, 0, 0, 0, f));
            add(o, ph(f, 0, 0, a + f, f + a + f));
            set(o, 2, 2, 1, 0);
        } else {
            add(o, ph_sock(2 * (1 - 1 / x->m), f, 1 + f, 0.0));
            add(o, ph_sock((x->k - 1) / x->m, 1, (x->k - 1) / x->m, x->k - 1));
            set(o, 3, 3, 1, 0);
        }
        return 0;
    default: return -1;
    }
}

/* Reduce-scatter of S (n shards; my output one shard). */
static int flow_reduce_scatter(const flow_args_t *x, symmem_algo_t algo, topo_cost_flow_t *o)
{
    const double f = x->f, a = x->a;
    switch (algo) {
    case SYMMEM_ALGO_ONESHOT_PUSH:
    case SYMMEM_ALGO_TWOSHOT_LAMPORT:
        /* lamport.cu, run_lamport (rs): shard d into rank d's slot; my slots polled, cleared, reduced */
        add(o, ph_lam(f, a, f + a, f));
        set(o, 1, 0, 1, 0);
        return 0;
    case SYMMEM_ALGO_TWOSHOT_PUSH:
    case SYMMEM_ALGO_STAGED:
        /* push.cu: shards into the owners' slots; sync A; my shard reduced into my output */
        add(o, ph(f, 0, 0, 0, f));
        add(o, ph(0, 0, 0, a, f + a));
        set(o, 1, 1, 1, 0);
        return 0;
    case SYMMEM_ALGO_ONESHOT_PULL:
    case SYMMEM_ALGO_TWOSHOT_PULL:
        /* pull.cu: my input into my staging (below the zero-copy size), sync, my shard from every rank */
        if (x->bytes < SYMMEM_COLL_ZC_MIN_BYTES) {
            add(o, ph(0, 0, 0, 1, 1));
            add(o, ph(0, f, 0, a, a));
            set(o, 1, 1, 1, 0);
        } else {
            add(o, ph(0, f, 0, a, a));
            set(o, 2, 2, 1, 0);
        }
        return 0;
    case SYMMEM_ALGO_COPY_ENGINE:
        add(o, ph(0, 0, f, 0, f));
        add(o, ph(0, 0, 0, a, f + a));
        set(o, 3, 3, 2, x->n - 1);
        return 0;
    case SYMMEM_ALGO_ISLAND:
        if (x->k <= 1) {
            add(o, ph(f, 0, 0, 0, f));
            add(o, ph(0, 0, 0, a, f + a));
            set(o, 1, 1, 1, 0);
        } else {
            add(o, ph_sock(1 - 1 / x->m, 1 - 1 / x->m, 1, 0.0));
            add(o, ph_sock((x->k - 1) / x->n, a, (x->k - 1) / x->n, (x->k - 1) * x->mx / x->n));
            set(o, 2, 2, 1, 0);
        }
        return 0;
    default: return -1;
    }
}

/* All-gather of S (n shards; my input one shard). */
static int flow_all_gather(const flow_args_t *x, symmem_algo_t algo, topo_cost_flow_t *o)
{
    const double f = x->f, a = x->a;
    switch (algo) {
    case SYMMEM_ALGO_ONESHOT_PUSH:
    case SYMMEM_ALGO_TWOSHOT_PUSH:
    case SYMMEM_ALGO_TWOSHOT_LAMPORT:
    case SYMMEM_ALGO_STAGED:
        /* push.cu, push_inputs (ag): my shard into every peer's gather slot and my output (staged: read
         * once per pass); sync; the peers' shards into my output */
        add(o, ph(f, 0, 0, a, algo == SYMMEM_ALGO_STAGED ? a + f : a));
        add(o, ph(0, 0, 0, f, f));
        set(o, 1, 1, 1, 0);
        return 0;
    case SYMMEM_ALGO_ONESHOT_PULL:
    case SYMMEM_ALGO_TWOSHOT_PULL:
        if ((double)x->bytes * a < (double)SYMMEM_COLL_ZC_MIN_BYTES) { /* the input is one shard */
            add(o, ph(0, 0, 0, a, a));
            add(o, ph(0, f, 0, 1, a));
            set(o, 1, 1, 1, 0);
        } else {
            add(o, ph(0, f, 0, 1, a));
            set(o, 2, 2, 1, 0);
        }
        return 0;
    case SYMMEM_ALGO_COPY_ENGINE:
        add(o, ph(0, 0, f, 0, f));
        add(o, ph(0, 0, 0, 1, f));
        set(o, 3, 3, 2, x->n - 1);
        return 0;
    case SYMMEM_ALGO_ISLAND:
        if (x->k <= 1) {
            add(o, ph(f, 0, 0, a, a));
            add(o, ph(0, 0, 0, f, f));
            set(o, 1, 1, 1, 0);
        } else {
            add(o, ph_sock(f, 1, a + f, (x->n - x->m) / x->n));
            set(o, 2, 2, 1, 0);
        }
        return 0;
    default: return -1;
    }
}

int topo_cost_flow(const topo_cost_machine_t *m, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes,
                   topo_cost_flow_t *out)
{
    memset(out, 0, sizeof *out);
    if (m->nranks < 2) return -1;
    flow_args_t x;
    x.n = m->nranks;
    x.f = (x.n - 1) / x.n;
    x.a = 1 / x.n;
    x.bytes = bytes;
    x.k = m->islands > 1 ? m->islands : 1;
    x.m = x.mx = x.n;
    if (x.k > 1) {
        x.mx = 0;
        for (int i = 0; i < x.k && i < SYMMEM_MAX_RANKS; i++) {
            const double mi = m->island_size[i];
            if (mi < x.m) x.m = mi;
            if (mi > x.mx) x.mx = mi;
        }
        if (x.m < 1) x.k = 1, x.m = x.mx = x.n; /* malformed sizes: no islands */
    }
    switch (kind) {
    case SYMMEM_COLL_ALL_REDUCE: return flow_all_reduce(&x, algo, out);
    case SYMMEM_COLL_REDUCE_SCATTER: return flow_reduce_scatter(&x, algo, out);
    case SYMMEM_COLL_ALL_GATHER: return flow_all_gather(&x, algo, out);
    default: return -1;
    }
}

/* ---- prices ----------------------------------------------------------------------------------------------------- */
static double max2(double a, double b) { return a > b ? a : b; }
static double min2(double a, double b) { return a < b ? a : b; }
static int ok(double v) { return v > 0.0 && v < 1e300; }

/* Microseconds for `bytes` at `gbs` GB/s (1 GB/s = 1e3 bytes per microsecond); nothing to move costs nothing. */
static double us_at(double bytes, double gbs) { return bytes > 0.0 ? bytes / (gbs * 1e3) : 0.0; }

/* The link's time for stores taking `out` and loads `in` alone: together they overlap by `duplex`. */
static double combine(double out, double in, double duplex)
{
    const double d = duplex < 0 ? 0 : duplex > 1 ? 1 : duplex;
    return max2(out, in) + (1.0 - d) * min2(out, in);
}

/* The widest all-to-all share of one island's link: max m_i (n - m_i) of every byte one rank sends to one
 * peer; 0 without islands. */
static double socket_pairs(const topo_cost_machine_t *m)
{
    double c = 0;
    if (m->islands <= 1) return 0;
    for (int i = 0; i < m->islands && i < SYMMEM_MAX_RANKS; i++)
        c = max2(c, (double)m->island_size[i] * (double)(m->nranks - m->island_size[i]));
    return c;
}

static double phase_us(const topo_cost_machine_t *m, const topo_cost_phase_t *p, double S, int floor)
{
    const double W = ok(m->write_gbs) ? m->write_gbs : 1.0, R = ok(m->read_gbs) ? m->read_gbs : W;
    const double CE = ok(m->ce_gbs) ? m->ce_gbs : W;
    double link, local = 0.0;
    if (m->host_memory) {
        link = combine(us_at((p->rw + p->lw + p->lp) * S, W) + us_at(p->ce * S, CE), us_at((p->rr + p->lr + p->lp) * S, R),
                       m->duplex);
    } else {
        link = combine(us_at(p->rw * S, W) + us_at(p->ce * S, CE), us_at(p->rr * S, R), m->duplex);
        if (!floor && ok(m->local_gbs)) local = us_at((p->lw + p->lr) * S, m->local_gbs);
    }
    double sock = 0.0;
    if (m->islands > 1 && ok(m->socket_gbs)) {
        const double bytes = p->own_sock ? p->sock : socket_pairs(m) * (p->rw + p->rr + p->ce) / (m->nranks - 1);
        sock = us_at(bytes * S, m->socket_gbs);
    }
    return max2(link, sock) + local;
}

static double price(const topo_cost_machine_t *m, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes,
                    int floor)
{
    topo_cost_flow_t fl;
    if (topo_cost_flow(m, kind, algo, bytes, &fl) != 0) return -1.0;
    double t = fl.trips * m->trip_us;
    if (!floor) t += fl.kernels * m->kernel_us + fl.syncs * m->sync_us + fl.copies * m->ce_copy_us;
    for (int i = 0; i < fl.nphases; i++) t += phase_us(m, &fl.ph[i], (double)bytes, floor);
    return t;
}

double topo_cost_us(const topo_cost_machine_t *m, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes)
{
    return price(m, kind, algo, bytes, 0);
}

double topo_cost_floor_us(const topo_cost_machine_t *m, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes)
{
    return price(m, kind, algo, bytes, 1);
}

/* ---- the table -------------------------------------------------------------------------------------------------- */
static symmem_algo_t best_by(const topo_cost_machine_t *m, symmem_coll_kind_t kind, const topo_cost_candidates_t *c,
                             topo_cost_price_fn fn, size_t bytes, double *us)
{
    symmem_algo_t best = SYMMEM_ALGO_AUTO;
    double least = 0.0;
    for (int i = 0; i < c->n; i++) {
        const double v = fn(m, kind, c->algo[i], bytes);
        if (v < 0) continue;
        if (best == SYMMEM_ALGO_AUTO || v < least * (1.0 - TOPO_COST_TIE)) best = c->algo[i], least = v;
    }
    if (us) *us = least;
    return best;
}

symmem_algo_t topo_cost_best(const topo_cost_machine_t *m, symmem_coll_kind_t kind, const topo_cost_candidates_t *c,
                             size_t bytes, double *us)
{
    return best_by(m, kind, c, topo_cost_us, bytes, us);
}

int topo_cost_rules(const topo_cost_machine_t *m, symmem_coll_kind_t kind, const topo_cost_candidates_t *c,
                    topo_cost_price_fn fn, size_t *max_bytes, symmem_algo_t *algo, int max)
{
    int nr = 0;
    size_t lo = KIB;
    symmem_algo_t cur = best_by(m, kind, c, fn, lo, NULL);
    if (cur == SYMMEM_ALGO_AUTO || max < 1) return 0;
    for (size_t hi = lo + lo / 16; lo < ((size_t)1 << 30); lo = hi, hi += hi / 16) {
        const symmem_algo_t next = best_by(m, kind, c, fn, hi, NULL);
        if (next == cur) continue;
        size_t a = lo, b = hi; /* best(a) == cur, best(b) != cur */
        while (b - a > 1) {
            const size_t mid = a + (b - a) / 2;
            if (best_by(m, kind, c, fn, mid, NULL) == cur) a = mid;
            else b = mid;
        }
        const size_t bound = a / KIB * KIB;
        /* a run shorter than the KiB rounding: the later rule takes the bound */
        if (nr > 0 && max_bytes[nr - 1] >= bound) algo[nr - 1] = cur;
        else if (bound > 0 && nr + 1 < max) max_bytes[nr] = bound, algo[nr++] = cur;
        cur = next;
    }
    if (nr + 1 > max) return 0;
    max_bytes[nr] = SIZE_MAX;
    algo[nr++] = cur;
    /* neighbours with the same algorithm are one rule (the larger bound) */
    int w = 0;
    for (int i = 0; i < nr; i++) {
        if (w > 0 && algo[w - 1] == algo[i]) w--;
        max_bytes[w] = max_bytes[i];
        algo[w++] = algo[i];
    }
    return w;
}
