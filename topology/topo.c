/* The public topology API: discovery (sources -> model), the measurement cache, getters and capture. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "topology/cache.h"
#include "base/param.h"
#include "base/safe_file.h"
#include "base/status.h"
#include "symmem/topo.h"
#include "topology/topo_internal.h"

#define GPUS_JSON "gpus.json"
#define GPUS_JSON_MAX (4u << 20)

void symmem_topo_options_init(symmem_topo_options_t *opts)
{
    symmem_topo_options_t init = SYMMEM_TOPO_OPTIONS_INIT;
    *opts = init;
}

static symmem_status_t options_take(const symmem_topo_options_t *in, symmem_topo_options_t *o)
{
    symmem_topo_options_init(o);
    if (!in) return SYMMEM_OK;
    if (in->magic != SYMMEM_TOPO_OPTIONS_MAGIC || in->size < offsetof(symmem_topo_options_t, cache_dir) + sizeof(char *))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_topo_discover: options not initialised (start "
                                                         "from SYMMEM_TOPO_OPTIONS_INIT or symmem_topo_options_init)");
    memcpy(o, in, in->size < sizeof *o ? in->size : sizeof *o);
    if ((unsigned)o->gpu_source > SYMMEM_TOPO_GPUS_NONE)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_topo_discover: gpu_source %d is not a "
                                                         "symmem_topo_gpu_source_t", (int)o->gpu_source);
    return SYMMEM_OK;
}

/* Read a whole file under the root into a malloc'd string. */
static symmem_status_t read_whole(topo_sysfs_t *fs, const char *rel, char **text)
{
    char path[PATH_MAX];
    topo_sysfs_path(fs, rel, path, sizeof path);
    char *buf = malloc(GPUS_JSON_MAX + 1);
    if (!buf) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "reading %s: out of memory", path);
    long n = topo_sysfs_read_bin(fs, rel, (unsigned char *)buf, GPUS_JSON_MAX + 1);
    if (n < 0 || n > (long)GPUS_JSON_MAX) {
        free(buf);
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "cannot read %s: %s", path,
                                n < 0 ? strerror((int)-n) : "larger than 4 MiB");
    }
    buf[n] = '\0';
    *text = buf;
    return SYMMEM_OK;
}

static symmem_status_t load_gpu_file(topo_sysfs_t *fs, struct symmem_topo *t)
{
    char *text = NULL, path[PATH_MAX], fp[17];
    SYMMEM_CHECK(read_whole(fs, GPUS_JSON, &text));
    topo_sysfs_path(fs, GPUS_JSON, path, sizeof path);
    symmem_status_t st = topo_gpu_facts_parse(text, path, &t->gpu, &t->measure, fp);
    free(text);
    return st;
}

static symmem_status_t load_gpus(topo_sysfs_t *fs, const symmem_topo_options_t *o, struct symmem_topo *t)
{
    symmem_topo_gpu_source_t src = o->gpu_source;
    char path[PATH_MAX];
    if (src == SYMMEM_TOPO_GPUS_AUTO) {
        topo_sysfs_path(fs, GPUS_JSON, path, sizeof path);
        src = fs->live ? SYMMEM_TOPO_GPUS_CUDA : access(path, R_OK) == 0 ? SYMMEM_TOPO_GPUS_FILE : SYMMEM_TOPO_GPUS_NONE;
    }
    topo_gpu_facts_reset(&t->gpu);
    topo_fmt(t->gpu.source, sizeof t->gpu.source, "none");
    if (src == SYMMEM_TOPO_GPUS_FILE) return load_gpu_file(fs, t);
    if (src == SYMMEM_TOPO_GPUS_NONE) {
        topo_fmt(t->gpu.note, sizeof t->gpu.note, "no GPU facts (PCI tree only)");
        return SYMMEM_OK;
    }
    SYMMEM_CHECK(topo_gpu_query(&t->gpu));
    if (t->gpu.present && !topo_nvml_nvlinks(&t->gpu))
        SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "NVML not available: NVLink counts unknown");
    return SYMMEM_OK;
}

/* ---------------------------------------------------------------------------------------------------------
 * Cache: <dir>/topo-<fingerprint>.json in the gpus.json format, so measurement runs once per machine.
 * ------------------------------------------------------------------------------------------------------- */
static int cache_dir(const symmem_topo_options_t *o, char *out, size_t len)
{
    if (o->cache_dir && *o->cache_dir) {
        topo_fmt(out, len, "%s", o->cache_dir);
        return 0;
    }
    return symmem_cache_dir(out, len);
}

/* A cache entry serves when it matches the fingerprint and has at least the figures asked for. The folder
 * and the file are untrusted until checked (topology/cache.h, base/safe_file.h): a refused folder is warned
 * about once and not used, a refused file (a link, a FIFO, another user's) is warned about and measured
 * over; a stale or damaged one is simply measured again. */
int topo_cache_load(const char *dir, const struct symmem_topo *t, int quick, topo_measure_t *m)
{
    char real[PATH_MAX - 64], file[PATH_MAX];
    if (symmem_cache_folder(dir, 0, real, sizeof real) != 0) return 0;
    topo_fmt(file, sizeof file, "%s/topo-%s.json", real, t->model.fingerprint);
    char *text;
    size_t len;
    int missing = 0;
    if (symmem_safe_read(file, GPUS_JSON_MAX, &text, &len, &missing) != SYMMEM_OK) {
        if (!missing)
            SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "topology cache not used, measuring: %s", symmem_last_error());
        symmem_clear_error();
        return 0;
    }
    topo_gpu_facts_t *gf = malloc(sizeof *gf);
    char fp[17] = "";
    int ok = gf && topo_gpu_facts_parse(text, file, gf, m, fp) == SYMMEM_OK;
    free(text);
    free(gf);
    if (!ok) symmem_clear_error(); /* a stale or damaged cache is re-measured, not an error */
    ok = ok && strcmp(fp, t->model.fingerprint) == 0 && m->measured && (quick || !m->quick) &&
         m->ngpus == t->model.ngpus;
    SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "topology cache %s: %s", file, ok ? "used" : "not usable, measuring");
    return ok;
}

#define CACHE_LEFTOVER_S 600 /* a temporary file this old is a dead writer's (a store takes milliseconds) */

void topo_cache_store(const char *dir, const struct symmem_topo *t)
{
    char real[PATH_MAX - 64], file[PATH_MAX];
    if (symmem_cache_folder(dir, 1, real, sizeof real) != 0) return; /* warned once */
    topo_fmt(file, sizeof file, "%s/topo-%s.json", real, t->model.fingerprint);
    /* no lock (ranks of one job store the same figures, and replace each other's copy whole): what is old
     * enough cannot be a live store's */
    symmem_safe_clean(file, CACHE_LEFTOVER_S);
    symmem_safe_out_t out;
    symmem_status_t st = symmem_safe_out_open(&out, file, 0644);
    if (st == SYMMEM_OK) {
        st = topo_gpu_facts_write(out.f, &t->gpu, &t->measure, t->model.fingerprint);
        if (st == SYMMEM_OK) st = symmem_safe_out_commit(&out);
        else symmem_safe_out_abort(&out);
    }
    if (st == SYMMEM_OK) return;
    SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "cannot write the topology cache %s (%s): figures will be measured again next "
                "time; set SYMMEM_TOPO_CACHE_DIR to a writable folder of yours", file, symmem_last_error());
    symmem_clear_error();
}

static symmem_status_t measure(const symmem_topo_options_t *o, struct symmem_topo *t)
{
    char dir[PATH_MAX - 64];
    int cached = o->use_cache && cache_dir(o, dir, sizeof dir) == 0;
    if (cached) {
        if (topo_cache_load(dir, t, o->quick, &t->measure)) {
            topo_fmt(t->measure_source, sizeof t->measure_source, "cache");
            return SYMMEM_OK;
        }
    }
    int numa[TOPO_MAX_GPUS];
    const char *cpus[TOPO_MAX_GPUS];
    for (int i = 0; i < t->model.ngpus; i++) numa[i] = t->model.gpus[i].numa_node, cpus[i] = t->model.gpus[i].cpulist;
    topo_measure_clear(&t->measure);
    SYMMEM_CHECK(topo_measure_run(&t->gpu, numa, cpus, o->quick, &t->measure));
    topo_fmt(t->measure_source, sizeof t->measure_source, "now");
    if (cached) topo_cache_store(dir, t);
    return SYMMEM_OK;
}

static symmem_status_t discover_into(topo_sysfs_t *fs, const symmem_topo_options_t *o, struct symmem_topo *t)
{
    t->live = fs->live;
    topo_measure_clear(&t->measure);
    SYMMEM_CHECK(topo_pci_read(fs, &t->pci));
    SYMMEM_CHECK(load_gpus(fs, o, t));
    /* Build once without figures for the fingerprint (the cache key), then again with them. */
    topo_model_build(&t->pci, &t->gpu, NULL, &t->model);
    if (o->measure && strcmp(t->gpu.source, "cuda") == 0 && t->gpu.ngpus > 0) SYMMEM_CHECK(measure(o, t));
    else if (t->measure.measured) topo_fmt(t->measure_source, sizeof t->measure_source, "gpus.json");
    if (t->measure.measured) topo_model_build(&t->pci, &t->gpu, &t->measure, &t->model);
    return SYMMEM_OK;
}

static symmem_status_t discover(const symmem_topo_options_t *opts, const char *capture_dir, symmem_topo_t *out)
{
    symmem_topo_options_t o;
    topo_sysfs_t fs;
    symmem_clear_error();
    if (!out) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_topo_discover: topo is NULL");
    SYMMEM_CHECK(options_take(opts, &o));
    struct symmem_topo *t = calloc(1, sizeof *t);
    if (!t) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "symmem_topo_discover: out of memory");
    symmem_status_t st = topo_sysfs_open(&fs, o.sysfs_root);
    if (st != SYMMEM_OK) goto fail_alloc;
    if (capture_dir) SYMMEM_CHECK_GOTO(topo_sysfs_record_start(&fs), st, fail_fs);
    SYMMEM_CHECK_GOTO(discover_into(&fs, &o, t), st, fail_fs);
    if (capture_dir) SYMMEM_CHECK_GOTO(topo_sysfs_record_copy(&fs, capture_dir), st, fail_fs);
    topo_sysfs_close(&fs);
    *out = t;
    return SYMMEM_OK;
fail_fs:
    topo_sysfs_close(&fs);
fail_alloc:
    free(t);
    return st;
}

symmem_status_t symmem_topo_discover(const symmem_topo_options_t *opts, symmem_topo_t *topo)
{
    return discover(opts, NULL, topo);
}

void symmem_topo_destroy(symmem_topo_t topo) { free(topo); }

symmem_status_t symmem_topo_capture(const symmem_topo_options_t *opts, const char *dir)
{
    symmem_topo_t t = NULL;
    if (!dir || !*dir) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_topo_capture: no directory given");
    SYMMEM_CHECK(discover(opts, dir, &t));
    char path[PATH_MAX];
    topo_fmt(path, sizeof path, "%s/" GPUS_JSON, dir);
    symmem_status_t st = SYMMEM_OK;
    if (t->gpu.present) { /* without GPU facts the replay reads the PCI tree alone, as here */
        FILE *f = fopen(path, "w");
        if (!f) {
            st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "capture: cannot create %s: %s", path, strerror(errno));
        } else {
            st = topo_gpu_facts_write(f, &t->gpu, &t->measure, NULL);
            if (fclose(f) != 0 && st == SYMMEM_OK)
                st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "capture: writing %s failed: %s", path, strerror(errno));
        }
    }
    symmem_topo_destroy(t);
    return st;
}

/* ---------------------------------------------------------------------------------------------------------
 * Getters
 * ------------------------------------------------------------------------------------------------------- */
int symmem_topo_gpu_count(symmem_topo_t topo) { return topo ? topo->model.ngpus : 0; }
int symmem_topo_measured(symmem_topo_t topo) { return topo ? topo->model.measured : 0; }
const char *symmem_topo_fingerprint(symmem_topo_t topo) { return topo ? topo->model.fingerprint : ""; }
const char *symmem_topo_recommendation(symmem_topo_t topo) { return topo ? topo->model.recommendation : ""; }
int symmem_topo_warning_count(symmem_topo_t topo) { return topo ? topo->model.nwarnings : 0; }

const char *symmem_topo_warning(symmem_topo_t topo, int index)
{
    return topo && index >= 0 && index < topo->model.nwarnings ? topo->model.warnings[index] : NULL;
}

static symmem_status_t check_pair(symmem_topo_t topo, int gpu, int peer, const char *call)
{
    if (!topo) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: topo is NULL", call);
    int n = topo->model.ngpus;
    if (gpu < 0 || gpu >= n || peer < 0 || peer >= n)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "%s: GPU %d / peer %d out of range (the model has %d GPUs)",
                                call, gpu, peer, n);
    return SYMMEM_OK;
}

symmem_status_t symmem_topo_gpu_info(symmem_topo_t topo, int gpu, symmem_topo_gpu_info_t *info)
{
    SYMMEM_CHECK(check_pair(topo, gpu, gpu, "symmem_topo_gpu_info"));
    *info = topo->model.gpus[gpu];
    return SYMMEM_OK;
}

symmem_status_t symmem_topo_pair_info(symmem_topo_t topo, int gpu, int peer, symmem_topo_pair_info_t *info)
{
    SYMMEM_CHECK(check_pair(topo, gpu, peer, "symmem_topo_pair_info"));
    *info = topo->model.pairs[gpu][peer];
    return SYMMEM_OK;
}

symmem_status_t symmem_topo_pair_figures(symmem_topo_t topo, int gpu, int peer, double *read_gbs,
                                         double *write_gbs, double *latency_us, int *measured)
{
    SYMMEM_CHECK(check_pair(topo, gpu, peer, "symmem_topo_pair_figures"));
    const symmem_topo_pair_info_t *p = &topo->model.pairs[gpu][peer];
    double r, w, l;
    topo_model_estimate(p, &r, &w, &l);
    int have = gpu != peer && p->read_gbs > 0 && p->write_gbs > 0 && p->latency_us > 0 && !p->data_check_failed;
    if (gpu != peer && p->read_gbs > 0) r = p->read_gbs;
    if (gpu != peer && p->write_gbs > 0) w = p->write_gbs;
    if (gpu != peer && p->latency_us > 0) l = p->latency_us;
    if (read_gbs) *read_gbs = r;
    if (write_gbs) *write_gbs = w;
    if (latency_us) *latency_us = l;
    if (measured) *measured = have;
    return SYMMEM_OK;
}

symmem_status_t symmem_topo_pair_link(symmem_topo_t topo, int gpu, int peer, symmem_link_t *link)
{
    SYMMEM_CHECK(check_pair(topo, gpu, peer, "symmem_topo_pair_link"));
    *link = topo_model_pair_link(&topo->model, gpu, peer);
    return SYMMEM_OK;
}

symmem_status_t symmem_topo_get_advice(symmem_topo_t topo, symmem_topo_advice_t *advice)
{
    if (!topo || !advice) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_topo_get_advice: NULL argument");
    *advice = topo->model.advice;
    return SYMMEM_OK;
}

symmem_status_t symmem_topo_write_text(symmem_topo_t topo, FILE *out)
{
    if (!topo || !out) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_topo_write_text: NULL argument");
    return topo_report_text(topo, out);
}

symmem_status_t symmem_topo_write_json(symmem_topo_t topo, FILE *out)
{
    if (!topo || !out) return symmem_set_error(SYMMEM_INVALID_ARGUMENT, "symmem_topo_write_json: NULL argument");
    return topo_report_json(topo, out);
}
