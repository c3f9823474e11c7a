/*
 * Holds: leased pins taken for announcements (SPEC §8.6, behaviour §4.1).
 *
 * Each hold is its own object, so each announcement keeps its own lease (a
 * frequently re-announced entry is not pinned forever by one refreshed
 * lease).  A hold sits in two trees, by id (release) and by (deadline, id)
 * (expiry takes the earliest first), and on its entry's list (mark_ready
 * activates the entry's pending holds; discard drops them).  Its pin is
 * counted in entry->holds_active, apart from explicit pins, so unpin can
 * never take a hold's pin and a hold can be released only once.
 *
 * Locking: the cache's mutex.
 */
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "common/error.h"

#define HOLD_BY_ID(n)       ect__avl_entry((n), struct ect__hold, by_id)
#define HOLD_BY_DEADLINE(n) ect__avl_entry((n), struct ect__hold, by_deadline)

static int
cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

static int
cmp_by_id(const struct ect__avl_node *a, const struct ect__avl_node *b)
{
    return cmp_u64(HOLD_BY_ID(a)->id, HOLD_BY_ID(b)->id);
}

static int
cmp_by_deadline(const struct ect__avl_node *a, const struct ect__avl_node *b)
{
    const struct ect__hold *ha = HOLD_BY_DEADLINE(a), *hb = HOLD_BY_DEADLINE(b);
    int c = cmp_u64(ha->deadline_ns, hb->deadline_ns);
    return c != 0 ? c : cmp_u64(ha->id, hb->id);
}

void
ect__holds_init(struct ect_cache *c)
{
    ect__avl_init(&c->holds_by_id, cmp_by_id);
    ect__avl_init(&c->holds_by_deadline, cmp_by_deadline);
    c->next_hold_id = 1;
}

/* Take h out of the trees and its entry's list, and free it.  Pin
 * accounting is the caller's. */
static void
unlink_hold_locked(struct ect_cache *c, struct ect__hold *h)
{
    ect__avl_remove(&c->holds_by_id, &h->by_id);
    ect__avl_remove(&c->holds_by_deadline, &h->by_deadline);
    if (h->eprev != NULL)
        h->eprev->enext = h->enext;
    else
        h->entry->holds = h->enext;
    if (h->enext != NULL)
        h->enext->eprev = h->eprev;
    ect__pool_put(&c->hold_pool, h);
}

/* End one hold: drop its pin if active, forget it if pending. */
static void
release_locked(struct ect_cache *c, struct ect__hold *h)
{
    struct ect__entry *e = h->entry;
    int pending = h->pending;
    unlink_hold_locked(c, h);
    if (pending) {
        e->holds_pending--;
        c->holds_pending--;
    } else {
        e->holds_active--;
        c->holds_active--;
        ect__cache_unpin_locked(c, e);
    }
}

void
ect__holds_activate_locked(struct ect_cache *c, struct ect__entry *e)
{
    for (struct ect__hold *h = e->holds; h != NULL; h = h->enext)
        h->pending = 0;
    e->holds_active += e->holds_pending;
    c->holds_active += e->holds_pending;
    c->holds_pending -= e->holds_pending;
    e->holds_pending = 0;
}

void
ect__holds_drop_locked(struct ect_cache *c, struct ect__entry *e)
{
    /* Only not-ready entries are discarded, so every hold here is pending. */
    while (e->holds != NULL)
        release_locked(c, e->holds);
}

ect_status_t
ect_cache_hold(ect_cache_t *cache, const char *key, uint64_t lease_deadline_ns, uint64_t *hold_id_p)
{
    size_t len;
    ect_status_t s = ect__cache_enter_key(cache, key, "hold", &len);
    if (s != ECT_OK)
        return s;
    if (hold_id_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "cache hold: NULL hold_id_p");
    uint64_t hash = ect__index_hash(&cache->index, key, len);

    pthread_mutex_lock(&cache->lock);
    struct ect__entry *e = ect__index_find(&cache->index, key, len, hash);
    struct ect__hold *h = NULL;
    if (e == NULL)
        s = ect__error(ECT_ERR_NOT_FOUND, "cache hold: no entry '%.200s'", key);
    else if ((uint64_t)e->holds_active + e->holds_pending >= UINT32_MAX)
        s = ect__error(ECT_ERR_OVERFLOW, "cache hold: entry '%.200s' has too many holds", key);
    else if ((h = ect__pool_get(&cache->hold_pool)) == NULL)
        s = ect__error(ECT_ERR_NO_MEMORY, "cache hold: no memory for a hold on '%.200s'", key);
    if (s != ECT_OK) {
        pthread_mutex_unlock(&cache->lock);
        return s;
    }
    memset(h, 0, sizeof(*h));
    h->id = cache->next_hold_id++;
    h->deadline_ns = lease_deadline_ns;
    h->entry = e;
    h->enext = e->holds;
    if (e->holds != NULL)
        e->holds->eprev = h;
    e->holds = h;
    ect__avl_insert(&cache->holds_by_id, &h->by_id);
    ect__avl_insert(&cache->holds_by_deadline, &h->by_deadline);
    if (e->ready) {
        ect__cache_pin_locked(cache, e);
        e->holds_active++;
        cache->holds_active++;
    } else {
        h->pending = 1;
        e->holds_pending++;
        cache->holds_pending++;
    }
    *hold_id_p = h->id;
    pthread_mutex_unlock(&cache->lock);
    return ECT_OK;
}

ect_status_t
ect_cache_release_hold(ect_cache_t *cache, uint64_t hold_id)
{
    ect_status_t s = ect__cache_enter_check(cache, "release_hold");
    if (s != ECT_OK)
        return s;
    struct ect__hold probe = {.id = hold_id};
    pthread_mutex_lock(&cache->lock);
    struct ect__avl_node *n = ect__avl_find(&cache->holds_by_id, &probe.by_id);
    if (n == NULL)
        s = ect__error(ECT_ERR_NOT_FOUND,
                       "cache release_hold: no hold %llu (never taken, already released, "
                       "expired, or dropped with its entry)",
                       (unsigned long long)hold_id);
    else
        release_locked(cache, HOLD_BY_ID(n));
    pthread_mutex_unlock(&cache->lock);
    return s;
}

ect_status_t
ect_cache_expire_holds(ect_cache_t *cache, uint64_t now_ns, size_t *expired_p)
{
    ect_status_t s = ect__cache_enter_check(cache, "expire_holds");
    if (s != ECT_OK)
        return s;
    size_t expired = 0;
    pthread_mutex_lock(&cache->lock);
    struct ect__avl_node *n;
    while ((n = ect__avl_first(&cache->holds_by_deadline)) != NULL &&
           HOLD_BY_DEADLINE(n)->deadline_ns <= now_ns) {
        release_locked(cache, HOLD_BY_DEADLINE(n));
        expired++;
    }
    cache->holds_expired += expired;
    pthread_mutex_unlock(&cache->lock);
    if (expired_p != NULL)
        *expired_p = expired;
    return ECT_OK;
}
