/*
 * The worker side of the step protocol (SPEC §7; issue 3), saves and loads:
 * counterparts of the seed's test_worker.py scenarios
 * (reference/vllm-ec-behaviour.md §5), named after them, and the reuse of
 * the worker's pooled buffers.  test_worker_reports.c holds the rest:
 * completion only after the copy landed, every load and save of a step
 * reported exactly once whatever the engine does, metadata that must not
 * bind, the lifecycle.
 *
 * Each case runs a real worker over a small real region in /dev/shm
 * (16 blocks of 64 bytes, tests/support/step.h: struct ts_worker_fx) that
 * the test joins too, so it can poison every block first and then see
 * exactly which bytes a copy wrote.  Cases that must see copies in flight
 * lend the worker a CPU engine and hold its copy threads
 * (ect__copy_cpu_hold).
 */
#include "copy/cpu.h"
#include "support/step.h"

/* ---- saves ------------------------------------------------------------- */

/* The seed's ids 7, 2, 5, 0: our step metadata carries an entry's blocks as
 * ascending runs (the cache hands them out ascending, and the worker
 * coalesces on that), so the entry's blocks in order are 0, 2, 5, 7. */
static void
save_writes_to_assigned_blocks(size_t nbytes)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t seed_order[] = {{7, 1}, {2, 1}, {5, 1}, {0, 1}};
    CHECK_STATUS(ect_step_meta_add_save(m, "h", seed_order, 4), ECT_ERR_INVALID_ARG);
    ect_run_t runs[] = {{0, 1}, {2, 1}, {5, 1}, {7, 1}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 4));
    ts_worker_bind(fx.w, m);
    unsigned char *src = ts_payload(nbytes, 1);
    int queued = 0;
    CHECK_OK(ect_worker_save(fx.w, "h", src, nbytes, NULL, &queued));
    CHECK(queued);
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ts_report_count_saves(r, "h"), 1);
    CHECK_EQ_U64(ect_step_report_n_failed_saves(r), 0);
    CHECK_EQ_U64(ect_step_report_stats(r)->save_bytes, nbytes);
    const uint64_t ids[] = {0, 2, 5, 7};
    for (size_t k = 0; k < 4; k++) {
        size_t off = k * TS_STEP_BLOCK;
        size_t len = nbytes - off < TS_STEP_BLOCK ? nbytes - off : TS_STEP_BLOCK;
        CHECK_MSG(memcmp(ts_worker_fx_block(&fx, ids[k]), src + off, len) == 0,
                  "block %llu has wrong bytes", (unsigned long long)ids[k]);
        /* The tail sentinel: the rest of a partial last block is untouched. */
        CHECK_MSG(ts_all_bytes_are(ts_worker_fx_block(&fx, ids[k]) + len, TS_STEP_BLOCK - len,
                                   TS_WORKER_POISON),
                  "block %llu was written past the payload", (unsigned long long)ids[k]);
    }
    for (uint64_t b = 0; b < 16; b++)
        if (b != 0 && b != 2 && b != 5 && b != 7)
            CHECK_MSG(ts_all_bytes_are(ts_worker_fx_block(&fx, b), TS_STEP_BLOCK, TS_WORKER_POISON),
                      "unassigned block %llu written", (unsigned long long)b);
    ect_worker_clear_metadata(fx.w);
    ect_step_report_destroy(r);
    CHECK_OK(ect_worker_take_report(fx.w, &r));
    CHECK(r == NULL); /* nothing is reported twice */
    free(src);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_saves_writes_to_assigned_blocks_exact_fit(void)
{
    save_writes_to_assigned_blocks(4 * TS_STEP_BLOCK);
}

static void
test_saves_writes_to_assigned_blocks_partial_last_block(void)
{
    save_writes_to_assigned_blocks(3 * TS_STEP_BLOCK + 20);
}

static void
test_saves_noop_when_mm_hash_not_in_saves(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t runs[] = {{3, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "wanted", runs, 1));
    ts_worker_bind(fx.w, m);
    unsigned char *src = ts_payload(2 * TS_STEP_BLOCK, 2);
    int queued = 7;
    CHECK_OK(ect_worker_save(fx.w, "other", src, 2 * TS_STEP_BLOCK, NULL, &queued));
    CHECK_EQ_INT(queued, 0);
    CHECK_OK(ect_worker_save(fx.w, "other", src, 2 * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
    CHECK(ts_worker_land(fx.w) == NULL);
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 0), 16 * TS_STEP_BLOCK, TS_WORKER_POISON));
    free(src);
    ect_step_meta_destroy(m);
    ect_worker_clear_metadata(fx.w);
    ts_worker_fx_close(&fx);
}

static void
test_saves_noop_for_non_save_rank(void)
{
    static const unsigned ranks[][2] = {{1, 0}, {0, 1}, {1, 1}}; /* tp1-pcp0, tp0-pcp1, tp1-pcp1 */
    for (size_t i = 0; i < 3; i++) {
        struct ts_worker_fx fx;
        ts_worker_fx_open(&fx, ranks[i][0], ranks[i][1], 0);
        CHECK(!ect_worker_is_save_rank(fx.w));
        ect_step_meta_t *m = ts_meta_new();
        ect_run_t runs[] = {{0, 2}};
        CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
        ts_worker_bind(fx.w, m);
        unsigned char *src = ts_payload(2 * TS_STEP_BLOCK, 3);
        int queued = 7;
        CHECK_OK(ect_worker_save(fx.w, "h", src, 2 * TS_STEP_BLOCK, NULL, &queued));
        CHECK_EQ_INT(queued, 0);
        CHECK_OK(ect_worker_get_finished(fx.w));
        CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
        ect_worker_clear_metadata(fx.w);
        /* Only the save rank reports saves, done or failed. */
        CHECK(ts_worker_land(fx.w) == NULL);
        CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 0), 16 * TS_STEP_BLOCK, TS_WORKER_POISON));
        free(src);
        ect_step_meta_destroy(m);
        ts_worker_fx_close(&fx);
    }
}

static void
test_saves_raises_when_allocated_blocks_too_small(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t runs[] = {{4, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    ts_worker_bind(fx.w, m);
    unsigned char *src = ts_payload(2 * TS_STEP_BLOCK + 1, 4);
    int queued = 7;
    CHECK_STATUS(ect_worker_save(fx.w, "h", src, 2 * TS_STEP_BLOCK + 1, NULL, &queued),
                 ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "exceeds");
    CHECK_EQ_INT(queued, 0);
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 0), 16 * TS_STEP_BLOCK,
                           TS_WORKER_POISON)); /* no truncated copy */
    /* The entry never got its bytes: the scheduler must hear it failed. */
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ts_report_count_failed(r, "h"), 1);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 0);
    ect_step_report_destroy(r);
    free(src);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_saves_batches_multiple_hashes(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 1);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t ra[] = {{0, 2}}, rb[] = {{2, 3}}, rc[] = {{9, 1}, {12, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "a", ra, 1));
    CHECK_OK(ect_step_meta_add_save(m, "b", rb, 1));
    CHECK_OK(ect_step_meta_add_save(m, "c", rc, 2));
    ts_worker_bind(fx.w, m);
    size_t na = 2 * TS_STEP_BLOCK, nb = 3 * TS_STEP_BLOCK - 5, nc = 3 * TS_STEP_BLOCK;
    unsigned char *a = ts_payload(na, 5), *b = ts_payload(nb, 6), *c = ts_payload(nc, 7);
    CHECK_OK(ect_worker_save(fx.w, "a", a, na, NULL, NULL));
    CHECK_OK(ect_worker_save(fx.w, "b", b, nb, NULL, NULL));
    CHECK_OK(ect_worker_save(fx.w, "c", c, nc, NULL, NULL));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0); /* nothing before get_finished */
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 0), 16 * TS_STEP_BLOCK, TS_WORKER_POISON));
    CHECK_OK(ect__copy_cpu_hold(fx.engine, true));
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 1); /* one batch for the three */
    CHECK_OK(ect__copy_cpu_hold(fx.engine, false));
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 3);
    CHECK_EQ_U64(ts_report_count_saves(r, "a") + ts_report_count_saves(r, "b") +
                     ts_report_count_saves(r, "c"),
                 3);
    CHECK_EQ_U64(ect_step_report_stats(r)->save_bytes, na + nb + nc);
    CHECK_EQ_U64(ect_step_report_stats(r)->save_batches, 1);
    CHECK(memcmp(ts_worker_fx_block(&fx, 0), a, na) == 0);
    CHECK(memcmp(ts_worker_fx_block(&fx, 2), b, nb) == 0);
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 4) + TS_STEP_BLOCK - 5, 5, TS_WORKER_POISON));
    CHECK(memcmp(ts_worker_fx_block(&fx, 9), c, TS_STEP_BLOCK) == 0);
    CHECK(memcmp(ts_worker_fx_block(&fx, 12), c + TS_STEP_BLOCK, 2 * TS_STEP_BLOCK) == 0);
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 10), 2 * TS_STEP_BLOCK, TS_WORKER_POISON));
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    free(a);
    free(b);
    free(c);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_save_twice_in_a_step_is_refused(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t runs[] = {{0, 1}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    ts_worker_bind(fx.w, m);
    unsigned char *src = ts_payload(TS_STEP_BLOCK, 8);
    CHECK_OK(ect_worker_save(fx.w, "h", src, TS_STEP_BLOCK, NULL, NULL));
    int queued = 7;
    CHECK_STATUS(ect_worker_save(fx.w, "h", src, TS_STEP_BLOCK, NULL, &queued), ECT_ERR_EXISTS);
    CHECK_EQ_INT(queued, 0);
    CHECK_STATUS(ect_worker_save(fx.w, NULL, src, TS_STEP_BLOCK, NULL, NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_worker_save(fx.w, "h", NULL, TS_STEP_BLOCK, NULL, NULL), ECT_ERR_INVALID_ARG);
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK_EQ_U64(ts_report_count_saves(r, "h"), 1);
    CHECK_EQ_U64(ect_step_report_n_failed_saves(r), 0);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    CHECK_OK(ect_worker_take_report(fx.w, &r));
    CHECK(r == NULL);
    free(src);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

/* A save the step names but the engine never makes (the item was not
 * encoded after all, or its save was refused) is reported as failed when
 * the step ends, so the scheduler frees its blocks. */
static void
test_saves_never_made_are_reported_failed(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t ra[] = {{0, 1}}, rb[] = {{1, 1}};
    CHECK_OK(ect_step_meta_add_save(m, "made", ra, 1));
    CHECK_OK(ect_step_meta_add_save(m, "never", rb, 1));
    ts_worker_bind(fx.w, m);
    unsigned char *src = ts_payload(TS_STEP_BLOCK, 9);
    CHECK_OK(ect_worker_save(fx.w, "made", src, TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ts_report_count_saves(r, "made"), 1);
    CHECK_EQ_U64(ts_report_count_failed(r, "made"), 0);
    CHECK_EQ_U64(ts_report_count_failed(r, "never"), 1);
    CHECK_EQ_U64(ts_report_count_saves(r, "never"), 0);
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 1), TS_STEP_BLOCK, TS_WORKER_POISON));
    ect_step_report_destroy(r);
    free(src);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_saves_queued_but_not_submitted_are_reported_failed(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t runs[] = {{0, 1}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    ts_worker_bind(fx.w, m);
    unsigned char *src = ts_payload(TS_STEP_BLOCK, 10);
    CHECK_OK(ect_worker_save(fx.w, "h", src, TS_STEP_BLOCK, NULL, NULL));
    ect_worker_clear_metadata(fx.w); /* get_finished never called */
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ts_report_count_failed(r, "h"), 1);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 0);
    CHECK(ts_all_bytes_are(ts_worker_fx_block(&fx, 0), TS_STEP_BLOCK, TS_WORKER_POISON));
    ect_step_report_destroy(r);
    free(src);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

/* ---- loads ------------------------------------------------------------- */

static void
test_loads_copies_with_correct_shape_dtype_and_bytes(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    for (uint64_t b = 0; b < 16; b++)
        memset(ts_worker_fx_block(&fx, b), (int)(b * 11 + 3), TS_STEP_BLOCK);
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t ra[] = {{3, 3}, {9, 1}}, rb[] = {{0, 1}};
    CHECK_OK(ect_step_meta_add_load(m, "a", 40, ra, 2));
    CHECK_OK(ect_step_meta_add_load(m, "b", 41, rb, 1));
    ts_worker_bind(fx.w, m);
    struct ts_load_target t = {0};
    CHECK_OK(ect_worker_start_load(fx.w, ts_load_target_fn, &t, NULL));
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK_EQ_U64(t.calls, 2);
    /* Called in block order: b (block 0) first. */
    CHECK_STR_EQ(t.keys[0], "b");
    CHECK_STR_EQ(t.keys[1], "a");
    /* (n, hidden) of float32: 4 rows of 16 elements, 4 bytes each. */
    CHECK_EQ_U64(t.tokens[1], 4);
    CHECK_EQ_U64(t.nbytes[1], t.tokens[1] * TS_STEP_HIDDEN * ect_dtype_size(ECT_DTYPE_F32));
    const uint64_t order[] = {3, 4, 5, 9};
    for (size_t k = 0; k < 4; k++)
        CHECK_MSG(memcmp(t.bufs[1] + k * TS_STEP_BLOCK, ts_worker_fx_block(&fx, order[k]),
                         TS_STEP_BLOCK) == 0,
                  "row %zu of 'a' is not block %llu", k, (unsigned long long)order[k]);
    CHECK_EQ_U64(t.tokens[0], 1);
    CHECK(memcmp(t.bufs[0], ts_worker_fx_block(&fx, 0), TS_STEP_BLOCK) == 0);
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 2);
    CHECK_EQ_U64(ts_report_count_loads(r, 40), 1);
    CHECK_EQ_U64(ts_report_count_loads(r, 41), 1);
    CHECK_EQ_U64(ect_step_report_stats(r)->load_bytes, 5 * TS_STEP_BLOCK);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    CHECK_OK(ect_worker_take_report(fx.w, &r));
    CHECK(r == NULL);
    ts_load_target_free(&t);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_loads_noop_when_loads_is_empty(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = ts_meta_new();
    ts_worker_bind(fx.w, m);
    struct ts_load_target t = {0};
    CHECK_OK(ect_worker_start_load(fx.w, ts_load_target_fn, &t, NULL));
    CHECK_EQ_U64(t.calls, 0);
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
    CHECK(ts_worker_land(fx.w) == NULL);
    ect_worker_clear_metadata(fx.w);
    CHECK(ts_worker_land(fx.w) == NULL);
    ect_step_meta_destroy(m);
    ts_worker_fx_close(&fx);
}

static void
test_loads_works_on_all_ranks(void)
{
    static const unsigned ranks[][2] = {{0, 0}, {1, 0}, {0, 1}, {3, 1}};
    for (size_t i = 0; i < 4; i++) {
        struct ts_worker_fx fx;
        ts_worker_fx_open(&fx, ranks[i][0], ranks[i][1], 0);
        memset(ts_worker_fx_block(&fx, 6), 0x42, 2 * TS_STEP_BLOCK);
        ect_step_meta_t *m = ts_meta_new();
        ect_run_t runs[] = {{6, 2}};
        CHECK_OK(ect_step_meta_add_load(m, "h", 7, runs, 1));
        ts_worker_bind(fx.w, m);
        struct ts_load_target t = {0};
        CHECK_OK(ect_worker_start_load(fx.w, ts_load_target_fn, &t, NULL));
        ect_step_report_t *r = ts_worker_land(fx.w);
        CHECK(r != NULL);
        CHECK_EQ_U64(ts_report_count_loads(r, 7), 1);
        CHECK(ts_all_bytes_are(t.bufs[0], 2 * TS_STEP_BLOCK, 0x42));
        ect_step_report_destroy(r);
        ect_worker_clear_metadata(fx.w);
        ts_load_target_free(&t);
        ect_step_meta_destroy(m);
        ts_worker_fx_close(&fx);
    }
}

static void
test_save_then_load_round_trips_bytes(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 0);
    size_t n = 5 * TS_STEP_BLOCK - 9;
    unsigned char *src = ts_payload(n, 11);
    ect_run_t runs[] = {{1, 2}, {8, 3}};
    ect_step_meta_t *m = ts_meta_new();
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 2));
    ts_worker_bind(fx.w, m);
    CHECK_OK(ect_worker_save(fx.w, "h", src, n, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_step_report_destroy(ts_worker_land(fx.w));
    ect_worker_clear_metadata(fx.w);
    ect_step_meta_destroy(m);

    m = ts_meta_new();
    CHECK_OK(ect_step_meta_add_load(m, "h", 1, runs, 2));
    ts_worker_bind(fx.w, m);
    struct ts_load_target t = {0};
    CHECK_OK(ect_worker_start_load(fx.w, ts_load_target_fn, &t, NULL));
    ect_step_report_t *r = ts_worker_land(fx.w);
    CHECK_EQ_U64(ts_report_count_loads(r, 1), 1);
    CHECK_EQ_U64(t.nbytes[0], 5 * TS_STEP_BLOCK);
    CHECK(memcmp(t.bufs[0], src, n) == 0);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    ts_load_target_free(&t);
    ect_step_meta_destroy(m);
    free(src);
    ts_worker_fx_close(&fx);
}

/* ---- pooled buffers ---------------------------------------------------- */

static void
save_step(struct ts_worker_fx *fx, const unsigned char *src, unsigned step)
{
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t ra[] = {{0, 2}, {4, 1}}, rb[] = {{7, 4}};
    CHECK_OK(ect_step_meta_add_save(m, "a", ra, 2));
    CHECK_OK(ect_step_meta_add_save(m, "b", rb, 1));
    ts_worker_bind(fx->w, m);
    CHECK_OK(ect_worker_save(fx->w, "a", src + step % 7, 3 * TS_STEP_BLOCK - 3, NULL, NULL));
    CHECK_OK(ect_worker_save(fx->w, "b", src, 4 * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx->w));
    ect_step_report_t *r = ts_worker_land(fx->w);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 2);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx->w);
    ect_step_meta_destroy(m);
}

static void
test_buffer_pool_is_reused_across_save_steps(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 1);
    unsigned char *src = ts_payload(8 * TS_STEP_BLOCK, 12);
    save_step(&fx, src, 0);
    save_step(&fx, src, 1);
    uint64_t warm = ect__copy_cpu_alloc_count(fx.engine);
    CHECK(warm > 0);
    for (unsigned s = 2; s < 30; s++)
        save_step(&fx, src, s);
    CHECK_EQ_U64(ect__copy_cpu_alloc_count(fx.engine), warm);
    CHECK(memcmp(ts_worker_fx_block(&fx, 7), src, 4 * TS_STEP_BLOCK) == 0);
    free(src);
    ts_worker_fx_close(&fx);
}

static void
load_step(struct ts_worker_fx *fx, uint64_t tid, unsigned char *dst)
{
    ect_step_meta_t *m = ts_meta_new();
    ect_run_t ra[] = {{1, 3}}, rb[] = {{10, 2}, {14, 2}};
    CHECK_OK(ect_step_meta_add_load(m, "a", tid, ra, 1));
    CHECK_OK(ect_step_meta_add_load(m, "b", tid + 1, rb, 2));
    ts_worker_bind(fx->w, m);
    struct ts_load_target t = {0};
    CHECK_OK(ect_worker_start_load(fx->w, ts_load_target_fn, &t, NULL));
    ect_step_report_t *r = ts_worker_land(fx->w);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 2);
    memcpy(dst, t.bufs[0], t.nbytes[0]);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx->w);
    ts_load_target_free(&t);
    ect_step_meta_destroy(m);
}

static void
test_buffer_pool_is_reused_across_load_steps(void)
{
    struct ts_worker_fx fx;
    ts_worker_fx_open(&fx, 0, 0, 1);
    memset(ts_worker_fx_block(&fx, 1), 0x17, 3 * TS_STEP_BLOCK);
    unsigned char dst[3 * TS_STEP_BLOCK];
    load_step(&fx, 0, dst);
    load_step(&fx, 2, dst);
    uint64_t warm = ect__copy_cpu_alloc_count(fx.engine);
    CHECK(warm > 0);
    for (uint64_t s = 2; s < 30; s++)
        load_step(&fx, 2 * s, dst);
    CHECK_EQ_U64(ect__copy_cpu_alloc_count(fx.engine), warm);
    CHECK(ts_all_bytes_are(dst, sizeof(dst), 0x17));
    ts_worker_fx_close(&fx);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_saves_writes_to_assigned_blocks_exact_fit),
    ECT_CASE(test_saves_writes_to_assigned_blocks_partial_last_block),
    ECT_CASE(test_saves_noop_when_mm_hash_not_in_saves),
    ECT_CASE(test_saves_noop_for_non_save_rank),
    ECT_CASE(test_saves_raises_when_allocated_blocks_too_small),
    ECT_CASE(test_saves_batches_multiple_hashes),
    ECT_CASE(test_save_twice_in_a_step_is_refused),
    ECT_CASE(test_saves_never_made_are_reported_failed),
    ECT_CASE(test_saves_queued_but_not_submitted_are_reported_failed),
    ECT_CASE(test_loads_copies_with_correct_shape_dtype_and_bytes),
    ECT_CASE(test_loads_noop_when_loads_is_empty),
    ECT_CASE(test_loads_works_on_all_ranks),
    ECT_CASE(test_save_then_load_round_trips_bytes),
    ECT_CASE(test_buffer_pool_is_reused_across_save_steps),
    ECT_CASE(test_buffer_pool_is_reused_across_load_steps),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
