/*
 * The cache's key index: a chained hash table over SipHash-1-3 with a random
 * key per cache (keys can come from peers), grown by doubling at load factor
 * 1 with an incremental rehash (Redis's dict does the same), so every
 * operation stays O(1) even at the moment the table grows.  It never shrinks:
 * its size follows the peak number of entries.
 *
 * Cache misses are the cost at a million entries, so a bucket carries its
 * first entry's hash and each entry its successor's: a lookup reads only the
 * entries whose full 64-bit hash matches (almost always the one it wants, or
 * none).  Tables of 2 MiB and more are mmap'd: the kernel zeroes their pages
 * lazily, keeping growth itself O(1) per operation, and they are advised as
 * huge pages so random lookups cost fewer TLB misses.
 *
 * Locking: the cache's mutex; nothing here locks.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache/cache_internal.h"
#include "common/error.h"
#include "common/siphash.h"

#define INITIAL_SIZE   64
#define REHASH_BUCKETS 2 /* tab[0] buckets moved per operation */
#define MMAP_BYTES     ((size_t)2 << 20)

static struct ect__bucket *
table_alloc(size_t size)
{
    size_t bytes = size * sizeof(struct ect__bucket);
    if (bytes < MMAP_BYTES)
        return calloc(size, sizeof(struct ect__bucket));
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
        free(tab);
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

static void
push_front(struct ect__bucket *b, struct ect__entry *e)
{
    e->hnext = b->first;
    e->hnext_hash = b->hash;
    b->first = e;
    b->hash = e->hash;
}

/* Move up to n buckets of tab[0] into tab[1]; finish when all have moved.
 * Moving a bucket costs its chain, one entry on average at load <= 1. */
static void
rehash_step(struct ect__index *ix, size_t n)
{
    if (!rehashing(ix))
        return;
    size_t mask1 = ix->size[1] - 1;
    while (n-- > 0 && ix->rehash_pos < ix->size[0]) {
        struct ect__bucket *old = &ix->tab[0][ix->rehash_pos++];
        struct ect__entry *e = old->first;
        old->first = NULL;
        while (e != NULL) {
            struct ect__entry *next = e->hnext;
            push_front(&ix->tab[1][(size_t)e->hash & mask1], e);
            ix->used[0]--;
            ix->used[1]++;
            e = next;
        }
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

/* Start a rehash into a table twice as big once the load reaches 1.  If the
 * bigger table cannot be allocated we carry on with longer chains: lookups
 * slow down but nothing fails. */
static void
maybe_grow(struct ect__index *ix)
{
    if (rehashing(ix) || ix->used[0] < ix->size[0])
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

struct ect__entry *
ect__index_find(struct ect__index *ix, const char *key, size_t len, uint64_t hash)
{
    rehash_step(ix, REHASH_BUCKETS);
    for (int t = 0; t < 2; t++) {
        if (ix->tab[t] == NULL)
            continue;
        const struct ect__bucket *b = &ix->tab[t][(size_t)hash & (ix->size[t] - 1)];
        uint64_t h = b->hash;
        for (struct ect__entry *e = b->first; e != NULL; h = e->hnext_hash, e = e->hnext) {
            if (h == hash && e->key_len == len && memcmp(e->key, key, len) == 0)
                return e;
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
    int t = rehashing(ix) ? 1 : 0;
    push_front(&ix->tab[t][(size_t)e->hash & (ix->size[t] - 1)], e);
    ix->used[t]++;
}

void
ect__index_remove(struct ect__index *ix, struct ect__entry *e)
{
    for (int t = 0; t < 2; t++) {
        if (ix->tab[t] == NULL)
            continue;
        struct ect__bucket *b = &ix->tab[t][(size_t)e->hash & (ix->size[t] - 1)];
        if (b->first == e) {
            b->first = e->hnext;
            b->hash = e->hnext_hash;
        } else {
            struct ect__entry *p = b->first;
            while (p != NULL && p->hnext != e)
                p = p->hnext;
            if (p == NULL)
                continue; /* not in this table */
            p->hnext = e->hnext;
            p->hnext_hash = e->hnext_hash;
        }
        e->hnext = NULL;
        ix->used[t]--;
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
            struct ect__entry *e = ix->tab[t][b].first;
            while (e != NULL) {
                struct ect__entry *next = e->hnext;
                fn(e, arg);
                e = next;
            }
        }
    }
}
