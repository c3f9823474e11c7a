/*
 * SipHash-1-3 (see siphash.h).  Words are read little-endian whatever the
 * host order, so a key hashes the same everywhere.
 */
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "common/siphash.h"

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

static uint64_t
load_le64(const unsigned char *p)
{
    return (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24 |
           (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 | (uint64_t)p[6] << 48 |
           (uint64_t)p[7] << 56;
}

/* SipHash-c-d: c compression rounds per word, d finalisation rounds. */
static inline uint64_t
siphash_cd(const void *data, size_t len, uint64_t k0, uint64_t k1, int c, int d)
{
    const unsigned char *p = data;
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ k0;
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ k1;
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ k0;
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ k1;
    size_t whole = len & ~(size_t)7;

    for (size_t i = 0; i < whole; i += 8) {
        uint64_t m = load_le64(p + i);
        v3 ^= m;
        for (int r = 0; r < c; r++)
            SIPROUND;
        v0 ^= m;
    }
    /* The last word carries the tail bytes and the length's low byte. */
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7:
        b |= (uint64_t)p[whole + 6] << 48;
        /* fall through */
    case 6:
        b |= (uint64_t)p[whole + 5] << 40;
        /* fall through */
    case 5:
        b |= (uint64_t)p[whole + 4] << 32;
        /* fall through */
    case 4:
        b |= (uint64_t)p[whole + 3] << 24;
        /* fall through */
    case 3:
        b |= (uint64_t)p[whole + 2] << 16;
        /* fall through */
    case 2:
        b |= (uint64_t)p[whole + 1] << 8;
        /* fall through */
    case 1:
        b |= (uint64_t)p[whole];
        break;
    default:
        break;
    }
    v3 ^= b;
    for (int r = 0; r < c; r++)
        SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    for (int r = 0; r < d; r++)
        SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t
ect__siphash13(const void *data, size_t len, uint64_t k0, uint64_t k1)
{
    return siphash_cd(data, len, k0, k1, 1, 3);
}

uint64_t
ect__siphash24(const void *data, size_t len, uint64_t k0, uint64_t k1)
{
    return siphash_cd(data, len, k0, k1, 2, 4);
}

void
ect__siphash_random_key(uint64_t *k0, uint64_t *k1)
{
    uint64_t k[2];
    if (getrandom(k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uintptr_t)k0;
        k[0] = ect__siphash13(&seed, sizeof(seed), UINT64_C(0x9e3779b97f4a7c15), (uintptr_t)&ts);
        k[1] = ect__siphash13(&seed, sizeof(seed), k[0], (uintptr_t)k1);
    }
    *k0 = k[0];
    *k1 = k[1];
}
