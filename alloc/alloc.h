/* Symmetric allocation internals: the buffer record and the memory backends (CUDA cuMem, host memfd)
 * that share one allocation protocol: create local memory, export it as a file descriptor, pass the
 * descriptors over the bootstrap's Unix sockets, import every peer's, map all ranks' memory into one
 * address reservation at offset rank * stride, grant access. */
#ifndef SYMMEM_ALLOC_ALLOC_H
#define SYMMEM_ALLOC_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "boot/comm_state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct symmem_mem_ops {
    const char *name;
    /* Allocation granularity (the RECOMMENDED one for cuMem, which NCCL registration needs). */
    symmem_status_t (*granularity)(symmem_comm_t c, symmem_placement_t pl, int numa_node, size_t *gran);
    /* Largest sensible allocation per rank (device or host memory size), for a clear "absurd size" error. */
    size_t (*capacity)(symmem_comm_t c, symmem_placement_t pl);
    symmem_status_t (*create)(symmem_comm_t c, symmem_placement_t pl, int numa_node, size_t bytes, uint64_t *handle);
    symmem_status_t (*export_fd)(uint64_t handle, int *fd);
    symmem_status_t (*import_fd)(int fd, uint64_t *handle); /* does not close fd */
    void (*release)(uint64_t handle);
    symmem_status_t (*reserve)(size_t bytes, size_t align, char **va);
    void (*unreserve)(char *va, size_t bytes);
    symmem_status_t (*map)(char *va, size_t bytes, uint64_t handle);
    void (*unmap)(char *va, size_t bytes);
    symmem_status_t (*set_access)(symmem_comm_t c, symmem_placement_t pl, char *va, size_t bytes);
    symmem_status_t (*zero)(void *ptr, size_t bytes);
    /* Copy a host array of pointers to where kernels can read it (device memory for CUDA). */
    symmem_status_t (*make_table)(void *const *host, size_t n, void ***out);
    void (*free_table)(void **table);
} symmem_mem_ops_t;

extern const symmem_mem_ops_t symmem_mem_ops_host;
extern const symmem_mem_ops_t symmem_mem_ops_cuda;

/* Read only after finding the handle live (alloc/symm.c's registry), never on the caller's word. */
struct symmem_buffer {
    symmem_comm_t comm;
    const symmem_mem_ops_t *ops;
    symmem_placement_t placement;
    uint64_t seq;         /* which symmem_alloc of the communicator made it: the same on every rank */
    size_t size;          /* as requested */
    size_t mapped_size;   /* data part, rounded to the granularity */
    size_t stride;        /* one rank's physical allocation: data part + signal part */
    char *base;           /* reservation of nranks * stride; rank r's memory at base + r * stride */
    uint64_t handles[SYMMEM_MAX_RANKS];
    int nmapped;          /* ranks [0, nmapped) are mapped */
    void *peers[SYMMEM_MAX_RANKS];
    void *signals[SYMMEM_MAX_RANKS];
    void **table;         /* [peers[SYMMEM_MAX_RANKS], signals[SYMMEM_MAX_RANKS]] where kernels read it */
    struct symmem_buffer *prev, *next; /* registry of live buffers */
};

/* 1 if buf is a live buffer (found in the registry without reading *buf). */
int symmem_alloc_live(symmem_buffer_t buf);
/* The buffer's allocation sequence number (identical on every rank for the same allocation). */
uint64_t symmem_buffer_seq(symmem_buffer_t buf);

/* The allocation protocol for the layers above (the collectives' workspace), without what the public calls
 * add: no entry guard (the caller is inside its own public call or init), no group recording, no check of
 * the communicator's error state. Collective, as symmem_alloc. */
symmem_status_t symmem_alloc_create(symmem_comm_t comm, size_t size, symmem_buffer_t *out);
/* Local: free buf if it is a live buffer (1), else nothing (0). */
int symmem_alloc_release(symmem_buffer_t buf);
/* The live buffer of comm whose local part holds ptr, or NULL (what symmem_buffer_lookup returns). Takes no
 * lock (a snapshot of the communicator's buffers by address): every collective call asks it twice. */
symmem_buffer_t symmem_alloc_find(symmem_comm_t comm, const void *ptr);
/* At the communicator's release, after its buffers: frees the snapshots that symmem_alloc_find searched. */
void symmem_alloc_index_free(symmem_comm_t comm);

/* Free every live buffer of a communicator (at destroy), warning about each. */
void symmem_buffers_release_all(symmem_comm_t c);

/* Node to place host memory on for this rank: the option, else the GPU's node, checked with libnuma. */
symmem_status_t symmem_numa_pick(symmem_comm_t c, int *node);

#ifdef __cplusplus
}
#endif
#endif
