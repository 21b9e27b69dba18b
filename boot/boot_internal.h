/* The bootstrap's internals shared by its three files: the mesh handle, and the message helpers of
 * boot_wire.c that the mesh setup (boot_mesh.c) and the collectives over the mesh (bootstrap.c) use. */
#ifndef SYMMEM_BOOT_BOOT_INTERNAL_H
#define SYMMEM_BOOT_BOOT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "boot/bootmsg.h"
#include "boot/bootstrap.h"

#define FDS_PER_MSG 1 /* descriptors the protocol attaches to one message */

struct symmem_boot {
    int rank;
    int nranks;
    int timeout_ms;
    int listen_fd;
    uint64_t seq; /* collective calls made so far; the same on every rank */
    int aborted;  /* this rank has told its peers it gives up (symmem_boot_abort): once is enough */
    int fds[SYMMEM_MAX_RANKS];
    symmem_boot_id_t id;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* socket file to remove; "" for abstract names */
};

/* Control buffer for one message: room for the FDS_PER_MSG descriptors the protocol sends; anything more
 * is discarded by the kernel and flagged with MSG_CTRUNC, which the receivers check. */
typedef union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * FDS_PER_MSG)];
} ctrl_buf_t;

/* "rank 3", or "a connecting process" for peer -1 (a per-thread buffer). */
const char *boot_who(int peer);
int64_t boot_now_ms(void);
/* Milliseconds until `deadline` (boot_now_ms time), 0 when past. */
int boot_remaining_ms(int64_t deadline);
symmem_status_t boot_fill_random(void *p, size_t n);
/* Take the descriptors a recvmsg delivered: up to `want` go to out[*got...], every other one is closed at
 * once. Returns how many arrived in all. */
int boot_take_fds(struct msghdr *m, int *out, int want, int *got);
/* Wait for `events` on fd until `deadline`; SYMMEM_TIMEOUT names `peer` and `what`. */
symmem_status_t boot_wait_fd(int fd, short events, int64_t deadline, int peer, const char *what);
/* Send header + payload (+ one descriptor attached to the first byte, pass_fd >= 0) to a connected peer. A
 * peer found gone is named by what it said before it left (its ABORT, still queued here) if it said anything:
 * the rank at the root of the failure, not the peer that only followed it. */
symmem_status_t boot_send_msg(symmem_boot_t *b, int peer, const symmem_boot_hdr_t *hdr, const void *payload,
                              int pass_fd, int64_t deadline, const char *what);
/* One whole message now, without waiting (handshakes, ABORT): 0, or -1 when the socket cannot take it. */
int boot_send_now(int fd, symmem_boot_msg_type_t type, int rank, int nranks, const void *payload, uint32_t len);
/* The status an ABORT from a peer becomes here: its TIMEOUT stays a TIMEOUT, anything else PEER_FAILURE. */
symmem_status_t boot_abort_status(const unsigned char *payload);
/* One message from a connected peer; a descriptor (FD messages only) goes to *fd_out. */
symmem_status_t boot_recv_msg(symmem_boot_t *b, int peer, symmem_boot_hdr_t *hdr, void *payload, size_t maxlen,
                              int *fd_out, int64_t deadline, const char *what);

#endif
