#include "boot/bootmsg.h"

#include <string.h>

#include "base/hmac.h"
#include "symmem/symmem.h"

void symmem_boot_hdr_make(symmem_boot_hdr_t *h, symmem_boot_msg_type_t type, int rank, int nranks, uint64_t seq,
                          uint32_t len)
{
    memset(h, 0, sizeof *h);
    h->magic = SYMMEM_BOOT_MSG_MAGIC;
    h->proto = SYMMEM_BOOT_PROTO;
    h->type = (uint16_t)type;
    h->seq = seq;
    h->len = len;
    h->rank = rank;
    h->nranks = nranks;
    h->nfds = type == SYMMEM_BOOT_FD ? 1 : 0;
}

/* The fields of a header whose magic is right. */
static const char *hdr_fields_check(const symmem_boot_hdr_t *h)
{
    if (h->proto != SYMMEM_BOOT_PROTO) return "another symmem bootstrap protocol version (mixed library versions)";
    if (h->nranks < 1 || h->nranks > SYMMEM_MAX_RANKS) return "rank count out of range";
    if (h->rank < 0 || h->rank >= h->nranks) return "rank out of range";
    if (h->nfds != (h->type == SYMMEM_BOOT_FD ? 1u : 0u)) return "wrong descriptor count for its type";
    switch (h->type) {
    case SYMMEM_BOOT_HELLO: return h->len == SYMMEM_BOOT_NONCE_BYTES ? NULL : "HELLO of the wrong length";
    case SYMMEM_BOOT_CHALLENGE:
        return h->len == sizeof(symmem_boot_challenge_t) ? NULL : "CHALLENGE of the wrong length";
    case SYMMEM_BOOT_PROOF: return h->len == SYMMEM_BOOT_MAC_BYTES ? NULL : "PROOF of the wrong length";
    case SYMMEM_BOOT_WELCOME: return h->len == sizeof(symmem_boot_welcome_t) ? NULL : "WELCOME of the wrong length";
    case SYMMEM_BOOT_ABORT:
        return h->len >= sizeof(int32_t) && h->len <= SYMMEM_BOOT_ABORT_MAX ? NULL : "ABORT of the wrong length";
    case SYMMEM_BOOT_DATA: return h->len <= SYMMEM_BOOT_DATA_MAX ? NULL : "DATA payload too long";
    case SYMMEM_BOOT_FD: return h->len == sizeof(uint64_t) ? NULL : "FD message of the wrong length";
    default: return "unknown message type";
    }
}

/* Does the magic start again inside the header? Then this header was cut short and the next message began
 * where its remaining bytes should be. Only asked of a header that failed its checks: a valid one keeps its
 * verdict whatever its later fields happen to hold. */
static int magic_inside(const symmem_boot_hdr_t *h)
{
    const uint32_t magic = SYMMEM_BOOT_MSG_MAGIC;
    const unsigned char *b = (const unsigned char *)h;
    for (size_t off = 1; off + sizeof magic <= sizeof *h; off++)
        if (memcmp(b + off, &magic, sizeof magic) == 0) return 1;
    return 0;
}

const char *symmem_boot_hdr_check(const symmem_boot_hdr_t *h)
{
    if (h->magic != SYMMEM_BOOT_MSG_MAGIC) return "not a symmem bootstrap message (bad magic)";
    const char *bad = hdr_fields_check(h);
    if (bad && magic_inside(h))
        return "a message cut short by its sender (the next message starts inside its header)";
    return bad;
}

long symmem_boot_parse(const unsigned char *buf, size_t n, size_t max_payload, symmem_boot_hdr_t *h,
                       const unsigned char **payload, const char **why)
{
    if (n < sizeof *h) {
        /* Reject a wrong magic as soon as its bytes are here, not after a whole header's wait. */
        uint32_t magic = SYMMEM_BOOT_MSG_MAGIC;
        if (memcmp(buf, &magic, n < sizeof magic ? n : sizeof magic) != 0) {
            *why = "not a symmem bootstrap message (bad magic)";
            return -1;
        }
        return 0;
    }
    memcpy(h, buf, sizeof *h);
    const char *bad = symmem_boot_hdr_check(h);
    if (!bad && h->len > max_payload) bad = "message longer than this connection accepts";
    if (bad) {
        *why = bad;
        return -1;
    }
    if (n - sizeof *h < h->len) return 0;
    *payload = buf + sizeof *h;
    return (long)(sizeof *h + h->len);
}

const char *symmem_boot_hs_expect(symmem_boot_hs_step_t step, const symmem_boot_hdr_t *h)
{
    switch (step) {
    case SYMMEM_BOOT_HS_WAIT_HELLO: return h->type == SYMMEM_BOOT_HELLO ? NULL : "did not start with a HELLO";
    case SYMMEM_BOOT_HS_WAIT_PROOF: return h->type == SYMMEM_BOOT_PROOF ? NULL : "did not answer the challenge";
    case SYMMEM_BOOT_HS_WAIT_CHALLENGE:
        return h->type == SYMMEM_BOOT_CHALLENGE || h->type == SYMMEM_BOOT_ABORT ? NULL : "did not send a CHALLENGE";
    case SYMMEM_BOOT_HS_WAIT_WELCOME:
        return h->type == SYMMEM_BOOT_WELCOME || h->type == SYMMEM_BOOT_ABORT ? NULL : "did not send a WELCOME";
    }
    return "unknown handshake step";
}

static void put32(symmem_hmac_t *m, int32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    symmem_hmac_update(m, b, sizeof b);
}

void symmem_boot_mac(const unsigned char *secret, size_t secret_len, const unsigned char *tag, size_t tag_len,
                     char role, int connector, int listener, int connector_nranks, int listener_nranks,
                     const unsigned char nonce_c[SYMMEM_BOOT_NONCE_BYTES],
                     const unsigned char nonce_l[SYMMEM_BOOT_NONCE_BYTES], unsigned char out[SYMMEM_BOOT_MAC_BYTES])
{
    static const char label[] = "symmem-boot-v2"; /* keeps these MACs apart from the name derivation's */
    symmem_hmac_t m;
    symmem_hmac_init(&m, secret, secret_len);
    symmem_hmac_update(&m, label, sizeof label);
    symmem_hmac_update(&m, &role, 1);
    symmem_hmac_update(&m, tag, tag_len);
    put32(&m, connector);
    put32(&m, listener);
    put32(&m, connector_nranks);
    put32(&m, listener_nranks);
    symmem_hmac_update(&m, nonce_c, SYMMEM_BOOT_NONCE_BYTES);
    symmem_hmac_update(&m, nonce_l, SYMMEM_BOOT_NONCE_BYTES);
    symmem_hmac_final(&m, out);
}

void symmem_boot_name(const unsigned char *secret, size_t secret_len, const unsigned char *tag, size_t tag_len,
                      int rank, char out[SYMMEM_BOOT_NAME_HEX + 1])
{
    static const char label[] = "symmem-boot-name";
    symmem_hmac_t m;
    unsigned char d[SYMMEM_SHA256_BYTES];
    symmem_hmac_init(&m, secret, secret_len);
    symmem_hmac_update(&m, label, sizeof label);
    symmem_hmac_update(&m, tag, tag_len);
    put32(&m, rank);
    symmem_hmac_final(&m, d);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < SYMMEM_BOOT_NAME_HEX / 2; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[SYMMEM_BOOT_NAME_HEX] = '\0';
}
