/* CUDA driver API entry points, resolved at run time through the CUDA runtime's
 * cudaGetDriverEntryPointByVersion, so the library links no libcuda and loads on machines without a driver
 * (the host backend works there). */
#ifndef SYMMEM_ALLOC_CUDRV_H
#define SYMMEM_ALLOC_CUDRV_H

#include <cuda.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, the CUDA version whose ABI we ask for) */
#define SYMMEM_CUDRV_LIST(X)                                                                               \
    X(cuGetErrorString, 6000)                                                                              \
    X(cuGetErrorName, 6000)                                                                                \
    X(cuDeviceGet, 2000)                                                                                   \
    X(cuDeviceGetAttribute, 2000)                                                                          \
    X(cuMemCreate, 10020)                                                                                  \
    X(cuMemRelease, 10020)                                                                                 \
    X(cuMemExportToShareableHandle, 10020)                                                                 \
    X(cuMemImportFromShareableHandle, 10020)                                                               \
    X(cuMemAddressReserve, 10020)                                                                          \
    X(cuMemAddressFree, 10020)                                                                             \
    X(cuMemMap, 10020)                                                                                     \
    X(cuMemUnmap, 10020)                                                                                   \
    X(cuMemSetAccess, 10020)                                                                               \
    X(cuMemGetAllocationGranularity, 10020)                                                                \
    X(cuMemRetainAllocationHandle, 11000)                                                                 \
    X(cuMemGetAddressRange, 3020)
/* Entry points that one feature needs and the rest can do without: NULL where the driver lacks one, and only
 * that feature is lost (graph registration, collectives/graphreg.c). */
#define SYMMEM_CUDRV_OPTIONAL_LIST(X)                                                                      \
    X(cuPointerGetAttributes, 7000)                                                                        \
    X(cuIpcGetMemHandle, 4010)                                                                             \
    X(cuIpcOpenMemHandle, 11000)                                                                           \
    X(cuIpcCloseMemHandle, 4010)

typedef struct symmem_cudrv {
#define SYMMEM_CUDRV_FIELD_(name, ver) __typeof__(name) *name;
    SYMMEM_CUDRV_LIST(SYMMEM_CUDRV_FIELD_)
    SYMMEM_CUDRV_OPTIONAL_LIST(SYMMEM_CUDRV_FIELD_)
#undef SYMMEM_CUDRV_FIELD_
} symmem_cudrv_t;

/* Resolve every entry point once; SYMMEM_NO_DEVICE (no driver) or SYMMEM_CUDA_ERROR with detail. */
symmem_status_t symmem_cudrv_get(const symmem_cudrv_t **out);

/* Record a failed driver call: "<call> failed: CUDA_ERROR_X (text)" plus "; <hint>", the shape of every failed
 * CUDA call (base/status.h: symmem_cuda_error_at; runtime calls: symmem_cudart_error, SYMMEM_CUDART_CHECK),
 * and return the status (SYMMEM_OUT_OF_MEMORY for CUDA_ERROR_OUT_OF_MEMORY, SYMMEM_CUDA_ERROR otherwise). */
symmem_status_t symmem_cudrv_error(CUresult res, const char *call, const char *hint);

/* Check a driver call inside a function that returns symmem_status_t. */
#define SYMMEM_CU_CHECK(drv, call, hint)                                                                   \
    do {                                                                                                   \
        CUresult symmem_cu_res_ = (drv)->call;                                                             \
        if (symmem_cu_res_ != CUDA_SUCCESS) return symmem_cudrv_error(symmem_cu_res_, #call, (hint));      \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
