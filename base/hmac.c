#include "base/hmac.h"

#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

static uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static uint32_t load_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void store_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* FIPS 180-4 section 6.2.2: one 64-byte block. */
static void compress(uint32_t h[8], const unsigned char *block)
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++) w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t S1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
        uint32_t ch = (e & f) ^ (~e & g);
        uint32_t t1 = k + S1 + ch + K[t] + w[t];
        uint32_t S0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
        uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
        uint32_t t2 = S0 + maj;
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void symmem_sha256_init(symmem_sha256_t *s)
{
    static const uint32_t iv[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                   0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
    memcpy(s->h, iv, sizeof iv);
    s->bytes = 0;
    s->nbuf = 0;
}

void symmem_sha256_update(symmem_sha256_t *s, const void *data, size_t len)
{
    const unsigned char *p = data;
    s->bytes += len;
    if (s->nbuf) {
        size_t take = SYMMEM_SHA256_BLOCK - s->nbuf < len ? SYMMEM_SHA256_BLOCK - s->nbuf : len;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take, p += take, len -= take;
        if (s->nbuf < SYMMEM_SHA256_BLOCK) return;
        compress(s->h, s->buf);
        s->nbuf = 0;
    }
    for (; len >= SYMMEM_SHA256_BLOCK; p += SYMMEM_SHA256_BLOCK, len -= SYMMEM_SHA256_BLOCK) compress(s->h, p);
    if (len) memcpy(s->buf, p, len);
    s->nbuf = len;
}

void symmem_sha256_final(symmem_sha256_t *s, unsigned char out[SYMMEM_SHA256_BYTES])
{
    uint64_t bits = s->bytes * 8;
    /* Padding: 0x80, zeros to 56 mod 64, the 64-bit big-endian bit length. */
    s->buf[s->nbuf++] = 0x80;
    if (s->nbuf > 56) {
        memset(s->buf + s->nbuf, 0, SYMMEM_SHA256_BLOCK - s->nbuf);
        compress(s->h, s->buf);
        s->nbuf = 0;
    }
    memset(s->buf + s->nbuf, 0, 56 - s->nbuf);
    store_be32(s->buf + 56, (uint32_t)(bits >> 32));
    store_be32(s->buf + 60, (uint32_t)bits);
    compress(s->h, s->buf);
    for (int i = 0; i < 8; i++) store_be32(out + 4 * i, s->h[i]);
    symmem_wipe(s, sizeof *s);
}

void symmem_sha256(const void *data, size_t len, unsigned char out[SYMMEM_SHA256_BYTES])
{
    symmem_sha256_t s;
    symmem_sha256_init(&s);
    symmem_sha256_update(&s, data, len);
    symmem_sha256_final(&s, out);
}

void symmem_hmac_init(symmem_hmac_t *h, const void *key, size_t keylen)
{
    unsigned char k[SYMMEM_SHA256_BLOCK], pad[SYMMEM_SHA256_BLOCK];
    memset(k, 0, sizeof k);
    if (keylen > SYMMEM_SHA256_BLOCK) symmem_sha256(key, keylen, k); /* RFC 2104: long keys are hashed first */
    else if (keylen) memcpy(k, key, keylen);
    for (int i = 0; i < SYMMEM_SHA256_BLOCK; i++) pad[i] = (unsigned char)(k[i] ^ 0x36);
    symmem_sha256_init(&h->inner);
    symmem_sha256_update(&h->inner, pad, sizeof pad);
    for (int i = 0; i < SYMMEM_SHA256_BLOCK; i++) pad[i] = (unsigned char)(k[i] ^ 0x5c);
    symmem_sha256_init(&h->outer);
    symmem_sha256_update(&h->outer, pad, sizeof pad);
    symmem_wipe(k, sizeof k);
    symmem_wipe(pad, sizeof pad);
}

void symmem_hmac_update(symmem_hmac_t *h, const void *data, size_t len) { symmem_sha256_update(&h->inner, data, len); }

void symmem_hmac_final(symmem_hmac_t *h, unsigned char out[SYMMEM_SHA256_BYTES])
{
    unsigned char inner[SYMMEM_SHA256_BYTES];
    symmem_sha256_final(&h->inner, inner);
    symmem_sha256_update(&h->outer, inner, sizeof inner);
    symmem_sha256_final(&h->outer, out);
    symmem_wipe(inner, sizeof inner);
}

void symmem_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
                        unsigned char out[SYMMEM_SHA256_BYTES])
{
    symmem_hmac_t h;
    symmem_hmac_init(&h, key, keylen);
    symmem_hmac_update(&h, data, len);
    symmem_hmac_final(&h, out);
}

int symmem_ct_equal(const void *a, const void *b, size_t n)
{
    const volatile unsigned char *x = a, *y = b;
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(x[i] ^ y[i]);
    return d == 0;
}

void symmem_wipe(void *p, size_t n)
{
    volatile unsigned char *v = p;
    while (n--) *v++ = 0;
}
