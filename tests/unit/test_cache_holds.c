/*
 * Holds with a lease (SPEC §8.6, behaviour §4 item 1): the cache side of
 * the seed's test_scheduler_nixl_producer.py hold scenarios, plus the
 * leak and double-release cases that pin leases exist to prevent.
 */
#include <ectier/cache.h>

#include "cache/cache_internal.h"
#include "support/cache.h"
#include "harness.h"

#define SEC 1000000000ull

static ect_cache_t *
make_cache(uint64_t num_blocks)
{
    ect_cache_t *c = NULL;
    CHECK_OK(ect_cache_create(num_blocks, &c));
    return c;
}

static void
test_announced_encoding_is_not_evictable(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "announced", 2);
    ts_alloc_ready(c, "other", 2);
    uint64_t id = 0;
    CHECK_OK(ect_cache_hold(c, "announced", 30 * SEC, &id));
    CHECK(id != 0);
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "announced", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_PINNED);
    CHECK_EQ_U64(info.holds_active, 1);
    /* The older entry is held, so the newer one is evicted instead... */
    CHECK_OK(ect_cache_alloc(c, "new", 2));
    CHECK(ts_entry_exists(c, "announced"));
    CHECK(!ts_entry_exists(c, "other"));
    /* ...and when only the held one could make room, nothing is evicted. */
    CHECK_OK(ect_cache_mark_ready(c, "new"));
    CHECK_OK(ect_cache_pin(c, "new"));
    CHECK_STATUS(ect_cache_alloc(c, "more", 2), ECT_ERR_NO_SPACE);
    CHECK(ts_entry_exists(c, "announced"));
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_hold_is_released_once_the_read_lands(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    ts_alloc_ready(c, "b", 2);
    uint64_t id;
    CHECK_OK(ect_cache_hold(c, "a", 30 * SEC, &id));
    CHECK_OK(ect_cache_release_hold(c, id)); /* the consumer's read was served */
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_READY);
    CHECK_EQ_U64(info.pin_count, 0);
    /* Released after b became evictable, so a is now the younger one. */
    CHECK_OK(ect_cache_alloc(c, "c", 2));
    CHECK(ts_entry_exists(c, "a"));
    CHECK(!ts_entry_exists(c, "b"));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.holds_active, 0);
    ect_cache_destroy(c);
}

static void
test_hold_lapses_when_no_consumer_ever_reads(void)
{
    /* The seed's lease 0: the hold lapses at the next expiry sweep. */
    ect_cache_t *c = make_cache(2);
    ts_alloc_ready(c, "a", 2);
    uint64_t now = 1000 * SEC, id;
    CHECK_OK(ect_cache_hold(c, "a", now + 0, &id));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_PINNED);
    size_t expired = 99;
    CHECK_OK(ect_cache_expire_holds(c, now - 1, &expired));
    CHECK_EQ_U64(expired, 0);
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_PINNED);
    CHECK_OK(ect_cache_expire_holds(c, now, &expired));
    CHECK_EQ_U64(expired, 1);
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    CHECK_OK(ect_cache_alloc(c, "b", 2)); /* a can be evicted again */
    CHECK(!ts_entry_exists(c, "a"));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.holds_expired, 1);
    /* The lapsed hold is gone: releasing it now changes nothing. */
    CHECK_STATUS(ect_cache_release_hold(c, id), ECT_ERR_NOT_FOUND);
    ect_cache_destroy(c);
}

static void
test_hold_is_taken_when_a_late_save_lands(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "late", 2)); /* announced while being saved */
    uint64_t id;
    CHECK_OK(ect_cache_hold(c, "late", 30 * SEC, &id));
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "late", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_NOT_READY);
    CHECK_EQ_U64(info.holds_pending, 1);
    CHECK_EQ_U64(info.pin_count, 0);
    CHECK_OK(ect_cache_mark_ready(c, "late")); /* the save lands */
    CHECK_OK(ect_cache_get(c, "late", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_PINNED);
    CHECK_EQ_U64(info.holds_pending, 0);
    CHECK_EQ_U64(info.holds_active, 1);
    CHECK_STATUS(ect_cache_alloc(c, "x", 3), ECT_ERR_NO_SPACE); /* not evictable */
    CHECK_OK(ect_cache_release_hold(c, id));
    CHECK_EQ_INT(ts_entry_state(c, "late"), ECT_CACHE_ENTRY_READY);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_each_announcement_keeps_its_own_hold(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    uint64_t first, second;
    CHECK_OK(ect_cache_hold(c, "a", 10 * SEC, &first));
    CHECK_OK(ect_cache_hold(c, "a", 20 * SEC, &second));
    CHECK(first != second);
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_U64(info.holds_active, 2);
    size_t expired;
    CHECK_OK(ect_cache_expire_holds(c, 15 * SEC, &expired));
    CHECK_EQ_U64(expired, 1);
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_PINNED); /* the later lease still holds */
    CHECK_STATUS(ect_cache_release_hold(c, first), ECT_ERR_NOT_FOUND);
    CHECK_OK(ect_cache_release_hold(c, second));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    ect_cache_destroy(c);
}

static void
test_release_hold_twice_is_not_found_and_never_double_unpins(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    CHECK_OK(ect_cache_pin(c, "a")); /* a load's pin, apart from the hold */
    uint64_t id;
    CHECK_OK(ect_cache_hold(c, "a", 30 * SEC, &id));
    CHECK_OK(ect_cache_release_hold(c, id));
    CHECK_STATUS(ect_cache_release_hold(c, id), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "no hold");
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_PINNED); /* the load's pin survives */
    CHECK_EQ_U64(info.pin_count, 1);
    CHECK_STATUS(ect_cache_release_hold(c, 0), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_cache_release_hold(c, 12345), ECT_ERR_NOT_FOUND);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_unpin_never_drops_a_hold(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    uint64_t id;
    CHECK_OK(ect_cache_hold(c, "a", 30 * SEC, &id));
    CHECK_STATUS(ect_cache_unpin(c, "a"), ECT_ERR_STATE);
    CHECK_CONTAINS(ect_last_error(), "1 holds active");
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_PINNED);
    CHECK_OK(ect_cache_release_hold(c, id));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    ect_cache_destroy(c);
}

static void
test_discard_drops_pending_holds(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "a", 2));
    uint64_t id1, id2;
    CHECK_OK(ect_cache_hold(c, "a", 30 * SEC, &id1));
    CHECK_OK(ect_cache_hold(c, "a", 40 * SEC, &id2));
    CHECK_OK(ect_cache_discard(c, "a"));
    CHECK_STATUS(ect_cache_release_hold(c, id1), ECT_ERR_NOT_FOUND);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.holds_pending, 0);
    CHECK_EQ_U64(st.holds_active, 0);
    /* A new entry under the same key does not inherit the dropped holds. */
    ts_alloc_ready(c, "a", 2);
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    size_t expired;
    CHECK_OK(ect_cache_expire_holds(c, 100 * SEC, &expired));
    CHECK_EQ_U64(expired, 0);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_expired_pending_hold_does_not_pin_at_mark_ready(void)
{
    ect_cache_t *c = make_cache(4);
    CHECK_OK(ect_cache_alloc(c, "a", 2));
    uint64_t id;
    CHECK_OK(ect_cache_hold(c, "a", 5 * SEC, &id));
    size_t expired;
    CHECK_OK(ect_cache_expire_holds(c, 6 * SEC, &expired));
    CHECK_EQ_U64(expired, 1);
    CHECK_OK(ect_cache_mark_ready(c, "a"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    ect_cache_destroy(c);
}

static void
test_hold_on_absent_key_is_not_found(void)
{
    ect_cache_t *c = make_cache(4);
    uint64_t id = 42;
    CHECK_STATUS(ect_cache_hold(c, "ghost", SEC, &id), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "'ghost'");
    CHECK_EQ_U64(id, 42);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.holds_active + st.holds_pending, 0);
    ect_cache_destroy(c);
}

static void
test_expire_holds_ends_only_lapsed_leases_in_deadline_order(void)
{
    ect_cache_t *c = make_cache(8);
    const char *keys[] = {"k0", "k1", "k2", "k3"};
    uint64_t deadlines[] = {40, 10, 30, 20};
    uint64_t ids[4];
    for (int i = 0; i < 4; i++) {
        ts_alloc_ready(c, keys[i], 2);
        CHECK_OK(ect_cache_hold(c, keys[i], deadlines[i] * SEC, &ids[i]));
    }
    size_t expired;
    CHECK_OK(ect_cache_expire_holds(c, 25 * SEC, &expired));
    CHECK_EQ_U64(expired, 2);
    CHECK_EQ_INT(ts_entry_state(c, "k1"), ECT_CACHE_ENTRY_READY);
    CHECK_EQ_INT(ts_entry_state(c, "k3"), ECT_CACHE_ENTRY_READY);
    CHECK_EQ_INT(ts_entry_state(c, "k0"), ECT_CACHE_ENTRY_PINNED);
    CHECK_EQ_INT(ts_entry_state(c, "k2"), ECT_CACHE_ENTRY_PINNED);
    /* Expiry order is deadline order, so k1 (10 s) went to the FIFO before
     * k3 (20 s) and is evicted first. */
    CHECK_OK(ect_cache_alloc(c, "new", 2));
    CHECK(!ts_entry_exists(c, "k1"));
    CHECK(ts_entry_exists(c, "k3"));
    CHECK_OK(ect_cache_expire_holds(c, 25 * SEC, NULL)); /* NULL count is fine */
    CHECK_OK(ect_cache_expire_holds(c, UINT64_MAX, &expired));
    CHECK_EQ_U64(expired, 2);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.holds_expired, 4);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_hold_ids_are_unique_and_never_zero(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 1);
    uint64_t prev = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t id;
        CHECK_OK(ect_cache_hold(c, "a", SEC, &id));
        CHECK(id != 0 && id > prev);
        prev = id;
        if (i % 2 == 0)
            CHECK_OK(ect_cache_release_hold(c, id));
    }
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_U64(info.holds_active, 50);
    ect_cache_destroy(c); /* frees the 50 outstanding holds (ASan checks) */
}

static void
test_holds_mixed_with_pins_release_in_any_order(void)
{
    ect_cache_t *c = make_cache(4);
    ts_alloc_ready(c, "a", 2);
    uint64_t h1, h2;
    CHECK_OK(ect_cache_hold(c, "a", 10 * SEC, &h1));
    CHECK_OK(ect_cache_pin(c, "a"));
    CHECK_OK(ect_cache_hold(c, "a", 20 * SEC, &h2));
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "a", &info));
    CHECK_EQ_U64(info.pin_count, 3);
    CHECK_OK(ect_cache_release_hold(c, h2));
    CHECK_OK(ect_cache_unpin(c, "a"));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_PINNED);
    CHECK_OK(ect_cache_expire_holds(c, 10 * SEC, NULL));
    CHECK_EQ_INT(ts_entry_state(c, "a"), ECT_CACHE_ENTRY_READY);
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 0);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_announced_encoding_is_not_evictable),
    ECT_CASE(test_hold_is_released_once_the_read_lands),
    ECT_CASE(test_hold_lapses_when_no_consumer_ever_reads),
    ECT_CASE(test_hold_is_taken_when_a_late_save_lands),
    ECT_CASE(test_each_announcement_keeps_its_own_hold),
    ECT_CASE(test_release_hold_twice_is_not_found_and_never_double_unpins),
    ECT_CASE(test_unpin_never_drops_a_hold),
    ECT_CASE(test_discard_drops_pending_holds),
    ECT_CASE(test_expired_pending_hold_does_not_pin_at_mark_ready),
    ECT_CASE(test_hold_on_absent_key_is_not_found),
    ECT_CASE(test_expire_holds_ends_only_lapsed_leases_in_deadline_order),
    ECT_CASE(test_hold_ids_are_unique_and_never_zero),
    ECT_CASE(test_holds_mixed_with_pins_release_in_any_order),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
