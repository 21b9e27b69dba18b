/* Host backend: memfd shared memory with the same protocol as the CUDA backend, so bootstrap, descriptor
 * passing, mapping tables and error paths run (and are tested) on machines without a GPU. A handle is the
 * memfd itself. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "alloc/alloc.h"
#include "core/status.h"

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
    int fd = memfd_create("symmem", MFD_CLOEXEC);
    if (fd < 0) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        return symmem_set_error(e == ENOMEM || e == EFBIG ? SYMMEM_OUT_OF_MEMORY : SYMMEM_SYSTEM_ERROR,
                                "ftruncate of a %zu-byte memfd: %s", bytes, strerror(e));
    }
    *handle = (uint64_t)fd;
    return SYMMEM_OK;
}

static symmem_status_t h_dup(int fd, int *out)
{
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) return symmem_set_error(SYMMEM_SYSTEM_ERROR, "dup of a memfd: %s", strerror(errno));
    *out = d;
    return SYMMEM_OK;
}

static symmem_status_t h_export(uint64_t handle, int *fd) { return h_dup((int)handle, fd); }

static symmem_status_t h_import(int fd, uint64_t *handle)
{
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
