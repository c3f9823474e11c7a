/*
 * The scheduler side of the step protocol (SPEC §5, §6, §9.7; issue 3):
 * a counterpart for every scenario of the seed's test_scheduler.py
 * (reference/vllm-ec-behaviour.md §5), named after it, plus hits that must
 * survive their own step, idleness, failed saves, empty entries, the
 * scheduler's counters and concurrent callers.  Bad input and misuse:
 * tests/unit/test_scheduler_errors.c; Prometheus text:
 * tests/unit/test_metrics.c.
 *
 * The seed's gate-off "16 x 64 B region" is a real region in /dev/shm here
 * (tests/support/step.h), named by a unique instance id; every case checks
 * that the file is gone once the scheduler is destroyed.  Worker reports
 * arrive as encoded bytes, as worker processes send them.
 */
#include <pthread.h>

#include "support/step.h"

static ect_cache_stats_t
cache_stats(ect_scheduler_t *s)
{
    return ts_metrics(s).cache;
}

/* ---- the seed's scenarios ------------------------------------------------ */

static void
test_offload_reuse_cycle(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img"));
    ts_alloc(fx.s, "img", 4);
    ect_step_meta_t *save = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(save), 1);
    CHECK_EQ_U64(ect_step_meta_n_loads(save), 0);
    const ect_step_item_t *saved = ect_step_meta_find_save(save, "img");
    CHECK(saved != NULL);
    CHECK_EQ_U64(saved->n_blocks, 4);
    /* Not a hit until the worker says the bytes landed. */
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img"));
    ts_report_save(fx.s, "img", TS_SAVED);
    CHECK(ect_scheduler_has_cache_item(fx.s, "img"));

    ts_alloc(fx.s, "img", 4);
    ect_step_meta_t *load = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(load), 0);
    CHECK_EQ_U64(ect_step_meta_n_loads(load), 1);
    const ect_step_item_t *loaded = ts_find_load(load, "img");
    CHECK(loaded != NULL);
    CHECK_MSG(ts_same_runs(loaded, saved), "the reload names other blocks than the save");
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    ts_report_load(fx.s, loaded->transfer_id);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK(ect_scheduler_has_cache_item(fx.s, "img"));
    ect_step_meta_destroy(load);
    ect_step_meta_destroy(save);
    ts_step_fx_close(&fx);
}

static void
test_has_cache_item_false_when_not_consumer(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_PRODUCER, 16, 1);
    ts_store_only(fx.s, "img", 2);
    CHECK_EQ_U64(cache_stats(fx.s).entries_ready, 1);  /* it is there ... */
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img")); /* ... but not for a producer */
    ect_metrics_t m = ts_metrics(fx.s);
    CHECK_EQ_U64(m.hits + m.misses, 0);
    ts_step_fx_close(&fx);
}

static void
test_connector_keys_on_identifier_not_mm_hash(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ect_mm_feature_t f = {.identifier = "feat-1", .mm_hash = "hash-1", .num_tokens = 2};
    ect_request_t r = {.request_id = "r", .features = &f, .n_features = 1};
    CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, 0));
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK(ect_step_meta_find_save(m, "feat-1") != NULL);
    CHECK(ect_step_meta_find_save(m, "hash-1") == NULL);
    ts_report_save(fx.s, "feat-1", TS_SAVED);
    CHECK(ect_scheduler_has_cache_item(fx.s, "feat-1"));
    CHECK(!ect_scheduler_has_cache_item(fx.s, "hash-1"));
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_cpu_region_fifo_eviction(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    ect_step_meta_t *a = ts_store(fx.s, "A", 1);
    ts_store_only(fx.s, "B", 1);
    CHECK(ts_cached(fx.s, "A"));
    CHECK(ts_cached(fx.s, "B"));
    /* Saving C needs a block: the oldest ready entry, A, goes. */
    ect_step_meta_t *c = ts_store(fx.s, "C", 1);
    CHECK(!ts_cached(fx.s, "A"));
    CHECK(ts_cached(fx.s, "B"));
    CHECK(ts_cached(fx.s, "C"));
    CHECK(ts_same_runs(ect_step_meta_find_save(c, "C"), ect_step_meta_find_save(a, "A")));
    CHECK_EQ_U64(cache_stats(fx.s).evicted_entries, 1);
    ect_step_meta_destroy(c);
    ect_step_meta_destroy(a);
    ts_step_fx_close(&fx);
}

/* An entry in many runs (more than the scheduler's 16-run buffer) is saved
 * and loaded with every run: 64 one-block entries, the even ones pinned by
 * loads in flight, then a 32-block entry takes the 32 odd holes. */
static void
test_an_entry_in_many_runs_is_saved_and_loaded_whole(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 64, 1);
    char key[16];
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ts_alloc(fx.s, key, 1);
    }
    ect_step_meta_destroy(ts_step(fx.s));
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        ts_report_save(fx.s, key, TS_SAVED);
    }
    for (int i = 0; i < 64; i += 2) {
        snprintf(key, sizeof(key), "k%d", i);
        ts_alloc(fx.s, key, 1); /* a load, pinned until it is reported */
    }
    ect_step_meta_destroy(ts_step(fx.s));
    ts_alloc(fx.s, "big", 32);
    ect_step_meta_t *m = ts_step(fx.s);
    const ect_step_item_t *save = ect_step_meta_find_save(m, "big");
    CHECK(save != NULL);
    CHECK_EQ_U64(save->n_runs, 32);
    CHECK_EQ_U64(save->n_blocks, 32);
    for (size_t r = 0; r < save->n_runs; r++)
        CHECK_EQ_U64(save->runs[r].first % 2, 1);
    ts_report_save(fx.s, "big", TS_SAVED);
    ts_alloc(fx.s, "big", 32);
    ect_step_meta_t *l = ts_step(fx.s);
    const ect_step_item_t *load = ts_find_load(l, "big");
    CHECK(load != NULL);
    CHECK(ts_same_runs(load, save));
    ect_step_meta_destroy(l);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_multiple_mm_items_per_request(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ect_mm_feature_t f[3] = {
        {.identifier = "a", .offset = 0, .num_tokens = 2},
        {.identifier = "b", .offset = 10, .num_tokens = 3},
        {.identifier = "c", .offset = 20, .num_tokens = 1},
    };
    ect_request_t r = {.request_id = "r", .features = f, .n_features = 3};
    for (size_t i = 0; i < 3; i++)
        CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, i));
    ect_step_meta_t *m = ts_step(fx.s);
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
        ts_report_save(fx.s, f[i].identifier, TS_SAVED);
    }
    ect_step_meta_destroy(m);
    /* The next request with the same items loads all three, each under its
     * own transfer id. */
    for (size_t i = 0; i < 3; i++)
        CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, i));
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 3);
    for (size_t i = 1; i < 3; i++)
        CHECK(ect_step_meta_load(m, i)->transfer_id > ect_step_meta_load(m, i - 1)->transfer_id);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_loads_only_serves_hashes_touched_this_step(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ts_store_only(fx.s, "A", 1);
    ts_store_only(fx.s, "B", 1);
    ts_alloc(fx.s, "B", 1);
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    CHECK(ts_find_load(m, "B") != NULL);
    CHECK(ts_find_load(m, "A") == NULL);
    ect_step_meta_destroy(m);
    /* And the step after that serves nothing again. */
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m) + ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_repeated_reload_same_step_loads_once(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ts_store_only(fx.s, "A", 2);
    for (int i = 0; i < 3; i++)
        ts_alloc(fx.s, "A", 2); /* three requests with the same image */
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    ts_report_load(fx.s, ect_step_meta_load(m, 0)->transfer_id);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK_EQ_U64(ts_metrics(fx.s).loads_queued, 1);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_load_not_emitted_for_uncached_entry(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    /* Being saved this step: a save, and no load of the unsaved bytes. */
    ts_alloc(fx.s, "new", 2);
    ts_alloc(fx.s, "new", 2);
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 1);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 0);
    ect_step_meta_destroy(m);
    /* Still in flight the step after: still no load. */
    ts_alloc(fx.s, "new", 2);
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m), 0);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);

    /* A consumer that never saw the item: nothing at all. */
    ts_step_fx_open(&fx, ECT_ROLE_CONSUMER, 16, 1);
    ts_alloc(fx.s, "never", 2);
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m), 0);
    CHECK_EQ_U64(cache_stats(fx.s).entries, 0);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_load_pin_protects_blocks_until_completion(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    ts_store_only(fx.s, "A", 1);
    ts_store_only(fx.s, "B", 1);
    /* A (the oldest) is loading; a save in the same step must take B. */
    ts_alloc(fx.s, "A", 1);
    ts_alloc(fx.s, "C", 1);
    ect_step_meta_t *m = ts_step(fx.s);
    uint64_t tid = ts_find_load(m, "A")->transfer_id;
    CHECK(ect_step_meta_find_save(m, "C") != NULL);
    CHECK(ts_cached(fx.s, "A"));
    CHECK(!ts_cached(fx.s, "B"));
    ect_step_meta_destroy(m);
    /* Nothing else can be evicted until the load is reported: D is skipped. */
    ts_alloc(fx.s, "D", 1);
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    CHECK_EQ_U64(ts_metrics(fx.s).saves_skipped_full, 1);
    CHECK(ts_cached(fx.s, "A"));
    /* Reported: A is evictable again, and (unpinned before C landed) it is
     * now the oldest evictable entry. */
    ts_report_load(fx.s, tid);
    ts_report_save(fx.s, "C", TS_SAVED);
    ts_store_only(fx.s, "D", 1);
    CHECK(!ts_cached(fx.s, "A"));
    CHECK(ts_cached(fx.s, "C"));
    CHECK(ts_cached(fx.s, "D"));
    ts_step_fx_close(&fx);
}

static void
test_load_needs_every_participant_before_unpin(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 2); /* TP = 2: two reporting ranks */
    ts_store_only(fx.s, "A", 2);
    ts_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = ts_step(fx.s);
    uint64_t tid = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    ts_report_load(fx.s, tid);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    CHECK_EQ_U64(ts_metrics(fx.s).loads_completed, 0);
    ts_report_load(fx.s, tid);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    CHECK_EQ_U64(ts_metrics(fx.s).loads_completed, 1);

    /* The engine's usual shape: both ranks' reports concatenated in one
     * call release the pin at once. */
    ts_alloc(fx.s, "A", 2);
    m = ts_step(fx.s);
    tid = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_load(r, tid));
    size_t len;
    unsigned char *one = ts_encode_report(r, &len);
    unsigned char *both = malloc(2 * len);
    memcpy(both, one, len);
    memcpy(both + len, one, len);
    CHECK_OK(ect_scheduler_update_connector_output(fx.s, both, 2 * len));
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK_EQ_U64(ts_metrics(fx.s).loads_completed, 2);
    free(both);
    free(one);
    ect_step_report_destroy(r);
    ts_step_fx_close(&fx);
}

static void
test_late_report_does_not_release_a_later_load_of_same_hash(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 2);
    ts_store_only(fx.s, "A", 1);
    ts_alloc(fx.s, "A", 1);
    ect_step_meta_t *m = ts_step(fx.s);
    uint64_t old = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    ts_report_load(fx.s, old);
    ts_report_load(fx.s, old);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);

    ts_alloc(fx.s, "A", 1);
    m = ts_step(fx.s);
    uint64_t fresh = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    CHECK(fresh > old);
    /* A replay of the old id counts for nothing, not for the new load. */
    uint64_t ignored = ts_metrics(fx.s).reports_ignored;
    ts_report_load(fx.s, old);
    ts_report_load(fx.s, fresh);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    CHECK_EQ_U64(ts_metrics(fx.s).reports_ignored, ignored + 1);
    ts_report_load(fx.s, fresh);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    ts_step_fx_close(&fx);
}

static void
test_region_full_skips_save_and_never_blocks(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    ts_alloc(fx.s, "big", 2); /* saving: holds both blocks, not evictable */
    ts_alloc(fx.s, "next", 1);
    ts_alloc(fx.s, "huge", 3); /* more blocks than the region has */
    ect_mm_feature_t f = {.identifier = "next", .num_tokens = 1, .has_local_input = 1};
    ect_request_t r = {.request_id = "r", .features = &f, .n_features = 1};
    int available = 0;
    CHECK_OK(ect_scheduler_ensure_cache_available(fx.s, &r, &available));
    CHECK(available);
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 1);
    CHECK(ect_step_meta_find_save(m, "big") != NULL);
    ect_step_meta_destroy(m);
    ect_metrics_t mt = ts_metrics(fx.s);
    CHECK_EQ_U64(mt.saves_skipped_full, 2);
    CHECK_EQ_U64(mt.saves_queued, 1);
    CHECK_EQ_U64(mt.cache.entries, 1);
    CHECK(!ts_cached(fx.s, "next"));
    ts_step_fx_close(&fx);
}

static void
test_producer_only_never_emits_loads(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_PRODUCER, 16, 1);
    ts_store_only(fx.s, "A", 2);
    ts_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 0);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_consumer_only_never_emits_saves(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_CONSUMER, 16, 1);
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        ts_alloc(fx.s, key, 2);
    }
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    ect_metrics_t mt = ts_metrics(fx.s);
    CHECK_EQ_U64(mt.saves_queued, 0);
    CHECK_EQ_U64(mt.cache.entries, 0);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ts_step_fx_close(&fx);
}

static void
test_consumer_only_has_cache_item(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_CONSUMER, 16, 1);
    /* A consumer's entries arrive from peers; put one in the state a
     * finished peer read leaves it in. */
    ect_cache_t *cache = ect__scheduler_cache(fx.s);
    CHECK_OK(ect_cache_alloc(cache, "remote", 3));
    CHECK(!ect_scheduler_has_cache_item(fx.s, "remote")); /* being read */
    CHECK_OK(ect_cache_mark_ready(cache, "remote"));
    CHECK(ect_scheduler_has_cache_item(fx.s, "remote"));
    CHECK(!ect_scheduler_has_cache_item(fx.s, "other"));
    ect_metrics_t mt = ts_metrics(fx.s);
    CHECK_EQ_U64(mt.hits, 1);
    CHECK_EQ_U64(mt.misses, 2);
    ts_alloc(fx.s, "remote", 3);
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    CHECK_EQ_U64(ect_step_meta_load(m, 0)->n_blocks, 3);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_save_not_emitted_for_already_cached_entry(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    /* In flight (queued, not reported): the next step does not save again. */
    ts_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 1);
    ect_step_meta_destroy(m);
    ts_alloc(fx.s, "A", 2);
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    /* Ready: no save either. */
    ts_report_save(fx.s, "A", TS_SAVED);
    ts_alloc(fx.s, "A", 2);
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    ts_report_load(fx.s, ect_step_meta_load(m, 0)->transfer_id);
    ect_step_meta_destroy(m);
    CHECK_EQ_U64(ts_metrics(fx.s).saves_queued, 1);
    CHECK_EQ_U64(cache_stats(fx.s).allocs, 1);
    ts_step_fx_close(&fx);
}

static void
test_update_connector_output_ignores_foreign_meta(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ts_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = ts_step(fx.s);
    /* Another value's bytes (the step metadata itself), and another
     * connector's report format, are not reports. */
    size_t len;
    void *meta_bytes = ts_encode_meta(m, &len);
    CHECK_STATUS(ect_scheduler_update_connector_output(fx.s, meta_bytes, len), ECT_ERR_PARSE);
    static const char json[] = "{\"completed_saves\": [\"A\"], \"completed_loads\": []}";
    CHECK_STATUS(ect_scheduler_update_connector_output(fx.s, json, sizeof(json) - 1),
                 ECT_ERR_PARSE);
    CHECK(!ts_cached(fx.s, "A"));
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    ect_metrics_t mt = ts_metrics(fx.s);
    CHECK_EQ_U64(mt.reports_malformed, 2);
    CHECK_EQ_U64(mt.saves_completed, 0);
    /* The real report still works afterwards. */
    ts_report_save(fx.s, "A", TS_SAVED);
    CHECK(ts_cached(fx.s, "A"));
    free(meta_bytes);
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_update_connector_output_ignores_unknown_report(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ts_store_only(fx.s, "A", 1);
    ect_metrics_t before = ts_metrics(fx.s);
    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_save(r, "never-saved"));
    CHECK_OK(ect_step_report_add_save(r, "A")); /* ready already: a replay */
    CHECK_OK(ect_step_report_add_failed_save(r, "A"));
    CHECK_OK(ect_step_report_add_load(r, 999));
    ts_send_report(fx.s, r);
    ect_step_report_destroy(r);
    ect_metrics_t after = ts_metrics(fx.s);
    CHECK_EQ_U64(after.reports_ignored, before.reports_ignored + 4);
    CHECK_EQ_U64(after.saves_completed, before.saves_completed);
    CHECK_EQ_U64(after.saves_failed, 0);
    CHECK_EQ_U64(after.cache.entries, 1);
    CHECK(ts_cached(fx.s, "A"));
    CHECK(!ts_cached(fx.s, "never-saved"));
    ts_step_fx_close(&fx);
}

static void
test_has_pending_push_work_tracks_inflight_save(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_PRODUCER, 16, 1);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ts_alloc(fx.s, "A", 2);
    CHECK(ect_scheduler_has_pending_push_work(fx.s)); /* queued */
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK(ect_scheduler_has_pending_push_work(fx.s)); /* with the workers */
    ts_report_save(fx.s, "A", TS_SAVED);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_has_pending_push_work_tracks_inflight_load(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ts_store_only(fx.s, "A", 2);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ts_alloc(fx.s, "A", 2);
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    ts_report_load(fx.s, ect_step_meta_load(m, 0)->transfer_id);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ect_step_meta_destroy(m);
    ts_step_fx_close(&fx);
}

static void
test_shutdown_disables_roles_and_cleans_region(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ts_store_only(fx.s, "ready", 2);
    ts_alloc(fx.s, "ready", 2); /* a load in flight */
    ts_alloc(fx.s, "saving", 2);
    ect_step_meta_t *m = ts_step(fx.s);
    ect_step_meta_destroy(m);
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    ect_metrics_t before = ts_metrics(fx.s);

    ect_scheduler_shutdown(fx.s);
    CHECK_MSG(!ts_exists(fx.in.path), "shutdown left %s", fx.in.path);
    CHECK(!ect_scheduler_has_cache_item(fx.s, "ready"));
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ts_alloc(fx.s, "later", 2);
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m), 0);
    ect_step_meta_destroy(m);
    ts_report_save(fx.s, "saving", TS_SAVED); /* late reports are harmless */
    /* The counters stay readable; nothing counts any more. */
    ect_metrics_t after = ts_metrics(fx.s);
    CHECK_EQ_U64(after.saves_queued, before.saves_queued);
    CHECK_EQ_U64(after.hits, before.hits);
    CHECK_EQ_U64(after.saves_completed, before.saves_completed);
    ect_scheduler_shutdown(fx.s); /* idempotent */
    ts_step_fx_close(&fx);
}

/* ---- beyond the seed's list ---------------------------------------------- */

static void
test_hit_is_not_evicted_before_its_load_is_queued(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    ts_store_only(fx.s, "X", 1); /* the oldest ready entry */
    ts_store_only(fx.s, "Z", 1);
    /* The engine asks about every item of a request first, then allocates
     * them in item order: Y (encoded, saved) comes before X (a hit). */
    ect_mm_feature_t f[2] = {{.identifier = "Y", .num_tokens = 1},
                             {.identifier = "X", .num_tokens = 1}};
    ect_request_t r = {.request_id = "r", .features = f, .n_features = 2};
    CHECK(!ect_scheduler_has_cache_item(fx.s, "Y"));
    CHECK(ect_scheduler_has_cache_item(fx.s, "X"));
    CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, 0));
    CHECK_OK(ect_scheduler_update_state_after_alloc(fx.s, &r, 1));
    ect_step_meta_t *m = ts_step(fx.s);
    /* The engine will not encode X: its load must be there. */
    CHECK_MSG(ts_find_load(m, "X") != NULL, "X was a hit but is not loaded");
    CHECK(ect_step_meta_find_save(m, "Y") != NULL);
    CHECK(ts_cached(fx.s, "X"));
    CHECK(!ts_cached(fx.s, "Z")); /* Y took Z's block */
    ts_report_save(fx.s, "Y", TS_SAVED);
    ts_report_load(fx.s, ts_find_load(m, "X")->transfer_id);
    ect_step_meta_destroy(m);
    /* A hit that the engine then does not schedule holds nothing past the
     * step: X is evictable again once the step is built. */
    CHECK(ect_scheduler_has_cache_item(fx.s, "X"));
    CHECK_EQ_U64(cache_stats(fx.s).pins, 1);
    ect_step_meta_destroy(ts_step(fx.s));
    CHECK_EQ_U64(cache_stats(fx.s).pins, 0);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ts_step_fx_close(&fx);
}

static void
test_has_pending_push_work_false_when_idle(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 2);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    /* Ready entries, a finished load, a failed save and an empty step: the
     * instance holds data but has nothing to push, so the engine may idle. */
    ts_store_only(fx.s, "A", 2);
    ts_store_only(fx.s, "B", 2);
    ts_alloc(fx.s, "A", 2);
    ect_step_meta_t *m = ts_step(fx.s);
    uint64_t tid = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);
    ts_report_load(fx.s, tid);
    ts_report_load(fx.s, tid);
    ts_alloc(fx.s, "C", 1);
    ect_step_meta_destroy(ts_step(fx.s));
    ts_report_save(fx.s, "C", TS_FAILED);
    ect_step_meta_destroy(ts_step(fx.s));
    CHECK_EQ_U64(cache_stats(fx.s).entries_ready, 2);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ts_step_fx_close(&fx);
}

static void
test_failed_save_report_discards_the_entry(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 4, 1);
    ts_alloc(fx.s, "A", 4);
    ect_step_meta_destroy(ts_step(fx.s));
    CHECK_EQ_U64(cache_stats(fx.s).free_blocks, 0);
    ts_report_save(fx.s, "A", TS_FAILED);
    ect_metrics_t mt = ts_metrics(fx.s);
    CHECK_EQ_U64(mt.saves_failed, 1);
    CHECK_EQ_U64(mt.saves_completed, 0);
    CHECK_EQ_U64(mt.cache.entries, 0);
    CHECK_EQ_U64(mt.cache.free_blocks, 4);
    CHECK(!ts_cached(fx.s, "A"));
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    /* A late "saved" for it is ignored; the item can be saved again. */
    ts_report_save(fx.s, "A", TS_SAVED);
    CHECK(!ts_cached(fx.s, "A"));
    ts_store_only(fx.s, "A", 4);
    CHECK(ts_cached(fx.s, "A"));
    ts_step_fx_close(&fx);
}

static void
test_zero_token_item_is_saved_and_loaded(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 4, 1);
    ect_step_meta_t *m = ts_store(fx.s, "empty", 0);
    CHECK_EQ_U64(ect_step_meta_find_save(m, "empty")->n_blocks, 0);
    ect_step_meta_destroy(m);
    CHECK(ts_cached(fx.s, "empty"));
    ts_alloc(fx.s, "empty", 0);
    m = ts_step(fx.s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    CHECK_EQ_U64(ect_step_meta_load(m, 0)->n_runs, 0);
    ts_report_load(fx.s, ect_step_meta_load(m, 0)->transfer_id);
    ect_step_meta_destroy(m);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ts_step_fx_close(&fx);
}

/* ---- metrics -------------------------------------------------------------- */

static void
test_metrics_count_every_step_event(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 2, 1);
    CHECK(!ect_scheduler_has_cache_item(fx.s, "A")); /* miss */
    ts_alloc(fx.s, "A", 1);
    ts_alloc(fx.s, "B", 1);
    ect_step_meta_destroy(ts_step(fx.s));
    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_save(r, "A"));
    CHECK_OK(ect_step_report_add_failed_save(r, "B"));
    ect_step_copy_stats_t cs = {.save_bytes = 4096, .save_ns = 2000, .save_batches = 1};
    ect_step_report_add_stats(r, &cs);
    ts_send_report(fx.s, r);
    ect_step_report_destroy(r);
    CHECK(ect_scheduler_has_cache_item(fx.s, "A")); /* hit */
    ts_alloc(fx.s, "A", 1);
    ect_step_meta_t *m = ts_step(fx.s);
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_load(r, ect_step_meta_load(m, 0)->transfer_id));
    ect_step_copy_stats_t ls = {.load_bytes = 64, .load_ns = 500, .load_batches = 1};
    ect_step_report_add_stats(r, &ls);
    ts_send_report(fx.s, r);
    ect_step_report_destroy(r);
    ect_step_meta_destroy(m);
    ts_store_only(fx.s, "C", 1);
    ts_store_only(fx.s, "D", 1); /* evicts A */
    ts_alloc(fx.s, "E", 5);      /* too big: skipped */

    ect_metrics_t mt = ts_metrics(fx.s);
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
    ts_step_fx_close(&fx);
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
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
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
        ts_alloc(fx.s, key, 1);
        ect_step_meta_t *m = ts_step(fx.s);
        ect_step_report_t *r;
        CHECK_OK(ect_step_report_create(&r));
        for (size_t i = 0; i < ect_step_meta_n_saves(m); i++)
            CHECK_OK(ect_step_report_add_save(r, ect_step_meta_save(m, i)->key));
        for (size_t i = 0; i < ect_step_meta_n_loads(m); i++)
            CHECK_OK(ect_step_report_add_load(r, ect_step_meta_load(m, i)->transfer_id));
        ts_send_report(fx.s, r);
        ect_step_report_destroy(r);
        ect_step_meta_destroy(m);
    }
    for (int i = 0; i < READERS; i++)
        CHECK(pthread_join(th[i], NULL) == 0);
    ect_metrics_t mt = ts_metrics(fx.s);
    CHECK_EQ_U64(mt.hits + mt.misses, READERS * CALLS);
    CHECK_EQ_U64(mt.saves_completed, 8);
    CHECK_EQ_U64(mt.loads_completed, CYCLES - 8);
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    ts_step_fx_close(&fx);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_offload_reuse_cycle),
    ECT_CASE(test_has_cache_item_false_when_not_consumer),
    ECT_CASE(test_connector_keys_on_identifier_not_mm_hash),
    ECT_CASE(test_cpu_region_fifo_eviction),
    ECT_CASE(test_an_entry_in_many_runs_is_saved_and_loaded_whole),
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
    ECT_CASE(test_failed_save_report_discards_the_entry),
    ECT_CASE(test_zero_token_item_is_saved_and_loaded),
    ECT_CASE(test_metrics_count_every_step_event),
    ECT_CASE(test_concurrent_callers_keep_the_counters_consistent),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
