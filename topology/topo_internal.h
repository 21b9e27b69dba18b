/* Internal structures of the topology layer: the facts each source gathers and the model built from them.
 * Sources: sysfs.c (file access under one root), pci.c (PCI tree, platform), gpu_facts.c (gpus.json and the
 * cache), gpu_query.cu (CUDA runtime), nvml.c (NVLink counts), measure.cu (figures). The model (model.c) is a
 * pure function of the facts. topo.c puts them together behind the public API. */
#ifndef SYMMEM_TOPOLOGY_TOPO_INTERNAL_H
#define SYMMEM_TOPOLOGY_TOPO_INTERNAL_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "symmem/symmem.h"
#include "topology/choice.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TOPO_MAX_GPUS SYMMEM_TOPO_MAX_GPUS
#define TOPO_MAX_CHAIN 16     /* PCI bridges between a host bridge and a GPU */
#define TOPO_MAX_BRIDGES 256  /* distinct bridges on all GPU paths */
#define TOPO_MAX_WARNINGS 48
#define TOPO_WARNING_LEN 512
#define TOPO_BDF_LEN 16       /* "dddd:bb:dd.f" + NUL */
#define TOPO_RECOMMEND_LEN 2048

/* snprintf with the same result, for strings whose truncation is handled or harmless (a truncated path
 * fails to open; a truncated name is still readable). gcc's -Wformat-truncation cannot see that. */
int topo_fmt(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------------------------------------------------
 * sysfs.c: every file of the machine is read through this, relative to one root.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct topo_record topo_record_t; /* list of files read, for capture */

typedef struct topo_sysfs {
    char root[PATH_MAX];      /* as given, without a trailing slash ("" means "/") */
    char root_real[PATH_MAX]; /* realpath of the root, to check that links stay inside it */
    int live;                 /* 1: the root is "/" (this machine) */
    topo_record_t *record;    /* non-NULL while capturing */
} topo_sysfs_t;

/* Open a root (NULL or "": SYMMEM_SYSFS_ROOT, else "/"). SYMMEM_SYSTEM_ERROR if it is not a directory. */
symmem_status_t topo_sysfs_open(topo_sysfs_t *fs, const char *root);
void topo_sysfs_close(topo_sysfs_t *fs);
/* Start recording the paths read (for capture); topo_sysfs_close frees the record. */
symmem_status_t topo_sysfs_record_start(topo_sysfs_t *fs);
/* Copy every recorded file, directory and symlink into dir. */
symmem_status_t topo_sysfs_record_copy(const topo_sysfs_t *fs, const char *dir);
/* Read a whole text file (rel: relative to the root, no leading slash), strip the trailing newline.
 * Returns 0, or -errno (-ENOENT when absent, -EFBIG when it does not fit). Never logs: callers decide
 * whether absence matters. */
int topo_sysfs_read_text(topo_sysfs_t *fs, const char *rel, char *buf, size_t len);
/* Read up to len bytes of a binary file; returns the byte count or -errno. */
long topo_sysfs_read_bin(topo_sysfs_t *fs, const char *rel, unsigned char *buf, size_t len);
/* Resolve symlinks of rel into a canonical path relative to the root. -ENOENT for a dangling link, -EXDEV
 * when it leaves the root. */
int topo_sysfs_resolve(topo_sysfs_t *fs, const char *rel, char *out, size_t len);
/* Names in a directory, sorted, without "." and "..". *names is one malloc'd block of NUL-separated names
 * (free it); returns the count or -errno. */
int topo_sysfs_list(topo_sysfs_t *fs, const char *rel, char **names);
/* The path as it would be opened (root + rel), for messages about the root itself. */
void topo_sysfs_path(const topo_sysfs_t *fs, const char *rel, char *out, size_t len);
/* The path as the machine names it ("/" + rel), for notes about one file: the same on a live machine and in
 * its captured tree, so golden outputs do not depend on where the tree lies. */
void topo_sysfs_show(const char *rel, char *out, size_t len);

/* ---------------------------------------------------------------------------------------------------------
 * pci.c: facts from the PCI tree and the platform.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct topo_bridge {
    char bdf[TOPO_BDF_LEN];
    int depth;          /* 0: root port (directly under the host bridge); >0: switch port */
    int acs_redirect;   /* 1: ACS P2P request/completion redirect or egress control on; 0 off; -1 unknown */
    unsigned acs_ctrl;  /* ACS control register when known */
} topo_bridge_t;

typedef struct topo_pci_gpu {
    char bdf[TOPO_BDF_LEN];
    unsigned vendor, device, class_code;
    char host_bridge[TOPO_BDF_LEN]; /* "dddd:bb" of the pciDDDD:BB directory above it */
    int chain[TOPO_MAX_CHAIN];      /* indices into bridges[], from the root port down */
    int nchain;
    int numa_node;                  /* -1 unknown */
    char cpulist[256];
    int link_gen, link_width, max_gen, max_width;
    char iommu_type[24];            /* iommu group type ("identity", "DMA", "DMA-FQ"); "" unknown */
} topo_pci_gpu_t;

typedef enum topo_iommu_mode {
    TOPO_IOMMU_UNKNOWN = 0,
    TOPO_IOMMU_OFF = 1,         /* no IOMMU registered with the kernel */
    TOPO_IOMMU_PASSTHROUGH = 2, /* identity mapping for devices (iommu=pt): P2P not translated */
    TOPO_IOMMU_TRANSLATED = 3,  /* DMA translation on: P2P goes through the IOMMU */
} topo_iommu_mode_t;

typedef struct topo_pci_facts {
    int ndevices;              /* entries of /sys/bus/pci/devices */
    int ngpus;
    topo_pci_gpu_t gpus[TOPO_MAX_GPUS];
    int nbridges;
    topo_bridge_t bridges[TOPO_MAX_BRIDGES];
    char driver_version[32];   /* /sys/module/nvidia/version; "" unknown */
    char numa_online[64];      /* /sys/devices/system/node/online; "" unknown */
    topo_iommu_mode_t iommu;
    char iommu_why[160];       /* what the mode was inferred from */
    int nnotes;                /* problems met while parsing (malformed or unreadable files) */
    char notes[TOPO_MAX_WARNINGS][TOPO_WARNING_LEN];
} topo_pci_facts_t;

/* Read the PCI tree and platform under fs. SYMMEM_SYSTEM_ERROR only when the PCI device list itself
 * cannot be read; a malformed file of one device is a note, and the device is skipped or the fact unknown. */
symmem_status_t topo_pci_read(topo_sysfs_t *fs, topo_pci_facts_t *facts);
/* Parse ACS control out of a config-space image (exported for tests). Returns 1 redirect, 0 off (or no ACS
 * capability: the bridge cannot redirect), -1 unknown (the image stops before the list ends, as it does when
 * read without root, or the list is corrupt); *ctrl gets the register (0 without the capability). */
int topo_pci_parse_acs(const unsigned char *cfg, long len, unsigned *ctrl);
/* Normalise "0000:17:00.0" / "00000000:17:00.0" (any case) to "0000:17:00.0"; 0 on success. */
int topo_bdf_normalise(const char *in, char out[TOPO_BDF_LEN]);

/* ---------------------------------------------------------------------------------------------------------
 * GPU facts: from CUDA (gpu_query.cu + nvml.c) or from gpus.json (gpu_facts.c).
 * ------------------------------------------------------------------------------------------------------- */
typedef struct topo_gpu_fact {
    char name[96];
    char bus_id[TOPO_BDF_LEN];
    int cc_major, cc_minor;
    uint64_t memory_bytes;
    int sm_count;
} topo_gpu_fact_t;

typedef struct topo_gpu_facts {
    int present;                  /* 0: no GPU facts (PCI tree only) */
    char source[16];              /* "cuda", "file" or "none" */
    int ngpus;
    topo_gpu_fact_t gpus[TOPO_MAX_GPUS];
    int p2p[TOPO_MAX_GPUS][TOPO_MAX_GPUS];      /* -1 unknown */
    int atomics[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    int perf_rank[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    int nvlinks[TOPO_MAX_GPUS][TOPO_MAX_GPUS];  /* -1 unknown */
    int cuda_driver_version;      /* cudaDriverGetVersion, 0 unknown */
    char driver_version[32];      /* NVML / gpus.json; "" unknown */
    char note[TOPO_WARNING_LEN];  /* why there are no GPU facts, "" otherwise */
} topo_gpu_facts_t;

/* Measured figures; every value negative until measured. Pair [i][j]: GPU i acting on GPU j's memory. */
typedef struct topo_measure {
    int measured;                 /* 1: some figures present */
    int quick;                    /* 1: latency only */
    int ngpus;
    double read_gbs[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    double write_gbs[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    double ce_gbs[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    double latency_us[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    int check_failed[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    double host_read_gbs[TOPO_MAX_GPUS], host_write_gbs[TOPO_MAX_GPUS];
    double host_h2d_gbs[TOPO_MAX_GPUS], host_d2h_gbs[TOPO_MAX_GPUS], host_latency_us[TOPO_MAX_GPUS];
    double ring_read_gbs[TOPO_MAX_GPUS], ring_write_gbs[TOPO_MAX_GPUS];
} topo_measure_t;

void topo_measure_clear(topo_measure_t *m);
/* Empty facts: no GPUs, every pair attribute -1 (unknown). */
void topo_gpu_facts_reset(topo_gpu_facts_t *f);

/* CUDA runtime facts of every visible GPU. No driver or no device: SYMMEM_OK with present = 0 and a note. */
symmem_status_t topo_gpu_query(topo_gpu_facts_t *facts);
/* NVLink link counts per pair through NVML loaded with dlopen; leaves -1 when NVML is absent. Returns 1
 * when NVML answered. */
int topo_nvml_nvlinks(topo_gpu_facts_t *facts);
/* NVLink counts between GPUs named by PCI bus id (no CUDA needed; GPUs may be hidden from this process):
 * links[i * n + j]. Returns 1 if NVML answered, 0 otherwise (links untouched). Used by communicator init. */
int topo_nvml_links_by_bus(const char *const *bus_ids, int n, int *links);
/* Measure every figure (quick: latency only); numa_nodes[i] is GPU i's NUMA node (-1 unknown) for the
 * pinned host buffers. SYMMEM_CUDA_ERROR when something fails to run or never completes. */
symmem_status_t topo_measure_run(const topo_gpu_facts_t *facts, const int *numa_nodes, const char *const *cpulists,
                                 int quick, topo_measure_t *m);

/* gpus.json: the GPU facts and figures of a captured tree; also the cache format. */
symmem_status_t topo_gpu_facts_write(FILE *out, const topo_gpu_facts_t *facts, const topo_measure_t *m,
                                     const char *fingerprint);
/* Parse; `what` names the file for messages. *fingerprint gets the file's fingerprint ("" if none). */
symmem_status_t topo_gpu_facts_parse(const char *text, const char *what, topo_gpu_facts_t *facts,
                                     topo_measure_t *m, char fingerprint[17]);

/* ---------------------------------------------------------------------------------------------------------
 * model.c: a pure function of the facts.
 * ------------------------------------------------------------------------------------------------------- */
typedef struct topo_model {
    char driver_version[32];      /* sysfs module version, else what the GPU facts say; "" unknown */
    int ngpus;
    int gpu_pci[TOPO_MAX_GPUS];   /* index into pci facts, -1 not in the PCI tree */
    symmem_topo_gpu_info_t gpus[TOPO_MAX_GPUS];
    symmem_topo_pair_info_t pairs[TOPO_MAX_GPUS][TOPO_MAX_GPUS];
    int measured;
    int nwarnings;
    char warnings[TOPO_MAX_WARNINGS][TOPO_WARNING_LEN];
    symmem_topo_advice_t advice;
    topo_table_t table;           /* the algorithm table a communicator over all the GPUs starts with */
    char recommendation[TOPO_RECOMMEND_LEN];
    char fingerprint[17];
} topo_model_t;

/* Build the model. gpu may have present = 0 (PCI tree only); m may be NULL. */
void topo_model_build(const topo_pci_facts_t *pci, const topo_gpu_facts_t *gpu, const topo_measure_t *m,
                      topo_model_t *model);
/* Path class between two GPUs of the PCI tree, ignoring NVLink. *acs gets the ACS state of the switch ports
 * the path turns around in (1, 0, -1 unknown). Exported for tests. */
symmem_topo_class_t topo_model_pci_class(const topo_pci_facts_t *pci, int a, int b, int *acs);
/* The fingerprint alone (fills model->fingerprint from the model's GPUs and pairs). */
void topo_model_fingerprint(const topo_pci_facts_t *pci, topo_model_t *model);
/* Estimated figures for a pair from its class and links alone (docs/topology.md has the table). */
void topo_model_estimate(const symmem_topo_pair_info_t *p, double *read_gbs, double *write_gbs, double *latency_us);
/* How GPU i reaches GPU j (topo_link_of on the pair's facts): what symmem_topo_pair_link returns. */
symmem_link_t topo_model_pair_link(const topo_model_t *model, int i, int j);
/* advice.c: fill model->advice, model->table and model->recommendation with topo_choose (called by build). */
void topo_advice_build(topo_model_t *model);
/* Add a warning (printf-style); silently drops past TOPO_MAX_WARNINGS. */
void topo_model_warn(topo_model_t *model, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The handle behind symmem_topo_t. */
struct symmem_topo {
    int live;
    char measure_source[24];      /* "now", "cache", "gpus.json" or "" (not measured) */
    topo_pci_facts_t pci;
    topo_gpu_facts_t gpu;
    topo_measure_t measure;
    topo_model_t model;
};

/* topo.c: the measurement cache, <dir>/topo-<fingerprint>.json in the gpus.json format (topology/cache.h
 * says which folders are used). Load: 1 when an entry with the fingerprint and at least the figures asked
 * for (all of them unless quick) was read into m. Store: t's facts and figures, written whole (a fresh file
 * renamed into place); a failure is warned about, never an error. */
int topo_cache_load(const char *dir, const struct symmem_topo *t, int quick, topo_measure_t *m);
void topo_cache_store(const char *dir, const struct symmem_topo *t);

/* report.c */
symmem_status_t topo_report_text(const struct symmem_topo *t, FILE *out);
symmem_status_t topo_report_json(const struct symmem_topo *t, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
