/*
 * The embedding cache (include/ectier/cache.h): entries, their states, pins,
 * FIFO eviction and the stats.  Holds live in holds.c, key lookup in
 * index.c, block runs in extent.c.
 *
 * Every public function checks its arguments, takes the one mutex, works on
 * the structures under it and releases it; internal helpers carry _locked in
 * their name when they expect it held.  The listener runs under the mutex; a
 * thread-local marker catches a listener calling back into its own cache and
 * turns what would be a self-deadlock into ECT_ERR_STATE.
 *
 * Failure atomicity: a call that returns an error has changed nothing,
 * except ect_cache_alloc running out of memory after it evicted (the
 * evictions stand; the cache stays consistent).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "cache/walk.h"
#include "common/alloc.h"
#include "common/error.h"

/* Keys in messages: long enough to recognise, short enough for the buffer. */
#define KEY_FMT "'%.200s'"

static _Thread_local const struct ect_cache *listener_of;

int
ect__cache_in_listener(const struct ect_cache *c)
{
    return listener_of == c;
}

ect_status_t
ect__cache_enter_check(const struct ect_cache *c, const char *what)
{
    if (c == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "cache %s: NULL cache", what);
    if (ect__cache_in_listener(c))
        return ect__error(ECT_ERR_STATE,
                          "cache %s: called from the cache's own listener, which runs under the "
                          "cache lock",
                          what);
    return ECT_OK;
}

ect_status_t
ect__cache_enter_key(const struct ect_cache *c, const char *key, const char *what, size_t *len_p)
{
    ect_status_t s = ect__cache_enter_check(c, what);
    if (s != ECT_OK)
        return s;
    if (key == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "cache %s: NULL key", what);
    size_t len = strnlen(key, ECT_KEY_MAX + 1);
    if (len == 0)
        return ect__error(ECT_ERR_INVALID_ARG, "cache %s: empty key", what);
    if (len > ECT_KEY_MAX)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "cache %s: key " KEY_FMT "... is longer than %d bytes", what, key,
                          ECT_KEY_MAX);
    *len_p = len;
    return ECT_OK;
}

static void
lock(struct ect_cache *c)
{
    pthread_mutex_lock(&c->lock);
}

static void
unlock(struct ect_cache *c)
{
    pthread_mutex_unlock(&c->lock);
}

static struct ect__entry *
find_locked(struct ect_cache *c, const char *key, size_t len)
{
    return ect__index_find(&c->index, key, len, ect__index_hash(&c->index, key, len));
}

static ect_status_t
not_found(const char *what, const char *key)
{
    return ect__error(ECT_ERR_NOT_FOUND, "cache %s: no entry " KEY_FMT, what, key);
}

static int
run_bucket(size_t n_runs)
{
    if (n_runs <= 4)
        return (int)n_runs - 1;
    if (n_runs <= 8)
        return 4;
    if (n_runs <= 16)
        return 5;
    return 6;
}

static ect_cache_entry_state_t
state_of(const struct ect__entry *e)
{
    if (!e->ready)
        return ECT_CACHE_ENTRY_NOT_READY;
    return e->pins + e->holds_active > 0 ? ECT_CACHE_ENTRY_PINNED : ECT_CACHE_ENTRY_READY;
}

const char *
ect_cache_entry_state_str(ect_cache_entry_state_t state)
{
    switch (state) {
    case ECT_CACHE_ENTRY_NOT_READY:
        return "not-ready";
    case ECT_CACHE_ENTRY_READY:
        return "ready";
    case ECT_CACHE_ENTRY_PINNED:
        return "pinned";
    }
    return "unknown";
}

/* ---- FIFO of evictable entries ------------------------------------------------ */

static void
fifo_append_locked(struct ect_cache *c, struct ect__entry *e)
{
    e->fifo_next = NULL;
    e->fifo_prev = c->fifo_tail;
    if (c->fifo_tail != NULL) {
        c->fifo_tail->fifo_next = e;
        c->fifo_tail->fifo_next_hash = e->hash;
    } else {
        c->fifo_head = e;
    }
    c->fifo_tail = e;
    c->evictable_blocks += e->n_blocks;
}

/* In a full cache every save evicts the FIFO head, an entry nothing has
 * touched for a long time: its slot and its index bucket would be two cache
 * misses of the next alloc.  Start loading both now, while the caller does
 * other work; the hash travels with the FIFO link so that the entry need
 * not be read to find its bucket. */
static void
prefetch_victim(const struct ect_cache *c, const struct ect__entry *e, uint64_t hash)
{
    for (size_t off = 0; off < ENTRY_SLOT_BYTES; off += 64)
        __builtin_prefetch((const char *)e + off, 1);
    ect__index_prefetch(&c->index, hash);
}

static void
fifo_unlink_locked(struct ect_cache *c, struct ect__entry *e)
{
    if (c->fifo_head == e) {
        /* The new head keeps a stale fifo_prev (see cache_internal.h), so
         * this does not touch it: it is only prefetched for the next
         * eviction. */
        c->fifo_head = e->fifo_next;
        if (c->fifo_head == NULL)
            c->fifo_tail = NULL;
        else
            prefetch_victim(c, e->fifo_next, e->fifo_next_hash);
    } else {
        e->fifo_prev->fifo_next = e->fifo_next;
        e->fifo_prev->fifo_next_hash = e->fifo_next_hash;
        if (e->fifo_next != NULL)
            e->fifo_next->fifo_prev = e->fifo_prev;
        else
            c->fifo_tail = e->fifo_prev;
    }
    e->fifo_prev = e->fifo_next = NULL;
    c->evictable_blocks -= e->n_blocks;
}

void
ect__cache_pin_locked(struct ect_cache *c, struct ect__entry *e)
{
    if (e->pins + e->holds_active == 0) {
        fifo_unlink_locked(c, e);
        c->entries_pinned++;
    }
}

void
ect__cache_unpin_locked(struct ect_cache *c, struct ect__entry *e)
{
    if (e->pins + e->holds_active == 0) {
        /* The last pin or hold just went: "time since the entry last
         * became evictable" restarts now, at the tail. */
        c->entries_pinned--;
        fifo_append_locked(c, e);
    }
}

static void
emit_locked(struct ect_cache *c, ect_cache_event_type_t type, const struct ect__entry *e)
{
    if (c->listener == NULL)
        return;
    ect_cache_event_t ev = {.type = type, .key = e->key, .n_blocks = e->n_blocks};
    const struct ect_cache *outer = listener_of;
    listener_of = c;
    c->listener(&ev, c->listener_user);
    listener_of = outer;
}

/* Give the entry's blocks back, take it out of the index and free it.  The
 * caller has already taken it off the FIFO and dropped its holds. */
/* A run array for an entry of k > 1 runs (NULL when memory runs out), and
 * its release. */
static ect_run_t *
runs_get(struct ect_cache *c, size_t k)
{
    return k <= POOLED_RUNS ? ect__pool_get(&c->runs_pool) : ect__malloc(k * sizeof(ect_run_t));
}

static void
runs_put(struct ect_cache *c, ect_run_t *runs, size_t k)
{
    if (k <= POOLED_RUNS)
        ect__pool_put(&c->runs_pool, runs);
    else
        ect__free(runs);
}

static void
free_entry_locked(struct ect_cache *c, struct ect__entry *e)
{
    if (e->n_runs > 0) {
        ect__extents_give(&c->extents, e->runs, e->n_runs);
        c->runs_histogram[run_bucket(e->n_runs)]--;
    }
    ect__index_remove(&c->index, e);
    c->entries--;
    if (e->runs != &e->run0)
        runs_put(c, e->runs, e->n_runs);
    if (e->pooled)
        ect__pool_put(&c->entry_pool, e);
    else
        ect__free(e);
}

static void
evict_locked(struct ect_cache *c, struct ect__entry *e)
{
    fifo_unlink_locked(c, e);
    c->evicted_entries++;
    c->evicted_blocks += e->n_blocks;
    emit_locked(c, ECT_CACHE_EVENT_EVICTED, e);
    free_entry_locked(c, e);
}

/* ---- create / destroy ------------------------------------------------------- */

ect_status_t
ect_cache_create(uint64_t num_blocks, ect_cache_t **cache_p)
{
    ect_status_t s;
    if (cache_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "cache create: NULL cache_p");
    if (num_blocks == 0 || num_blocks > ECT_CACHE_MAX_BLOCKS)
        return ect__error(ECT_ERR_INVALID_ARG, "cache create: num_blocks %llu is not in 1 .. %llu",
                          (unsigned long long)num_blocks, (unsigned long long)ECT_CACHE_MAX_BLOCKS);
    struct ect_cache *c = ect__calloc(1, sizeof(*c));
    if (c == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "cache create: no memory");
    s = ect__index_init(&c->index);
    if (s != ECT_OK)
        goto free_cache;
    s = ect__extents_init(&c->extents, num_blocks);
    if (s != ECT_OK)
        goto cleanup_index;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        s = ect__error(ECT_ERR_INTERNAL, "cache create: cannot initialise the mutex");
        goto cleanup_extents;
    }
    ect__holds_init(c);
    ect__pool_init(&c->entry_pool, ENTRY_SLOT_BYTES);
    ect__pool_init(&c->runs_pool, POOLED_RUNS * sizeof(ect_run_t));
    ect__pool_init(&c->hold_pool, sizeof(struct ect__hold));
    *cache_p = c;
    return ECT_OK;

cleanup_extents:
    ect__extents_cleanup(&c->extents);
cleanup_index:
    ect__index_cleanup(&c->index);
free_cache:
    ect__free(c);
    return s;
}

/* Pooled entries and run arrays and all holds go with their pools. */
static void
free_entry_for_destroy(struct ect__entry *e, void *arg)
{
    (void)arg;
    if (e->n_runs > POOLED_RUNS)
        ect__free(e->runs);
    if (!e->pooled)
        ect__free(e);
}

void
ect_cache_destroy(ect_cache_t *cache)
{
    if (cache == NULL)
        return;
    ect__index_each(&cache->index, free_entry_for_destroy, NULL);
    ect__index_cleanup(&cache->index);
    ect__pool_cleanup(&cache->entry_pool);
    ect__pool_cleanup(&cache->runs_pool);
    ect__pool_cleanup(&cache->hold_pool);
    ect__extents_cleanup(&cache->extents);
    pthread_mutex_destroy(&cache->lock);
    ect__free(cache);
}

ect_status_t
ect_cache_set_listener(ect_cache_t *cache, ect_cache_listener_fn fn, void *user)
{
    ect_status_t s = ect__cache_enter_check(cache, "set_listener");
    if (s != ECT_OK)
        return s;
    lock(cache);
    cache->listener = fn;
    cache->listener_user = fn != NULL ? user : NULL;
    unlock(cache);
    return ECT_OK;
}

/* ---- alloc ---------------------------------------------------------------------- */

/* Evict FIFO-head entries until n blocks are free, then take them for a new
 * entry under key.  The caller checked that the key is absent and free +
 * evictable >= n, and made sure the entry's memory cannot fail: big holds a
 * long key's allocation, or (NULL) a pool slot is reserved. */
static ect_status_t
alloc_locked(struct ect_cache *c, struct ect__entry *big, const char *key, size_t len,
             uint64_t hash, uint64_t n)
{
    while (c->extents.free_blocks < n)
        evict_locked(c, c->fifo_head);
    size_t k = n > 0 ? ect__extents_plan(&c->extents, n) : 0;
    ect_run_t *runs = NULL;
    if (k > 1) {
        runs = runs_get(c, k);
        if (runs == NULL)
            return ect__error(ECT_ERR_NO_MEMORY,
                              "cache alloc: no memory for %zu runs of entry " KEY_FMT, k, key);
    }
    if (ect__extents_reserve(&c->extents, k) != ECT_OK) {
        if (runs != NULL)
            runs_put(c, runs, k);
        return ECT_ERR_NO_MEMORY;
    }
    /* Nothing below can fail. */
    struct ect__entry *e = big != NULL ? big : ect__pool_get(&c->entry_pool);
    memset(e, 0, offsetof(struct ect__entry, key));
    memcpy(e->key, key, len);
    e->key[len] = '\0';
    e->key_len = (uint16_t)len;
    e->pooled = big == NULL;
    e->hash = hash;
    e->n_blocks = n;
    e->runs = runs != NULL ? runs : &e->run0;
    if (k > 0) {
        ect__extents_take(&c->extents, n, e->runs, k);
        e->n_runs = k;
        c->runs_histogram[run_bucket(k)]++;
    }
    ect__index_insert(&c->index, e);
    c->entries++;
    c->entries_not_ready++;
    c->allocs++;
    return ECT_OK;
}

ect_status_t
ect_cache_alloc(ect_cache_t *cache, const char *key, uint64_t n_blocks)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, "alloc", &len);
    if (s != ECT_OK)
        return s;
    /* A long key's entry is allocated outside the lock; short keys take a
     * pool slot, usually the one an eviction just gave back. */
    struct ect__entry *big = NULL;
    if (len > ENTRY_POOL_KEY_MAX) {
        big = ect__malloc(offsetof(struct ect__entry, key) + len + 1);
        if (big == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "cache alloc: no memory for entry " KEY_FMT, key);
    }
    /* The hash key is fixed at create, so hashing needs no lock. */
    uint64_t hash = ect__index_hash(&cache->index, key, len);

    lock(cache);
    uint64_t num_blocks = cache->extents.num_blocks;
    uint64_t avail = cache->extents.free_blocks + cache->evictable_blocks;
    if (ect__index_find(&cache->index, key, len, hash) != NULL) {
        s = ect__error(ECT_ERR_EXISTS, "cache alloc: entry " KEY_FMT " already exists", key);
    } else if (n_blocks > num_blocks) {
        s = ect__error(ECT_ERR_OVERFLOW,
                       "cache alloc: entry " KEY_FMT " needs %llu blocks, the cache has %llu", key,
                       (unsigned long long)n_blocks, (unsigned long long)num_blocks);
    } else if (avail < n_blocks) {
        /* Fail fast: evicting would not make room, so evict nothing. */
        cache->alloc_no_space++;
        s = ect__error(ECT_ERR_NO_SPACE,
                       "cache alloc: entry " KEY_FMT " needs %llu blocks, only %llu are free or "
                       "evictable",
                       key, (unsigned long long)n_blocks, (unsigned long long)avail);
    } else if ((big == NULL && ect__pool_reserve(&cache->entry_pool, 1) != ECT_OK) ||
               ect__index_reserve(&cache->index) != ECT_OK) {
        s = ECT_ERR_NO_MEMORY;
    } else {
        s = alloc_locked(cache, big, key, len, hash, n_blocks);
        if (s == ECT_OK)
            big = NULL; /* the index owns it now */
    }
    unlock(cache);
    ect__free(big);
    return s;
}

/* ---- lookups ---------------------------------------------------------------------- */

/* A snapshot of the entry under key into *info_p; *found_p says whether there is one. */
static ect_status_t
lookup(ect_cache_t *cache, const char *key, const char *what, ect_cache_entry_t *info_p,
       bool *found_p)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, what, &len);
    if (s != ECT_OK)
        return s;
    if (info_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "cache %s: NULL info_p", what);
    lock(cache);
    const struct ect__entry *e = find_locked(cache, key, len);
    *found_p = e != NULL;
    if (e != NULL) {
        info_p->state = state_of(e);
        info_p->pin_count = e->pins + e->holds_active;
        info_p->holds_active = e->holds_active;
        info_p->holds_pending = e->holds_pending;
        info_p->n_blocks = e->n_blocks;
        info_p->n_runs = e->n_runs;
    }
    unlock(cache);
    return ECT_OK;
}

ect_status_t
ect_cache_get(ect_cache_t *cache, const char *key, ect_cache_entry_t *info_p)
{
    bool found;
    ect_status_t s = lookup(cache, key, "get", info_p, &found);
    if (s == ECT_OK && !found)
        s = not_found("get", key);
    return s;
}

void
ect_cache_prefetch(ect_cache_t *cache, const char *key)
{
    if (cache == NULL || key == NULL || ect__cache_in_listener(cache))
        return;
    size_t len = strnlen(key, ECT_KEY_MAX + 1);
    if (len == 0 || len > ECT_KEY_MAX)
        return;
    uint64_t hash = ect__index_hash(&cache->index, key, len);
    lock(cache);
    ect__index_prefetch(&cache->index, hash);
    unlock(cache);
}

ect_status_t
ect_cache_find(ect_cache_t *cache, const char *key, ect_cache_entry_t *info_p, bool *found_p)
{
    if (found_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "cache find: NULL found_p");
    return lookup(cache, key, "find", info_p, found_p);
}

ect_status_t
ect_cache_get_runs(ect_cache_t *cache, const char *key, ect_run_t *runs, size_t cap,
                   size_t *n_runs_p)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, "get_runs", &len);
    if (s != ECT_OK)
        return s;
    if (n_runs_p == NULL || (runs == NULL && cap > 0))
        return ect__error(ECT_ERR_INVALID_ARG, "cache get_runs: NULL n_runs_p, or NULL runs "
                                               "with a non-zero cap");
    lock(cache);
    struct ect__entry *e = find_locked(cache, key, len);
    if (e == NULL) {
        s = not_found("get_runs", key);
    } else if (runs == NULL) {
        *n_runs_p = e->n_runs;
    } else if (cap < e->n_runs) {
        s = ect__error(ECT_ERR_OVERFLOW,
                       "cache get_runs: entry " KEY_FMT " has %zu runs, the buffer holds %zu", key,
                       e->n_runs, cap);
    } else {
        memcpy(runs, e->runs, e->n_runs * sizeof(*runs));
        *n_runs_p = e->n_runs;
    }
    unlock(cache);
    return s;
}

bool
ect_cache_has_held_entries(ect_cache_t *cache)
{
    if (cache == NULL)
        return 0;
    /* From the listener this thread already holds the lock. */
    int in_listener = ect__cache_in_listener(cache);
    if (!in_listener)
        lock(cache);
    int held = cache->entries_not_ready + cache->entries_pinned > 0;
    if (!in_listener)
        unlock(cache);
    return held;
}

/* ---- state changes ------------------------------------------------------------------ */

ect_status_t
ect_cache_mark_ready(ect_cache_t *cache, const char *key)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, "mark_ready", &len);
    if (s != ECT_OK)
        return s;
    lock(cache);
    struct ect__entry *e = find_locked(cache, key, len);
    if (e == NULL) {
        s = not_found("mark_ready", key);
    } else if (e->ready) {
        s = ect__error(ECT_ERR_STATE, "cache mark_ready: entry " KEY_FMT " is already ready", key);
    } else {
        e->ready = 1;
        cache->entries_not_ready--;
        if (e->holds_pending > 0) {
            /* Announced before the save landed: the holds pin it now, so it
             * cannot be evicted before the consumer's read. */
            cache->entries_pinned++;
            ect__holds_activate_locked(cache, e);
        } else {
            fifo_append_locked(cache, e);
        }
        emit_locked(cache, ECT_CACHE_EVENT_STORED, e);
    }
    unlock(cache);
    return s;
}

ect_status_t
ect_cache_pin(ect_cache_t *cache, const char *key)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, "pin", &len);
    if (s != ECT_OK)
        return s;
    lock(cache);
    struct ect__entry *e = find_locked(cache, key, len);
    if (e == NULL) {
        s = not_found("pin", key);
    } else if (!e->ready) {
        s = ect__error(ECT_ERR_STATE, "cache pin: entry " KEY_FMT " is not ready", key);
    } else {
        ect__cache_pin_locked(cache, e);
        e->pins++;
        cache->pins++;
    }
    unlock(cache);
    return s;
}

ect_status_t
ect_cache_unpin(ect_cache_t *cache, const char *key)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, "unpin", &len);
    if (s != ECT_OK)
        return s;
    lock(cache);
    struct ect__entry *e = find_locked(cache, key, len);
    if (e == NULL) {
        s = not_found("unpin", key);
    } else if (e->pins == 0) {
        s = ect__error(ECT_ERR_STATE,
                       "cache unpin: entry " KEY_FMT " is %s with no pin to drop (%llu holds "
                       "active; holds end with release_hold)",
                       key, ect_cache_entry_state_str(state_of(e)),
                       (unsigned long long)e->holds_active);
    } else {
        e->pins--;
        cache->pins--;
        ect__cache_unpin_locked(cache, e);
    }
    unlock(cache);
    return s;
}

ect_status_t
ect_cache_pin_if_ready(ect_cache_t *cache, const char *key, ect_pin_result_t *result_p)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, "pin_if_ready", &len);
    if (s != ECT_OK)
        return s;
    if (result_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "cache pin_if_ready: NULL result_p");
    lock(cache);
    struct ect__entry *e = find_locked(cache, key, len);
    if (e == NULL) {
        *result_p = ECT_PIN_ABSENT;
    } else if (!e->ready) {
        *result_p = ECT_PIN_NOT_READY;
    } else {
        ect__cache_pin_locked(cache, e);
        e->pins++;
        cache->pins++;
        *result_p = ECT_PIN_PINNED;
    }
    unlock(cache);
    return ECT_OK;
}

ect_status_t
ect_cache_discard(ect_cache_t *cache, const char *key)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, "discard", &len);
    if (s != ECT_OK)
        return s;
    lock(cache);
    struct ect__entry *e = find_locked(cache, key, len);
    if (e == NULL) {
        s = not_found("discard", key);
    } else if (e->ready) {
        s = ect__error(ECT_ERR_STATE,
                       "cache discard: entry " KEY_FMT " is %s; only not-ready entries can be "
                       "discarded",
                       key, ect_cache_entry_state_str(state_of(e)));
    } else {
        ect__holds_drop_locked(cache, e);
        cache->entries_not_ready--;
        emit_locked(cache, ECT_CACHE_EVENT_DISCARDED, e);
        free_entry_locked(cache, e);
    }
    unlock(cache);
    return s;
}

/* ---- stats -------------------------------------------------------------------------- */

ect_status_t
ect_cache_stats(ect_cache_t *cache, ect_cache_stats_t *stats_p)
{
    ect_status_t s = ect__cache_enter_check(cache, "stats");
    if (s != ECT_OK)
        return s;
    if (stats_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "cache stats: NULL stats_p");
    ect_cache_stats_t st;
    memset(&st, 0, sizeof(st));
    lock(cache);
    st.num_blocks = cache->extents.num_blocks;
    st.free_blocks = cache->extents.free_blocks;
    st.used_blocks = st.num_blocks - st.free_blocks;
    st.evictable_blocks = cache->evictable_blocks;
    st.free_runs = ect__extents_free_runs(&cache->extents);
    st.largest_free_run = ect__extents_largest(&cache->extents);
    st.entries = cache->entries;
    st.entries_not_ready = cache->entries_not_ready;
    st.entries_pinned = cache->entries_pinned;
    st.entries_ready = cache->entries - cache->entries_not_ready - cache->entries_pinned;
    st.pins = cache->pins;
    st.holds_active = cache->holds_active;
    st.holds_pending = cache->holds_pending;
    st.allocs = cache->allocs;
    st.alloc_no_space = cache->alloc_no_space;
    st.evicted_entries = cache->evicted_entries;
    st.evicted_blocks = cache->evicted_blocks;
    st.holds_expired = cache->holds_expired;
    memcpy(st.runs_histogram, cache->runs_histogram, sizeof(st.runs_histogram));
    unlock(cache);
    *stats_p = st;
    return ECT_OK;
}

/* ---- walk (src/cache/walk.h) ---- */

struct walk_call {
    ect__cache_walk_fn fn;
    void *user;
};

static void
walk_one(struct ect__entry *e, void *arg)
{
    const struct walk_call *w = arg;
    w->fn(e->key, e->n_blocks, e->ready != 0, w->user);
}

void
ect__cache_walk(ect_cache_t *cache, ect__cache_walk_fn fn, void *user)
{
    if (cache == NULL || fn == NULL)
        return;
    struct walk_call w = {.fn = fn, .user = user};
    pthread_mutex_lock(&cache->lock);
    ect__index_each(&cache->index, walk_one, &w);
    pthread_mutex_unlock(&cache->lock);
}
