#include "base/param.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "symmem/symmem.h"

typedef enum { PT_INT, PT_SIZE, PT_FLAG, PT_ONE_OF, PT_LIST, PT_SETS, PT_TEXT } param_type_t;
static const char *const type_names[] = {[PT_INT] = "int",       [PT_SIZE] = "size",   [PT_FLAG] = "flag",
                                         [PT_ONE_OF] = "string", [PT_LIST] = "string", [PT_SETS] = "string",
                                         [PT_TEXT] = "string"};
typedef enum { PR_LIB, PR_PY } param_reader_t;
static const char *const reader_names[] = {[PR_LIB] = "library", [PR_PY] = "python"};

typedef struct {
    const char *name; /* without the SYMMEM_ prefix */
    const char *full; /* with it: a literal, so symmem_param_name never writes shared memory */
    param_type_t type;
    const char *def;
    const char *valid; /* the rule (param.h): "LO..HI[/STEP]", "a|b|c", or what a TEXT value is */
    param_reader_t reader;
    const char *doc;
} param_def_t;

static const param_def_t params[SYMMEM_PARAM_COUNT] = {
#define SYMMEM_PARAM_DEF_(n, t, d, v, r, doc) {#n, "SYMMEM_" #n, PT_##t, d, v, PR_##r, doc},
    SYMMEM_PARAM_LIST(SYMMEM_PARAM_DEF_)
#undef SYMMEM_PARAM_DEF_
};

#define REASON_LEN 256
static const char *given[SYMMEM_PARAM_COUNT];  /* as given: the environment's, else the default */
static const char *values[SYMMEM_PARAM_COUNT]; /* in effect: the given value when it is taken, else the default */
static char refused[SYMMEM_PARAM_COUNT][REASON_LEN]; /* why the environment's value is refused ("": taken) */
static const char *sources[SYMMEM_PARAM_COUNT];
static char valid_words[SYMMEM_PARAM_COUNT][512];
static pthread_once_t param_once = PTHREAD_ONCE_INIT;
static pthread_once_t words_once = PTHREAD_ONCE_INIT;
extern char **environ;

/* ---- the rules ------------------------------------------------------------------------------------------- */

/* "LO..HI[/STEP]" of an INT or SIZE rule. */
static int rule_range(const param_def_t *p, int64_t *lo, int64_t *hi, int64_t *step)
{
    char a[32], b[32];
    const char *dots = strstr(p->valid, ".."), *slash = strchr(p->valid, '/');
    if (!dots) return -1;
    snprintf(a, sizeof a, "%.*s", (int)(dots - p->valid), p->valid);
    snprintf(b, sizeof b, "%.*s", (int)((slash ? slash : dots + strlen(dots)) - (dots + 2)), dots + 2);
    *step = slash ? strtoll(slash + 1, NULL, 10) : 1;
    if (p->type == PT_SIZE) {
        size_t x, y;
        if (symmem_parse_size(a, &x) != 0 || symmem_parse_size(b, &y) != 0) return -1;
        *lo = (int64_t)x, *hi = (int64_t)y;
        return 0;
    }
    return symmem_parse_int(a, lo) == 0 && symmem_parse_int(b, hi) == 0 ? 0 : -1;
}

/* Whether `name` (len bytes) is one of the '|'-separated names of `list`, any case. */
static int in_list(const char *list, const char *name, size_t len)
{
    for (const char *p = list; *p;) {
        const size_t n = strcspn(p, "|");
        if (n && n == len && strncasecmp(p, name, len) == 0) return 1;
        p += n;
        if (*p == '|') p++;
    }
    return 0;
}

/* The names of a list rule, as "a, b, c". */
static void list_words(const char *list, char *out, size_t len)
{
    size_t used = 0;
    out[0] = '\0';
    for (const char *p = list; *p && used + 1 < len;) {
        const size_t n = strcspn(p, "|");
        if (n) {
            int k = snprintf(out + used, len - used, "%s%.*s", used ? ", " : "", (int)n, p);
            used += k > 0 ? (size_t)k : 0;
        }
        p += n;
        if (*p == '|') p++;
    }
}

static const char *const flag_words[][2] = {{"0", "1"}, {"false", "true"}, {"no", "yes"}, {"off", "on"}};

static int flag_value(const char *v)
{
    for (size_t k = 0; k < sizeof flag_words / sizeof *flag_words; k++)
        for (int b = 0; b < 2; b++)
            if (strcasecmp(v, flag_words[k][b]) == 0) return b;
    return -1;
}

/* Sets of ranks: "a" or "a-b" joined by '+', sets separated by ','; ranks below SYMMEM_MAX_RANKS. Whether
 * they fit a communicator's ranks is for its init to say. */
static int sets_ok(const char *v)
{
    const char *p = v;
    for (;;) {
        if (!isdigit((unsigned char)*p)) return 0;
        char *end;
        const long a = strtol(p, &end, 10);
        long b = a;
        if (*end == '-') {
            if (!isdigit((unsigned char)end[1])) return 0;
            b = strtol(end + 1, &end, 10);
        }
        if (a > b || b >= SYMMEM_MAX_RANKS) return 0;
        if (*end == '\0') return 1;
        if (*end != '+' && *end != ',') return 0;
        p = end + 1;
    }
}

/* 0 when parameter i takes v (empty always: the default), else 1 with the reason ("not in 1..100"). */
static int check_value(int i, const char *v, char *why, size_t len)
{
    const param_def_t *p = &params[i];
    char words[512];
    int64_t lo = 0, hi = 0, step = 1, x;
    size_t z;
    if (!*v) return 0;
    switch (p->type) {
    case PT_INT:
        if (symmem_parse_int(v, &x) != 0) return snprintf(why, len, "not an integer"), 1;
        if (rule_range(p, &lo, &hi, &step) == 0 && (x < lo || x > hi || x % step != 0)) {
            const int range = (int)strcspn(p->valid, "/");
            if (step > 1) snprintf(why, len, "not a multiple of %" PRId64 " in %.*s", step, range, p->valid);
            else snprintf(why, len, "not in %.*s", range, p->valid);
            return 1;
        }
        return 0;
    case PT_SIZE:
        if (symmem_parse_size(v, &z) != 0) return snprintf(why, len, "not a size (like 4096, 64K, 32M, 1G)"), 1;
        if (rule_range(p, &lo, &hi, &step) == 0 && ((int64_t)z < lo || (uint64_t)z > (uint64_t)hi))
            return snprintf(why, len, "not in %s bytes", p->valid), 1;
        return 0;
    case PT_FLAG:
        if (flag_value(v) >= 0) return 0;
        return snprintf(why, len, "not 0 or 1 (nor false/true, no/yes, off/on)"), 1;
    case PT_ONE_OF:
        if (in_list(p->valid, v, strlen(v))) return 0;
        list_words(p->valid, words, sizeof words);
        return snprintf(why, len, "not one of %.200s", words), 1;
    case PT_LIST: {
        const char *s = v + (*v == '^');
        int names = 0;
        while (*s) {
            const size_t n = strcspn(s, ",");
            if (n && !in_list(p->valid, s, n)) {
                list_words(p->valid, words, sizeof words);
                return snprintf(why, len, "not a list of %.160s (%.*s is none of them)", words, (int)(n < 40 ? n : 40), s), 1;
            }
            names += n > 0;
            s += n;
            if (*s == ',') s++;
        }
        if (names) return 0;
        list_words(p->valid, words, sizeof words);
        return snprintf(why, len, "not a list of %.160s (it names none)", words), 1;
    }
    case PT_SETS:
        if (sets_ok(v)) return 0;
        return snprintf(why, len,
                        "not sets of ranks (ranks a or ranges a-b below %d joined by +, sets separated by commas, "
                        "e.g. 0-3,4-7)",
                        SYMMEM_MAX_RANKS),
               1;
    case PT_TEXT: return 0;
    }
    return 0;
}

/* The valid values in words, for the listing and the documentation. */
static void make_words(void)
{
    for (int i = 0; i < SYMMEM_PARAM_COUNT; i++) {
        const param_def_t *p = &params[i];
        char *out = valid_words[i], list[400];
        const size_t len = sizeof valid_words[i];
        int64_t lo, hi, step;
        switch (p->type) {
        case PT_INT:
        case PT_SIZE:
            if (rule_range(p, &lo, &hi, &step) != 0) snprintf(out, len, "%s", p->valid);
            else if (step > 1) snprintf(out, len, "%.*s, a multiple of %" PRId64, (int)strcspn(p->valid, "/"), p->valid, step);
            else snprintf(out, len, "%s", p->valid);
            break;
        case PT_FLAG: snprintf(out, len, "0 or 1 (also false/true, no/yes, off/on)"); break;
        case PT_ONE_OF: list_words(p->valid, out, len); break;
        case PT_LIST:
            list_words(p->valid, list, sizeof list);
            snprintf(out, len, "%s, separated by commas; a leading ^ negates", list);
            break;
        case PT_SETS:
            snprintf(out, len, "sets of ranks: ranks a or ranges a-b joined by +, sets separated by commas");
            break;
        case PT_TEXT: snprintf(out, len, "%s", p->valid); break;
        }
    }
}

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 64;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++) prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof prev[0]);
    }
    return prev[lb];
}

/* Warn about SYMMEM_* variables nobody reads: a typo would otherwise be silently ignored. */
static void warn_unknown(void)
{
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "SYMMEM_", 7) != 0) continue;
        const char *name = *e + 7;
        size_t len = strcspn(name, "=");
        char buf[64];
        if (len >= sizeof buf) len = sizeof buf - 1;
        memcpy(buf, name, len);
        buf[len] = '\0';
        int known = 0, best = -1;
        size_t best_d = (size_t)-1;
        for (int i = 0; i < SYMMEM_PARAM_COUNT; i++) {
            if (strcmp(buf, params[i].name) == 0) {
                known = 1;
                break;
            }
            size_t d = edit_distance(buf, params[i].name);
            if (d < best_d) best_d = d, best = i;
        }
        /* Variables of the scripts, the tests, the tools and the package build (SYMMEM_BUILD_DIR,
         * SYMMEM_BUILD_TORCH, SYMMEM_CUDA_ARCHS, SYMMEM_WERROR, SYMMEM_GPU_MPS, SYMMEM_UNIQUE_ID: each
         * script's --help lists its own), not symmem's code. */
        static const char *const others[] = {"TEST_", "BENCH_", "BUILD_", "PY_", "FUZZ_", "MPS_", "SAN_", "EXPECT_"};
        int other = strcmp(buf, "UNIQUE_ID") == 0 || strcmp(buf, "WERROR") == 0 || strcmp(buf, "CUDA_ARCHS") == 0 ||
                    strcmp(buf, "SKIP_SANITIZE") == 0 || strcmp(buf, "GPU_MPS") == 0 || strcmp(buf, "JOBS") == 0 ||
                    strcmp(buf, "RUN_BUDGET_S") == 0 || strcmp(buf, "TORCH_DIR") == 0;
        for (size_t k = 0; k < sizeof others / sizeof *others && !other; k++)
            other = strncmp(buf, others[k], strlen(others[k])) == 0;
        if (known || other) continue;
        SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "unknown environment variable SYMMEM_%s ignored%s%s%s", buf,
                    best >= 0 && best_d <= 3 ? "; did you mean SYMMEM_" : "",
                    best >= 0 && best_d <= 3 ? params[best].name : "", best >= 0 && best_d <= 3 ? "?" : "");
    }
}

/* The library's refused values, each with its reason and the default used instead. The Python package's
 * variables are its to warn about, where it reads them (symmem_param_check). */
static void warn_refused(void)
{
    for (int i = 0; i < SYMMEM_PARAM_COUNT; i++)
        if (refused[i][0] && params[i].reader == PR_LIB)
            SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "%s=%s is %s; using the default %s%s%s", params[i].full, given[i],
                        refused[i], *params[i].def ? "" : "(", *params[i].def ? params[i].def : "empty",
                        *params[i].def ? "" : ")");
}

static void load(void)
{
    for (int i = 0; i < SYMMEM_PARAM_COUNT; i++) {
        const char *v = getenv(params[i].full);
        given[i] = v ? v : params[i].def;
        if (!v || check_value(i, v, refused[i], sizeof refused[i]) == 0) refused[i][0] = '\0';
        values[i] = v && *v && !refused[i][0] ? v : params[i].def;
        sources[i] = !v              ? "default"
                     : !*v           ? "environment, empty: the default is used"
                     : refused[i][0] ? "environment, refused: the default is used"
                                     : "environment";
    }
}

static void warn_all(void)
{
    warn_unknown();
    warn_refused();
}

static atomic_int warned; /* the warnings above were issued */

/* Called by logging once its level is set (logging reads its own settings from this table, so the
 * warnings cannot be issued while the table is loading). */
void symmem_param_warn_unknown(void)
{
    if (!atomic_exchange(&warned, 1)) warn_all();
}

static void ensure_loaded(void)
{
    pthread_once(&param_once, load);
    symmem_log_init(); /* outside the once: logging initialises from this table */
}

/* Tests only: the environment read again, and its warnings issued again at the next read (a test changes
 * a variable between reads in one process). */
void symmem_param_reload(void)
{
    pthread_once(&param_once, load);
    load();
    atomic_store(&warned, 0);
    if (symmem_log_level_ >= 0) symmem_param_warn_unknown();
}

const char *symmem_param_str(symmem_param_id_t id)
{
    ensure_loaded();
    if ((int)id < 0 || id >= SYMMEM_PARAM_COUNT) return "";
    return values[id];
}

const char *symmem_param_name(symmem_param_id_t id)
{
    return ((int)id < 0 || id >= SYMMEM_PARAM_COUNT) ? "" : params[id].full;
}
const char *symmem_param_default(symmem_param_id_t id)
{
    return ((int)id < 0 || id >= SYMMEM_PARAM_COUNT) ? "" : params[id].def;
}
const char *symmem_param_doc(symmem_param_id_t id)
{
    return ((int)id < 0 || id >= SYMMEM_PARAM_COUNT) ? "" : params[id].doc;
}

int symmem_param_count(void) { return SYMMEM_PARAM_COUNT; }

const char *symmem_param_get(int index, symmem_param_field_t field)
{
    if (index < 0 || index >= SYMMEM_PARAM_COUNT) return NULL;
    switch (field) {
    case SYMMEM_PARAM_FIELD_NAME: return params[index].full;
    case SYMMEM_PARAM_FIELD_TYPE: return type_names[params[index].type];
    case SYMMEM_PARAM_FIELD_DEFAULT: return params[index].def;
    case SYMMEM_PARAM_FIELD_VALUE: ensure_loaded(); return given[index];
    case SYMMEM_PARAM_FIELD_SOURCE: ensure_loaded(); return sources[index];
    case SYMMEM_PARAM_FIELD_DOC: return params[index].doc;
    case SYMMEM_PARAM_FIELD_VALID: pthread_once(&words_once, make_words); return valid_words[index];
    case SYMMEM_PARAM_FIELD_READER: return reader_names[params[index].reader];
    }
    return NULL;
}

int symmem_param_check(int index, const char *value, char *reason, size_t len)
{
    char why[REASON_LEN];
    if (index < 0 || index >= SYMMEM_PARAM_COUNT || !value) return -1;
    if (check_value(index, value, why, sizeof why) == 0) return 0;
    if (reason && len) snprintf(reason, len, "%s", why);
    return 1;
}

/* strtoull and strtoll skip leading blanks and accept a sign (strtoull then negates: " -1" is SIZE_MAX):
 * both parsers insist on a digit first, so what they accept is exactly what the docs say. */
int symmem_parse_size(const char *s, size_t *out)
{
    if (!s || !isdigit((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    default: return -1;
    }
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    if (shift && v > (~0ull >> shift)) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

int symmem_parse_int(const char *s, int64_t *out)
{
    if (!s || !(isdigit((unsigned char)*s) || (*s == '-' && isdigit((unsigned char)s[1])))) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end) return -1;
    *out = v;
    return 0;
}

/* The values in effect always parse: a refused one was replaced by the default, and every default is valid
 * (tests/unit/test_params.c checks the table). */
int64_t symmem_param_int(symmem_param_id_t id)
{
    if ((int)id < 0 || id >= SYMMEM_PARAM_COUNT) return 0;
    const char *s = symmem_param_str(id);
    int64_t v = 0;
    if (params[id].type == PT_FLAG) return flag_value(s) > 0;
    if (symmem_parse_int(s, &v) != 0) v = 0;
    return v;
}

size_t symmem_param_size(symmem_param_id_t id)
{
    size_t v = 0;
    if ((int)id < 0 || id >= SYMMEM_PARAM_COUNT) return 0;
    if (symmem_parse_size(symmem_param_str(id), &v) != 0) v = 0;
    return v;
}
