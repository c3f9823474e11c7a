/*
 * Metrics (SPEC §9.7; src/metrics/metrics.c): the Prometheus text of
 * ect_metrics_t (every required metric present, with its TYPE line and its
 * value; the overflow path that reports the length needed) and the latency
 * histograms.  The counters themselves are checked where they are counted
 * (tests/unit/test_scheduler.c).
 */
#include <ectier/metrics.h>

#include "harness.h"

/* Render into a malloc'd buffer of exactly the size needed. */
static char *
render(const ect_metrics_t *m, size_t *len_p)
{
    size_t need = 0;
    CHECK_STATUS(ect_metrics_format_prometheus(m, NULL, 0, &need), ECT_ERR_OVERFLOW);
    char *buf = malloc(need + 1);
    CHECK(buf != NULL);
    size_t len = 0;
    CHECK_OK(ect_metrics_format_prometheus(m, buf, need + 1, &len));
    CHECK_EQ_U64(len, need);
    CHECK_EQ_U64(strlen(buf), len);
    *len_p = len;
    return buf;
}

static void
test_prometheus_text_names_every_required_metric(void)
{
    ect_metrics_t m;
    memset(&m, 0, sizeof(m));
    m.hits = 11;
    m.misses = 12;
    m.saves_completed = 13;
    m.loads_completed = 14;
    m.save_bytes = 1500000;
    m.save_ns = 2500000000ull;
    m.acks_received[5] = 7;
    m.acks_sent[1] = 8;
    m.grants_outstanding = 3;
    m.p2p_transport_errors = 2;
    m.cache.evicted_entries = 9;
    m.cache.used_blocks = 40;
    m.cache.num_blocks = 64;
    m.cache.pins = 4;
    m.cache.runs_histogram[0] = 5;
    m.cache.runs_histogram[6] = 1;
    ect_latency_hist_add(&m.p2p_fetch_latency, 300 * 1000);        /* 0.3 ms */
    ect_latency_hist_add(&m.p2p_fetch_latency, 2ull * 1000000000); /* 2 s: overflow bucket */
    ect_latency_hist_add(&m.p2p_read_latency, 200 * 1000);         /* 0.2 ms */
    size_t len;
    char *t = render(&m, &len);
    /* SPEC §9.7: hits, misses, saves, loads, evictions, NACKs by status,
     * bytes and latency per direction, pins and grants outstanding, region
     * occupancy, runs per entry, transport errors. */
    static const char *const required[] = {
        "# TYPE ectier_hits_total counter\nectier_hits_total 11\n",
        "ectier_misses_total 12\n",
        "ectier_saves_completed_total 13\n",
        "ectier_loads_completed_total 14\n",
        "ectier_evictions_total 9\n",
        "ectier_acks_received_total{status=\"nack_not_ready\"} 7\n",
        "ectier_acks_sent_total{status=\"nack_missing\"} 8\n",
        "ectier_acks_received_total{status=\"ok\"} 0\n",
        "ectier_save_bytes_total 1500000\n",
        "ectier_save_seconds_total 2.500000000\n",
        "ectier_load_bytes_total 0\n",
        "ectier_load_seconds_total ",
        "ectier_p2p_read_bytes_total 0\n",
        "# TYPE ectier_p2p_fetch_seconds histogram\n",
        "ectier_p2p_fetch_seconds_bucket{le=\"0.00025\"} 0\n",
        "ectier_p2p_fetch_seconds_bucket{le=\"0.0005\"} 1\n",
        "ectier_p2p_fetch_seconds_bucket{le=\"1\"} 1\n",
        "ectier_p2p_fetch_seconds_bucket{le=\"+Inf\"} 2\n",
        "ectier_p2p_fetch_seconds_count 2\n",
        "ectier_p2p_fetch_seconds_sum 2.000300000\n",
        "# TYPE ectier_p2p_read_seconds histogram\n",
        "ectier_p2p_read_seconds_bucket{le=\"0.0001\"} 0\n",
        "ectier_p2p_read_seconds_bucket{le=\"0.00025\"} 1\n",
        "ectier_p2p_read_seconds_count 1\n",
        "ectier_p2p_read_seconds_sum 0.000200000\n",
        "# TYPE ectier_pins gauge\nectier_pins 4\n",
        "ectier_grants_outstanding 3\n",
        "ectier_region_used_blocks 40\n",
        "ectier_region_blocks 64\n",
        "ectier_entry_runs{runs=\"1\"} 5\n",
        "ectier_entry_runs{runs=\">16\"} 1\n",
        "ectier_p2p_transport_errors_total 2\n",
    };
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        CHECK_CONTAINS(t, required[i]);
    /* Every sample line belongs to a metric announced by a TYPE line. */
    char *copy = strdup(t), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            continue;
        CHECK_MSG(strncmp(line, "ectier_", 7) == 0, "sample without the prefix: %s", line);
        char name[128];
        size_t n = strcspn(line, "{ ");
        CHECK(n < sizeof(name));
        memcpy(name, line, n);
        name[n] = '\0';
        char *suffix = strstr(name, "_bucket");
        if (suffix == NULL)
            suffix = strstr(name, "_count");
        if (suffix == NULL && strstr(name, "_sum") == name + strlen(name) - 4)
            suffix = name + strlen(name) - 4;
        char type_line[200];
        snprintf(type_line, sizeof(type_line), "# TYPE %s ", name);
        if (strstr(t, type_line) == NULL && suffix != NULL) {
            *suffix = '\0';
            snprintf(type_line, sizeof(type_line), "# TYPE %s histogram", name);
        }
        CHECK_CONTAINS(t, type_line);
    }
    free(copy);
    free(t);
}

static void
test_prometheus_overflow_reports_the_length_needed(void)
{
    ect_metrics_t m;
    memset(&m, 0, sizeof(m));
    m.hits = 123456789;
    size_t full_len;
    char *full = render(&m, &full_len);
    CHECK(full_len > 1000);
    /* Too small by one (no room for the NUL), and much too small: the
     * buffer holds a NUL-terminated prefix and never more than cap bytes. */
    size_t caps[] = {full_len, 64, 1};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        size_t cap = caps[i];
        char *buf = malloc(cap + 16);
        memset(buf, '@', cap + 16);
        size_t len = 0;
        CHECK_STATUS(ect_metrics_format_prometheus(&m, buf, cap, &len), ECT_ERR_OVERFLOW);
        CHECK_EQ_U64(len, full_len);
        CHECK_EQ_U64(strlen(buf), cap - 1);
        CHECK(strncmp(buf, full, cap - 1) == 0);
        for (size_t k = cap; k < cap + 16; k++)
            CHECK_MSG(buf[k] == '@', "byte %zu past cap %zu was written", k, cap);
        free(buf);
    }
    CHECK_CONTAINS(ect_last_error(), "need");
    size_t len;
    CHECK_STATUS(ect_metrics_format_prometheus(NULL, full, full_len + 1, &len),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_metrics_format_prometheus(&m, NULL, 10, &len), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_metrics_format_prometheus(&m, full, full_len + 1, NULL), ECT_ERR_INVALID_ARG);
    free(full);
}

static void
test_latency_histogram_buckets_and_quantiles(void)
{
    ect_latency_hist_t h;
    memset(&h, 0, sizeof(h));
    CHECK(ect_latency_hist_quantile(&h, 0.5) == 0.0);
    /* 0.1 ms is inside the first bucket (upper bound inclusive). */
    ect_latency_hist_add(&h, 100 * 1000);
    for (int i = 0; i < 8; i++)
        ect_latency_hist_add(&h, 3 * 1000 * 1000); /* 3 ms: (2.5, 5] ms */
    ect_latency_hist_add(&h, 5ull * 1000000000);   /* 5 s: overflow */
    CHECK_EQ_U64(h.count, 10);
    CHECK_EQ_U64(h.buckets[0], 1);
    CHECK_EQ_U64(h.buckets[5], 8);
    CHECK_EQ_U64(h.buckets[ECT_METRICS_LATENCY_BUCKETS - 1], 1);
    CHECK_EQ_U64(h.sum_ns, 100 * 1000 + 24ull * 1000 * 1000 + 5ull * 1000000000);
    double p50 = ect_latency_hist_quantile(&h, 0.5);
    CHECK_MSG(p50 > 0.0025 && p50 <= 0.005, "p50 %g outside its bucket", p50);
    CHECK(ect_latency_hist_quantile(&h, 0.05) <= 0.0001);
    /* The overflow bucket has no upper bound: its lower one is reported. */
    CHECK(ect_latency_hist_quantile(&h, 1.0) == 1.0);
    CHECK(ect_latency_hist_quantile(&h, 7.0) == 1.0); /* clamped */
    CHECK(ect_latency_hist_quantile(NULL, 0.5) == 0.0);
    ect_latency_hist_add(NULL, 1);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_prometheus_text_names_every_required_metric),
    ECT_CASE(test_prometheus_overflow_reports_the_length_needed),
    ECT_CASE(test_latency_histogram_buckets_and_quantiles),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
