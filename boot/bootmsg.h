/* The bootstrap's wire format: message headers, their checks, the handshake transcript MAC and the socket
 * names. Pure functions (no sockets), so the decoder can be fuzzed (tests/fuzz/fuzz_bootmsg.c) and the
 * handshake rules tested alone. Byte order is the host's: every rank runs on one host.
 *
 * Handshake (rank c < rank l; c connects to l's socket; see docs/security.md):
 *   c -> l  HELLO      header(rank c, nranks_c) + nonce_c
 *   l -> c  CHALLENGE  header(rank l, nranks_l) + nonce_l + MAC("listener", ...)
 *   c -> l  PROOF      MAC("connector", ...)
 *   l -> c  WELCOME    status (0: admitted; 1: admitted, but the rank counts differ)
 * MAC(role, ...) = HMAC-SHA256(secret, label | role | tag | c | l | nranks_c | nranks_l | nonce_c | nonce_l),
 * label "symmem-boot-v2" with its NUL, role one byte, the four integers 4 bytes little-endian each (so ranks
 * of two builds agree; tests/unit/test_bootstrap.c composes it byte for byte): both nonces are fresh, both
 * directions are bound to the ranks, the counts and the id's tag, and the secret itself never crosses the
 * socket. ABORT (the status and error text of a rank that gave up) tells connected peers why, so they can
 * name the real cause. DATA and FD carry the collectives after setup. */
#ifndef SYMMEM_BOOT_BOOTMSG_H
#define SYMMEM_BOOT_BOOTMSG_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SYMMEM_BOOT_MSG_MAGIC 0x424d5953u /* "SYMB" */
#define SYMMEM_BOOT_PROTO 2
#define SYMMEM_BOOT_NONCE_BYTES 32
#define SYMMEM_BOOT_MAC_BYTES 32
#define SYMMEM_BOOT_ABORT_TEXT 256                               /* bytes of text in an ABORT */
#define SYMMEM_BOOT_ABORT_MAX (sizeof(int32_t) + SYMMEM_BOOT_ABORT_TEXT) /* its payload: status + text */
#define SYMMEM_BOOT_DATA_MAX (64u * 1024u) /* payload of one allgather contribution */
#define SYMMEM_BOOT_NAME_HEX 32            /* hex digits of a socket name's secret-derived part */

typedef enum symmem_boot_msg_type {
    SYMMEM_BOOT_HELLO = 1,
    SYMMEM_BOOT_CHALLENGE = 2,
    SYMMEM_BOOT_PROOF = 3,
    SYMMEM_BOOT_WELCOME = 4,
    SYMMEM_BOOT_ABORT = 5,
    SYMMEM_BOOT_DATA = 6,
    SYMMEM_BOOT_FD = 7,
    SYMMEM_BOOT_MSG_TYPES
} symmem_boot_msg_type_t;

/* Fixed header of every message; crosses processes. */
typedef struct symmem_boot_hdr {
    uint32_t magic; /* SYMMEM_BOOT_MSG_MAGIC */
    uint16_t proto; /* SYMMEM_BOOT_PROTO */
    uint16_t type;  /* symmem_boot_msg_type_t */
    uint64_t seq;   /* collective call number (DATA, FD); 0 otherwise */
    uint32_t len;   /* payload bytes following the header */
    int32_t rank;   /* sender */
    int32_t nranks; /* the sender's rank count */
    uint32_t nfds;  /* descriptors attached to the message: 1 for FD, 0 otherwise */
} symmem_boot_hdr_t;
static_assert(sizeof(symmem_boot_hdr_t) == 32, "symmem_boot_hdr_t crosses processes: keep its layout fixed");

/* Fixed payloads. */
typedef struct symmem_boot_challenge {
    unsigned char nonce[SYMMEM_BOOT_NONCE_BYTES];
    unsigned char mac[SYMMEM_BOOT_MAC_BYTES];
} symmem_boot_challenge_t;
typedef struct symmem_boot_welcome {
    int32_t status; /* SYMMEM_BOOT_WELCOME_* */
    uint32_t reserved;
} symmem_boot_welcome_t;
enum { SYMMEM_BOOT_WELCOME_OK = 0, SYMMEM_BOOT_WELCOME_NRANKS_DIFFER = 1 };

/* Largest message of the handshake (an ABORT): what a connection's receive buffer must hold. */
#define SYMMEM_BOOT_HS_MAX (sizeof(symmem_boot_hdr_t) + SYMMEM_BOOT_ABORT_MAX)

/* Fill a header. */
void symmem_boot_hdr_make(symmem_boot_hdr_t *h, symmem_boot_msg_type_t type, int rank, int nranks, uint64_t seq,
                          uint32_t len);

/* Check a header on its own: magic, protocol, a known type, a length the type allows (exact for fixed
 * payloads), rank in [0, nranks), nranks in [1, SYMMEM_MAX_RANKS], nfds 1 for FD and 0 otherwise. Returns
 * NULL when acceptable, else a static text saying what is wrong (for a log line or an error); a header
 * that fails and holds the magic again is called a message cut short, not another version. */
const char *symmem_boot_hdr_check(const symmem_boot_hdr_t *h);

/* Find one whole message at the start of buf[0, n): returns its total length (header + payload) with *h
 * filled and *payload pointing into buf; 0 when more bytes are needed; -1 when the bytes cannot be a
 * message of this protocol (*why says why). max_payload bounds what the caller accepts (a handshake
 * connection takes at most SYMMEM_BOOT_ABORT_MAX). */
long symmem_boot_parse(const unsigned char *buf, size_t n, size_t max_payload, symmem_boot_hdr_t *h,
                       const unsigned char **payload, const char **why);

/* Which handshake step a connection is at, and whether msg type `type` may come next from the other side:
 * the listener side expects HELLO then PROOF; the connector side CHALLENGE then WELCOME (or ABORT at any
 * time). Returns NULL if allowed, else why not. */
typedef enum symmem_boot_hs_step {
    SYMMEM_BOOT_HS_WAIT_HELLO,     /* listener side */
    SYMMEM_BOOT_HS_WAIT_PROOF,     /* listener side */
    SYMMEM_BOOT_HS_WAIT_CHALLENGE, /* connector side */
    SYMMEM_BOOT_HS_WAIT_WELCOME,   /* connector side */
} symmem_boot_hs_step_t;
const char *symmem_boot_hs_expect(symmem_boot_hs_step_t step, const symmem_boot_hdr_t *h);

/* The handshake MAC. role: 'L' (listener proves) or 'C' (connector proves). */
void symmem_boot_mac(const unsigned char *secret, size_t secret_len, const unsigned char *tag, size_t tag_len,
                     char role, int connector, int listener, int connector_nranks, int listener_nranks,
                     const unsigned char nonce_c[SYMMEM_BOOT_NONCE_BYTES],
                     const unsigned char nonce_l[SYMMEM_BOOT_NONCE_BYTES], unsigned char out[SYMMEM_BOOT_MAC_BYTES]);

/* The secret-derived part of rank `rank`'s socket name: SYMMEM_BOOT_NAME_HEX hex digits of
 * HMAC-SHA256(secret, "symmem-boot-name" with its NUL | tag | rank as 4 bytes little-endian): its first 16
 * bytes in lowercase hex, plus a NUL. Without the secret the names of ranks that have not bound yet cannot be
 * predicted, even from the names already visible in /proc/net/unix. */
void symmem_boot_name(const unsigned char *secret, size_t secret_len, const unsigned char *tag, size_t tag_len,
                      int rank, char out[SYMMEM_BOOT_NAME_HEX + 1]);

#ifdef __cplusplus
}
#endif
#endif
