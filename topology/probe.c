/* The init probe (see probe.h): the ring figures of symmem-topo (measure.cu, measure_ring), measured by a
 * communicator's ranks with the same transfer (transfer.h). */
#include "topology/probe.h"

#include <cuda_runtime_api.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "topology/transfer.h"

#define PROBE_RUNS 3

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Wait for `ev` without a busy host spin (co-located ranks' threads share the CPU). A P2P access that never
 * completes (IOMMU/ACS redirection on some PCIe boxes) would keep the copy running: say so once. */
static cudaError_t wait_event(symmem_comm_t comm, cudaEvent_t ev, int peer)
{
    const double t0 = now_ms();
    int warned = 0;
    for (;;) {
        const cudaError_t e = cudaEventQuery(ev);
        if (e != cudaErrorNotReady) return e;
        if (!warned && comm->timeout_ms > 0 && now_ms() - t0 > (double)comm->timeout_ms) {
            warned = 1;
            SYMMEM_WARN(SYMMEM_SUBSYS_TOPO,
                        "the peer-bandwidth probe (plain loads from / stores to rank %d's memory) has not finished "
                        "after %d ms: peer-to-peer access to that GPU looks broken (IOMMU/ACS?); "
                        "SYMMEM_COLL_PROBE=0 skips the probe, but the collectives need the same access",
                        peer, comm->timeout_ms);
        }
        usleep(20);
    }
}

/* One phase on this rank (0: SM loads from the successor, 1: SM stores into it, 2: copy-engine copies into
 * it, 3: SM loads from it and stores into it at once); *gbs the median. */
static cudaError_t phase(symmem_comm_t comm, const topo_probe_buffers_t *b, int w, cudaStream_t s, cudaEvent_t *ev,
                         double *gbs)
{
    void *dst = w ? b->peer_dst : b->own_dst;
    const void *src = w == 0 || w == 3 ? b->peer_src : b->own_src;
    cudaError_t e = w == 2 ? topo_ce_runs(dst, src, b->bytes, s, 1, PROBE_RUNS, ev)
                           : topo_copy_runs(dst, src, b->bytes, b->grid, b->threads, s, 1, PROBE_RUNS, ev);
    if (e == cudaSuccess) e = wait_event(comm, ev[PROBE_RUNS], (comm->rank + 1) % comm->nranks);
    if (e == cudaSuccess) e = topo_copy_gbs(b->bytes, ev, PROBE_RUNS, gbs);
    return e;
}

/* After the copy-engine phase failed on this rank: whether the stream and context still work (the error
 * was the copy's own, e.g. a driver that refuses cudaMemcpyAsync between these mappings), so the probe can
 * go on without that figure. */
static int copy_phase_recoverable(cudaStream_t s)
{
    (void)cudaGetLastError();
    return cudaStreamSynchronize(s) == cudaSuccess && cudaGetLastError() == cudaSuccess;
}

/* The minima over ranks, or the error naming the rank whose probe failed (its log names the CUDA error). */
#define PHASES 4
static symmem_status_t minima(symmem_comm_t comm, double all[][PHASES], double *fig)
{
    for (int r = 0; r < comm->nranks; r++)
        for (int w = 0; w < PHASES; w++)
            if (all[r][w] < 0)
                return symmem_set_error(SYMMEM_CUDA_ERROR,
                                        "the peer-bandwidth probe at init failed on rank %d (its log names the CUDA "
                                        "error); SYMMEM_COLL_PROBE=0 skips the probe",
                                        r);
    for (int w = 0; w < PHASES; w++) {
        fig[w] = all[0][w];
        for (int r = 1; r < comm->nranks; r++)
            if (all[r][w] < fig[w]) fig[w] = all[r][w];
    }
    return SYMMEM_OK;
}

symmem_status_t topo_probe_ring(symmem_comm_t comm, const topo_probe_buffers_t *b, topo_probe_figures_t *out)
{
    cudaStream_t s = NULL;
    cudaEvent_t ev[PROBE_RUNS + 1] = {0};
    int nev = 0;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) s = NULL;
    for (; e == cudaSuccess && nev <= PROBE_RUNS; nev++)
        if ((e = cudaEventCreate(&ev[nev])) != cudaSuccess) break;
    const char *failed = e != cudaSuccess ? "while setting up (stream, events) to measure" : NULL;
    double gbs[PHASES] = {0.0, 0.0, 0.0, 0.0}; /* this rank's read, write, copy-engine write, read+write */
    symmem_status_t st = SYMMEM_OK;
    static const char *const doing[PHASES] = {"while loading from", "while storing to", "while copying (copy engine) to",
                                              "while loading from and storing to"};
    for (int w = 0; w < PHASES && st == SYMMEM_OK; w++) {
        st = symmem_comm_barrier(comm); /* all ranks start each phase together */
        if (st != SYMMEM_OK || failed || (e = phase(comm, b, w, s, ev, &gbs[w])) == cudaSuccess) continue;
        /* The copy-engine figure only decides the copy-engine two-shot: without it the communicator works,
         * that algorithm stays off (a figure of 0, the minimum on every rank). */
        if (w == 2 && copy_phase_recoverable(s)) {
            SYMMEM_WARN(SYMMEM_SUBSYS_TOPO,
                        "the peer-bandwidth probe's copy-engine copies into rank %d's memory failed: %s (%s); the "
                        "copy-engine two-shot stays off",
                        (comm->rank + 1) % comm->nranks, cudaGetErrorName(e), cudaGetErrorString(e));
            gbs[2] = 0.0;
            e = cudaSuccess;
            continue;
        }
        failed = doing[w];
    }
    if (failed) /* tells every rank: this rank's probe failed */
        for (int w = 0; w < PHASES; w++) gbs[w] = -1.0;
    double all[SYMMEM_MAX_RANKS][PHASES];
    if (st == SYMMEM_OK) st = symmem_comm_allgather(comm, gbs, all, sizeof gbs);
    for (int k = 0; k < nev; k++) cudaEventDestroy(ev[k]);
    if (s) cudaStreamDestroy(s);
    if (st != SYMMEM_OK) return st;
    if (failed) {
        (void)cudaGetLastError();
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, "SYMMEM_COLL_PROBE=0 skips the probe",
                                   "the peer-bandwidth probe at init, %s the memory of rank %d,", failed,
                                   (comm->rank + 1) % comm->nranks);
    }
    /* Every rank fails init the same way when any rank's probe failed (not just the one that saw it). */
    double fig[PHASES];
    SYMMEM_CHECK(minima(comm, all, fig));
    out->read_gbs = fig[0];
    out->write_gbs = fig[1];
    out->ce_gbs = fig[2];
    out->rw_gbs = fig[3];
    return SYMMEM_OK;
}
