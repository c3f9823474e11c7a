/*
 * Extents (SPEC §5 "beyond the seed"): entries take runs of consecutive
 * block ids, one run when a free run fits (best fit), else the fewest runs;
 * freed runs coalesce with their neighbours.  Holes are made by discarding
 * not-ready entries, which frees exactly their blocks.
 */
#include <ectier/cache.h>

#include "cache/cache_internal.h"
#include "cache/extent.h"
#include "support/cache.h"
#include "harness.h"

static ect_cache_t *
make_cache(uint64_t num_blocks)
{
    ect_cache_t *c = NULL;
    CHECK_OK(ect_cache_create(num_blocks, &c));
    return c;
}

static ect_cache_stats_t
stats(ect_cache_t *c)
{
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    return st;
}

/* Fill the cache with entries "f0".. of the given sizes, in order from block
 * 0, then discard those marked in hole[] to leave free runs of their size. */
static void
carve(ect_cache_t *c, const uint64_t *sizes, const int *hole, int n)
{
    char key[16];
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "f%d", i);
        CHECK_OK(ect_cache_alloc(c, key, sizes[i]));
        ect_run_t runs[TS_MAX_RUNS];
        CHECK_EQ_U64(ts_entry_runs(c, key, runs), 1);
        CHECK_EQ_U64(runs[0].first, at); /* a fresh cache fills from block 0 */
        at += sizes[i];
    }
    for (int i = 0; i < n; i++) {
        if (!hole[i])
            continue;
        snprintf(key, sizeof(key), "f%d", i);
        CHECK_OK(ect_cache_discard(c, key));
    }
}

static void
test_fresh_cache_gives_one_run(void)
{
    ect_cache_t *c = make_cache(1000);
    CHECK_OK(ect_cache_alloc(c, "a", 1000));
    ect_run_t runs[TS_MAX_RUNS];
    CHECK_EQ_U64(ts_entry_runs(c, "a", runs), 1);
    CHECK_EQ_U64(runs[0].first, 0);
    CHECK_EQ_U64(runs[0].count, 1000);
    ect_cache_destroy(c);
}

static void
test_alloc_takes_the_best_fitting_free_run(void)
{
    /* Blocks: [f0 5][f1 1][f2 3][f3 1][f4 8][f5 1] with holes f0, f2, f4. */
    ect_cache_t *c = make_cache(19);
    uint64_t sizes[] = {5, 1, 3, 1, 8, 1};
    int hole[] = {1, 0, 1, 0, 1, 0};
    carve(c, sizes, hole, 6);
    CHECK_EQ_U64(stats(c).free_runs, 3);
    ect_run_t runs[TS_MAX_RUNS];
    CHECK_OK(ect_cache_alloc(c, "three", 3)); /* exactly the 3-block hole at 6 */
    CHECK_EQ_U64(ts_entry_runs(c, "three", runs), 1);
    CHECK_EQ_U64(runs[0].first, 6);
    CHECK_OK(ect_cache_alloc(c, "four", 4)); /* smallest hole >= 4: the 5 at 0 */
    CHECK_EQ_U64(ts_entry_runs(c, "four", runs), 1);
    CHECK_EQ_U64(runs[0].first, 0);
    CHECK_OK(ect_cache_alloc(c, "six", 6)); /* only the 8 at 10 fits */
    CHECK_EQ_U64(ts_entry_runs(c, "six", runs), 1);
    CHECK_EQ_U64(runs[0].first, 10);
    CHECK_EQ_U64(stats(c).free_runs, 2); /* the ends of the 5 and 8 holes */
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_fragmented_space_gives_fewest_runs_largest_first(void)
{
    /* Holes of 2, 4, 3 and 1 blocks; 10 free in all. */
    ect_cache_t *c = make_cache(14);
    uint64_t sizes[] = {2, 1, 4, 1, 3, 1, 1, 1};
    int hole[] = {1, 0, 1, 0, 1, 0, 1, 0};
    carve(c, sizes, hole, 8);
    CHECK_EQ_U64(stats(c).free_blocks, 10);
    CHECK_EQ_U64(stats(c).largest_free_run, 4);
    /* 6 blocks: the 4 whole, then the best fit for 2 (the 2, not the 3). */
    CHECK_OK(ect_cache_alloc(c, "six", 6));
    ect_run_t runs[TS_MAX_RUNS];
    CHECK_EQ_U64(ts_entry_runs(c, "six", runs), 2);
    CHECK_EQ_U64(runs[0].first, 0); /* sorted by first id */
    CHECK_EQ_U64(runs[0].count, 2);
    CHECK_EQ_U64(runs[1].first, 3);
    CHECK_EQ_U64(runs[1].count, 4);
    /* The 3 and the 1 are left; 4 blocks need both. */
    CHECK_OK(ect_cache_alloc(c, "four", 4));
    CHECK_EQ_U64(ts_entry_runs(c, "four", runs), 2);
    CHECK_EQ_U64(runs[0].first, 8);
    CHECK_EQ_U64(runs[0].count, 3);
    CHECK_EQ_U64(runs[1].first, 12);
    CHECK_EQ_U64(runs[1].count, 1);
    CHECK_EQ_U64(stats(c).free_blocks, 0);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_multi_run_entry_ids_are_ascending(void)
{
    ect_cache_t *c = make_cache(64);
    /* Alternate 1-block holes and keepers, then take all 32 holes. */
    char key[16];
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof(key), "b%d", i);
        CHECK_OK(ect_cache_alloc(c, key, 1));
    }
    for (int i = 0; i < 64; i += 2) {
        snprintf(key, sizeof(key), "b%d", i);
        CHECK_OK(ect_cache_discard(c, key));
    }
    CHECK_OK(ect_cache_alloc(c, "scattered", 32));
    uint64_t ids[64];
    CHECK_EQ_U64(ts_entry_ids(c, "scattered", ids, 64), 32);
    for (int i = 0; i < 32; i++)
        CHECK_EQ_U64(ids[i], (uint64_t)(2 * i));
    ect_cache_stats_t st = stats(c);
    CHECK_EQ_U64(st.runs_histogram[6], 1); /* > 16 runs */
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_freed_runs_coalesce_with_both_neighbours(void)
{
    ect_cache_t *c = make_cache(30);
    uint64_t sizes[] = {10, 10, 10};
    int none[] = {0, 0, 0};
    carve(c, sizes, none, 3);
    CHECK_EQ_U64(stats(c).free_runs, 0);
    CHECK_OK(ect_cache_discard(c, "f0"));
    CHECK_OK(ect_cache_discard(c, "f2"));
    CHECK_EQ_U64(stats(c).free_runs, 2);
    CHECK_EQ_U64(stats(c).largest_free_run, 10);
    CHECK_OK(ect_cache_discard(c, "f1")); /* joins both neighbours */
    CHECK_EQ_U64(stats(c).free_runs, 1);
    CHECK_EQ_U64(stats(c).largest_free_run, 30);
    CHECK_OK(ect_cache_alloc(c, "all", 30));
    ect_run_t runs[TS_MAX_RUNS];
    CHECK_EQ_U64(ts_entry_runs(c, "all", runs), 1);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_after_fragmentation_runs_coalesce_on_free(void)
{
    /* Fragment with many small entries, then free them all in a scattered
     * order: the free space must end as one run again. */
    ect_cache_t *c = make_cache(200);
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "s%d", i);
        CHECK_OK(ect_cache_alloc(c, key, 2));
    }
    for (int step = 0; step < 100; step++) {
        int i = (step * 37) % 100; /* 37 is coprime to 100: every index once */
        snprintf(key, sizeof(key), "s%d", i);
        CHECK_OK(ect_cache_discard(c, key));
        if (step % 10 == 0)
            CHECK_OK(ect__cache_check(c));
    }
    ect_cache_stats_t st = stats(c);
    CHECK_EQ_U64(st.free_runs, 1);
    CHECK_EQ_U64(st.largest_free_run, 200);
    ect_cache_destroy(c);
}

static void
test_eviction_of_a_multi_run_entry_frees_every_run(void)
{
    ect_cache_t *c = make_cache(10);
    uint64_t sizes[] = {3, 1, 3, 3};
    int hole[] = {1, 0, 1, 0};
    carve(c, sizes, hole, 4);
    CHECK_OK(ect_cache_alloc(c, "split", 6));
    ect_run_t runs[TS_MAX_RUNS];
    CHECK_EQ_U64(ts_entry_runs(c, "split", runs), 2);
    CHECK_OK(ect_cache_mark_ready(c, "split"));
    CHECK_OK(ect_cache_discard(c, "f1"));
    CHECK_OK(ect_cache_discard(c, "f3"));
    /* 4 blocks free (1 + 3); 10 needs split evicted, which restores one run. */
    CHECK_OK(ect_cache_alloc(c, "whole", 10));
    CHECK_EQ_U64(ts_entry_runs(c, "whole", runs), 1);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

static void
test_runs_histogram_counts_live_entries_by_runs(void)
{
    ect_cache_t *c = make_cache(40);
    /* Ten 1-block holes separated by 3-block keepers. */
    char key[16];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "h%d", i);
        CHECK_OK(ect_cache_alloc(c, key, 1));
        snprintf(key, sizeof(key), "k%d", i);
        CHECK_OK(ect_cache_alloc(c, key, 3));
    }
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof(key), "h%d", i);
        CHECK_OK(ect_cache_discard(c, key));
    }
    CHECK_OK(ect_cache_alloc(c, "r2", 2));
    CHECK_OK(ect_cache_alloc(c, "r3", 3));
    CHECK_OK(ect_cache_alloc(c, "r5", 5));
    ect_cache_stats_t st = stats(c);
    CHECK_EQ_U64(st.runs_histogram[0], 10); /* the keepers */
    CHECK_EQ_U64(st.runs_histogram[1], 1);
    CHECK_EQ_U64(st.runs_histogram[2], 1);
    CHECK_EQ_U64(st.runs_histogram[3], 0);
    CHECK_EQ_U64(st.runs_histogram[4], 1);
    CHECK_OK(ect_cache_discard(c, "r5"));
    st = stats(c);
    CHECK_EQ_U64(st.runs_histogram[4], 0);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

/* The allocator on its own: plan, reserve, take and give agree. */
static void
test_extents_plan_matches_take(void)
{
    struct ect__extents x;
    CHECK_OK(ect__extents_init(&x, 100));
    ect_run_t a, b[8];
    CHECK_EQ_U64(ect__extents_plan(&x, 10), 1);
    CHECK_OK(ect__extents_reserve(&x, 1));
    ect__extents_take(&x, 10, &a, 1); /* [0, 10) */
    ect_run_t keep;
    CHECK_OK(ect__extents_reserve(&x, 1));
    ect__extents_take(&x, 85, &keep, 1); /* [10, 95); 5 free at the end */
    ect__extents_give(&x, &a, 1);        /* 10 free at the start */
    CHECK_EQ_U64(ect__extents_free_runs(&x), 2);
    size_t k = ect__extents_plan(&x, 12);
    CHECK_EQ_U64(k, 2);
    CHECK_OK(ect__extents_reserve(&x, k));
    ect__extents_take(&x, 12, b, k);
    CHECK_EQ_U64(b[0].first, 0);
    CHECK_EQ_U64(b[0].count, 10);
    CHECK_EQ_U64(b[1].first, 95);
    CHECK_EQ_U64(b[1].count, 2);
    CHECK_EQ_INT(ect__extents_check(&x), 0);
    ect__extents_give(&x, b, k);
    ect__extents_give(&x, &keep, 1);
    CHECK_EQ_U64(ect__extents_free_runs(&x), 1);
    CHECK_EQ_U64(ect__extents_largest(&x), 100);
    CHECK_EQ_INT(ect__extents_check(&x), 0);
    ect__extents_cleanup(&x);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_fresh_cache_gives_one_run),
    ECT_CASE(test_alloc_takes_the_best_fitting_free_run),
    ECT_CASE(test_fragmented_space_gives_fewest_runs_largest_first),
    ECT_CASE(test_multi_run_entry_ids_are_ascending),
    ECT_CASE(test_freed_runs_coalesce_with_both_neighbours),
    ECT_CASE(test_after_fragmentation_runs_coalesce_on_free),
    ECT_CASE(test_eviction_of_a_multi_run_entry_frees_every_run),
    ECT_CASE(test_runs_histogram_counts_live_entries_by_runs),
    ECT_CASE(test_extents_plan_matches_take),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
