/*
 * The settings table and what it generates: the table's own consistency,
 * the Markdown reference (and that README.md carries exactly it), the
 * resolved "key = value" listing, and the message formatters.
 */
#include <math.h>

#include <ectier/config.h>

#include "common/config_internal.h"
#include "common/settings.h"
#include "harness.h"

static char *
markdown(void)
{
    size_t len = 0;
    CHECK_OK(ect_config_settings_markdown(NULL, 0, &len));
    char *buf = malloc(len + 1);
    CHECK(buf != NULL);
    size_t len2 = 0;
    CHECK_OK(ect_config_settings_markdown(buf, len + 1, &len2));
    CHECK_EQ_U64(len2, len);
    CHECK_EQ_U64(strlen(buf), len);
    return buf;
}

static void
test_table_rows_are_complete_and_consistent(void)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    CHECK(n > 10);
    for (size_t i = 0; i < n; i++) {
        const struct ect__setting *r = &rows[i];
        CHECK(r->name != NULL && r->name[0] != '\0');
        CHECK_MSG(r->doc != NULL && strchr(r->doc, '|') == NULL && strchr(r->doc, '\n') == NULL,
                  "%s: doc must be one line without '|'", r->name);
        int required = (r->flags & ECT_SETTING_REQUIRED) != 0;
        CHECK_MSG(required == (r->default_text == NULL), "%s: required xor default", r->name);
        if (r->offset != ECT_SETTING_NO_FIELD)
            CHECK_MSG(r->offset + r->size <= sizeof(ect_config_t), "%s: field outside struct",
                      r->name);
        if (r->type == ECT_SETTING_ENUM)
            CHECK_MSG(r->choices != NULL && r->n_choices > 0, "%s: enum without choices", r->name);
        if (r->type == ECT_SETTING_SECONDS || r->type == ECT_SETTING_UINT)
            CHECK_MSG(r->max > r->min, "%s: empty range", r->name);
        for (size_t j = 0; j < i; j++) {
            if (rows[j].where != r->where)
                continue;
            CHECK_MSG(strcmp(rows[j].name, r->name) != 0, "%s listed twice", r->name);
            if (r->alias != NULL)
                CHECK_MSG(ect__setting_find(r->where, r->alias) == r, "%s: alias clash", r->name);
        }
        CHECK(ect__setting_find(r->where, r->name) == r);
    }
    CHECK(ect__setting_find(ECT_SETTING_EXTRA, "ec_role") == NULL);
    CHECK(ect__setting_find(ECT_SETTING_EXTRA, "ec_enable_p2p") ==
          ect__setting_find(ECT_SETTING_EXTRA, "ec_enable_nixl"));
}

static void
test_enum_choices_match_the_c_enums(void)
{
    const struct ect__setting *role = ect__setting_find(ECT_SETTING_TOP, "ec_role");
    const struct ect__setting *tr = ect__setting_find(ECT_SETTING_EXTRA, "transport");
    CHECK(role != NULL && tr != NULL);
    CHECK_EQ_U64(role->n_choices, 3);
    for (size_t i = 0; i < role->n_choices; i++)
        CHECK_STR_EQ(role->choices[i], ect_role_str((ect_role_t)i));
    CHECK_EQ_U64(tr->n_choices, 3);
    for (size_t i = 0; i < tr->n_choices; i++)
        CHECK_STR_EQ(tr->choices[i], ect_transport_str((ect_transport_t)i));
}

static void
test_markdown_has_one_table_row_per_setting(void)
{
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    char *md = markdown();
    for (size_t i = 0; i < n; i++) {
        char cell[128];
        snprintf(cell, sizeof(cell), "\n| `%s`", rows[i].name);
        const char *at = strstr(md, cell);
        CHECK_MSG(at != NULL, "no row for %s", rows[i].name);
        CHECK_MSG(strstr(at + 1, cell) == NULL, "two rows for %s", rows[i].name);
        const char *eol = strchr(at + 1, '\n');
        CHECK(eol != NULL);
        char *line = strndup(at + 1, (size_t)(eol - at - 1));
        CHECK_CONTAINS(line, rows[i].doc);
        if (rows[i].alias != NULL)
            CHECK_CONTAINS(line, rows[i].alias);
        if (rows[i].default_text == NULL)
            CHECK_CONTAINS(line, "| required |");
        else if (rows[i].default_text[0] != '\0') {
            snprintf(cell, sizeof(cell), "| `%s` |", rows[i].default_text);
            CHECK_CONTAINS(line, cell);
        }
        free(line);
    }
    CHECK_CONTAINS(md, "### Environment variables");
    CHECK_CONTAINS(md, "| key | type | default | meaning |");
    CHECK_CONTAINS(md, "| variable | type | default | meaning |");
    CHECK_CONTAINS(md, "llm-d#2535");
    free(md);
}

static void
test_markdown_reports_size_needed_when_buffer_is_short(void)
{
    size_t len = 0, out = 12345;
    CHECK_OK(ect_config_settings_markdown(NULL, 0, &len));
    char *buf = malloc(len);
    CHECK(buf != NULL);
    CHECK_STATUS(ect_config_settings_markdown(buf, len, &out), ECT_ERR_NO_SPACE);
    CHECK_EQ_U64(out, 12345);
    char need[64];
    snprintf(need, sizeof(need), "needs %zu bytes", len + 1);
    CHECK_CONTAINS(ect_last_error(), need);
    CHECK_STATUS(ect_config_settings_markdown(buf, 5, NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_config_settings_markdown(NULL, 5, &out), ECT_ERR_INVALID_ARG);
    free(buf);
}

static void
test_readme_settings_section_is_the_generated_markdown(void)
{
    static const char begin[] = "<!-- settings:begin -->\n";
    static const char end[] = "<!-- settings:end -->";
    char *readme = ect_test_read_file(ECT_SOURCE_DIR "/README.md", NULL);
    char *md = markdown();
    const char *b = strstr(readme, begin);
    CHECK_MSG(b != NULL, "README.md has no '%s' line", "<!-- settings:begin -->");
    b += strlen(begin);
    const char *e = strstr(b, end);
    CHECK_MSG(e != NULL, "README.md has no '%s' line", end);
    size_t len = (size_t)(e - b);
    CHECK_MSG(len == strlen(md) && memcmp(b, md, len) == 0,
              "README.md's settings section is stale: run scripts/update-readme-settings.sh "
              "build");
    free(md);
    free(readme);
}

static void
test_format_lists_every_field_once_with_its_value(void)
{
    ect_config_t cfg;
    CHECK_OK(ect_config_init(&cfg));
    cfg.role = ECT_ROLE_CONSUMER;
    cfg.cpu_bytes = 8ull << 30;
    cfg.p2p_enabled = true;
    cfg.read_timeout_s = 7.25;
    cfg.transport = ECT_TRANSPORT_TCP;
    strcpy(cfg.region_name, "r1");
    cfg.copy_threads = 3;
    cfg.side_channel_port = 0;
    size_t len;
    CHECK_OK(ect_config_format(&cfg, NULL, 0, &len));
    char *text = malloc(len + 1);
    CHECK(text != NULL);
    CHECK_OK(ect_config_format(&cfg, text, len + 1, &len));
    static const char *const expected[] = {
        "ec_role = ec_consumer\n",
        "ec_cpu_bytes = 8589934592\n",
        "ec_enable_nixl = true\n",
        "consumer_ack_timeout_s = 2\n",
        "read_timeout_s = 7.25\n",
        "region_name = r1\n",
        "transport = tcp\n",
        "events_endpoint = \n",
        "copy_threads = 3\n",
        "prefault = true\n",
        "VLLM_EC_SIDE_CHANNEL_HOST = localhost\n",
        "VLLM_EC_SIDE_CHANNEL_PORT = 0\n",
    };
    for (size_t i = 0; i < sizeof(expected) / sizeof(expected[0]); i++)
        CHECK_CONTAINS(text, expected[i]);
    size_t n, fields = 0, lines = 0;
    const struct ect__setting *rows = ect__settings(&n);
    for (size_t i = 0; i < n; i++)
        fields += rows[i].offset != ECT_SETTING_NO_FIELD;
    for (const char *p = text; *p; p++)
        lines += *p == '\n';
    CHECK_EQ_U64(lines, fields);
    CHECK(strstr(text, "ec_connector =") == NULL); /* no field, not listed */

    size_t out = 777;
    CHECK_STATUS(ect_config_format(&cfg, text, 10, &out), ECT_ERR_NO_SPACE);
    CHECK_EQ_U64(out, 777);
    free(text);
}

static void
test_format_of_parsed_config_round_trips_values(void)
{
    const char *doc = "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
                      "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"1KiB\", "
                      "\"quarantine_s\": \"0.1\"}}";
    ect_config_t cfg;
    CHECK_OK(ect__config_parse_ex(doc, strlen(doc), 1, &cfg));
    char text[4096];
    size_t len;
    CHECK_OK(ect_config_format(&cfg, text, sizeof(text), &len));
    CHECK_CONTAINS(text, "ec_role = ec_producer\n");
    CHECK_CONTAINS(text, "ec_cpu_bytes = 1024\n");
    CHECK_CONTAINS(text, "quarantine_s = 0.1\n");
}

static void
test_help_lists_every_setting_with_default(void)
{
    char buf[8192];
    struct ect__text t = {buf, sizeof(buf), 0};
    ect__settings_help(&t);
    CHECK(t.len < sizeof(buf));
    size_t n;
    const struct ect__setting *rows = ect__settings(&n);
    for (size_t i = 0; i < n; i++)
        CHECK_CONTAINS(buf, rows[i].name);
    CHECK_CONTAINS(buf, "default \"2.0\"");
    CHECK_CONTAINS(buf, "required");
}

static void
test_quote_escapes_and_cuts_long_values(void)
{
    char buf[128];
    CHECK_STR_EQ(ect__quote(buf, sizeof(buf), "a\"b\\c\n\x7f", 7), "\"a\\\"b\\\\c\\x0a\\x7f\"");
    char big[200];
    memset(big, 'x', sizeof(big));
    ect__quote(buf, sizeof(buf), big, sizeof(big));
    CHECK_CONTAINS(buf, "xx\"... (200 bytes)");
    CHECK(strlen(buf) < 90);
    /* Cutting never splits a UTF-8 character (60 bytes are shown). */
    char mixed[64];
    memset(mixed, 'x', 58);
    memcpy(mixed + 58, "\xc3\xa9zz", 4);
    ect__quote(buf, sizeof(buf), mixed, 62);
    CHECK_CONTAINS(buf, "x\xc3\xa9\"... (62 bytes)");
    memset(mixed, 'x', 59);
    memcpy(mixed + 59, "\xc3\xa9zz", 4);
    ect__quote(buf, sizeof(buf), mixed, 63);
    CHECK_CONTAINS(buf, "x\"... (63 bytes)");
    /* A tiny buffer is still terminated. */
    char tiny[16];
    ect__quote(tiny, sizeof(tiny), big, sizeof(big));
    CHECK(strlen(tiny) == sizeof(tiny) - 1);
}

static void
test_numbers_are_written_exactly_and_briefly(void)
{
    char buf[64];
    CHECK_STR_EQ(ect__format_double(buf, sizeof(buf), 2.0), "2");
    CHECK_STR_EQ(ect__format_double(buf, sizeof(buf), 0.1), "0.1");
    CHECK_STR_EQ(ect__format_double(buf, sizeof(buf), -1.5), "-1.5");
    CHECK_STR_EQ(ect__format_double(buf, sizeof(buf), 9007199254740994.0), "9007199254740994");
    CHECK_STR_EQ(ect__format_double(buf, sizeof(buf), INFINITY), "inf");
    CHECK_STR_EQ(ect__human_size(buf, sizeof(buf), 1ull << 50), "1 PiB");
    CHECK_STR_EQ(ect__human_size(buf, sizeof(buf), 1536 * 1024), "1536 KiB");
    CHECK_STR_EQ(ect__human_size(buf, sizeof(buf), 7), "7 B");
    CHECK_STR_EQ(ect__human_size(buf, sizeof(buf), 0), "0 B");
}

static void
test_text_counts_past_its_buffer(void)
{
    char buf[8];
    struct ect__text t = {buf, sizeof(buf), 0};
    size_t len = 99;
    ect__text_printf(&t, "%s", "abcdef");
    ect__text_printf(&t, "%d", 12345);
    CHECK_EQ_U64(t.len, 11);
    CHECK_STR_EQ(buf, "abcdef1");
    CHECK_STATUS(ect__text_finish(&t, "thing", &len), ECT_ERR_NO_SPACE);
    CHECK_EQ_U64(len, 99);
    CHECK_CONTAINS(ect_last_error(), "thing needs 12 bytes, the buffer has 8");
    struct ect__text count = {NULL, 0, 0};
    ect__text_printf(&count, "%s", "abcdef");
    CHECK_OK(ect__text_finish(&count, "thing", &len));
    CHECK_EQ_U64(len, 6);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_table_rows_are_complete_and_consistent),
    ECT_CASE(test_enum_choices_match_the_c_enums),
    ECT_CASE(test_markdown_has_one_table_row_per_setting),
    ECT_CASE(test_markdown_reports_size_needed_when_buffer_is_short),
    ECT_CASE(test_readme_settings_section_is_the_generated_markdown),
    ECT_CASE(test_format_lists_every_field_once_with_its_value),
    ECT_CASE(test_format_of_parsed_config_round_trips_values),
    ECT_CASE(test_help_lists_every_setting_with_default),
    ECT_CASE(test_quote_escapes_and_cuts_long_values),
    ECT_CASE(test_numbers_are_written_exactly_and_briefly),
    ECT_CASE(test_text_counts_past_its_buffer),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
