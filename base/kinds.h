/* The collective operations ("kinds"): one list for the collectives and their kernels, the error records and
 * messages, the algorithm table and the tuning file (which distinguishes the kinds before
 * SYMMEM_COLL_BARRIER). Vocabulary, like the public dtype, op and algorithm lists; names in base/names.c.
 * Also the one fact of the kernels that the cost model (topology/) restates in its figures: where zero copy
 * starts. */
#ifndef SYMMEM_BASE_KINDS_H
#define SYMMEM_BASE_KINDS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SYMMEM_COLL_KIND_LIST(X)                                                                           \
    X(ALL_REDUCE, 0, "all_reduce")                                                                         \
    X(REDUCE_SCATTER, 1, "reduce_scatter")                                                                 \
    X(ALL_GATHER, 2, "all_gather")                                                                         \
    X(BARRIER, 3, "barrier")                                                                               \
    X(ALL_REDUCE_RMSNORM, 4, "all_reduce_add_rmsnorm")

/* One-shot pull (and reduce-scatter / all-gather pull) read the sender's buffer directly only from this size
 * on (SYMMEM_COLL_ZC_LARGE, collectives/plan.c): zero copy costs one more sync at the end of the call (~1-2
 * us), a local copy of a small message costs less. The cost model (topology/cost.c) prices both forms at the
 * same size. */
#define SYMMEM_COLL_ZC_MIN_BYTES ((size_t)256 << 10)

typedef enum symmem_coll_kind {
#define SYMMEM_COLL_KIND_ENUM_(name, value, text) SYMMEM_COLL_##name = value,
    SYMMEM_COLL_KIND_LIST(SYMMEM_COLL_KIND_ENUM_)
#undef SYMMEM_COLL_KIND_ENUM_
    SYMMEM_COLL_KIND_COUNT
} symmem_coll_kind_t;

/* "all_reduce", ...; "invalid_kind" outside the list. */
const char *symmem_coll_kind_name(symmem_coll_kind_t kind);
/* The kind named `name` (as symmem_coll_kind_name spells it), or -1. */
int symmem_coll_kind_from_name(const char *name);
/* The algorithm named `name` (symmem_algo_name's spelling, any case), or -1; records and logs nothing, for
 * callers that report a bad name in their own words (SYMMEM_ALGO, the tuning file). The public
 * symmem_algo_from_name is this plus the error. */
int symmem_algo_lookup(const char *name);
/* Whether `algo` is a value of SYMMEM_ALGO_LIST (the values below SYMMEM_ALGO_COUNT need not all be:
 * branches reserve values for algorithms added elsewhere). */
int symmem_algo_listed(int algo);
/* The form named `name` ("ord", "sym_in", "sym_out", "sym": symmem_form_name's spelling), or -1. */
int symmem_form_lookup(const char *name);
/* Whether `algo` is lossy (SYMMEM_ALGO_WIRE_INT8, the compressed wire: collectives/wire.h): it runs only where
 * a call names it; AUTO's tables, SYMMEM_ALGO, the tuning file, the autotune and every "all algorithms"
 * list (the bench's -a all, the tests of every algorithm) leave it out. */
int symmem_algo_lossy(int algo);

#ifdef __cplusplus
}
#endif
#endif
