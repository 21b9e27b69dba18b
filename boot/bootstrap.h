/* The bootstrap: an authenticated full mesh of Unix-domain stream sockets between the ranks of one host.
 *
 * Each rank listens on a socket whose name is derived from the unique id's secret and its rank
 * (HMAC-SHA256, boot/bootmsg.h): an abstract name "\0symmem-<32 hex>", or, with SYMMEM_SOCKET_DIR, a file of
 * that name in the user's own 0700 directory. Rank i connects to every rank j > i. Both ends check the other's
 * uid with SO_PEERCRED (other users are turned away before a byte moves), then prove with a challenge-response
 * over fresh nonces that they hold the secret, which never crosses the socket; the rank counts are compared
 * once both are authenticated. All connections of a rank are driven by one poll loop, so idle or hostile
 * connections cost nothing but their own slot; every wait has a deadline. After setup, every pair shares one
 * socket used for small messages (allgather, barrier) and for passing file descriptors (SCM_RIGHTS); a closed
 * socket names the rank that left, and a rank that gives up, at init or later, tells its peers why (ABORT).
 * The trust model is in docs/security.md.
 */
#ifndef SYMMEM_BOOT_BOOTSTRAP_H
#define SYMMEM_BOOT_BOOTSTRAP_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

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
    unsigned char tag[SYMMEM_BOOT_TAG_BYTES];       /* random, bound into the names and the handshake MACs */
    unsigned char secret[SYMMEM_BOOT_SECRET_BYTES]; /* private: keys the socket names and the handshake */
    int32_t creator_pid;
    uint32_t created_s; /* creation time, seconds (for messages about stale ids) */
} symmem_boot_id_t;
static_assert(sizeof(symmem_boot_id_t) == SYMMEM_UNIQUE_ID_BYTES, "the boot id is the unique id's payload");

#define SYMMEM_BOOT_ID_MAGIC 0x494d5953u /* "SYMI" */
#define SYMMEM_BOOT_ID_VERSION 2 /* 2: secret-derived names, challenge-response */

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
/* Best effort, never waits: tell every connected peer that this rank gives up and why (its status and
 * `why`, e.g. the last error), so that their errors name the cause instead of "rank N closed its
 * connection". A TIMEOUT stays a TIMEOUT at the peers; anything else is a PEER_FAILURE there. Sent once per
 * mesh, by a failed init and by the first failed host collective after it (boot/hostcoll.c); a peer reads it
 * where it would have read this rank's next message, or finds it queued when its send to this rank fails. */
void symmem_boot_abort(symmem_boot_t *boot, symmem_status_t status, const char *why);
/* The address rank `rank` of this id listens on (abstract, or in SYMMEM_SOCKET_DIR). For tests and tools. */
symmem_status_t symmem_boot_sock_addr(const symmem_boot_id_t *id, int rank, struct sockaddr_un *addr,
                                      socklen_t *len);

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
