/* The bootstrap: an authenticated full mesh of Unix-domain stream sockets between the ranks of one host.
 *
 * Each rank listens on an abstract-namespace socket named from the unique id's public tag and its rank
 * ("\0symmem-<tag>-<rank>"). Rank i connects to every rank j > i; the connecting side sends a hello with the
 * id's secret, its rank and the rank count; the accepting side checks the peer's uid (SO_PEERCRED), the
 * secret, the rank and the rank count, and answers with its own hello, which the connector checks in turn.
 * A connection that fails a check is closed and logged; the rank keeps waiting for the real peer. After
 * setup, every pair shares one socket used for small messages (allgather, barrier) and for passing file
 * descriptors (SCM_RIGHTS). Every wait has a deadline; a closed socket names the rank that left.
 */
#ifndef SYMMEM_CORE_BOOTSTRAP_H
#define SYMMEM_CORE_BOOTSTRAP_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "symmem/symmem.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SYMMEM_BOOT_TAG_BYTES 16
#define SYMMEM_BOOT_SECRET_BYTES 32

/* The unique id's layout (SYMMEM_UNIQUE_ID_BYTES bytes). */
typedef struct symmem_boot_id {
    uint32_t magic;   /* SYMMEM_BOOT_ID_MAGIC */
    uint16_t version; /* SYMMEM_BOOT_ID_VERSION */
    uint16_t flags;
    unsigned char tag[SYMMEM_BOOT_TAG_BYTES];       /* public: names the sockets */
    unsigned char secret[SYMMEM_BOOT_SECRET_BYTES]; /* private: proves membership */
    int32_t creator_pid;
    uint32_t created_s; /* creation time, seconds (for messages about stale ids) */
} symmem_boot_id_t;
static_assert(sizeof(symmem_boot_id_t) == SYMMEM_UNIQUE_ID_BYTES, "the boot id is the unique id's payload");

#define SYMMEM_BOOT_ID_MAGIC 0x494d5953u /* "SYMI" */
#define SYMMEM_BOOT_ID_VERSION 1

typedef struct symmem_boot symmem_boot_t;

/* Fill a fresh id (random tag and secret from getrandom). */
symmem_status_t symmem_boot_id_make(symmem_boot_id_t *id);
/* Check magic and version. */
symmem_status_t symmem_boot_id_check(const symmem_boot_id_t *id);

/* Collective: build the mesh. Blocks until every rank is connected and authenticated or timeout_ms passes
 * (SYMMEM_TIMEOUT naming the ranks that never arrived). */
symmem_status_t symmem_boot_create(const symmem_boot_id_t *id, int nranks, int rank, int timeout_ms,
                                   symmem_boot_t **out);
void symmem_boot_destroy(symmem_boot_t *boot);

/* Collective: every rank contributes `bytes` (<= 64 KiB); recv gets nranks*bytes ordered by rank. `what`
 * names the operation in errors ("symmem_alloc"). */
symmem_status_t symmem_boot_allgather(symmem_boot_t *boot, const void *send, void *recv, size_t bytes,
                                      const char *what);
symmem_status_t symmem_boot_barrier(symmem_boot_t *boot, const char *what);
/* Collective: send my_fd to every peer; fds_out[r] receives rank r's descriptor (a dup of my_fd for this
 * rank). On failure no descriptor is left open. `tag` must match on every rank. */
symmem_status_t symmem_boot_exchange_fds(symmem_boot_t *boot, int my_fd, uint64_t tag, int *fds_out,
                                         const char *what);

#ifdef __cplusplus
}
#endif
#endif
