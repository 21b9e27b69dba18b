/* A communicator's algorithm table (see tune.h): the choice SYMMEM_ALGO_AUTO makes, editing, and the
 * tuning file's reader and writer. */
#include "collectives/tune.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/safe_file.h"
#include "base/status.h"
#include "topology/cache.h"

void symmem_coll_tune_init(symmem_coll_tuning_t *t, const char *fingerprint, const topo_choice_facts_t *facts)
{
    memset(t, 0, sizeof *t);
    snprintf(t->fingerprint, sizeof t->fingerprint, "%s", fingerprint ? fingerprint : "");
    t->env_algo = SYMMEM_ALGO_AUTO;
    topo_choice_t c;
    topo_choose(facts, &c);
    t->defaults = c.table;
    t->prefer = c.prefer;
}

int symmem_coll_tune_measured(symmem_coll_tuning_t *t, const topo_choice_facts_t *facts)
{
    topo_choice_t c;
    topo_choose(facts, &c);
    int changed = 0;
    for (int i = 0; i < c.table.nrules; i++)
        changed += i >= t->defaults.nrules || c.table.rules[i].algo != t->defaults.rules[i].algo ||
                   c.table.rules[i].max_bytes != t->defaults.rules[i].max_bytes;
    t->defaults = c.table;
    t->prefer = c.prefer;
    return changed;
}

symmem_form_t symmem_coll_table_form(const symmem_coll_tuning_t *t, symmem_coll_kind_t kind, symmem_form_t form)
{
    if (!t || topo_table_has_form(&t->table, kind, (int)form)) return form;
    /* the output's side only decides whether results are stored into peers' outputs: a call whose output is
     * symmetric loses little with the rules measured for an ordinary output, while the input's side (read in
     * place or copied in) changes the ranking, so it is never borrowed */
    const symmem_form_t in_only = (symmem_form_t)((int)form & ~(int)SYMMEM_FORM_SYMMETRIC_OUTPUT);
    return topo_table_has_form(&t->table, kind, (int)in_only) ? in_only : form;
}

symmem_algo_t symmem_coll_choose(const symmem_coll_tuning_t *t, symmem_coll_kind_t kind, symmem_form_t form,
                                 size_t bytes)
{
    if (!t) return SYMMEM_ALGO_TWOSHOT_PUSH;
    if (t->env_algo != SYMMEM_ALGO_AUTO) return t->env_algo;
    symmem_algo_t a = topo_table_lookup_form(&t->table, kind, (int)symmem_coll_table_form(t, kind, form), bytes);
    if (a == SYMMEM_ALGO_AUTO) a = topo_table_lookup(&t->defaults, kind, bytes);
    return a == SYMMEM_ALGO_AUTO ? SYMMEM_ALGO_TWOSHOT_PUSH : a;
}

#ifndef SYMMEM_KERNELS_HASH
#error "SYMMEM_KERNELS_HASH (collectives/CMakeLists.txt) is not defined"
#endif
const char *symmem_coll_kernels_hash(void) { return SYMMEM_KERNELS_HASH; }

void symmem_coll_tune_key(char *out, size_t len, const char *fingerprint, int host_numa, int max_grid, int min_threads,
                          size_t ws_bytes, const char *kernels)
{
    snprintf(out, len, "%s.%s.g%dt%d.w%zuK.v%d.%d.%d.k%s", fingerprint, host_numa ? "host_numa" : "device", max_grid,
             min_threads, ws_bytes >> 10, SYMMEM_VERSION_MAJOR, SYMMEM_VERSION_MINOR, SYMMEM_VERSION_PATCH, kernels);
}

size_t symmem_coll_message_bytes(int nranks, symmem_coll_kind_t kind, size_t count, symmem_dtype_t dtype)
{
    const size_t b = count * symmem_dtype_size(dtype);
    return kind == SYMMEM_COLL_ALL_REDUCE ? b : b * (size_t)nranks;
}

int symmem_coll_tune_path(char *out, size_t len, int create_dir, int *explicit_path)
{
    return symmem_tune_file_path(out, len, create_dir, explicit_path);
}

/* ---- editing ------------------------------------------------------------------------------------------- */
symmem_status_t symmem_coll_tune_clear(symmem_coll_tuning_t *tu, symmem_coll_kind_t kind)
{
    topo_table_t *t = &tu->table;
    if (kind == SYMMEM_COLL_KIND_COUNT) {
        t->nrules = 0;
        return SYMMEM_OK;
    }
    int k = 0;
    for (int i = 0; i < t->nrules; i++)
        if (t->rules[i].kind != (int)kind) t->rules[k++] = t->rules[i];
    t->nrules = k;
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_tune_set(symmem_coll_tuning_t *tu, symmem_coll_kind_t kind, size_t max_bytes,
                                     symmem_algo_t algo)
{
    if ((int)kind < 0 || kind >= SYMMEM_COLL_BARRIER)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_coll_tune_set: invalid op %d", (int)kind);
    if ((int)algo <= SYMMEM_ALGO_AUTO || !symmem_algo_listed((int)algo) || symmem_algo_lossy((int)algo))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "symmem_coll_tune_set: algorithm %d is not a concrete exact algorithm", (int)algo);
    if (topo_table_add(&tu->table, kind, max_bytes, algo) != 0)
        return symmem_set_error(SYMMEM_INVALID_USAGE, "symmem_coll_tune_set: table full (%d rules)",
                                TOPO_TABLE_MAX_RULES);
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_tune_replace(symmem_coll_tuning_t *tu, symmem_coll_kind_t kind, symmem_form_t form,
                                         const topo_table_t *rules)
{
    topo_table_t t = tu->table;
    int k = 0;
    for (int i = 0; i < t.nrules; i++)
        if (t.rules[i].kind != (int)kind || t.rules[i].form != (int)form) t.rules[k++] = t.rules[i];
    t.nrules = k;
    for (int i = 0; i < rules->nrules; i++) {
        const topo_rule_t *r = &rules->rules[i];
        if (r->kind != (int)kind || r->form != (int)form) continue;
        if (topo_table_add_form(&t, kind, form, r->max_bytes, r->algo) != 0)
            return symmem_set_error(SYMMEM_INVALID_USAGE, "symmem_coll_tune_replace: table full (%d rules)",
                                    TOPO_TABLE_MAX_RULES);
    }
    tu->table = t;
    return SYMMEM_OK;
}

/* ---- file I/O ----------------------------------------------------------------------------------------------
 * The file is untrusted input (another version's sections, a hand edit, a damaged save): it is read whole
 * through base/safe_file.h (no link followed, a regular file of this user that nobody else may write, at
 * most TUNE_FILE_MAX bytes), and only the section of this key is parsed. Other sections are not this
 * library's to judge: another version may name algorithms this one does not know, so their lines are never
 * an error here, and a save copies them forward as they are. */
#define TUNE_FILE_MAX ((size_t)1 << 20) /* a section is a few KiB: room for hundreds of keys */
#define TUNE_LINE_MAX 510               /* characters of a rule (before any comment) */
#define TUNE_LOCK_MAX_MS 2000           /* a save holds the lock for milliseconds; rank 0 does not wait longer */

static int blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* One line of the file: [*a, *b) its text without the comment and the blanks around it; returns where the
 * next line starts. */
static const char *line_text(const char *p, const char *end, const char **a, const char **b)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *e = nl ? nl : end, *hash = memchr(p, '#', (size_t)(e - p));
    const char *x = p, *y = hash ? hash : e;
    while (x < y && blank(*x)) x++;
    while (y > x && blank(y[-1])) y--;
    *a = x;
    *b = y;
    return nl ? nl + 1 : end;
}

/* A section header's relation to `key`: -1 not a header; 1 "[key]"; 0 any other section. A header without
 * its ']' starts another section too, except when its text is the key: that is this key's section, damaged
 * (*broken = 1). */
static int header_for(const char *a, const char *b, const char *key, int *broken)
{
    *broken = 0;
    if (a == b || *a != '[') return -1;
    const char *close = memchr(a, ']', (size_t)(b - a)), *x = a + 1, *y = close ? close : b;
    while (x < y && blank(*x)) x++;
    while (y > x && blank(y[-1])) y--;
    const int named = (size_t)(y - x) == strlen(key) && memcmp(x, key, (size_t)(y - x)) == 0;
    if (named && !close) *broken = 1;
    return named;
}

/* One rule of this key's section into t; the error (recorded, "name:line: ...") otherwise. */
static symmem_status_t parse_rule(const char *a, const char *b, const char *name, int lineno, const char *key,
                                  topo_table_t *t)
{
    if (b - a > TUNE_LINE_MAX)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: line longer than %d characters", name, lineno,
                                   TUNE_LINE_MAX);
    char s[TUNE_LINE_MAX + 1];
    memcpy(s, a, (size_t)(b - a));
    s[b - a] = '\0';
    char op[64], size[64], algo_name[64], extra[8];
    if (sscanf(s, "%63s %63s %63s %7s", op, size, algo_name, extra) != 3)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: expected \"<op> <max_bytes|inf> <algorithm>\"",
                                   name, lineno);
    /* "all_reduce" (every form) or "all_reduce.ord" (one form: symmem_form_name) */
    int form = TOPO_FORM_ANY;
    char *dot = strchr(op, '.');
    if (dot) {
        *dot = '\0';
        form = symmem_form_lookup(dot + 1);
        if (form < 0)
            return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: unknown form \"%s\" (ord, sym_in, sym_out, sym)",
                                       name, lineno, dot + 1);
    }
    const int kind = symmem_coll_kind_from_name(op);
    if (kind < 0 || kind >= SYMMEM_COLL_BARRIER)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                   "%s:%d: unknown op \"%s\" (all_reduce, reduce_scatter, all_gather)", name, lineno,
                                   op);
    size_t max_bytes;
    if (strcmp(size, "inf") == 0) max_bytes = SIZE_MAX;
    else if (symmem_parse_size(size, &max_bytes) != 0)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: \"%s\" is not a size", name, lineno, size);
    const int algo = symmem_algo_lookup(algo_name);
    if (algo <= SYMMEM_ALGO_AUTO)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: \"%s\" is not a concrete algorithm", name, lineno,
                                   algo_name);
    if (symmem_algo_lossy(algo))
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT,
                                   "%s:%d: \"%s\" is lossy: it runs only where a call names it, never from a table",
                                   name, lineno, algo_name);
    if (topo_table_add_form(t, kind, form, max_bytes, (symmem_algo_t)algo) != 0)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: more than %d rules in section [%s]", name, lineno,
                                   TOPO_TABLE_MAX_RULES, key);
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_tune_parse(symmem_coll_tuning_t *tu, const char *text, size_t len, const char *name)
{
    topo_table_t t;
    t.nrules = 0;
    int lineno = 0, in_section = 0, found = 0;
    if (!text) text = "", len = 0;
    for (const char *p = text, *end = text + len; p < end;) {
        const char *a, *b;
        p = line_text(p, end, &a, &b);
        lineno++;
        int broken;
        const int h = header_for(a, b, tu->fingerprint, &broken);
        if (broken)
            return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: section header without ']'", name, lineno);
        if (h >= 0) {
            in_section = h;
            found |= h;
        } else if (in_section && a < b) {
            SYMMEM_CHECK(parse_rule(a, b, name, lineno, tu->fingerprint, &t));
        }
    }
    if (!found) {
        SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "%s has no section for this topology [%s]; using the built-in table", name,
                    tu->fingerprint);
        return SYMMEM_OK;
    }
    tu->table = t;
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "loaded %d algorithm rules for [%s] from %s", t.nrules, tu->fingerprint, name);
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_tune_load(symmem_coll_tuning_t *tu, const char *path)
{
    char *text;
    size_t len;
    SYMMEM_CHECK(symmem_safe_parents(path, path, "the algorithm table"));
    SYMMEM_CHECK(symmem_safe_read(path, TUNE_FILE_MAX, &text, &len, NULL));
    const symmem_status_t st = symmem_coll_tune_parse(tu, text, len, path);
    free(text);
    return st;
}

static void print_table(const topo_table_t *t, const char *fingerprint, FILE *out)
{
    fprintf(out, "[%s]\n", fingerprint);
    for (int i = 0; i < t->nrules; i++) {
        const topo_rule_t *r = &t->rules[i];
        char op[64];
        if (r->form == TOPO_FORM_ANY) snprintf(op, sizeof op, "%s", symmem_coll_kind_name((symmem_coll_kind_t)r->kind));
        else
            snprintf(op, sizeof op, "%s.%s", symmem_coll_kind_name((symmem_coll_kind_t)r->kind),
                     symmem_form_name((symmem_form_t)r->form));
        if (r->max_bytes == SIZE_MAX) fprintf(out, "%-22s %12s  %s\n", op, "inf", symmem_algo_name(r->algo));
        else fprintf(out, "%-22s %12zu  %s\n", op, r->max_bytes, symmem_algo_name(r->algo));
    }
}

void symmem_coll_tune_print(const symmem_coll_tuning_t *tu, FILE *out)
{
    if (!tu || !out) return;
    /* the effective table: active rules, plus the defaults (every form) for kinds without any */
    topo_table_t eff = tu->table;
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++) {
        int has = 0;
        for (int i = 0; i < eff.nrules && !has; i++) has = eff.rules[i].kind == k;
        if (has) continue;
        for (int i = 0; i < tu->defaults.nrules; i++)
            if (tu->defaults.rules[i].kind == k)
                topo_table_add(&eff, k, tu->defaults.rules[i].max_bytes, tu->defaults.rules[i].algo);
    }
    print_table(&eff, tu->fingerprint, out);
}

/* The other sections of the existing file, line for line (its leading comments dropped: ours replace them;
 * this key's section, damaged or not, dropped: the caller writes it anew). */
static void copy_other_sections(const char *key, const char *text, size_t len, FILE *out)
{
    int skip = 0, header_done = 0;
    for (const char *p = text, *end = text + len; p < end;) {
        const char *a, *b, *line = p;
        p = line_text(p, end, &a, &b);
        if (!header_done && a == b) continue; /* blank or comment only */
        header_done = 1;
        int broken;
        const int h = header_for(a, b, key, &broken);
        if (h >= 0) skip = h || broken;
        if (skip) continue;
        fwrite(line, 1, (size_t)(p - line), out);
        if (p == end && p[-1] != '\n') fputc('\n', out);
    }
}

symmem_status_t symmem_coll_tune_save(const symmem_coll_tuning_t *tu, const char *path)
{
    return symmem_coll_tune_save_within(tu, path, symmem_param_int(SYMMEM_PARAM_TIMEOUT_MS));
}

symmem_status_t symmem_coll_tune_save_within(const symmem_coll_tuning_t *tu, const char *path, int timeout_ms)
{
    char lock_path[PATH_MAX + 8];
    if ((size_t)snprintf(lock_path, sizeof lock_path, "%s.lock", path) >= sizeof lock_path)
        return symmem_record_error(SYMMEM_INVALID_ARGUMENT, "symmem_coll_tune_save: path too long");
    SYMMEM_CHECK(symmem_safe_parents(path, path, "the algorithm table"));
    int lock;
    SYMMEM_CHECK(symmem_safe_lock(
        lock_path, timeout_ms > 0 && timeout_ms < TUNE_LOCK_MAX_MS ? timeout_ms : TUNE_LOCK_MAX_MS, &lock));
    /* under the lock every writer of this file takes: any temporary file beside it is a dead save's */
    const int cleaned = symmem_safe_clean(path, 0);
    if (cleaned)
        SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "removed %d temporary file(s) of an earlier save of %s that did not finish",
                    cleaned, path);
    char *old = NULL;
    size_t old_len = 0;
    int missing = 0;
    symmem_status_t st = symmem_safe_read(path, TUNE_FILE_MAX, &old, &old_len, &missing);
    if (st != SYMMEM_OK && !missing) {
        /* a link, a FIFO, another user's file: never replaced (nor followed); the caller says it was not saved */
        close(lock);
        return st;
    }
    symmem_clear_error();
    symmem_safe_out_t out;
    st = symmem_safe_out_open(&out, path, 0644); /* the user's other jobs read it; nobody else writes it */
    if (st == SYMMEM_OK) {
        fprintf(out.f, "# symmem algorithm table v2 (SYMMEM_TUNE_FILE): <op>[.<form>] <max_bytes|inf> <algorithm> per "
                       "line,\n# under the [key] it was measured for: topology fingerprint, placement, grid, workspace, "
                       "library version\n");
        if (old) copy_other_sections(tu->fingerprint, old, old_len, out.f);
        symmem_coll_tune_print(tu, out.f);
        st = symmem_safe_out_commit(&out);
    }
    free(old);
    close(lock);
    return st;
}

/* ---- what communicator init reads and writes --------------------------------------------------------------- */
void symmem_coll_tune_load_cached(symmem_coll_tuning_t *tu)
{
    char path[PATH_MAX];
    int explicit_path = 0;
    struct stat st;
    if (symmem_coll_tune_path(path, sizeof path, 0, &explicit_path) != 0) return; /* none, or refused (warned) */
    if (!explicit_path && lstat(path, &st) != 0 && errno == ENOENT) return;      /* nothing measured here yet */
    if (symmem_coll_tune_load(tu, path) == SYMMEM_OK) return;
    SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "algorithm table %s not used, the built-in table is: %s", path,
                symmem_last_error());
    symmem_clear_error();
    tu->table.nrules = 0;
}

void symmem_coll_tune_save_cached(const symmem_coll_tuning_t *tu, int timeout_ms, char *where, size_t len)
{
    char path[PATH_MAX];
    int explicit_path = 0;
    if (symmem_coll_tune_path(path, sizeof path, 1, &explicit_path) != 0) {
        snprintf(where, len, "not saved: no cache folder to use (see the warning above, or set SYMMEM_TUNE_FILE or "
                             "SYMMEM_TOPO_CACHE_DIR)");
        return;
    }
    if (symmem_coll_tune_save_within(tu, path, timeout_ms) == SYMMEM_OK) {
        snprintf(where, len, "saved to %s", path);
        return;
    }
    SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "autotune: the table was not saved (%s); this communicator uses it, the next init "
                                    "measures again",
                symmem_last_error());
    snprintf(where, len, "not saved");
    symmem_clear_error();
}

int symmem_coll_tune_drop_unavailable(symmem_coll_tuning_t *tu, const int *available, char *what, size_t len)
{
    topo_table_t *t = &tu->table;
    int k = 0, dropped = 0;
    size_t used = 0;
    if (len) what[0] = '\0';
    for (int i = 0; i < t->nrules; i++) {
        const topo_rule_t *r = &t->rules[i];
        if ((int)r->algo > SYMMEM_ALGO_AUTO && (int)r->algo < SYMMEM_ALGO_COUNT && available[r->algo]) {
            t->rules[k++] = *r;
            continue;
        }
        char bound[32];
        if (r->max_bytes == SIZE_MAX) snprintf(bound, sizeof bound, "inf");
        else snprintf(bound, sizeof bound, "%zu", r->max_bytes);
        const int n = snprintf(what + used, used < len ? len - used : 0, "%s%s %s %s", dropped ? ", " : "",
                               symmem_coll_kind_name((symmem_coll_kind_t)r->kind), bound, symmem_algo_name(r->algo));
        if (n > 0 && used + (size_t)n < len) used += (size_t)n;
        dropped++;
    }
    t->nrules = k;
    return dropped;
}
