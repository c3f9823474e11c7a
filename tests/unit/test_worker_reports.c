/*
 * The worker side of the step protocol (SPEC §7; issue 3), what it reports:
 * completion only after the copy landed, every load and every save of a
 * step reported exactly once whatever the engine does, metadata that must
 * not bind, the lifecycle, and a refused save with the scheduler.
 * test_worker.c holds the seed's save and load scenarios.
 *
 * Each case runs a real worker over a small real region in /dev/shm
 * (tests/support/step.h: struct ts_worker_fx) that the test joins too.
 * Cases that must see copies in flight lend the worker a CPU engine and
 * hold its copy threads (ect__copy_cpu_hold).
 */
#include <time.h>

#include "copy/cpu.h"
#include "support/step.h"

/* ---- completion and exactly-once reporting ----------------------------- */

static void
test_completion_reported_only_after_the_copy_landed(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 1);
    memset(ts_worker_fx_block(&fx, 8), 0x33, 2 * TS_STEP_BLOCK);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t rs[] = {{0, 2}}, rl[] = {{8, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "s", rs, 1));
    CHECK_OK(ect_step_meta_add_load(m, "l", 77, rl, 1));
    ts_worker_bind(fx.w, m);
    CHECK_OK(ect__copy_cpu_hold(fx.engine, true));
    struct ts_load_target t = {0};
    CHECK_OK(ect_worker_start_load(fx.w, ts_load_target_fn, &t, NULL));
    unsigned char *src = ts_payload(2 * TS_STEP_BLOCK, 13);
    CHECK_OK(ect_worker_save(fx.w, "s", src, 2 * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 2);
    /* Held in flight: nothing landed, so nothing may be reported. */
    for (int i = 0; i < 3; i++) {
        ect_step_report_t *r = (ect_step_report_t *)&fx;
        CHECK_OK(ect_worker_take_report(fx.w, &r));
        CHECK(r == NULL);
    }
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 0), 2 * TS_STEP_BLOCK, TS_WORKER_POISON));
    CHECK(ts_all_bytes_are(t.bufs[0], 2 * TS_STEP_BLOCK, 0));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 2);
    CHECK_OK(ect__copy_cpu_hold(fx.engine, false));
    ect_step_report_t *r = NULL;
    while (r == NULL || ect_step_report_n_saves(r) + ect_step_report_n_loads(r) < 2) {
        ect_step_report_t *more = NULL;
        CHECK_OK(ect_worker_take_report(fx.w, &more));
        if (more != NULL && r == NULL) {
            r = more;
        } else if (more != NULL) {
            CHECK_OK(ect_step_report_merge(r, more));
            ect_step_report_destroy(more);
        }
        /* What is reported has landed. */
        if (r != NULL && ts_report_count_saves(r, "s"))
            CHECK(memcmp(ts_worker_fx_block(&fx, 0), src, 2 * TS_STEP_BLOCK) == 0);
        if (r != NULL && ts_report_count_loads(r, 77))
            CHECK(ts_all_bytes_are(t.bufs[0], 2 * TS_STEP_BLOCK, 0x33));
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    }
    CHECK_EQ_U64(ts_report_count_saves(r, "s"), 1);
    CHECK_EQ_U64(ts_report_count_loads(r, 77), 1);
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    ts_load_target_free(&t);
    free(src);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_every_load_reported_once_when_the_target_fails(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 1, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t r0[] = {{0, 1}}, r1[] = {{2, 1}}, r2[] = {{4, 1}};
    CHECK_OK(ect_step_meta_add_load(m, "a", 10, r0, 1));
    CHECK_OK(ect_step_meta_add_load(m, "b", 11, r1, 1));
    CHECK_OK(ect_step_meta_add_load(m, "c", 12, r2, 1));
    ts_worker_bind(fx.w, m);
    struct ts_load_target t = {.fail_at = 2};
    CHECK_STATUS(ect_worker_start_load(fx.w, ts_load_target_fn, &t, NULL), ECT_ERR_NO_MEMORY);
    CHECK_EQ_U64(t.calls, 2); /* stopped at the failure */
    CHECK_STATUS(ect_worker_start_load(fx.w, ts_load_target_fn, &t, NULL), ECT_ERR_STATE);
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 3);
    for (uint64_t tid = 10; tid <= 12; tid++)
        CHECK_EQ_U64(ts_report_count_loads(r, tid), 1);
    ect_step_report_destroy(r);
    CHECK(ts_worker_land(fx.w) == NULL);
    ts_load_target_free(&t);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_every_load_reported_once_when_cleared_without_start_load(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t r0[] = {{0, 1}}, r1[] = {{3, 2}};
    CHECK_OK(ect_step_meta_add_load(m, "a", 20, r0, 1));
    CHECK_OK(ect_step_meta_add_load(m, "b", 21, r1, 1));
    ts_worker_bind(fx.w, m);
    CHECK(ts_worker_land(fx.w) == NULL); /* not before the step ends */
    ect_worker_clear_metadata(fx.w);
    ect_worker_clear_metadata(fx.w); /* a second clear adds nothing */
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 2);
    CHECK_EQ_U64(ts_report_count_loads(r, 20), 1);
    CHECK_EQ_U64(ts_report_count_loads(r, 21), 1);
    ect_step_report_destroy(r);
    CHECK(ts_worker_land(fx.w) == NULL);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

/* ---- metadata that must not bind ---------------------------------------- */

static void
check_nothing_bound(struct ts_worker_fx *fx)
{
    CHECK(ect_worker_metadata(fx->w) == NULL);
    struct ts_load_target t = {0};
    CHECK_STATUS(ect_worker_start_load(fx->w, ts_load_target_fn, &t, NULL), ECT_ERR_STATE);
    CHECK_EQ_U64(t.calls, 0);
}

static void
test_garbage_metadata_binds_nothing(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t runs[] = {{0, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    CHECK_OK(ect_step_meta_add_load(m, "g", 3, runs, 1));
    size_t len;
    unsigned char *good = ts_encode_meta(m, &len);
    unsigned char garbage[64];
    for (size_t i = 0; i < sizeof(garbage); i++)
        garbage[i] = (unsigned char)(i * 37 + 5);
    CHECK_STATUS(ect_worker_bind_metadata(fx.w, garbage, sizeof(garbage)), ECT_ERR_PARSE);
    check_nothing_bound(&fx);
    for (size_t cut = 0; cut < len; cut += 7) {
        CHECK_STATUS(ect_worker_bind_metadata(fx.w, good, cut), ECT_ERR_PARSE);
        check_nothing_bound(&fx);
    }
    unsigned char *bad = malloc(len + 1);
    memcpy(bad, good, len);
    bad[len] = 0;
    CHECK_STATUS(ect_worker_bind_metadata(fx.w, bad, len + 1), ECT_ERR_PARSE); /* trailing byte */
    check_nothing_bound(&fx);
    CHECK_STATUS(ect_worker_bind_metadata(fx.w, NULL, 4), ECT_ERR_INVALID_ARG);
    check_nothing_bound(&fx);
    /* Nothing was left half-bound: the good bytes bind, once. */
    CHECK_OK(ect_worker_bind_metadata(fx.w, good, len));
    CHECK_STATUS(ect_worker_bind_metadata(fx.w, good, len), ECT_ERR_STATE);
    CHECK_EQ_U64(ect_step_meta_n_saves(ect_worker_metadata(fx.w)), 1);
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 1); /* only the bound step's load */
    ect_step_report_destroy(r);
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 0), 16 * TS_STEP_BLOCK, TS_WORKER_POISON));
    free(bad);
    free(good);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_blocks_outside_the_region_bind_nothing(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    static const ect_run_t outside[][1] = {{{15, 2}}, {{16, 1}}, {{UINT64_MAX - 1, 1}}};
    for (size_t i = 0; i < 3; i++) {
        for (int as_load = 0; as_load <= 1; as_load++) {
            ect_step_meta_t *m = ts_meta_new();
            if (as_load)
                CHECK_OK(ect_step_meta_add_load(m, "h", 1, outside[i], 1));
            else
                CHECK_OK(ect_step_meta_add_save(m, "h", outside[i], 1));
            size_t len;
            void *bytes = ts_encode_meta(m, &len);
            CHECK_STATUS(ect_worker_bind_metadata(fx.w, bytes, len), ECT_ERR_OVERFLOW);
            check_nothing_bound(&fx);
            free(bytes);
            ect_step_meta_destroy(m);
        }
    }
    CHECK(ts_worker_land(fx.w) == NULL);
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 0), 16 * TS_STEP_BLOCK, TS_WORKER_POISON));
    ts_worker_fx_close(&fx);
}

/* ---- lifecycle ------------------------------------------------------------ */

static void
test_destroy_waits_for_copies_in_flight(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 1);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t runs[] = {{0, 16}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    ts_worker_bind(fx.w, m);
    unsigned char *src = ts_payload(16 * TS_STEP_BLOCK, 14);
    CHECK_OK(ect_worker_save(fx.w, "h", src, 16 * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect__copy_cpu_hold(fx.engine, true));
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 1);
    /* Destroy with the batch still held: it lands before the worker goes. */
    ect_worker_destroy(fx.w);
    fx.w = NULL;
    CHECK(memcmp(ts_worker_fx_block(&fx, 0), src, 16 * TS_STEP_BLOCK) == 0);
    CHECK_OK(ect__copy_cpu_hold(fx.engine, false));
    free(src);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_create_fails_cleanly_on_bad_params(void)
{
    struct ts_step_instance in;
    ts_step_instance_init(&in, ECT_ROLE_BOTH, 16, true);
    ect_worker_t *w = (ect_worker_t *)&in; /* must stay as it is */
    ect_worker_params_t p = {.config = &in.cfg, .geometry = &in.geom, .instance_id = in.id};
    CHECK_STATUS(ect_worker_create(NULL, &w), ECT_ERR_INVALID_ARG);
    p.instance_id = NULL;
    CHECK_STATUS(ect_worker_create(&p, &w), ECT_ERR_CONFIG);
    p.instance_id = in.id;
    in.cfg.copy_threads = 0;
    CHECK_STATUS(ect_worker_create(&p, &w), ECT_ERR_CONFIG);
    in.cfg.copy_threads = 2;
    CHECK(w == (ect_worker_t *)&in);
    CHECK(!ts_exists(in.path));
    ect_scheduler_t *s = ts_scheduler(&in, 1);
    ect_geometry_t other;
    CHECK_OK(ect_geometry_init(TS_STEP_HIDDEN, ECT_DTYPE_F16, in.cfg.cpu_bytes, &other));
    p.geometry = &other;
    CHECK_STATUS(ect_worker_create(&p, &w), ECT_ERR_INCOMPATIBLE);
    CHECK(w == (ect_worker_t *)&in);
    ect_scheduler_destroy(s);
    ts_check_gone(in.path);
    ect_worker_destroy(NULL);
}

/* ---- with the scheduler --------------------------------------------------- */

/* A save the worker refuses (payload larger than its blocks) must not leave
 * the scheduler's entry not-ready forever: its blocks come back and the
 * instance goes idle. */
static void
test_refused_save_frees_the_scheduler_entry(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_scheduler_t *s = ts_scheduler(&fx.in, 1);
    ts_alloc(s, "h", 2);
    ect_step_meta_t *m = ts_step(s);
    ts_worker_bind(fx.w, m);
    unsigned char *src = ts_payload(3 * TS_STEP_BLOCK, 15);
    CHECK_STATUS(ect_worker_save(fx.w, "h", src, 3 * TS_STEP_BLOCK, NULL, NULL), ECT_ERR_OVERFLOW);
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK(r != NULL);
    ts_send_report(s, r);
    ect_step_report_destroy(r);
    ect_metrics_t mt = ts_metrics(s);
    CHECK_EQ_U64(mt.saves_failed, 1);
    CHECK_EQ_U64(mt.cache.entries, 0);
    CHECK_EQ_U64(mt.cache.free_blocks, 16);
    CHECK(!ect_scheduler_has_pending_push_work(s));
    ect_scheduler_destroy(s);
    free(src);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_completion_reported_only_after_the_copy_landed),
    ECT_CASE(test_every_load_reported_once_when_the_target_fails),
    ECT_CASE(test_every_load_reported_once_when_cleared_without_start_load),
    ECT_CASE(test_garbage_metadata_binds_nothing),
    ECT_CASE(test_blocks_outside_the_region_bind_nothing),
    ECT_CASE(test_destroy_waits_for_copies_in_flight),
    ECT_CASE(test_create_fails_cleanly_on_bad_params),
    ECT_CASE(test_refused_save_frees_the_scheduler_entry),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
