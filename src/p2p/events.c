/*
 * The lifecycle event stream (formats in src/p2p/events.h, seam in
 * src/step/p2p_hooks.h): the queue the cache listener fills, the view,
 * numbered batches on the PUB socket and the ring they are kept in, and
 * the publisher thread.  Replays from the ring are events_replay.c; the
 * structures both share, events_internal.h.
 *
 * Two owners.  `lock` guards what other threads touch: the queue, stopping,
 * the drop counters and `stats`.  The cache listener takes it under the
 * cache's lock, so nothing here calls into the cache or takes another lock
 * while holding it (lock order: scheduler -> cache -> events).  Everything
 * else (both sockets, the view, the replay ring, the replays in progress,
 * the numbering) belongs to the publisher thread alone: start hands it over
 * with pthread_create, stop takes it back with pthread_join.
 *
 * Invariants: the ring holds the newest batches, seqs ring_lo .. next_seq-1
 * with no gap, at most replay_cap of them and REPLAY_MAX_BYTES of payload,
 * except that the newest batch is always kept.  A payload (struct msg) is
 * shared by the ring and the replays that still have to send it and freed
 * with its last reference; references change on the publisher thread only.
 * The view is the result of applying batches 0 .. next_seq-1 (and the
 * events of a batch lost to out-of-memory, which the next batch's "lost"
 * owns up to), except after a loss: an event dropped from the full queue
 * (or one the view had no memory for) never reaches the view, so the
 * publisher rebuilds the view from the cache itself (view_rebuild) once it
 * has taken every event queued before the loss.  Events queued before the
 * walk but taken after it are applied again on top of it, which leaves each
 * key as its last event says: once the publisher has taken every event
 * queued before the walk (taken_total reaches view_whole_at), the view is
 * the cache again.  Until then it may hold entries the cache dropped before
 * the walk, so no snapshot may be taken of it: replay requests wait in the
 * socket meanwhile (a bounded wait, at most a queue's worth of events).
 */
#include <cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "cache/walk.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/strmap.h"
#include "common/thread.h"
#include "p2p/events_internal.h"
#include "step/p2p_hooks.h"

#define REPLAY_MAX_BYTES ((size_t)64 << 20)
#define BATCH_MAX_EVENTS 256
#define BATCH_MAX_BYTES  (64u * 1024) /* a batch closes once its events reach this */
#define RETRY_MS         2            /* poll period while a replay waits for its peer */
#define ROUTER_SNDHWM    256
#define ROUTER_RCVHWM    64

static const char *const kind_names[] = {
    [ECT__EVENT_STORED] = "stored",       [ECT__EVENT_EVICTED] = "evicted",
    [ECT__EVENT_DISCARDED] = "discarded", [ECT__EVENT_ANNOUNCED] = "announced",
    [ECT__EVENT_WITHDRAWN] = "withdrawn", [ECT__EVENT_CLEARED] = "cleared",
};

static uint64_t
unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void
wake(struct ect__events *ev)
{
    uint64_t one = 1;
    /* Fails only when the counter would overflow: it is readable anyway. */
    while (write(ev->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
}

void
ect__events_publish(struct ect__events *ev, ect__event_kind_t kind, const char *key,
                    uint64_t n_blocks)
{
    if (ev == NULL || key == NULL)
        return;
    uint64_t t = unix_ns();
    char *copy = ect__strdup(key);
    pthread_mutex_lock(&ev->lock);
    if (copy == NULL || ev->n == ECT_EVENTS_QUEUE_CAP || ev->stopping) {
        /* Never wait for the subscriber side: a slow stream loses events
         * (and says so in its next batch), the engine loses nothing. */
        ev->dropped++;
        ev->lost_unreported++;
        ev->resync_pending = true;
        ev->resync_mark = ev->queued_total;
        pthread_mutex_unlock(&ev->lock);
        ect__free(copy);
        return;
    }
    ev->queued_total++;
    ev->queue[(ev->head + ev->n) % ECT_EVENTS_QUEUE_CAP] =
        (struct event){.kind = kind, .n_blocks = n_blocks, .t_ns = t, .key = copy};
    /* Only the first event of an empty queue needs to wake the thread: it
     * empties the queue before it sleeps again. */
    if (ev->n++ == 0)
        wake(ev);
    pthread_mutex_unlock(&ev->lock);
}

void
ect__p2p_events_metrics(struct ect__events *ev, ect_metrics_t *m)
{
    if (ev == NULL || m == NULL)
        return;
    pthread_mutex_lock(&ev->lock);
    m->events_batches += ev->stats.batches;
    m->events_dropped += ev->dropped;
    m->events_hwm_drops += ev->stats.hwm_drops;
    m->events_replays += ev->stats.replays;
    m->events_replay_errors += ev->stats.replay_errors;
    pthread_mutex_unlock(&ev->lock);
}

static void
on_cache_event(const ect_cache_event_t *e, void *user)
{
    ect__events_publish(user, (ect__event_kind_t)e->type, e->key, e->n_blocks);
}

/* ---- payloads -------------------------------------------------------------------- */

/* An integer cJSON would round (its numbers are doubles): written raw. */
bool
ect__events_add_u64(cJSON *o, const char *name, uint64_t v)
{
    char t[24];
    snprintf(t, sizeof(t), "%llu", (unsigned long long)v);
    cJSON *raw = cJSON_CreateRaw(t);
    if (raw == NULL || !cJSON_AddItemToObject(o, name, raw)) {
        cJSON_Delete(raw);
        return false;
    }
    return true;
}

/* The fields every payload starts with. */
cJSON *
ect__events_payload_head(const struct ect__events *ev, const char *type, uint64_t seq)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || !cJSON_AddStringToObject(o, "type", type) ||
        !cJSON_AddStringToObject(o, "instance", ev->instance) ||
        !ect__events_add_u64(o, "epoch", ev->epoch_ns) || !ect__events_add_u64(o, "seq", seq) ||
        !ect__events_add_u64(o, "ts", unix_ns())) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Print o (consumed) into a new message of one reference. */
struct msg *
ect__events_msg_from_json(cJSON *o, uint64_t seq)
{
    char *text = o != NULL ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (text == NULL)
        return NULL;
    size_t len = strlen(text);
    struct msg *m = ect__malloc(sizeof(*m) + len);
    if (m != NULL) {
        *m = (struct msg){.refs = 1, .seq = seq, .len = len};
        memcpy(m->data, text, len);
    }
    ect__free(text);
    return m;
}

static cJSON *
event_json(const struct event *e)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL || !cJSON_AddStringToObject(o, "event", kind_names[e->kind]) ||
        (e->key != NULL && (!cJSON_AddStringToObject(o, "key", e->key) ||
                            !ect__events_add_u64(o, "n_blocks", e->n_blocks))) ||
        !ect__events_add_u64(o, "t", e->t_ns)) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* ---- the view -------------------------------------------------------------------- */

static void
free_view_entry(ect_strmap_node_t *node, void *user)
{
    (void)user;
    ect__free(node->value);
}

static void
view_clear(struct ect__events *ev)
{
    ect__strmap_each(&ev->view, free_view_entry, NULL);
    ect__strmap_cleanup(&ev->view);
    ect__strmap_init(&ev->view);
}

/* The entry of key, created when absent; NULL when out of memory. */
static struct view_entry *
view_get(struct ect__events *ev, const char *key)
{
    ect_strmap_node_t *node = ect__strmap_find(&ev->view, key);
    if (node != NULL)
        return node->value;
    struct view_entry *ve = ect__calloc(1, sizeof(*ve));
    if (ve == NULL || ect__strmap_put(&ev->view, key, ve, NULL) != ECT_OK) {
        ect__free(ve);
        return NULL;
    }
    return ve;
}

/* The view missed an event already taken: rebuild it after this batch, or
 * later if a rebuild already waits for older queued events (a drop). */
static void
resync_after_taken(struct ect__events *ev)
{
    pthread_mutex_lock(&ev->lock);
    if (!ev->resync_pending || ev->resync_mark < ev->taken_total)
        ev->resync_mark = ev->taken_total;
    ev->resync_pending = true;
    pthread_mutex_unlock(&ev->lock);
}

struct rebuild {
    struct ect__events *ev;
    ect_strmap_t view;
    bool failed;
};

static void
rebuild_one(const char *key, uint64_t n_blocks, bool ready, void *user)
{
    struct rebuild *r = user;
    if (r->failed)
        return;
    /* The cache knows no announcements: keep what the old view knew. */
    ect_strmap_node_t *old = ect__strmap_find(&r->ev->view, key);
    bool announced = old != NULL && ((struct view_entry *)old->value)->announced;
    if (!ready && !announced)
        return; /* a save in progress that no router has heard of */
    struct view_entry *ve = ect__malloc(sizeof(*ve));
    if (ve == NULL || ect__strmap_put(&r->view, key, ve, NULL) != ECT_OK) {
        ect__free(ve);
        r->failed = true;
        return;
    }
    *ve = (struct view_entry){.n_blocks = n_blocks, .ready = ready, .announced = announced};
}

/* Replace the view by the cache's entries (see the invariants at the top).
 * Out of memory: the old view stays and the rebuild is retried after the
 * next batch. */
static void
view_rebuild(struct ect__events *ev)
{
    struct rebuild r = {.ev = ev};
    ect__strmap_init(&r.view);
    ect__cache_walk(ev->cache, rebuild_one, &r);
    if (r.failed) {
        ect__strmap_each(&r.view, free_view_entry, NULL);
        ect__strmap_cleanup(&r.view);
        ECT_LOG_W("events: out of memory rebuilding the view; retried after the next batch");
        resync_after_taken(ev);
        return;
    }
    ect__strmap_each(&ev->view, free_view_entry, NULL);
    ect__strmap_cleanup(&ev->view);
    ev->view = r.view;
    /* Read after the walk: every event queued before it is below the mark
     * (and those queued since are correct to apply anyway). */
    pthread_mutex_lock(&ev->lock);
    ev->view_whole_at = ev->queued_total;
    pthread_mutex_unlock(&ev->lock);
}

/* Whether the view is the cache as of the last batch (see the invariants
 * at the top): no rebuild's events still wait to be applied again. */
static bool
view_is_whole(struct ect__events *ev)
{
    pthread_mutex_lock(&ev->lock);
    bool whole = ev->taken_total >= ev->view_whole_at;
    pthread_mutex_unlock(&ev->lock);
    return whole;
}

/* Apply e to the view.  Returns true when e leaves an announced entry: the
 * batch then also says "withdrawn". */
static bool
view_apply(struct ect__events *ev, const struct event *e)
{
    struct view_entry *ve;
    void *value = NULL;
    switch (e->kind) {
    case ECT__EVENT_CLEARED:
        view_clear(ev);
        return false;
    case ECT__EVENT_STORED:
    case ECT__EVENT_ANNOUNCED:
        if ((ve = view_get(ev, e->key)) == NULL) {
            /* Routers learn the event; the view is rebuilt from the cache. */
            ECT_LOG_W("events: out of memory tracking '%s'; the view is rebuilt", e->key);
            resync_after_taken(ev);
            return false;
        }
        ve->n_blocks = e->n_blocks;
        if (e->kind == ECT__EVENT_STORED)
            ve->ready = true;
        else
            ve->announced = true;
        return false;
    case ECT__EVENT_EVICTED:
    case ECT__EVENT_DISCARDED:
        if (!ect__strmap_remove(&ev->view, e->key, &value))
            return false;
        bool announced = ((struct view_entry *)value)->announced;
        ect__free(value);
        return announced;
    case ECT__EVENT_WITHDRAWN:
        return false;
    }
    return false;
}

/* ---- publishing ------------------------------------------------------------------- */

static int
send_frames(void *pub, const struct msg *m, const unsigned char seq[8])
{
    if (zmq_send(pub, ECT_EVENTS_TOPIC, strlen(ECT_EVENTS_TOPIC), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return -1;
    /* A message is queued whole or not at all: past its first frame no
     * send fails for want of room. */
    zmq_send(pub, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(pub, m->data, m->len, ZMQ_DONTWAIT);
    return 0;
}

/* Send m on the PUB socket.  With ZMQ_XPUB_NODROP on, a send fails with
 * EAGAIN when any subscriber is at its high-water mark, which is the only
 * way ZeroMQ tells: count it, then send lossily so that the subscribers
 * with room still get the batch (the others see the gap and replay). */
static void
pub_send(struct ect__events *ev, const struct msg *m)
{
    unsigned char seq[8];
    ect__events_put_be64(seq, m->seq);
    if (send_frames(ev->pub, m, seq) == 0)
        return;
    if (zmq_errno() != EAGAIN)
        return;
    ect__events_count(ev, &ev->stats.hwm_drops);
    int off = 0, on = 1;
    zmq_setsockopt(ev->pub, ZMQ_XPUB_NODROP, &off, sizeof(off));
    send_frames(ev->pub, m, seq);
    zmq_setsockopt(ev->pub, ZMQ_XPUB_NODROP, &on, sizeof(on));
}

static void
ring_drop_oldest(struct ect__events *ev)
{
    struct msg *old = ev->ring[ev->ring_head];
    ev->ring[ev->ring_head] = NULL;
    ev->ring_head = (ev->ring_head + 1) % ev->replay_cap;
    ev->ring_n--;
    ev->ring_bytes -= old->len;
    ect__events_msg_unref(old);
}

/* Keep m (its reference moves to the ring). */
static void
ring_push(struct ect__events *ev, struct msg *m)
{
    while (ev->ring_n > 0 &&
           (ev->ring_n == ev->replay_cap || ev->ring_bytes + m->len > REPLAY_MAX_BYTES))
        ring_drop_oldest(ev);
    ev->ring[(ev->ring_head + ev->ring_n) % ev->replay_cap] = m;
    ev->ring_n++;
    ev->ring_bytes += m->len;
}

/* Number, send and keep one batch of events (consumed: keys freed).  A
 * batch that cannot be built (out of memory) is lost whole and counted as
 * lost in the next one; the numbering never skips. */
static void
publish_batch(struct ect__events *ev, struct event *events, size_t n, uint64_t lost)
{
    uint64_t seq = ev->next_seq;
    cJSON *o = ect__events_payload_head(ev, "batch", seq);
    cJSON *arr = NULL;
    bool ok = o != NULL && (lost == 0 || ect__events_add_u64(o, "lost", lost)) &&
              (arr = cJSON_AddArrayToObject(o, "events")) != NULL;
    for (size_t i = 0; i < n; i++) {
        bool withdrawn = view_apply(ev, &events[i]);
        if (ok) {
            cJSON *e = event_json(&events[i]);
            ok = e != NULL && cJSON_AddItemToArray(arr, e);
        }
        if (ok && withdrawn) {
            struct event w = events[i];
            w.kind = ECT__EVENT_WITHDRAWN;
            cJSON *e = event_json(&w);
            ok = e != NULL && cJSON_AddItemToArray(arr, e);
        }
        ect__free(events[i].key);
    }
    struct msg *m = ok ? ect__events_msg_from_json(o, seq) : (cJSON_Delete(o), NULL);
    if (m == NULL) {
        ECT_LOG_W("events: out of memory building batch %llu; its %zu events are lost",
                  (unsigned long long)seq, n);
        pthread_mutex_lock(&ev->lock);
        ev->dropped += n;
        ev->lost_unreported += n + lost; /* told in a later batch */
        pthread_mutex_unlock(&ev->lock);
        return;
    }
    ev->next_seq++;
    /* Counted before it is sent: a router that has the batch then never
     * reads a count without it. */
    ect__events_count(ev, &ev->stats.batches);
    pub_send(ev, m);
    ring_push(ev, m);
}

/* ---- the thread ------------------------------------------------------------------ */

/* Take up to BATCH_MAX_EVENTS queued events (or about BATCH_MAX_BYTES of
 * keys).  Returns how many; *lost_p gets the drops not yet reported,
 * *stopping_p whether stop was asked, *more_p whether events remain,
 * *resync_p whether the view must be rebuilt once these are applied. */
static size_t
take_events(struct ect__events *ev, struct event *out, uint64_t *lost_p, int *stopping_p,
            bool *more_p, bool *resync_p)
{
    size_t n = 0, bytes = 0;
    pthread_mutex_lock(&ev->lock);
    while (ev->n > 0 && n < BATCH_MAX_EVENTS && bytes < BATCH_MAX_BYTES) {
        out[n] = ev->queue[ev->head];
        bytes += out[n].key != NULL ? strlen(out[n].key) + 64 : 64;
        n++;
        ev->head = (ev->head + 1) % ECT_EVENTS_QUEUE_CAP;
        ev->n--;
    }
    ev->taken_total += n;
    bool due = ev->resync_pending && ev->taken_total >= ev->resync_mark;
    if (due)
        ev->resync_pending = false;
    *resync_p = due;
    /* A loss is told only once the view is whole again (the rebuild runs
     * right after this batch, before any replay is served), so a router
     * that asks for a snapshot on seeing it gets what was lost. */
    *lost_p = (n > 0 || due) && !ev->resync_pending ? ev->lost_unreported : 0;
    ev->lost_unreported -= *lost_p;
    *stopping_p = ev->stopping;
    *more_p = ev->n > 0;
    pthread_mutex_unlock(&ev->lock);
    return n;
}

static void
wait_for_work(struct ect__events *ev, int timeout_ms)
{
    zmq_pollitem_t items[2] = {{.fd = ev->wake_fd, .events = ZMQ_POLLIN},
                               {.socket = ev->router, .events = ZMQ_POLLIN}};
    if (zmq_poll(items, ev->router != NULL ? 2 : 1, timeout_ms) < 0 && zmq_errno() != EINTR)
        ECT_LOG_W("events: zmq_poll: %s", zmq_strerror(zmq_errno()));
    uint64_t v;
    if (items[0].revents & ZMQ_POLLIN)
        while (read(ev->wake_fd, &v, sizeof(v)) < 0 && errno == EINTR)
            ;
}

static void *
publisher_main(void *arg)
{
    struct ect__events *ev = arg;
    struct event *batch = ect__malloc(BATCH_MAX_EVENTS * sizeof(*batch));
    if (batch == NULL) {
        ECT_LOG_E("events: out of memory: the stream is not published");
        return NULL;
    }
    /* Batch 0: whatever a router knew of this instance is void. */
    struct event cleared = {.kind = ECT__EVENT_CLEARED, .t_ns = ev->epoch_ns};
    publish_batch(ev, &cleared, 1, 0);
    for (;;) {
        uint64_t lost;
        int stopping;
        bool more, resync;
        size_t n = take_events(ev, batch, &lost, &stopping, &more, &resync);
        if (n > 0 || lost > 0)
            publish_batch(ev, batch, n, lost);
        if (resync)
            view_rebuild(ev);
        bool waiting = ect__events_replay_turn(ev, view_is_whole(ev));
        if (stopping && !more)
            break; /* everything queued went out */
        if (!more)
            wait_for_work(ev, waiting ? RETRY_MS : -1);
    }
    ect__free(batch);
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------- */

static ect_status_t
bind_socket(void *zctx, int type, const char *label, const char *endpoint, void **sock_p)
{
    void *sock = zmq_socket(zctx, type);
    if (sock == NULL)
        return ect__error(ECT_ERR_TRANSPORT, "events: zmq_socket: %s", zmq_strerror(zmq_errno()));
    int linger = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof(linger));
    *sock_p = sock;
    if (zmq_bind(sock, endpoint) != 0)
        return ect__error(ECT_ERR_TRANSPORT, "%s = \"%s\": cannot bind: %s", label, endpoint,
                          zmq_strerror(zmq_errno()));
    return ECT_OK;
}

static ect_status_t
open_sockets(struct ect__events *ev, const ect_config_t *config)
{
    ect_status_t st =
        bind_socket(ev->zctx, ZMQ_PUB, "events_endpoint", config->events_endpoint, &ev->pub);
    if (st != ECT_OK)
        return st;
    int hwm = (int)config->events_hwm, on = 1;
    if (zmq_setsockopt(ev->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm)) != 0 ||
        zmq_setsockopt(ev->pub, ZMQ_XPUB_NODROP, &on, sizeof(on)) != 0)
        return ect__error(ECT_ERR_TRANSPORT, "events: cannot set the PUB socket's options: %s",
                          zmq_strerror(zmq_errno()));
    if (config->events_replay_endpoint[0] == '\0')
        return ECT_OK;
    void *router = zmq_socket(ev->zctx, ZMQ_ROUTER);
    if (router == NULL)
        return ect__error(ECT_ERR_TRANSPORT, "events: zmq_socket: %s", zmq_strerror(zmq_errno()));
    ev->router = router;
    /* Set before bind: they must hold for the first peer already. */
    int sndhwm = ROUTER_SNDHWM, rcvhwm = ROUTER_RCVHWM, linger = 0;
    int64_t maxmsg = ECT_EVENTS_REQUEST_MAX;
    if (zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_setsockopt(router, ZMQ_ROUTER_MANDATORY, &on, sizeof(on)) != 0 ||
        zmq_setsockopt(router, ZMQ_SNDHWM, &sndhwm, sizeof(sndhwm)) != 0 ||
        zmq_setsockopt(router, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm)) != 0 ||
        zmq_setsockopt(router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)) != 0)
        return ect__error(ECT_ERR_TRANSPORT, "events: cannot set the ROUTER socket's options: %s",
                          zmq_strerror(zmq_errno()));
    if (zmq_bind(router, config->events_replay_endpoint) != 0)
        return ect__error(ECT_ERR_TRANSPORT, "events_replay_endpoint = \"%s\": cannot bind: %s",
                          config->events_replay_endpoint, zmq_strerror(zmq_errno()));
    return ECT_OK;
}

static void
close_sockets(struct ect__events *ev)
{
    if (ev->router != NULL)
        zmq_close(ev->router);
    if (ev->pub != NULL)
        zmq_close(ev->pub);
    ev->router = ev->pub = NULL;
}

/* Free what the thread owned (after the join, or when it never ran). */
static void
free_thread_state(struct ect__events *ev)
{
    for (size_t i = 0; i < ECT_EVENTS_REPLAYS_MAX; i++)
        if (ev->replays[i].active)
            ect__events_replay_end(&ev->replays[i]);
    while (ev->ring_n > 0)
        ring_drop_oldest(ev);
    ect__free(ev->ring);
    view_clear(ev);
    ect__strmap_cleanup(&ev->view);
    for (; ev->n > 0; ev->n--, ev->head = (ev->head + 1) % ECT_EVENTS_QUEUE_CAP)
        ect__free(ev->queue[ev->head].key);
}

ect_status_t
ect__p2p_events_start(const ect_config_t *config, ect_cache_t *cache, const char *instance,
                      struct ect__events **events_p)
{
    if (config == NULL || cache == NULL || instance == NULL || events_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "events: NULL config, cache, instance or events_p");
    if (config->events_replay_buffer == 0 || config->events_hwm == 0 ||
        config->events_hwm > (unsigned)INT32_MAX)
        return ect__error(ECT_ERR_CONFIG, "events: events_replay_buffer and events_hwm must be "
                                          "positive (use ect_config_validate)");
    struct ect__events *ev = ect__calloc(1, sizeof(*ev));
    if (ev == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "events: out of memory");
    ect_status_t st;
    ev->cache = cache;
    snprintf(ev->instance, sizeof(ev->instance), "%s", instance);
    ev->epoch_ns = unix_ns();
    ev->replay_cap = config->events_replay_buffer;
    ect__strmap_init(&ev->view);
    if ((ev->ring = ect__calloc(ev->replay_cap, sizeof(*ev->ring))) == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "events: out of memory for %u replay slots",
                        ev->replay_cap);
        goto err_free;
    }
    if ((ev->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        st = ect__error_errno(ECT_ERR_INTERNAL, "events: eventfd");
        goto err_free;
    }
    if (pthread_mutex_init(&ev->lock, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "events: cannot create its mutex");
        goto err_fd;
    }
    if ((ev->zctx = zmq_ctx_new()) == NULL) {
        st = ect__error(ECT_ERR_TRANSPORT, "events: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        goto err_mutex;
    }
    if ((st = open_sockets(ev, config)) != ECT_OK)
        goto err_sockets;
    /* The sockets are handed to the thread here, and not touched by this
     * thread again until the join in stop (pthread_create is a barrier). */
    if ((st = ect__thread_start(&ev->thread, publisher_main, ev, "ect-events")) != ECT_OK)
        goto err_sockets;
    if ((st = ect_cache_set_listener(cache, on_cache_event, ev)) != ECT_OK)
        goto err_thread;
    *events_p = ev;
    return ECT_OK;

err_thread:
    pthread_mutex_lock(&ev->lock);
    ev->stopping = 1;
    wake(ev);
    pthread_mutex_unlock(&ev->lock);
    pthread_join(ev->thread, NULL);
err_sockets:
    close_sockets(ev);
    zmq_ctx_term(ev->zctx);
err_mutex:
    pthread_mutex_destroy(&ev->lock);
err_fd:
    close(ev->wake_fd);
err_free:
    free_thread_state(ev);
    ect__free(ev);
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
    wake(ev);
    pthread_mutex_unlock(&ev->lock);
    pthread_join(ev->thread, NULL);
    uint64_t dropped = ev->dropped;
    if (dropped > 0)
        ECT_LOG_W("events: %llu events were dropped because the queue was full",
                  (unsigned long long)dropped);
    close_sockets(ev);
    zmq_ctx_term(ev->zctx);
    free_thread_state(ev);
    pthread_mutex_destroy(&ev->lock);
    close(ev->wake_fd);
    ect__free(ev);
}
