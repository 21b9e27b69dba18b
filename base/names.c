/* Names and sizes of the vocabulary, generated from the lists that define it (the public dtype, redop and
 * algorithm lists, base/kinds.h): the public name functions and the kinds' names. */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/kinds.h"
#include "base/status.h"
#include "symmem/symmem.h"

size_t symmem_dtype_size(symmem_dtype_t dtype)
{
    switch (dtype) {
#define DT_SIZE_(name, value, ctype, bytes)                                                                \
    case SYMMEM_##name: return bytes;
        SYMMEM_DTYPE_LIST(DT_SIZE_)
#undef DT_SIZE_
    default: return 0;
    }
}

const char *symmem_dtype_name(symmem_dtype_t dtype)
{
    switch (dtype) {
#define DT_NAME_(name, value, ctype, bytes)                                                                \
    case SYMMEM_##name: return #ctype;
        SYMMEM_DTYPE_LIST(DT_NAME_)
#undef DT_NAME_
    default: return "invalid_dtype";
    }
}

/* Lower-case names ("sum", as nccl-tests prints them), made once from SYMMEM_REDOP_LIST. */
static char redop_names[SYMMEM_REDOP_COUNT][16];
static pthread_once_t redop_names_once = PTHREAD_ONCE_INIT;
static void redop_names_init(void)
{
    static const char *const upper[SYMMEM_REDOP_COUNT] = {
#define OP_NAME_(name, value) [value] = #name,
        SYMMEM_REDOP_LIST(OP_NAME_)
#undef OP_NAME_
    };
    for (int i = 0; i < SYMMEM_REDOP_COUNT; i++)
        for (size_t k = 0; upper[i][k] && k + 1 < sizeof redop_names[i]; k++)
            redop_names[i][k] = (char)tolower((unsigned char)upper[i][k]);
}

const char *symmem_redop_name(symmem_redop_t op)
{
    if ((int)op < 0 || op >= SYMMEM_REDOP_COUNT) return "invalid_redop";
    pthread_once(&redop_names_once, redop_names_init);
    return redop_names[op];
}

const char *symmem_algo_name(symmem_algo_t algo)
{
    switch (algo) {
#define ALGO_NAME_(name, value, text)                                                                      \
    case SYMMEM_ALGO_##name: return text;
        SYMMEM_ALGO_LIST(ALGO_NAME_)
#undef ALGO_NAME_
    default: return "invalid_algo";
    }
}

int symmem_algo_lookup(const char *name)
{
    if (!name) return -1;
#define ALGO_FROM_(n, value, text)                                                                         \
    if (strcasecmp(name, text) == 0) return SYMMEM_ALGO_##n;
    SYMMEM_ALGO_LIST(ALGO_FROM_)
#undef ALGO_FROM_
    return -1;
}

int symmem_algo_listed(int algo)
{
    switch (algo) {
#define ALGO_LISTED_(name, value, text)                                                                    \
    case SYMMEM_ALGO_##name: return 1;
        SYMMEM_ALGO_LIST(ALGO_LISTED_)
#undef ALGO_LISTED_
    default: return 0;
    }
}

int symmem_algo_lossy(int algo) { return algo == SYMMEM_ALGO_WIRE_INT8; }

symmem_status_t symmem_algo_from_name(const char *name, symmem_algo_t *algo)
{
    const int a = symmem_algo_lookup(name);
    if (a >= 0) {
        if (algo) *algo = (symmem_algo_t)a;
        return SYMMEM_OK;
    }
    char known[256] = "";
#define ALGO_LIST_(n, value, text) snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", value ? ", " : "", text);
    SYMMEM_ALGO_LIST(ALGO_LIST_)
#undef ALGO_LIST_
    return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "unknown algorithm \"%s\" (known: %s)", name ? name : "(null)",
                            known);
}

const char *symmem_coll_kind_name(symmem_coll_kind_t kind)
{
    switch (kind) {
#define KIND_NAME_(name, value, text)                                                                      \
    case SYMMEM_COLL_##name: return text;
        SYMMEM_COLL_KIND_LIST(KIND_NAME_)
#undef KIND_NAME_
    default: return "invalid_kind";
    }
}

int symmem_coll_kind_from_name(const char *s)
{
#define KIND_FROM_(name, value, text)                                                                      \
    if (strcmp(s, text) == 0) return value;
    SYMMEM_COLL_KIND_LIST(KIND_FROM_)
#undef KIND_FROM_
    return -1;
}

const char *symmem_form_name(symmem_form_t form)
{
    switch (form) {
#define FORM_NAME_(name, value, text)                                                                      \
    case SYMMEM_FORM_##name: return text;
        SYMMEM_FORM_LIST(FORM_NAME_)
#undef FORM_NAME_
    default: return "invalid_form";
    }
}

int symmem_form_lookup(const char *name)
{
#define FORM_FIND_(fname, value, text)                                                                     \
    if (strcmp(name, text) == 0) return value;
    SYMMEM_FORM_LIST(FORM_FIND_)
#undef FORM_FIND_
    return -1;
}
