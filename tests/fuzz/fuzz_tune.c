/* The algorithm table reader (symmem_coll_tune_parse, what symmem_coll_tune_load runs on a file it has
 * read) on any text. Whatever it loads must give a concrete algorithm for every op and size, and print. */
#include "collectives/tune.h"
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* static: 4 KiB, and no allocation per input; the fresh table (the cost model's bisections) made once */
    static symmem_coll_tuning_t fresh, t;
    static int made;
    if (!made) {
        const topo_choice_facts_t facts = {.nranks = 4, .link = SYMMEM_LINK_PCIE};
        symmem_coll_tune_init(&fresh, "fpA", &facts);
        made = 1;
    }
    t = fresh;
    symmem_coll_tuning_t *c = &t;
    if (symmem_coll_tune_parse(c, (const char *)data, size, "fuzz") == SYMMEM_OK) {
        static const size_t sizes[] = {0, 1, 4096, 65536, 1 << 20, (size_t)1 << 40, SIZE_MAX};
        for (int k = 0; k < SYMMEM_COLL_BARRIER; k++)
            for (int f = 0; f < SYMMEM_FORM_COUNT; f++)
                for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
                    symmem_algo_t a = symmem_coll_choose(c, (symmem_coll_kind_t)k, (symmem_form_t)f, sizes[i]);
                    FUZZ_ASSERT(a > SYMMEM_ALGO_AUTO && a < SYMMEM_ALGO_COUNT);
                }
        FILE *null = fopen("/dev/null", "w");
        if (null) symmem_coll_tune_print(c, null), fclose(null);
    }
    return 0;
}
