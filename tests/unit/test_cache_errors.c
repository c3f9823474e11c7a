/*
 * Caller errors on the cache: every misuse gets a status and a message that
 * names the key or argument, never a crash, and leaves the cache as it was
 * (ect__cache_check after each).
 */
#include <stdio.h>
#include <string.h>

#include <ectier/cache.h>

#include "cache/cache_internal.h"
#include "support/cache.h"
#include "harness.h"

static ect_cache_t *
make_cache(uint64_t num_blocks)
{
    ect_cache_t *c = NULL;
    CHECK_OK(ect_cache_create(num_blocks, &c));
    return c;
}

static void
test_create_rejects_zero_or_too_many_blocks_and_null_output(void)
{
    ect_cache_t *c = (ect_cache_t *)(uintptr_t)0x1;
    CHECK_STATUS(ect_cache_create(0, &c), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "num_blocks 0");
    CHECK(c == (ect_cache_t *)(uintptr_t)0x1); /* untouched on error */
    CHECK_STATUS(ect_cache_create(ECT_CACHE_MAX_BLOCKS + 1, &c), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_create(8, NULL), ECT_ERR_INVALID_ARG);
    CHECK_OK(ect_cache_create(ECT_CACHE_MAX_BLOCKS, &c)); /* the limit itself is fine */
    CHECK_OK(ect_cache_alloc(c, "huge", ECT_CACHE_MAX_BLOCKS));
    ect_cache_destroy(c);
    ect_cache_destroy(NULL);
}

static void
test_null_cache_is_invalid_arg_everywhere(void)
{
    ect_cache_entry_t info;
    ect_run_t runs[2];
    size_t n;
    ect_pin_result_t r;
    uint64_t id;
    ect_cache_stats_t st;
    CHECK_STATUS(ect_cache_alloc(NULL, "k", 1), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "NULL cache");
    CHECK_STATUS(ect_cache_get(NULL, "k", &info), ECT_ERR_INVALID_ARG);
    bool found = true;
    CHECK_STATUS(ect_cache_find(NULL, "k", &info, &found), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "cache find: NULL cache");
    CHECK(found); /* untouched on error */
    CHECK_STATUS(ect_cache_get_runs(NULL, "k", runs, 2, &n), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_mark_ready(NULL, "k"), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_pin(NULL, "k"), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_unpin(NULL, "k"), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_pin_if_ready(NULL, "k", &r), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_discard(NULL, "k"), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_hold(NULL, "k", 1, &id), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_release_hold(NULL, 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_expire_holds(NULL, 1, &n), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_stats(NULL, &st), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_set_listener(NULL, ts_record_event, NULL), ECT_ERR_INVALID_ARG);
    CHECK_EQ_INT(ect_cache_has_held_entries(NULL), 0);
}

static void
test_null_empty_and_too_long_keys_are_invalid_arg(void)
{
    ect_cache_t *c = make_cache(8);
    CHECK_OK(ect_cache_alloc(c, "present", 1));
    CHECK_STATUS(ect_cache_alloc(c, NULL, 1), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "cache alloc: NULL key");
    CHECK_STATUS(ect_cache_alloc(c, "", 1), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "empty key");
    static char longest[ECT_KEY_MAX + 2];
    memset(longest, 'k', ECT_KEY_MAX + 1); /* 1025 bytes: too long */
    CHECK_STATUS(ect_cache_alloc(c, longest, 1), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "longer than 1024 bytes");
    longest[ECT_KEY_MAX] = '\0'; /* 1024 bytes: accepted */
    CHECK_OK(ect_cache_alloc(c, longest, 1));
    CHECK(ts_entry_exists(c, longest));

    const char *bad[] = {NULL, ""};
    for (int i = 0; i < 2; i++) {
        ect_cache_entry_t info;
        size_t n;
        ect_pin_result_t r;
        uint64_t id;
        CHECK_STATUS(ect_cache_get(c, bad[i], &info), ECT_ERR_INVALID_ARG);
        bool found;
        CHECK_STATUS(ect_cache_find(c, bad[i], &info, &found), ECT_ERR_INVALID_ARG);
        CHECK_STATUS(ect_cache_get_runs(c, bad[i], NULL, 0, &n), ECT_ERR_INVALID_ARG);
        CHECK_STATUS(ect_cache_mark_ready(c, bad[i]), ECT_ERR_INVALID_ARG);
        CHECK_STATUS(ect_cache_pin(c, bad[i]), ECT_ERR_INVALID_ARG);
        CHECK_STATUS(ect_cache_unpin(c, bad[i]), ECT_ERR_INVALID_ARG);
        CHECK_STATUS(ect_cache_pin_if_ready(c, bad[i], &r), ECT_ERR_INVALID_ARG);
        CHECK_STATUS(ect_cache_discard(c, bad[i]), ECT_ERR_INVALID_ARG);
        CHECK_STATUS(ect_cache_hold(c, bad[i], 1, &id), ECT_ERR_INVALID_ARG);
    }
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.entries, 2);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_null_outputs_are_invalid_arg(void)
{
    ect_cache_t *c = make_cache(8);
    ts_alloc_ready(c, "k", 2);
    ect_run_t runs[2];
    CHECK_STATUS(ect_cache_get(c, "k", NULL), ECT_ERR_INVALID_ARG);
    ect_cache_entry_t info;
    bool found;
    CHECK_STATUS(ect_cache_find(c, "k", NULL, &found), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "cache find: NULL info_p");
    CHECK_STATUS(ect_cache_find(c, "k", &info, NULL), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "cache find: NULL found_p");
    CHECK_STATUS(ect_cache_get_runs(c, "k", runs, 2, NULL), ECT_ERR_INVALID_ARG);
    size_t n;
    CHECK_STATUS(ect_cache_get_runs(c, "k", NULL, 2, &n), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_pin_if_ready(c, "k", NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_hold(c, "k", 1, NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_cache_stats(c, NULL), ECT_ERR_INVALID_ARG);
    /* None of those pinned or held anything. */
    CHECK_EQ_INT(ts_entry_state(c, "k"), ECT_CACHE_ENTRY_READY);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_unknown_keys_are_not_found_and_named(void)
{
    ect_cache_t *c = make_cache(8);
    const char *key = "sha256:abc";
    ect_cache_entry_t info;
    size_t n;
    uint64_t id;
    CHECK_STATUS(ect_cache_get(c, key, &info), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "'sha256:abc'");
    CHECK_STATUS(ect_cache_get_runs(c, key, NULL, 0, &n), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "'sha256:abc'");
    CHECK_STATUS(ect_cache_mark_ready(c, key), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_cache_pin(c, key), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "cache pin: no entry 'sha256:abc'");
    CHECK_STATUS(ect_cache_unpin(c, key), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "cache unpin: no entry 'sha256:abc'");
    CHECK_STATUS(ect_cache_discard(c, key), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_cache_hold(c, key, 1, &id), ECT_ERR_NOT_FOUND);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.entries, 0);
    ect_cache_destroy(c);
}

static void
test_get_runs_with_too_small_buffer_is_overflow_and_writes_nothing(void)
{
    ect_cache_t *c = make_cache(8);
    /* Make a 2-run entry: hole at 0 and at 4. */
    CHECK_OK(ect_cache_alloc(c, "h0", 2));
    CHECK_OK(ect_cache_alloc(c, "k0", 2));
    CHECK_OK(ect_cache_alloc(c, "h1", 2));
    CHECK_OK(ect_cache_alloc(c, "k1", 2));
    CHECK_OK(ect_cache_discard(c, "h0"));
    CHECK_OK(ect_cache_discard(c, "h1"));
    CHECK_OK(ect_cache_alloc(c, "two", 4));
    ect_run_t runs[2] = {{.first = 77, .count = 77}, {.first = 88, .count = 88}};
    size_t n = 5;
    CHECK_STATUS(ect_cache_get_runs(c, "two", runs, 1, &n), ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "has 2 runs, the buffer holds 1");
    CHECK_EQ_U64(n, 5);
    CHECK_EQ_U64(runs[0].first, 77);
    CHECK_OK(ect_cache_get_runs(c, "two", NULL, 0, &n));
    CHECK_EQ_U64(n, 2);
    CHECK_OK(ect_cache_get_runs(c, "two", runs, n, &n));
    CHECK_EQ_U64(runs[0].first, 0);
    CHECK_EQ_U64(runs[1].first, 4);
    ect_cache_destroy(c);
}

static void
test_repeated_misuse_leaves_the_cache_consistent(void)
{
    /* Every caller error from one entry, interleaved with real work. */
    ect_cache_t *c = make_cache(6);
    for (int round = 0; round < 3; round++) {
        CHECK_OK(ect_cache_alloc(c, "a", 3));
        CHECK_STATUS(ect_cache_alloc(c, "a", 3), ECT_ERR_EXISTS);
        CHECK_STATUS(ect_cache_pin(c, "a"), ECT_ERR_STATE);
        CHECK_STATUS(ect_cache_unpin(c, "a"), ECT_ERR_STATE);
        CHECK_OK(ect_cache_mark_ready(c, "a"));
        CHECK_STATUS(ect_cache_mark_ready(c, "a"), ECT_ERR_STATE);
        CHECK_STATUS(ect_cache_discard(c, "a"), ECT_ERR_STATE);
        CHECK_OK(ect_cache_pin(c, "a"));
        CHECK_OK(ect_cache_unpin(c, "a"));
        CHECK_STATUS(ect_cache_unpin(c, "a"), ECT_ERR_STATE);
        CHECK_STATUS(ect_cache_alloc(c, "b", 7), ECT_ERR_OVERFLOW);
        CHECK_OK(ect__cache_check(c));
        CHECK_OK(ect_cache_alloc(c, "evicts-a", 6));
        CHECK(!ts_entry_exists(c, "a"));
        CHECK_OK(ect_cache_discard(c, "evicts-a"));
        CHECK_OK(ect__cache_check(c));
    }
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.entries, 0);
    CHECK_EQ_U64(st.free_blocks, 6);
    CHECK_EQ_U64(st.pins, 0);
    ect_cache_destroy(c);
}

/* A prefetch is a hint: for any input, valid or not, it changes no entry,
 * no counter, no order and not the last error message. */
static void
test_prefetch_changes_nothing_and_ignores_bad_input(void)
{
    ect_cache_t *c = make_cache(8);
    ts_alloc_ready(c, "old", 2);
    ts_alloc_ready(c, "pinned", 2);
    ts_alloc_ready(c, "young", 2);
    CHECK_OK(ect_cache_pin(c, "pinned"));
    CHECK_OK(ect_cache_alloc(c, "saving", 1));
    CHECK_STATUS(ect_cache_get(c, "absent", &(ect_cache_entry_t){0}), ECT_ERR_NOT_FOUND);
    char before_error[256];
    snprintf(before_error, sizeof(before_error), "%s", ect_last_error());
    ect_cache_stats_t before, after;
    CHECK_OK(ect_cache_stats(c, &before));

    char too_long[ECT_KEY_MAX + 2];
    memset(too_long, 'k', sizeof(too_long) - 1);
    too_long[sizeof(too_long) - 1] = '\0';
    const char *keys[] = {"old", "pinned", "young", "saving", "absent", "", too_long, NULL};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        ect_cache_prefetch(c, keys[i]);
        ect_cache_prefetch(NULL, keys[i]);
    }

    CHECK_OK(ect__cache_check(c));
    CHECK_STR_EQ(ect_last_error(), before_error);
    CHECK_OK(ect_cache_stats(c, &after));
    CHECK_EQ_U64(after.entries, before.entries);
    CHECK_EQ_U64(after.entries_ready, before.entries_ready);
    CHECK_EQ_U64(after.entries_pinned, before.entries_pinned);
    CHECK_EQ_U64(after.entries_not_ready, before.entries_not_ready);
    CHECK_EQ_U64(after.free_blocks, before.free_blocks);
    CHECK_EQ_U64(after.pins, before.pins);
    CHECK_EQ_U64(after.evicted_entries, before.evicted_entries);
    CHECK(!ts_entry_exists(c, "absent"));
    /* The FIFO order is untouched: room for 5 blocks (1 free) evicts "old"
     * then "young" (oldest first, the pinned entry skipped), nothing else. */
    CHECK_OK(ect_cache_alloc(c, "new", 5));
    CHECK(!ts_entry_exists(c, "old"));
    CHECK(!ts_entry_exists(c, "young"));
    CHECK_EQ_INT(ts_entry_state(c, "pinned"), ECT_CACHE_ENTRY_PINNED);
    CHECK_EQ_INT(ts_entry_state(c, "saving"), ECT_CACHE_ENTRY_NOT_READY);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_entry_state_str_names_every_state(void)
{
    CHECK_STR_EQ(ect_cache_entry_state_str(ECT_CACHE_ENTRY_NOT_READY), "not-ready");
    CHECK_STR_EQ(ect_cache_entry_state_str(ECT_CACHE_ENTRY_READY), "ready");
    CHECK_STR_EQ(ect_cache_entry_state_str(ECT_CACHE_ENTRY_PINNED), "pinned");
    CHECK_STR_EQ(ect_cache_entry_state_str((ect_cache_entry_state_t)42), "unknown");
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_create_rejects_zero_or_too_many_blocks_and_null_output),
    ECT_CASE(test_null_cache_is_invalid_arg_everywhere),
    ECT_CASE(test_null_empty_and_too_long_keys_are_invalid_arg),
    ECT_CASE(test_null_outputs_are_invalid_arg),
    ECT_CASE(test_unknown_keys_are_not_found_and_named),
    ECT_CASE(test_get_runs_with_too_small_buffer_is_overflow_and_writes_nothing),
    ECT_CASE(test_repeated_misuse_leaves_the_cache_consistent),
    ECT_CASE(test_prefetch_changes_nothing_and_ignores_bad_input),
    ECT_CASE(test_entry_state_str_names_every_state),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
