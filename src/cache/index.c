/*
 * The cache's key index: a chained hash table over SipHash-1-3 with a random
 * key per cache (keys can come from peers), grown by doubling at load factor
 * 1 with an incremental rehash (Redis's dict does the same), so every
 * operation stays O(1) even at the moment the table grows.  It never shrinks:
 * its size follows the peak number of entries.
 *
 * Locking: the cache's mutex; nothing here locks.
 */
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "common/error.h"
#include "common/siphash.h"

#define INITIAL_SIZE   64
#define REHASH_BUCKETS 2 /* tab[0] buckets moved per operation */

ect_status_t
ect__index_init(struct ect__index *ix)
{
    memset(ix, 0, sizeof(*ix));
    ix->tab[0] = calloc(INITIAL_SIZE, sizeof(*ix->tab[0]));
    if (ix->tab[0] == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "cache: no memory for the key index");
    ix->size[0] = INITIAL_SIZE;
    ect__siphash_random_key(&ix->k0, &ix->k1);
    return ECT_OK;
}

void
ect__index_cleanup(struct ect__index *ix)
{
    free(ix->tab[0]);
    free(ix->tab[1]);
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

/* Move up to n buckets of tab[0] into tab[1]; finish when all have moved.
 * Moving a bucket costs its chain, one entry on average at load <= 1. */
static void
rehash_step(struct ect__index *ix, size_t n)
{
    if (!rehashing(ix))
        return;
    size_t mask1 = ix->size[1] - 1;
    while (n-- > 0 && ix->rehash_pos < ix->size[0]) {
        struct ect__entry *e = ix->tab[0][ix->rehash_pos];
        ix->tab[0][ix->rehash_pos++] = NULL;
        while (e != NULL) {
            struct ect__entry *next = e->hnext;
            size_t b = (size_t)e->hash & mask1;
            e->hnext = ix->tab[1][b];
            ix->tab[1][b] = e;
            ix->used[0]--;
            ix->used[1]++;
            e = next;
        }
    }
    if (ix->rehash_pos == ix->size[0]) {
        free(ix->tab[0]);
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
    struct ect__entry **tab = calloc(size, sizeof(*tab));
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
        for (struct ect__entry *e = ix->tab[t][(size_t)hash & (ix->size[t] - 1)]; e != NULL;
             e = e->hnext) {
            if (e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0)
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
    size_t b = (size_t)e->hash & (ix->size[t] - 1);
    e->hnext = ix->tab[t][b];
    ix->tab[t][b] = e;
    ix->used[t]++;
}

void
ect__index_remove(struct ect__index *ix, struct ect__entry *e)
{
    for (int t = 0; t < 2; t++) {
        if (ix->tab[t] == NULL)
            continue;
        struct ect__entry **link = &ix->tab[t][(size_t)e->hash & (ix->size[t] - 1)];
        while (*link != NULL && *link != e)
            link = &(*link)->hnext;
        if (*link == e) {
            *link = e->hnext;
            e->hnext = NULL;
            ix->used[t]--;
            break;
        }
    }
    rehash_step(ix, REHASH_BUCKETS);
}

void
ect__index_each(struct ect__index *ix, void (*fn)(struct ect__entry *e, void *arg), void *arg)
{
    for (int t = 0; t < 2; t++) {
        if (ix->tab[t] == NULL)
            continue;
        for (size_t b = 0; b < ix->size[t]; b++) {
            struct ect__entry *e = ix->tab[t][b];
            while (e != NULL) {
                struct ect__entry *next = e->hnext;
                fn(e, arg);
                e = next;
            }
        }
    }
}
