/* Minimal, dependency-free test harness: every case runs in its own forked process with a time limit
 * (libuv style), so a hang or a crash fails that case only and is reported as such. */
#ifndef SYMMEM_TEST_UTIL_H
#define SYMMEM_TEST_UTIL_H

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_SKIP_CODE 77

/* Under AddressSanitizer the allocator maps and keeps memory of its own (shadow, quarantine), so tests that
 * count /proc/self/maps lines allow this many more; a leak per iteration would still show by thousands. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_MAPS_SLACK 64
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_MAPS_SLACK 64
#endif
#endif
#ifndef TEST_MAPS_SLACK
#define TEST_MAPS_SLACK 0
#endif

/* ---- the checks ------------------------------------------------------------------------------------
 * One family for every test. A check evaluates its argument once and, when it fails, reports
 * "file:line: what failed" and then acts by its prefix:
 *   CHECK_*     stops: exit(1) (each case of test_run_all runs in a process of its own)
 *   EXPECT_*    counts the failure in test_failures and goes on (a test that reports every deviation in one
 *               run, main returning test_failures ? 1 : 0); the first TEST_EXPECT_SHOWN failures are printed
 *   CC_CHECK_*  the ranks' form for cases of harness/harness.h's cc_run_cases (include harness.h): logs "FAIL
 *               file:line: ..." with the rank (cc_log) and returns 1 from the case; CC_EXPECT counts and goes on
 *   FUZZ_ASSERT a fuzz target's property (tests/fuzz/fuzz.h): aborts, so that libFuzzer keeps the input
 * What is checked: a condition (CHECK, EXPECT), a symmem status (CHECK_ST, CHECK_OK), the last error's text
 * (CHECK_ERR_HAS), a substring (CHECK_CONTAINS, EXPECT_CONTAINS), a CUDA runtime call (CHECK_CUDA, where
 * <cuda_runtime.h> is included), an NCCL call (CHECK_NCCL, where <nccl.h> is). */

/* The one core: `declare` the value once, test `failed`, report(ctx, file, line, fmt, ...) with a literal fmt,
 * then `action`. */
#define TEST_CHECK_CORE_(report, ctx, action, declare, failed, ...)                                        \
    do {                                                                                                   \
        declare;                                                                                           \
        if (failed) {                                                                                      \
            report((ctx), __FILE__, __LINE__, __VA_ARGS__);                                                \
            action;                                                                                        \
        }                                                                                                  \
    } while (0)
#define TEST_COND_(report, ctx, action, cond)                                                              \
    TEST_CHECK_CORE_(report, ctx, action, (void)0, !(cond), "CHECK failed: %s", #cond)
#define TEST_STATUS_(report, ctx, action, call, want)                                                      \
    TEST_CHECK_CORE_(report, ctx, action, const symmem_status_t test_st_ = (call), test_st_ != (want),     \
                     "%s returned %s, expected %s: %s", #call, symmem_status_name(test_st_),               \
                     symmem_status_name(want), symmem_last_error())
#define TEST_CONTAINS_(report, ctx, action, text, needle)                                                  \
    TEST_CHECK_CORE_(report, ctx, action, const char *test_text_ = (text),                                 \
                     !test_text_ || !strstr(test_text_, (needle)), "expected to find \"%s\" in \"%s\"", (needle), \
                     test_text_ ? test_text_ : "(null)")
#define TEST_CUDA_(report, ctx, action, call)                                                              \
    TEST_CHECK_CORE_(report, ctx, action, const cudaError_t test_cuda_ = (call), test_cuda_ != cudaSuccess, \
                     "%s failed: %s (%s)", #call, cudaGetErrorName(test_cuda_), cudaGetErrorString(test_cuda_))
#define TEST_NCCL_(report, ctx, action, call)                                                              \
    TEST_CHECK_CORE_(report, ctx, action, const ncclResult_t test_nccl_ = (call), test_nccl_ != ncclSuccess, \
                     "%s failed: %s", #call, ncclGetErrorString(test_nccl_))

/* Reporters: to stderr; the counting one only while fewer than TEST_EXPECT_SHOWN failures were counted (a
 * message may come without arguments: GNU C's ##__VA_ARGS__, as gcc, clang and nvcc take it). */
#define TEST_REPORT_(ctx, file, line, fmt, ...) fprintf(stderr, "%s:%d: " fmt "\n", (file), (line), ##__VA_ARGS__)
#define TEST_EXPECT_SHOWN 20
#define TEST_EXPECT_REPORT_(ctx, file, line, fmt, ...)                                                     \
    (test_failures < TEST_EXPECT_SHOWN ? (void)TEST_REPORT_(ctx, file, line, fmt, ##__VA_ARGS__) : (void)0)
static int test_failures __attribute__((unused)); /* the EXPECT checks' count */

#define CHECK(cond) TEST_COND_(TEST_REPORT_, NULL, exit(1), cond)
/* A symmem call returns `want`; the last error is printed otherwise. */
#define CHECK_ST(call, want) TEST_STATUS_(TEST_REPORT_, NULL, exit(1), call, want)
#define CHECK_OK(call) CHECK_ST(call, SYMMEM_OK)
/* The last error mentions `needle`. */
#define CHECK_ERR_HAS(needle) CHECK_CONTAINS(symmem_last_error(), needle)
#define CHECK_CONTAINS(text, needle) TEST_CONTAINS_(TEST_REPORT_, NULL, exit(1), text, needle)
#define CHECK_CUDA(call) TEST_CUDA_(TEST_REPORT_, NULL, exit(1), call)
#define CHECK_NCCL(call) TEST_NCCL_(TEST_REPORT_, NULL, exit(1), call)

#define EXPECT(cond) TEST_COND_(TEST_EXPECT_REPORT_, NULL, test_failures++, cond)
/* With a printf-style message of what was found, after the condition. */
#define EXPECT_MSG(cond, fmt, ...)                                                                         \
    TEST_CHECK_CORE_(TEST_EXPECT_REPORT_, NULL, test_failures++, (void)0, !(cond), "%s: " fmt, #cond, ##__VA_ARGS__)
#define EXPECT_CONTAINS(text, needle) TEST_CONTAINS_(TEST_EXPECT_REPORT_, NULL, test_failures++, text, needle)

/* The ranks' form (harness/harness.h): inside a case that returns its failure count. CC_CHECK_CUDA also
 * aborts the ranks' channel, so that the other ranks stop waiting for this one. */
#define CC_REPORT_(ctx, file, line, fmt, ...) cc_log((ctx), "FAIL %s:%d: " fmt, (file), (line), ##__VA_ARGS__)
#define CC_CHECK(ctx, cond) TEST_COND_(CC_REPORT_, ctx, return 1, cond)
#define CC_CHECK_ST(ctx, call, want) TEST_STATUS_(CC_REPORT_, ctx, return 1, call, want)
#define CC_CHECK_OK(ctx, call) CC_CHECK_ST(ctx, call, SYMMEM_OK)
#define CC_CHECK_CUDA(ctx, call) TEST_CUDA_(CC_REPORT_, ctx, cc_shm_abort((ctx)->shm); return 1, call)
/* Counts and goes on (a scenario that reports every deviation): when cond is false, logs the printf-style
 * message and adds one to `failures`. */
#define CC_EXPECT(ctx, failures, cond, ...)                                                                \
    TEST_CHECK_CORE_(CC_REPORT_, ctx, (failures)++, (void)0, !(cond), __VA_ARGS__)

typedef void (*test_fn)(void);
typedef struct test_case {
    const char *name;
    test_fn fn;
    int timeout_s;
} test_case_t;

/* Runs each case in a child; prints one line per case and the closing summary line. Returns the exit code
 * for main: 0 all passed (or some skipped), 1 any failed, 77 all skipped. */
static inline int test_run_all(const test_case_t *cases, int n)
{
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < n; i++) {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0) {
            alarm((unsigned)cases[i].timeout_s);
            cases[i].fn();
            fflush(stdout);
            _exit(0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            printf("ok   %s\n", cases[i].name);
            passed++;
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == TEST_SKIP_CODE) {
            printf("skip %s\n", cases[i].name);
            skipped++;
        } else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
            printf("FAIL %s (timed out after %d s)\n", cases[i].name, cases[i].timeout_s);
            failed++;
        } else if (WIFSIGNALED(status)) {
            printf("FAIL %s (signal %d)\n", cases[i].name, WTERMSIG(status));
            failed++;
        } else {
            printf("FAIL %s (exit %d)\n", cases[i].name, WEXITSTATUS(status));
            failed++;
        }
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (failed) return 1;
    return passed == 0 && skipped > 0 ? TEST_SKIP_CODE : 0;
}

/* Count this process's open file descriptors (the directory stream's own descriptor excluded). */
static inline int test_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1;
}

#endif
