/* The test pattern: see pattern.h. */
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

#include "pattern.h"

void
ect_pattern_mm_hash(unsigned index, char out[65])
{
    char text[32];
    int n = snprintf(text, sizeof(text), "ectier-test-%u", index);
    unsigned char md[32];
    unsigned int md_len = 0;
    EVP_Digest(text, (size_t)n, md, &md_len, EVP_sha256(), NULL);
    for (unsigned i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static uint64_t
fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

static uint64_t
splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void
put_le64(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void
ect_pattern_fill(const char *mm_hash, uint8_t *buf, size_t len)
{
    uint64_t state = fnv1a64(mm_hash);
    for (size_t off = 0; off < len; off += 8)
        put_le64(buf + off, splitmix64(&state), len - off < 8 ? len - off : 8);
}

size_t
ect_pattern_check(const char *mm_hash, const uint8_t *buf, size_t len)
{
    uint64_t state = fnv1a64(mm_hash);
    for (size_t off = 0; off < len; off += 8) {
        uint8_t want[8];
        size_t n = len - off < 8 ? len - off : 8;
        put_le64(want, splitmix64(&state), n);
        for (size_t i = 0; i < n; i++)
            if (buf[off + i] != want[i])
                return off + i;
    }
    return len;
}
