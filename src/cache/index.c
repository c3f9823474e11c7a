/*
 * The cache's key index: an open-addressing hash table of buckets over
 * SipHash-1-3 with a random key per cache (keys can come from peers), grown
 * by doubling with an incremental rehash (Redis's dict does the same), so
 * every operation stays O(1) even at the moment the table grows.  It never
 * shrinks: its size follows the peak number of entries.
 *
 * Cache misses are the cost at a million entries (bench/bench_cache.c), so
 * a lookup should touch as few lines the CPU does not hold as it can.  A
 * bucket holds up to seven entries.  Its control word (8 bytes: a one-byte
 * tag of each entry's hash and an overflow count, the number of entries
 * whose probe went past this bucket because it was full; folly's F14 keeps
 * the same in its chunks) lives in a dense array of its own, its seven
 * entry pointers in a 64-byte line of a second array (as SwissTable keeps
 * its control bytes apart from its slots).  A lookup compares the seven
 * tags (7 bits of the hash; a false match costs one pointer and one entry
 * read, about 1 in 128 per occupied slot), reads a pointer and its entry
 * only when a tag matches (the home bucket's pointer line is prefetched
 * with its control word), and goes on to the next bucket only while the
 * overflow count says something may be there.  The control words take
 * 8 bytes a bucket, 2 MiB at a million entries, which can stay in a
 * last-level cache: then looking up an absent key (each new item's first
 * question) reads no line from memory, and a present key reads its pointer
 * line and its entry.  On the project's 2-core VM (4-8 MiB of last-level
 * cache) 4 absent lookups in 10 still miss (`ectier bench cache`: 0.39-0.46
 * misses each, against 0.65-0.78 before the split).  With buckets of one
 * line each (tags and pointers together) every lookup read its bucket from
 * memory first; the chained table before that read every entry of a chain
 * to walk or unlink it.  At most BUCKET_FILL entries a bucket on average before the table
 * grows (71 % of the slots), so nine lookups in ten stop at their home
 * bucket.
 *
 * Removal clears the slot and lowers the overflow counts on the path from
 * the entry's home bucket to its bucket; no tombstones, so a table with
 * churn (evict one, insert one) does not fill up with them.  A count that
 * reached 255 stays there (a lookup then reads on a little further).
 *
 * Tables of 2 MiB or more are mapped (ect__map_huge): the kernel zeroes
 * their pages lazily, keeping growth itself O(1) per operation, and they
 * start on a huge page boundary, so that where the kernel gives huge pages
 * every part of the table (the control words, at its end, included) is in
 * them and random lookups cost fewer TLB misses.
 *
 * Locking: the cache's mutex; nothing here locks.
 */
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "common/alloc.h"
#include "common/error.h"
#include "common/siphash.h"

#define INITIAL_SIZE   8 /* buckets */
#define REHASH_BUCKETS 2 /* tab[0] buckets moved per operation */
#define BUCKET_FILL    5 /* entries per bucket on average before the table grows */
#define MMAP_BYTES     ((size_t)2 << 20)
#define OVERFLOW_MAX   255

_Static_assert(sizeof(struct ect__bucket_slots) == 64, "a bucket's pointers are one cache line");
_Static_assert(sizeof(struct ect__bucket_ctrl) == 8, "a bucket's control word is 8 bytes");

/* Never 0 (an empty slot): the top bit is set, the low 7 come from hash
 * bits the bucket number does not use. */
static uint8_t
tag_of(uint64_t hash)
{
    return (uint8_t)(0x80 | (hash >> 57));
}

static size_t
table_bytes(size_t size)
{
    return size * (sizeof(struct ect__bucket_slots) + sizeof(struct ect__bucket_ctrl));
}

/* A zeroed table of size buckets into *t; ECT_OK or ECT_ERR_NO_MEMORY (no
 * message: the callers say what failed). */
static ect_status_t
table_alloc(struct ect__index_table *t, size_t size)
{
    size_t bytes = table_bytes(size);
    void *p;
    if (bytes < MMAP_BYTES) {
        p = ect__aligned_alloc(sizeof(struct ect__bucket_slots), bytes);
        if (p == NULL)
            return ECT_ERR_NO_MEMORY;
        memset(p, 0, bytes);
    } else {
        p = ect__map_huge(bytes);
        if (p == NULL)
            return ECT_ERR_NO_MEMORY;
    }
    t->slots = p;
    t->ctrl = (struct ect__bucket_ctrl *)(t->slots + size);
    t->size = size;
    t->used = 0;
    return ECT_OK;
}

static void
table_free(struct ect__index_table *t)
{
    if (t->slots != NULL) {
        if (table_bytes(t->size) < MMAP_BYTES)
            ect__free(t->slots);
        else
            ect__unmap_huge(t->slots, table_bytes(t->size));
    }
    memset(t, 0, sizeof(*t));
}

ect_status_t
ect__index_init(struct ect__index *ix)
{
    memset(ix, 0, sizeof(*ix));
    if (table_alloc(&ix->tab[0], INITIAL_SIZE) != ECT_OK)
        return ect__error(ECT_ERR_NO_MEMORY, "cache: no memory for the key index");
    ect__siphash_random_key(&ix->k0, &ix->k1);
    return ECT_OK;
}

void
ect__index_cleanup(struct ect__index *ix)
{
    table_free(&ix->tab[0]);
    table_free(&ix->tab[1]);
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
    return ix->tab[1].slots != NULL;
}

/* Put e into table t, which has a free slot.  The buckets it passes, full,
 * count one more overflow. */
static void
put(struct ect__index_table *t, struct ect__entry *e)
{
    size_t mask = t->size - 1;
    uint8_t tag = tag_of(e->hash);
    for (size_t b = (size_t)e->hash & mask;; b = (b + 1) & mask) {
        struct ect__bucket_ctrl *ctrl = &t->ctrl[b];
        for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
            if (ctrl->tags[i] == 0) {
                ctrl->tags[i] = tag;
                t->slots[b].slot[i] = e;
                t->used++;
                return;
            }
        }
        if (ctrl->overflow < OVERFLOW_MAX)
            ctrl->overflow++;
    }
}

/* Move up to n buckets of tab[0] into tab[1]; finish when all have moved. */
static void
rehash_step(struct ect__index *ix, size_t n)
{
    if (!rehashing(ix))
        return;
    struct ect__index_table *from = &ix->tab[0];
    while (n-- > 0 && ix->rehash_pos < from->size) {
        size_t b = ix->rehash_pos++;
        struct ect__bucket_ctrl *ctrl = &from->ctrl[b];
        for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
            if (ctrl->tags[i] != 0) {
                put(&ix->tab[1], from->slots[b].slot[i]);
                ctrl->tags[i] = 0;
                from->slots[b].slot[i] = NULL;
                from->used--;
            }
        }
        /* Its overflow count may still send lookups past it: they find
         * the entries it sent on, or those moved too, in tab[1]. */
    }
    if (ix->rehash_pos == from->size) {
        table_free(from);
        ix->tab[0] = ix->tab[1];
        memset(&ix->tab[1], 0, sizeof(ix->tab[1]));
        ix->rehash_pos = 0;
    }
}

/* Start a rehash into a table twice as big once the load reaches
 * BUCKET_FILL.  If the bigger table cannot be allocated we carry on in this
 * one (probes get longer) until ect__index_reserve refuses. */
static void
maybe_grow(struct ect__index *ix)
{
    if (rehashing(ix) || ix->tab[0].used < ix->tab[0].size * BUCKET_FILL)
        return;
    size_t size = ix->tab[0].size * 2;
    if (table_alloc(&ix->tab[1], size) != ECT_OK) {
        ECT_LOG_W("cache: cannot grow the key index to %zu buckets; lookups will slow down", size);
        return;
    }
    ix->rehash_pos = 0;
}

ect_status_t
ect__index_reserve(struct ect__index *ix)
{
    maybe_grow(ix);
    const struct ect__index_table *t = &ix->tab[rehashing(ix) ? 1 : 0];
    /* Keep one slot free: a probe for an absent key must end. */
    if (t->used + 1 >= t->size * ECT__BUCKET_SLOTS)
        return ect__error(ECT_ERR_NO_MEMORY, "cache: the key index is full and cannot grow");
    return ECT_OK;
}

/* The bucket and slot of e in table t, or -1. */
static int
locate(const struct ect__index_table *t, const struct ect__entry *e, size_t *bucket_p)
{
    size_t mask = t->size - 1;
    uint8_t tag = tag_of(e->hash);
    size_t b = (size_t)e->hash & mask;
    for (size_t probes = 0; probes <= mask; probes++, b = (b + 1) & mask) {
        const struct ect__bucket_ctrl *ctrl = &t->ctrl[b];
        for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
            if (ctrl->tags[i] == tag && t->slots[b].slot[i] == e) {
                *bucket_p = b;
                return i;
            }
        }
        if (ctrl->overflow == 0)
            break;
    }
    return -1;
}

struct ect__entry *
ect__index_find(struct ect__index *ix, const char *key, size_t len, uint64_t hash)
{
    rehash_step(ix, REHASH_BUCKETS);
    uint8_t tag = tag_of(hash);
    for (int k = 0; k < 2; k++) {
        const struct ect__index_table *t = &ix->tab[k];
        if (t->slots == NULL)
            continue;
        size_t mask = t->size - 1;
        size_t b = (size_t)hash & mask;
        /* The pointer line starts loading with the control word, so a hit
         * waits for the two at once, not one after the other; for an absent
         * key it is a load nobody waits for. */
        __builtin_prefetch(&t->slots[b]);
        for (size_t probes = 0; probes <= mask; probes++, b = (b + 1) & mask) {
            const struct ect__bucket_ctrl *ctrl = &t->ctrl[b];
            for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
                if (ctrl->tags[i] != tag)
                    continue;
                struct ect__entry *e = t->slots[b].slot[i];
                if (e->hash == hash && e->key_len == len && memcmp(e->key, key, len) == 0)
                    return e;
            }
            if (ctrl->overflow == 0)
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
     * shrinks and the rehash is done after tab[0].size / REHASH_BUCKETS
     * operations, long before tab[1] (twice as big) fills up. */
    put(&ix->tab[rehashing(ix) ? 1 : 0], e);
}

void
ect__index_remove(struct ect__index *ix, struct ect__entry *e)
{
    for (int k = 0; k < 2; k++) {
        struct ect__index_table *t = &ix->tab[k];
        if (t->slots == NULL)
            continue;
        size_t b;
        int i = locate(t, e, &b);
        if (i < 0)
            continue;
        t->ctrl[b].tags[i] = 0;
        t->slots[b].slot[i] = NULL;
        t->used--;
        /* The buckets its probe passed no longer overflow on its account. */
        size_t mask = t->size - 1;
        for (size_t p = (size_t)e->hash & mask; p != b; p = (p + 1) & mask) {
            struct ect__bucket_ctrl *ctrl = &t->ctrl[p];
            if (ctrl->overflow < OVERFLOW_MAX)
                ctrl->overflow--;
        }
        break;
    }
    rehash_step(ix, REHASH_BUCKETS);
}

void
ect__index_prefetch(const struct ect__index *ix, uint64_t hash)
{
    for (int k = 0; k < 2; k++) {
        const struct ect__index_table *t = &ix->tab[k];
        if (t->slots == NULL)
            continue;
        size_t b = (size_t)hash & (t->size - 1);
        __builtin_prefetch(&t->ctrl[b], 1);
        __builtin_prefetch(&t->slots[b], 1);
    }
}

void
ect__index_each(struct ect__index *ix, void (*fn)(struct ect__entry *e, void *arg), void *arg)
{
    for (int k = 0; k < 2; k++) {
        struct ect__index_table *t = &ix->tab[k];
        for (size_t b = 0; b < t->size; b++)
            for (int i = 0; i < ECT__BUCKET_SLOTS; i++)
                if (t->ctrl[b].tags[i] != 0)
                    fn(t->slots[b].slot[i], arg);
    }
}

ect_status_t
ect__index_check(const struct ect__index *ix)
{
    for (int k = 0; k < 2; k++) {
        const struct ect__index_table *t = &ix->tab[k];
        size_t mask = t->size - 1, used = 0;
        for (size_t b = 0; b < t->size; b++) {
            for (int i = 0; i < ECT__BUCKET_SLOTS; i++) {
                const struct ect__entry *e = t->slots[b].slot[i];
                if (t->ctrl[b].tags[i] == 0) {
                    if (e != NULL)
                        return ect__error(ECT_ERR_INTERNAL, "cache index: an empty slot holds "
                                                            "an entry");
                    continue;
                }
                used++;
                if (e == NULL || t->ctrl[b].tags[i] != tag_of(e->hash))
                    return ect__error(ECT_ERR_INTERNAL, "cache index: a tag disagrees with its "
                                                        "entry's hash");
                /* Every bucket between its home and here must overflow. */
                for (size_t p = (size_t)e->hash & mask; p != b; p = (p + 1) & mask)
                    if (t->ctrl[p].overflow == 0)
                        return ect__error(ECT_ERR_INTERNAL,
                                          "cache index: bucket %zu does not count an entry that "
                                          "passed it",
                                          p);
            }
        }
        if (used != t->used)
            return ect__error(ECT_ERR_INTERNAL, "cache index: table %d holds %zu, counts %zu", k,
                              used, t->used);
    }
    return ECT_OK;
}
