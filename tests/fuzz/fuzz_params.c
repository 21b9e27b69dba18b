/* The size and integer parsers of the parameter table (and of the tools' command lines) on any text. */
#include <errno.h>

#include "base/param.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    size_t v = 0;
    if (symmem_parse_size(s, &v) == 0) {
        /* accepted: starts with a digit, and a plain number means exactly that number */
        FUZZ_ASSERT(s[0] >= '0' && s[0] <= '9');
        if (strspn(s, "0123456789") == strlen(s)) FUZZ_ASSERT(v == strtoull(s, NULL, 10));
    }
    int64_t i = 0;
    if (symmem_parse_int(s, &i) == 0) {
        char back[32];
        snprintf(back, sizeof back, "%lld", (long long)i);
        /* the same number, up to leading zeros and "-0" */
        errno = 0;
        FUZZ_ASSERT(strtoll(s, NULL, 10) == i && errno == 0);
        FUZZ_ASSERT(strlen(s) >= strlen(back) || (i == 0 && s[0] == '-'));
    }
    free(s);
    return 0;
}
