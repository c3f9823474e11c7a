/*
 * Latency histograms and the Prometheus text rendering of ect_metrics_t.
 *
 * Rendering writes into the caller's buffer with a bounded appender: it
 * never overruns, keeps counting the length it would need, and reports
 * ECT_ERR_OVERFLOW so the caller can retry with a larger buffer.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/metrics.h>

#include "common/alloc.h"
#include "common/error.h"
#include "metrics/render.h"

static const double latency_bounds[ECT_METRICS_LATENCY_BUCKETS] = ECT_METRICS_LATENCY_BOUNDS_S;

void
ect_latency_hist_add(ect_latency_hist_t *hist, uint64_t ns)
{
    if (hist == NULL)
        return;
    double s = (double)ns / 1e9;
    size_t b = 0;
    while (b < ECT_METRICS_LATENCY_BUCKETS - 1 && s > latency_bounds[b])
        b++;
    hist->buckets[b]++;
    hist->count++;
    hist->sum_ns += ns;
}

double
ect_latency_hist_quantile(const ect_latency_hist_t *hist, double p)
{
    if (hist == NULL || hist->count == 0)
        return 0.0;
    if (p < 0)
        p = 0;
    if (p > 1)
        p = 1;
    double target = p * (double)hist->count;
    uint64_t seen = 0;
    for (size_t b = 0; b < ECT_METRICS_LATENCY_BUCKETS; b++) {
        if (hist->buckets[b] == 0)
            continue;
        if ((double)(seen + hist->buckets[b]) >= target) {
            double lo = b == 0 ? 0.0 : latency_bounds[b - 1];
            /* The overflow bucket has no upper bound: report its lower one. */
            if (b == ECT_METRICS_LATENCY_BUCKETS - 1)
                return lo;
            double hi = latency_bounds[b];
            double frac = (target - (double)seen) / (double)hist->buckets[b];
            return lo + (hi - lo) * frac;
        }
        seen += hist->buckets[b];
    }
    return latency_bounds[ECT_METRICS_LATENCY_BUCKETS - 2];
}

struct out {
    char *buf;
    size_t cap;
    size_t len;
};

static void out_printf(struct out *o, const char *fmt, ...) ECT_PRINTF(2, 3);

static void
out_printf(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

static void
counter(struct out *o, const char *name, const char *help, uint64_t v)
{
    out_printf(o, "# HELP ectier_%s %s\n# TYPE ectier_%s counter\nectier_%s %llu\n", name, help,
               name, name, (unsigned long long)v);
}

static void
gauge(struct out *o, const char *name, const char *help, uint64_t v)
{
    out_printf(o, "# HELP ectier_%s %s\n# TYPE ectier_%s gauge\nectier_%s %llu\n", name, help, name,
               name, (unsigned long long)v);
}

static void
seconds_counter(struct out *o, const char *name, const char *help, uint64_t ns)
{
    out_printf(o, "# HELP ectier_%s %s\n# TYPE ectier_%s counter\nectier_%s %.9f\n", name, help,
               name, name, (double)ns / 1e9);
}

static void
histogram(struct out *o, const char *name, const char *help, const ect_latency_hist_t *h)
{
    out_printf(o, "# HELP ectier_%s %s\n# TYPE ectier_%s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t b = 0; b < ECT_METRICS_LATENCY_BUCKETS; b++) {
        cum += h->buckets[b];
        if (b == ECT_METRICS_LATENCY_BUCKETS - 1)
            out_printf(o, "ectier_%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
        else
            out_printf(o, "ectier_%s_bucket{le=\"%g\"} %llu\n", name, latency_bounds[b],
                       (unsigned long long)cum);
    }
    out_printf(o, "ectier_%s_sum %.9f\nectier_%s_count %llu\n", name, (double)h->sum_ns / 1e9, name,
               (unsigned long long)h->count);
}

static void
by_status(struct out *o, const char *name, const char *help, const uint64_t *v)
{
    out_printf(o, "# HELP ectier_%s %s\n# TYPE ectier_%s counter\n", name, help, name);
    for (int i = 0; i < ECT_XFER_STATUS_COUNT; i++)
        out_printf(o, "ectier_%s{status=\"%s\"} %llu\n", name, ect_xfer_status_str(i),
                   (unsigned long long)v[i]);
}

ect_status_t
ect_metrics_format_prometheus(const ect_metrics_t *m, char *buf, size_t cap, size_t *len_p)
{
    if (m == NULL || len_p == NULL || (buf == NULL && cap > 0))
        return ect__error(ECT_ERR_INVALID_ARG, "metrics format: NULL argument");
    struct out o = {buf, cap, 0};
    counter(&o, "hits_total", "CPU-tier lookups that found a ready entry.", m->hits);
    counter(&o, "misses_total", "CPU-tier lookups that found no ready entry.", m->misses);
    counter(&o, "saves_queued_total", "Saves handed to the workers.", m->saves_queued);
    counter(&o, "saves_completed_total", "Saves that landed in the region.", m->saves_completed);
    counter(&o, "saves_failed_total", "Saves whose copy did not land.", m->saves_failed);
    counter(&o, "saves_skipped_full_total", "Saves skipped because the region was full.",
            m->saves_skipped_full);
    counter(&o, "loads_queued_total", "Loads handed to the workers.", m->loads_queued);
    counter(&o, "loads_completed_total", "Loads reported by every rank.", m->loads_completed);
    counter(&o, "reports_ignored_total", "Unknown, late or replayed worker report entries.",
            m->reports_ignored);
    counter(&o, "reports_malformed_total", "Undecodable worker reports.", m->reports_malformed);
    counter(&o, "save_bytes_total", "Bytes copied into the region.", m->save_bytes);
    seconds_counter(&o, "save_seconds_total", "Time spent in save copies.", m->save_ns);
    counter(&o, "load_bytes_total", "Bytes copied out of the region.", m->load_bytes);
    seconds_counter(&o, "load_seconds_total", "Time spent in load copies.", m->load_ns);
    counter(&o, "p2p_reads_started_total", "Peer reads started.", m->p2p_reads_started);
    counter(&o, "p2p_reads_completed_total", "Peer reads that landed.", m->p2p_reads_completed);
    counter(&o, "p2p_read_bytes_total", "Bytes read from peers.", m->p2p_read_bytes);
    counter(&o, "p2p_fallbacks_total", "Items computed locally after a P2P failure.",
            m->p2p_fallbacks);
    counter(&o, "p2p_unavailable_total", "Requests failed because an encoding was lost.",
            m->p2p_unavailable);
    counter(&o, "p2p_retries_total", "Reads retried after NACK_NOT_READY.", m->p2p_retries);
    counter(&o, "p2p_ack_timeouts_total", "Requests whose ack did not come in time.",
            m->p2p_ack_timeouts);
    counter(&o, "p2p_read_timeouts_total", "Reads that timed out and were quarantined.",
            m->p2p_read_timeouts);
    counter(&o, "p2p_transport_errors_total", "Data transport failures.", m->p2p_transport_errors);
    by_status(&o, "acks_received_total", "XferAcks received, by status.", m->acks_received);
    by_status(&o, "acks_sent_total", "XferAcks sent, by status.", m->acks_sent);
    counter(&o, "wire_dropped_total", "Undecodable control messages dropped.", m->wire_dropped);
    counter(&o, "control_framing_dropped_total",
            "Control messages dropped for bad framing (no delimiter, missing or extra frames, "
            "oversized payload).",
            m->control_framing_dropped);
    gauge(&o, "grants_outstanding", "Reads granted to peers and not yet served.",
          m->grants_outstanding);
    counter(&o, "grants_expired_total", "Grants released by their lease.", m->grants_expired);
    counter(&o, "grants_refused_total",
            "Read requests refused because max_grants or max_grants_per_peer was reached.",
            m->grants_refused);
    counter(&o, "dones_rejected_total",
            "'done' messages ignored because they named another connection's grant.",
            m->dones_rejected);
    counter(&o, "data_streams_served_total", "Grants whose bytes the data stream sent in full.",
            m->stream_served);
    counter(&o, "data_stream_bytes_total", "Payload bytes the data stream sent.", m->stream_bytes);
    counter(
        &o, "data_streams_denied_total",
        "Data-stream requests naming no live grant (forged, replayed, lapsed) or the wrong size.",
        m->stream_denied);
    counter(&o, "data_stream_bad_requests_total",
            "Malformed data-stream requests (connection cut).", m->stream_bad_requests);
    counter(&o, "data_connections_refused_total",
            "Data-stream connections closed at once (connection cap, or out of descriptors).",
            m->stream_conns_refused);
    counter(&o, "data_stream_timeouts_total",
            "Data-stream connections cut for missing a request or send deadline, and striped "
            "grants released because stripes did not come in time.",
            m->stream_timeouts);
    counter(&o, "data_stream_send_failures_total", "Data streams cut by the peer.",
            m->stream_send_failures);
    counter(&o, "data_streams_moved_total",
            "Unstriped data-stream requests that found their connection's sending thread busy "
            "and were moved to a less busy one (reads at once).",
            m->stream_moved);
    counter(&o, "data_streams_unaligned_total",
            "Data streams (a stripe counts as one) sent with the 16-byte header that consumers "
            "older than aligned answers ask for; their copies run slower at both ends.",
            m->stream_unaligned);
    counter(&o, "grants_released_dead_peer_total", "Grants released because the peer died.",
            m->grants_released_dead_peer);
    counter(&o, "announcements_total", "Encodings announced to an orchestrator.", m->announcements);
    histogram(&o, "p2p_fetch_seconds", "Peer fetch latency, request sent to entry ready.",
              &m->p2p_fetch_latency);
    histogram(&o, "p2p_read_seconds",
              "Peer read latency, ack received to bytes landed (the data transport's part of a "
              "fetch).",
              &m->p2p_read_latency);
    counter(&o, "events_batches_total", "Event stream batches published.", m->events_batches);
    counter(&o, "events_dropped_total", "Events lost before publishing: the queue was full.",
            m->events_dropped);
    counter(&o, "events_hwm_drops_total",
            "Event batches a subscriber missed at its high-water mark (replayable).",
            m->events_hwm_drops);
    counter(&o, "events_replays_total", "Event replays answered to the end.", m->events_replays);
    counter(&o, "events_replay_errors_total",
            "Event replay requests refused (malformed, busy) or abandoned.",
            m->events_replay_errors);
    const ect_cache_stats_t *c = &m->cache;
    gauge(&o, "region_blocks", "Blocks in the region.", c->num_blocks);
    gauge(&o, "region_used_blocks", "Blocks held by entries.", c->used_blocks);
    gauge(&o, "region_evictable_blocks", "Blocks of ready, unpinned entries.", c->evictable_blocks);
    gauge(&o, "entries", "Entries in the cache.", c->entries);
    gauge(&o, "entries_not_ready", "Entries being saved or read.", c->entries_not_ready);
    gauge(&o, "entries_pinned", "Entries pinned by loads, reads or holds.", c->entries_pinned);
    gauge(&o, "pins", "Explicit pins outstanding.", c->pins);
    gauge(&o, "holds_active", "Announcement holds pinning an entry.", c->holds_active);
    gauge(&o, "holds_pending", "Announcement holds waiting for a save.", c->holds_pending);
    counter(&o, "evictions_total", "Entries evicted to make room.", c->evicted_entries);
    counter(&o, "evicted_blocks_total", "Blocks freed by eviction.", c->evicted_blocks);
    counter(&o, "alloc_no_space_total", "Allocations refused: region full.", c->alloc_no_space);
    out_printf(&o, "# HELP ectier_entry_runs Live entries by number of block runs.\n"
                   "# TYPE ectier_entry_runs gauge\n");
    static const char *const run_labels[ECT_CACHE_RUN_BUCKETS] = {"1",   "2",    "3",  "4",
                                                                  "5-8", "9-16", ">16"};
    for (size_t i = 0; i < ECT_CACHE_RUN_BUCKETS; i++)
        out_printf(&o, "ectier_entry_runs{runs=\"%s\"} %llu\n", run_labels[i],
                   (unsigned long long)c->runs_histogram[i]);
    *len_p = o.len;
    if (o.len >= cap)
        return ect__error(ECT_ERR_OVERFLOW, "metrics format: need %zu bytes, have %zu", o.len + 1,
                          cap);
    return ECT_OK;
}

ect_status_t
ect__metrics_render(const ect_metrics_t *metrics, char **text_p, size_t *len_p)
{
    if (metrics == NULL || text_p == NULL || len_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "metrics render: NULL argument");
    size_t cap = 16384, len = 0;
    for (;;) {
        char *buf = ect__malloc(cap);
        if (buf == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "metrics render: out of memory (%zu bytes)", cap);
        ect_status_t st = ect_metrics_format_prometheus(metrics, buf, cap, &len);
        if (st == ECT_OK) {
            *text_p = buf;
            *len_p = len;
            return ECT_OK;
        }
        ect__free(buf);
        if (st != ECT_ERR_OVERFLOW || len + 1 <= cap)
            return st;
        cap = len + 1;
    }
}
