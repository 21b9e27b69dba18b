/* Ordinary buffers of a captured all-reduce, mapped into the peers: graphreg.h says what and why. */
#include "collectives/graphreg.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/alloc.h"
#include "alloc/cudrv.h"
#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"

/* Mappings a communicator keeps at most: each is a peer's whole cudaMalloc segment, open until destroy. A
 * program that captures over ever new memory would otherwise map without bound; past it, calls copy. */
#define SYMMEM_REG_MAX_MAPPINGS 4096

struct symmem_reg_map {
    int peer;
    uint64_t buffer_id, base, size;
    CUdeviceptr mapped;
};

_Static_assert(sizeof(symmem_reg_side_t) == 104, "symmem_reg_side_t crosses processes: keep its layout fixed");
_Static_assert(sizeof(symmem_reg_rec_t) == 240, "symmem_reg_rec_t crosses processes: keep its layout fixed");
_Static_assert(sizeof(CUipcMemHandle) == sizeof(((symmem_reg_side_t *)0)->handle), "CUipcMemHandle size");

/* ---- the agreement (pure) ------------------------------------------------------------------------------------ */
symmem_status_t symmem_coll_reg_agree(const symmem_reg_rec_t *all, int nranks, int rank, int *send, int *recv,
                                      char *err, size_t errlen)
{
    const symmem_reg_rec_t *me = &all[rank];
    *send = *recv = 1;
    for (int q = 0; q < nranks; q++) {
        const symmem_reg_rec_t *r = &all[q];
        if (r->seq != me->seq || r->count != me->count || r->kind != me->kind || r->dtype != me->dtype ||
            r->op != me->op) {
            snprintf(err, errlen,
                     "rank %d's captured call differs from rank %d's (its call number %" PRIu64 " of kind %d with %" PRIu64
                     " elements of dtype %d, op %d; here number %" PRIu64 " of kind %d with %" PRIu64
                     " elements of dtype %d, op %d): every rank must capture the same collectives in the same order",
                     q, rank, r->seq, (int)r->kind, r->count, (int)r->dtype, (int)r->op, me->seq, (int)me->kind,
                     me->count, (int)me->dtype, (int)me->op);
            return SYMMEM_INVALID_USAGE;
        }
        if (r->side[0].kind != SYMMEM_REG_ORDINARY) *send = 0;
        if (r->side[1].kind != SYMMEM_REG_ORDINARY) *recv = 0;
    }
    return SYMMEM_OK;
}

/* The driver's entry points, or NULL where it lacks one of those graph registration needs (it then maps
 * nothing; alloc/cudrv.h, SYMMEM_CUDRV_OPTIONAL_LIST). */
static const symmem_cudrv_t *reg_drv(void)
{
    const symmem_cudrv_t *drv = NULL;
    if (symmem_cudrv_get(&drv) != SYMMEM_OK) return NULL;
    return drv->cuPointerGetAttributes && drv->cuIpcGetMemHandle && drv->cuIpcOpenMemHandle && drv->cuIpcCloseMemHandle
               ? drv
               : NULL;
}

/* ---- this rank's side -------------------------------------------------------------------------------------- */
/* Where `bytes` at ptr lie: a symmetric buffer of the communicator, or cudaMalloc memory of this rank's GPU
 * that has an IPC handle (the whole allocation is exported; peers add the offset); drv NULL: the driver
 * lacks the calls, and the side is not mapped (the exchange still runs: it is collective). */
static void describe_side(symmem_comm_t comm, const symmem_cudrv_t *drv, const void *ptr, size_t bytes,
                          symmem_reg_side_t *s)
{
    memset(s, 0, sizeof *s);
    if (symmem_alloc_find(comm, ptr)) {
        s->kind = SYMMEM_REG_SYMMETRIC;
        return;
    }
    if (!drv) return; /* a driver without the entry points: the side is copied, on every rank */
    CUdeviceptr start = 0;
    size_t range = 0;
    unsigned long long id = 0;
    int ipc_ok = 0, ordinal = -1;
    CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                   CU_POINTER_ATTRIBUTE_BUFFER_ID, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    void *vals[] = {&start, &range, &id, &ipc_ok, &ordinal};
    /* unknown pointers get default values, not an error */
    if (drv->cuPointerGetAttributes(5, attrs, vals, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) return;
    const uint64_t p = (uint64_t)(uintptr_t)ptr;
    if (!ipc_ok || ordinal != comm->device || start == 0 || p < start || p - start > range ||
        bytes > range - (p - start))
        return;
    CUipcMemHandle h;
    if (drv->cuIpcGetMemHandle(&h, start) != CUDA_SUCCESS) return;
    s->kind = SYMMEM_REG_ORDINARY;
    s->base = start;
    s->size = range;
    s->offset = p - start;
    s->buffer_id = id;
    memcpy(s->handle, &h, sizeof h);
}

/* ---- the peers' mappings ------------------------------------------------------------------------------------- */
static struct symmem_reg_map *map_find(struct symmem_coll *co, int peer, const symmem_reg_side_t *s)
{
    for (size_t i = 0; i < co->reg_nmaps; i++) {
        struct symmem_reg_map *m = &co->reg_maps[i];
        if (m->peer == peer && m->buffer_id == s->buffer_id && m->base == s->base && m->size == s->size) return m;
    }
    return NULL;
}

/* Where peer's side lies here, mapping its allocation if this is the first time: NULL when it cannot be. The
 * peer is another process (agree.c turns graph registration off wherever two ranks share one). */
static char *peer_side(symmem_comm_t comm, const symmem_cudrv_t *drv, int peer, const symmem_reg_side_t *s)
{
    struct symmem_coll *co = comm->coll;
    struct symmem_reg_map *m = map_find(co, peer, s);
    if (m) return (char *)(uintptr_t)(m->mapped + s->offset);
    if (co->reg_nmaps == SYMMEM_REG_MAX_MAPPINGS) {
        if (!co->reg_full_warned)
            SYMMEM_WARN(SYMMEM_SUBSYS_COLL,
                        "%d peer allocations are mapped for captured calls on ordinary memory, the most a "
                        "communicator keeps; further captured calls copy through the workspace (capture over "
                        "memory that stays allocated, or destroy the communicator to release them)",
                        SYMMEM_REG_MAX_MAPPINGS);
        co->reg_full_warned = 1;
        return NULL;
    }
    if (co->reg_nmaps == co->reg_cap) {
        const size_t cap = co->reg_cap ? co->reg_cap * 2 : 64;
        struct symmem_reg_map *grown = realloc(co->reg_maps, cap * sizeof *grown);
        if (!grown) return NULL;
        co->reg_maps = grown;
        co->reg_cap = cap;
    }
    CUipcMemHandle h;
    memcpy(&h, s->handle, sizeof h);
    CUdeviceptr mapped = 0;
    const CUresult r = drv->cuIpcOpenMemHandle(&mapped, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        drv->cuGetErrorName(r, &name);
        SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL, "rank %d's allocation (%" PRIu64 " bytes) could not be mapped here (%s): "
                                         "this call copies through the workspace",
                     peer, s->size, name);
        return NULL;
    }
    co->reg_maps[co->reg_nmaps++] = (struct symmem_reg_map){peer, s->buffer_id, s->base, s->size, mapped};
    return (char *)(uintptr_t)(mapped + s->offset);
}

/* ---- the exchange ------------------------------------------------------------------------------------------ */
static symmem_status_t exchange(symmem_comm_t comm, const symmem_cudrv_t *drv, const symmem_coll_call_t *c,
                                symmem_coll_reg_t *reg)
{
    struct symmem_coll *co = comm->coll;
    const size_t bytes = c->count * symmem_dtype_size(c->dtype);
    symmem_reg_rec_t me, *all = calloc((size_t)comm->nranks, sizeof *all);
    if (!all) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "%s: out of host memory", c->name);
    memset(&me, 0, sizeof me);
    me.seq = co->reg_seq++;
    me.count = c->count;
    me.kind = (int32_t)c->kind;
    me.dtype = (int32_t)c->dtype;
    me.op = (int32_t)c->op;
    describe_side(comm, drv, c->send, bytes, &me.side[0]);
    describe_side(comm, drv, c->recv, bytes, &me.side[1]);
    symmem_status_t st = symmem_comm_allgather(comm, &me, all, sizeof me);
    char err[512];
    int send = 0, recv = 0;
    if (st == SYMMEM_OK && (st = symmem_coll_reg_agree(all, comm->nranks, comm->rank, &send, &recv, err,
                                                       sizeof err)) != SYMMEM_OK)
        st = symmem_set_error(st, "%s: %s", c->name, err);
    /* every rank maps its peers' sides, then all learn whether every rank could */
    int32_t ok[2] = {send, recv}, all_ok[SYMMEM_MAX_RANKS][2];
    for (int q = 0; st == SYMMEM_OK && q < comm->nranks; q++) {
        for (int side = 0; side < 2; side++) {
            if (!ok[side]) continue;
            char *at = q == comm->rank ? (char *)(side ? c->recv : (void *)(uintptr_t)c->send)
                                       : peer_side(comm, drv, q, &all[q].side[side]);
            if (!at) ok[side] = 0;
            else if (side) reg->peer_recv[q] = at;
            else reg->peer_send[q] = at;
        }
    }
    if (st == SYMMEM_OK && (send || recv)) st = symmem_comm_allgather(comm, ok, all_ok, sizeof ok);
    if (st == SYMMEM_OK && (send || recv)) {
        for (int q = 0; q < comm->nranks; q++) send &= all_ok[q][0] != 0, recv &= all_ok[q][1] != 0;
    }
    free(all);
    if (st != SYMMEM_OK) return st;
    reg->send = send;
    reg->recv = recv;
    reg->seq = me.seq;
    SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL, "%s captured on ordinary memory (call %" PRIu64 ", %zu bytes): input %s, output %s",
                 c->name, me.seq, bytes, send ? "mapped" : "copied", recv ? "mapped" : "copied");
    return SYMMEM_OK;
}

symmem_status_t symmem_coll_reg_exchange(symmem_comm_t comm, const symmem_coll_call_t *c, symmem_coll_reg_t *reg)
{
    memset(reg, 0, sizeof *reg);
    const symmem_cudrv_t *drv = reg_drv();
    /* The driver calls below are not stream work, but a global-mode capture refuses "unsafe" calls from any
     * thread and is invalidated by them: this thread relaxes its mode for the exchange. The IPC calls act on
     * the current context: the communicator's device's. */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaError_t e = cudaThreadExchangeStreamCaptureMode(&mode);
    if (e != cudaSuccess) return symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "%s: cudaThreadExchangeStreamCaptureMode", c->name);
    int prev = -1;
    e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != comm->device) e = cudaSetDevice(comm->device);
    symmem_status_t st = e == cudaSuccess ? exchange(comm, drv, c, reg)
                                          : symmem_cudart_error(SYMMEM_CUDA_ERROR, e, NULL, "%s: cudaSetDevice(%d)",
                                                                c->name, comm->device);
    if (prev >= 0 && prev != comm->device) (void)cudaSetDevice(prev);
    (void)cudaThreadExchangeStreamCaptureMode(&mode);
    return st;
}

int symmem_coll_reg_wanted(symmem_comm_t comm, const symmem_coll_call_t *c)
{
    const struct symmem_coll *co = comm->coll;
    if (!co->graph_reg || c->kind != SYMMEM_COLL_ALL_REDUCE || symmem_algo_lossy((int)c->algo) || c->count == 0)
        return 0;
    if (symmem_alloc_find(comm, c->send) && symmem_alloc_find(comm, c->recv)) return 0;
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)c->stream, &cs) != cudaSuccess) {
        (void)cudaGetLastError(); /* the launch reports a bad stream */
        return 0;
    }
    return cs == cudaStreamCaptureStatusActive;
}

size_t symmem_coll_reg_mappings(const struct symmem_coll *co) { return co ? co->reg_nmaps : 0; }

void symmem_coll_reg_fini(symmem_comm_t comm)
{
    struct symmem_coll *co = comm->coll;
    if (!co || !co->reg_maps) return;
    const symmem_cudrv_t *drv = reg_drv();
    int prev = -1;
    if (co->reg_nmaps && drv && cudaGetDevice(&prev) == cudaSuccess) {
        if (prev != comm->device) (void)cudaSetDevice(comm->device);
        for (size_t i = 0; i < co->reg_nmaps; i++) {
            const CUresult r = drv->cuIpcCloseMemHandle(co->reg_maps[i].mapped);
            if (r != CUDA_SUCCESS)
                SYMMEM_DEBUG(SYMMEM_SUBSYS_COLL, "closing rank %d's mapped allocation failed (%d)", co->reg_maps[i].peer,
                             (int)r);
        }
        if (prev != comm->device) (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
    free(co->reg_maps);
    co->reg_maps = NULL;
    co->reg_nmaps = co->reg_cap = 0;
}
