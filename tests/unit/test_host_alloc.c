/* Bootstrap and symmetric allocation across real processes, with the host (memfd) backend: the same
 * sockets, descriptor passing, mapping tables and error paths the CUDA backend uses, without a GPU. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>

#include "alloc/alloc.h"
#include "boot/bootstrap.h"
#include "boot/comm_state.h"
#include "harness.h"
#include "symmem/symmem.h"
#include "test_util.h"

/* ---- launching ranks as processes ------------------------------------------------------------------- */

typedef void (*rank_fn)(int rank, int nranks, const symmem_unique_id_t *id);

static symmem_options_t host_opts(int timeout_ms)
{
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_HOST;
    o.timeout_ms = timeout_ms;
    return o;
}

typedef struct ranks_run {
    const int *ranks;
    int nranks;
    rank_fn fn;
    const symmem_unique_id_t *id;
} ranks_run_t;

static void run_rank(int proc, void *arg)
{
    const ranks_run_t *a = arg;
    a->fn(a->ranks[proc], a->nranks, a->id);
}

/* One process per entry of ranks[] (a rank number each, repeats allowed) running fn, through the harness's
 * launcher; 0 when every process exited 0. */
static int run_ranks(int nranks, const int *ranks, int nprocs, rank_fn fn, const symmem_unique_id_t *id)
{
    ranks_run_t a = {ranks, nranks, fn, id};
    return cc_spawn(nprocs, run_rank, &a, 0);
}

static int spawn(int nranks, rank_fn fn)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    int ranks[32];
    for (int r = 0; r < nranks; r++) ranks[r] = r;
    return run_ranks(nranks, ranks, nranks, fn, &id);
}

static symmem_comm_t join(int rank, int nranks, const symmem_unique_id_t *id, int timeout_ms)
{
    symmem_options_t o = host_opts(timeout_ms);
    symmem_comm_t c = NULL;
    CHECK_OK(symmem_comm_init(nranks, rank, id, &o, &c));
    CHECK(symmem_comm_rank(c) == rank && symmem_comm_size(c) == nranks);
    CHECK(symmem_comm_backend(c) == SYMMEM_BACKEND_HOST && symmem_comm_device(c) == -1);
    return c;
}

static uint32_t pattern(int rank, size_t i, int round) { return (uint32_t)(rank * 0x01000193u) ^ (uint32_t)i ^ (uint32_t)round << 24; }

/* Every rank writes its pattern; after a barrier, every rank checks every peer's buffer through its own
 * mapping, and that the layout is symmetric (rank r at base + r * stride). */
static void write_and_verify(symmem_comm_t c, symmem_buffer_t b, int round)
{
    int rank = symmem_comm_rank(c), n = symmem_comm_size(c);
    size_t words = symmem_buffer_size(b) / 4, bytes = symmem_buffer_size(b);
    uint32_t *mine = symmem_buffer_ptr(b);
    for (size_t i = 0; i < words; i++) mine[i] = pattern(rank, i, round);
    if (bytes % 4) ((unsigned char *)mine)[bytes - 1] = (unsigned char)(rank + 1);
    CHECK_OK(symmem_comm_barrier(c));
    char *p0 = symmem_buffer_peer_ptr(b, 0);
    size_t stride = (size_t)((char *)symmem_buffer_peer_ptr(b, n > 1 ? 1 : 0) - p0);
    for (int r = 0; r < n; r++) {
        const uint32_t *peer = symmem_buffer_peer_ptr(b, r);
        CHECK(peer != NULL && (char *)peer == p0 + (size_t)r * stride);
        for (size_t i = 0; i < words; i++)
            if (peer[i] != pattern(r, i, round)) {
                fprintf(stderr, "rank %d: peer %d word %zu = %08x, want %08x\n", rank, r, i, peer[i], pattern(r, i, round));
                exit(1);
            }
        if (bytes % 4) CHECK(((const unsigned char *)peer)[bytes - 1] == (unsigned char)(r + 1));
        const unsigned char *sig = symmem_buffer_signal_ptr(b, r);
        for (size_t i = 0; i < SYMMEM_SIGNAL_BYTES; i += 997) CHECK(sig[i] == 0);
    }
    CHECK(symmem_buffer_peer_ptr(b, n) == NULL && symmem_buffer_peer_ptr(b, -1) == NULL);
    CHECK_OK(symmem_comm_barrier(c)); /* nobody rewrites before everyone has checked */
}

/* ---- cases ------------------------------------------------------------------------------------------ */

static void rank_basic(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 20000);
    static const size_t sizes[] = {1, 7, 4095, 4096, 65537, (1u << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        symmem_buffer_t b;
        CHECK_OK(symmem_alloc(c, sizes[k], &b));
        CHECK(symmem_buffer_size(b) == sizes[k] && symmem_buffer_mapped_size(b) >= sizes[k]);
        CHECK(symmem_buffer_comm(b) == c);
        CHECK(symmem_buffer_lookup(c, (char *)symmem_buffer_ptr(b) + sizes[k] - 1) == b);
        write_and_verify(c, b, (int)k);
        void *const *table = symmem_buffer_device_peers(b);
        for (int r = 0; r < nranks; r++) CHECK(table[r] == symmem_buffer_peer_ptr(b, r));
        CHECK_OK(symmem_free(b));
    }
    symmem_link_t link;
    CHECK_OK(symmem_comm_peer_link(c, (rank + 1) % nranks, &link, NULL));
    CHECK(link == (nranks == 1 ? SYMMEM_LINK_SELF : SYMMEM_LINK_NONE));
    CHECK_OK(symmem_comm_destroy(c));
}

static void two_ranks(void) { CHECK(spawn(2, rank_basic) == 0); }
static void four_ranks(void) { CHECK(spawn(4, rank_basic) == 0); }
static void eight_ranks(void) { CHECK(spawn(8, rank_basic) == 0); }
static void one_rank(void) { CHECK(spawn(1, rank_basic) == 0); }

static void rank_size_mismatch(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 20000);
    symmem_buffer_t b;
    CHECK_ST(symmem_alloc(c, rank == 1 ? 8192 : 4096, &b), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("every rank must pass the same size");
    CHECK_ST(symmem_alloc(c, 0, &b), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("size 0");
    CHECK_ST(symmem_alloc(c, (size_t)1 << 62, &b), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("more than this rank's host memory");
    /* The communicator is still usable after rejected requests. */
    CHECK_OK(symmem_alloc(c, 100, &b));
    write_and_verify(c, b, 0);
    CHECK_OK(symmem_free(b));
    CHECK_OK(symmem_comm_destroy(c));
}
static void bad_sizes_fail_on_every_rank(void) { CHECK(spawn(3, rank_size_mismatch) == 0); }

static void rank_double_free(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 20000);
    symmem_buffer_t b;
    CHECK_OK(symmem_alloc(c, 4096, &b));
    CHECK_OK(symmem_free(b));
    CHECK_ST(symmem_free(b), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("freed twice");
    int local;
    CHECK_ST(symmem_free((symmem_buffer_t)(void *)&local), SYMMEM_INVALID_ARGUMENT);
    CHECK(symmem_buffer_lookup(c, &local) == NULL);
    CHECK_OK(symmem_comm_destroy(c));
    CHECK_ST(symmem_comm_destroy(c), SYMMEM_INVALID_ARGUMENT); /* the freed memory may still hold the magic */
}
static void double_and_foreign_free(void) { CHECK(spawn(2, rank_double_free) == 0); }

/* Thousands of cycles: descriptors and mappings back to where they started. Mappings: all lines (exact, or
 * within TEST_MAPS_SLACK under ASan) and the memfd mappings of the host backend (exact in every build). */
static int count_maps_with(const char *needle)
{
    FILE *f = fopen("/proc/self/maps", "r");
    int n = 0;
    char line[1024];
    while (f && fgets(line, sizeof line, f)) n += !needle || strstr(line, needle) != NULL;
    if (f) fclose(f);
    return n;
}
static int count_maps(void) { return count_maps_with(NULL); }

static void rank_cycles(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 20000);
    symmem_buffer_t b;
    CHECK_OK(symmem_alloc(c, 12345, &b)); /* warm up lazily created state */
    CHECK_OK(symmem_free(b));
    int fds0 = test_open_fds(), maps0 = count_maps(), memfd0 = count_maps_with("/memfd:symmem");
    for (int i = 0; i < 2000; i++) {
        CHECK_OK(symmem_alloc(c, 4096u * (1 + i % 5), &b));
        ((volatile char *)symmem_buffer_ptr(b))[0] = 1;
        CHECK_OK(symmem_free(b));
    }
    CHECK(test_open_fds() == fds0);
    CHECK(count_maps_with("/memfd:symmem") == memfd0);
    CHECK(count_maps() >= maps0 - TEST_MAPS_SLACK && count_maps() <= maps0 + TEST_MAPS_SLACK);
    CHECK_OK(symmem_comm_destroy(c));
}
static void alloc_free_cycles_leak_nothing(void) { CHECK(spawn(2, rank_cycles) == 0); }

static void rank_destroy_frees_leftovers(int rank, int nranks, const symmem_unique_id_t *id)
{
    int fds0 = test_open_fds();
    symmem_comm_t c = join(rank, nranks, id, 20000);
    symmem_buffer_t b1, b2;
    CHECK_OK(symmem_alloc(c, 4096, &b1));
    CHECK_OK(symmem_alloc(c, 8192, &b2));
    CHECK_OK(symmem_comm_destroy(c)); /* warns and frees both */
    CHECK(test_open_fds() == fds0);
}
static void destroy_frees_leftover_buffers(void) { CHECK(spawn(2, rank_destroy_frees_leftovers) == 0); }

/* ---- faults ----------------------------------------------------------------------------------------- */

static void rank_dup(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_options_t o = host_opts(1500);
    symmem_comm_t c;
    symmem_status_t st = symmem_comm_init(nranks, rank, id, &o, &c);
    /* Exactly one of the two processes claiming rank 1 finds its name bound, and is told that the holder
     * may be a duplicate or another process (named by pid); everyone else times out waiting for rank 2, who
     * never comes, and says so. */
    if (st == SYMMEM_INVALID_ARGUMENT) {
        CHECK_ERR_HAS("the socket name of rank 1 is already bound by pid");
        CHECK_ERR_HAS("duplicate rank");
        CHECK_ERR_HAS("or another process");
        exit(3);
    }
    CHECK(st == SYMMEM_TIMEOUT);
    CHECK_ERR_HAS("rank(s) 2 never started listening");
}

static void duplicate_rank_detected(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    int ranks[] = {0, 1, 1};
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            rank_dup(ranks[i], 3, &id);
            _exit(0);
        }
        usleep(50000); /* stagger so the first rank 1 binds first */
    }
    int taken = 0, ok = 0;
    for (int i = 0; i < 3; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 3) taken++;
        else if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
    }
    CHECK(taken == 1 && ok == 2);
}

static void rank_missing_peer(int rank, int nranks, const symmem_unique_id_t *id)
{
    (void)nranks;
    symmem_options_t o = host_opts(800);
    symmem_comm_t c;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_ST(symmem_comm_init(3, rank, id, &o, &c), SYMMEM_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_ERR_HAS("rank");
    CHECK_ERR_HAS("SYMMEM_TIMEOUT_MS");
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK(s < 10.0); /* bounded: not a hang (the bound is generous; only the absence of a hang is tested) */
}

/* Rank 2 never starts: ranks 0 and 1 fail with a timeout that names a missing rank. */
static void missing_rank_times_out(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    int ranks[] = {0, 1};
    CHECK(run_ranks(3, ranks, 2, rank_missing_peer, &id) == 0);
}

/* A valid-looking id nobody else uses: the only rank that starts times out naming rank 0. */
static void foreign_unique_id_times_out(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    symmem_options_t o = host_opts(500);
    symmem_comm_t c;
    CHECK_ST(symmem_comm_init(2, 1, &id, &o, &c), SYMMEM_TIMEOUT);
    CHECK_ERR_HAS("rank(s) 0 never connected");
    symmem_boot_id_t *b = (symmem_boot_id_t *)(void *)id.bytes;
    b->magic ^= 1; /* corrupted */
    CHECK_ST(symmem_comm_init(2, 1, &id, &o, &c), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("not a symmem id");
}

static void rank_nranks_mismatch(int rank, int nranks, const symmem_unique_id_t *id)
{
    (void)nranks;
    symmem_options_t o = host_opts(1500);
    symmem_comm_t c;
    /* Rank 0 thinks there are 2 ranks, rank 1 thinks 3. */
    symmem_status_t st = symmem_comm_init(rank == 0 ? 2 : 3, rank, id, &o, &c);
    CHECK(st == SYMMEM_INVALID_ARGUMENT || st == SYMMEM_TIMEOUT || st == SYMMEM_PEER_FAILURE);
    if (st == SYMMEM_INVALID_ARGUMENT) CHECK_ERR_HAS("same nranks");
}

static void nranks_mismatch_detected(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    int ranks[] = {0, 1};
    CHECK(run_ranks(3, ranks, 2, rank_nranks_mismatch, &id) == 0);
}

/* Rank 2 exits after init; the others' next collective call fails fast naming it (not after the
 * timeout), and every later call reports the communicator's error state. */
static void rank_peer_dies(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 60000);
    if (rank == 2) _exit(0); /* dies without cleanup */
    symmem_buffer_t b;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK_ST(symmem_alloc(c, 4096, &b), SYMMEM_PEER_FAILURE);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(t1.tv_sec - t0.tv_sec < 30); /* far below the 60 s timeout: the closed socket was noticed */
    CHECK(strstr(symmem_last_error(), "rank 2") || strstr(symmem_last_error(), "rank 1") ||
          strstr(symmem_last_error(), "rank 0"));
    CHECK_ST(symmem_alloc(c, 4096, &b), SYMMEM_COMM_ERROR);
    CHECK_ST(symmem_comm_get_async_error(c), SYMMEM_PEER_FAILURE);
    CHECK_OK(symmem_comm_destroy(c));
}
static void dead_peer_fails_fast(void) { CHECK(spawn(3, rank_peer_dies) == 0); }

/* Ranks making different collective calls fail at once, each naming the other, instead of mixing data. */
static void rank_mismatched_calls(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 20000);
    symmem_buffer_t b;
    symmem_status_t st = rank == 0 ? symmem_alloc(c, 4096, &b) : symmem_comm_barrier(c);
    CHECK(st == SYMMEM_PEER_FAILURE);
    CHECK(strstr(symmem_last_error(), rank == 0 ? "rank 1" : "rank 0"));
    CHECK(strstr(symmem_last_error(), "different calls") || strstr(symmem_last_error(), "another collective call"));
    CHECK_ST(symmem_alloc(c, 4096, &b), SYMMEM_COMM_ERROR); /* the communicator stays failed */
    CHECK_OK(symmem_comm_destroy(c));
}
static void mismatched_collective_calls_detected(void) { CHECK(spawn(2, rank_mismatched_calls) == 0); }

/* Rank 1 stays alive but never calls symmem_alloc: rank 0 times out naming rank 1, and can tear down. */
static void rank_peer_absent(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 700);
    if (rank == 1) {
        sleep(3);
        symmem_comm_destroy(c);
        return;
    }
    symmem_buffer_t b;
    CHECK_ST(symmem_alloc(c, 4096, &b), SYMMEM_TIMEOUT);
    CHECK_ERR_HAS("rank 1");
    CHECK_OK(symmem_comm_destroy(c));
}
static void absent_peer_times_out(void) { CHECK(spawn(2, rank_peer_absent) == 0); }

/* A peer's failure text without a NUL: rank 0 must print that field and nothing beyond it (it used to print
 * on into the next rank's entry). Ranks 1 and 2 play symmem_alloc's first two steps by hand. */
typedef struct peer_status {
    int32_t status;
    char msg[252];
} peer_status_t;

static void rank_unterminated_status(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 20000);
    if (rank == 0) {
        symmem_buffer_t b;
        CHECK(symmem_alloc(c, 4096, &b) != SYMMEM_OK);
        char run[253];
        memset(run, 'A', 252);
        run[252] = '\0';
        CHECK_ERR_HAS("failed on rank 1: ");
        CHECK_ERR_HAS(run);
        CHECK(!strstr(symmem_last_error(), "XTRA") && !strstr(symmem_last_error(), "LEAKED"));
    } else {
        uint64_t size = 4096, sizes[8];
        CHECK_OK(symmem_comm_allgather(c, &size, sizes, sizeof size));
        peer_status_t me, all[8];
        memset(&me, 0, sizeof me);
        if (rank == 1) {
            me.status = SYMMEM_SYSTEM_ERROR;
            memset(me.msg, 'A', sizeof me.msg); /* no NUL */
        } else {
            memcpy(&me.status, "XTRA", 4);
            snprintf(me.msg, sizeof me.msg, "LEAKED");
        }
        CHECK_OK(symmem_comm_allgather(c, &me, all, sizeof me));
    }
    CHECK_OK(symmem_comm_barrier(c));
    CHECK_OK(symmem_comm_destroy(c));
}
static void peer_status_text_is_bounded(void) { CHECK(spawn(3, rank_unterminated_status) == 0); }

/* Rank 1 plays symmem_alloc by hand and passes a bad descriptor: a memfd smaller than the stride (it used
 * to be mapped, and touching the peer's part killed rank 0 with SIGBUS), one that is not sealed (it could
 * be shrunk after the check), or a pipe. Rank 0's symmem_alloc must fail with a clear error instead. */
enum { BAD_SMALL, BAD_UNSEALED, BAD_NOT_MEMFD, BAD_KINDS };

static int bad_descriptor(int kind, size_t stride)
{
    if (kind == BAD_NOT_MEMFD) {
        int p[2];
        CHECK(pipe(p) == 0);
        close(p[1]);
        return p[0];
    }
    int fd = memfd_create("bad", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, kind == BAD_SMALL ? 4096 : (off_t)stride) == 0);
    if (kind == BAD_SMALL) CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
    return fd;
}

static void rank_bad_descriptor(int rank, int nranks, const symmem_unique_id_t *id)
{
    symmem_comm_t c = join(rank, nranks, id, 20000);
    const size_t size = 32 * 4096;
    for (int kind = 0; kind < BAD_KINDS; kind++) {
        if (rank == 0) {
            symmem_buffer_t b;
            CHECK(symmem_alloc(c, size, &b) != SYMMEM_OK);
            static const char *const needle[BAD_KINDS] = {"smaller than the", "not sealed", "not a memfd"};
            CHECK_ERR_HAS(needle[kind]);
        } else {
            uint64_t mine = size, sizes[2];
            peer_status_t ok, all[2];
            memset(&ok, 0, sizeof ok);
            CHECK_OK(symmem_comm_allgather(c, &mine, sizes, sizeof mine));  /* size */
            CHECK_OK(symmem_comm_allgather(c, &ok, all, sizeof ok));        /* placement */
            CHECK_OK(symmem_comm_allgather(c, &ok, all, sizeof ok));        /* allocation */
            int fd = bad_descriptor(kind, size + 4096 * 64), fds[2];
            CHECK_OK(symmem_comm_exchange_fds(c, fd, (uint64_t)kind + 1, fds)); /* rank 0's alloc_seq */
            close(fd);
            close(fds[0]);
            close(fds[1]);
            CHECK_OK(symmem_comm_allgather(c, &ok, all, sizeof ok));        /* mapping peers */
            CHECK(all[0].status != SYMMEM_OK);
        }
    }
    CHECK_OK(symmem_comm_barrier(c));
    CHECK_OK(symmem_comm_destroy(c));
}
static void bad_peer_descriptors_refused(void) { CHECK(spawn(2, rank_bad_descriptor) == 0); }

/* Processes that are not ranks connect to a rank's socket: one with the wrong secret, one of another
 * user. They are turned away and the real ranks still meet. */
static void intruder(const symmem_unique_id_t *id, int as_nobody)
{
    if (as_nobody && setuid(65534) != 0) _exit(0); /* not root: skip this intruder */
    const symmem_boot_id_t *b = (const symmem_boot_id_t *)(const void *)id->bytes;
    struct sockaddr_un addr;
    socklen_t alen;
    if (symmem_boot_sock_addr(b, 1, &addr, &alen) != SYMMEM_OK) _exit(1);
    for (int tries = 0; tries < 200; tries++) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&addr, alen) == 0) {
            char junk[64];
            memset(junk, 0x5a, sizeof junk);
            /* The rank may have closed us already (another user is turned away at once): no SIGPIPE. */
            ssize_t w = send(fd, junk, sizeof junk, MSG_NOSIGNAL);
            (void)w;
            char buf[64];
            ssize_t r = read(fd, buf, sizeof buf); /* must be closed on us, never answered */
            _exit(r > 0 ? 1 : 0);
        }
        close(fd);
        usleep(5000);
    }
    _exit(0);
}

static void rank_after_intruders(int rank, int nranks, const symmem_unique_id_t *id)
{
    usleep(rank == 0 ? 300000 : 0); /* rank 1 listens first, so the intruders reach it before rank 0 */
    symmem_comm_t c = join(rank, nranks, id, 20000);
    symmem_buffer_t b;
    CHECK_OK(symmem_alloc(c, 4096, &b));
    write_and_verify(c, b, 0);
    CHECK_OK(symmem_free(b));
    CHECK_OK(symmem_comm_destroy(c));
}

static void intruders_rejected(void)
{
    symmem_unique_id_t id;
    CHECK_OK(symmem_get_unique_id(&id));
    pid_t in1 = fork();
    if (in1 == 0) intruder(&id, 0);
    pid_t in2 = fork();
    if (in2 == 0) intruder(&id, 1);
    int ranks[] = {0, 1};
    CHECK(run_ranks(2, ranks, 2, rank_after_intruders, &id) == 0);
    int s1, s2;
    waitpid(in1, &s1, 0);
    waitpid(in2, &s2, 0);
    if (!WIFEXITED(s1) || WEXITSTATUS(s1) != 0) fprintf(stderr, "same-user intruder: status 0x%x\n", s1);
    if (!WIFEXITED(s2) || WEXITSTATUS(s2) != 0) fprintf(stderr, "other-user intruder: status 0x%x\n", s2);
    CHECK(WIFEXITED(s1) && WEXITSTATUS(s1) == 0);
    CHECK(WIFEXITED(s2) && WEXITSTATUS(s2) == 0);
}

/* ---- one process, several ranks ---------------------------------------------------------------------- */

static void init_all_with_group_alloc(void)
{
    enum { N = 4 };
    symmem_options_t o = host_opts(20000);
    symmem_comm_t comms[N];
    CHECK_OK(symmem_comm_init_all(N, NULL, &o, comms));
    symmem_buffer_t bufs[N];
    CHECK_OK(symmem_group_start());
    for (int r = 0; r < N; r++) CHECK_OK(symmem_alloc(comms[r], 3000, &bufs[r]));
    CHECK_OK(symmem_group_end());
    for (int r = 0; r < N; r++) memset(symmem_buffer_ptr(bufs[r]), 'a' + r, 3000);
    for (int r = 0; r < N; r++)
        for (int p = 0; p < N; p++) {
            const char *peer = symmem_buffer_peer_ptr(bufs[r], p);
            CHECK(peer[0] == 'a' + p && peer[2999] == 'a' + p);
        }
    /* A mismatch inside a group fails the group. */
    symmem_buffer_t bad[N];
    CHECK_OK(symmem_group_start());
    for (int r = 0; r < N; r++) CHECK_OK(symmem_alloc(comms[r], r == 2 ? 64 : 32, &bad[r]));
    CHECK_ST(symmem_group_end(), SYMMEM_INVALID_ARGUMENT);
    for (int r = 0; r < N; r++) CHECK_OK(symmem_free(bufs[r]));
    for (int r = 0; r < N; r++) CHECK_OK(symmem_comm_destroy(comms[r]));
}

/* Two symmem_alloc calls of each communicator inside one group: each communicator's calls run in order
 * (they used to run on two threads at once over the same sockets and mixed their messages). */
static void group_with_two_calls_per_comm(void)
{
    enum { N = 3, CALLS = 3 };
    symmem_options_t o = host_opts(20000);
    symmem_comm_t comms[N];
    CHECK_OK(symmem_comm_init_all(N, NULL, &o, comms));
    symmem_buffer_t bufs[N][CALLS];
    CHECK_OK(symmem_group_start());
    for (int r = 0; r < N; r++)
        for (int k = 0; k < CALLS; k++) CHECK_OK(symmem_alloc(comms[r], 4096u * (k + 1), &bufs[r][k]));
    CHECK_OK(symmem_group_end());
    for (int k = 0; k < CALLS; k++)
        for (int r = 0; r < N; r++) {
            CHECK(symmem_buffer_size(bufs[r][k]) == 4096u * (k + 1));
            CHECK(symmem_buffer_seq(bufs[r][k]) == symmem_buffer_seq(bufs[0][k]));
            if (k) CHECK(symmem_buffer_seq(bufs[r][k]) > symmem_buffer_seq(bufs[r][k - 1]));
            memset(symmem_buffer_ptr(bufs[r][k]), 'a' + r + k, symmem_buffer_size(bufs[r][k]));
        }
    for (int k = 0; k < CALLS; k++)
        for (int r = 0; r < N; r++)
            for (int p = 0; p < N; p++) {
                const char *peer = symmem_buffer_peer_ptr(bufs[r][k], p);
                CHECK(peer[0] == 'a' + p + k && peer[4096u * (k + 1) - 1] == 'a' + p + k);
            }
    for (int r = 0; r < N; r++)
        for (int k = 0; k < CALLS; k++) CHECK_OK(symmem_free(bufs[r][k]));
    for (int r = 0; r < N; r++) CHECK_OK(symmem_comm_destroy(comms[r]));
}

/* Destroy looks the handle up in the registry of live communicators: a handle that never was one (here
 * with the magic of a real one) is rejected without being read or freed, and so is a destroyed one. */
static void destroy_rejects_handles_that_are_not_live(void)
{
    struct symmem_comm *fake = calloc(1, sizeof *fake);
    CHECK(fake);
    fake->magic = SYMMEM_COMM_MAGIC;
    fake->nranks = 1;
    CHECK_ST(symmem_comm_destroy(fake), SYMMEM_INVALID_ARGUMENT);
    CHECK_ERR_HAS("not a live communicator");
    CHECK(symmem_comm_rank(fake) == -1 && symmem_comm_size(fake) == -1);
    free(fake);
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c[2];
    CHECK_OK(symmem_comm_init_all(2, NULL, &o, c));
    CHECK_OK(symmem_comm_destroy(c[0]));
    CHECK(symmem_comm_rank(c[0]) == -1); /* the freed handle is not read */
    CHECK_ST(symmem_comm_destroy(c[0]), SYMMEM_INVALID_ARGUMENT);
    CHECK(symmem_comm_rank(c[1]) == 1);
    CHECK_OK(symmem_comm_destroy(c[1]));
}

/* Every lookup of every kind of dead handle: NULL (0, DEFAULT) and SYMMEM_INVALID_ARGUMENT, the handle never
 * read. */
static void check_buffer_refused(symmem_buffer_t b)
{
    CHECK(symmem_buffer_ptr(b) == NULL);
    CHECK_ERR_HAS("symmem_buffer_ptr: ");
    CHECK_ERR_HAS("is not a live symmem buffer");
    CHECK(symmem_buffer_peer_ptr(b, 0) == NULL && symmem_buffer_signal_ptr(b, 0) == NULL);
    CHECK(symmem_buffer_size(b) == 0 && symmem_buffer_mapped_size(b) == 0 && symmem_buffer_seq(b) == 0);
    CHECK(symmem_buffer_comm(b) == NULL && symmem_buffer_placement(b) == SYMMEM_PLACEMENT_DEFAULT);
    CHECK(symmem_buffer_device_peers(b) == NULL && symmem_buffer_device_signals(b) == NULL);
    CHECK_ERR_HAS("symmem_buffer_device_signals: ");
    CHECK_ST(symmem_free(b), b ? SYMMEM_INVALID_ARGUMENT : SYMMEM_OK); /* free(NULL) is a no-op */
    void *h = (void *)1;
    CHECK_ST(symmem_nccl_register(b, &h, &h), SYMMEM_INVALID_ARGUMENT);
}

/* Lookups through a freed buffer, a buffer freed by symmem_comm_destroy, and junk handles. live() read the
 * buffer's magic through the handle (AddressSanitizer: heap use after free), and symmem_comm_max_message_bytes
 * read a destroyed or junk communicator (use after free; a fault on a junk handle). The junk here lies on a
 * page that faults when read, so reading it fails this test in every build. */
static void stale_handles_are_refused(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *junk = mmap(NULL, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(junk != MAP_FAILED);
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c[2];
    CHECK_OK(symmem_comm_init_all(2, NULL, &o, c));
    symmem_buffer_t freed[2], with_comm[2];
    CHECK_OK(symmem_group_start());
    for (int r = 0; r < 2; r++) CHECK_OK(symmem_alloc(c[r], 4096, &freed[r]));
    for (int r = 0; r < 2; r++) CHECK_OK(symmem_alloc(c[r], 8192, &with_comm[r]));
    CHECK_OK(symmem_group_end());
    CHECK(symmem_buffer_size(freed[0]) == 4096 && symmem_buffer_comm(with_comm[1]) == c[1]);
    CHECK(symmem_comm_max_message_bytes(c[0]) == 0); /* host backend: no collectives, a live handle */
    CHECK_OK(symmem_free(freed[0]));
    check_buffer_refused(freed[0]);
    check_buffer_refused((symmem_buffer_t)(void *)(junk + 64));
    check_buffer_refused(NULL);
    CHECK(symmem_buffer_lookup((symmem_comm_t)(void *)junk, junk) == NULL);
    CHECK_ERR_HAS("symmem_buffer_lookup: ");
    CHECK(symmem_comm_max_message_bytes((symmem_comm_t)(void *)(junk + 128)) == 0);
    CHECK_ERR_HAS("symmem_comm_max_message_bytes: ");
    CHECK_ERR_HAS("is not a live communicator");
    CHECK(symmem_buffer_size(freed[1]) == 4096); /* the other rank's handle is its own */
    CHECK_OK(symmem_comm_destroy(c[0])); /* frees with_comm[0] (and warns) */
    check_buffer_refused(with_comm[0]);
    CHECK(symmem_comm_max_message_bytes(c[0]) == 0);
    CHECK_ERR_HAS("is not a live communicator");
    CHECK(symmem_buffer_lookup(c[0], junk) == NULL);
    CHECK_ERR_HAS("is not a live communicator");
    CHECK(symmem_buffer_size(with_comm[1]) == 8192);
    CHECK_OK(symmem_comm_destroy(c[1]));
    check_buffer_refused(freed[1]);
    check_buffer_refused(with_comm[1]);
    munmap(junk, page);
}

/* User-supplied bootstrap: threads with a shared-memory allgather standing in for a PyTorch Store. */
typedef struct shm_boot {
    pthread_barrier_t bar;
    char data[8][256];
} shm_boot_t;
typedef struct shm_rank {
    shm_boot_t *s;
    int rank, nranks;
    symmem_status_t st;
} shm_rank_t;

static int shm_allgather(void *ctx, const void *send, void *recv, size_t bytes)
{
    shm_rank_t *r = ctx;
    if (bytes > 256) return 1;
    memcpy(r->s->data[r->rank], send, bytes);
    pthread_barrier_wait(&r->s->bar);
    for (int i = 0; i < r->nranks; i++) memcpy((char *)recv + (size_t)i * bytes, r->s->data[i], bytes);
    pthread_barrier_wait(&r->s->bar);
    return 0;
}
static int shm_barrier(void *ctx)
{
    pthread_barrier_wait(&((shm_rank_t *)ctx)->s->bar);
    return 0;
}

static void *bootstrap_thread(void *p)
{
    shm_rank_t *r = p;
    symmem_bootstrap_t bs = {shm_allgather, shm_barrier, r};
    symmem_options_t o = host_opts(20000);
    symmem_comm_t c;
    r->st = symmem_comm_init_bootstrap(r->nranks, r->rank, &bs, &o, &c);
    if (r->st != SYMMEM_OK) return NULL;
    symmem_buffer_t b;
    r->st = symmem_alloc(c, 1 << 16, &b);
    if (r->st == SYMMEM_OK) {
        write_and_verify(c, b, 1);
        r->st = symmem_free(b);
    }
    symmem_comm_destroy(c);
    return NULL;
}

static void user_bootstrap(void)
{
    enum { N = 3 };
    shm_boot_t s;
    pthread_barrier_init(&s.bar, NULL, N);
    shm_rank_t r[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        r[i] = (shm_rank_t){&s, i, N, SYMMEM_INTERNAL_ERROR};
        pthread_create(&th[i], NULL, bootstrap_thread, &r[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < N; i++) CHECK(r[i].st == SYMMEM_OK);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"one_rank", one_rank, 30},
        {"two_ranks", two_ranks, 60},
        {"four_ranks", four_ranks, 60},
        {"eight_ranks", eight_ranks, 90},
        {"bad_sizes_fail_on_every_rank", bad_sizes_fail_on_every_rank, 60},
        {"double_and_foreign_free", double_and_foreign_free, 30},
        {"alloc_free_cycles_leak_nothing", alloc_free_cycles_leak_nothing, 120},
        {"destroy_frees_leftover_buffers", destroy_frees_leftover_buffers, 30},
        {"duplicate_rank_detected", duplicate_rank_detected, 30},
        {"missing_rank_times_out", missing_rank_times_out, 30},
        {"foreign_unique_id_times_out", foreign_unique_id_times_out, 30},
        {"nranks_mismatch_detected", nranks_mismatch_detected, 30},
        {"dead_peer_fails_fast", dead_peer_fails_fast, 60},
        {"absent_peer_times_out", absent_peer_times_out, 30},
        {"mismatched_collective_calls_detected", mismatched_collective_calls_detected, 30},
        {"intruders_rejected", intruders_rejected, 60},
        {"peer_status_text_is_bounded", peer_status_text_is_bounded, 30},
        {"bad_peer_descriptors_refused", bad_peer_descriptors_refused, 30},
        {"init_all_with_group_alloc", init_all_with_group_alloc, 60},
        {"group_with_two_calls_per_comm", group_with_two_calls_per_comm, 60},
        {"destroy_rejects_handles_that_are_not_live", destroy_rejects_handles_that_are_not_live, 30},
        {"stale_handles_are_refused", stale_handles_are_refused, 30},
        {"user_bootstrap", user_bootstrap, 60},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
