/* The CPU copy engine's ticket table (src/copy/tickets.c) against a model:
 * tickets are issued in order and retired in any order, as the engine does,
 * across growth and the wrap-around of probe chains. */
#include <stdint.h>
#include <stdlib.h>

#include "copy/tickets.h"
#include "harness.h"
#include "support/util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t
rng(void)
{
    return ts_xorshift64(&rng_state);
}

/* The value stored for ticket t: any non-NULL pointer unique to t. */
static void *
value_of(uint64_t t)
{
    return (void *)(uintptr_t)(t * 16 + 8);
}

static void
test_tickets_are_found_until_removed_in_any_order(void)
{
    enum { N = 5000 };
    static uint8_t live[N + 1];
    struct ect__tickets t;
    CHECK_OK(ect__tickets_init(&t, 4));
    uint64_t next = 1, issued = 0, grown = 0;
    size_t n_live = 0;
    for (int round = 0; round < 40000; round++) {
        /* Issue while fewer than 300 are live (or at random), else retire
         * a random live one: long-lived tickets sit beside fresh ones. */
        if (next <= N && (n_live < 300 || rng() % 2 == 0)) {
            bool grew;
            CHECK_OK(ect__tickets_reserve(&t, &grew));
            grown += grew;
            ect__tickets_insert(&t, next, value_of(next));
            live[next] = 1;
            n_live++;
            issued++;
            next++;
        } else if (n_live > 0) {
            uint64_t k;
            do
                k = 1 + rng() % (next - 1);
            while (!live[k]);
            size_t slot;
            CHECK(ect__tickets_find(&t, k, &slot) == value_of(k));
            ect__tickets_remove_at(&t, slot);
            live[k] = 0;
            n_live--;
        }
        if (round % 997 == 0) {
            /* Every live ticket is found, no retired one is. */
            for (uint64_t k = 1; k < next; k++) {
                size_t slot;
                CHECK(ect__tickets_find(&t, k, &slot) == (live[k] ? value_of(k) : NULL));
            }
        }
        CHECK_EQ_U64(t.count, n_live);
        CHECK(t.count * 2 <= t.cap);
    }
    CHECK_EQ_U64(issued, N);
    CHECK(grown > 0);
    ect__tickets_cleanup(&t);
}

static void
test_removal_shifts_a_chain_that_wraps_around_the_end(void)
{
    /* cap 8: tickets 7, 15 and 23 all start at slot 7, so 15 and 23 wrap
     * to slots 0 and 1.  Removing 7 must move both up; removing then 15
     * must leave 23 reachable. */
    struct ect__tickets t;
    CHECK_OK(ect__tickets_init(&t, 8));
    uint64_t k[] = {7, 15, 23};
    for (int i = 0; i < 3; i++) {
        bool grew;
        CHECK_OK(ect__tickets_reserve(&t, &grew));
        CHECK(!grew);
        ect__tickets_insert(&t, k[i], value_of(k[i]));
    }
    size_t slot;
    CHECK(ect__tickets_find(&t, 7, &slot) == value_of(7));
    CHECK_EQ_U64(slot, 7);
    CHECK(ect__tickets_find(&t, 23, &slot) == value_of(23));
    CHECK_EQ_U64(slot, 1);
    ect__tickets_find(&t, 7, &slot);
    ect__tickets_remove_at(&t, slot);
    CHECK(ect__tickets_find(&t, 15, &slot) == value_of(15));
    CHECK_EQ_U64(slot, 7);
    CHECK(ect__tickets_find(&t, 23, &slot) == value_of(23));
    CHECK_EQ_U64(slot, 0);
    ect__tickets_find(&t, 15, &slot);
    ect__tickets_remove_at(&t, slot);
    CHECK(ect__tickets_find(&t, 23, &slot) == value_of(23));
    CHECK(ect__tickets_find(&t, 7, &slot) == NULL);
    CHECK(ect__tickets_find(&t, 15, &slot) == NULL);
    CHECK_EQ_U64(t.count, 1);
    ect__tickets_cleanup(&t);
}

static int visited;

static void
count_value(void *v)
{
    CHECK(v != NULL);
    visited++;
}

static void
test_each_visits_every_live_value_once(void)
{
    struct ect__tickets t;
    CHECK_OK(ect__tickets_init(&t, 2));
    for (uint64_t k = 1; k <= 100; k++) {
        bool grew;
        CHECK_OK(ect__tickets_reserve(&t, &grew));
        ect__tickets_insert(&t, k, value_of(k));
    }
    for (uint64_t k = 1; k <= 100; k += 3) {
        size_t slot;
        ect__tickets_find(&t, k, &slot);
        ect__tickets_remove_at(&t, slot);
    }
    visited = 0;
    ect__tickets_each(&t, count_value);
    CHECK_EQ_INT(visited, 100 - 34);
    ect__tickets_cleanup(&t);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_tickets_are_found_until_removed_in_any_order),
    ECT_CASE(test_removal_shifts_a_chain_that_wraps_around_the_end),
    ECT_CASE(test_each_visits_every_live_value_once),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
