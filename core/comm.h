/* The communicator as the library sees it. Layers (alloc/, collectives/, topology/) read these fields;
 * only core/comm.c writes them after init, except where a field says who owns it. */
#ifndef SYMMEM_CORE_COMM_H
#define SYMMEM_CORE_COMM_H

#include <assert.h>
#include <pthread.h>
#include <stdint.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

struct symmem_boot; /* core/bootstrap.c: the authenticated socket mesh between ranks */
struct symmem_coll; /* collectives/: workspace, sequence counters, error record */

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
    symmem_peer_info_t peers[SYMMEM_MAX_RANKS];
    symmem_link_t link[SYMMEM_MAX_RANKS];
    int native_atomics[SYMMEM_MAX_RANKS];
    int all_p2p;      /* every pair of GPUs can map each other directly */
    int min_sm_count; /* smallest SM count of any rank */
    int ranks_per_device; /* most ranks sharing one GPU (several ranks on one GPU when testing) */
    /* Thread blocks one collective kernel may use: min over ranks of sm_count / ranks on that GPU, so
     * kernels of co-located ranks are all resident at once, and the same number on every rank, so grids
     * (and so per-block flags) agree across ranks. */
    int max_blocks;

    struct symmem_boot *boot;

    pthread_mutex_t lock;          /* guards `buffers` and `async_error` */
    struct symmem_buffer *buffers; /* live allocations (doubly linked) */
    uint64_t alloc_seq;            /* number of symmem_alloc calls so far: same on every rank */
    symmem_status_t async_error;   /* sticky: once set every collective call fails with it */
    char async_error_msg[512];

    struct symmem_coll *coll; /* owned by collectives/ */

    /* The communicators made together by symmem_comm_init_all (NULL otherwise): all ranks live in this
     * process, so a blocking collective call that no thread can ever match is refused at once. */
    struct symmem_comm_set *set;
};

/* Put the communicator in its error state (first error wins) and record the message. */
void symmem_comm_set_error(symmem_comm_t comm, symmem_status_t status, const char *msg);

/* Entry guard for public calls that act on a communicator: validates the handle, clears the last error,
 * makes comm->rank the rank shown in logs and errors and comm->device current for the thread. */
typedef struct symmem_entry {
    int prev_rank;
    int prev_device; /* -1 if not changed */
    const char *prev_call;
    int prev_call_checked;
} symmem_entry_t;
symmem_status_t symmem_entry_begin(symmem_comm_t comm, const char *call, symmem_entry_t *e);
/* Whether comm is a live communicator (in the registry; not yet taken out by symmem_comm_destroy). */
int symmem_comm_is_live(symmem_comm_t comm);
void symmem_entry_end(const symmem_entry_t *e);

/* Host-side collectives over the bootstrap mesh (blocking, with the communicator's timeout). They name the
 * rank that failed or did not answer. On communicators of symmem_comm_init_all, the first of them in a
 * public call fails at once (SYMMEM_INVALID_USAGE, SYMMEM_COMM_ERROR) when no thread can make a sibling
 * rank's matching call: a single-threaded process outside a group, a sibling destroyed or failed. */
symmem_status_t symmem_comm_allgather(symmem_comm_t comm, const void *send, void *recv, size_t bytes);
symmem_status_t symmem_comm_barrier(symmem_comm_t comm);
/* Exchange one file descriptor with every peer: fds_out[r] is rank r's fd, dup'ed into this process
 * (fds_out[rank] = a dup of my_fd). `tag` (same on all ranks) guards against crossed exchanges. */
symmem_status_t symmem_comm_exchange_fds(symmem_comm_t comm, int my_fd, uint64_t tag, int *fds_out);

/* Group calls (core/group.c). Inside a group (symmem_group_active()), a collective entry point records the
 * call with symmem_group_defer() and returns its status; the calls run at symmem_group_end(): the calls of
 * one communicator in the order they were made, on one thread (two at once would interleave their messages
 * on the same sockets), different communicators concurrently. comm NULL (a communicator being created):
 * the call gets a thread of its own. */
typedef symmem_status_t (*symmem_group_fn)(void *args);
int symmem_group_active(void);
symmem_status_t symmem_group_defer(symmem_comm_t comm, symmem_group_fn fn, const void *args, size_t args_size);

#ifdef __cplusplus
}
#endif
#endif
