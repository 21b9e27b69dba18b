/* The PCI tree and the platform settings that decide whether peer-to-peer traffic works and how fast: the
 * path from each NVIDIA GPU up to its host bridge, ACS on the bridges of that path, the IOMMU mode, NUMA
 * placement. Everything is read through topo_sysfs_* (one root). A malformed file becomes a note and the
 * fact "unknown" (or the device skipped); only an unreadable device list is an error. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "symmem/topo.h"
#include "topology/topo_internal.h"

#define PCI_DEVICES "sys/bus/pci/devices"
#define NVIDIA_VENDOR 0x10deu
#define PCI_CLASS_VGA 0x0300u
#define PCI_CLASS_3D 0x0302u
#define PCI_CLASS_BRIDGE 0x0604u
#define PCI_EXT_CAP_START 0x100
#define PCI_EXT_CAP_ID_ACS 0x000du
/* ACS control bits that send peer traffic up to the root complex instead of turning around in a switch:
 * P2P Request Redirect (bit 2), P2P Completion Redirect (bit 3), P2P Egress Control (bit 5). */
#define ACS_CTRL_RR 0x0004u
#define ACS_CTRL_CR 0x0008u
#define ACS_CTRL_EC 0x0020u

static void note(topo_pci_facts_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(topo_pci_facts_t *f, const char *fmt, ...)
{
    if (f->nnotes >= TOPO_MAX_WARNINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->notes[f->nnotes], TOPO_WARNING_LEN, fmt, ap);
    va_end(ap);
    SYMMEM_WARN(SYMMEM_SUBSYS_TOPO, "%s", f->notes[f->nnotes]);
    f->nnotes++;
}

int topo_bdf_normalise(const char *in, char out[TOPO_BDF_LEN])
{
    unsigned dom, bus, dev, fn;
    int used = 0;
    if (sscanf(in, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &used) != 4 || in[used] != '\0') return -1;
    if (bus > 0xff || dev > 0x1f || fn > 7 || dom > 0xffff) return -1;
    topo_fmt(out, TOPO_BDF_LEN, "%04x:%02x:%02x.%x", dom, bus, dev, fn);
    return 0;
}

/* Strict "0x1234"-style parse: the whole string must be one hex number. */
static int parse_hex(const char *s, unsigned *out)
{
    char *end;
    if (!*s) return -1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 16);
    if (errno || *end || v > 0xffffffffu || !isxdigit((unsigned char)s[strlen(s) - 1])) return -1;
    *out = (unsigned)v;
    return 0;
}

static int parse_int(const char *s, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || errno || *end || v < -1 || v > 1 << 20) return -1;
    *out = (int)v;
    return 0;
}

/* Read a hex attribute of a device; a note when it exists but is malformed. */
static int read_hex_attr(topo_sysfs_t *fs, topo_pci_facts_t *f, const char *dev, const char *attr, unsigned *v)
{
    char rel[PATH_MAX], buf[64], path[PATH_MAX];
    topo_fmt(rel, sizeof rel, "%s/%s", dev, attr);
    int rc = topo_sysfs_read_text(fs, rel, buf, sizeof buf);
    if (rc == 0 && parse_hex(buf, v) == 0) return 0;
    topo_sysfs_show(rel, path, sizeof path);
    if (rc == 0)
        note(f, "%s: expected a hex number like 0x10de, found '%.32s'; device skipped", path, buf);
    else
        note(f, "%s: cannot read (%s); device skipped", path, strerror(-rc));
    return -1;
}

int topo_pci_parse_acs(const unsigned char *cfg, long len, unsigned *ctrl)
{
    *ctrl = 0;
    if (len < PCI_EXT_CAP_START + 4) return -1; /* non-root reads stop at 64 bytes */
    long off = PCI_EXT_CAP_START;
    for (int guard = 0; guard < 512; guard++) {
        if (off + 4 > len) return -1; /* the list goes on past the bytes we could read */
        uint32_t hdr = (uint32_t)cfg[off] | (uint32_t)cfg[off + 1] << 8 | (uint32_t)cfg[off + 2] << 16 |
                       (uint32_t)cfg[off + 3] << 24;
        if (hdr == 0 || hdr == 0xffffffffu) return 0; /* no (more) extended capabilities */
        if ((hdr & 0xffffu) == PCI_EXT_CAP_ID_ACS) {
            if (off + 8 > len) return -1;
            *ctrl = (unsigned)cfg[off + 6] | (unsigned)cfg[off + 7] << 8;
            return (*ctrl & (ACS_CTRL_RR | ACS_CTRL_CR | ACS_CTRL_EC)) ? 1 : 0;
        }
        long next = (long)((hdr >> 20) & 0xffcu);
        if (next == 0) return 0;     /* end of the list: this bridge has no ACS */
        if (next <= off) return -1;  /* the list only moves forward; anything else is corrupt: unknown */
        off = next;
    }
    return -1;
}

static int bridge_get(topo_sysfs_t *fs, topo_pci_facts_t *f, const char *canon_dir, const char *bdf, int depth)
{
    for (int i = 0; i < f->nbridges; i++)
        if (strcmp(f->bridges[i].bdf, bdf) == 0) return i;
    if (f->nbridges >= TOPO_MAX_BRIDGES) return -1;
    topo_bridge_t *b = &f->bridges[f->nbridges];
    memset(b, 0, sizeof *b);
    topo_fmt(b->bdf, sizeof b->bdf, "%s", bdf);
    b->depth = depth;
    char rel[PATH_MAX];
    unsigned char cfg[4096];
    topo_fmt(rel, sizeof rel, "%s/config", canon_dir);
    long n = topo_sysfs_read_bin(fs, rel, cfg, sizeof cfg);
    b->acs_redirect = n < 0 ? -1 : topo_pci_parse_acs(cfg, n, &b->acs_ctrl);
    return f->nbridges++;
}

static int is_bdf(const char *s, size_t len)
{
    char tmp[TOPO_BDF_LEN], norm[TOPO_BDF_LEN];
    if (len >= sizeof tmp) return 0;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    return topo_bdf_normalise(tmp, norm) == 0;
}

/* canon: "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:17:00.0/0000:18:00.0". The last
 * "pciDDDD:BB" component is the host bridge (VMs may have non-PCI components above it); the BDFs below it are
 * bridges, then the GPU. */
static int parse_chain(topo_sysfs_t *fs, topo_pci_facts_t *f, const char *canon, topo_pci_gpu_t *g)
{
    const char *hb = NULL;
    for (const char *p = canon; (p = strstr(p, "/pci")); p++) hb = p + 1;
    unsigned dom, bus;
    if (!hb || sscanf(hb, "pci%x:%x", &dom, &bus) != 2) return -1;
    topo_fmt(g->host_bridge, sizeof g->host_bridge, "%04x:%02x", dom, bus);
    const char *c = strchr(hb, '/');
    g->nchain = 0;
    while (c) {
        const char *start = c + 1, *end = strchr(start, '/');
        size_t len = end ? (size_t)(end - start) : strlen(start);
        if (!end) break; /* the last component is the GPU itself */
        if (!is_bdf(start, len)) return -1;
        char bdf[TOPO_BDF_LEN], dir[PATH_MAX];
        memcpy(bdf, start, len);
        bdf[len] = '\0';
        topo_fmt(dir, sizeof dir, "%.*s", (int)(end - canon), canon);
        if (g->nchain >= TOPO_MAX_CHAIN) return -1;
        int bi = bridge_get(fs, f, dir, bdf, g->nchain);
        if (bi < 0) return -1;
        g->chain[g->nchain++] = bi;
        c = end;
    }
    return 0;
}

static int link_gen(const char *speed)
{
    double gts = atof(speed);
    if (gts >= 60) return 6;
    if (gts >= 30) return 5;
    if (gts >= 15) return 4;
    if (gts >= 7.5) return 3;
    if (gts >= 4.5) return 2;
    if (gts >= 2) return 1;
    return 0;
}

static void read_link(topo_sysfs_t *fs, const char *canon, topo_pci_gpu_t *g)
{
    static const char *const attrs[4] = {"current_link_speed", "current_link_width", "max_link_speed",
                                         "max_link_width"};
    int *dst[4] = {&g->link_gen, &g->link_width, &g->max_gen, &g->max_width};
    for (int i = 0; i < 4; i++) {
        char rel[PATH_MAX], buf[64];
        topo_fmt(rel, sizeof rel, "%s/%s", canon, attrs[i]);
        if (topo_sysfs_read_text(fs, rel, buf, sizeof buf) != 0) continue; /* absent in some VMs: unknown */
        *dst[i] = (i % 2 == 0) ? link_gen(buf) : atoi(buf);
    }
}

static void read_numa(topo_sysfs_t *fs, topo_pci_facts_t *f, const char *canon, topo_pci_gpu_t *g)
{
    char rel[PATH_MAX], buf[512], path[PATH_MAX];
    g->numa_node = -1;
    topo_fmt(rel, sizeof rel, "%s/numa_node", canon);
    int rc = topo_sysfs_read_text(fs, rel, buf, sizeof buf);
    if (rc == 0 && parse_int(buf, &g->numa_node) != 0) {
        topo_sysfs_show(rel, path, sizeof path);
        note(f, "%s: expected a NUMA node number or -1, found '%.32s'; NUMA node of GPU %s unknown", path, buf,
             g->bdf);
        g->numa_node = -1;
    }
    topo_fmt(rel, sizeof rel, "%s/local_cpulist", canon);
    if (topo_sysfs_read_text(fs, rel, buf, sizeof buf) == 0 && strspn(buf, "0123456789,-") == strlen(buf))
        topo_fmt(g->cpulist, sizeof g->cpulist, "%s", buf);
}

static void read_iommu_group(topo_sysfs_t *fs, const char *canon, topo_pci_gpu_t *g)
{
    char rel[PATH_MAX], group[PATH_MAX];
    topo_fmt(rel, sizeof rel, "%s/iommu_group", canon);
    if (topo_sysfs_resolve(fs, rel, group, sizeof group) != 0) return; /* no IOMMU group: IOMMU off */
    topo_fmt(rel, sizeof rel, "%s/type", group);
    char buf[32];
    if (topo_sysfs_read_text(fs, rel, buf, sizeof buf) == 0) topo_fmt(g->iommu_type, sizeof g->iommu_type, "%s", buf);
}

/* One entry of sys/bus/pci/devices: an NVIDIA GPU is added to f->gpus, anything else ignored. */
static void read_device(topo_sysfs_t *fs, topo_pci_facts_t *f, const char *name)
{
    char rel[PATH_MAX], canon[PATH_MAX], path[PATH_MAX];
    topo_fmt(rel, sizeof rel, PCI_DEVICES "/%s", name);
    int rc = topo_sysfs_resolve(fs, rel, canon, sizeof canon);
    if (rc != 0) {
        topo_sysfs_show(rel, path, sizeof path);
        note(f, "%s: cannot resolve the device link (%s); device skipped", path, strerror(-rc));
        return;
    }
    unsigned cls, vendor, device = 0;
    if (read_hex_attr(fs, f, canon, "vendor", &vendor) != 0) return;
    if (vendor != NVIDIA_VENDOR) return; /* other vendors' class files need not be read (nor captured) */
    if (read_hex_attr(fs, f, canon, "class", &cls) != 0) return;
    if ((cls >> 8) != PCI_CLASS_VGA && (cls >> 8) != PCI_CLASS_3D) return; /* audio functions, NVSwitches */
    if (f->ngpus >= TOPO_MAX_GPUS) {
        note(f, "more than %d NVIDIA GPUs; %s and later ignored", TOPO_MAX_GPUS, name);
        return;
    }
    topo_pci_gpu_t *g = &f->gpus[f->ngpus];
    memset(g, 0, sizeof *g);
    if (topo_bdf_normalise(name, g->bdf) != 0 || parse_chain(fs, f, canon, g) != 0) {
        topo_sysfs_show(rel, path, sizeof path);
        note(f, "%s: the device path '%s' is not a PCI path under a host bridge; GPU skipped", path, canon);
        return;
    }
    char rel2[PATH_MAX], buf[64];
    topo_fmt(rel2, sizeof rel2, "%s/device", canon);
    if (topo_sysfs_read_text(fs, rel2, buf, sizeof buf) == 0) parse_hex(buf, &device); /* only for the name */
    g->vendor = vendor;
    g->device = device;
    g->class_code = cls;
    read_numa(fs, f, canon, g);
    read_link(fs, canon, g);
    read_iommu_group(fs, canon, g);
    f->ngpus++;
}

static int cmdline_has(const char *cmdline, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = cmdline; (p = strstr(p, word)); p += n)
        if ((p == cmdline || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

/* IOMMU mode: the GPUs' IOMMU group type is authoritative; without one, /sys/class/iommu tells whether an
 * IOMMU is registered at all, and the kernel command line whether it passes devices through. */
static void read_iommu(topo_sysfs_t *fs, topo_pci_facts_t *f)
{
    for (int i = 0; i < f->ngpus; i++) {
        const char *t = f->gpus[i].iommu_type;
        int translated = strncmp(t, "DMA", 3) == 0; /* "DMA" or "DMA-FQ" */
        if (!translated && strcmp(t, "identity") != 0) continue; /* "", "unmanaged" (VFIO), "blocked" */
        if (!translated && f->iommu == TOPO_IOMMU_PASSTHROUGH) continue; /* name the first GPU found */
        f->iommu = translated ? TOPO_IOMMU_TRANSLATED : TOPO_IOMMU_PASSTHROUGH;
        topo_fmt(f->iommu_why, sizeof f->iommu_why, "IOMMU group type of GPU %s is '%s'", f->gpus[i].bdf, t);
        if (translated) return; /* one translated GPU is enough to matter */
    }
    if (f->iommu != TOPO_IOMMU_UNKNOWN) return;
    char *names = NULL, cmdline[4096] = "";
    int n = topo_sysfs_list(fs, "sys/class/iommu", &names);
    int have_cmdline = topo_sysfs_read_text(fs, "proc/cmdline", cmdline, sizeof cmdline) == 0;
    if (n > 0) {
        char rel[PATH_MAX], canon[PATH_MAX];
        topo_fmt(rel, sizeof rel, "sys/class/iommu/%s", names);
        topo_sysfs_resolve(fs, rel, canon, sizeof canon); /* recorded for capture; the target is not read */
    }
    free(names);
    if (n == 0 || n == -ENOENT) {
        f->iommu = TOPO_IOMMU_OFF;
        topo_fmt(f->iommu_why, sizeof f->iommu_why, "no IOMMU registered in /sys/class/iommu");
    } else if (have_cmdline && (cmdline_has(cmdline, "iommu=pt") || cmdline_has(cmdline, "iommu.passthrough=1"))) {
        f->iommu = TOPO_IOMMU_PASSTHROUGH;
        topo_fmt(f->iommu_why, sizeof f->iommu_why, "kernel command line has iommu=pt");
    } else if (have_cmdline && n > 0) {
        f->iommu = TOPO_IOMMU_TRANSLATED;
        topo_fmt(f->iommu_why, sizeof f->iommu_why, "an IOMMU is registered and the kernel command line has no iommu=pt");
    }
}

symmem_status_t topo_pci_read(topo_sysfs_t *fs, topo_pci_facts_t *facts)
{
    memset(facts, 0, sizeof *facts);
    char *names = NULL;
    int n = topo_sysfs_list(fs, PCI_DEVICES, &names);
    if (n < 0) {
        char path[PATH_MAX];
        topo_sysfs_path(fs, PCI_DEVICES, path, sizeof path);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR,
                                "cannot list the PCI devices in %s: %s (a captured tree needs sys/bus/pci/devices; "
                                "on a live machine, is /sys mounted?)",
                                path, strerror(-n));
    }
    const char *p = names;
    facts->ndevices = n;
    for (int i = 0; i < n; i++, p += strlen(p) + 1) read_device(fs, facts, p);
    free(names);
    topo_sysfs_read_text(fs, "sys/module/nvidia/version", facts->driver_version, sizeof facts->driver_version);
    topo_sysfs_read_text(fs, "sys/devices/system/node/online", facts->numa_online, sizeof facts->numa_online);
    read_iommu(fs, facts);
    SYMMEM_INFO(SYMMEM_SUBSYS_TOPO, "PCI tree: %d NVIDIA GPUs, %d bridges on their paths, IOMMU %s", facts->ngpus,
                facts->nbridges, facts->iommu_why[0] ? facts->iommu_why : "unknown");
    return SYMMEM_OK;
}
