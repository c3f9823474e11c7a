/*
 * The producer session (SPEC §8.4, §8.6): serves this instance's ready
 * entries to consumers.
 *
 * A thread owns the control-plane ROUTER and answers each XferReq at once
 * (not once per engine step): checks in order (version, compatibility hash,
 * session id, entry absent, entry not ready), then pins the entry, records a
 * grant keyed "session_id:mm_hash" with the pin lease, and acks with the
 * entry's block ids and the data transports' offer.  A grant ends when the
 * consumer reports the read done (a "done" message), when its lease lapses,
 * or when the consumer's connection dies; each ending unpins once.
 *
 * Announcements (request_finished) take a hold per announced entry; a served
 * read releases the oldest hold of its entry, the lease releases the rest.
 *
 * Locking: `lock` guards grants, announcements and counters; the cache has
 * its own lock.  The session thread is the only user of the ROUTER.
 */
#ifndef ECT_P2P_PRODUCER_H
#define ECT_P2P_PRODUCER_H

#include <ectier/cache.h>
#include <ectier/config.h>
#include <ectier/geometry.h>
#include <ectier/metrics.h>
#include <ectier/region.h>
#include <ectier/scheduler.h>

typedef struct ect_producer ect_producer_t;

typedef struct ect_producer_params {
    const ect_config_t *config;     /* copied */
    const ect_geometry_t *geometry; /* copied */
    ect_cache_t *cache;             /* borrowed */
    ect_region_t *region;           /* borrowed */
    const char *compat_hash;        /* 64 hex, copied */
    struct ect__events *events;     /* borrowed; NULL: no event stream */
} ect_producer_params_t;

ect_status_t ect__producer_start(const ect_producer_params_t *params, ect_producer_t **producer_p);

/* Stop the thread, release every grant and hold, close the sockets. */
void ect__producer_stop(ect_producer_t *producer);

/* ec_transfer_params for a finished request (see p2p_hooks.h). */
ect_status_t ect__producer_announce(ect_producer_t *producer, const ect_request_t *request,
                                    char **params_json_p);

/* Grants or holds outstanding. */
int ect__producer_has_pending(ect_producer_t *producer);

void ect__producer_metrics(ect_producer_t *producer, ect_metrics_t *metrics);

const char *ect__producer_host(const ect_producer_t *producer);
uint16_t ect__producer_port(const ect_producer_t *producer);

#endif /* ECT_P2P_PRODUCER_H */
