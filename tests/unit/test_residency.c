/* Residency (collectives/residency.c), without a GPU: the grid rule as a pure function, then at init and
 * after, with communicator shells whose peers say which process and which GPU each rank has. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/param.h"
#include "boot/comm_state.h"
#include "collectives/coll_internal.h"
#include "collectives/residency.h"
#include "test_util.h"

/* nranks ranks, rank `rank` is this one; pid[q] and bus[q] say where rank q runs. */
static symmem_comm_t shell(int nranks, int rank, const int *pid, const char *const *bus)
{
    struct symmem_comm *c = calloc(1, sizeof *c);
    struct symmem_coll *co = calloc(1, sizeof *co);
    CHECK(c && co);
    c->magic = SYMMEM_COMM_MAGIC;
    c->nranks = nranks;
    c->rank = rank;
    c->backend = SYMMEM_BACKEND_CUDA;
    c->ranks_per_device = 1;
    for (int q = 0; q < nranks; q++) {
        snprintf(c->peers[q].pci_bus_id, sizeof c->peers[q].pci_bus_id, "%s", bus[q]);
        c->peers[q].pid = pid[q];
        int same = 0;
        for (int o = 0; o < nranks; o++) same += strcmp(bus[o], bus[q]) == 0;
        if (same > c->ranks_per_device) c->ranks_per_device = same;
    }
    co->colocated_peer = -1;
    c->coll = co;
    return c;
}

static void shell_free(symmem_comm_t c)
{
    free(c->coll);
    free(c);
}

/* The residency rule: the blocks of every rank on one GPU fit in the share of what the GPU keeps resident. */
static void grid_is_the_share_of_the_gpu_divided_among_its_ranks(void)
{
    /* H200: 132 SMs, one 512-thread block per SM; one rank per GPU: 75% of 132 */
    CHECK(symmem_coll_grid_rule(1, 132, 1, 75, 0) == 99);
    CHECK(symmem_coll_grid_rule(1, 132, 1, 100, 0) == 132);
    for (int bps = 1; bps <= 4; bps++)
        for (int sms = 1; sms <= 200; sms += 13)
            for (int n = 1; n <= 16; n++)
                for (int share = 1; share <= 100; share += 11) {
                    const int g = symmem_coll_grid_rule(bps, sms, n, share, 0);
                    CHECK(g >= 1 && g <= SYMMEM_COLL_MAX_GRID);
                    /* all n ranks' grids together within the share, unless one block each is already more */
                    CHECK((int64_t)g * n * 100 <= (int64_t)bps * sms * share || g == 1);
                    /* and not needlessly small: one more block each would exceed the share (or the bound) */
                    CHECK((int64_t)(g + 1) * n * 100 > (int64_t)bps * sms * share || g == SYMMEM_COLL_MAX_GRID);
                    /* SYMMEM_MAX_BLOCKS only ever lowers it */
                    CHECK(symmem_coll_grid_rule(bps, sms, n, share, 3) == (g < 3 ? g : 3));
                }
    /* 8 co-located ranks on an H200: 12 blocks each, 96 of 132; 16 (SYMMEM_MAX_RANKS): 6 each, 96 of 132 */
    CHECK(symmem_coll_grid_rule(1, 132, 8, 75, 0) == 12);
    CHECK(symmem_coll_grid_rule(1, 132, SYMMEM_MAX_RANKS, 75, 0) == 6);
    CHECK(symmem_coll_grid_rule(1, 132, 12, 75, 0) == 8 && symmem_coll_grid_rule(1, 132, 9, 75, 0) == 11);
    /* out-of-range shares are clamped to 1..100 */
    CHECK(symmem_coll_grid_rule(1, 132, 1, 0, 0) == symmem_coll_grid_rule(1, 132, 1, 1, 0));
    CHECK(symmem_coll_grid_rule(1, 132, 1, 400, 0) == 132);
    /* never more than the flag slots */
    CHECK(symmem_coll_grid_rule(4, 200, 1, 100, 0) == SYMMEM_COLL_MAX_GRID);
}

/* The room for cluster kernels (SYMMEM_CLUSTER_ROOM): co-located ranks hold at most SMs - (room - 1) x GPCs - 1
 * blocks together, of which the communicator takes its share. */
static void ranks_sharing_a_gpu_leave_the_room_idle_per_gpc(void)
{
    /* H200, room 8: 132 - 7 x 8 - 1 = 75 blocks, 75% of them 56 for the communicator, divided among its ranks */
    static const int ranks[] = {2, 4, 8, 12, 16}, per_rank[] = {28, 14, 7, 4, 3};
    for (int i = 0; i < 5; i++) CHECK(symmem_coll_grid_rule_room(1, 132, ranks[i], 75, 0, 8, 8) == per_rank[i]);
    CHECK(symmem_coll_grid_rule_room(1, 132, 16, 50, 0, 8, 8) == 2); /* 37 of 75 */
    CHECK(symmem_coll_room_pool(132, 8, 8) == 75 && symmem_coll_room_pool(132, 1, 8) == 131);
    for (int bps = 1; bps <= 4; bps++)
        for (int sms = 1; sms <= 200; sms += 13)
            for (int n = 1; n <= 16; n++)
                for (int share = 1; share <= 100; share += 11) {
                    const int plain = symmem_coll_grid_rule(bps, sms, n, share, 0);
                    /* room 0, unknown GPCs or one rank on the GPU: the plain rule */
                    for (int gpcs = 0; gpcs <= 16; gpcs += 4)
                        CHECK(symmem_coll_grid_rule_room(bps, sms, n, share, 0, 0, gpcs) == plain);
                    for (int room = 0; room <= 20; room += 4) {
                        CHECK(symmem_coll_grid_rule_room(bps, sms, n, share, 0, room, 0) == plain);
                        CHECK(symmem_coll_grid_rule_room(bps, sms, 1, share, 0, room, 8) ==
                              symmem_coll_grid_rule(bps, sms, 1, share, 0));
                    }
                    for (int gpcs = 1; gpcs <= 16; gpcs += 3) {
                        int prev = plain;
                        for (int room = 1; room <= 24; room++) {
                            const int g = symmem_coll_grid_rule_room(bps, sms, n, share, 0, room, gpcs);
                            CHECK(g >= 1 && g <= SYMMEM_COLL_MAX_GRID);
                            if (n == 1) {
                                CHECK(g == plain);
                                continue;
                            }
                            /* never more than the plain rule, and fewer blocks as the room grows */
                            CHECK(g <= prev);
                            prev = g;
                            /* the ranks' blocks leave (room - 1) x gpcs + 1 SMs idle, unless one block each is
                             * already more */
                            const int64_t idle = (int64_t)(room - 1) * gpcs + 1;
                            const int64_t pool = sms - idle > 0 ? sms - idle : 0;
                            CHECK(symmem_coll_room_pool(sms, room, gpcs) == pool);
                            CHECK((int64_t)g * n * 100 <= pool * share || g == 1);
                            CHECK((int64_t)(g + 1) * n * 100 > pool * share || g == SYMMEM_COLL_MAX_GRID);
                            CHECK(symmem_coll_grid_rule_room(bps, sms, n, share, 3, room, gpcs) == (g < 3 ? g : 3));
                        }
                    }
                }
    /* a room larger than the GPU: one block per rank */
    CHECK(symmem_coll_grid_rule_room(1, 132, 4, 75, 0, 20, 8) == 1);
    CHECK(symmem_coll_grid_rule_room(1, 132, 4, 75, 0, INT32_MAX, INT32_MAX) == 1);
}

/* SYMMEM_GRID_SHARE unset: 75% of the GPU's resident blocks, at most the room's whole pool; a share of the pool
 * like any other, so the rule never gives more than 75% of the GPU, nor more than the pool. */
static void default_share_is_three_quarters_of_the_gpu_within_the_room(void)
{
    CHECK(strcmp(symmem_param_default(SYMMEM_PARAM_GRID_SHARE), "75") == 0 && SYMMEM_COLL_DEFAULT_SHARE == 75);
    /* one rank per GPU, room 0, GPCs unknown: the plain 75% (99 blocks of an H200) */
    CHECK(symmem_coll_default_share(1, 132, 1, 8, 8) == 75);
    CHECK(symmem_coll_default_share(1, 132, 4, 0, 8) == 75);
    CHECK(symmem_coll_default_share(1, 132, 4, 8, 0) == 75);
    /* H100/H200 at room 8: 57 of 132 SMs idle already, so the whole pool of 75 */
    static const int ranks[] = {2, 4, 8, 12, 16}, per_rank[] = {37, 18, 9, 6, 4};
    for (int i = 0; i < 5; i++) {
        const int share = symmem_coll_default_share(1, 132, ranks[i], 8, 8);
        CHECK(share == 100 && symmem_coll_grid_rule_room(1, 132, ranks[i], share, 0, 8, 8) == per_rank[i]);
    }
    /* a small room: 132 - 3 x 8 - 1 = 107 blocks, of which 92% keep the ranks under 99 */
    CHECK(symmem_coll_default_share(1, 132, 4, 4, 8) == 92);
    /* a room that leaves nothing: the share does not matter (one block per rank) */
    CHECK(symmem_coll_default_share(1, 132, 4, 20, 8) == 100);
    for (int bps = 1; bps <= 4; bps++)
        for (int sms = 1; sms <= 200; sms += 7)
            for (int n = 1; n <= 16; n++)
                for (int room = 0; room <= 20; room += 2)
                    for (int gpcs = 0; gpcs <= 16; gpcs += 4) {
                        const int share = symmem_coll_default_share(bps, sms, n, room, gpcs);
                        CHECK(share >= SYMMEM_COLL_DEFAULT_SHARE && share <= 100);
                        const int g = symmem_coll_grid_rule_room(bps, sms, n, share, 0, room, gpcs);
                        const int64_t capacity = (int64_t)bps * sms;
                        /* at most three quarters of the GPU together (or one block each) */
                        CHECK((int64_t)g * n * 100 <= capacity * SYMMEM_COLL_DEFAULT_SHARE || g == 1 ||
                              g == SYMMEM_COLL_MAX_GRID);
                        /* never fewer blocks than the old rule (75% of the pool), never more than the plain rule */
                        CHECK(g >= symmem_coll_grid_rule_room(bps, sms, n, SYMMEM_COLL_DEFAULT_SHARE, 0, room, gpcs));
                        CHECK(g <= symmem_coll_grid_rule(bps, sms, n, SYMMEM_COLL_DEFAULT_SHARE, 0) || g == 1);
                        /* without the room it is the old rule */
                        if (n == 1 || room == 0 || gpcs == 0) CHECK(share == SYMMEM_COLL_DEFAULT_SHARE);
                    }
}

/* A draw in 0..n-1 from the tests' linear congruential sequence (reproducible, no libc state). */
static int draw_below(uint32_t *seed, int n)
{
    *seed = *seed * 1103515245u + 12345u;
    return (int)(*seed >> 16) % n;
}

/* The most idle SMs any one GPC keeps once `blocks` blocks (an SM each) are placed in GPCs of gpc_sms[g] SMs the
 * worst way for a cluster: each into the GPC that has the most idle SMs then. */
static int most_idle_after_worst_placement(const int *gpc_sms, int gpcs, int64_t blocks)
{
    int idle[16], most = 0;
    for (int g = 0; g < gpcs; g++) idle[g] = gpc_sms[g];
    for (int64_t b = 0; b <= blocks; b++) {
        most = 0;
        for (int g = 1; g < gpcs; g++) most = idle[g] > idle[most] ? g : most;
        if (b < blocks) idle[most]--;
    }
    return idle[most];
}

/* What the room promises, on GPUs of any GPC layout the GPC count is measured for (8..23 SMs per GPC): however
 * the co-located ranks' blocks (one SM each, the pool's worth) are placed, some GPC keeps room idle SMs, so a
 * cluster of room whole-SM blocks can start; and one block more could be placed so that none does. */
static void the_room_leaves_a_cluster_room_wherever_the_blocks_land(void)
{
    uint32_t seed = 777;
    for (int trial = 0; trial < 3000; trial++) {
        int gpc_sms[16], idle[16], sms = 0;
        const int gpcs = 1 + draw_below(&seed, 16);
        for (int g = 0; g < gpcs; g++) {
            gpc_sms[g] = 8 + draw_below(&seed, 16);
            sms += gpc_sms[g];
        }
        for (int room = 1; room <= 8; room++) { /* a cluster fits in a GPC of 8 SMs */
            const int64_t pool = symmem_coll_room_pool(sms, room, gpcs);
            CHECK(pool >= 0 && pool < sms);
            CHECK(most_idle_after_worst_placement(gpc_sms, gpcs, pool) >= room);
            /* the largest such pool: one block more, placed the worst way, leaves every GPC short */
            CHECK(most_idle_after_worst_placement(gpc_sms, gpcs, pool + 1) < room);
            /* a random placement as well */
            for (int g = 0; g < gpcs; g++) idle[g] = gpc_sms[g];
            for (int64_t b = 0; b < pool; b++) {
                int g;
                do {
                    g = draw_below(&seed, gpcs);
                } while (idle[g] == 0);
                idle[g]--;
            }
            int ok = 0;
            for (int g = 0; g < gpcs; g++) ok |= idle[g] >= room;
            CHECK(ok);
        }
    }
}

/* The GPC count from the clusters of 8 and of 16 whole-SM blocks resident at once. */
static void gpc_count_is_clusters_of_8_less_clusters_of_16(void)
{
    /* any GPU whose GPCs have 8..23 SMs each: what the occupancy query counts gives back the GPC count */
    uint32_t seed = 12345;
    for (int trial = 0; trial < 2000; trial++) {
        const int gpcs = 1 + trial % 12;
        int sms = 0, c8 = 0, c16 = 0;
        for (int k = 0; k < gpcs; k++) {
            const int s = 8 + draw_below(&seed, 16);
            sms += s, c8 += s / 8, c16 += s / 16;
        }
        CHECK(symmem_coll_gpcs_from_clusters(c8, c16, sms) == gpcs);
    }
    CHECK(symmem_coll_gpcs_from_clusters(16, 8, 132) == 8); /* 8 GPCs of 16..18 SMs */
    /* an H200 as measured (docs/collectives.md, "Residency"): 15 clusters of 8, 7 of 16 (seven GPCs of 16 or
     * more SMs and one of 8..15) */
    CHECK(symmem_coll_gpcs_from_clusters(15, 7, 132) == 8);
    CHECK(symmem_coll_gpcs_from_clusters(9, 1, 72) == 8);   /* 7 GPCs of 8 SMs and one of 16 */
    /* unknown: a size refused or a query failed, no cluster of 8, or more GPCs than 8-SM clusters fit */
    CHECK(symmem_coll_gpcs_from_clusters(16, -1, 132) == 0);
    CHECK(symmem_coll_gpcs_from_clusters(-1, 8, 132) == 0 && symmem_coll_gpcs_from_clusters(-1, -1, 132) == 0);
    CHECK(symmem_coll_gpcs_from_clusters(8, 8, 132) == 0 && symmem_coll_gpcs_from_clusters(0, 0, 132) == 0);
    CHECK(symmem_coll_gpcs_from_clusters(4, 8, 132) == 0);
    CHECK(symmem_coll_gpcs_from_clusters(17, 0, 132) == 0 && symmem_coll_gpcs_from_clusters(16, 0, 132) == 16);
    CHECK(symmem_coll_gpcs_from_clusters(1, 0, 7) == 0 && symmem_coll_gpcs_from_clusters(1, 0, 8) == 1);
}

/* stderr into a file while `body` runs; the text it wrote, in out. */
typedef struct captured {
    int fd, saved;
    char path[64];
} captured_t;

static void capture_start(captured_t *k)
{
    snprintf(k->path, sizeof k->path, "%s", "/tmp/symmem_test_residency_XXXXXX");
    k->fd = mkstemp(k->path);
    CHECK(k->fd >= 0);
    fflush(stderr);
    k->saved = dup(2);
    CHECK(k->saved >= 0 && dup2(k->fd, 2) == 2);
}

static void capture_end(captured_t *k, char *out, size_t len)
{
    fflush(stderr);
    dup2(k->saved, 2);
    close(k->saved);
    const ssize_t got = pread(k->fd, out, len - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    close(k->fd);
    unlink(k->path);
}

/* Ranks 0, 1, 2 in one process on one GPU, rank 3 in another process on that GPU, rank 4 on another GPU:
 * rank 0 counts the three of its process there once, and names rank 1 as its co-located peer. */
static void colocated_ranks_counted_once(void)
{
    const int pid[] = {100, 100, 100, 200, 100};
    const char *const bus[] = {"0000:01:00.0", "0000:01:00.0", "0000:01:00.0", "0000:01:00.0", "0000:02:00.0"};
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    symmem_comm_t c = shell(5, 0, pid, bus);
    symmem_coll_residency_colocated(c, c->coll);
    CHECK(c->coll->colocated_peer == 1 && c->coll->colocated_ranks == 3);
    /* rank 4: alone of its process on its GPU */
    symmem_comm_t d = shell(5, 4, pid, bus);
    symmem_coll_residency_colocated(d, d->coll);
    CHECK(d->coll->colocated_peer == -1 && d->coll->colocated_ranks == 1);
    CHECK(symmem_coll_private_streams_safe(d, d->coll));
    shell_free(c);
    shell_free(d);
}

/* Private streams are safe while every co-located rank of this process can have a hardware queue of its own:
 * 8 queues without CUDA_DEVICE_MAX_CONNECTIONS; under MPS only with the variable set above the ranks per GPU. */
static void private_streams_need_a_queue_per_rank(void)
{
    int pid[9];
    const char *bus[9];
    for (int q = 0; q < 9; q++) pid[q] = 100, bus[q] = "0000:01:00.0";
    char out[4096];
    captured_t k;
    for (int n = 2; n <= 9; n += 7) {
        unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
        symmem_comm_t c = shell(n, 0, pid, bus);
        capture_start(&k);
        symmem_coll_residency_colocated(c, c->coll);
        capture_end(&k, out, sizeof out);
        CHECK(c->coll->colocated_ranks == n);
        CHECK(symmem_coll_private_streams_safe(c, c->coll) == (n <= 8));
        /* more ranks than queues: rank 0 says so at init, naming the variable */
        CHECK((strstr(out, "more than its 8 hardware work queues") != NULL) == (n > 8));
        CHECK(n <= 8 || strstr(out, "CUDA_DEVICE_MAX_CONNECTIONS=32"));
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
        CHECK(symmem_coll_private_streams_safe(c, c->coll));
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
        CHECK(!symmem_coll_private_streams_safe(c, c->coll));
        /* under MPS: the variable must be set, above the ranks per GPU */
        c->coll->mps = 1;
        unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
        CHECK(!symmem_coll_private_streams_safe(c, c->coll));
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", n == 2 ? "2" : "9", 1);
        CHECK(!symmem_coll_private_streams_safe(c, c->coll));
        setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
        CHECK(symmem_coll_private_streams_safe(c, c->coll));
        shell_free(c);
    }
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
}

/* Co-located ranks on the legacy default stream: warned once per communicator, and only for them. */
static void legacy_stream_warned_once(void)
{
    const int pid[] = {100, 100};
    const char *const bus[] = {"0000:01:00.0", "0000:01:00.0"}, *const apart[] = {"0000:01:00.0", "0000:02:00.0"};
    symmem_comm_t c = shell(2, 0, pid, bus), d = shell(2, 0, pid, apart);
    symmem_coll_residency_colocated(c, c->coll);
    symmem_coll_residency_colocated(d, d->coll);
    char out[4096];
    captured_t k;
    capture_start(&k);
    symmem_coll_check_stream(c, NULL, "symmem_all_reduce");
    symmem_coll_check_stream(c, NULL, "symmem_all_reduce");
    symmem_coll_check_stream(d, NULL, "symmem_all_reduce");
    capture_end(&k, out, sizeof out);
    const char *said = "symmem_all_reduce on the legacy default stream, while rank 1";
    const char *first = strstr(out, said);
    CHECK(first && !strstr(first + strlen(said), "legacy default stream"));
    shell_free(c);
    shell_free(d);
}

/* Communicators of one process on one GPU that could hold more blocks than fit get a warning; one removed
 * no longer counts. */
static void communicators_sharing_a_gpu_warned(void)
{
    const int pid[] = {100, 101};
    const char *const gpu1[] = {"0000:01:00.0", "0000:03:00.0"}, *const gpu2[] = {"0000:02:00.0", "0000:03:00.0"};
    symmem_comm_t a = shell(2, 0, pid, gpu1), b = shell(2, 0, pid, gpu1), o = shell(2, 0, pid, gpu2),
                  e = shell(2, 0, pid, gpu1);
    for (symmem_comm_t *x = (symmem_comm_t[]){a, b, o, e}, *end = x + 4; x < end; x++)
        (*x)->coll->grid.max_grid = 60, (*x)->coll->capacity = 100;
    e->coll->grid.max_grid = 40;
    char out[4096];
    captured_t k;
    capture_start(&k);
    symmem_coll_residency_add(a);
    symmem_coll_residency_add(o); /* another GPU: no warning */
    fflush(stderr);
    const off_t before = lseek(k.fd, 0, SEEK_END);
    symmem_coll_residency_add(b); /* 120 > 100 on GPU 01 */
    capture_end(&k, out, sizeof out);
    CHECK(before >= 0 && before < (off_t)sizeof out);
    /* the first two fit: no warning until the third (other lines, e.g. about the environment, may come) */
    CHECK(strstr(out + before, "0000:01:00.0") && strstr(out + before, "120 thread blocks") &&
          strstr(out + before, "SYMMEM_GRID_SHARE"));
    out[before] = '\0';
    CHECK(!strstr(out, "thread blocks"));
    /* b gone: a and e fit (100 blocks), as they would not beside b */
    symmem_coll_residency_remove(b);
    symmem_coll_residency_remove(b); /* a no-op */
    capture_start(&k);
    symmem_coll_residency_add(e);
    capture_end(&k, out, sizeof out);
    CHECK(!strstr(out, "thread blocks"));
    for (symmem_comm_t *x = (symmem_comm_t[]){a, b, o, e}, *end = x + 4; x < end; x++) {
        symmem_coll_residency_remove(*x);
        shell_free(*x);
    }
}

/* A timeout's message gains what residency may have to do with it: blocks that never started, a peer on
 * this GPU (with SYMMEM_CLUSTER_ROOM's default from the parameter table); other records gain nothing. */
static void timeout_explained(void)
{
    const int pid[] = {100, 101, 102};
    const char *const bus[] = {"0000:01:00.0", "0000:01:00.0", "0000:02:00.0"};
    symmem_comm_t c = shell(3, 0, pid, bus);
    symmem_coll_error_record_t rec;
    memset(&rec, 0, sizeof rec);
    rec.reason = SYMMEM_COLL_ERR_TIMEOUT;
    rec.rank = 0;
    rec.peer = 2; /* another GPU */
    rec.started = 8;
    rec.grid = 8;
    char msg[2048] = "timed out";
    symmem_coll_residency_explain(c, &rec, msg, sizeof msg);
    CHECK(strcmp(msg, "timed out") == 0);
    rec.started = 3;
    symmem_coll_residency_explain(c, &rec, msg, sizeof msg);
    CHECK(strstr(msg, "Only 3 of the kernel's 8 blocks had started on rank 0") && !strstr(msg, "runs on this GPU"));
    rec.started = 8;
    rec.peer = 1; /* this GPU */
    snprintf(msg, sizeof msg, "timed out");
    symmem_coll_residency_explain(c, &rec, msg, sizeof msg);
    char room[96];
    snprintf(room, sizeof room, "SYMMEM_CLUSTER_ROOM=%s (the default) or more",
             symmem_param_default(SYMMEM_PARAM_CLUSTER_ROOM));
    CHECK(strstr(msg, "Rank 1 runs on this GPU too (0000:01:00.0)") && strstr(msg, room));
    rec.reason = SYMMEM_COLL_ERR_MISMATCH;
    snprintf(msg, sizeof msg, "mismatch");
    symmem_coll_residency_explain(c, &rec, msg, sizeof msg);
    CHECK(strcmp(msg, "mismatch") == 0);
    shell_free(c);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"grid_is_the_share_of_the_gpu_divided_among_its_ranks", grid_is_the_share_of_the_gpu_divided_among_its_ranks,
         10},
        {"ranks_sharing_a_gpu_leave_the_room_idle_per_gpc", ranks_sharing_a_gpu_leave_the_room_idle_per_gpc, 30},
        {"default_share_is_three_quarters_of_the_gpu_within_the_room",
         default_share_is_three_quarters_of_the_gpu_within_the_room, 30},
        {"the_room_leaves_a_cluster_room_wherever_the_blocks_land", the_room_leaves_a_cluster_room_wherever_the_blocks_land,
         30},
        {"gpc_count_is_clusters_of_8_less_clusters_of_16", gpc_count_is_clusters_of_8_less_clusters_of_16, 10},
        {"colocated_ranks_counted_once", colocated_ranks_counted_once, 30},
        {"private_streams_need_a_queue_per_rank", private_streams_need_a_queue_per_rank, 30},
        {"legacy_stream_warned_once", legacy_stream_warned_once, 30},
        {"communicators_sharing_a_gpu_warned", communicators_sharing_a_gpu_warned, 30},
        {"timeout_explained", timeout_explained, 30},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
