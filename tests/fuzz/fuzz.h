/* Shared by the fuzz targets. Each target defines LLVMFuzzerTestOneInput (and LLVMFuzzerInitialize); it is
 * linked either with libFuzzer (clang -fsanitize=fuzzer, SYMMEM_BUILD_FUZZERS=ON: scripts/fuzz.sh) or with
 * replay_main.c, which runs the committed corpus once as a regression test in every build. */
#ifndef SYMMEM_TEST_FUZZ_H
#define SYMMEM_TEST_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The library logs every error at WARN: silence it, millions of inputs fail on purpose. */
static inline void fuzz_quiet(void) { setenv("SYMMEM_LOG_LEVEL", "NONE", 1); }

/* A NUL-terminated copy of the input (free it). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* A property of the code under test does not hold: report it as every check of the tests does
 * (tests/test_util.h) and abort, so that libFuzzer keeps the input as a crash. */
#define FUZZ_ASSERT(cond) TEST_COND_(TEST_REPORT_, NULL, abort(), cond)

#endif
