#include "core/bootstrap.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "core/status.h"

#define MSG_MAGIC 0x424d5953u /* "SYMB" */
#define MAX_PAYLOAD (64u * 1024u)
#define HELLO_WAIT_MS 2000 /* how long an accepted connection may take to say hello */

enum { MSG_HELLO = 1, MSG_DATA = 2, MSG_FD = 3 };

/* Fixed header of every message between ranks; crosses processes. */
typedef struct msg_hdr {
    uint32_t magic;
    uint32_t type;
    uint64_t seq; /* which collective call (HELLO: 0) */
    uint32_t len; /* payload bytes following */
    int32_t rank; /* sender */
    int32_t nranks;
    uint32_t has_fd;
    unsigned char secret[SYMMEM_BOOT_SECRET_BYTES]; /* HELLO only */
} msg_hdr_t;
static_assert(sizeof(msg_hdr_t) == 64, "msg_hdr_t crosses processes: keep its layout fixed");

struct symmem_boot {
    int rank;
    int nranks;
    int timeout_ms;
    int listen_fd;
    uint64_t seq; /* collective calls made so far; the same on every rank */
    int fds[SYMMEM_MAX_RANKS];
    symmem_boot_id_t id;
};

/* "rank 3", or "a connecting process" for a connection not yet identified (a hello being read). */
static const char *who(int peer)
{
    static _Thread_local char buf[32];
    if (peer < 0) return "a connecting process";
    snprintf(buf, sizeof buf, "rank %d", peer);
    return buf;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int remaining_ms(int64_t deadline)
{
    int64_t left = deadline - now_ms();
    return left < 0 ? 0 : (left > 1000000 ? 1000000 : (int)left);
}

static void tag_hex(const symmem_boot_id_t *id, char *out)
{
    for (int i = 0; i < SYMMEM_BOOT_TAG_BYTES; i++) sprintf(out + 2 * i, "%02x", id->tag[i]);
}

/* Abstract-namespace address: no file to clean up, gone when the listener exits. */
static socklen_t sock_addr(const symmem_boot_id_t *id, int rank, struct sockaddr_un *addr)
{
    char hex[2 * SYMMEM_BOOT_TAG_BYTES + 1];
    tag_hex(id, hex);
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    int n = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "symmem-%s-%d", hex, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

symmem_status_t symmem_boot_id_make(symmem_boot_id_t *id)
{
    symmem_boot_id_t t;
    memset(&t, 0, sizeof t);
    t.magic = SYMMEM_BOOT_ID_MAGIC;
    t.version = SYMMEM_BOOT_ID_VERSION;
    unsigned char rnd[SYMMEM_BOOT_TAG_BYTES + SYMMEM_BOOT_SECRET_BYTES];
    size_t got = 0;
    while (got < sizeof rnd) {
        ssize_t n = getrandom(rnd + got, sizeof rnd - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "getrandom failed: %s", strerror(errno));
        got += (size_t)n;
    }
    memcpy(t.tag, rnd, SYMMEM_BOOT_TAG_BYTES);
    memcpy(t.secret, rnd + SYMMEM_BOOT_TAG_BYTES, SYMMEM_BOOT_SECRET_BYTES);
    t.creator_pid = (int32_t)getpid();
    t.created_s = (uint32_t)time(NULL);
    *id = t;
    return SYMMEM_OK;
}

symmem_status_t symmem_boot_id_check(const symmem_boot_id_t *id)
{
    if (id->magic != SYMMEM_BOOT_ID_MAGIC)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "the unique id is not a symmem id (bad magic 0x%08x): pass the id made by "
                                "symmem_get_unique_id, unmodified",
                                id->magic);
    if (id->version != SYMMEM_BOOT_ID_VERSION)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "the unique id has version %u, this library expects %u: all ranks must use the "
                                "same symmem version",
                                id->version, SYMMEM_BOOT_ID_VERSION);
    return SYMMEM_OK;
}

/* Constant-time comparison, so timing does not leak the secret. */
static int secret_equal(const unsigned char *a, const unsigned char *b)
{
    unsigned char d = 0;
    for (int i = 0; i < SYMMEM_BOOT_SECRET_BYTES; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static symmem_status_t wait_fd(int fd, short events, int64_t deadline, int peer, const char *what)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events, .revents = 0};
        int r = poll(&p, 1, remaining_ms(deadline));
        if (r > 0) return SYMMEM_OK;
        if (r == 0)
            return symmem_set_error(SYMMEM_TIMEOUT,
                                    "%s: %s did not answer within the timeout (SYMMEM_TIMEOUT_MS); it may "
                                    "be stuck, dead, or not making the same call",
                                    what, who(peer));
        if (errno != EINTR) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: poll: %s", what, strerror(errno));
    }
}

/* Send header + payload (+ one descriptor attached to the first byte). */
static symmem_status_t send_msg(int fd, const msg_hdr_t *hdr, const void *payload, int pass_fd, int64_t deadline,
                                int peer, const char *what)
{
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
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int))];
        } ctrl;
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        if (done == 0 && pass_fd >= 0) {
            memset(&ctrl, 0, sizeof ctrl);
            m.msg_control = ctrl.buf;
            m.msg_controllen = sizeof ctrl.buf;
            struct cmsghdr *c = CMSG_FIRSTHDR(&m);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        }
        ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            SYMMEM_CHECK(wait_fd(fd, POLLOUT, deadline, peer, what));
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
            return symmem_set_error(SYMMEM_PEER_FAILURE,
                                    "%s: %s closed its connection (it exited, crashed or destroyed its "
                                    "communicator)",
                                    what, who(peer));
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: sending to %s: %s", what, who(peer), strerror(errno));
    }
    return SYMMEM_OK;
}

/* Receive exactly len bytes; a descriptor arriving with them is stored in *fd_out (if non-NULL). */
static symmem_status_t recv_exact(int fd, void *buf, size_t len, int *fd_out, int64_t deadline, int peer,
                                  const char *what)
{
    size_t done = 0;
    while (done < len) {
        struct iovec iov = {.iov_base = (char *)buf + done, .iov_len = len - done};
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int))];
        } ctrl;
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf,
                           .msg_controllen = sizeof ctrl.buf};
        ssize_t n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC);
        if (n > 0) {
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
                if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
                int got;
                memcpy(&got, CMSG_DATA(c), sizeof got);
                if (fd_out && *fd_out < 0)
                    *fd_out = got;
                else
                    close(got); /* unexpected descriptor: never leak it */
            }
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return symmem_set_error(SYMMEM_PEER_FAILURE,
                                    "%s: %s closed its connection (it exited, crashed or destroyed its "
                                    "communicator)",
                                    what, who(peer));
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            SYMMEM_CHECK(wait_fd(fd, POLLIN, deadline, peer, what));
            continue;
        }
        if (errno == ECONNRESET)
            return symmem_set_error(SYMMEM_PEER_FAILURE, "%s: %s reset its connection (it exited or crashed)",
                                    what, who(peer));
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: receiving from %s: %s", what, who(peer), strerror(errno));
    }
    return SYMMEM_OK;
}

static symmem_status_t recv_msg(int fd, msg_hdr_t *hdr, void *payload, size_t maxlen, int *fd_out,
                                int64_t deadline, int peer, const char *what)
{
    SYMMEM_CHECK(recv_exact(fd, hdr, sizeof *hdr, fd_out, deadline, peer, what));
    if (hdr->magic != MSG_MAGIC)
        return symmem_set_error(SYMMEM_PEER_FAILURE, "%s: garbage from %s (bad message magic)", what, who(peer));
    if (hdr->len > maxlen)
        return symmem_set_error(SYMMEM_PEER_FAILURE,
                                "%s: rank %d sent %u bytes where %zu were expected: ranks are making different "
                                "calls or passing different sizes",
                                what, peer, hdr->len, maxlen);
    if (hdr->len) SYMMEM_CHECK(recv_exact(fd, payload, hdr->len, fd_out, deadline, peer, what));
    return SYMMEM_OK;
}

static void make_hello(const symmem_boot_t *b, msg_hdr_t *h)
{
    memset(h, 0, sizeof *h);
    h->magic = MSG_MAGIC;
    h->type = MSG_HELLO;
    h->rank = b->rank;
    h->nranks = b->nranks;
    memcpy(h->secret, b->id.secret, SYMMEM_BOOT_SECRET_BYTES);
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static symmem_status_t start_listening(symmem_boot_t *b)
{
    struct sockaddr_un addr;
    socklen_t alen = sock_addr(&b->id, b->rank, &addr);
    b->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (b->listen_fd < 0) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "socket(AF_UNIX): %s", strerror(errno));
    if (bind(b->listen_fd, (struct sockaddr *)&addr, alen) != 0) {
        int e = errno;
        if (e == EADDRINUSE)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "rank %d is already taken: another process or thread joined with the same "
                                    "unique id and rank (duplicate rank, or an id reused while its job still runs)",
                                    b->rank);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "bind of the bootstrap socket failed: %s", strerror(e));
    }
    if (listen(b->listen_fd, 4 * SYMMEM_MAX_RANKS) != 0)
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "listen: %s", strerror(errno));
    return SYMMEM_OK;
}

/* Connect to a higher rank, retrying while it has not started listening yet. */
static symmem_status_t connect_peer(symmem_boot_t *b, int peer, int64_t deadline, int *out)
{
    struct sockaddr_un addr;
    socklen_t alen = sock_addr(&b->id, peer, &addr);
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "socket(AF_UNIX): %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&addr, alen) == 0) {
            if (set_nonblock(fd) != 0) {
                close(fd);
                return symmem_set_error(SYMMEM_SYSTEM_ERROR, "fcntl: %s", strerror(errno));
            }
            *out = fd;
            return SYMMEM_OK;
        }
        int e = errno;
        close(fd);
        if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN && e != EINTR)
            return symmem_set_error(SYMMEM_SYSTEM_ERROR, "connecting to rank %d: %s", peer, strerror(e));
        if (remaining_ms(deadline) == 0)
            return symmem_set_error(SYMMEM_TIMEOUT,
                                    "communicator init: rank %d never started listening within the timeout "
                                    "(SYMMEM_TIMEOUT_MS): it was not started, crashed, or was given another "
                                    "unique id",
                                    peer);
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Check one accepted connection: same uid, right secret, a lower rank not yet connected, same rank count.
 * Returns the peer's rank, or -1 (connection rejected, already logged). */
static int admit(symmem_boot_t *b, int fd, int64_t deadline)
{
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.uid != geteuid()) {
        SYMMEM_WARN(SYMMEM_SUBSYS_BOOT, "rejected a bootstrap connection from pid %d uid %d: not our user",
                    (int)cred.pid, (int)cred.uid);
        return -1;
    }
    int64_t hello_deadline = now_ms() + HELLO_WAIT_MS;
    if (hello_deadline > deadline) hello_deadline = deadline;
    msg_hdr_t h;
    symmem_status_t st = recv_msg(fd, &h, NULL, 0, NULL, hello_deadline, -1, "bootstrap hello");
    if (st != SYMMEM_OK || h.type != MSG_HELLO || !secret_equal(h.secret, b->id.secret)) {
        SYMMEM_WARN(SYMMEM_SUBSYS_BOOT,
                    "rejected a bootstrap connection from pid %d: no valid hello with this communicator's secret",
                    (int)cred.pid);
        return -1;
    }
    if (h.nranks != b->nranks) {
        SYMMEM_WARN(SYMMEM_SUBSYS_BOOT, "rejected rank %d (pid %d): it says %d ranks, this rank says %d", h.rank,
                    (int)cred.pid, h.nranks, b->nranks);
        return -2 - h.rank; /* a real member with a wrong rank count: fatal for this init */
    }
    if (h.rank < 0 || h.rank >= b->rank || b->fds[h.rank] >= 0) {
        SYMMEM_WARN(SYMMEM_SUBSYS_BOOT, "rejected pid %d claiming rank %d: out of range or already connected",
                    (int)cred.pid, h.rank);
        return -1;
    }
    return h.rank;
}

static symmem_status_t accept_lower_ranks(symmem_boot_t *b, int64_t deadline)
{
    int pending = b->rank;
    while (pending > 0) {
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return symmem_set_error(SYMMEM_SYSTEM_ERROR, "accept: %s", strerror(errno));
            struct pollfd p = {.fd = b->listen_fd, .events = POLLIN, .revents = 0};
            if (poll(&p, 1, remaining_ms(deadline)) == 0) break;
            continue;
        }
        int peer = admit(b, fd, deadline);
        if (peer <= -2) {
            close(fd);
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "communicator init: rank %d was started with a different number of ranks "
                                    "than this rank (%d): every rank must pass the same nranks",
                                    -2 - peer, b->nranks);
        }
        if (peer < 0) {
            close(fd);
            continue;
        }
        msg_hdr_t reply;
        make_hello(b, &reply);
        symmem_status_t st = send_msg(fd, &reply, NULL, -1, deadline, peer, "communicator init");
        if (st != SYMMEM_OK) {
            close(fd);
            return st;
        }
        b->fds[peer] = fd;
        pending--;
    }
    if (pending == 0) return SYMMEM_OK;
    char missing[256] = "";
    size_t n = 0;
    for (int r = 0; r < b->rank && n + 8 < sizeof missing; r++)
        if (b->fds[r] < 0) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? ", " : "", r);
    return symmem_set_error(SYMMEM_TIMEOUT,
                            "communicator init: rank(s) %s never connected within the timeout (SYMMEM_TIMEOUT_MS): "
                            "they were not started, crashed, or were given another unique id",
                            missing);
}

static symmem_status_t check_replies(symmem_boot_t *b, int64_t deadline)
{
    for (int peer = b->rank + 1; peer < b->nranks; peer++) {
        msg_hdr_t h;
        SYMMEM_CHECK(recv_msg(b->fds[peer], &h, NULL, 0, NULL, deadline, peer, "communicator init"));
        if (h.type != MSG_HELLO || !secret_equal(h.secret, b->id.secret) || h.rank != peer)
            return symmem_set_error(SYMMEM_PEER_FAILURE,
                                    "communicator init: the process listening as rank %d did not prove it holds "
                                    "this communicator's secret",
                                    peer);
        if (h.nranks != b->nranks)
            return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                    "communicator init: rank %d says there are %d ranks, this rank says %d: every "
                                    "rank must pass the same nranks",
                                    peer, h.nranks, b->nranks);
    }
    return SYMMEM_OK;
}

symmem_status_t symmem_boot_create(const symmem_boot_id_t *id, int nranks, int rank, int timeout_ms,
                                   symmem_boot_t **out)
{
    SYMMEM_CHECK(symmem_boot_id_check(id));
    symmem_boot_t *b = calloc(1, sizeof *b);
    if (!b) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    b->rank = rank;
    b->nranks = nranks;
    b->timeout_ms = timeout_ms;
    b->id = *id;
    b->listen_fd = -1;
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++) b->fds[r] = -1;
    int64_t deadline = now_ms() + timeout_ms;
    symmem_status_t st;
    SYMMEM_CHECK_GOTO(start_listening(b), st, fail);
    for (int peer = rank + 1; peer < nranks; peer++) {
        SYMMEM_CHECK_GOTO(connect_peer(b, peer, deadline, &b->fds[peer]), st, fail);
        msg_hdr_t h;
        make_hello(b, &h);
        SYMMEM_CHECK_GOTO(send_msg(b->fds[peer], &h, NULL, -1, deadline, peer, "communicator init"), st, fail);
    }
    SYMMEM_CHECK_GOTO(accept_lower_ranks(b, deadline), st, fail);
    SYMMEM_CHECK_GOTO(check_replies(b, deadline), st, fail);
    /* Nobody else may join: close the listener so a late or foreign process gets ECONNREFUSED. */
    close(b->listen_fd);
    b->listen_fd = -1;
    SYMMEM_DEBUG(SYMMEM_SUBSYS_BOOT, "bootstrap mesh of %d ranks ready", nranks);
    *out = b;
    return SYMMEM_OK;
fail:
    symmem_boot_destroy(b);
    return st;
}

void symmem_boot_destroy(symmem_boot_t *b)
{
    if (!b) return;
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++)
        if (b->fds[r] >= 0) close(b->fds[r]);
    if (b->listen_fd >= 0) close(b->listen_fd);
    free(b);
}

static void make_data(const symmem_boot_t *b, msg_hdr_t *h, uint32_t type, size_t len)
{
    memset(h, 0, sizeof *h);
    h->magic = MSG_MAGIC;
    h->type = type;
    h->seq = b->seq;
    h->len = (uint32_t)len;
    h->rank = b->rank;
    h->nranks = b->nranks;
}

static symmem_status_t check_data(const symmem_boot_t *b, const msg_hdr_t *h, uint32_t type, size_t len, int peer,
                                  const char *what)
{
    if (h->type != type || h->seq != b->seq || h->len != len)
        return symmem_set_error(SYMMEM_PEER_FAILURE,
                                "%s: rank %d is in another collective call (its call #%llu, ours #%llu): every rank "
                                "must make the same collective calls in the same order",
                                what, peer, (unsigned long long)h->seq, (unsigned long long)b->seq);
    return SYMMEM_OK;
}

symmem_status_t symmem_boot_allgather(symmem_boot_t *b, const void *send, void *recv, size_t bytes,
                                      const char *what)
{
    if (bytes > MAX_PAYLOAD)
        return symmem_set_error(SYMMEM_INTERNAL_ERROR, "%s: bootstrap allgather of %zu bytes", what, bytes);
    int64_t deadline = now_ms() + b->timeout_ms;
    b->seq++;
    msg_hdr_t h;
    make_data(b, &h, MSG_DATA, bytes);
    for (int peer = 0; peer < b->nranks; peer++)
        if (peer != b->rank) SYMMEM_CHECK(send_msg(b->fds[peer], &h, send, -1, deadline, peer, what));
    memcpy((char *)recv + (size_t)b->rank * bytes, send, bytes);
    for (int peer = 0; peer < b->nranks; peer++) {
        if (peer == b->rank) continue;
        msg_hdr_t in;
        SYMMEM_CHECK(recv_msg(b->fds[peer], &in, (char *)recv + (size_t)peer * bytes, bytes, NULL, deadline, peer,
                              what));
        SYMMEM_CHECK(check_data(b, &in, MSG_DATA, bytes, peer, what));
    }
    return SYMMEM_OK;
}

symmem_status_t symmem_boot_barrier(symmem_boot_t *b, const char *what)
{
    char one = 1, all[SYMMEM_MAX_RANKS];
    return symmem_boot_allgather(b, &one, all, 1, what);
}

symmem_status_t symmem_boot_exchange_fds(symmem_boot_t *b, int my_fd, uint64_t tag, int *fds_out, const char *what)
{
    int64_t deadline = now_ms() + b->timeout_ms;
    b->seq++;
    msg_hdr_t h;
    make_data(b, &h, MSG_FD, sizeof tag);
    h.has_fd = 1;
    int fds[SYMMEM_MAX_RANKS];
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++) fds[r] = -1;
    symmem_status_t st = SYMMEM_OK;
    for (int peer = 0; peer < b->nranks && st == SYMMEM_OK; peer++)
        if (peer != b->rank) st = send_msg(b->fds[peer], &h, &tag, my_fd, deadline, peer, what);
    for (int peer = 0; peer < b->nranks && st == SYMMEM_OK; peer++) {
        if (peer == b->rank) continue;
        msg_hdr_t in;
        uint64_t their_tag = 0;
        st = recv_msg(b->fds[peer], &in, &their_tag, sizeof their_tag, &fds[peer], deadline, peer, what);
        if (st == SYMMEM_OK) st = check_data(b, &in, MSG_FD, sizeof tag, peer, what);
        if (st == SYMMEM_OK && (their_tag != tag || fds[peer] < 0))
            st = symmem_set_error(SYMMEM_PEER_FAILURE, "%s: rank %d sent %s", what, peer,
                                  fds[peer] < 0 ? "no file descriptor" : "a descriptor for another allocation");
    }
    if (st == SYMMEM_OK) {
        fds[b->rank] = fcntl(my_fd, F_DUPFD_CLOEXEC, 0);
        if (fds[b->rank] < 0) st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: dup: %s", what, strerror(errno));
    }
    if (st != SYMMEM_OK) {
        for (int r = 0; r < SYMMEM_MAX_RANKS; r++)
            if (fds[r] >= 0) close(fds[r]);
        return st;
    }
    memcpy(fds_out, fds, (size_t)b->nranks * sizeof(int));
    return SYMMEM_OK;
}
