/*
 * The scheduler side (SPEC §1.2, §6): one per serving instance.  It owns the
 * embedding cache (the index of the shared region's blocks), decides each
 * step's saves and loads, tracks their completion from the workers' reports,
 * and (in P2P builds) runs the producer and consumer sessions.
 *
 * The functions mirror the engine's connector calls, in the order an engine
 * makes them each step (reference/vllm-ec-behaviour.md §1):
 *
 *   has_cache_item            per media item missing from the GPU cache
 *   ensure_cache_available    per waiting request with media, before admission
 *   update_state_after_alloc  per media item the step encodes or loads
 *   build_connector_meta      once, at the end of scheduling -> the workers
 *   ... workers run (see worker.h) ...
 *   update_connector_output   once, with the concatenated worker reports
 *   request_finished          when a request ends
 *   has_pending_push_work     the engine keeps stepping while it is true
 *   shutdown                  at exit
 *
 * Thread safety: every function may be called from any thread; one mutex
 * serialises them (the engine calls them from its scheduler thread anyway).
 */
#ifndef ECTIER_SCHEDULER_H
#define ECTIER_SCHEDULER_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <ectier/config.h>
#include <ectier/geometry.h>
#include <ectier/metrics.h>
#include <ectier/status.h>
#include <ectier/step.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ect_scheduler ect_scheduler_t;

/* One media item of a request, as the engine sees it. */
typedef struct ect_mm_feature {
    const char *identifier; /* cache key: the engine's feature identifier */
    const char *mm_hash;    /* content hash used between instances; NULL = identifier */
    uint64_t offset;        /* first placeholder token of the item in the prompt */
    uint64_t num_tokens;    /* rows of the encoder output = blocks of its entry */
    int has_local_input;    /* the media is still on the request (local encode possible) */
    const char
        *metadata_json; /* producer: placeholder fields to publish, a JSON object; NULL = {} */
} ect_mm_feature_t;

typedef struct ect_request {
    const char *request_id;
    const ect_mm_feature_t *features;
    size_t n_features;
    uint64_t num_computed_tokens;        /* items ending at or before this are done */
    const char *ec_transfer_params_json; /* consumer: a producer's announcements, or NULL */
} ect_request_t;

typedef struct ect_scheduler_params {
    const ect_config_t *config;     /* borrowed, copied */
    const ect_geometry_t *geometry; /* borrowed, copied; num_blocks from config.cpu_bytes */
    const char *instance_id;        /* names the region when config.region_name is "" */
    unsigned dp_rank;               /* data-parallel rank (region name) */
    /* Reports each load needs before its pin is released: tp_size * pcp_size
     * when the workers are separate processes, else 1.  0 means 1.  Load
     * pins have no lease: a rank that dies without reporting leaves its
     * loads pinned until shutdown (a dead worker is fatal for an instance,
     * as in the engines). */
    unsigned load_reports;
    const char *region_dir;     /* NULL = "/dev/shm" */
    const char *engine_version; /* P2P compatibility hash; NULL = "" */
    const char *model_name;     /* P2P compatibility hash; NULL = "" */
} ect_scheduler_params_t;

/* Create the scheduler side: opens (creates or joins) the region as its
 * owner (ECT_REGION_OWNER: one scheduler per region; workers join it) and
 * builds an empty cache over it.  Returns ECT_OK, ECT_ERR_INVALID_ARG,
 * ECT_ERR_CONFIG, ECT_ERR_INCOMPATIBLE (region of another geometry),
 * ECT_ERR_BUSY (another scheduler, in this process or another, owns the
 * region: two instances were given one region_name; the message names the
 * region and the owner's pid), ECT_ERR_NO_SPACE, ECT_ERR_IO,
 * ECT_ERR_UNSUPPORTED (P2P requested in a build without it),
 * ECT_ERR_NO_MEMORY.  Nothing is left behind on error. */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_create(const ect_scheduler_params_t *params,
                                                         ect_scheduler_t **scheduler_p);

/* Shut down (if not yet) and free.  NULL is a no-op. */
ECT_API void ect_scheduler_destroy(ect_scheduler_t *scheduler);

/* Consumer: true if identifier has a ready entry in the CPU tier (the engine
 * loads it instead of encoding), else false.  Counts a hit or a miss.  false for a
 * producer-only instance or after shutdown.  A hit pins the entry until the
 * next ect_scheduler_build_connector_meta, so that no save queued in the
 * same step (for an item the engine allocates earlier) can evict it before
 * update_state_after_alloc queues its load. */
ECT_API bool ect_scheduler_has_cache_item(ect_scheduler_t *scheduler, const char *identifier);

/* Consumer: may the request be admitted this step?  *available_p = 1 when
 * every item not yet computed is either ready locally or to be computed
 * locally; 0 defers the request (a P2P read is in flight or being retried).
 * Without P2P this is always 1.  Also starts loading the cache index lines
 * of the request's items (ect_cache_prefetch), which the engine's later
 * calls about them read.  Returns ECT_OK; ECT_ERR_INVALID_ARG for a
 * malformed request.  A request whose ec_transfer_params cannot be honoured
 * (wrong size_bytes, an encoding lost when the media is gone) is reported
 * through ect_scheduler_take_unavailable_requests, not as an error here. */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_ensure_cache_available(
    ect_scheduler_t *scheduler, const ect_request_t *request, int *available_p);

/* The engine has allocated GPU cache space for request->features[index].
 * Producer: if the item is not cached, allocate blocks and queue a save
 * (region full: skipped silently, the encoding stays GPU-only).  Consumer:
 * if the item's entry is ready and not already loading this step, pin it and
 * queue a load under a new transfer id.  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG, or an internal failure (ECT_ERR_NO_MEMORY). */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_update_state_after_alloc(
    ect_scheduler_t *scheduler, const ect_request_t *request, size_t index);

/* End of the step's scheduling: hand over the step's saves and loads (owned
 * by the caller, destroy with ect_step_meta_destroy or hand back with
 * ect_scheduler_recycle_connector_meta; encode it for worker processes)
 * and start a new, empty step.  Also expires lapsed holds and
 * drives P2P work.  Returns ECT_OK or ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_build_connector_meta(ect_scheduler_t *scheduler,
                                                                       ect_step_meta_t **meta_p);

/* Hand back a value that ect_scheduler_build_connector_meta returned, once
 * it is encoded: the scheduler empties it and builds a later step in its
 * memory, so steps stop allocating once the largest has been built.  The
 * scheduler keeps one such value; any other is destroyed, as is meta when
 * scheduler is NULL.  meta must not be used afterwards.  NULL meta is a
 * no-op.  Cannot fail. */
ECT_API void ect_scheduler_recycle_connector_meta(ect_scheduler_t *scheduler,
                                                  ect_step_meta_t *meta);

/* Apply the workers' reports: bytes = the encoded reports of every rank,
 * concatenated (len 0 is fine).  A completed save marks its entry ready; a
 * failed one discards it; a load's pin is released once every reporting rank
 * has reported its transfer id.  Unknown, late or replayed reports are
 * logged and ignored.  Malformed bytes: ECT_ERR_PARSE and nothing applied. */
ECT_API ECT_MUST_CHECK ect_status_t
ect_scheduler_update_connector_output(ect_scheduler_t *scheduler, const void *bytes, size_t len);

/* The same with an already decoded (merged) report. */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_apply_report(ect_scheduler_t *scheduler,
                                                               const ect_step_report_t *report);

/* A request ended.  Producer with P2P: *params_json_p gets its
 * ec_transfer_params (a JSON object text, caller frees with ect_free) and
 * each announced entry takes a hold with the announce lease; otherwise
 * *params_json_p is NULL.  Consumer: forgets the request's defer budgets.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_request_finished(ect_scheduler_t *scheduler,
                                                                   const ect_request_t *request,
                                                                   char **params_json_p);

/* true while saves or loads are queued or in flight (and, with P2P, while
 * reads, grants or holds are outstanding); false when the instance is idle. */
ECT_API bool ect_scheduler_has_pending_push_work(ect_scheduler_t *scheduler);

/* Requests that must fail (an announced encoding that cannot be fetched and
 * cannot be computed locally).  Writes up to cap request ids (caller frees
 * each with ect_free) and removes them; returns how many were written. */
ECT_API size_t ect_scheduler_take_unavailable_requests(ect_scheduler_t *scheduler, char **ids,
                                                       size_t cap);

/* Stop both roles, drop pending state, stop P2P, release the region.
 * Idempotent. */
ECT_API void ect_scheduler_shutdown(ect_scheduler_t *scheduler);

/* Copy out the counters (including the cache's). */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_metrics(ect_scheduler_t *scheduler,
                                                          ect_metrics_t *metrics_p);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_SCHEDULER_H */
