/* What the ranks of a communicator agree on at init (comm/facts.c), in the order comm.c runs it. */
#ifndef SYMMEM_COMM_FACTS_H
#define SYMMEM_COMM_FACTS_H

#include "boot/comm_state.h"
#include "comm/options.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective, in order, on a communicator whose bootstrap mesh is up: what every rank is (host, process,
 * GPU, PCI id, NUMA node: comm->peers, comm->device), then how the ranks' GPUs reach each other (comm->link,
 * native_atomics, all_p2p, the placement, ranks_per_device, min_sm_count). */
symmem_status_t symmem_comm_agree_facts(symmem_comm_t comm, const symmem_comm_opts_t *opts);
symmem_status_t symmem_comm_agree_reachability(symmem_comm_t comm);
/* Local, before any rendezvous: the CUDA backend's driver and the requested device exist. A rank that cannot
 * run says so at once rather than after its peers' timeout (they, in turn, time out naming it). */
symmem_status_t symmem_comm_check_device(const symmem_comm_opts_t *opts);

#ifdef __cplusplus
}
#endif
#endif
