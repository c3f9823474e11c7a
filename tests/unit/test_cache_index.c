/*
 * The cache's key index (src/cache/index.c) on its own, with entries whose
 * hashes the test chooses: many keys sharing a home bucket, so probes run
 * past full buckets, overflow counts rise and fall, a count saturates, and
 * the table grows under them.  The cache-level tests reach the index only
 * through SipHash with a random key, which never builds such chains.
 */
#include "cache/cache_internal.h"
#include "harness.h"

enum { N = 300 }; /* > 255 in one home bucket: its overflow count saturates */

static struct ect__entry *
make_entry(int i, uint64_t hash)
{
    char key[32];
    int len = snprintf(key, sizeof(key), "key-%d", i);
    struct ect__entry *e = calloc(1, sizeof(*e) + (size_t)len + 1);
    CHECK(e != NULL);
    memcpy(e->key, key, (size_t)len + 1);
    e->key_len = (uint16_t)len;
    e->hash = hash;
    return e;
}

static struct ect__entry *
find(struct ect__index *ix, const struct ect__entry *e)
{
    return ect__index_find(ix, e->key, e->key_len, e->hash);
}

static void
test_one_home_bucket_overflows_grows_and_empties(void)
{
    struct ect__index ix;
    CHECK_OK(ect__index_init(&ix));
    static struct ect__entry *e[N];
    /* The low 32 bits pick the home bucket: 0 for every entry, at every
     * table size; the top bits give them different tags. */
    for (int i = 0; i < N; i++) {
        e[i] = make_entry(i, (uint64_t)(i + 1) << 32 | (uint64_t)i << 57);
        CHECK_OK(ect__index_reserve(&ix));
        ect__index_insert(&ix, e[i]);
        CHECK_MSG(find(&ix, e[i]) == e[i], "entry %d not found after its insert", i);
    }
    CHECK_OK(ect__index_check(&ix));
    for (int i = 0; i < N; i++)
        CHECK_MSG(find(&ix, e[i]) == e[i], "entry %d lost", i);
    /* An absent key with the same home and a tag of a present one: the
     * probe reads on past full buckets and must end, not find anything. */
    struct ect__entry *absent = make_entry(N + 1, (uint64_t)77 << 32 | (uint64_t)3 << 57);
    CHECK(find(&ix, absent) == NULL);
    /* Remove the first entries (those in the home bucket and the next):
     * the displaced ones behind them must still be found. */
    for (int i = 0; i < 20; i++)
        ect__index_remove(&ix, e[i]);
    CHECK_OK(ect__index_check(&ix));
    for (int i = 0; i < N; i++)
        CHECK_MSG((find(&ix, e[i]) == e[i]) == (i >= 20), "entry %d after removals", i);
    /* Freed slots are reused: no tombstones. */
    size_t used = ix.tab[0].used + ix.tab[1].used;
    for (int i = 0; i < 20; i++) {
        CHECK_OK(ect__index_reserve(&ix));
        ect__index_insert(&ix, e[i]);
    }
    CHECK_EQ_U64(ix.tab[0].used + ix.tab[1].used, used + 20);
    CHECK_OK(ect__index_check(&ix));
    /* Everything out: counts that saturated stay at 255, the others come
     * back to 0, and lookups still end. */
    CHECK(ix.tab[1].slots == NULL); /* no rehash left: one table to look at */
    size_t n_buckets = ix.tab[0].size, saturated = 0, counted = 0;
    uint8_t *before = malloc(n_buckets);
    CHECK(before != NULL);
    for (size_t b = 0; b < n_buckets; b++) {
        before[b] = ix.tab[0].ctrl[b].overflow;
        saturated += before[b] == 255;
        counted += before[b] > 0 && before[b] < 255;
    }
    CHECK(saturated > 0 && counted > 0);
    for (int i = N - 1; i >= 0; i--)
        ect__index_remove(&ix, e[i]);
    for (size_t b = 0; b < n_buckets; b++)
        CHECK_EQ_INT(ix.tab[0].ctrl[b].overflow, before[b] == 255 ? 255 : 0);
    free(before);
    CHECK_EQ_U64(ix.tab[0].used + ix.tab[1].used, 0);
    CHECK_OK(ect__index_check(&ix));
    for (int i = 0; i < N; i++)
        CHECK(find(&ix, e[i]) == NULL);
    ect__index_cleanup(&ix);
    for (int i = 0; i < N; i++)
        free(e[i]);
    free(absent);
}

static void
test_lookups_find_entries_in_both_tables_mid_rehash(void)
{
    /* Fill until a rehash starts, then check every entry at each step of
     * it, with entries that collide in the old table's buckets but spread
     * in the new one. */
    struct ect__index ix;
    CHECK_OK(ect__index_init(&ix));
    enum { M = 2000 };
    static struct ect__entry *e[M];
    int saw_rehash = 0;
    for (int i = 0; i < M; i++) {
        e[i] = make_entry(i, (uint64_t)i * 0x9E3779B97F4A7C15ull);
        CHECK_OK(ect__index_reserve(&ix));
        ect__index_insert(&ix, e[i]);
        if (ix.tab[1].slots != NULL) {
            saw_rehash = 1;
            for (int k = 0; k <= i; k += 1 + i / 50)
                CHECK_MSG(find(&ix, e[k]) == e[k], "entry %d lost mid-rehash at %d", k, i);
            if (i % 64 == 0)
                CHECK_OK(ect__index_check(&ix));
        }
    }
    CHECK(saw_rehash);
    for (int i = 0; i < M; i += 3)
        ect__index_remove(&ix, e[i]);
    CHECK_OK(ect__index_check(&ix));
    for (int i = 0; i < M; i++)
        CHECK((find(&ix, e[i]) == e[i]) == (i % 3 != 0));
    ect__index_cleanup(&ix);
    for (int i = 0; i < M; i++)
        free(e[i]);
}

static void
test_tables_of_2_MiB_or_more_start_on_a_huge_page(void)
{
    /* Past 5 entries a bucket the table doubles; at 32768 buckets of 72
     * bytes it is mapped, and its control words (at its end) must lie in
     * huge pages as much as its pointer lines. */
    struct ect__index ix;
    CHECK_OK(ect__index_init(&ix));
    enum { M = 90000 };
    static struct ect__entry *e[M];
    int saw_mapped = 0;
    for (int i = 0; i < M; i++) {
        e[i] = make_entry(i, (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull);
        CHECK_OK(ect__index_reserve(&ix));
        ect__index_insert(&ix, e[i]);
        for (int t = 0; t < 2; t++) {
            const struct ect__index_table *tab = &ix.tab[t];
            size_t bytes =
                tab->size * (sizeof(struct ect__bucket_slots) + sizeof(struct ect__bucket_ctrl));
            if (tab->slots == NULL || bytes < ((size_t)2 << 20))
                continue;
            saw_mapped = 1;
            CHECK_MSG((uintptr_t)tab->slots % ((uintptr_t)2 << 20) == 0,
                      "a table of %zu buckets at %p", tab->size, (void *)tab->slots);
        }
    }
    CHECK(saw_mapped);
    CHECK_OK(ect__index_check(&ix));
    for (int i = 0; i < M; i += 997)
        CHECK(find(&ix, e[i]) == e[i]);
    ect__index_cleanup(&ix);
    for (int i = 0; i < M; i++)
        free(e[i]);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_one_home_bucket_overflows_grows_and_empties),
    ECT_CASE(test_lookups_find_entries_in_both_tables_mid_rehash),
    ECT_CASE(test_tables_of_2_MiB_or_more_start_on_a_huge_page),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
