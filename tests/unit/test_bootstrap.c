/* The bootstrap under misuse and attack, with the host backend: impostors at a rank's socket name, a
 * listener that never accepts, idle and junk connections, descriptor floods, an exhausted descriptor table,
 * a missing rank (who gets blamed), socket files in SYMMEM_SOCKET_DIR; the wire format and the MAC byte for
 * byte. Most cases are a bug that existed, the rest what mutation testing found unchecked; the cases that
 * need a second user (setresuid) skip when not run as root. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>

#include "base/hmac.h"
#include "boot/boot_internal.h"
#include "boot/bootmsg.h"
#include "boot/bootstrap.h"
#include "boot/comm_state.h"
#include "symmem/symmem.h"
#include "test_util.h"

#define NOBODY 65534

static symmem_options_t host_opts(int timeout_ms)
{
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_HOST;
    o.timeout_ms = timeout_ms;
    return o;
}

static const symmem_boot_id_t *boot_id(const symmem_unique_id_t *id)
{
    return (const symmem_boot_id_t *)(const void *)id->bytes;
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* Bind rank r's name (as a squatter or impostor would, had it the name). */
static int bind_name(const symmem_unique_id_t *id, int rank, int backlog)
{
    struct sockaddr_un a;
    socklen_t alen;
    CHECK_OK(symmem_boot_sock_addr(boot_id(id), rank, &a, &alen));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    CHECK(bind(fd, (struct sockaddr *)&a, alen) == 0);
    CHECK(listen(fd, backlog) == 0);
    return fd;
}

static int connect_name(const symmem_unique_id_t *id, int rank)
{
    struct sockaddr_un a;
    socklen_t alen;
    CHECK_OK(symmem_boot_sock_addr(boot_id(id), rank, &a, &alen));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    if (connect(fd, (struct sockaddr *)&a, alen) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int drop_to_nobody(void)
{
    return setgroups(0, NULL) == 0 && setresgid(NOBODY, NOBODY, NOBODY) == 0 && setresuid(NOBODY, NOBODY, NOBODY) == 0;
}

/* Does any 4-byte window of the id's secret occur in buf? */
static int has_secret_bytes(const symmem_unique_id_t *id, const unsigned char *buf, size_t n)
{
    const unsigned char *s = boot_id(id)->secret;
    for (size_t i = 0; i + 4 <= SYMMEM_BOOT_SECRET_BYTES; i++)
        if (n >= 4 && memmem(buf, n, s + i, 4)) return 1;
    return 0;
}

typedef void (*rank_fn)(int rank, int nranks, const symmem_unique_id_t *id);

static pid_t fork_rank(rank_fn fn, int rank, int nranks, const symmem_unique_id_t *id)
{
    pid_t p = fork();
    if (p == 0) {
        fn(rank, nranks, id);
        _exit(0);
    }
    return p;
}

static int wait_ok(pid_t p)
{
    int status = 0;
    waitpid(p, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 1;
    fprintf(stderr, "process %d failed (status 0x%x)\n", (int)p, status);
    return 0;
}

/* A job of two ranks, each a process running fn, with a fresh id; both must end well. */
static void two_ranks(rank_fn fn)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    pid_t r0 = fork_rank(fn, 0, 2, &id), r1 = fork_rank(fn, 1, 2, &id);
    CHECK(wait_ok(r0) & wait_ok(r1));
}

static void rank_job(int rank, int nranks, const symmem_unique_id_t *id, int timeout_ms)
{
    symmem_options_t o = host_opts(timeout_ms);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    symmem_buffer_t b;
    CHECK_OK(symmem_alloc(c, 8192, &b));
    ((volatile char *)symmem_buffer_ptr(b))[0] = (char)(rank + 1);
    CHECK_OK(symmem_comm_barrier(c));
    for (int r = 0; r < nranks; r++) CHECK(((volatile char *)symmem_buffer_peer_ptr(b, r))[0] == (char)(r + 1));
    CHECK_OK(symmem_free(b));
    CHECK_OK(symmem_comm_destroy(c));
}

static void rank_job_20s(int rank, int nranks, const symmem_unique_id_t *id) { rank_job(rank, nranks, id, 20000); }

/* ---- names ------------------------------------------------------------------------------------------------ */

/* Names come from the secret: distinct per rank and per id, stable for one id, and carrying neither the
 * secret nor the tag (the old names were "symmem-<tag>-<rank>": knowing one gave away all the others). */
static void names_are_secret_derived(void)
{
    symmem_unique_id_t a, b;
    CHECK_OK(symmem_get_unique_id(&a));
    CHECK_OK(symmem_get_unique_id(&b));
    char seen[2 * SYMMEM_MAX_RANKS][sizeof(((struct sockaddr_un *)0)->sun_path)];
    int k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int r = 0; r < SYMMEM_MAX_RANKS; r++) {
            struct sockaddr_un x, y;
            socklen_t xl, yl;
            CHECK_OK(symmem_boot_sock_addr(boot_id(pass ? &b : &a), r, &x, &xl));
            CHECK_OK(symmem_boot_sock_addr(boot_id(pass ? &b : &a), r, &y, &yl));
            CHECK(xl == yl && memcmp(&x, &y, xl) == 0);
            CHECK(x.sun_path[0] == '\0' && strncmp(x.sun_path + 1, "symmem-", 7) == 0);
            CHECK(strlen(x.sun_path + 1) == 7 + SYMMEM_BOOT_NAME_HEX);
            char tag_hex[2 * SYMMEM_BOOT_TAG_BYTES + 1];
            for (int i = 0; i < SYMMEM_BOOT_TAG_BYTES; i++) sprintf(tag_hex + 2 * i, "%02x", boot_id(pass ? &b : &a)->tag[i]);
            CHECK(!strstr(x.sun_path + 1, tag_hex) && !has_secret_bytes(pass ? &b : &a, (unsigned char *)x.sun_path + 1, strlen(x.sun_path + 1)));
            for (int j = 0; j < k; j++) CHECK(strcmp(seen[j], x.sun_path + 1) != 0);
            snprintf(seen[k++], sizeof seen[0], "%s", x.sun_path + 1);
        }
}

/* v as 4 bytes, least significant first, whatever the host's byte order. */
static void put_le32(unsigned char *p, int32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

/* The handshake MAC and the socket names byte for byte as boot/bootmsg.h and docs/security.md define them,
 * composed here independently: each label with its terminating NUL, the role as one byte, every integer as
 * 4 bytes little-endian, the name the first 16 bytes of its HMAC in lowercase hex. Two ranks of one library
 * agree whatever the layout, so only this pins it (ranks of two builds must agree too), and a name written
 * past its 33 bytes shows in the guard byte after them. */
static void mac_and_names_follow_the_layout(void)
{
    unsigned char secret[SYMMEM_BOOT_SECRET_BYTES], tag[SYMMEM_BOOT_TAG_BYTES];
    unsigned char nonce_c[SYMMEM_BOOT_NONCE_BYTES], nonce_l[SYMMEM_BOOT_NONCE_BYTES];
    CHECK_OK(boot_fill_random(secret, sizeof secret));
    CHECK_OK(boot_fill_random(tag, sizeof tag));
    CHECK_OK(boot_fill_random(nonce_c, sizeof nonce_c));
    CHECK_OK(boot_fill_random(nonce_l, sizeof nonce_l));
    static const struct {
        char role;
        int c, l, nc, nl;
    } cases[] = {{'L', 0, 1, 2, 2}, {'C', 0, 1, 2, 2}, {'C', 3, 0x1234567, 0x7f010203, -2}, {'L', 1, 0, 2, 2}};
    unsigned char seen[4][SYMMEM_BOOT_MAC_BYTES];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        unsigned char msg[sizeof "symmem-boot-v2" + 1 + sizeof tag + 16 + 2 * SYMMEM_BOOT_NONCE_BYTES], *p = msg;
        memcpy(p, "symmem-boot-v2", sizeof "symmem-boot-v2"), p += sizeof "symmem-boot-v2";
        *p++ = (unsigned char)cases[k].role;
        memcpy(p, tag, sizeof tag), p += sizeof tag;
        const int32_t ints[4] = {cases[k].c, cases[k].l, cases[k].nc, cases[k].nl};
        for (int i = 0; i < 4; i++) put_le32(p, ints[i]), p += 4;
        memcpy(p, nonce_c, sizeof nonce_c), p += sizeof nonce_c;
        memcpy(p, nonce_l, sizeof nonce_l), p += sizeof nonce_l;
        CHECK(p == msg + sizeof msg);
        unsigned char want[SYMMEM_SHA256_BYTES];
        symmem_hmac_sha256(secret, sizeof secret, msg, sizeof msg, want);
        symmem_boot_mac(secret, sizeof secret, tag, sizeof tag, cases[k].role, cases[k].c, cases[k].l, cases[k].nc,
                        cases[k].nl, nonce_c, nonce_l, seen[k]);
        CHECK(memcmp(seen[k], want, sizeof want) == 0);
        for (size_t j = 0; j < k; j++) CHECK(memcmp(seen[j], seen[k], sizeof want) != 0);
    }
    static const int ranks[] = {0, 1, 15, 0x01020304};
    for (size_t k = 0; k < sizeof ranks / sizeof ranks[0]; k++) {
        unsigned char msg[sizeof "symmem-boot-name" + sizeof tag + 4], *p = msg, d[SYMMEM_SHA256_BYTES];
        memcpy(p, "symmem-boot-name", sizeof "symmem-boot-name"), p += sizeof "symmem-boot-name";
        memcpy(p, tag, sizeof tag), p += sizeof tag;
        put_le32(p, ranks[k]);
        symmem_hmac_sha256(secret, sizeof secret, msg, sizeof msg, d);
        char want[SYMMEM_BOOT_NAME_HEX + 1];
        for (int i = 0; i < SYMMEM_BOOT_NAME_HEX / 2; i++) snprintf(want + 2 * i, 3, "%02x", d[i]);
        char got[SYMMEM_BOOT_NAME_HEX + 2];
        memset(got, '#', sizeof got);
        symmem_boot_name(secret, sizeof secret, tag, sizeof tag, ranks[k], got);
        CHECK(strcmp(got, want) == 0 && got[SYMMEM_BOOT_NAME_HEX + 1] == '#');
    }
}

/* ---- impostors ----------------------------------------------------------------------------------------------- */

/* An impostor holds rank 1's name (as if the name had leaked) and answers like a listener without the
 * secret. It must get neither the secret nor anything beyond a HELLO, and rank 0 must say who it was. */
static void impostor_listener(const symmem_unique_id_t *id, int as_nobody, int ready_fd, int report_fd)
{
    if (as_nobody && !drop_to_nobody()) _exit(2);
    int l = bind_name(id, 1, 8);
    const char bound = 1;
    if (write(ready_fd, &bound, 1) != 1) _exit(3);
    unsigned char got[4096];
    size_t n = 0;
    struct pollfd p = {l, POLLIN, 0};
    if (poll(&p, 1, 10000) == 1) {
        int fd = accept(l, NULL, NULL);
        /* a listener's challenge with a made-up MAC */
        symmem_boot_hdr_t h;
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_CHALLENGE, 1, 2, 0, sizeof(symmem_boot_challenge_t));
        unsigned char msg[sizeof h + sizeof(symmem_boot_challenge_t)];
        memcpy(msg, &h, sizeof h);
        memset(msg + sizeof h, 0x42, sizeof msg - sizeof h);
        ssize_t w = send(fd, msg, sizeof msg, MSG_NOSIGNAL);
        (void)w;
        for (;;) {
            struct pollfd q = {fd, POLLIN, 0};
            if (poll(&q, 1, 3000) != 1) break;
            ssize_t r = read(fd, got + n, sizeof got - n);
            if (r <= 0) break;
            n += (size_t)r;
        }
    }
    int leak = has_secret_bytes(id, got, n);
    ssize_t w = write(report_fd, &n, sizeof n);
    w = write(report_fd, &leak, sizeof leak);
    (void)w;
    _exit(0);
}

static void impostor_case(int as_nobody, const char *needle)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    int pipefd[2], ready[2];
    CHECK(pipe(pipefd) == 0 && pipe(ready) == 0);
    pid_t imp = fork();
    if (imp == 0) impostor_listener(&id, as_nobody, ready[1], pipefd[1]);
    close(ready[1]);
    /* Rank 0 starts once the impostor holds the name, however slowly a loaded machine runs the impostor: the
     * case is about what rank 0 says to a listener that exists, not about a name nobody has bound. */
    char bound = 0;
    struct pollfd p = {ready[0], POLLIN, 0};
    CHECK(poll(&p, 1, 30000) == 1 && read(ready[0], &bound, 1) == 1 && bound == 1);
    close(ready[0]);
    symmem_options_t o = host_opts(5000);
    symmem_comm_t c;
    CHECK(symmem_comm_init(2, 0, &id, &o, &c) != SYMMEM_OK);
    CHECK_ERR_HAS(needle);
    CHECK_ERR_HAS("rank 1");
    size_t n = 99999;
    int leak = 1;
    CHECK(read(pipefd[0], &n, sizeof n) == sizeof n && read(pipefd[0], &leak, sizeof leak) == sizeof leak);
    waitpid(imp, NULL, 0);
    printf("  impostor (%s) received %zu bytes, secret bytes among them: %s\n", as_nobody ? "uid 65534" : "same uid",
           n, leak ? "YES" : "none");
    CHECK(!leak);
    /* another user gets nothing at all; the same user gets the HELLO only (a nonce, no secret) */
    CHECK(n == (as_nobody ? 0 : sizeof(symmem_boot_hdr_t) + SYMMEM_BOOT_NONCE_BYTES));
}

static void impostor_of_another_user_gets_nothing(void)
{
    if (geteuid() != 0) {
        printf("  skipped: needs root to run an impostor as uid 65534\n");
        exit(TEST_SKIP_CODE);
    }
    impostor_case(1, "held by pid");
}

static void impostor_without_the_secret_is_found_out(void)
{
    impostor_case(0, "did not prove it holds this communicator's secret");
}

/* ---- connect with a deadline ------------------------------------------------------------------------------ */

/* Rank 1's name is held by a listener whose backlog is full and which never accepts: connect() used to
 * block past the timeout (24.5 s for 2 s); now rank 0 keeps the deadline and says what it saw. */
static void full_backlog_keeps_the_deadline(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    int l = bind_name(&id, 1, 0);
    int fill[8], nfill = 0;
    for (int i = 0; i < 8; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        struct sockaddr_un a;
        socklen_t alen;
        CHECK_OK(symmem_boot_sock_addr(boot_id(&id), 1, &a, &alen));
        if (connect(fd, (struct sockaddr *)&a, alen) == 0) fill[nfill++] = fd;
        else close(fd);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    symmem_options_t o = host_opts(1000);
    symmem_comm_t c;
    CHECK_ST(symmem_comm_init(2, 0, &id, &o, &c), SYMMEM_TIMEOUT);
    double s = seconds_since(&t0);
    CHECK_ERR_HAS("rank(s) 1 did not accept the connection (its listen queue is full");
    CHECK(s < 10.0); /* bounded (the test's alarm would catch a hang too) */
    for (int i = 0; i < nfill; i++) close(fill[i]);
    close(l);
}

/* A listener that turns a rank's handshake away and is still there is called again; one whose name is gone
 * after that is named at once. Here the test holds rank 1's name: it accepts rank 0's first connection and
 * closes it unread (as a rank does with a handshake past its time), waits for rank 0 to come back with a new
 * HELLO, then leaves. Rank 0 used to fail at the first close ("reset the connection during the
 * handshake") while the listener, alive, waited for it until the timeout. */
static int accept_hello(int l)
{
    struct pollfd p = {l, POLLIN, 0};
    if (poll(&p, 1, 5000) != 1) return -1;
    int fd = accept(l, NULL, NULL);
    struct pollfd q = {fd, POLLIN, 0};
    symmem_boot_hdr_t h;
    if (fd < 0 || poll(&q, 1, 5000) != 1 || recv(fd, &h, sizeof h, MSG_PEEK) != (ssize_t)sizeof h ||
        h.type != SYMMEM_BOOT_HELLO || h.rank != 0) {
        if (fd >= 0) close(fd);
        return -1;
    }
    return fd;
}

static void rank0_called_again(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_options_t o = host_opts(10000);
    symmem_comm_t c;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_ST(symmem_comm_init(nranks, rank, id, &o, &c), SYMMEM_PEER_FAILURE);
    CHECK_ERR_HAS("the process listening as rank 1");
    CHECK_ERR_HAS("during the handshake (it exited, crashed or gave up)");
    CHECK(seconds_since(&t0) < 5.0); /* not the 10 s timeout */
}

static void a_dropped_handshake_is_called_again(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    pid_t r0 = fork_rank(rank0_called_again, 0, 2, &id); /* first: it must not inherit the listener */
    int l = bind_name(&id, 1, 8);
    int first = accept_hello(l);
    CHECK(first >= 0);
    close(first); /* unread: rank 0 sees its connection reset */
    int second = accept_hello(l);
    close(l);
    if (second >= 0) close(second);
    CHECK(wait_ok(r0));
    CHECK(second >= 0);
}

/* ---- idle and junk connections ----------------------------------------------------------------------------- */

typedef struct holder_args {
    const symmem_unique_id_t *id;
    int rank, count;
    int fds[64];
    int n;
} holder_args_t;

/* Opens `count` connections to a rank's socket as soon as it exists and holds them, silent. */
static void *hold_idle(void *p)
{
    holder_args_t *a = p;
    for (int tries = 0; tries < 20000 && a->n < a->count; tries++) {
        int fd = connect_name(a->id, a->rank);
        if (fd >= 0) a->fds[a->n++] = fd;
        else usleep(500);
    }
    return NULL;
}

static void rank_job_3s(int rank, int nranks, const symmem_unique_id_t *id) { rank_job(rank, nranks, id, 3000); }

/* Six silent connections reach rank 2 before the real ranks do. Hellos used to be read one connection at
 * a time with 2 s each, so the job needed 12 s and failed its 3 s timeout; now it does not notice them. */
static void idle_connections_cost_nothing(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    pid_t r2 = fork_rank(rank_job_3s, 2, 3, &id);
    holder_args_t h = {.id = &id, .rank = 2, .count = 6};
    hold_idle(&h);
    CHECK(h.n == 6);
    pid_t r0 = fork_rank(rank_job_3s, 0, 3, &id), r1 = fork_rank(rank_job_3s, 1, 3, &id);
    int ok = wait_ok(r0) & wait_ok(r1) & wait_ok(r2);
    for (int i = 0; i < h.n; i++) close(h.fds[i]);
    CHECK(ok);
}

static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

static int file_has(const char *path, const char *needle) { return count_lines(path, needle) > 0; }

/* Junk of every kind from this user while a 2-rank job starts: garbage, a header claiming 4 GiB, a HELLO
 * for rank -1002 (it used to index b->fds[1000]: a heap overflow), a HELLO for a rank that is not lower, a
 * header cut short. The job completes; the log has one line per rejection for the first few, then a
 * count, and never calls a connecting process "rank -1". */
static void junk_sender(const symmem_unique_id_t *id, int kind)
{
    for (int tries = 0; tries < 20000; tries++) {
        int fd = connect_name(id, 1);
        if (fd < 0) {
            usleep(500);
            continue;
        }
        symmem_boot_hdr_t h;
        unsigned char buf[256];
        memset(buf, 0x5a, sizeof buf);
        size_t len = sizeof buf;
        switch (kind % 5) {
        case 0: break; /* garbage */
        case 1: symmem_boot_hdr_make(&h, SYMMEM_BOOT_HELLO, 0, 2, 0, 0xffffffffu), memcpy(buf, &h, sizeof h), len = sizeof h; break;
        case 2: symmem_boot_hdr_make(&h, SYMMEM_BOOT_HELLO, 0, 2, 0, 32), h.rank = -1002, memcpy(buf, &h, sizeof h), len = sizeof h + 32; break;
        case 3: symmem_boot_hdr_make(&h, SYMMEM_BOOT_HELLO, 1, 2, 0, 32), memcpy(buf, &h, sizeof h), len = sizeof h + 32; break;
        case 4: symmem_boot_hdr_make(&h, SYMMEM_BOOT_HELLO, 0, 2, 0, 32), memcpy(buf, &h, sizeof h), len = 20; break;
        }
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        (void)w;
        char r[64];
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 5000) == 1 && read(fd, r, sizeof r) > 0) _exit(1); /* must be closed on, never answered */
        close(fd);
        _exit(0);
    }
    _exit(0);
}

static void junk_is_rejected_quietly(void)
{
    char log[] = "/tmp/symmem-test-bootlog-XXXXXX";
    int lf = mkstemp(log);
    CHECK(lf >= 0);
    close(lf);
    setenv("SYMMEM_LOG_FILE", log, 1);
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    enum { JUNK = 40 };
    pid_t r1 = fork_rank(rank_job_20s, 1, 2, &id);
    pid_t junk[JUNK];
    for (int i = 0; i < JUNK; i++)
        if ((junk[i] = fork()) == 0) junk_sender(&id, i);
    int junk_ok = 1;
    for (int i = 0; i < JUNK; i++) junk_ok &= wait_ok(junk[i]);
    pid_t r0 = fork_rank(rank_job_20s, 0, 2, &id);
    int ok = wait_ok(r0) & wait_ok(r1);
    int warn_lines = count_lines(log, "WARN BOOT") , rejected = count_lines(log, "rejected a bootstrap connection");
    int summary = file_has(log, "turned away"), minus_one = file_has(log, "rank -1");
    printf("  %d junk connections: %d rejection lines (%d at WARN), summary line: %s\n", JUNK, rejected, warn_lines,
           summary ? "yes" : "no");
    unlink(log);
    CHECK(ok && junk_ok);
    CHECK(warn_lines <= 4 && rejected <= 4 && summary && !minus_one);
}

/* ---- descriptors ----------------------------------------------------------------------------------------------- */

static void send_fds(int sock, int fd, int count, const void *data, size_t len)
{
    int fds[253];
    for (int i = 0; i < count; i++) fds[i] = fd;
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof fds)];
    } ctrl;
    memset(&ctrl, 0, sizeof ctrl);
    struct iovec iov = {(void *)data, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.buf,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)count)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)count);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)count);
    ssize_t w = sendmsg(sock, &m, MSG_NOSIGNAL);
    (void)w;
}

static void flood_fds(const symmem_unique_id_t *id, int conns)
{
    int devnull = open("/dev/null", O_RDONLY);
    symmem_boot_hdr_t h;
    symmem_boot_hdr_make(&h, SYMMEM_BOOT_HELLO, 0, 2, 0, 32);
    unsigned char hello[sizeof h + 32];
    memcpy(hello, &h, sizeof h);
    memset(hello + sizeof h, 1, 32);
    int sent = 0;
    for (int tries = 0; tries < 40000 && sent < conns; tries++) {
        int fd = connect_name(id, 1);
        if (fd < 0) {
            usleep(500);
            continue;
        }
        send_fds(fd, devnull, 200, hello, sizeof hello);
        sent++;
        close(fd);
    }
    _exit(sent == conns ? 0 : 1);
}

/* Hellos carrying 200 descriptors each: the receive control buffer had room for 2 and handled 1, so each
 * leaked one (6 -> 306 open descriptors after 300, still open after destroy). Now every one is closed. */
static void rank_counting_fds(int rank, int nranks, const symmem_unique_id_t *id)
{
    int before = test_open_fds();
    if (rank == 1) usleep(300000); /* (as rank 1) stay in init while the flood arrives */
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    CHECK_OK(symmem_comm_barrier(c));
    CHECK_OK(symmem_comm_destroy(c));
    int after = test_open_fds();
    if (after != before) fprintf(stderr, "rank %d: %d descriptors open before init, %d after destroy\n", rank, before, after);
    CHECK(after == before);
}

static void descriptor_flood_leaks_nothing(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    pid_t r1 = fork_rank(rank_counting_fds, 1, 2, &id);
    pid_t flood = fork();
    if (flood == 0) flood_fds(&id, 300);
    int flood_ok = wait_ok(flood);
    pid_t r0 = fork_rank(rank_counting_fds, 0, 2, &id);
    CHECK(wait_ok(r0) & wait_ok(r1) & flood_ok);
}

/* Rank 0 runs out of descriptors in symmem_alloc: the error says so, with the limit, instead of "rank 1
 * sent no file descriptor". */
static void rank_out_of_fds(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    symmem_buffer_t b;
    if (rank == 0) {
        int top = 0;
        for (int fd = 0; fd < 4096; fd++)
            if (fcntl(fd, F_GETFD) >= 0) top = fd;
        struct rlimit rl;
        CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
        for (int fd = 0; fd < top; fd++) /* no holes below the limit */
            if (fcntl(fd, F_GETFD) < 0) CHECK(dup2(2, fd) == fd);
        rl.rlim_cur = (rlim_t)top + 3; /* room for this rank's memfd and its export, not for the peers' */
        CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
        CHECK(symmem_alloc(c, 4096, &b) != SYMMEM_OK);
        CHECK_ERR_HAS("out of file descriptors (ulimit -n");
    } else {
        CHECK(symmem_alloc(c, 4096, &b) != SYMMEM_OK);
        CHECK_ERR_HAS("rank 0");
    }
    symmem_comm_destroy(c);
}

static void fd_exhaustion_is_named(void)
{
    two_ranks(rank_out_of_fds);
}

/* ---- what the messages say ------------------------------------------------------------------------------------ */

/* A header cut short with the next message right behind it (its sender stopped mid-message and sent again)
 * read as "another symmem bootstrap protocol version (mixed library versions)"; it is named for what it is.
 * A header of another protocol version is still called that. */
static void cut_short_header_is_named(void)
{
    symmem_boot_hdr_t h, got;
    symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, 1, 2, 7, 8);
    unsigned char stream[2 * sizeof h + 8];
    memset(stream, 0, sizeof stream);
    for (size_t cut = sizeof(uint32_t); cut + sizeof(uint32_t) <= sizeof h; cut++) {
        memcpy(stream, &h, cut);
        memcpy(stream + cut, &h, sizeof h); /* the next message, whole */
        const unsigned char *payload = NULL;
        const char *why = NULL;
        CHECK(symmem_boot_parse(stream, cut + sizeof h + 8, 64, &got, &payload, &why) < 0);
        if (!strstr(why, "cut short") || strstr(why, "version"))
            fprintf(stderr, "header cut after %zu bytes: '%s'\n", cut, why), exit(1);
    }
    symmem_boot_hdr_t other = h;
    other.proto = SYMMEM_BOOT_PROTO + 1;
    CHECK(strstr(symmem_boot_hdr_check(&other), "mixed library versions"));
    CHECK(symmem_boot_hdr_check(&h) == NULL);
}

/* Every field the header check reads, one at a time: each type at its allowed lengths passes, one byte off (or
 * the other descriptor count, a rank or count out of range, an unknown type) fails with the field's name; the
 * parser adds the connection's limit; each handshake step takes its own types only (and ABORT on the
 * connector's side). A check dropped from boot/bootmsg.c fails here, not only in a fuzzer's corpus. */
static void header_checks_name_the_field(void)
{
    static const struct {
        symmem_boot_msg_type_t type;
        uint32_t lo, hi; /* the lengths it allows */
        const char *wrong_len;
    } types[] = {
        {SYMMEM_BOOT_HELLO, SYMMEM_BOOT_NONCE_BYTES, SYMMEM_BOOT_NONCE_BYTES, "HELLO of the wrong length"},
        {SYMMEM_BOOT_CHALLENGE, sizeof(symmem_boot_challenge_t), sizeof(symmem_boot_challenge_t),
         "CHALLENGE of the wrong length"},
        {SYMMEM_BOOT_PROOF, SYMMEM_BOOT_MAC_BYTES, SYMMEM_BOOT_MAC_BYTES, "PROOF of the wrong length"},
        {SYMMEM_BOOT_WELCOME, sizeof(symmem_boot_welcome_t), sizeof(symmem_boot_welcome_t), "WELCOME of the wrong length"},
        {SYMMEM_BOOT_ABORT, sizeof(int32_t), SYMMEM_BOOT_ABORT_MAX, "ABORT of the wrong length"},
        {SYMMEM_BOOT_DATA, 0, SYMMEM_BOOT_DATA_MAX, "DATA payload too long"},
        {SYMMEM_BOOT_FD, sizeof(uint64_t), sizeof(uint64_t), "FD message of the wrong length"},
    };
    symmem_boot_hdr_t h;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const uint32_t lens[] = {types[i].lo, types[i].hi};
        for (int k = 0; k < 2; k++) {
            symmem_boot_hdr_make(&h, types[i].type, 3, 4, 9, lens[k]);
            CHECK(symmem_boot_hdr_check(&h) == NULL);
        }
        if (types[i].lo > 0) {
            symmem_boot_hdr_make(&h, types[i].type, 3, 4, 9, types[i].lo - 1);
            CHECK(symmem_boot_hdr_check(&h) && strstr(symmem_boot_hdr_check(&h), types[i].wrong_len));
        }
        symmem_boot_hdr_make(&h, types[i].type, 3, 4, 9, types[i].hi + 1);
        CHECK(symmem_boot_hdr_check(&h) && strstr(symmem_boot_hdr_check(&h), types[i].wrong_len));
        symmem_boot_hdr_make(&h, types[i].type, 3, 4, 9, types[i].lo);
        h.nfds ^= 1u;
        CHECK(symmem_boot_hdr_check(&h) && strstr(symmem_boot_hdr_check(&h), "wrong descriptor count"));
    }
    static const struct {
        int rank, nranks;
        const char *why;
    } ranks[] = {{0, 1, NULL},
                 {SYMMEM_MAX_RANKS - 1, SYMMEM_MAX_RANKS, NULL},
                 {0, 0, "rank count out of range"},
                 {0, SYMMEM_MAX_RANKS + 1, "rank count out of range"},
                 {-1, 4, "rank out of range"},
                 {4, 4, "rank out of range"}};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; i++) {
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, ranks[i].rank, ranks[i].nranks, 1, 8);
        const char *why = symmem_boot_hdr_check(&h);
        CHECK(ranks[i].why ? why && strstr(why, ranks[i].why) : why == NULL);
    }
    for (int type = 0; type <= SYMMEM_BOOT_MSG_TYPES; type += SYMMEM_BOOT_MSG_TYPES) {
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, 0, 2, 1, 8);
        h.type = (uint16_t)type;
        CHECK(symmem_boot_hdr_check(&h) && strstr(symmem_boot_hdr_check(&h), "unknown message type"));
    }
    /* the parser: the connection's limit, a wrong magic from its first byte, a whole message's length */
    unsigned char buf[sizeof h + 64] = {0};
    const unsigned char *payload = NULL;
    const char *why = NULL;
    symmem_boot_hdr_t got;
    symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, 1, 2, 5, 64);
    memcpy(buf, &h, sizeof h);
    CHECK(symmem_boot_parse(buf, sizeof buf, 64, &got, &payload, &why) == (long)sizeof buf && payload == buf + sizeof h);
    CHECK(symmem_boot_parse(buf, sizeof buf - 1, 64, &got, &payload, &why) == 0);
    CHECK(symmem_boot_parse(buf, sizeof h - 1, 64, &got, &payload, &why) == 0);
    CHECK(symmem_boot_parse(buf, sizeof buf, 63, &got, &payload, &why) == -1 &&
          strstr(why, "longer than this connection accepts"));
    symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, 1, 2, 6, 0); /* a header alone is a whole message of length 0 */
    memcpy(buf, &h, sizeof h);
    CHECK(symmem_boot_parse(buf, sizeof h, 64, &got, &payload, &why) == (long)sizeof h && got.seq == 6);
    buf[0] ^= 0xff;
    why = NULL;
    CHECK(symmem_boot_parse(buf, 1, 64, &got, &payload, &why) == -1 && strstr(why, "bad magic"));
    /* the handshake: each step's own types */
    static const symmem_boot_msg_type_t allowed[][2] = {
        [SYMMEM_BOOT_HS_WAIT_HELLO] = {SYMMEM_BOOT_HELLO, SYMMEM_BOOT_HELLO},
        [SYMMEM_BOOT_HS_WAIT_PROOF] = {SYMMEM_BOOT_PROOF, SYMMEM_BOOT_PROOF},
        [SYMMEM_BOOT_HS_WAIT_CHALLENGE] = {SYMMEM_BOOT_CHALLENGE, SYMMEM_BOOT_ABORT},
        [SYMMEM_BOOT_HS_WAIT_WELCOME] = {SYMMEM_BOOT_WELCOME, SYMMEM_BOOT_ABORT},
    };
    for (int step = SYMMEM_BOOT_HS_WAIT_HELLO; step <= SYMMEM_BOOT_HS_WAIT_WELCOME; step++)
        for (int type = SYMMEM_BOOT_HELLO; type < SYMMEM_BOOT_MSG_TYPES; type++) {
            symmem_boot_hdr_make(&h, (symmem_boot_msg_type_t)type, 0, 2, 0, 0);
            const int ok = type == (int)allowed[step][0] || type == (int)allowed[step][1];
            CHECK((symmem_boot_hs_expect((symmem_boot_hs_step_t)step, &h) == NULL) == ok);
        }
    CHECK(symmem_boot_hs_expect((symmem_boot_hs_step_t)99, &h) != NULL);
}

/* Rank 1 attaches a descriptor to a DATA message, which carries none: rank 0's error says so in words
 * ("sent unexpected file descriptors than the protocol allows" before), and the descriptor is closed. */
static void rank_with_stray_fd(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    int before = test_open_fds();
    if (rank == 1) {
        symmem_boot_hdr_t h;
        uint32_t mine = 1;
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, 1, nranks, c->boot->seq + 1, sizeof mine);
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        CHECK_OK(boot_send_msg(c->boot, 0, &h, &mine, devnull, boot_now_ms() + 5000, "test"));
        close(devnull);
        /* stay until rank 0 has sent its part: a send to a rank that left is another error */
        struct pollfd p = {c->boot->fds[0], POLLIN, 0};
        CHECK(poll(&p, 1, 10000) == 1);
    } else {
        uint32_t mine = 0, all[2];
        CHECK_ST(symmem_comm_allgather(c, &mine, all, sizeof mine), SYMMEM_PEER_FAILURE);
        CHECK_ERR_HAS("rank 1 sent file descriptors with a message that carries none (closed)");
        CHECK(test_open_fds() == before);
    }
    symmem_comm_destroy(c);
}

static void stray_descriptor_is_named(void)
{
    two_ranks(rank_with_stray_fd);
}

/* Rank 1 attaches two descriptors to its part of a descriptor exchange, where the protocol carries one (both
 * fit the receive buffer's padding, so the kernel delivers both): rank 0 stores none past the one slot,
 * closes both, fails the exchange naming rank 1, and ends with the descriptors it started with. Then the
 * same part with no descriptor at all: rank 1 sent none (not "the kernel dropped it"). */
static void rank_with_fds(int rank, int nranks, const symmem_unique_id_t *id, int count)
{
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    const uint64_t tag = 0x5eed;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(devnull >= 0);
    int before = test_open_fds();
    if (rank == 1) {
        symmem_boot_hdr_t h;
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_FD, 1, nranks, c->boot->seq + 1, sizeof tag);
        unsigned char msg[sizeof h + sizeof tag];
        memcpy(msg, &h, sizeof h);
        memcpy(msg + sizeof h, &tag, sizeof tag);
        if (count > 0) send_fds(c->boot->fds[0], devnull, count, msg, sizeof msg);
        else CHECK(send(c->boot->fds[0], msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg);
        struct pollfd p = {c->boot->fds[0], POLLIN, 0}; /* stay until rank 0 has sent its part */
        CHECK(poll(&p, 1, 10000) == 1);
    } else {
        int fds[2] = {-1, -1};
        CHECK_ST(symmem_comm_exchange_fds(c, devnull, tag, fds), SYMMEM_PEER_FAILURE);
        const char *two = "rank 1 sent more file descriptors than the protocol allows (the extra ones were closed)";
        CHECK_ERR_HAS(count > 0 ? two : "rank 1 sent no file descriptor");
        CHECK(fds[0] == -1 && fds[1] == -1 && test_open_fds() == before);
    }
    close(devnull);
    symmem_comm_destroy(c);
}

static void rank_with_two_fds(int rank, int nranks, const symmem_unique_id_t *id)
{
    rank_with_fds(rank, nranks, id, 2);
}

static void rank_with_no_fd(int rank, int nranks, const symmem_unique_id_t *id)
{
    rank_with_fds(rank, nranks, id, 0);
}

static void extra_descriptor_is_named(void)
{
    two_ranks(rank_with_two_fds);
    two_ranks(rank_with_no_fd);
}

/* Rank 1 sends a DATA message nobody asked for, then gives up (an ABORT with its reason) and exits. Rank 0's
 * next call finds the connection closed when it sends, reads what rank 1 left queued, skips the DATA and
 * reports rank 1's own reason and status, not "closed its connection". Then without the DATA, rank 1 staying
 * until rank 0's part has come: rank 0 reads the ABORT as its next message, and reports the same. */
static void rank_that_gives_up(int rank, int nranks, const symmem_unique_id_t *id, int stays)
{
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    if (rank == 1) {
        unsigned char junk[300];
        memset(junk, 0x33, sizeof junk);
        symmem_boot_hdr_t h;
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, 1, nranks, c->boot->seq + 1, sizeof junk);
        if (!stays) CHECK_OK(boot_send_msg(c->boot, 0, &h, junk, -1, boot_now_ms() + 5000, "test"));
        symmem_boot_abort(c->boot, SYMMEM_TIMEOUT, "rank 2 of the job never came");
        if (stays) { /* until rank 0's part has come: its send succeeds and it reads the ABORT */
            struct pollfd p = {c->boot->fds[0], POLLIN, 0};
            CHECK(poll(&p, 1, 10000) == 1);
        }
        _exit(0); /* its sockets close with it */
    }
    struct pollfd p = {c->boot->fds[1], 0, 0}; /* POLLHUP: rank 1 has exited */
    for (int i = 0; i < 1000 && !stays && !(p.revents & POLLHUP); i++) CHECK(poll(&p, 1, 10) >= 0);
    CHECK(stays || (p.revents & POLLHUP));
    CHECK_ST(symmem_comm_barrier(c), SYMMEM_TIMEOUT);
    /* the reason is the whole tail: no byte past the ABORT's text, none of the skipped DATA */
    const char *err = symmem_last_error(), *want = "barrier: rank 1 gave up: rank 2 of the job never came";
    CHECK_ERR_HAS(want);
    CHECK(strlen(err) >= strlen(want) && strcmp(err + strlen(err) - strlen(want), want) == 0);
    symmem_comm_destroy(c);
}

static void rank_that_gives_up_and_leaves(int rank, int nranks, const symmem_unique_id_t *id)
{
    rank_that_gives_up(rank, nranks, id, 0);
}

static void rank_that_gives_up_and_stays(int rank, int nranks, const symmem_unique_id_t *id)
{
    rank_that_gives_up(rank, nranks, id, 1);
}

static void a_peer_that_gave_up_is_named_on_send(void)
{
    two_ranks(rank_that_gives_up_and_leaves);
    two_ranks(rank_that_gives_up_and_stays);
}

/* What rank 1 sends in place of its part of rank 0's allgather of 4 bytes (after init, over the mesh):
 * whole but with a wrong magic, in three pieces with pauses between, or half a header before it exits. */
enum { PART_BAD_MAGIC, PART_IN_PIECES, PART_CUT_BY_EXIT };

static void rank_sending_part(int rank, int nranks, const symmem_unique_id_t *id, int how)
{
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    const uint32_t mine = 0xa0b0c0d0u + (uint32_t)rank;
    if (rank == 1) {
        symmem_boot_hdr_t h;
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, 1, nranks, c->boot->seq + 1, sizeof mine);
        if (how == PART_BAD_MAGIC) h.magic ^= 1u;
        unsigned char msg[sizeof h + sizeof mine];
        memcpy(msg, &h, sizeof h);
        memcpy(msg + sizeof h, &mine, sizeof mine);
        const int fd = c->boot->fds[0];
        /* Rank 0's part first (its allgather sends before it reads), read whole: whatever rank 0 then does,
         * nothing of it is left unread here, so rank 1's leaving is an end of stream for rank 0 (not a
         * reset), and rank 0 leaving early cannot cut this read short. */
        unsigned char theirs[sizeof msg];
        size_t got = 0;
        while (got < sizeof theirs) {
            struct pollfd p = {fd, POLLIN, 0};
            CHECK(poll(&p, 1, 10000) == 1);
            ssize_t n = recv(fd, theirs + got, sizeof theirs - got, 0);
            CHECK(n > 0);
            got += (size_t)n;
        }
        symmem_boot_hdr_t in;
        memcpy(&in, theirs, sizeof in);
        CHECK(symmem_boot_hdr_check(&in) == NULL && in.rank == 0);
        /* Then the part: whole (rank 0 may stop reading at the bad header and leave), in three pieces, or
         * the first 10 bytes. */
        static const size_t cuts[] = {0, 10, sizeof h + 2, sizeof msg};
        if (how == PART_BAD_MAGIC) CHECK(send(fd, msg, sizeof msg, MSG_NOSIGNAL) == (ssize_t)sizeof msg);
        for (int k = 0; how != PART_BAD_MAGIC && k < 3; k++) {
            if (how == PART_CUT_BY_EXIT && k == 1) break;
            CHECK(send(fd, msg + cuts[k], cuts[k + 1] - cuts[k], MSG_NOSIGNAL) == (ssize_t)(cuts[k + 1] - cuts[k]));
            if (how == PART_IN_PIECES) usleep(20000); /* so that rank 0 most likely reads each piece alone */
        }
        if (how == PART_CUT_BY_EXIT) _exit(0);
        if (how == PART_BAD_MAGIC) { /* stay until rank 0 has failed: leaving first would be another error */
            struct pollfd p = {fd, POLLIN, 0};
            CHECK(poll(&p, 1, 10000) == 1);
        }
    } else {
        uint32_t all[2] = {0, 0};
        const symmem_status_t st = symmem_comm_allgather(c, &mine, all, sizeof mine);
        if (how == PART_IN_PIECES) {
            CHECK_OK(st);
            CHECK(all[0] == mine && all[1] == 0xa0b0c0d1u);
        } else if (how == PART_BAD_MAGIC) {
            CHECK(st == SYMMEM_PEER_FAILURE);
            CHECK_ERR_HAS("garbage from rank 1 (not a symmem bootstrap message (bad magic))");
        } else {
            CHECK(st == SYMMEM_PEER_FAILURE);
            CHECK_ERR_HAS("rank 1 closed its connection");
        }
    }
    symmem_comm_destroy(c);
}

static void run_part(int how)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    pid_t r[2];
    for (int rank = 0; rank < 2; rank++)
        if ((r[rank] = fork()) == 0) {
            rank_sending_part(rank, 2, &id, how);
            _exit(0);
        }
    CHECK(wait_ok(r[0]) & wait_ok(r[1]));
}

/* A rank's message read after init: its header is checked as in the handshake (a wrong magic is named);
 * one that arrives in pieces is put together; one cut short by its sender's exit is the sender's end. */
static void messages_after_init_are_checked_whole(void)
{
    run_part(PART_BAD_MAGIC);
    run_part(PART_IN_PIECES);
    run_part(PART_CUT_BY_EXIT);
}

/* ---- blame ------------------------------------------------------------------------------------------------------ */

/* Rank 1 of 3 never starts. Rank 0 used to be stuck connecting to rank 1, so rank 2 reported "rank(s) 0, 1
 * never connected", blaming a healthy rank. Now rank 0 reaches rank 2 regardless and only rank 1 is named. */
static void rank_blame(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_options_t o = host_opts(1500);
    symmem_comm_t c;
    CHECK_ST(symmem_comm_init(nranks, rank, id, &o, &c), SYMMEM_TIMEOUT);
    CHECK(strstr(symmem_last_error(), "rank(s) 1 never"));
    CHECK(!strstr(symmem_last_error(), "0, 1") && !strstr(symmem_last_error(), "rank(s) 0"));
}

static void only_the_missing_rank_is_blamed(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    pid_t r0 = fork_rank(rank_blame, 0, 3, &id), r2 = fork_rank(rank_blame, 2, 3, &id);
    CHECK(wait_ok(r0) & wait_ok(r2));
}

/* After init a rank that gives up tells its peers why (ABORT), so that they name the rank at the root of it.
 * Survivors report (rank, status, error) through blame_pipe. */
static int blame_pipe[2];

typedef struct blame_report {
    int rank;
    symmem_status_t st;
    char err[1024];
} blame_report_t;

static void report_blame(int rank, symmem_status_t st)
{
    blame_report_t r = {rank, st, ""};
    snprintf(r.err, sizeof r.err, "%s", symmem_last_error());
    CHECK(write(blame_pipe[1], &r, sizeof r) == (ssize_t)sizeof r);
}

/* Survivor errors that blame `dead` and call no survivor "closed/reset its connection". Returns how many
 * reports blamed a live rank (each printed). */
static int wrong_blames(int nreports, int dead, int *named_dead)
{
    int wrong = 0;
    *named_dead = 0;
    for (int i = 0; i < nreports; i++) {
        blame_report_t r;
        CHECK(read(blame_pipe[0], &r, sizeof r) == (ssize_t)sizeof r);
        char closed[64], reset[64];
        snprintf(closed, sizeof closed, "rank %d closed", dead);
        snprintf(reset, sizeof reset, "rank %d reset", dead);
        *named_dead += strstr(r.err, closed) || strstr(r.err, reset);
        if (getenv("SYMMEM_TEST_BLAME_SHOW")) fprintf(stderr, "rank %d: %s\n", r.rank, r.err);
        for (int live = 0; live < SYMMEM_MAX_RANKS; live++) {
            if (live == dead) continue;
            snprintf(closed, sizeof closed, "rank %d closed", live);
            snprintf(reset, sizeof reset, "rank %d reset", live);
            if (strstr(r.err, closed) || strstr(r.err, reset)) {
                fprintf(stderr, "rank %d blames live rank %d: %s\n", r.rank, live, r.err);
                wrong++;
                break;
            }
        }
    }
    return wrong;
}

static int wait_readable(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 10000) == 1;
}

/* Rank 1 dies once ranks 2 and 3 have sent it their first message of symmem_alloc; rank 0 starts that call
 * only after rank 1 is gone, so its send to rank 1 fails and it leaves before sending to ranks 2 and 3, which
 * wait for it. They used to report "rank 0 closed its connection (it exited, crashed or destroyed its
 * communicator)", blaming a healthy rank; now rank 0 tells them why before it leaves. */
static void rank_dies_in_alloc(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    if (rank == 1) {
        CHECK(wait_readable(c->boot->fds[2]) && wait_readable(c->boot->fds[3]));
        raise(SIGKILL);
    }
    if (rank == 0) CHECK(wait_readable(c->boot->fds[1])); /* rank 1's end of the stream */
    symmem_buffer_t b;
    symmem_status_t st = symmem_alloc(c, 4096, &b);
    CHECK(st != SYMMEM_OK);
    report_blame(rank, st);
    symmem_comm_destroy(c);
}

static void survivors_blame_the_dead_rank(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    CHECK(pipe(blame_pipe) == 0);
    pid_t p[4];
    for (int r = 0; r < 4; r++) p[r] = fork_rank(rank_dies_in_alloc, r, 4, &id);
    int ok = 1;
    for (int r = 0; r < 4; r++) ok &= r == 1 ? (waitpid(p[r], NULL, 0) == p[r]) : wait_ok(p[r]);
    CHECK(ok);
    int named = 0;
    CHECK(wrong_blames(3, 1, &named) == 0);
    CHECK(named == 3);
}

/* The same under any timing: rank 1 of 4 is killed at a moment that varies from trial to trial while the
 * ranks allocate, write, check and free in a loop; no survivor may blame another survivor.
 * SYMMEM_TEST_BLAME_TRIALS sets the number of trials (default 6). */
static int kill_after_us;
static void *kill_later(void *p)
{
    (void)p;
    usleep((useconds_t)kill_after_us);
    raise(SIGKILL);
    return NULL;
}

static void rank_killed_at_random(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    pthread_t t;
    if (rank == 1) CHECK(pthread_create(&t, NULL, kill_later, NULL) == 0);
    symmem_status_t st = SYMMEM_OK;
    symmem_buffer_t b = NULL;
    for (int i = 0; i < 100000 && st == SYMMEM_OK; i++) {
        st = symmem_alloc(c, 4096u * (1 + i % 3), &b);
        if (st != SYMMEM_OK) break;
        ((volatile char *)symmem_buffer_ptr(b))[0] = (char)rank;
        st = symmem_comm_barrier(c);
        if (st == SYMMEM_OK) CHECK_OK(symmem_free(b));
    }
    CHECK(st != SYMMEM_OK);
    report_blame(rank, st); /* before symmem_free or destroy, which clear the last error */
    symmem_comm_destroy(c);
}

static void survivors_blame_the_dead_rank_at_any_moment(void)
{
    const char *env = getenv("SYMMEM_TEST_BLAME_TRIALS");
    int trials = env ? atoi(env) : 6, wrong = 0, named = 0, reports = 0;
    CHECK(pipe(blame_pipe) == 0);
    for (int t = 0; t < trials; t++) {
        symmem_unique_id_t id;
        CHECK_OK(symmem_get_unique_id(&id));
        kill_after_us = 2000 + 1500 * (t % 20); /* after init (a few ms), inside the loop */
        pid_t p[4];
        for (int r = 0; r < 4; r++) p[r] = fork_rank(rank_killed_at_random, r, 4, &id);
        int ok = 1;
        for (int r = 0; r < 4; r++) ok &= r == 1 ? (waitpid(p[r], NULL, 0) == p[r]) : wait_ok(p[r]);
        CHECK(ok);
        int n = 0;
        wrong += wrong_blames(3, 1, &n);
        named += n;
        reports += 3;
    }
    printf("  %d trials: %d survivor errors, %d name rank 1 as gone, %d blame a live rank\n", trials, reports, named,
           wrong);
    CHECK(wrong == 0 && named == reports);
}

/* 10,000 communicators made and destroyed (two ranks as threads): descriptors and mappings where they were. */
static int count_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    int n = 0;
    for (int ch; f && (ch = fgetc(f)) != EOF;) n += ch == '\n';
    if (f) fclose(f);
    return n;
}

static void init_destroy_cycles_leak_nothing(void)
{
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c[2];
    CHECK_OK(symmem_comm_init_all(2, NULL, &o, c)); /* warm up lazily created state */
    CHECK_OK(symmem_comm_destroy(c[0]));
    CHECK_OK(symmem_comm_destroy(c[1]));
    int fds0 = test_open_fds(), maps0 = count_maps();
    for (int i = 0; i < 10000; i++) {
        CHECK_OK(symmem_comm_init_all(2, NULL, &o, c));
        CHECK_OK(symmem_comm_destroy(c[1]));
        CHECK_OK(symmem_comm_destroy(c[0]));
    }
    CHECK(test_open_fds() == fds0);
    /* thread stacks may stay cached by the allocator; a leak per cycle would add 10,000 lines */
    CHECK(count_maps() <= maps0 + 16 + TEST_MAPS_SLACK);
}

/* ---- SYMMEM_SOCKET_DIR -------------------------------------------------------------------------------------- */

static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static void socket_dir_mode(void)
{
    char dir[] = "/tmp/symmem-sockdir-XXXXXX";
    CHECK(mkdtemp(dir));
    char sub[128];
    snprintf(sub, sizeof sub, "%s/socks", dir); /* created by the library, 0700 */
    setenv("SYMMEM_SOCKET_DIR", sub, 1);
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    struct sockaddr_un a;
    socklen_t alen;
    CHECK_OK(symmem_boot_sock_addr(boot_id(&id), 0, &a, &alen));
    CHECK(strncmp(a.sun_path, sub, strlen(sub)) == 0);
    pid_t p[3];
    for (int r = 0; r < 3; r++) p[r] = fork_rank(rank_job_20s, r, 3, &id);
    CHECK(wait_ok(p[0]) & wait_ok(p[1]) & wait_ok(p[2]));
    struct stat st;
    CHECK(lstat(sub, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
    CHECK(dir_entries(sub) == 0); /* the listeners removed their socket files */

    /* a directory others can enter is refused, and so is one of another user */
    CHECK(chmod(sub, 0755) == 0);
    symmem_options_t o = host_opts(500);
    symmem_comm_t c;
    CHECK_ST(symmem_comm_init(1, 0, &id, &o, &c), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("must be 0700");
    CHECK(chmod(sub, 0700) == 0);
    if (geteuid() == 0) {
        CHECK(chown(sub, NOBODY, NOBODY) == 0);
        CHECK_ST(symmem_comm_init(1, 0, &id, &o, &c), SYMMEM_INVALID_ARGUMENT);
        CHECK_ERR_HAS("is owned by uid 65534, not by this user");
    }
    rmdir(sub);
    rmdir(dir);
}

/* Every directory above SYMMEM_SOCKET_DIR is checked too, symbolic links resolved: one that another user
 * owns, or may write without the sticky bit, could have the socket directory swapped (only the last
 * component was checked). The error names the directory at fault. */
/* A 1-rank init with SYMMEM_SOCKET_DIR=sockdir, in a child (parameters are read once per process); its
 * status, and its error in err. */
static symmem_status_t init_one_in(const char *sockdir, char *err, size_t len)
{
    int p[2];
    CHECK(pipe(p) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("SYMMEM_SOCKET_DIR", sockdir, 1);
        symmem_unique_id_t id;
        CHECK_OK(symmem_get_unique_id(&id));
        symmem_options_t o = host_opts(2000);
        symmem_comm_t c;
        symmem_status_t st = symmem_comm_init(1, 0, &id, &o, &c);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", symmem_last_error());
        if (st == SYMMEM_OK) CHECK_OK(symmem_comm_destroy(c));
        CHECK(write(p[1], &st, sizeof st) == sizeof st && write(p[1], msg, sizeof msg) == sizeof msg);
        _exit(0);
    }
    close(p[1]);
    symmem_status_t st;
    char msg[1024];
    CHECK(read(p[0], &st, sizeof st) == sizeof st && read(p[0], msg, sizeof msg) == sizeof msg);
    close(p[0]);
    CHECK(wait_ok(pid));
    snprintf(err, len, "%s", msg);
    return st;
}

static void socket_dir_parents_are_checked(void)
{
    char top[] = "/tmp/symmem-parents-XXXXXX", open_dir[128], real[128], link[128], link_open[128], path[192];
    CHECK(mkdtemp(top));
    snprintf(open_dir, sizeof open_dir, "%s/open", top);
    snprintf(real, sizeof real, "%s/real", top);
    snprintf(link, sizeof link, "%s/link", top);
    snprintf(link_open, sizeof link_open, "%s/link-open", top);
    CHECK(mkdir(open_dir, 0700) == 0 && chmod(open_dir, 0777) == 0 && mkdir(real, 0700) == 0);
    CHECK(symlink(real, link) == 0 && symlink(open_dir, link_open) == 0);

    char err[1024];
    snprintf(path, sizeof path, "%s/socks", open_dir); /* a parent anyone may write */
    CHECK(init_one_in(path, err, sizeof err) == SYMMEM_INVALID_ARGUMENT);
    CHECK_CONTAINS(err, open_dir);
    CHECK_CONTAINS(err, "has mode 0777");
    snprintf(path, sizeof path, "%s/socks", link_open); /* the same through a link: the real one is named */
    CHECK(init_one_in(path, err, sizeof err) == SYMMEM_INVALID_ARGUMENT);
    CHECK_CONTAINS(err, "the directory /tmp/symmem-parents-");
    CHECK_CONTAINS(err, "/open above it has mode 0777");
    CHECK(chmod(open_dir, 01777) == 0); /* sticky, as /tmp: nobody may move what another user owns */
    snprintf(path, sizeof path, "%s/socks", open_dir);
    CHECK(init_one_in(path, err, sizeof err) == SYMMEM_OK);
    rmdir(path);
    snprintf(path, sizeof path, "%s/socks/", link); /* a link to a safe directory, and a trailing slash */
    CHECK(init_one_in(path, err, sizeof err) == SYMMEM_OK);
    snprintf(path, sizeof path, "%s/socks", real);
    CHECK(rmdir(path) == 0); /* made where the link points */
    if (geteuid() == 0) {
        CHECK(chmod(open_dir, 0755) == 0 && chown(open_dir, NOBODY, NOBODY) == 0);
        snprintf(path, sizeof path, "%s/socks", open_dir);
        CHECK(init_one_in(path, err, sizeof err) == SYMMEM_INVALID_ARGUMENT);
        CHECK_CONTAINS(err, "is owned by uid 65534, neither root nor this user");
        CHECK_CONTAINS(err, open_dir);
    } else {
        printf("  (a parent of another owner needs root to be made: not checked)\n");
    }
    unlink(link);
    unlink(link_open);
    rmdir(real);
    rmdir(open_dir);
    rmdir(top);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"names_are_secret_derived", names_are_secret_derived, 10},
        {"mac_and_names_follow_the_layout", mac_and_names_follow_the_layout, 10},
        {"impostor_of_another_user_gets_nothing", impostor_of_another_user_gets_nothing, 30},
        {"impostor_without_the_secret_is_found_out", impostor_without_the_secret_is_found_out, 30},
        {"full_backlog_keeps_the_deadline", full_backlog_keeps_the_deadline, 30},
        {"a_dropped_handshake_is_called_again", a_dropped_handshake_is_called_again, 30},
        {"idle_connections_cost_nothing", idle_connections_cost_nothing, 60},
        {"junk_is_rejected_quietly", junk_is_rejected_quietly, 60},
        {"descriptor_flood_leaks_nothing", descriptor_flood_leaks_nothing, 60},
        {"fd_exhaustion_is_named", fd_exhaustion_is_named, 30},
        {"only_the_missing_rank_is_blamed", only_the_missing_rank_is_blamed, 30},
        {"survivors_blame_the_dead_rank", survivors_blame_the_dead_rank, 30},
        {"survivors_blame_the_dead_rank_at_any_moment", survivors_blame_the_dead_rank_at_any_moment, 120},
        {"cut_short_header_is_named", cut_short_header_is_named, 10},
        {"header_checks_name_the_field", header_checks_name_the_field, 10},
        {"stray_descriptor_is_named", stray_descriptor_is_named, 30},
        {"extra_descriptor_is_named", extra_descriptor_is_named, 30},
        {"a_peer_that_gave_up_is_named_on_send", a_peer_that_gave_up_is_named_on_send, 30},
        {"messages_after_init_are_checked_whole", messages_after_init_are_checked_whole, 60},
        {"socket_dir_mode", socket_dir_mode, 60},
        {"socket_dir_parents_are_checked", socket_dir_parents_are_checked, 30},
        {"init_destroy_cycles_leak_nothing", init_destroy_cycles_leak_nothing, 240},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
