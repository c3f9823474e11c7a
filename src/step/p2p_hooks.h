/*
 * The seam between the scheduler side (core) and peer-to-peer transfer.
 *
 * The scheduler calls these functions; a P2P build implements them in
 * src/p2p/ (producer and consumer sessions over ZeroMQ and the data
 * transports), a build without P2P links src/p2p/absent/, where creating a
 * session fails with ECT_ERR_UNSUPPORTED and a message saying how to get it.
 * Only ectier's own symbols cross this seam, so the core objects reference
 * no transfer library.
 *
 * Thread safety: every function may be called from the scheduler's thread
 * while the sessions' own threads run; the implementation locks.
 */
#ifndef ECT_STEP_P2P_HOOKS_H
#define ECT_STEP_P2P_HOOKS_H

#include <ectier/cache.h>
#include <ectier/config.h>
#include <ectier/geometry.h>
#include <ectier/metrics.h>
#include <ectier/region.h>
#include <ectier/scheduler.h>

struct ect__p2p;
struct ect__events;

typedef struct ect__p2p_params {
    const ect_config_t *config;     /* borrowed for the call; copied */
    const ect_geometry_t *geometry; /* borrowed for the call; copied */
    ect_cache_t *cache;             /* borrowed for the sessions' life */
    ect_region_t *region;           /* borrowed for the sessions' life */
    const char *engine_version;     /* compatibility hash inputs */
    const char *model_name;
    struct ect__events *events; /* borrowed for the sessions' life; NULL: none */
} ect__p2p_params_t;

/* Start the event stream (SPEC §9.1, src/p2p/events.h): bind a ZeroMQ PUB
 * socket at config->events_endpoint (and a ROUTER for replays at
 * events_replay_endpoint when set), publish the cache's events (it becomes
 * the cache's listener) tagged with instance (borrowed, copied: the region
 * name).  Returns ECT_OK, ECT_ERR_UNSUPPORTED (no ZeroMQ in this build),
 * ECT_ERR_TRANSPORT (cannot bind; the message names the endpoint),
 * ECT_ERR_CONFIG (a zero buffer or high-water mark), ECT_ERR_NO_MEMORY,
 * ECT_ERR_INTERNAL. */
ect_status_t ect__p2p_events_start(const ect_config_t *config, ect_cache_t *cache,
                                   const char *instance, struct ect__events **events_p);

/* Detach from the cache, publish what is queued, close the socket.  Call
 * after ect__p2p_destroy of the sessions that publish to it.  NULL is a
 * no-op. */
void ect__p2p_events_stop(struct ect__events *events);

/* Add the stream's counters (batches, drops, replays) to metrics.  Safe
 * from any thread while the stream runs; NULL events adds nothing. */
void ect__p2p_events_metrics(struct ect__events *events, ect_metrics_t *metrics);

/* Start the sessions the role needs (a producer serves, a consumer fetches).
 * Returns ECT_OK, ECT_ERR_UNSUPPORTED (no P2P in this build),
 * ECT_ERR_TRANSPORT (cannot bind or start a transport), ECT_ERR_CONFIG. */
ect_status_t ect__p2p_create(const ect__p2p_params_t *params, struct ect__p2p **p2p_p);

/* Stop the sessions' threads, release grants, holds and reads (waiting for
 * reads that may still land), close sockets.  NULL is a no-op. */
void ect__p2p_destroy(struct ect__p2p *p2p);

/* Producer: ec_transfer_params for a finished request (malloc'd JSON object
 * text, or NULL when the request has no media).  Each announced entry takes
 * a hold with the announce lease. */
ect_status_t ect__p2p_announce(struct ect__p2p *p2p, const ect_request_t *request,
                               char **params_json_p);

/* Consumer: the P2P part of ensure_cache_available (SPEC §8.5). */
ect_status_t ect__p2p_ensure(struct ect__p2p *p2p, const ect_request_t *request, int *available_p);

/* Consumer: a request ended; forget its defer budgets. */
void ect__p2p_request_finished(struct ect__p2p *p2p, const ect_request_t *request);

/* Consumer: requests that must fail; as ect_scheduler_take_unavailable_requests. */
size_t ect__p2p_take_unavailable(struct ect__p2p *p2p, char **ids, size_t cap);

/* Reads, retries, quarantines, grants or holds outstanding. */
int ect__p2p_has_pending(struct ect__p2p *p2p);

/* Add the sessions' counters to metrics. */
void ect__p2p_metrics(struct ect__p2p *p2p, ect_metrics_t *metrics);

/* The producer's published address (after port 0 was resolved), for tests
 * and tools; "" / 0 when not a producer. */
const char *ect__p2p_host(const struct ect__p2p *p2p);
uint16_t ect__p2p_port(const struct ect__p2p *p2p);

#endif /* ECT_STEP_P2P_HOOKS_H */
