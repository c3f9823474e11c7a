/* UTF-8: the decoder and the checks on config bytes, identifiers and wire
 * strings (src/common/utf8.h). */
#include "common/utf8.h"
#include "harness.h"

struct bad {
    const char *bytes;
    size_t len;
    size_t bad_off;
    const char *what;
};

static void
test_utf8_accepts_well_formed_text(void)
{
    static const char *const good[] = {
        "",
        "plain ascii {\"k\": 1}",
        "caf\xc3\xa9",      /* U+00E9 */
        "\xe2\x82\xac 5",   /* U+20AC */
        "\xf0\x9f\x98\x80", /* U+1F600 */
        "\xf4\x8f\xbf\xbf", /* U+10FFFF, the last code point */
        "\xed\x9f\xbf",     /* U+D7FF, just below the surrogates */
        "\xee\x80\x80",     /* U+E000, just above them */
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        CHECK_MSG(ect__utf8_valid(good[i], strlen(good[i]), NULL), "case %zu refused", i);
    /* NUL is well-formed UTF-8; the config parser refuses it separately. */
    CHECK(ect__utf8_valid("a\0b", 3, NULL));
}

static void
test_utf8_refuses_malformed_sequences_at_their_offset(void)
{
    static const struct bad bad[] = {
        {"ab\x80", 3, 2, "lone continuation byte"},
        {"\xc0\xaf", 2, 0, "overlong 2-byte"},
        {"\xc1\xbf", 2, 0, "overlong 2-byte (C1)"},
        {"x\xe0\x80\xaf", 4, 1, "overlong 3-byte"},
        {"\xf0\x80\x80\xaf", 4, 0, "overlong 4-byte"},
        {"\xed\xa0\x80", 3, 0, "surrogate U+D800"},
        {"\xed\xbf\xbf", 3, 0, "surrogate U+DFFF"},
        {"\xf4\x90\x80\x80", 4, 0, "above U+10FFFF"},
        {"\xf5\x80\x80\x80", 4, 0, "F5 lead byte"},
        {"\xff", 1, 0, "FF"},
        {"ok\xe2\x82", 4, 2, "truncated at end"},
        {"\xe2\x28\xa1", 3, 0, "bad second byte"},
        {"\xf0\x9f\x98", 3, 0, "truncated 4-byte"},
        {"\xf0\x9f\x98\x41", 4, 0, "bad fourth byte"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        size_t off = 999;
        CHECK_MSG(!ect__utf8_valid(bad[i].bytes, bad[i].len, &off), "%s accepted", bad[i].what);
        CHECK_MSG(off == bad[i].bad_off, "%s: offset %zu, expected %zu", bad[i].what, off,
                  bad[i].bad_off);
    }
}

/* The validator takes ASCII eight bytes at a time: every sequence above,
 * after 0 .. 17 ASCII bytes and before 9 more, is judged as on its own and
 * a bad one is reported at its own offset, wherever the words fall. */
static void
test_utf8_judges_sequences_at_every_word_offset(void)
{
    static const char *const good[] = {"caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                       "\xf4\x8f\xbf\xbf"};
    static const struct bad bad[] = {
        {"\x80", 1, 0, "lone continuation byte"},
        {"\xc0\xaf", 2, 0, "overlong 2-byte"},
        {"\xed\xa0\x80", 3, 0, "surrogate"},
        {"\xe2\x82", 2, 0, "truncated"},
        {"\xff", 1, 0, "FF"},
    };
    char buf[64];
    for (size_t pre = 0; pre <= 17; pre++) {
        memset(buf, 'a', sizeof(buf));
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
            size_t n = strlen(good[i]);
            memcpy(buf + pre, good[i], n);
            CHECK_MSG(ect__utf8_valid(buf, pre + n + 9, NULL), "good %zu after %zu refused", i,
                      pre);
            memset(buf + pre, 'a', n);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            memcpy(buf + pre, bad[i].bytes, bad[i].len);
            for (size_t after = 0; after <= 9; after += 9) {
                size_t off = 999;
                CHECK_MSG(!ect__utf8_valid(buf, pre + bad[i].len + after, &off),
                          "%s after %zu, before %zu accepted", bad[i].what, pre, after);
                CHECK_MSG(off == pre + bad[i].bad_off, "%s after %zu, before %zu: offset %zu",
                          bad[i].what, pre, after, off);
            }
            memset(buf + pre, 'a', bad[i].len);
        }
    }
}

static void
test_utf8_next_decodes_code_points_and_nonul_refuses_nul(void)
{
    static const struct {
        const char *bytes;
        size_t len;
        uint32_t cp;
    } seq[] = {{"A", 1, 0x41},
               {"\xc3\xa9", 2, 0xe9},
               {"\xe2\x82\xac", 3, 0x20ac},
               {"\xf4\x8f\xbf\xbf", 4, 0x10ffff}};
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        uint32_t cp = 0;
        CHECK_EQ_U64(ect__utf8_next((const uint8_t *)seq[i].bytes, seq[i].len, &cp), seq[i].len);
        CHECK_EQ_U64(cp, seq[i].cp);
        /* One byte short: truncated. */
        if (seq[i].len > 1)
            CHECK_EQ_U64(ect__utf8_next((const uint8_t *)seq[i].bytes, seq[i].len - 1, &cp), 0);
    }
    CHECK(ect__utf8_valid_nonul((const uint8_t *)"caf\xc3\xa9", 5));
    CHECK(ect__utf8_valid_nonul((const uint8_t *)"", 0));
    CHECK(ect__utf8_valid_nonul(NULL, 0));
    CHECK(!ect__utf8_valid_nonul((const uint8_t *)"a\0b", 3));
    CHECK(!ect__utf8_valid_nonul((const uint8_t *)"0123456789\0", 11));
    CHECK(!ect__utf8_valid_nonul((const uint8_t *)"\xed\xa0\x80", 3));
}

static void
test_utf8_cut_never_splits_a_character(void)
{
    const char *s = "a\xc3\xa9\xe2\x82\xac"; /* a, e-acute (2 bytes), euro (3 bytes) */
    CHECK_EQ_U64(ect__utf8_cut(s, 6, 0), 0);
    CHECK_EQ_U64(ect__utf8_cut(s, 6, 1), 1);
    CHECK_EQ_U64(ect__utf8_cut(s, 6, 2), 1);
    CHECK_EQ_U64(ect__utf8_cut(s, 6, 3), 3);
    CHECK_EQ_U64(ect__utf8_cut(s, 6, 5), 3);
    CHECK_EQ_U64(ect__utf8_cut(s, 6, 6), 6);
    CHECK_EQ_U64(ect__utf8_cut(s, 6, 100), 6);
    /* Stray bytes count one each, so a cut still makes progress. */
    CHECK_EQ_U64(ect__utf8_cut("\xff\xff\xff", 3, 2), 2);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_utf8_accepts_well_formed_text),
    ECT_CASE(test_utf8_refuses_malformed_sequences_at_their_offset),
    ECT_CASE(test_utf8_judges_sequences_at_every_word_offset),
    ECT_CASE(test_utf8_next_decodes_code_points_and_nonul_refuses_nul),
    ECT_CASE(test_utf8_cut_never_splits_a_character),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
