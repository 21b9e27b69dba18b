/* The two views of a model: the text report `symmem-topo` prints (a table like `nvidia-smi topo -m`, the
 * matrices, warnings, recommendation) and the JSON report (schema "symmem-topo/1", docs/topology.md).
 * Neither prints the root's path or anything else that varies between runs of the same tree, so captured
 * trees give stable golden files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "symmem/topo.h"
#include "topology/json.h"
#include "topology/topo_internal.h"

static const char *iommu_name(topo_iommu_mode_t m)
{
    static const char *const names[] = {"unknown", "off", "passthrough", "translated"};
    return (unsigned)m < 4 ? names[m] : "unknown";
}

static void path_label(const symmem_topo_pair_info_t *p, char *out, size_t len)
{
    if (p->path == SYMMEM_TOPO_NVLINK && p->nvlinks > 0) topo_fmt(out, len, "NV%d", p->nvlinks);
    else topo_fmt(out, len, "%s", symmem_topo_class_name(p->path));
}

static void tri(char *out, size_t len, int v) { topo_fmt(out, len, v < 0 ? "-" : "%d", v); }

/* "Gen5x16/Gen5x16"; ? for a part that is unknown (a VM, a malformed file). */
static void link_label(char *out, size_t len, const symmem_topo_gpu_info_t *g)
{
    char part[4][8];
    int v[4] = {g->pcie_gen, g->pcie_width, g->pcie_max_gen, g->pcie_max_width};
    for (int k = 0; k < 4; k++) topo_fmt(part[k], sizeof part[k], v[k] > 0 ? "%d" : "?", v[k]);
    topo_fmt(out, len, "Gen%sx%s/Gen%sx%s", part[0], part[1], part[2], part[3]);
}

static void text_header(const struct symmem_topo *t, FILE *out)
{
    const topo_model_t *m = &t->model;
    const char *facts = !t->gpu.present ? "none (PCI tree only)"
                        : strcmp(t->gpu.source, "file") == 0 ? "gpus.json of the captured tree"
                                                            : "CUDA runtime";
    fprintf(out, "symmem-topo: %s, NVIDIA driver %s, GPU facts: %s\n", t->live ? "this machine" : "captured tree",
            m->driver_version[0] ? m->driver_version : "unknown", facts);
    if (m->ngpus == 0) {
        fprintf(out, "no GPU found: %s%s%s\n",
                t->pci.ngpus ? "CUDA sees none of the NVIDIA GPUs in the PCI tree" : "no NVIDIA GPU in the PCI tree",
                t->gpu.note[0] ? "; " : "", t->gpu.note);
        return;
    }
    int w = 4;
    for (int i = 0; i < m->ngpus; i++) w = (int)strlen(m->gpus[i].name) > w ? (int)strlen(m->gpus[i].name) : w;
    fprintf(out, "\nGPU  %-*s  %-5s %-10s %-13s %-17s %4s  %s\n", w, "Name", "CC", "Memory", "Bus id", "PCIe now/max",
            "NUMA", "CPU affinity");
    for (int i = 0; i < m->ngpus; i++) {
        const symmem_topo_gpu_info_t *g = &m->gpus[i];
        char cc[16] = "-", mem[24] = "-", pcie[32] = "-";
        if (g->cc_major) topo_fmt(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
        if (g->memory_bytes) topo_fmt(mem, sizeof mem, "%.1f GiB", (double)g->memory_bytes / (1024.0 * 1024 * 1024));
        if (g->pcie_gen || g->pcie_max_gen || g->pcie_width || g->pcie_max_width)
            link_label(pcie, sizeof pcie, g);
        fprintf(out, "%-4d %-*s  %-5s %-10s %-13s %-17s %4d  %s\n", i, w, g->name, cc, mem, g->bus_id, pcie,
                g->numa_node, g->cpulist[0] ? g->cpulist : "-");
    }
}

static void text_columns(const topo_model_t *m, FILE *out, int width)
{
    fprintf(out, "%-7s", "");
    for (int j = 0; j + 1 < m->ngpus; j++) fprintf(out, "GPU%-*d", width - 3, j);
    fprintf(out, "GPU%d\n", m->ngpus - 1);
}

static void text_paths(const topo_model_t *m, FILE *out)
{
    fputs("\nPaths (as nvidia-smi topo -m)\n", out);
    text_columns(m, out, 7);
    for (int i = 0; i < m->ngpus; i++) {
        fprintf(out, "GPU%-4d", i);
        for (int j = 0; j < m->ngpus; j++) {
            char label[16];
            path_label(&m->pairs[i][j], label, sizeof label);
            fprintf(out, "%-*s", j + 1 < m->ngpus ? 7 : 0, label);
        }
        fputc('\n', out);
    }
    fputs("Legend: X self, NV# NVLink with # links (NV: count unknown), PIX one PCIe switch, PXB several PCIe switches,\n"
          "        PHB a PCIe host bridge (CPU), NODE across host bridges of one NUMA node,\n"
          "        SYS across NUMA nodes (socket link), ? not in the PCI tree\n",
          out);
    fputs("\nCUDA P2P: access/native atomics/performance rank (- unknown)\n", out);
    text_columns(m, out, 9);
    for (int i = 0; i < m->ngpus; i++) {
        fprintf(out, "GPU%-4d", i);
        for (int j = 0; j < m->ngpus; j++) {
            const symmem_topo_pair_info_t *p = &m->pairs[i][j];
            char a[8], b[8], c[8], cell[32];
            tri(a, sizeof a, p->p2p_access), tri(b, sizeof b, p->native_atomics), tri(c, sizeof c, p->perf_rank);
            topo_fmt(cell, sizeof cell, "%s/%s/%s", a, b, c);
            fprintf(out, "%-*s", j + 1 < m->ngpus ? 9 : 0, i == j ? "X" : cell);
        }
        fputc('\n', out);
    }
}

/* How many nodes a kernel list ("0", "0-1", "0,2-3") names; -1 if it is not such a list. */
static int numa_count(const char *list)
{
    int count = 0;
    const char *p = list;
    for (;;) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0) return -1;
        if (*end == '-') {
            const char *q = end + 1;
            b = strtol(q, &end, 10);
            if (end == q || b < a) return -1;
        }
        count += (int)(b - a + 1);
        if (*end != ',') return *end == '\0' || *end == '\n' ? count : -1;
        p = end + 1;
    }
}

/* "NUMA nodes: 2 (nodes 0-1)": the count first, so a single node 0 does not read as "zero nodes". */
static void numa_line(const char *list, FILE *out)
{
    int len = (int)strcspn(list, "\n"), n = list[0] ? numa_count(list) : -1;
    if (!list[0]) fputs("  NUMA nodes: unknown\n", out);
    else if (n < 0) fprintf(out, "  NUMA nodes: unknown (online list '%.*s')\n", len, list);
    else fprintf(out, "  NUMA nodes: %d (node%s %.*s)\n", n, n == 1 ? "" : "s", len, list);
}

static void text_platform(const struct symmem_topo *t, FILE *out)
{
    const topo_pci_facts_t *pci = &t->pci;
    int on = 0, unknown = 0;
    for (int b = 0; b < pci->nbridges; b++) {
        on += pci->bridges[b].acs_redirect == 1;
        unknown += pci->bridges[b].acs_redirect < 0;
    }
    fputs("\nPlatform\n", out);
    fprintf(out, "  PCI devices: %d, NVIDIA GPUs among them: %d\n", pci->ndevices, pci->ngpus);
    numa_line(pci->numa_online, out);
    fprintf(out, "  IOMMU: %s%s%s%s\n", iommu_name(pci->iommu), pci->iommu_why[0] ? " (" : "", pci->iommu_why,
            pci->iommu_why[0] ? ")" : "");
    fprintf(out, "  PCI bridges on GPU paths: %d; ACS redirect on %d, off %d, unknown %d%s\n", pci->nbridges, on,
            pci->nbridges - on - unknown, unknown, unknown ? " (config space past 64 bytes needs root)" : "");
}

static void text_matrix(const topo_model_t *m, FILE *out, const char *title, int which)
{
    fprintf(out, "\n%s\n", title);
    text_columns(m, out, 9);
    for (int i = 0; i < m->ngpus; i++) {
        fprintf(out, "GPU%-4d", i);
        for (int j = 0; j < m->ngpus; j++) {
            const symmem_topo_pair_info_t *p = &m->pairs[i][j];
            double v = which == 0 ? p->read_gbs : which == 1 ? p->write_gbs : which == 2 ? p->ce_gbs : p->latency_us;
            char cell[32] = "-";
            if (i == j) topo_fmt(cell, sizeof cell, "X");
            else if (v >= 0) topo_fmt(cell, sizeof cell, "%.*f%s", which == 3 ? 2 : 1, v, p->data_check_failed ? "!" : "");
            fprintf(out, "%-*s", j + 1 < m->ngpus ? 9 : 0, cell);
        }
        fputc('\n', out);
    }
}

static void text_cell(FILE *out, double v, int prec)
{
    if (v < 0) fprintf(out, " %9s", "-");
    else fprintf(out, " %9.*f", prec, v);
}

static void text_measured(const struct symmem_topo *t, FILE *out)
{
    const topo_model_t *m = &t->model;
    if (!m->measured) {
        fputs("\nMeasured: no (run symmem-topo on the machine itself to measure)\n", out);
        return;
    }
    fprintf(out, "\nMeasured: yes (%s%s)\n",
            strcmp(t->measure_source, "now") == 0 ? "just now" : strcmp(t->measure_source, "cache") == 0
                                                                    ? "from the cache; --no-cache measures again"
                                                                    : "from gpus.json",
            t->measure.quick ? "; --quick: latency only" : "");
    text_matrix(m, out, "Peer read GB/s, one pair at a time (row GPU loads from column GPU's memory; ! wrong data)", 0);
    text_matrix(m, out, "Peer write GB/s, one pair at a time (row GPU stores into column GPU's memory)", 1);
    text_matrix(m, out, "Copy engine GB/s (cudaMemcpyPeerAsync from row GPU to column GPU)", 2);
    text_matrix(m, out, "Flag latency, one way, microseconds (ping-pong round trip / 2)", 3);
    fputs("\nHost memory on the GPU's NUMA node, and all GPUs at once (each with GPU index+1 mod n)\n", out);
    fprintf(out, "GPU  %9s %9s %9s %9s %9s %9s %9s\n", "hostrd", "hostwr", "h2d", "d2h", "host_us", "ring_rd",
            "ring_wr");
    for (int i = 0; i < m->ngpus; i++) {
        const symmem_topo_gpu_info_t *g = &m->gpus[i];
        fprintf(out, "%-4d", i);
        text_cell(out, g->host_read_gbs, 1), text_cell(out, g->host_write_gbs, 1);
        text_cell(out, g->host_h2d_gbs, 1), text_cell(out, g->host_d2h_gbs, 1);
        text_cell(out, g->host_latency_us, 2);
        text_cell(out, g->ring_read_gbs, 1), text_cell(out, g->ring_write_gbs, 1);
        fputc('\n', out);
    }
}

symmem_status_t topo_report_text(const struct symmem_topo *t, FILE *out)
{
    const topo_model_t *m = &t->model;
    text_header(t, out);
    if (m->ngpus > 0) {
        text_paths(m, out);
    }
    text_platform(t, out);
    if (m->ngpus > 0) text_measured(t, out);
    fprintf(out, "\nWarnings%s\n", m->nwarnings ? "" : ": none");
    for (int k = 0; k < m->nwarnings; k++) fprintf(out, "  %d. %s\n", k + 1, m->warnings[k]);
    fputs("\nRecommendation\n", out);
    for (const char *line = m->recommendation; *line;) {
        const char *nl = strchr(line, '\n');
        int n = nl ? (int)(nl - line) : (int)strlen(line);
        fprintf(out, "  %.*s\n", n, line);
        line += n + (nl != NULL);
    }
    fprintf(out, "\nFingerprint: %s\n", m->fingerprint);
    if (fflush(out) != 0 || ferror(out)) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "writing the topology report failed");
    return SYMMEM_OK;
}

/* ---------------------------------------------------------------------------------------------------------
 * JSON
 * ------------------------------------------------------------------------------------------------------- */
static void json_gpu(FILE *out, const symmem_topo_gpu_info_t *g, int last)
{
    fprintf(out, "    {\"index\": %d, \"name\": ", g->index);
    json_write_string(out, g->name);
    fputs(", \"bus_id\": ", out);
    json_write_string(out, g->bus_id);
    fprintf(out, ", \"cc_major\": %d, \"cc_minor\": %d, \"memory_bytes\": %llu, \"sm_count\": %d, \"numa_node\": %d, "
                 "\"cpulist\": ",
            g->cc_major, g->cc_minor, (unsigned long long)g->memory_bytes, g->sm_count, g->numa_node);
    json_write_string(out, g->cpulist);
    fprintf(out, ",\n     \"pcie\": {\"gen\": %d, \"width\": %d, \"max_gen\": %d, \"max_width\": %d}", g->pcie_gen,
            g->pcie_width, g->pcie_max_gen, g->pcie_max_width);
    const char *names[7] = {"host_read_gbs", "host_write_gbs", "host_h2d_gbs", "host_d2h_gbs", "host_latency_us",
                            "ring_read_gbs", "ring_write_gbs"};
    double vals[7] = {g->host_read_gbs, g->host_write_gbs, g->host_h2d_gbs, g->host_d2h_gbs, g->host_latency_us,
                      g->ring_read_gbs, g->ring_write_gbs};
    fputs(",\n     \"measured\": {", out);
    for (int k = 0; k < 7; k++) {
        fprintf(out, "%s\"%s\": ", k ? ", " : "", names[k]);
        json_write_figure(out, vals[k]);
    }
    fprintf(out, "}}%s\n", last ? "" : ",");
}

static void json_pair(FILE *out, const symmem_topo_pair_info_t *p, int i, int j, int last)
{
    char label[16];
    path_label(p, label, sizeof label);
    fprintf(out, "    {\"gpu\": %d, \"peer\": %d, \"path\": \"%s\", \"nvlinks\": %d, \"p2p\": %d, \"atomics\": %d, "
                 "\"perf_rank\": %d, \"acs_redirect\": %d, \"data_check_failed\": %d,\n     \"read_gbs\": ",
            i, j, label, p->nvlinks, p->p2p_access, p->native_atomics, p->perf_rank, p->acs_redirect,
            p->data_check_failed);
    json_write_figure(out, p->read_gbs);
    fputs(", \"write_gbs\": ", out);
    json_write_figure(out, p->write_gbs);
    fputs(", \"ce_gbs\": ", out);
    json_write_figure(out, p->ce_gbs);
    fputs(", \"latency_us\": ", out);
    json_write_figure(out, p->latency_us);
    fprintf(out, "}%s\n", last ? "" : ",");
}

static void json_platform(const struct symmem_topo *t, FILE *out)
{
    const topo_pci_facts_t *pci = &t->pci;
    fprintf(out, "  \"pci_devices\": %d,\n  \"pci_gpus\": %d,\n", pci->ndevices, pci->ngpus);
    fputs("  \"numa_online\": ", out);
    json_write_string(out, pci->numa_online);
    fprintf(out, ",\n  \"iommu\": {\"mode\": \"%s\", \"why\": ", iommu_name(pci->iommu));
    json_write_string(out, pci->iommu_why);
    fputs("},\n  \"bridges\": [", out);
    for (int b = 0; b < pci->nbridges; b++) {
        const topo_bridge_t *br = &pci->bridges[b];
        fprintf(out, "%s\n    {\"bus_id\": \"%s\", \"depth\": %d, \"acs_redirect\": %d, \"acs_ctrl\": %u}", b ? "," : "",
                br->bdf, br->depth, br->acs_redirect, br->acs_ctrl);
    }
    fputs(pci->nbridges ? "\n  ],\n" : "],\n", out);
}

static void json_advice(const topo_model_t *m, FILE *out)
{
    const symmem_topo_advice_t *a = &m->advice;
    static const char *const placements[] = {"default", "auto", "device", "host_numa"};
    fprintf(out, "  \"recommendation\": {\"direction\": \"%s\", \"staged\": %s, \"placement\": \"%s\", \"islands\": %d, "
                 "\"measured\": %s,\n    \"text\": ",
            a->direction == SYMMEM_TOPO_PUSH ? "push" : "pull", a->staged ? "true" : "false",
            (unsigned)a->placement < 4 ? placements[a->placement] : "?", a->islands, a->measured ? "true" : "false");
    json_write_string(out, m->recommendation);
    fputs(",\n    \"table\": [", out);
    for (int i = 0; i < m->table.nrules; i++) {
        const topo_rule_t *r = &m->table.rules[i];
        fprintf(out, "%s\n      {\"op\": \"%s\", \"max_bytes\": ", i ? "," : "",
                symmem_coll_kind_name((symmem_coll_kind_t)r->kind));
        if (r->max_bytes == SIZE_MAX) fputs("null", out);
        else fprintf(out, "%zu", r->max_bytes);
        fprintf(out, ", \"algo\": \"%s\"}", symmem_algo_name(r->algo));
    }
    fputs(m->table.nrules ? "\n    ]},\n" : "]},\n", out);
}

symmem_status_t topo_report_json(const struct symmem_topo *t, FILE *out)
{
    const topo_model_t *m = &t->model;
    fprintf(out, "{\n  \"schema\": \"symmem-topo/1\",\n  \"source\": \"%s\",\n  \"gpu_facts\": \"%s\",\n",
            t->live ? "live" : "captured", t->gpu.present ? t->gpu.source : "none");
    fputs("  \"driver_version\": ", out);
    json_write_string(out, m->driver_version);
    fprintf(out, ",\n  \"fingerprint\": \"%s\",\n  \"measured\": %s,\n  \"measured_source\": \"%s\",\n", m->fingerprint,
            m->measured ? "true" : "false", m->measured ? t->measure_source : "");
    json_platform(t, out);
    fputs("  \"gpus\": [\n", out);
    for (int i = 0; i < m->ngpus; i++) json_gpu(out, &m->gpus[i], i + 1 == m->ngpus);
    fputs("  ],\n  \"pairs\": [\n", out);
    int total = m->ngpus * (m->ngpus - 1), k = 0;
    for (int i = 0; i < m->ngpus; i++)
        for (int j = 0; j < m->ngpus; j++)
            if (i != j) json_pair(out, &m->pairs[i][j], i, j, ++k == total);
    fputs("  ],\n  \"warnings\": [", out);
    for (int w = 0; w < m->nwarnings; w++) {
        fputs(w ? ",\n    " : "\n    ", out);
        json_write_string(out, m->warnings[w]);
    }
    fputs(m->nwarnings ? "\n  ],\n" : "],\n", out);
    json_advice(m, out);
    fputs("  \"no_gpu\": ", out);
    fputs(m->ngpus == 0 ? "true\n}\n" : "false\n}\n", out);
    if (fflush(out) != 0 || ferror(out)) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "writing the topology JSON failed");
    return SYMMEM_OK;
}
