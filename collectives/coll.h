/* What comm/ calls in the collectives layer, and the internal API the benchmark's --tune mode uses. */
#ifndef SYMMEM_COLLECTIVES_COLL_H
#define SYMMEM_COLLECTIVES_COLL_H

#include <stddef.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective, at the end of communicator init (CUDA backend only): allocate the symmetric workspace, the
 * device sequence counters and the host-mapped error record. */
symmem_status_t symmem_coll_comm_init(symmem_comm_t comm);
/* Local, at communicator destroy: free what symmem_coll_comm_init made. Safe on a partly-initialised comm.
 * Call it BEFORE the communicator's remaining buffers are released (the workspace is one of them). */
void symmem_coll_comm_fini(symmem_comm_t comm);
/* Local: blocks per collective kernel and the blocks of SYMMEM_COLL_THREADS threads the GPU keeps resident
 * (the watcher's residency check across communicators); 0 without collectives. */
void symmem_coll_residency(symmem_comm_t comm, int *grid, int *capacity);
/* Local, non-blocking: SYMMEM_OK or the error a kernel reported (timeout: which op, which sequence number,
 * which rank did not arrive). On error it also calls symmem_comm_set_error. */
symmem_status_t symmem_coll_poll_error(symmem_comm_t comm);

/* ---- algorithm table: internal API for symmem-bench --tune ------------------------------------------- */
/* The operations: the table distinguishes those before SYMMEM_COLL_BARRIER; every kind names its kernels in
 * error records and messages. */
#define SYMMEM_COLL_KIND_LIST(X)                                                                           \
    X(ALL_REDUCE, 0, "all_reduce")                                                                         \
    X(REDUCE_SCATTER, 1, "reduce_scatter")                                                                 \
    X(ALL_GATHER, 2, "all_gather")                                                                         \
    X(BARRIER, 3, "barrier")                                                                               \
    X(ALL_REDUCE_RMSNORM, 4, "all_reduce_add_rmsnorm")

typedef enum symmem_coll_kind {
#define SYMMEM_COLL_KIND_ENUM_(name, value, text) SYMMEM_COLL_##name = value,
    SYMMEM_COLL_KIND_LIST(SYMMEM_COLL_KIND_ENUM_)
#undef SYMMEM_COLL_KIND_ENUM_
    SYMMEM_COLL_KIND_COUNT
} symmem_coll_kind_t;

const char *symmem_coll_kind_name(symmem_coll_kind_t kind);

/* The size the table is keyed by: all-reduce count*esize; reduce-scatter and all-gather the size of the
 * larger buffer, nranks*count*esize (the "size" column of nccl-tests). */
size_t symmem_coll_message_bytes(symmem_comm_t comm, symmem_coll_kind_t kind, size_t count, symmem_dtype_t dtype);

/* The topology fingerprint that keys the tuning file ("n2.rpd1.sm90x132.nvlink.<matrix hash>"); the same
 * string on every rank of the communicator. */
const char *symmem_coll_fingerprint(symmem_comm_t comm);

/* Local. What SYMMEM_ALGO_AUTO resolves to for `kind` at `bytes` (SYMMEM_ALGO included). */
symmem_algo_t symmem_coll_choose(symmem_comm_t comm, symmem_coll_kind_t kind, size_t bytes);

/* Local. Empty the table of `kind` (SYMMEM_COLL_KIND_COUNT: every kind) so symmem_coll_tune_set can build
 * it from scratch. An empty kind falls back to the built-in default. */
symmem_status_t symmem_coll_tune_clear(symmem_comm_t comm, symmem_coll_kind_t kind);
/* Local. Messages of `kind` up to `max_bytes` (and above the next smaller rule's bound) use `algo`;
 * max_bytes == SIZE_MAX covers everything above. Replaces a rule with the same bound. Every rank must make
 * the same calls (the choice must agree across ranks). */
symmem_status_t symmem_coll_tune_set(symmem_comm_t comm, symmem_coll_kind_t kind, size_t max_bytes,
                                     symmem_algo_t algo);
/* Local. Read the section of `path` whose fingerprint matches this communicator; SYMMEM_INVALID_ARGUMENT
 * (table unchanged) on a syntax error, SYMMEM_OK without change when no section matches. */
symmem_status_t symmem_coll_tune_load(symmem_comm_t comm, const char *path);
/* Local. Write this communicator's table as the section of its fingerprint in `path`, keeping the other
 * sections of an existing file (written to a temporary file and renamed). Call it on one rank. */
symmem_status_t symmem_coll_tune_save(symmem_comm_t comm, const char *path);
/* Local. The peer-bandwidth probe's figures (SYMMEM_COLL_PROBE; docs/collectives.md): SM peer read and
 * write GB/s measured at init with every rank at once, the minimum over ranks (the same on every rank).
 * Returns 1 and fills them when the probe ran, 0 (outputs untouched) when it did not. */
int symmem_coll_probe_figures(symmem_comm_t comm, double *read_gbs, double *write_gbs);
/* Local. Print the table in the file format to `out` (a FILE *). */
void symmem_coll_tune_print(symmem_comm_t comm, void *out);

#ifdef __cplusplus
}
#endif
#endif
