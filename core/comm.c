/* Communicators: option resolution, the three ways in (unique id, user bootstrap, all ranks in one
 * process), the facts every rank shares at init (GPU, PCI id, NUMA node, P2P reachability) and teardown. */
#include "core/comm.h"

#include <cuda_runtime_api.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "alloc/cudrv.h"
#include "collectives/coll.h"
#include "core/bootstrap.h"
#include "core/log.h"
#include "core/param.h"
#include "core/status.h"
#include "topology/topo_internal.h"

void symmem_options_init(symmem_options_t *opts)
{
    if (!opts) return;
    symmem_options_t d = SYMMEM_OPTIONS_INIT;
    *opts = d;
}

/* ---- unique ids ------------------------------------------------------------------------------------- */

symmem_status_t symmem_get_unique_id(symmem_unique_id_t *id)
{
    symmem_clear_error();
    if (!id) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_get_unique_id: id is NULL");
    symmem_boot_id_t b;
    SYMMEM_CHECK(symmem_boot_id_make(&b));
    memcpy(id->bytes, &b, sizeof b);
    return SYMMEM_OK;
}

symmem_status_t symmem_unique_id_to_string(const symmem_unique_id_t *id, char *buf, size_t buflen)
{
    symmem_clear_error();
    if (!id || !buf || buflen < SYMMEM_UNIQUE_ID_STRLEN)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "symmem_unique_id_to_string: need an id and a buffer of SYMMEM_UNIQUE_ID_STRLEN "
                                "(%d) bytes",
                                SYMMEM_UNIQUE_ID_STRLEN);
    for (int i = 0; i < SYMMEM_UNIQUE_ID_BYTES; i++) snprintf(buf + 2 * i, 3, "%02x", id->bytes[i]);
    return SYMMEM_OK;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

symmem_status_t symmem_unique_id_from_string(const char *str, symmem_unique_id_t *id)
{
    symmem_clear_error();
    if (!str || !id) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_unique_id_from_string: NULL argument");
    if (strlen(str) != 2 * SYMMEM_UNIQUE_ID_BYTES)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "'%.40s%s' is not a symmem unique id: expected %d hex digits, got %zu characters", str,
                                strlen(str) > 40 ? "..." : "", 2 * SYMMEM_UNIQUE_ID_BYTES, strlen(str));
    symmem_unique_id_t t;
    for (int i = 0; i < SYMMEM_UNIQUE_ID_BYTES; i++) {
        int hi = hexval(str[2 * i]), lo = hexval(str[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "not a symmem unique id: non-hex character at %d",
                                    2 * i + (hi < 0 ? 0 : 1));
        t.bytes[i] = (unsigned char)(hi << 4 | lo);
    }
    symmem_boot_id_t b;
    memcpy(&b, t.bytes, sizeof b);
    SYMMEM_CHECK(symmem_boot_id_check(&b));
    *id = t;
    return SYMMEM_OK;
}

/* ---- options ---------------------------------------------------------------------------------------- */

typedef struct resolved_opts {
    int device;
    int timeout_ms;
    symmem_backend_t backend;
    symmem_placement_t placement;
    int numa_node;
} resolved_opts_t;

static symmem_status_t parse_backend(const char *s, symmem_backend_t *out)
{
    if (strcasecmp(s, "cuda") == 0) *out = SYMMEM_BACKEND_CUDA;
    else if (strcasecmp(s, "host") == 0) *out = SYMMEM_BACKEND_HOST;
    else return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "SYMMEM_BACKEND=%s: expected cuda or host", s);
    return SYMMEM_OK;
}

static symmem_status_t parse_placement(const char *s, symmem_placement_t *out)
{
    if (strcasecmp(s, "auto") == 0) *out = SYMMEM_PLACEMENT_AUTO;
    else if (strcasecmp(s, "device") == 0) *out = SYMMEM_PLACEMENT_DEVICE;
    else if (strcasecmp(s, "host_numa") == 0 || strcasecmp(s, "host") == 0) *out = SYMMEM_PLACEMENT_HOST_NUMA;
    else return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "SYMMEM_PLACEMENT=%s: expected auto, device or host_numa", s);
    return SYMMEM_OK;
}

static symmem_status_t resolve_options(const symmem_options_t *o, resolved_opts_t *r)
{
    symmem_options_t d = SYMMEM_OPTIONS_INIT;
    if (!o) o = &d;
    if (o->magic != SYMMEM_OPTIONS_MAGIC || o->size < offsetof(symmem_options_t, numa_node) + sizeof(int) ||
        o->version == 0 || o->version > SYMMEM_OPTIONS_VERSION)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "options not initialised: start from SYMMEM_OPTIONS_INIT or symmem_options_init()");
    r->device = o->device;
    if (o->timeout_ms > 0) {
        r->timeout_ms = o->timeout_ms;
    } else {
        /* Range-checked before narrowing: 4294967297 must not become 1 ms. */
        int64_t t = symmem_param_int(SYMMEM_PARAM_TIMEOUT_MS);
        if (t < 1 || t > INT_MAX)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "SYMMEM_TIMEOUT_MS=%s is out of range [1, %d] ms",
                                    symmem_param_str(SYMMEM_PARAM_TIMEOUT_MS), INT_MAX);
        r->timeout_ms = (int)t;
    }
    if (o->backend == SYMMEM_BACKEND_DEFAULT)
        SYMMEM_CHECK(parse_backend(symmem_param_str(SYMMEM_PARAM_BACKEND), &r->backend));
    else if (o->backend == SYMMEM_BACKEND_CUDA || o->backend == SYMMEM_BACKEND_HOST)
        r->backend = o->backend;
    else
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "unknown backend %d", (int)o->backend);
    if (o->placement == SYMMEM_PLACEMENT_DEFAULT)
        SYMMEM_CHECK(parse_placement(symmem_param_str(SYMMEM_PARAM_PLACEMENT), &r->placement));
    else if (o->placement >= SYMMEM_PLACEMENT_AUTO && o->placement <= SYMMEM_PLACEMENT_HOST_NUMA)
        r->placement = o->placement;
    else
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "unknown placement %d", (int)o->placement);
    r->numa_node = o->numa_node;
    return SYMMEM_OK;
}

/* ---- facts about this rank -------------------------------------------------------------------------- */

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static uint64_t host_hash(void)
{
    char host[256] = "", boot[64] = "";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
        fclose(f);
    }
    return fnv1a(fnv1a(1469598103934665603ull, host, strlen(host)), boot, strlen(boot));
}

static symmem_status_t cuda_rt_error(cudaError_t e, const char *call, int device)
{
    symmem_status_t st = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ? SYMMEM_NO_DEVICE
                         : e == cudaErrorMemoryAllocation                          ? SYMMEM_OUT_OF_MEMORY
                                                                                   : SYMMEM_CUDA_ERROR;
    return symmem_set_error(st, "%s (device %d) failed: %s (%s)", call, device, cudaGetErrorName(e),
                            cudaGetErrorString(e));
}

static symmem_status_t gpu_facts(int device, symmem_peer_info_t *info)
{
    const symmem_cudrv_t *drv;
    SYMMEM_CHECK(symmem_cudrv_get(&drv));
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return cuda_rt_error(e, "cudaGetDeviceCount", device);
    if (device < 0 && (e = cudaGetDevice(&device)) != cudaSuccess) return cuda_rt_error(e, "cudaGetDevice", -1);
    if (device >= count)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "device %d does not exist: this process sees %d GPU(s)",
                                device, count);
    if ((e = cudaSetDevice(device)) != cudaSuccess) return cuda_rt_error(e, "cudaSetDevice", device);
    if ((e = cudaFree(NULL)) != cudaSuccess) return cuda_rt_error(e, "context creation (cudaFree(0))", device);
    info->device = device;
    if ((e = cudaDeviceGetPCIBusId(info->pci_bus_id, sizeof info->pci_bus_id, device)) != cudaSuccess)
        return cuda_rt_error(e, "cudaDeviceGetPCIBusId", device);
    for (char *p = info->pci_bus_id; *p; p++) *p = (char)(*p >= 'A' && *p <= 'F' ? *p - 'A' + 'a' : *p);
    CUdevice cu;
    SYMMEM_CU_CHECK(drv, cuDeviceGet(&cu, device), "");
    struct { CUdevice_attribute a; int32_t *out; } q[] = {
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info->sm_count},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info->cc_major},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info->cc_minor},
        {CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, &info->numa_node},
        {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, &info->fabric_ok},
        {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, &info->gdr_ok},
        {CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, &info->host_numa_ok},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        int v = 0;
        /* Older drivers reject newer attributes: treat as "not supported" rather than failing. */
        if (drv->cuDeviceGetAttribute(&v, q[i].a, cu) != CUDA_SUCCESS) v = (q[i].a == CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID) ? -1 : 0;
        *q[i].out = v;
    }
    if (info->numa_node < 0) info->numa_node = symmem_numa_node_of_pci(info->pci_bus_id);
    return SYMMEM_OK;
}

/* NVLink links between my GPU and each rank's, from NVML (0 where NVML is absent or says none). */
static void nvlink_row(symmem_comm_t c, int *row)
{
    const char *ids[SYMMEM_MAX_RANKS];
    int links[SYMMEM_MAX_RANKS * SYMMEM_MAX_RANKS];
    for (int j = 0; j < c->nranks; j++) ids[j] = c->peers[j].pci_bus_id;
    if (!topo_nvml_links_by_bus(ids, c->nranks, links)) {
        SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "NVML unavailable: GPU pairs with P2P are classed PCIe");
        memset(links, 0, sizeof links);
    }
    for (int j = 0; j < c->nranks; j++) row[j] = links[c->rank * c->nranks + j];
}

/* My row of the reachability matrix: can my GPU map rank j's memory, and how. */
static void p2p_row(symmem_comm_t c, int *row)
{
    int nvlinks[SYMMEM_MAX_RANKS] = {0};
    if (c->backend == SYMMEM_BACKEND_CUDA) nvlink_row(c, nvlinks);
    for (int j = 0; j < c->nranks; j++) {
        const symmem_peer_info_t *p = &c->peers[j];
        c->native_atomics[j] = 1;
        if (c->backend == SYMMEM_BACKEND_HOST) {
            c->link[j] = j == c->rank ? SYMMEM_LINK_SELF : SYMMEM_LINK_NONE;
            row[j] = 1;
            continue;
        }
        if (strcmp(p->pci_bus_id, c->peers[c->rank].pci_bus_id) == 0) {
            c->link[j] = SYMMEM_LINK_SELF;
            row[j] = 1;
            continue;
        }
        int dev = -1, can = 0, atomics = 0;
        if (cudaDeviceGetByPCIBusId(&dev, p->pci_bus_id) != cudaSuccess) {
            /* The peer's GPU is hidden from this process (CUDA_VISIBLE_DEVICES): the driver cannot be asked;
             * assume P2P and let the mapping report a failure. */
            (void)cudaGetLastError();
            SYMMEM_INFO(SYMMEM_SUBSYS_ALLOC, "GPU %s of rank %d is not visible here; assuming P2P", p->pci_bus_id, j);
            can = 1;
        } else {
            if (cudaDeviceCanAccessPeer(&can, c->device, dev) != cudaSuccess) can = 0;
            if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, c->device, dev) !=
                cudaSuccess)
                atomics = 0;
            (void)cudaGetLastError();
        }
        row[j] = can;
        c->native_atomics[j] = atomics;
        c->link[j] = !can ? SYMMEM_LINK_HOST : nvlinks[j] > 0 ? SYMMEM_LINK_NVLINK : SYMMEM_LINK_PCIE;
    }
}

static symmem_status_t agree_on_facts(symmem_comm_t c, const resolved_opts_t *o)
{
    symmem_peer_info_t me;
    memset(&me, 0, sizeof me);
    me.host_hash = host_hash();
    me.pid = (int32_t)getpid();
    me.backend = (int32_t)c->backend;
    me.placement = (int32_t)o->placement;
    me.device = -1;
    me.numa_node = -1;
    if (c->backend == SYMMEM_BACKEND_CUDA) SYMMEM_CHECK(gpu_facts(o->device, &me));
    c->device = me.device;
    SYMMEM_CHECK(symmem_boot_allgather(c->boot, &me, c->peers, sizeof me, "communicator init"));
    for (int r = 0; r < c->nranks; r++) {
        const symmem_peer_info_t *p = &c->peers[r];
        if (p->host_hash != me.host_hash)
            return symmem_set_error(SYMMEM_INVALID_USAGE, "rank %d runs on another host: symmem ranks share one host", r);
        if (p->backend != me.backend || p->placement != me.placement)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "rank %d uses backend %d / placement %d, this rank %d / %d: all ranks must agree",
                                    r, p->backend, p->placement, me.backend, me.placement);
    }
    return SYMMEM_OK;
}

static symmem_status_t agree_on_reachability(symmem_comm_t c)
{
    int row[SYMMEM_MAX_RANKS] = {0}, matrix[SYMMEM_MAX_RANKS * SYMMEM_MAX_RANKS];
    p2p_row(c, row);
    SYMMEM_CHECK(symmem_boot_allgather(c->boot, row, matrix, sizeof row, "communicator init"));
    c->all_p2p = 1;
    for (int i = 0; i < c->nranks; i++)
        for (int j = 0; j < c->nranks; j++)
            if (!matrix[i * SYMMEM_MAX_RANKS + j]) {
                if (c->all_p2p)
                    SYMMEM_INFO(SYMMEM_SUBSYS_ALLOC, "GPU %s (rank %d) cannot access GPU %s (rank %d) peer-to-peer",
                                c->peers[i].pci_bus_id, i, c->peers[j].pci_bus_id, j);
                c->all_p2p = 0;
            }
    c->placement = (symmem_placement_t)c->peers[c->rank].placement;
    if (c->placement == SYMMEM_PLACEMENT_AUTO && c->backend == SYMMEM_BACKEND_CUDA)
        c->placement = c->all_p2p ? SYMMEM_PLACEMENT_DEVICE : SYMMEM_PLACEMENT_HOST_NUMA;
    /* Blocks per collective kernel: the same on every rank, and small enough that the kernels of all
     * ranks sharing a GPU are resident together (they wait on each other). */
    c->min_sm_count = 0;
    c->ranks_per_device = 1;
    c->max_blocks = 0;
    for (int r = 0; r < c->nranks && c->backend == SYMMEM_BACKEND_CUDA; r++) {
        int same = 0;
        for (int q = 0; q < c->nranks; q++) same += strcmp(c->peers[q].pci_bus_id, c->peers[r].pci_bus_id) == 0;
        int share = c->peers[r].sm_count / same;
        if (c->min_sm_count == 0 || c->peers[r].sm_count < c->min_sm_count) c->min_sm_count = c->peers[r].sm_count;
        if (same > c->ranks_per_device) c->ranks_per_device = same;
        if (c->max_blocks == 0 || share < c->max_blocks) c->max_blocks = share;
    }
    int64_t cap = symmem_param_int(SYMMEM_PARAM_MAX_BLOCKS);
    if (cap > 0 && cap < c->max_blocks) c->max_blocks = (int)cap;
    if (c->backend == SYMMEM_BACKEND_CUDA && c->max_blocks < 1) c->max_blocks = 1;
    return SYMMEM_OK;
}

/* ---- creation and destruction ----------------------------------------------------------------------- */

static const char *placement_name(symmem_placement_t p)
{
    switch (p) {
    case SYMMEM_PLACEMENT_DEVICE: return "device";
    case SYMMEM_PLACEMENT_HOST_NUMA: return "host-NUMA";
    case SYMMEM_PLACEMENT_AUTO: return "auto";
    default: return "default";
    }
}

/* The communicators of one symmem_comm_init_all. A rank leaves at destroy; the last one frees the set. */
typedef struct symmem_comm_set {
    pthread_mutex_t lock; /* taken before any member's own lock */
    int nranks;
    int live;
    symmem_comm_t comms[SYMMEM_MAX_RANKS]; /* NULL once destroyed */
} symmem_comm_set_t;

static void set_attach(symmem_comm_t *comms, int nranks)
{
    symmem_comm_set_t *s = calloc(1, sizeof *s);
    if (!s) return; /* only the early misuse checks are lost */
    pthread_mutex_init(&s->lock, NULL);
    s->nranks = s->live = nranks;
    for (int r = 0; r < nranks; r++) s->comms[r] = comms[r], comms[r]->set = s;
}

static void set_detach(symmem_comm_t c)
{
    symmem_comm_set_t *s = c->set;
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->comms[c->rank] = NULL;
    int last = --s->live == 0;
    pthread_mutex_unlock(&s->lock);
    c->set = NULL;
    if (last) {
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
}

static void entry_enter(symmem_comm_t c, symmem_entry_t *e);

/* Registry of live communicators: destroy and the entry guard look a handle up here instead of reading
 * through it, so a destroyed (freed) or foreign handle is rejected without touching its memory. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static symmem_comm_t *live_comms;
static size_t live_count, live_cap;

static int live_add(symmem_comm_t c)
{
    pthread_mutex_lock(&live_lock);
    int ok = 1;
    if (live_count == live_cap) {
        size_t cap = live_cap ? 2 * live_cap : 16;
        symmem_comm_t *v = realloc(live_comms, cap * sizeof *v);
        if (v) live_comms = v, live_cap = cap;
        else ok = 0;
    }
    if (ok) live_comms[live_count++] = c;
    pthread_mutex_unlock(&live_lock);
    return ok;
}

static size_t live_find(symmem_comm_t c) /* live_lock held; live_count if absent */
{
    size_t i = 0;
    while (i < live_count && live_comms[i] != c) i++;
    return i;
}

static int live_has(symmem_comm_t c)
{
    if (!c) return 0;
    pthread_mutex_lock(&live_lock);
    int found = live_find(c) < live_count;
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* Remove c if it is live; returns 1 if it was. Exactly one of two racing destroys gets 1. */
static int live_take(symmem_comm_t c)
{
    pthread_mutex_lock(&live_lock);
    size_t i = live_find(c);
    int found = i < live_count;
    if (found) live_comms[i] = live_comms[--live_count];
    pthread_mutex_unlock(&live_lock);
    return found;
}

/* SYMMEM_TOPO_DUMP_FILE: rank 0 writes the topology model it sees (facts, no measurement) as JSON, like
 * NCCL_TOPO_DUMP_FILE. A failure is a warning: the communicator works without it. */
static void dump_topology(symmem_comm_t c)
{
    const char *path = symmem_param_str(SYMMEM_PARAM_TOPO_DUMP_FILE);
    if (!*path || c->rank != 0) return;
    symmem_topo_options_t o;
    symmem_topo_options_init(&o);
    o.measure = 0;
    symmem_topo_t t = NULL;
    FILE *f = NULL;
    if (symmem_topo_discover(&o, &t) == SYMMEM_OK && (f = fopen(path, "w")) != NULL &&
        symmem_topo_write_json(t, f) == SYMMEM_OK)
        SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "topology written to %s", path);
    else
        SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "SYMMEM_TOPO_DUMP_FILE=%s: could not write the topology", path);
    if (f) fclose(f);
    symmem_topo_destroy(t);
    symmem_clear_error();
}

/* Free everything the communicator holds. Local; leaves the calling thread's last error alone. */
static void comm_release(symmem_comm_t c)
{
    /* The collectives free their own workspace first, so only the caller's leftovers are warned about. */
    set_detach(c);
    if (c->backend == SYMMEM_BACKEND_CUDA) symmem_coll_comm_fini(c);
    symmem_buffers_release_all(c);
    symmem_boot_destroy(c->boot);
    c->magic = 0;
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static symmem_status_t comm_create(const symmem_boot_id_t *id, int nranks, int rank, const symmem_options_t *opts,
                                   symmem_comm_t *out)
{
    if (nranks < 1 || nranks > SYMMEM_MAX_RANKS)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "nranks %d out of range [1, %d]", nranks, SYMMEM_MAX_RANKS);
    if (rank < 0 || rank >= nranks)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "rank %d out of range [0, %d)", rank, nranks);
    resolved_opts_t o;
    SYMMEM_CHECK(resolve_options(opts, &o));
    symmem_comm_t c = calloc(1, sizeof *c);
    if (!c) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    c->magic = SYMMEM_COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->device = -1;
    c->backend = o.backend;
    c->numa_node_opt = o.numa_node;
    c->timeout_ms = o.timeout_ms;
    pthread_mutex_init(&c->lock, NULL);
    /* Live from here on: init itself makes calls that check the handle (the collectives allocate their
     * workspace with symmem_alloc). */
    if (!live_add(c)) {
        pthread_mutex_destroy(&c->lock);
        free(c);
        return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    }
    int prev_rank = symmem_log_set_rank(rank);
    symmem_status_t st;
    SYMMEM_CHECK_GOTO(symmem_boot_create(id, nranks, rank, o.timeout_ms, &c->boot), st, fail);
    SYMMEM_CHECK_GOTO(agree_on_facts(c, &o), st, fail);
    SYMMEM_CHECK_GOTO(agree_on_reachability(c), st, fail);
    if (c->backend == SYMMEM_BACKEND_CUDA) SYMMEM_CHECK_GOTO(symmem_coll_comm_init(c), st, fail);
    dump_topology(c);
    if (c->backend == SYMMEM_BACKEND_HOST)
        SYMMEM_INFO(SYMMEM_SUBSYS_CORE, "communicator ready: %d ranks, host backend (memfd memory, no GPU)", nranks);
    else
        SYMMEM_INFO(SYMMEM_SUBSYS_CORE, "communicator ready: %d ranks, GPU %d (%s), %s placement", nranks,
                    c->device, c->peers[rank].pci_bus_id, placement_name(c->placement));
    symmem_log_set_rank(prev_rank);
    *out = c;
    return SYMMEM_OK;
fail:
    /* Tear down at once, telling the peers why (they would otherwise only see a closed socket, or wait for
     * the timeout), so their errors name the real cause. comm_release keeps this thread's error message. */
    symmem_boot_abort(c->boot, st, symmem_last_error());
    live_take(c);
    comm_release(c);
    symmem_log_set_rank(prev_rank);
    return st;
}

typedef struct init_args {
    symmem_boot_id_t id;
    int nranks, rank;
    symmem_options_t opts;
    int has_opts;
    symmem_comm_t *out;
} init_args_t;

static symmem_status_t init_deferred(void *p)
{
    init_args_t *a = p;
    return comm_create(&a->id, a->nranks, a->rank, a->has_opts ? &a->opts : NULL, a->out);
}

symmem_status_t symmem_comm_init(int nranks, int rank, const symmem_unique_id_t *id, const symmem_options_t *opts,
                                 symmem_comm_t *comm)
{
    symmem_clear_error();
    if (!id || !comm) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_init: id or comm is NULL");
    init_args_t a;
    memset(&a, 0, sizeof a);
    memcpy(&a.id, id->bytes, sizeof a.id);
    a.nranks = nranks;
    a.rank = rank;
    if (opts) a.opts = *opts, a.has_opts = 1;
    a.out = comm;
    if (symmem_group_active()) return symmem_group_defer(NULL, init_deferred, &a, sizeof a);
    return init_deferred(&a);
}

symmem_status_t symmem_comm_init_bootstrap(int nranks, int rank, const symmem_bootstrap_t *bs,
                                           const symmem_options_t *opts, symmem_comm_t *comm)
{
    symmem_clear_error();
    if (!bs || !bs->allgather || !comm)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_init_bootstrap: bootstrap or comm is NULL");
    if (nranks < 1 || nranks > SYMMEM_MAX_RANKS || rank < 0 || rank >= nranks)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "rank %d of %d out of range (at most %d ranks)", rank, nranks,
                                SYMMEM_MAX_RANKS);
    /* Rank 0's id reaches everyone through the user's allgather; the rest runs over our own sockets. */
    symmem_boot_id_t mine, *all = calloc((size_t)nranks, sizeof *all);
    if (!all) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    symmem_status_t st = symmem_boot_id_make(&mine);
    if (st == SYMMEM_OK && bs->allgather(bs->ctx, &mine, all, sizeof mine) != 0)
        st = symmem_set_error(SYMMEM_PEER_FAILURE, "the user bootstrap's allgather failed (rank %d of %d)", rank,
                              nranks);
    symmem_unique_id_t id;
    if (st == SYMMEM_OK) memcpy(id.bytes, &all[0], sizeof all[0]);
    free(all);
    if (st != SYMMEM_OK) return st;
    return symmem_comm_init(nranks, rank, &id, opts, comm);
}

typedef struct init_all_args {
    init_args_t a;
    symmem_status_t st;
    char err[1024];
} init_all_args_t;

static void *init_all_thread(void *p)
{
    init_all_args_t *t = p;
    t->st = init_deferred(&t->a);
    if (t->st != SYMMEM_OK) snprintf(t->err, sizeof t->err, "%s", symmem_last_error());
    return NULL;
}

symmem_status_t symmem_comm_init_all(int nranks, const int *devices, const symmem_options_t *opts,
                                     symmem_comm_t *comms)
{
    symmem_clear_error();
    if (!comms || nranks < 1 || nranks > SYMMEM_MAX_RANKS)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_init_all: nranks %d out of range [1, %d]",
                                nranks, SYMMEM_MAX_RANKS);
    symmem_options_t base = SYMMEM_OPTIONS_INIT;
    if (opts) base = *opts;
    symmem_unique_id_t id;
    SYMMEM_CHECK(symmem_get_unique_id(&id));
    init_all_args_t *t = calloc((size_t)nranks, sizeof *t);
    pthread_t *th = calloc((size_t)nranks, sizeof *th);
    symmem_comm_t *tmp = calloc((size_t)nranks, sizeof *tmp);
    int *started = calloc((size_t)nranks, sizeof *started);
    symmem_status_t st = SYMMEM_OK;
    if (!t || !th || !tmp || !started) st = symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    for (int r = 0; r < nranks && st == SYMMEM_OK; r++) {
        memcpy(&t[r].a.id, id.bytes, sizeof t[r].a.id);
        t[r].a.nranks = nranks;
        t[r].a.rank = r;
        t[r].a.opts = base;
        t[r].a.opts.device = devices ? devices[r] : r;
        t[r].a.has_opts = 1;
        t[r].a.out = &tmp[r];
        if (pthread_create(&th[r], NULL, init_all_thread, &t[r]) != 0)
            st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "symmem_comm_init_all: cannot start a thread for rank %d", r);
        else
            started[r] = 1;
    }
    /* A rank that could not start makes the others time out; they are joined all the same. */
    int cause = -1;
    for (int r = 0; r < nranks; r++) {
        if (!started || !started[r]) continue;
        pthread_join(th[r], NULL);
        /* The first rank that failed on its own: the others fail with SYMMEM_PEER_FAILURE because it told
         * them it gave up, and the caller wants the cause. */
        if (t[r].st != SYMMEM_OK && (cause < 0 || (t[cause].st == SYMMEM_PEER_FAILURE && t[r].st != SYMMEM_PEER_FAILURE)))
            cause = r;
    }
    /* The message to leave as this thread's last error (the rank's thread logged it; destroy clears it). */
    char why[sizeof t->err];
    snprintf(why, sizeof why, "%s", st == SYMMEM_OK && cause >= 0 ? t[cause].err : symmem_last_error());
    if (cause >= 0 && st == SYMMEM_OK) st = t[cause].st;
    if (st == SYMMEM_OK) set_attach(tmp, nranks);
    for (int r = 0; r < nranks && st == SYMMEM_OK; r++) comms[r] = tmp[r];
    if (st != SYMMEM_OK) {
        for (int r = 0; r < nranks && tmp; r++) symmem_comm_destroy(tmp[r]);
        symmem_record_error(st, "%s", why);
    }
    free(t), free(th), free(tmp), free(started);
    return st;
}

symmem_status_t symmem_comm_destroy(symmem_comm_t c)
{
    symmem_clear_error();
    if (!c) return SYMMEM_OK;
    if (!live_take(c))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "symmem_comm_destroy: %p is not a live communicator (destroyed twice, or not from "
                                "symmem_comm_init)",
                                (void *)c);
    symmem_entry_t e;
    entry_enter(c, &e);
    comm_release(c);
    symmem_entry_end(&e);
    return SYMMEM_OK;
}

/* ---- accessors, entry guard, host-side collectives --------------------------------------------------- */

static int valid(symmem_comm_t c) { return live_has(c); }
int symmem_comm_is_live(symmem_comm_t c) { return live_has(c); }
int symmem_comm_rank(symmem_comm_t c) { return valid(c) ? c->rank : -1; }
int symmem_comm_size(symmem_comm_t c) { return valid(c) ? c->nranks : -1; }
int symmem_comm_device(symmem_comm_t c) { return valid(c) ? c->device : -1; }
symmem_backend_t symmem_comm_backend(symmem_comm_t c) { return valid(c) ? c->backend : SYMMEM_BACKEND_DEFAULT; }

symmem_status_t symmem_comm_peer_link(symmem_comm_t c, int peer, symmem_link_t *link, int *native_atomics)
{
    symmem_clear_error();
    if (!valid(c)) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_peer_link: invalid communicator");
    if (peer < 0 || peer >= c->nranks)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "peer %d out of range [0, %d)", peer, c->nranks);
    if (link) *link = c->link[peer];
    if (native_atomics) *native_atomics = c->native_atomics[peer];
    return SYMMEM_OK;
}

void symmem_comm_set_error(symmem_comm_t c, symmem_status_t status, const char *msg)
{
    pthread_mutex_lock(&c->lock);
    if (c->async_error == SYMMEM_OK) {
        c->async_error = status;
        snprintf(c->async_error_msg, sizeof c->async_error_msg, "%s", msg);
    }
    pthread_mutex_unlock(&c->lock);
}

symmem_status_t symmem_comm_get_async_error(symmem_comm_t c)
{
    symmem_clear_error();
    if (!valid(c)) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_comm_get_async_error: invalid communicator");
    if (c->backend == SYMMEM_BACKEND_CUDA) (void)symmem_coll_poll_error(c);
    pthread_mutex_lock(&c->lock);
    symmem_status_t st = c->async_error;
    char msg[sizeof c->async_error_msg];
    memcpy(msg, c->async_error_msg, sizeof msg);
    pthread_mutex_unlock(&c->lock);
    symmem_clear_error();
    if (st != SYMMEM_OK) {
        int prev = symmem_log_set_rank(-1); /* the message already names the rank */
        symmem_status_t r = symmem_record_error(st, "%s", msg); /* logged when it happened */
        symmem_log_set_rank(prev);
        return r;
    }
    return SYMMEM_OK;
}

/* The public call this thread is in, and whether its first blocking step has been checked (set_check). */
static _Thread_local const char *tls_call;
static _Thread_local int tls_call_checked;

/* Make c's rank the one in logs and c's device current; save what symmem_entry_end restores. */
static void entry_enter(symmem_comm_t c, symmem_entry_t *e)
{
    e->prev_call = tls_call;
    e->prev_call_checked = tls_call_checked;
    e->prev_rank = symmem_log_set_rank(c->rank);
    e->prev_device = -1;
    if (c->device >= 0) {
        int cur = -1;
        if (cudaGetDevice(&cur) == cudaSuccess && cur != c->device) {
            if (cudaSetDevice(c->device) == cudaSuccess) e->prev_device = cur;
        }
        (void)cudaGetLastError();
    }
}

symmem_status_t symmem_entry_begin(symmem_comm_t c, const char *call, symmem_entry_t *e)
{
    symmem_clear_error();
    e->prev_rank = -1;
    e->prev_device = -1;
    e->prev_call = tls_call; /* symmem_entry_end restores them, also after a failed begin */
    e->prev_call_checked = tls_call_checked;
    if (!valid(c)) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: not a live communicator", call);
    entry_enter(c, e);
    tls_call = call;
    tls_call_checked = 0;
    return SYMMEM_OK;
}

void symmem_entry_end(const symmem_entry_t *e)
{
    if (e->prev_device >= 0) cudaSetDevice(e->prev_device);
    symmem_log_set_rank(e->prev_rank);
    tls_call = e->prev_call;
    tls_call_checked = e->prev_call_checked;
}

/* Threads of this process that can still make a call: the entries of /proc/self/task without PF_EXITING
 * (a thread just joined can linger there while the kernel finishes its exit). -1 when unknown. */
#define SYMMEM_PF_EXITING 0x4u /* include/linux/sched.h */
static int live_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *t;
    while (n >= 0 && (t = readdir(d)) != NULL) {
        if (t->d_name[0] == '.') continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", t->d_name);
        FILE *f = fopen(path, "r");
        if (!f) {
            if (errno != ENOENT && errno != ESRCH) n = -1; /* cannot tell: never guess low */
            continue;
        }
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[len] = '\0';
        /* "tid (name) state ppid pgrp session tty tpgid flags ...": the name may hold spaces and ')' */
        const char *p = strrchr(buf, ')');
        unsigned long flags = 0;
        if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1) n = -1;
        else if (!(flags & SYMMEM_PF_EXITING)) n++;
    }
    closedir(d);
    return n;
}

/* Before a blocking host collective on a communicator of symmem_comm_init_all: fail at once where no
 * thread can ever make a sibling rank's matching call, instead of waiting the whole timeout for it. Only
 * certain cases: a sibling destroyed or in its error state (its public collective calls fail before they
 * communicate), or the calling thread the only live thread of the process (group calls run on threads of
 * their own, so this is a call outside a group; one thread per rank is legal and never refused here).
 * Checked once per public call, before its first exchange: nothing has been sent then, so a refused call
 * leaves every rank in step and the communicators usable (e.g. for the same call inside a group). */
static symmem_status_t set_check(symmem_comm_t c)
{
    symmem_comm_set_t *s = c->set;
    if (!s || c->nranks == 1) return SYMMEM_OK;
    if (tls_call && tls_call_checked) return SYMMEM_OK;
    if (tls_call) tls_call_checked = 1;
    const char *call = tls_call ? tls_call : "collective call";
    symmem_status_t st = SYMMEM_OK;
    pthread_mutex_lock(&s->lock);
    for (int r = 0; r < s->nranks && st == SYMMEM_OK && tls_call; r++) {
        symmem_comm_t p = s->comms[r];
        if (r == c->rank) continue;
        if (!p) {
            st = symmem_set_error(SYMMEM_PEER_FAILURE,
                                  "%s: rank %d of this symmem_comm_init_all was destroyed, so its matching call "
                                  "can never come",
                                  call, r);
            break;
        }
        pthread_mutex_lock(&p->lock);
        symmem_status_t perr = p->async_error;
        char msg[sizeof p->async_error_msg];
        memcpy(msg, p->async_error_msg, sizeof msg);
        pthread_mutex_unlock(&p->lock);
        if (perr != SYMMEM_OK)
            st = symmem_set_error(SYMMEM_PEER_FAILURE,
                                  "%s: rank %d of this symmem_comm_init_all failed earlier, so its matching call "
                                  "can never come: %s",
                                  call, r, msg);
    }
    pthread_mutex_unlock(&s->lock);
    if (st == SYMMEM_OK && live_threads() == 1)
        st = symmem_set_error(SYMMEM_INVALID_USAGE,
                              "%s: all %d ranks of this communicator live in this process (symmem_comm_init_all) and "
                              "this is its only thread, so no other rank's matching call can come while this one "
                              "waits: from one thread, make the call for every rank between symmem_group_start() "
                              "and symmem_group_end(), or use one thread per rank",
                              call, c->nranks);
    return st;
}

/* A bootstrap failure means a peer is gone or out of step: later calls must not wait on it again. */
static symmem_status_t boot_result(symmem_comm_t c, symmem_status_t st)
{
    if (st == SYMMEM_TIMEOUT && c->set)
        symmem_append_error("; every rank of this communicator lives in this process (symmem_comm_init_all): a "
                            "thread that drives several ranks must make their calls between symmem_group_start() "
                            "and symmem_group_end()");
    if (st == SYMMEM_TIMEOUT || st == SYMMEM_PEER_FAILURE) symmem_comm_set_error(c, st, symmem_last_error());
    return st;
}

symmem_status_t symmem_comm_allgather(symmem_comm_t c, const void *send, void *recv, size_t bytes)
{
    SYMMEM_CHECK(set_check(c));
    return boot_result(c, symmem_boot_allgather(c->boot, send, recv, bytes, "allgather"));
}

symmem_status_t symmem_comm_barrier(symmem_comm_t c)
{
    SYMMEM_CHECK(set_check(c));
    return boot_result(c, symmem_boot_barrier(c->boot, "barrier"));
}

symmem_status_t symmem_comm_exchange_fds(symmem_comm_t c, int my_fd, uint64_t tag, int *fds_out)
{
    SYMMEM_CHECK(set_check(c));
    return boot_result(c, symmem_boot_exchange_fds(c->boot, my_fd, tag, fds_out, "file-descriptor exchange"));
}
