/* SipHash (src/common/siphash.c): the published SipHash-2-4 vectors check
 * the round code shared with SipHash-1-3, which the cache index uses. */
#include "common/siphash.h"
#include "harness.h"

static void
key_and_message(uint64_t *k0, uint64_t *k1, unsigned char msg[64])
{
    unsigned char key[16];
    for (int i = 0; i < 16; i++)
        key[i] = (unsigned char)i;
    *k0 = *k1 = 0;
    for (int i = 7; i >= 0; i--) {
        *k0 = *k0 << 8 | key[i];
        *k1 = *k1 << 8 | key[8 + i];
    }
    for (int i = 0; i < 64; i++)
        msg[i] = (unsigned char)i;
}

static void
test_siphash24_matches_reference_vectors(void)
{
    /* From the SipHash paper's reference code: key 00..0f, message 00..(n-1). */
    static const struct {
        size_t len;
        uint64_t want;
    } vectors[] = {
        {0, 0x726fdb47dd0e0e31ull},  {1, 0x74f839c593dc67fdull},  {7, 0xab0200f58b01d137ull},
        {8, 0x93f5f5799a932462ull},  {15, 0xa129ca6149be45e5ull}, {16, 0x3f2acc7f57c29bdbull},
        {63, 0x958a324ceb064572ull},
    };
    uint64_t k0, k1;
    unsigned char msg[64];
    key_and_message(&k0, &k1, msg);
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++)
        CHECK_MSG(ect__siphash24(msg, vectors[i].len, k0, k1) == vectors[i].want,
                  "siphash24 of %zu bytes", vectors[i].len);
}

static void
test_siphash13_depends_on_every_byte_length_and_key(void)
{
    uint64_t k0, k1;
    unsigned char msg[64];
    key_and_message(&k0, &k1, msg);
    uint64_t base = ect__siphash13(msg, 40, k0, k1);
    CHECK(base != ect__siphash24(msg, 40, k0, k1));
    CHECK(base != ect__siphash13(msg, 39, k0, k1));
    CHECK(base != ect__siphash13(msg, 40, k0 + 1, k1));
    CHECK(base != ect__siphash13(msg, 40, k0, k1 + 1));
    for (int i = 0; i < 40; i++) {
        msg[i] ^= 1;
        CHECK_MSG(ect__siphash13(msg, 40, k0, k1) != base, "byte %d ignored", i);
        msg[i] ^= 1;
    }
    CHECK_EQ_U64(ect__siphash13(msg, 40, k0, k1), base);
}

static void
test_random_keys_differ(void)
{
    uint64_t a0, a1, b0, b1;
    ect__siphash_random_key(&a0, &a1);
    ect__siphash_random_key(&b0, &b1);
    CHECK(a0 != b0 || a1 != b1);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_siphash24_matches_reference_vectors),
    ECT_CASE(test_siphash13_depends_on_every_byte_length_and_key),
    ECT_CASE(test_random_keys_differ),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
