/* Building the bootstrap mesh. Setup is one event loop over every connection of this rank (outgoing to higher
 * ranks, incoming from lower ones, and the listening socket), so a slow, idle or hostile connection costs
 * nothing but its own slot, and a rank waiting on one peer still completes its handshakes with the others
 * (so a missing rank is the only one named). The wire format and the handshake rules are in boot/bootmsg.h;
 * the trust model in docs/security.md. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/hmac.h"
#include "base/log.h"
#include "base/param.h"
#include "base/safe_file.h"
#include "base/status.h"
#include "boot/boot_internal.h"
#include "boot/bootmsg.h"

#define HANDSHAKE_MS 2000 /* how long an accepted connection may take for each step of its handshake */
#define RETRY_MS 1        /* between attempts to reach a rank that is not listening yet, or again */
#define MAX_PENDING 64    /* accepted connections still in their handshake */
#define LISTEN_BACKLOG SYMMEM_MAX_RANKS /* the listen queue: room for every lower rank at once, and short, so that a
                                        * rank that got in ahead of a flood of strangers is accepted soon */
#define ACCEPT_PER_ROUND 64 /* connections taken from the listen queue per loop round: however many processes
                             * connect, a round ends, so the deadline is kept and the ranks' handshakes go on */
#define REJECT_WARN_MAX 3 /* rejected connections logged at WARN per init; the rest at DEBUG, then a count */

/* ---- ids ------------------------------------------------------------------------------------------------ */

symmem_status_t symmem_boot_id_make(symmem_boot_id_t *id)
{
    symmem_boot_id_t t;
    memset(&t, 0, sizeof t);
    t.magic = SYMMEM_BOOT_ID_MAGIC;
    t.version = SYMMEM_BOOT_ID_VERSION;
    SYMMEM_CHECK(boot_fill_random(t.tag, sizeof t.tag));
    SYMMEM_CHECK(boot_fill_random(t.secret, sizeof t.secret));
    t.creator_pid = (int32_t)getpid();
    t.created_s = (uint32_t)time(NULL);
    *id = t;
    symmem_wipe(&t, sizeof t);
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

/* ---- socket names ----------------------------------------------------------------------------------------- */

symmem_status_t symmem_boot_sock_addr(const symmem_boot_id_t *id, int rank, struct sockaddr_un *addr,
                                      socklen_t *len)
{
    char name[SYMMEM_BOOT_NAME_HEX + 1];
    symmem_boot_name(id->secret, sizeof id->secret, id->tag, sizeof id->tag, rank, name);
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    const char *dir = symmem_param_str(SYMMEM_PARAM_SOCKET_DIR);
    if (!*dir) {
        int n = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "symmem-%s", name);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
        return SYMMEM_OK;
    }
    int n = snprintf(addr->sun_path, sizeof addr->sun_path, "%s/symmem-%s", dir, name);
    if (n < 0 || (size_t)n >= sizeof addr->sun_path)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "SYMMEM_SOCKET_DIR=%s is too long for a socket path (at most %zu characters)", dir,
                                sizeof addr->sun_path - 8 - SYMMEM_BOOT_NAME_HEX);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)n + 1);
    return SYMMEM_OK;
}

/* SYMMEM_SOCKET_DIR must be this user's own directory that nobody else can enter, under directories nobody
 * else can change: then no other user can reach, take or replace the sockets in it. Created (mode 0700) if
 * it does not exist. */
static symmem_status_t check_socket_dir(const char *dir)
{
    /* The directories above it (symbolic links among them resolved; the socket directory itself must not be
     * one, below): whoever owns or may write one of them could move the socket directory away and put one
     * of their own in its place (nothing leaks: the handshake still checks uids and the secret, but the job
     * cannot start). */
    char what[PATH_MAX + 32];
    snprintf(what, sizeof what, "SYMMEM_SOCKET_DIR=%s", dir);
    const symmem_status_t parents = symmem_safe_parents(dir, what, "the socket directory");
    if (parents != SYMMEM_OK) {
        SYMMEM_WARN(SYMMEM_SUBSYS_BOOT, "%s (%s)", symmem_last_error(), symmem_status_name(parents));
        return parents;
    }
    struct stat st;
    if (lstat(dir, &st) != 0 && errno == ENOENT && mkdir(dir, 0700) != 0 && errno != EEXIST)
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "SYMMEM_SOCKET_DIR=%s cannot be created: %s", dir,
                                strerror(errno));
    if (lstat(dir, &st) != 0)
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "SYMMEM_SOCKET_DIR=%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "SYMMEM_SOCKET_DIR=%s is not a directory (a symbolic link is refused too)", dir);
    if (st.st_uid != geteuid())
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "SYMMEM_SOCKET_DIR=%s is owned by uid %u, not by this user (uid %u): another user "
                                "may have created it first; use a directory of your own (e.g. under "
                                "$XDG_RUNTIME_DIR)",
                                dir, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 077)
        return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                                "SYMMEM_SOCKET_DIR=%s has mode %04o: it must be 0700 so that no other user can "
                                "reach or replace the sockets in it (chmod 700 %s)",
                                dir, (unsigned)(st.st_mode & 07777), dir);
    return SYMMEM_OK;
}

/* Who holds a socket name: connect and ask the kernel (SO_PEERCRED). 0 if nobody answers. */
static int name_holder(const struct sockaddr_un *addr, socklen_t alen, struct ucred *cred)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return 0;
    socklen_t clen = sizeof *cred;
    int ok = connect(fd, (const struct sockaddr *)addr, alen) == 0 &&
             getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &clen) == 0;
    int e = errno;
    close(fd);
    errno = e;
    return ok;
}

static symmem_status_t name_in_use(const symmem_boot_t *b, const struct sockaddr_un *addr, socklen_t alen)
{
    struct ucred cred;
    char holder[96] = "a process that does not accept connections";
    int foreign = 0;
    if (name_holder(addr, alen, &cred)) {
        foreign = cred.uid != geteuid();
        snprintf(holder, sizeof holder, "pid %d (uid %u%s)", (int)cred.pid, (unsigned)cred.uid,
                 foreign ? ", another user" : ", this user");
    }
    return symmem_set_error(SYMMEM_INVALID_ARGUMENT,
                            "communicator init: the socket name of rank %d is already bound by %s: either another "
                            "process joined with the same unique id as rank %d (a duplicate rank, or an id reused "
                            "while its job still runs), or another process that holds this id's secret took the "
                            "name first%s",
                            b->rank, holder, b->rank,
                            foreign ? "; a process of another user knowing the name means the secret has leaked: "
                                      "make a new unique id"
                                    : "");
}

static symmem_status_t start_listening(symmem_boot_t *b)
{
    struct sockaddr_un addr;
    socklen_t alen;
    SYMMEM_CHECK(symmem_boot_sock_addr(&b->id, b->rank, &addr, &alen));
    int file = addr.sun_path[0] != '\0';
    if (file) SYMMEM_CHECK(check_socket_dir(symmem_param_str(SYMMEM_PARAM_SOCKET_DIR)));
    b->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (b->listen_fd < 0)
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "socket(AF_UNIX): %s", symmem_errno_string(errno));
    for (int attempt = 0;; attempt++) {
        if (bind(b->listen_fd, (struct sockaddr *)&addr, alen) == 0) break;
        int e = errno;
        struct ucred cred;
        /* A socket file nobody listens on is left over from a crashed run with this id: replace it. */
        if (e == EADDRINUSE && file && attempt == 0 && !name_holder(&addr, alen, &cred) && errno == ECONNREFUSED &&
            unlink(addr.sun_path) == 0)
            continue;
        if (e == EADDRINUSE) return name_in_use(b, &addr, alen);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "bind of the bootstrap socket failed: %s", strerror(e));
    }
    if (file) snprintf(b->path, sizeof b->path, "%s", addr.sun_path);
    if (listen(b->listen_fd, LISTEN_BACKLOG) != 0)
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "listen: %s", strerror(errno));
    return SYMMEM_OK;
}

static void stop_listening(symmem_boot_t *b)
{
    if (b->listen_fd >= 0) close(b->listen_fd);
    b->listen_fd = -1;
    if (b->path[0]) unlink(b->path);
    b->path[0] = '\0';
}

/* ---- the setup loop ------------------------------------------------------------------------------------------ */

typedef enum {
    C_FREE,
    C_CONNECTING,     /* outgoing, not connected yet: next attempt at `due` */
    C_WAIT_CHALLENGE, /* outgoing */
    C_WAIT_WELCOME,   /* outgoing */
    C_WAIT_HELLO,     /* incoming */
    C_WAIT_PROOF,     /* incoming */
} conn_state_t;

typedef struct conn {
    conn_state_t state;
    int fd;
    int peer;        /* outgoing: the rank called; incoming: the rank claimed (-1 before its HELLO) */
    int peer_nranks; /* from its HELLO or CHALLENGE */
    int pid, uid;    /* SO_PEERCRED */
    int64_t due;     /* C_CONNECTING: next attempt; incoming: end of its handshake */
    int64_t since;   /* incoming: accepted at */
    uint64_t round;  /* incoming: the loop round it was accepted in */
    int last_errno;  /* C_CONNECTING: why the last attempt failed */
    const char *dropped; /* outgoing: how the listener's process ended the last handshake (NULL: it did not) */
    unsigned char nonce_c[SYMMEM_BOOT_NONCE_BYTES], nonce_l[SYMMEM_BOOT_NONCE_BYTES];
    unsigned char buf[SYMMEM_BOOT_HS_MAX]; /* the message being read; never more than one */
    size_t have;
} conn_t;

typedef struct mesh {
    symmem_boot_t *b;
    int64_t deadline;
    struct sockaddr_un addr[SYMMEM_MAX_RANKS];
    socklen_t alen[SYMMEM_MAX_RANKS];
    conn_t out[SYMMEM_MAX_RANKS]; /* by peer rank, for peers above this rank */
    conn_t in[MAX_PENDING];
    int quiet[SYMMEM_MAX_RANKS]; /* a connected peer has sent collective data: its socket is not read here */
    int rejected, rejected_foreign;
    uint64_t round;     /* loop iterations so far */
    symmem_status_t st; /* the first fatal error: ends the loop */
} mesh_t;

static void fatal(mesh_t *m, symmem_status_t status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fatal(mesh_t *m, symmem_status_t status, const char *fmt, ...)
{
    if (m->st != SYMMEM_OK) return;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    m->st = symmem_set_error(status, "communicator init: %s", msg);
}

static void conn_close(conn_t *c)
{
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = C_FREE;
    c->have = 0;
}

/* Turn an incoming connection away: one log line (WARN for the first few of an init, DEBUG after that). */
static void reject(mesh_t *m, conn_t *c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void reject(mesh_t *m, conn_t *c, const char *fmt, ...)
{
    int level = m->rejected < REJECT_WARN_MAX ? SYMMEM_LOG_WARN : SYMMEM_LOG_DEBUG;
    m->rejected++;
    if (symmem_log_enabled(level, SYMMEM_SUBSYS_BOOT)) { /* (a flood is turned away at full speed) */
        char why[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        char from[48] = "a connecting process";
        if (c->peer >= 0) snprintf(from, sizeof from, "a process claiming rank %d", c->peer);
        SYMMEM_LOG(level, SYMMEM_SUBSYS_BOOT, "rejected a bootstrap connection from %s (pid %d, uid %d): %s", from,
                   c->pid, c->uid, why);
    }
    conn_close(c);
}

/* How conn_read says the other side ended the connection (compared by address). */
static const char CONN_CLOSED[] = "closed the connection", CONN_RESET[] = "reset the connection";

/* The listener's process ended this rank's handshake (`how`: CONN_CLOSED, CONN_RESET). It may have turned the
 * connection away and still be there (the handshake's time ran out while this rank was slow): call again.
 * If its name is gone by then, try_connect says the process ended the handshake. */
static void call_again(conn_t *c, const char *how)
{
    conn_close(c);
    c->state = C_CONNECTING;
    c->dropped = how;
    c->due = boot_now_ms() + RETRY_MS;
}

static void try_connect(mesh_t *m, conn_t *c)
{
    symmem_boot_t *b = m->b;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return fatal(m, SYMMEM_SYSTEM_ERROR, "socket(AF_UNIX): %s", symmem_errno_string(errno));
    if (connect(fd, (struct sockaddr *)&m->addr[c->peer], m->alen[c->peer]) != 0) {
        int e = errno;
        close(fd);
        /* The listener ended this rank's last handshake and its name is gone now: its process exited,
         * crashed or gave up. */
        if (c->dropped && (e == ENOENT || e == ECONNREFUSED))
            return fatal(m, SYMMEM_PEER_FAILURE,
                         "the process listening as rank %d (pid %d) %s during the handshake (it exited, crashed or "
                         "gave up)",
                         c->peer, c->pid, c->dropped);
        /* Nobody listening yet (ENOENT, ECONNREFUSED) or the listener's backlog is full (EAGAIN: a
         * non-blocking AF_UNIX connect fails at once rather than returning EINPROGRESS): try again
         * shortly, until the deadline, which bounds the whole loop. */
        if (e == ENOENT || e == ECONNREFUSED || e == EAGAIN || e == EINTR || e == EINPROGRESS) {
            c->last_errno = e;
            c->due = boot_now_ms() + RETRY_MS;
            return;
        }
        return fatal(m, SYMMEM_SYSTEM_ERROR, "connecting to rank %d: %s", c->peer, symmem_errno_string(e));
    }
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
        close(fd);
        return fatal(m, SYMMEM_SYSTEM_ERROR, "SO_PEERCRED on the connection to rank %d: %s", c->peer,
                     strerror(errno));
    }
    /* The listener must be of this user too: nothing, not even a HELLO, goes to anyone else. */
    if (cred.uid != geteuid()) {
        close(fd);
        return fatal(m, SYMMEM_PEER_FAILURE,
                     "the socket of rank %d is held by pid %d of uid %u, not by this user (uid %u): a process "
                     "of another user knows this job's socket names, so the unique id's secret has leaked; make "
                     "a new id and keep it where only this user can read it",
                     c->peer, (int)cred.pid, (unsigned)cred.uid, (unsigned)geteuid());
    }
    c->fd = fd;
    c->pid = (int)cred.pid;
    c->uid = (int)cred.uid;
    symmem_status_t st = boot_fill_random(c->nonce_c, sizeof c->nonce_c);
    if (st != SYMMEM_OK) {
        m->st = st;
        return;
    }
    c->state = C_WAIT_CHALLENGE;
    if (boot_send_now(fd, SYMMEM_BOOT_HELLO, b->rank, b->nranks, c->nonce_c, sizeof c->nonce_c) != 0)
        call_again(c, errno == ECONNRESET ? CONN_RESET : CONN_CLOSED);
}

/* A slot for a new connection: a free one, or (evict) the one silent longest among those that have had a
 * poll round to speak, so a burst of connections cannot push out each other's unread HELLOs but idle
 * connections cannot crowd the ranks out either. */
static conn_t *find_slot(mesh_t *m, int evict)
{
    conn_t *idlest = NULL;
    for (int i = 0; i < MAX_PENDING; i++) {
        conn_t *c = &m->in[i];
        if (c->state == C_FREE) return c;
        if (c->state == C_WAIT_HELLO && c->have == 0 && c->round < m->round && (!idlest || c->since < idlest->since))
            idlest = c;
    }
    if (idlest && evict) reject(m, idlest, "silent while %d other connections waited", MAX_PENDING);
    return idlest;
}

static int lower_missing(const mesh_t *m)
{
    int n = 0;
    for (int r = 0; r < m->b->rank; r++) n += m->b->fds[r] < 0;
    return n;
}

/* Take what the slots can hold from the listen queue, at most ACCEPT_PER_ROUND per round and never past the
 * deadline; the rest waits there for the next round. Other users' connections are closed as they come, so
 * without the cap a flood of them kept this loop (and the whole init) going as long as it lasted, and a rank
 * already accepted went unread. Nothing is accepted once no lower rank is missing. */
static void accept_some(mesh_t *m)
{
    for (int n = 0; n < ACCEPT_PER_ROUND && lower_missing(m) && find_slot(m, 0); n++) {
        if (boot_now_ms() >= m->deadline) return;
        int fd = accept4(m->b->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) return;
            return fatal(m, SYMMEM_SYSTEM_ERROR, "accepting a connection: %s", symmem_errno_string(errno));
        }
        conn_t probe = {.state = C_WAIT_HELLO, .fd = fd, .peer = -1, .pid = -1, .uid = -1};
        struct ucred cred;
        socklen_t clen = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0) {
            reject(m, &probe, "SO_PEERCRED failed: %s", strerror(errno));
            continue;
        }
        probe.pid = (int)cred.pid;
        probe.uid = (int)cred.uid;
        /* Other users are turned away before a byte is read or written. */
        if (cred.uid != geteuid()) {
            m->rejected_foreign++;
            reject(m, &probe, "not this user");
            continue;
        }
        conn_t *slot = find_slot(m, 1);
        int64_t now = boot_now_ms();
        *slot = probe;
        slot->since = now;
        slot->round = m->round;
        slot->due = now + HANDSHAKE_MS < m->deadline ? now + HANDSHAKE_MS : m->deadline;
    }
}

/* Read at most the rest of one message (never into the next: after the handshake the same socket carries
 * collective data). Returns 1 when a whole message is in c->buf, 0 when more is needed, -1 when the
 * connection failed (*why says how). */
static int conn_read(conn_t *c, symmem_boot_hdr_t *h, const unsigned char **payload, const char **why)
{
    for (int pass = 0; pass < 2; pass++) { /* the header, then its payload */
        size_t want = sizeof *h;
        if (c->have >= sizeof *h) {
            memcpy(h, c->buf, sizeof *h);
            want = sizeof *h + (h->len <= SYMMEM_BOOT_ABORT_MAX ? h->len : 0);
        }
        if (c->have >= want) break;
        struct iovec iov = {.iov_base = c->buf + c->have, .iov_len = want - c->have};
        ctrl_buf_t ctrl;
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf, .msg_controllen = sizeof ctrl.buf};
        ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        int nfds = n > 0 ? boot_take_fds(&mh, NULL, 0, NULL) : 0;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
        if (n < 0) {
            *why = errno == ECONNRESET ? CONN_RESET : "failed to read";
            return -1;
        }
        if (n == 0) {
            *why = CONN_CLOSED;
            return -1;
        }
        if (nfds || (mh.msg_flags & MSG_CTRUNC)) {
            *why = "sent file descriptors during the handshake (closed unread)";
            return -1;
        }
        c->have += (size_t)n;
        if (c->have < want) break; /* the rest is not here yet */
        if (c->have == sizeof *h && symmem_boot_parse(c->buf, c->have, SYMMEM_BOOT_ABORT_MAX, h, payload, why) < 0)
            return -1;
    }
    long got = symmem_boot_parse(c->buf, c->have, SYMMEM_BOOT_ABORT_MAX, h, payload, why);
    if (got < 0) return -1;
    if (got == 0) return 0;
    c->have = 0; /* consumed: the handlers copy what they keep */
    return 1;
}

static void mac_listener(const symmem_boot_t *b, const conn_t *c, int connector, int listener, int nc, int nl,
                         char role, unsigned char out[SYMMEM_BOOT_MAC_BYTES])
{
    symmem_boot_mac(b->id.secret, sizeof b->id.secret, b->id.tag, sizeof b->id.tag, role, connector, listener, nc,
                    nl, c->nonce_c, c->nonce_l, out);
}

/* A message on an incoming connection (this rank listens; the peer is a lower rank). */
static void on_incoming(mesh_t *m, conn_t *c, const symmem_boot_hdr_t *h, const unsigned char *payload)
{
    symmem_boot_t *b = m->b;
    const char *bad = symmem_boot_hs_expect(c->state == C_WAIT_HELLO ? SYMMEM_BOOT_HS_WAIT_HELLO : SYMMEM_BOOT_HS_WAIT_PROOF, h);
    if (bad) return reject(m, c, "%s", bad);
    if (c->state == C_WAIT_HELLO) {
        /* The claimed rank is checked against this rank's range before it indexes anything. */
        if (h->rank >= b->rank)
            return reject(m, c, "claims rank %d, which should be listening, not connecting to rank %d", h->rank,
                          b->rank);
        c->peer = h->rank;
        if (b->fds[c->peer] >= 0) return reject(m, c, "rank %d is already connected", c->peer);
        c->peer_nranks = h->nranks;
        memcpy(c->nonce_c, payload, sizeof c->nonce_c);
        symmem_status_t st = boot_fill_random(c->nonce_l, sizeof c->nonce_l);
        if (st != SYMMEM_OK) {
            m->st = st;
            return;
        }
        symmem_boot_challenge_t ch;
        memcpy(ch.nonce, c->nonce_l, sizeof ch.nonce);
        mac_listener(b, c, c->peer, b->rank, c->peer_nranks, b->nranks, 'L', ch.mac);
        if (boot_send_now(c->fd, SYMMEM_BOOT_CHALLENGE, b->rank, b->nranks, &ch, sizeof ch) != 0)
            return reject(m, c, "could not be sent the challenge: %s", strerror(errno));
        c->state = C_WAIT_PROOF;
        /* The proof needs a round trip to the connector: its own time, not what the HELLO's wait left. */
        const int64_t now = boot_now_ms();
        c->due = now + HANDSHAKE_MS < m->deadline ? now + HANDSHAKE_MS : m->deadline;
        return;
    }
    unsigned char want[SYMMEM_BOOT_MAC_BYTES];
    mac_listener(b, c, c->peer, b->rank, c->peer_nranks, b->nranks, 'C', want);
    int ok = h->rank == c->peer && h->nranks == c->peer_nranks && symmem_ct_equal(want, payload, sizeof want);
    symmem_wipe(want, sizeof want);
    if (!ok) return reject(m, c, "did not prove it holds this communicator's secret");
    if (b->fds[c->peer] >= 0) return reject(m, c, "rank %d is already connected", c->peer);
    symmem_boot_welcome_t w = {c->peer_nranks == b->nranks ? SYMMEM_BOOT_WELCOME_OK : SYMMEM_BOOT_WELCOME_NRANKS_DIFFER, 0};
    if (boot_send_now(c->fd, SYMMEM_BOOT_WELCOME, b->rank, b->nranks, &w, sizeof w) != 0) {
        if (errno != EPIPE && errno != ECONNRESET) return reject(m, c, "could not be sent the welcome: %s", strerror(errno));
        /* It proved the secret, so it is rank c->peer itself, and it left: it gave up and said why in its own
         * log (and in an ABORT to the ranks it reached); not an intrusion worth a warning. */
        SYMMEM_INFO(SYMMEM_SUBSYS_BOOT, "rank %d (pid %d) closed its connection before the welcome", c->peer, c->pid);
        return conn_close(c);
    }
    if (c->peer_nranks != b->nranks)
        return fatal(m, SYMMEM_INVALID_ARGUMENT,
                     "rank %d was started with %d ranks, this rank with %d: every rank must pass the same nranks",
                     c->peer, c->peer_nranks, b->nranks);
    b->fds[c->peer] = c->fd; /* authenticated: the socket is the mesh's now */
    c->fd = -1;
    conn_close(c);
}

/* The peer logged its own failure where it found it; here it becomes this rank's error, logged at INFO
 * only (an error is logged once, by whoever detected it). */
static void on_abort(mesh_t *m, int peer, const symmem_boot_hdr_t *h, const unsigned char *payload)
{
    if (m->st != SYMMEM_OK) return;
    const int len = (int)(h->len - sizeof(int32_t));
    const char *text = (const char *)payload + sizeof(int32_t);
    SYMMEM_INFO(SYMMEM_SUBSYS_BOOT, "communicator init: rank %d gave up: %.*s", peer, len, text);
    m->st = symmem_record_error(boot_abort_status(payload), "communicator init: rank %d gave up: %.*s", peer, len, text);
}

/* A message on an outgoing connection (this rank called a higher rank). */
static void on_outgoing(mesh_t *m, conn_t *c, const symmem_boot_hdr_t *h, const unsigned char *payload)
{
    symmem_boot_t *b = m->b;
    const char *bad = symmem_boot_hs_expect(
        c->state == C_WAIT_CHALLENGE ? SYMMEM_BOOT_HS_WAIT_CHALLENGE : SYMMEM_BOOT_HS_WAIT_WELCOME, h);
    if (bad) return fatal(m, SYMMEM_PEER_FAILURE, "the process listening as rank %d (pid %d) %s", c->peer, c->pid, bad);
    if (h->type == SYMMEM_BOOT_ABORT) return on_abort(m, c->peer, h, payload);
    if (h->rank != c->peer)
        return fatal(m, SYMMEM_PEER_FAILURE, "the process listening as rank %d (pid %d) says it is rank %d", c->peer,
                     c->pid, h->rank);
    if (c->state == C_WAIT_CHALLENGE) {
        symmem_boot_challenge_t ch;
        memcpy(&ch, payload, sizeof ch);
        memcpy(c->nonce_l, ch.nonce, sizeof c->nonce_l);
        c->peer_nranks = h->nranks;
        unsigned char want[SYMMEM_BOOT_MAC_BYTES];
        mac_listener(b, c, b->rank, c->peer, b->nranks, c->peer_nranks, 'L', want);
        int ok = symmem_ct_equal(want, ch.mac, sizeof want);
        symmem_wipe(want, sizeof want);
        if (!ok)
            return fatal(m, SYMMEM_PEER_FAILURE,
                         "the process listening as rank %d (pid %d) did not prove it holds this communicator's "
                         "secret",
                         c->peer, c->pid);
        unsigned char proof[SYMMEM_BOOT_MAC_BYTES];
        mac_listener(b, c, b->rank, c->peer, b->nranks, c->peer_nranks, 'C', proof);
        int sent = boot_send_now(c->fd, SYMMEM_BOOT_PROOF, b->rank, b->nranks, proof, sizeof proof);
        symmem_wipe(proof, sizeof proof);
        if (sent != 0)
            return fatal(m, SYMMEM_PEER_FAILURE, "rank %d closed the connection during the handshake", c->peer);
        /* Reported after the proof, so that the peer can report the mismatch too. */
        if (c->peer_nranks != b->nranks)
            return fatal(m, SYMMEM_INVALID_ARGUMENT,
                         "rank %d says there are %d ranks, this rank says %d: every rank must pass the same nranks",
                         c->peer, c->peer_nranks, b->nranks);
        c->state = C_WAIT_WELCOME;
        return;
    }
    symmem_boot_welcome_t w;
    memcpy(&w, payload, sizeof w);
    if (w.status != SYMMEM_BOOT_WELCOME_OK)
        return fatal(m, SYMMEM_INVALID_ARGUMENT,
                     "rank %d says there are %d ranks, this rank says %d: every rank must pass the same nranks",
                     c->peer, h->nranks, b->nranks);
    b->fds[c->peer] = c->fd;
    c->fd = -1;
    conn_close(c);
}

/* A connected peer's socket became readable during setup: an ABORT (it gave up: say why), a closed
 * socket, or the first collective message of a peer that is done already (left for the collective). */
static void on_connected(mesh_t *m, int peer)
{
    int fd = m->b->fds[peer];
    symmem_boot_hdr_t h;
    ssize_t n = recv(fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0)
        return fatal(m, SYMMEM_PEER_FAILURE, "rank %d %s its connection (it exited or crashed)", peer,
                     n == 0 ? "closed" : "reset");
    if ((size_t)n < sizeof h) return; /* the rest of the header is on its way */
    if (h.type != SYMMEM_BOOT_ABORT || symmem_boot_hdr_check(&h)) {
        m->quiet[peer] = 1;
        return;
    }
    unsigned char buf[SYMMEM_BOOT_HS_MAX];
    n = recv(fd, buf, sizeof h + h.len, MSG_PEEK | MSG_DONTWAIT);
    if (n < (ssize_t)(sizeof h + h.len)) return; /* not all here yet: look again */
    n = recv(fd, buf, sizeof h + h.len, MSG_DONTWAIT);
    h.len = (uint32_t)((size_t)n - sizeof h);
    on_abort(m, peer, &h, buf + sizeof h);
}

static int mesh_complete(const mesh_t *m)
{
    for (int r = 0; r < m->b->nranks; r++)
        if (r != m->b->rank && m->b->fds[r] < 0) return 0;
    return 1;
}

static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void append(char *buf, size_t cap, size_t *n, const char *fmt, ...)
{
    if (*n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, cap - *n, fmt, ap);
    va_end(ap);
    if (k > 0) *n = *n + (size_t)k < cap ? *n + (size_t)k : cap - 1;
}

/* The timeout error names every rank still missing, by what it failed to do. */
static void timeout_error(mesh_t *m)
{
    symmem_boot_t *b = m->b;
    char never_listened[128] = "", full[128] = "", stuck[128] = "", never_came[128] = "", msg[768];
    size_t a = 0, f = 0, s = 0, c = 0, n = 0;
    for (int r = b->rank + 1; r < b->nranks; r++) {
        if (b->fds[r] >= 0) continue;
        if (m->out[r].state == C_CONNECTING && m->out[r].last_errno == EAGAIN)
            append(full, sizeof full, &f, "%s%d", f ? ", " : "", r);
        else if (m->out[r].state == C_CONNECTING && !m->out[r].dropped)
            append(never_listened, sizeof never_listened, &a, "%s%d", a ? ", " : "", r);
        else
            append(stuck, sizeof stuck, &s, "%s%d", s ? ", " : "", r);
    }
    for (int r = 0; r < b->rank; r++)
        if (b->fds[r] < 0) append(never_came, sizeof never_came, &c, "%s%d", c ? ", " : "", r);
    if (a) append(msg, sizeof msg, &n, "rank(s) %s never started listening (not started, crashed, or given another "
                                       "unique id)", never_listened);
    if (f) append(msg, sizeof msg, &n, "%srank(s) %s did not accept the connection (its listen queue is full: the "
                                       "rank is stuck, or something floods its socket)", n ? "; " : "", full);
    if (s) append(msg, sizeof msg, &n, "%srank(s) %s accepted the connection but did not finish the handshake "
                                       "(stuck, or waiting for another rank)", n ? "; " : "", stuck);
    if (c) append(msg, sizeof msg, &n, "%srank(s) %s never connected (not started, crashed, or given another "
                                       "unique id)", n ? "; " : "", never_came);
    if (m->rejected)
        append(msg, sizeof msg, &n, "; %d connection(s) of other processes were turned away (%d of other users; "
                                    "see the log)", m->rejected, m->rejected_foreign);
    fatal(m, SYMMEM_TIMEOUT, "%s within the timeout (SYMMEM_TIMEOUT_MS=%d ms)", msg, b->timeout_ms);
}

enum { W_LISTEN, W_OUT, W_IN, W_PEER };

static int readable_now(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

/* One loop round's poll set: the listener (while lower ranks are missing and a slot is free), outgoing and
 * incoming handshakes (an incoming one past its time is turned away here), connected peers not yet quiet.
 * Also the next moment something is due (*wake). */
typedef struct poll_set {
    struct pollfd pfd[1 + SYMMEM_MAX_RANKS + MAX_PENDING + SYMMEM_MAX_RANKS];
    int kind[1 + SYMMEM_MAX_RANKS + MAX_PENDING + SYMMEM_MAX_RANKS];
    int idx[1 + SYMMEM_MAX_RANKS + MAX_PENDING + SYMMEM_MAX_RANKS];
    int n, listen_at, lower_missing;
} poll_set_t;

static void poll_set_build(mesh_t *m, int64_t now, int64_t *wake, poll_set_t *ps)
{
    symmem_boot_t *b = m->b;
    ps->n = 0;
    ps->lower_missing = 0;
    for (int r = 0; r < b->rank; r++) ps->lower_missing += b->fds[r] < 0;
    /* (after the expiry pass below has freed what it can; a full table leaves the listener unwatched
     * until a slot frees, and the waiting connections stay in the backlog) */
    ps->listen_at = ps->n;
    if (ps->lower_missing) ps->n++;
    for (int r = b->rank + 1; r < b->nranks; r++)
        if (m->out[r].state == C_WAIT_CHALLENGE || m->out[r].state == C_WAIT_WELCOME)
            ps->pfd[ps->n] = (struct pollfd){m->out[r].fd, POLLIN, 0}, ps->kind[ps->n] = W_OUT, ps->idx[ps->n++] = r;
    for (int i = 0; i < MAX_PENDING; i++) {
        conn_t *c = &m->in[i];
        if (c->state == C_FREE) continue;
        /* Past its time and nothing to read: turned away. One whose next message is waiting is read this
         * round instead: a round delayed (by a flood, a busy machine) must not cost a rank its handshake. */
        if (c->due <= now && !readable_now(c->fd)) {
            reject(m, c, "did not finish the handshake within %d ms", HANDSHAKE_MS);
            continue;
        }
        if (c->due > now && c->due < *wake) *wake = c->due;
        ps->pfd[ps->n] = (struct pollfd){c->fd, POLLIN, 0}, ps->kind[ps->n] = W_IN, ps->idx[ps->n++] = i;
    }
    if (ps->lower_missing) {
        if (find_slot(m, 0)) ps->pfd[ps->listen_at] = (struct pollfd){b->listen_fd, POLLIN, 0};
        else ps->pfd[ps->listen_at] = (struct pollfd){-1, 0, 0}; /* poll ignores negative descriptors */
        ps->kind[ps->listen_at] = W_LISTEN, ps->idx[ps->listen_at] = 0;
    }
    for (int r = 0; r < b->nranks; r++)
        if (r != b->rank && b->fds[r] >= 0 && !m->quiet[r])
            ps->pfd[ps->n] = (struct pollfd){b->fds[r], POLLIN, 0}, ps->kind[ps->n] = W_PEER, ps->idx[ps->n++] = r;
}

/* Handle what poll reported: handshake messages first, new connections last (their HELLOs are read before
 * any eviction of a pending one). */
static void poll_set_dispatch(mesh_t *m, const poll_set_t *ps, int ready)
{
    for (int k = 0; k < ps->n && ready > 0 && m->st == SYMMEM_OK; k++) {
        if (!ps->pfd[k].revents || ps->kind[k] == W_LISTEN) continue;
        if (ps->kind[k] == W_PEER) {
            on_connected(m, ps->idx[k]);
            continue;
        }
        conn_t *c = ps->kind[k] == W_OUT ? &m->out[ps->idx[k]] : &m->in[ps->idx[k]];
        if (c->fd != ps->pfd[k].fd) continue; /* closed and reused while handling an earlier entry */
        symmem_boot_hdr_t h;
        const unsigned char *payload = NULL;
        const char *why = NULL;
        int got = conn_read(c, &h, &payload, &why);
        if (got == 0) continue;
        if (ps->kind[k] == W_IN) {
            if (got < 0) reject(m, c, "%s", why);
            else on_incoming(m, c, &h, payload);
        } else if (got < 0 && (why == CONN_CLOSED || why == CONN_RESET)) {
            call_again(c, why);
        } else if (got < 0) {
            fatal(m, SYMMEM_PEER_FAILURE,
                  "the process listening as rank %d (pid %d) %s during the handshake (it exited, crashed or gave up)",
                  c->peer, c->pid, why);
        } else {
            on_outgoing(m, c, &h, payload);
        }
    }
    if (ready > 0 && ps->lower_missing && ps->pfd[ps->listen_at].revents && m->st == SYMMEM_OK) accept_some(m);
}

static symmem_status_t build_mesh(symmem_boot_t *b, int64_t deadline)
{
    mesh_t *m = calloc(1, sizeof *m);
    poll_set_t *ps = malloc(sizeof *ps);
    if (!m || !ps) {
        free(m), free(ps);
        return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    }
    m->b = b;
    m->deadline = deadline;
    for (int i = 0; i < MAX_PENDING; i++) m->in[i] = (conn_t){.state = C_FREE, .fd = -1, .peer = -1};
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++) m->out[r] = (conn_t){.state = C_FREE, .fd = -1, .peer = r};
    for (int r = b->rank + 1; r < b->nranks && m->st == SYMMEM_OK; r++) {
        m->st = symmem_boot_sock_addr(&b->id, r, &m->addr[r], &m->alen[r]);
        m->out[r].state = C_CONNECTING;
    }
    while (m->st == SYMMEM_OK && !mesh_complete(m)) {
        m->round++;
        int64_t now = boot_now_ms();
        if (now >= deadline) {
            timeout_error(m);
            break;
        }
        int64_t wake = deadline;
        for (int r = b->rank + 1; r < b->nranks && m->st == SYMMEM_OK; r++) {
            conn_t *c = &m->out[r];
            if (c->state == C_CONNECTING && c->due <= now) try_connect(m, c);
            if (c->state == C_CONNECTING && c->due < wake) wake = c->due;
        }
        poll_set_build(m, now, &wake, ps);
        if (m->st != SYMMEM_OK) break;
        int wait = wake > now ? (int)(wake - now < 1000000 ? wake - now : 1000000) : 0;
        int ready = poll(ps->pfd, (nfds_t)ps->n, wait);
        if (ready < 0 && errno != EINTR) {
            fatal(m, SYMMEM_SYSTEM_ERROR, "poll: %s", strerror(errno));
            break;
        }
        poll_set_dispatch(m, ps, ready);
    }
    if (m->rejected > REJECT_WARN_MAX)
        SYMMEM_WARN(SYMMEM_SUBSYS_BOOT, "communicator init turned away %d bootstrap connections in all (%d of other "
                    "users; the first %d are logged above, the rest at DEBUG)",
                    m->rejected, m->rejected_foreign, REJECT_WARN_MAX);
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++) conn_close(&m->out[r]);
    for (int i = 0; i < MAX_PENDING; i++) conn_close(&m->in[i]);
    symmem_status_t st = m->st;
    symmem_wipe(m, sizeof *m);
    free(m);
    free(ps);
    return st;
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
    int64_t deadline = boot_now_ms() + timeout_ms;
    symmem_status_t st;
    SYMMEM_CHECK_GOTO(start_listening(b), st, fail);
    SYMMEM_CHECK_GOTO(build_mesh(b, deadline), st, fail);
    /* Nobody else may join: close the listener so a late or foreign process finds no one. */
    stop_listening(b);
    SYMMEM_DEBUG(SYMMEM_SUBSYS_BOOT, "bootstrap mesh of %d ranks ready", nranks);
    *out = b;
    return SYMMEM_OK;
fail:
    symmem_boot_abort(b, st, symmem_last_error());
    symmem_boot_destroy(b);
    return st;
}

void symmem_boot_abort(symmem_boot_t *b, symmem_status_t status, const char *why)
{
    if (!b || b->aborted) return;
    b->aborted = 1;
    unsigned char payload[SYMMEM_BOOT_ABORT_MAX];
    int32_t st = (int32_t)status;
    size_t len = strlen(why);
    if (len > SYMMEM_BOOT_ABORT_TEXT) len = SYMMEM_BOOT_ABORT_TEXT;
    memcpy(payload, &st, sizeof st);
    memcpy(payload + sizeof st, why, len);
    for (int r = 0; r < b->nranks; r++)
        if (r != b->rank && b->fds[r] >= 0)
            (void)boot_send_now(b->fds[r], SYMMEM_BOOT_ABORT, b->rank, b->nranks, payload, (uint32_t)(sizeof st + len));
}

void symmem_boot_destroy(symmem_boot_t *b)
{
    if (!b) return;
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++)
        if (b->fds[r] >= 0) close(b->fds[r]);
    stop_listening(b);
    symmem_wipe(b, sizeof *b); /* the secret */
    free(b);
}
