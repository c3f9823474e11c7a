/*
 * The scheduler side against bad input and misuse (SPEC §6, §10; issue 3):
 * malformed worker reports, bad requests and bad creation parameters are
 * rejected with a status and change nothing, and creation leaves nothing
 * behind.  The protocol scenarios are in tests/unit/test_scheduler.c.
 */
#include "support/step.h"

static ect_cache_stats_t
cache_stats(ect_scheduler_t *s)
{
    return ts_metrics(s).cache;
}

static void
test_malformed_report_changes_nothing(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ts_store_only(fx.s, "A", 1);
    ts_alloc(fx.s, "A", 1);
    ts_alloc(fx.s, "B", 1);
    ect_step_meta_t *m = ts_step(fx.s);
    uint64_t tid = ect_step_meta_load(m, 0)->transfer_id;
    ect_step_meta_destroy(m);

    ect_step_report_t *r;
    CHECK_OK(ect_step_report_create(&r));
    CHECK_OK(ect_step_report_add_save(r, "B"));
    CHECK_OK(ect_step_report_add_load(r, tid));
    size_t len;
    unsigned char *good = ts_encode_report(r, &len);
    ect_step_report_destroy(r);
    ect_metrics_t before = ts_metrics(fx.s);

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

    ect_metrics_t after = ts_metrics(fx.s);
    CHECK_EQ_U64(after.reports_malformed, before.reports_malformed + 3);
    CHECK_EQ_U64(after.saves_completed, before.saves_completed);
    CHECK_EQ_U64(after.loads_completed, before.loads_completed);
    CHECK_EQ_U64(after.cache.pins, 1);
    CHECK_EQ_U64(after.cache.entries_not_ready, 1);
    CHECK(!ts_cached(fx.s, "B"));
    CHECK(ect_scheduler_has_pending_push_work(fx.s));
    /* The intact bytes still apply. */
    CHECK_OK(ect_scheduler_update_connector_output(fx.s, good, len));
    CHECK(ts_cached(fx.s, "B"));
    CHECK(!ect_scheduler_has_pending_push_work(fx.s));
    CHECK_OK(ect_scheduler_update_connector_output(fx.s, NULL, 0)); /* nothing to report */
    CHECK(ect_scheduler_update_connector_output(fx.s, NULL, 5) != ECT_OK);
    free(bad);
    free(good);
    ts_step_fx_close(&fx);
}

static void
test_bad_requests_are_rejected_and_change_nothing(void)
{
    struct ts_step_fx fx;
    ts_step_fx_open(&fx, ECT_ROLE_BOTH, 16, 1);
    ect_mm_feature_t f[2] = {{.identifier = "ok", .num_tokens = 1},
                             {.identifier = NULL, .num_tokens = 1}};
    ect_request_t r = {.request_id = "r", .features = f, .n_features = 2};
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, &r, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "identifier of feature 1 is missing");
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
    CHECK_CONTAINS(ect_last_error(), "identifier of feature 0 is longer than 1024 bytes");
    CHECK(!ts_cached(fx.s, longkey));
    CHECK(!ect_scheduler_has_cache_item(fx.s, longkey));
    /* The same for a request id and an mm_hash: refused where they enter,
     * naming the field, never cut (a cut key would alias another). */
    lf.identifier = "ok";
    lr.request_id = longkey;
    CHECK_STATUS(ect_scheduler_ensure_cache_available(fx.s, &lr, &available), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "request_id of request 0 is longer than 1024 bytes");
    char *pj = NULL;
    CHECK_STATUS(ect_scheduler_request_finished(fx.s, &lr, &pj), ECT_ERR_INVALID_ARG);
    lr.request_id = "r";
    lf.mm_hash = longkey;
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, &lr, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "mm_hash of feature 0 is longer than 1024 bytes");
    lf.mm_hash = "";
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, &lr, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "mm_hash of feature 0 is empty");
    /* Not UTF-8 (events and the wire carry these as text). */
    lf.mm_hash = NULL;
    lf.identifier = "bad\xff";
    CHECK_STATUS(ect_scheduler_update_state_after_alloc(fx.s, &lr, 0), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "identifier of feature 0 is not UTF-8 (byte 3)");
    /* Exactly ECT_KEY_MAX bytes is fine. */
    longkey[ECT_KEY_MAX] = '\0';
    lf.identifier = longkey;
    CHECK_OK(ect_scheduler_ensure_cache_available(fx.s, &lr, &available));
    free(longkey);
    ect_step_meta_t *m = ts_step(fx.s);
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
    ts_step_fx_close(&fx);
}

static void
test_create_fails_cleanly_on_bad_params(void)
{
    struct ts_step_instance in;
    ts_step_instance_init(&in, ECT_ROLE_BOTH, 16, true);
    ect_scheduler_t *s = (ect_scheduler_t *)&in; /* must stay as it is */
    ect_scheduler_params_t p = {.config = &in.cfg, .geometry = &in.geom, .instance_id = in.id};
    in.cfg.p2p_enabled = true;
    if (ect_has_p2p()) {
        /* P2P that cannot start (nothing can bind there) undoes the region
         * and the cache it had made. */
        snprintf(in.cfg.side_channel_host, sizeof(in.cfg.side_channel_host), "256.0.0.1");
        CHECK(ect_scheduler_create(&p, &s) != ECT_OK);
        CHECK_CONTAINS(ect_last_error(), "256.0.0.1");
    } else {
        CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_UNSUPPORTED);
        CHECK_CONTAINS(ect_last_error(), "ec_enable_nixl");
    }
    in.cfg.p2p_enabled = false;
    p.instance_id = NULL;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_CONFIG);
    p.instance_id = "bad/name";
    CHECK(ect_scheduler_create(&p, &s) != ECT_OK);
    p.instance_id = in.id;
    in.cfg.cpu_bytes = 0;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_CONFIG);
    in.cfg.cpu_bytes = 16 * TS_STEP_BLOCK;
    p.geometry = NULL;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_INVALID_ARG);
    CHECK(s == (ect_scheduler_t *)&in);
    CHECK(!ts_exists(in.path));
    /* A region of another geometry under the same name: incompatible. */
    p.geometry = &in.geom;
    ect_scheduler_t *first = ts_scheduler(&in, 1);
    ect_geometry_t other = in.geom;
    CHECK_OK(ect_geometry_init(TS_STEP_HIDDEN * 2, ECT_DTYPE_F32, in.cfg.cpu_bytes, &other));
    p.geometry = &other;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_INCOMPATIBLE);
    CHECK(s == (ect_scheduler_t *)&in);
    ect_scheduler_destroy(first);
    ts_check_gone(in.path);
    ect_scheduler_destroy(NULL);
}

/* Issue 9 item 4: two cache owners configured with one region_name would
 * overwrite each other's entries.  The second scheduler is refused, naming
 * the region and the first one's pid; workers and read-only mappers still
 * join; once the owner is gone a new one can take over. */
static void
test_a_second_scheduler_on_one_region_is_refused_and_workers_still_join(void)
{
    struct ts_step_instance a, b;
    ts_step_instance_init(&a, ECT_ROLE_BOTH, 16, true);
    ts_step_instance_init(&b, ECT_ROLE_BOTH, 16, true);
    /* Two instances, one configured region name. */
    char name[64], path[320];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    snprintf(a.cfg.region_name, sizeof(a.cfg.region_name), "%s", name);
    snprintf(b.cfg.region_name, sizeof(b.cfg.region_name), "%s", name);
    snprintf(path, sizeof(path), "/dev/shm/%s.mmap", name);
    snprintf(a.path, sizeof(a.path), "%s", path);
    ect_scheduler_t *first = ts_scheduler(&a, 1);
    ts_store_only(first, "A", 1);

    ect_scheduler_params_t p = {.config = &b.cfg, .geometry = &b.geom, .instance_id = b.id};
    ect_scheduler_t *second = (ect_scheduler_t *)&b; /* must stay as it is */
    CHECK_STATUS(ect_scheduler_create(&p, &second), ECT_ERR_BUSY);
    CHECK(second == (ect_scheduler_t *)&b);
    char pid[32];
    snprintf(pid, sizeof(pid), "pid %d", (int)getpid());
    CHECK_CONTAINS(ect_last_error(), path);
    CHECK_CONTAINS(ect_last_error(), pid);
    CHECK_CONTAINS(ect_last_error(), "region_name");
    /* The refused one left the owner's region and entries alone. */
    CHECK(ts_exists(path));
    CHECK(ts_cached(first, "A"));

    /* A worker of the instance and a read-only mapper still join. */
    ect_worker_t *w = ts_worker(&a, 0, 0, NULL);
    ect_region_t *ro = NULL;
    CHECK_OK(ect_region_open_readonly(path, NULL, &ro));
    ect_region_close(ro);

    /* The owner goes; the next scheduler owns the region (the worker kept
     * it alive). */
    ect_scheduler_destroy(first);
    CHECK(ts_exists(path));
    second = NULL;
    CHECK_OK(ect_scheduler_create(&p, &second));
    ect_scheduler_destroy(second);
    ect_worker_destroy(w);
    ts_check_gone(path);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_malformed_report_changes_nothing),
    ECT_CASE(test_bad_requests_are_rejected_and_change_nothing),
    ECT_CASE(test_create_fails_cleanly_on_bad_params),
    ECT_CASE(test_a_second_scheduler_on_one_region_is_refused_and_workers_still_join),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
