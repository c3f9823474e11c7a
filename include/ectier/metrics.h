/*
 * Counters of one instance, readable through the API and as Prometheus text
 * (SPEC §9.7).  Counters only grow; gauges (occupancy, pins, holds) are
 * snapshots.  A latency histogram has fixed upper bounds
 * (ECT_METRICS_LATENCY_BOUNDS_S) plus an overflow bucket.
 */
#ifndef ECTIER_METRICS_H
#define ECTIER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/cache.h>
#include <ectier/status.h>
#include <ectier/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ECT_METRICS_LATENCY_BUCKETS 12
/* Upper bounds in seconds of the latency buckets; the last bucket is +Inf. */
#define ECT_METRICS_LATENCY_BOUNDS_S                                                               \
    {                                                                                              \
        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0, 0.0 /* +Inf */ \
    }

typedef struct ect_latency_hist {
    uint64_t buckets[ECT_METRICS_LATENCY_BUCKETS]; /* non-cumulative counts */
    uint64_t count;
    uint64_t sum_ns;
} ect_latency_hist_t;

typedef struct ect_metrics {
    /* local CPU tier (scheduler side) */
    uint64_t hits;   /* has_cache_item found a ready entry */
    uint64_t misses; /* has_cache_item found none */
    uint64_t saves_queued;
    uint64_t saves_completed;
    uint64_t saves_failed;       /* the worker reported the copy did not land */
    uint64_t saves_skipped_full; /* region full: the encoding stayed GPU-only */
    uint64_t loads_queued;
    uint64_t loads_completed;   /* every rank reported */
    uint64_t reports_ignored;   /* unknown, late or replayed report entries */
    uint64_t reports_malformed; /* undecodable worker report bytes */
    /* copies, from the workers' reports */
    uint64_t save_bytes;
    uint64_t save_ns;
    uint64_t load_bytes;
    uint64_t load_ns;
    /* peer-to-peer (zero without P2P) */
    uint64_t p2p_reads_started;
    uint64_t p2p_reads_completed;
    uint64_t p2p_read_bytes;
    uint64_t p2p_fallbacks;   /* items computed locally after a P2P failure */
    uint64_t p2p_unavailable; /* requests failed through take_unavailable_requests */
    uint64_t p2p_retries;     /* NACK_NOT_READY retries */
    uint64_t p2p_ack_timeouts;
    uint64_t p2p_read_timeouts; /* reads quarantined */
    uint64_t p2p_transport_errors;
    uint64_t acks_received[ECT_XFER_STATUS_COUNT]; /* consumer: by ect_xfer_status_t */
    uint64_t acks_sent[ECT_XFER_STATUS_COUNT];     /* producer: by ect_xfer_status_t */
    uint64_t wire_dropped;                         /* undecodable control messages */
    /* producer: control messages dropped for their framing (no empty
     * delimiter frame, a missing or extra frame, a payload over
     * ECT_CTL_MAX_MESSAGE); never answered */
    uint64_t control_framing_dropped;
    uint64_t grants_outstanding; /* producer: reads granted, not yet served */
    uint64_t grants_expired;
    uint64_t grants_released_dead_peer;
    uint64_t announcements;
    uint64_t grants_refused; /* producer: requests over max_grants / max_grants_per_peer */
    uint64_t dones_rejected; /* producer: "done" naming a grant of another connection */
    /* producer: the TCP data stream */
    uint64_t stream_served;        /* grants whose bytes were all sent */
    uint64_t stream_bytes;         /* their payload bytes */
    uint64_t stream_denied;        /* requests naming no live grant, or the wrong size */
    uint64_t stream_bad_requests;  /* malformed requests (connection cut) */
    uint64_t stream_conns_refused; /* connections over the cap or while out of fds */
    uint64_t stream_timeouts;      /* connections cut by a request or send deadline */
    uint64_t stream_send_failures; /* streams cut by the peer */
    uint64_t stream_moved;         /* requests moved to a less busy sending thread */
    uint64_t stream_unaligned;     /* streams sent with the 16-byte header of older consumers */
    ect_latency_hist_t p2p_fetch_latency; /* request sent -> entry ready */
    /* ack received -> bytes landed: the data transport's part of a fetch
     * (the rest is the XferReq/XferAck round trip and the engine's polls) */
    ect_latency_hist_t p2p_read_latency;
    /* the event stream (zero without events_endpoint) */
    uint64_t events_batches;       /* batches numbered and published */
    uint64_t events_dropped;       /* events lost before numbering: the queue was full */
    uint64_t events_hwm_drops;     /* batches a subscriber missed at its high-water mark */
    uint64_t events_replays;       /* replays answered to the end marker */
    uint64_t events_replay_errors; /* replay requests refused (malformed, busy) or abandoned */
    /* the cache (occupancy, pins, holds, evictions, runs per entry) */
    ect_cache_stats_t cache;
} ect_metrics_t;

/* Add one latency sample. */
ECT_API void ect_latency_hist_add(ect_latency_hist_t *hist, uint64_t ns);

/* The p-quantile (0..1) of a histogram in seconds, interpolated inside its
 * bucket; 0 for an empty histogram. */
ECT_API double ect_latency_hist_quantile(const ect_latency_hist_t *hist, double p);

/* Render metrics as Prometheus text exposition (names prefixed "ectier_").
 * Writes at most cap bytes (NUL-terminated) and sets *len_p to the full
 * length; ECT_ERR_OVERFLOW if it did not fit (call again with *len_p + 1). */
ECT_API ECT_MUST_CHECK ect_status_t ect_metrics_format_prometheus(const ect_metrics_t *metrics,
                                                                  char *buf, size_t cap,
                                                                  size_t *len_p);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_METRICS_H */
