/*
 * symmem topology model: what the GPUs of this node are, how each pair is connected, what the platform does
 * to peer-to-peer traffic, and (optionally) what each pair measures. The runtime chooses its algorithms from
 * this model; the `symmem-topo` probe prints it. See docs/topology.md.
 *
 * The model is built from two sources and one pure function:
 *  - sysfs/procfs, always read under one root (SYMMEM_SYSFS_ROOT or the `sysfs_root` option), so a tree
 *    captured on another machine (symmem_topo_capture) can be replayed anywhere;
 *  - GPU facts: the CUDA runtime (and NVML, loaded at run time, for NVLink counts) on a live root, or the
 *    `gpus.json` file of a captured tree;
 *  - the model, a pure function of those facts (path classes, warnings, recommendation, fingerprint).
 *
 * C11, no CUDA header needed. Included at the end of <symmem/symmem.h>.
 */
#ifndef SYMMEM_TOPO_H
#define SYMMEM_TOPO_H

#include <stdio.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most GPUs one model holds; GPUs past this many are ignored with a warning. */
#define SYMMEM_TOPO_MAX_GPUS 32

/* Path classes between two GPUs, best first, as `nvidia-smi topo -m` names them. One list generates the
 * enum and symmem_topo_class_name(). */
#define SYMMEM_TOPO_CLASS_LIST(X)                                                                          \
    X(SELF, 0, "X")       /* the same GPU */                                                               \
    X(NVLINK, 1, "NV")    /* NVLink (direct or through NVSwitch); printed NV<links> */                     \
    X(PIX, 2, "PIX")      /* through one PCIe switch */                                                    \
    X(PXB, 3, "PXB")      /* through several PCIe switches, no host bridge */                              \
    X(PHB, 4, "PHB")      /* through one PCIe host bridge (the CPU's root complex) */                      \
    X(NODE, 5, "NODE")    /* across host bridges of one NUMA node */                                       \
    X(SYS, 6, "SYS")      /* across NUMA nodes (the inter-socket link) */                                  \
    X(UNKNOWN, 7, "?")    /* a GPU that was not found in the PCI tree */

typedef enum symmem_topo_class {
#define SYMMEM_TOPO_CLASS_ENUM_(name, value, text) SYMMEM_TOPO_##name = value,
    SYMMEM_TOPO_CLASS_LIST(SYMMEM_TOPO_CLASS_ENUM_)
#undef SYMMEM_TOPO_CLASS_ENUM_
    SYMMEM_TOPO_CLASS_COUNT
} symmem_topo_class_t;

/* "X", "NV", "PIX", ... ; "?" for values outside the enum. */
SYMMEM_API const char *symmem_topo_class_name(symmem_topo_class_t cls);

typedef enum symmem_topo_gpu_source {
    SYMMEM_TOPO_GPUS_AUTO = 0, /* live root ("/"): CUDA; captured root: its gpus.json, else PCI tree only */
    SYMMEM_TOPO_GPUS_CUDA = 1, /* ask the CUDA runtime (fails cleanly with no driver: "no GPU") */
    SYMMEM_TOPO_GPUS_FILE = 2, /* <root>/gpus.json only (an error if absent) */
    SYMMEM_TOPO_GPUS_NONE = 3, /* PCI tree only: no names, no P2P attributes, no measurement */
} symmem_topo_gpu_source_t;

#define SYMMEM_TOPO_OPTIONS_MAGIC 0x544f504fu /* "TOPO" */
#define SYMMEM_TOPO_OPTIONS_VERSION 1u

/* Options of symmem_topo_discover. Start from SYMMEM_TOPO_OPTIONS_INIT (or symmem_topo_options_init). */
typedef struct symmem_topo_options {
    size_t size;            /* sizeof(symmem_topo_options_t) */
    uint32_t magic;         /* SYMMEM_TOPO_OPTIONS_MAGIC */
    uint32_t version;       /* SYMMEM_TOPO_OPTIONS_VERSION */
    const char *sysfs_root; /* NULL or "": SYMMEM_SYSFS_ROOT, else "/" */
    symmem_topo_gpu_source_t gpu_source;
    int measure;            /* 1: measure every pair (CUDA GPUs only); 0: facts and model only */
    int quick;              /* with measure: latency only, no bandwidth */
    int use_cache;          /* with measure: reuse and store figures keyed by the fingerprint */
    const char *cache_dir;  /* NULL or "": SYMMEM_TOPO_CACHE_DIR, else $XDG_CACHE_HOME/symmem, else
                               ~/.cache/symmem */
} symmem_topo_options_t;

#define SYMMEM_TOPO_OPTIONS_INIT                                                                           \
    {                                                                                                      \
        sizeof(symmem_topo_options_t), SYMMEM_TOPO_OPTIONS_MAGIC, SYMMEM_TOPO_OPTIONS_VERSION, NULL,       \
            SYMMEM_TOPO_GPUS_AUTO, 0, 0, 1, NULL                                                           \
    }

/* Local. Fills *opts with SYMMEM_TOPO_OPTIONS_INIT. */
SYMMEM_API void symmem_topo_options_init(symmem_topo_options_t *opts);

typedef struct symmem_topo *symmem_topo_t;

/* Local, blocking. Reads the PCI tree, the platform settings and the GPU facts, measures when asked (a few
 * seconds on 8 GPUs; once per machine with the cache), and builds the model. `opts` may be NULL (defaults:
 * no measurement). Finding no GPU is not an error: the model then holds 0 GPUs (see
 * symmem_topo_gpu_count). Errors: SYMMEM_SYSTEM_ERROR (the root or its PCI tree cannot be read),
 * SYMMEM_INVALID_ARGUMENT (bad options, malformed gpus.json), SYMMEM_CUDA_ERROR (a measurement failed to
 * run), SYMMEM_TIMEOUT (a transfer never completed or a flag never arrived: P2P hangs on this platform; the
 * GPUs may then stay busy, so exit the process). A transfer that returns wrong data is not an error: it is
 * reported in the pair's `data_check_failed` and a warning. Measuring enables peer access between the GPUs for its duration and
 * restores the calling thread's current device. Thread-safe against other topo calls on other handles;
 * do not measure while other work runs on the GPUs if the figures are to mean anything. */
SYMMEM_API symmem_status_t symmem_topo_discover(const symmem_topo_options_t *opts, symmem_topo_t *topo);

/* Local. NULL is a no-op. */
SYMMEM_API void symmem_topo_destroy(symmem_topo_t topo);

/* Getters. Local, thread-safe (the model is immutable after discover). */
SYMMEM_API int symmem_topo_gpu_count(symmem_topo_t topo);
/* 1 when figures were measured now or loaded from the cache / gpus.json. */
SYMMEM_API int symmem_topo_measured(symmem_topo_t topo);
/* 16 hex digits: a hash of the driver version, the GPU names and bus ids, every pair's path class and
 * NVLink count, the IOMMU mode and the ACS state of the bridges on GPU paths. Measured figures are cached
 * under it: a change to any of those invalidates the cache. Owned by topo. */
SYMMEM_API const char *symmem_topo_fingerprint(symmem_topo_t topo);
/* Multi-line, plain-language: what symmem will use on this box and why. Owned by topo. */
SYMMEM_API const char *symmem_topo_recommendation(symmem_topo_t topo);
/* Number of warnings (ACS redirection, IOMMU translation, unreadable or malformed sysfs files, failed
 * data checks) and each one's text (owned by topo; NULL out of range). */
SYMMEM_API int symmem_topo_warning_count(symmem_topo_t topo);
SYMMEM_API const char *symmem_topo_warning(symmem_topo_t topo, int index);

typedef struct symmem_topo_gpu_info {
    int index;             /* CUDA device index (PCI order when no CUDA facts) */
    char name[96];         /* "NVIDIA H200"; "NVIDIA 10de:2335" when only the PCI tree is known */
    char bus_id[16];       /* "0000:17:00.0" */
    int cc_major, cc_minor;    /* 0.0: unknown */
    uint64_t memory_bytes;     /* 0: unknown */
    int sm_count;              /* 0: unknown */
    int numa_node;             /* -1: unknown (VMs often say -1) */
    char cpulist[256];         /* CPUs local to the GPU, sysfs local_cpulist ("0-55,112-167"); "" unknown */
    int pcie_gen, pcie_width;  /* current link (a GPU at idle may train down); 0: unknown */
    int pcie_max_gen, pcie_max_width;
    /* Measured against pinned host memory on numa_node; negative: not measured. */
    double host_read_gbs;      /* SM loads from host memory */
    double host_write_gbs;     /* SM stores to host memory */
    double host_h2d_gbs;       /* copy engine, host to GPU */
    double host_d2h_gbs;       /* copy engine, GPU to host */
    double host_latency_us;    /* one-way flag latency GPU <-> CPU thread on numa_node */
    /* All GPUs at once, each with its ring successor (index + 1) mod n; negative: not measured. */
    double ring_read_gbs;      /* this GPU loading from its successor's memory */
    double ring_write_gbs;     /* this GPU storing into its successor's memory */
} symmem_topo_gpu_info_t;

typedef struct symmem_topo_pair_info {
    symmem_topo_class_t path;
    int nvlinks;           /* NVLink links between the two; 0: none; -1: unknown (no NVML) */
    int p2p_access;        /* CUDA P2P attribute: 1 yes, 0 no, -1 unknown */
    int native_atomics;    /* 1, 0, -1 unknown */
    int perf_rank;         /* CUDA's relative rank (0 best), -1 unknown */
    int acs_redirect;      /* 1: a switch port on the path redirects P2P to the CPU; 0 no; -1 unknown */
    int data_check_failed; /* 1: a measured transfer returned wrong data (do not trust P2P here) */
    /* Measured one pair at a time; negative: not measured. GB/s are 1e9 bytes per second. */
    double read_gbs;       /* SM loads: `gpu` reads `peer`'s memory (pull) */
    double write_gbs;      /* SM stores: `gpu` writes `peer`'s memory (push) */
    double ce_gbs;         /* copy engine: cudaMemcpyPeerAsync from `gpu` to `peer` */
    double latency_us;     /* one-way flag latency (ping-pong round trip / 2) */
} symmem_topo_pair_info_t;

/* Local. SYMMEM_INVALID_ARGUMENT when an index is out of range. */
SYMMEM_API symmem_status_t symmem_topo_gpu_info(symmem_topo_t topo, int gpu, symmem_topo_gpu_info_t *info);
SYMMEM_API symmem_status_t symmem_topo_pair_info(symmem_topo_t topo, int gpu, int peer, symmem_topo_pair_info_t *info);

/* For the runtime's algorithm choice: the best figures known for gpu -> peer. Measured ones when present,
 * else estimates from the path class (docs/topology.md lists them). *measured is 1 for measured figures.
 * Any output pointer may be NULL. Local. */
SYMMEM_API symmem_status_t symmem_topo_pair_figures(symmem_topo_t topo, int gpu, int peer, double *read_gbs,
                                         double *write_gbs, double *latency_us, int *measured);
/* How `gpu` reaches `peer`: SELF, NVLINK, PCIE (P2P access reported and not failed), else HOST. */
SYMMEM_API symmem_status_t symmem_topo_pair_link(symmem_topo_t topo, int gpu, int peer, symmem_link_t *link);

typedef enum symmem_topo_direction {
    SYMMEM_TOPO_PULL = 0, /* each GPU loads its peers' data (peer reads) */
    SYMMEM_TOPO_PUSH = 1, /* each GPU stores into its peers' memory (peer writes) */
} symmem_topo_direction_t;

typedef struct symmem_topo_advice {
    symmem_topo_direction_t direction;
    int staged;                   /* 1: pushes as a permutation, one inbound and one outbound peer per pass */
    symmem_placement_t placement; /* SYMMEM_PLACEMENT_DEVICE, or HOST_NUMA when some pair lacks P2P */
    int islands;                  /* number of NUMA islands the GPUs form (2 on a two-socket box) */
    int measured;                 /* 1: chosen from measured figures; 0: from the path classes alone */
} symmem_topo_advice_t;

/* Local. The recommendation as data (symmem_topo_recommendation gives it in words). */
SYMMEM_API symmem_status_t symmem_topo_get_advice(symmem_topo_t topo, symmem_topo_advice_t *advice);

/* Text report (the `symmem-topo` output): GPUs, the path matrix, P2P attributes, platform, measured
 * matrices when measured, warnings, recommendation, fingerprint. JSON report: schema "symmem-topo/1",
 * docs/topology.md. Neither contains the root's path, so captured trees give stable golden files.
 * SYMMEM_SYSTEM_ERROR when writing fails. */
SYMMEM_API symmem_status_t symmem_topo_write_text(symmem_topo_t topo, FILE *out);
SYMMEM_API symmem_status_t symmem_topo_write_json(symmem_topo_t topo, FILE *out);

/* Local, blocking. Discovers with `opts` (may be NULL) while recording every sysfs/procfs file read, then
 * copies those files (and the device symlinks) into `dir` (created if absent; existing files are replaced)
 * and writes `dir`/gpus.json with the GPU facts (and measured figures when opts->measure). The result
 * replays with `symmem-topo --sysfs-root dir`. */
SYMMEM_API symmem_status_t symmem_topo_capture(const symmem_topo_options_t *opts, const char *dir);

#ifdef __cplusplus
}
#endif
#endif /* SYMMEM_TOPO_H */
