/* ect_size_parse: byte sizes with decimal and binary suffixes. */
#include <ectier/config.h>

#include "harness.h"

struct good {
    const char *text;
    uint64_t bytes;
};

static void
test_size_plain_decimal_is_bytes(void)
{
    uint64_t v = 1;
    CHECK_OK(ect_size_parse("0", &v));
    CHECK_EQ_U64(v, 0);
    CHECK_OK(ect_size_parse("4096", &v));
    CHECK_EQ_U64(v, 4096);
    CHECK_OK(ect_size_parse("007", &v));
    CHECK_EQ_U64(v, 7);
    CHECK_OK(ect_size_parse("18446744073709551615", &v));
    CHECK_EQ_U64(v, UINT64_MAX);
}

static void
test_size_every_suffix_has_its_factor(void)
{
    static const struct good cases[] = {
        {"3B", 3},
        {"3KB", 3000},
        {"3MB", 3000000},
        {"3GB", 3000000000ull},
        {"3TB", 3000000000000ull},
        {"3KiB", 3ull << 10},
        {"3MiB", 3ull << 20},
        {"3GiB", 3ull << 30},
        {"3TiB", 3ull << 40},
        {"3K", 3ull << 10},
        {"3M", 3ull << 20},
        {"3G", 3ull << 30},
        {"3T", 3ull << 40},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t v = 0;
        CHECK_MSG(ect_size_parse(cases[i].text, &v) == ECT_OK, "'%s': %s", cases[i].text,
                  ect_last_error());
        CHECK_MSG(v == cases[i].bytes, "'%s' gave %llu, expected %llu", cases[i].text,
                  (unsigned long long)v, (unsigned long long)cases[i].bytes);
    }
}

static void
test_size_suffix_is_case_insensitive_and_may_follow_spaces(void)
{
    static const struct good cases[] = {
        {"8gib", 8ull << 30},    {"8GIB", 8ull << 30}, {"8 GiB", 8ull << 30}, {"8  gb", 8000000000},
        {" 8GiB\t", 8ull << 30}, {"1kB", 1000},        {"1k", 1024},          {"2 b", 2},
        {"\t16\t", 16},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t v = 0;
        CHECK_MSG(ect_size_parse(cases[i].text, &v) == ECT_OK, "'%s': %s", cases[i].text,
                  ect_last_error());
        CHECK_EQ_U64(v, cases[i].bytes);
    }
}

struct bad {
    const char *text;
    ect_status_t status;
    const char *message; /* a substring the message must contain */
};

static void
test_size_refuses_malformed_text_and_leaves_output(void)
{
    static const struct bad cases[] = {
        {"", ECT_ERR_PARSE, "empty"},
        {"   ", ECT_ERR_PARSE, "empty"},
        {"-1", ECT_ERR_PARSE, "'-1' has a sign"},
        {"+1GiB", ECT_ERR_PARSE, "'+1GiB' has a sign"},
        {"1.5GiB", ECT_ERR_PARSE, "'1.5GiB' has a fraction"},
        {"1,5", ECT_ERR_PARSE, "fraction"},
        {"GiB", ECT_ERR_PARSE, "'GiB' does not start with a digit"},
        {"8XB", ECT_ERR_PARSE, "unknown suffix 'XB'"},
        {"8GiBx", ECT_ERR_PARSE, "unknown suffix 'GiBx'"},
        {"8 GiB 2", ECT_ERR_PARSE, "unknown suffix 'GiB 2'"},
        {"0x10", ECT_ERR_PARSE, "unknown suffix 'x10'"},
        {"1e3", ECT_ERR_PARSE, "unknown suffix 'e3'"},
        {"8PiB", ECT_ERR_PARSE, "unknown suffix 'PiB'"},
        {"18446744073709551616", ECT_ERR_OVERFLOW, "larger than 2^64 - 1"},
        {"99999999999999999999999", ECT_ERR_OVERFLOW, "2^64"},
        {"17179869184GiB", ECT_ERR_OVERFLOW, "'17179869184GiB'"},
        {"16777216TiB", ECT_ERR_OVERFLOW, "larger"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t v = 12345;
        ect_status_t s = ect_size_parse(cases[i].text, &v);
        CHECK_MSG(s == cases[i].status, "'%s' returned %d, expected %d", cases[i].text, s,
                  cases[i].status);
        CHECK_EQ_U64(v, 12345);
        CHECK_CONTAINS(ect_last_error(), cases[i].message);
    }
}

static void
test_size_largest_values_below_overflow_parse(void)
{
    uint64_t v;
    CHECK_OK(ect_size_parse("17179869183GiB", &v));
    CHECK_EQ_U64(v, UINT64_MAX - ((1ull << 30) - 1));
    CHECK_OK(ect_size_parse("16777215TiB", &v));
    CHECK_EQ_U64(v, 16777215ull << 40);
}

static void
test_size_long_or_binary_junk_gives_short_clean_message(void)
{
    size_t n = 100000;
    char *text = malloc(n + 1);
    CHECK(text != NULL);
    memset(text, '7', n);
    text[n] = '\0';
    uint64_t v = 1;
    CHECK_STATUS(ect_size_parse(text, &v), ECT_ERR_OVERFLOW);
    CHECK(strlen(ect_last_error()) < 200);
    CHECK_CONTAINS(ect_last_error(), "...");
    memcpy(text, "12\x01\x7f", 5);
    CHECK_STATUS(ect_size_parse(text, &v), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "'12?"
                                     "?'");
    free(text);
}

static void
test_size_null_arguments_are_refused(void)
{
    uint64_t v;
    CHECK_STATUS(ect_size_parse(NULL, &v), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_size_parse("1", NULL), ECT_ERR_INVALID_ARG);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_size_plain_decimal_is_bytes),
    ECT_CASE(test_size_every_suffix_has_its_factor),
    ECT_CASE(test_size_suffix_is_case_insensitive_and_may_follow_spaces),
    ECT_CASE(test_size_refuses_malformed_text_and_leaves_output),
    ECT_CASE(test_size_largest_values_below_overflow_parse),
    ECT_CASE(test_size_long_or_binary_junk_gives_short_clean_message),
    ECT_CASE(test_size_null_arguments_are_refused),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
