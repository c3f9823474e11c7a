/*
 * The worker side of the step protocol (SPEC §7; issue 3): counterparts of
 * the seed's test_worker.py scenarios (reference/vllm-ec-behaviour.md §5),
 * named after them, plus completion only after the copy landed, every load
 * and every save of a step reported exactly once whatever the engine does,
 * and metadata that must not bind.
 *
 * Each case runs a real worker over a small real region in /dev/shm
 * (16 blocks of 64 bytes, tests/support/step.h) that the test joins too, so
 * it can poison every block first and then see exactly which bytes a copy
 * wrote.  Cases that must see copies in flight lend the worker a CPU engine
 * and hold its copy threads (ect__copy_cpu_hold).
 */
#include <time.h>

#include "copy/cpu.h"
#include "support/step.h"

#define POISON 0xEE

struct fx {
    struct ts_step_instance in;
    ect_copy_engine_t *engine; /* lent to the worker, or NULL */
    ect_worker_t *w;
    ect_region_t *region; /* the test's own view of the region */
};

static void
poison(ect_region_t *r)
{
    memset(ect_region_block_ptr(r, 0), POISON,
           ect_region_geometry(r)->num_blocks * ect_region_geometry(r)->block_size_bytes);
}

/* A worker of rank (tp, pcp); lend_engine: give it a CPU engine the test
 * can hold. */
static void
fx_open(struct fx *fx, unsigned tp, unsigned pcp, int lend_engine)
{
    ts_step_instance_init(&fx->in, ECT_ROLE_BOTH, 16, true);
    fx->engine = NULL;
    if (lend_engine) {
        ect_copy_cpu_params_t cp = {.threads = 2};
        CHECK_OK(ect_copy_engine_create_cpu(&cp, &fx->engine));
    }
    fx->w = ts_worker(&fx->in, tp, pcp, fx->engine);
    fx->region = ts_region_join(&fx->in);
    poison(fx->region);
}

static void
fx_close(struct fx *fx)
{
    ect_worker_destroy(fx->w);
    ect_region_close(fx->region);
    ect_copy_engine_destroy(fx->engine);
    ts_check_gone(fx->in.path);
}

static unsigned char *
block(struct fx *fx, uint64_t i)
{
    return ect_region_block_ptr(fx->region, i);
}

static int
all_bytes(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

static unsigned char *
payload(size_t n, unsigned seed)
{
    unsigned char *p = malloc(n ? n : 1);
    CHECK(p != NULL);
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 7 + seed * 13 + 1);
    return p;
}

static void
bind(ect_worker_t *w, const ect_step_meta_t *m)
{
    size_t len;
    void *bytes = ts_encode_meta(m, &len);
    CHECK_OK(ect_worker_bind_metadata(w, bytes, len));
    free(bytes);
}

static ect_step_meta_t *
meta_new(void)
{
    ect_step_meta_t *m;
    CHECK_OK(ect_step_meta_create(&m));
    return m;
}

/* Wait for every copy, then take the report (NULL if nothing finished). */
static ect_step_report_t *
land(ect_worker_t *w)
{
    CHECK_OK(ect_worker_wait(w));
    ect_step_report_t *r = NULL;
    CHECK_OK(ect_worker_take_report(w, &r));
    return r;
}

static size_t
count_saves(const ect_step_report_t *r, const char *key)
{
    size_t n = 0;
    for (size_t i = 0; i < ect_step_report_n_saves(r); i++)
        n += strcmp(ect_step_report_save(r, i), key) == 0;
    return n;
}

static size_t
count_failed(const ect_step_report_t *r, const char *key)
{
    size_t n = 0;
    for (size_t i = 0; i < ect_step_report_n_failed_saves(r); i++)
        n += strcmp(ect_step_report_failed_save(r, i), key) == 0;
    return n;
}

static size_t
count_loads(const ect_step_report_t *r, uint64_t tid)
{
    size_t n = 0;
    for (size_t i = 0; i < ect_step_report_n_loads(r); i++)
        n += ect_step_report_load(r, i) == tid;
    return n;
}

/* ---- a load target that records its calls ----------------------------- */

#define MAX_LOADS 8

struct target {
    unsigned calls;
    unsigned fail_at; /* 1-based call that fails; 0 = none */
    char keys[MAX_LOADS][32];
    uint64_t tokens[MAX_LOADS];
    size_t nbytes[MAX_LOADS];
    unsigned char *bufs[MAX_LOADS];
};

static ect_status_t
target_fn(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    struct target *t = user;
    unsigned i = t->calls++;
    if (t->fail_at == i + 1)
        return ECT_ERR_NO_MEMORY;
    CHECK(i < MAX_LOADS);
    snprintf(t->keys[i], sizeof(t->keys[i]), "%s", key);
    t->tokens[i] = n_tokens;
    t->nbytes[i] = nbytes;
    t->bufs[i] = malloc(nbytes ? nbytes : 1);
    CHECK(t->bufs[i] != NULL);
    memset(t->bufs[i], 0, nbytes);
    *dst_p = t->bufs[i];
    return ECT_OK;
}

static void
target_free(struct target *t)
{
    for (unsigned i = 0; i < MAX_LOADS; i++)
        free(t->bufs[i]);
}

/* ---- saves ------------------------------------------------------------- */

/* The seed's ids 7, 2, 5, 0: our step metadata carries an entry's blocks as
 * ascending runs (the cache hands them out ascending, and the worker
 * coalesces on that), so the entry's blocks in order are 0, 2, 5, 7. */
static void
save_writes_to_assigned_blocks(size_t nbytes)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
    ect_run_t seed_order[] = {{7, 1}, {2, 1}, {5, 1}, {0, 1}};
    CHECK_STATUS(ect_step_meta_add_save(m, "h", seed_order, 4), ECT_ERR_INVALID_ARG);
    ect_run_t runs[] = {{0, 1}, {2, 1}, {5, 1}, {7, 1}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 4));
    bind(fx.w, m);
    unsigned char *src = payload(nbytes, 1);
    int queued = 0;
    CHECK_OK(ect_worker_save(fx.w, "h", src, nbytes, NULL, &queued));
    CHECK(queued);
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_step_report_t *r = land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(count_saves(r, "h"), 1);
    CHECK_EQ_U64(ect_step_report_n_failed_saves(r), 0);
    CHECK_EQ_U64(ect_step_report_stats(r)->save_bytes, nbytes);
    const uint64_t ids[] = {0, 2, 5, 7};
    for (size_t k = 0; k < 4; k++) {
        size_t off = k * TS_STEP_BLOCK;
        size_t len = nbytes - off < TS_STEP_BLOCK ? nbytes - off : TS_STEP_BLOCK;
        CHECK_MSG(memcmp(block(&fx, ids[k]), src + off, len) == 0, "block %llu has wrong bytes",
                  (unsigned long long)ids[k]);
        /* The tail sentinel: the rest of a partial last block is untouched. */
        CHECK_MSG(all_bytes(block(&fx, ids[k]) + len, TS_STEP_BLOCK - len, POISON),
                  "block %llu was written past the payload", (unsigned long long)ids[k]);
    }
    for (uint64_t b = 0; b < 16; b++)
        if (b != 0 && b != 2 && b != 5 && b != 7)
            CHECK_MSG(all_bytes(block(&fx, b), TS_STEP_BLOCK, POISON),
                      "unassigned block %llu written", (unsigned long long)b);
    ect_worker_clear_metadata(fx.w);
    ect_step_report_destroy(r);
    CHECK_OK(ect_worker_take_report(fx.w, &r));
    CHECK(r == NULL); /* nothing is reported twice */
    free(src);
    ect_step_meta_destroy(m);
    fx_close(&fx);
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
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
    ect_run_t runs[] = {{3, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "wanted", runs, 1));
    bind(fx.w, m);
    unsigned char *src = payload(2 * TS_STEP_BLOCK, 2);
    int queued = 7;
    CHECK_OK(ect_worker_save(fx.w, "other", src, 2 * TS_STEP_BLOCK, NULL, &queued));
    CHECK_EQ_INT(queued, 0);
    CHECK_OK(ect_worker_save(fx.w, "other", src, 2 * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
    CHECK(land(fx.w) == NULL);
    CHECK(all_bytes(block(&fx, 0), 16 * TS_STEP_BLOCK, POISON));
    free(src);
    ect_step_meta_destroy(m);
    ect_worker_clear_metadata(fx.w);
    fx_close(&fx);
}

static void
test_saves_noop_for_non_save_rank(void)
{
    static const unsigned ranks[][2] = {{1, 0}, {0, 1}, {1, 1}}; /* tp1-pcp0, tp0-pcp1, tp1-pcp1 */
    for (size_t i = 0; i < 3; i++) {
        struct fx fx;
        fx_open(&fx, ranks[i][0], ranks[i][1], 0);
        CHECK(!ect_worker_is_save_rank(fx.w));
        ect_step_meta_t *m = meta_new();
        ect_run_t runs[] = {{0, 2}};
        CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
        bind(fx.w, m);
        unsigned char *src = payload(2 * TS_STEP_BLOCK, 3);
        int queued = 7;
        CHECK_OK(ect_worker_save(fx.w, "h", src, 2 * TS_STEP_BLOCK, NULL, &queued));
        CHECK_EQ_INT(queued, 0);
        CHECK_OK(ect_worker_get_finished(fx.w));
        CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
        ect_worker_clear_metadata(fx.w);
        /* Only the save rank reports saves, done or failed. */
        CHECK(land(fx.w) == NULL);
        CHECK(all_bytes(block(&fx, 0), 16 * TS_STEP_BLOCK, POISON));
        free(src);
        ect_step_meta_destroy(m);
        fx_close(&fx);
    }
}

static void
test_saves_raises_when_allocated_blocks_too_small(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
    ect_run_t runs[] = {{4, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    bind(fx.w, m);
    unsigned char *src = payload(2 * TS_STEP_BLOCK + 1, 4);
    int queued = 7;
    CHECK_STATUS(ect_worker_save(fx.w, "h", src, 2 * TS_STEP_BLOCK + 1, NULL, &queued),
                 ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "exceeds");
    CHECK_EQ_INT(queued, 0);
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
    CHECK(all_bytes(block(&fx, 0), 16 * TS_STEP_BLOCK, POISON)); /* no truncated copy */
    /* The entry never got its bytes: the scheduler must hear it failed. */
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(count_failed(r, "h"), 1);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 0);
    ect_step_report_destroy(r);
    free(src);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_saves_batches_multiple_hashes(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 1);
    ect_step_meta_t *m = meta_new();
    ect_run_t ra[] = {{0, 2}}, rb[] = {{2, 3}}, rc[] = {{9, 1}, {12, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "a", ra, 1));
    CHECK_OK(ect_step_meta_add_save(m, "b", rb, 1));
    CHECK_OK(ect_step_meta_add_save(m, "c", rc, 2));
    bind(fx.w, m);
    size_t na = 2 * TS_STEP_BLOCK, nb = 3 * TS_STEP_BLOCK - 5, nc = 3 * TS_STEP_BLOCK;
    unsigned char *a = payload(na, 5), *b = payload(nb, 6), *c = payload(nc, 7);
    CHECK_OK(ect_worker_save(fx.w, "a", a, na, NULL, NULL));
    CHECK_OK(ect_worker_save(fx.w, "b", b, nb, NULL, NULL));
    CHECK_OK(ect_worker_save(fx.w, "c", c, nc, NULL, NULL));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0); /* nothing before get_finished */
    CHECK(all_bytes(block(&fx, 0), 16 * TS_STEP_BLOCK, POISON));
    CHECK_OK(ect__copy_cpu_hold(fx.engine, true));
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 1); /* one batch for the three */
    CHECK_OK(ect__copy_cpu_hold(fx.engine, false));
    ect_step_report_t *r = land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 3);
    CHECK_EQ_U64(count_saves(r, "a") + count_saves(r, "b") + count_saves(r, "c"), 3);
    CHECK_EQ_U64(ect_step_report_stats(r)->save_bytes, na + nb + nc);
    CHECK_EQ_U64(ect_step_report_stats(r)->save_batches, 1);
    CHECK(memcmp(block(&fx, 0), a, na) == 0);
    CHECK(memcmp(block(&fx, 2), b, nb) == 0);
    CHECK(all_bytes(block(&fx, 4) + TS_STEP_BLOCK - 5, 5, POISON));
    CHECK(memcmp(block(&fx, 9), c, TS_STEP_BLOCK) == 0);
    CHECK(memcmp(block(&fx, 12), c + TS_STEP_BLOCK, 2 * TS_STEP_BLOCK) == 0);
    CHECK(all_bytes(block(&fx, 10), 2 * TS_STEP_BLOCK, POISON));
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    free(a);
    free(b);
    free(c);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_save_twice_in_a_step_is_refused(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
    ect_run_t runs[] = {{0, 1}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    bind(fx.w, m);
    unsigned char *src = payload(TS_STEP_BLOCK, 8);
    CHECK_OK(ect_worker_save(fx.w, "h", src, TS_STEP_BLOCK, NULL, NULL));
    int queued = 7;
    CHECK_STATUS(ect_worker_save(fx.w, "h", src, TS_STEP_BLOCK, NULL, &queued), ECT_ERR_EXISTS);
    CHECK_EQ_INT(queued, 0);
    CHECK_STATUS(ect_worker_save(fx.w, NULL, src, TS_STEP_BLOCK, NULL, NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_worker_save(fx.w, "h", NULL, TS_STEP_BLOCK, NULL, NULL), ECT_ERR_INVALID_ARG);
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_step_report_t *r = land(fx.w);
    CHECK_EQ_U64(count_saves(r, "h"), 1);
    CHECK_EQ_U64(ect_step_report_n_failed_saves(r), 0);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    CHECK_OK(ect_worker_take_report(fx.w, &r));
    CHECK(r == NULL);
    free(src);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

/* A save the step names but the engine never makes (the item was not
 * encoded after all, or its save was refused) is reported as failed when
 * the step ends, so the scheduler frees its blocks. */
static void
test_saves_never_made_are_reported_failed(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
    ect_run_t ra[] = {{0, 1}}, rb[] = {{1, 1}};
    CHECK_OK(ect_step_meta_add_save(m, "made", ra, 1));
    CHECK_OK(ect_step_meta_add_save(m, "never", rb, 1));
    bind(fx.w, m);
    unsigned char *src = payload(TS_STEP_BLOCK, 9);
    CHECK_OK(ect_worker_save(fx.w, "made", src, TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(count_saves(r, "made"), 1);
    CHECK_EQ_U64(count_failed(r, "made"), 0);
    CHECK_EQ_U64(count_failed(r, "never"), 1);
    CHECK_EQ_U64(count_saves(r, "never"), 0);
    CHECK(all_bytes(block(&fx, 1), TS_STEP_BLOCK, POISON));
    ect_step_report_destroy(r);
    free(src);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_saves_queued_but_not_submitted_are_reported_failed(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
    ect_run_t runs[] = {{0, 1}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    bind(fx.w, m);
    unsigned char *src = payload(TS_STEP_BLOCK, 10);
    CHECK_OK(ect_worker_save(fx.w, "h", src, TS_STEP_BLOCK, NULL, NULL));
    ect_worker_clear_metadata(fx.w); /* get_finished never called */
    ect_step_report_t *r = land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(count_failed(r, "h"), 1);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 0);
    CHECK(all_bytes(block(&fx, 0), TS_STEP_BLOCK, POISON));
    ect_step_report_destroy(r);
    free(src);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

/* ---- loads ------------------------------------------------------------- */

static void
test_loads_copies_with_correct_shape_dtype_and_bytes(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    for (uint64_t b = 0; b < 16; b++)
        memset(block(&fx, b), (int)(b * 11 + 3), TS_STEP_BLOCK);
    ect_step_meta_t *m = meta_new();
    ect_run_t ra[] = {{3, 3}, {9, 1}}, rb[] = {{0, 1}};
    CHECK_OK(ect_step_meta_add_load(m, "a", 40, ra, 2));
    CHECK_OK(ect_step_meta_add_load(m, "b", 41, rb, 1));
    bind(fx.w, m);
    struct target t = {0};
    CHECK_OK(ect_worker_start_load(fx.w, target_fn, &t, NULL));
    ect_step_report_t *r = land(fx.w);
    CHECK_EQ_U64(t.calls, 2);
    /* Called in block order: b (block 0) first. */
    CHECK_STR_EQ(t.keys[0], "b");
    CHECK_STR_EQ(t.keys[1], "a");
    /* (n, hidden) of float32: 4 rows of 16 elements, 4 bytes each. */
    CHECK_EQ_U64(t.tokens[1], 4);
    CHECK_EQ_U64(t.nbytes[1], t.tokens[1] * TS_STEP_HIDDEN * ect_dtype_size(ECT_DTYPE_F32));
    const uint64_t order[] = {3, 4, 5, 9};
    for (size_t k = 0; k < 4; k++)
        CHECK_MSG(memcmp(t.bufs[1] + k * TS_STEP_BLOCK, block(&fx, order[k]), TS_STEP_BLOCK) == 0,
                  "row %zu of 'a' is not block %llu", k, (unsigned long long)order[k]);
    CHECK_EQ_U64(t.tokens[0], 1);
    CHECK(memcmp(t.bufs[0], block(&fx, 0), TS_STEP_BLOCK) == 0);
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 2);
    CHECK_EQ_U64(count_loads(r, 40), 1);
    CHECK_EQ_U64(count_loads(r, 41), 1);
    CHECK_EQ_U64(ect_step_report_stats(r)->load_bytes, 5 * TS_STEP_BLOCK);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    CHECK_OK(ect_worker_take_report(fx.w, &r));
    CHECK(r == NULL);
    target_free(&t);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_loads_noop_when_loads_is_empty(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
    bind(fx.w, m);
    struct target t = {0};
    CHECK_OK(ect_worker_start_load(fx.w, target_fn, &t, NULL));
    CHECK_EQ_U64(t.calls, 0);
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
    CHECK(land(fx.w) == NULL);
    ect_worker_clear_metadata(fx.w);
    CHECK(land(fx.w) == NULL);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_loads_works_on_all_ranks(void)
{
    static const unsigned ranks[][2] = {{0, 0}, {1, 0}, {0, 1}, {3, 1}};
    for (size_t i = 0; i < 4; i++) {
        struct fx fx;
        fx_open(&fx, ranks[i][0], ranks[i][1], 0);
        memset(block(&fx, 6), 0x42, 2 * TS_STEP_BLOCK);
        ect_step_meta_t *m = meta_new();
        ect_run_t runs[] = {{6, 2}};
        CHECK_OK(ect_step_meta_add_load(m, "h", 7, runs, 1));
        bind(fx.w, m);
        struct target t = {0};
        CHECK_OK(ect_worker_start_load(fx.w, target_fn, &t, NULL));
        ect_step_report_t *r = land(fx.w);
        CHECK(r != NULL);
        CHECK_EQ_U64(count_loads(r, 7), 1);
        CHECK(all_bytes(t.bufs[0], 2 * TS_STEP_BLOCK, 0x42));
        ect_step_report_destroy(r);
        ect_worker_clear_metadata(fx.w);
        target_free(&t);
        ect_step_meta_destroy(m);
        fx_close(&fx);
    }
}

static void
test_save_then_load_round_trips_bytes(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    size_t n = 5 * TS_STEP_BLOCK - 9;
    unsigned char *src = payload(n, 11);
    ect_run_t runs[] = {{1, 2}, {8, 3}};
    ect_step_meta_t *m = meta_new();
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 2));
    bind(fx.w, m);
    CHECK_OK(ect_worker_save(fx.w, "h", src, n, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_step_report_destroy(land(fx.w));
    ect_worker_clear_metadata(fx.w);
    ect_step_meta_destroy(m);

    m = meta_new();
    CHECK_OK(ect_step_meta_add_load(m, "h", 1, runs, 2));
    bind(fx.w, m);
    struct target t = {0};
    CHECK_OK(ect_worker_start_load(fx.w, target_fn, &t, NULL));
    ect_step_report_t *r = land(fx.w);
    CHECK_EQ_U64(count_loads(r, 1), 1);
    CHECK_EQ_U64(t.nbytes[0], 5 * TS_STEP_BLOCK);
    CHECK(memcmp(t.bufs[0], src, n) == 0);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    target_free(&t);
    ect_step_meta_destroy(m);
    free(src);
    fx_close(&fx);
}

/* ---- pooled buffers ---------------------------------------------------- */

static void
save_step(struct fx *fx, const unsigned char *src, unsigned step)
{
    ect_step_meta_t *m = meta_new();
    ect_run_t ra[] = {{0, 2}, {4, 1}}, rb[] = {{7, 4}};
    CHECK_OK(ect_step_meta_add_save(m, "a", ra, 2));
    CHECK_OK(ect_step_meta_add_save(m, "b", rb, 1));
    bind(fx->w, m);
    CHECK_OK(ect_worker_save(fx->w, "a", src + step % 7, 3 * TS_STEP_BLOCK - 3, NULL, NULL));
    CHECK_OK(ect_worker_save(fx->w, "b", src, 4 * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx->w));
    ect_step_report_t *r = land(fx->w);
    CHECK_EQ_U64(ect_step_report_n_saves(r), 2);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx->w);
    ect_step_meta_destroy(m);
}

static void
test_buffer_pool_is_reused_across_save_steps(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 1);
    unsigned char *src = payload(8 * TS_STEP_BLOCK, 12);
    save_step(&fx, src, 0);
    save_step(&fx, src, 1);
    uint64_t warm = ect__copy_cpu_alloc_count(fx.engine);
    CHECK(warm > 0);
    for (unsigned s = 2; s < 30; s++)
        save_step(&fx, src, s);
    CHECK_EQ_U64(ect__copy_cpu_alloc_count(fx.engine), warm);
    CHECK(memcmp(block(&fx, 7), src, 4 * TS_STEP_BLOCK) == 0);
    free(src);
    fx_close(&fx);
}

static void
load_step(struct fx *fx, uint64_t tid, unsigned char *dst)
{
    ect_step_meta_t *m = meta_new();
    ect_run_t ra[] = {{1, 3}}, rb[] = {{10, 2}, {14, 2}};
    CHECK_OK(ect_step_meta_add_load(m, "a", tid, ra, 1));
    CHECK_OK(ect_step_meta_add_load(m, "b", tid + 1, rb, 2));
    bind(fx->w, m);
    struct target t = {0};
    CHECK_OK(ect_worker_start_load(fx->w, target_fn, &t, NULL));
    ect_step_report_t *r = land(fx->w);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 2);
    memcpy(dst, t.bufs[0], t.nbytes[0]);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx->w);
    target_free(&t);
    ect_step_meta_destroy(m);
}

static void
test_buffer_pool_is_reused_across_load_steps(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 1);
    memset(block(&fx, 1), 0x17, 3 * TS_STEP_BLOCK);
    unsigned char dst[3 * TS_STEP_BLOCK];
    load_step(&fx, 0, dst);
    load_step(&fx, 2, dst);
    uint64_t warm = ect__copy_cpu_alloc_count(fx.engine);
    CHECK(warm > 0);
    for (uint64_t s = 2; s < 30; s++)
        load_step(&fx, 2 * s, dst);
    CHECK_EQ_U64(ect__copy_cpu_alloc_count(fx.engine), warm);
    CHECK(all_bytes(dst, sizeof(dst), 0x17));
    fx_close(&fx);
}

/* ---- completion and exactly-once reporting ----------------------------- */

static void
test_completion_reported_only_after_the_copy_landed(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 1);
    memset(block(&fx, 8), 0x33, 2 * TS_STEP_BLOCK);
    ect_step_meta_t *m = meta_new();
    ect_run_t rs[] = {{0, 2}}, rl[] = {{8, 2}};
    CHECK_OK(ect_step_meta_add_save(m, "s", rs, 1));
    CHECK_OK(ect_step_meta_add_load(m, "l", 77, rl, 1));
    bind(fx.w, m);
    CHECK_OK(ect__copy_cpu_hold(fx.engine, true));
    struct target t = {0};
    CHECK_OK(ect_worker_start_load(fx.w, target_fn, &t, NULL));
    unsigned char *src = payload(2 * TS_STEP_BLOCK, 13);
    CHECK_OK(ect_worker_save(fx.w, "s", src, 2 * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 2);
    /* Held in flight: nothing landed, so nothing may be reported. */
    for (int i = 0; i < 3; i++) {
        ect_step_report_t *r = (ect_step_report_t *)&fx;
        CHECK_OK(ect_worker_take_report(fx.w, &r));
        CHECK(r == NULL);
    }
    CHECK(all_bytes(block(&fx, 0), 2 * TS_STEP_BLOCK, POISON));
    CHECK(all_bytes(t.bufs[0], 2 * TS_STEP_BLOCK, 0));
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
        if (r != NULL && count_saves(r, "s"))
            CHECK(memcmp(block(&fx, 0), src, 2 * TS_STEP_BLOCK) == 0);
        if (r != NULL && count_loads(r, 77))
            CHECK(all_bytes(t.bufs[0], 2 * TS_STEP_BLOCK, 0x33));
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    }
    CHECK_EQ_U64(count_saves(r, "s"), 1);
    CHECK_EQ_U64(count_loads(r, 77), 1);
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 0);
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(fx.w);
    target_free(&t);
    free(src);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_every_load_reported_once_when_the_target_fails(void)
{
    struct fx fx;
    fx_open(&fx, 1, 0, 0);
    ect_step_meta_t *m = meta_new();
    ect_run_t r0[] = {{0, 1}}, r1[] = {{2, 1}}, r2[] = {{4, 1}};
    CHECK_OK(ect_step_meta_add_load(m, "a", 10, r0, 1));
    CHECK_OK(ect_step_meta_add_load(m, "b", 11, r1, 1));
    CHECK_OK(ect_step_meta_add_load(m, "c", 12, r2, 1));
    bind(fx.w, m);
    struct target t = {.fail_at = 2};
    CHECK_STATUS(ect_worker_start_load(fx.w, target_fn, &t, NULL), ECT_ERR_NO_MEMORY);
    CHECK_EQ_U64(t.calls, 2); /* stopped at the failure */
    CHECK_STATUS(ect_worker_start_load(fx.w, target_fn, &t, NULL), ECT_ERR_STATE);
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 3);
    for (uint64_t tid = 10; tid <= 12; tid++)
        CHECK_EQ_U64(count_loads(r, tid), 1);
    ect_step_report_destroy(r);
    CHECK(land(fx.w) == NULL);
    target_free(&t);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_every_load_reported_once_when_cleared_without_start_load(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
    ect_run_t r0[] = {{0, 1}}, r1[] = {{3, 2}};
    CHECK_OK(ect_step_meta_add_load(m, "a", 20, r0, 1));
    CHECK_OK(ect_step_meta_add_load(m, "b", 21, r1, 1));
    bind(fx.w, m);
    CHECK(land(fx.w) == NULL); /* not before the step ends */
    ect_worker_clear_metadata(fx.w);
    ect_worker_clear_metadata(fx.w); /* a second clear adds nothing */
    ect_step_report_t *r = land(fx.w);
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 2);
    CHECK_EQ_U64(count_loads(r, 20), 1);
    CHECK_EQ_U64(count_loads(r, 21), 1);
    ect_step_report_destroy(r);
    CHECK(land(fx.w) == NULL);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

/* ---- metadata that must not bind ---------------------------------------- */

static void
check_nothing_bound(struct fx *fx)
{
    CHECK(ect_worker_metadata(fx->w) == NULL);
    struct target t = {0};
    CHECK_STATUS(ect_worker_start_load(fx->w, target_fn, &t, NULL), ECT_ERR_STATE);
    CHECK_EQ_U64(t.calls, 0);
}

static void
test_garbage_metadata_binds_nothing(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_step_meta_t *m = meta_new();
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
    ect_step_report_t *r = land(fx.w);
    CHECK_EQ_U64(ect_step_report_n_loads(r), 1); /* only the bound step's load */
    ect_step_report_destroy(r);
    CHECK(all_bytes(block(&fx, 0), 16 * TS_STEP_BLOCK, POISON));
    free(bad);
    free(good);
    ect_step_meta_destroy(m);
    fx_close(&fx);
}

static void
test_blocks_outside_the_region_bind_nothing(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    static const ect_run_t outside[][1] = {{{15, 2}}, {{16, 1}}, {{UINT64_MAX - 1, 1}}};
    for (size_t i = 0; i < 3; i++) {
        for (int as_load = 0; as_load <= 1; as_load++) {
            ect_step_meta_t *m = meta_new();
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
    CHECK(land(fx.w) == NULL);
    CHECK(all_bytes(block(&fx, 0), 16 * TS_STEP_BLOCK, POISON));
    fx_close(&fx);
}

/* ---- lifecycle ------------------------------------------------------------ */

static void
test_destroy_waits_for_copies_in_flight(void)
{
    struct fx fx;
    fx_open(&fx, 0, 0, 1);
    ect_step_meta_t *m = meta_new();
    ect_run_t runs[] = {{0, 16}};
    CHECK_OK(ect_step_meta_add_save(m, "h", runs, 1));
    bind(fx.w, m);
    unsigned char *src = payload(16 * TS_STEP_BLOCK, 14);
    CHECK_OK(ect_worker_save(fx.w, "h", src, 16 * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect__copy_cpu_hold(fx.engine, true));
    CHECK_OK(ect_worker_get_finished(fx.w));
    CHECK_EQ_U64(ect_worker_in_flight(fx.w), 1);
    /* Destroy with the batch still held: it lands before the worker goes. */
    ect_worker_destroy(fx.w);
    fx.w = NULL;
    CHECK(memcmp(block(&fx, 0), src, 16 * TS_STEP_BLOCK) == 0);
    CHECK_OK(ect__copy_cpu_hold(fx.engine, false));
    free(src);
    ect_step_meta_destroy(m);
    fx_close(&fx);
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
    struct fx fx;
    fx_open(&fx, 0, 0, 0);
    ect_scheduler_t *s = ts_scheduler(&fx.in, 1);
    ts_alloc(s, "h", 2);
    ect_step_meta_t *m = ts_step(s);
    bind(fx.w, m);
    unsigned char *src = payload(3 * TS_STEP_BLOCK, 15);
    CHECK_STATUS(ect_worker_save(fx.w, "h", src, 3 * TS_STEP_BLOCK, NULL, NULL), ECT_ERR_OVERFLOW);
    CHECK_OK(ect_worker_get_finished(fx.w));
    ect_worker_clear_metadata(fx.w);
    ect_step_report_t *r = land(fx.w);
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
    fx_close(&fx);
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
