/*
 * The scheduler side of the step protocol (include/ectier/scheduler.h).
 *
 * Per step the engine's calls fill `step` (this step's saves and loads);
 * build_connector_meta hands it to the caller and starts a new one, in the
 * value the caller recycled when there is one (spare_step).  Reports are
 * decoded into one kept value, load records come from a pool and the maps
 * reuse their nodes: in steady state a step allocates nothing.  Until
 * the workers report, a save is remembered in `saves_in_flight` (key) and a
 * load in `loads_in_flight` (transfer id -> key and the reports still
 * expected).  Invariants:
 *   - a key in saves_in_flight has a not-ready cache entry;
 *   - a transfer id in loads_in_flight holds exactly one pin on its entry,
 *     released when its last expected report arrives; the id is removed
 *     before the unpin, so a replayed or late report finds nothing;
 *   - transfer ids are unique and increasing (never reused);
 *   - a key in hit_pins holds exactly one pin on its entry, taken when
 *     has_cache_item answered "hit" and released by the next
 *     build_connector_meta: the engine will not encode that item, so no
 *     save of the same step may evict it before update_state_after_alloc
 *     queues its load.
 * One mutex guards everything; the cache has its own lock and is also used
 * by the P2P threads.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/scheduler.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/pool.h"
#include "common/strmap.h"
#include "common/utf8.h"
#include "metrics/http.h"
#include "metrics/render.h"
#include "step/instance_region.h"
#include "step/p2p_hooks.h"
#include "step/scheduler_hooks.h"

/* A load in flight: the entry it pinned and the reports still expected.
 * From a pool (the longest key fits): queueing a load allocates nothing
 * once the pool has held the most loads in flight at once. */
struct load_rec {
    unsigned remaining;
    char key[ECT_KEY_MAX + 1];
};

/*
 * Lock order (a thread holding one may take only those after it):
 *
 *   scheduler->lock          this file: the engine's calls, one at a time
 *     p2p->lock              src/p2p/p2p.c: admission records, unavailable queue
 *       consumer->lock       src/p2p/consumer.c: transfers (the session thread too)
 *       producer->lock       src/p2p/producer.c: grants, announcements (also the
 *                            data stream's thread, through its grant callbacks)
 *         xport client locks src/p2p/xport*.c: the stream client's and the
 *                            copy waiter's (taken under consumer->lock only)
 *         cache->lock        src/cache: the index, extents, pins, holds
 *           events->lock     src/p2p/events.c: the event queue (cache listener)
 *             log sink       src/common/log.c
 *
 * Nothing calls back up this list with a lock held: the transports' wake
 * callbacks only write an eventfd, the cache's listener only queues events.
 */
struct ect_scheduler {
    pthread_mutex_t lock;
    ect_config_t cfg;
    ect_geometry_t geom;
    unsigned load_reports;
    int producer;
    int consumer;
    int shut_down;
    ect_region_t *region;
    ect_cache_t *cache;
    ect_step_meta_t *step;
    ect_step_meta_t *spare_step; /* recycled by the engine: the next step's, emptied */
    ect_step_report_t *report;   /* update_connector_output decodes into it */
    ect_run_t *runs;             /* an entry's runs on their way into the step */
    size_t cap_runs;
    struct ect__pool load_recs; /* struct load_rec */
    uint64_t next_tid;
    ect_strmap_t saves_in_flight; /* key -> NULL */
    ect_strmap_t loads_in_flight; /* transfer id (hex) -> struct load_rec */
    ect_strmap_t hit_pins;        /* key -> NULL: hits of this step, pinned */
    ect_metrics_t m;
    struct ect__p2p *p2p;       /* NULL unless config.p2p_enabled */
    ect__http_t *http;          /* NULL unless config.metrics_address; own thread */
    struct ect__events *events; /* NULL unless config.events_endpoint */
};

/* tid as 16 lower-case hex digits (what "%016" PRIx64 prints), without
 * printf: this runs for every load, and printf's code and tables are cold
 * after the step's copies. */
static void
tid_key(uint64_t tid, char out[17])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, tid >>= 4)
        out[i] = digits[tid & 0xf];
    out[16] = '\0';
}

/* The scrape's body (ect__http_render_fn): runs on the HTTP thread and
 * takes the scheduler's lock only inside ect_scheduler_metrics. */
static ect_status_t
render_metrics(void *user, char **body_p, size_t *len_p)
{
    ect_metrics_t m;
    ect_status_t st = ect_scheduler_metrics(user, &m);
    return st != ECT_OK ? st : ect__metrics_render(&m, body_p, len_p);
}

ect_status_t
ect_scheduler_create(const ect_scheduler_params_t *params, ect_scheduler_t **scheduler_p)
{
    if (params == NULL || params->config == NULL || params->geometry == NULL || scheduler_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "scheduler: NULL params, config or geometry");
    ect_status_t st = ect_config_validate(params->config);
    if (st != ECT_OK)
        return st;
    ect_scheduler_t *s = ect__calloc(1, sizeof(*s));
    if (s == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "scheduler: out of memory");
    s->cfg = *params->config;
    s->geom = *params->geometry;
    s->load_reports = params->load_reports ? params->load_reports : 1;
    s->producer = ect_role_produces(s->cfg.role);
    s->consumer = ect_role_consumes(s->cfg.role);
    ect__strmap_init(&s->saves_in_flight);
    ect__strmap_init(&s->loads_in_flight);
    ect__strmap_init(&s->hit_pins);
    ect__pool_init(&s->load_recs, sizeof(struct load_rec));
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "scheduler: cannot create its mutex");
        goto err_free;
    }
    /* As the region's owner: its blocks are ours to give out, so a second
     * scheduler on the same region would overwrite our entries. */
    st = ect__instance_region_open(&s->cfg, &s->geom, params->instance_id, params->dp_rank,
                                   params->region_dir, 1, &s->region);
    if (st != ECT_OK)
        goto err_mutex;
    if ((st = ect_cache_create(s->geom.num_blocks, &s->cache)) != ECT_OK)
        goto err_region;
    /* Before the sessions, which publish announcements into it. */
    if (s->cfg.events_endpoint[0] != '\0' &&
        (st = ect__p2p_events_start(&s->cfg, s->cache, ect_region_name(s->region), &s->events)) !=
            ECT_OK)
        goto err_cache;
    if (s->cfg.p2p_enabled) {
        ect__p2p_params_t pp = {.config = &s->cfg,
                                .geometry = &s->geom,
                                .cache = s->cache,
                                .region = s->region,
                                .engine_version = params->engine_version,
                                .model_name = params->model_name,
                                .events = s->events};
        if ((st = ect__p2p_create(&pp, &s->p2p)) != ECT_OK)
            goto err_events;
    }
    /* Last, so the scrape never sees a half-built scheduler. */
    if (s->cfg.metrics_address[0] != '\0' &&
        (st = ect__http_start(s->cfg.metrics_address, render_metrics, s, &s->http)) != ECT_OK)
        goto err_p2p;
    *scheduler_p = s;
    return ECT_OK;

err_p2p:
    ect__p2p_destroy(s->p2p);
err_events:
    ect__p2p_events_stop(s->events);
err_cache:
    ect_cache_destroy(s->cache);
err_region:
    ect_region_close(s->region);
err_mutex:
    pthread_mutex_destroy(&s->lock);
err_free:
    ect__free(s);
    return st;
}

static void
shutdown_locked(ect_scheduler_t *s)
{
    if (s->shut_down)
        return;
    s->shut_down = 1;
    s->producer = 0;
    s->consumer = 0;
    /* The sessions' threads use the cache and region: stop them first. */
    if (s->p2p != NULL) {
        ect__p2p_metrics(s->p2p, &s->m);
        ect__p2p_destroy(s->p2p);
        s->p2p = NULL;
    }
    /* After the sessions (they publish announcements), before the cache
     * (the stream is its listener).  Its counters are kept, as the
     * sessions' are, though the last batches go out after they are read. */
    ect__p2p_events_metrics(s->events, &s->m);
    ect__p2p_events_stop(s->events);
    s->events = NULL;
    ect_step_meta_destroy(s->step);
    s->step = NULL;
    ect__strmap_cleanup(&s->saves_in_flight);
    ect__strmap_cleanup(&s->loads_in_flight);
    ect__pool_cleanup(&s->load_recs);
    ect__strmap_cleanup(&s->hit_pins);
    /* Keep the final counters readable after shutdown. */
    ect__log_failure(ect_cache_stats(s->cache, &s->m.cache), "scheduler");
    ect_cache_destroy(s->cache);
    s->cache = NULL;
    ect_region_close(s->region);
    s->region = NULL;
}

void
ect_scheduler_shutdown(ect_scheduler_t *scheduler)
{
    if (scheduler == NULL)
        return;
    /* Stop the scrape first, and outside the lock: its thread may be
     * waiting for the lock in ect_scheduler_metrics, and joining it while
     * holding the lock would deadlock. */
    pthread_mutex_lock(&scheduler->lock);
    ect__http_t *http = scheduler->http;
    scheduler->http = NULL;
    pthread_mutex_unlock(&scheduler->lock);
    ect__http_stop(http);
    pthread_mutex_lock(&scheduler->lock);
    shutdown_locked(scheduler);
    pthread_mutex_unlock(&scheduler->lock);
}

void
ect_scheduler_destroy(ect_scheduler_t *scheduler)
{
    if (scheduler == NULL)
        return;
    ect_scheduler_shutdown(scheduler);
    /* Kept for reuse, and still used after a shutdown (a report decoded, a
     * step recycled): freed only here. */
    ect_step_meta_destroy(scheduler->spare_step);
    ect_step_report_destroy(scheduler->report);
    ect__free(scheduler->runs);
    pthread_mutex_destroy(&scheduler->lock);
    ect__free(scheduler);
}

static ect_status_t check_ident(const char *what, size_t index, const char *s, int may_be_null,
                                int may_be_empty);

bool
ect_scheduler_has_cache_item(ect_scheduler_t *s, const char *identifier)
{
    /* An identifier no entry can have is a miss (the message says why). */
    if (s == NULL || check_ident("identifier", 0, identifier, 0, 0) != ECT_OK)
        return 0;
    pthread_mutex_lock(&s->lock);
    int hit = 0;
    if (s->consumer) {
        ect_cache_entry_t e;
        bool found = false;
        hit = ect_cache_find(s->cache, identifier, &e, &found) == ECT_OK && found &&
              e.state != ECT_CACHE_ENTRY_NOT_READY;
        /* The engine will load this item instead of encoding it, but it
         * allocates the step's items in its own order: pin the entry until
         * the step is built, so that a save queued for an earlier item of
         * the step cannot evict it before its load is queued.  If it cannot
         * be protected, answer "miss": encoding again is always safe. */
        if (hit && ect__strmap_find(&s->hit_pins, identifier) == NULL) {
            if (ect_cache_pin(s->cache, identifier) != ECT_OK)
                hit = 0;
            else if (ect__strmap_put(&s->hit_pins, identifier, NULL, NULL) != ECT_OK) {
                ect__log_failure(ect_cache_unpin(s->cache, identifier), "scheduler");
                hit = 0;
            }
        }
        if (hit)
            s->m.hits++;
        else
            s->m.misses++;
    }
    pthread_mutex_unlock(&s->lock);
    return hit;
}

/* An identifier from the engine: at most ECT_KEY_MAX bytes of UTF-8 (NULL
 * or empty only where allowed).  Checked here, where it enters, so every
 * layer below (cache keys, step metadata, P2P composite keys, wire strings,
 * event JSON) can take it as it is and never cuts it. */
static ect_status_t
check_ident(const char *what, size_t index, const char *s, int may_be_null, int may_be_empty)
{
    if (s == NULL) {
        if (may_be_null)
            return ECT_OK;
        return ect__error(ECT_ERR_INVALID_ARG, "scheduler: %s %zu is missing", what, index);
    }
    size_t len = strnlen(s, ECT_KEY_MAX + 1);
    if (len > ECT_KEY_MAX)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "scheduler: %s %zu is longer than %u bytes (refused: it is never cut)",
                          what, index, ECT_KEY_MAX);
    if (len == 0 && !may_be_empty)
        return ect__error(ECT_ERR_INVALID_ARG, "scheduler: %s %zu is empty", what, index);
    size_t bad = 0;
    if (!ect__utf8_valid(s, len, &bad))
        return ect__error(ECT_ERR_INVALID_ARG, "scheduler: %s %zu is not UTF-8 (byte %zu)", what,
                          index, bad);
    return ECT_OK;
}

static ect_status_t
check_request(const ect_request_t *r)
{
    if (r == NULL || (r->n_features > 0 && r->features == NULL))
        return ect__error(ECT_ERR_INVALID_ARG, "scheduler: NULL request or features");
    ect_status_t st = check_ident("request_id of request", 0, r->request_id, 1, 1);
    if (st != ECT_OK)
        return st;
    for (size_t i = 0; i < r->n_features; i++) {
        const ect_mm_feature_t *f = &r->features[i];
        if ((st = check_ident("identifier of feature", i, f->identifier, 0, 0)) != ECT_OK ||
            (st = check_ident("mm_hash of feature", i, f->mm_hash, 1, 0)) != ECT_OK)
            return ect__error(st, "%s (request '%.64s')", ect_last_error(),
                              r->request_id != NULL ? r->request_id : "?");
    }
    return ECT_OK;
}

ect_status_t
ect_scheduler_ensure_cache_available(ect_scheduler_t *s, const ect_request_t *request,
                                     int *available_p)
{
    if (s == NULL || available_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "ensure_cache_available: NULL argument");
    ect_status_t st = check_request(request);
    if (st != ECT_OK)
        return st;
    /* The engine asks about a request before it looks up or saves any of
     * its items (has_cache_item, update_state_after_alloc): start loading
     * their index lines now, so that the lookups wait for memory together
     * (at a million entries each is a cache miss). */
    for (size_t i = 0; i < request->n_features; i++)
        ect_cache_prefetch(s->cache, request->features[i].identifier);
    /* Without peer-to-peer every item is either in the tier or computed here. */
    *available_p = 1;
    pthread_mutex_lock(&s->lock);
    if (s->p2p != NULL && s->consumer)
        st = ect__p2p_ensure(s->p2p, request, available_p);
    pthread_mutex_unlock(&s->lock);
    return st;
}

/* The runs of key's entry, into the scheduler's runs array (valid until
 * the next call): *n_p of them.  One lookup where they fit the array, which
 * keeps its largest size; only an entry with more runs than it holds asks
 * for their number first. */
static ect_status_t
entry_runs(ect_scheduler_t *s, const char *key, size_t *n_p)
{
    size_t n = 0;
    ect_status_t st = ECT_ERR_OVERFLOW;
    if (s->cap_runs > 0)
        st = ect_cache_get_runs(s->cache, key, s->runs, s->cap_runs, &n);
    if (st == ECT_ERR_OVERFLOW) {
        if ((st = ect_cache_get_runs(s->cache, key, NULL, 0, &n)) != ECT_OK)
            return st;
        if (ect__array_reserve((void **)&s->runs, &s->cap_runs, 0, n, sizeof(*s->runs)) != 0)
            return ect__error(ECT_ERR_NO_MEMORY, "scheduler: out of memory for %zu runs", n);
        if (n > 0 && (st = ect_cache_get_runs(s->cache, key, s->runs, n, &n)) != ECT_OK)
            return st;
    } else if (st != ECT_OK) {
        return st;
    }
    *n_p = n;
    return ECT_OK;
}

static ect_status_t
ensure_step(ect_scheduler_t *s)
{
    if (s->step != NULL)
        return ECT_OK;
    if (s->spare_step != NULL) {
        s->step = s->spare_step;
        s->spare_step = NULL;
        return ECT_OK;
    }
    return ect_step_meta_create(&s->step);
}

static ect_status_t
queue_save_locked(ect_scheduler_t *s, const char *key, uint64_t n_blocks)
{
    ect_cache_entry_t e;
    bool found = false;
    if (ect_cache_find(s->cache, key, &e, &found) == ECT_OK && found)
        return ECT_OK; /* cached already (or being saved) */
    ect_status_t st = ect_cache_alloc(s->cache, key, n_blocks);
    if (st == ECT_ERR_NO_SPACE || st == ECT_ERR_OVERFLOW) {
        /* Never block the engine: the encoding simply stays GPU-only. */
        s->m.saves_skipped_full++;
        ECT_LOG_D("scheduler: no room for '%s' (%llu blocks): %s", key,
                  (unsigned long long)n_blocks, ect_last_error());
        return ECT_OK;
    }
    if (st != ECT_OK)
        return st;
    size_t n_runs = 0;
    if ((st = ensure_step(s)) != ECT_OK || (st = entry_runs(s, key, &n_runs)) != ECT_OK)
        goto err_discard;
    /* Track the save before the step names it: once it is in the step a
     * worker will write into its blocks, so they must not be freed. */
    if ((st = ect__strmap_put(&s->saves_in_flight, key, NULL, NULL)) != ECT_OK)
        goto err_discard;
    if ((st = ect_step_meta_add_save(s->step, key, s->runs, n_runs)) != ECT_OK)
        goto err_untrack;
    s->m.saves_queued++;
    return ECT_OK;

err_untrack:
    ect__strmap_remove(&s->saves_in_flight, key, NULL);
err_discard:
    ect__log_failure(ect_cache_discard(s->cache, key), "scheduler");
    return st;
}

static ect_status_t
queue_load_locked(ect_scheduler_t *s, const char *key)
{
    ect_status_t st = ensure_step(s);
    if (st != ECT_OK)
        return st;
    /* One load per key per step, however often the engine asks. */
    if (ect_step_meta_find_load(s->step, key) != NULL)
        return ECT_OK;
    ect_pin_result_t pinned;
    if (ect_cache_pin_if_ready(s->cache, key, &pinned) != ECT_OK || pinned != ECT_PIN_PINNED)
        return ECT_OK; /* absent or not ready: nothing to load */
    size_t n_runs = 0;
    struct load_rec *rec = ect__pool_get(&s->load_recs);
    char tk[17];
    uint64_t tid = s->next_tid;
    tid_key(tid, tk);
    if (rec == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "scheduler: out of memory queueing a load");
        goto err_unpin;
    }
    /* The cache checked the key's length where it entered (a copy, not
     * snprintf: the formatter's code and tables are cold misses of a step). */
    size_t key_len = strnlen(key, ECT_KEY_MAX);
    memcpy(rec->key, key, key_len);
    rec->key[key_len] = '\0';
    rec->remaining = s->load_reports;
    if ((st = entry_runs(s, key, &n_runs)) != ECT_OK)
        goto err_rec;
    /* Track the load (and so keep its pin) before the step names it: once
     * it is in the step, workers read its blocks. */
    if ((st = ect__strmap_put(&s->loads_in_flight, tk, rec, NULL)) != ECT_OK)
        goto err_rec;
    if ((st = ect_step_meta_add_load(s->step, key, tid, s->runs, n_runs)) != ECT_OK)
        goto err_untrack;
    s->next_tid++;
    s->m.loads_queued++;
    return ECT_OK;

err_untrack:
    ect__strmap_remove(&s->loads_in_flight, tk, NULL);
err_rec:
    ect__pool_put(&s->load_recs, rec);
err_unpin:
    ect__log_failure(ect_cache_unpin(s->cache, key), "scheduler");
    return st;
}

ect_status_t
ect_scheduler_update_state_after_alloc(ect_scheduler_t *s, const ect_request_t *request,
                                       size_t index)
{
    if (s == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "update_state_after_alloc: NULL scheduler");
    ect_status_t st = check_request(request);
    if (st != ECT_OK)
        return st;
    if (index >= request->n_features)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "update_state_after_alloc: feature %zu of a request with %zu", index,
                          request->n_features);
    const ect_mm_feature_t *f = &request->features[index];
    pthread_mutex_lock(&s->lock);
    if (s->producer)
        st = queue_save_locked(s, f->identifier, f->num_tokens);
    if (st == ECT_OK && s->consumer)
        st = queue_load_locked(s, f->identifier);
    pthread_mutex_unlock(&s->lock);
    return st;
}

static void
release_hit_pin(ect_strmap_node_t *node, void *user)
{
    ect_scheduler_t *s = user;
    if (ect_cache_unpin(s->cache, node->key) != ECT_OK)
        ect__log_last_error(ECT_LOG_WARN, "scheduler: end of step");
}

ect_status_t
ect_scheduler_build_connector_meta(ect_scheduler_t *s, ect_step_meta_t **meta_p)
{
    if (s == NULL || meta_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "build_connector_meta: NULL argument");
    pthread_mutex_lock(&s->lock);
    ect_status_t st = ECT_OK;
    if (!s->shut_down) {
        /* The step's hits are loading now (their loads hold their own pins)
         * or were not scheduled after all: either way the step is over. */
        ect__strmap_each(&s->hit_pins, release_hit_pin, s);
        ect__strmap_clear(&s->hit_pins);
        st = ect_cache_expire_holds(s->cache, ect__now_ns(), NULL);
    }
    if (st == ECT_OK)
        st = ensure_step(s); /* an empty step is handed out too */
    ect_step_meta_t *meta = s->step;
    s->step = NULL;
    pthread_mutex_unlock(&s->lock);
    if (st != ECT_OK) {
        ect_step_meta_destroy(meta);
        return st;
    }
    *meta_p = meta;
    return ECT_OK;
}

void
ect_scheduler_recycle_connector_meta(ect_scheduler_t *s, ect_step_meta_t *meta)
{
    if (meta == NULL)
        return;
    ect_step_meta_clear(meta);
    if (s != NULL) {
        pthread_mutex_lock(&s->lock);
        if (s->spare_step == NULL) {
            s->spare_step = meta;
            meta = NULL;
        }
        pthread_mutex_unlock(&s->lock);
    }
    ect_step_meta_destroy(meta);
}

static void
apply_report_locked(ect_scheduler_t *s, const ect_step_report_t *r)
{
    for (size_t i = 0; i < ect_step_report_n_saves(r); i++) {
        const char *key = ect_step_report_save(r, i);
        if (!ect__strmap_remove(&s->saves_in_flight, key, NULL)) {
            s->m.reports_ignored++;
            ECT_LOG_I("scheduler: ignoring a save report for unknown key '%s'", key);
            continue;
        }
        if (ect_cache_mark_ready(s->cache, key) != ECT_OK)
            ect__log_last_error(ECT_LOG_WARN, "scheduler: save report");
        s->m.saves_completed++;
    }
    for (size_t i = 0; i < ect_step_report_n_failed_saves(r); i++) {
        const char *key = ect_step_report_failed_save(r, i);
        if (!ect__strmap_remove(&s->saves_in_flight, key, NULL)) {
            s->m.reports_ignored++;
            continue;
        }
        ECT_LOG_W("scheduler: save of '%s' failed in a worker; its blocks are freed", key);
        ect__log_failure(ect_cache_discard(s->cache, key), "scheduler");
        s->m.saves_failed++;
    }
    for (size_t i = 0; i < ect_step_report_n_loads(r); i++) {
        char tk[17];
        tid_key(ect_step_report_load(r, i), tk);
        ect_strmap_node_t *node = ect__strmap_find(&s->loads_in_flight, tk);
        if (node == NULL) {
            s->m.reports_ignored++;
            ECT_LOG_D("scheduler: ignoring a late or replayed load report %s", tk);
            continue;
        }
        struct load_rec *rec = node->value;
        if (--rec->remaining > 0)
            continue;
        /* Forget the id before the unpin: a replay must find nothing. */
        ect__strmap_remove(&s->loads_in_flight, tk, NULL);
        if (ect_cache_unpin(s->cache, rec->key) != ECT_OK)
            ect__log_last_error(ECT_LOG_WARN, "scheduler: load report");
        s->m.loads_completed++;
        ect__pool_put(&s->load_recs, rec);
    }
    const ect_step_copy_stats_t *cs = ect_step_report_stats(r);
    s->m.save_bytes += cs->save_bytes;
    s->m.save_ns += cs->save_ns;
    s->m.load_bytes += cs->load_bytes;
    s->m.load_ns += cs->load_ns;
}

ect_status_t
ect_scheduler_apply_report(ect_scheduler_t *s, const ect_step_report_t *report)
{
    if (s == NULL || report == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "update_connector_output: NULL argument");
    pthread_mutex_lock(&s->lock);
    if (!s->shut_down)
        apply_report_locked(s, report);
    pthread_mutex_unlock(&s->lock);
    return ECT_OK;
}

ect_status_t
ect_scheduler_update_connector_output(ect_scheduler_t *s, const void *bytes, size_t len)
{
    if (s == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "update_connector_output: NULL scheduler");
    /* Decoded into the scheduler's own report, under the lock that guards
     * it (decoding is a pass over the bytes; the reports are small). */
    pthread_mutex_lock(&s->lock);
    ect_status_t st = ECT_OK;
    if (s->report == NULL)
        st = ect_step_report_create(&s->report);
    if (st == ECT_OK && (st = ect_step_report_decode_into(s->report, bytes, len)) != ECT_OK &&
        st != ECT_ERR_NO_MEMORY)
        s->m.reports_malformed++;
    if (st == ECT_OK && !s->shut_down)
        apply_report_locked(s, s->report);
    pthread_mutex_unlock(&s->lock);
    return st;
}

ect_status_t
ect_scheduler_request_finished(ect_scheduler_t *s, const ect_request_t *request,
                               char **params_json_p)
{
    if (s == NULL || params_json_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "request_finished: NULL argument");
    ect_status_t st = check_request(request);
    if (st != ECT_OK)
        return st;
    /* Announcements exist only with peer-to-peer transfer. */
    *params_json_p = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->p2p != NULL) {
        if (s->producer)
            st = ect__p2p_announce(s->p2p, request, params_json_p);
        if (s->consumer)
            ect__p2p_request_finished(s->p2p, request);
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

bool
ect_scheduler_has_pending_push_work(ect_scheduler_t *s)
{
    if (s == NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    int pending =
        (s->step != NULL && ect_step_meta_n_saves(s->step) + ect_step_meta_n_loads(s->step) > 0) ||
        s->saves_in_flight.count > 0 || s->loads_in_flight.count > 0;
    pthread_mutex_unlock(&s->lock);
    return pending;
}

size_t
ect_scheduler_take_unavailable_requests(ect_scheduler_t *s, char **ids, size_t cap)
{
    if (s == NULL || (ids == NULL && cap > 0))
        return 0;
    /* Only a peer-to-peer consumer can lose an announced encoding. */
    pthread_mutex_lock(&s->lock);
    size_t n = s->p2p != NULL ? ect__p2p_take_unavailable(s->p2p, ids, cap) : 0;
    pthread_mutex_unlock(&s->lock);
    return n;
}

ect_status_t
ect_scheduler_metrics(ect_scheduler_t *s, ect_metrics_t *metrics_p)
{
    if (s == NULL || metrics_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "scheduler metrics: NULL argument");
    pthread_mutex_lock(&s->lock);
    ect_status_t st = ECT_OK;
    if (s->cache != NULL)
        st = ect_cache_stats(s->cache, &s->m.cache);
    if (st == ECT_OK) {
        *metrics_p = s->m;
        if (s->p2p != NULL)
            ect__p2p_metrics(s->p2p, metrics_p);
        ect__p2p_events_metrics(s->events, metrics_p);
    }
    pthread_mutex_unlock(&s->lock);
    return st;
}

uint16_t
ect__scheduler_metrics_port(ect_scheduler_t *s)
{
    if (s == NULL)
        return 0;
    pthread_mutex_lock(&s->lock);
    uint16_t port = ect__http_port(s->http);
    pthread_mutex_unlock(&s->lock);
    return port;
}

ect_cache_t *
ect__scheduler_cache(ect_scheduler_t *s)
{
    if (s == NULL)
        return NULL;
    pthread_mutex_lock(&s->lock);
    ect_cache_t *cache = s->cache;
    pthread_mutex_unlock(&s->lock);
    return cache;
}
