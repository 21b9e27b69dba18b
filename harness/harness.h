/* The test and benchmark harness (tests/, bench/; never part of the library): the one rank launcher, the
 * host-side channel between rank processes, the GPU count, the collective tests' context and per-case
 * runner, random data, the float64 reference and the comparison, device helpers.
 *
 * Two ways to run N ranks:
 *  - multi-process ("--mp N"): the parent process never touches CUDA; it makes a symmem unique id and a
 *    small shared-memory region (a memfd inherited across exec), then fork+execs itself once per rank with
 *    PREFIX_RANK, PREFIX_NRANKS, PREFIX_SHM_FD and SYMMEM_UNIQUE_ID in the environment. Each child puts
 *    its rank on CUDA device rank % device count. The shared region gives the children a barrier and a
 *    small allgather that do not depend on symmem (so a broken library cannot hide its own errors).
 *  - in-process ("--inproc N"): one process, ranks on devices r % device count via symmem_comm_init_all,
 *    driven by one thread: each stream-ordered collective is enqueued rank after rank (they need no group),
 *    collective host calls such as symmem_alloc go inside symmem_group_start/end.
 * Either way a test sees the same cc_ctx_t: nranks ranks in total, nlocal of them in this process.
 */
#ifndef SYMMEM_HARNESS_HARNESS_H
#define SYMMEM_HARNESS_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "symmem/symmem.h"
#include "values.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CC_EXIT_SKIP 77
#define CC_MAX_RANKS SYMMEM_MAX_RANKS
#define CC_SLOT_BYTES 512
/* CUDA's default CUDA_DEVICE_MAX_CONNECTIONS: hardware work queues per context (see cc_start). */
#define CC_CUDA_DEFAULT_QUEUES 8

/* ---- host channel between rank processes (shared memory) ------------------------------------------- */
typedef struct cc_shm cc_shm_t;
/* Children: map the region named by PREFIX_SHM_FD. NULL if absent. */
cc_shm_t *cc_shm_attach(const char *prefix);
/* Barrier over nprocs processes. 0, or -1 when a process aborted or `timeout_s` passed (it then aborts). */
int cc_shm_barrier(cc_shm_t *shm, int nprocs, int timeout_s);
/* Every process contributes `bytes` (<= CC_SLOT_BYTES); out receives nprocs * bytes. 0 or -1. */
int cc_shm_allgather(cc_shm_t *shm, int proc, int nprocs, const void *in, size_t bytes, void *out);
/* Mark the run as failed so that every process waiting in a barrier gives up at once. */
void cc_shm_abort(cc_shm_t *shm);

/* ---- launching ------------------------------------------------------------------------------------- */
/* The one launcher: fork nprocs children (at most CC_SPAWN_MAX), each running fn(proc, arg) and exiting 0
 * (fn may exit with its own status: CC_EXIT_SKIP for a skip). Waits for all of them; when one fails the
 * others get 20 s to finish before they are killed; timeout_s (0: none) bounds the whole run. Returns 0 (all
 * passed), 77 (all skipped) or 1 (reasons on stderr). The caller must not have initialised CUDA (children
 * use it after the fork). */
#define CC_SPAWN_MAX 64
int cc_spawn(int nprocs, void (*fn)(int proc, void *arg), void *arg, int timeout_s);
/* The same with `label` in its messages and the channel shm aborted when a child fails. */
int cc_spawn_on(const char *label, int nprocs, void (*fn)(int proc, void *arg), void *arg, cc_shm_t *shm,
                int timeout_s);
/* Rank of this process when it is a child launched by cc_launch with this prefix, else -1. */
int cc_child_rank(const char *prefix);
/* Parent side: the launcher with fork+exec /proc/self/exe argv once per rank (never touches CUDA), each
 * child told its rank, the rank count, the channel and a fresh unique id through PREFIX_* and
 * SYMMEM_UNIQUE_ID. extra_env: NULL or a NULL-terminated list of "KEY=VALUE" for every child. */
int cc_launch(const char *prefix, int nranks, char **argv, const char *const *extra_env, int timeout_s);
/* Number of CUDA devices, probed in a forked child so the caller stays CUDA-free (the one GPU counter of the
 * tests and tools). 0 if none. */
int cc_probe_gpu_count(void);

/* ---- the test context ------------------------------------------------------------------------------ */
typedef struct cc_rank {
    int rank;
    int device;
    symmem_comm_t comm;
    /* non-blocking: it does not wait for the legacy stream, where cudaMemcpy from pageable memory may still
     * be landing and cudaMemset runs asynchronously. Upload, poison and zero on this stream (or synchronise
     * the device) before a collective reads or writes the same memory. */
    cudaStream_t stream;
} cc_rank_t;

typedef struct cc_ctx {
    const char *name;
    int nranks;   /* ranks in the communicator */
    int nlocal;   /* ranks driven by this process */
    int nprocs;   /* processes (1 in-process) */
    int proc;     /* this process's index (== rank in multi-process mode) */
    int multiproc;
    int ngpus;
    int timeout_s; /* host-side waits */
    cc_shm_t *shm;
    int fatal; /* set by cc_run_cases when a case left the ranks out of step (skip collective teardown) */
    cc_rank_t r[CC_MAX_RANKS];
} cc_ctx_t;

/* Parses "--mp N" / "--inproc N" (default: --mp default_nranks) and removes them from argv. In the parent
 * of a multi-process run it launches the children and returns 0 with *exit_code set; otherwise it
 * initialises CUDA and the communicator(s) and returns 1 (run the test body), or returns 0 with
 * *exit_code 77 when no GPU is present (the skip ctest shows). opts_in: NULL or options to start from
 * (device is set per rank). extra_env goes to children. In-process with more ranks than CUDA's default 8
 * hardware work queues it sets CUDA_DEVICE_MAX_CONNECTIONS=32 when unset (one queue per rank's stream). */
int cc_start(int *argc, char **argv, const char *name, int default_nranks, int timeout_s,
             const symmem_options_t *opts_in, const char *const *extra_env, cc_ctx_t *ctx, int *exit_code);
/* Destroys the communicators and streams. */
void cc_finish(cc_ctx_t *ctx);
/* True on the process that prints summaries (rank 0's). */
int cc_is_root(const cc_ctx_t *ctx);
/* Barrier over the processes (no-op in-process). 0 or -1. */
int cc_barrier(cc_ctx_t *ctx);
/* Allgather of one uint64 per rank: out[rank] for every rank of the communicator. */
int cc_allgather_u64(cc_ctx_t *ctx, const uint64_t *local_vals, uint64_t *out);
/* Sum over processes of a local count (for pass/fail totals); the result is the same on every process. */
uint64_t cc_sum_u64(cc_ctx_t *ctx, uint64_t v);

/* Collective: a second communicator for every local rank over the same ranks and devices as ctx's (a fresh
 * rendezvous across the processes, or symmem_comm_init_all in one process), with default options, into
 * comms[0..nlocal); the caller destroys them. SYMMEM_OK, or the failing call's status (its detail in
 * symmem_last_error). What a test of init-time behaviour (a table loaded, a rule dropped) makes after the
 * harness's own communicators set the scene. */
symmem_status_t cc_comm_init_again(cc_ctx_t *ctx, symmem_comm_t *comms);
/* Collective symmem_alloc for every local rank (inside a group in-process). */
symmem_status_t cc_alloc(cc_ctx_t *ctx, size_t bytes, symmem_buffer_t *bufs /* [nlocal] */);
void cc_free(cc_ctx_t *ctx, symmem_buffer_t *bufs);
/* Synchronise every local stream; returns the first CUDA error (and prints it) or cudaSuccess. */
cudaError_t cc_sync(cc_ctx_t *ctx);
/* Host-side writes into memory a collective of R will read or write: on R's stream, waited for before they
 * return. The legacy default stream's cudaMemset and cudaMemcpy are not ordered with the ranks'
 * non-blocking streams, so a large memset there can still be running when the first collective starts and
 * overwrite its freshly uploaded input, and the collective then reports a wrong result that is not the
 * library's. Tests and benchmarks write device memory only through these (tests/arch/check_streams.sh). */
cudaError_t cc_rank_memset(const cc_rank_t *R, void *dst, int byte, size_t bytes);
cudaError_t cc_rank_upload(const cc_rank_t *R, void *dst, const void *src, size_t bytes);
/* First non-OK symmem_comm_get_async_error of the local ranks (message printed), or SYMMEM_OK. */
symmem_status_t cc_async_error(cc_ctx_t *ctx);
/* For tests that drive a communicator into its error state (one rank per process): wait up to 2 s for
 * R's communicator to report an asynchronous error, copy symmem_last_error() into msg, return the status. */
symmem_status_t cc_wait_async_error(cc_rank_t *R, char *msg, size_t len);
/* The same tests' teardown of R: symmem_free(buf), symmem_comm_destroy, the stream. Returns 0, or 1 after
 * logging which step failed. */
int cc_teardown_rank(cc_ctx_t *ctx, cc_rank_t *R, symmem_buffer_t buf);

/* For the two-process error tests (coll_timeout, coll_mismatch): checks that ctx is one rank per process
 * on 2 processes and reads the optional algorithm name in argv[1] (default dflt). 1, or 0 after logging. */
int cc_pair_algo(const cc_ctx_t *ctx, int argc, char **argv, symmem_algo_t dflt, symmem_algo_t *algo);
/* Whether `algo` (below SYMMEM_ALGO_COUNT) is an algorithm of this libsymmem: values of the list may be
 * reserved for algorithms not built into it, and the tests that run "every algorithm" skip those. */
int cc_algo_known(int algo);

/* The per-case runner of the collective tests, the ranks' counterpart of test_run_all (tests/test_util.h),
 * whose lines it prints: every case in order on every rank ("ok   name" / "FAIL name" from the root, then
 * "N passed, M failed, 0 skipped"); a case passes when fn returns 0 on every rank. A case that leaves the
 * ranks out of step sets *fatal: the run stops there, the channel is aborted and ctx->fatal set. (Cases cannot be forked
 * as test_run_all does: the ranks' CUDA contexts and communicators exist before the first case.) `param`
 * tells cases of one function apart (an algorithm, a size); `arg` is the test's shared state. Returns 0 or
 * 1 for main. */
typedef struct cc_case {
    const char *name;
    int (*fn)(cc_ctx_t *ctx, void *arg, int param, int *fatal); /* failures seen, 0: passed */
    int param;
} cc_case_t;
int cc_run_cases(cc_ctx_t *ctx, const cc_case_t *cases, int ncases, void *arg);

/* printf to stdout prefixed with the test name and the process's rank(s), flushed. */
void cc_log(const cc_ctx_t *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The checks inside a case (CC_CHECK, CC_CHECK_OK, CC_CHECK_CUDA, CC_EXPECT: "FAIL file:line: ..." through
 * cc_log) are the test family's, in tests/test_util.h. */

/* ---- data, reference and comparison ---------------------------------------------------------------- */
/* Convert between float and the 16-bit formats on the host (round to nearest even, NaN/Inf kept). */
uint16_t cc_float_to_bf16(float f);
float cc_bf16_to_float(uint16_t h);
uint16_t cc_float_to_half(float f);
float cc_half_to_float(uint16_t h);
/* Element i of a typed array as double, and a store of a double (rounded to the dtype). */
double cc_load(const void *p, symmem_dtype_t dt, size_t i);
void cc_store(void *p, symmem_dtype_t dt, size_t i, double v);
/* dst[k] = cc_value(seed, rank, index0 + k, dt) for k < count. */
void cc_fill(void *dst, symmem_dtype_t dt, size_t count, uint64_t seed, int rank, uint64_t index0);

/* Does `got` (already in the output dtype) correctly reduce the inputs in[0..n)? The rules:
 *  sum: float64 reference; NaN if the reference is NaN (an input NaN, or +Inf with -Inf); the exact
 *       infinity if it is infinite or overflows the dtype; else |got - ref| <= rel*|ref| + 2n*2^-24*sum|in|
 *       (+ 2^-24 for fp16), rel = 2^-23 fp32, 2^-10 fp16, 2^-8 bf16: output rounding plus any fp32
 *       summation order; 16-bit types also u * sum|in| (u = 2^-8 bf16, 2^-11 fp16, the unit
 *       roundoff): partial sums rounded to the dtype on the way (the island schedule's partials).
 *  max/min: exact; when an input is NaN either NaN (IEEE 754-2019 maximum/minimum) or the max/min of the
 *       other inputs (754-2008 maxNum/minNum, i.e. CUDA fmaxf) is accepted; bitwise equality across ranks
 *       is checked separately, so all ranks must still agree. */
int cc_elem_ok(double got, const double *in, int n, symmem_redop_t op, symmem_dtype_t dt, double *ref_out);

typedef struct cc_bad {
    size_t wrong;     /* elements that failed */
    size_t first;     /* index of the first failure */
    double got, want; /* at that index */
} cc_bad_t;
/* out holds `count` reduced elements whose logical input index starts at index0 (0 for all-reduce,
 * rank*count for reduce-scatter); inputs are cc_value(seed, r, index0 + k) for r < nranks. */
size_t cc_check_reduce(const void *out, symmem_dtype_t dt, symmem_redop_t op, size_t count, uint64_t index0,
                       int nranks, uint64_t seed, cc_bad_t *bad);
/* out holds nranks*count elements: rank r's cc_value(seed, r, k) at r*count + k. Exact. */
size_t cc_check_gather(const void *out, symmem_dtype_t dt, size_t count, int nranks, uint64_t seed,
                       cc_bad_t *bad);
/* 64-bit hash of bytes (for bitwise equality across ranks). */
uint64_t cc_hash(const void *p, size_t bytes);

/* ---- device helpers (kernels.cu) ---------------------------------------------------------------------- */
/* dst[k] = cc_value(seed', rank, index0 + k, dt), seed' = iter ? cc_iter_seed(seed, *iter) : seed. */
cudaError_t cc_dev_fill(void *dst, symmem_dtype_t dt, size_t count, uint64_t seed, const uint32_t *iter,
                        int rank, uint64_t index0, cudaStream_t stream);
/* hist[*iter * bytes ...] = src[0..bytes) (history of outputs over graph replays). */
cudaError_t cc_dev_record(void *hist, const void *src, size_t bytes, const uint32_t *iter, cudaStream_t stream);
/* (*iter)++ (one thread). */
cudaError_t cc_dev_incr(uint32_t *iter, cudaStream_t stream);
/* Busy-wait ns nanoseconds on the GPU; with iter != NULL only when *iter % modulo == rank. */
cudaError_t cc_dev_spin(uint64_t ns, const uint32_t *iter, int modulo, int rank, cudaStream_t stream);
/* `blocks` blocks of `threads` threads, each holding `smem` bytes of shared memory for ns nanoseconds and
 * waiting on nothing: SMs taken from the collectives, as a GEMM or another stream's work takes them. */
cudaError_t cc_dev_occupy(uint64_t ns, int blocks, int threads, size_t smem, cudaStream_t stream);
/* dst[p] = ((const uint64_t *)peer_ptrs[p])[slot] for p < nranks (read every peer's word through the
 * symmetric mapping); src_ptrs is a host array of peer pointers copied into the kernel's arguments. */
cudaError_t cc_dev_read_peers(uint64_t *dst, void *const *peer_ptrs, int nranks, size_t slot,
                              cudaStream_t stream);
/* ((uint64_t *)p)[slot] = v. */
cudaError_t cc_dev_write_u64(void *p, size_t slot, uint64_t v, cudaStream_t stream);
/* Load the helper kernels above into the current device's context (CUDA lazy loading can make a first
 * launch wait for running kernels, i.e. for a collective that waits on a rank not enqueued yet). */
cudaError_t cc_dev_preload(void);

#ifdef __cplusplus
}
#endif
#endif
