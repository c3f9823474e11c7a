/*
 * The lifecycle event stream (src/p2p/events.h, seam in src/step/p2p_hooks.h).
 *
 * Invariants: the ring holds at most RING_CAP events, each owning its key;
 * only the publisher thread touches the PUB socket and the `announced` set
 * (keys announced and not yet withdrawn), so "withdrawn" is derived in
 * queue order, after the eviction that caused it.  Locking: `lock` guards
 * the ring, `stopping` and `dropped`; it is taken under the cache's lock by
 * the listener, so nothing here calls into the cache while holding it.
 */
#include <cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/error.h"
#include "common/strmap.h"
#include "p2p/events.h"
#include "step/p2p_hooks.h"

#define RING_CAP 4096

struct event {
    ect__event_kind_t kind;
    uint64_t n_blocks;
    uint64_t t_ns;
    char *key;
};

struct ect__events {
    void *zctx;
    void *pub;
    ect_cache_t *cache;
    char instance[ECT_CONFIG_ADDR_MAX + 1];
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct event ring[RING_CAP];
    size_t head, n;
    int stopping;
    uint64_t dropped;
    ect_strmap_t announced; /* publisher thread only: key -> NULL */
};

static const char *const kind_names[] = {
    [ECT__EVENT_STORED] = "stored",       [ECT__EVENT_EVICTED] = "evicted",
    [ECT__EVENT_DISCARDED] = "discarded", [ECT__EVENT_ANNOUNCED] = "announced",
    [ECT__EVENT_WITHDRAWN] = "withdrawn",
};

static uint64_t
unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void
ect__events_publish(struct ect__events *ev, ect__event_kind_t kind, const char *key,
                    uint64_t n_blocks)
{
    if (ev == NULL || key == NULL)
        return;
    uint64_t t = unix_ns();
    char *copy = strdup(key);
    pthread_mutex_lock(&ev->lock);
    if (copy == NULL || ev->n == RING_CAP || ev->stopping) {
        /* Never wait for the subscriber side: a slow stream loses events,
         * the engine loses nothing. */
        ev->dropped++;
        pthread_mutex_unlock(&ev->lock);
        free(copy);
        return;
    }
    ev->ring[(ev->head + ev->n) % RING_CAP] =
        (struct event){.kind = kind, .n_blocks = n_blocks, .t_ns = t, .key = copy};
    ev->n++;
    pthread_cond_signal(&ev->cond);
    pthread_mutex_unlock(&ev->lock);
}

uint64_t
ect__events_dropped(struct ect__events *ev)
{
    if (ev == NULL)
        return 0;
    pthread_mutex_lock(&ev->lock);
    uint64_t d = ev->dropped;
    pthread_mutex_unlock(&ev->lock);
    return d;
}

static void
on_cache_event(const ect_cache_event_t *e, void *user)
{
    ect__events_publish(user, (ect__event_kind_t)e->type, e->key, e->n_blocks);
}

static void
send_one(struct ect__events *ev, ect__event_kind_t kind, const char *key, uint64_t n_blocks,
         uint64_t t_ns)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || !cJSON_AddStringToObject(o, "event", kind_names[kind]) ||
        !cJSON_AddStringToObject(o, "key", key) ||
        !cJSON_AddNumberToObject(o, "n_blocks", (double)n_blocks) ||
        !cJSON_AddStringToObject(o, "instance", ev->instance)) {
        cJSON_Delete(o);
        return;
    }
    /* cJSON numbers are doubles, which would round a nanosecond clock:
     * write t as a raw integer. */
    char t[24];
    snprintf(t, sizeof(t), "%llu", (unsigned long long)t_ns);
    cJSON *traw = cJSON_CreateRaw(t);
    if (traw == NULL || !cJSON_AddItemToObject(o, "t", traw)) {
        cJSON_Delete(traw);
        cJSON_Delete(o);
        return;
    }
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (text == NULL)
        return;
    char topic[32];
    int tl = snprintf(topic, sizeof(topic), "ectier.%s", kind_names[kind]);
    /* PUB never blocks: with no subscriber, or one past its high-water
     * mark, ZeroMQ drops the message. */
    if (zmq_send(ev->pub, topic, (size_t)tl, ZMQ_SNDMORE) >= 0)
        zmq_send(ev->pub, text, strlen(text), 0);
    free(text);
}

static void
publish_event(struct ect__events *ev, const struct event *e)
{
    send_one(ev, e->kind, e->key, e->n_blocks, e->t_ns);
    if (e->kind == ECT__EVENT_ANNOUNCED) {
        if (ect__strmap_find(&ev->announced, e->key) == NULL &&
            ect__strmap_put(&ev->announced, e->key, NULL, NULL) != ECT_OK)
            ECT_LOG_W("events: cannot track announced '%s'; its withdrawal is not published",
                      e->key);
    } else if ((e->kind == ECT__EVENT_EVICTED || e->kind == ECT__EVENT_DISCARDED) &&
               ect__strmap_remove(&ev->announced, e->key, NULL)) {
        send_one(ev, ECT__EVENT_WITHDRAWN, e->key, e->n_blocks, e->t_ns);
    }
}

static void *
publisher_main(void *arg)
{
    struct ect__events *ev = arg;
    pthread_mutex_lock(&ev->lock);
    for (;;) {
        while (ev->n == 0 && !ev->stopping)
            pthread_cond_wait(&ev->cond, &ev->lock);
        if (ev->n == 0)
            break; /* stopping, and everything queued went out */
        struct event e = ev->ring[ev->head];
        ev->head = (ev->head + 1) % RING_CAP;
        ev->n--;
        pthread_mutex_unlock(&ev->lock);
        publish_event(ev, &e);
        free(e.key);
        pthread_mutex_lock(&ev->lock);
    }
    pthread_mutex_unlock(&ev->lock);
    return NULL;
}

ect_status_t
ect__p2p_events_start(const ect_config_t *config, ect_cache_t *cache, const char *instance,
                      struct ect__events **events_p)
{
    if (config == NULL || cache == NULL || instance == NULL || events_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "events: NULL config, cache, instance or events_p");
    struct ect__events *ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "events: out of memory");
    ect_status_t st;
    ev->cache = cache;
    snprintf(ev->instance, sizeof(ev->instance), "%s", instance);
    ect__strmap_init(&ev->announced);
    if (pthread_mutex_init(&ev->lock, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "events: cannot create its mutex");
        goto err_free;
    }
    if (pthread_cond_init(&ev->cond, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "events: cannot create its condition variable");
        goto err_mutex;
    }
    if ((ev->zctx = zmq_ctx_new()) == NULL) {
        st = ect__error(ECT_ERR_TRANSPORT, "events: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        goto err_cond;
    }
    if ((ev->pub = zmq_socket(ev->zctx, ZMQ_PUB)) == NULL) {
        st = ect__error(ECT_ERR_TRANSPORT, "events: zmq_socket: %s", zmq_strerror(zmq_errno()));
        goto err_ctx;
    }
    int linger = 0;
    zmq_setsockopt(ev->pub, ZMQ_LINGER, &linger, sizeof(linger));
    if (zmq_bind(ev->pub, config->events_endpoint) != 0) {
        st = ect__error(ECT_ERR_TRANSPORT, "events_endpoint = \"%s\": cannot bind: %s",
                        config->events_endpoint, zmq_strerror(zmq_errno()));
        goto err_socket;
    }
    /* The socket is handed to the thread here, and not touched by this
     * thread again until the join in stop (pthread_create is a barrier). */
    if (pthread_create(&ev->thread, NULL, publisher_main, ev) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "events: cannot start the publisher thread");
        goto err_socket;
    }
    if ((st = ect_cache_set_listener(cache, on_cache_event, ev)) != ECT_OK)
        goto err_thread;
    *events_p = ev;
    return ECT_OK;

err_thread:
    pthread_mutex_lock(&ev->lock);
    ev->stopping = 1;
    pthread_cond_signal(&ev->cond);
    pthread_mutex_unlock(&ev->lock);
    pthread_join(ev->thread, NULL);
err_socket:
    zmq_close(ev->pub);
err_ctx:
    zmq_ctx_term(ev->zctx);
err_cond:
    pthread_cond_destroy(&ev->cond);
err_mutex:
    pthread_mutex_destroy(&ev->lock);
err_free:
    free(ev);
    return st;
}

void
ect__p2p_events_stop(struct ect__events *ev)
{
    if (ev == NULL)
        return;
    /* No new events from the cache, then let the thread send what is
     * queued and leave. */
    if (ect_cache_set_listener(ev->cache, NULL, NULL) != ECT_OK)
        ect__log_last_error(ECT_LOG_WARN, "events: detaching from the cache");
    pthread_mutex_lock(&ev->lock);
    ev->stopping = 1;
    pthread_cond_signal(&ev->cond);
    uint64_t dropped = ev->dropped;
    pthread_mutex_unlock(&ev->lock);
    pthread_join(ev->thread, NULL);
    if (dropped > 0)
        ECT_LOG_W("events: %llu events were dropped because the queue was full",
                  (unsigned long long)dropped);
    zmq_close(ev->pub);
    zmq_ctx_term(ev->zctx);
    ect__strmap_cleanup(&ev->announced);
    pthread_cond_destroy(&ev->cond);
    pthread_mutex_destroy(&ev->lock);
    free(ev);
}
