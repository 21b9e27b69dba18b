/* The parameter table's one rule (base/param.h), no GPU: every default is valid; an empty value is the
 * default; a refused value gets the same event whichever variable it is (a warning at init naming the
 * variable, the value, the reason with the valid values, and the default used), the readers see the default,
 * and symmem_param_get / symmem_param_check say why; warnings pass any SYMMEM_LOG_SUBSYS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "symmem/symmem.h"
#include "test_util.h"

static int param_index(const char *name)
{
    for (int i = 0; i < symmem_param_count(); i++)
        if (strcmp(symmem_param_get(i, SYMMEM_PARAM_FIELD_NAME), name) == 0) return i;
    return -1;
}

/* The contents of `path` (at most 64 KiB), NUL-terminated, into a static buffer. */
static const char *slurp(const char *path)
{
    static char buf[1 << 16];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return buf;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count_of(const char *text, const char *needle)
{
    int k = 0;
    for (const char *p = text; (p = strstr(p, needle)) != NULL; p++) k++;
    return k;
}

static void every_row_is_whole(void)
{
    CHECK(symmem_param_count() == SYMMEM_PARAM_COUNT);
    int python = 0;
    for (int i = 0; i < symmem_param_count(); i++) {
        const char *name = symmem_param_get(i, SYMMEM_PARAM_FIELD_NAME);
        const char *def = symmem_param_get(i, SYMMEM_PARAM_FIELD_DEFAULT);
        const char *type = symmem_param_get(i, SYMMEM_PARAM_FIELD_TYPE);
        const char *valid = symmem_param_get(i, SYMMEM_PARAM_FIELD_VALID);
        const char *reader = symmem_param_get(i, SYMMEM_PARAM_FIELD_READER);
        char why[256] = "";
        /* the default is one of the values the rule takes: a reader falling back to it gets a valid value */
        if (symmem_param_check(i, def, why, sizeof why) != 0) fprintf(stderr, "%s=%s: %s\n", name, def, why);
        CHECK(symmem_param_check(i, def, why, sizeof why) == 0);
        CHECK(strcmp(type, "int") == 0 || strcmp(type, "size") == 0 || strcmp(type, "flag") == 0 ||
              strcmp(type, "string") == 0);
        CHECK(valid && strlen(valid) > 2 && !strpbrk(valid, "\n\t`"));
        CHECK(strcmp(reader, "library") == 0 || strcmp(reader, "python") == 0);
        python += strcmp(reader, "python") == 0;
    }
    /* the Python package's variables are in the same table */
    CHECK(python >= 12);
    int k = param_index("SYMMEM_SGLANG_MODE");
    CHECK(k >= 0 && strcmp(symmem_param_get(k, SYMMEM_PARAM_FIELD_READER), "python") == 0);
    CHECK(strcmp(symmem_param_get(k, SYMMEM_PARAM_FIELD_VALID), "fallback, replace, off") == 0);
    /* every algorithm's name is in SYMMEM_ALGO's valid values (the table builds them from the list) */
    for (int a = 0; a < SYMMEM_ALGO_COUNT; a++)
        CHECK(strstr(symmem_param_get(SYMMEM_PARAM_ALGO, SYMMEM_PARAM_FIELD_VALID), symmem_algo_name((symmem_algo_t)a)));
    CHECK(symmem_param_get(0, SYMMEM_PARAM_FIELD_READER + 1) == NULL);
}

static void check_says_why(void)
{
    char why[256];
    const int t = param_index("SYMMEM_TIMEOUT_MS"), m = param_index("SYMMEM_MIN_BLOCK_THREADS");
    CHECK(symmem_param_check(t, "1234", why, sizeof why) == 0);
    CHECK(symmem_param_check(t, "", why, sizeof why) == 0); /* empty: the default */
    CHECK(symmem_param_check(t, "-5", why, sizeof why) == 1 && strcmp(why, "not in 1..2147483647") == 0);
    CHECK(symmem_param_check(t, "soon", why, sizeof why) == 1 && strcmp(why, "not an integer") == 0);
    CHECK(symmem_param_check(t, " 5", why, sizeof why) == 1);
    CHECK(symmem_param_check(m, "96", why, sizeof why) == 0);
    CHECK(symmem_param_check(m, "100", why, sizeof why) == 1 && strcmp(why, "not a multiple of 32 in 32..512") == 0);
    CHECK(symmem_param_check(SYMMEM_PARAM_PDL, "Yes", why, sizeof why) == 0);
    CHECK(symmem_param_check(SYMMEM_PARAM_PDL, "2", why, sizeof why) == 1);
    CHECK(symmem_param_check(SYMMEM_PARAM_LOG_SUBSYS, "^coll,TOPO", why, sizeof why) == 0);
    CHECK(symmem_param_check(SYMMEM_PARAM_LOG_SUBSYS, "COLL,GPU", why, sizeof why) == 1 && strstr(why, "GPU is none"));
    CHECK(symmem_param_check(SYMMEM_PARAM_LOG_SUBSYS, "^", why, sizeof why) == 1);
    CHECK(symmem_param_check(SYMMEM_PARAM_ISLANDS, "0-1+4-5,2-3+6-7", why, sizeof why) == 0);
    CHECK(symmem_param_check(SYMMEM_PARAM_ISLANDS, "0-3;4-7", why, sizeof why) == 1);
    CHECK(symmem_param_check(SYMMEM_PARAM_ISLANDS, "3-1", why, sizeof why) == 1);
    CHECK(symmem_param_check(SYMMEM_PARAM_WORKSPACE_BYTES, "1M", why, sizeof why) == 1 && strstr(why, "4M..64G"));
    CHECK(symmem_param_check(SYMMEM_PARAM_LOG_FILE, "any text at all", why, sizeof why) == 0);
    CHECK(symmem_param_check(-1, "1", why, sizeof why) == -1 && symmem_param_check(t, NULL, why, sizeof why) == -1);
    CHECK(symmem_param_check(t, "x", NULL, 0) == 1); /* no room for the reason: the verdict alone */
}

/* One refused setting in a fresh process: a host-backend communicator comes up (the setting is never an
 * init error), the log holds the warning once, and the listing marks it. */
typedef struct refused_case {
    const char *var, *value, *reason, *dflt;
} refused_case_t;

static const refused_case_t refused_cases[] = {
    {"SYMMEM_ALGO", "fastest", "not one of auto, oneshot_pull, oneshot_push", "auto"},
    {"SYMMEM_PLACEMENT", "gpu", "not one of auto, device, host_numa, host", "auto"},
    {"SYMMEM_TIMEOUT_MS", "-5", "not in 1..2147483647", "30000"},
    {"SYMMEM_TIMEOUT_MS", "4294967297", "not in 1..2147483647", "30000"},
    {"SYMMEM_TIMEOUT_MS", "0", "not in 1..2147483647", "30000"},
    {"SYMMEM_GRID_SHARE", "200", "not in 1..100", "75"},
    {"SYMMEM_BACKEND", "gpu", "not one of cuda, host", "cuda"},
    {"SYMMEM_AUTOTUNE", "sometimes", "not one of auto, off, force, 0, 1", "auto"},
    {"SYMMEM_ON_ERROR", "panic", "not one of report, abort", "report"},
    {"SYMMEM_ERROR_POLL_MS", "9223372036854775807", "not in 1..60000", "10"},
    {"SYMMEM_MAX_BLOCKS", "-3", "not in 0..2147483647", "0"},
    {"SYMMEM_PDL", "maybe", "not 0 or 1", "1"},
    {"SYMMEM_LOG_LEVEL", "verbose", "not one of NONE, WARN, INFO, DEBUG, TRACE", "WARN"},
    {"SYMMEM_LOG_SUBSYS", "COLL,GPU", "not a list of CORE, BOOT", "ALL"},
    {"SYMMEM_MIN_BLOCK_THREADS", "100", "not a multiple of 32 in 32..512", "128"},
    {"SYMMEM_WORKSPACE_BYTES", "lots", "not a size", "64M"},
    {"SYMMEM_ISLANDS", "0-3;4-7", "not sets of ranks", "(empty)"},
};

static int refused_child(const refused_case_t *c, const char *log)
{
    setenv("SYMMEM_LOG_FILE", log, 1);
    setenv(c->var, c->value, 1);
    symmem_unique_id_t id;
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_HOST; /* the API's choice beats SYMMEM_BACKEND, which is still checked */
    symmem_comm_t comm;
    if (symmem_get_unique_id(&id) != SYMMEM_OK || symmem_comm_init(1, 0, &id, &o, &comm) != SYMMEM_OK) return 2;
    symmem_comm_destroy(comm);
    const int i = param_index(c->var);
    char why[256] = "";
    if (i < 0 || strcmp(symmem_param_get(i, SYMMEM_PARAM_FIELD_VALUE), c->value) != 0) return 3;
    if (strcmp(symmem_param_get(i, SYMMEM_PARAM_FIELD_SOURCE), "environment, refused: the default is used") != 0)
        return 4;
    if (symmem_param_check(i, c->value, why, sizeof why) != 1 || !strstr(why, c->reason)) return 5;
    /* the reader sees the default, never the refused value */
    if (strcmp(symmem_param_str((symmem_param_id_t)i), symmem_param_default((symmem_param_id_t)i)) != 0) return 6;
    return 0;
}

static void refused_values_warn_at_init_and_use_the_default(void)
{
    int failed = 0;
    for (size_t k = 0; k < sizeof refused_cases / sizeof *refused_cases; k++) {
        const refused_case_t *c = &refused_cases[k];
        char log[] = "/tmp/symmem-test-params-XXXXXX";
        const int fd = mkstemp(log);
        CHECK(fd >= 0);
        close(fd);
        const pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) _exit(refused_child(c, log));
        int status = 0;
        waitpid(pid, &status, 0);
        const char *text = slurp(log);
        char want[512];
        snprintf(want, sizeof want, "WARN CORE param.c:");
        char line[512];
        snprintf(line, sizeof line, "%s=%s is %s", c->var, c->value, c->reason);
        char tail[128];
        snprintf(tail, sizeof tail, "; using the default %s", c->dflt);
        const int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && count_of(text, line) == 1 &&
                       strstr(strstr(text, line), tail) && strstr(text, want);
        if (!ok) {
            fprintf(stderr, "%s=%s: child exit %d; log:\n%s\n", c->var, c->value,
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1, text);
            failed++;
        }
        unlink(log);
    }
    CHECK(failed == 0);
}

/* The Python package's variables are its to warn about (where it reads them): the library only marks them. */
static void python_variables_are_marked_not_warned(void)
{
    char log[] = "/tmp/symmem-test-params-XXXXXX";
    const int fd = mkstemp(log);
    CHECK(fd >= 0);
    close(fd);
    setenv("SYMMEM_LOG_FILE", log, 1);
    setenv("SYMMEM_SGLANG_MODE", "bogus", 1);
    const int i = param_index("SYMMEM_SGLANG_MODE");
    CHECK(strcmp(symmem_param_get(i, SYMMEM_PARAM_FIELD_SOURCE), "environment, refused: the default is used") == 0);
    SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "a line");
    const char *text = slurp(log);
    unlink(log);
    CHECK(strstr(text, "a line") && !strstr(text, "SYMMEM_SGLANG_MODE"));
}

static void empty_is_the_default(void)
{
    setenv("SYMMEM_LOG_SUBSYS", "", 1);
    setenv("SYMMEM_TIMEOUT_MS", "", 1);
    CHECK(strcmp(symmem_param_str(SYMMEM_PARAM_LOG_SUBSYS), "ALL") == 0);
    CHECK(symmem_param_int(SYMMEM_PARAM_TIMEOUT_MS) == 30000);
    CHECK(strcmp(symmem_param_get(SYMMEM_PARAM_LOG_SUBSYS, SYMMEM_PARAM_FIELD_SOURCE),
                 "environment, empty: the default is used") == 0);
    CHECK(strcmp(symmem_param_get(SYMMEM_PARAM_LOG_SUBSYS, SYMMEM_PARAM_FIELD_VALUE), "") == 0);
}

static void flags_take_words(void)
{
    static const struct {
        const char *v;
        int want;
    } cases[] = {{"yes", 1}, {"On", 1}, {"TRUE", 1}, {"1", 1}, {"no", 0}, {"off", 0}, {"false", 0}, {"0", 0},
                 {"maybe", 1} /* refused: the default, 1 */};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        setenv("SYMMEM_PDL", cases[k].v, 1);
        symmem_param_reload();
        CHECK(symmem_param_int(SYMMEM_PARAM_PDL) == cases[k].want);
    }
}

/* SYMMEM_LOG_SUBSYS selects informational lines; a warning is logged whatever it names. */
static void warnings_pass_any_subsystem_list(void)
{
    char log[] = "/tmp/symmem-test-params-XXXXXX";
    const int fd = mkstemp(log);
    CHECK(fd >= 0);
    close(fd);
    setenv("SYMMEM_LOG_FILE", log, 1);
    setenv("SYMMEM_LOG_LEVEL", "INFO", 1);
    setenv("SYMMEM_LOG_SUBSYS", "^CORE", 1);
    SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "warning line");
    SYMMEM_INFO(SYMMEM_SUBSYS_CORE, "core info line");
    SYMMEM_INFO(SYMMEM_SUBSYS_COLL, "coll info line");
    const char *text = slurp(log);
    unlink(log);
    CHECK(strstr(text, "warning line") && !strstr(text, "core info line") && strstr(text, "coll info line"));
}

int main(void)
{
    static const test_case_t cases[] = {
        {"every_row_is_whole", every_row_is_whole, 10},
        {"check_says_why", check_says_why, 10},
        {"refused_values_warn_at_init_and_use_the_default", refused_values_warn_at_init_and_use_the_default, 60},
        {"python_variables_are_marked_not_warned", python_variables_are_marked_not_warned, 10},
        {"empty_is_the_default", empty_is_the_default, 10},
        {"flags_take_words", flags_take_words, 10},
        {"warnings_pass_any_subsystem_list", warnings_pass_any_subsystem_list, 10},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
