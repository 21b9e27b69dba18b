/* The autotune's decision, plan, agreement and table (see autotune.h); the measuring is the caller's
 * (autotune_gpu.c at init, the CPU tests' injected times). */
#include "collectives/autotune.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/hash.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/comm_state.h"

symmem_autotune_mode_t symmem_autotune_mode(void)
{
    static int warned;
    const char *v = symmem_param_str(SYMMEM_PARAM_AUTOTUNE);
    if (!v[0] || strcasecmp(v, "auto") == 0) return SYMMEM_AUTOTUNE_AUTO;
    if (strcasecmp(v, "off") == 0 || strcmp(v, "0") == 0) return SYMMEM_AUTOTUNE_OFF;
    if (strcasecmp(v, "force") == 0 || strcmp(v, "1") == 0) return SYMMEM_AUTOTUNE_FORCE;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_AUTOTUNE=%s is not auto, off or force; using auto", v);
    return SYMMEM_AUTOTUNE_AUTO;
}

const char *symmem_autotune_state_name(symmem_autotune_state_t s)
{
    switch (s) {
    case SYMMEM_AUTOTUNE_LOADED: return "loaded";
    case SYMMEM_AUTOTUNE_MEASURED: return "measured";
    case SYMMEM_AUTOTUNE_SKIPPED: return "skipped";
    default: return "not run";
    }
}

/* ---- the decision ------------------------------------------------------------------------------------------ */
int symmem_autotune_wish(const symmem_autotune_wish_in_t *in, symmem_autotune_state_t *state, const char **why)
{
    *state = SYMMEM_AUTOTUNE_NOT_RUN;
    if (in->host_backend) return *why = "the host backend runs no GPU kernels to time", 0;
    if (in->nranks < 2) return *why = "one rank: nothing to choose", 0;
    if (in->mode == SYMMEM_AUTOTUNE_OFF) return *why = "SYMMEM_AUTOTUNE=off", 0;
    if (in->env_algo) return *why = "SYMMEM_ALGO overrides every table", 0;
    if (in->table_loaded && in->mode != SYMMEM_AUTOTUNE_FORCE) {
        *state = SYMMEM_AUTOTUNE_LOADED;
        return *why = "the tuning file has the table for this key (SYMMEM_AUTOTUNE=force measures again)", 0;
    }
    if (in->shared_queues) {
        *state = SYMMEM_AUTOTUNE_SKIPPED;
        return *why = "ranks of this process share the GPU with fewer hardware work queues than ranks (set "
                      "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts; docs/collectives.md, \"Residency\")",
               0;
    }
    if (in->capturing) {
        *state = SYMMEM_AUTOTUNE_SKIPPED;
        return *why = "a CUDA graph capture is running on this device (the autotune never runs inside one; a "
                      "later init measures)",
               0;
    }
    *why = in->table_loaded ? "SYMMEM_AUTOTUNE=force" : "no table for this key yet";
    return 1;
}

/* ---- the plan ---------------------------------------------------------------------------------------------- */
void symmem_autotune_cfg_default(symmem_autotune_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    const int64_t b = symmem_param_int(SYMMEM_PARAM_AUTOTUNE_BUDGET_MS);
    cfg->budget_ms = b < 0 ? 0.0 : (double)b;
    cfg->min_bytes = (size_t)1 << 10;
    cfg->max_bytes = (size_t)4 << 20;
    cfg->forms[SYMMEM_COLL_ALL_REDUCE] = SYMMEM_FORM_BIT(SYMMEM_FORM_ORDINARY) |
                                         SYMMEM_FORM_BIT(SYMMEM_FORM_SYMMETRIC_INPUT) |
                                         SYMMEM_FORM_BIT(SYMMEM_FORM_SYMMETRIC);
    cfg->forms[SYMMEM_COLL_REDUCE_SCATTER] = cfg->forms[SYMMEM_COLL_ALL_GATHER] =
        SYMMEM_FORM_BIT(SYMMEM_FORM_ORDINARY) | SYMMEM_FORM_BIT(SYMMEM_FORM_SYMMETRIC_INPUT);
    cfg->refine = 2;
    cfg->refine_ratio = 1.15;
    cfg->keep_factor = 4.0;
    cfg->keep_us = 20.0;
    cfg->tie = 0.03;
    cfg->graph_us = 2500.0;
    cfg->min_ops = 4;
    cfg->max_ops = 32;
    cfg->skip_factor = 2.0;
    cfg->agree = 0.03;
    cfg->max_rounds = 4;
    cfg->warmup_ms = 100.0;
}

int symmem_autotune_graph_ops(const symmem_autotune_cfg_t *cfg, double pred_us)
{
    const int lo = cfg->min_ops > 0 ? cfg->min_ops : 1, hi = cfg->max_ops > lo ? cfg->max_ops : lo;
    /* compared before converting: a tiny prediction must not overflow the int */
    if (!(pred_us > 0.0) || cfg->graph_us / pred_us >= (double)hi) return hi;
    const int k = (int)(cfg->graph_us / pred_us);
    return k < lo ? lo : k;
}

void symmem_autotune_plan_step(const topo_cost_machine_t *m, const topo_table_t *defaults, const int *available,
                               const symmem_autotune_cfg_t *cfg, symmem_coll_kind_t kind, symmem_form_t form,
                               size_t bytes, symmem_autotune_step_t *st)
{
    memset(st, 0, sizeof *st);
    st->kind = (int32_t)kind;
    st->form = (int32_t)form;
    st->bytes = bytes;
    const symmem_algo_t model = topo_table_lookup(defaults, kind, bytes);
    double pred[SYMMEM_ALGO_COUNT], least = -1;
    for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++) {
        pred[a] = available[a] ? topo_cost_us(m, kind, (symmem_algo_t)a, bytes) : -1.0;
        if (pred[a] >= 0 && (least < 0 || pred[a] < least)) least = pred[a];
    }
    for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++) {
        if (pred[a] < 0) continue;
        const int keep = pred[a] <= least * cfg->keep_factor || pred[a] <= least + cfg->keep_us || a == (int)model;
        if (!keep) continue;
        /* insert in order of prediction (ties: the lower algorithm first) */
        int i = st->ncand;
        while (i > 0 && st->pred_us[i - 1] > pred[a]) {
            st->algo[i] = st->algo[i - 1];
            st->pred_us[i] = st->pred_us[i - 1];
            i--;
        }
        st->algo[i] = a;
        st->pred_us[i] = pred[a];
        st->ncand++;
    }
    st->ops = symmem_autotune_graph_ops(cfg, st->ncand ? st->pred_us[0] : -1.0);
}

int symmem_autotune_skips(const symmem_autotune_step_t *st, const double *half_us, symmem_algo_t model, double factor,
                          int *skip)
{
    double fastest = -1.0;
    for (int a = 0; half_us && a < SYMMEM_ALGO_COUNT; a++)
        if (half_us[a] > 0.0 && (fastest < 0 || half_us[a] < fastest)) fastest = half_us[a];
    int n = 0;
    for (int i = 0; i < st->ncand; i++) {
        const int a = st->algo[i];
        skip[i] = factor > 0.0 && fastest > 0.0 && a != (int)model && half_us[a] > factor * fastest;
        n += skip[i];
    }
    return n;
}

void symmem_autotune_plan(const topo_cost_machine_t *m, const topo_table_t *defaults, const int *available,
                          const symmem_autotune_cfg_t *cfg, symmem_autotune_plan_t *plan)
{
    memset(plan, 0, sizeof *plan);
    for (int k = SYMMEM_COLL_ALL_REDUCE; k <= SYMMEM_COLL_ALL_GATHER; k++)
        for (int f = 0; f < SYMMEM_FORM_COUNT; f++) {
            if (!(cfg->forms[k] & SYMMEM_FORM_BIT(f))) continue;
            for (size_t b = cfg->min_bytes; b > 0 && b <= cfg->max_bytes && plan->nsteps < SYMMEM_AUTOTUNE_MAX_STEPS;
                 b *= 2) {
                symmem_autotune_step_t *st = &plan->step[plan->nsteps];
                symmem_autotune_plan_step(m, defaults, available, cfg, (symmem_coll_kind_t)k, (symmem_form_t)f, b, st);
                if (st->ncand > 0) plan->nsteps++;
            }
        }
}

static uint64_t plan_hash(const symmem_autotune_plan_t *p)
{
    uint64_t h = symmem_fnv64_u64(SYMMEM_FNV64_INIT, (uint64_t)p->nsteps);
    for (int s = 0; s < p->nsteps; s++) {
        const symmem_autotune_step_t *st = &p->step[s];
        h = symmem_fnv64_u64(h, (uint64_t)st->kind);
        h = symmem_fnv64_u64(h, (uint64_t)st->form);
        h = symmem_fnv64_u64(h, st->bytes);
        h = symmem_fnv64_u64(h, (uint64_t)st->ops);
        for (int i = 0; i < st->ncand; i++) h = symmem_fnv64_u64(h, (uint64_t)st->algo[i]);
    }
    return h;
}

/* ---- a step's decision --------------------------------------------------------------------------------------- */
int symmem_autotune_winner(const symmem_autotune_step_t *st, const double *slowest, symmem_algo_t model, double tie)
{
    int best = -1, model_at = -1;
    for (int i = 0; i < st->ncand; i++) {
        if (!(slowest[i] > 0.0)) continue; /* did not run on some rank (or no time: NaN) */
        if (best < 0 || slowest[i] < slowest[best]) best = i;
        if (st->algo[i] == (int32_t)model) model_at = i;
    }
    if (best < 0) return -1;
    if (model_at >= 0 && slowest[model_at] <= slowest[best] * (1.0 + tie)) return st->algo[model_at];
    return st->algo[best];
}

/* What each rank contributes after a step. */
typedef struct step_msg {
    double us[SYMMEM_ALGO_COUNT];
    double elapsed_ms;
    int32_t failed;
    int32_t pad;
} step_msg_t;

/* ---- the table ------------------------------------------------------------------------------------------------- */
/* floor(sqrt(x)) by Newton's method (the library links no libm) */
static uint64_t isqrt(uint64_t x)
{
    if (x < 2) return x;
    uint64_t r = x, y = x / 2 + 1;
    while (y < r) r = y, y = (r + x / r) / 2;
    return r;
}

size_t symmem_autotune_mid(size_t lo, size_t hi)
{
    /* exact where the product fits (every size the table measures), else sqrt(lo) * sqrt(hi) */
    size_t t = lo != 0 && (uint64_t)hi > UINT64_MAX / (uint64_t)lo
                   ? (size_t)(isqrt((uint64_t)lo) * isqrt((uint64_t)hi))
                   : (size_t)isqrt((uint64_t)lo * (uint64_t)hi);
    if (t < lo) t = lo;
    if (t >= hi) t = hi - 1;
    return t;
}

static int cmp_point(const void *a, const void *b)
{
    const symmem_autotune_point_t *x = a, *y = b;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

/* The points with a winner, ascending; at most SYMMEM_AUTOTUNE_MAX_STEPS. */
static int sorted_points(const symmem_autotune_point_t *pts, int n, symmem_autotune_point_t *out)
{
    int k = 0;
    for (int i = 0; i < n && k < SYMMEM_AUTOTUNE_MAX_STEPS; i++)
        if (pts[i].winner > SYMMEM_ALGO_AUTO) out[k++] = pts[i];
    qsort(out, (size_t)k, sizeof out[0], cmp_point);
    return k;
}

int symmem_autotune_cuts(const symmem_autotune_point_t *pts, int n, double refine_ratio, size_t unit, uint64_t *mid,
                         int32_t *a, int32_t *b, int max)
{
    symmem_autotune_point_t p[SYMMEM_AUTOTUNE_MAX_STEPS];
    const int k = sorted_points(pts, n, p);
    int m = 0;
    if (unit == 0) unit = 1;
    for (int i = 0; i + 1 < k && m < max; i++) {
        if (p[i].winner == p[i + 1].winner || (double)p[i + 1].bytes <= (double)p[i].bytes * refine_ratio) continue;
        const uint64_t x = symmem_autotune_mid(p[i].bytes, p[i + 1].bytes) / unit * unit;
        if (x <= p[i].bytes || x >= p[i + 1].bytes) continue;
        mid[m] = x;
        a[m] = p[i].winner;
        b[m] = p[i + 1].winner;
        m++;
    }
    return m;
}

/* Neighbouring rules of one kind and form with the same algorithm are one rule (the larger bound). */
static void merge_same(topo_table_t *t)
{
    int w = 0;
    for (int i = 0; i < t->nrules; i++) {
        if (w > 0 && t->rules[w - 1].kind == t->rules[i].kind && t->rules[w - 1].form == t->rules[i].form &&
            t->rules[w - 1].algo == t->rules[i].algo)
            w--;
        t->rules[w++] = t->rules[i];
    }
    t->nrules = w;
}

int symmem_autotune_rules(topo_table_t *out, const topo_table_t *defaults, symmem_coll_kind_t kind, symmem_form_t form,
                          const symmem_autotune_point_t *pts, int n)
{
    symmem_autotune_point_t p[SYMMEM_AUTOTUNE_MAX_STEPS];
    const int k = sorted_points(pts, n, p);
    if (k == 0) return 0;
    int rc = 0;
    for (int i = 0; i < k; i++) {
        if (i + 1 < k && p[i + 1].winner == p[i].winner) continue;
        size_t bound;
        if (i + 1 == k) bound = symmem_autotune_mid(p[i].bytes, 2 * p[i].bytes);
        else if (p[i].pinned) bound = p[i].bytes;              /* a declared size holds exactly itself */
        else if (p[i + 1].pinned) bound = p[i + 1].bytes - 1; /* ...and so does the next one */
        else bound = symmem_autotune_mid(p[i].bytes, p[i + 1].bytes);
        rc |= topo_table_add_form(out, kind, form, bound, (symmem_algo_t)p[i].winner);
    }
    /* above: the model's rules (its last one, SIZE_MAX, covers every larger size) */
    const size_t top = symmem_autotune_mid(p[k - 1].bytes, 2 * p[k - 1].bytes);
    for (int i = 0; i < defaults->nrules; i++)
        if (defaults->rules[i].kind == (int)kind && defaults->rules[i].max_bytes > top)
            rc |= topo_table_add_form(out, kind, form, defaults->rules[i].max_bytes, defaults->rules[i].algo);
    merge_same(out);
    return rc;
}

int symmem_autotune_decide(const topo_table_t *defaults, symmem_coll_kind_t kind, uint64_t bytes,
                           const double *us, double tie)
{
    symmem_autotune_step_t st;
    double slowest[SYMMEM_ALGO_COUNT];
    memset(&st, 0, sizeof st);
    st.kind = (int32_t)kind, st.bytes = bytes;
    for (int a = SYMMEM_ALGO_AUTO + 1; a < SYMMEM_ALGO_COUNT; a++)
        if (us[a] > 0.0) st.algo[st.ncand] = a, slowest[st.ncand++] = us[a];
    return symmem_autotune_winner(&st, slowest, topo_table_lookup(defaults, kind, bytes), tie);
}

int symmem_autotune_table_from_times(topo_table_t *out, const topo_table_t *defaults, symmem_coll_kind_t kind,
                                     symmem_form_t form, const uint64_t *bytes, const double (*us)[SYMMEM_ALGO_COUNT],
                                     int n, double tie)
{
    symmem_autotune_point_t pts[SYMMEM_AUTOTUNE_MAX_STEPS];
    int k = 0;
    for (int i = 0; i < n && k < SYMMEM_AUTOTUNE_MAX_STEPS; i++) {
        pts[k].bytes = bytes[i];
        pts[k].winner = symmem_autotune_decide(defaults, kind, bytes[i], us[i], tie);
        pts[k++].pinned = 0;
    }
    return symmem_autotune_rules(out, defaults, kind, form, pts, k);
}

int symmem_autotune_pinned(const topo_table_t *t, symmem_coll_kind_t kind, symmem_form_t form, size_t bytes)
{
    for (int i = 0; i < t->nrules; i++) {
        const topo_rule_t *r = &t->rules[i];
        if (r->kind == (int)kind && r->form == (int)form && (r->max_bytes == bytes || r->max_bytes + 1 == bytes))
            return 1;
    }
    return 0;
}

int symmem_autotune_pin(symmem_coll_tuning_t *tu, symmem_coll_kind_t kind, symmem_form_t form, size_t bytes,
                        symmem_algo_t algo)
{
    topo_table_t t = tu->table;
    if (!topo_table_has_form(&t, kind, (int)form)) {
        /* the rules that answered for this form until now become its own */
        const symmem_form_t from = symmem_coll_table_form(tu, kind, form);
        const topo_table_t *src = topo_table_has_form(&t, kind, (int)from) ? &tu->table : &tu->defaults;
        const int src_form = src == &tu->table ? (int)from : TOPO_FORM_ANY;
        for (int i = 0; i < src->nrules; i++)
            if (src->rules[i].kind == (int)kind && src->rules[i].form == src_form &&
                topo_table_add_form(&t, kind, form, src->rules[i].max_bytes, src->rules[i].algo) != 0)
                return -1;
    }
    if (bytes > 1 &&
        topo_table_add_form(&t, kind, form, bytes - 1, topo_table_lookup_form(&t, kind, (int)form, bytes - 1)) != 0)
        return -1;
    if (topo_table_add_form(&t, kind, form, bytes, algo) != 0) return -1;
    merge_same(&t);
    tu->table = t;
    return 0;
}

/* ---- the run ----------------------------------------------------------------------------------------------------- */
/* The state of a run across its steps (the same on every rank: every field comes from agreed values). */
typedef struct run_state {
    symmem_comm_t comm;
    symmem_coll_tuning_t *tu;
    const symmem_autotune_ops_t *ops;
    const symmem_autotune_cfg_t *cfg;
    symmem_autotune_result_t *res;
    int local_failed;
    int stop; /* a rank failed: no further step */
    int over; /* the budget is spent: the next step that would start is not (res->budget_stop then) */
    /* the slowest rank's readings of the last step, by algorithm (-1: none), for the next size's skips */
    double last_us[SYMMEM_ALGO_COUNT];
    int32_t last_kind, last_form;
    uint64_t last_bytes;
} run_state_t;

static run_state_t run_state(symmem_comm_t comm, symmem_coll_tuning_t *tu, const symmem_autotune_ops_t *ops,
                             const symmem_autotune_cfg_t *cfg, symmem_autotune_result_t *res)
{
    run_state_t rs;
    memset(&rs, 0, sizeof rs);
    rs.comm = comm, rs.tu = tu, rs.ops = ops, rs.cfg = cfg, rs.res = res, rs.last_kind = -1;
    return rs;
}

/* One step on every rank: the skips, the measurement, the allgather, the winner (returned; -1: nothing ran).
 * Sets rs->stop when a rank failed or the budget is spent. An error only when the exchange failed. */
static symmem_status_t run_step(run_state_t *rs, const symmem_autotune_step_t *st, int counted, int *winner)
{
    const int n = rs->comm->nranks;
    const symmem_autotune_cfg_t *cfg = rs->cfg;
    const symmem_algo_t model = topo_table_lookup(&rs->tu->defaults, (symmem_coll_kind_t)st->kind, st->bytes);
    /* agreed on every rank: last_us is the maximum over ranks, the steps are the same */
    const int half = rs->last_kind == st->kind && rs->last_form == st->form && 2 * rs->last_bytes == st->bytes;
    int skip[SYMMEM_ALGO_COUNT];
    rs->res->skipped += symmem_autotune_skips(st, half ? rs->last_us : NULL, model, cfg->skip_factor, skip);
    /* what is measured: the candidates not skipped, in order */
    symmem_autotune_step_t todo = *st;
    int at[SYMMEM_ALGO_COUNT];
    todo.ncand = 0;
    for (int i = 0; i < st->ncand; i++) {
        if (skip[i]) continue;
        at[todo.ncand] = i;
        todo.algo[todo.ncand] = st->algo[i];
        todo.pred_us[todo.ncand++] = st->pred_us[i];
    }
    step_msg_t msg, got[SYMMEM_MAX_RANKS];
    memset(&msg, 0, sizeof msg);
    double us[SYMMEM_ALGO_COUNT];
    for (int i = 0; i < SYMMEM_ALGO_COUNT; i++) us[i] = msg.us[i] = -1.0;
    if (!rs->local_failed && rs->ops->measure(rs->ops->ctx, &todo, us) != 0) rs->local_failed = 1;
    for (int j = 0; j < todo.ncand; j++) msg.us[at[j]] = us[j];
    msg.failed = rs->local_failed;
    msg.elapsed_ms = rs->ops->elapsed_ms(rs->ops->ctx);
    SYMMEM_CHECK(symmem_comm_allgather(rs->comm, &msg, got, sizeof msg));
    double slowest[SYMMEM_ALGO_COUNT], elapsed = 0;
    int failed = 0;
    for (int i = 0; i < st->ncand; i++) slowest[i] = 0.0;
    for (int r = 0; r < n; r++) {
        failed |= got[r].failed != 0;
        if (got[r].elapsed_ms > elapsed) elapsed = got[r].elapsed_ms;
        for (int i = 0; i < st->ncand; i++) {
            const double v = got[r].us[i];
            if (!(v > 0.0) || slowest[i] < 0) slowest[i] = -1.0;
            else if (v > slowest[i]) slowest[i] = v;
        }
    }
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) rs->last_us[a] = -1.0;
    for (int i = 0; i < st->ncand; i++) rs->last_us[st->algo[i]] = slowest[i];
    rs->last_kind = st->kind;
    rs->last_form = st->form;
    rs->last_bytes = st->bytes;
    *winner = symmem_autotune_winner(st, slowest, model, cfg->tie);
    if (rs->comm->rank == 0 && symmem_log_enabled(SYMMEM_LOG_DEBUG, SYMMEM_SUBSYS_COLL)) {
        char text[700];
        symmem_autotune_step_describe(st, slowest, skip, *winner, model, text, sizeof text);
        SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL, "autotune step %d (%s): %s", rs->res->steps + 1,
                     counted ? "planned" : st->pinned ? "declared" : "bisection", text);
    }
    rs->res->steps++;
    rs->res->measurements += todo.ncand;
    rs->res->elapsed_ms = elapsed;
    if (*winner >= 0 && *winner != (int)model) rs->res->changed++;
    if (failed) rs->res->failed = 1, rs->stop = 1;
    rs->over = elapsed > cfg->budget_ms;
    return SYMMEM_OK;
}

/* Whether another step may start: not after a failure, nor once the budget is spent (said once, by the step
 * that does not start, so a budget spent by the last step is no stop). */
static int may_start(run_state_t *rs)
{
    if (rs->stop) return 0;
    if (rs->over) rs->res->budget_stop = 1, rs->stop = 1;
    return !rs->stop;
}

/* What a call of `kind` can have as its size: the table's bytes of whole 64-byte packs (per shard where the
 * op is sharded), so that every measured size is one a bf16 call makes. */
static size_t size_unit(symmem_coll_kind_t kind, int n) { return kind == SYMMEM_COLL_ALL_REDUCE ? 64 : 64 * (size_t)n; }

/* Bisect one op and form's points (pts[0..*n), grown in place) between neighbouring winners that differ. */
static symmem_status_t refine(run_state_t *rs, const topo_cost_machine_t *m, const int *available,
                              symmem_coll_kind_t kind, symmem_form_t form, symmem_autotune_point_t *pts, int *n)
{
    for (int round = 0; round < rs->cfg->refine && !rs->stop; round++) {
        uint64_t mid[SYMMEM_AUTOTUNE_MAX_STEPS];
        int32_t a[SYMMEM_AUTOTUNE_MAX_STEPS], b[SYMMEM_AUTOTUNE_MAX_STEPS];
        const int cuts = symmem_autotune_cuts(pts, *n, rs->cfg->refine_ratio, size_unit(kind, rs->comm->nranks), mid, a,
                                              b, SYMMEM_AUTOTUNE_MAX_STEPS - *n);
        for (int c = 0; c < cuts && may_start(rs); c++) {
            symmem_autotune_step_t st;
            symmem_autotune_plan_step(m, &rs->tu->defaults, available, rs->cfg, kind, form, mid[c], &st);
            /* the two neighbours' winners are the candidates: the cut lies between them */
            st.ncand = 0;
            const int32_t both[2] = {a[c], b[c]};
            for (int j = 0; j < 2; j++) {
                if (j == 1 && both[1] == both[0]) break;
                st.algo[st.ncand] = both[j];
                st.pred_us[st.ncand++] = topo_cost_us(m, kind, (symmem_algo_t)both[j], mid[c]);
            }
            int w;
            SYMMEM_CHECK(run_step(rs, &st, 0, &w));
            rs->res->refined++;
            pts[*n].bytes = mid[c];
            pts[*n].winner = w;
            pts[*n].pinned = 0;
            (*n)++;
        }
        if (cuts == 0) break;
    }
    return SYMMEM_OK;
}

/* The table agreed by hash: tu->table takes `t` on every rank, or drops to the model's everywhere. */
static symmem_status_t agree_table(symmem_comm_t comm, symmem_coll_tuning_t *tu, const topo_table_t *t,
                                   symmem_autotune_result_t *res, int drop_to_empty)
{
    uint64_t h = topo_table_hash(t), hs[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &h, hs, sizeof h));
    res->agreed = 1;
    for (int r = 0; r < comm->nranks; r++) res->agreed &= hs[r] == h;
    res->hash = h;
    if (res->agreed) {
        tu->table = *t;
    } else {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "autotune: the ranks built different tables (a bug: please report it); "
                                        "every rank drops its table for the model's");
        if (drop_to_empty) tu->table.nrules = 0;
    }
    return SYMMEM_OK;
}

static symmem_status_t check_plan(symmem_comm_t comm, const symmem_autotune_plan_t *plan, uint64_t extra, int *same)
{
    uint64_t mine = symmem_fnv64_u64(plan_hash(plan), extra), all[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &mine, all, sizeof mine));
    *same = -1;
    for (int r = 0; r < comm->nranks && *same < 0; r++)
        if (all[r] != mine) *same = r;
    return SYMMEM_OK;
}

symmem_status_t symmem_autotune_run(symmem_comm_t comm, symmem_coll_tuning_t *tu, const topo_cost_machine_t *m,
                                    const int *available, const symmem_autotune_ops_t *ops,
                                    const symmem_autotune_cfg_t *cfg, symmem_autotune_result_t *res)
{
    memset(res, 0, sizeof *res);
    symmem_autotune_plan_t *p = calloc(1, sizeof *p); /* large: off the stack */
    if (!p) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "autotune: out of host memory");
    symmem_autotune_plan(m, &tu->defaults, available, cfg, p);
    res->planned = p->nsteps;
    /* the plan is a pure function of agreed facts; should it differ anyway, no rank measures */
    int other;
    symmem_status_t st = check_plan(comm, p, 0, &other);
    if (st != SYMMEM_OK || other >= 0) {
        if (st == SYMMEM_OK)
            SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "autotune: rank %d planned other measurements than this rank (rank %d); "
                                            "nothing measured, the model's table stands",
                        other, comm->rank);
        free(p);
        return st;
    }
    run_state_t rs = run_state(comm, tu, ops, cfg, res);
    topo_table_t t;
    t.nrules = 0;
    /* one op and form at a time: its planned sizes, then the bisection between them */
    for (int s = 0; s < p->nsteps && st == SYMMEM_OK;) {
        const int kind = p->step[s].kind, form = p->step[s].form;
        symmem_autotune_point_t pts[SYMMEM_AUTOTUNE_MAX_STEPS];
        int n = 0;
        for (; s < p->nsteps && p->step[s].kind == kind && p->step[s].form == form; s++) {
            if (!may_start(&rs)) continue;
            int w;
            st = run_step(&rs, &p->step[s], 1, &w);
            if (st != SYMMEM_OK) break;
            pts[n].bytes = p->step[s].bytes, pts[n].winner = w, pts[n].pinned = 0;
            n++;
        }
        if (st == SYMMEM_OK) st = refine(&rs, m, available, (symmem_coll_kind_t)kind, (symmem_form_t)form, pts, &n);
        if (st == SYMMEM_OK && symmem_autotune_rules(&t, &tu->defaults, (symmem_coll_kind_t)kind, (symmem_form_t)form,
                                                     pts, n) != 0)
            SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "autotune: the table is full (%d rules): %s.%s keeps part of its rules",
                        TOPO_TABLE_MAX_RULES, symmem_coll_kind_name((symmem_coll_kind_t)kind),
                        symmem_form_name((symmem_form_t)form));
    }
    free(p);
    SYMMEM_CHECK(st);
    return agree_table(comm, tu, &t, res, 1);
}

symmem_status_t symmem_autotune_pins(symmem_comm_t comm, symmem_coll_tuning_t *tu, const topo_cost_machine_t *m,
                                     const int *available, const symmem_autotune_ops_t *ops,
                                     const symmem_autotune_cfg_t *cfg, const size_t *bytes, int n, unsigned forms,
                                     symmem_autotune_result_t *res)
{
    memset(res, 0, sizeof *res);
    symmem_autotune_plan_t *p = calloc(1, sizeof *p);
    if (!p) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "symmem_tune_sizes: out of host memory");
    for (int f = 0; f < SYMMEM_FORM_COUNT; f++) {
        if (!(forms & SYMMEM_FORM_BIT(f))) continue;
        for (int i = 0; i < n && p->nsteps < SYMMEM_AUTOTUNE_MAX_STEPS; i++) {
            int dup = 0;
            for (int j = 0; j < i && !dup; j++) dup = bytes[j] == bytes[i];
            if (dup || bytes[i] == 0 ||
                symmem_autotune_pinned(&tu->table, SYMMEM_COLL_ALL_REDUCE, (symmem_form_t)f, bytes[i]))
                continue;
            symmem_autotune_step_t *st = &p->step[p->nsteps];
            symmem_autotune_plan_step(m, &tu->defaults, available, cfg, SYMMEM_COLL_ALL_REDUCE, (symmem_form_t)f,
                                      bytes[i], st);
            st->pinned = 1;
            if (st->ncand > 0) p->nsteps++;
        }
    }
    res->planned = p->nsteps;
    int other;
    symmem_status_t st = check_plan(comm, p, forms, &other);
    if (st == SYMMEM_OK && other >= 0)
        st = symmem_set_error(SYMMEM_INVALID_USAGE,
                              "symmem_tune_sizes: rank %d passed other sizes or forms than rank %d (or its table "
                              "already held other sizes): every rank must pass the same",
                              other, comm->rank);
    run_state_t rs = run_state(comm, tu, ops, cfg, res);
    symmem_coll_tuning_t next = *tu;
    for (int s = 0; s < p->nsteps && st == SYMMEM_OK && may_start(&rs); s++) {
        int w;
        st = run_step(&rs, &p->step[s], 1, &w);
        if (st == SYMMEM_OK && w > SYMMEM_ALGO_AUTO &&
            symmem_autotune_pin(&next, SYMMEM_COLL_ALL_REDUCE, (symmem_form_t)p->step[s].form, p->step[s].bytes,
                                (symmem_algo_t)w) != 0)
            SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "symmem_tune_sizes: the table is full (%d rules): %zu bytes not pinned",
                        TOPO_TABLE_MAX_RULES, (size_t)p->step[s].bytes);
    }
    free(p);
    SYMMEM_CHECK(st);
    return agree_table(comm, tu, &next.table, res, 0);
}

/* ---- words -------------------------------------------------------------------------------------------------------- */
static void add(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *out, size_t len, const char *fmt, ...)
{
    const size_t used = strlen(out);
    if (used >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + used, len - used, fmt, ap);
    va_end(ap);
}

static void size_text(size_t b, char *out, size_t len)
{
    if (b >= ((size_t)1 << 20) && b % ((size_t)1 << 20) == 0) snprintf(out, len, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(out, len, "%zu KiB", b >> 10);
    else snprintf(out, len, "%zu B", b);
}

void symmem_autotune_step_describe(const symmem_autotune_step_t *st, const double *slowest, const int *skip,
                                   int winner, symmem_algo_t model, char *out, size_t len)
{
    char sz[32];
    if (len) out[0] = '\0';
    size_text(st->bytes, sz, sizeof sz);
    add(out, len, "%s.%s %s:", symmem_coll_kind_name((symmem_coll_kind_t)st->kind),
        symmem_form_name((symmem_form_t)st->form), sz);
    for (int i = 0; i < st->ncand; i++) {
        const char *name = symmem_algo_name((symmem_algo_t)st->algo[i]);
        if (skip && skip[i]) add(out, len, "%s %s skipped", i ? "," : "", name);
        else if (slowest[i] > 0.0) add(out, len, "%s %s %.1f us x%d", i ? "," : "", name, slowest[i], (int)st->ops);
        else add(out, len, "%s %s not run", i ? "," : "", name);
    }
    if (winner < 0) add(out, len, " -> nothing ran (the model: %s)", symmem_algo_name(model));
    else add(out, len, " -> %s (the model: %s)", symmem_algo_name((symmem_algo_t)winner), symmem_algo_name(model));
}

void symmem_autotune_describe(const topo_table_t *t, char *out, size_t len)
{
    if (len) out[0] = '\0';
    for (int k = SYMMEM_COLL_ALL_REDUCE; k <= SYMMEM_COLL_ALL_GATHER; k++)
        for (int f = TOPO_FORM_ANY; f < SYMMEM_FORM_COUNT; f++) {
            int first = 1;
            for (int i = 0; i < t->nrules; i++) {
                const topo_rule_t *r = &t->rules[i];
                if (r->kind != k || r->form != f) continue;
                char sz[32];
                size_text(r->max_bytes, sz, sizeof sz);
                if (first)
                    add(out, len, "%s%s%s%s ", out[0] ? "; " : "", symmem_coll_kind_name((symmem_coll_kind_t)k),
                        f == TOPO_FORM_ANY ? "" : ".", f == TOPO_FORM_ANY ? "" : symmem_form_name((symmem_form_t)f));
                if (r->max_bytes == SIZE_MAX) add(out, len, "%s%s", first ? "" : ", above ", symmem_algo_name(r->algo));
                else add(out, len, "%sup to %s %s", first ? "" : ", ", sz, symmem_algo_name(r->algo));
                first = 0;
            }
        }
}
