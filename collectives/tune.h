/* A communicator's algorithm table and what SYMMEM_ALGO_AUTO chooses from it (tune.c): the built-in table
 * (topology/choice.h, topo_choose), the rules of the tuning file or of symmem-bench --tune, SYMMEM_ALGO.
 * The internal API of the tuner (bench/tuner.c) and of the communicator's init; pure functions of a
 * symmem_coll_tuning_t, so the CPU tests need no communicator.
 *
 * Tuning file (text, one rule per line, '#' starts a comment):
 *     # symmem algorithm table v2
 *     [n2.rpd1.sm90x132.nvlink.5d1f0a33.device.g50t64.w65536K.v0.1.0.k3c9e01a7]
 *     all_reduce.ord      65536  oneshot_push
 *     all_reduce.ord      inf    twoshot_push
 *     all_reduce.sym      inf    twoshot_pull
 *     reduce_scatter      inf    twoshot_push
 * A section header names the tuning key the rules were measured under (symmem_coll_tune_key: the
 * communicator's fingerprint, topology/ranks.h, and what else changes the ranking); the rules under it say
 * "messages of this op, in calls of this form (symmem_form_name; none: every form), up to max_bytes
 * (inclusive) use this algorithm". Rules of one op and form are tried in increasing max_bytes; "inf" (or a
 * final rule) covers the rest. Sizes accept K/M/G suffixes. An op without rules in the matching section
 * uses the built-in table. */
#ifndef SYMMEM_COLLECTIVES_TUNE_H
#define SYMMEM_COLLECTIVES_TUNE_H

#include <stddef.h>
#include <stdio.h>

#include "base/kinds.h"
#include "symmem/symmem.h"
#include "topology/choice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct symmem_coll_tuning {
    char fingerprint[192];  /* the section of the tuning file that applies (its key) */
    symmem_algo_t env_algo; /* SYMMEM_ALGO, AUTO if unset: beats the table */
    topo_table_t table;     /* active rules: the tuning file's, or symmem_coll_tune_set's */
    topo_table_t defaults;  /* built-in (topo_choose); used for a kind the active table lacks */
    topo_prefer_t prefer;   /* what measured figures changed in the defaults (KEEP: nothing) */
} symmem_coll_tuning_t;

/* A fresh table for `fingerprint` and the choice facts (no figures: the built-in table as the link class
 * gives it): no active rules, SYMMEM_ALGO not applied (env_algo AUTO). */
void symmem_coll_tune_init(symmem_coll_tuning_t *t, const char *fingerprint, const topo_choice_facts_t *facts);
/* Rebuild the defaults from measured figures (the init probe); returns the number of rules that changed. */
int symmem_coll_tune_measured(symmem_coll_tuning_t *t, const topo_choice_facts_t *facts);

/* What SYMMEM_ALGO_AUTO resolves to for `kind` in calls of `form` at `bytes` (symmem_coll_message_bytes):
 * env_algo, else the active rule of the form's table (symmem_coll_table_form), else the default; t NULL:
 * twoshot_push. A call with an ordinary input never takes a rule measured with a symmetric one. */
symmem_algo_t symmem_coll_choose(const symmem_coll_tuning_t *t, symmem_coll_kind_t kind, symmem_form_t form,
                                 size_t bytes);
/* Whose rules a call of `form` follows: its own where the active table has rules of that form, else those of
 * the form with the same input and an ordinary output where the table has them (an output read by peers in
 * place is the smaller difference), else `form` (the built-in rules then answer). */
symmem_form_t symmem_coll_table_form(const symmem_coll_tuning_t *t, symmem_coll_kind_t kind, symmem_form_t form);
/* The tuning key of a communicator: its topology fingerprint, the placement (host memory is another machine as
 * far as the table goes), the grid every call plans with (blocks per kernel, least threads per block: the
 * residency rules and SYMMEM_MAX_BLOCKS change it), the workspace bytes (which bound the rounds), the
 * library version (another version may have other algorithms) and `kernels` (symmem_coll_kernels_hash: two
 * builds of one version whose kernels differ rank them differently): everything that changes the ranking, so
 * that a table measured under other settings is never reused. */
void symmem_coll_tune_key(char *out, size_t len, const char *fingerprint, int host_numa, int max_grid, int min_threads,
                          size_t ws_bytes, const char *kernels);
/* This build's hash of the sources that decide how fast an algorithm runs: the kernels (collectives/ *.cu,
 * *.cuh, kernel_abi.h) and the plan of a call (plan.c, algos.c); 8 hex digits, computed when CMake configures
 * (collectives/CMakeLists.txt), which it does again whenever one of them changes. */
const char *symmem_coll_kernels_hash(void);
/* The size the table is keyed by: all-reduce count*esize; reduce-scatter and all-gather the size of the
 * larger buffer, nranks*count*esize (the "size" column of nccl-tests). */
size_t symmem_coll_message_bytes(int nranks, symmem_coll_kind_t kind, size_t count, symmem_dtype_t dtype);

/* Empty the active rules of `kind` (SYMMEM_COLL_KIND_COUNT: every kind) so symmem_coll_tune_set can build
 * them from scratch; a kind without rules uses the defaults. */
symmem_status_t symmem_coll_tune_clear(symmem_coll_tuning_t *t, symmem_coll_kind_t kind);
/* Messages of `kind` up to `max_bytes` (and above the next smaller rule's bound) use `algo`; SIZE_MAX covers
 * everything above. Replaces a rule with the same bound. Every rank of a communicator must make the same
 * calls (the choice must agree across ranks). */
symmem_status_t symmem_coll_tune_set(symmem_coll_tuning_t *t, symmem_coll_kind_t kind, size_t max_bytes,
                                     symmem_algo_t algo);
/* Replace the active rules of `kind` in `form` (exactly that form) with those of `rules` of the same kind and
 * form (symmem-bench --tune, one op and form per pass). Every rank must make the same call. */
symmem_status_t symmem_coll_tune_replace(symmem_coll_tuning_t *t, symmem_coll_kind_t kind, symmem_form_t form,
                                         const topo_table_t *rules);
/* Read the section of `path` whose fingerprint matches t's. The file is untrusted: every directory above it
 * must be root's or this user's and writable by nobody else unless sticky, and it is read through
 * base/safe_file.h (a link is not followed; a FIFO, a device, another user's file, one others may write or
 * one over 1 MiB is refused before a byte is read). Only this key's section is parsed: an error there is
 * SYMMEM_INVALID_ARGUMENT (table unchanged), while the lines of other sections (another version's
 * algorithms, say) are never an error; SYMMEM_OK without change when no section matches. A failure is
 * recorded (the last error names file and line), not logged: the caller says what it does about it. */
symmem_status_t symmem_coll_tune_load(symmem_coll_tuning_t *t, const char *path);
/* symmem_coll_tune_load's reader on text already in memory (`name` for the messages). */
symmem_status_t symmem_coll_tune_parse(symmem_coll_tuning_t *t, const char *text, size_t len, const char *name);
/* Write the effective table as the section of t's fingerprint in `path`, keeping the other sections of an
 * existing file as they are: under an exclusive lock on `path`.lock (writers of other processes wait their
 * turn, so none loses another's section; waited for at most min(timeout_ms, 2 s), SYMMEM_TIMEOUT naming the
 * holder otherwise; temporary files of dead saves are removed under it), into a new temporary file (mkstemp,
 * mode 0644) renamed over `path`, so a reader sees the old file or the new one, never a part. An existing
 * `path` that symmem_coll_tune_load would refuse (a link, a FIFO, another user's file) is left as it is and
 * the save fails. Recorded, not logged. symmem_coll_tune_save waits SYMMEM_TIMEOUT_MS at most. */
symmem_status_t symmem_coll_tune_save_within(const symmem_coll_tuning_t *t, const char *path, int timeout_ms);
symmem_status_t symmem_coll_tune_save(const symmem_coll_tuning_t *t, const char *path);
/* The effective table (active rules, the defaults for kinds without any) in the file format. */
void symmem_coll_tune_print(const symmem_coll_tuning_t *t, FILE *out);
/* Where the table lives unless a path is given: SYMMEM_TUNE_FILE (*explicit_path 1), else
 * <cache dir>/tune.txt (with create_dir, the cache folder is created), after the checks of
 * topology/cache.h. 0, or -1 when there is none to use (a refused folder is warned about once). */
int symmem_coll_tune_path(char *out, size_t len, int create_dir, int *explicit_path);
/* Communicator init's read: symmem_coll_tune_path's file when SYMMEM_TUNE_FILE names it or it exists, its
 * section for t's key. Never blocks; a table that cannot be used leaves the built-in one, with one warning
 * that names the file and the cause. */
void symmem_coll_tune_load_cached(symmem_coll_tuning_t *t);
/* Rank 0's save after the autotune: to symmem_coll_tune_path's file (the cache folder created), the lock
 * waited for at most min(timeout_ms, 2 s). `where` says what happened, for the init's log line; a failure is
 * one warning naming the file and the cause (it costs a measurement at the next init, nothing more). */
void symmem_coll_tune_save_cached(const symmem_coll_tuning_t *t, int timeout_ms, char *where, size_t len);
/* Drop the active rules whose algorithm cannot run here (available[algo] == 0, the filter the autotune
 * measures under), so that a loaded table never sends an AUTO call to one: the op's neighbouring rule, or
 * the built-in table where none is left, serves their sizes. Returns how many were dropped; `what` lists
 * them ("all_reduce 65536 copy_engine, ..."). */
int symmem_coll_tune_drop_unavailable(symmem_coll_tuning_t *t, const int *available, char *what, size_t len);

/* ---- a communicator's (collectives/coll.c) ------------------------------------------------------------- */
/* The communicator's table (NULL without collectives: host backend). Local; the tuner edits it on every rank
 * alike. */
symmem_coll_tuning_t *symmem_coll_tuning(symmem_comm_t comm);
/* The init probe's figures (SYMMEM_COLL_PROBE): SM peer read and write GB/s measured at init with every rank
 * at once, the minimum over ranks. 1 and filled when the probe ran, 0 (outputs untouched) when it did not. */
int symmem_coll_probe_figures(symmem_comm_t comm, double *read_gbs, double *write_gbs);
/* The probe's copy-engine figure (peer copies by cudaMemcpyAsync, the same way): 1 and filled, or 0. */
int symmem_coll_probe_ce_figure(symmem_comm_t comm, double *ce_gbs);
/* Its other figures: SM loads and stores at once (GB/s) and a barrier kernel (us, slowest rank): 1 and filled,
 * or 0. */
int symmem_coll_probe_more(symmem_comm_t comm, double *rw_gbs, double *barrier_us);

/* The cost model (topology/cost.h) on this communicator's machine (its facts and the probe's figures):
 * microseconds for one operation of `kind` with `algo` at `bytes` (as the table counts them); floor: links
 * and trips only (topo_cost_floor_us). Negative without collectives or where the model has no such
 * algorithm. */
double symmem_coll_predict_us(symmem_comm_t comm, symmem_coll_kind_t kind, symmem_algo_t algo, size_t bytes, int floor);
/* Whether the communicator's symmetric memory is pinned host memory and how many ranks share a GPU's link,
 * as the model sees it: 1 and filled, or 0 without collectives. */
int symmem_coll_model_memory(symmem_comm_t comm, int *host_memory, int *ranks_per_link);
/* What the autotune did at init: symmem_autotune_state_t (collectives/autotune.h). */
int symmem_coll_autotune_state(symmem_comm_t comm);

#ifdef __cplusplus
}
#endif
#endif
