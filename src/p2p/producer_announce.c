/*
 * The producer's announcements (producer.h): request_finished on the
 * scheduler thread announces a request's entries in ec_transfer_params and
 * takes a hold on each, so the entry outlives the consumer's way to it; the
 * session thread releases the oldest live hold of an mm_hash when a read of
 * it is served, and lets holds lapse at their lease.  Announcements live in
 * a map keyed by mm_hash: the cache key of the entry and the FIFO of its
 * hold ids with their deadlines.
 */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "p2p/events.h"
#include "p2p/producer_internal.h"
#include "proto/params.h"

static struct announcement *
announcement_get_locked(ect_producer_t *p, const char *mm_hash, const char *cache_key)
{
    ect_strmap_node_t *node = ect__strmap_find(&p->announced, mm_hash);
    if (node != NULL)
        return node->value;
    struct announcement *a = ect__calloc(1, sizeof(*a));
    if (a == NULL || (a->cache_key = ect__strdup(cache_key)) == NULL ||
        ect__strmap_put(&p->announced, mm_hash, a, NULL) != ECT_OK) {
        if (a != NULL)
            ect__free(a->cache_key);
        ect__free(a);
        return NULL;
    }
    return a;
}

/* End an announcement's hold.  ECT_ERR_NOT_FOUND is no fault: the hold's
 * lease ran out, or it went with its entry. */
static void
release_hold(ect_producer_t *p, uint64_t hold_id)
{
    ect_status_t st = ect_cache_release_hold(p->cache, hold_id);
    if (st != ECT_ERR_NOT_FOUND)
        ect__log_failure(st, "producer");
}

static void
announcement_free(struct announcement *a)
{
    ect__free(a->cache_key);
    ect__free(a->holds);
    ect__free(a);
}

void
ect__producer_announcement_served_locked(ect_producer_t *p, const char *mm_hash)
{
    ect_strmap_node_t *node = ect__strmap_find(&p->announced, mm_hash);
    if (node == NULL)
        return;
    struct announcement *a = node->value;
    size_t i = 0;
    /* Holds that lapsed or were dropped with their entry answer NOT_FOUND:
     * skip them and release the first live one. */
    while (i < a->n && ect_cache_release_hold(p->cache, a->holds[i].id) != ECT_OK)
        i++;
    if (i < a->n)
        i++;
    if (i > 0) {
        memmove(a->holds, a->holds + i, (a->n - i) * sizeof(*a->holds));
        a->n -= i;
    }
    if (a->n == 0) {
        ect__strmap_remove(&p->announced, mm_hash, NULL);
        announcement_free(a);
    }
}

struct prune_ctx {
    uint64_t now;
    struct key_batch empty;
};

static void
prune_announcement(ect_strmap_node_t *node, void *user)
{
    struct prune_ctx *c = user;
    struct announcement *a = node->value;
    size_t kept = 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->holds[i].deadline_ns > c->now)
            a->holds[kept++] = a->holds[i];
    a->n = kept;
    if (kept == 0)
        key_batch_add(&c->empty, node->key);
}

void
ect__producer_announcements_sweep_locked(ect_producer_t *p, uint64_t now)
{
    ect__log_failure(ect_cache_expire_holds(p->cache, now, NULL), "producer");
    struct prune_ctx c = {.now = now};
    ect__strmap_each(&p->announced, prune_announcement, &c);
    for (size_t i = 0; i < c.empty.n; i++) {
        void *v;
        if (ect__strmap_remove(&p->announced, c.empty.keys[i], &v))
            announcement_free(v);
        ect__free(c.empty.keys[i]);
    }
}

static void
free_announcement_node(ect_strmap_node_t *node, void *user)
{
    ect_producer_t *p = user;
    struct announcement *a = node->value;
    for (size_t i = 0; i < a->n; i++)
        release_hold(p, a->holds[i].id);
    announcement_free(a);
}

void
ect__producer_announcements_drop_locked(ect_producer_t *p)
{
    ect__strmap_each(&p->announced, free_announcement_node, p);
    ect__strmap_cleanup(&p->announced);
}

/* ---- the scheduler thread's side ---- */

ect_status_t
ect__producer_announce(ect_producer_t *p, const ect_request_t *req, char **params_json_p)
{
    *params_json_p = NULL;
    if (req->n_features == 0)
        return ECT_OK;
    ect_params_item_t *items = ect__calloc(req->n_features, sizeof(*items));
    if (items == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory announcing");
    uint64_t now = ect__now_ns();
    for (size_t i = 0; i < req->n_features; i++) {
        const ect_mm_feature_t *f = &req->features[i];
        const char *h = f->mm_hash != NULL ? f->mm_hash : f->identifier;
        ect_cache_entry_t e;
        bool found = false;
        bool held = ect_cache_find(p->cache, f->identifier, &e, &found) == ECT_OK && found;
        uint64_t hold_id = 0;
        if (held && p->announce_lease_ns > 0 &&
            ect_cache_hold(p->cache, f->identifier, now + p->announce_lease_ns, &hold_id) != ECT_OK)
            held = 0;
        /* Both halves (the metadata and the address, so an orchestrator may
         * drop the media from the follow-up request), or neither (it keeps
         * the media on the request). */
        items[i] = (ect_params_item_t){.mm_hash = h,
                                       .metadata_json = held ? f->metadata_json : NULL,
                                       .served = held,
                                       .peer_host = p->host,
                                       .peer_port = p->port,
                                       .size_bytes = f->num_tokens * p->geom.block_size_bytes};
        if (!held)
            continue;
        pthread_mutex_lock(&p->lock);
        struct announcement *a = announcement_get_locked(p, h, f->identifier);
        if (a != NULL && hold_id != 0) {
            if (a->n == a->cap) {
                size_t cap = a->cap ? a->cap * 2 : 4;
                struct hold_ref *grown = ect__realloc(a->holds, cap * sizeof(*grown));
                if (grown != NULL) {
                    a->holds = grown;
                    a->cap = cap;
                }
            }
            if (a->n < a->cap)
                a->holds[a->n++] = (struct hold_ref){hold_id, now + p->announce_lease_ns};
            else
                release_hold(p, hold_id);
        }
        p->announcements++;
        pthread_mutex_unlock(&p->lock);
        ect__events_publish(p->events, ECT__EVENT_ANNOUNCED, f->identifier, e.n_blocks);
    }
    /* The text is malloc'd (cJSON's allocator): ect_free releases it. */
    ect_status_t st = ect__params_encode(items, req->n_features, params_json_p);
    ect__free(items);
    return st;
}
