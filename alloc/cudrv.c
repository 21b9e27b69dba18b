#include "alloc/cudrv.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>

#include "base/log.h"
#include "base/status.h"

static symmem_cudrv_t drv;
static symmem_status_t drv_status = SYMMEM_INTERNAL_ERROR;
static char drv_error[256];
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    int version = 0;
    cudaError_t e = cudaDriverGetVersion(&version);
    if (e != cudaSuccess || version == 0) {
        snprintf(drv_error, sizeof drv_error,
                 "no CUDA driver found (cudaDriverGetVersion: %s): install the NVIDIA driver, or use the host "
                 "backend (SYMMEM_BACKEND=host)",
                 e == cudaSuccess ? "version 0" : cudaGetErrorString(e));
        drv_status = SYMMEM_NO_DEVICE;
        return;
    }
#define SYMMEM_CUDRV_LOAD_(name, ver)                                                                      \
    {                                                                                                      \
        enum cudaDriverEntryPointQueryResult q;                                                            \
        void *fn = NULL;                                                                                   \
        e = cudaGetDriverEntryPointByVersion(#name, &fn, (ver) < 12000 ? 12000 : (ver), cudaEnableDefault, &q); \
        if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {                                 \
            snprintf(drv_error, sizeof drv_error,                                                          \
                     "CUDA driver %d.%d lacks %s (need a driver for CUDA 12.2 or newer)", version / 1000,   \
                     (version % 1000) / 10, #name);                                                        \
            drv_status = SYMMEM_UNSUPPORTED;                                                               \
            return;                                                                                        \
        }                                                                                                  \
        drv.name = (__typeof__(drv.name))fn;                                                               \
    }
    SYMMEM_CUDRV_LIST(SYMMEM_CUDRV_LOAD_)
#undef SYMMEM_CUDRV_LOAD_
#define SYMMEM_CUDRV_LOAD_OPTIONAL_(name, ver)                                                             \
    {                                                                                                      \
        enum cudaDriverEntryPointQueryResult q;                                                            \
        void *fn = NULL;                                                                                   \
        e = cudaGetDriverEntryPointByVersion(#name, &fn, (ver) < 12000 ? 12000 : (ver), cudaEnableDefault, &q); \
        drv.name = e == cudaSuccess && q == cudaDriverEntryPointSuccess ? (__typeof__(drv.name))fn : NULL; \
        (void)cudaGetLastError();                                                                          \
    }
    SYMMEM_CUDRV_OPTIONAL_LIST(SYMMEM_CUDRV_LOAD_OPTIONAL_)
#undef SYMMEM_CUDRV_LOAD_OPTIONAL_
    drv_status = SYMMEM_OK;
}

/* The driver is a fact of the process, found once: its absence is logged once here, however many ranks
 * (threads of symmem_comm_init_all) or calls then ask; each caller still gets the status and message. */
static void load_once(void)
{
    load();
    if (drv_status != SYMMEM_OK) {
        int prev = symmem_log_set_rank(-1);
        SYMMEM_WARN(SYMMEM_SUBSYS_CORE, "%s (%s)", drv_error, symmem_status_name(drv_status));
        symmem_log_set_rank(prev);
    }
}

symmem_status_t symmem_cudrv_get(const symmem_cudrv_t **out)
{
    pthread_once(&drv_once, load_once);
    if (drv_status != SYMMEM_OK) return symmem_record_error(drv_status, "%s", drv_error);
    *out = &drv;
    return SYMMEM_OK;
}

symmem_status_t symmem_cudrv_error(CUresult res, const char *call, const char *hint)
{
    const char *name = "?", *text = "?";
    if (drv.cuGetErrorName) drv.cuGetErrorName(res, &name);
    if (drv.cuGetErrorString) drv.cuGetErrorString(res, &text);
    symmem_status_t st = res == CUDA_ERROR_OUT_OF_MEMORY ? SYMMEM_OUT_OF_MEMORY : SYMMEM_CUDA_ERROR;
    return symmem_cuda_error_at(SYMMEM_SUBSYS_HERE, __FILE__, __LINE__, st, name, text, hint, "%s", call);
}
