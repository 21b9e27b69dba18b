/* Status helpers shared by every layer: the per-thread last-error message, failed CUDA calls in one shape, and
 * the few check macros. */
#ifndef SYMMEM_BASE_STATUS_H
#define SYMMEM_BASE_STATUS_H

#include "base/log.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Record the detail of a failure on this thread and return `status`. The first function that detects an
 * error calls this; callers only propagate. The message should say which rank, which call, which
 * underlying error, and what to do. Also logs the message at WARN, once, here: under the subsystem of the
 * layer that detected it (SYMMEM_SUBSYS_HERE, set per source file by CMake's symmem_subsystem) and at the
 * caller's file:line. An error handed on to another thread or caller is never logged again: see
 * symmem_record_error and symmem_forward_error. */
#ifndef SYMMEM_SUBSYS_HERE
#define SYMMEM_SUBSYS_HERE SYMMEM_SUBSYS_CORE
#endif
#define symmem_set_error(status, ...) symmem_set_error_at(SYMMEM_SUBSYS_HERE, __FILE__, __LINE__, (status), __VA_ARGS__)
symmem_status_t symmem_set_error_at(unsigned subsys, const char *file, int line, symmem_status_t status,
                                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* A failed CUDA call, runtime or driver, recorded as symmem_set_error does (logged under the caller's
 * subsystem at its file:line) in one shape:
 *   "<what> failed: <error name> (<error text>)", then "; <hint>" when hint is neither NULL nor empty,
 * where `what` is printf-style ("cudaMalloc of the collective state", "%s: kernel launch"); returns status.
 * symmem_cudart_error takes a cudaError_t (the file includes <cuda_runtime_api.h>); alloc/cudrv.h's
 * SYMMEM_CU_CHECK reports a failed driver call through the same function. */
#define symmem_cudart_error(status, err, hint, ...)                                                        \
    symmem_cuda_error_at(SYMMEM_SUBSYS_HERE, __FILE__, __LINE__, (status), cudaGetErrorName(err),          \
                         cudaGetErrorString(err), (hint), __VA_ARGS__)
symmem_status_t symmem_cuda_error_at(unsigned subsys, const char *file, int line, symmem_status_t status,
                                     const char *name, const char *text, const char *hint, const char *what, ...)
    __attribute__((format(printf, 8, 9)));
/* Record the detail like symmem_set_error, without logging: for an error already logged where it was
 * detected and now handed to another thread (a group call's result, a rank thread of
 * symmem_comm_init_all, a communicator's sticky error), or one that one detection logged for the whole
 * process (a missing CUDA driver). */
symmem_status_t symmem_record_error(symmem_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hand on an error that is complete already (its message names the rank, and it was logged where it was
 * detected): the message becomes this thread's last error as it is, nothing is logged or prefixed. */
symmem_status_t symmem_forward_error(symmem_status_t status, const char *msg);
/* Append more context to the current last-error message (e.g. a caller naming the operation). */
void symmem_append_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* strerror(e), except that running out of descriptors says so with the limit: "out of file descriptors
 * (ulimit -n 1024)" for EMFILE, the system-wide table for ENFILE. Per-thread buffer, valid until the
 * thread's next call. */
const char *symmem_errno_string(int e);
/* Clear the last-error message (public entry points do this on entry). */
void symmem_clear_error(void);

/* Propagate a failing status (already recorded by whoever detected it). */
#define SYMMEM_CHECK(expr)                                                                                 \
    do {                                                                                                   \
        symmem_status_t symmem_check_st_ = (expr);                                                         \
        if (symmem_check_st_ != SYMMEM_OK) return symmem_check_st_;                                        \
    } while (0)

/* Same, but jump to a cleanup label with `st` set (UCX-style unwinding in reverse order). */
#define SYMMEM_CHECK_GOTO(expr, st, label)                                                                 \
    do {                                                                                                   \
        (st) = (expr);                                                                                     \
        if ((st) != SYMMEM_OK) goto label;                                                                 \
    } while (0)

/* Check a CUDA runtime call inside a function that returns symmem_status_t: SYMMEM_CUDA_ERROR with
 * "<what> failed: <error name> (<error text>)" when it fails. */
#define SYMMEM_CUDART_CHECK(call, ...)                                                                     \
    do {                                                                                                   \
        const cudaError_t symmem_cudart_err_ = (call);                                                     \
        if (symmem_cudart_err_ != cudaSuccess)                                                             \
            return symmem_cudart_error(SYMMEM_CUDA_ERROR, symmem_cudart_err_, NULL, __VA_ARGS__);          \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
