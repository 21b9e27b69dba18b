/* The bootstrap's message decoder (boot/bootmsg.c) on any byte stream, as a connection would deliver it:
 * messages are parsed one after another; every accepted header must be one symmem_boot_hdr_make can
 * produce, and its payload must fit what the type allows; the handshake rules and the MAC run on whatever
 * was accepted. The first byte picks the payload limit (a handshake connection's, or the data phase's). */
#include "base/hmac.h"
#include "boot/bootmsg.h"
#include "fuzz.h"
#include "symmem/symmem.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    size_t max = data[0] & 1 ? SYMMEM_BOOT_DATA_MAX : SYMMEM_BOOT_ABORT_MAX;
    /* a copy of exactly the input's size, so a read past it is an ASan report */
    uint8_t *buf = malloc(size - 1 ? size - 1 : 1);
    if (!buf) abort();
    memcpy(buf, data + 1, size - 1);
    size_t off = 0, n = size - 1;
    while (off < n) {
        symmem_boot_hdr_t h;
        const unsigned char *payload = NULL;
        const char *why = NULL;
        long got = symmem_boot_parse(buf + off, n - off, max, &h, &payload, &why);
        if (got < 0) {
            FUZZ_ASSERT(why != NULL);
            break;
        }
        if (got == 0) break; /* a partial message: a connection would wait for more */
        FUZZ_ASSERT((size_t)got == sizeof h + h.len && (size_t)got <= n - off && h.len <= max);
        FUZZ_ASSERT(symmem_boot_hdr_check(&h) == NULL);
        FUZZ_ASSERT(h.rank >= 0 && h.rank < h.nranks && h.nranks <= SYMMEM_MAX_RANKS);
        symmem_boot_hdr_t again;
        symmem_boot_hdr_make(&again, (symmem_boot_msg_type_t)h.type, h.rank, h.nranks, h.seq, h.len);
        FUZZ_ASSERT(memcmp(&again, &h, sizeof h) == 0);
        for (int step = SYMMEM_BOOT_HS_WAIT_HELLO; step <= SYMMEM_BOOT_HS_WAIT_WELCOME; step++)
            (void)symmem_boot_hs_expect((symmem_boot_hs_step_t)step, &h);
        if (h.type == SYMMEM_BOOT_HELLO || h.type == SYMMEM_BOOT_CHALLENGE) {
            unsigned char secret[32] = {1}, tag[16] = {2}, mac[SYMMEM_BOOT_MAC_BYTES];
            symmem_boot_mac(secret, sizeof secret, tag, sizeof tag, 'L', h.rank, h.nranks - 1, h.nranks, h.nranks,
                            payload, payload, mac);
            FUZZ_ASSERT(symmem_ct_equal(mac, mac, sizeof mac));
        }
        off += (size_t)got;
    }
    free(buf);
    return 0;
}
