/* The collectives over the bootstrap mesh (allgather, barrier, descriptor exchange), every call numbered so
 * that ranks making different calls are told apart. The mesh: boot_mesh.c; the messages: boot_wire.c. */
#include "boot/bootstrap.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "boot/boot_internal.h"

static symmem_status_t check_data(const symmem_boot_t *b, const symmem_boot_hdr_t *h, uint32_t type, size_t len,
                                  int peer, const char *what)
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
    if (bytes > SYMMEM_BOOT_DATA_MAX)
        return symmem_set_error(SYMMEM_INTERNAL_ERROR, "%s: bootstrap allgather of %zu bytes", what, bytes);
    int64_t deadline = boot_now_ms() + b->timeout_ms;
    b->seq++;
    symmem_boot_hdr_t h;
    symmem_boot_hdr_make(&h, SYMMEM_BOOT_DATA, b->rank, b->nranks, b->seq, (uint32_t)bytes);
    for (int peer = 0; peer < b->nranks; peer++)
        if (peer != b->rank) SYMMEM_CHECK(boot_send_msg(b, peer, &h, send, -1, deadline, what));
    memcpy((char *)recv + (size_t)b->rank * bytes, send, bytes);
    for (int peer = 0; peer < b->nranks; peer++) {
        if (peer == b->rank) continue;
        symmem_boot_hdr_t in;
        SYMMEM_CHECK(boot_recv_msg(b, peer, &in, (char *)recv + (size_t)peer * bytes, bytes, NULL, deadline, what));
        SYMMEM_CHECK(check_data(b, &in, SYMMEM_BOOT_DATA, bytes, peer, what));
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
    int64_t deadline = boot_now_ms() + b->timeout_ms;
    b->seq++;
    symmem_boot_hdr_t h;
    symmem_boot_hdr_make(&h, SYMMEM_BOOT_FD, b->rank, b->nranks, b->seq, sizeof tag);
    int fds[SYMMEM_MAX_RANKS];
    for (int r = 0; r < SYMMEM_MAX_RANKS; r++) fds[r] = -1;
    symmem_status_t st = SYMMEM_OK;
    for (int peer = 0; peer < b->nranks && st == SYMMEM_OK; peer++)
        if (peer != b->rank) st = boot_send_msg(b, peer, &h, &tag, my_fd, deadline, what);
    for (int peer = 0; peer < b->nranks && st == SYMMEM_OK; peer++) {
        if (peer == b->rank) continue;
        symmem_boot_hdr_t in;
        uint64_t their_tag = 0;
        st = boot_recv_msg(b, peer, &in, &their_tag, sizeof their_tag, &fds[peer], deadline, what);
        if (st == SYMMEM_OK) st = check_data(b, &in, SYMMEM_BOOT_FD, sizeof tag, peer, what);
        if (st == SYMMEM_OK && their_tag != tag)
            st = symmem_set_error(SYMMEM_PEER_FAILURE, "%s: rank %d sent a descriptor for another allocation", what,
                                  peer);
        if (st == SYMMEM_OK && fds[peer] < 0)
            st = symmem_set_error(SYMMEM_PEER_FAILURE, "%s: rank %d sent no file descriptor", what, peer);
    }
    if (st == SYMMEM_OK) {
        fds[b->rank] = fcntl(my_fd, F_DUPFD_CLOEXEC, 0);
        if (fds[b->rank] < 0)
            st = symmem_set_error(SYMMEM_SYSTEM_ERROR, "%s: dup: %s", what, symmem_errno_string(errno));
    }
    if (st != SYMMEM_OK) {
        for (int r = 0; r < SYMMEM_MAX_RANKS; r++)
            if (fds[r] >= 0) close(fds[r]);
        return st;
    }
    memcpy(fds_out, fds, (size_t)b->nranks * sizeof(int));
    return SYMMEM_OK;
}
