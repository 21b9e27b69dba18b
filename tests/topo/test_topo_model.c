/* The pure parts of the topology layer on hand-built facts: the ACS parser (including corrupt and random
 * config images), path classes, NVLink handling, fingerprint stability, the recommendation from measured
 * figures, the JSON reader and the gpus.json / cache round trip. */
#include <stdlib.h>
#include <string.h>

#include "symmem/symmem.h"
#include "test_util.h"
#include "topology/json.h"
#include "topology/topo_internal.h"

static void put32(unsigned char *cfg, int off, unsigned v)
{
    for (int k = 0; k < 4; k++) cfg[off + k] = (unsigned char)(v >> (8 * k));
}

static void test_acs_parser(void)
{
    unsigned char cfg[4096];
    unsigned ctrl = 99;
    memset(cfg, 0, sizeof cfg);
    put32(cfg, 0x100, 0x0001u | (2u << 16) | (0x148u << 20)); /* AER, next at 0x148 */
    put32(cfg, 0x148, 0x000du | (1u << 16));                  /* ACS, last */
    put32(cfg, 0x14c, 0x007fu | (0x0004u << 16));             /* capability, control = P2P request redirect */
    EXPECT(topo_pci_parse_acs(cfg, sizeof cfg, &ctrl) == 1 && ctrl == 0x0004);
    put32(cfg, 0x14c, 0x007fu | (0x0011u << 16));             /* source validation + upstream forwarding */
    EXPECT(topo_pci_parse_acs(cfg, sizeof cfg, &ctrl) == 0 && ctrl == 0x0011);
    EXPECT(topo_pci_parse_acs(cfg, 64, &ctrl) == -1);          /* unprivileged read: unknown */
    EXPECT(topo_pci_parse_acs(cfg, 0x14a, &ctrl) == -1);       /* truncated inside the ACS capability */
    put32(cfg, 0x100, 0x0001u | (0x100u << 20));              /* a list that points at itself: unknown */
    EXPECT(topo_pci_parse_acs(cfg, sizeof cfg, &ctrl) == -1 && ctrl == 0);
    put32(cfg, 0x100, 0x0001u);                               /* AER only: no ACS, so no redirect */
    EXPECT(topo_pci_parse_acs(cfg, sizeof cfg, &ctrl) == 0);
    srand(12345);
    for (int iter = 0; iter < 20000; iter++) { /* random images never crash and give a valid answer */
        long len = rand() % (long)sizeof cfg;
        for (long k = 0; k < len; k++) cfg[k] = (unsigned char)rand();
        int r = topo_pci_parse_acs(cfg, len, &ctrl);
        EXPECT(r >= -1 && r <= 1);
    }
}

/* A PCI facts table with GPUs on given host bridges, NUMA nodes and bridge chains (bridge indices). */
static void add_gpu(topo_pci_facts_t *f, const char *hb, int numa, int nchain, const int *chain)
{
    topo_pci_gpu_t *g = &f->gpus[f->ngpus];
    snprintf(g->bdf, sizeof g->bdf, "0000:%02x:00.0", 0x10 + f->ngpus);
    snprintf(g->host_bridge, sizeof g->host_bridge, "%s", hb);
    g->numa_node = numa;
    g->nchain = nchain;
    memcpy(g->chain, chain, (size_t)nchain * sizeof *chain);
    g->vendor = 0x10de;
    f->ngpus++;
}

static void build_pci(topo_pci_facts_t *f)
{
    memset(f, 0, sizeof *f);
    f->nbridges = 8;
    for (int b = 0; b < 8; b++) snprintf(f->bridges[b].bdf, sizeof f->bridges[b].bdf, "0000:00:%02x.0", b);
    /* bridge 0: root port; 1: switch up; 2,3: down; 4: nested switch up under 3; 5: its down port. */
    add_gpu(f, "0000:00", 0, 3, (const int[]){0, 1, 2});       /* GPU 0 */
    add_gpu(f, "0000:00", 0, 5, (const int[]){0, 1, 3, 4, 5}); /* GPU 1: behind a second switch */
    add_gpu(f, "0000:00", 0, 1, (const int[]){6});             /* GPU 2: own root port */
    add_gpu(f, "0000:40", 0, 1, (const int[]){7});             /* GPU 3: another host bridge, same node */
    add_gpu(f, "0000:80", 1, 0, (const int[]){0});             /* GPU 4: other socket, flat */
    add_gpu(f, "0000:c0", -1, 0, (const int[]){0});            /* GPU 5: node unknown */
    add_gpu(f, "0000:00", 0, 3, (const int[]){0, 1, 3});       /* GPU 6: same switch as GPU 0 */
}

static void test_classes(void)
{
    topo_pci_facts_t *f = calloc(1, sizeof *f);
    int acs;
    build_pci(f);
    EXPECT(topo_model_pci_class(f, 0, 0, &acs) == SYMMEM_TOPO_SELF);
    EXPECT(topo_model_pci_class(f, 0, 6, &acs) == SYMMEM_TOPO_PIX && acs == 0);
    EXPECT(topo_model_pci_class(f, 0, 1, &acs) == SYMMEM_TOPO_PXB);
    EXPECT(topo_model_pci_class(f, 0, 2, &acs) == SYMMEM_TOPO_PHB);
    EXPECT(topo_model_pci_class(f, 0, 3, &acs) == SYMMEM_TOPO_NODE);
    EXPECT(topo_model_pci_class(f, 0, 4, &acs) == SYMMEM_TOPO_SYS);
    EXPECT(topo_model_pci_class(f, 4, 5, &acs) == SYMMEM_TOPO_NODE); /* unknown node: not called SYS */
    f->bridges[3].acs_redirect = 1;                                    /* GPU 6's downstream port */
    EXPECT(topo_model_pci_class(f, 0, 6, &acs) == SYMMEM_TOPO_PIX && acs == 1);
    f->bridges[3].acs_redirect = -1;
    EXPECT(topo_model_pci_class(f, 0, 6, &acs) == SYMMEM_TOPO_PIX && acs == -1);
    f->bridges[3].acs_redirect = 0;
    f->bridges[0].acs_redirect = 1; /* the root port above the switch does not redirect switch-local traffic */
    EXPECT(topo_model_pci_class(f, 0, 6, &acs) == SYMMEM_TOPO_PIX && acs == 0);
    free(f);
}

/* GPU facts for the PCI table above, all with P2P, NVLink between 0 and 6 only. */
static void build_gpu_facts(const topo_pci_facts_t *pci, topo_gpu_facts_t *g)
{
    topo_gpu_facts_reset(g);
    g->present = 1;
    g->ngpus = pci->ngpus;
    snprintf(g->source, sizeof g->source, "file");
    for (int i = 0; i < g->ngpus; i++) {
        snprintf(g->gpus[i].name, sizeof g->gpus[i].name, "Test GPU");
        snprintf(g->gpus[i].bus_id, sizeof g->gpus[i].bus_id, "%s", pci->gpus[i].bdf);
        for (int j = 0; j < g->ngpus; j++) g->p2p[i][j] = 1, g->atomics[i][j] = 0, g->perf_rank[i][j] = 0, g->nvlinks[i][j] = 0;
    }
    g->nvlinks[0][6] = g->nvlinks[6][0] = 4;
}

static void test_model_and_fingerprint(void)
{
    topo_pci_facts_t *pci = calloc(1, sizeof *pci);
    topo_gpu_facts_t *g = calloc(1, sizeof *g);
    topo_model_t *m = calloc(1, sizeof *m), *m2 = calloc(1, sizeof *m2);
    topo_measure_t *meas = calloc(1, sizeof *meas);
    build_pci(pci);
    build_gpu_facts(pci, g);
    topo_model_build(pci, g, NULL, m);
    EXPECT(m->pairs[0][6].path == SYMMEM_TOPO_NVLINK && m->pairs[0][6].nvlinks == 4);
    EXPECT(m->pairs[0][1].path == SYMMEM_TOPO_PXB);
    EXPECT(m->advice.islands == 2);
    topo_model_build(pci, g, NULL, m2);
    EXPECT(strcmp(m->fingerprint, m2->fingerprint) == 0); /* stable */
    topo_measure_clear(meas);
    meas->measured = 1;
    meas->read_gbs[0][1] = 12.5;
    topo_model_build(pci, g, meas, m2);
    EXPECT(strcmp(m->fingerprint, m2->fingerprint) == 0); /* figures are not part of the key */
    pci->bridges[2].acs_redirect = 1;
    topo_model_build(pci, g, NULL, m2);
    EXPECT(strcmp(m->fingerprint, m2->fingerprint) != 0); /* ACS changes the figures, so the key */
    pci->bridges[2].acs_redirect = 0;
    snprintf(pci->driver_version, sizeof pci->driver_version, "999.1");
    topo_model_build(pci, g, NULL, m2);
    EXPECT(strcmp(m->fingerprint, m2->fingerprint) != 0);
    /* No NVML (-1) but native atomics over a host bridge: NVLink of unknown width, with a warning. */
    g->nvlinks[0][2] = g->nvlinks[2][0] = -1;
    g->atomics[0][2] = 1;
    topo_model_build(pci, g, NULL, m2);
    EXPECT(m2->pairs[0][2].path == SYMMEM_TOPO_NVLINK && m2->pairs[0][2].nvlinks == -1);
    int found = 0;
    for (int k = 0; k < m2->nwarnings; k++) found |= strstr(m2->warnings[k], "NVLink link counts unknown") != NULL;
    EXPECT(found);
    free(pci), free(g), free(m), free(m2), free(meas);
}

/* Two GPUs on PCIe (PHB) with the given measured figures; returns the advice. */
static symmem_topo_advice_t advise(double read, double write, double ring_read, double ring_write, int p2p, int n)
{
    topo_pci_facts_t *pci = calloc(1, sizeof *pci);
    topo_gpu_facts_t *g = calloc(1, sizeof *g);
    topo_model_t *m = calloc(1, sizeof *m);
    topo_measure_t *meas = calloc(1, sizeof *meas);
    for (int i = 0; i < n; i++) add_gpu(pci, "0000:00", 0, 1, (const int[]){i});
    pci->nbridges = n;
    build_gpu_facts(pci, g);
    topo_measure_clear(meas);
    meas->measured = 1;
    for (int i = 0; i < n; i++) {
        meas->ring_read_gbs[i] = ring_read, meas->ring_write_gbs[i] = ring_write;
        for (int j = 0; j < n; j++)
            if (i != j) meas->read_gbs[i][j] = read, meas->write_gbs[i][j] = write, g->p2p[i][j] = p2p;
    }
    topo_model_build(pci, g, meas, m);
    symmem_topo_advice_t a = m->advice;
    free(pci), free(g), free(m), free(meas);
    return a;
}

/* The recommendation follows the communicator's rule (topology/choice.h): on PCIe the ring figures (every
 * GPU at once, the slowest GPU) decide push or pull with a 30% margin, and large all-reduces of more than
 * two GPUs are staged when they push; the one-pair figures do not decide. */
static void test_advice(void)
{
    symmem_topo_advice_t a = advise(2.6, 52.0, 2.0, 40.0, 1, 4); /* writes 20x faster, as published */
    EXPECT(a.direction == SYMMEM_TOPO_PUSH && a.measured && a.staged);
    a = advise(52.0, 2.6, 50.0, 2.0, 1, 4);
    EXPECT(a.direction == SYMMEM_TOPO_PULL && a.measured && !a.staged);
    a = advise(2.6, 52.0, 50.0, 40.0, 1, 4); /* the pairs alone would push; the ring figures do not say so */
    EXPECT(a.direction == SYMMEM_TOPO_PUSH && a.measured && a.staged);
    a = advise(52.0, 2.6, 30.0, 40.0, 1, 4); /* the pairs alone would pull: within the margin, push stays */
    EXPECT(a.direction == SYMMEM_TOPO_PUSH && a.staged);
    /* no ring figures: not measured as far as the choice goes; two GPUs: one-shot push moves the same bytes
     * as the staged permutation with one trip instead of two syncs, so nothing is staged */
    a = advise(40.0, 41.0, -1, -1, 1, 2);
    EXPECT(a.direction == SYMMEM_TOPO_PUSH && !a.measured && !a.staged);
    a = advise(-1, -1, -1, -1, 0, 2);
    EXPECT(a.placement == SYMMEM_PLACEMENT_HOST_NUMA && a.islands == 1 && !a.staged);
}

static void test_json_reader(void)
{
    char err[128];
    json_value_t *v = json_parse(" {\"a\": [1, -2.5e1, true, null], \"s\": \"x\\\"y\\u0041\\n\"} ", err, sizeof err);
    EXPECT(v != NULL);
    if (v) {
        const json_value_t *a = json_get(v, "a");
        EXPECT(a && a->type == JSON_ARR && json_num(a->child->next, 0) == -25.0);
        EXPECT(strcmp(json_str(json_get(v, "s"), ""), "x\"yA\n") == 0);
        EXPECT(json_get(v, "missing") == NULL && json_num(NULL, 7) == 7);
        json_free(v);
    }
    EXPECT(json_parse("[1, 2", err, sizeof err) == NULL);
    EXPECT_CONTAINS(err, "line 1 column 6: expected ',' or ']'");
    EXPECT(json_parse("{\"a\": 1} x", err, sizeof err) == NULL);
    EXPECT_CONTAINS(err, "text after the end of the value");
    EXPECT(json_parse("\"\\u12", err, sizeof err) == NULL);
    EXPECT_CONTAINS(err, "bad escape");
    char deep[200];
    memset(deep, '[', 100);
    deep[100] = '\0';
    EXPECT(json_parse(deep, err, sizeof err) == NULL);
    EXPECT_CONTAINS(err, "nested too deeply");
}

static void test_cache_round_trip(void)
{
    topo_pci_facts_t *pci = calloc(1, sizeof *pci);
    topo_gpu_facts_t *g = calloc(1, sizeof *g), *g2 = calloc(1, sizeof *g2);
    topo_measure_t *m = calloc(1, sizeof *m), *m2 = calloc(1, sizeof *m2);
    char *buf = NULL, fp[17];
    size_t len = 0;
    build_pci(pci);
    build_gpu_facts(pci, g);
    topo_measure_clear(m);
    m->measured = 1;
    m->ngpus = g->ngpus;
    m->read_gbs[0][1] = 51.25, m->write_gbs[1][0] = 3.5, m->latency_us[0][6] = 1.75, m->check_failed[2][3] = 1;
    m->host_d2h_gbs[4] = 26.0, m->ring_read_gbs[5] = 20.5;
    FILE *f = open_memstream(&buf, &len);
    EXPECT(topo_gpu_facts_write(f, g, m, "0123456789abcdef") == SYMMEM_OK);
    fclose(f);
    EXPECT(topo_gpu_facts_parse(buf, "round trip", g2, m2, fp) == SYMMEM_OK);
    EXPECT(strcmp(fp, "0123456789abcdef") == 0 && g2->ngpus == g->ngpus && m2->measured && !m2->quick);
    EXPECT(strcmp(g2->gpus[3].bus_id, g->gpus[3].bus_id) == 0 && g2->nvlinks[6][0] == 4);
    EXPECT(m2->read_gbs[0][1] == 51.25 && m2->write_gbs[1][0] == 3.5 && m2->latency_us[0][6] == 1.75);
    EXPECT(m2->check_failed[2][3] == 1 && m2->host_d2h_gbs[4] == 26.0 && m2->ring_read_gbs[5] == 20.5);
    EXPECT(m2->read_gbs[1][0] < 0 && m2->host_read_gbs[0] < 0); /* unmeasured stays unmeasured */
    free(buf), free(pci), free(g), free(g2), free(m), free(m2);
}

int main(void)
{
    test_acs_parser();
    test_classes();
    test_model_and_fingerprint();
    test_advice();
    test_json_reader();
    test_cache_round_trip();
    printf("test_topo_model: %d failures\n", test_failures);
    return test_failures ? 1 : 0;
}
