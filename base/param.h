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

/* X(name, type, default, valid, reader, meaning): the one table of every SYMMEM_* variable that symmem's code
 * reads, the library's and the Python package's. It is the documentation too: symmem-info
 * (tools/symmem_info.c) prints it with the values in effect, and writes docs/configuration.md from it
 * (symmem-info --markdown; a test checks the file is current and that no code reads a variable missing here).
 *
 * One rule for every value: an empty value is the default; a value outside its type and `valid` gets a
 * warning that names the variable, the value, why it is refused (the valid values) and the default used
 * instead, which is what the readers then see (symmem_param_str and the others never return a refused
 * value). The library warns once per process, when logging starts; the Python package warns where it reads
 * its own variables, with the same words (symmem_param_check). Nothing is refused silently.
 *
 *   type   INT    decimal integer; valid "LO..HI", or "LO..HI/STEP" (a multiple of STEP)
 *          SIZE   bytes, with an optional K, M or G (and i, B): "4096", "64K"; valid "LO..HI" in that syntax
 *          FLAG   0 or 1, also false/true, no/yes, off/on (any case); valid ""
 *          ONE_OF one of the names in valid, "a|b|c" (any case)
 *          LIST   names of valid ("a|b|c") separated by commas, at least one; a leading ^ negates the list
 *          SETS   sets of ranks: ranks "a" or ranges "a-b" joined by '+', sets separated by ','; valid ""
 *          TEXT   any text (a path, a name); valid says what it is, for the documentation
 *   reader LIB    the library (symmem_param_*), PY the Python package (symmem._settings, with the table's rule)
 *
 * A meaning is one plain-text paragraph that says what an empty default stands for. */
#define SYMMEM_PARAM_ALGO_NAME_(name, value, text) "|" text
#define SYMMEM_PARAM_LIST(X)                                                                               \
    X(LOG_LEVEL, ONE_OF, "WARN", "NONE|WARN|INFO|DEBUG|TRACE", LIB,                                        \
      "log level: NONE (nothing, not even warnings), WARN, INFO, DEBUG or TRACE")                          \
    X(LOG_SUBSYS, LIST, "ALL", "CORE|BOOT|ALLOC|COLL|TOPO|NCCL|ALL", LIB,                                  \
      "subsystems whose INFO, DEBUG and TRACE lines are logged, separated by commas, or ALL; a leading ^ " \
      "logs all but the ones named. Warnings are logged whatever the subsystems")                          \
    X(LOG_FILE, TEXT, "", "a file path", LIB,                                                              \
      "log to this file instead of stderr (empty: stderr); %h in the path becomes the host name, %p the "  \
      "process id")                                                                                        \
    X(TIMEOUT_MS, INT, "30000", "1..2147483647", LIB, "bootstrap and collective timeout in milliseconds")  \
    X(SOCKET_DIR, TEXT, "", "a directory", LIB,                                                            \
      "bootstrap sockets as files in this directory (the user's own, mode 0700) instead of abstract names " \
      "(empty): for ranks in containers that share a directory but not a network namespace "               \
      "(docs/security.md)")                                                                                \
    X(BACKEND, ONE_OF, "cuda", "cuda|host", LIB,                                                           \
      "memory backend when the API leaves it default: cuda, or host (memfd host memory and no GPU, for "   \
      "developing and testing communicators and symmem_alloc on a machine without one: the same bootstrap, " \
      "descriptor passing and peer mapping; its collectives return SYMMEM_UNSUPPORTED)")                   \
    X(PLACEMENT, ONE_OF, "auto", "auto|device|host_numa|host", LIB,                                        \
      "buffer placement: auto (device memory, or host memory if some GPU pair lacks P2P), device or "      \
      "host_numa (host is the same)")                                                                      \
    X(FABRIC, FLAG, "1", "", LIB, "also request fabric handles where the GPU supports them (0 disables)")  \
    X(GDR, FLAG, "1", "", LIB, "request the GPUDirect RDMA flag on allocations where supported (0 disables)") \
    X(NCCL_LIBRARY, TEXT, "", "a library name or path", LIB,                                               \
      "NCCL library to load when none is loaded in the process (empty: libnccl.so.2 from the loader's "    \
      "search path)")                                                                                      \
    X(ALGO, ONE_OF, "auto", "" SYMMEM_ALGO_LIST(SYMMEM_PARAM_ALGO_NAME_), LIB,                             \
      "force a collective algorithm by name (auto: the library chooses); the lossy wire_int8 runs only "   \
      "where a call names it (here: ignored, with a warning)")                                             \
    X(WORKSPACE_BYTES, SIZE, "64M", "4M..64G", LIB,                                                        \
      "per-rank collective workspace: three Lamport buffers of the largest power of two at most 1/8 of it " \
      "plus 16 KiB, and two data halves; messages larger than a round of it run in rounds")                \
    X(MAX_BLOCKS, INT, "0", "0..2147483647", LIB,                                                          \
      "upper bound on thread blocks per collective kernel (0: automatic)")                                 \
    X(GRID_SHARE, INT, "75", "1..100", LIB,                                                                \
      "percent of the GPU's resident thread blocks that the ranks of a communicator on one GPU hold at "   \
      "most (where SYMMEM_CLUSTER_ROOM applies: percent of the blocks it leaves; unset there: all of "     \
      "them, up to 75% of the GPU); communicators used at the same time on one GPU need shares that add "  \
      "up to at most 100 (docs/collectives.md, \"Residency\")")                                            \
    X(CLUSTER_ROOM, INT, "8", "0..255", LIB,                                                               \
      "idle SMs that some GPC keeps while the ranks of a communicator sharing a GPU wait in their "        \
      "collectives, so that a kernel in clusters of that size (a GEMM in clusters of 8) can start: those " \
      "ranks hold at most SMs - (room - 1) x GPCs - 1 blocks together, of which the communicator takes "   \
      "its SYMMEM_GRID_SHARE (unset: all, up to 75% of the GPU); 0 disables; one rank per GPU is never "   \
      "affected, nor a GPU whose GPC count init cannot measure (before sm_90). Co-located ranks that run "  \
      "GEMMs between collectives need 8 on an H200 (docs/collectives.md, \"Residency\")")                  \
    X(ON_ERROR, ONE_OF, "report", "report|abort", LIB,                                                     \
      "when a communicator fails: report (errors reach return codes, symmem_comm_get_async_error and the " \
      "error handler) or abort (the error is logged and the process aborts)")                              \
    X(ERROR_POLL_MS, INT, "10", "1..60000", LIB,                                                           \
      "how often the error watcher reads the error records of watched communicators (milliseconds)")       \
    X(MIN_BLOCK_THREADS, INT, "128", "32..512/32", LIB,                                                    \
      "fewest threads per block of a collective kernel: smaller spreads small messages over more SMs")     \
    X(LAMPORT_CHECK, FLAG, "0", "", LIB,                                                                   \
      "1: the Lamport calls (oneshot_push, twoshot_lamport) exchange round headers, so that ranks passing " \
      "different arguments get SYMMEM_INVALID_USAGE (the flag algorithms always check); it costs about "   \
      "0.35 us per call below 256 KiB, and is on for all ranks if any rank sets it")                       \
    X(PDL, FLAG, "1", "", LIB,                                                                             \
      "programmatic dependent launch of collective kernels (sm_90 and newer, one rank per GPU); 0 disables") \
    X(COLL_PROBE, ONE_OF, "auto", "auto|force|1|0|off", LIB,                                               \
      "measure peer read/write bandwidth and a barrier at init for the cost model (push or pull, the "     \
      "table's bounds): auto (on PCIe, or with host_numa placement), force (or 1), or 0 (or off)")         \
    X(AUTOTUNE, ONE_OF, "auto", "auto|off|force|0|1", LIB,                                                 \
      "measure the algorithm table at the first communicator init on a machine (per topology, rank count, " \
      "placement, grid, workspace and version, in each form of call; within SYMMEM_AUTOTUNE_BUDGET_MS) "   \
      "and save it where symmem-bench --tune does: auto (when no tuning file has it), off or 0 (the cost " \
      "model's table), force or 1 (at every init)")                                                        \
    X(AUTOTUNE_BUDGET_MS, INT, "8000", "0..3600000", LIB,                                                  \
      "the autotune starts no new size after this many milliseconds (on the slowest rank); sizes it did "   \
      "not reach keep the cost model's choice")                                                            \
    X(TUNE_FILE, TEXT, "", "a file path", LIB,                                                             \
      "algorithm table written by symmem-bench --tune, used when it exists (empty: tune.txt in the cache " \
      "folder, SYMMEM_TOPO_CACHE_DIR)")                                                                    \
    X(SYSFS_ROOT, TEXT, "", "a directory", LIB,                                                            \
      "read sysfs and procfs under this root instead of / (captured trees; empty: /)")                     \
    X(TOPO_CACHE_DIR, TEXT, "", "a directory", LIB,                                                        \
      "cache folder of the measured topology and the tuned algorithm table (empty: $XDG_CACHE_HOME/symmem, " \
      "or ~/.cache/symmem)")                                                                               \
    X(TOPO_DUMP_FILE, TEXT, "", "a file path", LIB,                                                        \
      "write the topology model as JSON to this file at communicator init (empty: none)")                  \
    X(ISLANDS, SETS, "", "", LIB,                                                                          \
      "the island algorithm's islands (CPU sockets), e.g. 0-3,4-7 or 0-1+4-5,2-3+6-7 (empty: by each "     \
      "GPU's NUMA node); every rank must set the same, and list every rank once: where ranks differ, or a " \
      "list does not fit the ranks, the island algorithm is off everywhere (docs/collectives.md, \"Island " \
      "schedule\")")                                                                                       \
    X(GRAPH_REGISTER, FLAG, "1", "", LIB,                                                                  \
      "inside a CUDA graph capture, map an all-reduce's ordinary (cudaMalloc) buffers into the peers, so "  \
      "the captured kernel reads and stores them in place: the ranks must capture together (0: copy "      \
      "through the workspace; docs/collectives.md, \"CUDA graphs\")")                                     \
    X(WIRE_MIN_BYTES, SIZE, "1M", "0..1024G", LIB,                                                         \
      "compressed-wire all-reduces (wire_int8, torch's wire=\"int8\": lossy, only where a call asks) of "   \
      "fewer bytes than this run the exact algorithm AUTO chooses instead; every rank must set the same "   \
      "(docs/collectives.md, \"Compressed wire\")")                                                         \
    X(WIRE_GROUP, INT, "32", "32..128/32", LIB,                                                            \
      "values per int8 scale group of the compressed wire: 32, 64 or 128 (fewer bytes on the wire with "   \
      "larger groups, a larger error where a group holds an outlier); every rank must set the same")       \
    X(LIBRARY, TEXT, "", "a file path", PY,                                                                \
      "the libsymmem the Python package loads (empty: the one inside the package, then a source tree's "   \
      "build folders, then the loader's search path)")                                                     \
    X(TORCH_LIBRARY, TEXT, "", "a file path", PY,                                                          \
      "the PyTorch op library (libsymmem_torch.so) symmem.torch loads (empty: the one inside the package, " \
      "then a source tree's build folders)")                                                               \
    X(TORCH_OPS, ONE_OF, "library", "library|python", PY,                                                  \
      "where symmem.torch's ops come from: library (the op library where one is found and loads, else "    \
      "the ctypes ops; symmem.torch.op_library() says which) or python (the ctypes ops, never the op "     \
      "library)")                                                                                          \
    X(TORCH_FAST_CALL, ONE_OF, "on", "on|off", PY,                                                         \
      "whether a SymmemCommunicator's plain eager all_reduce calls the library through a compiled entry "  \
      "(on, where one is built and loads: symmem._fast_torch where a source install built it for this "   \
      "torch and Python, else symmem._fast; symmem.torch.fast_entry() says which) or through "             \
      "torch.ops.symmem like every other call (off); read when the communicator is created")               \
    X(TORCH_ERROR_HANDLING, ONE_OF, "abort", "abort|raise", PY,                                            \
      "what symmem.torch's watchdog does when a communicator fails: abort (log and abort the process, as " \
      "torch's ProcessGroupNCCL does by default) or raise (the next call on that communicator raises)")    \
    X(TORCH_LEARN_SIZES, INT, "32", "0..4096", PY,                                                         \
      "how many distinct all-reduce sizes a SymmemCommunicator measures for AUTO the first time it sees "  \
      "each in a plain eager call (symmem_tune_sizes; 0: none), so that the table holds exactly the sizes " \
      "the model issues")                                                                                  \
    X(TORCH_WATCHDOG_MS, INT, "100", "0..3600000", PY,                                                     \
      "how often symmem.torch's watchdog polls its communicators, in milliseconds (0: no watchdog thread; " \
      "errors then surface at the next call)")                                                             \
    X(SGLANG_MODE, ONE_OF, "fallback", "fallback|replace|off", PY,                                         \
      "the SGLang drop-in: fallback (symmem where SGLang's own symmetric-memory all-reduce would not come " \
      "up), replace (symmem always) or off (SGLang's class untouched; also disables the .pth hook)")       \
    X(SGLANG_GROUPS, TEXT, "tp", "group names separated by commas, or all", PY,                            \
      "the SGLang groups (by name: tp, moe_tp, pp, ...) that get a symmem communicator; all for every "    \
      "group")                                                                                             \
    X(SGLANG_MAX_BYTES, SIZE, "", "0..1024G", PY,                                                          \
      "largest all-reduce the SGLang drop-in takes (empty: by the ranks' worst link, as the library "      \
      "advises: symmem_comm_preferred_max_bytes)")                                                         \
    X(SGLANG_FUSE_RMSNORM, FLAG, "0", "", PY,                                                              \
      "1: SGLang's all-reduce + residual add + RMSNorm runs as symmem's fused kernel where it fits")       \
    X(SGLANG_WIRE, ONE_OF, "none", "none|int8", PY,                                                        \
      "the SGLang drop-in's all-reduce wire: none (exact) or int8 (the compressed wire where symmem "      \
      "serves the group, from SYMMEM_WIRE_MIN_BYTES on: lossy; every rank must set the same)")             \
    X(VLLM_MODE, ONE_OF, "fallback", "fallback|replace|off", PY,                                           \
      "the vLLM drop-in: fallback (symmem where vLLM's own SymmMemCommunicator would not come up), "       \
      "replace (symmem always) or off (vLLM's class untouched)")                                           \
    X(VLLM_MAX_BYTES, SIZE, "", "0..1024G", PY,                                                            \
      "largest all-reduce the vLLM drop-in takes (empty: by the ranks' worst link, as the library "        \
      "advises: symmem_comm_preferred_max_bytes)")                                                         \
    X(VLLM_FUSE_RMSNORM, FLAG, "0", "", PY,                                                                \
      "1: vLLM's all-reduce + residual add + RMSNorm runs as symmem's fused kernel where it fits")          \
    X(VLLM_WIRE, ONE_OF, "none", "none|int8", PY,                                                          \
      "the vLLM drop-in's all-reduce wire: none (exact) or int8 (the compressed wire where symmem serves "  \
      "the group, from SYMMEM_WIRE_MIN_BYTES on: lossy; every rank must set the same)")

typedef enum symmem_param_id {
#define SYMMEM_PARAM_ENUM_(name, type, def, valid, reader, doc) SYMMEM_PARAM_##name,
    SYMMEM_PARAM_LIST(SYMMEM_PARAM_ENUM_)
#undef SYMMEM_PARAM_ENUM_
    SYMMEM_PARAM_COUNT
} symmem_param_id_t;

/* The value in effect: the environment's when it is set, not empty and valid, else the default. Never NULL. */
const char *symmem_param_str(symmem_param_id_t id);
/* INT parameters, and FLAG ones (0 or 1). */
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
/* Warn (once) about SYMMEM_* variables that are not in the table, and about the library's variables whose
 * value is refused; logging calls it when it is ready. */
void symmem_param_warn_unknown(void);
/* Re-read the environment (tests only; not thread-safe against concurrent readers). */
void symmem_param_reload(void);

#ifdef __cplusplus
}
#endif
#endif
