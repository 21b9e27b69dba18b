/* Host backend: memfd shared memory with the same protocol as the CUDA backend, so bootstrap, descriptor
 * passing, mapping tables and error paths run (and are tested) on machines without a GPU. A handle is the
 * memfd itself. Each memfd is sealed at its size (no shrinking, no growing, no more seals), and an imported
 * one is mapped only if it carries those seals and covers the whole stride: a peer's memory that could
 * shrink under the mapping would kill this rank with SIGBUS. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "base/status.h"

#define SIZE_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static symmem_status_t h_granularity(symmem_comm_t c, symmem_placement_t pl, int node, size_t *gran)
{
    (void)c, (void)pl, (void)node;
    *gran = (size_t)sysconf(_SC_PAGESIZE);
    return SYMMEM_OK;
}

static size_t h_capacity(symmem_comm_t c, symmem_placement_t pl)
{
    (void)c, (void)pl;
    return (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)sysconf(_SC_PAGESIZE);
}

static symmem_status_t h_create(symmem_comm_t c, symmem_placement_t pl, int node, size_t bytes, uint64_t *handle)
{
    (void)c, (void)pl, (void)node;
    int fd = memfd_create("symmem", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "memfd_create: %s", symmem_errno_string(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        return symmem_set_error(e == ENOMEM || e == EFBIG ? SYMMEM_OUT_OF_MEMORY : SYMMEM_SYSTEM_ERROR,
                                "ftruncate of a %zu-byte memfd: %s", bytes, strerror(e));
    }
    if (fcntl(fd, F_ADD_SEALS, SIZE_SEALS) != 0) {
        int e = errno;
        close(fd);
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "sealing a memfd: %s", strerror(e));
    }
    *handle = (uint64_t)fd;
    return SYMMEM_OK;
}

static symmem_status_t h_dup(int fd, int *out)
{
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "dup of a memfd: %s", symmem_errno_string(errno));
    *out = d;
    return SYMMEM_OK;
}

static symmem_status_t h_export(uint64_t handle, int *fd) { return h_dup((int)handle, fd); }

/* A peer's descriptor: a sealed memfd (or another sealable shared-memory file) whose size cannot change. */
static symmem_status_t h_import(int fd, uint64_t *handle)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return symmem_set_error(SYMMEM_PEER_FAILURE,
                                "a peer's memory descriptor is not a memfd (not a regular file): refused");
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW))
        return symmem_set_error(SYMMEM_PEER_FAILURE,
                                "a peer's memfd is not sealed against resizing (seals 0x%x): it could shrink under "
                                "the mapping; refused",
                                seals < 0 ? 0 : seals);
    int d = -1;
    SYMMEM_CHECK(h_dup(fd, &d));
    *handle = (uint64_t)d;
    return SYMMEM_OK;
}

static void h_release(uint64_t handle) { close((int)handle); }

static symmem_status_t h_reserve(size_t bytes, size_t align, char **va)
{
    (void)align; /* mmap returns page-aligned addresses, which is the host granularity */
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "reserving %zu bytes of address space: %s", bytes, strerror(errno));
    *va = p;
    return SYMMEM_OK;
}

static void h_unreserve(char *va, size_t bytes) { munmap(va, bytes); }

static symmem_status_t h_map(char *va, size_t bytes, uint64_t handle)
{
    /* Pages past the end of the file would raise SIGBUS when touched: the file must cover the mapping. Its
     * size is final (h_import checked the seals). */
    struct stat st;
    if (fstat((int)handle, &st) != 0)
        return symmem_set_error(SYMMEM_SYSTEM_ERROR, "fstat of a peer's memfd: %s", strerror(errno));
    if ((uint64_t)st.st_size < bytes)
        return symmem_set_error(SYMMEM_PEER_FAILURE,
                                "a peer's memfd is %lld bytes, smaller than the %zu-byte stride of this allocation: "
                                "refused (the ranks disagree on the allocation, or a peer sent another file)",
                                (long long)st.st_size, bytes);
    void *p = mmap(va, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, (int)handle, 0);
    if (p == MAP_FAILED) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "mapping a peer memfd: %s", strerror(errno));
    return SYMMEM_OK;
}

static void h_unmap(char *va, size_t bytes)
{
    /* Back to an inaccessible reservation, so the range stays ours until unreserve. */
    mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

static symmem_status_t h_set_access(symmem_comm_t c, symmem_placement_t pl, char *va, size_t bytes)
{
    (void)c, (void)pl, (void)va, (void)bytes;
    return SYMMEM_OK;
}

static symmem_status_t h_zero(void *ptr, size_t bytes)
{
    memset(ptr, 0, bytes);
    return SYMMEM_OK;
}

static symmem_status_t h_make_table(void *const *host, size_t n, void ***out)
{
    void **t = malloc(n * sizeof *t);
    if (!t) return symmem_set_error(SYMMEM_OUT_OF_MEMORY, "out of host memory");
    memcpy(t, host, n * sizeof *t);
    *out = t;
    return SYMMEM_OK;
}

static void h_free_table(void **t) { free(t); }

const symmem_mem_ops_t symmem_mem_ops_host = {
    "host",  h_granularity, h_capacity, h_create, h_export,     h_import, h_release,  h_reserve,
    h_unreserve, h_map,     h_unmap,    h_set_access, h_zero, h_make_table, h_free_table,
};
