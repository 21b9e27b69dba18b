/* The autotune's decision, plan, agreement and table (see autotune.h); the measuring is the caller's
 * (autotune_gpu.c at init, the CPU tests' injected times). */
#include "collectives/autotune.h"

#include <stdarg.h>
#include <stdio.h>
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
    cfg->keep_factor = 4.0;
    cfg->keep_us = 20.0;
    cfg->tie = 0.03;
    cfg->graph_us = 1000.0;
    cfg->min_ops = 4;
    cfg->max_ops = 8;
    cfg->skip_factor = 2.0;
}

int symmem_autotune_graph_ops(const symmem_autotune_cfg_t *cfg, double pred_us)
{
    const int lo = cfg->min_ops > 0 ? cfg->min_ops : 1, hi = cfg->max_ops > lo ? cfg->max_ops : lo;
    /* compared before converting: a tiny prediction must not overflow the int */
    if (!(pred_us > 0.0) || cfg->graph_us / pred_us >= (double)hi) return hi;
    const int k = (int)(cfg->graph_us / pred_us);
    return k < lo ? lo : k;
}

static void plan_step(const topo_cost_machine_t *m, const topo_table_t *defaults, const int *available,
                      const symmem_autotune_cfg_t *cfg, symmem_coll_kind_t kind, size_t bytes, symmem_autotune_step_t *st)
{
    memset(st, 0, sizeof *st);
    st->kind = (int32_t)kind;
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
        for (size_t b = cfg->min_bytes; b > 0 && b <= cfg->max_bytes && plan->nsteps < SYMMEM_AUTOTUNE_MAX_STEPS; b *= 2) {
            symmem_autotune_step_t *st = &plan->step[plan->nsteps];
            plan_step(m, defaults, available, cfg, (symmem_coll_kind_t)k, b, st);
            if (st->ncand > 0) plan->nsteps++;
        }
}

static uint64_t plan_hash(const symmem_autotune_plan_t *p)
{
    uint64_t h = symmem_fnv64_u64(SYMMEM_FNV64_INIT, (uint64_t)p->nsteps);
    for (int s = 0; s < p->nsteps; s++) {
        const symmem_autotune_step_t *st = &p->step[s];
        h = symmem_fnv64_u64(h, (uint64_t)st->kind);
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
    uint64_t r = x, y = (x + 1) / 2;
    while (y < r) r = y, y = (r + x / r) / 2;
    return r;
}

/* floor(sqrt(lo * hi)) within [lo, hi) (lo, hi up to 2^31: the product fits) */
static size_t geo_mid(size_t lo, size_t hi)
{
    size_t t = (size_t)isqrt((uint64_t)lo * (uint64_t)hi);
    if (t < lo) t = lo;
    if (t >= hi) t = hi - 1;
    return t;
}

/* Neighbouring rules of one kind with the same algorithm are one rule (the larger bound). */
static void merge_same(topo_table_t *t)
{
    int w = 0;
    for (int i = 0; i < t->nrules; i++) {
        if (w > 0 && t->rules[w - 1].kind == t->rules[i].kind && t->rules[w - 1].algo == t->rules[i].algo) w--;
        t->rules[w++] = t->rules[i];
    }
    t->nrules = w;
}

/* The rules of one kind from its measured steps (sizes ascending, winners >= 0): a run of sizes with one
 * winner holds up to the geometric midpoint to the next measured size; the last run up to the midpoint to
 * the next power of two; the model's rules above. */
static void kind_rules(topo_table_t *out, const topo_table_t *defaults, int kind, const size_t *bytes, const int *win,
                       int n)
{
    if (n == 0) return;
    for (int i = 0; i < n; i++) {
        if (i + 1 < n && win[i + 1] == win[i]) continue;
        const size_t bound = i + 1 < n ? geo_mid(bytes[i], bytes[i + 1]) : geo_mid(bytes[i], 2 * bytes[i]);
        topo_table_add(out, kind, bound, (symmem_algo_t)win[i]);
    }
    /* above: the model's rules (its last one, SIZE_MAX, covers every larger size) */
    const size_t top = geo_mid(bytes[n - 1], 2 * bytes[n - 1]);
    for (int i = 0; i < defaults->nrules; i++)
        if (defaults->rules[i].kind == kind && defaults->rules[i].max_bytes > top)
            topo_table_add(out, kind, defaults->rules[i].max_bytes, defaults->rules[i].algo);
}

static void build_table(const symmem_autotune_plan_t *p, const int *win, int steps, const topo_table_t *defaults,
                        topo_table_t *out, int *changed)
{
    out->nrules = 0;
    *changed = 0;
    for (int k = SYMMEM_COLL_ALL_REDUCE; k <= SYMMEM_COLL_ALL_GATHER; k++) {
        size_t bytes[SYMMEM_AUTOTUNE_MAX_STEPS];
        int w[SYMMEM_AUTOTUNE_MAX_STEPS], n = 0;
        for (int s = 0; s < steps; s++) {
            if (p->step[s].kind != k || win[s] < 0) continue;
            bytes[n] = p->step[s].bytes;
            w[n++] = win[s];
            *changed += win[s] != (int)topo_table_lookup(defaults, (symmem_coll_kind_t)k, p->step[s].bytes);
        }
        kind_rules(out, defaults, k, bytes, w, n);
    }
    merge_same(out);
}

/* ---- the run ----------------------------------------------------------------------------------------------------- */
symmem_status_t symmem_autotune_run(symmem_comm_t comm, symmem_coll_tuning_t *tu, const topo_cost_machine_t *m,
                                    const int *available, const symmem_autotune_ops_t *ops,
                                    const symmem_autotune_cfg_t *cfg, symmem_autotune_result_t *res)
{
    const int n = comm->nranks;
    memset(res, 0, sizeof *res);
    symmem_autotune_plan_t plan;
    symmem_autotune_plan(m, &tu->defaults, available, cfg, &plan);
    res->planned = plan.nsteps;
    /* the plan is a pure function of agreed facts; should it differ anyway, no rank measures */
    uint64_t mine = plan_hash(&plan), all[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &mine, all, sizeof mine));
    for (int r = 0; r < n; r++)
        if (all[r] != mine) {
            SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "autotune: rank %d planned other measurements than this rank (rank %d); "
                                            "nothing measured, the model's table stands",
                        r, comm->rank);
            return SYMMEM_OK;
        }
    int win[SYMMEM_AUTOTUNE_MAX_STEPS];
    int local_failed = 0;
    step_msg_t msg, got[SYMMEM_MAX_RANKS];
    /* the slowest rank's readings of the last step, by algorithm (-1: none), for the next size's skips */
    double last_us[SYMMEM_ALGO_COUNT];
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) last_us[a] = -1.0;
    for (int s = 0; s < plan.nsteps; s++) {
        const symmem_autotune_step_t *st = &plan.step[s];
        const symmem_algo_t model = topo_table_lookup(&tu->defaults, (symmem_coll_kind_t)st->kind, st->bytes);
        /* agreed on every rank: last_us is the maximum over ranks, the plan is the same */
        const int half = s > 0 && plan.step[s - 1].kind == st->kind && 2 * plan.step[s - 1].bytes == st->bytes;
        int skip[SYMMEM_ALGO_COUNT];
        res->skipped += symmem_autotune_skips(st, half ? last_us : NULL, model, cfg->skip_factor, skip);
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
        memset(&msg, 0, sizeof msg);
        double us[SYMMEM_ALGO_COUNT];
        for (int i = 0; i < SYMMEM_ALGO_COUNT; i++) us[i] = msg.us[i] = -1.0;
        if (!local_failed && ops->measure(ops->ctx, &todo, us) != 0) local_failed = 1;
        for (int j = 0; j < todo.ncand; j++) msg.us[at[j]] = us[j];
        msg.failed = local_failed;
        msg.elapsed_ms = ops->elapsed_ms(ops->ctx);
        SYMMEM_CHECK(symmem_comm_allgather(comm, &msg, got, sizeof msg));
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
        for (int a = 0; a < SYMMEM_ALGO_COUNT; a++) last_us[a] = -1.0;
        for (int i = 0; i < st->ncand; i++) last_us[st->algo[i]] = slowest[i];
        win[s] = symmem_autotune_winner(st, slowest, model, cfg->tie);
        if (comm->rank == 0 && symmem_log_enabled(SYMMEM_LOG_DEBUG, SYMMEM_SUBSYS_COLL)) {
            char text[640];
            symmem_autotune_step_describe(st, slowest, skip, win[s], model, text, sizeof text);
            SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL, "autotune step %d of %d: %s", s + 1, plan.nsteps, text);
        }
        res->steps = s + 1;
        res->measurements += todo.ncand;
        res->elapsed_ms = elapsed;
        if (failed) {
            res->failed = 1;
            break;
        }
        if (elapsed > cfg->budget_ms && s + 1 < plan.nsteps) {
            res->budget_stop = 1;
            break;
        }
    }
    topo_table_t t;
    build_table(&plan, win, res->steps, &tu->defaults, &t, &res->changed);
    uint64_t h = topo_table_hash(&t), hs[SYMMEM_MAX_RANKS];
    SYMMEM_CHECK(symmem_comm_allgather(comm, &h, hs, sizeof h));
    res->agreed = 1;
    for (int r = 0; r < n; r++) res->agreed &= hs[r] == h;
    res->hash = h;
    if (res->agreed) {
        tu->table = t;
    } else {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "autotune: the ranks built different tables (a bug: please report it); "
                                        "every rank drops its table for the model's");
        tu->table.nrules = 0;
    }
    return SYMMEM_OK;
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
    add(out, len, "%s %s:", symmem_coll_kind_name((symmem_coll_kind_t)st->kind), sz);
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
    for (int k = SYMMEM_COLL_ALL_REDUCE; k <= SYMMEM_COLL_ALL_GATHER; k++) {
        int first = 1;
        for (int i = 0; i < t->nrules; i++) {
            const topo_rule_t *r = &t->rules[i];
            if (r->kind != k) continue;
            char sz[32];
            size_text(r->max_bytes, sz, sizeof sz);
            if (first) add(out, len, "%s%s ", out[0] ? "; " : "", symmem_coll_kind_name((symmem_coll_kind_t)k));
            if (r->max_bytes == SIZE_MAX) add(out, len, "%s%s", first ? "" : ", above ", symmem_algo_name(r->algo));
            else add(out, len, "%sup to %s %s", first ? "" : ", ", sz, symmem_algo_name(r->algo));
            first = 0;
        }
    }
}
