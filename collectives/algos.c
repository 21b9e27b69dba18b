/* The algorithm descriptor table (see algos.h), generated from SYMMEM_ALGO_LIST: an algorithm without its
 * SYMMEM_COLL_DESC_<NAME> row does not compile. */
#include "collectives/algos.h"

#include <stddef.h>

#include "base/kinds.h"

static const symmem_coll_algo_op_t table[SYMMEM_ALGO_COUNT][3] = {
#define SYMMEM_COLL_DESC_ROW_(name, value, text) [value] = SYMMEM_COLL_DESC_##name,
    SYMMEM_ALGO_LIST(SYMMEM_COLL_DESC_ROW_)
#undef SYMMEM_COLL_DESC_ROW_
};
_Static_assert(SYMMEM_COLL_ALL_REDUCE == 0 && SYMMEM_COLL_REDUCE_SCATTER == 1 && SYMMEM_COLL_ALL_GATHER == 2,
               "a row's columns are all_reduce, reduce_scatter, all_gather");

const symmem_coll_algo_op_t *symmem_coll_algo(symmem_coll_kind_t kind, symmem_algo_t algo)
{
    /* a value outside the list has no row (its zeros would read as the pull family) */
    if (!symmem_algo_listed((int)algo) || (int)kind < 0 || kind > SYMMEM_COLL_ALL_GATHER) return NULL;
    return &table[algo][kind];
}

int symmem_coll_family_of(symmem_coll_kind_t kind, symmem_algo_t algo)
{
    const symmem_coll_algo_op_t *d = symmem_coll_algo(kind, algo);
    return d ? d->family : SYMMEM_COLL_FAM_NONE;
}
