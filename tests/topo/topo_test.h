/* Tiny check helpers shared by the topology tests: a failed check prints where and what, and the test
 * continues so that one run shows every failure; main returns test_failures ? 1 : 0. */
#ifndef SYMMEM_TESTS_TOPO_TEST_H
#define SYMMEM_TESTS_TOPO_TEST_H

#include <stdio.h>
#include <string.h>

static int test_failures;

#define CHECK(cond)                                                                                        \
    do {                                                                                                   \
        if (!(cond)) {                                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                      \
            test_failures++;                                                                               \
        }                                                                                                  \
    } while (0)

#define CHECK_CONTAINS(haystack, needle)                                                                   \
    do {                                                                                                   \
        const char *h_ = (haystack);                                                                       \
        if (!h_ || !strstr(h_, (needle))) {                                                                \
            fprintf(stderr, "%s:%d: expected to find \"%s\" in \"%s\"\n", __FILE__, __LINE__, (needle),    \
                    h_ ? h_ : "(null)");                                                                   \
            test_failures++;                                                                               \
        }                                                                                                  \
    } while (0)

#endif
