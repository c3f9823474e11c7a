/*
 * The control plane's sockets (src/p2p/control.h) with real ZeroMQ on
 * 127.0.0.1: round trips and identities, binding, the frame rules on both
 * ends (hostile frames written with raw sockets), the consumer's DEALER
 * pool, and many peers at once.  Liveness (killed and stopped peers,
 * producers that are down): test_control_liveness.c; CURVE and key files:
 * test_control_curve.c.
 *
 * Cases named after the seed's unit/test_control.py scenarios say so in
 * their comment ("seed: ...").
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <zmq.h>

#include "common/clock.h"
#include "support/control.h"

static const char *const lo = "127.0.0.1";

static ect_ctl_server_t *
open_server(void)
{
    ect_ctl_server_t *server;
    CHECK_OK(ect__ctl_server_open(lo, 0, NULL, &server));
    CHECK(ect__ctl_server_port(server) != 0);
    return server;
}

static ect_ctl_client_t *
make_client(void)
{
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    return client;
}

/* ---- producer: round trips, binding --------------------------------------------- */

static void
test_server_round_trip_routes_each_reply_to_its_sender(void)
{
    ect_ctl_server_t *server = open_server();
    uint16_t port = ect__ctl_server_port(server);
    ect_ctl_client_t *a = make_client(), *b = make_client();
    CHECK_OK(ect__ctl_client_send(a, lo, port, "from-a", 6));
    CHECK_OK(ect__ctl_client_send(b, lo, port, "from-b", 6));

    ect_ctl_peer_t peers[2];
    char got[2][64];
    for (int i = 0; i < 2; i++)
        CHECK_OK(ts_server_recv_str(server, 5000, &peers[i], got[i], sizeof(got[i])));
    CHECK(!ts_peer_eq(&peers[0], &peers[1]));
    for (int i = 0; i < 2; i++) {
        char reply[80];
        snprintf(reply, sizeof(reply), "re:%.60s", got[i]);
        CHECK_OK(ect__ctl_server_send(server, &peers[i], reply, strlen(reply)));
    }
    char host[ECT_CTL_HOST_MAX + 1], buf[64];
    uint16_t from;
    CHECK_OK(ts_client_recv_str(a, 5000, host, &from, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "re:from-a");
    CHECK_STR_EQ(host, lo);
    CHECK_EQ_INT(from, port);
    CHECK_OK(ts_client_recv_str(b, 5000, host, &from, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "re:from-b");

    ect_ctl_counters_t c;
    ect__ctl_server_counters(server, &c);
    CHECK_EQ_U64(c.received, 2);
    CHECK_EQ_U64(c.sent, 2);
    CHECK_EQ_U64(c.dropped, 0);
    ect__ctl_client_counters(a, &c);
    CHECK_EQ_U64(c.sent, 1);
    CHECK_EQ_U64(c.received, 1);
    ect__ctl_client_destroy(a);
    ect__ctl_client_destroy(b);
    ect__ctl_server_close(server);
    CHECK_NO_LEAKS();
}

static void
test_server_port_zero_binds_a_free_port_and_reports_it(void)
{
    ect_ctl_server_t *s1 = open_server(), *s2 = open_server();
    CHECK(ect__ctl_server_port(s1) != ect__ctl_server_port(s2));
    /* The reported port is the real one: a raw DEALER reaches it. */
    void *ctx = zmq_ctx_new();
    void *d = ts_raw_dealer(ctx, ect__ctl_server_port(s1));
    ts_raw_send(d, 2, (const void *[]){"", "ping"}, (size_t[]){0, 4});
    ect_ctl_peer_t peer;
    char buf[16];
    CHECK_OK(ts_server_recv_str(s1, 5000, &peer, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "ping");
    zmq_close(d);
    zmq_ctx_term(ctx);
    ect__ctl_server_close(s1);
    ect__ctl_server_close(s2);
}

static void
test_server_bind_conflict_is_a_transport_error_naming_the_endpoint(void)
{
    ect_ctl_server_t *s1 = open_server(), *s2 = NULL;
    uint16_t port = ect__ctl_server_port(s1);
    CHECK_STATUS(ect__ctl_server_open(lo, port, NULL, &s2), ECT_ERR_TRANSPORT);
    CHECK(s2 == NULL);
    char want[64];
    snprintf(want, sizeof(want), "tcp://127.0.0.1:%u", (unsigned)port);
    CHECK_CONTAINS(ect_last_error(), want);
    ect__ctl_server_close(s1);
}

static void
test_server_binds_localhost(void)
{
    ect_ctl_server_t *server;
    CHECK_OK(ect__ctl_server_open("localhost", 0, NULL, &server));
    uint16_t port = ect__ctl_server_port(server);
    CHECK(port != 0);
    /* Reached both as 127.0.0.1 and as "localhost" (ZeroMQ resolves it on connect). */
    ect_ctl_client_t *client = make_client();
    CHECK_OK(ect__ctl_client_send(client, "localhost", port, "by-name", 7));
    CHECK_OK(ect__ctl_client_send(client, lo, port, "by-addr", 7));
    char buf[2][32];
    ect_ctl_peer_t peer[2];
    CHECK_OK(ts_server_recv_str(server, 5000, &peer[0], buf[0], sizeof(buf[0])));
    CHECK_OK(ts_server_recv_str(server, 5000, &peer[1], buf[1], sizeof(buf[1])));
    CHECK((strcmp(buf[0], "by-name") == 0 && strcmp(buf[1], "by-addr") == 0) ||
          (strcmp(buf[1], "by-name") == 0 && strcmp(buf[0], "by-addr") == 0));
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(server);
}

static void
test_server_open_rejects_bad_arguments(void)
{
    ect_ctl_server_t *server = NULL;
    CHECK_STATUS(ect__ctl_server_open(NULL, 0, NULL, &server), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_server_open("", 0, NULL, &server), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_server_open(lo, 0, NULL, NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_server_open("no-such-host.invalid", 0, NULL, &server), ECT_ERR_TRANSPORT);
    CHECK_CONTAINS(ect_last_error(), "no-such-host.invalid");
    /* An allow-list means nothing without CURVE: refused, not ignored. */
    ect_ctl_security_t sec = {NULL, "/nonexistent/allow", NULL};
    CHECK_STATUS(ect__ctl_server_open(lo, 0, &sec, &server), ECT_ERR_CONFIG);
    CHECK_CONTAINS(ect_last_error(), "allow-list");
    CHECK(server == NULL);
    ect__ctl_server_close(NULL);
}

static void
test_server_recv_times_out_and_send_to_unknown_peer_fails_counted(void)
{
    ect_ctl_server_t *server = open_server();
    ect_ctl_peer_t peer;
    const void *p;
    size_t len;
    CHECK_STATUS(ect__ctl_server_recv(server, 0, &peer, &p, &len), ECT_ERR_TIMEOUT);
    CHECK_STATUS(ect__ctl_server_recv(server, 50, &peer, &p, &len), ECT_ERR_TIMEOUT);
    CHECK_STATUS(ect__ctl_server_recv(server, -2, &peer, &p, &len), ECT_ERR_INVALID_ARG);
    ect_ctl_peer_t ghost = {.id = {0, 1, 2, 3, 4}, .len = 5};
    CHECK_STATUS(ect__ctl_server_send(server, &ghost, "x", 1), ECT_ERR_TRANSPORT);
    CHECK_CONTAINS(ect_last_error(), "gone");
    ect_ctl_peer_t empty = {.len = 0};
    CHECK_STATUS(ect__ctl_server_send(server, &empty, "x", 1), ECT_ERR_INVALID_ARG);
    static char big[ECT_CTL_MAX_MESSAGE + 1];
    CHECK_STATUS(ect__ctl_server_send(server, &ghost, big, sizeof(big)), ECT_ERR_OVERFLOW);
    ect_ctl_counters_t c;
    ect__ctl_server_counters(server, &c);
    CHECK_EQ_U64(c.send_failed, 1);
    CHECK_EQ_U64(c.sent, 0);
    CHECK_EQ_U64(c.received, 0);
    ect__ctl_server_close(server);
}

/* ---- producer: frame rules ---------------------------------------------------------- */

/* Send frames from a raw DEALER; the server must deliver nothing and count
 * one drop, then still serve a well-framed message on the same connection. */
static void
check_server_drops(size_t n, const void *const *data, const size_t *len)
{
    ect_ctl_server_t *server = open_server();
    void *ctx = zmq_ctx_new();
    void *d = ts_raw_dealer(ctx, ect__ctl_server_port(server));
    ts_raw_send(d, n, data, len);
    ect_ctl_peer_t peer;
    char buf[64];
    CHECK_STATUS(ts_server_recv_str(server, 300, &peer, buf, sizeof(buf)), ECT_ERR_TIMEOUT);
    ect_ctl_counters_t c;
    ect__ctl_server_counters(server, &c);
    CHECK_EQ_U64(c.dropped, 1);
    CHECK_EQ_U64(c.received, 0);

    ts_raw_send(d, 2, (const void *[]){"", "good"}, (size_t[]){0, 4});
    CHECK_OK(ts_server_recv_str(server, 5000, &peer, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "good");
    /* Nothing was answered: the only thing the DEALER gets is this reply. */
    CHECK_OK(ect__ctl_server_send(server, &peer, "reply", 5));
    struct ts_raw_frame f[4];
    CHECK_EQ_INT(ts_raw_recv(d, 5000, f, 4), 2);
    CHECK_STR_EQ(f[1].data, "reply");
    CHECK_EQ_INT(ts_raw_recv(d, 100, f, 4), 0);
    ect__ctl_server_counters(server, &c);
    CHECK_EQ_U64(c.dropped, 1);
    CHECK_EQ_U64(c.received, 1);
    CHECK_EQ_U64(c.disconnects, 0);
    zmq_close(d);
    zmq_ctx_term(ctx);
    ect__ctl_server_close(server);
    CHECK_NO_LEAKS();
}

static void
test_server_drops_message_without_empty_delimiter(void)
{
    check_server_drops(1, (const void *[]){"payload"}, (size_t[]){7});
}

static void
test_server_drops_message_with_non_empty_delimiter(void)
{
    check_server_drops(2, (const void *[]){"x", "payload"}, (size_t[]){1, 7});
}

static void
test_server_drops_message_with_extra_frames(void)
{
    check_server_drops(3, (const void *[]){"", "payload", "extra"}, (size_t[]){0, 7, 5});
}

static void
test_server_drops_oversized_message_but_keeps_the_connection(void)
{
    static char big[ECT_CTL_MAX_MESSAGE + 1];
    memset(big, 'b', sizeof(big));
    check_server_drops(2, (const void *[]){"", big}, (size_t[]){0, sizeof(big)});
}

static void
test_server_accepts_message_of_exactly_the_limit(void)
{
    static char big[ECT_CTL_MAX_MESSAGE];
    memset(big, 'm', sizeof(big));
    ect_ctl_server_t *server = open_server();
    void *ctx = zmq_ctx_new();
    void *d = ts_raw_dealer(ctx, ect__ctl_server_port(server));
    ts_raw_send(d, 2, (const void *[]){"", big}, (size_t[]){0, sizeof(big)});
    ect_ctl_peer_t peer;
    const void *p;
    size_t len;
    CHECK_OK(ect__ctl_server_recv(server, 5000, &peer, &p, &len));
    CHECK_EQ_U64(len, ECT_CTL_MAX_MESSAGE);
    CHECK(memcmp(p, big, len) == 0);
    zmq_close(d);
    zmq_ctx_term(ctx);
    ect__ctl_server_close(server);
}

/* A frame past the libzmq cap costs the sender its connection; the old
 * identity is reported dead (often on a reused fd, as the DEALER
 * reconnects at once) and the new connection is not. */
static void
test_server_frame_beyond_hard_cap_cuts_connection_and_reports_identity(void)
{
    ect_ctl_server_t *server = open_server();
    void *ctx = zmq_ctx_new();
    void *d = ts_raw_dealer(ctx, ect__ctl_server_port(server));
    ts_raw_send(d, 2, (const void *[]){"", "first"}, (size_t[]){0, 5});
    ect_ctl_peer_t before, after;
    char buf[32];
    CHECK_OK(ts_server_recv_str(server, 5000, &before, buf, sizeof(buf)));

    size_t huge_len = ECT_CTL_HARD_MAX_FRAME + 1;
    char *huge = calloc(1, huge_len);
    CHECK(huge != NULL);
    ts_raw_send(d, 2, (const void *[]){"", huge}, (size_t[]){0, huge_len});
    free(huge);
    CHECK_EQ_INT(ts_server_wait_dead(server, &before, 0), 1);

    /* The DEALER reconnects by itself: a new identity, alive.  A message
     * queued while the DEALER had not yet seen the cut is lost with the old
     * connection, so send until one arrives. */
    ect_status_t got = ECT_ERR_TIMEOUT;
    for (int tries = 0; tries < 20 && got != ECT_OK; tries++) {
        ts_raw_send(d, 2, (const void *[]){"", "second"}, (size_t[]){0, 6});
        got = ts_server_recv_str(server, 500, &after, buf, sizeof(buf));
    }
    CHECK_OK(got);
    CHECK_STR_EQ(buf, "second");
    CHECK(!ts_peer_eq(&before, &after));
    ect_ctl_peer_t dead[4];
    ts_sleep_ms(200);
    CHECK_EQ_INT(ect__ctl_server_take_dead_peers(server, dead, 4), 0);
    CHECK_OK(ect__ctl_server_send(server, &after, "ok", 2));
    ect_ctl_counters_t c;
    ect__ctl_server_counters(server, &c);
    CHECK(c.disconnects >= 1);
    CHECK(c.received >= 2);
    zmq_close(d);
    zmq_ctx_term(ctx);
    ect__ctl_server_close(server);
}

static void
test_server_fifty_consumers_without_crosstalk(void)
{
    enum { N = 50 };
    ect_ctl_server_t *server = open_server();
    void *ctx = zmq_ctx_new();
    void *d[N];
    for (int i = 0; i < N; i++) {
        d[i] = ts_raw_dealer(ctx, ect__ctl_server_port(server));
        char msg[16];
        int len = snprintf(msg, sizeof(msg), "%d", i);
        ts_raw_send(d[i], 2, (const void *[]){"", msg}, (size_t[]){0, (size_t)len});
    }
    ect_ctl_peer_t peers[N];
    bool seen[N] = {false};
    for (int k = 0; k < N; k++) {
        char buf[16];
        ect_ctl_peer_t peer;
        CHECK_OK(ts_server_recv_str(server, 5000, &peer, buf, sizeof(buf)));
        int i = atoi(buf);
        CHECK(i >= 0 && i < N && !seen[i]);
        seen[i] = true;
        peers[i] = peer;
        for (int j = 0; j < N; j++)
            CHECK(!seen[j] || j == i || !ts_peer_eq(&peers[j], &peer));
    }
    for (int i = N - 1; i >= 0; i--) {
        char reply[16];
        int len = snprintf(reply, sizeof(reply), "for %d", i);
        CHECK_OK(ect__ctl_server_send(server, &peers[i], reply, (size_t)len));
    }
    for (int i = 0; i < N; i++) {
        struct ts_raw_frame f[3];
        CHECK_EQ_INT(ts_raw_recv(d[i], 5000, f, 3), 2);
        char want[16];
        snprintf(want, sizeof(want), "for %d", i);
        CHECK_STR_EQ(f[1].data, want);
        zmq_close(d[i]);
    }
    zmq_ctx_term(ctx);
    ect__ctl_server_close(server);
    CHECK_NO_LEAKS();
}

/* ---- consumer: frame rules (seed: ZmqClientConnection) --------------------------------- */

/* A raw ROUTER standing in for a producer, and the identity of the
 * consumer's DEALER once its first message arrived. */
struct raw_producer {
    void *ctx, *router;
    uint16_t port;
    struct ts_raw_frame id;
};

static void
raw_producer_start(struct raw_producer *rp, ect_ctl_client_t *client)
{
    rp->ctx = zmq_ctx_new();
    rp->router = ts_raw_router(rp->ctx, &rp->port);
    CHECK_OK(ect__ctl_client_send(client, lo, rp->port, "hi", 2));
    struct ts_raw_frame f[4];
    CHECK_EQ_INT(ts_raw_recv(rp->router, 5000, f, 4), 3);
    rp->id = f[0];
}

static void
raw_producer_stop(struct raw_producer *rp)
{
    zmq_close(rp->router);
    zmq_ctx_term(rp->ctx);
}

/* seed: send_prefixes_empty_delimiter */
static void
test_client_send_prefixes_empty_delimiter(void)
{
    ect_ctl_client_t *client = make_client();
    void *ctx = zmq_ctx_new();
    uint16_t port;
    void *router = ts_raw_router(ctx, &port);
    CHECK_OK(ect__ctl_client_send(client, lo, port, "payload", 7));
    struct ts_raw_frame f[4];
    CHECK_EQ_INT(ts_raw_recv(router, 5000, f, 4), 3);
    CHECK(f[0].len > 0);
    CHECK_EQ_U64(f[1].len, 0);
    CHECK_EQ_U64(f[2].len, 7);
    CHECK_STR_EQ(f[2].data, "payload");
    zmq_close(router);
    zmq_ctx_term(ctx);
    ect__ctl_client_destroy(client);
}

/* seed: recv_extracts_payloads_from_envelopes */
static void
test_client_recv_extracts_payload_from_envelope(void)
{
    ect_ctl_client_t *client = make_client();
    struct raw_producer rp;
    raw_producer_start(&rp, client);
    ts_raw_send(rp.router, 3, (const void *[]){rp.id.data, "", "answer"},
                (size_t[]){rp.id.len, 0, 6});
    char host[ECT_CTL_HOST_MAX + 1], buf[32];
    uint16_t port;
    CHECK_OK(ts_client_recv_str(client, 5000, host, &port, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "answer");
    CHECK_STR_EQ(host, lo);
    CHECK_EQ_INT(port, rp.port);
    raw_producer_stop(&rp);
    ect__ctl_client_destroy(client);
}

/* seed: recv_skips_frames_without_empty_delimiter (and the other bad shapes) */
static void
test_client_recv_skips_replies_without_empty_delimiter(void)
{
    static char big[ECT_CTL_MAX_MESSAGE + 1];
    ect_ctl_client_t *client = make_client();
    struct raw_producer rp;
    raw_producer_start(&rp, client);
    const void *id = rp.id.data;
    size_t il = rp.id.len;
    ts_raw_send(rp.router, 2, (const void *[]){id, "no-delimiter"}, (size_t[]){il, 12});
    ts_raw_send(rp.router, 3, (const void *[]){id, "x", "p"}, (size_t[]){il, 1, 1});
    ts_raw_send(rp.router, 4, (const void *[]){id, "", "p", "extra"}, (size_t[]){il, 0, 1, 5});
    ts_raw_send(rp.router, 3, (const void *[]){id, "", big}, (size_t[]){il, 0, sizeof(big)});
    ts_raw_send(rp.router, 2, (const void *[]){id, ""}, (size_t[]){il, 0});
    ts_raw_send(rp.router, 3, (const void *[]){id, "", "good"}, (size_t[]){il, 0, 4});
    char host[ECT_CTL_HOST_MAX + 1], buf[32];
    uint16_t port;
    CHECK_OK(ts_client_recv_str(client, 5000, host, &port, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "good");
    CHECK_STATUS(ts_client_recv_str(client, 100, host, &port, buf, sizeof(buf)), ECT_ERR_TIMEOUT);
    ect_ctl_counters_t c;
    ect__ctl_client_counters(client, &c);
    CHECK_EQ_U64(c.dropped, 5);
    CHECK_EQ_U64(c.received, 1);
    raw_producer_stop(&rp);
    ect__ctl_client_destroy(client);
    CHECK_NO_LEAKS();
}

/* seed: recv_breaks_on_non_again_exception -- nothing to read is a
 * timeout, not an error, and the pool stays usable. */
static void
test_client_recv_times_out_cleanly_and_stays_usable(void)
{
    ect_ctl_client_t *client = make_client();
    char host[ECT_CTL_HOST_MAX + 1], buf[32];
    uint16_t port;
    const void *p;
    size_t len;
    CHECK_STATUS(ect__ctl_client_recv(client, 0, host, &port, &p, &len), ECT_ERR_TIMEOUT);
    CHECK_STATUS(ect__ctl_client_recv(client, 50, host, &port, &p, &len), ECT_ERR_TIMEOUT);
    CHECK_STATUS(ect__ctl_client_recv(client, 50, NULL, &port, &p, &len), ECT_ERR_INVALID_ARG);
    struct raw_producer rp;
    raw_producer_start(&rp, client);
    CHECK_STATUS(ts_client_recv_str(client, 50, host, &port, buf, sizeof(buf)), ECT_ERR_TIMEOUT);
    ts_raw_send(rp.router, 3, (const void *[]){rp.id.data, "", "late"},
                (size_t[]){rp.id.len, 0, 4});
    CHECK_OK(ts_client_recv_str(client, 5000, host, &port, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "late");
    raw_producer_stop(&rp);
    ect__ctl_client_destroy(client);
}

static void
test_client_send_rejects_bad_addresses_and_sizes(void)
{
    ect_ctl_client_t *client = make_client();
    char long_host[ECT_CTL_HOST_MAX + 2];
    memset(long_host, 'h', sizeof(long_host) - 1);
    long_host[sizeof(long_host) - 1] = '\0';
    CHECK_STATUS(ect__ctl_client_send(client, "", 5601, "x", 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_client_send(client, long_host, 5601, "x", 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_client_send(client, "a b", 5601, "x", 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_client_send(client, "h/../x", 5601, "x", 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_client_send(client, lo, 0, "x", 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_client_send(client, NULL, 5601, "x", 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__ctl_client_send(client, lo, 5601, NULL, 1), ECT_ERR_INVALID_ARG);
    static char big[ECT_CTL_MAX_MESSAGE + 1];
    CHECK_STATUS(ect__ctl_client_send(client, lo, 5601, big, sizeof(big)), ECT_ERR_OVERFLOW);
    /* None of them made a DEALER. */
    CHECK_STATUS(ect__ctl_client_remove(client, lo, 5601), ECT_ERR_NOT_FOUND);
    ect_ctl_counters_t c;
    ect__ctl_client_counters(client, &c);
    CHECK_EQ_U64(c.sent + c.send_failed, 0);
    ect__ctl_client_destroy(client);
}

/* ---- consumer: the pool (seed: ZmqClientTransport) ------------------------------------- */

/* seed: connect_caches_connection */
static void
test_client_pools_one_dealer_per_producer(void)
{
    ect_ctl_server_t *server = open_server();
    ect_ctl_client_t *client = make_client();
    uint16_t port = ect__ctl_server_port(server);
    ect_ctl_peer_t p1, p2;
    char buf[16];
    CHECK_OK(ect__ctl_client_send(client, lo, port, "one", 3));
    CHECK_OK(ts_server_recv_str(server, 5000, &p1, buf, sizeof(buf)));
    CHECK_OK(ect__ctl_client_send(client, lo, port, "two", 3));
    CHECK_OK(ts_server_recv_str(server, 5000, &p2, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "two");
    CHECK(ts_peer_eq(&p1, &p2));
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(server);
}

/* seed: connect_creates_independent_conns_per_addr */
static void
test_client_keeps_independent_dealers_per_address(void)
{
    ect_ctl_server_t *s1 = open_server(), *s2 = open_server();
    ect_ctl_client_t *client = make_client();
    uint16_t port1 = ect__ctl_server_port(s1), port2 = ect__ctl_server_port(s2);
    CHECK_OK(ect__ctl_client_send(client, lo, port1, "to-1", 4));
    CHECK_OK(ect__ctl_client_send(client, lo, port2, "to-2", 4));
    /* Same producer under another name: another DEALER, another identity. */
    CHECK_OK(ect__ctl_client_send(client, "localhost", port1, "to-1-by-name", 12));
    ect_ctl_peer_t a, b, c;
    char buf[32], buf2[32];
    CHECK_OK(ts_server_recv_str(s2, 5000, &b, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "to-2");
    /* Two connections to s1: their messages may come in either order. */
    CHECK_OK(ts_server_recv_str(s1, 5000, &a, buf, sizeof(buf)));
    CHECK_OK(ts_server_recv_str(s1, 5000, &c, buf2, sizeof(buf2)));
    if (strcmp(buf, "to-1") != 0) {
        ect_ctl_peer_t t = a;
        a = c;
        c = t;
        CHECK_STR_EQ(buf2, "to-1");
        CHECK_STR_EQ(buf, "to-1-by-name");
    } else {
        CHECK_STR_EQ(buf2, "to-1-by-name");
    }
    CHECK(!ts_peer_eq(&a, &c));
    CHECK_OK(ect__ctl_server_send(s2, &b, "from-2", 6));
    CHECK_OK(ect__ctl_server_send(s1, &a, "from-1", 6));
    for (int i = 0; i < 2; i++) {
        char host[ECT_CTL_HOST_MAX + 1];
        uint16_t port;
        CHECK_OK(ts_client_recv_str(client, 5000, host, &port, buf, sizeof(buf)));
        CHECK_STR_EQ(host, lo);
        CHECK_STR_EQ(buf, port == port1 ? "from-1" : "from-2");
        CHECK(port == port1 || port == port2);
    }
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(s1);
    ect__ctl_server_close(s2);
}

/* seed: remove_closes_and_evicts_conn, close_with_monitor_disables_then_closes_both */
static void
test_client_remove_closes_the_dealer_and_forgets_it(void)
{
    ect_ctl_server_t *server = open_server();
    ect_ctl_client_t *client = make_client();
    uint16_t port = ect__ctl_server_port(server);
    ect_ctl_peer_t first, second;
    char buf[16];
    CHECK_OK(ect__ctl_client_send(client, lo, port, "a", 1));
    CHECK_OK(ts_server_recv_str(server, 5000, &first, buf, sizeof(buf)));
    CHECK_OK(ect__ctl_client_remove(client, lo, port));
    /* The producer sees the connection close: the DEALER is really gone. */
    CHECK_EQ_INT(ts_server_wait_dead(server, &first, 0), 1);
    /* The next send makes a fresh DEALER (a new identity). */
    CHECK_OK(ect__ctl_client_send(client, lo, port, "b", 1));
    CHECK_OK(ts_server_recv_str(server, 5000, &second, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "b");
    CHECK(!ts_peer_eq(&first, &second));
    /* A removed producer is not reported dead by the consumer. */
    char hosts[2][ECT_CTL_HOST_MAX + 1];
    uint16_t ports[2];
    CHECK_EQ_INT(ect__ctl_client_take_dead_peers(client, hosts, ports, 2), 0);
    ect__ctl_client_destroy(client);
    ect__ctl_server_close(server);
    CHECK_NO_LEAKS();
}

/* seed: remove_returns_none_for_unknown_addr, close_is_idempotent */
static void
test_client_remove_unknown_or_twice_is_not_found(void)
{
    ect_ctl_server_t *server = open_server();
    ect_ctl_client_t *client = make_client();
    uint16_t port = ect__ctl_server_port(server);
    CHECK_STATUS(ect__ctl_client_remove(client, lo, port), ECT_ERR_NOT_FOUND);
    CHECK_OK(ect__ctl_client_send(client, lo, port, "a", 1));
    CHECK_STATUS(ect__ctl_client_remove(client, "localhost", port), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect__ctl_client_remove(client, lo, (uint16_t)(port + 1)), ECT_ERR_NOT_FOUND);
    CHECK_OK(ect__ctl_client_remove(client, lo, port));
    CHECK_STATUS(ect__ctl_client_remove(client, lo, port), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect__ctl_client_remove(NULL, lo, port), ECT_ERR_INVALID_ARG);
    ect__ctl_client_destroy(client);
    ect__ctl_client_destroy(NULL);
    ect__ctl_server_close(server);
}

/* seed: close_closes_all_connections */
static void
test_client_destroy_closes_every_dealer(void)
{
    enum { N = 3 };
    ect_ctl_server_t *servers[N];
    ect_ctl_peer_t peers[N];
    ect_ctl_client_t *client = make_client();
    for (int i = 0; i < N; i++) {
        servers[i] = open_server();
        CHECK_OK(ect__ctl_client_send(client, lo, ect__ctl_server_port(servers[i]), "x", 1));
    }
    for (int i = 0; i < N; i++) {
        char buf[8];
        CHECK_OK(ts_server_recv_str(servers[i], 5000, &peers[i], buf, sizeof(buf)));
    }
    ect__ctl_client_destroy(client);
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(ts_server_wait_dead(servers[i], &peers[i], 0), 1);
        ect__ctl_server_close(servers[i]);
    }
    CHECK_NO_LEAKS();
}

static void
test_client_pool_of_fifty_producers_without_crosstalk(void)
{
    enum { N = 50 };
    void *ctx = zmq_ctx_new();
    void *routers[N];
    uint16_t ports[N];
    ect_ctl_client_t *client = make_client();
    for (int i = 0; i < N; i++) {
        routers[i] = ts_raw_router(ctx, &ports[i]);
        char msg[16];
        int len = snprintf(msg, sizeof(msg), "to %u", (unsigned)ports[i]);
        CHECK_OK(ect__ctl_client_send(client, lo, ports[i], msg, (size_t)len));
    }
    /* Each producer answers only what was addressed to it. */
    for (int i = 0; i < N; i++) {
        struct ts_raw_frame f[4];
        CHECK_EQ_INT(ts_raw_recv(routers[i], 5000, f, 4), 3);
        char want[16], reply[16];
        snprintf(want, sizeof(want), "to %u", (unsigned)ports[i]);
        CHECK_STR_EQ(f[2].data, want);
        int len = snprintf(reply, sizeof(reply), "from %u", (unsigned)ports[i]);
        ts_raw_send(routers[i], 3, (const void *[]){f[0].data, "", reply},
                    (size_t[]){f[0].len, 0, (size_t)len});
    }
    bool seen[N] = {false};
    for (int k = 0; k < N; k++) {
        char host[ECT_CTL_HOST_MAX + 1], buf[16], want[16];
        uint16_t port;
        CHECK_OK(ts_client_recv_str(client, 5000, host, &port, buf, sizeof(buf)));
        snprintf(want, sizeof(want), "from %u", (unsigned)port);
        CHECK_STR_EQ(buf, want);
        int i = 0;
        while (i < N && ports[i] != port)
            i++;
        CHECK(i < N && !seen[i]);
        seen[i] = true;
    }
    ect_ctl_counters_t c;
    ect__ctl_client_counters(client, &c);
    CHECK_EQ_U64(c.sent, N);
    CHECK_EQ_U64(c.received, N);
    ect__ctl_client_destroy(client);
    for (int i = 0; i < N; i++)
        zmq_close(routers[i]);
    zmq_ctx_term(ctx);
    CHECK_NO_LEAKS();
}

/* ---- producer: connections that do not speak ZMTP (issue 9, item 7) ------------------ */

static int
tcp_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_MSG(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0, "connect: %s", strerror(errno));
    return fd;
}

static void *
close_server_main(void *arg)
{
    ect__ctl_server_close(arg);
    return NULL;
}

/* libzmq 4.3 writes monitor events with a blocking send under the socket's
 * monitor mutex: once the monitor pipe was full, its I/O thread stopped and
 * closing the server deadlocked.  Thousands of connections that fail before
 * their handshake, with nobody reading the monitor meanwhile, filled it. */
static void
test_server_survives_a_storm_of_failed_connections_between_two_polls(void)
{
    ect_ctl_server_t *server = open_server();
    uint16_t port = ect__ctl_server_port(server);
    enum { N = 2500 }; /* two events each; the default pipe holds 2000 */
    for (int i = 0; i < N; i++) {
        int fd = tcp_connect(port);
        CHECK(send(fd, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL) == 18);
        close(fd);
    }
    /* Long enough for libzmq to have seen them all go. */
    ts_sleep_ms(1500);
    /* A consumer is still served (the I/O thread did not stop) ... */
    ect_ctl_client_t *client = make_client();
    CHECK_OK(ect__ctl_client_send(client, lo, port, "after", 5));
    ect_ctl_peer_t peer;
    char buf[16];
    /* ... and closing right after does not hang. */
    CHECK_OK(ts_server_recv_str(server, 5000, &peer, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "after");
    for (int i = 0; i < N; i++) {
        int fd = tcp_connect(port);
        CHECK(send(fd, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL) == 18);
        close(fd);
    }
    ts_sleep_ms(1500);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, close_server_main, server) == 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    CHECK_MSG(pthread_timedjoin_np(t, NULL, &until) == 0,
              "closing the server hung after a storm of failed connections");
    ect__ctl_client_destroy(client);
    CHECK_NO_LEAKS();
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_server_round_trip_routes_each_reply_to_its_sender),
    ECT_CASE(test_server_port_zero_binds_a_free_port_and_reports_it),
    ECT_CASE(test_server_bind_conflict_is_a_transport_error_naming_the_endpoint),
    ECT_CASE(test_server_binds_localhost),
    ECT_CASE(test_server_open_rejects_bad_arguments),
    ECT_CASE(test_server_recv_times_out_and_send_to_unknown_peer_fails_counted),
    ECT_CASE(test_server_drops_message_without_empty_delimiter),
    ECT_CASE(test_server_drops_message_with_non_empty_delimiter),
    ECT_CASE(test_server_drops_message_with_extra_frames),
    ECT_CASE(test_server_drops_oversized_message_but_keeps_the_connection),
    ECT_CASE(test_server_accepts_message_of_exactly_the_limit),
    ECT_CASE(test_server_frame_beyond_hard_cap_cuts_connection_and_reports_identity),
    ECT_CASE(test_server_fifty_consumers_without_crosstalk),
    ECT_CASE(test_server_survives_a_storm_of_failed_connections_between_two_polls),
    ECT_CASE(test_client_send_prefixes_empty_delimiter),
    ECT_CASE(test_client_recv_extracts_payload_from_envelope),
    ECT_CASE(test_client_recv_skips_replies_without_empty_delimiter),
    ECT_CASE(test_client_recv_times_out_cleanly_and_stays_usable),
    ECT_CASE(test_client_send_rejects_bad_addresses_and_sizes),
    ECT_CASE(test_client_pools_one_dealer_per_producer),
    ECT_CASE(test_client_keeps_independent_dealers_per_address),
    ECT_CASE(test_client_remove_closes_the_dealer_and_forgets_it),
    ECT_CASE(test_client_remove_unknown_or_twice_is_not_found),
    ECT_CASE(test_client_destroy_closes_every_dealer),
    ECT_CASE(test_client_pool_of_fifty_producers_without_crosstalk),
};

int
main(int argc, char **argv)
{
    TS_CONTROL_TEST_MAIN(argc, argv, cases);
}
