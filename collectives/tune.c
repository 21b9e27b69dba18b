/* The algorithm table: built-in defaults by link class and rank count, the tuning file (SYMMEM_TUNE_FILE,
 * written by symmem-bench --tune) keyed by a topology fingerprint, and the internal API to edit it.
 *
 * File format (text, one rule per line, '#' starts a comment):
 *     # symmem algorithm table v1
 *     [n2.rpd1.sm90x132.nvlink.5d1f0a33]
 *     all_reduce      65536  oneshot_push
 *     all_reduce      inf    twoshot_push
 *     reduce_scatter  inf    twoshot_push
 * A section header names the fingerprint of the machine and communicator shape it was measured on; the
 * rules under it say "messages of this op up to max_bytes (inclusive) use this algorithm". Rules of one op
 * are tried in increasing max_bytes; "inf" (or a final rule) covers the rest. Sizes accept K/M/G suffixes.
 * An op without rules in the matching section uses the built-in default. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/hash.h"
#include "collectives/coll_internal.h"
#include "base/comm_state.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

static void add_rule(symmem_coll_table_t *t, int kind, size_t max_bytes, symmem_algo_t algo)
{
    /* replace a rule with the same bound, else insert in (kind, max_bytes) order */
    int i = 0;
    for (; i < t->nrules; i++) {
        symmem_coll_rule_t *r = &t->rules[i];
        if (r->kind == kind && r->max_bytes == max_bytes) {
            r->algo = algo;
            return;
        }
        if (r->kind > kind || (r->kind == kind && r->max_bytes > max_bytes)) break;
    }
    if (t->nrules >= SYMMEM_COLL_MAX_RULES) return;
    memmove(&t->rules[i + 1], &t->rules[i], (size_t)(t->nrules - i) * sizeof t->rules[0]);
    t->rules[i].kind = kind;
    t->rules[i].max_bytes = max_bytes;
    t->rules[i].algo = algo;
    t->nrules++;
}

/* Built-in choices. Reasoning (see docs/collectives.md for the measurements they must be checked against):
 *  - small messages: latency is the kernel launch plus one one-way trip, which only the Lamport one-shot
 *    push achieves (no flag round trip, no barrier);
 *  - NVLink, medium: one-shot pull moves (n-1)*S into each GPU against 2(n-1)/n*S for two-shot, so it only
 *    pays at 2 ranks; above that two-shot;
 *  - large: two-shot push (stores go through NVLink better than loads; one sync per half);
 *  - PCIe: one-shot only while (n-1)*S is a few microseconds of wire, then the staged permutation so that
 *    each GPU has one inbound and one outbound stream;
 *  - no P2P (host memory): two-shot push, the fewest crossings of the host bus. */
void symmem_coll_table_defaults(symmem_comm_t comm, symmem_coll_table_t *t)
{
    const int n = comm->nranks;
    const symmem_link_t link = comm->coll ? comm->coll->link_class : SYMMEM_LINK_NVLINK;
    t->nrules = 0;
    if (link == SYMMEM_LINK_HOST) {
        add_rule(t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
        add_rule(t, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
        add_rule(t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
        return;
    }
    if (link == SYMMEM_LINK_PCIE) {
        add_rule(t, SYMMEM_COLL_ALL_REDUCE, n <= 4 ? 64 * KIB : 32 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
        add_rule(t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_STAGED);
        add_rule(t, SYMMEM_COLL_REDUCE_SCATTER, 64 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
        add_rule(t, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_STAGED);
        add_rule(t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_STAGED);
        return;
    }
    /* NVLink, or every rank on one GPU. Two ranks: one-shot and two-shot move the same bytes; measured on
     * 2x H200 (bench/NOTES.md, session 5): Lamport push up to 2 MiB (no sync at all), then the Lamport
     * two-shot (no sync either, and half the bytes per step): 4 MiB 17.6 us against 20.3 for two-shot
     * push and 19.9 for PyTorch's two-shot, 64 MiB 196 against 199-205. More ranks: one-shot moves (n-1)S
     * per GPU against two-shot's 2(n-1)S/n, so two-shot takes over early; the Lamport two-shot up to
     * 4 MiB, two-shot push above. Not measured on more than two GPUs: with 4 ranks on 2 GPUs (co-located,
     * so only the order means something) the Lamport two-shot led two-shot pull at 64 KiB-1 MiB (8.6 /
     * 9.1 / 13.3 against 9.4 / 10.1 / 14.1 us), tied two-shot push at 4 MiB and trailed it by 4% at
     * 16 MiB. `symmem-bench --tune` measures the real machine. */
    if (n <= 2) {
        add_rule(t, SYMMEM_COLL_ALL_REDUCE, 2 * MIB, SYMMEM_ALGO_ONESHOT_PUSH);
        add_rule(t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_LAMPORT);
    } else {
        add_rule(t, SYMMEM_COLL_ALL_REDUCE, n <= 4 ? 256 * KIB : 128 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
        add_rule(t, SYMMEM_COLL_ALL_REDUCE, 4 * MIB, SYMMEM_ALGO_TWOSHOT_LAMPORT);
        add_rule(t, SYMMEM_COLL_ALL_REDUCE, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
    }
    add_rule(t, SYMMEM_COLL_REDUCE_SCATTER, 256 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
    add_rule(t, SYMMEM_COLL_REDUCE_SCATTER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
    if (n <= 2) {
        /* measured (bench/results/h200x2-nvlink/final/tune_ag.txt): push while latency-bound, then the
         * two-shot push, then pull once the wire dominates */
        add_rule(t, SYMMEM_COLL_ALL_GATHER, 256 * KIB, SYMMEM_ALGO_ONESHOT_PUSH);
        add_rule(t, SYMMEM_COLL_ALL_GATHER, 8 * MIB, SYMMEM_ALGO_TWOSHOT_PUSH);
        add_rule(t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_ONESHOT_PULL);
    } else {
        add_rule(t, SYMMEM_COLL_ALL_GATHER, 256 * KIB, SYMMEM_ALGO_ONESHOT_PULL);
        add_rule(t, SYMMEM_COLL_ALL_GATHER, SIZE_MAX, SYMMEM_ALGO_TWOSHOT_PUSH);
    }
}

/* ---- push or pull, from measured peer bandwidth (the init probe, coll.c) -------------------------------- */
/* A clear margin (30%) before overriding a default: the probe is short, and the defaults' choices also
 * weigh latency, which the bandwidth figures do not see. */
#define PREFER_MARGIN 0.7

symmem_coll_prefer_t symmem_coll_prefer_from_figures(double read_gbs, double write_gbs)
{
    /* NaN fails every comparison; infinities are not figures either */
    if (!(read_gbs > 0.0 && write_gbs > 0.0) || read_gbs > 1e300 || write_gbs > 1e300) return SYMMEM_COLL_PREFER_KEEP;
    if (write_gbs < PREFER_MARGIN * read_gbs) return SYMMEM_COLL_PREFER_PULL;
    if (read_gbs < PREFER_MARGIN * write_gbs) return SYMMEM_COLL_PREFER_PUSH;
    return SYMMEM_COLL_PREFER_KEEP;
}

int symmem_coll_table_apply_prefer(symmem_coll_table_t *t, symmem_coll_prefer_t prefer)
{
    if (prefer != SYMMEM_COLL_PREFER_PULL) return 0;
    int changed = 0;
    for (int i = 0; i < t->nrules; i++) {
        symmem_coll_rule_t *r = &t->rules[i];
        if (r->algo == SYMMEM_ALGO_ONESHOT_PUSH) r->algo = SYMMEM_ALGO_ONESHOT_PULL;
        else if (r->algo == SYMMEM_ALGO_TWOSHOT_PUSH || r->algo == SYMMEM_ALGO_STAGED ||
                 r->algo == SYMMEM_ALGO_TWOSHOT_LAMPORT)
            r->algo = SYMMEM_ALGO_TWOSHOT_PULL;
        else continue;
        changed++;
    }
    return changed;
}

const char *symmem_coll_prefer_name(symmem_coll_prefer_t prefer)
{
    switch (prefer) {
    case SYMMEM_COLL_PREFER_PULL: return "pull";
    case SYMMEM_COLL_PREFER_PUSH: return "push";
    default: return "the built-in defaults";
    }
}

symmem_algo_t symmem_coll_table_lookup(const symmem_coll_table_t *t, symmem_coll_kind_t kind, size_t bytes)
{
    symmem_algo_t last = SYMMEM_ALGO_AUTO;
    for (int i = 0; i < t->nrules; i++) {
        const symmem_coll_rule_t *r = &t->rules[i];
        if (r->kind != (int)kind) continue;
        if (bytes <= r->max_bytes) return r->algo;
        last = r->algo;
    }
    return last; /* above every bound: the largest rule; AUTO if the kind has no rule */
}

uint64_t symmem_coll_table_hash(const symmem_coll_table_t *t)
{
    uint64_t h = SYMMEM_FNV64_INIT;
    for (int i = 0; i < t->nrules; i++) {
        h = symmem_fnv64_u64(h, (uint64_t)t->rules[i].kind);
        h = symmem_fnv64_u64(h, (uint64_t)t->rules[i].max_bytes);
        h = symmem_fnv64_u64(h, (uint64_t)t->rules[i].algo);
    }
    return h;
}

/* The fingerprint must be the same string on every rank, so it is built from the full link matrix
 * (every rank's row, allgathered) and facts every rank knows about every GPU. */
symmem_status_t symmem_coll_make_fingerprint(symmem_comm_t comm)
{
    struct symmem_coll *co = comm->coll;
    const int n = comm->nranks;
    int32_t row[SYMMEM_MAX_RANKS] = {0}, matrix[SYMMEM_MAX_RANKS * SYMMEM_MAX_RANKS];
    for (int j = 0; j < n; j++) row[j] = (int32_t)comm->link[j];
    SYMMEM_CHECK(symmem_comm_allgather(comm, row, matrix, sizeof row));
    symmem_link_t worst = SYMMEM_LINK_NVLINK;
    uint32_t h = SYMMEM_FNV32_INIT;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            const int l = matrix[i * SYMMEM_MAX_RANKS + j];
            h = symmem_fnv32_word(h, (uint32_t)l);
            if (i == j || l == SYMMEM_LINK_SELF) continue;
            if (l == SYMMEM_LINK_HOST || l == SYMMEM_LINK_NONE) worst = SYMMEM_LINK_HOST;
            else if (l == SYMMEM_LINK_PCIE && worst != SYMMEM_LINK_HOST) worst = SYMMEM_LINK_PCIE;
        }
    /* Host-placed memory (no P2P between some pair) behaves like the host link for every pair. */
    if (!comm->all_p2p) worst = SYMMEM_LINK_HOST;
    co->link_class = worst;
    snprintf(co->fingerprint, sizeof co->fingerprint, "n%d.rpd%d.sm%d%dx%d.%s.%08x", n, comm->ranks_per_device,
             comm->peers[0].cc_major, comm->peers[0].cc_minor, comm->min_sm_count,
             worst == SYMMEM_LINK_NVLINK ? "nvlink" : worst == SYMMEM_LINK_PCIE ? "pcie" : "host", h);
    return SYMMEM_OK;
}

const char *symmem_coll_fingerprint(symmem_comm_t comm)
{
    return comm && comm->coll ? comm->coll->fingerprint : "";
}

/* ---- editing ------------------------------------------------------------------------------------------- */
static symmem_status_t check_comm(symmem_comm_t comm, const char *call)
{
    if (!comm || !comm->coll)
        return symmem_set_error(SYMMEM_INVALID_USAGE, "%s: the communicator has no collectives (host backend?)", call);
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_tune_clear(symmem_comm_t comm, symmem_coll_kind_t kind)
{
    SYMMEM_CHECK(check_comm(comm, "symmem_coll_tune_clear"));
    symmem_coll_table_t *t = &comm->coll->table;
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

symmem_status_t symmem_coll_tune_set(symmem_comm_t comm, symmem_coll_kind_t kind, size_t max_bytes, symmem_algo_t algo)
{
    SYMMEM_CHECK(check_comm(comm, "symmem_coll_tune_set"));
    if ((int)kind < 0 || kind >= SYMMEM_COLL_BARRIER)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_coll_tune_set: invalid op %d", (int)kind);
    if ((int)algo <= SYMMEM_ALGO_AUTO || algo >= SYMMEM_ALGO_COUNT)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_coll_tune_set: algorithm %d is not a concrete algorithm",
                                (int)algo);
    symmem_coll_table_t *t = &comm->coll->table;
    if (t->nrules >= SYMMEM_COLL_MAX_RULES)
        return symmem_set_error(SYMMEM_INVALID_USAGE, "symmem_coll_tune_set: table full (%d rules)", SYMMEM_COLL_MAX_RULES);
    add_rule(t, kind, max_bytes, algo);
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

static int kind_from_name(const char *s)
{
#define KIND_FROM_(name, value, text)                                                                      \
    if (strcmp(s, text) == 0) return value;
    SYMMEM_COLL_KIND_LIST(KIND_FROM_)
#undef KIND_FROM_
    return -1;
}

symmem_status_t symmem_coll_tune_load(symmem_comm_t comm, const char *path)
{
    SYMMEM_CHECK(check_comm(comm, "symmem_coll_tune_load"));
    FILE *f = fopen(path, "r");
    if (!f)
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "cannot open the algorithm table %s: %s", path, strerror(errno));
    symmem_coll_table_t t;
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
                st = symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: line longer than %zu characters", path,
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
                st = symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: section header without ']'", path, lineno);
                break;
            }
            *end = '\0';
            in_section = strcmp(trim(s + 1), comm->coll->fingerprint) == 0;
            found |= in_section;
            continue;
        }
        char op[64], size[64], algo_name[64], extra[8];
        if (sscanf(s, "%63s %63s %63s %7s", op, size, algo_name, extra) != 3) {
            st = symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: expected \"<op> <max_bytes|inf> <algorithm>\"", path,
                                  lineno);
            break;
        }
        const int kind = kind_from_name(op);
        size_t max_bytes;
        symmem_algo_t algo;
        if (kind < 0 || kind >= SYMMEM_COLL_BARRIER) {
            st = symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: unknown op \"%s\" (all_reduce, reduce_scatter, all_gather)",
                                  path, lineno, op);
            break;
        }
        if (strcmp(size, "inf") == 0) max_bytes = SIZE_MAX;
        else if (symmem_parse_size(size, &max_bytes) != 0) {
            st = symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: \"%s\" is not a size", path, lineno, size);
            break;
        }
        if (symmem_algo_from_name(algo_name, &algo) != SYMMEM_OK || algo == SYMMEM_ALGO_AUTO) {
            st = symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s:%d: \"%s\" is not a concrete algorithm", path, lineno,
                                  algo_name);
            break;
        }
        if (in_section) add_rule(&t, kind, max_bytes, algo);
    }
    fclose(f);
    if (st != SYMMEM_OK) return st;
    if (!found) {
        SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "%s has no section for this topology [%s]; using the built-in table", path,
                    comm->coll->fingerprint);
        return SYMMEM_OK;
    }
    comm->coll->table = t;
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "loaded %d algorithm rules for [%s] from %s", t.nrules, comm->coll->fingerprint, path);
    return SYMMEM_OK;
}

static void print_table(const symmem_coll_table_t *t, const char *fingerprint, FILE *out)
{
    fprintf(out, "[%s]\n", fingerprint);
    for (int i = 0; i < t->nrules; i++) {
        const symmem_coll_rule_t *r = &t->rules[i];
        if (r->max_bytes == SIZE_MAX)
            fprintf(out, "%-15s %12s  %s\n", symmem_coll_kind_name((symmem_coll_kind_t)r->kind), "inf",
                    symmem_algo_name(r->algo));
        else
            fprintf(out, "%-15s %12zu  %s\n", symmem_coll_kind_name((symmem_coll_kind_t)r->kind), r->max_bytes,
                    symmem_algo_name(r->algo));
    }
}

void symmem_coll_tune_print(symmem_comm_t comm, void *out)
{
    if (!comm || !comm->coll || !out) return;
    /* the effective table: active rules, plus the defaults for kinds without any */
    symmem_coll_table_t eff = comm->coll->table;
    for (int k = 0; k < SYMMEM_COLL_BARRIER; k++) {
        if (symmem_coll_table_lookup(&eff, (symmem_coll_kind_t)k, 0) != SYMMEM_ALGO_AUTO) continue;
        for (int i = 0; i < comm->coll->defaults.nrules; i++)
            if (comm->coll->defaults.rules[i].kind == k)
                add_rule(&eff, k, comm->coll->defaults.rules[i].max_bytes, comm->coll->defaults.rules[i].algo);
    }
    print_table(&eff, comm->coll->fingerprint, (FILE *)out);
}

symmem_status_t symmem_coll_tune_save(symmem_comm_t comm, const char *path)
{
    SYMMEM_CHECK(check_comm(comm, "symmem_coll_tune_save"));
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= sizeof tmp)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_coll_tune_save: path too long");
    FILE *out = fopen(tmp, "w");
    if (!out) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(out, "# symmem algorithm table v1 (SYMMEM_TUNE_FILE): <op> <max_bytes|inf> <algorithm> per line,\n"
                 "# under the [fingerprint] of the topology it was measured on\n");
    /* keep the other sections of an existing file */
    FILE *in = fopen(path, "r");
    if (in) {
        char line[512];
        int skip = 0, header_done = 0;
        while (fgets(line, sizeof line, in)) {
            char copy[512];
            snprintf(copy, sizeof copy, "%s", line);
            char *s = trim(copy);
            if (!header_done && (*s == '#' || !*s)) continue; /* our header replaces the old one */
            header_done = 1;
            if (*s == '[') {
                char *end = strchr(s, ']');
                if (end) *end = '\0';
                skip = strcmp(trim(s + 1), comm->coll->fingerprint) == 0;
            }
            if (!skip) fputs(line, out);
        }
        fclose(in);
    }
    symmem_coll_tune_print(comm, out);
    const int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
        unlink(tmp);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "writing %s failed", tmp);
    }
    if (rename(tmp, path) != 0) {
        const int err = errno;
        unlink(tmp);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "cannot rename %s to %s: %s", tmp, path, strerror(err));
    }
    return SYMMEM_OK;
}
