/*
 * The Prometheus text parser and histogram_quantile of `ectier stats`
 * (src/metrics/scrape.c).  Our own exposition parses back to the counters
 * it was made from, with histogram buckets whose quantiles agree with the
 * library's own; the format's corners (labels in any order, escapes,
 * timestamps, comments, CRLF, special floats) parse; and hostile text (bad
 * names, quotes, escapes, numbers, duplicates, NUL bytes, lines, labels and
 * texts over the limits) is refused with a message naming the line, leaving
 * nothing allocated.
 */
#include <math.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "metrics/scrape.h"

static ect__prom_t
parse_ok(const char *text)
{
    ect__prom_t p;
    CHECK_MSG(ect__prom_parse(text, strlen(text), &p) == ECT_OK, "refused: %s", ect_last_error());
    return p;
}

static double
value(const ect__prom_t *p, const char *name, const char *labels)
{
    double v = NAN;
    CHECK_MSG(ect__prom_get(p, name, labels, &v), "no sample %s{%s}", name, labels);
    return v;
}

static void
test_our_exposition_parses_back_to_its_counters(void)
{
    ect_metrics_t m = {0};
    m.hits = 780;
    m.misses = 454;
    m.save_bytes = 1234567890123ull;
    m.save_ns = 310000000;
    m.acks_received[0] = 118;
    m.acks_received[5] = 3;
    m.cache.num_blocks = 4096;
    m.cache.used_blocks = 1000;
    m.events_hwm_drops = 7;
    for (uint64_t i = 0; i < 200; i++)
        ect_latency_hist_add(&m.p2p_fetch_latency, 50000 + i * 37000); /* 50 us .. 7.4 ms */
    ect_latency_hist_add(&m.p2p_fetch_latency, 3000000000ull);         /* overflow */
    char text[32768];
    size_t len;
    CHECK_OK(ect_metrics_format_prometheus(&m, text, sizeof(text), &len));
    ect__prom_t p;
    CHECK_OK(ect__prom_parse(text, len, &p));
    CHECK_EQ_U64(value(&p, "ectier_hits_total", ""), 780);
    CHECK_EQ_U64(value(&p, "ectier_misses_total", ""), 454);
    CHECK_EQ_U64(value(&p, "ectier_save_bytes_total", ""), 1234567890123ull);
    CHECK(fabs(value(&p, "ectier_save_seconds_total", "") - 0.31) < 1e-9);
    CHECK_EQ_U64(value(&p, "ectier_acks_received_total", "status=\"ok\""), 118);
    CHECK_EQ_U64(value(&p, "ectier_acks_received_total", "status=\"nack_not_ready\""), 3);
    CHECK_EQ_U64(value(&p, "ectier_region_blocks", ""), 4096);
    CHECK_EQ_U64(value(&p, "ectier_events_hwm_drops_total", ""), 7);
    CHECK_EQ_U64(value(&p, "ectier_p2p_fetch_seconds_count", ""), 201);
    CHECK(!ect__prom_get(&p, "ectier_hits_total", "status=\"ok\"", NULL));
    CHECK(!ect__prom_get(&p, "ectier_no_such", "", NULL));

    double le[32], cum[32];
    size_t n = ect__prom_buckets(&p, "ectier_p2p_fetch_seconds", le, cum, 32);
    CHECK_EQ_U64(n, ECT_METRICS_LATENCY_BUCKETS);
    CHECK(isinf(le[n - 1]) && cum[n - 1] == 201);
    for (size_t i = 1; i < n; i++)
        CHECK(le[i] > le[i - 1] && cum[i] >= cum[i - 1]);
    /* histogram_quantile over the scrape = the library's own quantile. */
    static const double qs[] = {0.01, 0.5, 0.9, 0.99, 1.0};
    for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
        double ours = ect__prom_quantile(le, cum, n, qs[i]);
        double lib = ect_latency_hist_quantile(&m.p2p_fetch_latency, qs[i]);
        CHECK_MSG(fabs(ours - lib) < 1e-9, "p%g: %g from the scrape, %g from the library",
                  qs[i] * 100, ours, lib);
    }
    ect__prom_cleanup(&p);
}

static void
test_the_formats_corners_parse(void)
{
    ect__prom_t p = parse_ok("# HELP x a thing\r\n"
                             "# TYPE x counter\r\n"
                             "\n"
                             "   \t\n"
                             "x 1\r\n"
                             "y{b=\"2\",a=\"1\",} 2.5 1700000000000\n"
                             "y{a=\"q\\\"uo\\\\te\\n\"} -Inf\n"
                             "z{ a = \"1\" } +Inf\n"
                             "w NaN\n"
                             "h_bucket{le=\"0.5\"} 1\n"
                             "h_bucket{le=\"+Inf\"} 4\n"
                             "h_bucket{le=\"0.1\"} 0\n"
                             "v 1e-3 -5");
    CHECK_EQ_U64(p.n, 9);
    CHECK(value(&p, "x", "") == 1);
    /* Labels in canonical order whatever the order written. */
    CHECK(value(&p, "y", "a=\"1\",b=\"2\"") == 2.5);
    CHECK(isinf(value(&p, "y", "a=\"q\\\"uo\\\\te\\n\"")));
    CHECK(value(&p, "z", "a=\"1\"") > 0);
    CHECK(isnan(value(&p, "w", "")));
    CHECK(value(&p, "v", "") == 0.001);
    double le[4], cum[4];
    CHECK_EQ_U64(ect__prom_buckets(&p, "h", le, cum, 4), 3);
    CHECK(le[0] == 0.1 && le[1] == 0.5 && isinf(le[2]));
    /* Rank 2 of 4 falls in +Inf: the last finite bound, as Prometheus. */
    CHECK(ect__prom_quantile(le, cum, 3, 0.5) == 0.5);
    CHECK(fabs(ect__prom_quantile(le, cum, 3, 0.25) - 0.5) < 1e-12);
    CHECK(isnan(ect__prom_quantile(le, cum, 0, 0.5)));
    ect__prom_cleanup(&p);
    p = parse_ok("");
    CHECK_EQ_U64(p.n, 0);
    ect__prom_cleanup(&p);
}

static void
refused(const char *text, size_t len, ect_status_t want, const char *words)
{
    ect__prom_t p = {.n = 12345};
    ect_status_t st = ect__prom_parse(text, len, &p);
    CHECK_MSG(st == want, "status %d for %.60s", st, text);
    CHECK_CONTAINS(ect_last_error(), words);
    CHECK_EQ_U64(p.n, 12345); /* not written */
}

static void
test_hostile_text_is_refused_naming_the_line(void)
{
    static const struct {
        const char *text;
        const char *words;
    } cases[] = {
        {"x 1\n9x 2\n", "line 2: not a sample"},
        {"x{a=\"1\" 2\n", "line 1: labels are not closed"},
        {"x{a=\"1} 2\n", "no closing quote"},
        {"x{a=1} 2\n", "not quoted"},
        {"x{a} 2\n", "no '='"},
        {"x{=\"1\"} 2\n", "label name"},
        {"x{a=\"\\t\"} 2\n", "unknown escape"},
        {"x{a=\"1\",a=\"2\"} 2\n", "appears twice"},
        {"x 1\nx 2\n", "line 2: the same sample appears twice"},
        {"x{b=\"1\",a=\"2\"} 1\nx{a=\"2\",b=\"1\"} 1\n", "appears twice"},
        {"x\n", "value"},
        {"x one\n", "not a number"},
        {"x 1 2 3\n", "unexpected text"},
        {"x 1 12.5\n", "unexpected text"},
        {"x 0x\n", "not a number"},
        {"x 1 -\n", "timestamp"},
        {"x{a=\"1\"}2\n", "line 1"},
        {"x 1 99999999999999999999\n", "timestamp"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        refused(cases[i].text, strlen(cases[i].text), ECT_ERR_PARSE, cases[i].words);
    refused("x 1\0y 2\n", 8, ECT_ERR_PARSE, "NUL byte");

    /* Over the limits. */
    char labels[2048] = "x{";
    for (int i = 0; i < 17; i++)
        snprintf(labels + strlen(labels), sizeof(labels) - strlen(labels), "l%d=\"v\",", i);
    strcat(labels, "} 1\n");
    refused(labels, strlen(labels), ECT_ERR_OVERFLOW, "more than 16 labels");
    char name[400];
    memset(name, 'n', 300);
    strcpy(name + 300, " 1\n");
    refused(name, strlen(name), ECT_ERR_OVERFLOW, "over 256 bytes");
    size_t big = ECT_PROM_LINE_MAX + 10;
    char *line = malloc(big + 1);
    CHECK(line != NULL);
    memset(line, ' ', big);
    memcpy(line, "x{a=\"", 5);
    line[big] = '\0';
    refused(line, big, ECT_ERR_OVERFLOW, "line 1: a line over 64 KiB");
    free(line);
    size_t huge = ECT_PROM_TEXT_MAX + 1;
    char *text = malloc(huge);
    CHECK(text != NULL);
    memset(text, '\n', huge);
    refused(text, huge, ECT_ERR_OVERFLOW, "more than");
    free(text);
    /* Many distinct samples: fine up to the limit, refused past it. */
    size_t cap = (size_t)(ECT_PROM_SAMPLES_MAX + 1) * 16;
    char *many = malloc(cap);
    CHECK(many != NULL);
    size_t off = 0;
    for (unsigned i = 0; i <= ECT_PROM_SAMPLES_MAX; i++)
        off += (size_t)snprintf(many + off, cap - off, "s%u 1\n", i);
    refused(many, off, ECT_ERR_OVERFLOW, "more than 100000 samples");
    free(many);
    CHECK_STATUS(ect__prom_parse(NULL, 1, &(ect__prom_t){0}), ECT_ERR_INVALID_ARG);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_our_exposition_parses_back_to_its_counters),
    ECT_CASE(test_the_formats_corners_parse),
    ECT_CASE(test_hostile_text_is_refused_naming_the_line),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
