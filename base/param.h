/* Every SYMMEM_* environment variable, in one table: name, type, default, documentation. Read once, on
 * first use. An unknown SYMMEM_* variable in the environment gets a warning naming the closest known one.
 * Precedence everywhere: an API option beats the environment, which beats the default here. */
#ifndef SYMMEM_BASE_PARAM_H
#define SYMMEM_BASE_PARAM_H

#include <stddef.h>
#include <stdint.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, type, default, meaning). Types: INT (decimal), SIZE (bytes with optional K/M/G suffix), STR. This table
 * is the documentation too: symmem-info (tools/symmem_info.c) prints it, with the values in effect, and
 * writes docs/configuration.md from it (symmem-info --markdown; a test checks the file is current). A meaning
 * is one plain-text paragraph that says what an empty default stands for. */
#define SYMMEM_PARAM_ALGO_NAME_(name, value, text) " " text
#define SYMMEM_PARAM_LIST(X)                                                                               \
    X(LOG_LEVEL, STR, "WARN", "log level: NONE, WARN, INFO, DEBUG or TRACE")                               \
    X(LOG_SUBSYS, STR, "ALL",                                                                              \
      "subsystems to log, separated by commas: CORE, BOOT, ALLOC, COLL, TOPO, NCCL, or ALL; a leading ^ "  \
      "logs all but the ones named")                                                                       \
    X(LOG_FILE, STR, "", "log to this file instead of stderr (empty: stderr); %h in the path becomes the host name, " \
      "%p the process id")                                                                                 \
    X(TIMEOUT_MS, INT, "30000", "bootstrap and collective timeout in milliseconds")                        \
    X(SOCKET_DIR, STR, "",                                                                                 \
      "bootstrap sockets as files in this directory (the user's own, mode 0700) instead of abstract names " \
      "(empty): for ranks in containers that share a directory but not a network namespace "               \
      "(docs/security.md)")                                                                                \
    X(BACKEND, STR, "cuda",                                                                                \
      "memory backend when the API leaves it default: cuda, or host (memfd host memory and no GPU, for "   \
      "developing and testing communicators and symmem_alloc on a machine without one: the same bootstrap, " \
      "descriptor passing and peer mapping; its collectives return SYMMEM_UNSUPPORTED)")                   \
    X(PLACEMENT, STR, "auto",                                                                              \
      "buffer placement: auto (device memory, or host memory if some GPU pair lacks P2P), device or "      \
      "host_numa")                                                                                         \
    X(FABRIC, INT, "1", "also request fabric handles where the GPU supports them (0 disables)")            \
    X(GDR, INT, "1", "request the GPUDirect RDMA flag on allocations where supported (0 disables)")        \
    X(NCCL_LIBRARY, STR, "",                                                                               \
      "NCCL library to load when none is loaded in the process (empty: libnccl.so.2 from the loader's "    \
      "search path)")                                                                                      \
    X(ALGO, STR, "auto",                                                                                   \
      "force a collective algorithm (auto: the library chooses), by name:" SYMMEM_ALGO_LIST(               \
          SYMMEM_PARAM_ALGO_NAME_) "; the lossy wire_int8 runs only where a call names it (here: ignored, " \
      "with a warning)")                                                                                   \
    X(WORKSPACE_BYTES, SIZE, "64M",                                                                        \
      "per-rank collective workspace: three Lamport buffers of the largest power of two at most 1/8 of it " \
      "plus 16 KiB, and two data halves; messages larger than a round of it run in rounds")                \
    X(MAX_BLOCKS, INT, "0", "upper bound on thread blocks per collective kernel (0: automatic)")           \
    X(GRID_SHARE, INT, "75",                                                                               \
      "percent (1..100) of the GPU's resident thread blocks that the ranks of a communicator on one GPU hold " \
      "at most; communicators used at the same time on one GPU need shares that add up to at most 100 "    \
      "(docs/collectives.md, \"Residency\")")                                                              \
    X(CLUSTER_ROOM, INT, "8",                                                                              \
      "idle SMs per GPC that the ranks of a communicator sharing a GPU leave free for kernels in clusters " \
      "beside their collectives, such as a GEMM in clusters of 8: those ranks hold at most SMs - room x "  \
      "GPCs blocks together, of which the communicator takes its SYMMEM_GRID_SHARE; 0 disables; one rank " \
      "per GPU is never affected, nor a GPU whose GPC count init cannot measure (before sm_90). "          \
      "Co-located ranks that run GEMMs between collectives need 8 on an H200 (docs/collectives.md, "       \
      "\"Residency\")")                                                                                    \
    X(ON_ERROR, STR, "report",                                                                             \
      "when a communicator fails: report (errors reach return codes, symmem_comm_get_async_error and the " \
      "error handler) or abort (the error is logged and the process aborts)")                              \
    X(ERROR_POLL_MS, INT, "10",                                                                            \
      "how often the error watcher reads the error records of watched communicators (milliseconds)")       \
    X(MIN_BLOCK_THREADS, INT, "128",                                                                       \
      "fewest threads per block of a collective kernel (32..512, a multiple of 32): smaller spreads small " \
      "messages over more SMs")                                                                            \
    X(LAMPORT_CHECK, INT, "0",                                                                             \
      "1: the Lamport calls (oneshot_push, twoshot_lamport) exchange round headers, so that ranks passing " \
      "different arguments get SYMMEM_INVALID_USAGE (the flag algorithms always check); it costs about "   \
      "0.35 us per call below 256 KiB, and is on for all ranks if any rank sets it")                       \
    X(PDL, INT, "1",                                                                                       \
      "programmatic dependent launch of collective kernels (sm_90 and newer, one rank per GPU); 0 disables") \
    X(COLL_PROBE, STR, "auto",                                                                             \
      "measure peer read/write bandwidth and a barrier at init for the cost model (push or pull, the "     \
      "table's bounds): auto (on PCIe, or with host_numa placement), force, or 0")                         \
    X(AUTOTUNE, STR, "auto",                                                                               \
      "measure the algorithm table at the first communicator init on a machine (per topology, rank count, " \
      "placement, grid, workspace and version, in each form of call; within SYMMEM_AUTOTUNE_BUDGET_MS) "   \
      "and save it where symmem-bench --tune "                                                             \
      "does: auto (when no tuning file has it), off (the cost model's table) or force (at every init)")    \
    X(AUTOTUNE_BUDGET_MS, INT, "8000",                                                                     \
      "the autotune starts no new size after this many milliseconds (on the slowest rank); sizes it did "   \
      "not reach keep the cost model's choice")                                                            \
    X(TUNE_FILE, STR, "",                                                                                  \
      "algorithm table written by symmem-bench --tune, used when it exists (empty: tune.txt in the cache " \
      "folder, SYMMEM_TOPO_CACHE_DIR)")                                                                    \
    X(SYSFS_ROOT, STR, "", "read sysfs and procfs under this root instead of / (captured trees; empty: /)") \
    X(TOPO_CACHE_DIR, STR, "",                                                                             \
      "cache folder of the measured topology and the tuned algorithm table (empty: $XDG_CACHE_HOME/symmem, " \
      "or ~/.cache/symmem)")                                                                               \
    X(TOPO_DUMP_FILE, STR, "",                                                                             \
      "write the topology model as JSON to this file at communicator init (empty: none)")                  \
    X(ISLANDS, STR, "",                                                                                    \
      "the island algorithm's islands (CPU sockets), e.g. 0-3,4-7 or 0-1+4-5,2-3+6-7 (ranges joined by +; " \
      "empty: by each GPU's NUMA node); every rank must set the same: where ranks differ, the island "     \
      "algorithm is off everywhere (docs/collectives.md, \"Island schedule\")")                           \
    X(WIRE_MIN_BYTES, SIZE, "1M",                                                                          \
      "compressed-wire all-reduces (wire_int8, torch's wire=\"int8\": lossy, only where a call asks) of fewer " \
      "bytes than this run the exact algorithm AUTO chooses instead; every rank must set the same "       \
      "(docs/collectives.md, \"Compressed wire\")")                                                         \
    X(WIRE_GROUP, INT, "32",                                                                               \
      "values per int8 scale group of the compressed wire: 32, 64 or 128 (fewer bytes on the wire with "   \
      "larger groups, a larger error where a group holds an outlier); every rank must set the same")

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
