/* gpus.json (the GPU facts of a captured machine, also the measurement cache) on any text: parse, then
 * build the model and the advice from what was accepted. */
#include "fuzz.h"
#include "topology/json.h"
#include "topology/topo_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    char err[160];
    json_value_t *v = json_parse(text, err, sizeof err);
    json_free(v);
    static topo_gpu_facts_t facts;
    static topo_measure_t meas;
    static topo_pci_facts_t pci;
    static topo_model_t model;
    char fp[17];
    if (topo_gpu_facts_parse(text, "fuzz", &facts, &meas, fp) == SYMMEM_OK) {
        FUZZ_ASSERT(facts.ngpus >= 0 && facts.ngpus <= TOPO_MAX_GPUS);
        /* a PCI tree with one root port per GPU of the file, so the facts are matched and used */
        memset(&pci, 0, sizeof pci);
        pci.nbridges = facts.ngpus;
        for (int i = 0; i < facts.ngpus; i++) {
            topo_pci_gpu_t *g = &pci.gpus[pci.ngpus++];
            memcpy(g->bdf, facts.gpus[i].bus_id, sizeof g->bdf);
            snprintf(pci.bridges[i].bdf, sizeof pci.bridges[i].bdf, "0000:00:%02x.0", (unsigned)i & 0x1f);
            snprintf(g->host_bridge, sizeof g->host_bridge, "0000:%s", i % 2 ? "80" : "00");
            g->vendor = 0x10de;
            g->numa_node = i % 2;
            g->nchain = 1;
            g->chain[0] = i;
        }
        topo_model_build(&pci, &facts, &meas, &model);
    }
    free(text);
    return 0;
}
