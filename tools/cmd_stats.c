/*
 * `ectier stats HOST:PORT [--watch] [--interval S] [--count N] [--timeout S]`:
 * scrape a running instance's Prometheus endpoint (its metrics_address) and
 * print the figures of the Grafana dashboard (tools/grafana/) as a compact
 * summary: lookups and hit rate, saves and loads with their bytes, P2P
 * reads, fallbacks and acks by status, fetch and read latency percentiles, region
 * occupancy, pins, holds and grants (and grants refused), the producer's
 * data stream (grants served, bytes, requests moved between its sending
 * threads, requests denied, connections cut),
 * the event stream.  --watch refreshes
 * it and adds the rates over the last interval, from successive scrapes.
 *
 * The endpoint is input from outside: the fetch has a deadline and a size
 * limit, the text goes through the bounded parser (src/metrics/scrape.h),
 * and a page without ectier's metrics is refused by name.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "cli.h"
#include "common/clock.h"
#include "metrics/scrape.h"

static const char usage[] =
    "usage: ectier stats HOST:PORT [--watch] [--interval S] [--count N] [--timeout S]\n"
    "  Read the Prometheus endpoint of a running instance (its metrics_address) and print\n"
    "  its figures: lookups and hit rate, saves and loads, P2P reads, fallbacks and acks by\n"
    "  status, fetch and read latency percentiles, region occupancy, pins, holds and\n"
    "  grants, the producer's data stream (served, denied, cut), events.\n"
    "  --watch       refresh every interval, with the rates since the previous scrape\n"
    "  --interval S  seconds between refreshes (default 1)\n"
    "  --count N     stop after N scrapes (default: one, or until interrupted with --watch)\n"
    "  --timeout S   seconds one scrape may take, connecting included (default 5)\n";

#define BODY_MAX    ((size_t)4 << 20)
#define BUCKETS_MAX 64
#define NAME_PREFIX "ectier_"

/* The figures of one scrape; NaN where the page has no such sample. */
/* A latency histogram as scraped: cumulative buckets, sum and count. */
struct hist {
    double le[BUCKETS_MAX], cum[BUCKETS_MAX];
    size_t n_buckets;
    double sum, count;
};

struct figures {
    double hits, misses, saves_queued, saves_completed, saves_failed, saves_skipped;
    double loads_queued, loads_completed, save_bytes, save_s, load_bytes, load_s;
    double reads_started, reads_completed, read_bytes, fallbacks, unavailable, retries;
    double ack_timeouts, read_timeouts, transport_errors, wire_dropped, framing_dropped;
    double grants, grants_expired, grants_dead_peer, grants_refused, dones_rejected;
    double stream_served, stream_bytes, stream_denied, stream_bad_requests;
    double stream_conns_refused, stream_timeouts, stream_send_failures, stream_moved;
    double region_blocks, used_blocks, evictable_blocks, entries, entries_not_ready;
    double entries_pinned, pins, holds_active, holds_pending;
    double evictions, evicted_blocks, alloc_no_space;
    double ev_batches, ev_dropped, ev_hwm_drops, ev_replays, ev_replay_errors;
    struct hist fetch, read; /* p2p_fetch_seconds, p2p_read_seconds */
    double nacks_received;   /* acks received with a status other than ok */
    double scraped_at_s;     /* monotonic */
};

/* Unlabelled samples, by the name after "ectier_". */
static const struct {
    const char *name;
    size_t offset;
} plain[] = {
#define F(n, f)                                                                                    \
    {                                                                                              \
        n, offsetof(struct figures, f)                                                             \
    }
    F("hits_total", hits),
    F("misses_total", misses),
    F("saves_queued_total", saves_queued),
    F("saves_completed_total", saves_completed),
    F("saves_failed_total", saves_failed),
    F("saves_skipped_full_total", saves_skipped),
    F("loads_queued_total", loads_queued),
    F("loads_completed_total", loads_completed),
    F("save_bytes_total", save_bytes),
    F("save_seconds_total", save_s),
    F("load_bytes_total", load_bytes),
    F("load_seconds_total", load_s),
    F("p2p_reads_started_total", reads_started),
    F("p2p_reads_completed_total", reads_completed),
    F("p2p_read_bytes_total", read_bytes),
    F("p2p_fallbacks_total", fallbacks),
    F("p2p_unavailable_total", unavailable),
    F("p2p_retries_total", retries),
    F("p2p_ack_timeouts_total", ack_timeouts),
    F("p2p_read_timeouts_total", read_timeouts),
    F("p2p_transport_errors_total", transport_errors),
    F("wire_dropped_total", wire_dropped),
    F("control_framing_dropped_total", framing_dropped),
    F("grants_outstanding", grants),
    F("grants_expired_total", grants_expired),
    F("grants_released_dead_peer_total", grants_dead_peer),
    F("grants_refused_total", grants_refused),
    F("dones_rejected_total", dones_rejected),
    F("data_streams_served_total", stream_served),
    F("data_stream_bytes_total", stream_bytes),
    F("data_streams_denied_total", stream_denied),
    F("data_stream_bad_requests_total", stream_bad_requests),
    F("data_connections_refused_total", stream_conns_refused),
    F("data_stream_timeouts_total", stream_timeouts),
    F("data_stream_send_failures_total", stream_send_failures),
    F("data_streams_moved_total", stream_moved),
    F("region_blocks", region_blocks),
    F("region_used_blocks", used_blocks),
    F("region_evictable_blocks", evictable_blocks),
    F("entries", entries),
    F("entries_not_ready", entries_not_ready),
    F("entries_pinned", entries_pinned),
    F("pins", pins),
    F("holds_active", holds_active),
    F("holds_pending", holds_pending),
    F("evictions_total", evictions),
    F("evicted_blocks_total", evicted_blocks),
    F("alloc_no_space_total", alloc_no_space),
    F("events_batches_total", ev_batches),
    F("events_dropped_total", ev_dropped),
    F("events_hwm_drops_total", ev_hwm_drops),
    F("events_replays_total", ev_replays),
    F("events_replay_errors_total", ev_replay_errors),
    F("p2p_fetch_seconds_sum", fetch.sum),
    F("p2p_fetch_seconds_count", fetch.count),
    F("p2p_read_seconds_sum", read.sum),
    F("p2p_read_seconds_count", read.count),
#undef F
};

static void
read_buckets(const ect__prom_t *p, const char *name, struct hist *h)
{
    char full[128];
    snprintf(full, sizeof(full), NAME_PREFIX "%s", name);
    h->n_buckets = ect__prom_buckets(p, full, h->le, h->cum, BUCKETS_MAX);
    if (h->n_buckets > BUCKETS_MAX)
        h->n_buckets = 0; /* not ours: show no percentiles rather than wrong ones */
}

static void
read_figures(const ect__prom_t *p, struct figures *f)
{
    char name[128];
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
        double *v = (double *)((char *)f + plain[i].offset);
        snprintf(name, sizeof(name), NAME_PREFIX "%s", plain[i].name);
        if (!ect__prom_get(p, name, "", v))
            *v = NAN;
    }
    read_buckets(p, "p2p_fetch_seconds", &f->fetch);
    read_buckets(p, "p2p_read_seconds", &f->read);
    f->nacks_received = 0;
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->samples[i].name, NAME_PREFIX "acks_received_total") == 0 &&
            strcmp(p->samples[i].labels, "status=\"ok\"") != 0)
            f->nacks_received += p->samples[i].value;
}

/* ---- formatting -------------------------------------------------------------------- */

/* Texts for one printf: each helper returns a buffer of its own, so one
 * call can format many numbers. */
struct fmt {
    char buf[24][64];
    unsigned next;
};

static char *
fmt_buf(struct fmt *f)
{
    return f->buf[f->next++ % (sizeof(f->buf) / sizeof(f->buf[0]))];
}

static const char *
count_str(struct fmt *f, double v)
{
    char *b = fmt_buf(f);
    if (isnan(v))
        snprintf(b, sizeof(f->buf[0]), "-");
    else
        snprintf(b, sizeof(f->buf[0]), "%.0f", v);
    return b;
}

static const char *
bytes_str(struct fmt *f, double v)
{
    char *b = fmt_buf(f);
    if (isnan(v) || v < 0)
        snprintf(b, sizeof(f->buf[0]), "-");
    else
        ect_cli_format_bytes(b, sizeof(f->buf[0]), v >= 1.8e19 ? UINT64_MAX : (uint64_t)v);
    return b;
}

static const char *
percent_str(struct fmt *f, double part, double whole)
{
    char *b = fmt_buf(f);
    if (isnan(part) || isnan(whole) || whole <= 0)
        snprintf(b, sizeof(f->buf[0]), "-");
    else
        snprintf(b, sizeof(f->buf[0]), "%.1f%%", 100.0 * part / whole);
    return b;
}

static const char *
rate_str(struct fmt *f, double per_s)
{
    char *b = fmt_buf(f);
    if (isnan(per_s))
        snprintf(b, sizeof(f->buf[0]), "-");
    else
        snprintf(b, sizeof(f->buf[0]), per_s < 10 ? "%.2f/s" : "%.1f/s", per_s);
    return b;
}

static const char *
seconds_str(struct fmt *f, double s)
{
    char *b = fmt_buf(f);
    ect_cli_format_seconds(b, sizeof(f->buf[0]), s);
    return b;
}

/* "1.20 GiB at 3.87 GiB/s" of copies; just the bytes when no time. */
static const char *
volume_str(struct fmt *f, double bytes, double seconds)
{
    char total[24], rate[24];
    snprintf(total, sizeof(total), "%s", bytes_str(f, bytes));
    if (isnan(seconds) || seconds <= 0 || isnan(bytes))
        return bytes_str(f, bytes);
    snprintf(rate, sizeof(rate), "%s", bytes_str(f, bytes / seconds));
    char *b = fmt_buf(f);
    snprintf(b, sizeof(f->buf[0]), "%s at %s/s", total, rate);
    return b;
}

/* "label v, label v" of every sample named name, zeros left out. */
static void
print_by_status(const ect__prom_t *p, const char *title, const char *name)
{
    printf("%-11s", title);
    int shown = 0;
    for (size_t i = 0; i < p->n; i++) {
        const ect__prom_sample_t *s = &p->samples[i];
        if (strcmp(s->name, name) != 0 || !(s->value > 0))
            continue;
        /* status="nack_missing" -> nack_missing */
        const char *label = s->labels;
        size_t ll = strlen(label);
        if (strncmp(label, "status=\"", 8) == 0 && ll > 9 && label[ll - 1] == '"')
            printf("%s%.*s %.0f", shown ? ", " : "", (int)(ll - 9), label + 8, s->value);
        else
            printf("%s{%.40s} %.0f", shown ? ", " : "", label, s->value);
        shown++;
    }
    printf("%s\n", shown ? "" : "none");
}

static void
print_percentiles(const double *le, const double *cum, size_t n, double count, double sum,
                  const char *what)
{
    struct fmt f = {.next = 0};
    if (!(count > 0)) {
        printf("none\n");
        return;
    }
    printf("p50 %s, p90 %s, p99 %s (%.0f %s, mean %s)\n",
           seconds_str(&f, ect__prom_quantile(le, cum, n, 0.50)),
           seconds_str(&f, ect__prom_quantile(le, cum, n, 0.90)),
           seconds_str(&f, ect__prom_quantile(le, cum, n, 0.99)), count, what,
           seconds_str(&f, sum / count));
}

static void
print_summary(const ect__prom_t *p, const struct figures *x)
{
    struct fmt f = {.next = 0};
    double lookups = x->hits + x->misses;
    printf("lookups    %s: CPU-tier hit rate %s (%s hits, %s misses)\n", count_str(&f, lookups),
           percent_str(&f, x->hits, lookups), count_str(&f, x->hits), count_str(&f, x->misses));
    printf("saves      %s of %s landed, %s failed, %s skipped (region full); %s\n",
           count_str(&f, x->saves_completed), count_str(&f, x->saves_queued),
           count_str(&f, x->saves_failed), count_str(&f, x->saves_skipped),
           volume_str(&f, x->save_bytes, x->save_s));
    printf("loads      %s of %s landed; %s\n", count_str(&f, x->loads_completed),
           count_str(&f, x->loads_queued), volume_str(&f, x->load_bytes, x->load_s));
    printf("p2p reads  %s of %s landed (%s), %s; %s fallbacks, %s unavailable, %s retries\n",
           count_str(&f, x->reads_completed), count_str(&f, x->reads_started),
           percent_str(&f, x->reads_completed, x->reads_started), bytes_str(&f, x->read_bytes),
           count_str(&f, x->fallbacks), count_str(&f, x->unavailable), count_str(&f, x->retries));
    printf("p2p faults %s ack timeouts, %s read timeouts, %s transport errors, %s bad msgs, "
           "%s bad frames\n",
           count_str(&f, x->ack_timeouts), count_str(&f, x->read_timeouts),
           count_str(&f, x->transport_errors), count_str(&f, x->wire_dropped),
           count_str(&f, x->framing_dropped));
    print_by_status(p, "acks in", NAME_PREFIX "acks_received_total");
    print_by_status(p, "acks out", NAME_PREFIX "acks_sent_total");
    printf("fetch      ");
    print_percentiles(x->fetch.le, x->fetch.cum, x->fetch.n_buckets, x->fetch.count, x->fetch.sum,
                      "fetches");
    printf("  read     ");
    print_percentiles(x->read.le, x->read.cum, x->read.n_buckets, x->read.count, x->read.sum,
                      "reads");
    f.next = 0;
    printf("region     %s of %s blocks used (%s), %s evictable\n", count_str(&f, x->used_blocks),
           count_str(&f, x->region_blocks), percent_str(&f, x->used_blocks, x->region_blocks),
           count_str(&f, x->evictable_blocks));
    printf("entries    %s, %s not ready, %s pinned\n", count_str(&f, x->entries),
           count_str(&f, x->entries_not_ready), count_str(&f, x->entries_pinned));
    printf("held       %s pins, %s holds (+%s pending), %s grants outstanding "
           "(%s expired, %s dead peer)\n",
           count_str(&f, x->pins), count_str(&f, x->holds_active), count_str(&f, x->holds_pending),
           count_str(&f, x->grants), count_str(&f, x->grants_expired),
           count_str(&f, x->grants_dead_peer));
    f.next = 0;
    printf("grants     %s refused (max_grants, max_grants_per_peer), %s 'done' of another "
           "connection\n",
           count_str(&f, x->grants_refused), count_str(&f, x->dones_rejected));
    printf("stream     %s grants served, %s sent, %s moved between threads; %s denied, "
           "%s bad requests\n",
           count_str(&f, x->stream_served), bytes_str(&f, x->stream_bytes),
           count_str(&f, x->stream_moved), count_str(&f, x->stream_denied),
           count_str(&f, x->stream_bad_requests));
    printf("stream cut %s connections refused, %s timed out, %s by the peer\n",
           count_str(&f, x->stream_conns_refused), count_str(&f, x->stream_timeouts),
           count_str(&f, x->stream_send_failures));
    printf("evictions  %s entries, %s blocks; %s allocations refused (region full)\n",
           count_str(&f, x->evictions), count_str(&f, x->evicted_blocks),
           count_str(&f, x->alloc_no_space));
    printf("events     %s batches, %s dropped, %s missed at the hwm, %s replays (%s refused)\n",
           count_str(&f, x->ev_batches), count_str(&f, x->ev_dropped),
           count_str(&f, x->ev_hwm_drops), count_str(&f, x->ev_replays),
           count_str(&f, x->ev_replay_errors));
}

/* The percentiles of what a histogram gained between two scrapes. */
static void
print_hist_rates(const struct hist *prev, const struct hist *x, const char *what)
{
    double dcum[BUCKETS_MAX];
    size_t n = x->n_buckets == prev->n_buckets ? x->n_buckets : 0;
    for (size_t i = 0; i < n; i++) {
        if (x->le[i] != prev->le[i])
            n = 0;
        else
            dcum[i] = x->cum[i] - prev->cum[i];
    }
    print_percentiles(x->le, dcum, n, x->count - prev->count, x->sum - prev->sum, what);
}

/* The rates between two scrapes, or why there are none. */
static void
print_rates(const struct figures *prev, const struct figures *x)
{
    struct fmt f = {.next = 0};
    double dt = x->scraped_at_s - prev->scraped_at_s;
    double lookups = (x->hits + x->misses) - (prev->hits + prev->misses);
    if (lookups < 0 || x->saves_queued < prev->saves_queued || x->fetch.count < prev->fetch.count) {
        printf("last %.2f s: the counters went back: the instance restarted\n", dt);
        return;
    }
    printf("last %.2f s\n", dt);
    printf("  lookups  %s, CPU-tier hit rate %s\n", rate_str(&f, lookups / dt),
           percent_str(&f, x->hits - prev->hits, lookups));
    printf("  saves    %s, %s/s; loads %s, %s/s\n",
           rate_str(&f, (x->saves_completed - prev->saves_completed) / dt),
           bytes_str(&f, (x->save_bytes - prev->save_bytes) / dt),
           rate_str(&f, (x->loads_completed - prev->loads_completed) / dt),
           bytes_str(&f, (x->load_bytes - prev->load_bytes) / dt));
    printf("  p2p      reads %s, %s/s; fallbacks %s, NACKs %s\n",
           rate_str(&f, (x->reads_completed - prev->reads_completed) / dt),
           bytes_str(&f, (x->read_bytes - prev->read_bytes) / dt),
           rate_str(&f, (x->fallbacks - prev->fallbacks) / dt),
           rate_str(&f, (x->nacks_received - prev->nacks_received) / dt));
    printf("  stream   served %s, %s/s; denied %s, grants refused %s\n",
           rate_str(&f, (x->stream_served - prev->stream_served) / dt),
           bytes_str(&f, (x->stream_bytes - prev->stream_bytes) / dt),
           rate_str(&f, (x->stream_denied - prev->stream_denied) / dt),
           rate_str(&f, (x->grants_refused - prev->grants_refused) / dt));
    printf("  fetch    ");
    print_hist_rates(&prev->fetch, &x->fetch, "fetches");
    printf("    read   ");
    print_hist_rates(&prev->read, &x->read, "reads");
}

/* ---- the command ------------------------------------------------------------------- */

/* One scrape of address into *prom_p and *f.  Returns 0 or 1 (printed). */
static int
scrape(const char *address, int timeout_ms, ect__prom_t *prom_p, struct figures *f, size_t *bytes_p,
       double *took_s_p)
{
    char *body = NULL;
    size_t len = 0;
    double t0 = ect__now_s();
    ect_status_t st = ect__http_get(address, "/metrics", timeout_ms, BODY_MAX, &body, &len);
    if (st != ECT_OK)
        return ect_cli_fail("stats", "%s", ect_last_error());
    *took_s_p = ect__now_s() - t0;
    *bytes_p = len;
    st = ect__prom_parse(body, len, prom_p);
    free(body);
    if (st != ECT_OK)
        return ect_cli_fail("stats", "%s: %s", address, ect_last_error());
    if (!ect__prom_get(prom_p, NAME_PREFIX "hits_total", "", NULL)) {
        ect__prom_cleanup(prom_p);
        return ect_cli_fail("stats",
                            "%s: no " NAME_PREFIX "hits_total in its metrics: not an ectier "
                            "metrics endpoint (the instance's metrics_address)",
                            address);
    }
    read_figures(prom_p, f);
    f->scraped_at_s = ect__now_s();
    return 0;
}

static int
parse_seconds(const char *text, double lo, double hi, double *out)
{
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

static void
sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

int
ect_cli_stats(int argc, char **argv)
{
    const char *address = NULL;
    int watch = 0;
    double interval = 1, timeout = 5;
    unsigned long count = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("%s", usage);
            return 0;
        } else if (strcmp(a, "--watch") == 0) {
            watch = 1;
        } else if (strcmp(a, "--interval") == 0 || strcmp(a, "--timeout") == 0 ||
                   strcmp(a, "--count") == 0) {
            if (++i >= argc)
                return ect_cli_usage_error("stats", usage, "%s needs a value", a);
            if (strcmp(a, "--count") == 0) {
                char *end = NULL;
                count = strtoul(argv[i], &end, 10);
                if (end == argv[i] || *end != '\0' || argv[i][0] == '-' || count == 0 ||
                    count > 1000000)
                    return ect_cli_usage_error(
                        "stats", usage, "--count '%s': use a whole number 1 to 1000000", argv[i]);
            } else if (parse_seconds(argv[i], a[2] == 'i' ? 0.05 : 0.01, 3600,
                                     a[2] == 'i' ? &interval : &timeout) != 0) {
                return ect_cli_usage_error("stats", usage, "%s '%s': use seconds, %s to 3600", a,
                                           argv[i], a[2] == 'i' ? "0.05" : "0.01");
            }
        } else if (a[0] == '-') {
            return ect_cli_usage_error("stats", usage, "unknown option '%s'", a);
        } else if (address == NULL) {
            address = a;
        } else {
            return ect_cli_usage_error("stats", usage, "more than one address ('%s')", a);
        }
    }
    if (address == NULL)
        return ect_cli_usage_error("stats", usage, "which instance? give its HOST:PORT");
    if (count == 0)
        count = watch ? 0 : 1;
    int tty = isatty(STDOUT_FILENO);
    int rc = 1, have_prev = 0;
    struct figures prev = {0}, cur = {0};
    for (unsigned long n = 0; count == 0 || n < count; n++) {
        if (n > 0)
            sleep_s(interval);
        ect__prom_t prom;
        size_t bytes = 0;
        double took = 0;
        /* --watch keeps going when a scrape fails: the instance may come back. */
        rc = scrape(address, (int)(timeout * 1000), &prom, &cur, &bytes, &took);
        if (rc != 0) {
            have_prev = 0;
            if (!watch)
                return rc;
            continue;
        }
        if (watch && tty)
            printf("\033[H\033[2J");
        else if (n > 0)
            printf("\n");
        struct fmt f = {.next = 0};
        printf("ectier stats %s: %s of metrics in %s\n", address, bytes_str(&f, (double)bytes),
               seconds_str(&f, took));
        print_summary(&prom, &cur);
        if (watch && have_prev)
            print_rates(&prev, &cur);
        fflush(stdout);
        ect__prom_cleanup(&prom);
        prev = cur;
        have_prev = 1;
    }
    return rc;
}
