/*
 * The embedding cache's semantics (SPEC §5): one counterpart per scenario of
 * the seed's unit/cpu/scheduler/test_embedding_cache.py (named after it;
 * the seed's "returns None" / "asserts" become statuses here), then
 * pin_if_ready, discard, the listener and the stats.  Extents, holds,
 * caller errors, threads and the model check have their own programs.
 */
#include <ectier/cache.h>

#include "cache/cache_internal.h"
#include "support/cache.h"
#include "harness.h"

static ect_cache_t *
make_cache(uint64_t num_blocks)
{
    ect_cache_t *c = NULL;
    CHECK_OK(ect_cache_create(num_blocks, &c));
    CHECK(c != NULL);
    return c;
}

/* ---- alloc ------------------------------------------------------------------ */

static void
test_alloc_unique_ascending_block_ids(void)
{
    ect_cache_t *c = make_cache(16);
    uint64_t a[16], b[16];
    CHECK_OK(ect_cache_alloc(c, "a", 5));
    CHECK_OK(ect_cache_alloc(c, "b", 7));
    size_t na = ts_entry_ids(c, "a", a, 16), nb = ts_entry_ids(c, "b", b, 16);
    CHECK_EQ_U64(na, 5);
    CHECK_EQ_U64(nb, 7);
    for (size_t i = 1; i < na; i++)
        CHECK(a[i] > a[i - 1]);
    for (size_t i = 1; i < nb; i++)
        CHECK(b[i] > b[i - 1]);
    for (size_t i = 0; i < na; i++)
        for (size_t j = 0; j < nb; j++)
            CHECK(a[i] != b[j]);
    for (size_t i = 0; i < na; i++)
        CHECK(a[i] < 16);
    for (size_t j = 0; j < nb; j++)
        CHECK(b[j] < 16);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

/* The seed returns an immutable tuple; here runs are copied out, so the
 * caller's buffer is its own and the cache's copy cannot be changed. */
static void
test_alloc_returns_runs_copied_out(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_OK(ect_cache_alloc(c, "a", 3));
    ect_run_t runs[4];
    size_t n = ts_entry_runs(c, "a", runs);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(runs[0].count, 3);
    uint64_t first = runs[0].first;
    runs[0].first = 99;
    runs[0].count = 99;
    n = ts_entry_runs(c, "a", runs);
    CHECK_EQ_U64(n, 1);
    CHECK_EQ_U64(runs[0].first, first);
    CHECK_EQ_U64(runs[0].count, 3);
    /* Sizing query: NULL buffer, cap 0. */
    size_t needed = 7;
    CHECK_OK(ect_cache_get_runs(c, "a", NULL, 0, &needed));
    CHECK_EQ_U64(needed, 1);
    ect_cache_destroy(c);
}

static void
test_alloc_zero_blocks(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "empty", 0));
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "empty", &info));
    CHECK_EQ_U64(info.n_blocks, 0);
    CHECK_EQ_U64(info.n_runs, 0);
    size_t n = 9;
    CHECK_OK(ect_cache_get_runs(c, "empty", NULL, 0, &n));
    CHECK_EQ_U64(n, 0);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.free_blocks, 4);
    CHECK_OK(ect_cache_mark_ready(c, "empty"));
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_alloc_starts_not_ready(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "a", 2));
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_NOT_READY);
    CHECK_EQ_U64(info.pin_count, 0);
    ect_cache_destroy(c);
}

static void
test_alloc_returns_no_space_when_full(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "a", 4));
    CHECK_STATUS(ect_cache_alloc(c, "b", 1), ECT_ERR_NO_SPACE);
    CHECK_CONTAINS(ect_last_error(), "'b'");
    CHECK(!ts_entry_exists(c, "b"));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.alloc_no_space, 1);
    CHECK_EQ_U64(st.allocs, 1);
    ect_cache_destroy(c);
}

static void
test_alloc_duplicate_key_is_exists_error(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_OK(ect_cache_alloc(c, "dup", 2));
    CHECK_STATUS(ect_cache_alloc(c, "dup", 3), ECT_ERR_EXISTS);
    CHECK_CONTAINS(ect_last_error(), "'dup'");
    CHECK_CONTAINS(ect_last_error(), "already exists");
    /* The first entry is untouched. */
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "dup", &info));
    CHECK_EQ_U64(info.n_blocks, 2);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_alloc_n_blocks_exceeding_capacity_is_overflow_error(void)
{
    ect_cache_t *c = make_cache(8);
    ts_alloc_ready(c, "old", 2);
    CHECK_STATUS(ect_cache_alloc(c, "big", 9), ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "'big'");
    CHECK_CONTAINS(ect_last_error(), "9");
    CHECK(ts_entry_exists(c, "old"));        /* nothing evicted */
    CHECK_OK(ect_cache_alloc(c, "fits", 8)); /* exactly the capacity is fine */
    CHECK(!ts_entry_exists(c, "old"));
    ect_cache_destroy(c);
}

/* ---- get ------------------------------------------------------------------------ */

static void
test_get_missing_returns_not_found(void)
{
    ect_cache_t *c = make_cache(4);
    ect_cache_entry_t info = {.n_blocks = 77};
    CHECK_STATUS(ect_cache_get(c, "nope", &info), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "'nope'");
    CHECK_EQ_U64(info.n_blocks, 77); /* output untouched */
    ect_cache_destroy(c);
}

/* The seed returns the same entry object; here repeated snapshots describe
 * the same entry: same blocks, and they follow its state. */
static void
test_get_returns_entry(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_OK(ect_cache_alloc(c, "a", 3));
    ect_run_t r1[4], r2[4];
    CHECK_EQ_U64(ts_entry_runs(c, "a", r1), 1);
    CHECK_OK(ect_cache_mark_ready(c, "a"));
    CHECK_OK(ect_cache_pin(c, "a"));
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_PINNED);
    CHECK_EQ_U64(info.pin_count, 1);
    CHECK_EQ_U64(info.n_blocks, 3);
    CHECK_EQ_U64(ts_entry_runs(c, "a", r2), 1);
    CHECK_EQ_U64(r1[0].first, r2[0].first);
    CHECK_EQ_U64(r1[0].count, r2[0].count);
    ect_cache_destroy(c);
}

static void
test_get_returns_not_ready_entry(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_OK(ect_cache_alloc(c, "a", 3));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_NOT_READY);
    ect_cache_destroy(c);
}

/* find answers "is it cached?" without recording an error for a miss (the
 * scheduler asks for every new item), and describes a present entry as get
 * does. */
static void
test_find_answers_without_an_error_for_a_miss(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_STATUS(ect_cache_pin(c, "earlier"), ECT_ERR_NOT_FOUND);
    char before[256];
    snprintf(before, sizeof(before), "%s", ect_last_error());
    ect_cache_entry_t info = {.n_blocks = 77};
    bool found = true;
    CHECK_OK(ect_cache_find(c, "nope", &info, &found));
    CHECK(!found);
    CHECK_EQ_U64(info.n_blocks, 77); /* output untouched */
    CHECK_STR_EQ(ect_last_error(), before);

    CHECK_OK(ect_cache_alloc(c, "a", 3));
    CHECK_OK(ect_cache_find(c, "a", &info, &found));
    CHECK(found);
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_NOT_READY);
    CHECK_EQ_U64(info.n_blocks, 3);
    CHECK_OK(ect_cache_mark_ready(c, "a"));
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_OK(ect_cache_find(c, "a", &info, &found));
    CHECK(found);
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_PINNED);
    CHECK_EQ_U64(info.pin_count, 1);
    CHECK_EQ_U64(info.n_runs, 1);
    ect_cache_destroy(c);
}

/* ---- mark_ready ------------------------------------------------------------------ */

static void
test_mark_ready_transitions(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_OK(ect_cache_alloc(c, "a", 3));
    CHECK_OK(ect_cache_mark_ready(c, "a"));
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_READY);
    CHECK_EQ_U64(info.pin_count, 0);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.evictable_blocks, 3);
    CHECK_EQ_U64(st.entries_ready, 1);
    CHECK_EQ_U64(st.entries_not_ready, 0);
    ect_cache_destroy(c);
}

static void
test_mark_ready_already_ready_is_state_error(void)
{
    ect_cache_t *c = make_cache(8);
    ts_alloc_ready(c, "a", 3);
    CHECK_STATUS(ect_cache_mark_ready(c, "a"), ECT_ERR_STATE);
    CHECK_CONTAINS(ect_last_error(), "'a' is already ready");
    /* Still evictable once, not appended twice to the FIFO. */
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_mark_ready_missing_key_is_not_found(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_STATUS(ect_cache_mark_ready(c, "ghost"), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "'ghost'");
    ect_cache_destroy(c);
}

/* ---- pin ------------------------------------------------------------------------- */

static void
test_pin_not_ready_is_state_error(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_OK(ect_cache_alloc(c, "a", 2));
    CHECK_STATUS(ect_cache_pin(c, "a"), ECT_ERR_STATE);
    CHECK_CONTAINS(ect_last_error(), "'a' is not ready");
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_NOT_READY);
    ect_cache_destroy(c);
}

static void
test_pin_unpin_basic(void)
{
    ect_cache_t *c = make_cache(8);
    ts_alloc_ready(c, "a", 2);
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_PINNED);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.evictable_blocks, 0);
    CHECK_EQ_U64(st.pins, 1);
    CHECK_OK(ect_cache_unpin(c, "a"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.evictable_blocks, 2);
    CHECK_EQ_U64(st.pins, 0);
    ect_cache_destroy(c);
}

static void
test_nested_pin(void)
{
    ect_cache_t *c = make_cache(8);
    ts_alloc_ready(c, "a", 2);
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_OK(ect_cache_pin(c, "a"));
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_U64(info.pin_count, 2);
    CHECK_OK(ect_cache_unpin(c, "a"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_PINNED);
    CHECK_OK(ect_cache_unpin(c, "a"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    ect_cache_destroy(c);
}

static void
test_unpin_unpinned_is_state_error(void)
{
    ect_cache_t *c = make_cache(8);
    ts_alloc_ready(c, "a", 2);
    CHECK_STATUS(ect_cache_unpin(c, "a"), ECT_ERR_STATE);
    CHECK_CONTAINS(ect_last_error(), "'a' is ready with no pin to drop");
    CHECK_OK(ect_cache_alloc(c, "b", 2));
    CHECK_STATUS(ect_cache_unpin(c, "b"), ECT_ERR_STATE); /* not ready either */
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

/* ---- has_held_entries -------------------------------------------------------------- */

static void
test_has_held_entries_empty_cache(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 0);
    ect_cache_destroy(c);
}

static void
test_has_held_entries_true_while_not_ready(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_OK(ect_cache_alloc(c, "a", 2));
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 1);
    CHECK_OK(ect_cache_mark_ready(c, "a"));
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 0);
    CHECK_OK(ect_cache_alloc(c, "b", 2));
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 1);
    CHECK_OK(ect_cache_discard(c, "b"));
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 0);
    ect_cache_destroy(c);
}

static void
test_has_held_entries_true_while_pinned(void)
{
    ect_cache_t *c = make_cache(8);
    ts_alloc_ready(c, "a", 2);
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 1);
    CHECK_OK(ect_cache_unpin(c, "a"));
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 0);
    ect_cache_destroy(c);
}

/* ---- eviction ------------------------------------------------------------------------ */

static void
test_eviction_frees_ready_unpinned_fifo(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    ts_alloc_ready(c, "b", 2);
    CHECK_OK(ect_cache_alloc(c, "c", 2));
    CHECK(!ts_entry_exists(c, "a"));
    CHECK(ts_entry_exists(c, "b"));
    CHECK(ts_entry_exists(c, "c"));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.evicted_entries, 1);
    CHECK_EQ_U64(st.evicted_blocks, 2);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_eviction_skips_pinned(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    ts_alloc_ready(c, "b", 2);
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_OK(ect_cache_alloc(c, "c", 2));
    CHECK(ts_entry_exists(c, "a"));
    CHECK(!ts_entry_exists(c, "b"));
    ect_cache_destroy(c);
}

static void
test_eviction_skips_not_ready(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "a", 2)); /* oldest, but not ready */
    ts_alloc_ready(c, "b", 2);
    CHECK_OK(ect_cache_alloc(c, "c", 2));
    CHECK(ts_entry_exists(c, "a"));
    CHECK(!ts_entry_exists(c, "b"));
    ect_cache_destroy(c);
}

static void
test_eviction_no_space_if_all_non_evictable(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "a", 2));
    ts_alloc_ready(c, "b", 2);
    CHECK_OK(ect_cache_pin(c, "b"));
    CHECK_STATUS(ect_cache_alloc(c, "c", 1), ECT_ERR_NO_SPACE);
    CHECK(ts_entry_exists(c, "a"));
    CHECK(ts_entry_exists(c, "b"));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.evicted_entries, 0);
    ect_cache_destroy(c);
}

static void
test_eviction_fail_fast_no_wasted_eviction(void)
{
    /* Free 0, evictable 2, need 3: fail and keep a. */
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    CHECK_OK(ect_cache_alloc(c, "held", 2));
    CHECK_STATUS(ect_cache_alloc(c, "c", 3), ECT_ERR_NO_SPACE);
    CHECK(ts_entry_exists(c, "a"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.evicted_entries, 0);
    CHECK_EQ_U64(st.evictable_blocks, 2);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_eviction_multiple_entries(void)
{
    ect_cache_t *c = make_cache(6);
    ts_alloc_ready(c, "a", 2);
    ts_alloc_ready(c, "b", 2);
    ts_alloc_ready(c, "c", 2);
    CHECK_OK(ect_cache_alloc(c, "d", 4));
    CHECK(!ts_entry_exists(c, "a"));
    CHECK(!ts_entry_exists(c, "b"));
    CHECK(ts_entry_exists(c, "c"));
    CHECK(ts_entry_exists(c, "d"));
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

/* FIFO order is "time since the entry last became evictable": the last
 * unpin sends an old entry to the tail. */
static void
test_eviction_order_restarts_at_last_unpin(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    ts_alloc_ready(c, "b", 2);
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_OK(ect_cache_unpin(c, "a")); /* still pinned: stays off the FIFO */
    CHECK_OK(ect_cache_unpin(c, "a")); /* now a is younger than b */
    CHECK_OK(ect_cache_alloc(c, "c", 2));
    CHECK(ts_entry_exists(c, "a"));
    CHECK(!ts_entry_exists(c, "b"));
    ect_cache_destroy(c);
}

/* The seed evicts from the head until enough is free, zero-block entries
 * included when they are older. */
static void
test_eviction_takes_older_zero_block_entries_in_order(void)
{
    ect_cache_t *c = make_cache(2);
    ts_alloc_ready(c, "zero", 0);
    ts_alloc_ready(c, "a", 2);
    ts_alloc_ready(c, "young-zero", 0);
    CHECK_OK(ect_cache_alloc(c, "b", 2));
    CHECK(!ts_entry_exists(c, "zero"));
    CHECK(!ts_entry_exists(c, "a"));
    CHECK(ts_entry_exists(c, "young-zero"));
    ect_cache_destroy(c);
}

/* ---- pin_if_ready ----------------------------------------------------------------------- */

static void
test_pin_if_ready_distinguishes_absent_not_ready_and_pinned(void)
{
    ect_cache_t *c = make_cache(8);
    ect_pin_result_t r = ECT_PIN_PINNED;
    CHECK_OK(ect_cache_pin_if_ready(c, "a", &r));
    CHECK_EQ_INT(r, ECT_PIN_ABSENT);
    CHECK_OK(ect_cache_alloc(c, "a", 2));
    CHECK_OK(ect_cache_pin_if_ready(c, "a", &r));
    CHECK_EQ_INT(r, ECT_PIN_NOT_READY);
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_U64(info.pin_count, 0); /* not pinned */
    CHECK_OK(ect_cache_mark_ready(c, "a"));
    CHECK_OK(ect_cache_pin_if_ready(c, "a", &r));
    CHECK_EQ_INT(r, ECT_PIN_PINNED);
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_PINNED);
    CHECK_EQ_U64(info.pin_count, 1);
    CHECK_OK(ect_cache_unpin(c, "a"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    ect_cache_destroy(c);
}

/* ---- discard ------------------------------------------------------------------------------ */

static void
test_discard_frees_a_not_ready_entry(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "a", 4));
    CHECK_OK(ect_cache_discard(c, "a"));
    CHECK(!ts_entry_exists(c, "a"));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.free_blocks, 4);
    CHECK_EQ_U64(st.entries, 0);
    CHECK_OK(ect_cache_alloc(c, "a", 4)); /* the key can be used again */
    ect_cache_destroy(c);
}

static void
test_discard_ready_or_pinned_is_state_error(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    CHECK_STATUS(ect_cache_discard(c, "a"), ECT_ERR_STATE);
    CHECK_CONTAINS(ect_last_error(), "'a' is ready");
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_STATUS(ect_cache_discard(c, "a"), ECT_ERR_STATE);
    CHECK_CONTAINS(ect_last_error(), "'a' is pinned");
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_PINNED);
    CHECK_STATUS(ect_cache_discard(c, "missing"), ECT_ERR_NOT_FOUND);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

/* ---- listener ------------------------------------------------------------------------------ */

static void
test_listener_sees_stored_evicted_and_discarded(void)
{
    ect_cache_t *c = make_cache(4);
    struct ts_event_log log = {0};
    CHECK_OK(ect_cache_set_listener(c, ts_record_event, &log));
    ts_alloc_ready(c, "a", 3);
    CHECK_OK(ect_cache_alloc(c, "b", 1));
    CHECK_OK(ect_cache_discard(c, "b"));
    CHECK_OK(ect_cache_alloc(c, "c", 2)); /* evicts a */
    CHECK_EQ_INT(log.n, 3);
    CHECK_EQ_INT(log.type[0], ECT_CACHE_EVENT_STORED);
    CHECK_STR_EQ(log.key[0], "a");
    CHECK_EQ_U64(log.n_blocks[0], 3);
    CHECK_EQ_INT(log.type[1], ECT_CACHE_EVENT_DISCARDED);
    CHECK_STR_EQ(log.key[1], "b");
    CHECK_EQ_INT(log.type[2], ECT_CACHE_EVENT_EVICTED);
    CHECK_STR_EQ(log.key[2], "a");
    CHECK_EQ_U64(log.n_blocks[2], 3);
    /* Removing the listener stops the events. */
    CHECK_OK(ect_cache_set_listener(c, NULL, NULL));
    CHECK_OK(ect_cache_mark_ready(c, "c"));
    CHECK_EQ_INT(log.n, 3);
    ect_cache_destroy(c);
}

struct reentry {
    ect_cache_t *cache;
    ect_status_t pin_status;
    ect_status_t alloc_status;
    int held;
    int calls;
};

static void
reentrant_listener(const ect_cache_event_t *ev, void *user)
{
    struct reentry *r = user;
    r->calls++;
    ect_cache_prefetch(r->cache, ev->key); /* ignored here: it takes the lock elsewhere */
    r->pin_status = ect_cache_pin(r->cache, ev->key);
    r->alloc_status = ect_cache_alloc(r->cache, "from-listener", 1);
    r->held = ect_cache_has_held_entries(r->cache);
}

static void
test_listener_calling_back_into_cache_gets_state_error_not_deadlock(void)
{
    ect_cache_t *c = make_cache(4);
    struct reentry r = {.cache = c};
    CHECK_OK(ect_cache_set_listener(c, reentrant_listener, &r));
    CHECK_OK(ect_cache_alloc(c, "a", 2));
    CHECK_OK(ect_cache_mark_ready(c, "a"));
    CHECK_EQ_INT(r.calls, 1);
    CHECK_EQ_INT(r.pin_status, ECT_ERR_STATE);
    CHECK_EQ_INT(r.alloc_status, ECT_ERR_STATE);
    CHECK_EQ_INT(r.held, 0); /* has_held_entries works from the listener */
    CHECK(!ts_entry_exists(c, "from-listener"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    /* A second cache is not locked: the listener of one may use another. */
    ect_cache_t *other = make_cache(4);
    r.cache = other;
    CHECK_OK(ect_cache_alloc(c, "b", 2));
    CHECK_OK(ect_cache_mark_ready(c, "b"));
    CHECK_EQ_INT(r.alloc_status, ECT_OK);
    CHECK(ts_entry_exists(other, "from-listener"));
    ect_cache_destroy(other);
    ect_cache_destroy(c);
}

/* ---- stats ---------------------------------------------------------------------------------- */

static void
test_stats_count_states_blocks_and_evictions(void)
{
    ect_cache_t *c = make_cache(10);
    CHECK_OK(ect_cache_alloc(c, "nr", 2));
    ts_alloc_ready(c, "r", 3);
    ts_alloc_ready(c, "p", 1);
    CHECK_OK(ect_cache_pin(c, "p"));
    CHECK_OK(ect_cache_pin(c, "p"));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.num_blocks, 10);
    CHECK_EQ_U64(st.used_blocks, 6);
    CHECK_EQ_U64(st.free_blocks, 4);
    CHECK_EQ_U64(st.evictable_blocks, 3);
    CHECK_EQ_U64(st.entries, 3);
    CHECK_EQ_U64(st.entries_not_ready, 1);
    CHECK_EQ_U64(st.entries_ready, 1);
    CHECK_EQ_U64(st.entries_pinned, 1);
    CHECK_EQ_U64(st.pins, 2);
    CHECK_EQ_U64(st.allocs, 3);
    CHECK_EQ_U64(st.runs_histogram[0], 3);
    CHECK_EQ_U64(st.free_runs, 1);
    CHECK_EQ_U64(st.largest_free_run, 4);
    CHECK_OK(ect_cache_alloc(c, "big", 7)); /* evicts r (3 blocks) */
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.evicted_entries, 1);
    CHECK_EQ_U64(st.evicted_blocks, 3);
    CHECK_EQ_U64(st.free_blocks, 0);
    CHECK_EQ_U64(st.entries, 3);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_alloc_unique_ascending_block_ids),
    ECT_CASE(test_find_answers_without_an_error_for_a_miss),
    ECT_CASE(test_alloc_returns_runs_copied_out),
    ECT_CASE(test_alloc_zero_blocks),
    ECT_CASE(test_alloc_starts_not_ready),
    ECT_CASE(test_alloc_returns_no_space_when_full),
    ECT_CASE(test_alloc_duplicate_key_is_exists_error),
    ECT_CASE(test_alloc_n_blocks_exceeding_capacity_is_overflow_error),
    ECT_CASE(test_get_missing_returns_not_found),
    ECT_CASE(test_get_returns_entry),
    ECT_CASE(test_get_returns_not_ready_entry),
    ECT_CASE(test_mark_ready_transitions),
    ECT_CASE(test_mark_ready_already_ready_is_state_error),
    ECT_CASE(test_mark_ready_missing_key_is_not_found),
    ECT_CASE(test_pin_not_ready_is_state_error),
    ECT_CASE(test_pin_unpin_basic),
    ECT_CASE(test_nested_pin),
    ECT_CASE(test_unpin_unpinned_is_state_error),
    ECT_CASE(test_has_held_entries_empty_cache),
    ECT_CASE(test_has_held_entries_true_while_not_ready),
    ECT_CASE(test_has_held_entries_true_while_pinned),
    ECT_CASE(test_eviction_frees_ready_unpinned_fifo),
    ECT_CASE(test_eviction_skips_pinned),
    ECT_CASE(test_eviction_skips_not_ready),
    ECT_CASE(test_eviction_no_space_if_all_non_evictable),
    ECT_CASE(test_eviction_fail_fast_no_wasted_eviction),
    ECT_CASE(test_eviction_multiple_entries),
    ECT_CASE(test_eviction_order_restarts_at_last_unpin),
    ECT_CASE(test_eviction_takes_older_zero_block_entries_in_order),
    ECT_CASE(test_pin_if_ready_distinguishes_absent_not_ready_and_pinned),
    ECT_CASE(test_discard_frees_a_not_ready_entry),
    ECT_CASE(test_discard_ready_or_pinned_is_state_error),
    ECT_CASE(test_listener_sees_stored_evicted_and_discarded),
    ECT_CASE(test_listener_calling_back_into_cache_gets_state_error_not_deadlock),
    ECT_CASE(test_stats_count_states_blocks_and_evictions),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
