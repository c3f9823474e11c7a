/*
 * How the CPU copy engine cuts a batch into pieces (src/copy/cpu.h:
 * ect__copy_cpu_piece_bytes): its contract over a sweep of sizes, copier
 * counts and split sizes, the counts that matter on real machines (three
 * copiers on a host with CPUs to spare, two on a 2-CPU VM), and that a real
 * engine cuts its batches that way.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/ectier.h>

#include "copy/cpu.h"
#include "harness.h"
#include "support/util.h"

#define KIB            ((size_t)1024)
#define MIB            (KIB * KIB)
#define PARALLEL       (256 * KIB) /* below this a batch that fits split_bytes is one piece */
#define SMALLEST       (128 * KIB) /* the smallest piece where split_bytes allows it (a thread polls) */
#define SMALLEST_WOKEN (64 * KIB) /* the same when every copy thread is woken */
#define WOKEN_CUT_MAX  (4 * MIB)  /* ... for a batch under this */
#define PAGE           (4 * KIB)

static size_t
pieces_of(size_t total, size_t chunk)
{
    return total / chunk + (total % chunk != 0);
}

/* v rounded up to a multiple of `to`; SIZE_MAX where that overflows. */
static size_t
round_up(size_t v, size_t to)
{
    return v > SIZE_MAX - to ? SIZE_MAX : (v + to - 1) / to * to;
}

/* 1 MiB over the three copiers of a host with CPUs to spare (two copy
 * threads and the caller) is two rounds of three pieces when a thread
 * polls.  Sized at total / 6 rounded down, it was seven pieces, the seventh
 * a round of its own. */
static void
test_a_mib_over_three_copiers_is_two_whole_rounds(void)
{
    size_t chunk = ect__copy_cpu_piece_bytes(MIB, 3, MIB, false);
    CHECK_EQ_U64(pieces_of(MIB, chunk), 6);
    CHECK_EQ_U64(chunk % PAGE, 0);
    /* 8 and 32 MiB in pieces of at most 1 MiB: nine and 33, whole rounds. */
    CHECK_EQ_U64(pieces_of(8 * MIB, ect__copy_cpu_piece_bytes(8 * MIB, 3, MIB, false)), 9);
    CHECK_EQ_U64(pieces_of(32 * MIB, ect__copy_cpu_piece_bytes(32 * MIB, 3, MIB, false)), 33);
    /* The 2-CPU VM's two copiers: 4, 8 and 32 pieces, as before. */
    CHECK_EQ_U64(ect__copy_cpu_piece_bytes(MIB, 2, MIB, false), 256 * KIB);
    CHECK_EQ_U64(ect__copy_cpu_piece_bytes(8 * MIB, 2, MIB, false), MIB);
    CHECK_EQ_U64(ect__copy_cpu_piece_bytes(32 * MIB, 2, MIB, false), MIB);
    /* 300 KiB over two copiers: two pieces of 150 KiB, not three of 100
     * (below the smallest piece). */
    CHECK_EQ_U64(pieces_of(300 * KIB, ect__copy_cpu_piece_bytes(300 * KIB, 2, MIB, false)), 2);
}

/* Copy threads that must be woken start late: batches under 4 MiB in
 * smaller pieces, eight a copier where pieces of 64 KiB allow. */
static void
test_a_batch_for_woken_threads_is_cut_finer(void)
{
    /* 1 MiB over three copiers: sixteen pieces of 64 KiB (24 would be
     * smaller; 18, whole rounds, too). */
    CHECK_EQ_U64(ect__copy_cpu_piece_bytes(MIB, 3, MIB, true), 64 * KIB);
    /* The 1 MiB of 7 KiB blocks the benchmarks move (146 blocks): 15
     * pieces fit, five whole rounds, each page-aligned. */
    CHECK_EQ_U64(pieces_of(146 * 7168, ect__copy_cpu_piece_bytes(146 * 7168, 3, MIB, true)), 15);
    /* 2 MiB: eight a copier (24). */
    CHECK_EQ_U64(pieces_of(2 * MIB, ect__copy_cpu_piece_bytes(2 * MIB, 3, MIB, true)), 24);
    /* From 4 MiB up the coarse cut: 8 and 32 MiB as for a polling thread. */
    CHECK_EQ_U64(ect__copy_cpu_piece_bytes(4 * MIB, 3, MIB, true),
                 ect__copy_cpu_piece_bytes(4 * MIB, 3, MIB, false));
    CHECK_EQ_U64(pieces_of(8 * MIB, ect__copy_cpu_piece_bytes(8 * MIB, 3, MIB, true)), 9);
    CHECK_EQ_U64(pieces_of(32 * MIB, ect__copy_cpu_piece_bytes(32 * MIB, 3, MIB, true)), 33);
    /* Two copiers: 1 MiB in sixteen pieces of 64 KiB. */
    CHECK_EQ_U64(ect__copy_cpu_piece_bytes(MIB, 2, MIB, true), 64 * KIB);
    /* Under 256 KiB a batch is still one piece. */
    CHECK_EQ_U64(ect__copy_cpu_piece_bytes(200 * KIB, 3, MIB, true), 200 * KIB);
}

static void
check_contract(size_t total, unsigned copiers, size_t split, bool woken)
{
    size_t chunk = ect__copy_cpu_piece_bytes(total, copiers, split, woken);
    bool fine = woken && total < WOKEN_CUT_MAX;
    size_t smallest = fine ? SMALLEST_WOKEN : SMALLEST;
    CHECK_MSG(chunk >= 1, "total %zu copiers %u split %zu: chunk 0", total, copiers, split);
    if (total < PARALLEL && total <= split) {
        CHECK_MSG(chunk == (total > 0 ? total : 1), "total %zu split %zu: not one piece (%zu)",
                  total, split, chunk);
        return;
    }
    size_t n = pieces_of(total, chunk);
    CHECK_MSG(chunk % PAGE == 0, "total %zu copiers %u split %zu: chunk %zu not whole pages", total,
              copiers, split, chunk);
    CHECK_MSG(chunk <= round_up(split, PAGE), "total %zu copiers %u split %zu: chunk %zu too big",
              total, copiers, split, chunk);
    size_t fewest = pieces_of(total, split);
    size_t want = (fine ? 8 : 2) * (size_t)copiers;
    /* Past this many pieces, rounding them up to whole pages may take one
     * off the count (a page is 1/32 of the smallest piece, or 1/16). */
    size_t exact_max = fine ? 16 : 32;
    if (split >= total && total >= want * smallest && want <= exact_max) {
        /* Nothing bounds the count: two (or eight) pieces a copier, exactly. */
        CHECK_MSG(n == want, "total %zu copiers %u: %zu pieces, %zu wanted", total, copiers, n,
                  want);
    }
    if (split >= smallest && fewest <= total / smallest) {
        /* split_bytes leaves room: no piece but the last below the smallest. */
        CHECK_MSG(chunk >= smallest, "total %zu copiers %u split %zu: chunk %zu below %zu", total,
                  copiers, split, chunk, smallest);
        CHECK_MSG(n <= (want > fewest ? want : fewest) + copiers,
                  "total %zu copiers %u split %zu: %zu pieces", total, copiers, split, n);
    }
    size_t rounds_pieces = (fewest + copiers - 1) / copiers * copiers;
    if (copiers > 1 && fewest > want && split < total && total / rounds_pieces >= smallest &&
        rounds_pieces <= exact_max) {
        /* split_bytes forces more than two a copier: whole rounds. */
        CHECK_MSG(n % copiers == 0, "total %zu copiers %u split %zu: %zu pieces, not whole rounds",
                  total, copiers, split, n);
    }
}

/* The contract over sizes from a byte to 96 MiB (round and odd), 1 to 17
 * copiers, and split sizes from the smallest allowed to none at all. */
static void
test_pieces_keep_their_bounds_over_a_sweep(void)
{
    static const size_t splits[] = {4 * KIB,   5000, 64 * KIB, 128 * KIB,
                                    200 * KIB, MIB,  4 * MIB,  SIZE_MAX};
    uint64_t rs = 0x243f6a8885a308d3ull;
    size_t checked = 0;
    for (size_t s = 0; s < sizeof(splits) / sizeof(splits[0]); s++) {
        for (unsigned copiers = 1; copiers <= 17; copiers++) {
            for (int woken = 0; woken < 2; woken++) {
                for (size_t total = 1; total <= 96 * MIB; total = total * 2 + (total > 1)) {
                    check_contract(total, copiers, splits[s], woken);
                    check_contract(total + ts_xorshift64(&rs) % (total + 1), copiers, splits[s],
                                   woken);
                    checked += 2;
                }
                for (size_t total = 64 * KIB; total <= 3 * MIB; total += 61 * KIB) {
                    check_contract(total, copiers, splits[s], woken);
                    checked++;
                }
            }
        }
    }
    CHECK(checked > 10000);
}

/* A real engine cuts a batch as the function says: held, a 1 MiB batch
 * stays queued, and the caller's help copies every piece of it. */
static void
test_an_engine_cuts_its_batches_as_the_function_says(void)
{
    ect_copy_cpu_params_t params = {.threads = 2};
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(&params, &e));
    unsigned char *src = ts_xmalloc(MIB), *dst = calloc(1, MIB);
    CHECK(dst != NULL);
    ts_fill_nonzero(src, MIB, 7);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    ect_copy_op_t op = {dst, src, MIB};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
    struct ect__copy_cpu_stats before, after;
    CHECK_OK(ect__copy_cpu_stats(e, &before));
    uint64_t ticket;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &ticket));
    CHECK_OK(ect__copy_cpu_help(e, ticket));
    CHECK_OK(ect__copy_cpu_stats(e, &after));
    /* Held, no copy thread polls: the cut for woken threads, where the
     * CPUs leave them room (ect__copy_cpu_cpus_to_spare; not on a 2-CPU
     * machine). */
    size_t chunk = ect__copy_cpu_piece_bytes(MIB, ect__copy_cpu_copiers(2), MIB,
                                             ect__copy_cpu_cpus_to_spare(2));
    CHECK_EQ_U64(after.pieces_by_waiters - before.pieces_by_waiters, pieces_of(MIB, chunk));
    CHECK_EQ_U64(after.pieces_by_threads, before.pieces_by_threads);
    CHECK(memcmp(dst, src, MIB) == 0);
    CHECK_OK(ect_copy_engine_query(e, ticket));
    CHECK_OK(ect__copy_cpu_hold(e, false));
    ect_copy_engine_destroy(e);
    free(src);
    free(dst);
}

/* Pieces copied by anyone (threads and waiters) between two stats. */
static uint64_t
pieces_between(const struct ect__copy_cpu_stats *a, const struct ect__copy_cpu_stats *b)
{
    return b->pieces_by_threads - a->pieces_by_threads + b->pieces_by_waiters -
           a->pieces_by_waiters;
}

/* Which machines cut batches for woken threads finer: those whose CPUs
 * outnumber the copiers by two, the same rule as the consumer's prewake. */
static void
test_the_finer_cut_needs_cpus_to_spare(void)
{
    unsigned cpus = ect__copy_cpu_usable_cpus();
    CHECK(ect__copy_cpu_cpus_to_spare(2) == (cpus >= ect__copy_cpu_copiers(2) + 2));
    /* Two copy threads on 2 CPUs: one woken at once plus the caller fill them. */
    if (cpus <= 3)
        CHECK(!ect__copy_cpu_cpus_to_spare(2));
    if (cpus >= 5)
        CHECK(ect__copy_cpu_cpus_to_spare(2));
}

/* A batch queued behind another (a burst) gets the coarse cut: copiers
 * that come free take its pieces as they come, so finer ones would only
 * cost claims. */
static void
test_a_batch_behind_another_is_cut_coarse(void)
{
    ect_copy_cpu_params_t params = {.threads = 2};
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(&params, &e));
    unsigned char *src = ts_xmalloc(2 * MIB), *dst = calloc(1, 2 * MIB);
    CHECK(dst != NULL);
    ts_fill_nonzero(src, 2 * MIB, 11);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    ect_copy_op_t ops[2] = {{dst, src, MIB}, {dst + MIB, src + MIB, MIB}};
    ect_copy_batch_t first = {.dir = ECT_COPY_LOAD, .ops = &ops[0], .n_ops = 1};
    ect_copy_batch_t second = {.dir = ECT_COPY_LOAD, .ops = &ops[1], .n_ops = 1};
    uint64_t t1, t2;
    CHECK_OK(ect_copy_engine_submit(e, &first, &t1));
    CHECK_OK(ect_copy_engine_submit(e, &second, &t2));
    struct ect__copy_cpu_stats before, after;
    CHECK_OK(ect__copy_cpu_stats(e, &before));
    CHECK_OK(ect__copy_cpu_help(e, t2)); /* only the second batch's pieces */
    CHECK_OK(ect__copy_cpu_stats(e, &after));
    unsigned copiers = ect__copy_cpu_copiers(2);
    CHECK_EQ_U64(pieces_between(&before, &after),
                 pieces_of(MIB, ect__copy_cpu_piece_bytes(MIB, copiers, MIB, false)));
    CHECK_OK(ect__copy_cpu_stats(e, &before));
    CHECK_OK(ect__copy_cpu_help(e, t1));
    CHECK_OK(ect__copy_cpu_stats(e, &after));
    CHECK_EQ_U64(pieces_between(&before, &after),
                 pieces_of(MIB, ect__copy_cpu_piece_bytes(MIB, copiers, MIB,
                                                          ect__copy_cpu_cpus_to_spare(2))));
    CHECK(memcmp(dst, src, 2 * MIB) == 0);
    CHECK_OK(ect_copy_engine_query(e, t1));
    CHECK_OK(ect_copy_engine_query(e, t2));
    CHECK_OK(ect__copy_cpu_hold(e, false));
    ect_copy_engine_destroy(e);
    free(src);
    free(dst);
}

/* A batch that finds a copy thread polling gets the coarse cut: that
 * thread starts at once.  The threads copy an 8 MiB batch alone (the
 * caller only queries), then poll for spin_us (100 ms here) for the next. */
static void
test_a_batch_a_thread_polls_for_is_cut_coarse(void)
{
    ect_copy_cpu_params_t params = {.threads = 2, .spin_us = 100000};
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(&params, &e));
    unsigned char *src = ts_xmalloc(8 * MIB), *dst = calloc(1, 8 * MIB);
    CHECK(dst != NULL);
    ts_fill_nonzero(src, 8 * MIB, 13);
    ect_copy_op_t op = {dst, src, 8 * MIB};
    ect_copy_batch_t big = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    uint64_t ticket;
    CHECK_OK(ect_copy_engine_submit(e, &big, &ticket));
    ect_status_t st;
    while ((st = ect_copy_engine_query(e, ticket)) == ECT_ERR_BUSY)
        ;
    CHECK_OK(st);
    struct ect__copy_cpu_stats before, after;
    CHECK_OK(ect__copy_cpu_stats(e, &before));
    CHECK(before.threads_asleep < before.threads); /* one polls */
    ect_copy_op_t small = {dst, src + MIB, MIB};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &small, .n_ops = 1};
    CHECK_OK(ect_copy_engine_submit(e, &batch, &ticket));
    CHECK_OK(ect_copy_engine_wait(e, ticket));
    CHECK_OK(ect__copy_cpu_stats(e, &after));
    CHECK_EQ_U64(
        pieces_between(&before, &after),
        pieces_of(MIB, ect__copy_cpu_piece_bytes(MIB, ect__copy_cpu_copiers(2), MIB, false)));
    CHECK(memcmp(dst, src + MIB, MIB) == 0);
    ect_copy_engine_destroy(e);
    free(src);
    free(dst);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_a_mib_over_three_copiers_is_two_whole_rounds),
    ECT_CASE(test_a_batch_for_woken_threads_is_cut_finer),
    ECT_CASE(test_pieces_keep_their_bounds_over_a_sweep),
    ECT_CASE(test_an_engine_cuts_its_batches_as_the_function_says),
    ECT_CASE(test_the_finer_cut_needs_cpus_to_spare),
    ECT_CASE(test_a_batch_behind_another_is_cut_coarse),
    ECT_CASE(test_a_batch_a_thread_polls_for_is_cut_coarse),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
