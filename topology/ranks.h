/* A communicator's ranks as the machine model sees them: how one rank's GPU reaches every rank's (asked of
 * CUDA and NVML by PCI bus id, since ranks may live in other processes or see other GPUs), the NUMA node of a
 * GPU (sysfs, through the one root), the worst link of the agreed link matrix, and the communicator
 * fingerprint that keys the tuning file. comm/facts.c calls these at init; the rest read the results from
 * the communicator. */
#ifndef SYMMEM_TOPOLOGY_RANKS_H
#define SYMMEM_TOPOLOGY_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one rule for a pair of GPUs: SELF (the same GPU), HOST (no P2P: p2p == 0), NVLINK (nvlink != 0), else
 * PCIE. Fed by CUDA and NVML at init (topo_rank_links) and by the model's pair facts (symmem_topo_pair_link). */
symmem_link_t topo_link_of(int same_gpu, int p2p, int nvlink);

/* Rank `rank`'s row, from its GPU `device` (a CUDA ordinal of this process) to every rank's GPU (bus_ids[j],
 * "0000:19:00.0"): link[j], native_atomics[j] (CUDA's P2P attribute) and p2p[j] (1: my GPU can map rank j's
 * memory). A GPU hidden from this process (CUDA_VISIBLE_DEVICES) is assumed reachable: the mapping reports
 * it if not. Without NVML every pair with P2P is PCIe. */
void topo_rank_links(int rank, int nranks, int device, const char *const *bus_ids, symmem_link_t *link,
                     int *native_atomics, int *p2p);

/* The host NUMA node of a PCI device from sysfs (SYMMEM_SYSFS_ROOT), -1 if unknown. */
int topo_numa_node_of_pci(const char *bus_id);

/* The worst link between two different ranks of the link matrix (links[i * stride + j]: rank i to rank j):
 * NVLINK (also for ranks that all share one GPU), PCIE, or HOST when some pair has no P2P (all_p2p 0) or
 * no link. The communicator's choice (topology/choice.h) is keyed by it. */
symmem_link_t topo_link_class(int nranks, const int32_t *links, int stride, int all_p2p);

/* "n2.rpd1.sm90x132.nvlink.5d1f0a33": rank count, most ranks per GPU, rank 0's compute capability, the
 * smallest SM count, the link class, and a hash of the whole link matrix. The same on every rank. */
void topo_comm_fingerprint(char *out, size_t len, int nranks, int ranks_per_device, int cc_major, int cc_minor,
                           int min_sm_count, symmem_link_t link_class, const int32_t *links, int stride);

/* "nvlink", "pcie", "host", "self", "none" */
const char *topo_link_name(symmem_link_t link);

#ifdef __cplusplus
}
#endif
#endif
