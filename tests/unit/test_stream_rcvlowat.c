/*
 * The TCP stream client's receive marks (src/p2p/xport_internal.h:
 * ect__xport_stream_rcvlowat): how many times a read of 1, 8 and 32 MiB
 * wakes its receiving thread, and the function's contract over a sweep of
 * what is left.  The client and the bare TCP ceilings of `bench xport` and
 * `ectier-tcp-link` all take their marks from it.
 */
#include <stdint.h>

#include "harness.h"
#include "p2p/xport_internal.h"

#define KIB  ((uint64_t)1024)
#define MIB  (KIB * KIB)
#define TAIL (256 * KIB) /* the last bytes of a read, woken for on their own */
#define MARK (1 * MIB)   /* the most one wake-up waits for */

/* The wake-ups of a read of len bytes where each wake finds exactly its
 * mark queued (the most a wake-up can be put off). */
static unsigned
wakes_for(uint64_t len)
{
    unsigned n = 0;
    for (uint64_t left = len; left > 0; n++)
        left -= (uint64_t)ect__xport_stream_rcvlowat(left);
    return n;
}

/* Marked at 256 KiB all through, 1, 8 and 32 MiB reads woke 4, 32 and 128
 * times; in 1 MiB steps with the last 256 KiB apart, 2, 9 and 33. */
static void
test_a_read_wakes_per_mib_with_its_last_256_kib_apart(void)
{
    CHECK_EQ_U64(wakes_for(1 * MIB), 2);
    CHECK_EQ_U64(wakes_for(8 * MIB), 9);
    CHECK_EQ_U64(wakes_for(32 * MIB), 33);
    /* What a 7 KiB-block entry of 1 MiB really is (149 blocks). */
    CHECK_EQ_U64(wakes_for(149 * 7168), 2);
    /* Up to 512 KiB: one wake for the first 256 KiB, one for the rest. */
    CHECK_EQ_U64(wakes_for(TAIL), 1);
    CHECK_EQ_U64(wakes_for(TAIL + 1), 2);
    CHECK_EQ_U64(wakes_for(2 * TAIL), 2);
    CHECK_EQ_U64(ect__xport_stream_rcvlowat(2 * TAIL + 1), TAIL + 1);
    CHECK_EQ_U64(ect__xport_stream_rcvlowat(8 * MIB), MARK);
    CHECK_EQ_U64(ect__xport_stream_rcvlowat(MIB), MIB - TAIL);
}

static void
check_contract(uint64_t left)
{
    int m = ect__xport_stream_rcvlowat(left);
    CHECK(m >= 1);
    CHECK((uint64_t)m <= left);
    CHECK((uint64_t)m <= MARK);
    if (left <= TAIL)
        CHECK_EQ_U64((uint64_t)m, left); /* the tail: all of it */
    else
        CHECK(left - (uint64_t)m >= (left > 2 * TAIL ? TAIL : left - TAIL));
}

static void
test_marks_keep_their_bounds_over_a_sweep(void)
{
    for (uint64_t left = 1; left <= 4 * MIB; left += left < 8 * KIB ? 1 : 4093)
        check_contract(left);
    for (uint64_t left = 4 * MIB; left <= 1024 * MIB; left = left * 3 / 2 + 7)
        check_contract(left);
    const uint64_t edges[] = {TAIL - 1,        TAIL,           TAIL + 1,        2 * TAIL - 1,
                              2 * TAIL,        2 * TAIL + 1,   TAIL + MARK - 1, TAIL + MARK,
                              TAIL + MARK + 1, UINT64_MAX / 2, UINT64_MAX};
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
        check_contract(edges[i]);
    /* Nothing left cannot happen (the client stops at 0) but still gives a
     * mark the kernel takes. */
    CHECK_EQ_U64(ect__xport_stream_rcvlowat(0), 1);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_a_read_wakes_per_mib_with_its_last_256_kib_apart),
    ECT_CASE(test_marks_keep_their_bounds_over_a_sweep),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
