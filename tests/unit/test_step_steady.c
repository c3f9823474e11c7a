/*
 * Steps in steady state allocate nothing (issue 11: the fixed cost of a
 * step).  A scheduler and a worker (its own CPU engine) over a real region
 * run save and load steps the way an engine in C drives them: the step's
 * metadata and the worker's report go through encoded bytes in buffers the
 * caller keeps, and both values are handed back for reuse
 * (ect_scheduler_recycle_connector_meta, ect_worker_recycle_report).  After
 * a warm-up the library's allocation counter (common/alloc.h: every heap
 * allocation of src/ goes through it) must not move over hundreds of steps
 * with evictions, several entry sizes, keys of several lengths, hits,
 * misses and steps of several items; and every save and load still lands
 * with the right bytes, so nothing was "saved" by skipping work.
 *
 * Needs the test hooks (ECT_TEST_HOOKS), else skips.
 */
#include "common/alloc.h"
#include "ectier_build_config.h"
#include "support/step.h"

#define BLOCKS   96u
#define MAX_SIZE 12u /* blocks of the largest entry */

struct steady {
    struct ts_step_instance in;
    ect_scheduler_t *s;
    ect_worker_t *w;
    unsigned char *buf; /* encoded metadata / report, kept across steps */
    size_t cap;
    unsigned char src[4][MAX_SIZE * TS_STEP_BLOCK];
    unsigned char dst[4][MAX_SIZE * TS_STEP_BLOCK];
    unsigned n_dst;
};

static void
open_steady(struct steady *st)
{
    memset(st, 0, sizeof(*st));
    ts_step_instance_init(&st->in, ECT_ROLE_BOTH, BLOCKS, true);
    st->s = ts_scheduler(&st->in, 1);
    st->w = ts_worker(&st->in, 0, 0, NULL);
    st->cap = 1 << 16; /* never grows: the test's own allocations stay out of the count */
    st->buf = malloc(st->cap);
    CHECK(st->buf != NULL);
}

static void
close_steady(struct steady *st)
{
    ect_worker_destroy(st->w);
    ect_scheduler_destroy(st->s);
    free(st->buf);
    ts_check_gone(st->in.path);
}

static ect_status_t
target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    struct steady *st = user;
    (void)key;
    (void)n_tokens;
    CHECK(nbytes <= sizeof(st->dst[0]) && st->n_dst < 4);
    *dst_p = st->dst[st->n_dst++];
    return ECT_OK;
}

/* The key of entry i: lengths 4..40 bytes, so key storage must be reused
 * across sizes. */
static void
key_of(unsigned i, char out[64])
{
    snprintf(out, 64, "e%u-%.*s", i, (int)(i % 37), "abcdefghijklmnopqrstuvwxyzabcdefghijk");
}

static unsigned
size_of(unsigned i)
{
    return 1 + (i * 7) % MAX_SIZE; /* 1..12 blocks */
}

static void
fill(unsigned char *p, unsigned i)
{
    for (size_t b = 0; b < MAX_SIZE * TS_STEP_BLOCK; b++)
        p[b] = (unsigned char)(i * 31 + b);
}

static int
holds(const unsigned char *p, unsigned i, size_t n)
{
    for (size_t b = 0; b < n; b++)
        if (p[b] != (unsigned char)(i * 31 + b))
            return 0;
    return 1;
}

/* Build, encode and bind the step; the metadata goes back to the
 * scheduler at once. */
static void
ship_meta(struct steady *st)
{
    ect_step_meta_t *m = ts_step(st->s);
    size_t len;
    CHECK_OK(ect_step_meta_encode(m, st->buf, st->cap, &len));
    ect_scheduler_recycle_connector_meta(st->s, m);
    CHECK_OK(ect_worker_bind_metadata(st->w, st->buf, len));
}

/* Wait, take the report, check its counts, apply it; the report goes back
 * to the worker. */
static void
ship_report(struct steady *st, size_t saves, size_t loads)
{
    ect_step_report_t *r = NULL;
    size_t len;
    CHECK_OK(ect_worker_wait(st->w));
    ect_worker_clear_metadata(st->w);
    CHECK_OK(ect_worker_take_report(st->w, &r));
    CHECK(r != NULL);
    CHECK_EQ_U64(ect_step_report_n_saves(r), saves);
    CHECK_EQ_U64(ect_step_report_n_loads(r), loads);
    CHECK_EQ_U64(ect_step_report_n_failed_saves(r), 0);
    CHECK_OK(ect_step_report_encode(r, st->buf, st->cap, &len));
    ect_worker_recycle_report(st->w, r);
    CHECK_OK(ect_scheduler_update_connector_output(st->s, st->buf, len));
}

/* Entries first..first+n-1 of one step: keys, sizes in blocks. */
struct items {
    char keys[4][64];
    const char *kp[4];
    unsigned sizes[4];
    size_t n;
};

static void
items_of(struct items *it, unsigned first, size_t n)
{
    it->n = n;
    for (size_t i = 0; i < n; i++) {
        key_of(first + (unsigned)i, it->keys[i]);
        it->kp[i] = it->keys[i];
        it->sizes[i] = size_of(first + (unsigned)i);
    }
}

/* One request naming the items, allocated one after the other, then the
 * step built and bound. */
static void
schedule(struct steady *st, const struct items *it)
{
    ect_mm_feature_t f[4];
    for (size_t i = 0; i < it->n; i++)
        f[i] = (ect_mm_feature_t){
            .identifier = it->kp[i], .num_tokens = it->sizes[i], .has_local_input = 1};
    ect_request_t r = {.request_id = "steady", .features = f, .n_features = it->n};
    for (size_t i = 0; i < it->n; i++)
        CHECK_OK(ect_scheduler_update_state_after_alloc(st->s, &r, i));
    ship_meta(st);
}

/* Save entries first..first+n-1 in one step. */
static void
save_step(struct steady *st, unsigned first, size_t n)
{
    struct items it;
    items_of(&it, first, n);
    for (size_t i = 0; i < n; i++)
        CHECK(!ect_scheduler_has_cache_item(st->s, it.kp[i]));
    schedule(st, &it);
    for (size_t i = 0; i < n; i++) {
        fill(st->src[i], first + (unsigned)i);
        int queued = 0;
        CHECK_OK(ect_worker_save(st->w, it.kp[i], st->src[i], it.sizes[i] * TS_STEP_BLOCK, NULL,
                                 &queued));
        CHECK(queued);
    }
    CHECK_OK(ect_worker_get_finished(st->w));
    ship_report(st, n, 0);
    for (size_t i = 0; i < n; i++)
        CHECK(ts_cached(st->s, it.kp[i]));
}

/* Load entries first..first+n-1 (saved before, still cached) in one step
 * and check their bytes. */
static void
load_step(struct steady *st, unsigned first, size_t n)
{
    struct items it;
    items_of(&it, first, n);
    for (size_t i = 0; i < n; i++)
        CHECK_MSG(ect_scheduler_has_cache_item(st->s, it.kp[i]), "'%s' not cached", it.kp[i]);
    schedule(st, &it);
    memset(st->dst, 0, sizeof(st->dst));
    st->n_dst = 0;
    CHECK_OK(ect_worker_start_load(st->w, target, st, NULL));
    ship_report(st, 0, n);
    /* The worker loads in block order: find each entry's bytes by content. */
    for (size_t i = 0; i < n; i++) {
        int found = 0;
        for (unsigned d = 0; d < st->n_dst && !found; d++)
            found = holds(st->dst[d], first + (unsigned)i, it.sizes[i] * TS_STEP_BLOCK);
        CHECK_MSG(found, "'%s' did not load its bytes", it.kp[i]);
    }
}

/* One round: saves of 1, 2 and 3 entries (older ones are evicted: 96
 * blocks hold ~15 entries), loads of the newest ones, and a miss. */
static void
round_of(struct steady *st, unsigned *next)
{
    save_step(st, *next, 1);
    save_step(st, *next + 1, 2);
    save_step(st, *next + 3, 3);
    load_step(st, *next + 5, 1);
    load_step(st, *next + 1, 3);
    CHECK(!ect_scheduler_has_cache_item(st->s, "never-saved"));
    *next += 6;
}

static void
test_steady_steps_allocate_nothing(void)
{
#if !ECT_TEST_HOOKS
    SKIP("built without ECT_TEST_HOOKS: no allocation counter");
#else
    struct steady st;
    open_steady(&st);
    unsigned next = 0;
    /* Warm-up: every size, key length and item count seen, the region
     * full and evicting, every array at its peak. */
    for (int i = 0; i < 60; i++)
        round_of(&st, &next);
    ect__alloc_reset();
    for (int i = 0; i < 100; i++)
        round_of(&st, &next);
    uint64_t n = ect__alloc_count();
    CHECK_MSG(n == 0, "%llu allocations in 100 rounds of 5 steps (want none)",
              (unsigned long long)n);
    close_steady(&st);
#endif
}

/* The recycled values are emptied: a recycled metadata value handed out
 * again holds only the new step, and a recycled report only new outcomes. */
static void
test_recycled_values_start_empty(void)
{
    struct steady st;
    open_steady(&st);
    save_step(&st, 0, 3);
    struct items it;
    items_of(&it, 3, 1);
    ect_mm_feature_t f = {.identifier = it.kp[0], .num_tokens = it.sizes[0], .has_local_input = 1};
    ect_request_t req = {.request_id = "steady", .features = &f, .n_features = 1};
    CHECK_OK(ect_scheduler_update_state_after_alloc(st.s, &req, 0));
    ect_step_meta_t *m = ts_step(st.s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 1);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 0);
    CHECK(ect_step_meta_find_save(m, it.kp[0]) != NULL);
    char old[64];
    key_of(0, old);
    CHECK(ect_step_meta_find_save(m, old) == NULL);
    size_t len;
    CHECK_OK(ect_step_meta_encode(m, st.buf, st.cap, &len));
    ect_scheduler_recycle_connector_meta(st.s, m);
    CHECK_OK(ect_worker_bind_metadata(st.w, st.buf, len));
    fill(st.src[0], 3);
    CHECK_OK(ect_worker_save(st.w, it.kp[0], st.src[0], it.sizes[0] * TS_STEP_BLOCK, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(st.w));
    ship_report(&st, 1, 0); /* counts checked there: the first step's 3 saves are gone */
    /* Nothing bound, nothing owed: no report, and recycling NULL is a no-op. */
    ect_step_report_t *r = NULL;
    CHECK_OK(ect_worker_take_report(st.w, &r));
    CHECK(r == NULL);
    ect_worker_recycle_report(st.w, NULL);
    ect_scheduler_recycle_connector_meta(st.s, NULL);
    close_steady(&st);
}

/* A recycled value the scheduler or worker already holds a spare of, and
 * values recycled after many steps, are freed rather than leaked (the
 * sanitizer builds' leak check would see them). */
static void
test_recycling_more_than_one_value(void)
{
    struct steady st;
    open_steady(&st);
    ect_step_meta_t *a = ts_step(st.s), *b = ts_step(st.s);
    ect_scheduler_recycle_connector_meta(st.s, a);
    ect_scheduler_recycle_connector_meta(st.s, b);
    ect_step_report_t *r1, *r2;
    CHECK_OK(ect_step_report_create(&r1));
    CHECK_OK(ect_step_report_create(&r2));
    CHECK_OK(ect_step_report_add_save(r1, "someone-elses"));
    ect_worker_recycle_report(st.w, r1);
    ect_worker_recycle_report(st.w, r2);
    unsigned next = 0;
    round_of(&st, &next);
    close_steady(&st);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_steady_steps_allocate_nothing),
    ECT_CASE(test_recycled_values_start_empty),
    ECT_CASE(test_recycling_more_than_one_value),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
