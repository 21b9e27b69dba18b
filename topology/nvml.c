/* NVLink link counts per GPU pair from NVML, loaded with dlopen at run time: the library must load on
 * machines without a driver, so nothing links against libnvidia-ml. Only the handful of NVML types used are
 * declared here (their layout is part of NVML's stable ABI). Links to an NVSwitch count for every pair of
 * GPUs on switches (as nvidia-smi shows NV18 on an HGX board): min(links of i, links of j). */
#include <dlfcn.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "symmem/topo.h"
#include "topology/topo_internal.h"

typedef int nvml_return_t;
typedef struct nvml_device_st *nvml_device_t;
typedef struct nvml_pci_info {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} nvml_pci_info_t;

#define NVML_SUCCESS 0
#define NVML_FEATURE_ENABLED 1
#define NVML_REMOTE_GPU 0
#define NVML_REMOTE_SWITCH 2
#define NVML_MAX_LINKS 32 /* past NVML_NVLINK_MAX_LINKS (18 today); the sweep stops at the first error */

typedef struct nvml_api {
    void *lib;
    nvml_return_t (*init)(void);
    nvml_return_t (*shutdown)(void);
    nvml_return_t (*by_bus_id)(const char *, nvml_device_t *);
    nvml_return_t (*link_state)(nvml_device_t, unsigned, int *);
    nvml_return_t (*remote_pci)(nvml_device_t, unsigned, nvml_pci_info_t *);
    nvml_return_t (*remote_type)(nvml_device_t, unsigned, int *); /* absent in old drivers */
    nvml_return_t (*driver_version)(char *, unsigned);
} nvml_api_t;

static int nvml_load(nvml_api_t *api)
{
    memset(api, 0, sizeof *api);
    api->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!api->lib) return -1;
    /* dlsym returns void *; converting through memcpy keeps -Wpedantic quiet about function pointers. */
    void *sym;
#define NVML_SYM(field, name)                                                                              \
    sym = dlsym(api->lib, name);                                                                           \
    memcpy(&api->field, &sym, sizeof sym);
    NVML_SYM(init, "nvmlInit_v2")
    NVML_SYM(shutdown, "nvmlShutdown")
    NVML_SYM(by_bus_id, "nvmlDeviceGetHandleByPciBusId_v2")
    NVML_SYM(link_state, "nvmlDeviceGetNvLinkState")
    NVML_SYM(remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2")
    NVML_SYM(remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType")
    NVML_SYM(driver_version, "nvmlSystemGetDriverVersion")
#undef NVML_SYM
    if (!api->init || !api->shutdown || !api->by_bus_id || !api->link_state || !api->remote_pci ||
        api->init() != NVML_SUCCESS) {
        dlclose(api->lib);
        return -1;
    }
    return 0;
}

/* Count GPU i's active links: to each other GPU in links[], to switches in *to_switch. */
static void count_links(const nvml_api_t *api, nvml_device_t dev, const topo_gpu_facts_t *f, int *links,
                        int *to_switch)
{
    for (unsigned l = 0; l < NVML_MAX_LINKS; l++) {
        int active = 0, type = -1;
        nvml_pci_info_t pci;
        if (api->link_state(dev, l, &active) != NVML_SUCCESS) break; /* past the last link, or no NVLink */
        if (active != NVML_FEATURE_ENABLED) continue;
        if (api->remote_type && api->remote_type(dev, l, &type) == NVML_SUCCESS && type == NVML_REMOTE_SWITCH) {
            (*to_switch)++;
            continue;
        }
        memset(&pci, 0, sizeof pci);
        char bdf[TOPO_BDF_LEN];
        if (api->remote_pci(dev, l, &pci) != NVML_SUCCESS || topo_bdf_normalise(pci.bus_id, bdf) != 0) continue;
        for (int j = 0; j < f->ngpus; j++)
            if (strcmp(f->gpus[j].bus_id, bdf) == 0) links[j]++;
    }
}

int topo_nvml_nvlinks(topo_gpu_facts_t *f)
{
    nvml_api_t api;
    if (nvml_load(&api) != 0) return 0;
    int to_switch[TOPO_MAX_GPUS] = {0}, ok = 1;
    int links[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    memset(links, 0, sizeof links);
    for (int i = 0; i < f->ngpus && ok; i++) {
        /* A GPU listed again (ranks that share it: a communicator passes one bus id per rank) has the row of
         * its first listing: each row costs NVML two or three queries per link, and every rank of a
         * communicator asks for all rows at once at init. */
        int first = 0;
        while (first < i && strcmp(f->gpus[first].bus_id, f->gpus[i].bus_id) != 0) first++;
        if (first < i) {
            memcpy(links[i], links[first], sizeof links[i]);
            to_switch[i] = to_switch[first];
            continue;
        }
        nvml_device_t dev;
        ok = api.by_bus_id(f->gpus[i].bus_id, &dev) == NVML_SUCCESS;
        if (ok) count_links(&api, dev, f, links[i], &to_switch[i]);
    }
    if (ok) {
        for (int i = 0; i < f->ngpus; i++)
            for (int j = 0; j < f->ngpus; j++) {
                int sw = to_switch[i] < to_switch[j] ? to_switch[i] : to_switch[j];
                f->nvlinks[i][j] = i == j ? 0 : links[i][j] + sw;
            }
        if (api.driver_version) api.driver_version(f->driver_version, sizeof f->driver_version);
    } else {
        SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "NVML does not know a CUDA device's bus id: NVLink counts unknown");
    }
    api.shutdown();
    dlclose(api.lib);
    return ok;
}

int topo_nvml_links_by_bus(const char *const *bus_ids, int n, int *links)
{
    if (n < 1 || n > TOPO_MAX_GPUS) return 0;
    /* topo_gpu_facts_t is large; only the bus ids and the link matrix are used here. */
    topo_gpu_facts_t *f = calloc(1, sizeof *f);
    if (!f) return 0;
    f->ngpus = n;
    int ok = 1;
    for (int i = 0; i < n && ok; i++) ok = topo_bdf_normalise(bus_ids[i], f->gpus[i].bus_id) == 0;
    ok = ok && topo_nvml_nvlinks(f);
    for (int i = 0; ok && i < n; i++)
        for (int j = 0; j < n; j++) links[i * n + j] = f->nvlinks[i][j];
    free(f);
    return ok;
}
