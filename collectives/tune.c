/* A communicator's algorithm table (see tune.h): the choice SYMMEM_ALGO_AUTO makes, editing, and the
 * tuning file's reader and writer. */
#include "collectives/tune.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
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

symmem_algo_t symmem_coll_choose(const symmem_coll_tuning_t *t, symmem_coll_kind_t kind, size_t bytes)
{
    if (!t) return SYMMEM_ALGO_TWOSHOT_PUSH;
    if (t->env_algo != SYMMEM_ALGO_AUTO) return t->env_algo;
    symmem_algo_t a = topo_table_lookup(&t->table, kind, bytes);
    if (a == SYMMEM_ALGO_AUTO) a = topo_table_lookup(&t->defaults, kind, bytes);
    return a == SYMMEM_ALGO_AUTO ? SYMMEM_ALGO_TWOSHOT_PUSH : a;
}

size_t symmem_coll_message_bytes(int nranks, symmem_coll_kind_t kind, size_t count, symmem_dtype_t dtype)
{
    const size_t b = count * symmem_dtype_size(dtype);
    return kind == SYMMEM_COLL_ALL_REDUCE ? b : b * (size_t)nranks;
}

int symmem_coll_tune_path(char *out, size_t len, int create_dir, int *explicit_path)
{
    if (symmem_tune_file_path(out, len, explicit_path) != 0) return -1;
    char dir[4096];
    if (create_dir && !*explicit_path && symmem_cache_dir(dir, sizeof dir) == 0) symmem_mkdir_p(dir);
    return 0;
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

/* ---- file I/O ---------------------------------------------------------------------------------------------- */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) *--e = '\0';
    return s;
}

symmem_status_t symmem_coll_tune_load(symmem_coll_tuning_t *tu, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return symmem_record_error(SYMMEM_SYSTEM_ERROR, "cannot open the algorithm table %s: %s", path, strerror(errno));
    topo_table_t t;
    t.nrules = 0;
    char line[512];
    int lineno = 0, in_section = 0, found = 0;
    symmem_status_t st = SYMMEM_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            /* Longer than the buffer: the rest must not be read as a line of its own. A long comment is
             * fine (its rest is skipped); anything else is an error naming the line. */
            int ch = fgetc(f);
            if (ch != EOF && ch != '\n' && !strchr(line, '#')) {
                st = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: line longer than %zu characters", path,
                                      lineno, sizeof line - 2);
                break;
            }
            while (ch != EOF && ch != '\n') ch = fgetc(f);
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *s = trim(line);
        if (!*s) continue;
        if (*s == '[') {
            char *end = strchr(s, ']');
            if (!end) {
                st = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: section header without ']'", path, lineno);
                break;
            }
            *end = '\0';
            in_section = strcmp(trim(s + 1), tu->fingerprint) == 0;
            found |= in_section;
            continue;
        }
        char op[64], size[64], algo_name[64], extra[8];
        if (sscanf(s, "%63s %63s %63s %7s", op, size, algo_name, extra) != 3) {
            st = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: expected \"<op> <max_bytes|inf> <algorithm>\"", path,
                                  lineno);
            break;
        }
        const int kind = symmem_coll_kind_from_name(op);
        size_t max_bytes;
        symmem_algo_t algo;
        if (kind < 0 || kind >= SYMMEM_COLL_BARRIER) {
            st = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: unknown op \"%s\" (all_reduce, reduce_scatter, all_gather)",
                                  path, lineno, op);
            break;
        }
        if (strcmp(size, "inf") == 0) max_bytes = SIZE_MAX;
        else if (symmem_parse_size(size, &max_bytes) != 0) {
            st = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: \"%s\" is not a size", path, lineno, size);
            break;
        }
        const int a = symmem_algo_lookup(algo_name);
        if (a > SYMMEM_ALGO_AUTO && symmem_algo_lossy(a)) { /* lossy: only where a call names it */
            st = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: \"%s\" is lossy: a table holds exact algorithms only",
                                     path, lineno, algo_name);
            break;
        }
        if (a <= SYMMEM_ALGO_AUTO) {
            st = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: \"%s\" is not a concrete algorithm", path, lineno,
                                  algo_name);
            break;
        }
        algo = (symmem_algo_t)a;
        if (in_section && topo_table_add(&t, kind, max_bytes, algo) != 0) {
            st = symmem_record_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: more than %d rules in section [%s]", path, lineno,
                                     TOPO_TABLE_MAX_RULES, tu->fingerprint);
            break;
        }
    }
    fclose(f);
    if (st != SYMMEM_OK) return st;
    if (!found) {
        SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "%s has no section for this topology [%s]; using the built-in table", path,
                    tu->fingerprint);
        return SYMMEM_OK;
    }
    tu->table = t;
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "loaded %d algorithm rules for [%s] from %s", t.nrules, tu->fingerprint, path);
    return SYMMEM_OK;
}

static void print_table(const topo_table_t *t, const char *fingerprint, FILE *out)
{
    fprintf(out, "[%s]\n", fingerprint);
    for (int i = 0; i < t->nrules; i++) {
        const topo_rule_t *r = &t->rules[i];
        if (r->max_bytes == SIZE_MAX)
            fprintf(out, "%-15s %12s  %s\n", symmem_coll_kind_name((symmem_coll_kind_t)r->kind), "inf",
                    symmem_algo_name(r->algo));
        else
            fprintf(out, "%-15s %12zu  %s\n", symmem_coll_kind_name((symmem_coll_kind_t)r->kind), r->max_bytes,
                    symmem_algo_name(r->algo));
    }
}

void symmem_coll_tune_print(const symmem_coll_tuning_t *tu, FILE *out)
{
    if (!tu || !out) return;
    /* the effective table: active rules, plus the defaults for kinds without any */
    topo_table_t eff = tu->table;
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++) {
        if (topo_table_lookup(&eff, (symmem_coll_kind_t)k, 0) != SYMMEM_ALGO_AUTO) continue;
        for (int i = 0; i < tu->defaults.nrules; i++)
            if (tu->defaults.rules[i].kind == k)
                topo_table_add(&eff, k, tu->defaults.rules[i].max_bytes, tu->defaults.rules[i].algo);
    }
    print_table(&eff, tu->fingerprint, out);
}

/* The exclusive lock that orders writers of `path` (a lock file beside it; released when fd closes), or -1
 * when none can be taken (the write then goes on unlocked: a lost section only costs a later re-measure). */
static int lock_path(const char *path)
{
    char lock[4096];
    if ((size_t)snprintf(lock, sizeof lock, "%s.lock", path) >= sizeof lock) return -1;
    const int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    return fd;
}

/* The other sections of an existing file (its header comments dropped: ours replaces them). */
static void copy_other_sections(const symmem_coll_tuning_t *tu, const char *path, FILE *out)
{
    FILE *in = fopen(path, "r");
    if (!in) return;
    char line[512];
    int skip = 0, header_done = 0;
    while (fgets(line, sizeof line, in)) {
        char copy[512];
        snprintf(copy, sizeof copy, "%s", line);
        char *s = trim(copy);
        if (!header_done && (*s == '#' || !*s)) continue;
        header_done = 1;
        if (*s == '[') {
            char *end = strchr(s, ']');
            if (end) *end = '\0';
            skip = strcmp(trim(s + 1), tu->fingerprint) == 0;
        }
        if (!skip) fputs(line, out);
    }
    fclose(in);
}

symmem_status_t symmem_coll_tune_save(const symmem_coll_tuning_t *tu, const char *path)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= sizeof tmp)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_coll_tune_save: path too long");
    const int lock = lock_path(path);
    const int fd = mkstemp(tmp); /* a new file, never one that existed (or a link someone placed there) */
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!out) {
        const int err = errno;
        if (fd >= 0) close(fd), unlink(tmp);
        if (lock >= 0) close(lock);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "cannot write %s: %s", tmp, strerror(err));
    }
    (void)fchmod(fd, 0644); /* later inits of the user's other jobs read it; nobody else writes it */
    fprintf(out, "# symmem algorithm table v1 (SYMMEM_TUNE_FILE): <op> <max_bytes|inf> <algorithm> per line,\n"
                 "# under the [key] it was measured for: topology fingerprint, placement, library version\n");
    copy_other_sections(tu, path, out);
    symmem_coll_tune_print(tu, out);
    const int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
        unlink(tmp);
        if (lock >= 0) close(lock);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "writing %s failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        const int err = errno;
        unlink(tmp);
        if (lock >= 0) close(lock);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "cannot rename %s to %s: %s", tmp, path, strerror(err));
    }
    if (lock >= 0) close(lock);
    return SYMMEM_OK;
}
