/* Link class between two GPUs of this host: NVLink when NVML reports an NVLink P2P path, else PCIe.
 * NVML is loaded at run time (libnvidia-ml.so.1 ships with the driver); without it every P2P pair is
 * classed PCIe, the conservative choice for algorithm selection. */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "core/comm.h"
#include "core/log.h"

/* The few NVML declarations needed (nvml.h is not part of the CUDA toolkit install here). */
typedef void *nvml_device_t;
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_by_bus_fn)(const char *, nvml_device_t *);
typedef int (*nvml_p2p_fn)(nvml_device_t, nvml_device_t, int, int *);
enum { NVML_OK = 0, NVML_P2P_CAPS_INDEX_NVLINK = 2, NVML_P2P_STATUS_OK = 0 };

static struct {
    nvml_by_bus_fn by_bus;
    nvml_p2p_fn p2p;
    int ok;
} nvml;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;

static void nvml_load(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "NVML not available (%s): P2P pairs are classed PCIe", dlerror());
        return;
    }
    nvml_init_fn init = (nvml_init_fn)dlsym(h, "nvmlInit_v2");
    nvml.by_bus = (nvml_by_bus_fn)dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml.p2p = (nvml_p2p_fn)dlsym(h, "nvmlDeviceGetP2PStatus");
    nvml.ok = init && nvml.by_bus && nvml.p2p && init() == NVML_OK;
    if (!nvml.ok) SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "NVML present but unusable: P2P pairs are classed PCIe");
    /* Deliberately never dlclose/nvmlShutdown: other threads may still query, and NVML is cheap to keep. */
}

symmem_link_t symmem_link_between(const char *bus_a, const char *bus_b)
{
    if (strcmp(bus_a, bus_b) == 0) return SYMMEM_LINK_SELF;
    pthread_once(&nvml_once, nvml_load);
    if (!nvml.ok) return SYMMEM_LINK_PCIE;
    nvml_device_t a, b;
    int status = -1;
    if (nvml.by_bus(bus_a, &a) != NVML_OK || nvml.by_bus(bus_b, &b) != NVML_OK) return SYMMEM_LINK_PCIE;
    if (nvml.p2p(a, b, NVML_P2P_CAPS_INDEX_NVLINK, &status) != NVML_OK) return SYMMEM_LINK_PCIE;
    return status == NVML_P2P_STATUS_OK ? SYMMEM_LINK_NVLINK : SYMMEM_LINK_PCIE;
}
