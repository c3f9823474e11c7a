/*
 * ect_config_parse on hostile input: malformed JSON, bad UTF-8, NUL bytes and
 * escaped NULs, deep nesting, enormous values, keys and documents, duplicate
 * keys, non-object documents.  Each case checks the status, the message and
 * that the output struct was left untouched.
 */
#include "support/config.h"

static void
test_duplicate_keys_are_refused(void)
{
    static const struct ts_bad_case cases[] = {
        {"{\"ec_role\": \"ec_consumer\", \"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\"}",
         ECT_ERR_CONFIG, "the key \"ec_role\" twice", "at the top level"},
        {"{\"engine_id\": 1, \"engine_id\": 2}", ECT_ERR_CONFIG, "\"engine_id\" twice",
         "give each key once"},
        {"\"ec_cpu_bytes\": 1, \"ec_cpu_bytes\": 2", ECT_ERR_CONFIG, "\"ec_cpu_bytes\" twice",
         "in ec_connector_extra_config"},
    };
    CHECK_BAD(cases, 1);
}

/* ---- hostile bytes ------------------------------------------------------------------ */

static void
test_malformed_json_is_a_parse_error_with_offset(void)
{
    static const struct ts_bad_case cases[] = {
        {"{", ECT_ERR_PARSE, "not valid JSON", "offset"},
        {"{\"ec_role\": }", ECT_ERR_PARSE, "not valid JSON", "offset 12"},
        {"{\"a\": 1,}", ECT_ERR_PARSE, "not valid JSON", "offset"},
        {"{} {}", ECT_ERR_PARSE, "text after the JSON value", "offset 3: \"{}\""},
        {"{\"a\": \"\\ud800\"}", ECT_ERR_PARSE, "not valid JSON", "offset"},
        {"{\"a\": 0123}", ECT_ERR_PARSE, "malformed number", "offset 6"},
        {"{\"a\": -01}", ECT_ERR_PARSE, "malformed number", "offset 6"},
        {"{\"a\": 1.}", ECT_ERR_PARSE, "malformed number", "offset 6"},
        {"{\"a\": 1.2.3}", ECT_ERR_PARSE, "malformed number", "offset 6"},
        {"{\"a\": 1e}", ECT_ERR_PARSE, "malformed number", "offset 6"},
        {"{\"a\": -}", ECT_ERR_PARSE, "malformed number", "offset 6"},
        {"{\"a\": 0x10}", ECT_ERR_PARSE, "malformed number", "offset 6"},
        {"{\"a\": .5}", ECT_ERR_PARSE, "not valid JSON", "offset"},
        {"{\"a\": +5}", ECT_ERR_PARSE, "not valid JSON", "offset"},
        {"{\"a\": \"x\ty\"}", ECT_ERR_PARSE, "raw control character 0x09", "offset 8"},
        {"{'a': 1}", ECT_ERR_PARSE, "not valid JSON", "offset"},
    };
    CHECK_BAD(cases, 1);
}

static void
test_non_object_top_level_is_refused(void)
{
    static const struct ts_bad_case cases[] = {
        {"[]", ECT_ERR_CONFIG, "must be a JSON object", "got an array"},
        {"\"ec_both\"", ECT_ERR_CONFIG, "must be a JSON object", "got \"ec_both\""},
        {"5", ECT_ERR_CONFIG, "must be a JSON object", "got 5"},
        {"null", ECT_ERR_CONFIG, "must be a JSON object", "got null"},
        {"true", ECT_ERR_CONFIG, "must be a JSON object", "got true"},
        {"{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\", "
         "\"ec_connector_extra_config\": \"ec_cpu_bytes=1\"}",
         ECT_ERR_CONFIG, "ec_connector_extra_config = \"ec_cpu_bytes=1\"", "JSON object"},
        {"{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\", "
         "\"ec_connector_extra_config\": [1]}",
         ECT_ERR_CONFIG, "ec_connector_extra_config = an array", "JSON object"},
    };
    /* Cases not starting with '{' are whole documents here, not members. */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ect_config_t cfg;
        ts_config_poison(&cfg);
        CHECK_STATUS(ts_parse_text(cases[i].members, 1, &cfg), cases[i].status);
        CHECK(ts_config_untouched(&cfg));
        CHECK_CONTAINS(ect_last_error(), cases[i].key);
        CHECK_CONTAINS(ect_last_error(), cases[i].value);
    }
}

static void
test_bad_utf8_nul_bytes_and_escaped_nul_are_refused(void)
{
    static const struct {
        const char *bytes;
        size_t len;
        const char *message;
    } cases[] = {
        {"{\"ec_role\": \"ec_\xff\"}", 18, "not valid UTF-8: bad byte 0xff at offset 16"},
        {"{\"k\xc0\xaf\": 1}", 10, "UTF-8: bad byte 0xc0 at offset 3"},
        {"{\"a\": \"\xed\xa0\x80\"}", 12, "UTF-8"},
        {"{\"ec_role\": \"ec_both\0\"}", 22, "NUL byte at offset 20"},
        {"\0", 1, "NUL byte at offset 0"},
        {"{\"ec_role\": \"ec_both\\u0000x\"}", 28,
         "escaped NUL (\\u0000) in a string at offset 20"},
        {"{\"k\\u0000\": 1}", 14, "escaped NUL"},
        {"", 0, "config is empty"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ect_config_t cfg;
        ts_config_poison(&cfg);
        CHECK_MSG(ect__config_parse_ex(cases[i].bytes, cases[i].len, 1, &cfg) == ECT_ERR_PARSE,
                  "case %zu: %s", i, ect_last_error());
        CHECK(ts_config_untouched(&cfg));
        CHECK_CONTAINS(ect_last_error(), cases[i].message);
    }
    /* An escaped backslash followed by u0000 is text, not an escaped NUL. */
    ect_config_t cfg;
    CHECK_STATUS(
        ts_parse_extra("\"ec_cpu_bytes\": 1, \"curve_client_key_file\": \"a\\\\u0000\"", 1, &cfg),
        ECT_OK);
    CHECK_STR_EQ(cfg.curve_client_key_file, "a\\u0000");
}

static void
test_deep_nesting_is_refused_without_recursion(void)
{
    ect_config_t cfg;
    char *s = ts_repeat("[", 10000, "");
    ts_config_poison(&cfg);
    CHECK_STATUS(ts_parse_text(s, 1, &cfg), ECT_ERR_PARSE);
    CHECK(ts_config_untouched(&cfg));
    CHECK_CONTAINS(ect_last_error(), "more than 32 deep");
    free(s);
    s = ts_repeat("{\"a\":", 10000, "1");
    CHECK_STATUS(ts_parse_text(s, 1, &cfg), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "deep (offset");
    free(s);
    /* Brackets inside strings do not count. */
    char *members = NULL;
    char *brackets = ts_repeat("[{", 100, "");
    CHECK(asprintf(&members, "\"ec_cpu_bytes\": 1, \"curve_client_key_file\": \"%s\"", brackets) >
          0);
    CHECK_OK(ts_parse_extra(members, 1, &cfg));
    free(members);
    free(brackets);
}

static void
test_enormous_values_keys_and_documents_are_refused_briefly(void)
{
    ect_config_t cfg;
    char *big = ts_repeat("a", 500000, "");
    char *members = NULL;

    CHECK(asprintf(&members, "\"ec_cpu_bytes\": 1, \"region_name\": \"%s\"", big) > 0);
    ts_config_poison(&cfg);
    CHECK_STATUS(ts_parse_extra(members, 1, &cfg), ECT_ERR_CONFIG);
    CHECK(ts_config_untouched(&cfg));
    CHECK_CONTAINS(ect_last_error(), "region_name = \"aaaa");
    CHECK_CONTAINS(ect_last_error(), "... (500000 bytes) is 500000 bytes long");
    CHECK(strlen(ect_last_error()) < 300);
    free(members);

    CHECK(asprintf(&members, "\"ec_cpu_bytes\": 1, \"%s\": 1", big) > 0);
    CHECK_STATUS(ts_parse_extra(members, 1, &cfg), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "unknown key");
    CHECK_CONTAINS(ect_last_error(), "(500000 bytes)");
    CHECK(strlen(ect_last_error()) < 300);
    free(members);

    CHECK(asprintf(&members, "\"ec_cpu_bytes\": \"%s\"", big) > 0);
    CHECK_STATUS(ts_parse_extra(members, 1, &cfg), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "ec_cpu_bytes = \"aaa");
    free(members);
    free(big);

    /* A number literal too long for cJSON. */
    char *digits = ts_repeat("9", 400, "");
    CHECK(asprintf(&members, "\"ec_cpu_bytes\": %s", digits) > 0);
    ect_status_t s = ts_parse_extra(members, 1, &cfg);
    CHECK_MSG(s == ECT_ERR_PARSE || s == ECT_ERR_CONFIG, "400 digits gave %d", s);
    CHECK_CONTAINS(ect_last_error(), s == ECT_ERR_CONFIG ? "ec_cpu_bytes" : "JSON");
    free(members);
    free(digits);

    /* Over the document limit, even if well-formed. */
    size_t n = ECT_CONFIG_JSON_MAX + 1;
    char *doc = malloc(n);
    CHECK(doc != NULL);
    memset(doc, ' ', n);
    doc[0] = '{';
    doc[n - 1] = '}';
    CHECK_STATUS(ect__config_parse_ex(doc, n, 1, &cfg), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "1048577 bytes: at most 1048576");
    free(doc);
}

static void
test_too_many_keys_are_refused(void)
{
    ect_config_t cfg;
    char *doc = malloc(300 * 16 + 16);
    size_t o = 0;
    CHECK(doc != NULL);
    doc[o++] = '{';
    for (int i = 0; i < 300; i++)
        o += (size_t)sprintf(doc + o, "%s\"k%d\": %d", i ? "," : "", i, i);
    doc[o++] = '}';
    doc[o] = '\0';
    CHECK_STATUS(ts_parse_text(doc, 1, &cfg), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "more than 256 keys at the top level");
    free(doc);
}

static void
test_null_arguments_are_refused(void)
{
    ect_config_t cfg;
    CHECK_STATUS(ect_config_parse(NULL, 5, &cfg), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_config_parse("{}", 2, NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_config_parse(NULL, 0, &cfg), ECT_ERR_PARSE);
    CHECK_CONTAINS(ect_last_error(), "empty");
    CHECK_STATUS(ect_config_validate(NULL), ECT_ERR_INVALID_ARG);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_duplicate_keys_are_refused),
    ECT_CASE(test_malformed_json_is_a_parse_error_with_offset),
    ECT_CASE(test_non_object_top_level_is_refused),
    ECT_CASE(test_bad_utf8_nul_bytes_and_escaped_nul_are_refused),
    ECT_CASE(test_deep_nesting_is_refused_without_recursion),
    ECT_CASE(test_enormous_values_keys_and_documents_are_refused_briefly),
    ECT_CASE(test_too_many_keys_are_refused),
    ECT_CASE(test_null_arguments_are_refused),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
