/* symmem-bench's NCCL loaded at run time (bench/nccl_dlopen.c: the binary wheel's build, which must start
 * without NCCL). Without a library every call fails with ncclSystemError and the error string says what to
 * install; with one (argv[1]: the NCCL this build found, when it found one) the calls reach it. Each case runs
 * in its own process, so each loads (or fails to load) afresh.
 *   usage: test_nccl_dlopen [LIBNCCL] */
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "test_util.h"

static const char *g_lib;

static void missing_library_says_what_to_install(void)
{
    CHECK(setenv("SYMMEM_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1) == 0);
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id) == ncclSystemError);
    CHECK(ncclGroupStart() == ncclSystemError);
    const char *why = ncclGetErrorString(ncclSystemError);
    CHECK(strstr(why, "NCCL not found") && strstr(why, "/nonexistent/libnccl.so.2"));
    CHECK(strstr(why, "pip install nvidia-nccl-cu13") && strstr(why, "SYMMEM_NCCL_LIBRARY"));
}

static void library_without_nccl_symbols_is_named(void)
{
    /* libc loads but has no ncclGetUniqueId */
    CHECK(setenv("SYMMEM_NCCL_LIBRARY", "libc.so.6", 1) == 0);
    CHECK(ncclGroupEnd() == ncclSystemError);
    const char *why = ncclGetErrorString(ncclSystemError);
    CHECK(strstr(why, "libc.so.6 has no ncclGetUniqueId"));
}

static void found_library_answers(void)
{
    if (!g_lib) exit(TEST_SKIP_CODE); /* no NCCL found by this build */
    CHECK(setenv("SYMMEM_NCCL_LIBRARY", g_lib, 1) == 0);
    /* NCCL's own text, not the loader's: the call reached the library */
    const char *s = ncclGetErrorString(ncclInvalidArgument);
    CHECK(s && !strstr(s, "NCCL not found") && !strstr(s, "has no"));
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
}

int main(int argc, char **argv)
{
    g_lib = argc > 1 && argv[1][0] ? argv[1] : NULL;
    static const test_case_t cases[] = {
        {"missing_library_says_what_to_install", missing_library_says_what_to_install, 30},
        {"library_without_nccl_symbols_is_named", library_without_nccl_symbols_is_named, 30},
        {"found_library_answers", found_library_answers, 60},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
