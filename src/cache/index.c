/*
 * The cache's key index: an open-addressing hash table of cache-line
 * buckets over SipHash-1-3 with a random key per cache (keys can come from
 * peers), grown by doubling with an incremental rehash (Redis's dict does
 * the same), so every operation stays O(1) even at the moment the table
 * grows.  It never shrinks: its size follows the peak number of entries.
 *
 * Cache misses are the cost at a million entries (bench/bench_cache.c), so
 * a lookup should touch one cache line of the table and then only the
 * entry it wants.  A bucket is one 64-byte line: seven entry pointers, a
 * one-byte tag of each entry's hash, and an overflow count (the layout of
 * folly's F14 tables): the number of entries whose probe went past this
 * bucket because it was full.  A lookup compares the seven tags (7 bits of
 * the hash; a false match costs one entry read, about 1 in 128 per
 * occupied slot), reads only entries whose tag matches, and goes on to the
 * next bucket only while the overflow count says something may be there.
 * So looking up an absent key reads one line and nothing else, a present
 * key one line and its entry, and removing an entry rewrites a line or two
 * (the chained table before this one read every entry of a chain, one miss
 * each, to walk or unlink it).  At most BUCKET_FILL entries a bucket on
 * average before the table grows (71 % of the slots), so nine lookups in
 * ten stop at their home bucket.
 *
 * Removal clears the slot and lowers the overflow counts on the path from
 * the entry's home bucket to its bucket; no tombstones, so a table with
 * churn (evict one, insert one) does not fill up with them.  A count that
 * reached 255 stays there (a lookup then reads on a little further).
 *
 * Tables of 2 MiB or more are mmap'd: the kernel zeroes their pages
 * lazily, keeping growth itself O(1) per operation, and they are advised as
 * huge pages so random lookups cost fewer TLB misses.
 *
 * Locking: the cache's mutex; nothing here locks.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/cache_internal.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/siphash.h"

#define INITIAL_SIZE   8 /* buckets */
#define REHASH_BUCKETS 2 /* tab[0] buckets moved per operation */
#define BUCKET_FILL    5 /* entries per bucket on average before the table grows */
#define MMAP_BYTES     ((size_t)2 << 20)
#define OVERFLOW_MAX   255

_Static_assert(sizeof(struct ect__bucket) == 64, "a bucket is one cache line");

/* Never 0 (an empty slot): the top bit is set, the low 7 come from hash
 * bits the bucket number does not use. */
static uint8_t
tag_of(uint64_t hash)
{
    return (uint8_t)(0x80 | (hash >> 57));
}

static struct ect__bucket *
table_alloc(size_t size)
{
    size_t bytes = size * sizeof(struct ect__bucket);
    if (bytes < MMAP_BYTES) {
        void *p = ect__aligned_alloc(sizeof(struct ect__bucket), bytes);
        if (p != NULL)
            memset(p, 0, bytes);
        return p;
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    (void)madvise(m, bytes, MADV_HUGEPAGE);
    return m;
}

static void
table_free(struct ect__bucket *tab, size_t size)
{
    size_t bytes = size * sizeof(struct ect__bucket);
    if (tab == NULL)
        return;
    if (bytes < MMAP_BYTES)
        ect__free(tab);
    else
        munmap(tab, bytes);
}

ect_status_t
ect__index_init(struct ect__index *ix)
{
    memset(ix, 0, sizeof(*ix));
    ix->tab[0] = table_alloc(INITIAL_SIZE);
    if (ix->tab[0] == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "cache: no memory for the key index");
    ix->size[0] = INITIAL_SIZE;
    ect__siphash_random_key(&ix->k0, &ix->k1);
    return ECT_OK;
}

void
ect__index_cleanup(struct ect__index *ix)
{
    table_free(ix->tab[0], ix->size[0]);
    table_free(ix->tab[1], ix->size[1]);
    memset(ix, 0, sizeof(*ix));
}

uint64_t
ect__index_hash(const struct ect__index *ix, const char *key, size_t len)
{
    return ect__siphash13(key, len, ix->k0, ix->k1);
}

static int
rehashing(const struct ect__index *ix)
{
    return ix->tab[1] != NULL;
}

/* Put e into table t, which has a free slot.  The buckets it passes, full,
 * count one more overflow. */
static void
put(struct ect__index *ix, int t, struct ect__entry *e)
{
    size_t mask = ix->size[t] - 1;
    uint8_t tag = tag_of(e->hash);
    for (size_t b = (size_t)e->hash & mask;; b = (b + 1) & mask) {
        struct ect__bucket *bk = &ix->tab[t][b];
        for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
            if (bk->tags[i] == 0) {
                bk->tags[i] = tag;
                bk->slot[i] = e;
                ix->used[t]++;
                return;
            }
        }
        if (bk->overflow < OVERFLOW_MAX)
            bk->overflow++;
    }
}

/* Move up to n buckets of tab[0] into tab[1]; finish when all have moved. */
static void
rehash_step(struct ect__index *ix, size_t n)
{
    if (!rehashing(ix))
        return;
    while (n-- > 0 && ix->rehash_pos < ix->size[0]) {
        struct ect__bucket *old = &ix->tab[0][ix->rehash_pos++];
        for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
            if (old->tags[i] != 0) {
                put(ix, 1, old->slot[i]);
                old->tags[i] = 0;
                ix->used[0]--;
            }
        }
        /* Its overflow count may still send lookups past it: they find
         * the entries it sent on, or those moved too, in tab[1]. */
    }
    if (ix->rehash_pos == ix->size[0]) {
        table_free(ix->tab[0], ix->size[0]);
        ix->tab[0] = ix->tab[1];
        ix->size[0] = ix->size[1];
        ix->used[0] = ix->used[1];
        ix->tab[1] = NULL;
        ix->size[1] = ix->used[1] = 0;
        ix->rehash_pos = 0;
    }
}

/* Start a rehash into a table twice as big once the load reaches
 * BUCKET_FILL.  If the bigger table cannot be allocated we carry on in this
 * one (probes get longer) until ect__index_reserve refuses. */
static void
maybe_grow(struct ect__index *ix)
{
    if (rehashing(ix) || ix->used[0] < ix->size[0] * BUCKET_FILL)
        return;
    size_t size = ix->size[0] * 2;
    struct ect__bucket *tab = table_alloc(size);
    if (tab == NULL) {
        ECT_LOG_W("cache: cannot grow the key index to %zu buckets; lookups will slow down", size);
        return;
    }
    ix->tab[1] = tab;
    ix->size[1] = size;
    ix->used[1] = 0;
    ix->rehash_pos = 0;
}

ect_status_t
ect__index_reserve(struct ect__index *ix)
{
    maybe_grow(ix);
    int t = rehashing(ix) ? 1 : 0;
    /* Keep one slot free: a probe for an absent key must end. */
    if (ix->used[t] + 1 >= ix->size[t] * ECT__BUCKET_SLOTS)
        return ect__error(ECT_ERR_NO_MEMORY, "cache: the key index is full and cannot grow");
    return ECT_OK;
}

/* The bucket and slot of e in table t, or -1. */
static int
locate(const struct ect__index *ix, int t, const struct ect__entry *e, size_t *bucket_p)
{
    size_t mask = ix->size[t] - 1;
    uint8_t tag = tag_of(e->hash);
    size_t b = (size_t)e->hash & mask;
    for (size_t probes = 0; probes <= mask; probes++, b = (b + 1) & mask) {
        const struct ect__bucket *bk = &ix->tab[t][b];
        for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
            if (bk->tags[i] == tag && bk->slot[i] == e) {
                *bucket_p = b;
                return i;
            }
        }
        if (bk->overflow == 0)
            break;
    }
    return -1;
}

struct ect__entry *
ect__index_find(struct ect__index *ix, const char *key, size_t len, uint64_t hash)
{
    rehash_step(ix, REHASH_BUCKETS);
    uint8_t tag = tag_of(hash);
    for (int t = 0; t < 2; t++) {
        if (ix->tab[t] == NULL)
            continue;
        size_t mask = ix->size[t] - 1;
        size_t b = (size_t)hash & mask;
        for (size_t probes = 0; probes <= mask; probes++, b = (b + 1) & mask) {
            const struct ect__bucket *bk = &ix->tab[t][b];
            for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
                if (bk->tags[i] != tag)
                    continue;
                struct ect__entry *e = bk->slot[i];
                if (e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0)
                    return e;
            }
            if (bk->overflow == 0)
                break;
        }
    }
    return NULL;
}

void
ect__index_insert(struct ect__index *ix, struct ect__entry *e)
{
    maybe_grow(ix);
    rehash_step(ix, REHASH_BUCKETS);
    /* During a rehash new entries go to the new table, so tab[0] only
     * shrinks and the rehash is done after size[0] / REHASH_BUCKETS
     * operations, long before tab[1] (twice as big) fills up. */
    put(ix, rehashing(ix) ? 1 : 0, e);
}

void
ect__index_remove(struct ect__index *ix, struct ect__entry *e)
{
    for (int t = 0; t < 2; t++) {
        if (ix->tab[t] == NULL)
            continue;
        size_t b;
        int i = locate(ix, t, e, &b);
        if (i < 0)
            continue;
        ix->tab[t][b].tags[i] = 0;
        ix->tab[t][b].slot[i] = NULL;
        ix->used[t]--;
        /* The buckets its probe passed no longer overflow on its account. */
        size_t mask = ix->size[t] - 1;
        for (size_t p = (size_t)e->hash & mask; p != b; p = (p + 1) & mask) {
            struct ect__bucket *bk = &ix->tab[t][p];
            if (bk->overflow < OVERFLOW_MAX)
                bk->overflow--;
        }
        break;
    }
    rehash_step(ix, REHASH_BUCKETS);
}

void
ect__index_prefetch(const struct ect__index *ix, uint64_t hash)
{
    for (int t = 0; t < 2; t++)
        if (ix->tab[t] != NULL)
            __builtin_prefetch(&ix->tab[t][(size_t)hash & (ix->size[t] - 1)], 1);
}

void
ect__index_each(struct ect__index *ix, void (*fn)(struct ect__entry *e, void *arg), void *arg)
{
    for (int t = 0; t < 2; t++) {
        if (ix->tab[t] == NULL)
            continue;
        for (size_t b = 0; b < ix->size[t]; b++) {
            struct ect__bucket *bk = &ix->tab[t][b];
            for (int i = 0; i < ECT__BUCKET_SLOTS; i++)
                if (bk->tags[i] != 0)
                    fn(bk->slot[i], arg);
        }
    }
}

ect_status_t
ect__index_check(const struct ect__index *ix)
{
    for (int t = 0; t < 2; t++) {
        if (ix->tab[t] == NULL)
            continue;
        size_t mask = ix->size[t] - 1, used = 0;
        for (size_t b = 0; b < ix->size[t]; b++) {
            const struct ect__bucket *bk = &ix->tab[t][b];
            for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
                if (bk->tags[i] == 0)
                    continue;
                used++;
                const struct ect__entry *e = bk->slot[i];
                if (bk->tags[i] != tag_of(e->hash))
                    return ect__error(ECT_ERR_INTERNAL, "cache index: a tag disagrees with its "
                                                        "entry's hash");
                /* Every bucket between its home and here must overflow. */
                for (size_t p = (size_t)e->hash & mask; p != b; p = (p + 1) & mask)
                    if (ix->tab[t][p].overflow == 0)
                        return ect__error(ECT_ERR_INTERNAL,
                                          "cache index: bucket %zu does not count an entry that "
                                          "passed it",
                                          p);
            }
        }
        if (used != ix->used[t])
            return ect__error(ECT_ERR_INTERNAL, "cache index: table %d holds %zu, counts %zu", t,
                              used, ix->used[t]);
    }
    return ECT_OK;
}
