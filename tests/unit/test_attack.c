/* Another local user against a running job (needs root to become that user; a visible skip otherwise).
 *
 * another_user_gets_nothing: attackers drop to uid 65534 and, while a 3-rank host-backend job starts (ranks
 * 50 ms apart, so that sockets sit waiting) and runs: watch /proc/net/unix for every new symmem socket; squat
 * names derived from everything in the unique id but the secret (the old "symmem-<tag>-<rank>" names) and variants of every
 * name they see; probe every socket they see, again and again, with junk, oversized lengths, forged HELLOs
 * (rank -1002, valid-looking ranks), messages carrying 200 descriptors; and hold idle connections. The job
 * must complete and verify its memory, its ranks must end with the descriptors they started with, and the
 * attackers must receive no byte (so no byte of the secret) and no descriptor. Prints what was tried. It
 * runs in a network namespace of its own: the attackers probe every socket they see, and outside one they
 * would also probe other jobs' and other tests' sockets on this machine, some of which expect no stranger
 * (test_bootstrap's stand-in ranks take the first connection that comes).
 *
 * a_flood_keeps_the_timeout: 16 processes of uid 65534 connect to every symmem socket they see, as fast as
 * they can, while 2-rank and 4-rank jobs with SYMMEM_TIMEOUT_MS=3000 start (and one whose peer never comes):
 * every rank must return from init within the timeout plus 2 s, and do its work when its peers are there.
 * It runs in a network namespace of its own (the flood must not reach other jobs' sockets; a visible skip
 * where one cannot be made), bounded in time and in connections. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sched.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "base/hash.h"
#include "boot/bootmsg.h"
#include "boot/bootstrap.h"
#include "boot/comm_state.h"
#include "symmem/symmem.h"
#include "test_util.h"

#define NOBODY 65534
#define NRANKS 3
#define MAX_NAMES 256
#define MAX_HELD 48

typedef struct report {
    int names_seen;          /* distinct symmem socket names in /proc/net/unix */
    int squats_tried, squats_bound;
    int connects_tried, connects_ok; /* connects_ok: accepted by a listener of the job's uid */
    int own_uid_ignored;     /* listeners of the attackers' own uid (their own squats): not counted */
    int junk, oversized, forged_hellos, fd_messages, fds_offered;
    int held;                /* idle connections held open */
    long bytes_received;
    int fds_received;
    int secret_bytes_seen;   /* 4-byte windows of the secret found in anything received or seen */
} report_t;

/* Sets of names (64-bit hashes, open addressing), shared by the attackers and read by the test afterwards:
 * the names they bound themselves, and the names they saw that none of them bound, i.e. the job's. Large
 * enough for thousands of sockets coming and going. */
#define SET_SLOTS 65536
typedef struct name_set {
    _Atomic uint64_t slot[SET_SLOTS];
} name_set_t;
typedef struct shared {
    name_set_t bound, seen;
} shared_t;
static shared_t *shared;

static uint64_t name_hash(const char *s)
{
    return symmem_fnv64(SYMMEM_FNV64_INIT, s, strlen(s)) | 1; /* never 0, the empty slot */
}

static int set_has(name_set_t *set, const char *name)
{
    uint64_t h = name_hash(name);
    for (uint64_t i = h % SET_SLOTS, k = 0; k < SET_SLOTS; i = (i + 1) % SET_SLOTS, k++) {
        uint64_t v = atomic_load(&set->slot[i]);
        if (v == h) return 1;
        if (v == 0) return 0;
    }
    return 0;
}

/* Returns 1 if the name was not in the set. */
static int set_add(name_set_t *set, const char *name)
{
    uint64_t h = name_hash(name);
    for (uint64_t i = h % SET_SLOTS, k = 0; k < SET_SLOTS; i = (i + 1) % SET_SLOTS, k++) {
        uint64_t v = 0;
        if (atomic_compare_exchange_strong(&set->slot[i], &v, h)) return 1;
        if (v == h) return 0;
    }
    return 0; /* full: treated as known */
}

typedef struct attacker {
    symmem_boot_id_t pub; /* the id with its secret wiped: what an attacker may know at best */
    unsigned char secret[SYMMEM_BOOT_SECRET_BYTES]; /* only to search what was received for it */
    char names[MAX_NAMES][108]; /* the most recent names seen (a ring), probed again and again */
    int nnames, next;
    name_set_t *mine;            /* every name this attacker has seen */
    int held[MAX_HELD], nheld;
    int devnull;
    report_t r;
} attacker_t;

static int seen_secret(const attacker_t *a, const void *buf, size_t n)
{
    for (size_t i = 0; i + 4 <= sizeof a->secret; i++)
        if (n >= 4 && memmem(buf, n, a->secret + i, 4)) return 1;
    return 0;
}

static int abstract_addr(const char *name, struct sockaddr_un *addr, socklen_t *len)
{
    size_t n = strlen(name);
    if (n + 1 > sizeof addr->sun_path) return -1;
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    memcpy(addr->sun_path + 1, name, n);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    return 0;
}

/* Bind a name an attacker derived (registered first, so that no attacker mistakes it for the job's). */
static void squat(attacker_t *a, const char *name, int derived)
{
    struct sockaddr_un addr;
    socklen_t len;
    if (a->r.squats_tried >= 400 || abstract_addr(name, &addr, &len) != 0) return; /* keep descriptors for probing */
    if (derived) set_add(&shared->bound, name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a->r.squats_tried++;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&addr, len) == 0 && listen(fd, 64) == 0) {
        a->r.squats_bound++; /* kept open: the name stays taken */
        return;
    }
    if (fd >= 0) close(fd);
}

/* Read whatever the other side sends within a short while; count bytes and descriptors. */
static void drain(attacker_t *a, int fd, int ms)
{
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, ms) != 1) return;
        unsigned char buf[4096];
        union {
            struct cmsghdr align;
            char b[CMSG_SPACE(sizeof(int) * 256)];
        } ctrl;
        struct iovec iov = {buf, sizeof buf};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.b, .msg_controllen = sizeof ctrl.b};
        ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT);
        if (n <= 0) return;
        a->r.bytes_received += n;
        a->r.secret_bytes_seen += seen_secret(a, buf, (size_t)n);
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
            if (c->cmsg_type == SCM_RIGHTS) {
                int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
                a->r.fds_received += k;
                for (int i = 0; i < k; i++) {
                    int got;
                    memcpy(&got, CMSG_DATA(c) + (size_t)i * sizeof(int), sizeof got);
                    close(got);
                }
            }
    }
}

static void send_with_fds(attacker_t *a, int fd, const void *data, size_t len, int nfds)
{
    int fds[200];
    for (int i = 0; i < nfds; i++) fds[i] = a->devnull;
    union {
        struct cmsghdr align;
        char b[CMSG_SPACE(sizeof fds)];
    } ctrl;
    memset(&ctrl, 0, sizeof ctrl);
    struct iovec iov = {(void *)data, len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.b,
                       .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    if (sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) > 0) a->r.fd_messages++, a->r.fds_offered += nfds;
}

/* One probe of one socket: connect, send one kind of trouble, see what comes back. */
static void probe(attacker_t *a, const char *name, int kind)
{
    struct sockaddr_un addr;
    socklen_t len;
    if (abstract_addr(name, &addr, &len) != 0) return;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    a->r.connects_tried++;
    if (connect(fd, (struct sockaddr *)&addr, len) != 0) {
        close(fd);
        return;
    }
    /* Only the job's listeners count: a socket of this uid (a squat of the attackers' own) may well talk
     * to us. */
    struct ucred cred;
    socklen_t clen = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.uid == getuid()) {
        a->r.own_uid_ignored++;
        close(fd);
        return;
    }
    a->r.connects_ok++;
    symmem_boot_hdr_t h;
    unsigned char buf[sizeof h + 64];
    memset(buf, 0x5a, sizeof buf);
    switch (kind % 6) {
    case 0:
        if (send(fd, buf, sizeof buf, MSG_NOSIGNAL) > 0) a->r.junk++;
        break;
    case 1:
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, 0, NRANKS, 1, 0xffffffffu);
        memcpy(buf, &h, sizeof h);
        if (send(fd, buf, sizeof h, MSG_NOSIGNAL) > 0) a->r.oversized++;
        break;
    case 2:
    case 3:
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_HELLO, kind == 2 ? 0 : 1, NRANKS, 0, SYMMEM_BOOT_NONCE_BYTES);
        if (kind == 2) h.rank = -1002;
        memcpy(buf, &h, sizeof h);
        if (send(fd, buf, sizeof h + SYMMEM_BOOT_NONCE_BYTES, MSG_NOSIGNAL) > 0) a->r.forged_hellos++;
        break;
    case 4:
        symmem_boot_hdr_make(&h, SYMMEM_BOOT_HELLO, 0, NRANKS, 0, SYMMEM_BOOT_NONCE_BYTES);
        memcpy(buf, &h, sizeof h);
        send_with_fds(a, fd, buf, sizeof h + SYMMEM_BOOT_NONCE_BYTES, 200);
        break;
    case 5: /* say nothing, keep it */
        if (a->nheld < MAX_HELD) {
            a->held[a->nheld++] = fd;
            a->r.held++;
            return;
        }
        break;
    }
    drain(a, fd, 5);
    close(fd);
}

/* New symmem names in /proc/net/unix; each new one is squatted in variants, every one is probed. */
static void scan(attacker_t *a, int round)
{
    FILE *f = fopen("/proc/net/unix", "r");
    if (!f) return;
    int fresh[64], nfresh = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *at = strstr(line, "@symmem");
        if (!at) continue;
        at[strcspn(at, " \n")] = '\0';
        const char *name = at + 1;
        if (strlen(name) >= sizeof a->names[0]) continue;
        a->r.secret_bytes_seen += seen_secret(a, name, strlen(name));
        if (set_has(&shared->bound, name)) continue; /* an attacker's own */
        if (set_add(a->mine, name)) {
            set_add(&shared->seen, name);
            memcpy(a->names[a->next], name, strlen(name) + 1);
            a->next = (a->next + 1) % MAX_NAMES;
            if (a->nnames < MAX_NAMES) a->nnames++;
            fresh[nfresh++ % 64] = (a->next + MAX_NAMES - 1) % MAX_NAMES;
            a->r.names_seen++;
            /* siblings of a seen name, as the old scheme would have them: change its last characters */
            char v[108];
            size_t n = strlen(name);
            memcpy(v, name, n + 1);
            for (const char *d = "0123456789abcdef"; *d && n; d++) {
                v[n - 1] = *d;
                if (strcmp(v, name) != 0) squat(a, v, 1);
            }
            squat(a, name, 0); /* the seen name itself: taken, so refused */
        }
    }
    fclose(f);
    /* The newest names first (a rank's socket may live only for a moment), then a few older ones in turn,
     * so a crowded namespace cannot slow the watching down. */
    for (int k = 0; k < nfresh && k < 64; k++) probe(a, a->names[fresh[k]], round + k);
    for (int k = 0; k < 4 && a->nnames; k++) {
        int i = (round * 4 + k) % a->nnames;
        probe(a, a->names[i], round + i);
    }
}

static void attack(const symmem_unique_id_t *id, int stop_fd, int report_fd)
{
    attacker_t *a = calloc(1, sizeof *a);
    a->mine = calloc(1, sizeof *a->mine);
    memcpy(&a->pub, id->bytes, sizeof a->pub);
    memcpy(a->secret, a->pub.secret, sizeof a->secret);
    memset(a->pub.secret, 0, sizeof a->pub.secret);
    a->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 || setresuid(NOBODY, NOBODY, NOBODY) != 0)
        _exit(2);
    /* Names an attacker can derive from the public part of the id: the old scheme's, for every rank. */
    char tag[2 * SYMMEM_BOOT_TAG_BYTES + 1];
    for (int i = 0; i < SYMMEM_BOOT_TAG_BYTES; i++) sprintf(tag + 2 * i, "%02x", a->pub.tag[i]);
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++) {
        char name[108];
        snprintf(name, sizeof name, "symmem-%s-%d", tag, r);
        squat(a, name, 1);
    }
    for (int round = 0;; round++) {
        struct pollfd p = {stop_fd, POLLIN, 0};
        if (poll(&p, 1, 1) == 1) break; /* EOF: the job is over */
        scan(a, round);
        for (int i = 0; i < a->nheld; i++) drain(a, a->held[i], 0);
    }
    for (int i = 0; i < a->nheld; i++) drain(a, a->held[i], 0);
    ssize_t w = write(report_fd, &a->r, sizeof a->r);
    (void)w;
    _exit(0);
}

/* ---- the job ------------------------------------------------------------------------------------------------ */

static void rank_main(int rank, const symmem_unique_id_t *id, int result_fd)
{
    int fds0 = test_open_fds();
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_HOST;
    o.timeout_ms = 30000;
    symmem_comm_t c;
    CHECK_OK(symmem_comm_init(NRANKS, rank, id, &o, &c));
    for (int round = 0; round < 3; round++) {
        symmem_buffer_t b;
        CHECK_OK(symmem_alloc(c, 65536, &b));
        uint32_t *mine = symmem_buffer_ptr(b);
        for (int i = 0; i < 16384; i++) mine[i] = (uint32_t)(rank * 1000003 + i + round);
        CHECK_OK(symmem_comm_barrier(c));
        for (int r = 0; r < NRANKS; r++) {
            const uint32_t *peer = symmem_buffer_peer_ptr(b, r);
            for (int i = 0; i < 16384; i += 97) CHECK(peer[i] == (uint32_t)(r * 1000003 + i + round));
        }
        CHECK_OK(symmem_comm_barrier(c));
        CHECK_OK(symmem_free(b));
    }
    CHECK_OK(symmem_comm_destroy(c));
    int leaked = test_open_fds() - fds0;
    ssize_t w = write(result_fd, &leaked, sizeof leaked);
    (void)w;
}

static void another_user_gets_nothing(void)
{
    if (geteuid() != 0) {
        printf("  skipped: needs root to run the attackers as uid %d (CI runs as root)\n", NOBODY);
        exit(TEST_SKIP_CODE);
    }
    if (unshare(CLONE_NEWNET) != 0) {
        printf("  skipped: cannot make a network namespace of its own (unshare(CLONE_NEWNET): %s), and the "
               "attackers must not reach other jobs' sockets\n",
               strerror(errno));
        exit(TEST_SKIP_CODE);
    }
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(shared != MAP_FAILED);
    enum { ATTACKERS = 2 };
    int stop[2], rep[2], res[2];
    CHECK(pipe(stop) == 0 && pipe(rep) == 0 && pipe(res) == 0);
    pid_t att[ATTACKERS];
    for (int i = 0; i < ATTACKERS; i++)
        if ((att[i] = fork()) == 0) {
            close(stop[1]);
            attack(&id, stop[0], rep[1]);
        }
    close(stop[0]);
    usleep(100000); /* the attackers are watching before the first rank starts */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    static const int order[NRANKS] = {2, 0, 1};
    pid_t ranks[NRANKS];
    for (int i = 0; i < NRANKS; i++) {
        if ((ranks[i] = fork()) == 0) {
            close(stop[1]);
            rank_main(order[i], &id, res[1]);
            _exit(0);
        }
        usleep(100000);
    }
    int ok = 0, leaked_total = 0;
    for (int i = 0; i < NRANKS; i++) {
        int status;
        waitpid(ranks[i], &status, 0);
        ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int i = 0; i < ok; i++) {
        int leaked = 0;
        if (read(res[0], &leaked, sizeof leaked) == sizeof leaked) leaked_total += leaked != 0;
    }
    close(stop[1]); /* the attackers stop and report */
    report_t sum;
    memset(&sum, 0, sizeof sum);
    for (int i = 0; i < ATTACKERS; i++) {
        report_t r;
        CHECK(read(rep[0], &r, sizeof r) == sizeof r);
        sum.names_seen = r.names_seen > sum.names_seen ? r.names_seen : sum.names_seen;
        sum.squats_tried += r.squats_tried, sum.squats_bound += r.squats_bound;
        sum.connects_tried += r.connects_tried, sum.connects_ok += r.connects_ok;
        sum.own_uid_ignored += r.own_uid_ignored;
        sum.junk += r.junk, sum.oversized += r.oversized, sum.forged_hellos += r.forged_hellos;
        sum.fd_messages += r.fd_messages, sum.fds_offered += r.fds_offered, sum.held += r.held;
        sum.bytes_received += r.bytes_received, sum.fds_received += r.fds_received;
        sum.secret_bytes_seen += r.secret_bytes_seen;
    }
    for (int i = 0; i < ATTACKERS; i++) waitpid(att[i], NULL, 0);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("  attack by uid %d (%d processes) on a %d-rank job of uid %d, ranks started 100 ms apart:\n", NOBODY,
           ATTACKERS, NRANKS, (int)geteuid());
    int job_names_seen = 0;
    for (int r = 0; r < NRANKS; r++) {
        struct sockaddr_un addr;
        socklen_t len;
        CHECK_OK(symmem_boot_sock_addr((const symmem_boot_id_t *)(const void *)id.bytes, r, &addr, &len));
        job_names_seen += set_has(&shared->seen, addr.sun_path + 1);
    }
    printf("    watched /proc/net/unix: saw %d of the job's %d socket names as they appeared\n", job_names_seen,
           NRANKS);
    printf("    squatted: %d names tried (the old tag-derived names of every rank, variants of each name seen, the "
           "names seen), %d bound%s\n",
           sum.squats_tried, sum.squats_bound,
           ok == NRANKS ? ", none the job's (its names come from the secret)" : "");
    printf("    probed: %d connects, %d to the job's listeners; sent %d junk, %d oversized lengths, %d forged HELLOs, "
           "%d messages offering %d descriptors; held %d idle connections\n",
           sum.connects_tried, sum.connects_ok, sum.junk, sum.oversized, sum.forged_hellos, sum.fd_messages,
           sum.fds_offered, sum.held);
    printf("    got: %ld bytes, %d descriptors, %d windows of the secret\n", sum.bytes_received, sum.fds_received,
           sum.secret_bytes_seen);
    printf("    job: %d of %d ranks completed init, 3 x (alloc, write, verify peers, free), destroy in %.2f s; ranks "
           "with leaked descriptors: %d\n",
           ok, NRANKS, s, leaked_total);
    CHECK(ok == NRANKS && leaked_total == 0);
    CHECK(sum.bytes_received == 0 && sum.fds_received == 0 && sum.secret_bytes_seen == 0);
    /* The attack did reach the job: the last rank's listener may live only for a moment (its peers are all
     * waiting for it), so at least one rank's socket, not necessarily every one. */
    CHECK(job_names_seen >= 1 && sum.connects_ok > 0);
}

/* ---- a connection flood ------------------------------------------------------------------------------------ */

#define FLOODERS 16
#define FLOOD_TIMEOUT_MS 3000
#define FLOOD_SLACK_MS 2000                 /* init returns within the timeout plus this */
#define FLOOD_MAX_S 300                     /* a flooder stops by itself after this long ... */
#define FLOOD_MAX_CONNECTS (200L * 1000 * 1000) /* ... or this many connection attempts */

typedef struct flood_report {
    long connects, accepted, bytes, fds;
} flood_report_t;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The symmem names now in /proc/net/unix (this network namespace's: the test's own). */
static int scan_names(char names[][108], int max)
{
    FILE *f = fopen("/proc/net/unix", "r");
    if (!f) return 0;
    int n = 0;
    char line[512];
    while (n < max && fgets(line, sizeof line, f)) {
        char *at = strstr(line, "@symmem-");
        if (!at) continue;
        at[strcspn(at, " \n")] = '\0';
        if (strlen(at + 1) < 108) memcpy(names[n++], at + 1, strlen(at + 1) + 1);
    }
    fclose(f);
    return n;
}

/* Connect to every name seen, round and round, closing each connection at once after a look for anything
 * sent to it; rescans often, so each new listener is flooded within a millisecond or so of appearing. */
static void flooder(int stop_fd, int report_fd)
{
    if (setgroups(0, NULL) != 0 || setresgid(NOBODY, NOBODY, NOBODY) != 0 || setresuid(NOBODY, NOBODY, NOBODY) != 0)
        _exit(2);
    static char names[64][108];
    int n = 0;
    flood_report_t r = {0, 0, 0, 0};
    const int64_t end = now_ms() + FLOOD_MAX_S * 1000L;
    for (long i = 0; r.connects < FLOOD_MAX_CONNECTS; i++) {
        if (i % 128 == 0) {
            struct pollfd p = {stop_fd, POLLIN, 0};
            if (poll(&p, 1, 0) == 1 || now_ms() > end) break; /* EOF: the test is over */
            n = scan_names(names, 64);
        }
        if (n == 0) {
            usleep(200);
            continue;
        }
        struct sockaddr_un addr;
        socklen_t len;
        if (abstract_addr(names[i % n], &addr, &len) != 0) continue;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        r.connects++;
        if (connect(fd, (struct sockaddr *)&addr, len) == 0) {
            r.accepted++;
            unsigned char buf[64];
            union {
                struct cmsghdr align;
                char b[CMSG_SPACE(sizeof(int) * 8)];
            } ctrl;
            struct iovec iov = {buf, sizeof buf};
            struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl.b,
                               .msg_controllen = sizeof ctrl.b};
            ssize_t got = recvmsg(fd, &m, MSG_DONTWAIT);
            if (got > 0) r.bytes += got;
            for (struct cmsghdr *c = got >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
                if (c->cmsg_type == SCM_RIGHTS) r.fds += (long)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        }
        close(fd);
    }
    ssize_t w = write(report_fd, &r, sizeof r);
    (void)w;
    _exit(0);
}

typedef struct rank_report {
    int nranks, rank;
    symmem_status_t st;
    int64_t init_ms;
    int work_ok;
    char err[512];
} rank_report_t;

/* One rank of a job under the flood: init with the 3 s timeout (timed), then, if it came up, its work. */
static void flooded_rank(int rank, int nranks, const symmem_unique_id_t *id, int report_fd)
{
    rank_report_t r = {nranks, rank, SYMMEM_OK, 0, 0, ""};
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_HOST;
    o.timeout_ms = FLOOD_TIMEOUT_MS;
    symmem_comm_t c;
    const int64_t t0 = now_ms();
    r.st = symmem_comm_init(nranks, rank, id, &o, &c);
    r.init_ms = now_ms() - t0;
    if (r.st != SYMMEM_OK) snprintf(r.err, sizeof r.err, "%s", symmem_last_error());
    if (r.st == SYMMEM_OK) {
        symmem_buffer_t b;
        int ok = symmem_alloc(c, 65536, &b) == SYMMEM_OK;
        if (ok) {
            uint32_t *mine = symmem_buffer_ptr(b);
            for (int i = 0; i < 16384; i++) mine[i] = (uint32_t)(rank * 1000003 + i);
            ok = symmem_comm_barrier(c) == SYMMEM_OK;
            for (int p = 0; p < nranks && ok; p++) {
                const uint32_t *peer = symmem_buffer_peer_ptr(b, p);
                for (int i = 0; i < 16384; i += 61) ok &= peer[i] == (uint32_t)(p * 1000003 + i);
            }
            ok &= symmem_comm_barrier(c) == SYMMEM_OK && symmem_free(b) == SYMMEM_OK;
        }
        if (!ok) snprintf(r.err, sizeof r.err, "%s", symmem_last_error());
        r.work_ok = symmem_comm_destroy(c) == SYMMEM_OK && ok;
    }
    ssize_t w = write(report_fd, &r, sizeof r);
    (void)w;
    _exit(0);
}

/* A job of `nranks` of which `started` ranks start: the highest first, whose listener then sits alone in the
 * flood for 300 ms, then ranks 0, 1, ... 50 ms apart. Collects one report per started rank. */
static void flooded_job(int nranks, int started, rank_report_t *out)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    int rep[2];
    CHECK(pipe(rep) == 0);
    pid_t pids[SYMMEM_MAX_RANKS];
    for (int i = 0; i < started; i++) {
        int rank = i == 0 ? nranks - 1 : i - 1;
        if ((pids[i] = fork()) == 0) {
            close(rep[0]);
            flooded_rank(rank, nranks, &id, rep[1]);
        }
        usleep(i == 0 ? 300000 : 50000);
    }
    close(rep[1]);
    for (int i = 0; i < started; i++) {
        CHECK(read(rep[0], &out[i], sizeof out[i]) == (ssize_t)sizeof out[i]);
        int status;
        waitpid(pids[i], &status, 0);
    }
    close(rep[0]);
}

static void a_flood_keeps_the_timeout(void)
{
    if (geteuid() != 0) {
        printf("  skipped: needs root to run the flood as uid %d (CI runs as root)\n", NOBODY);
        exit(TEST_SKIP_CODE);
    }
    if (unshare(CLONE_NEWNET) != 0) {
        printf("  skipped: cannot make a network namespace of its own (unshare(CLONE_NEWNET): %s), and the flood "
               "must not reach other jobs' sockets\n",
               strerror(errno));
        exit(TEST_SKIP_CODE);
    }
    const char *env = getenv("SYMMEM_TEST_FLOOD_TRIALS");
    const int trials = env && atoi(env) > 0 ? atoi(env) : 2;
    int stop[2], rep[2];
    CHECK(pipe(stop) == 0 && pipe(rep) == 0);
    pid_t fl[FLOODERS];
    for (int i = 0; i < FLOODERS; i++)
        if ((fl[i] = fork()) == 0) {
            close(stop[1]);
            close(rep[0]);
            flooder(stop[0], rep[1]);
        }
    close(stop[0]);
    close(rep[1]);
    int jobs_ok = 0, jobs = 0, late = 0;
    int64_t worst_ms[2] = {0, 0};
    static const int sizes[2] = {2, 4};
    for (int t = 0; t < trials; t++)
        for (int k = 0; k < 2; k++) {
            rank_report_t r[SYMMEM_MAX_RANKS];
            flooded_job(sizes[k], sizes[k], r);
            int ok = 1;
            for (int i = 0; i < sizes[k]; i++) {
                if (r[i].init_ms > worst_ms[k]) worst_ms[k] = r[i].init_ms;
                if (r[i].init_ms > FLOOD_TIMEOUT_MS + FLOOD_SLACK_MS) late++;
                if (r[i].st != SYMMEM_OK || !r[i].work_ok) {
                    ok = 0;
                    fprintf(stderr, "  trial %d, %d ranks: rank %d (init %lld ms) %s: %s\n", t, sizes[k], r[i].rank,
                            (long long)r[i].init_ms, r[i].st != SYMMEM_OK ? symmem_status_name(r[i].st) : "work failed",
                            r[i].err);
                }
            }
            jobs_ok += ok;
            jobs++;
        }
    /* A peer that never comes: rank 1 of 2 alone in the flood gives up in time and names rank 0. */
    rank_report_t alone;
    flooded_job(2, 1, &alone);
    close(stop[1]); /* the flooders stop and report */
    flood_report_t sum = {0, 0, 0, 0};
    for (int i = 0; i < FLOODERS; i++) {
        flood_report_t r;
        CHECK(read(rep[0], &r, sizeof r) == (ssize_t)sizeof r);
        sum.connects += r.connects, sum.accepted += r.accepted, sum.bytes += r.bytes, sum.fds += r.fds;
        waitpid(fl[i], NULL, 0);
    }
    printf("  flood by uid %d (%d processes): %ld connects, %ld into a job's listen queue; got %ld bytes, %ld "
           "descriptors\n",
           NOBODY, FLOODERS, sum.connects, sum.accepted, sum.bytes, sum.fds);
    printf("  %d of %d jobs (%d trials of a 2-rank and a 4-rank job, SYMMEM_TIMEOUT_MS=%d) came up and did their "
           "work; slowest init: %lld ms (2 ranks), %lld ms (4 ranks); ranks past the timeout + %d ms: %d\n",
           jobs_ok, jobs, trials, FLOOD_TIMEOUT_MS, (long long)worst_ms[0], (long long)worst_ms[1], FLOOD_SLACK_MS,
           late);
    printf("  rank 1 of 2 without rank 0: %s after %lld ms: %s\n", symmem_status_name(alone.st),
           (long long)alone.init_ms, alone.err);
    CHECK(sum.bytes == 0 && sum.fds == 0);
    CHECK(sum.accepted > 0); /* the flood did reach the jobs */
    CHECK(late == 0 && jobs_ok == jobs);
    CHECK(alone.st == SYMMEM_TIMEOUT && alone.init_ms <= FLOOD_TIMEOUT_MS + FLOOD_SLACK_MS);
    CHECK(strstr(alone.err, "rank(s) 0 never connected"));
}

int main(void)
{
    static const test_case_t cases[] = {
        {"another_user_gets_nothing", another_user_gets_nothing, 120},
        {"a_flood_keeps_the_timeout", a_flood_keeps_the_timeout, 400},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
