/* SHA-256 and HMAC-SHA256 against the published vectors: the FIPS 180-2 examples (appendix B) and all seven
 * test cases of RFC 4231; plus length sweeps across the block boundaries (digests of the sweeps computed with
 * Python's hashlib/hmac, an independent implementation), incremental updates in odd pieces, and the
 * constant-time compare. */
#include <stdlib.h>
#include <string.h>

#include "base/hmac.h"
#include "test_util.h"

static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_digest(const unsigned char *d, size_t n, const char *want)
{
    char got[2 * SYMMEM_SHA256_BYTES + 1];
    hex(d, n, got);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "got  %s\nwant %s\n", got, want);
        exit(1);
    }
}

static void sha256_fips_examples(void)
{
    unsigned char d[SYMMEM_SHA256_BYTES];
    symmem_sha256("abc", 3, d);
    check_digest(d, 32, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    symmem_sha256("", 0, d);
    check_digest(d, 32, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    symmem_sha256(m448, strlen(m448), d);
    check_digest(d, 32, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                       "mnopqrstnopqrstu";
    symmem_sha256(m896, strlen(m896), d);
    check_digest(d, 32, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    /* one million 'a', fed in pieces of 997 bytes so the buffered path is exercised too */
    char piece[997];
    memset(piece, 'a', sizeof piece);
    symmem_sha256_t s;
    symmem_sha256_init(&s);
    size_t left = 1000000;
    while (left) {
        size_t n = left < sizeof piece ? left : sizeof piece;
        symmem_sha256_update(&s, piece, n);
        left -= n;
    }
    symmem_sha256_final(&s, d);
    check_digest(d, 32, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Every length 0..299 (crossing the 55/56/64-byte padding cases several times), one byte at a time and in
 * one call: the two must agree, and the digest of all digests must match hashlib's. */
static void sha256_length_sweep(void)
{
    symmem_sha256_t acc;
    symmem_sha256_init(&acc);
    unsigned char msg[300];
    for (int i = 0; i < 300; i++) msg[i] = (unsigned char)(i % 251);
    for (size_t n = 0; n < 300; n++) {
        unsigned char one[32], bytewise[32];
        symmem_sha256(msg, n, one);
        symmem_sha256_t s;
        symmem_sha256_init(&s);
        for (size_t i = 0; i < n; i++) symmem_sha256_update(&s, msg + i, 1);
        symmem_sha256_final(&s, bytewise);
        CHECK(memcmp(one, bytewise, 32) == 0);
        symmem_sha256_update(&acc, one, 32);
    }
    unsigned char d[32];
    symmem_sha256_final(&acc, d);
    check_digest(d, 32, "fa70b867db0a30acb7218d62945db0df52eb393808b30675ea9aac6b058a9a9d");
}

static void fill(unsigned char *p, size_t n, unsigned char v)
{
    memset(p, v, n);
}

static void hmac_rfc4231(void)
{
    unsigned char key[131], data[160], d[32];
    /* 1 */
    fill(key, 20, 0x0b);
    symmem_hmac_sha256(key, 20, "Hi There", 8, d);
    check_digest(d, 32, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* 2: a key shorter than the output */
    const char *m2 = "what do ya want for nothing?";
    symmem_hmac_sha256("Jefe", 4, m2, strlen(m2), d);
    check_digest(d, 32, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* 3 */
    fill(key, 20, 0xaa);
    fill(data, 50, 0xdd);
    symmem_hmac_sha256(key, 20, data, 50, d);
    check_digest(d, 32, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    /* 4 */
    for (int i = 0; i < 25; i++) key[i] = (unsigned char)(i + 1);
    fill(data, 50, 0xcd);
    symmem_hmac_sha256(key, 25, data, 50, d);
    check_digest(d, 32, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    /* 5: the RFC gives the first 128 bits only */
    fill(key, 20, 0x0c);
    symmem_hmac_sha256(key, 20, "Test With Truncation", 20, d);
    check_digest(d, 16, "a3b6167473100ee06e0c796c2955552b");
    /* 6, 7: keys longer than a block are hashed first */
    fill(key, 131, 0xaa);
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    symmem_hmac_sha256(key, 131, m6, strlen(m6), d);
    check_digest(d, 32, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const char *m7 = "This is a test using a larger than block-size key and a larger than block-size data. The key "
                     "needs to be hashed before being used by the HMAC algorithm.";
    symmem_hmac_sha256(key, 131, m7, strlen(m7), d);
    check_digest(d, 32, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
    /* incremental = one shot */
    symmem_hmac_t h;
    symmem_hmac_init(&h, key, 131);
    for (size_t i = 0; i < strlen(m7); i += 7) symmem_hmac_update(&h, m7 + i, strlen(m7) - i < 7 ? strlen(m7) - i : 7);
    symmem_hmac_final(&h, d);
    check_digest(d, 32, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/* Key lengths 0..198 in steps of 3 (below, at and above the 64-byte block), messages of 2n+1 bytes. */
static void hmac_key_length_sweep(void)
{
    symmem_sha256_t acc;
    symmem_sha256_init(&acc);
    unsigned char key[200], msg[400];
    for (int n = 0; n < 200; n += 3) {
        for (int i = 0; i < n; i++) key[i] = (unsigned char)((7 * i + 1) % 256);
        for (int i = 0; i < 2 * n + 1; i++) msg[i] = (unsigned char)(i % 253);
        unsigned char d[32];
        symmem_hmac_sha256(key, (size_t)n, msg, (size_t)(2 * n + 1), d);
        symmem_sha256_update(&acc, d, 32);
    }
    unsigned char d[32];
    symmem_sha256_final(&acc, d);
    check_digest(d, 32, "d7c83f5861d25aae1f7923c49b088a55b641ba282819aa33f15fb7a3d179bb5b");
}

static void constant_time_compare(void)
{
    unsigned char a[32], b[32];
    for (int i = 0; i < 32; i++) a[i] = b[i] = (unsigned char)i;
    CHECK(symmem_ct_equal(a, b, 32));
    for (int i = 0; i < 32; i++) {
        b[i] ^= 0x80;
        CHECK(!symmem_ct_equal(a, b, 32));
        b[i] ^= 0x80;
    }
    CHECK(symmem_ct_equal(a, b, 0));
    symmem_wipe(a, sizeof a);
    for (int i = 0; i < 32; i++) CHECK(a[i] == 0);
}

int main(void)
{
    static const test_case_t cases[] = {
        {"sha256_fips_examples", sha256_fips_examples, 30},
        {"sha256_length_sweep", sha256_length_sweep, 30},
        {"hmac_rfc4231", hmac_rfc4231, 10},
        {"hmac_key_length_sweep", hmac_key_length_sweep, 10},
        {"constant_time_compare", constant_time_compare, 10},
    };
    return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));
}
