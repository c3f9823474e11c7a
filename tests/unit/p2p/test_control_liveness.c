/*
 * Liveness of the control plane (src/p2p/control.h, SPEC §8.3, §9.8) with
 * real processes: consumers and producers killed with SIGKILL or frozen
 * with SIGSTOP (only heartbeats can tell), producers that are down or come
 * back on the same port.  Every wait is bounded by TS_DEAD_WITHIN_S, a
 * liveness bound, not a timing assertion.
 *
 * Cases named after the seed's unit/test_control.py scenarios say so in
 * their comment ("seed: ...").
 */
#include <netinet/in.h>
#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <zmq.h>

#include "common/clock.h"
#include "support/control.h"

static const char *const lo = "127.0.0.1";

static pid_t
spawn_echo_server(uint16_t port, uint16_t *port_p)
{
    char port_text[8];
    snprintf(port_text, sizeof(port_text), "%u", (unsigned)port);
    return ts_helper_spawn((const char *[]){"echo-server", lo, port_text, NULL}, port_p);
}

static pid_t
spawn_sender(uint16_t port)
{
    char port_text[8];
    snprintf(port_text, sizeof(port_text), "%u", (unsigned)port);
    return ts_helper_spawn((const char *[]){"sender", lo, port_text, NULL}, NULL);
}

/* A port where nothing listens (and nothing else can, while fd is open):
 * bound but never listening, so connecting to it is refused. */
static uint16_t
reserve_dead_port(int *fd_p)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    socklen_t len = sizeof(a);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    *fd_p = fd;
    return ntohs(a.sin_port);
}

/* Round trip through an echo producer. */
static void
round_trip(ect_ctl_client_t *client, uint16_t port, const char *msg)
{
    CHECK_OK(ect__ctl_client_send(client, lo, port, msg, strlen(msg)));
    char host[ECT_CTL_HOST_MAX + 1], buf[64], want[64];
    uint16_t from;
    CHECK_OK(ts_client_recv_str(client, 10000, host, &from, buf, sizeof(buf)));
    snprintf(want, sizeof(want), "echo:%s", msg);
    CHECK_STR_EQ(buf, want);
    CHECK_EQ_INT(from, port);
}

/* ---- producer notices dead consumers (beyond the seed) ------------------------------- */

static void
check_consumer_death_reported(int signo)
{
    ect_ctl_server_t *server;
    CHECK_OK(ect__ctl_server_open(lo, 0, NULL, &server));
    pid_t child = spawn_sender(ect__ctl_server_port(server));
    ect_ctl_peer_t peer;
    char buf[16];
    CHECK_OK(ts_server_recv_str(server, 10000, &peer, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "hello");
    CHECK_OK(ect__ctl_server_send(server, &peer, "welcome", 7));
    /* The sender says "ready" only after the reply, so it is connected and
     * idle; nothing reported yet. */
    ect_ctl_peer_t dead[4];
    CHECK_EQ_INT(ect__ctl_server_take_dead_peers(server, dead, 4), 0);

    kill(child, signo);
    /* Reported once, with the identity its messages came with. */
    CHECK_EQ_INT(ts_server_wait_dead(server, &peer, 300), 1);
    ts_helper_kill(child);
    /* Sending to it now fails and is counted (ROUTER_MANDATORY). */
    CHECK_STATUS(ect__ctl_server_send(server, &peer, "late", 4), ECT_ERR_TRANSPORT);
    ect_ctl_counters_t c;
    ect__ctl_server_counters(server, &c);
    CHECK(c.disconnects >= 1);
    CHECK_EQ_U64(c.send_failed, 1);
    CHECK_EQ_U64(c.received, 1);
    ect__ctl_server_close(server);
    CHECK_NO_LEAKS();
}

static void
test_server_reports_sigkilled_consumer_by_identity(void)
{
    check_consumer_death_reported(SIGKILL);
}

/* A frozen consumer keeps its TCP connection; only the ROUTER's heartbeat
 * (4 s timeout) can tell it is gone. */
static void
test_server_reports_stopped_consumer_after_heartbeat_timeout(void)
{
    check_consumer_death_reported(SIGSTOP);
}

static void
test_server_keeps_live_consumers_off_the_dead_list(void)
{
    ect_ctl_server_t *server;
    CHECK_OK(ect__ctl_server_open(lo, 0, NULL, &server));
    pid_t alive = spawn_sender(ect__ctl_server_port(server));
    pid_t doomed = spawn_sender(ect__ctl_server_port(server));
    ect_ctl_peer_t peers[2];
    char buf[16];
    for (int i = 0; i < 2; i++) {
        CHECK_OK(ts_server_recv_str(server, 10000, &peers[i], buf, sizeof(buf)));
        CHECK_OK(ect__ctl_server_send(server, &peers[i], "welcome", 7));
    }
    /* Which peer is which process is unknown; kill one sender, and exactly
     * one identity must be reported, the other must still get a reply. */
    ts_helper_kill(doomed);
    ect_ctl_peer_t dead[4];
    size_t n = 0;
    uint64_t deadline = ect__now_ns() + (uint64_t)TS_DEAD_WITHIN_S * 1000000000ull;
    while (n == 0 && ect__now_ns() < deadline) {
        n = ect__ctl_server_take_dead_peers(server, dead, 4);
        ts_sleep_ms(20);
    }
    CHECK_EQ_INT(n, 1);
    int live = ts_peer_eq(&dead[0], &peers[0]) ? 1 : 0;
    CHECK(ts_peer_eq(&dead[0], &peers[1 - live]));
    /* Past a heartbeat timeout, the live one is still not reported. */
    ts_sleep_ms(5000);
    CHECK_EQ_INT(ect__ctl_server_take_dead_peers(server, dead, 4), 0);
    CHECK_OK(ect__ctl_server_send(server, &peers[live], "still-there", 11));
    ts_helper_kill(alive);
    ect__ctl_server_close(server);
}

/* Messages a consumer queued before it went away are not delivered as if
 * it were alive (they would create grants nothing releases): the first
 * read already sees its disconnect.  A new connection is heard again. */
static void
test_server_drops_what_a_dead_consumer_queued(void)
{
    ect_ctl_server_t *server;
    CHECK_OK(ect__ctl_server_open(lo, 0, NULL, &server));
    void *ctx = zmq_ctx_new();
    void *d = ts_raw_socket(ctx, ZMQ_DEALER);
    int forever = -1;
    CHECK(zmq_setsockopt(d, ZMQ_LINGER, &forever, sizeof(forever)) == 0);
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", (unsigned)ect__ctl_server_port(server));
    CHECK(zmq_connect(d, ep) == 0);
    for (int i = 0; i < 50; i++) {
        const void *frames[2] = {"", "queued"};
        size_t lens[2] = {0, 6};
        ts_raw_send(d, 2, frames, lens);
    }
    /* Closing flushes them (linger), then the connection goes away. */
    zmq_close(d);
    ts_sleep_ms(500);
    ect_ctl_peer_t peer;
    const void *payload;
    size_t len;
    CHECK_STATUS(ect__ctl_server_recv(server, 300, &peer, &payload, &len), ECT_ERR_TIMEOUT);
    ect_ctl_counters_t k;
    ect__ctl_server_counters(server, &k);
    CHECK_EQ_U64(k.from_dead, 50);
    CHECK_EQ_U64(k.received, 0);
    /* A new consumer (quite possibly on the same fd) is heard. */
    void *d2 = ts_raw_dealer(ctx, ect__ctl_server_port(server));
    const void *frames[2] = {"", "fresh"};
    size_t lens[2] = {0, 5};
    ts_raw_send(d2, 2, frames, lens);
    CHECK_OK(ect__ctl_server_recv(server, 5000, &peer, &payload, &len));
    CHECK(len == 5 && memcmp(payload, "fresh", 5) == 0);
    zmq_close(d2);
    zmq_ctx_term(ctx);
    ect__ctl_server_close(server);
}

/* ---- consumer notices dead producers (seed: poll_dead_*) -------------------------- */

/* seed: poll_dead_detects_disconnected_peer */
static void
check_producer_death_reported(int signo)
{
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    uint16_t port;
    pid_t child = spawn_echo_server(0, &port);
    round_trip(client, port, "before");
    kill(child, signo);
    CHECK(ts_client_wait_dead(client, lo, port));
    ts_helper_kill(child);
    /* Reported once per loss, not again on every reconnect attempt. */
    ts_sleep_ms(1500);
    char hosts[4][ECT_CTL_HOST_MAX + 1];
    uint16_t ports[4];
    CHECK_EQ_INT(ect__ctl_client_take_dead_peers(client, hosts, ports, 4), 0);
    /* A producer that is down takes no request: it fails at once. */
    uint64_t t0 = ect__now_ns();
    CHECK_STATUS(ect__ctl_client_send(client, lo, port, "after", 5), ECT_ERR_TRANSPORT);
    CHECK((ect__now_ns() - t0) / 1000000u < 1000);
    ect_ctl_counters_t c;
    ect__ctl_client_counters(client, &c);
    CHECK(c.disconnects >= 1);
    CHECK_EQ_U64(c.send_failed, 1);
    ect__ctl_client_destroy(client);
    CHECK_NO_LEAKS();
}

static void
test_client_reports_sigkilled_producer(void)
{
    check_producer_death_reported(SIGKILL);
}

static void
test_client_reports_stopped_producer_after_heartbeat_timeout(void)
{
    check_producer_death_reported(SIGSTOP);
}

/* seed: poll_dead_ignores_non_disconnect_events, poll_dead_skips_conn_without_monitor
 * -- connecting, handshakes and traffic are not deaths. */
static void
test_client_dead_list_ignores_connect_events_of_live_producers(void)
{
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    uint16_t p1, p2;
    pid_t c1 = spawn_echo_server(0, &p1), c2 = spawn_echo_server(0, &p2);
    round_trip(client, p1, "a");
    round_trip(client, p2, "b");
    ts_sleep_ms(300);
    char hosts[4][ECT_CTL_HOST_MAX + 1];
    uint16_t ports[4];
    CHECK_EQ_INT(ect__ctl_client_take_dead_peers(client, hosts, ports, 4), 0);
    /* One dies: only that one is reported. */
    ts_helper_kill(c2);
    CHECK(ts_client_wait_dead(client, lo, p2));
    CHECK_EQ_INT(ect__ctl_client_take_dead_peers(client, hosts, ports, 4), 0);
    round_trip(client, p1, "c");
    ts_helper_kill(c1);
    ect__ctl_client_destroy(client);
}

/* seed: mark_dead_does_not_close_socket -- a dead producer's DEALER stays
 * pooled, and reaches the producer again when it comes back. */
static void
test_client_dead_producer_stays_pooled_and_reconnects_when_back(void)
{
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    uint16_t port;
    pid_t child = spawn_echo_server(0, &port);
    round_trip(client, port, "first-life");
    ts_helper_kill(child);
    CHECK(ts_client_wait_dead(client, lo, port));

    uint16_t again;
    child = spawn_echo_server(port, &again);
    CHECK_EQ_INT(again, port);
    /* Sends fail at once until ZeroMQ has reconnected, then go through. */
    uint64_t deadline = ect__now_ns() + (uint64_t)TS_DEAD_WITHIN_S * 1000000000ull;
    ect_status_t st;
    while ((st = ect__ctl_client_send(client, lo, port, "second-life", 11)) != ECT_OK &&
           ect__now_ns() < deadline) {
        CHECK_STATUS(st, ECT_ERR_TRANSPORT);
        ts_sleep_ms(50);
    }
    CHECK_OK(st);
    char host[ECT_CTL_HOST_MAX + 1], buf[32];
    uint16_t from;
    CHECK_OK(ts_client_recv_str(client, 10000, host, &from, buf, sizeof(buf)));
    CHECK_STR_EQ(buf, "echo:second-life");
    ts_helper_kill(child);
    ect__ctl_client_destroy(client);
}

/* A producer that is down: the first send is queued (the connection may
 * just be slow) without blocking; the refusal discards it, counts it and
 * reports the producer; later sends fail at once. */
static void
test_client_send_to_down_producer_does_not_block_and_reports_it(void)
{
    int fd;
    uint16_t port = reserve_dead_port(&fd);
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    uint64_t t0 = ect__now_ns();
    CHECK_OK(ect__ctl_client_send(client, lo, port, "anyone?", 7));
    CHECK((ect__now_ns() - t0) / 1000000u < 1000);
    CHECK(ts_client_wait_dead(client, lo, port));
    ect_ctl_counters_t c;
    ect__ctl_client_counters(client, &c);
    CHECK_EQ_U64(c.send_failed, 1);
    CHECK_EQ_U64(c.sent, 0);
    t0 = ect__now_ns();
    CHECK_STATUS(ect__ctl_client_send(client, lo, port, "still?", 6), ECT_ERR_TRANSPORT);
    CHECK((ect__now_ns() - t0) / 1000000u < 1000);
    CHECK_CONTAINS(ect_last_error(), "unreachable");
    char host[ECT_CTL_HOST_MAX + 1];
    uint16_t from;
    const void *p;
    size_t len;
    CHECK_STATUS(ect__ctl_client_recv(client, 100, host, &from, &p, &len), ECT_ERR_TIMEOUT);
    ect__ctl_client_destroy(client);
    close(fd);
    CHECK_NO_LEAKS();
}

/* A producer that accepts TCP but never speaks ZeroMQ (hung): it is given
 * up after ECT_CTL_CONNECT_WAIT_MS, and recv wakes for that. */
static void
test_client_waiting_messages_expire_when_producer_never_handshakes(void)
{
    int fd;
    uint16_t port = reserve_dead_port(&fd);
    CHECK(listen(fd, 16) == 0); /* the kernel accepts; nobody answers */
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    CHECK_OK(ect__ctl_client_send(client, lo, port, "req", 3));
    char host[ECT_CTL_HOST_MAX + 1];
    uint16_t from;
    const void *p;
    size_t len;
    CHECK_STATUS(ect__ctl_client_recv(client, ECT_CTL_CONNECT_WAIT_MS + 500, host, &from, &p, &len),
                 ECT_ERR_TIMEOUT);
    /* Already expired inside that recv: reported without further waiting. */
    char hosts[2][ECT_CTL_HOST_MAX + 1];
    uint16_t ports[2];
    CHECK_EQ_INT(ect__ctl_client_take_dead_peers(client, hosts, ports, 2), 1);
    CHECK_EQ_INT(ports[0], port);
    ect_ctl_counters_t c;
    ect__ctl_client_counters(client, &c);
    CHECK_EQ_U64(c.send_failed, 1);
    CHECK_EQ_U64(c.sent, 0);
    ect__ctl_client_destroy(client);
    close(fd);
    CHECK_NO_LEAKS();
}

/* A producer name that does not resolve is reported like one that refuses. */
static void
test_client_reports_producer_whose_name_does_not_resolve(void)
{
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    const char *host = "no-such-producer.invalid";
    CHECK_OK(ect__ctl_client_send(client, host, 5601, "req", 3));
    CHECK(ts_client_wait_dead(client, host, 5601));
    ect_ctl_counters_t c;
    ect__ctl_client_counters(client, &c);
    CHECK_EQ_U64(c.send_failed, 1);
    ect__ctl_client_destroy(client);
}

/* seed: close_without_monitor -- closing a DEALER that never connected. */
static void
test_client_remove_of_never_connected_producer_drops_waiting_messages(void)
{
    int fd;
    uint16_t port = reserve_dead_port(&fd);
    ect_ctl_client_t *client;
    CHECK_OK(ect__ctl_client_create(NULL, &client));
    CHECK_OK(ect__ctl_client_send(client, "localhost", port, "a", 1));
    CHECK_OK(ect__ctl_client_remove(client, "localhost", port));
    ect_ctl_counters_t c;
    ect__ctl_client_counters(client, &c);
    CHECK_EQ_U64(c.send_failed, 1); /* queued in ZeroMQ, never delivered */
    CHECK_EQ_U64(c.sent, 0);
    CHECK_STATUS(ect__ctl_client_remove(client, "localhost", port), ECT_ERR_NOT_FOUND);
    ect__ctl_client_destroy(client);
    close(fd);
    CHECK_NO_LEAKS();
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_server_reports_sigkilled_consumer_by_identity),
    ECT_CASE(test_server_reports_stopped_consumer_after_heartbeat_timeout),
    ECT_CASE(test_server_keeps_live_consumers_off_the_dead_list),
    ECT_CASE(test_server_drops_what_a_dead_consumer_queued),
    ECT_CASE(test_client_reports_sigkilled_producer),
    ECT_CASE(test_client_reports_stopped_producer_after_heartbeat_timeout),
    ECT_CASE(test_client_dead_list_ignores_connect_events_of_live_producers),
    ECT_CASE(test_client_dead_producer_stays_pooled_and_reconnects_when_back),
    ECT_CASE(test_client_send_to_down_producer_does_not_block_and_reports_it),
    ECT_CASE(test_client_waiting_messages_expire_when_producer_never_handshakes),
    ECT_CASE(test_client_reports_producer_whose_name_does_not_resolve),
    ECT_CASE(test_client_remove_of_never_connected_producer_drops_waiting_messages),
};

int
main(int argc, char **argv)
{
    TS_CONTROL_TEST_MAIN(argc, argv, cases);
}
