/* Residency at init and after (collectives/residency.c), without a GPU: communicator shells whose peers say
 * which process and which GPU each rank has. The grid rule itself is test_coll_model's. */
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
        {"colocated_ranks_counted_once", colocated_ranks_counted_once, 30},
        {"private_streams_need_a_queue_per_rank", private_streams_need_a_queue_per_rank, 30},
        {"legacy_stream_warned_once", legacy_stream_warned_once, 30},
        {"communicators_sharing_a_gpu_warned", communicators_sharing_a_gpu_warned, 30},
        {"timeout_explained", timeout_explained, 30},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
