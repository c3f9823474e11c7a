/*
 * Peer-to-peer transfer behind the scheduler's seam (src/step/p2p_hooks.h):
 * starts the producer and/or consumer session for the role, and implements
 * the consumer's admission rule (SPEC §8.5) on top of the consumer session.
 *
 * Per (request, item) the consumer keeps a small record: when the item was
 * first deferred (the 60 s defer budget counts from there, across retries
 * and long steps) and whether it fell back to local encoding (then it is
 * never fetched again for that request).  request_finished forgets them.
 * Requests that cannot be served (an encoding lost with the media gone, a
 * malformed size) are queued for take_unavailable.
 *
 * Who owns what among the three P2P records:
 *   struct item_rec (here)      one per (request, item) the consumer side has
 *                               seen: when it was first deferred, whether it
 *                               fell back.  Owns no cache state.
 *   struct xfer (consumer.c)    one per fetch in flight: its entry's blocks
 *                               (allocated not ready, freed or made ready by
 *                               it alone), its state, its read handle.
 *   struct grant (producer.c)   one per read granted to a peer: one pin on
 *                               the producer's entry, its runs, its token.
 * Locks: p2p->lock guards the item records and the unavailable queue and is
 * taken before the consumer's or producer's lock (order: src/step/scheduler.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/strmap.h"
#include "p2p/consumer.h"
#include "p2p/producer.h"
#include "proto/params.h"
#include "proto/wire.h"
#include "step/p2p_hooks.h"

struct item_rec {
    uint64_t first_defer_ns; /* 0 = never deferred */
    int local;               /* fell back: compute locally for this request */
};

struct ect__p2p {
    ect_config_t cfg;
    ect_geometry_t geom;
    ect_cache_t *cache;
    ect_producer_t *producer;
    ect_consumer_t *consumer;
    pthread_mutex_t lock;
    ect_strmap_t items; /* "request_id\x1fidentifier" -> struct item_rec */
    char **unavailable;
    size_t n_unavailable, cap_unavailable;
    uint64_t fallbacks;
    uint64_t unavailable_total;
};

ect_status_t
ect__p2p_create(const ect__p2p_params_t *params, struct ect__p2p **p2p_p)
{
    struct ect__p2p *p = ect__calloc(1, sizeof(*p));
    if (p == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "p2p: out of memory");
    p->cfg = *params->config;
    p->geom = *params->geometry;
    p->cache = params->cache;
    ect__strmap_init(&p->items);
    char compat[65];
    ect_status_t st =
        ect__compat_hash(params->engine_version ? params->engine_version : "",
                         params->model_name ? params->model_name : "",
                         ect_dtype_torch_name(p->geom.dtype), p->geom.block_size_bytes, compat);
    if (st != ECT_OK)
        goto err_free;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "p2p: cannot create its mutex");
        goto err_free;
    }
    if (ect_role_produces(p->cfg.role)) {
        ect_producer_params_t pp = {params->config, params->geometry, params->cache,
                                    params->region, compat,           params->events};
        if ((st = ect__producer_start(&pp, &p->producer)) != ECT_OK)
            goto err_mutex;
    }
    if (ect_role_consumes(p->cfg.role)) {
        ect_consumer_params_t cp = {params->config, params->geometry, params->cache, params->region,
                                    compat};
        if ((st = ect__consumer_start(&cp, &p->consumer)) != ECT_OK)
            goto err_producer;
    }
    *p2p_p = p;
    return ECT_OK;

err_producer:
    ect__producer_stop(p->producer);
err_mutex:
    pthread_mutex_destroy(&p->lock);
err_free:
    ect__free(p);
    return st;
}

static void
free_item(ect_strmap_node_t *node, void *user)
{
    (void)user;
    ect__free(node->value);
}

void
ect__p2p_destroy(struct ect__p2p *p)
{
    if (p == NULL)
        return;
    ect__consumer_stop(p->consumer);
    ect__producer_stop(p->producer);
    ect__strmap_each(&p->items, free_item, NULL);
    ect__strmap_cleanup(&p->items);
    for (size_t i = 0; i < p->n_unavailable; i++)
        ect__free(p->unavailable[i]);
    ect__free(p->unavailable);
    pthread_mutex_destroy(&p->lock);
    ect__free(p);
}

ect_status_t
ect__p2p_announce(struct ect__p2p *p, const ect_request_t *request, char **params_json_p)
{
    *params_json_p = NULL;
    if (p->producer == NULL)
        return ECT_OK;
    return ect__producer_announce(p->producer, request, params_json_p);
}

/* ---- consumer admission ------------------------------------------------- */

static void
item_key(const ect_request_t *r, const ect_mm_feature_t *f, char *out, size_t cap)
{
    snprintf(out, cap, "%s\x1f%s", r->request_id ? r->request_id : "", f->identifier);
}

static struct item_rec *
item_get_locked(struct ect__p2p *p, const char *k)
{
    ect_strmap_node_t *node = ect__strmap_find(&p->items, k);
    if (node != NULL)
        return node->value;
    struct item_rec *rec = ect__calloc(1, sizeof(*rec));
    if (rec == NULL || ect__strmap_put(&p->items, k, rec, NULL) != ECT_OK) {
        ect__free(rec);
        return NULL;
    }
    return rec;
}

static void
mark_unavailable_locked(struct ect__p2p *p, const char *request_id)
{
    for (size_t i = 0; i < p->n_unavailable; i++)
        if (strcmp(p->unavailable[i], request_id) == 0)
            return;
    if (p->n_unavailable == p->cap_unavailable) {
        size_t cap = p->cap_unavailable ? p->cap_unavailable * 2 : 8;
        char **grown = ect__realloc(p->unavailable, cap * sizeof(*grown));
        if (grown == NULL)
            return;
        p->unavailable = grown;
        p->cap_unavailable = cap;
    }
    char *copy = ect__strdup(request_id);
    if (copy != NULL) {
        p->unavailable[p->n_unavailable++] = copy;
        p->unavailable_total++;
    }
}

enum verdict { ITEM_READY, ITEM_DEFER, ITEM_LOCAL, ITEM_FAIL };

/* The item could not be fetched: compute it here if the media is still on
 * the request, else the request cannot be served. */
static enum verdict
fall_back_locked(struct ect__p2p *p, const ect_mm_feature_t *f, struct item_rec *rec,
                 const char *why)
{
    if (f->has_local_input) {
        p->fallbacks++;
        if (rec != NULL)
            rec->local = 1;
        ECT_LOG_I("p2p: '%s' will be encoded locally: %s", f->identifier, why);
        return ITEM_LOCAL;
    }
    ECT_LOG_W("p2p: '%s' cannot be fetched (%s) and the request has no media to encode it",
              f->identifier, why);
    return ITEM_FAIL;
}

static enum verdict
defer_locked(struct ect__p2p *p, const ect_mm_feature_t *f, struct item_rec *rec, uint64_t now)
{
    if (rec == NULL)
        return ITEM_DEFER;
    if (rec->first_defer_ns == 0)
        rec->first_defer_ns = now;
    if ((double)(now - rec->first_defer_ns) / 1e9 <= p->cfg.defer_budget_s)
        return ITEM_DEFER;
    ect__consumer_cancel(p->consumer, f->identifier);
    return fall_back_locked(p, f, rec, "the defer budget ran out");
}

static enum verdict
decide_item_locked(struct ect__p2p *p, const ect_request_t *r, const ect_mm_feature_t *f,
                   const ect_params_t *params, uint64_t now)
{
    char k[2 * ECT_KEY_MAX + 2];
    item_key(r, f, k, sizeof(k));
    struct item_rec *rec = item_get_locked(p, k);
    if (rec != NULL && rec->local)
        return ITEM_LOCAL;
    ect_cache_entry_t e;
    bool exists = false;
    if (ect_cache_find(p->cache, f->identifier, &e, &exists) != ECT_OK)
        exists = false; /* an identifier no entry can have: absent */
    if (exists && e.state != ECT_CACHE_ENTRY_NOT_READY)
        return ITEM_READY;
    char reason[160];
    switch (ect__consumer_state(p->consumer, f->identifier)) {
    case ECT_FETCH_FAILED:
        ect__consumer_take_failure(p->consumer, f->identifier, reason, sizeof(reason));
        return fall_back_locked(p, f, rec, reason);
    case ECT_FETCH_PENDING:
        return defer_locked(p, f, rec, now);
    case ECT_FETCH_NONE:
        break;
    }
    if (exists) /* not ready and not ours: a local save or a settling read */
        return defer_locked(p, f, rec, now);
    const char *h = f->mm_hash != NULL ? f->mm_hash : f->identifier;
    ect_params_item_t item;
    ect_status_t found = params != NULL ? ect__params_find(params, h, &item) : ECT_ERR_NOT_FOUND;
    if (found == ECT_ERR_PARSE) {
        ECT_LOG_W("p2p: request '%s': %s: failing the request", r->request_id ? r->request_id : "?",
                  ect_last_error());
        return ITEM_FAIL;
    }
    if (found != ECT_OK || !item.served)
        return ITEM_LOCAL; /* not announced with an address: encode here */
    uint64_t want = f->num_tokens * p->geom.block_size_bytes;
    if (item.size_bytes != want) {
        ECT_LOG_W("p2p: request '%s': size_bytes of '%s' is %llu, not %llu (this instance's size "
                  "for %llu tokens): failing the request",
                  r->request_id ? r->request_id : "?", h, (unsigned long long)item.size_bytes,
                  (unsigned long long)want, (unsigned long long)f->num_tokens);
        return ITEM_FAIL;
    }
    ect_status_t st = ect__consumer_fetch(p->consumer, f->identifier, h, item.peer_host,
                                          item.peer_port, f->num_tokens);
    if (st == ECT_OK || st == ECT_ERR_EXISTS || st == ECT_ERR_NO_SPACE)
        return defer_locked(p, f, rec, now);
    return fall_back_locked(p, f, rec, ect_last_error());
}

ect_status_t
ect__p2p_ensure(struct ect__p2p *p, const ect_request_t *r, int *available_p)
{
    *available_p = 1;
    if (p->consumer == NULL || r->ec_transfer_params_json == NULL ||
        r->ec_transfer_params_json[0] == '\0')
        return ECT_OK;
    ect_params_t *params = NULL;
    if (ect__params_decode(r->ec_transfer_params_json, &params) != ECT_OK)
        ECT_LOG_W("p2p: request '%s': %s; ignoring it (its items are encoded here)",
                  r->request_id ? r->request_id : "?", ect_last_error());
    uint64_t now = ect__now_ns();
    int pending = 0, failed = 0;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < r->n_features; i++) {
        const ect_mm_feature_t *f = &r->features[i];
        if (f->offset + f->num_tokens <= r->num_computed_tokens)
            continue;
        switch (decide_item_locked(p, r, f, params, now)) {
        case ITEM_DEFER:
            pending = 1;
            break;
        case ITEM_FAIL:
            failed = 1;
            break;
        case ITEM_READY:
        case ITEM_LOCAL:
            break;
        }
    }
    if (failed)
        mark_unavailable_locked(p, r->request_id ? r->request_id : "");
    pthread_mutex_unlock(&p->lock);
    ect__params_destroy(params);
    *available_p = !pending && !failed;
    return ECT_OK;
}

void
ect__p2p_request_finished(struct ect__p2p *p, const ect_request_t *r)
{
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < r->n_features; i++) {
        char k[2 * ECT_KEY_MAX + 2];
        item_key(r, &r->features[i], k, sizeof(k));
        void *v = NULL;
        if (ect__strmap_remove(&p->items, k, &v))
            ect__free(v);
    }
    pthread_mutex_unlock(&p->lock);
}

size_t
ect__p2p_take_unavailable(struct ect__p2p *p, char **ids, size_t cap)
{
    pthread_mutex_lock(&p->lock);
    size_t n = p->n_unavailable < cap ? p->n_unavailable : cap;
    for (size_t i = 0; i < n; i++)
        ids[i] = p->unavailable[i];
    if (n > 0) {
        memmove(p->unavailable, p->unavailable + n, (p->n_unavailable - n) * sizeof(char *));
        p->n_unavailable -= n;
    }
    pthread_mutex_unlock(&p->lock);
    return n;
}

int
ect__p2p_has_pending(struct ect__p2p *p)
{
    return (p->producer != NULL && ect__producer_has_pending(p->producer)) ||
           (p->consumer != NULL && ect__consumer_has_pending(p->consumer));
}

void
ect__p2p_metrics(struct ect__p2p *p, ect_metrics_t *m)
{
    if (p->producer != NULL)
        ect__producer_metrics(p->producer, m);
    if (p->consumer != NULL)
        ect__consumer_metrics(p->consumer, m);
    pthread_mutex_lock(&p->lock);
    m->p2p_fallbacks += p->fallbacks;
    m->p2p_unavailable += p->unavailable_total;
    pthread_mutex_unlock(&p->lock);
}

const char *
ect__p2p_host(const struct ect__p2p *p)
{
    return p != NULL && p->producer != NULL ? ect__producer_host(p->producer) : "";
}

uint16_t
ect__p2p_port(const struct ect__p2p *p)
{
    return p != NULL && p->producer != NULL ? ect__producer_port(p->producer) : 0;
}
