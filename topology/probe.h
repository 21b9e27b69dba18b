/* The communicator's init probe (SYMMEM_COLL_PROBE; docs/collectives.md): symmem-topo's ring figures
 * measured by the ranks themselves, which may live in different processes. */
#ifndef SYMMEM_TOPOLOGY_PROBE_H
#define SYMMEM_TOPOLOGY_PROBE_H

#include <stddef.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the copies of one rank go: rank r reads peer_src (memory of rank (r+1) mod n, mapped here) into
 * own_dst, then writes own_src into peer_dst (rank r+1's again). Each rank is the only reader of its
 * successor's peer_src and the only writer of its peer_dst, so regions never overlap; own_dst must be
 * touched by nobody else during the read phase. All four 16-byte aligned, `bytes` long (a multiple of
 * 16 * threads). */
typedef struct topo_probe_buffers {
    const void *peer_src;
    void *peer_dst;
    void *own_dst;
    const void *own_src;
    size_t bytes;
    int grid, threads;
} topo_probe_buffers_t;

/* Collective. SM peer read and write GB/s, then copy-engine write GB/s (cudaMemcpyAsync from own_src into
 * peer_dst), then SM loads and stores at once (a copy from peer_src into peer_dst: how far the two
 * directions of the link overlap, the cost model's duplex), with every rank at once (a host barrier before
 * each phase: a root complex that collapses under all-to-all traffic must show it): a warm-up copy, then 3
 * timed copies back to back on a private stream, the median; the minima over ranks, the same on every rank.
 * Every rank makes the same host calls whatever happens locally, so a local CUDA failure cannot leave a peer
 * waiting: it fails every rank (SYMMEM_CUDA_ERROR) after the exchange. A copy still running after the
 * communicator's timeout warns that P2P looks broken. On return no probe copy runs on this rank. */
typedef struct topo_probe_figures {
    double read_gbs, write_gbs, ce_gbs, rw_gbs;
} topo_probe_figures_t;
symmem_status_t topo_probe_ring(symmem_comm_t comm, const topo_probe_buffers_t *b, topo_probe_figures_t *out);

#ifdef __cplusplus
}
#endif
#endif
