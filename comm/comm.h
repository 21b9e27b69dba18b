/* The communicator's lifecycle, inside comm/: what comm.c (create, destroy, the three ways in) needs from
 * options.c (the options resolved) and facts.c (what the ranks agree on at init). */
#ifndef SYMMEM_COMM_COMM_H
#define SYMMEM_COMM_COMM_H

#include "boot/comm_state.h"
#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The options of one rank, resolved: API options beat the environment, which beats the defaults. */
typedef struct symmem_comm_opts {
    int device;
    int timeout_ms;
    symmem_backend_t backend;
    symmem_placement_t placement;
    int numa_node;
} symmem_comm_opts_t;
/* opts NULL: the defaults. SYMMEM_INVALID_ARGUMENT for options not made from SYMMEM_OPTIONS_INIT or values
 * out of range. */
symmem_status_t symmem_comm_resolve_options(const symmem_options_t *opts, symmem_comm_opts_t *out);

/* Collective, in order, on a communicator whose bootstrap mesh is up: what every rank is (host, process,
 * GPU, PCI id, NUMA node: comm->peers, comm->device), then how the ranks' GPUs reach each other (comm->link,
 * native_atomics, all_p2p, the placement, ranks_per_device, min_sm_count). */
/* Local, before any rendezvous: the CUDA backend's driver and the requested device exist. A rank that cannot
 * run says so at once rather than after its peers' timeout (they, in turn, time out naming it). */
symmem_status_t symmem_comm_check_device(const symmem_comm_opts_t *opts);
symmem_status_t symmem_comm_agree_facts(symmem_comm_t comm, const symmem_comm_opts_t *opts);
symmem_status_t symmem_comm_agree_reachability(symmem_comm_t comm);

#ifdef __cplusplus
}
#endif
#endif
