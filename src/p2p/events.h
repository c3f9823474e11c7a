/*
 * The lifecycle event stream (SPEC §9.1): a ZeroMQ PUB socket bound at the
 * events_endpoint setting publishes one two-frame message per event of an
 * instance's cache: topic "ectier.<event>", then a JSON object
 * {"event", "key", "n_blocks", "instance", "t"} (t: unix time in ns when the
 * event happened).  Events: stored, evicted, discarded (the cache listener),
 * announced (the producer, per announced entry) and withdrawn (published
 * right after the evicted or discarded event of a key that was announced
 * and not withdrawn since).
 *
 * Producers of events never block and never touch the socket: they append
 * to a bounded queue under a mutex (the cache listener does so under the
 * cache's lock); one publisher thread owns the socket and sends.  When the
 * queue is full the event is dropped and counted.
 */
#ifndef ECT_P2P_EVENTS_H
#define ECT_P2P_EVENTS_H

#include <stdint.h>

#include <ectier/cache.h>
#include <ectier/status.h>

struct ect__events;

/* Events beyond the cache listener's. */
typedef enum ect__event_kind {
    ECT__EVENT_STORED = ECT_CACHE_EVENT_STORED,
    ECT__EVENT_EVICTED = ECT_CACHE_EVENT_EVICTED,
    ECT__EVENT_DISCARDED = ECT_CACHE_EVENT_DISCARDED,
    ECT__EVENT_ANNOUNCED,
    ECT__EVENT_WITHDRAWN,
} ect__event_kind_t;

/* Queue one event (key borrowed, copied).  Never blocks on I/O; safe from
 * any thread, under any lock.  events NULL is a no-op. */
void ect__events_publish(struct ect__events *events, ect__event_kind_t kind, const char *key,
                         uint64_t n_blocks);

/* Events dropped so far because the queue was full (or out of memory). */
uint64_t ect__events_dropped(struct ect__events *events);

#endif /* ECT_P2P_EVENTS_H */
