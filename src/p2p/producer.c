/*
 * The producer session: see producer.h for what it does and its locking.
 *
 * Grants live in a map keyed by the grant's name, "<length of session>:"
 * session mm_hash (unambiguous whatever the strings hold).  Each holds
 * exactly one pin on its cache entry, dropped exactly once by whichever
 * ending comes first: its stream sent (tcp), a "done" from the connection
 * that holds it (same-host), its lease, its connection's death, a repeated
 * request, shutdown.  A grant whose stream is being sent when another
 * ending comes is taken off the map at once but keeps its pin (its runs are
 * still being read by the kernel) until the stream server finishes it.
 * Each grant has a random token that only its XferAck carries; the data
 * stream serves a request only with the right token, once.
 * Per connection the number of grants it holds is kept (peer_grants, keyed
 * by the hex of its ROUTER identity) to enforce max_grants_per_peer.
 * Announcements (the map of mm_hash -> cache key and hold ids) are
 * producer_announce.c; the structures both files use, producer_internal.h.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/strmap.h"
#include "common/thread.h"
#include "p2p/control.h"
#include "p2p/producer_internal.h"
#include "p2p/transport.h"
#include "proto/wire.h"

#define POLL_MS  20
#define SWEEP_NS (100ull * 1000 * 1000)
/* A ROUTER identity in hex. */
#define PEER_KEY_LEN (2 * sizeof(((ect_ctl_peer_t *)0)->id) + 1)

struct grant {
    char *gkey;
    char *cache_key;
    char *mm_hash;
    ect_ctl_peer_t peer;
    uint64_t deadline_ns;
    uint8_t token[ECT_STREAM_TOKEN_LEN];
    ect_run_t *runs; /* the entry's runs (fixed while pinned) */
    size_t n_runs;
    uint64_t bytes;
    int claimed;   /* its one stream was asked for */
    int streaming; /* the stream server is sending it now */
    int ended;     /* off the map; unpinned when the stream finishes */
};

/* ---- grants -------------------------------------------------------------- */

static void
grant_name(char *out, size_t cap, const char *session_id, const char *mm_hash)
{
    snprintf(out, cap, "%zu:%s%s", strlen(session_id), session_id, mm_hash);
}

static void
peer_key(const ect_ctl_peer_t *peer, char out[PEER_KEY_LEN])
{
    for (size_t i = 0; i < peer->len; i++)
        snprintf(out + 2 * i, 3, "%02x", peer->id[i]);
    out[2 * peer->len] = '\0';
}

static int
same_peer(const ect_ctl_peer_t *a, const ect_ctl_peer_t *b)
{
    return a->len == b->len && memcmp(a->id, b->id, a->len) == 0;
}

static size_t
peer_grants_locked(ect_producer_t *p, const ect_ctl_peer_t *peer)
{
    char k[PEER_KEY_LEN];
    peer_key(peer, k);
    ect_strmap_node_t *node = ect__strmap_find(&p->peer_grants, k);
    return node != NULL ? (size_t)(uintptr_t)node->value : 0;
}

/* Count a grant for its peer: +1 or -1.  ECT_ERR_NO_MEMORY when a new
 * peer's counter cannot be made. */
static ect_status_t
peer_grants_add_locked(ect_producer_t *p, const ect_ctl_peer_t *peer, int delta)
{
    char k[PEER_KEY_LEN];
    peer_key(peer, k);
    ect_strmap_node_t *node = ect__strmap_find(&p->peer_grants, k);
    if (node == NULL)
        return delta > 0 ? ect__strmap_put(&p->peer_grants, k, (void *)(uintptr_t)1, NULL) : ECT_OK;
    size_t n = (size_t)(uintptr_t)node->value;
    if (delta < 0 && n <= 1)
        ect__strmap_remove(&p->peer_grants, k, NULL);
    else
        node->value = (void *)(uintptr_t)(delta > 0 ? n + 1 : n - 1);
    return ECT_OK;
}

static void
grant_free(ect_producer_t *p, struct grant *g)
{
    if (ect_cache_unpin(p->cache, g->cache_key) != ECT_OK)
        ect__log_last_error(ECT_LOG_WARN, "producer: releasing a grant");
    ect__free(g->gkey);
    ect__free(g->cache_key);
    ect__free(g->mm_hash);
    ect__free(g->runs);
    ect__free(g);
}

/* Take a grant off the map; it is unpinned now, or when its stream ends. */
static void
grant_end_locked(ect_producer_t *p, struct grant *g)
{
    if (g->ended)
        return;
    ect__strmap_remove(&p->grants, g->gkey, NULL);
    peer_grants_add_locked(p, &g->peer, -1);
    g->ended = 1;
    if (!g->streaming)
        grant_free(p, g);
}

static struct grant *
grant_find_locked(ect_producer_t *p, const char *gkey)
{
    ect_strmap_node_t *node = ect__strmap_find(&p->grants, gkey);
    return node != NULL ? node->value : NULL;
}

/* Grants collected while walking the map (ending one removes its node). */
struct grant_batch {
    struct grant *g[64];
    size_t n;
};

struct sweep_ctx {
    struct grant_batch batch;
    uint64_t now;
    const ect_ctl_peer_t *dead;
};

static void
collect_grant(ect_strmap_node_t *node, void *user)
{
    struct sweep_ctx *c = user;
    struct grant *g = node->value;
    int match = c->dead != NULL ? same_peer(&g->peer, c->dead) : g->deadline_ns <= c->now;
    if (match && c->batch.n < 64)
        c->batch.g[c->batch.n++] = g;
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
        for (size_t i = 0; i < c.batch.n; i++)
            grant_end_locked(p, c.batch.g[i]);
        total += c.batch.n;
        if (c.batch.n < 64)
            return total;
    }
}

/* The stream server's view of the grant table (transport.h). */
static ect_stream_status_t
stream_claim(void *user, const char *session_id, const char *mm_hash,
             const uint8_t token[ECT_STREAM_TOKEN_LEN], uint64_t expect_bytes,
             ect_xport_grant_view_t *view_p, void **grant_p)
{
    ect_producer_t *p = user;
    char gkey[GRANT_KEY_MAX];
    grant_name(gkey, sizeof(gkey), session_id, mm_hash);
    pthread_mutex_lock(&p->lock);
    struct grant *g = grant_find_locked(p, gkey);
    ect_stream_status_t st = ECT_STREAM_DENIED;
    if (g != NULL && !g->claimed && ect__now_ns() < g->deadline_ns &&
        ect__stream_token_equal(g->token, token)) {
        g->claimed = 1; /* one stream per grant, whatever happens next */
        if (expect_bytes != g->bytes) {
            st = ECT_STREAM_SIZE_MISMATCH;
            grant_end_locked(p, g);
        } else {
            g->streaming = 1;
            *view_p =
                (ect_xport_grant_view_t){.runs = g->runs, .n_runs = g->n_runs, .bytes = g->bytes};
            *grant_p = g;
            st = ECT_STREAM_OK;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

static void
stream_finish(void *user, void *grant, int sent)
{
    ect_producer_t *p = user;
    struct grant *g = grant;
    pthread_mutex_lock(&p->lock);
    g->streaming = 0;
    /* Every byte is in the kernel's hands (or the peer is gone): the pin
     * has done its job either way. */
    if (sent && !g->ended)
        ect__producer_announcement_served_locked(p, g->mm_hash);
    if (g->ended)
        grant_free(p, g);
    else
        grant_end_locked(p, g);
    pthread_mutex_unlock(&p->lock);
}

/* ---- requests ------------------------------------------------------------ */

static void
send_ack(ect_producer_t *p, const ect_ctl_peer_t *peer, const ect_xfer_ack_t *ack)
{
    p->out.len = 0;
    if (ect__wire_encode_ack(ack, &p->out) != ECT_OK) {
        ect__log_last_error(ECT_LOG_ERROR, "producer: encoding an ack");
        return;
    }
    /* Counted before it goes out: a consumer that got the ack and then reads
     * our metrics must find it counted. */
    pthread_mutex_lock(&p->lock);
    p->acks_sent[ack->status]++;
    pthread_mutex_unlock(&p->lock);
    if (ect__ctl_server_send(p->ctl, peer, p->out.data, p->out.len) != ECT_OK) {
        ECT_LOG_I("producer: ack for '%s' not delivered: %s", ack->mm_hash, ect_last_error());
        pthread_mutex_lock(&p->lock);
        p->acks_sent[ack->status]--;
        pthread_mutex_unlock(&p->lock);
    }
}

static void
send_nack(ect_producer_t *p, const ect_ctl_peer_t *peer, const ect_xfer_req_t *req,
          ect_xfer_status_t status)
{
    ect_xfer_ack_t ack = {.mm_hash = req->mm_hash, .status = status, .session_id = req->session_id};
    if (ect__wire_status_is_expected(status))
        ECT_LOG_I("producer: %s for '%s'", ect_xfer_status_str(status), req->mm_hash);
    else
        ECT_LOG_W("producer: %s for '%s'", ect_xfer_status_str(status), req->mm_hash);
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
entry_blocks(ect_producer_t *p, const char *key, size_t *n_p, size_t *n_runs_p)
{
    size_t n_runs = 0;
    ect_status_t st = ect_cache_get_runs(p->cache, key, NULL, 0, &n_runs);
    if (st != ECT_OK)
        return st;
    if (n_runs > p->runs_cap) {
        ect_run_t *r = ect__realloc(p->runs, n_runs * sizeof(*r));
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
        uint64_t *b = ect__realloc(p->blocks, total * sizeof(*b));
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
    *n_runs_p = n_runs;
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
    grant_name(p->gkey, sizeof(p->gkey), req->session_id, req->mm_hash);
    /* A repeated request (the consumer's ack timed out) replaces the old
     * grant: release it first, so it neither counts against the caps nor
     * keeps a second pin.  The same name from another connection (a
     * consumer whose connection was renewed, or someone who learnt its
     * session id) must not end a grant it does not hold: it is told to retry
     * (NOT_READY) until the old connection's death releases the grant. */
    pthread_mutex_lock(&p->lock);
    struct grant *old = grant_find_locked(p, p->gkey);
    int taken = old != NULL && !same_peer(&old->peer, peer);
    if (old != NULL && !taken)
        grant_end_locked(p, old);
    int over = !taken && (p->grants.count >= p->cfg.max_grants ||
                          peer_grants_locked(p, peer) >= p->cfg.max_grants_per_peer);
    if (over)
        p->grants_refused++;
    pthread_mutex_unlock(&p->lock);
    if (taken) {
        ECT_LOG_I("producer: '%s' is granted to another connection of the same session; "
                  "answered NACK_NOT_READY",
                  req->mm_hash);
        send_nack(p, peer, req, ECT_XFER_NACK_NOT_READY);
        return;
    }
    if (over) {
        /* Retryable: grants end within a read's time. */
        ECT_LOG_I("producer: grant caps reached (%u in all, %u per connection): '%s' answered "
                  "NACK_NOT_READY",
                  p->cfg.max_grants, p->cfg.max_grants_per_peer, req->mm_hash);
        send_nack(p, peer, req, ECT_XFER_NACK_NOT_READY);
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
    size_t n_blocks = 0, n_runs = 0;
    struct grant *g = NULL;
    if (entry_blocks(p, key, &n_blocks, &n_runs) != ECT_OK)
        goto internal;
    if ((g = ect__calloc(1, sizeof(*g))) == NULL || (g->gkey = ect__strdup(p->gkey)) == NULL ||
        (g->cache_key = ect__strdup(key)) == NULL ||
        (g->mm_hash = ect__strdup(req->mm_hash)) == NULL ||
        (n_runs > 0 && (g->runs = ect__malloc(n_runs * sizeof(*g->runs))) == NULL)) {
        ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory for a grant");
        goto internal;
    }
    if (ect__xport_new_token(g->token) != ECT_OK)
        goto internal;
    if (n_runs > 0)
        memcpy(g->runs, p->runs, n_runs * sizeof(*g->runs));
    g->n_runs = n_runs;
    g->bytes = (uint64_t)n_blocks * p->geom.block_size_bytes;
    g->peer = *peer;
    g->deadline_ns = ect__now_ns() + p->pin_lease_ns;
    pthread_mutex_lock(&p->lock);
    int ok = peer_grants_add_locked(p, peer, +1) == ECT_OK;
    if (ok && ect__strmap_put(&p->grants, g->gkey, g, NULL) != ECT_OK) {
        peer_grants_add_locked(p, peer, -1);
        ok = 0;
    }
    pthread_mutex_unlock(&p->lock);
    if (!ok) {
        ect__error(ECT_ERR_NO_MEMORY, "producer: out of memory recording a grant");
        goto internal;
    }
    ect_xfer_ack_t ack = {.mm_hash = req->mm_hash,
                          .status = ECT_XFER_OK,
                          .session_id = req->session_id,
                          .src_block_indices = p->blocks,
                          .n_src_blocks = n_blocks};
    ack.agent_metadata = ect__xport_server_agent_metadata(p->xport, &ack.agent_metadata_len);
    /* A consumer that takes runs gets the entry's runs in the descriptor
     * (16 bytes a run instead of a msgpack int a block); the seed's
     * src_block_indices otherwise, or when the runs would not fit a blob. */
    size_t want = ect__xport_desc_size(req->accepts_runs ? n_runs : 0);
    if (want > p->desc_cap) {
        uint8_t *grown = ect__realloc(p->desc_buf, want);
        if (grown != NULL) {
            p->desc_buf = grown;
            p->desc_cap = want;
        }
    }
    ect_status_t dst = ECT_ERR_OVERFLOW;
    if (req->accepts_runs &&
        (dst = ect__xport_server_descriptor(p->xport, g->token, g->runs, g->n_runs, p->desc_buf,
                                            p->desc_cap, &ack.mem_descriptor_len)) == ECT_OK) {
        ack.src_block_indices = NULL;
        ack.n_src_blocks = 0;
    }
    if (dst != ECT_OK &&
        ect__xport_server_descriptor(p->xport, g->token, NULL, 0, p->desc_buf, p->desc_cap,
                                     &ack.mem_descriptor_len) != ECT_OK) {
        /* Not even the fixed part fits: the grant cannot be described. */
        pthread_mutex_lock(&p->lock);
        grant_end_locked(p, g);
        pthread_mutex_unlock(&p->lock);
        ect__log_last_error(ECT_LOG_ERROR, "producer: describing a grant");
        send_nack(p, peer, req, ECT_XFER_NACK_INTERNAL);
        return;
    }
    ack.mem_descriptor = p->desc_buf;
    send_ack(p, peer, &ack);
    return;

internal:
    ect__log_last_error(ECT_LOG_ERROR, "producer");
    if (g != NULL) {
        ect__free(g->gkey);
        ect__free(g->cache_key);
        ect__free(g->mm_hash);
        ect__free(g->runs);
        ect__free(g);
    }
    ect__log_failure(ect_cache_unpin(p->cache, key), "producer");
    send_nack(p, peer, req, ECT_XFER_NACK_INTERNAL);
}

static void
handle_done(ect_producer_t *p, const ect_ctl_peer_t *peer, const ect_xfer_done_t *done)
{
    grant_name(p->gkey, sizeof(p->gkey), done->session_id, done->mm_hash);
    pthread_mutex_lock(&p->lock);
    struct grant *g = grant_find_locked(p, p->gkey);
    if (g == NULL) {
        ECT_LOG_I("producer: 'done' for unknown grant of '%s' (lapsed or repeated)", done->mm_hash);
    } else if (!same_peer(&g->peer, peer)) {
        /* Only the connection the grant was made to may end it. */
        p->dones_rejected++;
        ECT_LOG_W("producer: 'done' for '%s' from a connection that does not hold its grant; "
                  "ignored",
                  done->mm_hash);
    } else {
        grant_end_locked(p, g);
        ect__producer_announcement_served_locked(p, done->mm_hash);
    }
    pthread_mutex_unlock(&p->lock);
}

static void
handle_message(ect_producer_t *p, const ect_ctl_peer_t *peer, const void *payload, size_t len)
{
    ect__wire_type_t type;
    if (ect__wire_peek_type(payload, len, &type) != ECT_OK) {
        /* Not even a tag: fall through to the drop below. */
    } else if (type == ECT_WIRE_REQ) {
        ect_xfer_req_t req;
        if (ect__wire_decode_req(payload, len, &req) == ECT_OK) {
            handle_req(p, peer, &req);
            ect__xfer_req_cleanup(&req);
            return;
        }
    } else if (type == ECT_WIRE_DONE) {
        ect_xfer_done_t done;
        if (ect__wire_decode_done(payload, len, &done) == ECT_OK) {
            handle_done(p, peer, &done);
            ect__xfer_done_cleanup(&done);
            return;
        }
    } else {
        ect__error(ECT_ERR_PARSE, "an ack sent to a producer");
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
            ect__producer_announcements_sweep_locked(p, now);
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
    ect_producer_t *p = ect__calloc(1, sizeof(*p));
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
    ect__strmap_init(&p->peer_grants);
    ect__strmap_init(&p->announced);
    ect__wire_buf_init(&p->out);
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
    ect_xport_grant_ops_t ops = {.user = p, .claim = stream_claim, .finish = stream_finish};
    ect_xport_server_params_t xp = {
        .data = ect_region_data(p->region),
        .block_size = p->geom.block_size_bytes,
        .num_blocks = p->geom.num_blocks,
        .region_path = ect_region_path(p->region),
        .data_offset = ect_region_data_offset(p->region),
        .bind_host = p->host,
        .tcp_port = p->cfg.data_port,
        .send_timeout_ns = (uint64_t)(p->cfg.read_timeout_s * 1e9),
        .grants = &ops,
        .serve_tcp = p->cfg.transport != ECT_TRANSPORT_SAME_HOST,
        .serve_same_host = p->cfg.transport != ECT_TRANSPORT_TCP,
        .touch_pages = p->cfg.prefault,
    };
    if ((st = ect__xport_server_start(&xp, &p->xport)) != ECT_OK)
        goto err_ctl;
    if ((st = ect__thread_start(&p->thread, session_thread, p, "ect-producer")) != ECT_OK)
        goto err_xport;
    p->thread_started = 1;
    ECT_LOG_I("producer: serving on tcp://%s:%u (data stream port %u)", p->host, (unsigned)p->port,
              (unsigned)ect__xport_server_tcp_port(p->xport));
    *producer_p = p;
    return ECT_OK;

err_xport:
    ect__xport_server_stop(p->xport);
err_ctl:
    ect__ctl_server_close(p->ctl);
err_mutex:
    pthread_mutex_destroy(&p->lock);
err_free:
    ect__wire_buf_cleanup(&p->out);
    ect__free(p);
    return st;
}

void
ect__producer_stop(ect_producer_t *p)
{
    if (p == NULL)
        return;
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    if (p->thread_started)
        pthread_join(p->thread, NULL);
    /* The stream server first: it finishes the grants it is sending, which
     * needs the grant table. */
    ect__xport_server_stop(p->xport);
    pthread_mutex_lock(&p->lock);
    grants_end_matching_locked(p, UINT64_MAX, NULL);
    ect__producer_announcements_drop_locked(p);
    ect__strmap_cleanup(&p->grants);
    ect__strmap_cleanup(&p->peer_grants);
    pthread_mutex_unlock(&p->lock);
    ect__ctl_server_close(p->ctl);
    pthread_mutex_destroy(&p->lock);
    ect__wire_buf_cleanup(&p->out);
    ect__free(p->blocks);
    ect__free(p->runs);
    ect__free(p->desc_buf);
    ect__free(p);
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
    for (size_t i = 0; i < ECT_XFER_STATUS_COUNT; i++)
        m->acks_sent[i] += p->acks_sent[i];
    m->wire_dropped += p->wire_dropped;
    ect__ctl_server_add_metrics(p->ctl, m);
    m->grants_outstanding += p->grants.count;
    m->grants_expired += p->grants_expired;
    m->grants_released_dead_peer += p->grants_released_dead_peer;
    m->announcements += p->announcements;
    m->grants_refused += p->grants_refused;
    m->dones_rejected += p->dones_rejected;
    pthread_mutex_unlock(&p->lock);
    ect_xport_server_counters_t x;
    ect__xport_server_counters(p->xport, &x);
    m->stream_served += x.streams_served;
    m->stream_bytes += x.bytes_sent;
    m->stream_denied += x.streams_denied;
    m->stream_bad_requests += x.bad_requests;
    m->stream_conns_refused += x.conns_refused;
    m->stream_timeouts += x.timeouts;
    m->stream_send_failures += x.send_failures;
    m->stream_moved += x.streams_moved;
    m->stream_unaligned += x.streams_unaligned;
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
