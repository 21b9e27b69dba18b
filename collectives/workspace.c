/* The collectives' workspace (its layout: kernel_abi.h, plan.c): one symmetric buffer per communicator
 * through the allocator's internal call, the device state and the host-mapped error record, initialised
 * before any peer may push into them. */
#include <cuda_runtime_api.h>
#include <string.h>

#include "alloc/alloc.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"

/* Carve the workspace: flags, Lamport headers, three Lamport buffers, two data halves. */
static symmem_coll_layout_t plan_workspace(void)
{
    size_t ws = symmem_param_size(SYMMEM_PARAM_WORKSPACE_BYTES);
    if (ws < SYMMEM_COLL_MIN_WORKSPACE) {
        SYMMEM_WARN(SYMMEM_SUBSYS_COLL, "SYMMEM_WORKSPACE_BYTES=%zu is below the minimum; using %zu", ws,
                    SYMMEM_COLL_MIN_WORKSPACE);
        ws = SYMMEM_COLL_MIN_WORKSPACE;
    }
    return symmem_coll_layout(ws);
}

static symmem_status_t alloc_state(struct symmem_coll *co)
{
    cudaError_t e;
    if ((e = cudaMalloc((void **)&co->dev_state, sizeof *co->dev_state)) != cudaSuccess) {
        co->dev_state = NULL;
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "collectives: cudaMalloc of the collective state");
    }
    if ((e = cudaHostAlloc((void **)&co->err, sizeof *co->err, cudaHostAllocMapped | cudaHostAllocPortable)) !=
        cudaSuccess) {
        co->err = NULL;
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "collectives: cudaHostAlloc of the error record");
    }
    memset(co->err, 0, sizeof *co->err);
    SYMMEM_CUDART_CHECK(cudaHostGetDevicePointer((void **)&co->err_dev, co->err, 0),
                        "collectives: cudaHostGetDevicePointer of the error record");
    return SYMMEM_OK;
}

/* Zero the flags and the state, fill the Lamport areas with the empty word, and wait. */
static symmem_status_t clear(symmem_comm_t comm, struct symmem_coll *co)
{
    cudaStream_t s = NULL;
    SYMMEM_CUDART_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "collectives: cudaStreamCreateWithFlags");
    cudaError_t e;
    char *mine = co->ws_peers[comm->rank];
    const symmem_coll_layout_t *l = &co->layout;
    if ((e = cudaMemsetAsync(mine, 0, SYMMEM_COLL_FLAG_BYTES, s)) != cudaSuccess ||
        (e = cudaMemsetAsync(co->dev_state, 0, sizeof *co->dev_state, s)) != cudaSuccess ||
        (e = (cudaError_t)symmem_coll_launch_fill_empty(mine + l->lam_hdr_off,
                                                        l->lam_off - l->lam_hdr_off + 3 * l->lam_buf_bytes, s)) !=
            cudaSuccess ||
        /* a first copy through the copy path (the copy-engine two-shot's), within the data halves, which hold nothing:
         * whatever the driver sets up for it happens now, not while a co-located rank's kernel waits */
        (e = cudaMemcpyAsync(mine + l->data_off + l->half_bytes, mine + l->data_off, 16, cudaMemcpyDefault, s)) !=
            cudaSuccess ||
        (e = cudaStreamSynchronize(s)) != cudaSuccess) {
        cudaStreamDestroy(s);
        return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "collectives: initialising the collective workspace");
    }
    cudaStreamDestroy(s);
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_workspace_init(symmem_comm_t comm, struct symmem_coll *co)
{
    co->layout = plan_workspace();
    SYMMEM_CHECK(symmem_alloc_create(comm, co->layout.ws_bytes, &co->ws));
    for (int r = 0; r < comm->nranks; r++) co->ws_peers[r] = co->ws->peers[r];
    SYMMEM_CHECK(alloc_state(co));
    SYMMEM_CHECK(clear(comm, co));
    /* no peer may push before every rank's buffers are ready */
    return symmem_comm_barrier(comm);
}

void symmem_coll_workspace_fini(struct symmem_coll *co)
{
    /* cudaFree waits for the device, so no kernel of ours still uses the workspace when it is unmapped (a
     * kernel waiting on a dead peer ends at its timeout). */
    if (co->dev_state) cudaFree(co->dev_state);
    /* Only if it is still live: a destroy that released every buffer first leaves nothing to free. */
    symmem_alloc_release(co->ws);
    if (co->err) cudaFreeHost(co->err);
    (void)cudaGetLastError();
}
