/*
 * The consumer's half of the control plane (control.h): a pool of DEALERs
 * keyed by producer (host, port), created on first send.
 *
 * Every DEALER has a socket monitor whose events drive a small state
 * machine per producer:
 *     CONNECTING --handshake--> UP --disconnect--> DOWN --handshake--> UP
 *     CONNECTING --refused / handshake failed / no handshake in time--> DOWN
 * Sends are gated by that state.  While CONNECTING, ZeroMQ queues messages
 * and sends them by itself once connected: the first request to a producer
 * is the common case and must neither fail nor wait for the caller's next
 * call.  In DOWN, sends fail at once with ECT_ERR_TRANSPORT (never blocking,
 * never queued).  Entering DOWN replaces the DEALER with a fresh one: that
 * discards whatever ZeroMQ still held for the producer, so no request
 * reaches it minutes late after it restarts, and the fresh DEALER's
 * reconnects tell when it is back.  Messages discarded so are counted in
 * send_failed, and the producer is flagged for take_dead_peers once per
 * loss.  The pool entry stays until remove or destroy.
 *
 * Why not ZMQ_IMMEDIATE: it makes ZeroMQ refuse messages while no
 * connection is up, so the first request after a producer's first use
 * would fail, or would have to wait in the pool until the caller calls in
 * again to flush it.
 *
 * The pool is an array searched linearly: a consumer talks to few
 * producers, and a send does far more work in ZeroMQ than the search.
 *
 * Locking: none; one thread at a time (control.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <time.h>

#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "p2p/control.h"
#include "p2p/control_curve.h"
#include "p2p/control_socket.h"

#define RECONNECT_IVL_MAX_MS 1000

#define HANDSHAKE_FAILED                                                                           \
    (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |                  \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
#define CLIENT_EVENTS                                                                              \
    (ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |          \
     HANDSHAKE_FAILED)

enum peer_state { PEER_CONNECTING, PEER_UP, PEER_DOWN };

struct ctl_peer {
    char host[ECT_CTL_HOST_MAX + 1];
    uint16_t port;
    void *dealer;  /* NULL only if renewing it failed; retried by service */
    void *monitor; /* its monitor's PAIR */
    enum peer_state state;
    bool dead;                    /* lost since the last take_dead_peers */
    size_t unconfirmed;           /* sent while CONNECTING: still in ZeroMQ's queue */
    uint64_t connect_deadline_ns; /* CONNECTING gives up then */
};

struct ect_ctl_client {
    void *ctx;
    bool curve;
    ect_ctl_keys_t keys; /* kept (secret too) to key each new DEALER; wiped on destroy */
    struct ctl_peer **peers;
    size_t n_peers, cap_peers;
    zmq_pollitem_t *items; /* 2 per peer (DEALER, monitor), then the wake fd */
    int wake_fd;           /* eventfd: ect__ctl_client_wake interrupts a recv */
    size_t next_read;      /* where the next read starts, so no producer starves */
    zmq_msg_t payload;     /* the last delivered payload; kept until the next recv */
    bool payload_live;
    ect_ctl_counters_t counters;
};

/* ---- peers ------------------------------------------------------------------- */

static bool
host_valid(const char *host)
{
    size_t n = strlen(host);
    if (n == 0 || n > ECT_CTL_HOST_MAX)
        return false;
    return strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.:_-") == n;
}

static struct ctl_peer *
find_peer(const ect_ctl_client_t *client, const char *host, uint16_t port, size_t *index_p)
{
    for (size_t i = 0; i < client->n_peers; i++) {
        struct ctl_peer *peer = client->peers[i];
        if (peer->port == port && strcmp(peer->host, host) == 0) {
            if (index_p != NULL)
                *index_p = i;
            return peer;
        }
    }
    return NULL;
}

/* Make the DEALER (with its monitor) and start connecting. */
static ect_status_t
peer_connect(ect_ctl_client_t *client, struct ctl_peer *peer)
{
    bool ipv6 = strchr(peer->host, ':') != NULL;
    ect_status_t st;
    void *monitor = NULL;
    void *dealer = zmq_socket(client->ctx, ZMQ_DEALER);
    if (dealer == NULL)
        return ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot make a DEALER socket");
    if ((st = ect__ctl_set_common_options(dealer, ipv6)) != ECT_OK)
        goto close_dealer;
    if (ect__ctl_set_int(dealer, ZMQ_CONNECT_TIMEOUT, ECT_CTL_CONNECT_WAIT_MS) != 0 ||
        ect__ctl_set_int(dealer, ZMQ_RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS) != 0) {
        st = ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot set DEALER options");
        goto close_dealer;
    }
    if (client->curve && (zmq_setsockopt(dealer, ZMQ_CURVE_SERVERKEY, client->keys.server_key,
                                         ECT_CTL_Z85_KEY_LEN) != 0 ||
                          zmq_setsockopt(dealer, ZMQ_CURVE_PUBLICKEY, client->keys.public_key,
                                         ECT_CTL_Z85_KEY_LEN) != 0 ||
                          zmq_setsockopt(dealer, ZMQ_CURVE_SECRETKEY, client->keys.secret_key,
                                         ECT_CTL_Z85_KEY_LEN) != 0)) {
        st = ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot set the CURVE keys");
        goto close_dealer;
    }
    /* The monitor goes on before connect, so no event is missed. */
    if ((st = ect__ctl_monitor_open(client->ctx, dealer, CLIENT_EVENTS, &monitor)) != ECT_OK)
        goto close_dealer;
    char endpoint[ECT_CTL_HOST_MAX + 16];
    snprintf(endpoint, sizeof(endpoint), ipv6 ? "tcp://[%s]:%u" : "tcp://%s:%u", peer->host,
             (unsigned)peer->port);
    if (zmq_connect(dealer, endpoint) != 0) {
        st = ect__error(ECT_ERR_TRANSPORT, "control: cannot connect to %s: %s", endpoint,
                        zmq_strerror(zmq_errno()));
        goto close_dealer;
    }
    peer->dealer = dealer;
    peer->monitor = monitor;
    return ECT_OK;
close_dealer:
    ect__ctl_close_with_monitor(dealer, monitor);
    return st;
}

static void
peer_go_down(ect_ctl_client_t *client, struct ctl_peer *peer, const char *why)
{
    if (peer->state == PEER_DOWN)
        return;
    if (peer->unconfirmed != 0)
        ECT_LOG_I("control: producer %s:%u %s; %zu request(s) to it discarded", peer->host,
                  (unsigned)peer->port, why, peer->unconfirmed);
    else
        ECT_LOG_I("control: producer %s:%u %s", peer->host, (unsigned)peer->port, why);
    client->counters.send_failed += peer->unconfirmed;
    peer->unconfirmed = 0;
    peer->state = PEER_DOWN;
    peer->dead = true;
    /* A fresh DEALER: nothing the old one queued can reach the producer
     * late, and the new one's reconnects say when the producer is back. */
    ect__ctl_close_with_monitor(peer->dealer, peer->monitor);
    peer->dealer = peer->monitor = NULL;
    if (peer_connect(client, peer) != ECT_OK)
        ect__log_last_error(ECT_LOG_WARN, "control: cannot renew a DEALER (will retry)");
}

static void
peer_go_up(ect_ctl_client_t *client, struct ctl_peer *peer)
{
    if (peer->state == PEER_DOWN)
        ECT_LOG_I("control: producer %s:%u is reachable again", peer->host, (unsigned)peer->port);
    client->counters.sent += peer->unconfirmed;
    peer->unconfirmed = 0;
    peer->state = PEER_UP;
}

/* Apply the monitor's events and the connect deadline. */
static void
peer_service(ect_ctl_client_t *client, struct ctl_peer *peer, uint64_t now)
{
    if (peer->dealer == NULL && peer_connect(client, peer) != ECT_OK)
        return; /* still no socket; stays DOWN */
    uint16_t event;
    uint32_t value;
    while (peer->monitor != NULL && ect__ctl_monitor_read(peer->monitor, &event, &value) == 1) {
        if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
            peer_go_up(client, peer);
        } else if (event == ZMQ_EVENT_DISCONNECTED) {
            client->counters.disconnects++;
            peer_go_down(client, peer, "disconnected");
        } else if (event & HANDSHAKE_FAILED) {
            client->counters.handshake_failed++;
            peer_go_down(client, peer, "refused the handshake (CURVE keys or allow-list?)");
        } else if (event == ZMQ_EVENT_CONNECT_RETRIED && peer->state == PEER_CONNECTING) {
            peer_go_down(client, peer, "cannot be reached");
        }
    }
    if (peer->state == PEER_CONNECTING && now >= peer->connect_deadline_ns)
        peer_go_down(client, peer, "did not complete a handshake in time");
}

static void
service_all(ect_ctl_client_t *client)
{
    uint64_t now = ect__now_ns();
    for (size_t i = 0; i < client->n_peers; i++)
        peer_service(client, client->peers[i], now);
}

static void
peer_close(ect_ctl_client_t *client, struct ctl_peer *peer)
{
    /* What ZeroMQ still held for a producer never reached is lost. */
    client->counters.send_failed += peer->unconfirmed;
    ect__ctl_close_with_monitor(peer->dealer, peer->monitor);
    ect__free(peer);
}

static ect_status_t
grow_pool(ect_ctl_client_t *client)
{
    if (client->n_peers < client->cap_peers)
        return ECT_OK;
    size_t ncap = client->cap_peers != 0 ? client->cap_peers * 2 : 8;
    struct ctl_peer **peers = ect__realloc(client->peers, ncap * sizeof(*peers));
    if (peers == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "control: out of memory");
    client->peers = peers;
    zmq_pollitem_t *items = ect__realloc(client->items, (2 * ncap + 1) * sizeof(*items));
    if (items == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "control: out of memory");
    client->items = items;
    client->cap_peers = ncap;
    return ECT_OK;
}

static ect_status_t
peer_open(ect_ctl_client_t *client, const char *host, uint16_t port, struct ctl_peer **peer_p)
{
    ect_status_t st = grow_pool(client);
    if (st != ECT_OK)
        return st;
    struct ctl_peer *peer = ect__calloc(1, sizeof(*peer));
    if (peer == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "control: out of memory");
    snprintf(peer->host, sizeof(peer->host), "%s", host);
    peer->port = port;
    if ((st = peer_connect(client, peer)) != ECT_OK) {
        ect__free(peer);
        return st;
    }
    peer->state = PEER_CONNECTING;
    peer->connect_deadline_ns = ect__now_ns() + (uint64_t)ECT_CTL_CONNECT_WAIT_MS * 1000000u;
    client->peers[client->n_peers++] = peer;
    *peer_p = peer;
    return ECT_OK;
}

/* ---- the pool ------------------------------------------------------------------- */

ect_status_t
ect__ctl_client_create(const ect_ctl_security_t *security, ect_ctl_client_t **client_p)
{
    if (client_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "control: NULL client output");
    ect_ctl_client_t *client = ect__calloc(1, sizeof(*client));
    if (client == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "control: out of memory");
    ect_status_t st;
    const char *key_file = security != NULL ? security->client_key_file : NULL;
    if (key_file != NULL && *key_file != '\0') {
        if ((st = ect__ctl_keys_load(key_file, true, &client->keys)) != ECT_OK)
            goto free_client;
        client->curve = true;
    }
    client->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (client->wake_fd < 0) {
        st = ect__error_errno(ECT_ERR_IO, "control: cannot make the client's wake-up eventfd");
        goto free_client;
    }
    if ((client->items = ect__malloc(sizeof(*client->items))) == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "control: out of memory");
        goto free_client;
    }
    client->ctx = zmq_ctx_new();
    if (client->ctx == NULL) {
        st = ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot make a ZeroMQ context");
        goto free_client;
    }
    *client_p = client;
    return ECT_OK;
free_client:
    if (client->wake_fd >= 0)
        close(client->wake_fd);
    ect__free(client->items);
    ect__ctl_keys_wipe(&client->keys);
    ect__free(client);
    return st;
}

/* ["", payload] without waiting: 0, or the errno. */
static int
send_frames(void *dealer, const void *payload, size_t len)
{
    if (zmq_send(dealer, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return zmq_errno();
    /* A message whose first frame was queued always takes the rest. */
    if (zmq_send(dealer, payload, len, ZMQ_DONTWAIT) < 0)
        return zmq_errno();
    return 0;
}

ect_status_t
ect__ctl_client_send(ect_ctl_client_t *client, const char *host, uint16_t port, const void *payload,
                     size_t len)
{
    if (client == NULL || host == NULL || (payload == NULL && len != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "control: NULL argument to client send");
    if (!host_valid(host) || port == 0)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "control: producer address '%.64s:%u' is not valid (host: 1 to %d "
                          "characters of [A-Za-z0-9.:_-]; port: 1 to 65535)",
                          host, (unsigned)port, ECT_CTL_HOST_MAX);
    if (len > ECT_CTL_MAX_MESSAGE)
        return ect__error(ECT_ERR_OVERFLOW,
                          "control: request of %zu bytes exceeds the %u-byte limit", len,
                          ECT_CTL_MAX_MESSAGE);
    struct ctl_peer *peer = find_peer(client, host, port, NULL);
    ect_status_t st;
    if (peer == NULL) {
        if ((st = peer_open(client, host, port, &peer)) != ECT_OK)
            return st;
    } else {
        peer_service(client, peer, ect__now_ns());
    }
    if (peer->state == PEER_DOWN || peer->dealer == NULL) {
        client->counters.send_failed++;
        return ect__error(ECT_ERR_TRANSPORT,
                          "control: cannot send to producer %s:%u: it is unreachable", host,
                          (unsigned)port);
    }
    int err = send_frames(peer->dealer, payload, len);
    if (err != 0) {
        client->counters.send_failed++;
        return ect__error(ECT_ERR_TRANSPORT, "control: cannot send to producer %s:%u: %s", host,
                          (unsigned)port, err == EAGAIN ? "its queue is full" : zmq_strerror(err));
    }
    if (peer->state == PEER_CONNECTING)
        peer->unconfirmed++; /* counted once the handshake says it can arrive */
    else
        client->counters.sent++;
    return ECT_OK;
}

static void
release_payload(ect_ctl_client_t *client)
{
    if (client->payload_live) {
        zmq_msg_close(&client->payload);
        client->payload_live = false;
    }
}

/* One reply from peer without waiting: 1 delivered, 0 none, -1 dropped. */
static int
peer_read_one(ect_ctl_client_t *client, struct ctl_peer *peer)
{
    if (peer->dealer == NULL)
        return 0;
    zmq_msg_t delim, *payload = &client->payload;
    zmq_msg_init(&delim);
    if (zmq_msg_recv(&delim, peer->dealer, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&delim);
        return 0;
    }
    /* ["", payload] exactly (seed: recv_skips_frames_without_empty_delimiter);
     * anything else is read to its end from the last frame received. */
    zmq_msg_t *last = &delim;
    zmq_msg_init(payload);
    if (zmq_msg_more(&delim) && zmq_msg_recv(payload, peer->dealer, 0) >= 0)
        last = payload;
    if (last != payload || zmq_msg_size(&delim) != 0 || zmq_msg_more(payload) ||
        zmq_msg_size(payload) > ECT_CTL_MAX_MESSAGE) {
        ect__ctl_skip_rest(peer->dealer, last);
        client->counters.dropped++;
        ECT_LOG_D("control: dropped a malformed reply from %s:%u", peer->host,
                  (unsigned)peer->port);
        zmq_msg_close(&delim);
        zmq_msg_close(payload);
        return -1;
    }
    zmq_msg_close(&delim);
    client->payload_live = true;
    client->counters.received++;
    return 1;
}

/* Earliest connect deadline of a CONNECTING peer (0: none). */
static uint64_t
next_connect_deadline(const ect_ctl_client_t *client)
{
    uint64_t first = 0;
    for (size_t i = 0; i < client->n_peers; i++) {
        const struct ctl_peer *peer = client->peers[i];
        if (peer->state == PEER_CONNECTING && (first == 0 || peer->connect_deadline_ns < first))
            first = peer->connect_deadline_ns;
    }
    return first;
}

ect_status_t
ect__ctl_client_recv(ect_ctl_client_t *client, int timeout_ms, char *host_out, uint16_t *port_p,
                     const void **payload_p, size_t *len_p)
{
    if (client == NULL || host_out == NULL || port_p == NULL || payload_p == NULL ||
        len_p == NULL || timeout_ms < -1)
        return ect__error(ECT_ERR_INVALID_ARG, "control: bad argument to client recv");
    release_payload(client);
    uint64_t deadline = ect__ctl_deadline(timeout_ms);
    for (;;) {
        service_all(client);
        int r = 0;
        size_t n = client->n_peers;
        for (size_t k = 0; k < n && r == 0; k++) {
            size_t i = (client->next_read + k) % n;
            r = peer_read_one(client, client->peers[i]);
            if (r == 1) {
                struct ctl_peer *peer = client->peers[i];
                client->next_read = i + 1;
                memcpy(host_out, peer->host, strlen(peer->host) + 1);
                *port_p = peer->port;
                *payload_p = zmq_msg_data(&client->payload);
                *len_p = zmq_msg_size(&client->payload);
                return ECT_OK;
            }
        }
        if (r == -1)
            continue; /* dropped one: look again before waiting */
        int wait = ect__ctl_ms_left(deadline, timeout_ms);
        if (wait == 0)
            return ECT_ERR_TIMEOUT;
        /* Wake for a connect deadline too, so a producer that never
         * answers is given up on time. */
        uint64_t connect = next_connect_deadline(client);
        if (connect != 0) {
            int until = ect__ctl_ms_left(connect, 1);
            if (until < 1)
                until = 1;
            if (wait < 0 || until < wait)
                wait = until;
        }
        int n_items = 0;
        for (size_t i = 0; i < n; i++) {
            struct ctl_peer *peer = client->peers[i];
            if (peer->dealer == NULL)
                continue;
            client->items[n_items++] = (zmq_pollitem_t){peer->dealer, 0, ZMQ_POLLIN, 0};
            client->items[n_items++] = (zmq_pollitem_t){peer->monitor, 0, ZMQ_POLLIN, 0};
        }
        /* Without a DEALER to wait on (an empty pool, or one being renewed),
         * wait in slices, so a "forever" wait stays one. */
        if (n_items == 0 && (wait < 0 || wait > 100))
            wait = 100;
        client->items[n_items++] = (zmq_pollitem_t){NULL, client->wake_fd, ZMQ_POLLIN, 0};
        if (zmq_poll(client->items, n_items, wait) < 0 && zmq_errno() != EINTR)
            return ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "poll on the DEALERs failed");
        if (client->items[n_items - 1].revents & ZMQ_POLLIN) {
            uint64_t v;
            if (read(client->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                ECT_LOG_D("control: reading the wake-up eventfd: %s", strerror(errno));
            return ECT_ERR_TIMEOUT; /* woken: the caller has work */
        }
    }
}

size_t
ect__ctl_client_take_dead_peers(ect_ctl_client_t *client, char (*hosts)[ECT_CTL_HOST_MAX + 1],
                                uint16_t *ports, size_t cap)
{
    if (client == NULL || ((hosts == NULL || ports == NULL) && cap != 0))
        return 0;
    service_all(client);
    size_t n = 0;
    for (size_t i = 0; i < client->n_peers && n < cap; i++) {
        struct ctl_peer *peer = client->peers[i];
        if (!peer->dead)
            continue;
        memcpy(hosts[n], peer->host, strlen(peer->host) + 1);
        ports[n] = peer->port;
        peer->dead = false;
        n++;
    }
    return n;
}

ect_status_t
ect__ctl_client_remove(ect_ctl_client_t *client, const char *host, uint16_t port)
{
    if (client == NULL || host == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "control: NULL argument to client remove");
    size_t i;
    struct ctl_peer *peer = find_peer(client, host, port, &i);
    if (peer == NULL)
        return ect__error(ECT_ERR_NOT_FOUND, "control: no connection to producer %.64s:%u", host,
                          (unsigned)port);
    peer_close(client, peer);
    client->peers[i] = client->peers[--client->n_peers];
    return ECT_OK;
}

void
ect__ctl_client_counters(const ect_ctl_client_t *client, ect_ctl_counters_t *counters_p)
{
    if (client != NULL && counters_p != NULL)
        *counters_p = client->counters;
}

void
ect__ctl_client_wake(ect_ctl_client_t *client)
{
    uint64_t one = 1;
    if (client != NULL && write(client->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        ECT_LOG_D("control: writing the wake-up eventfd: %s", strerror(errno));
}

void
ect__ctl_client_destroy(ect_ctl_client_t *client)
{
    if (client == NULL)
        return;
    release_payload(client);
    close(client->wake_fd);
    for (size_t i = 0; i < client->n_peers; i++)
        peer_close(client, client->peers[i]);
    zmq_ctx_term(client->ctx);
    ect__ctl_keys_wipe(&client->keys);
    ect__free(client->peers);
    ect__free(client->items);
    ect__free(client);
}
