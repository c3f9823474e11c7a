/*
 * The consumer session (SPEC §8.5): fetches announced encodings from
 * producers into this instance's region.
 *
 * The scheduler asks for a fetch (ect__consumer_fetch): the session
 * allocates the entry's blocks (not ready), sends an XferReq and, from its
 * own thread, carries the transfer through its states:
 *
 *   WAITING_ACK --ack OK--> READING --landed--> DONE (entry ready, producer
 *        |                     |                       told with "done")
 *        |                     +--failed--> FAILED (blocks freed)
 *        |                     +--read timeout--> QUARANTINED: blocks stay
 *        |                          fenced until the read settles or the
 *        |                          quarantine ends, then freed
 *        +--NACK_NOT_READY--> RETRY: blocks kept, request sent again after
 *        |                    a short backoff (the seed frees and
 *        |                    re-allocates them every step)
 *        +--other NACK / ack timeout--> FAILED (blocks freed)
 *
 * FAILED and QUARANTINED transfers leave a failure for the scheduler to take
 * (it falls back to local encoding or fails the request).  DONE transfers
 * are forgotten once the entry is ready.
 *
 * Locking: `lock` guards the transfer table, the counters and every call
 * into the data-transport client; the session thread owns the DEALER pool.
 * A tcp read that lands is completed (entry ready) on the stream thread
 * that received its last byte, when that thread gets the lock at once;
 * everything else happens on the session thread.
 */
#ifndef ECT_P2P_CONSUMER_H
#define ECT_P2P_CONSUMER_H

#include <ectier/cache.h>
#include <ectier/config.h>
#include <ectier/geometry.h>
#include <ectier/metrics.h>
#include <ectier/region.h>

typedef struct ect_consumer ect_consumer_t;

typedef struct ect_consumer_params {
    const ect_config_t *config;     /* copied */
    const ect_geometry_t *geometry; /* copied */
    ect_cache_t *cache;             /* borrowed */
    ect_region_t *region;           /* borrowed */
    const char *compat_hash;        /* 64 hex, copied */
} ect_consumer_params_t;

ect_status_t ect__consumer_start(const ect_consumer_params_t *params, ect_consumer_t **consumer_p);

/* Stop the thread; transfers still reading are waited for up to their
 * deadline (their DMA may still land), then every tracked entry is freed. */
void ect__consumer_stop(ect_consumer_t *consumer);

typedef enum ect_fetch_state {
    ECT_FETCH_NONE = 0,    /* not tracked */
    ECT_FETCH_PENDING = 1, /* waiting for an ack, reading, or retrying */
    ECT_FETCH_FAILED = 2,  /* failed (a failure is waiting to be taken) */
} ect_fetch_state_t;

/* Start fetching mm_hash from the producer at host:port into a new entry
 * `key` of n_blocks blocks.  Returns ECT_OK, ECT_ERR_EXISTS (already
 * tracked), ECT_ERR_NO_SPACE (the region has no room now: the caller
 * defers), ECT_ERR_OVERFLOW, ECT_ERR_NO_MEMORY. */
ect_status_t ect__consumer_fetch(ect_consumer_t *consumer, const char *key, const char *mm_hash,
                                 const char *host, uint16_t port, uint64_t n_blocks);

/* Where the fetch of key stands (DONE fetches are NONE: the entry is ready). */
ect_fetch_state_t ect__consumer_state(ect_consumer_t *consumer, const char *key);

/* Consume the failure of key: returns 1 (and the reason in buf) if there was
 * one.  The transfer is forgotten, except a quarantined one, whose blocks
 * stay fenced until it settles. */
int ect__consumer_take_failure(ect_consumer_t *consumer, const char *key, char *reason, size_t cap);

/* Give up on key (its request's defer budget ran out): a transfer waiting
 * for an ack or retrying is dropped and its blocks freed; one reading is
 * quarantined.  No failure is left behind. */
void ect__consumer_cancel(ect_consumer_t *consumer, const char *key);

/* Transfers in any state but DONE. */
int ect__consumer_has_pending(ect_consumer_t *consumer);

void ect__consumer_metrics(ect_consumer_t *consumer, ect_metrics_t *metrics);

#endif /* ECT_P2P_CONSUMER_H */
