/*
 * The scheduler side of the step protocol (SPEC §5, §6, §9.7; issue 3):
 * a counterpart for every scenario of the seed's test_scheduler.py
 * (reference/vllm-ec-behaviour.md §5), named after it, plus idleness,
 * malformed and failed reports, unknown report entries, shutdown, metrics
 * and their Prometheus text.
 *
 * The seed's gate-off "16 x 64 B region" is a real region in /dev/shm here
 * (tests/step_helpers.h), named by a unique instance id; every case checks
 * that the file is gone once the scheduler is destroyed.  Worker reports
 * arrive as encoded bytes, as worker processes send them.
 */
#include <pthread.h>

#include "step/scheduler_hooks.h"
#include "step_helpers.h"

/* A scheduler over a fresh instance. */
struct fx {
    struct sh_instance in;
    ect_scheduler_t *s;
};

static void
fx_open(struct fx *fx, ect_role_t role, uint64_t num_blocks, unsigned load_reports)
{
    sh_instance_init(&fx->in, role, num_blocks, true);
    fx->s = sh_scheduler(&fx->in, load_reports);
    CHECK_MSG(sh_exists(fx->in.path), "no region file %s", fx->in.path);
}

static void
fx_close(struct fx *fx)
{
    ect_scheduler_destroy(fx->s);
    fx->s = NULL;
    sh_check_gone(fx->in.path);
}

/* Whether key has a ready entry, observed without touching it
 * (has_cache_item would pin a hit until the step is built). */
static int
cached(ect_scheduler_t *s, const char *key)
{
    ect_cache_entry_t e;
    return ect_cache_get(ect__scheduler_cache(s), key, &e) == ECT_OK &&
           e.state != ECT_ENTRY_NOT_READY;
}

static ect_cache_stats_t
cache_stats(ect_scheduler_t *s)
{
    return sh_metrics(s).cache;
}

/* ---- the seed's scenarios ------------------------------------------------ */

static void
test_offload_reuse_cycle(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img"));
    sh_alloc(fx.s, "img", 4);
    ect_step_meta_t *save = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(save), 1);
    CHECK_EQ_U64(ect_step_meta_n_loads(save), 0);
    const ect_step_item_t *saved = ect_step_meta_find_save(save, "img");
    CHECK(saved != NULL);
    CHECK_EQ_U64(saved->n_blocks, 4);
    /* Not a hit until the worker says the bytes landed. */
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img"));
    sh_report_save(fx.s, "img", SH_SAVED);
    CHECK(ect_scheduler_has_cache_item(fx.s, "img"));

    sh_alloc(fx.s, "img", 4);
    ect_step_meta_t *load = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(load), 0);
    CHECK_EQ_U64(ect_step_meta_n_loads(load), 1);
    const ect_step_item_t *loaded = sh_find_load(load, "img");
    CHECK(loaded != NULL);
    CHECK_MSG(sh_same_runs(loaded, saved), "the reload names other blocks than the save");
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    sh_report_load(fx.s, loaded->transfer_id);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK(ect_scheduler_has_cache_item(fx.s, "img"));
    ect_step_meta_destroy(load);
    ect_step_meta_destroy(save);
    fx_close(&fx);
}

static void
test_has_cache_item_false_when_not_consumer(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_PRODUCER, 16, 1);
    sh_store_only(fx.s, "img", 2);
    CHECK_EQ_U64(cache_stats(fx.s).entries_ready, 1);  /* it is there ... */
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img")); /* ... but not for a producer */
    ect_metrics_t m = sh_metrics(fx.s);
    CHECK_EQ_U64(m.hits + m.misses, 0);
    fx_close(&fx);
}

static void
test_connector_keys_on_identifier_not_mm_hash(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ect_mm_feature_t f = {.identifier = "feat-1", .mm_hash = "hash-1", .num_tokens = 2};
    ect_request_t r = {.request_id = "r", .features = &f, .n_features = 1};
    CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, 0));
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK(ect_step_meta_find_save(m, "feat-1") != NULL);
    CHECK(ect_step_meta_find_save(m, "hash-1") == NULL);
    sh_report_save(fx.s, "feat-1", SH_SAVED);
    CHECK(ect_scheduler_has_cache_item(fx.s, "feat-1"));
    CHECK(!ect_scheduler_has_cache_item(fx.s, "hash-1"));
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_cpu_region_fifo_eviction(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    ect_step_meta_t *a = sh_store(fx.s, "A", 1);
    sh_store_only(fx.s, "B", 1);
    CHECK(cached(fx.s, "A"));
    CHECK(cached(fx.s, "B"));
    /* Saving C needs a block: the oldest ready entry, A, goes. */
    ect_step_meta_t *c = sh_store(fx.s, "C", 1);
    CHECK(!cached(fx.s, "A"));
    CHECK(cached(fx.s, "B"));
    CHECK(cached(fx.s, "C"));
    CHECK(sh_same_runs(ect_step_meta_find_save(c, "C"), ect_step_meta_find_save(a, "A")));
    CHECK_EQ_U64(cache_stats(fx.s).evicted_entries, 1);
    ect_step_meta_destroy(c);
    ect_step_meta_destroy(a);
    fx_close(&fx);
}

static void
test_multiple_mm_items_per_request(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ect_mm_feature_t f[3] = {
        {.identifier = "a", .offset = 0, .num_tokens = 2},
        {.identifier = "b", .offset = 10, .num_tokens = 3},
        {.identifier = "c", .offset = 20, .num_tokens = 1},
    };
    ect_request_t r = {.request_id = "r", .features = f, .n_features = 3};
    for (size_t i = 0; i < 3; i++)
        CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, i));
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 3);
    uint8_t used[16] = {0};
    for (size_t i = 0; i < 3; i++) {
        const ect_step_item_t *it = ect_step_meta_find_save(m, f[i].identifier);
        CHECK(it != NULL);
        CHECK_EQ_U64(it->n_blocks, f[i].num_tokens);
        for (size_t k = 0; k < it->n_runs; k++)
            for (uint64_t b = it->runs[k].first; b < it->runs[k].first + it->runs[k].count; b++) {
                CHECK_MSG(!used[b], "block %llu given to two items", (unsigned long long)b);
                used[b] = 1;
            }
        sh_report_save(fx.s, f[i].identifier, SH_SAVED);
    }
    ect_step_meta_destroy(m);
    /* The next request with the same items loads all three, each under its
     * own transfer id. */
    for (size_t i = 0; i < 3; i++)
        CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, i));
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 3);
    for (size_t i = 1; i < 3; i++)
        CHECK(ect_step_meta_load(m, i)->transfer_id > ect_step_meta_load(m, i - 1)->transfer_id);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_loads_only_serves_hashes_touched_this_step(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    sh_store_only(fx.s, "A", 1);
    sh_store_only(fx.s, "B", 1);
    sh_alloc(fx.s, "B", 1);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    CHECK(sh_find_load(m, "B") != NULL);
    CHECK(sh_find_load(m, "A") == NULL);
    ect_step_meta_destroy(m);
    /* And the step after that serves nothing again. */
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m) + ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_repeated_reload_same_step_loads_once(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    sh_store_only(fx.s, "A", 2);
    for (int i = 0; i < 3; i++)
        sh_alloc(fx.s, "A", 2); /* three requests with the same image */
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    sh_report_load(fx.s, ect_step_meta_load(m, 0)->transfer_id);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK_EQ_U64(sh_metrics(fx.s).loads_queued, 1);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_load_not_emitted_for_uncached_entry(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    /* Being saved this step: a save, and no load of the unsaved bytes. */
    sh_alloc(fx.s, "new", 2);
    sh_alloc(fx.s, "new", 2);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 1);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 0);
    ect_step_meta_destroy(m);
    /* Still in flight the step after: still no load. */
    sh_alloc(fx.s, "new", 2);
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m), 0);
    ect_step_meta_destroy(m);
    fx_close(&fx);

    /* A consumer that never saw the item: nothing at all. */
    fx_open(&fx, ECT_ROLE_CONSUMER, 16, 1);
    sh_alloc(fx.s, "never", 2);
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m), 0);
    CHECK_EQ_U64(cache_stats(fx.s).entries, 0);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_load_pin_protects_blocks_until_completion(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    sh_store_only(fx.s, "A", 1);
    sh_store_only(fx.s, "B", 1);
    /* A (the oldest) is loading; a save in the same step must take B. */
    sh_alloc(fx.s, "A", 1);
    sh_alloc(fx.s, "C", 1);
    ect_step_meta_t *m = sh_step(fx.s);
    uint64_t tid = sh_find_load(m, "A")->transfer_id;
    CHECK(ect_step_meta_find_save(m, "C") != NULL);
    CHECK(cached(fx.s, "A"));
    CHECK(!cached(fx.s, "B"));
    ect_step_meta_destroy(m);
    /* Nothing else can be evicted until the load is reported: D is skipped. */
    sh_alloc(fx.s, "D", 1);
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    CHECK_EQ_U64(sh_metrics(fx.s).saves_skipped_full, 1);
    CHECK(cached(fx.s, "A"));
    /* Reported: A is evictable again, and (unpinned before C landed) it is
     * now the oldest evictable entry. */
    sh_report_load(fx.s, tid);
    sh_report_save(fx.s, "C", SH_SAVED);
    sh_store_only(fx.s, "D", 1);
    CHECK(!cached(fx.s, "A"));
    CHECK(cached(fx.s, "C"));
    CHECK(cached(fx.s, "D"));
    fx_close(&fx);
}

static void
test_load_needs_every_participant_before_unpin(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 2); /* TP = 2: two reporting ranks */
    sh_store_only(fx.s, "A", 2);
    sh_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = sh_step(fx.s);
    uint64_t tid = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    sh_report_load(fx.s, tid);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    CHECK_EQ_U64(sh_metrics(fx.s).loads_completed, 0);
    sh_report_load(fx.s, tid);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    CHECK_EQ_U64(sh_metrics(fx.s).loads_completed, 1);

    /* The engine's usual shape: both ranks' reports concatenated in one
     * call release the pin at once. */
    sh_alloc(fx.s, "A", 2);
    m = sh_step(fx.s);
    tid = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    ect_worker_report_t *r;
    CHECK_OK(ect_worker_report_create(&r));
    CHECK_OK(ect_worker_report_add_load(r, tid));
    size_t len;
    unsigned char *one = sh_encode_report(r, &len);
    unsigned char *both = malloc(2 * len);
    memcpy(both, one, len);
    memcpy(both + len, one, len);
    CHECK_OK(ect_scheduler_update_connector_output(fx.s, both, 2 * len));
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK_EQ_U64(sh_metrics(fx.s).loads_completed, 2);
    free(both);
    free(one);
    ect_worker_report_destroy(r);
    fx_close(&fx);
}

static void
test_late_report_does_not_release_a_later_load_of_same_hash(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 2);
    sh_store_only(fx.s, "A", 1);
    sh_alloc(fx.s, "A", 1);
    ect_step_meta_t *m = sh_step(fx.s);
    uint64_t old = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    sh_report_load(fx.s, old);
    sh_report_load(fx.s, old);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);

    sh_alloc(fx.s, "A", 1);
    m = sh_step(fx.s);
    uint64_t fresh = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    CHECK(fresh > old);
    /* A replay of the old id counts for nothing, not for the new load. */
    uint64_t ignored = sh_metrics(fx.s).reports_ignored;
    sh_report_load(fx.s, old);
    sh_report_load(fx.s, fresh);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    CHECK_EQ_U64(sh_metrics(fx.s).reports_ignored, ignored + 1);
    sh_report_load(fx.s, fresh);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    fx_close(&fx);
}

static void
test_region_full_skips_save_and_never_blocks(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    sh_alloc(fx.s, "big", 2); /* saving: holds both blocks, not evictable */
    sh_alloc(fx.s, "next", 1);
    sh_alloc(fx.s, "huge", 3); /* more blocks than the region has */
    ect_mm_feature_t f = {.identifier = "next", .num_tokens = 1, .has_local_input = 1};
    ect_request_t r = {.request_id = "r", .features = &f, .n_features = 1};
    int available = 0;
    CHECK_OK(ect_scheduler_ensure_cache_available(fx.s, &r, &available));
    CHECK(available);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 1);
    CHECK(ect_step_meta_find_save(m, "big") != NULL);
    ect_step_meta_destroy(m);
    ect_metrics_t mt = sh_metrics(fx.s);
    CHECK_EQ_U64(mt.saves_skipped_full, 2);
    CHECK_EQ_U64(mt.saves_queued, 1);
    CHECK_EQ_U64(mt.cache.entries, 1);
    CHECK(!cached(fx.s, "next"));
    fx_close(&fx);
}

static void
test_producer_only_never_emits_loads(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_PRODUCER, 16, 1);
    sh_store_only(fx.s, "A", 2);
    sh_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 0);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_consumer_only_never_emits_saves(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_CONSUMER, 16, 1);
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        sh_alloc(fx.s, key, 2);
    }
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    ect_metrics_t mt = sh_metrics(fx.s);
    CHECK_EQ_U64(mt.saves_queued, 0);
    CHECK_EQ_U64(mt.cache.entries, 0);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    fx_close(&fx);
}

static void
test_consumer_only_has_cache_item(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_CONSUMER, 16, 1);
    /* A consumer's entries arrive from peers; put one in the state a
     * finished peer read leaves it in. */
    ect_cache_t *cache = ect__scheduler_cache(fx.s);
    CHECK_OK(ect_cache_alloc(cache, "remote", 3));
    CHECK(!ect_scheduler_has_cache_item(fx.s, "remote")); /* being read */
    CHECK_OK(ect_cache_mark_ready(cache, "remote"));
    CHECK(ect_scheduler_has_cache_item(fx.s, "remote"));
    CHECK(!ect_scheduler_has_cache_item(fx.s, "other"));
    ect_metrics_t mt = sh_metrics(fx.s);
    CHECK_EQ_U64(mt.hits, 1);
    CHECK_EQ_U64(mt.misses, 2);
    sh_alloc(fx.s, "remote", 3);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    CHECK_EQ_U64(ect_step_meta_load(m, 0)->n_blocks, 3);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_save_not_emitted_for_already_cached_entry(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    /* In flight (queued, not reported): the next step does not save again. */
    sh_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 1);
    ect_step_meta_destroy(m);
    sh_alloc(fx.s, "A", 2);
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    /* Ready: no save either. */
    sh_report_save(fx.s, "A", SH_SAVED);
    sh_alloc(fx.s, "A", 2);
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    sh_report_load(fx.s, ect_step_meta_load(m, 0)->transfer_id);
    ect_step_meta_destroy(m);
    CHECK_EQ_U64(sh_metrics(fx.s).saves_queued, 1);
    CHECK_EQ_U64(cache_stats(fx.s).allocs, 1);
    fx_close(&fx);
}

static void
test_update_connector_output_ignores_foreign_meta(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    sh_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = sh_step(fx.s);
    /* Another value's bytes (the step metadata itself), and another
     * connector's report format, are not reports. */
    size_t len;
    void *meta_bytes = sh_encode_meta(m, &len);
    CHECK_STATUS(ect_scheduler_update_connector_output(fx.s, meta_bytes, len), ECT_ERR_PARSE);
    static const char json[] = "{\"completed_saves\": [\"A\"], \"completed_loads\": []}";
    CHECK_STATUS(ect_scheduler_update_connector_output(fx.s, json, sizeof(json) - 1),
                 ECT_ERR_PARSE);
    CHECK(!cached(fx.s, "A"));
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    ect_metrics_t mt = sh_metrics(fx.s);
    CHECK_EQ_U64(mt.reports_malformed, 2);
    CHECK_EQ_U64(mt.saves_completed, 0);
    /* The real report still works afterwards. */
    sh_report_save(fx.s, "A", SH_SAVED);
    CHECK(cached(fx.s, "A"));
    free(meta_bytes);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_update_connector_output_ignores_unknown_report(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    sh_store_only(fx.s, "A", 1);
    ect_metrics_t before = sh_metrics(fx.s);
    ect_worker_report_t *r;
    CHECK_OK(ect_worker_report_create(&r));
    CHECK_OK(ect_worker_report_add_save(r, "never-saved"));
    CHECK_OK(ect_worker_report_add_save(r, "A")); /* ready already: a replay */
    CHECK_OK(ect_worker_report_add_failed_save(r, "A"));
    CHECK_OK(ect_worker_report_add_load(r, 999));
    sh_send_report(fx.s, r);
    ect_worker_report_destroy(r);
    ect_metrics_t after = sh_metrics(fx.s);
    CHECK_EQ_U64(after.reports_ignored, before.reports_ignored + 4);
    CHECK_EQ_U64(after.saves_completed, before.saves_completed);
    CHECK_EQ_U64(after.saves_failed, 0);
    CHECK_EQ_U64(after.cache.entries, 1);
    CHECK(cached(fx.s, "A"));
    CHECK(!cached(fx.s, "never-saved"));
    fx_close(&fx);
}

static void
test_has_pending_push_work_tracks_inflight_save(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_PRODUCER, 16, 1);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    sh_alloc(fx.s, "A", 2);
    CHECK(ect_scheduler_has_pending_push_work(fx.s)); /* queued */
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK(ect_scheduler_has_pending_push_work(fx.s)); /* with the workers */
    sh_report_save(fx.s, "A", SH_SAVED);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_has_pending_push_work_tracks_inflight_load(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    sh_store_only(fx.s, "A", 2);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    sh_alloc(fx.s, "A", 2);
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    sh_report_load(fx.s, ect_step_meta_load(m, 0)->transfer_id);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_shutdown_disables_roles_and_cleans_region(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    sh_store_only(fx.s, "ready", 2);
    sh_alloc(fx.s, "ready", 2); /* a load in flight */
    sh_alloc(fx.s, "saving", 2);
    ect_step_meta_t *m = sh_step(fx.s);
    ect_step_meta_destroy(m);
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    ect_metrics_t before = sh_metrics(fx.s);

    ect_scheduler_shutdown(fx.s);
    CHECK_MSG(!sh_exists(fx.in.path), "shutdown left %s", fx.in.path);
    CHECK(!ect_scheduler_has_cache_item(fx.s, "ready"));
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    sh_alloc(fx.s, "later", 2);
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m), 0);
    ect_step_meta_destroy(m);
    sh_report_save(fx.s, "saving", SH_SAVED); /* late reports are harmless */
    /* The counters stay readable; nothing counts any more. */
    ect_metrics_t after = sh_metrics(fx.s);
    CHECK_EQ_U64(after.saves_queued, before.saves_queued);
    CHECK_EQ_U64(after.hits, before.hits);
    CHECK_EQ_U64(after.saves_completed, before.saves_completed);
    ect_scheduler_shutdown(fx.s); /* idempotent */
    fx_close(&fx);
}

/* ---- beyond the seed's list ---------------------------------------------- */

static void
test_hit_is_not_evicted_before_its_load_is_queued(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    sh_store_only(fx.s, "X", 1); /* the oldest ready entry */
    sh_store_only(fx.s, "Z", 1);
    /* The engine asks about every item of a request first, then allocates
     * them in item order: Y (encoded, saved) comes before X (a hit). */
    ect_mm_feature_t f[2] = {{.identifier = "Y", .num_tokens = 1},
                             {.identifier = "X", .num_tokens = 1}};
    ect_request_t r = {.request_id = "r", .features = f, .n_features = 2};
    CHECK(!ect_scheduler_has_cache_item(fx.s, "Y"));
    CHECK(ect_scheduler_has_cache_item(fx.s, "X"));
    CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, 0));
    CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, 1));
    ect_step_meta_t *m = sh_step(fx.s);
    /* The engine will not encode X: its load must be there. */
    CHECK_MSG(sh_find_load(m, "X") != NULL, "X was a hit but is not loaded");
    CHECK(ect_step_meta_find_save(m, "Y") != NULL);
    CHECK(cached(fx.s, "X"));
    CHECK(!cached(fx.s, "Z")); /* Y took Z's block */
    sh_report_save(fx.s, "Y", SH_SAVED);
    sh_report_load(fx.s, sh_find_load(m, "X")->transfer_id);
    ect_step_meta_destroy(m);
    /* A hit that the engine then does not schedule holds nothing past the
     * step: X is evictable again once the step is built. */
    CHECK(ect_scheduler_has_cache_item(fx.s, "X"));
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    ect_step_meta_destroy(sh_step(fx.s));
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    fx_close(&fx);
}

static void
test_has_pending_push_work_false_when_idle(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 2);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    /* Ready entries, a finished load, a failed save and an empty step: the
     * instance holds data but has nothing to push, so the engine may idle. */
    sh_store_only(fx.s, "A", 2);
    sh_store_only(fx.s, "B", 2);
    sh_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = sh_step(fx.s);
    uint64_t tid = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    sh_report_load(fx.s, tid);
    sh_report_load(fx.s, tid);
    sh_alloc(fx.s, "C", 1);
    ect_step_meta_destroy(sh_step(fx.s));
    sh_report_save(fx.s, "C", SH_FAILED);
    ect_step_meta_destroy(sh_step(fx.s));
    CHECK_EQ_U64(cache_stats(fx.s).entries_ready, 2);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    fx_close(&fx);
}

static void
test_malformed_report_changes_nothing(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    sh_store_only(fx.s, "A", 1);
    sh_alloc(fx.s, "A", 1);
    sh_alloc(fx.s, "B", 1);
    ect_step_meta_t *m = sh_step(fx.s);
    uint64_t tid = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);

    ect_worker_report_t *r;
    CHECK_OK(ect_worker_report_create(&r));
    CHECK_OK(ect_worker_report_add_save(r, "B"));
    CHECK_OK(ect_worker_report_add_load(r, tid));
    size_t len;
    unsigned char *good = sh_encode_report(r, &len);
    ect_worker_report_destroy(r);
    ect_metrics_t before = sh_metrics(fx.s);

    /* Truncated; a corrupt count; a good frame followed by a bad one: none
     * of it is applied, not even the good frame. */
    CHECK_STATUS(ect_scheduler_update_connector_output(fx.s, good, len - 1), ECT_ERR_PARSE);
    unsigned char *bad = malloc(2 * len);
    memcpy(bad, good, len);
    bad[16] ^= 0x40; /* n_saves of the body */
    CHECK_STATUS(ect_scheduler_update_connector_output(fx.s, bad, len), ECT_ERR_PARSE);
    memcpy(bad, good, len);
    memcpy(bad + len, good, len);
    bad[len] = 'X'; /* the second frame's magic */
    CHECK_STATUS(ect_scheduler_update_connector_output(fx.s, bad, 2 * len), ECT_ERR_PARSE);

    ect_metrics_t after = sh_metrics(fx.s);
    CHECK_EQ_U64(after.reports_malformed, before.reports_malformed + 3);
    CHECK_EQ_U64(after.saves_completed, before.saves_completed);
    CHECK_EQ_U64(after.loads_completed, before.loads_completed);
    CHECK_EQ_U64(after.cache.pins, 1);
    CHECK_EQ_U64(after.cache.entries_not_ready, 1);
    CHECK(!cached(fx.s, "B"));
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    /* The intact bytes still apply. */
    CHECK_OK(ect_scheduler_update_connector_output(fx.s, good, len));
    CHECK(cached(fx.s, "B"));
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    CHECK_OK(ect_scheduler_update_connector_output(fx.s, NULL, 0)); /* nothing to report */
    CHECK(ect_scheduler_update_connector_output(fx.s, NULL, 5) != ECT_OK);
    free(bad);
    free(good);
    fx_close(&fx);
}

static void
test_failed_save_report_discards_the_entry(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 4, 1);
    sh_alloc(fx.s, "A", 4);
    ect_step_meta_destroy(sh_step(fx.s));
    CHECK_EQ_U64(cache_stats(fx.s).free_blocks, 0);
    sh_report_save(fx.s, "A", SH_FAILED);
    ect_metrics_t mt = sh_metrics(fx.s);
    CHECK_EQ_U64(mt.saves_failed, 1);
    CHECK_EQ_U64(mt.saves_completed, 0);
    CHECK_EQ_U64(mt.cache.entries, 0);
    CHECK_EQ_U64(mt.cache.free_blocks, 4);
    CHECK(!cached(fx.s, "A"));
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    /* A late "saved" for it is ignored; the item can be saved again. */
    sh_report_save(fx.s, "A", SH_SAVED);
    CHECK(!cached(fx.s, "A"));
    sh_store_only(fx.s, "A", 4);
    CHECK(cached(fx.s, "A"));
    fx_close(&fx);
}

static void
test_zero_token_item_is_saved_and_loaded(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 4, 1);
    ect_step_meta_t *m = sh_store(fx.s, "empty", 0);
    CHECK_EQ_U64(ect_step_meta_find_save(m, "empty")->n_blocks, 0);
    ect_step_meta_destroy(m);
    CHECK(cached(fx.s, "empty"));
    sh_alloc(fx.s, "empty", 0);
    m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    CHECK_EQ_U64(ect_step_meta_load(m, 0)->n_runs, 0);
    sh_report_load(fx.s, ect_step_meta_load(m, 0)->transfer_id);
    ect_step_meta_destroy(m);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    fx_close(&fx);
}

static void
test_bad_requests_are_rejected_and_change_nothing(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ect_mm_feature_t f[2] = {{.identifier = "ok", .num_tokens = 1},
                             {.identifier = NULL, .num_tokens = 1}};
    ect_request_t r = {.request_id = "r", .features = f, .n_features = 2};
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, &r, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "feature 1 has no identifier");
    r.n_features = 1;
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, &r, 1), ECT_ERR_INVALID_ARG);
    f[1].identifier = "";
    r.n_features = 2;
    int available = 7;
    CHECK_STATUS(ect_scheduler_ensure_cache_available(fx.s, &r, &available), ECT_ERR_INVALID_ARG);
    CHECK_EQ_INT(available, 7); /* output untouched on error */
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, NULL, 0), ECT_ERR_INVALID_ARG);
    r.features = NULL;
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, &r, 0), ECT_ERR_INVALID_ARG);
    /* An identifier longer than a key may be is an error, not a crash. */
    char *longkey = malloc(ECT_KEY_MAX + 2);
    memset(longkey, 'k', ECT_KEY_MAX + 1);
    longkey[ECT_KEY_MAX + 1] = '\0';
    ect_mm_feature_t lf = {.identifier = longkey, .num_tokens = 1};
    ect_request_t lr = {.request_id = "r", .features = &lf, .n_features = 1};
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, &lr, 0), ECT_ERR_INVALID_ARG);
    CHECK(!cached(fx.s, longkey));
    free(longkey);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m), 0);
    ect_step_meta_destroy(m);
    CHECK_EQ_U64(cache_stats(fx.s).entries, 0);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    char *params = (char *)"unchanged";
    CHECK_STATUS(ect_scheduler_request_finished(fx.s, NULL, &params), ECT_ERR_INVALID_ARG);
    f[1].identifier = "x";
    r.features = f;
    CHECK_OK(ect_scheduler_request_finished(fx.s, &r, &params));
    CHECK(params == NULL); /* announcements exist only with P2P */
    fx_close(&fx);
}

static void
test_create_fails_cleanly_on_bad_params(void)
{
    struct sh_instance in;
    sh_instance_init(&in, ECT_ROLE_BOTH, 16, true);
    ect_scheduler_t *s = (ect_scheduler_t *)&in; /* must stay as it is */
    ect_scheduler_params_t p = {.config = &in.cfg, .geometry = &in.geom, .instance_id = in.id};
    in.cfg.p2p_enabled = true;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ect_last_error(), "ec_enable_nixl");
    in.cfg.p2p_enabled = false;
    p.instance_id = NULL;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_CONFIG);
    p.instance_id = "bad/name";
    CHECK(ect_scheduler_create(&p, &s) != ECT_OK);
    p.instance_id = in.id;
    in.cfg.cpu_bytes = 0;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_CONFIG);
    in.cfg.cpu_bytes = 16 * SH_BLOCK;
    p.geometry = NULL;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_INVALID_ARG);
    CHECK(s == (ect_scheduler_t *)&in);
    CHECK(!sh_exists(in.path));
    /* A region of another geometry under the same name: incompatible. */
    p.geometry = &in.geom;
    ect_scheduler_t *first = sh_scheduler(&in, 1);
    ect_geometry_t other = in.geom;
    CHECK_OK(ect_geometry_init(SH_HIDDEN * 2, ECT_DTYPE_F32, in.cfg.cpu_bytes, &other));
    p.geometry = &other;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_INCOMPATIBLE);
    CHECK(s == (ect_scheduler_t *)&in);
    ect_scheduler_destroy(first);
    sh_check_gone(in.path);
    ect_scheduler_destroy(NULL);
}

/* ---- metrics -------------------------------------------------------------- */

static void
test_metrics_count_every_step_event(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    CHECK(!ect_scheduler_has_cache_item(fx.s, "A")); /* miss */
    sh_alloc(fx.s, "A", 1);
    sh_alloc(fx.s, "B", 1);
    ect_step_meta_destroy(sh_step(fx.s));
    ect_worker_report_t *r;
    CHECK_OK(ect_worker_report_create(&r));
    CHECK_OK(ect_worker_report_add_save(r, "A"));
    CHECK_OK(ect_worker_report_add_failed_save(r, "B"));
    ect_copy_stats_t cs = {.save_bytes = 4096, .save_ns = 2000, .save_batches = 1};
    ect_worker_report_add_stats(r, &cs);
    sh_send_report(fx.s, r);
    ect_worker_report_destroy(r);
    CHECK(ect_scheduler_has_cache_item(fx.s, "A")); /* hit */
    sh_alloc(fx.s, "A", 1);
    ect_step_meta_t *m = sh_step(fx.s);
    CHECK_OK(ect_worker_report_create(&r));
    CHECK_OK(ect_worker_report_add_load(r, ect_step_meta_load(m, 0)->transfer_id));
    ect_copy_stats_t ls = {.load_bytes = 64, .load_ns = 500, .load_batches = 1};
    ect_worker_report_add_stats(r, &ls);
    sh_send_report(fx.s, r);
    ect_worker_report_destroy(r);
    ect_step_meta_destroy(m);
    sh_store_only(fx.s, "C", 1);
    sh_store_only(fx.s, "D", 1); /* evicts A */
    sh_alloc(fx.s, "E", 5);      /* too big: skipped */

    ect_metrics_t mt = sh_metrics(fx.s);
    CHECK_EQ_U64(mt.hits, 1);
    CHECK_EQ_U64(mt.misses, 1);
    CHECK_EQ_U64(mt.saves_queued, 4);
    CHECK_EQ_U64(mt.saves_completed, 3);
    CHECK_EQ_U64(mt.saves_failed, 1);
    CHECK_EQ_U64(mt.saves_skipped_full, 1);
    CHECK_EQ_U64(mt.loads_queued, 1);
    CHECK_EQ_U64(mt.loads_completed, 1);
    CHECK_EQ_U64(mt.save_bytes, 4096);
    CHECK_EQ_U64(mt.save_ns, 2000);
    CHECK_EQ_U64(mt.load_bytes, 64);
    CHECK_EQ_U64(mt.load_ns, 500);
    CHECK_EQ_U64(mt.cache.num_blocks, 2);
    CHECK_EQ_U64(mt.cache.used_blocks, 2);
    CHECK_EQ_U64(mt.cache.evicted_entries, 1);
    CHECK_EQ_U64(mt.cache.entries, 2);
    CHECK_EQ_U64(mt.cache.runs_histogram[0], 2);
    CHECK_EQ_U64(mt.reports_ignored, 0);
    CHECK_STATUS(ect_scheduler_metrics(fx.s, NULL), ECT_ERR_INVALID_ARG);
    fx_close(&fx);
}

/* Render into a malloc'd buffer of exactly the size needed. */
static char *
render(const ect_metrics_t *m, size_t *len_p)
{
    size_t need = 0;
    CHECK_STATUS(ect_metrics_format_prometheus(m, NULL, 0, &need), ECT_ERR_OVERFLOW);
    char *buf = malloc(need + 1);
    CHECK(buf != NULL);
    size_t len = 0;
    CHECK_OK(ect_metrics_format_prometheus(m, buf, need + 1, &len));
    CHECK_EQ_U64(len, need);
    CHECK_EQ_U64(strlen(buf), len);
    *len_p = len;
    return buf;
}

static void
test_prometheus_text_names_every_required_metric(void)
{
    ect_metrics_t m;
    memset(&m, 0, sizeof(m));
    m.hits = 11;
    m.misses = 12;
    m.saves_completed = 13;
    m.loads_completed = 14;
    m.save_bytes = 1500000;
    m.save_ns = 2500000000ull;
    m.acks_received[5] = 7;
    m.acks_sent[1] = 8;
    m.grants_outstanding = 3;
    m.p2p_transport_errors = 2;
    m.cache.evicted_entries = 9;
    m.cache.used_blocks = 40;
    m.cache.num_blocks = 64;
    m.cache.pins = 4;
    m.cache.runs_histogram[0] = 5;
    m.cache.runs_histogram[6] = 1;
    ect_latency_hist_add(&m.p2p_fetch_latency, 300 * 1000);        /* 0.3 ms */
    ect_latency_hist_add(&m.p2p_fetch_latency, 2ull * 1000000000); /* 2 s: overflow bucket */
    size_t len;
    char *t = render(&m, &len);
    /* SPEC §9.7: hits, misses, saves, loads, evictions, NACKs by status,
     * bytes and latency per direction, pins and grants outstanding, region
     * occupancy, runs per entry, transport errors. */
    static const char *const required[] = {
        "# TYPE ectier_hits_total counter\nectier_hits_total 11\n",
        "ectier_misses_total 12\n",
        "ectier_saves_completed_total 13\n",
        "ectier_loads_completed_total 14\n",
        "ectier_evictions_total 9\n",
        "ectier_acks_received_total{status=\"nack_not_ready\"} 7\n",
        "ectier_acks_sent_total{status=\"nack_missing\"} 8\n",
        "ectier_acks_received_total{status=\"ok\"} 0\n",
        "ectier_save_bytes_total 1500000\n",
        "ectier_save_seconds_total 2.500000000\n",
        "ectier_load_bytes_total 0\n",
        "ectier_load_seconds_total ",
        "ectier_p2p_read_bytes_total 0\n",
        "# TYPE ectier_p2p_fetch_seconds histogram\n",
        "ectier_p2p_fetch_seconds_bucket{le=\"0.00025\"} 0\n",
        "ectier_p2p_fetch_seconds_bucket{le=\"0.0005\"} 1\n",
        "ectier_p2p_fetch_seconds_bucket{le=\"1\"} 1\n",
        "ectier_p2p_fetch_seconds_bucket{le=\"+Inf\"} 2\n",
        "ectier_p2p_fetch_seconds_count 2\n",
        "ectier_p2p_fetch_seconds_sum 2.000300000\n",
        "# TYPE ectier_pins gauge\nectier_pins 4\n",
        "ectier_grants_outstanding 3\n",
        "ectier_region_used_blocks 40\n",
        "ectier_region_blocks 64\n",
        "ectier_entry_runs{runs=\"1\"} 5\n",
        "ectier_entry_runs{runs=\">16\"} 1\n",
        "ectier_p2p_transport_errors_total 2\n",
    };
    for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++)
        CHECK_CONTAINS(t, required[i]);
    /* Every sample line belongs to a metric announced by a TYPE line. */
    char *copy = strdup(t), *save = NULL;
    for (char *line = strtok_r(copy, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            continue;
        CHECK_MSG(strncmp(line, "ectier_", 7) == 0, "sample without the prefix: %s", line);
        char name[128];
        size_t n = strcspn(line, "{ ");
        CHECK(n < sizeof(name));
        memcpy(name, line, n);
        name[n] = '\0';
        char *suffix = strstr(name, "_bucket");
        if (suffix == NULL)
            suffix = strstr(name, "_count");
        if (suffix == NULL && strstr(name, "_sum") == name + strlen(name) - 4)
            suffix = name + strlen(name) - 4;
        char type_line[200];
        snprintf(type_line, sizeof(type_line), "# TYPE %s ", name);
        if (strstr(t, type_line) == NULL && suffix != NULL) {
            *suffix = '\0';
            snprintf(type_line, sizeof(type_line), "# TYPE %s histogram", name);
        }
        CHECK_CONTAINS(t, type_line);
    }
    free(copy);
    free(t);
}

static void
test_prometheus_overflow_reports_the_length_needed(void)
{
    ect_metrics_t m;
    memset(&m, 0, sizeof(m));
    m.hits = 123456789;
    size_t full_len;
    char *full = render(&m, &full_len);
    CHECK(full_len > 1000);
    /* Too small by one (no room for the NUL), and much too small: the
     * buffer holds a NUL-terminated prefix and never more than cap bytes. */
    size_t caps[] = {full_len, 64, 1};
    for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
        size_t cap = caps[i];
        char *buf = malloc(cap + 16);
        memset(buf, '@', cap + 16);
        size_t len = 0;
        CHECK_STATUS(ect_metrics_format_prometheus(&m, buf, cap, &len), ECT_ERR_OVERFLOW);
        CHECK_EQ_U64(len, full_len);
        CHECK_EQ_U64(strlen(buf), cap - 1);
        CHECK(strncmp(buf, full, cap - 1) == 0);
        for (size_t k = cap; k < cap + 16; k++)
            CHECK_MSG(buf[k] == '@', "byte %zu past cap %zu was written", k, cap);
        free(buf);
    }
    CHECK_CONTAINS(ect_last_error(), "need");
    size_t len;
    CHECK_STATUS(ect_metrics_format_prometheus(NULL, full, full_len + 1, &len),
                 ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_metrics_format_prometheus(&m, NULL, 10, &len), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_metrics_format_prometheus(&m, full, full_len + 1, NULL), ECT_ERR_INVALID_ARG);
    free(full);
}

static void
test_latency_histogram_buckets_and_quantiles(void)
{
    ect_latency_hist_t h;
    memset(&h, 0, sizeof(h));
    CHECK(ect_latency_hist_quantile(&h, 0.5) == 0.0);
    /* 0.1 ms is inside the first bucket (upper bound inclusive). */
    ect_latency_hist_add(&h, 100 * 1000);
    for (int i = 0; i < 8; i++)
        ect_latency_hist_add(&h, 3 * 1000 * 1000); /* 3 ms: (2.5, 5] ms */
    ect_latency_hist_add(&h, 5ull * 1000000000);   /* 5 s: overflow */
    CHECK_EQ_U64(h.count, 10);
    CHECK_EQ_U64(h.buckets[0], 1);
    CHECK_EQ_U64(h.buckets[5], 8);
    CHECK_EQ_U64(h.buckets[ECT_METRICS_LATENCY_BUCKETS - 1], 1);
    CHECK_EQ_U64(h.sum_ns, 100 * 1000 + 24ull * 1000 * 1000 + 5ull * 1000000000);
    double p50 = ect_latency_hist_quantile(&h, 0.5);
    CHECK_MSG(p50 > 0.0025 && p50 <= 0.005, "p50 %g outside its bucket", p50);
    CHECK(ect_latency_hist_quantile(&h, 0.05) <= 0.0001);
    /* The overflow bucket has no upper bound: its lower one is reported. */
    CHECK(ect_latency_hist_quantile(&h, 1.0) == 1.0);
    CHECK(ect_latency_hist_quantile(&h, 7.0) == 1.0); /* clamped */
    CHECK(ect_latency_hist_quantile(NULL, 0.5) == 0.0);
    ect_latency_hist_add(NULL, 1);
}

/* ---- threads -------------------------------------------------------------- */

struct reader {
    ect_scheduler_t *s;
    unsigned calls;
};

static void *
reader_main(void *arg)
{
    struct reader *rd = arg;
    for (unsigned i = 0; i < rd->calls; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%u", i % 8);
        ect_scheduler_has_cache_item(rd->s, key);
        ect_scheduler_has_pending_push_work(rd->s);
        ect_metrics_t m;
        CHECK_OK(ect_scheduler_metrics(rd->s, &m));
    }
    return NULL;
}

static void
test_concurrent_callers_keep_the_counters_consistent(void)
{
    struct fx fx;
    fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    enum { READERS = 2, CALLS = 2000, CYCLES = 200 };
    struct reader rd[READERS];
    pthread_t th[READERS];
    for (int i = 0; i < READERS; i++) {
        rd[i] = (struct reader){fx.s, CALLS};
        CHECK(pthread_create(&th[i], NULL, reader_main, &rd[i]) == 0);
    }
    /* Meanwhile the engine thread saves and reloads. */
    for (unsigned c = 0; c < CYCLES; c++) {
        char key[16];
        snprintf(key, sizeof(key), "k%u", c % 8);
        sh_alloc(fx.s, key, 1);
        ect_step_meta_t *m = sh_step(fx.s);
        ect_worker_report_t *r;
        CHECK_OK(ect_worker_report_create(&r));
        for (size_t i = 0; i < ect_step_meta_n_saves(m); i++)
            CHECK_OK(ect_worker_report_add_save(r, ect_step_meta_save(m, i)->key));
        for (size_t i = 0; i < ect_step_meta_n_loads(m); i++)
            CHECK_OK(ect_worker_report_add_load(r, ect_step_meta_load(m, i)->transfer_id));
        sh_send_report(fx.s, r);
        ect_worker_report_destroy(r);
        ect_step_meta_destroy(m);
    }
    for (int i = 0; i < READERS; i++)
        CHECK(pthread_join(th[i], NULL) == 0);
    ect_metrics_t mt = sh_metrics(fx.s);
    CHECK_EQ_U64(mt.hits + mt.misses, READERS * CALLS);
    CHECK_EQ_U64(mt.saves_completed, 8);
    CHECK_EQ_U64(mt.loads_completed, CYCLES - 8);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    fx_close(&fx);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_offload_reuse_cycle),
    ECT_CASE(test_has_cache_item_false_when_not_consumer),
    ECT_CASE(test_connector_keys_on_identifier_not_mm_hash),
    ECT_CASE(test_cpu_region_fifo_eviction),
    ECT_CASE(test_multiple_mm_items_per_request),
    ECT_CASE(test_loads_only_serves_hashes_touched_this_step),
    ECT_CASE(test_repeated_reload_same_step_loads_once),
    ECT_CASE(test_load_not_emitted_for_uncached_entry),
    ECT_CASE(test_load_pin_protects_blocks_until_completion),
    ECT_CASE(test_load_needs_every_participant_before_unpin),
    ECT_CASE(test_late_report_does_not_release_a_later_load_of_same_hash),
    ECT_CASE(test_region_full_skips_save_and_never_blocks),
    ECT_CASE(test_producer_only_never_emits_loads),
    ECT_CASE(test_consumer_only_never_emits_saves),
    ECT_CASE(test_consumer_only_has_cache_item),
    ECT_CASE(test_save_not_emitted_for_already_cached_entry),
    ECT_CASE(test_update_connector_output_ignores_foreign_meta),
    ECT_CASE(test_update_connector_output_ignores_unknown_report),
    ECT_CASE(test_has_pending_push_work_tracks_inflight_save),
    ECT_CASE(test_has_pending_push_work_tracks_inflight_load),
    ECT_CASE(test_shutdown_disables_roles_and_cleans_region),
    ECT_CASE(test_hit_is_not_evicted_before_its_load_is_queued),
    ECT_CASE(test_has_pending_push_work_false_when_idle),
    ECT_CASE(test_malformed_report_changes_nothing),
    ECT_CASE(test_failed_save_report_discards_the_entry),
    ECT_CASE(test_zero_token_item_is_saved_and_loaded),
    ECT_CASE(test_bad_requests_are_rejected_and_change_nothing),
    ECT_CASE(test_create_fails_cleanly_on_bad_params),
    ECT_CASE(test_metrics_count_every_step_event),
    ECT_CASE(test_prometheus_text_names_every_required_metric),
    ECT_CASE(test_prometheus_overflow_reports_the_length_needed),
    ECT_CASE(test_latency_histogram_buckets_and_quantiles),
    ECT_CASE(test_concurrent_callers_keep_the_counters_consistent),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
