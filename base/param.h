/* Every SYMMEM_* environment variable, in one table: name, type, default, documentation. Read once, on
 * first use. An unknown SYMMEM_* variable in the environment gets a warning naming the closest known one.
 * Precedence everywhere: an API option beats the environment, which beats the default here. */
#ifndef SYMMEM_BASE_PARAM_H
#define SYMMEM_BASE_PARAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, type, default, doc). Types: INT (decimal), SIZE (bytes with optional K/M/G suffix), STR. */
#define SYMMEM_PARAM_LIST(X)                                                                                \
    X(LOG_LEVEL, STR, "WARN", "log level: NONE, WARN, INFO, DEBUG, TRACE")                                 \
    X(LOG_SUBSYS, STR, "ALL", "subsystems to log: CORE,BOOT,ALLOC,COLL,TOPO,NCCL or ALL; ^ excludes")      \
    X(LOG_FILE, STR, "", "log to this file (%h host, %p pid) instead of stderr")                            \
    X(TIMEOUT_MS, INT, "30000", "bootstrap and collective timeout in milliseconds")                        \
    X(SOCKET_DIR, STR, "", "bootstrap sockets as files in this directory (the user's own, mode 0700) instead of abstract names") \
    X(BACKEND, STR, "cuda", "memory backend when the API leaves it default: cuda or host")                 \
    X(PLACEMENT, STR, "auto", "buffer placement: auto, device or host_numa")                               \
    X(FABRIC, INT, "1", "also request fabric handles where the GPU supports them (0 disables)")            \
    X(GDR, INT, "1", "request the GPUDirect RDMA flag on allocations where supported (0 disables)")        \
    X(NCCL_LIBRARY, STR, "", "NCCL library to load when none is loaded in the process")                    \
    X(ALGO, STR, "auto", "force a collective algorithm (auto, oneshot_pull, oneshot_push, twoshot_lamport, ...)")          \
    X(WORKSPACE_BYTES, SIZE, "64M", "per-rank collective workspace (messages above it run in chunks)")    \
    X(MAX_BLOCKS, INT, "0", "upper bound on thread blocks per collective kernel (0: automatic)")           \
    X(GRID_SHARE, INT, "75", "percent of the GPU's resident thread blocks that all ranks of a communicator on one GPU may hold at once (1..100)") \
    X(ON_ERROR, STR, "report", "when a communicator fails: report (return codes, symmem_comm_get_async_error, the error handler) or abort (log it and abort the process)") \
    X(ERROR_POLL_MS, INT, "10", "how often the error watcher reads the error records of watched communicators (milliseconds)") \
    X(MIN_BLOCK_THREADS, INT, "128", "fewest threads per block of a collective kernel (32..512): smaller spreads small messages over more SMs") \
    X(LAMPORT_CHECK, INT, "0", "check that every rank made the same Lamport call (round headers; +0.35 us per small all-reduce)") \
    X(PDL, INT, "1", "programmatic dependent launch of collective kernels on sm_90+ (0 disables)")          \
    X(COLL_PROBE, STR, "auto", "measure peer read/write bandwidth and a barrier at init for the cost model: auto (PCIe or host-memory placement), force, 0") \
    X(AUTOTUNE, STR, "auto", "measure the algorithm table at the first init on a machine and save it: auto (when no tuning file has it), off, force (every init)") \
    X(AUTOTUNE_BUDGET_MS, INT, "2000", "the autotune starts no new size after this many milliseconds (slowest rank)") \
    X(TUNE_FILE, STR, "", "algorithm table (written by symmem-bench --tune); empty: <cache dir>/tune.txt if present")   \
    X(SYSFS_ROOT, STR, "", "read sysfs and procfs under this root instead of / (captured trees)")         \
    X(TOPO_CACHE_DIR, STR, "", "cache folder (topology figures, algorithm table); empty: $XDG_CACHE_HOME/symmem")       \
    X(TOPO_DUMP_FILE, STR, "", "write the topology model as JSON to this file at communicator init")   \
    X(ISLANDS, STR, "", "the island algorithm's islands, e.g. 0-3,4-7 (ranges joined by +); empty: by each GPU's NUMA node")

typedef enum symmem_param_id {
#define SYMMEM_PARAM_ENUM_(name, type, def, doc) SYMMEM_PARAM_##name,
    SYMMEM_PARAM_LIST(SYMMEM_PARAM_ENUM_)
#undef SYMMEM_PARAM_ENUM_
    SYMMEM_PARAM_COUNT
} symmem_param_id_t;

/* Values as given in the environment (or the default). Never NULL. */
const char *symmem_param_str(symmem_param_id_t id);
/* INT parameters; a malformed value warns once (per variable) and yields the default. */
int64_t symmem_param_int(symmem_param_id_t id);
/* SIZE parameters: "4096", "64K", "32M", "1G". */
size_t symmem_param_size(symmem_param_id_t id);
/* Name ("SYMMEM_TIMEOUT_MS"), default and doc, for help output. */
const char *symmem_param_name(symmem_param_id_t id);
const char *symmem_param_default(symmem_param_id_t id);
const char *symmem_param_doc(symmem_param_id_t id);
/* Parse a size string as SIZE parameters do; returns 0 on success. Shared with command-line tools. */
int symmem_parse_size(const char *s, size_t *out);
/* Parse a decimal integer as INT parameters do ("-12", "30000"; no blanks, no '+'); returns 0 on success. */
int symmem_parse_int(const char *s, int64_t *out);
/* Warn (once) about SYMMEM_* variables that are not in the table; logging calls it when it is ready. */
void symmem_param_warn_unknown(void);
/* Re-read the environment (tests only; not thread-safe against concurrent readers). */
void symmem_param_reload(void);

#ifdef __cplusplus
}
#endif
#endif
