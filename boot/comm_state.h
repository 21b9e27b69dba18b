/* The communicator as every layer reads it: the facts the ranks agreed at init, the bootstrap mesh, the
 * error state, and the services the layers above boot/ need from it: the entry guard of a public call, the
 * host-side collectives over the mesh (with the misuse check of symmem_comm_init_all's communicators), and
 * the registry of live handles. Creating, filling and destroying a communicator is comm/'s (the lifecycle,
 * on top of every layer); after init, fields are written only by the layer a field names. */
#ifndef SYMMEM_BOOT_COMM_STATE_H
#define SYMMEM_BOOT_COMM_STATE_H

#include <assert.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

struct symmem_boot;     /* boot/bootstrap.h: the authenticated socket mesh between ranks */
struct symmem_coll;     /* collectives/: workspace, device state, error record, algorithm table */
struct symmem_comm_set; /* the communicators of one symmem_comm_init_all (boot/hostcoll.c) */

/* What every rank tells every other at init (exchanged once with the bootstrap allgather). */
typedef struct symmem_peer_info {
    uint64_t host_hash;    /* hash of the boot id and host name: all ranks must share a host */
    int32_t pid;
    int32_t device;        /* CUDA ordinal in that rank's process (-1 for the host backend) */
    char pci_bus_id[32];   /* "0000:19:00.0" (empty for the host backend) */
    int32_t sm_count;
    int32_t cc_major, cc_minor;
    int32_t numa_node;     /* host NUMA node nearest the GPU, -1 if unknown */
    int32_t backend;
    int32_t fabric_ok;     /* GPU can export fabric handles */
    int32_t gdr_ok;        /* GPU supports the GPUDirect RDMA flag with cuMem */
    int32_t host_numa_ok;  /* cuMemCreate on host NUMA nodes supported */
    int32_t placement;     /* placement the rank asked for (options/environment); must agree */
    int32_t reserved[3];
} symmem_peer_info_t;
static_assert(sizeof(symmem_peer_info_t) == 96, "symmem_peer_info_t crosses processes: keep its layout fixed");

#define SYMMEM_COMM_MAGIC 0x434d5953u /* "SYMC"; cleared at destroy */

struct symmem_comm {
    uint32_t magic;
    int rank;
    int nranks;
    int device; /* -1 for the host backend */
    symmem_backend_t backend;
    symmem_placement_t placement; /* resolved: never DEFAULT */
    int numa_node_opt;            /* from the options, -1: automatic */
    int timeout_ms;

    /* Agreed at init by comm/ (facts.c) from topology/'s model of the ranks; read-only afterwards. */
    symmem_peer_info_t peers[SYMMEM_MAX_RANKS];
    symmem_link_t link[SYMMEM_MAX_RANKS]; /* how my GPU reaches each rank's */
    int native_atomics[SYMMEM_MAX_RANKS];
    int all_p2p;          /* every pair of GPUs can map each other directly */
    int min_sm_count;     /* smallest SM count of any rank */
    int ranks_per_device; /* most ranks sharing one GPU (several ranks on one GPU when testing) */
    symmem_link_t link_class; /* the worst link between two ranks (topology/ranks.h, topo_link_class) */
    char fingerprint[128];    /* the communicator's topology fingerprint: keys the tuning file (CUDA backend) */

    struct symmem_boot *boot;

    uint64_t alloc_seq; /* alloc/: symmem_alloc calls so far, the same on every rank */
    /* alloc/: this communicator's live buffers by address, an immutable snapshot that every collective call
     * searches without a lock (alloc/symm.c, symmem_alloc_find), with the count of searches in flight that
     * says when a replaced snapshot can be freed; 1 in alloc_index_stale while no snapshot could be made (out
     * of memory): lookups then walk the registry under its lock. */
    struct symmem_alloc_index *alloc_index;
    int alloc_index_readers;
    int alloc_index_stale;

    pthread_mutex_t lock;        /* guards async_error_msg and the writes of async_error */
    symmem_status_t async_error; /* sticky: once set every collective call fails with it; written under the
                                    lock after the message (release), so a call reads it without the lock */
    char async_error_msg[1024]; /* a timeout's message with its hints (collectives/errors.c) */

    struct symmem_coll *coll; /* owned by collectives/ */

    /* The communicators made together by symmem_comm_init_all (NULL otherwise): all ranks live in this
     * process, so a blocking collective call that no thread can ever match is refused at once. */
    struct symmem_comm_set *set;
};

/* ---- error state (comm_state.c) ------------------------------------------------------------------------- */
/* Put the communicator in its error state (the first error wins) with `msg`. Logs nothing: the layer that
 * detected the error logged it. */
void symmem_comm_set_error(symmem_comm_t comm, symmem_status_t status, const char *msg);
/* The error state, read under the lock: SYMMEM_OK, or the status with its message copied into msg. */
symmem_status_t symmem_comm_error(symmem_comm_t comm, char *msg, size_t len);

/* ---- live handles (comm_state.c) ------------------------------------------------------------------------- */
/* Registry of live communicators: destroy and the entry guard look a handle up here instead of reading
 * through it, so a destroyed (freed) or foreign handle is rejected without touching its memory. */
int symmem_comm_live_add(symmem_comm_t comm);  /* 0: out of memory */
int symmem_comm_live(symmem_comm_t comm);      /* 1: live */
int symmem_comm_live_take(symmem_comm_t comm); /* removed; 1 if it was live (one of two racing takes wins) */

/* ---- the entry guard of public calls (comm_state.c) ------------------------------------------------------ */
/* Validates the handle, clears the last error, makes comm->rank the rank shown in logs and errors and
 * comm->device current for the thread; symmem_entry_end restores what was there. */
typedef struct symmem_entry {
    int prev_rank;
    int prev_device; /* -1 if not changed */
    const char *prev_call;
    int prev_call_checked;
} symmem_entry_t;
symmem_status_t symmem_entry_begin(symmem_comm_t comm, const char *call, symmem_entry_t *e);
/* The rank and device part alone, for a handle known to be live outside a public call's checks (destroy,
 * after it took the handle out of the registry). */
void symmem_entry_enter(symmem_comm_t comm, symmem_entry_t *e);
void symmem_entry_end(const symmem_entry_t *e);
/* The public call the thread is in (NULL outside one), and whether its first blocking step was checked. */
const char *symmem_entry_call(int **checked);

/* ---- host-side collectives over the bootstrap mesh (hostcoll.c) ------------------------------------------ */
/* Blocking, with the communicator's timeout. They name the rank that failed or did not answer, and put the
 * communicator in its error state when a peer is gone or out of step. On communicators of
 * symmem_comm_init_all, the first of them in a public call fails at once (SYMMEM_INVALID_USAGE,
 * SYMMEM_PEER_FAILURE) when no thread can make a sibling rank's matching call: a single-threaded process
 * outside a group, a sibling destroyed or failed. */
symmem_status_t symmem_comm_allgather(symmem_comm_t comm, const void *send, void *recv, size_t bytes);
symmem_status_t symmem_comm_barrier(symmem_comm_t comm);
/* Exchange one file descriptor with every peer: fds_out[r] is rank r's fd, dup'ed into this process
 * (fds_out[rank] = a dup of my_fd). `tag` (same on all ranks) guards against crossed exchanges. */
symmem_status_t symmem_comm_exchange_fds(symmem_comm_t comm, int my_fd, uint64_t tag, int *fds_out);

/* The set of symmem_comm_init_all: made once every rank is up (a failure only loses the early misuse
 * checks), left by each rank at destroy (the last one frees it). */
void symmem_comm_set_attach(symmem_comm_t *comms, int nranks);
void symmem_comm_set_detach(symmem_comm_t comm);

#ifdef __cplusplus
}
#endif
#endif
