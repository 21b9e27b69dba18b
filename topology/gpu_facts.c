/* gpus.json: the GPU facts (and measured figures) of a machine, written by capture next to its sysfs files
 * and read back when the tree is replayed. The measurement cache uses the same format plus a fingerprint.
 * Schema "symmem-gpus/1", documented in docs/topology.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "symmem/topo.h"
#include "topology/json.h"
#include "topology/topo_internal.h"

#define GPUS_SCHEMA "symmem-gpus/1"

/* A JSON number as an integer in [lo, hi] (absent or not a number: def). Converting a double outside the
 * target type is undefined behaviour, so the range is checked on the double first; NaN fails every
 * comparison and so is out of range too. Returns -1 with the error recorded. */
static int get_int(const json_value_t *obj, const char *key, double def, double lo, double hi, const char *what,
                   const char *where, int index, long long *out)
{
    double v = json_num(json_get(obj, key), def);
    if (!(v >= lo && v <= hi)) {
        char at[48] = "";
        if (where) topo_fmt(at, sizeof at, "%s[%d].", where, index);
        symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: %s%s = %g is out of range [%.0f, %.0f]", what, at, key, v, lo,
                         hi);
        return -1;
    }
    *out = (long long)v;
    return 0;
}

#define FACT_MAX 1048576.0 /* counts, ranks, links: anything larger is not a real machine */

void topo_measure_clear(topo_measure_t *m)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < TOPO_MAX_GPUS; i++) {
        for (int j = 0; j < TOPO_MAX_GPUS; j++)
            m->read_gbs[i][j] = m->write_gbs[i][j] = m->ce_gbs[i][j] = m->latency_us[i][j] = -1;
        m->host_read_gbs[i] = m->host_write_gbs[i] = m->host_h2d_gbs[i] = m->host_d2h_gbs[i] = -1;
        m->host_latency_us[i] = m->ring_read_gbs[i] = m->ring_write_gbs[i] = -1;
    }
}

static void write_gpu(FILE *out, const topo_gpu_facts_t *f, const topo_measure_t *m, int i)
{
    const topo_gpu_fact_t *g = &f->gpus[i];
    fputs("    {\"name\": ", out);
    json_write_string(out, g->name);
    fputs(", \"bus_id\": ", out);
    json_write_string(out, g->bus_id);
    fprintf(out, ", \"cc_major\": %d, \"cc_minor\": %d, \"memory_bytes\": %llu, \"sm_count\": %d", g->cc_major,
            g->cc_minor, (unsigned long long)g->memory_bytes, g->sm_count);
    if (m && m->measured) {
        const char *names[7] = {"host_read_gbs", "host_write_gbs", "host_h2d_gbs", "host_d2h_gbs",
                                "host_latency_us", "ring_read_gbs", "ring_write_gbs"};
        double vals[7] = {m->host_read_gbs[i], m->host_write_gbs[i], m->host_h2d_gbs[i], m->host_d2h_gbs[i],
                          m->host_latency_us[i], m->ring_read_gbs[i], m->ring_write_gbs[i]};
        for (int k = 0; k < 7; k++) {
            fprintf(out, ", \"%s\": ", names[k]);
            json_write_figure(out, vals[k]);
        }
    }
    fprintf(out, "}%s\n", i + 1 < f->ngpus ? "," : "");
}

static void write_pair(FILE *out, const topo_gpu_facts_t *f, const topo_measure_t *m, int i, int j, int last)
{
    fprintf(out, "    {\"gpu\": %d, \"peer\": %d, \"p2p\": %d, \"atomics\": %d, \"perf_rank\": %d, \"nvlinks\": %d", i,
            j, f->p2p[i][j], f->atomics[i][j], f->perf_rank[i][j], f->nvlinks[i][j]);
    if (m && m->measured) {
        fputs(", \"read_gbs\": ", out);
        json_write_figure(out, m->read_gbs[i][j]);
        fputs(", \"write_gbs\": ", out);
        json_write_figure(out, m->write_gbs[i][j]);
        fputs(", \"ce_gbs\": ", out);
        json_write_figure(out, m->ce_gbs[i][j]);
        fputs(", \"latency_us\": ", out);
        json_write_figure(out, m->latency_us[i][j]);
        fprintf(out, ", \"data_check_failed\": %d", m->check_failed[i][j]);
    }
    fprintf(out, "}%s\n", last ? "" : ",");
}

symmem_status_t topo_gpu_facts_write(FILE *out, const topo_gpu_facts_t *f, const topo_measure_t *m,
                                     const char *fingerprint)
{
    fprintf(out, "{\n  \"schema\": \"%s\",\n", GPUS_SCHEMA);
    if (fingerprint) fprintf(out, "  \"fingerprint\": \"%s\",\n", fingerprint);
    fputs("  \"driver_version\": ", out);
    json_write_string(out, f->driver_version);
    fprintf(out, ",\n  \"cuda_driver_version\": %d,\n", f->cuda_driver_version);
    fprintf(out, "  \"measured\": %s,\n  \"quick\": %s,\n", m && m->measured ? "true" : "false",
            m && m->quick ? "true" : "false");
    fputs("  \"gpus\": [\n", out);
    for (int i = 0; i < f->ngpus; i++) write_gpu(out, f, m, i);
    fputs("  ],\n  \"pairs\": [\n", out);
    int total = f->ngpus * (f->ngpus - 1), k = 0;
    for (int i = 0; i < f->ngpus; i++)
        for (int j = 0; j < f->ngpus; j++)
            if (i != j) write_pair(out, f, m, i, j, ++k == total);
    fputs("  ]\n}\n", out);
    if (ferror(out)) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "writing GPU facts failed (disk full?)");
    return SYMMEM_OK;
}

static symmem_status_t parse_gpus(const json_value_t *arr, const char *what, topo_gpu_facts_t *f, topo_measure_t *m)
{
    if (!arr || arr->type != JSON_ARR)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: \"gpus\" must be an array", what);
    int i = 0;
    for (const json_value_t *g = arr->child; g; g = g->next, i++) {
        if (i >= TOPO_MAX_GPUS)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: more than %d GPUs", what, TOPO_MAX_GPUS);
        topo_gpu_fact_t *d = &f->gpus[i];
        const char *bus = json_str(json_get(g, "bus_id"), "");
        if (topo_bdf_normalise(bus, d->bus_id) != 0)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "%s: gpus[%d].bus_id '%s' is not a PCI address like 0000:17:00.0", what, i, bus);
        topo_fmt(d->name, sizeof d->name, "%s", json_str(json_get(g, "name"), "NVIDIA GPU"));
        long long cc_major, cc_minor, mem, sms;
        if (get_int(g, "cc_major", 0, 0, 1000, what, "gpus", i, &cc_major) ||
            get_int(g, "cc_minor", 0, 0, 1000, what, "gpus", i, &cc_minor) ||
            get_int(g, "memory_bytes", 0, 0, 9.0e18, what, "gpus", i, &mem) ||
            get_int(g, "sm_count", 0, 0, FACT_MAX, what, "gpus", i, &sms))
            return SYMMEM_INVALID_ARGUMENT;
        d->cc_major = (int)cc_major;
        d->cc_minor = (int)cc_minor;
        d->memory_bytes = (uint64_t)mem;
        d->sm_count = (int)sms;
        m->host_read_gbs[i] = json_num(json_get(g, "host_read_gbs"), -1);
        m->host_write_gbs[i] = json_num(json_get(g, "host_write_gbs"), -1);
        m->host_h2d_gbs[i] = json_num(json_get(g, "host_h2d_gbs"), -1);
        m->host_d2h_gbs[i] = json_num(json_get(g, "host_d2h_gbs"), -1);
        m->host_latency_us[i] = json_num(json_get(g, "host_latency_us"), -1);
        m->ring_read_gbs[i] = json_num(json_get(g, "ring_read_gbs"), -1);
        m->ring_write_gbs[i] = json_num(json_get(g, "ring_write_gbs"), -1);
    }
    f->ngpus = i;
    return SYMMEM_OK;
}

static symmem_status_t parse_pairs(const json_value_t *arr, const char *what, topo_gpu_facts_t *f, topo_measure_t *m)
{
    if (!arr) return SYMMEM_OK; /* a capture of one GPU has none */
    if (arr->type != JSON_ARR)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: \"pairs\" must be an array", what);
    int k = 0;
    for (const json_value_t *p = arr->child; p; p = p->next, k++) {
        double di = json_num(json_get(p, "gpu"), -1), dj = json_num(json_get(p, "peer"), -1);
        int i = di >= 0 && di < TOPO_MAX_GPUS ? (int)di : -1, j = dj >= 0 && dj < TOPO_MAX_GPUS ? (int)dj : -1;
        if (i < 0 || j < 0 || i >= f->ngpus || j >= f->ngpus || i == j)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "%s: pairs[%d] names gpu %d and peer %d; both must be distinct indices into "
                                    "\"gpus\" (0..%d)",
                                    what, k, i, j, f->ngpus - 1);
        long long p2p, atomics, perf, nvl, bad;
        if (get_int(p, "p2p", -1, -1, FACT_MAX, what, "pairs", k, &p2p) ||
            get_int(p, "atomics", -1, -1, FACT_MAX, what, "pairs", k, &atomics) ||
            get_int(p, "perf_rank", -1, -1, FACT_MAX, what, "pairs", k, &perf) ||
            get_int(p, "nvlinks", -1, -1, FACT_MAX, what, "pairs", k, &nvl) ||
            get_int(p, "data_check_failed", 0, -1, FACT_MAX, what, "pairs", k, &bad))
            return SYMMEM_INVALID_ARGUMENT;
        f->p2p[i][j] = (int)p2p;
        f->atomics[i][j] = (int)atomics;
        f->perf_rank[i][j] = (int)perf;
        f->nvlinks[i][j] = (int)nvl;
        m->read_gbs[i][j] = json_num(json_get(p, "read_gbs"), -1);
        m->write_gbs[i][j] = json_num(json_get(p, "write_gbs"), -1);
        m->ce_gbs[i][j] = json_num(json_get(p, "ce_gbs"), -1);
        m->latency_us[i][j] = json_num(json_get(p, "latency_us"), -1);
        m->check_failed[i][j] = (int)bad;
    }
    return SYMMEM_OK;
}

void topo_gpu_facts_reset(topo_gpu_facts_t *f)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < TOPO_MAX_GPUS; i++)
        for (int j = 0; j < TOPO_MAX_GPUS; j++) f->p2p[i][j] = f->atomics[i][j] = f->perf_rank[i][j] = f->nvlinks[i][j] = -1;
}

symmem_status_t topo_gpu_facts_parse(const char *text, const char *what, topo_gpu_facts_t *facts,
                                     topo_measure_t *meas, char fingerprint[17])
{
    char err[160];
    json_value_t *root = json_parse(text, err, sizeof err);
    if (!root) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: not valid JSON: %s", what, err);
    symmem_status_t st = SYMMEM_OK;
    topo_gpu_facts_t *f = malloc(sizeof *f);
    topo_measure_t *m = malloc(sizeof *m);
    if (!f || !m) {
        st = symmem_set_error(SYMMEM_OUT_OF_MEMORY, "%s: out of memory", what);
        goto out;
    }
    topo_gpu_facts_reset(f);
    topo_measure_clear(m);
    const char *schema = json_str(json_get(root, "schema"), "");
    if (strcmp(schema, GPUS_SCHEMA) != 0) {
        st = symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: \"schema\" is '%s', expected '%s'", what, schema, GPUS_SCHEMA);
        goto out;
    }
    SYMMEM_CHECK_GOTO(parse_gpus(json_get(root, "gpus"), what, f, m), st, out);
    SYMMEM_CHECK_GOTO(parse_pairs(json_get(root, "pairs"), what, f, m), st, out);
    f->present = f->ngpus > 0;
    topo_fmt(f->source, sizeof f->source, "file");
    topo_fmt(f->driver_version, sizeof f->driver_version, "%s", json_str(json_get(root, "driver_version"), ""));
    long long drv = 0;
    if (get_int(root, "cuda_driver_version", 0, 0, 1.0e9, what, NULL, 0, &drv)) {
        st = SYMMEM_INVALID_ARGUMENT;
        goto out;
    }
    f->cuda_driver_version = (int)drv;
    m->ngpus = f->ngpus;
    m->measured = json_num(json_get(root, "measured"), 0) != 0;
    m->quick = json_num(json_get(root, "quick"), 0) != 0;
    topo_fmt(fingerprint, 17, "%s", json_str(json_get(root, "fingerprint"), ""));
    *facts = *f;
    *meas = *m;
out:
    free(f);
    free(m);
    json_free(root);
    return st;
}
