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

#define CHECK(cond)                                                                                        \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                       \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

/* Check a symmem call returns `want`; print the last error otherwise. */
#define CHECK_ST(call, want)                                                                               \
    do {                                                                                                   \
        symmem_status_t st_ = (call);                                                                      \
        if (st_ != (want)) {                                                                               \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s: %s\n", __FILE__, __LINE__, #call,         \
                    symmem_status_name(st_), symmem_status_name(want), symmem_last_error());               \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)
#define CHECK_OK(call) CHECK_ST(call, SYMMEM_OK)

/* The last error mentions `needle`. */
#define CHECK_ERR_HAS(needle)                                                                              \
    do {                                                                                                   \
        if (!strstr(symmem_last_error(), (needle))) {                                                      \
            fprintf(stderr, "%s:%d: last error '%s' does not mention '%s'\n", __FILE__, __LINE__,          \
                    symmem_last_error(), (needle));                                                        \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

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
