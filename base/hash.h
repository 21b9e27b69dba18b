/* The one hash of the tree: FNV-1a (http://www.isthe.com/chongo/tech/comp/fnv/), 64 and 32 bits. Not
 * cryptographic (the bootstrap's secrets use base/hmac.h). What it keys:
 *  - the host hash every rank compares at init, the table hash ranks compare at init, the tag of each call
 *    (compared between ranks by the kernels): values of one build, never stored;
 *  - the slots of the sets of live handles (base/handles.c): values of one process, never stored;
 *  - the topology fingerprint (cache file names) and the communicator fingerprint (tuning-file sections):
 *    stored, so their inputs and steps must not change (symmem_fnv32_word below exists for the latter). */
#ifndef SYMMEM_BASE_HASH_H
#define SYMMEM_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SYMMEM_FNV64_INIT 0xcbf29ce484222325ull
#define SYMMEM_FNV64_PRIME 0x100000001b3ull
#define SYMMEM_FNV32_INIT 2166136261u
#define SYMMEM_FNV32_PRIME 16777619u

/* Bytes [p, p + n) into h. */
static inline uint64_t symmem_fnv64(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * SYMMEM_FNV64_PRIME;
    return h;
}

/* A NUL-terminated string, then the byte 0xff: a separator, so "ab" + "c" differs from "a" + "bc". */
static inline uint64_t symmem_fnv64_str(uint64_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (unsigned char)*s) * SYMMEM_FNV64_PRIME;
    return (h ^ 0xffu) * SYMMEM_FNV64_PRIME;
}

/* The eight bytes of v, least significant first (the same on every host, whatever its byte order). */
static inline uint64_t symmem_fnv64_u64(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xffu)) * SYMMEM_FNV64_PRIME;
    return h;
}

static inline uint32_t symmem_fnv32_u64(uint32_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) h = (h ^ (uint32_t)((v >> (8 * i)) & 0xffu)) * SYMMEM_FNV32_PRIME;
    return h;
}

/* One FNV step on a whole 32-bit word instead of its bytes: the communicator fingerprint is built this way
 * and tuning files written earlier name it, so it keeps the step. */
static inline uint32_t symmem_fnv32_word(uint32_t h, uint32_t w) { return (h ^ w) * SYMMEM_FNV32_PRIME; }

/* A 32-bit hash folded to the 16 bits of a call's tag. */
static inline uint32_t symmem_hash_fold16(uint32_t h) { return (h ^ (h >> 16)) & 0xffffu; }

#ifdef __cplusplus
}
#endif
#endif
