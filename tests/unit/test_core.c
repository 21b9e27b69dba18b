/* Core unit tests (no GPU): status names and strings, parameters, unique ids, options, logging. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "base/handles.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "symmem/symmem.h"
#include "test_util.h"

static void status_strings(void)
{
    CHECK(strcmp(symmem_status_name(SYMMEM_OK), "SYMMEM_OK") == 0);
    CHECK(strcmp(symmem_status_name(SYMMEM_TIMEOUT), "SYMMEM_TIMEOUT") == 0);
    CHECK(strcmp(symmem_status_name((symmem_status_t)999), "SYMMEM_UNKNOWN_STATUS") == 0);
    for (int s = 0; s < SYMMEM_STATUS_COUNT; s++) {
        CHECK(strncmp(symmem_status_name((symmem_status_t)s), "SYMMEM_", 7) == 0);
        CHECK(strlen(symmem_status_string((symmem_status_t)s)) > 3);
    }
    CHECK(symmem_version() == SYMMEM_VERSION);
}

static void last_error_is_per_thread_and_names_rank(void)
{
    symmem_log_set_rank(3);
    CHECK(symmem_set_error(SYMMEM_TIMEOUT, "waiting for rank %d", 5) == SYMMEM_TIMEOUT);
    CHECK(strcmp(symmem_last_error(), "rank 3: waiting for rank 5") == 0);
    symmem_append_error(" (more)");
    CHECK(strcmp(symmem_last_error(), "rank 3: waiting for rank 5 (more)") == 0);
    symmem_clear_error();
    CHECK(symmem_last_error()[0] == '\0');
}

static void sizes_parse(void)
{
    size_t v = 0;
    CHECK(symmem_parse_size("4096", &v) == 0 && v == 4096);
    CHECK(symmem_parse_size("64K", &v) == 0 && v == 65536);
    CHECK(symmem_parse_size("32M", &v) == 0 && v == 32u << 20);
    CHECK(symmem_parse_size("2GiB", &v) == 0 && v == 2ull << 30);
    CHECK(symmem_parse_size("", &v) != 0);
    CHECK(symmem_parse_size("12Q", &v) != 0);
    CHECK(symmem_parse_size("-5", &v) != 0);
    CHECK(symmem_parse_size("99999999999999999999G", &v) != 0);
    /* strtoull skips blanks and negates a leading '-': none of these is a size */
    CHECK(symmem_parse_size(" -1", &v) != 0);
    CHECK(symmem_parse_size("\t-1", &v) != 0);
    CHECK(symmem_parse_size("+1", &v) != 0);
    CHECK(symmem_parse_size(" 12", &v) != 0);
    CHECK(symmem_parse_size("18446744073709551615", &v) == 0 && v == SIZE_MAX);
    CHECK(symmem_parse_size("18446744073709551616", &v) != 0);
}

static void ints_parse(void)
{
    int64_t v = 0;
    CHECK(symmem_parse_int("30000", &v) == 0 && v == 30000);
    CHECK(symmem_parse_int("-12", &v) == 0 && v == -12);
    CHECK(symmem_parse_int("9223372036854775807", &v) == 0 && v == INT64_MAX);
    CHECK(symmem_parse_int("9223372036854775808", &v) != 0);
    CHECK(symmem_parse_int("", &v) != 0);
    CHECK(symmem_parse_int("-", &v) != 0);
    CHECK(symmem_parse_int(" 5", &v) != 0);
    CHECK(symmem_parse_int("+5", &v) != 0);
    CHECK(symmem_parse_int("5 ", &v) != 0);
    CHECK(symmem_parse_int("0x10", &v) != 0);
}

static int count_in_file(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    int k = 0;
    for (const char *p = buf; (p = strstr(p, needle)) != NULL; p++) k++;
    return k;
}

/* "warns once": three reads of a malformed variable log one warning. */
static void malformed_value_warns_once(void)
{
    char path[] = "/tmp/symmem-test-log-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    setenv("SYMMEM_LOG_FILE", path, 1);
    setenv("SYMMEM_TIMEOUT_MS", "soon", 1);
    setenv("SYMMEM_WORKSPACE_BYTES", "lots", 1);
    for (int i = 0; i < 3; i++) {
        CHECK(symmem_param_int(SYMMEM_PARAM_TIMEOUT_MS) == 30000);
        CHECK(symmem_param_size(SYMMEM_PARAM_WORKSPACE_BYTES) == 64u << 20);
    }
    int ints = count_in_file(path, "is not an integer"), sizes = count_in_file(path, "is not a size");
    unlink(path);
    CHECK(ints == 1 && sizes == 1);
}

/* Many threads ask for parameter names at once: each must see the whole name at its first call. */
static pthread_barrier_t names_bar;
static void *names_thread(void *p)
{
    (void)p;
    pthread_barrier_wait(&names_bar);
    for (int id = 0; id < SYMMEM_PARAM_COUNT; id++) {
        const char *n = symmem_param_name((symmem_param_id_t)id);
        if (strncmp(n, "SYMMEM_", 7) != 0 || strlen(n) < 9) return (void *)1;
    }
    return NULL;
}

static void param_names_from_many_threads(void)
{
    enum { T = 16 };
    pthread_t th[T];
    pthread_barrier_init(&names_bar, NULL, T);
    for (int i = 0; i < T; i++) CHECK(pthread_create(&th[i], NULL, names_thread, NULL) == 0);
    int bad = 0;
    for (int i = 0; i < T; i++) {
        void *r;
        pthread_join(th[i], &r);
        bad += r != NULL;
    }
    CHECK(bad == 0);
    CHECK(strcmp(symmem_param_name(SYMMEM_PARAM_TIMEOUT_MS), "SYMMEM_TIMEOUT_MS") == 0);
    CHECK(strcmp(symmem_param_name(SYMMEM_PARAM_COUNT), "") == 0);
}

static void params_from_environment(void)
{
    setenv("SYMMEM_TIMEOUT_MS", "1234", 1);
    setenv("SYMMEM_WORKSPACE_BYTES", "8M", 1);
    symmem_param_reload();
    CHECK(symmem_param_int(SYMMEM_PARAM_TIMEOUT_MS) == 1234);
    CHECK(symmem_param_size(SYMMEM_PARAM_WORKSPACE_BYTES) == 8u << 20);
    setenv("SYMMEM_TIMEOUT_MS", "soon", 1); /* refused: the default, with a warning (tests/unit/test_params.c) */
    symmem_param_reload();
    CHECK(symmem_param_int(SYMMEM_PARAM_TIMEOUT_MS) == atoi(symmem_param_default(SYMMEM_PARAM_TIMEOUT_MS)));
    CHECK(strcmp(symmem_param_name(SYMMEM_PARAM_TIMEOUT_MS), "SYMMEM_TIMEOUT_MS") == 0);
    CHECK(strlen(symmem_param_doc(SYMMEM_PARAM_TIMEOUT_MS)) > 0);
}

/* The public listing (symmem_param_count, symmem_param_get) is the internal table, every row of it whole, and
 * says where each value came from. */
static void public_param_listing(void)
{
    setenv("SYMMEM_TIMEOUT_MS", "1234", 1);
    setenv("SYMMEM_WORKSPACE_BYTES", "lots", 1);
    unsetenv("SYMMEM_LOG_LEVEL");
    symmem_param_reload();
    CHECK(symmem_param_count() == SYMMEM_PARAM_COUNT);
    for (int i = 0; i < symmem_param_count(); i++) {
        const char *name = symmem_param_get(i, SYMMEM_PARAM_FIELD_NAME);
        const char *type = symmem_param_get(i, SYMMEM_PARAM_FIELD_TYPE);
        const char *doc = symmem_param_get(i, SYMMEM_PARAM_FIELD_DOC);
        CHECK(name && strcmp(name, symmem_param_name((symmem_param_id_t)i)) == 0);
        CHECK(strcmp(symmem_param_get(i, SYMMEM_PARAM_FIELD_DEFAULT), symmem_param_default((symmem_param_id_t)i)) == 0);
        /* the value as given is the one in effect, except where the environment's was refused or empty */
        if (strncmp(symmem_param_get(i, SYMMEM_PARAM_FIELD_SOURCE), "environment,", 12) != 0)
            CHECK(strcmp(symmem_param_get(i, SYMMEM_PARAM_FIELD_VALUE), symmem_param_str((symmem_param_id_t)i)) == 0);
        CHECK(type && (strcmp(type, "int") == 0 || strcmp(type, "size") == 0 || strcmp(type, "flag") == 0 ||
                       strcmp(type, "string") == 0));
        /* one plain paragraph: a markdown table row (docs/configuration.md) and the listing's wrapping */
        CHECK(doc && strlen(doc) > 10 && !strpbrk(doc, "\n\t`"));
        for (int j = 0; j < i; j++) CHECK(strcmp(name, symmem_param_get(j, SYMMEM_PARAM_FIELD_NAME)) != 0);
    }
    const int t = SYMMEM_PARAM_TIMEOUT_MS, w = SYMMEM_PARAM_WORKSPACE_BYTES, l = SYMMEM_PARAM_LOG_LEVEL;
    CHECK(strcmp(symmem_param_get(t, SYMMEM_PARAM_FIELD_VALUE), "1234") == 0);
    CHECK(strcmp(symmem_param_get(t, SYMMEM_PARAM_FIELD_SOURCE), "environment") == 0);
    CHECK(strcmp(symmem_param_get(t, SYMMEM_PARAM_FIELD_TYPE), "int") == 0);
    CHECK(strcmp(symmem_param_get(w, SYMMEM_PARAM_FIELD_VALUE), "lots") == 0);
    CHECK(strcmp(symmem_param_get(w, SYMMEM_PARAM_FIELD_SOURCE), "environment, refused: the default is used") == 0);
    CHECK(strcmp(symmem_param_str((symmem_param_id_t)w), "64M") == 0);
    CHECK(strcmp(symmem_param_get(w, SYMMEM_PARAM_FIELD_TYPE), "size") == 0);
    CHECK(strcmp(symmem_param_get(l, SYMMEM_PARAM_FIELD_SOURCE), "default") == 0);
    CHECK(strcmp(symmem_param_get(l, SYMMEM_PARAM_FIELD_VALUE), "WARN") == 0);
    CHECK(symmem_param_get(-1, SYMMEM_PARAM_FIELD_NAME) == NULL);
    CHECK(symmem_param_get(symmem_param_count(), SYMMEM_PARAM_FIELD_NAME) == NULL);
    CHECK(symmem_param_get(0, (symmem_param_field_t)99) == NULL);
}

/* A misspelt variable gets a warning naming the closest real one. */
static void unknown_variable_warns_with_suggestion(void)
{
    char path[] = "/tmp/symmem-test-log-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    setenv("SYMMEM_LOG_FILE", path, 1);
    setenv("SYMMEM_TIMEOUT_SM", "5", 1);
    /* the build's and the scripts' own variables are not the library's to warn about */
    setenv("SYMMEM_WERROR", "ON", 1);
    setenv("SYMMEM_BUILD_TORCH", "ON", 1);
    setenv("SYMMEM_GPU_MPS", "1", 1);
    /* First use of parameters and logging in this process: each case is a fresh fork of a parent that has
     * used neither, so the environment set above is what they read. */
    SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "hello %d", 42);
    FILE *f = fopen(path, "r");
    CHECK(f);
    char buf[4096] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    unlink(path);
    CHECK(strstr(buf, "SYMMEM_TIMEOUT_SM") && strstr(buf, "did you mean SYMMEM_TIMEOUT_MS"));
    CHECK(strstr(buf, "WARN CORE") && strstr(buf, "hello 42"));
    CHECK(!strstr(buf, "SYMMEM_WERROR") && !strstr(buf, "SYMMEM_BUILD_TORCH") && !strstr(buf, "SYMMEM_GPU_MPS"));
}

static void unique_id_round_trip(void)
{
    symmem_unique_id_t id, back;
    CHECK_OK(symmem_get_unique_id(&id));
    char s[SYMMEM_UNIQUE_ID_STRLEN];
    CHECK_OK(symmem_unique_id_to_string(&id, s, sizeof s));
    CHECK(strlen(s) == 2 * SYMMEM_UNIQUE_ID_BYTES);
    CHECK_OK(symmem_unique_id_from_string(s, &back));
    CHECK(memcmp(&id, &back, sizeof id) == 0);
    symmem_unique_id_t other;
    CHECK_OK(symmem_get_unique_id(&other));
    CHECK(memcmp(&id, &other, sizeof id) != 0); /* fresh randomness each time */
    CHECK_ST(symmem_unique_id_to_string(&id, s, 10), SYMMEM_INVALID_ARGUMENT);
}

static void bad_unique_ids_rejected(void)
{
    symmem_unique_id_t id;
    CHECK_ST(symmem_unique_id_from_string("abc", &id), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("expected 128 hex digits");
    char s[SYMMEM_UNIQUE_ID_STRLEN];
    memset(s, 'z', sizeof s - 1);
    s[sizeof s - 1] = '\0';
    CHECK_ST(symmem_unique_id_from_string(s, &id), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("non-hex");
    memset(s, '0', sizeof s - 1); /* well formed but not an id: bad magic */
    CHECK_ST(symmem_unique_id_from_string(s, &id), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("not a symmem id");
}

static void options_validated(void)
{
    symmem_options_t o;
    symmem_options_init(&o);
    CHECK(o.magic == SYMMEM_OPTIONS_MAGIC && o.size == sizeof o && o.device == -1);
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    symmem_comm_t c;
    o.magic = 0;
    CHECK_ST(symmem_comm_init(1, 0, &id, &o, &c), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("SYMMEM_OPTIONS_INIT");
    symmem_options_init(&o);
    o.backend = (symmem_backend_t)42;
    CHECK_ST(symmem_comm_init(1, 0, &id, &o, &c), SYMMEM_INVALID_ARGUMENT);
    CHECK_ST(symmem_comm_init(0, 0, &id, NULL, &c), SYMMEM_INVALID_ARGUMENT);
    CHECK_ST(symmem_comm_init(SYMMEM_MAX_RANKS + 1, 0, &id, NULL, &c), SYMMEM_INVALID_ARGUMENT);
    CHECK_ST(symmem_comm_init(2, 2, &id, NULL, &c), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("rank 2 out of range");
    CHECK_ST(symmem_comm_init(2, -1, &id, NULL, &c), SYMMEM_INVALID_ARGUMENT);
}

/* A rank whose driver or device is missing fails at once with the cause, before it waits for its peers: rank
 * 1 never comes, and the timeout (60 s) is far beyond the case's time limit (20 s), so a rank that reached
 * the rendezvous first would fail this case by its limit, not pass it late. */
static void missing_device_fails_before_the_rendezvous(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.timeout_ms = 60000;
    o.device = 0;
    symmem_comm_t c;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        CHECK_ST(symmem_comm_init(2, 0, &id, &o, &c), SYMMEM_NO_DEVICE);
        CHECK(strstr(symmem_last_error(), "driver") || strstr(symmem_last_error(), "device"));
        CHECK_ERR_HAS("SYMMEM_BACKEND=host");
        /* every rank of one process, the same */
        symmem_comm_t cs[2];
        CHECK_ST(symmem_comm_init_all(2, (const int[]){0, 0}, &o, cs), SYMMEM_NO_DEVICE);
    } else {
        o.device = n + 3;
        CHECK_ST(symmem_comm_init(2, 0, &id, &o, &c), SYMMEM_INVALID_ARGUMENT);
        CHECK_ERR_HAS("does not exist");
    }
}

static void null_handles_are_safe(void)
{
    CHECK_OK(symmem_comm_destroy(NULL));
    CHECK_OK(symmem_free(NULL));
    CHECK(symmem_comm_rank(NULL) == -1 && symmem_comm_size(NULL) == -1);
    CHECK(symmem_buffer_ptr(NULL) == NULL && symmem_buffer_size(NULL) == 0);
    CHECK_ST(symmem_group_end(), SYMMEM_INVALID_USAGE);
}

/* The set of live handles: membership by value through growth, removals and reuse of removed slots; a
 * removal of what is not there changes nothing. */
static void handle_sets_track_membership(void)
{
    enum { N = 5000 };
    char *mem = calloc(N, 16);
    CHECK(mem);
    symmem_handle_set_t s = SYMMEM_HANDLE_SET_INIT;
    CHECK(!symmem_handle_set_has(&s, mem) && !symmem_handle_set_take(&s, mem));
    for (int i = 0; i < N; i++) CHECK(symmem_handle_set_add(&s, mem + 16 * i));
    for (int i = 0; i < N; i += 2) CHECK(symmem_handle_set_take(&s, mem + 16 * i));
    for (int round = 0; round < 20; round++) /* churn: removed slots are reused or rebuilt away */
        for (int i = 0; i < N; i += 2) {
            CHECK(symmem_handle_set_add(&s, mem + 16 * i));
            CHECK(symmem_handle_set_take(&s, mem + 16 * i));
        }
    for (int i = 0; i < N; i++) CHECK(symmem_handle_set_has(&s, mem + 16 * i) == (i % 2));
    CHECK(!symmem_handle_set_take(&s, mem) && !symmem_handle_set_has(&s, mem + 8) && !symmem_handle_set_has(&s, NULL));
    CHECK(s.live == N / 2 && 4 * s.used <= 3 * s.cap);
    free(s.slot);
    free(mem);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"status_strings", status_strings, 10},
        {"last_error_is_per_thread_and_names_rank", last_error_is_per_thread_and_names_rank, 10},
        {"sizes_parse", sizes_parse, 10},
        {"ints_parse", ints_parse, 10},
        {"malformed_value_warns_once", malformed_value_warns_once, 10},
        {"param_names_from_many_threads", param_names_from_many_threads, 10},
        {"params_from_environment", params_from_environment, 10},
        {"public_param_listing", public_param_listing, 10},
        {"unknown_variable_warns_with_suggestion", unknown_variable_warns_with_suggestion, 10},
        {"unique_id_round_trip", unique_id_round_trip, 10},
        {"bad_unique_ids_rejected", bad_unique_ids_rejected, 10},
        {"options_validated", options_validated, 10},
        {"missing_device_fails_before_the_rendezvous", missing_device_fails_before_the_rendezvous, 20},
        {"null_handles_are_safe", null_handles_are_safe, 10},
        {"handle_sets_track_membership", handle_sets_track_membership, 10},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
