/*
 * The producer session: see producer.h for what it does and its locking.
 *
 * Grants live in a map keyed "session_id:mm_hash"; each holds exactly one
 * pin on its cache entry, dropped exactly once by whichever ending comes
 * first (done message, lease, dead peer, repeated request, shutdown).
 * Announcements live in a map keyed by mm_hash: the cache key of the entry
 * and the FIFO of its hold ids with their deadlines.
 */
#include <cJSON.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/strmap.h"
#include "p2p/control.h"
#include "p2p/events.h"
#include "p2p/producer.h"
#include "p2p/transport.h"
#include "proto/wire.h"

#define POLL_MS  20
#define SWEEP_NS (100ull * 1000 * 1000)

struct grant {
    char *cache_key;
    ect_ctl_peer_t peer;
    uint64_t deadline_ns;
};

struct hold_ref {
    uint64_t id;
    uint64_t deadline_ns;
};

struct announcement {
    char *cache_key;
    struct hold_ref *holds; /* FIFO, oldest first */
    size_t n, cap;
};

struct ect_producer {
    ect_config_t cfg;
    ect_geometry_t geom;
    ect_cache_t *cache;
    ect_region_t *region;
    struct ect__events *events; /* NULL: no stream */
    char compat[65];
    ect_ctl_server_t *ctl;
    ect_xport_server_t *xport;
    char host[ECT_CONFIG_ADDR_MAX + 1];
    uint16_t port;
    uint64_t pin_lease_ns;
    uint64_t announce_lease_ns;

    pthread_t thread;
    int thread_started;
    int stop; /* atomic */

    pthread_mutex_t lock;
    ect_strmap_t grants;    /* "session:hash" -> struct grant */
    ect_strmap_t announced; /* mm_hash -> struct announcement */
    uint64_t acks_sent[ECT_XFER_STATUS_COUNT];
    uint64_t wire_dropped;
    uint64_t grants_expired;
    uint64_t grants_released_dead_peer;
    uint64_t announcements;

    /* Session-thread scratch, reused across requests. */
    uint64_t *blocks;
    size_t blocks_cap;
    ect_run_t *runs;
    size_t runs_cap;
    ect_wire_buf_t out;
};

/* ---- grants -------------------------------------------------------------- */

static void
grant_end_locked(ect_producer_t *p, const char *gkey)
{
    void *v = NULL;
    if (!ect__strmap_remove(&p->grants, gkey, &v))
        return;
    struct grant *g = v;
    if (ect_cache_unpin(p->cache, g->cache_key) != ECT_OK)
        ect__log_last_error(ECT_LOG_WARN, "producer: releasing a grant");
    free(g->cache_key);
    free(g);
}

/* Keys collected while walking a map, copied because ending an item frees
 * its node. */
struct key_batch {
    char *keys[64];
    size_t n;
};

static void
key_batch_add(struct key_batch *b, const char *key)
{
    if (b->n < 64 && (b->keys[b->n] = strdup(key)) != NULL)
        b->n++;
}

struct sweep_ctx {
    struct key_batch batch;
    uint64_t now;
    const ect_ctl_peer_t *dead;
};

static void
collect_grant(ect_strmap_node_t *node, void *user)
{
    struct sweep_ctx *c = user;
    struct grant *g = node->value;
    int match = c->dead != NULL ? (g->peer.len == c->dead->len &&
                                   memcmp(g->peer.id, c->dead->id, g->peer.len) == 0)
                                : g->deadline_ns <= c->now;
    if (match)
        key_batch_add(&c->batch, node->key);
}

/* End grants that lapsed (dead == NULL) or belong to a dead peer.  Returns
 * how many ended. */
static size_t
grants_end_matching_locked(ect_producer_t *p, uint64_t now, const ect_ctl_peer_t *dead)
{
    size_t total = 0;
    for (;;) {
        struct sweep_ctx c = {.now = now, .dead = dead};
        ect__strmap_each(&p->grants, collect_grant, &c);
        for (size_t i = 0; i < c.batch.n; i++) {
            grant_end_locked(p, c.batch.keys[i]);
            free(c.batch.keys[i]);
        }
        total += c.batch.n;
        if (c.batch.n < 64)
            return total;
    }
}

/* ---- announcements ------------------------------------------------------- */

static struct announcement *
announcement_get_locked(ect_producer_t *p, const char *mm_hash, const char *cache_key)
{
    ect_strmap_node_t *node = ect__strmap_find(&p->announced, mm_hash);
    if (node != NULL)
        return node->value;
    struct announcement *a = calloc(1, sizeof(*a));
    if (a == NULL || (a->cache_key = strdup(cache_key)) == NULL ||
        ect__strmap_put(&p->announced, mm_hash, a, NULL) != ECT_OK) {
        if (a != NULL)
            free(a->cache_key);
        free(a);
        return NULL;
    }
    return a;
}

static void
announcement_free(struct announcement *a)
{
    free(a->cache_key);
    free(a->holds);
    free(a);
}

/* A read of mm_hash was served: release its oldest live hold. */
static void
announcement_served_locked(ect_producer_t *p, const char *mm_hash)
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

/* Lapse holds in the cache and forget announcements with none left. */
static void
announcements_sweep_locked(ect_producer_t *p, uint64_t now)
{
    ect_cache_expire_holds(p->cache, now, NULL);
    struct prune_ctx c = {.now = now};
    ect__strmap_each(&p->announced, prune_announcement, &c);
    for (size_t i = 0; i < c.empty.n; i++) {
        void *v;
        if (ect__strmap_remove(&p->announced, c.empty.keys[i], &v))
            announcement_free(v);
        free(c.empty.keys[i]);
    }
}

/* ---- requests ------------------------------------------------------------ */

static void
send_ack(ect_producer_t *p, const ect_ctl_peer_t *peer, const ect_xfer_ack_t *ack)
{
    p->out.len = 0;
    if (ect_wire_encode_ack(ack, &p->out) != ECT_OK) {
        ect__log_last_error(ECT_LOG_ERROR, "producer: encoding an ack");
        return;
    }
    if (ect__ctl_server_send(p->ctl, peer, p->out.data, p->out.len) != ECT_OK)
        ECT_LOG_I("producer: ack for '%s' not delivered: %s", ack->mm_hash, ect_last_error());
    pthread_mutex_lock(&p->lock);
    p->acks_sent[ack->status]++;
    pthread_mutex_unlock(&p->lock);
}

static void
send_nack(ect_producer_t *p, const ect_ctl_peer_t *peer, const ect_xfer_req_t *req,
          ect_xfer_status_t status)
{
    ect_xfer_ack_t ack = {.mm_hash = req->mm_hash, .status = status, .session_id = req->session_id};
    if (ect_wire_status_is_expected(status))
        ECT_LOG_I("producer: %s for '%s'", ect_wire_status_str(status), req->mm_hash);
    else
        ECT_LOG_W("producer: %s for '%s'", ect_wire_status_str(status), req->mm_hash);
    send_ack(p, peer, &ack);
}

/* The cache key an mm_hash is served from: the announced entry's key, or
 * the hash itself (identifier and mm_hash coincide without adapters). */
static void
cache_key_for(ect_producer_t *p, const char *mm_hash, char *out, size_t cap)
{
    pthread_mutex_lock(&p->lock);
    ect_strmap_node_t *node = ect__strmap_find(&p->announced, mm_hash);
    snprintf(out, cap, "%s", node ? ((struct announcement *)node->value)->cache_key : mm_hash);
    pthread_mutex_unlock(&p->lock);
}

/* Flatten the entry's runs into block ids for src_block_indices. */
static ect_status_t
entry_blocks(ect_producer_t *p, const char *key, size_t *n_p)
{
    size_t n_runs = 0;
    ect_status_t st = ect_cache_get_runs(p->cache, key, NULL, 0, &n_runs);
    if (st != ECT_OK)
        return st;
    if (n_runs > p->runs_cap) {
        ect_run_t *r = realloc(p->runs, n_runs * sizeof(*r));
        if (r == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory");
        p->runs = r;
        p->runs_cap = n_runs;
    }
    if (n_runs > 0 && (st = ect_cache_get_runs(p->cache, key, p->runs, n_runs, &n_runs)) != ECT_OK)
        return st;
    size_t total = 0;
    for (size_t i = 0; i < n_runs; i++)
        total += p->runs[i].count;
    if (total > ECT_WIRE_MAX_BLOCKS)
        return ect__error(ECT_ERR_OVERFLOW,
                          "producer: entry '%s' has %zu blocks, the wire "
                          "carries at most %u",
                          key, total, ECT_WIRE_MAX_BLOCKS);
    if (total > p->blocks_cap) {
        uint64_t *b = realloc(p->blocks, total * sizeof(*b));
        if (b == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory");
        p->blocks = b;
        p->blocks_cap = total;
    }
    size_t k = 0;
    for (size_t i = 0; i < n_runs; i++)
        for (uint64_t j = 0; j < p->runs[i].count; j++)
            p->blocks[k++] = p->runs[i].first + j;
    *n_p = total;
    return ECT_OK;
}

static void
handle_req(ect_producer_t *p, const ect_ctl_peer_t *peer, const ect_xfer_req_t *req)
{
    /* The checks, in the seed's order. */
    if (req->has_connector_version && req->connector_version != ECT_WIRE_CONNECTOR_VERSION) {
        send_nack(p, peer, req, ECT_XFER_NACK_VERSION);
        return;
    }
    if (strcmp(req->compatibility_hash, p->compat) != 0) {
        send_nack(p, peer, req, ECT_XFER_NACK_INCOMPAT);
        return;
    }
    if (req->session_id[0] == '\0') {
        send_nack(p, peer, req, ECT_XFER_NACK_INTERNAL); /* grants would alias */
        return;
    }
    char key[ECT_WIRE_MAX_STR + 1];
    cache_key_for(p, req->mm_hash, key, sizeof(key));
    ect_pin_result_t pin;
    if (ect_cache_pin_if_ready(p->cache, key, &pin) != ECT_OK) {
        send_nack(p, peer, req, ECT_XFER_NACK_INTERNAL);
        return;
    }
    if (pin == ECT_PIN_ABSENT) {
        send_nack(p, peer, req, ECT_XFER_NACK_MISSING);
        return;
    }
    if (pin == ECT_PIN_NOT_READY) {
        send_nack(p, peer, req, ECT_XFER_NACK_NOT_READY);
        return;
    }
    size_t n_blocks = 0;
    if (entry_blocks(p, key, &n_blocks) != ECT_OK) {
        ect__log_last_error(ECT_LOG_ERROR, "producer");
        ect_cache_unpin(p->cache, key);
        send_nack(p, peer, req, ECT_XFER_NACK_INTERNAL);
        return;
    }
    char gkey[2 * ECT_WIRE_MAX_STR + 2];
    snprintf(gkey, sizeof(gkey), "%s:%s", req->session_id, req->mm_hash);
    struct grant *g = calloc(1, sizeof(*g));
    pthread_mutex_lock(&p->lock);
    /* A repeated request (the consumer's ack timed out) replaces the old
     * grant: release its pin first. */
    grant_end_locked(p, gkey);
    int ok = g != NULL && (g->cache_key = strdup(key)) != NULL &&
             ect__strmap_put(&p->grants, gkey, g, NULL) == ECT_OK;
    if (ok) {
        g->peer = *peer;
        g->deadline_ns = ect__now_ns() + p->pin_lease_ns;
    }
    pthread_mutex_unlock(&p->lock);
    if (!ok) {
        if (g != NULL)
            free(g->cache_key);
        free(g);
        ect_cache_unpin(p->cache, key);
        send_nack(p, peer, req, ECT_XFER_NACK_INTERNAL);
        return;
    }
    ect_xfer_ack_t ack = {.mm_hash = req->mm_hash,
                          .status = ECT_XFER_OK,
                          .session_id = req->session_id,
                          .src_block_indices = p->blocks,
                          .n_src_blocks = n_blocks};
    ack.agent_metadata = ect__xport_server_agent_metadata(p->xport, &ack.agent_metadata_len);
    ack.mem_descriptor = ect__xport_server_mem_descriptor(p->xport, &ack.mem_descriptor_len);
    send_ack(p, peer, &ack);
}

static void
handle_done(ect_producer_t *p, const ect_xfer_done_t *done)
{
    char gkey[2 * ECT_WIRE_MAX_STR + 2];
    snprintf(gkey, sizeof(gkey), "%s:%s", done->session_id, done->mm_hash);
    pthread_mutex_lock(&p->lock);
    if (ect__strmap_find(&p->grants, gkey) != NULL) {
        grant_end_locked(p, gkey);
        announcement_served_locked(p, done->mm_hash);
    } else {
        ECT_LOG_I("producer: 'done' for unknown grant %s (lapsed or repeated)", gkey);
    }
    pthread_mutex_unlock(&p->lock);
}

static void
handle_message(ect_producer_t *p, const ect_ctl_peer_t *peer, const void *payload, size_t len)
{
    ect_wire_type_t type;
    if (ect_wire_peek_type(payload, len, &type) == ECT_OK && type == ECT_WIRE_REQ) {
        ect_xfer_req_t req;
        if (ect_wire_decode_req(payload, len, &req) == ECT_OK) {
            handle_req(p, peer, &req);
            ect_xfer_req_cleanup(&req);
            return;
        }
    } else if (type == ECT_WIRE_DONE) {
        ect_xfer_done_t done;
        if (ect_wire_decode_done(payload, len, &done) == ECT_OK) {
            handle_done(p, &done);
            ect_xfer_done_cleanup(&done);
            return;
        }
    }
    /* Undecodable, or an ack sent to a producer: dropped, counted, unanswered. */
    ECT_LOG_I("producer: dropping a control message: %s", ect_last_error());
    pthread_mutex_lock(&p->lock);
    p->wire_dropped++;
    pthread_mutex_unlock(&p->lock);
}

static void *
session_thread(void *arg)
{
    ect_producer_t *p = arg;
    uint64_t next_sweep = ect__now_ns() + SWEEP_NS;
    while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
        ect_ctl_peer_t peer;
        const void *payload;
        size_t len;
        if (ect__ctl_server_recv(p->ctl, POLL_MS, &peer, &payload, &len) == ECT_OK)
            handle_message(p, &peer, payload, len);
        ect_ctl_peer_t dead[16];
        size_t n_dead = ect__ctl_server_take_dead_peers(p->ctl, dead, 16);
        uint64_t now = ect__now_ns();
        pthread_mutex_lock(&p->lock);
        for (size_t i = 0; i < n_dead; i++) {
            size_t n = grants_end_matching_locked(p, now, &dead[i]);
            p->grants_released_dead_peer += n;
            if (n > 0)
                ECT_LOG_I("producer: a consumer died: released %zu grants", n);
        }
        if (now >= next_sweep) {
            size_t n = grants_end_matching_locked(p, now, NULL);
            if (n > 0)
                ECT_LOG_W("producer: %zu grants lapsed after their %.0f s pin lease", n,
                          p->cfg.producer_pin_lease_s);
            p->grants_expired += n;
            announcements_sweep_locked(p, now);
            next_sweep = now + SWEEP_NS;
        }
        pthread_mutex_unlock(&p->lock);
    }
    return NULL;
}

/* ---- lifecycle ----------------------------------------------------------- */

ect_status_t
ect__producer_start(const ect_producer_params_t *params, ect_producer_t **producer_p)
{
    ect_producer_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory");
    p->cfg = *params->config;
    p->geom = *params->geometry;
    p->cache = params->cache;
    p->events = params->events;
    p->region = params->region;
    snprintf(p->compat, sizeof(p->compat), "%s", params->compat_hash);
    p->pin_lease_ns = (uint64_t)(p->cfg.producer_pin_lease_s * 1e9);
    p->announce_lease_ns = (uint64_t)(p->cfg.announce_lease_s * 1e9);
    snprintf(p->host, sizeof(p->host), "%s", p->cfg.side_channel_host);
    ect__strmap_init(&p->grants);
    ect__strmap_init(&p->announced);
    ect_wire_buf_init(&p->out);
    ect_status_t st;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "producer: cannot create its mutex");
        goto err_free;
    }
    ect_ctl_security_t sec = {.server_key_file = p->cfg.curve_server_key_file,
                              .allowed_clients_file = p->cfg.curve_allowed_clients_file};
    if ((st = ect__ctl_server_open(p->host, p->cfg.side_channel_port, &sec, &p->ctl)) != ECT_OK)
        goto err_mutex;
    p->port = ect__ctl_server_port(p->ctl);
    ect_xport_server_params_t xp = {
        .data = ect_region_data(p->region),
        .block_size = p->geom.block_size_bytes,
        .num_blocks = p->geom.num_blocks,
        .region_path = ect_region_path(p->region),
        .data_offset = ect_region_data_offset(p->region),
        .serve_ucx = p->cfg.transport != ECT_TRANSPORT_SAME_HOST,
        .serve_same_host = p->cfg.transport != ECT_TRANSPORT_UCX,
    };
    if ((st = ect__xport_server_start(&xp, &p->xport)) != ECT_OK)
        goto err_ctl;
    if (pthread_create(&p->thread, NULL, session_thread, p) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "producer: cannot start its thread");
        goto err_xport;
    }
    p->thread_started = 1;
    ECT_LOG_I("producer: serving on tcp://%s:%u", p->host, (unsigned)p->port);
    *producer_p = p;
    return ECT_OK;

err_xport:
    ect__xport_server_stop(p->xport);
err_ctl:
    ect__ctl_server_close(p->ctl);
err_mutex:
    pthread_mutex_destroy(&p->lock);
err_free:
    ect_wire_buf_cleanup(&p->out);
    free(p);
    return st;
}

static void
free_announcement_node(ect_strmap_node_t *node, void *user)
{
    ect_producer_t *p = user;
    struct announcement *a = node->value;
    for (size_t i = 0; i < a->n; i++)
        ect_cache_release_hold(p->cache, a->holds[i].id);
    announcement_free(a);
}

void
ect__producer_stop(ect_producer_t *p)
{
    if (p == NULL)
        return;
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    if (p->thread_started)
        pthread_join(p->thread, NULL);
    pthread_mutex_lock(&p->lock);
    grants_end_matching_locked(p, UINT64_MAX, NULL);
    ect__strmap_each(&p->announced, free_announcement_node, p);
    ect__strmap_cleanup(&p->announced);
    ect__strmap_cleanup(&p->grants);
    pthread_mutex_unlock(&p->lock);
    ect__xport_server_stop(p->xport);
    ect__ctl_server_close(p->ctl);
    pthread_mutex_destroy(&p->lock);
    ect_wire_buf_cleanup(&p->out);
    free(p->blocks);
    free(p->runs);
    free(p);
}

/* ---- announcements (scheduler thread) ------------------------------------ */

static cJSON *
feature_metadata(const ect_mm_feature_t *f)
{
    if (f->metadata_json == NULL)
        return cJSON_CreateObject();
    cJSON *m = cJSON_Parse(f->metadata_json);
    if (m == NULL || !cJSON_IsObject(m)) {
        ECT_LOG_W("producer: metadata of '%s' is not a JSON object; announcing {}", f->identifier);
        cJSON_Delete(m);
        return cJSON_CreateObject();
    }
    return m;
}

ect_status_t
ect__producer_announce(ect_producer_t *p, const ect_request_t *req, char **params_json_p)
{
    *params_json_p = NULL;
    if (req->n_features == 0)
        return ECT_OK;
    cJSON *root = cJSON_CreateObject();
    if (root == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory announcing");
    uint64_t now = ect__now_ns();
    ect_status_t st = ECT_OK;
    for (size_t i = 0; i < req->n_features && st == ECT_OK; i++) {
        const ect_mm_feature_t *f = &req->features[i];
        const char *h = f->mm_hash != NULL ? f->mm_hash : f->identifier;
        cJSON *item = cJSON_CreateObject();
        ect_cache_entry_t e;
        int held = ect_cache_get(p->cache, f->identifier, &e) == ECT_OK;
        uint64_t hold_id = 0;
        if (held && p->announce_lease_ns > 0 &&
            ect_cache_hold(p->cache, f->identifier, now + p->announce_lease_ns, &hold_id) != ECT_OK)
            held = 0;
        if (item == NULL) {
            st = ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory announcing");
        } else if (held) {
            /* Both halves: the metadata and the address, so an orchestrator may
             * drop the media from the follow-up request. */
            cJSON_AddItemToObject(item, "metadata", feature_metadata(f));
            cJSON_AddStringToObject(item, "peer_host", p->host);
            cJSON_AddNumberToObject(item, "peer_port", p->port);
            cJSON_AddNumberToObject(item, "size_bytes",
                                    (double)(f->num_tokens * p->geom.block_size_bytes));
            pthread_mutex_lock(&p->lock);
            struct announcement *a = announcement_get_locked(p, h, f->identifier);
            if (a != NULL && hold_id != 0) {
                if (a->n == a->cap) {
                    size_t cap = a->cap ? a->cap * 2 : 4;
                    struct hold_ref *grown = realloc(a->holds, cap * sizeof(*grown));
                    if (grown != NULL) {
                        a->holds = grown;
                        a->cap = cap;
                    }
                }
                if (a->n < a->cap)
                    a->holds[a->n++] = (struct hold_ref){hold_id, now + p->announce_lease_ns};
                else
                    ect_cache_release_hold(p->cache, hold_id);
            }
            p->announcements++;
            pthread_mutex_unlock(&p->lock);
            ect__events_publish(p->events, ECT__EVENT_ANNOUNCED, f->identifier, e.n_blocks);
        } else {
            /* Neither half: the orchestrator keeps the media on the request. */
            cJSON_AddItemToObject(item, "metadata", cJSON_CreateObject());
        }
        if (item != NULL)
            cJSON_AddItemToObject(root, h, item);
    }
    char *text = st == ECT_OK ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (st == ECT_OK && text == NULL)
        st = ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory announcing");
    if (st != ECT_OK)
        return st;
    /* cJSON allocates with malloc: ect_free releases it. */
    *params_json_p = text;
    return ECT_OK;
}

int
ect__producer_has_pending(ect_producer_t *p)
{
    pthread_mutex_lock(&p->lock);
    int pending = p->grants.count > 0 || p->announced.count > 0;
    pthread_mutex_unlock(&p->lock);
    return pending;
}

void
ect__producer_metrics(ect_producer_t *p, ect_metrics_t *m)
{
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < ECT_XFER_STATUS_COUNT && i < ECT_METRICS_ACK_STATUSES; i++)
        m->acks_sent[i] += p->acks_sent[i];
    m->wire_dropped += p->wire_dropped;
    ect__ctl_server_add_metrics(p->ctl, m);
    m->grants_outstanding += p->grants.count;
    m->grants_expired += p->grants_expired;
    m->grants_released_dead_peer += p->grants_released_dead_peer;
    m->announcements += p->announcements;
    pthread_mutex_unlock(&p->lock);
}

const char *
ect__producer_host(const ect_producer_t *p)
{
    return p->host;
}

uint16_t
ect__producer_port(const ect_producer_t *p)
{
    return p->port;
}
