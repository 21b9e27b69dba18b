/* SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the bootstrap's challenge-response: small, no
 * dependency (the Python wheel and the static library must not pull in libcrypto), checked against the FIPS
 * 180 examples and the RFC 4231 vectors by tests/unit/test_hmac.c. Not for bulk data: this is a plain
 * portable implementation, a few hundred MB/s. */
#ifndef SYMMEM_BASE_HMAC_H
#define SYMMEM_BASE_HMAC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SYMMEM_SHA256_BYTES 32
#define SYMMEM_SHA256_BLOCK 64

typedef struct symmem_sha256 {
    uint32_t h[8];
    uint64_t bytes; /* message length so far */
    unsigned char buf[SYMMEM_SHA256_BLOCK];
    size_t nbuf;
} symmem_sha256_t;

void symmem_sha256_init(symmem_sha256_t *s);
void symmem_sha256_update(symmem_sha256_t *s, const void *data, size_t len);
void symmem_sha256_final(symmem_sha256_t *s, unsigned char out[SYMMEM_SHA256_BYTES]);
void symmem_sha256(const void *data, size_t len, unsigned char out[SYMMEM_SHA256_BYTES]);

/* Incremental HMAC-SHA256: init with the key, update with the message in pieces, final. */
typedef struct symmem_hmac {
    symmem_sha256_t inner, outer;
} symmem_hmac_t;

void symmem_hmac_init(symmem_hmac_t *h, const void *key, size_t keylen);
void symmem_hmac_update(symmem_hmac_t *h, const void *data, size_t len);
void symmem_hmac_final(symmem_hmac_t *h, unsigned char out[SYMMEM_SHA256_BYTES]);
void symmem_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        unsigned char out[SYMMEM_SHA256_BYTES]);

/* 1 if the n bytes are equal; the time taken does not depend on where they differ. */
int symmem_ct_equal(const void *a, const void *b, size_t n);
/* Zero memory in a way the compiler may not remove (keys, secrets on the stack). */
void symmem_wipe(void *p, size_t n);

#ifdef __cplusplus
}
#endif
#endif
