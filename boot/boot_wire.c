/* The bootstrap's messages on one connected socket: framing with deadlines, descriptors passed and received
 * (SCM_RIGHTS), the errors that name the peer; and the helpers the mesh setup shares (boot_internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/status.h"
#include "boot/boot_internal.h"

const char *boot_who(int peer)
{
    static _Thread_local char buf[32];
    if (peer < 0) return "a connecting process";
    snprintf(buf, sizeof buf, "rank %d", peer);
    return buf;
}

int64_t boot_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int boot_remaining_ms(int64_t deadline)
{
    int64_t left = deadline - boot_now_ms();
    return left < 0 ? 0 : (left > 1000000 ? 1000000 : (int)left);
}

symmem_status_t boot_fill_random(void *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom((char *)p + got, n - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "getrandom failed: %s", strerror(errno));
        got += (size_t)r;
    }
    return SYMMEM_OK;
}

/* ---- descriptors in received messages ---------------------------------------------------------------------- */

/* Take the descriptors a recvmsg delivered: up to `want` go to out[*got...], every other one is closed at
 * once. Returns how many arrived in all (every SCM_RIGHTS entry, every descriptor in each). */
int boot_take_fds(struct msghdr *m, int *out, int want, int *got)
{
    int total = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0)) continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            total++;
            if (out && *got < want) out[(*got)++] = fd;
            else close(fd);
        }
    }
    return total;
}


/* ---- sending ------------------------------------------------------------------------------------------------ */

symmem_status_t boot_wait_fd(int fd, short events, int64_t deadline, int peer, const char *what)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events, .revents = 0};
        int r = poll(&p, 1, boot_remaining_ms(deadline));
        if (r > 0) return SYMMEM_OK;
        if (r == 0)
            return symmem_set_error(SYMMEM_TIMEOUT,
                                    "%s: %s did not answer within the timeout (SYMMEM_TIMEOUT_MS); it may "
                                    "be stuck, dead, or not making the same call",
                                    what, boot_who(peer));
        if (errno != EINTR) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: poll: %s", what, strerror(errno));
    }
}

/* One receive without waiting, up to len bytes: the descriptors that came with them as boot_take_fds
 * takes them (*arrived: how many in all; *ctrunc: the kernel dropped some). recvmsg's result. */
static ssize_t recv_step(int fd, void *buf, size_t len, int *fds_out, int want, int *nfds, int *arrived,
                         int *ctrunc)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    ctrl_buf_t ctrl;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf, .msg_controllen = sizeof ctrl.buf};
    const ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    *arrived = n > 0 ? boot_take_fds(&m, fds_out, want, nfds) : 0;
    *ctrunc = n > 0 && (m.msg_flags & MSG_CTRUNC);
    return n;
}

/* Bytes already queued on fd, without waiting: up to len, descriptors closed. How many were read. */
static size_t recv_queued(int fd, void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        int arrived, ctrunc;
        const ssize_t n = recv_step(fd, (char *)buf + done, len - done, NULL, 0, NULL, &arrived, &ctrunc);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (size_t)n;
    }
    return done;
}

/* A send to `peer` found its connection closed. If the peer said why before it left (an ABORT among what it
 * sent and this rank has not read yet), that is the error: it names the rank at the root of the failure,
 * where "closed its connection" would blame this peer, which only followed. Reads without waiting what the
 * peer left queued and discards the rest: the mesh is out of step once a send has failed. */
static symmem_status_t peer_left(symmem_boot_t *b, int peer, const char *what)
{
    const int fd = b->fds[peer];
    for (int k = 0; k < 64; k++) { /* what a peer can have queued: a few messages of the calls in flight */
        symmem_boot_hdr_t h;
        if (recv_queued(fd, &h, sizeof h) < sizeof h || symmem_boot_hdr_check(&h) || h.rank != peer) break;
        unsigned char payload[SYMMEM_BOOT_ABORT_MAX];
        if (h.type != SYMMEM_BOOT_ABORT) {
            size_t skip = h.len;
            while (skip > 0) {
                size_t got = recv_queued(fd, payload, skip < sizeof payload ? skip : sizeof payload);
                if (got == 0) break;
                skip -= got;
            }
            if (skip > 0) break;
            continue;
        }
        if (recv_queued(fd, payload, h.len) < h.len) break;
        const int len = (int)(h.len - sizeof(int32_t));
        const char *text = (const char *)payload + sizeof(int32_t);
        SYMMEM_INFO(SYMMEM_SUBSYS_BOOT, "%s: rank %d gave up: %.*s", what, peer, len, text);
        return symmem_record_error(boot_abort_status(payload), "%s: rank %d gave up: %.*s", what, peer, len, text);
    }
    return symmem_set_error(SYMMEM_PEER_FAILURE,
                            "%s: %s closed its connection (it exited, crashed or destroyed its communicator)", what,
                            boot_who(peer));
}

/* Send header + payload (+ one descriptor attached to the first byte). */
symmem_status_t boot_send_msg(symmem_boot_t *b, int peer, const symmem_boot_hdr_t *hdr, const void *payload,
                              int pass_fd, int64_t deadline, const char *what)
{
    const int fd = b->fds[peer];
    size_t total = sizeof *hdr + hdr->len, done = 0;
    while (done < total) {
        struct iovec iov[2];
        int niov = 0;
        if (done < sizeof *hdr) {
            iov[niov].iov_base = (char *)hdr + done;
            iov[niov++].iov_len = sizeof *hdr - done;
        }
        if (hdr->len) {
            size_t off = done > sizeof *hdr ? done - sizeof *hdr : 0;
            iov[niov].iov_base = (char *)payload + off;
            iov[niov++].iov_len = hdr->len - off;
        }
        ctrl_buf_t ctrl;
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        if (done == 0 && pass_fd >= 0) {
            memset(&ctrl, 0, sizeof ctrl);
            m.msg_control = ctrl.buf;
            m.msg_controllen = CMSG_SPACE(sizeof(int));
            struct cmsghdr *c = CMSG_FIRSTHDR(&m);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        }
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        symmem_status_t st;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            st = boot_wait_fd(fd, POLLOUT, deadline, peer, what);
        else if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            st = peer_left(b, peer, what);
        else
            st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: sending to %s: %s", what, boot_who(peer),
                                  symmem_errno_string(errno));
        if (st == SYMMEM_OK) continue;
        /* Part of the message went out: nothing may follow it on this socket (an ABORT would be read as the
         * rest of it), so the peer reads the end of the stream instead. */
        if (done > 0) shutdown(fd, SHUT_WR);
        return st;
    }
    return SYMMEM_OK;
}

/* One whole handshake message now, without waiting: a fresh connection's buffer always has room for it.
 * Returns 0, or -1 with errno set. */
int boot_send_now(int fd, symmem_boot_msg_type_t type, int rank, int nranks, const void *payload, uint32_t len)
{
    unsigned char buf[SYMMEM_BOOT_HS_MAX];
    symmem_boot_hdr_t h;
    symmem_boot_hdr_make(&h, type, rank, nranks, 0, len);
    memcpy(buf, &h, sizeof h);
    if (len) memcpy(buf + sizeof h, payload, len);
    ssize_t n = send(fd, buf, sizeof h + len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == (ssize_t)(sizeof h + len)) return 0;
    if (n >= 0) errno = EAGAIN;
    return -1;
}

/* A peer's ABORT as this rank's error: the peer's text, and its status if that was a timeout (the job's
 * problem is then a missing or stuck rank, whoever noticed first); any other failure of the peer is a
 * PEER_FAILURE here. */
symmem_status_t boot_abort_status(const unsigned char *payload)
{
    int32_t st;
    memcpy(&st, payload, sizeof st);
    return st == SYMMEM_TIMEOUT ? SYMMEM_TIMEOUT : SYMMEM_PEER_FAILURE;
}

/* Receive exactly len bytes. Descriptors arriving with them: up to `want` are stored in fds_out (from
 * *nfds on), every other one is closed; *extra counts those closed, *trunc says the kernel dropped some. */
static symmem_status_t recv_exact(int fd, void *buf, size_t len, int *fds_out, int want, int *nfds, int *extra,
                                  int *trunc, int64_t deadline, int peer, const char *what)
{
    size_t done = 0;
    while (done < len) {
        const int before = *nfds;
        int arrived, ctrunc;
        const ssize_t n = recv_step(fd, (char *)buf + done, len - done, fds_out, want, nfds, &arrived, &ctrunc);
        if (n > 0) {
            *extra += arrived - (*nfds - before);
            if (ctrunc) *trunc = 1;
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return symmem_set_error(SYMMEM_PEER_FAILURE,
                                    "%s: %s closed its connection (it exited, crashed or destroyed its "
                                    "communicator)",
                                    what, boot_who(peer));
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            SYMMEM_CHECK(boot_wait_fd(fd, POLLIN, deadline, peer, what));
            continue;
        }
        if (errno == ECONNRESET)
            return symmem_set_error(SYMMEM_PEER_FAILURE, "%s: %s reset its connection (it exited or crashed)",
                                    what, boot_who(peer));
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: receiving from %s: %s", what, boot_who(peer),
                                symmem_errno_string(errno));
    }
    return SYMMEM_OK;
}

/* Why an expected descriptor did not arrive: the kernel drops descriptors it cannot install, and the
 * usual reason is a full descriptor table here. */
static symmem_status_t missing_fd_error(int sock, int peer, const char *what)
{
    int probe = fcntl(sock, F_DUPFD_CLOEXEC, 0);
    int e = errno;
    if (probe >= 0) close(probe);
    if (probe < 0 && (e == EMFILE || e == ENFILE))
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: the descriptor from rank %d could not be received: %s",
                                what, peer, symmem_errno_string(e));
    return symmem_set_error(SYMMEM_PEER_FAILURE,
                            "%s: the descriptor from rank %d did not arrive (the kernel dropped it: MSG_CTRUNC)",
                            what, peer);
}

/* One message from a connected peer; a descriptor (FD messages only) goes to *fd_out. */
symmem_status_t boot_recv_msg(symmem_boot_t *b, int peer, symmem_boot_hdr_t *hdr, void *payload, size_t maxlen,
                                int *fd_out, int64_t deadline, const char *what)
{
    int fd = b->fds[peer], nfds = 0, extra = 0, trunc = 0, want = fd_out ? FDS_PER_MSG : 0;
    symmem_status_t st = recv_exact(fd, hdr, sizeof *hdr, fd_out, want, &nfds, &extra, &trunc, deadline, peer, what);
    const char *bad = st == SYMMEM_OK ? symmem_boot_hdr_check(hdr) : NULL;
    if (st == SYMMEM_OK && bad)
        st = symmem_set_error(SYMMEM_PEER_FAILURE, "%s: garbage from rank %d (%s)", what, peer, bad);
    if (st == SYMMEM_OK && hdr->rank != peer)
        st = symmem_set_error(SYMMEM_PEER_FAILURE, "%s: rank %d's connection carried a message from rank %d", what,
                              peer, hdr->rank);
    if (st == SYMMEM_OK && hdr->type == SYMMEM_BOOT_ABORT) {
        unsigned char text[SYMMEM_BOOT_ABORT_MAX];
        st = recv_exact(fd, text, hdr->len, NULL, 0, &nfds, &extra, &trunc, deadline, peer, what);
        if (st == SYMMEM_OK) { /* logged by the rank that gave up; recorded here (see on_abort) */
            SYMMEM_INFO(SYMMEM_SUBSYS_BOOT, "%s: rank %d gave up: %.*s", what, peer, (int)(hdr->len - sizeof(int32_t)),
                        (const char *)text + sizeof(int32_t));
            st = symmem_record_error(boot_abort_status(text), "%s: rank %d gave up: %.*s", what, peer,
                                     (int)(hdr->len - sizeof(int32_t)), (const char *)text + sizeof(int32_t));
        }
    }
    if (st == SYMMEM_OK && hdr->len > maxlen)
        st = symmem_set_error(SYMMEM_PEER_FAILURE,
                              "%s: rank %d sent %u bytes where %zu were expected: ranks are making different "
                              "calls or passing different sizes",
                              what, peer, hdr->len, maxlen);
    if (st == SYMMEM_OK && hdr->len)
        st = recv_exact(fd, payload, hdr->len, fd_out, want, &nfds, &extra, &trunc, deadline, peer, what);
    if (st == SYMMEM_OK && (extra || (trunc && nfds == want))) {
        if (want)
            st = symmem_set_error(SYMMEM_PEER_FAILURE,
                                  "%s: rank %d sent more file descriptors than the protocol allows (the extra ones "
                                  "were closed)",
                                  what, peer);
        else
            st = symmem_set_error(SYMMEM_PEER_FAILURE,
                                  "%s: rank %d sent file descriptors with a message that carries none (closed)", what,
                                  peer);
    }
    if (st == SYMMEM_OK && want && nfds < want && trunc) st = missing_fd_error(fd, peer, what);
    if (st != SYMMEM_OK && fd_out && nfds) {
        close(*fd_out);
        *fd_out = -1;
    }
    return st;
}
