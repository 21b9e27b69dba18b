/* The topology model: a pure function from the facts (PCI tree, platform, GPU facts, measured figures) to
 * per-pair path classes, plain-language warnings, a fingerprint, and (advice.c) the recommendation. No I/O
 * and no CUDA here, so the model is tested on synthetic facts and captured trees alike. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/hash.h"
#include "symmem/topo.h"
#include "topology/ranks.h"
#include "topology/topo_internal.h"

const char *symmem_topo_class_name(symmem_topo_class_t cls)
{
    switch (cls) {
#define SYMMEM_TOPO_CLASS_NAME_(name, value, text)                                                         \
    case SYMMEM_TOPO_##name:                                                                               \
        return text;
        SYMMEM_TOPO_CLASS_LIST(SYMMEM_TOPO_CLASS_NAME_)
#undef SYMMEM_TOPO_CLASS_NAME_
    default:
        return "?";
    }
}

void topo_model_warn(topo_model_t *model, const char *fmt, ...)
{
    if (model->nwarnings >= TOPO_MAX_WARNINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(model->warnings[model->nwarnings++], TOPO_WARNING_LEN, fmt, ap);
    va_end(ap);
}

/* ACS state of the switch ports below the common ancestor: the ingress ports where a redirect decision is
 * made. 1 if any redirects, else -1 if any is unknown, else 0. */
static int acs_below(const topo_pci_facts_t *pci, const topo_pci_gpu_t *g, int common)
{
    int acs = 0;
    for (int k = common; k < g->nchain; k++) {
        int a = pci->bridges[g->chain[k]].acs_redirect;
        if (a == 1) return 1;
        if (a < 0) acs = -1;
    }
    return acs;
}

symmem_topo_class_t topo_model_pci_class(const topo_pci_facts_t *pci, int a, int b, int *acs)
{
    const topo_pci_gpu_t *ga = &pci->gpus[a], *gb = &pci->gpus[b];
    *acs = 0;
    if (a == b) return SYMMEM_TOPO_SELF;
    if (strcmp(ga->host_bridge, gb->host_bridge) != 0) {
        /* Different root complexes: across sockets when both NUMA nodes are known and differ. A VM's -1
         * cannot tell, and NODE is the optimistic reading that nvidia-smi shows there too. */
        if (ga->numa_node >= 0 && gb->numa_node >= 0 && ga->numa_node != gb->numa_node) return SYMMEM_TOPO_SYS;
        return SYMMEM_TOPO_NODE;
    }
    int common = 0;
    while (common < ga->nchain && common < gb->nchain && ga->chain[common] == gb->chain[common]) common++;
    if (common == 0) return SYMMEM_TOPO_PHB; /* separate root ports: the root complex turns the traffic */
    int sa = acs_below(pci, ga, common), sb = acs_below(pci, gb, common);
    *acs = (sa == 1 || sb == 1) ? 1 : (sa < 0 || sb < 0) ? -1 : 0;
    /* One switch is an upstream port (the common ancestor) and one downstream port per side. */
    return (ga->nchain - common <= 1 && gb->nchain - common <= 1) ? SYMMEM_TOPO_PIX : SYMMEM_TOPO_PXB;
}

static void fill_gpu_from_pci(const topo_pci_gpu_t *p, symmem_topo_gpu_info_t *g)
{
    topo_fmt(g->bus_id, sizeof g->bus_id, "%s", p->bdf);
    g->numa_node = p->numa_node;
    topo_fmt(g->cpulist, sizeof g->cpulist, "%s", p->cpulist);
    g->pcie_gen = p->link_gen;
    g->pcie_width = p->link_width;
    g->pcie_max_gen = p->max_gen;
    g->pcie_max_width = p->max_width;
}

static void fill_gpu_measured(const topo_measure_t *m, int i, symmem_topo_gpu_info_t *g)
{
    int ok = m && m->measured;
    g->host_read_gbs = ok ? m->host_read_gbs[i] : -1;
    g->host_write_gbs = ok ? m->host_write_gbs[i] : -1;
    g->host_h2d_gbs = ok ? m->host_h2d_gbs[i] : -1;
    g->host_d2h_gbs = ok ? m->host_d2h_gbs[i] : -1;
    g->host_latency_us = ok ? m->host_latency_us[i] : -1;
    g->ring_read_gbs = ok ? m->ring_read_gbs[i] : -1;
    g->ring_write_gbs = ok ? m->ring_write_gbs[i] : -1;
}

/* The model's GPUs: CUDA's (or gpus.json's) in their order when known, matched to the PCI tree by bus id;
 * else the PCI tree's GPUs in bus order. */
static void build_gpus(const topo_pci_facts_t *pci, const topo_gpu_facts_t *gf, const topo_measure_t *m,
                       topo_model_t *model)
{
    int from_facts = gf && gf->present;
    model->ngpus = from_facts ? gf->ngpus : pci->ngpus;
    for (int i = 0; i < model->ngpus; i++) {
        symmem_topo_gpu_info_t *g = &model->gpus[i];
        memset(g, 0, sizeof *g);
        g->index = i;
        g->numa_node = -1;
        model->gpu_pci[i] = from_facts ? -1 : i;
        if (from_facts) {
            const topo_gpu_fact_t *f = &gf->gpus[i];
            topo_fmt(g->name, sizeof g->name, "%s", f->name);
            topo_fmt(g->bus_id, sizeof g->bus_id, "%s", f->bus_id);
            g->cc_major = f->cc_major;
            g->cc_minor = f->cc_minor;
            g->memory_bytes = f->memory_bytes;
            g->sm_count = f->sm_count;
            for (int k = 0; k < pci->ngpus; k++)
                if (strcmp(pci->gpus[k].bdf, f->bus_id) == 0) model->gpu_pci[i] = k;
        } else {
            topo_fmt(g->name, sizeof g->name, "NVIDIA %04x:%04x", pci->gpus[i].vendor, pci->gpus[i].device);
        }
        if (model->gpu_pci[i] >= 0) fill_gpu_from_pci(&pci->gpus[model->gpu_pci[i]], g);
        fill_gpu_measured(m, i, g);
    }
}

static void fill_pair_measured(const topo_measure_t *m, int i, int j, symmem_topo_pair_info_t *p)
{
    int ok = m && m->measured && i != j;
    p->read_gbs = ok ? m->read_gbs[i][j] : -1;
    p->write_gbs = ok ? m->write_gbs[i][j] : -1;
    p->ce_gbs = ok ? m->ce_gbs[i][j] : -1;
    p->latency_us = ok ? m->latency_us[i][j] : -1;
    p->data_check_failed = ok ? m->check_failed[i][j] : 0;
}

static void build_pair(const topo_pci_facts_t *pci, const topo_gpu_facts_t *gf, const topo_measure_t *m,
                       topo_model_t *model, int i, int j)
{
    symmem_topo_pair_info_t *p = &model->pairs[i][j];
    int pi = model->gpu_pci[i], pj = model->gpu_pci[j], facts = gf && gf->present;
    memset(p, 0, sizeof *p);
    p->acs_redirect = 0;
    if (i == j) p->path = SYMMEM_TOPO_SELF;
    else if (pi < 0 || pj < 0) p->path = SYMMEM_TOPO_UNKNOWN, p->acs_redirect = -1;
    else p->path = topo_model_pci_class(pci, pi, pj, &p->acs_redirect);
    p->nvlinks = facts ? gf->nvlinks[i][j] : -1;
    p->p2p_access = facts ? gf->p2p[i][j] : -1;
    p->native_atomics = facts ? gf->atomics[i][j] : -1;
    p->perf_rank = facts ? gf->perf_rank[i][j] : -1;
    if (i == j) p->nvlinks = 0, p->p2p_access = 1, p->native_atomics = 1, p->perf_rank = 0;
    if (i != j && p->nvlinks > 0) p->path = SYMMEM_TOPO_NVLINK, p->acs_redirect = 0;
    /* Without NVML: CUDA reports native peer atomics over NVLink, and a PCIe path through a host bridge does
     * not route peer atomics, so that combination means NVLink of unknown width. */
    if (i != j && p->nvlinks < 0 && p->native_atomics == 1 && p->path >= SYMMEM_TOPO_PHB)
        p->path = SYMMEM_TOPO_NVLINK, p->acs_redirect = 0;
    fill_pair_measured(m, i, j, p);
}

symmem_link_t topo_model_pair_link(const topo_model_t *model, int i, int j)
{
    const symmem_topo_pair_info_t *p = &model->pairs[i][j];
    /* P2P reported or unknown counts as reachable: the runtime checks it when it maps */
    return topo_link_of(i == j, !(p->p2p_access == 0 || p->data_check_failed), p->path == SYMMEM_TOPO_NVLINK);
}

void topo_model_estimate(const symmem_topo_pair_info_t *p, double *read_gbs, double *write_gbs, double *latency_us)
{
    /* Rough figures for choosing before anything is measured (see docs/topology.md): ~20 GB/s per NVLink 4
     * link as NCCL models it, PCIe 5.0 x16 SM-load figures from published boxes, and one-way flag latencies. */
    static const double bw[SYMMEM_TOPO_CLASS_COUNT] = {1000, 0, 50, 45, 40, 35, 20, 10};
    static const double lat[SYMMEM_TOPO_CLASS_COUNT] = {0.5, 1.0, 1.2, 1.5, 1.8, 2.2, 3.0, 5.0};
    int c = (p->path >= 0 && p->path < SYMMEM_TOPO_CLASS_COUNT) ? (int)p->path : SYMMEM_TOPO_UNKNOWN;
    double b = c == SYMMEM_TOPO_NVLINK ? (p->nvlinks > 0 ? 20.0 * p->nvlinks : 100.0) : bw[c];
    if (c != SYMMEM_TOPO_SELF && (p->p2p_access == 0 || p->data_check_failed)) b = 10, c = SYMMEM_TOPO_UNKNOWN;
    *read_gbs = *write_gbs = b;
    *latency_us = lat[c];
}

void topo_model_fingerprint(const topo_pci_facts_t *pci, topo_model_t *model)
{
    uint64_t h = SYMMEM_FNV64_INIT;
    char buf[64];
    h = symmem_fnv64_str(h, "symmem-topo/1");
    h = symmem_fnv64_str(h, model->driver_version);
    for (int i = 0; i < model->ngpus; i++) {
        h = symmem_fnv64_str(h, model->gpus[i].name);
        h = symmem_fnv64_str(h, model->gpus[i].bus_id);
        for (int j = 0; j < model->ngpus; j++) {
            topo_fmt(buf, sizeof buf, "%d/%d", (int)model->pairs[i][j].path, model->pairs[i][j].nvlinks);
            h = symmem_fnv64_str(h, buf);
        }
    }
    /* The platform settings change measured figures without changing the tree, so they invalidate too. */
    topo_fmt(buf, sizeof buf, "iommu=%d", (int)pci->iommu);
    h = symmem_fnv64_str(h, buf);
    for (int b = 0; b < pci->nbridges; b++) {
        topo_fmt(buf, sizeof buf, "%s=%d", pci->bridges[b].bdf, pci->bridges[b].acs_redirect);
        h = symmem_fnv64_str(h, buf);
    }
    topo_fmt(model->fingerprint, sizeof model->fingerprint, "%016llx", (unsigned long long)h);
}

/* 1 when `bridge` is on the path between two GPUs below their common ancestor (where ACS decides). */
static int turns_below(const topo_pci_gpu_t *ga, const topo_pci_gpu_t *gb, int bridge)
{
    int common = 0, on = 0;
    while (common < ga->nchain && common < gb->nchain && ga->chain[common] == gb->chain[common]) common++;
    for (int k = common; k < ga->nchain; k++) on |= ga->chain[k] == bridge;
    for (int k = common; k < gb->nchain; k++) on |= gb->chain[k] == bridge;
    return on;
}

/* "0 and 1, 2 and 3" for the pairs of GPUs (i < j) whose path turns around at or below switch port `bridge`. */
static int pairs_through(const topo_pci_facts_t *pci, const topo_model_t *model, int bridge, char *out, size_t len)
{
    int count = 0;
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < model->ngpus; i++) {
        for (int j = i + 1; j < model->ngpus; j++) {
            const symmem_topo_pair_info_t *p = &model->pairs[i][j];
            if (p->acs_redirect != 1 || (p->path != SYMMEM_TOPO_PIX && p->path != SYMMEM_TOPO_PXB)) continue;
            if (!turns_below(&pci->gpus[model->gpu_pci[i]], &pci->gpus[model->gpu_pci[j]], bridge)) continue;
            if (used < len) used += (size_t)topo_fmt(out + used, len - used, "%s%d and %d", count ? ", " : "", i, j);
            count++;
        }
    }
    return count;
}

static void warn_acs(const topo_pci_facts_t *pci, topo_model_t *model)
{
    char pairs[256];
    for (int b = 0; b < pci->nbridges; b++) {
        const topo_bridge_t *br = &pci->bridges[b];
        if (br->acs_redirect != 1 || pairs_through(pci, model, b, pairs, sizeof pairs) == 0) continue;
        topo_model_warn(model,
                        "ACS redirect is on at PCIe switch port %s (ACS control 0x%04x): traffic between GPUs %s "
                        "goes up to the CPU's root complex instead of turning around in the switch, which costs "
                        "bandwidth and latency, and with the IOMMU translating can hang P2P. To change: disable "
                        "ACS in the BIOS (often 'PCIe ACS Control'), or for this boot run "
                        "'sudo setpci -s %s ECAP_ACS+0x6.w=0000'.",
                        br->bdf, br->acs_ctrl, pairs, br->bdf);
    }
    int unknown = 0;
    for (int i = 0; i < model->ngpus; i++)
        for (int j = i + 1; j < model->ngpus; j++) unknown |= model->pairs[i][j].acs_redirect < 0 &&
                                                              model->pairs[i][j].path != SYMMEM_TOPO_UNKNOWN;
    if (unknown)
        topo_model_warn(model, "ACS state of the PCIe switch ports between GPUs is unknown: reading the PCI "
                               "extended config space needs root. Run symmem-topo as root to check for ACS "
                               "redirection.");
}

static void warn_platform(const topo_pci_facts_t *pci, topo_model_t *model)
{
    warn_acs(pci, model);
    if (pci->iommu == TOPO_IOMMU_TRANSLATED && model->ngpus >= 2)
        topo_model_warn(model,
                        "The IOMMU translates device DMA (%s): P2P traffic between GPUs goes through IOMMU "
                        "translation and, with ACS, through the root complex; on some platforms P2P then hangs or "
                        "slows down. Unless this machine needs DMA isolation (VFIO passthrough), boot with iommu=pt "
                        "(Intel: intel_iommu=on iommu=pt; AMD: iommu=pt) or disable the IOMMU in the BIOS.",
                        pci->iommu_why);
}

static void warn_pairs(topo_model_t *model)
{
    int inferred = 0;
    for (int i = 0; i < model->ngpus; i++) {
        for (int j = 0; j < model->ngpus; j++) {
            const symmem_topo_pair_info_t *p = &model->pairs[i][j];
            if (i == j) continue;
            inferred |= p->path == SYMMEM_TOPO_NVLINK && p->nvlinks < 0;
            if (p->data_check_failed)
                topo_model_warn(model,
                                "GPU %d -> GPU %d: a measured transfer returned wrong data although the driver "
                                "reports P2P; symmem will not use P2P for this pair. This is typically ACS or IOMMU "
                                "redirection (see the other warnings).",
                                i, j);
            if (i < j && p->p2p_access == 0)
                topo_model_warn(model,
                                "GPUs %d and %d cannot access each other's memory (CUDA P2P unsupported over %s): "
                                "their traffic goes through pinned host memory.",
                                i, j, symmem_topo_class_name(p->path));
        }
    }
    if (inferred)
        topo_model_warn(model, "NVLink link counts unknown (NVML not available): NVLink was inferred from native "
                               "peer atomics across a host bridge.");
}

static void warn_unmatched(const topo_pci_facts_t *pci, const topo_gpu_facts_t *gf, topo_model_t *model)
{
    if (!gf || !gf->present) return;
    for (int i = 0; i < model->ngpus; i++)
        if (model->gpu_pci[i] < 0)
            topo_model_warn(model, "GPU %d (%s) was not found in the PCI tree: its paths are unknown ('?').", i,
                            model->gpus[i].bus_id);
    for (int k = 0; k < pci->ngpus; k++) {
        int seen = 0;
        for (int i = 0; i < model->ngpus; i++) seen |= model->gpu_pci[i] == k;
        if (!seen)
            topo_model_warn(model, "GPU %s in the PCI tree is not visible to CUDA (CUDA_VISIBLE_DEVICES?): left out.",
                            pci->gpus[k].bdf);
    }
}

void topo_model_build(const topo_pci_facts_t *pci, const topo_gpu_facts_t *gpu, const topo_measure_t *m,
                      topo_model_t *model)
{
    memset(model, 0, sizeof *model);
    topo_fmt(model->driver_version, sizeof model->driver_version, "%s",
             pci->driver_version[0] || !gpu ? pci->driver_version : gpu->driver_version);
    build_gpus(pci, gpu, m, model);
    for (int i = 0; i < model->ngpus; i++)
        for (int j = 0; j < model->ngpus; j++) build_pair(pci, gpu, m, model, i, j);
    model->measured = m && m->measured;
    for (int k = 0; k < pci->nnotes; k++) topo_model_warn(model, "%s", pci->notes[k]);
    warn_unmatched(pci, gpu, model);
    warn_platform(pci, model);
    warn_pairs(model);
    topo_model_fingerprint(pci, model);
    topo_advice_build(model);
}
