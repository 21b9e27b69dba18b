/* The collectives' errors: the kernel error record turned into the communicator's error state with a
 * message that names the operation, the rank and what to do (residency.c adds what residency may have to do
 * with a timeout); the launch history those messages name operations from; and the check every entry point
 * starts with. */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/algos.h"
#include "collectives/coll_internal.h"
#include "collectives/residency.h"

/* Which of the last operations launched here carries `tag` (a flag's tag is the hash of its call's
 * arguments, the same on every rank that made that call): "all_gather oneshot_pull 16411 x half". */
static void describe_tag(const struct symmem_coll *co, uint32_t tag, char *out, size_t size)
{
    const uint64_t launches = __atomic_load_n(&co->launches, __ATOMIC_ACQUIRE);
    const uint64_t n = launches < SYMMEM_COLL_HIST ? launches : SYMMEM_COLL_HIST;
    for (uint64_t k = 1; k <= n; k++) {
        const struct symmem_coll_hist *e = &co->hist[(launches - k) % SYMMEM_COLL_HIST];
        if (__atomic_load_n(&e->tag, __ATOMIC_RELAXED) != tag) continue;
        const int32_t kind = __atomic_load_n(&e->kind, __ATOMIC_RELAXED);
        if (kind == SYMMEM_COLL_BARRIER)
            snprintf(out, size, "a barrier");
        else
            snprintf(out, size, "%s %s %" PRIu64 " x %s", symmem_coll_kind_name((symmem_coll_kind_t)kind),
                     symmem_algo_name((symmem_algo_t)__atomic_load_n(&e->algo, __ATOMIC_RELAXED)),
                     __atomic_load_n(&e->count, __ATOMIC_RELAXED),
                     symmem_dtype_name((symmem_dtype_t)__atomic_load_n(&e->dtype, __ATOMIC_RELAXED)));
        return;
    }
    snprintf(out, size, "tag %04x, none of the last %d operations launched here", tag, SYMMEM_COLL_HIST);
}

typedef struct record_view {
    const char *op, *algo;
    int lamport; /* a Lamport-family kernel: rounds and payloads, no flags */
} record_view_t;

static void timeout_text(symmem_comm_t comm, const volatile symmem_coll_error_record_t *rec, const record_view_t *v,
                         char *msg, size_t len)
{
    if (v->lamport) {
        snprintf(msg, len,
                 "rank %d: %s (%s) sequence number %" PRIu64 " timed out after %d ms waiting for the data of rank "
                 "%d (Lamport round %" PRIu64 ", block %u): rank %d did not make the same call, exited or is "
                 "stuck. The communicator is unusable; destroy it (SYMMEM_TIMEOUT_MS sets the timeout)",
                 rec->rank, v->op, v->algo, rec->call, comm->timeout_ms, rec->peer, rec->epoch, rec->block, rec->peer);
        return;
    }
    /* Epochs advance only in flag-based operations (Lamport ones use none), two per round; the flag's tag names
     * the operation the peer signalled last on this block. */
    const uint64_t seen = rec->seen;
    char last[128];
    if ((seen >> 16) == 0) {
        snprintf(last, sizeof last, "none yet");
    } else {
        char what[80];
        describe_tag(comm->coll, (uint32_t)(seen & 0xffffu), what, sizeof what);
        snprintf(last, sizeof last, "epoch %" PRIu64 ", %s", seen >> 16, what);
    }
    snprintf(msg, len,
             "rank %d: %s (%s) sequence number %" PRIu64 " timed out after %d ms waiting for rank %d (block %u, "
             "epoch %" PRIu64 "; its last flag there: %s): rank %d did not make the same call, exited or is "
             "stuck. The communicator is unusable; destroy it (SYMMEM_TIMEOUT_MS sets the timeout)",
             rec->rank, v->op, v->algo, rec->call, comm->timeout_ms, rec->peer, rec->block, rec->epoch, last, rec->peer);
}

static void mismatch_text(const volatile symmem_coll_error_record_t *rec, const record_view_t *v, char *msg,
                          size_t len)
{
    const uint64_t seen = rec->seen;
    char last[128];
    if (v->lamport && (seen >> 16) != (rec->epoch & 0x7fffffffu))
        snprintf(last, sizeof last, "; it is at Lamport round %" PRIu64 ", we at %" PRIu64
                 ": the ranks made different numbers of Lamport calls", seen >> 16, rec->epoch & 0x7fffffffu);
    else
        last[0] = '\0';
    snprintf(msg, len,
             "rank %d: %s (%s) sequence number %" PRIu64 ": rank %d reached the same point with different "
             "arguments (tag %04" PRIx64 ", ours %04x%s): every rank must pass the same count, dtype, op and "
             "algorithm, and either all plain device buffers or the same symmetric buffer at the same offset "
             "(the send buffer; also the receive buffer for the two-shot all-reduces; in-place all_gather: the "
             "receive buffer)",
             rec->rank, v->op, v->algo, rec->call, rec->peer, seen & 0xffffu, rec->tag, last);
}

/* The message of a record whose status is set. */
static void record_text(symmem_comm_t comm, const volatile symmem_coll_error_record_t *rec, char *msg, size_t len)
{
    const symmem_coll_kind_t kind = (symmem_coll_kind_t)rec->kind;
    /* the fused all-reduce + RMSNorm kernels (both forms) move their data as the Lamport family does */
    const int lamport = kind == SYMMEM_COLL_ALL_REDUCE_RMSNORM ||
                        (kind != SYMMEM_COLL_BARRIER &&
                         symmem_coll_family_of(kind, (symmem_algo_t)rec->algo) == SYMMEM_COLL_FAM_LAMPORT);
    const record_view_t v = {symmem_coll_kind_name(kind),
                             kind == SYMMEM_COLL_BARRIER ? "barrier" : symmem_algo_name((symmem_algo_t)rec->algo),
                             lamport};
    if (rec->reason == SYMMEM_COLL_ERR_TIMEOUT) timeout_text(comm, rec, &v, msg, len);
    else if (rec->reason == SYMMEM_COLL_ERR_MISMATCH) mismatch_text(rec, &v, msg, len);
    else if (rec->reason == SYMMEM_COLL_ERR_CONCURRENT)
        snprintf(msg, len,
                 "rank %d: %s (%s) sequence number %" PRIu64 " ran at the same time as another operation of the same "
                 "communicator (used from two streams without ordering them?); results are undefined. Use one "
                 "communicator per stream",
                 rec->rank, v.op, v.algo, rec->call);
    else
        snprintf(msg, len, "rank %d: %s (%s) sequence number %" PRIu64 " failed (reason %u)", rec->rank, v.op, v.algo,
                 rec->call, rec->reason);
    symmem_coll_residency_explain(comm, rec, msg, len);
}

symmem_status_t symmem_coll_poll_error(symmem_comm_t comm)
{
    if (!comm || !comm->coll || !comm->coll->err) return SYMMEM_OK;
    struct symmem_coll *co = comm->coll;
    volatile symmem_coll_error_record_t *rec = co->err;
    const uint32_t status = rec->status;
    if (status == 0) return SYMMEM_OK;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    char msg[1024];
    record_text(comm, rec, msg, sizeof msg);
    /* The watcher thread and the caller's thread may both get here: one of them logs. */
    const int first = !__atomic_exchange_n(&co->error_reported, 1, __ATOMIC_ACQ_REL);
    if (first && rec->reason == SYMMEM_COLL_ERR_TIMEOUT && rec->peer >= 0 &&
        rec->peer < comm->nranks && comm->peers[rec->peer].pid == comm->peers[comm->rank].pid)
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                    "rank %d runs in this process (GPU %s): one thread that drives several ranks enqueues rank after "
                    "rank, so every kernel it enqueues after this operation and before the peer's must run "
                    "concurrently with it: use one stream per rank (not the legacy default stream), and load every "
                    "kernel of your own before (CUDA lazy loading may wait for running kernels: launch each once "
                    "first, or set CUDA_MODULE_LOADING=EAGER)",
                    rec->peer, comm->peers[rec->peer].pci_bus_id);
    symmem_comm_set_error(comm, (symmem_status_t)status, msg);
    if (first) SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "%s", msg); /* logged once, here, where it was detected */
    return symmem_forward_error((symmem_status_t)status, msg); /* the message names its rank */
}

symmem_status_t symmem_coll_check_usable(symmem_comm_t comm, const char *call)
{
    if (comm->backend != SYMMEM_BACKEND_CUDA)
        return symmem_set_error(SYMMEM_UNSUPPORTED,
                                "%s: collectives need the CUDA backend (this communicator uses the host backend, "
                                "which has no GPU kernels)",
                                call);
    if (!comm->coll)
        return symmem_set_error(SYMMEM_INVALID_USAGE, "%s: the communicator's collectives are not initialised", call);
    SYMMEM_CHECK(symmem_coll_poll_error(comm));
    char msg[sizeof comm->async_error_msg];
    const symmem_status_t st = symmem_comm_error(comm, msg, sizeof msg);
    if (st != SYMMEM_OK)
        return symmem_record_error(st, "%s: the communicator is in an error state after an earlier failure: %s", call, msg);
    return SYMMEM_OK;
}

void symmem_coll_record_launch(struct symmem_coll *co, uint32_t tag, symmem_coll_kind_t kind, symmem_algo_t algo,
                               symmem_dtype_t dtype, size_t count)
{
    /* Relaxed atomics: the watcher thread may read the history (describe_tag) while this thread writes
     * it; a torn entry only blurs an error message. */
    struct symmem_coll_hist *e = &co->hist[co->launches % SYMMEM_COLL_HIST];
    __atomic_store_n(&e->tag, tag, __ATOMIC_RELAXED);
    __atomic_store_n(&e->kind, (int32_t)kind, __ATOMIC_RELAXED);
    __atomic_store_n(&e->algo, (int32_t)algo, __ATOMIC_RELAXED);
    __atomic_store_n(&e->dtype, (int32_t)dtype, __ATOMIC_RELAXED);
    __atomic_store_n(&e->count, (uint64_t)count, __ATOMIC_RELAXED);
    __atomic_store_n(&co->launches, co->launches + 1, __ATOMIC_RELEASE);
}
