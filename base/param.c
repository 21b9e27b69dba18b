#include "base/param.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "symmem/symmem.h"

typedef enum { PT_INT, PT_SIZE, PT_STR } param_type_t;
static const char *const type_names[] = {[PT_INT] = "int", [PT_SIZE] = "size", [PT_STR] = "string"};

typedef struct {
    const char *name; /* without the SYMMEM_ prefix */
    const char *full; /* with it: a literal, so symmem_param_name never writes shared memory */
    param_type_t type;
    const char *def;
    const char *doc;
} param_def_t;

static const param_def_t params[SYMMEM_PARAM_COUNT] = {
#define SYMMEM_PARAM_DEF_(n, t, d, doc) {#n, "SYMMEM_" #n, PT_##t, d, doc},
    SYMMEM_PARAM_LIST(SYMMEM_PARAM_DEF_)
#undef SYMMEM_PARAM_DEF_
};

static const char *values[SYMMEM_PARAM_COUNT];
static int from_env[SYMMEM_PARAM_COUNT]; /* the value is the environment's, not the default */
/* A malformed value is reported once per variable, not on every read. */
static atomic_int warned[SYMMEM_PARAM_COUNT];
static pthread_once_t param_once = PTHREAD_ONCE_INIT;
extern char **environ;

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
        /* Variables used by the tools, the tests, the scripts and the package build (SYMMEM_BUILD_DIR,
         * SYMMEM_BUILD_TORCH, SYMMEM_CUDA_ARCHS, SYMMEM_WERROR, SYMMEM_GPU_MPS), the Python package
         * (SYMMEM_LIBRARY: which libsymmem to load; SYMMEM_TORCH_*) and its framework integrations
         * (SYMMEM_SGLANG_*, SYMMEM_VLLM_*), not the library. */
        static const char *const others[] = {"TEST_", "BENCH_", "BUILD_", "TORCH_", "SGLANG_", "VLLM_"};
        int other = strcmp(buf, "UNIQUE_ID") == 0 || strcmp(buf, "LIBRARY") == 0 || strcmp(buf, "WERROR") == 0 ||
                    strcmp(buf, "CUDA_ARCHS") == 0 || strcmp(buf, "SKIP_SANITIZE") == 0 ||
                    strcmp(buf, "SAN_BUILD_DIR") == 0 || strcmp(buf, "GPU_MPS") == 0;
        for (size_t k = 0; k < sizeof others / sizeof *others && !other; k++)
            other = strncmp(buf, others[k], strlen(others[k])) == 0;
        if (known || other) continue;
        SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "unknown environment variable SYMMEM_%s ignored%s%s%s", buf,
                    best >= 0 && best_d <= 3 ? "; did you mean SYMMEM_" : "",
                    best >= 0 && best_d <= 3 ? params[best].name : "", best >= 0 && best_d <= 3 ? "?" : "");
    }
}

static void load(void)
{
    for (int i = 0; i < SYMMEM_PARAM_COUNT; i++) {
        char name[80];
        snprintf(name, sizeof name, "SYMMEM_%s", params[i].name);
        const char *v = getenv(name);
        values[i] = v ? v : params[i].def;
        from_env[i] = v != NULL;
        atomic_store(&warned[i], 0);
    }
}

static pthread_once_t warn_once = PTHREAD_ONCE_INIT;

/* Called by logging once its level is set (logging reads its own settings from this table, so the
 * warnings cannot be issued while the table is loading). */
void symmem_param_warn_unknown(void) { pthread_once(&warn_once, warn_unknown); }

static void ensure_loaded(void)
{
    pthread_once(&param_once, load);
    symmem_log_init(); /* outside the once: logging initialises from this table */
}

void symmem_param_reload(void) { load(); }

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
    case SYMMEM_PARAM_FIELD_VALUE: return symmem_param_str((symmem_param_id_t)index);
    case SYMMEM_PARAM_FIELD_SOURCE: {
        const char *v = symmem_param_str((symmem_param_id_t)index);
        int64_t i;
        size_t z;
        if (!from_env[index]) return "default";
        if (params[index].type == PT_INT && symmem_parse_int(v, &i) != 0)
            return "environment, not an integer: the default is used";
        if (params[index].type == PT_SIZE && symmem_parse_size(v, &z) != 0)
            return "environment, not a size: the default is used";
        return "environment";
    }
    case SYMMEM_PARAM_FIELD_DOC: return params[index].doc;
    }
    return NULL;
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

int64_t symmem_param_int(symmem_param_id_t id)
{
    if ((int)id < 0 || id >= SYMMEM_PARAM_COUNT) return 0;
    const char *s = symmem_param_str(id);
    int64_t v;
    if (symmem_parse_int(s, &v) != 0) {
        if (atomic_exchange(&warned[id], 1) == 0)
            SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "%s=%s is not an integer; using the default %s", symmem_param_name(id),
                        s, params[id].def);
        symmem_parse_int(params[id].def, &v);
    }
    return v;
}

size_t symmem_param_size(symmem_param_id_t id)
{
    size_t v;
    if ((int)id < 0 || id >= SYMMEM_PARAM_COUNT) return 0;
    if (symmem_parse_size(symmem_param_str(id), &v) != 0) {
        if (atomic_exchange(&warned[id], 1) == 0)
            SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "%s=%s is not a size (like 4096, 64K, 32M); using the default %s",
                    symmem_param_name(id), symmem_param_str(id), params[id].def);
        symmem_parse_size(params[id].def, &v);
    }
    return v;
}
