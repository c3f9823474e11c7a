/*
 * Internal entry points of the scheduler side (src/step/scheduler.c) beyond
 * the public interface, for tests and the CLI: the metrics endpoint's port
 * (`ectier producer` reports it), and the
 * cache under the scheduler, so a test
 * can put an entry into the state a peer-to-peer read would leave it in
 * (a consumer-only instance has no other way to get a ready entry while
 * peer-to-peer transfer is not wired into the scheduler).
 */
#ifndef ECT_STEP_SCHEDULER_HOOKS_H
#define ECT_STEP_SCHEDULER_HOOKS_H

#include <ectier/cache.h>
#include <ectier/scheduler.h>

/* The scheduler's cache (borrowed; NULL after shutdown).  The cache has its
 * own lock, so it may be used alongside the scheduler's calls, but anything
 * done to it bypasses the scheduler's bookkeeping: use it only to create
 * states the scheduler's own paths would create. */
ect_cache_t *ect__scheduler_cache(ect_scheduler_t *scheduler);

/* The TCP port the Prometheus endpoint listens on (the one picked for
 * metrics_address port 0); 0 when none is served or after shutdown. */
uint16_t ect__scheduler_metrics_port(ect_scheduler_t *scheduler);

#endif /* ECT_STEP_SCHEDULER_HOOKS_H */
