/* A program built against an installed symmem (pkg-config or find_package): prints the version it runs
 * with and does one symmetric allocation across two ranks with the host backend (no GPU needed). */
#include <stdio.h>
#include <string.h>

#include <symmem/symmem.h>

static int fail(const char *what, symmem_status_t st)
{
    fprintf(stderr, "consumer: %s: %s: %s\n", what, symmem_status_name(st), symmem_last_error());
    return 1;
}

int main(void)
{
    printf("symmem %d (built against %d)\n", symmem_version(), SYMMEM_VERSION);
    if (symmem_version() != SYMMEM_VERSION) return 1;
    symmem_options_t o = SYMMEM_OPTIONS_INIT;
    o.backend = SYMMEM_BACKEND_HOST;
    symmem_comm_t comms[2];
    symmem_buffer_t bufs[2];
    symmem_status_t st = symmem_comm_init_all(2, NULL, &o, comms);
    if (st != SYMMEM_OK) return fail("symmem_comm_init_all", st);
    if ((st = symmem_group_start()) != SYMMEM_OK) return fail("symmem_group_start", st);
    for (int r = 0; r < 2; r++)
        if ((st = symmem_alloc(comms[r], 4096, &bufs[r])) != SYMMEM_OK) return fail("symmem_alloc", st);
    if ((st = symmem_group_end()) != SYMMEM_OK) return fail("symmem_group_end", st);
    strcpy(symmem_buffer_ptr(bufs[1]), "written by rank 1");
    const char *seen = symmem_buffer_peer_ptr(bufs[0], 1);
    printf("rank 0 reads rank 1's buffer: %s\n", seen);
    int ok = strcmp(seen, "written by rank 1") == 0;
    for (int r = 0; r < 2; r++) symmem_free(bufs[r]), symmem_comm_destroy(comms[r]);
    return ok ? 0 : 1;
}
