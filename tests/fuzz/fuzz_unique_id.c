/* symmem_unique_id_from_string on any text; what it accepts must print back to the same digits. */
#include <ctype.h>

#include "fuzz.h"
#include "symmem/symmem.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_cstr(data, size);
    symmem_unique_id_t id;
    if (symmem_unique_id_from_string(s, &id) == SYMMEM_OK) {
        char back[SYMMEM_UNIQUE_ID_STRLEN];
        FUZZ_ASSERT(symmem_unique_id_to_string(&id, back, sizeof back) == SYMMEM_OK);
        FUZZ_ASSERT(strlen(s) == strlen(back));
        for (size_t i = 0; s[i]; i++) FUZZ_ASSERT(tolower((unsigned char)s[i]) == back[i]);
    }
    free(s);
    return 0;
}
