/*
 * symmem: symmetric, peer-mapped GPU memory and direct-load collectives.
 *
 * This is the one public C API. It is C11, needs no CUDA header (a stream is passed as
 * `struct CUstream_st *`, which is what `cudaStream_t` and `CUstream` are), and every symbol it declares
 * starts with `symmem_`. The device-side API for users' own kernels is in <symmem/symmem_device.cuh>; the
 * topology model is in <symmem/topo.h>, included from here.
 *
 * Conventions for every function below:
 *  - The return value is a symmem_status_t; SYMMEM_OK is 0. On failure, symmem_last_error() returns a
 *    per-thread message naming the rank, the call, the underlying CUDA/OS error and what to do.
 *  - Output arguments come last and are written only on success.
 *  - "Collective" means every rank of the communicator must make the same call (same arguments where said)
 *    before any of them returns; "local" means the call involves only the calling rank.
 *  - "Stream-ordered" means the call enqueues work on the given stream and returns without waiting for it.
 *  - create/init functions pair with a destroy/free; destroy(NULL) and free(NULL) are no-ops.
 *  - Threads: different communicators may be used from different threads at once. One communicator's
 *    collective host calls (symmem_alloc, the collectives) must not run concurrently from several threads;
 *    lookups (symmem_buffer_*, symmem_comm_rank/size/...) are safe from any thread.
 *  - Like cudaFree, symmem_free and symmem_comm_destroy must not be called while stream work that uses the
 *    buffer (or the communicator) may still run: synchronise the streams first.
 */
#ifndef SYMMEM_SYMMEM_H
#define SYMMEM_SYMMEM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the exported API: the library is built with hidden visibility, so only these symbols leave it. */
#if defined(__GNUC__) || defined(__clang__)
#define SYMMEM_API __attribute__((visibility("default")))
#else
#define SYMMEM_API
#endif

#define SYMMEM_VERSION_MAJOR 0
#define SYMMEM_VERSION_MINOR 1
#define SYMMEM_VERSION_PATCH 0
/* One integer that orders versions: major * 10000 + minor * 100 + patch. */
#define SYMMEM_VERSION_CODE(maj, min, pat) ((maj) * 10000 + (min) * 100 + (pat))
#define SYMMEM_VERSION SYMMEM_VERSION_CODE(SYMMEM_VERSION_MAJOR, SYMMEM_VERSION_MINOR, SYMMEM_VERSION_PATCH)

/* Largest communicator. Peer tables are fixed-size arrays of this many entries. */
#define SYMMEM_MAX_RANKS 16

/* ------------------------------------------------------------------------------------------------------
 * Status codes. One list generates the enum, symmem_status_name() and symmem_status_string().
 * ---------------------------------------------------------------------------------------------------- */
#define SYMMEM_STATUS_LIST(X)                                                                              \
    X(OK, 0, "success")                                                                                    \
    X(INVALID_ARGUMENT, 1, "an argument is out of range or inconsistent")                                  \
    X(INVALID_USAGE, 2, "the call is not allowed in the current state")                                    \
    X(SYSTEM_ERROR, 3, "an operating-system call failed")                                                  \
    X(CUDA_ERROR, 4, "a CUDA driver or runtime call failed")                                               \
    X(OUT_OF_MEMORY, 5, "out of host or device memory")                                                    \
    X(TIMEOUT, 6, "a peer did not arrive within the timeout")                                              \
    X(PEER_FAILURE, 7, "a peer failed, left or sent something inconsistent")                               \
    X(UNSUPPORTED, 8, "not supported on this system or build")                                             \
    X(NO_DEVICE, 9, "no usable GPU")                                                                       \
    X(NCCL_ERROR, 10, "an NCCL call failed")                                                               \
    X(COMM_ERROR, 11, "the communicator is in an error state after an earlier failure")                    \
    X(INTERNAL_ERROR, 12, "internal error (a bug in symmem; please report it)")

typedef enum symmem_status {
#define SYMMEM_STATUS_ENUM_(name, value, text) SYMMEM_##name = value,
    SYMMEM_STATUS_LIST(SYMMEM_STATUS_ENUM_)
#undef SYMMEM_STATUS_ENUM_
    SYMMEM_STATUS_COUNT
} symmem_status_t;

/* "SYMMEM_TIMEOUT" for SYMMEM_TIMEOUT; "SYMMEM_UNKNOWN_STATUS" for values outside the enum. */
SYMMEM_API const char *symmem_status_name(symmem_status_t status);
/* A one-line description of the status class (not of the particular failure: see symmem_last_error()). */
SYMMEM_API const char *symmem_status_string(symmem_status_t status);
/* Detail of the last failure on the calling thread ("" if none). Valid until the thread's next symmem call. */
SYMMEM_API const char *symmem_last_error(void);

/* Run-time version (SYMMEM_VERSION of the library actually loaded). */
SYMMEM_API int symmem_version(void);

/* ------------------------------------------------------------------------------------------------------
 * Parameters: the SYMMEM_* environment variables symmem reads, the library's and the Python package's, from
 * its one table (what symmem-info and `python -m symmem info` print, and docs/configuration.md lists).
 * Local calls, thread-safe; the strings are the library's, valid for the life of the process. The library
 * reads the environment once, at its first use of a parameter. One rule for every value: empty is the
 * default; a value outside the parameter's type and valid values is refused with a warning that names the
 * valid values and the default, which is used instead.
 * ---------------------------------------------------------------------------------------------------- */
typedef enum symmem_param_field {
    SYMMEM_PARAM_FIELD_NAME = 0,    /* "SYMMEM_TIMEOUT_MS" */
    SYMMEM_PARAM_FIELD_TYPE = 1,    /* "int" (decimal), "size" (bytes, with an optional K, M or G), "flag" (0 or
                                       1, also false/true, no/yes, off/on) or "string" */
    SYMMEM_PARAM_FIELD_DEFAULT = 2, /* the built-in default, as the environment would spell it ("" : empty) */
    SYMMEM_PARAM_FIELD_VALUE = 3,   /* the value as given: the environment's if set, else the default */
    SYMMEM_PARAM_FIELD_SOURCE = 4,  /* where VALUE came from and whether it is used: "default", "environment",
                                       "environment, empty: the default is used" or "environment, refused: the
                                       default is used" (symmem_param_check says why) */
    SYMMEM_PARAM_FIELD_DOC = 5,     /* what it means: one plain-text paragraph */
    SYMMEM_PARAM_FIELD_VALID = 6,   /* the values it takes, in words: "1..100", "auto, device, host_numa" */
    SYMMEM_PARAM_FIELD_READER = 7,  /* who reads it: "library" or "python" (the Python package) */
} symmem_param_field_t;
/* How many parameters there are; they are numbered 0 .. count - 1. */
SYMMEM_API int symmem_param_count(void);
/* One field of parameter `index`; NULL for an index or a field out of range. */
SYMMEM_API const char *symmem_param_get(int index, symmem_param_field_t field);
/* Whether `value` is one parameter `index` takes (an empty value always is: it stands for the default): 0
 * if so; 1 if not, with why in `reason` (when not NULL, `len` bytes), worded to follow "NAME=value is ":
 * "not in 1..100", "not one of auto, device, host_numa"; -1 for an index out of range or a NULL value. */
SYMMEM_API int symmem_param_check(int index, const char *value, char *reason, size_t len);

/* ------------------------------------------------------------------------------------------------------
 * Options. Zero-initialise with SYMMEM_OPTIONS_INIT (or symmem_options_init()), then set fields. `size`,
 * `magic` and `version` let the struct grow without breaking old callers. A field left at its "default"
 * value takes the SYMMEM_* environment variable, then the built-in default (API beats environment beats
 * default).
 * ---------------------------------------------------------------------------------------------------- */
typedef enum symmem_backend {
    SYMMEM_BACKEND_DEFAULT = 0, /* SYMMEM_BACKEND, else CUDA */
    SYMMEM_BACKEND_CUDA = 1,    /* cuMem allocations on the communicator's GPU */
    SYMMEM_BACKEND_HOST = 2,    /* memfd host memory: the same bootstrap, fd exchange and mapping, no GPU */
} symmem_backend_t;

typedef enum symmem_placement {
    SYMMEM_PLACEMENT_DEFAULT = 0,   /* SYMMEM_PLACEMENT, else AUTO */
    SYMMEM_PLACEMENT_AUTO = 1,      /* device memory; host memory if some pair of GPUs has no P2P */
    SYMMEM_PLACEMENT_DEVICE = 2,    /* device memory; fail if some pair of GPUs has no P2P */
    SYMMEM_PLACEMENT_HOST_NUMA = 3, /* pinned host memory on the NUMA node nearest each rank's GPU */
} symmem_placement_t;

#define SYMMEM_OPTIONS_MAGIC 0x53594d4du /* "SYMM" */
#define SYMMEM_OPTIONS_VERSION 1u

typedef struct symmem_options {
    size_t size;      /* sizeof(symmem_options_t) */
    uint32_t magic;   /* SYMMEM_OPTIONS_MAGIC */
    uint32_t version; /* SYMMEM_OPTIONS_VERSION */
    int device;       /* CUDA device of this rank; -1: the calling thread's current device */
    int timeout_ms;   /* bootstrap and collective timeout; 0: SYMMEM_TIMEOUT_MS, else 30000 */
    symmem_backend_t backend;
    symmem_placement_t placement;
    int numa_node;    /* host-NUMA placement: node to use; -1: nearest the GPU (libnuma/sysfs) */
} symmem_options_t;

#define SYMMEM_OPTIONS_INIT                                                                                \
    {                                                                                                      \
        sizeof(symmem_options_t), SYMMEM_OPTIONS_MAGIC, SYMMEM_OPTIONS_VERSION, -1, 0,                     \
            SYMMEM_BACKEND_DEFAULT, SYMMEM_PLACEMENT_DEFAULT, -1                                           \
    }

/* Local. Fills *opts with SYMMEM_OPTIONS_INIT. */
SYMMEM_API void symmem_options_init(symmem_options_t *opts);

/* ------------------------------------------------------------------------------------------------------
 * Communicators.
 * ---------------------------------------------------------------------------------------------------- */
typedef struct symmem_comm *symmem_comm_t;

/* Opaque rendezvous id made by one process (any, usually rank 0) and handed to every rank out of band.
 * It carries a random secret that keys the ranks' socket names and their handshake; treat it like a
 * password (a 0600 file, the environment of processes you start, your launcher's store) and make a new one
 * per job. symmem_unique_id_to_string() gives a printable form and symmem_unique_id_from_string() parses it
 * back. See docs/security.md. */
#define SYMMEM_UNIQUE_ID_BYTES 64
typedef struct symmem_unique_id {
    unsigned char bytes[SYMMEM_UNIQUE_ID_BYTES];
} symmem_unique_id_t;
#define SYMMEM_UNIQUE_ID_STRLEN (2 * SYMMEM_UNIQUE_ID_BYTES + 1)

/* Local. A new id with a fresh random secret. */
SYMMEM_API symmem_status_t symmem_get_unique_id(symmem_unique_id_t *id);
/* Local. Writes 2*SYMMEM_UNIQUE_ID_BYTES hex digits and a NUL into buf (SYMMEM_UNIQUE_ID_STRLEN bytes). */
SYMMEM_API symmem_status_t symmem_unique_id_to_string(const symmem_unique_id_t *id, char *buf, size_t buflen);
/* Local. SYMMEM_INVALID_ARGUMENT if `str` is not a valid id string. */
SYMMEM_API symmem_status_t symmem_unique_id_from_string(const char *str, symmem_unique_id_t *id);

/* Collective over `nranks` processes (or threads) on one host, each with a distinct `rank` in [0, nranks).
 * Blocks until every rank has arrived or the timeout passes (then SYMMEM_TIMEOUT naming the missing ranks,
 * or, when a peer gave up first, that peer and its reason).
 * Who may join (docs/security.md): processes of the same effective uid holding `id`. Ranks meet over Unix
 * domain sockets whose names derive from the id's secret (abstract names, or files in SYMMEM_SOCKET_DIR,
 * a directory of the user's with mode 0700). Both ends check the other's uid (SO_PEERCRED) before a byte
 * moves and prove they hold the secret by a challenge-response over fresh nonces; the secret never crosses a
 * socket. Connections of other processes are turned away (logged, pid and uid named) and cost the ranks no
 * more than their absence; a rank's name already bound by another process fails at once with that pid and
 * uid (SYMMEM_INVALID_ARGUMENT: a duplicate rank, or a process holding the secret). Every member can read and
 * write every rank's buffers: hand the id only to the job's ranks.
 * `opts` may be NULL. On return (success or not) the rank's device (opts->device, or the current one) is
 * the calling thread's current device, as after cudaSetDevice: switching back would create a context on the
 * old device in processes that never used it. */
SYMMEM_API symmem_status_t symmem_comm_init(int nranks, int rank, const symmem_unique_id_t *id, const symmem_options_t *opts,
                                 symmem_comm_t *comm);

/* A user-supplied bootstrap: an allgather and a barrier over the same ranks (e.g. a PyTorch Store, MPI).
 * allgather: every rank contributes `bytes` bytes in `sendbuf`; on return `recvbuf` holds nranks*bytes, rank
 * r's contribution at offset r*bytes. Both return 0 on success, nonzero on failure. symmem uses them only
 * during symmem_comm_init_bootstrap (to agree on the secret and exchange host facts); file descriptors
 * still travel over symmem's own Unix sockets, which requires the ranks to share a host. */
typedef struct symmem_bootstrap {
    int (*allgather)(void *ctx, const void *sendbuf, void *recvbuf, size_t bytes);
    int (*barrier)(void *ctx);
    void *ctx;
} symmem_bootstrap_t;

/* Collective, like symmem_comm_init, with the user's bootstrap instead of a unique id. */
SYMMEM_API symmem_status_t symmem_comm_init_bootstrap(int nranks, int rank, const symmem_bootstrap_t *bootstrap,
                                           const symmem_options_t *opts, symmem_comm_t *comm);

/* Local (creates all ranks in the calling process, like ncclCommInitAll). devices[r] is rank r's CUDA
 * device; devices may repeat (several ranks on one GPU, for testing larger rank counts on fewer GPUs);
 * devices == NULL puts rank r on device r. With SYMMEM_BACKEND_HOST devices are ignored. comms[] receives
 * nranks communicators. Collective calls on them from one thread go inside symmem_group_start/end (or use
 * one thread per rank). A blocking collective call that can never be matched fails at once instead of
 * waiting the timeout: SYMMEM_INVALID_USAGE when the calling thread, outside a group, is the process's only
 * thread; SYMMEM_PEER_FAILURE when another rank of the set was destroyed or has failed. */
SYMMEM_API symmem_status_t symmem_comm_init_all(int nranks, const int *devices, const symmem_options_t *opts,
                                     symmem_comm_t *comms);

/* Local. Releases the communicator; every buffer still allocated on it must have been freed (otherwise
 * they are freed here, with a warning). Not collective, so it never blocks on peers. NULL is a no-op. */
SYMMEM_API symmem_status_t symmem_comm_destroy(symmem_comm_t comm);

SYMMEM_API int symmem_comm_rank(symmem_comm_t comm);
SYMMEM_API int symmem_comm_size(symmem_comm_t comm);
/* CUDA device of the rank, or -1 for the host backend. */
SYMMEM_API int symmem_comm_device(symmem_comm_t comm);
SYMMEM_API symmem_backend_t symmem_comm_backend(symmem_comm_t comm);

typedef enum symmem_link {
    SYMMEM_LINK_SELF = 0,     /* the same rank, or another rank on the same GPU */
    SYMMEM_LINK_NVLINK = 1,   /* direct P2P over NVLink */
    SYMMEM_LINK_PCIE = 2,     /* direct P2P over PCIe */
    SYMMEM_LINK_HOST = 3,     /* no P2P: through pinned host memory */
    SYMMEM_LINK_NONE = 4,     /* host backend: CPU shared memory, no GPU */
} symmem_link_t;

/* Local. How this rank reaches `peer`: link class and whether the driver reports native P2P atomics. */
SYMMEM_API symmem_status_t symmem_comm_peer_link(symmem_comm_t comm, int peer, symmem_link_t *link, int *native_atomics);

/* Local. SYMMEM_OK, or the error that put the communicator in its error state (a collective timeout, a peer
 * failure, a host call that failed partway through its exchange with the peers, which the peers are told
 * of) with the detail in symmem_last_error(). Non-blocking: it reads host-mapped status only. Safe to
 * call from any thread, also while another thread makes calls on the communicator (a watchdog). */
SYMMEM_API symmem_status_t symmem_comm_get_async_error(symmem_comm_t comm);

/* Told when a communicator fails, without polling: a kernel that times out inside a CUDA-graph replay has no
 * call to return its error from. `handler` is called once per communicator, on a thread of the library
 * (the error watcher), soon after the communicator enters its error state (a collective kernel timed out,
 * met a peer with other arguments or a concurrent use; a host call met a dead or inconsistent peer, or
 * failed partway through its exchange with the peers), with
 * the status and the message symmem_comm_get_async_error would give. It may log, record, call
 * symmem_comm_get_async_error, destroy this communicator or end the process; it must not make collective
 * calls. Local. A handler set after the failure is called at once. NULL removes it. The watcher polls
 * host-mapped memory every SYMMEM_ERROR_POLL_MS (10) ms and runs only while some communicator has a
 * handler (or SYMMEM_ON_ERROR=abort: then every failure is logged and the process aborts, for programs
 * that cannot act on errors themselves). SYMMEM_UNSUPPORTED for the host backend (no asynchronous errors). */
typedef void (*symmem_error_handler_t)(symmem_comm_t comm, symmem_status_t status, const char *message, void *ctx);
SYMMEM_API symmem_status_t symmem_comm_set_error_handler(symmem_comm_t comm, symmem_error_handler_t handler,
                                                         void *ctx);

/* Group calls, so that one thread can drive several ranks of symmem_comm_init_all: collective calls made
 * between symmem_group_start() and symmem_group_end() on the calling thread are recorded and run together
 * at symmem_group_end() (one helper thread per communicator, which makes that communicator's calls in the
 * order they were recorded), which returns the first failure. Outputs of the recorded calls are written at
 * symmem_group_end(). Stream-ordered calls inside a group run at once. */
SYMMEM_API symmem_status_t symmem_group_start(void);
SYMMEM_API symmem_status_t symmem_group_end(void);

/* ------------------------------------------------------------------------------------------------------
 * Symmetric memory.
 * ---------------------------------------------------------------------------------------------------- */
typedef struct symmem_buffer *symmem_buffer_t;

/* Collective; every rank passes the same `size` (> 0). Each rank gets `size` bytes (rounded up to the
 * allocation granularity, 2 MiB on current GPUs) that every other rank has mapped too, plus a zeroed signal
 * area of SYMMEM_SIGNAL_BYTES for the user's own synchronisation. Blocks until all ranks have mapped every
 * peer. Different sizes on different ranks fail on every rank with SYMMEM_INVALID_ARGUMENT. Memory is
 * cuMem-allocated with POSIX-fd export (and fabric export where supported), so NCCL can register it. */
#define SYMMEM_SIGNAL_BYTES 65536
SYMMEM_API symmem_status_t symmem_alloc(symmem_comm_t comm, size_t size, symmem_buffer_t *buf);

/* Local: frees this rank's handle without waiting for peers (so teardown never hangs on a dead peer).
 * Unmaps every peer, releases handles, frees the address reservation. Each rank's physical memory lives on
 * until the last rank that mapped it has freed its handle, so a peer still reading or writing this rank's
 * part never faults. A handle that is not a live allocation (a double free, a foreign pointer) gives
 * SYMMEM_INVALID_ARGUMENT and touches nothing. NULL is a no-op. */
SYMMEM_API symmem_status_t symmem_free(symmem_buffer_t buf);

/* Local lookups. Pointers are device pointers for the CUDA backend (host pointers for the host backend and
 * for host-NUMA placement they are host-accessible too). A handle that is not a live buffer (freed, freed
 * with its communicator by symmem_comm_destroy, or not from symmem_alloc) is never read: the lookup returns
 * NULL (0, SYMMEM_PLACEMENT_DEFAULT) and symmem_last_error() says SYMMEM_INVALID_ARGUMENT's detail. */
SYMMEM_API void *symmem_buffer_ptr(symmem_buffer_t buf);                 /* this rank's buffer */
SYMMEM_API void *symmem_buffer_peer_ptr(symmem_buffer_t buf, int peer);  /* peer's buffer, mapped here; NULL if out of range */
SYMMEM_API size_t symmem_buffer_size(symmem_buffer_t buf);               /* usable size (as requested) */
SYMMEM_API size_t symmem_buffer_mapped_size(symmem_buffer_t buf);        /* size after rounding to the granularity */
SYMMEM_API void *symmem_buffer_signal_ptr(symmem_buffer_t buf, int peer);/* peer's signal area, mapped here */
SYMMEM_API symmem_comm_t symmem_buffer_comm(symmem_buffer_t buf);
SYMMEM_API symmem_placement_t symmem_buffer_placement(symmem_buffer_t buf);
/* Device array (in device memory) of SYMMEM_MAX_RANKS pointers: entry r is rank r's buffer as mapped here,
 * for kernels. Host backend: a host array. */
SYMMEM_API void *const *symmem_buffer_device_peers(symmem_buffer_t buf);
/* Same for the signal areas. */
SYMMEM_API void *const *symmem_buffer_device_signals(symmem_buffer_t buf);
/* Local. The live buffer of `comm` that contains `ptr` (any address inside this rank's part), or NULL (also
 * for a `comm` that is not a live communicator, with the detail in symmem_last_error()). */
SYMMEM_API symmem_buffer_t symmem_buffer_lookup(symmem_comm_t comm, const void *ptr);

/* ------------------------------------------------------------------------------------------------------
 * NCCL interoperability (NCCL must run with NCCL_CUMEM_ENABLE=1). `nccl_comm` is an ncclComm_t of the same
 * ranks on the same devices. NCCL is looked up at run time: an NCCL already loaded in the process first,
 * then SYMMEM_NCCL_LIBRARY, then libnccl.so.2.
 * ---------------------------------------------------------------------------------------------------- */
/* Local for NCCL (ncclCommRegister is local). *handle is what NCCL returned. */
SYMMEM_API symmem_status_t symmem_nccl_register(symmem_buffer_t buf, void *nccl_comm, void **handle);
SYMMEM_API symmem_status_t symmem_nccl_deregister(void *nccl_comm, void *handle);
/* Collective in NCCL (ncclCommWindowRegister); SYMMEM_UNSUPPORTED where NCCL < 2.27. win_flags as NCCL's
 * (NCCL_WIN_COLL_SYMMETRIC = 1). */
SYMMEM_API symmem_status_t symmem_nccl_window_register(symmem_buffer_t buf, void *nccl_comm, int win_flags, void **window);
SYMMEM_API symmem_status_t symmem_nccl_window_deregister(void *nccl_comm, void *window);

/* ------------------------------------------------------------------------------------------------------
 * Collectives. All are collective over the communicator and stream-ordered on `stream` (NULL: the legacy
 * default stream), CUDA-graph capturable, and never synchronise the host. One communicator must not be
 * used from two streams at once: its operations share a workspace and a sequence number; the library
 * detects a concurrent use from a second stream (see symmem_comm_get_async_error) where it can, but
 * callers must order them. Use one communicator per stream for concurrent work.
 * ---------------------------------------------------------------------------------------------------- */
#define SYMMEM_DTYPE_LIST(X)                                                                               \
    X(FLOAT32, 0, float, 4)                                                                                \
    X(FLOAT16, 1, half, 2)                                                                                 \
    X(BFLOAT16, 2, bfloat16, 2)

typedef enum symmem_dtype {
#define SYMMEM_DTYPE_ENUM_(name, value, ctype, bytes) SYMMEM_##name = value,
    SYMMEM_DTYPE_LIST(SYMMEM_DTYPE_ENUM_)
#undef SYMMEM_DTYPE_ENUM_
    SYMMEM_DTYPE_COUNT
} symmem_dtype_t;

#define SYMMEM_REDOP_LIST(X)                                                                               \
    X(SUM, 0)                                                                                              \
    X(MAX, 1)                                                                                              \
    X(MIN, 2)

typedef enum symmem_redop {
#define SYMMEM_REDOP_ENUM_(name, value) SYMMEM_OP_##name = value,
    SYMMEM_REDOP_LIST(SYMMEM_REDOP_ENUM_)
#undef SYMMEM_REDOP_ENUM_
    SYMMEM_REDOP_COUNT
} symmem_redop_t;

#define SYMMEM_ALGO_LIST(X)                                                                                \
    X(AUTO, 0, "auto")                                                                                     \
    X(ONESHOT_PULL, 1, "oneshot_pull")                                                                     \
    X(ONESHOT_PUSH, 2, "oneshot_push")                                                                     \
    X(TWOSHOT_PULL, 3, "twoshot_pull")                                                                     \
    X(TWOSHOT_PUSH, 4, "twoshot_push")                                                                     \
    X(STAGED, 5, "staged")                                                                                 \
    X(TWOSHOT_LAMPORT, 6, "twoshot_lamport")                                                               \
    X(ISLAND, 7, "island")                                                                     \
    X(COPY_ENGINE, 8, "copy_engine")                                                                       \
    X(WIRE_INT8, 9, "wire_int8")

typedef enum symmem_algo {
#define SYMMEM_ALGO_ENUM_(name, value, text) SYMMEM_ALGO_##name = value,
    SYMMEM_ALGO_LIST(SYMMEM_ALGO_ENUM_)
#undef SYMMEM_ALGO_ENUM_
    SYMMEM_ALGO_COUNT
} symmem_algo_t;

SYMMEM_API size_t symmem_dtype_size(symmem_dtype_t dtype); /* 0 for an invalid dtype */
SYMMEM_API const char *symmem_dtype_name(symmem_dtype_t dtype);
SYMMEM_API const char *symmem_redop_name(symmem_redop_t op);
SYMMEM_API const char *symmem_algo_name(symmem_algo_t algo);
/* SYMMEM_INVALID_ARGUMENT for an unknown name. */
SYMMEM_API symmem_status_t symmem_algo_from_name(const char *name, symmem_algo_t *algo);

typedef struct CUstream_st *symmem_stream_t; /* == cudaStream_t */

/* Rules shared by the three data collectives below:
 *  - Pointers: any device memory, copied into the communicator's workspace inside the same kernel; or a
 *    range of a symmetric buffer of `comm`, read in place (zero copy) by the pull algorithms. A receive
 *    buffer in a symmetric buffer is written in place by the two-shot all-reduces (each rank stores its
 *    reduced shard into every rank's receive buffer; all of it has landed when the call's kernel ends on
 *    the receiving rank). With zero copy every rank must pass the same symmetric buffer at the same offset
 *    (a mismatch is detected and fails with SYMMEM_INVALID_USAGE, it is never silently misread).
 *  - Alignment: any pointer aligned to the element size works; 16-byte alignment is the fast path. A
 *    pointer not aligned to its element size fails with SYMMEM_INVALID_ARGUMENT. Any count, odd included.
 *  - In place: the NCCL forms only (all-reduce send == recv; reduce-scatter recv == send + rank*count;
 *    all-gather send == recv + rank*count); any other overlap fails with SYMMEM_INVALID_ARGUMENT.
 *  - Results: 16-bit types accumulate in fp32, each element is reduced in rank order 0..n-1 (island:
 *    below), so every rank gets bitwise-identical results; sum follows IEEE (Inf - Inf = NaN), max/min return NaN if any input
 *    is NaN. SYMMEM_ALGO_ONESHOT_PUSH and SYMMEM_ALGO_TWOSHOT_LAMPORT mark empty slots with -0.0, so they
 *    return +0.0 where the exact result is -0.0 (every rank alike). SYMMEM_ALGO_ISLAND (which AUTO may pick
 *    on machines with several islands, docs/collectives.md) reduces each island's ranks in order in fp32,
 *    rounds that partial to the dtype (it crosses the link between islands in the dtype), then reduces the
 *    partials in island order in fp32: a 16-bit sum takes one more rounding per island, as NCCL's ring
 *    rounds per hop (an error of up to about 2^-p * (sum of |inputs| + |result|), p = 8 bf16, 11 fp16,
 *    where one rounding gives 2^-p * |result|), and a partial beyond the dtype's range is +-Inf even
 *    where the whole sum is not; the order differs from rank order (also for fp32); max/min are exact;
 *    still bitwise-identical on every rank.
 *  - SYMMEM_ALGO_WIRE_INT8 is lossy, and only where asked for: AUTO, SYMMEM_ALGO, tuning tables and the
 *    autotune never choose it. A two-shot all-reduce (sum, bf16 or fp16 only; SYMMEM_INVALID_ARGUMENT
 *    otherwise) whose wire format is int8 with one fp32 scale per group of SYMMEM_WIRE_GROUP (32) values:
 *    each rank quantizes its input of every other rank's shard once, the owner of a shard adds the
 *    dequantized pieces to its own exact input in rank order in fp32 and quantizes the sum once, and
 *    every rank (the owner too) takes the dequantized sum, so results are bitwise identical on every rank.
 *    On machines with several islands it follows the island schedule, whose island partials are
 *    quantized once more. Error bound, per element i: |result - exact| <= c * W(i) + a, W(i) the sum over
 *    ranks of each rank's largest |input| within SYMMEM_WIRE_GROUP - 1 elements of i, c = 0.0120 bf16 and
 *    0.0086 fp16 (0.0160 and 0.0125 with several islands), a = 2^-98 bf16, 2^-24 fp16 (docs/collectives.md,
 *    "Compressed wire"). A NaN or infinity among a group's inputs, or a sum past fp32's range, makes that
 *    whole group NaN. Messages below SYMMEM_WIRE_MIN_BYTES (1 MiB), and one-rank communicators, run the
 *    exact algorithm AUTO would choose.
 *  - `algo` SYMMEM_ALGO_AUTO picks from the tuning table; SYMMEM_ALGO (environment) overrides AUTO.
 *  - count == 0 with valid arguments is a no-op. A kernel that waits longer than the timeout for a peer exits
 *    and puts the communicator in its error state: symmem_comm_get_async_error, every later call and the error
 *    handler (symmem_comm_set_error_handler) report the missing rank and the operation's sequence number.
 *  - After an error: every collective kernel of the communicator that starts once it has failed (e.g. the
 *    rest of a CUDA graph being replayed) writes a quiet NaN to every element of its receive buffer and
 *    returns at once. The call that fails stores NaN over the parts of its output whose blocks stopped (all
 *    of it for an argument mismatch, found before any result is stored); parts finished earlier stand.
 *  - Grids: a collective kernel has at most SYMMEM_GRID_SHARE percent of the thread blocks its GPU keeps
 *    resident, divided among the communicator's ranks on that GPU, so that every rank's kernel can be
 *    resident at once beside other work. Communicators whose collectives may run at the same time on one
 *    GPU (two streams) must have shares that add up to at most 100: see docs/collectives.md, "Residency".
 *    Ranks that share a GPU leave SYMMEM_CLUSTER_ROOM idle SMs per GPC for kernels in clusters that run
 *    between collectives, such as a cuBLAS GEMM. The defaults are the parameter table's (symmem-info,
 *    docs/configuration.md). */

/* All-reduce `count` elements from `sendbuf` into `recvbuf` on every rank. */
SYMMEM_API symmem_status_t symmem_all_reduce(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                  symmem_dtype_t dtype, symmem_redop_t op, symmem_algo_t algo,
                                  symmem_stream_t stream);
/* recvbuf gets `count` elements: block `rank` of the reduction of every rank's nranks*count elements. */
SYMMEM_API symmem_status_t symmem_reduce_scatter(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                      symmem_dtype_t dtype, symmem_redop_t op, symmem_algo_t algo,
                                      symmem_stream_t stream);
/* recvbuf gets nranks*`count` elements: rank r's `count` elements of sendbuf at offset r*count. */
SYMMEM_API symmem_status_t symmem_all_gather(symmem_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                  symmem_dtype_t dtype, symmem_algo_t algo, symmem_stream_t stream);
/* Every rank's stream waits until every rank's stream has reached this point. */
SYMMEM_API symmem_status_t symmem_barrier(symmem_comm_t comm, symmem_stream_t stream);

/* Fused all-reduce + residual add + RMSNorm: the end of a tensor-parallel decoder layer's attention and MLP
 * in one kernel (docs/collectives.md, "Fused all-reduce + residual add + RMSNorm"). Per row t of `tokens`
 * rows of `hidden` elements:
 *     h           = sum over ranks of x[t]                 (fp32, rank order 0..n-1, rounded to dtype)
 *     residual[t] = residual[t] + h                        (fp32, rounded to dtype; in place)
 *     out[t]      = residual[t] * weight / sqrt(mean(residual[t]^2) + eps)
 * the norm computed from the rounded residual in fp32 (sum of squares, mean, sqrt, division and the two
 * products correctly rounded), the output rounded once. `residual` is therefore bitwise what
 * symmem_all_reduce of x followed by an fp32 add rounded to dtype gives (-0.0 in h counts as +0.0, as in
 * SYMMEM_ALGO_ONESHOT_PUSH). x, residual and out are row-major and contiguous (row t at t*hidden
 * elements), weight is `hidden` elements, all of `dtype` (fp32, fp16, bf16).
 *  - Collective and stream-ordered, CUDA-graph capturable, no host synchronisation and no allocation, like
 *    symmem_all_reduce: every rank passes the same tokens, hidden, dtype, eps and algo (a difference is
 *    reported as SYMMEM_INVALID_USAGE with SYMMEM_LAMPORT_CHECK=1, else undefined). Results are bitwise
 *    identical on every rank, and for either algorithm, when every rank passes the same residual and
 *    weight (tensor parallelism replicates them).
 *  - algo: SYMMEM_ALGO_AUTO (by size and link: one-shot up to the crossover where the second trip of
 *    two-shot costs less than the bytes it saves; always one-shot at 2 ranks), SYMMEM_ALGO_ONESHOT_PUSH
 *    (every rank reduces every row) or SYMMEM_ALGO_TWOSHOT_LAMPORT (each rank reduces 1/nranks of the
 *    message, every rank receives the reduced rows and norms them itself). SYMMEM_ALGO and the tuning
 *    table are not consulted. Any other algorithm is SYMMEM_INVALID_ARGUMENT.
 *  - Arguments (SYMMEM_INVALID_ARGUMENT naming the one at fault): 1 <= hidden <= SYMMEM_RMSNORM_MAX_HIDDEN
 *    (a row lives in one thread block's registers); any tokens (0: no-op; calls larger than one Lamport
 *    buffer run as several kernels on the stream); eps finite and >= 0; no NULL pointer; every pointer
 *    aligned to the element size (16 bytes with hidden*size a multiple of 16 is the fast path). out == x
 *    is allowed (in place); otherwise x, residual and out must not overlap, nor weight overlap out or
 *    residual. Any device memory (nothing is read in place by peers).
 *  - Errors after the call as for the other collectives: timeouts name the missing rank, and every kernel
 *    of a failed communicator writes NaN to both out and residual. */
#define SYMMEM_RMSNORM_MAX_HIDDEN 16384
SYMMEM_API symmem_status_t symmem_all_reduce_add_rmsnorm(symmem_comm_t comm, const void *x, void *residual,
                                                         const void *weight, void *out, size_t tokens,
                                                         size_t hidden, float eps, symmem_dtype_t dtype,
                                                         symmem_algo_t algo, symmem_stream_t stream);

/* The form of a call, as AUTO's table tells calls apart: which of its input and output lie in a symmetric
 * buffer of the communicator. The algorithms read such an input in place (no copy into the workspace) and
 * store the result straight into such an output, so one size ranks them differently in each form: a
 * framework's ordinary tensors (SYMMEM_FORM_ORDINARY) and symmetric ones each get their own measurements and
 * rules (docs/collectives.md, "How AUTO chooses"). An in-place call on a symmetric buffer is
 * SYMMEM_FORM_SYMMETRIC. SYMMEM_FORM_BIT(f) makes the masks symmem_tune_sizes takes. */
#define SYMMEM_FORM_LIST(X)                                                                                \
    X(ORDINARY, 0, "ord")                                                                                  \
    X(SYMMETRIC_INPUT, 1, "sym_in")                                                                        \
    X(SYMMETRIC_OUTPUT, 2, "sym_out")                                                                      \
    X(SYMMETRIC, 3, "sym")

typedef enum symmem_form {
#define SYMMEM_FORM_ENUM_(name, value, text) SYMMEM_FORM_##name = value,
    SYMMEM_FORM_LIST(SYMMEM_FORM_ENUM_)
#undef SYMMEM_FORM_ENUM_
    SYMMEM_FORM_COUNT
} symmem_form_t;
#define SYMMEM_FORM_BIT(form) (1u << (unsigned)(form))
/* "ord", "sym_in", "sym_out", "sym"; "invalid_form" outside the list. */
SYMMEM_API const char *symmem_form_name(symmem_form_t form);

/* Collective, blocking, not during a CUDA graph capture on this device: measure AUTO's all-reduce choice at
 * exactly these message sizes (bytes, as symmem_all_reduce's count * dtype size; any values, in any order,
 * up to 64 of them; 0 and sizes above symmem_comm_max_message_bytes are skipped) in the forms of `forms`
 * (a mask of SYMMEM_FORM_BIT; 0 means SYMMEM_FORM_ORDINARY alone), and make the table give each size its
 * measured winner; sizes between keep their rules. What a framework calls with: hidden size x the batch
 * sizes it captures in CUDA graphs, x the element size. Every rank passes the same sizes and forms (a
 * difference fails with SYMMEM_INVALID_USAGE on every rank). Sizes the table already holds a measurement
 * for are not measured again; the table is saved where the autotune saves it (SYMMEM_TUNE_FILE, else the
 * cache folder), so a later init loads it. With SYMMEM_AUTOTUNE=off or SYMMEM_ALGO set it does nothing and
 * returns SYMMEM_OK; the host backend returns SYMMEM_OK too (no kernels). Takes about a millisecond per
 * size and form at decode sizes; the INFO line says what it measured. */
SYMMEM_API symmem_status_t symmem_tune_sizes(symmem_comm_t comm, const size_t *bytes, int nsizes, unsigned forms);

/* Largest per-rank message (bytes) the collectives handle through the workspace without chunking. 0 for
 * the host backend, and for a handle that is not a live communicator (destroyed, or not from an init
 * call), which is never read: symmem_last_error() then says SYMMEM_INVALID_ARGUMENT's detail. */
SYMMEM_API size_t symmem_comm_max_message_bytes(symmem_comm_t comm);

/* Local. Peer allocations this rank has mapped so far for all-reduces captured into CUDA graphs on ordinary
 * (cudaMalloc) memory (SYMMEM_GRAPH_REGISTER, docs/collectives.md "CUDA graphs"): each such call reads and
 * stores the peers' buffers in place, as on symmetric memory. They stay mapped until the communicator is
 * destroyed. 0 for the host backend and for a handle that is not a live communicator. */
SYMMEM_API size_t symmem_comm_graph_mappings(symmem_comm_t comm);

/* ------------------------------------------------------------------------------------------------------
 * For bindings and frameworks: what they would otherwise restate, asked of the library instead.
 * ---------------------------------------------------------------------------------------------------- */
/* Local. The public constants of this header as this library was built with them, so that a binding in
 * another language copies no value: index 0, 1, 2, ... gives one constant's name ("SYMMEM_BFLOAT16") and
 * stores its value in *value (if not NULL); NULL past the last. They are every enumerator of the status,
 * dtype, reduction, algorithm, backend, placement and link enums, then SYMMEM_MAX_RANKS,
 * SYMMEM_UNIQUE_ID_BYTES, SYMMEM_SIGNAL_BYTES, SYMMEM_RMSNORM_MAX_HIDDEN, SYMMEM_OPTIONS_MAGIC,
 * SYMMEM_OPTIONS_VERSION and SYMMEM_VERSION. */
SYMMEM_API const char *symmem_constant(int index, int64_t *value);

/* Local. The worst link between the GPUs of any two ranks, as every rank agreed at init (ranks on one GPU
 * count as NVLink; a pair without P2P as SYMMEM_LINK_HOST): what the algorithm choice goes by, the same on
 * every rank. SYMMEM_LINK_NONE for the host backend and for a handle that is not a live communicator. */
SYMMEM_API symmem_link_t symmem_comm_link_class(symmem_comm_t comm);

/* Local. The largest all-reduce (bytes per rank) that a framework with another all-reduce backend (NCCL's
 * ring) should send to symmem when its ranks' worst link is `link`; larger messages belong to the other
 * backend. SIZE_MAX where symmem is the better choice up to its workspace limit (NVLink); 0 for
 * SYMMEM_LINK_NONE and values outside the enum. The rule is the algorithm choice's (topology/choice.c). */
SYMMEM_API size_t symmem_link_preferred_max_bytes(symmem_link_t link);
/* Local. The bound of symmem_link_preferred_max_bytes for this communicator (its link class, or
 * SYMMEM_LINK_HOST where its memory is pinned host memory), within symmem_comm_max_message_bytes: the size
 * cap a framework should give symmem, the same on every rank. 0 where symmem_comm_max_message_bytes is 0. */
SYMMEM_API size_t symmem_comm_preferred_max_bytes(symmem_comm_t comm);

/* A tensor as a binding sees it, for symmem_all_reduce_add_rmsnorm_check. */
typedef struct symmem_tensor_desc {
    symmem_dtype_t dtype;
    const char *dtype_name; /* the binding's name of it in messages ("torch.bfloat16"); NULL: symmem_dtype_name */
    int ndim;
    const int64_t *shape;   /* ndim sizes, row-major, contiguous */
    uint64_t storage;       /* the allocation it lies in: tensors of different storages never overlap */
    uint64_t offset;        /* the byte offset of its first element in that storage */
} symmem_tensor_desc_t;

/* Local and pure (no GPU, no communicator, no logging: a binding's shape inference may call it on tensors
 * that have no data). The rules of symmem_all_reduce_add_rmsnorm for tensors of shape [..., hidden], the
 * one description every binding checks with: residual and out of input's shape, weight [hidden], all of
 * input's dtype, 1 <= hidden <= SYMMEM_RMSNORM_MAX_HIDDEN, eps finite and >= 0 as a float32, and nothing
 * the call writes (residual; out, or input when `writes_input`) overlapping another operand. `out` NULL:
 * the output is a new tensor, or input itself when `writes_input`. SYMMEM_OK with the row count and width
 * in *tokens and *hidden (either may be NULL); otherwise SYMMEM_INVALID_ARGUMENT and the broken rule in
 * words, naming the tensor, in msg (msg_len bytes with the NUL; may be NULL). symmem_last_error() is left
 * as it was. */
SYMMEM_API symmem_status_t symmem_all_reduce_add_rmsnorm_check(const symmem_tensor_desc_t *input,
                                                               const symmem_tensor_desc_t *residual,
                                                               const symmem_tensor_desc_t *weight,
                                                               const symmem_tensor_desc_t *out, int writes_input,
                                                               double eps, size_t *tokens, size_t *hidden,
                                                               char *msg, size_t msg_len);

#ifdef __cplusplus
}
#endif

#include "symmem/topo.h"

#endif /* SYMMEM_SYMMEM_H */
