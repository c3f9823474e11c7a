/*
 * What a peer may do with grants (issue 9, items 3, 5 and 6), played by raw
 * ZeroMQ DEALERs against a real producer instance, and by a consumer
 * instance against producers that cannot answer:
 *   - grants are capped per connection and in total; refusals are
 *     NACK_NOT_READY (retryable) and counted; a dead connection's grants
 *     come back;
 *   - a "done" or a request from a connection that does not hold a grant
 *     neither ends nor takes it;
 *   - a consumer whose producer is unreachable, or accepts connections but
 *     never speaks, gives up after the ack timeout (not the defer budget),
 *     however often the connection is reported lost.
 */
#include <netinet/in.h>
#include <sys/socket.h>
#include <zmq.h>

#include "support/hostile.h"
#include "support/p2p.h"
#include "proto/wire.h"

#define HIDDEN "64" /* bf16: 128-byte blocks */
#define BLOCK  128u

static void
dealer_send(struct ts_hostile_dealer *d, const ect__wire_buf_t *b)
{
    CHECK(zmq_send(d->sock, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(d->sock, b->data, b->len, 0) == (int)b->len);
}

/* One request (runs: ask for the entry's runs, as ectier consumers do);
 * the ack's status (-1: no reply within 2 s), and its block count and
 * descriptor runs when wanted. */
static int
request_ex(struct ts_hostile_dealer *d, const char *hash, const char *compat, const char *session,
           int runs, size_t *n_blocks_p, size_t *n_runs_p)
{
    ect_xfer_req_t req = {.mm_hash = hash,
                          .compatibility_hash = compat,
                          .session_id = session,
                          .connector_version = 1,
                          .has_connector_version = true,
                          .accepts_runs = runs != 0};
    ect__wire_buf_t b;
    ect__wire_buf_init(&b);
    CHECK_OK(ect__wire_encode_req(&req, &b));
    dealer_send(d, &b);
    ect__wire_buf_cleanup(&b);
    zmq_pollitem_t it = {d->sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 2000) <= 0)
        return -1;
    char frame[4];
    CHECK(zmq_recv(d->sock, frame, sizeof(frame), 0) == 0);
    uint8_t payload[65536];
    int n = zmq_recv(d->sock, payload, sizeof(payload), 0);
    CHECK(n > 0);
    ect_xfer_ack_t ack;
    CHECK_OK(ect__wire_decode_ack(payload, (size_t)n, &ack));
    int status = (int)ack.status;
    if (n_blocks_p != NULL)
        *n_blocks_p = ack.n_src_blocks;
    if (n_runs_p != NULL) {
        /* The descriptor (src/p2p/xport_internal.h): u32 n_runs at byte 24. */
        CHECK(ack.mem_descriptor_len >= 28);
        const uint8_t *q = ack.mem_descriptor + 24;
        *n_runs_p = (size_t)q[0] | (size_t)q[1] << 8 | (size_t)q[2] << 16 | (size_t)q[3] << 24;
    }
    ect__xfer_ack_cleanup(&ack);
    return status;
}

static int
request(struct ts_hostile_dealer *d, const char *hash, const char *compat, const char *session)
{
    return request_ex(d, hash, compat, session, 0, NULL, NULL);
}

static void
send_done(struct ts_hostile_dealer *d, const char *hash, const char *session)
{
    ect_xfer_done_t done = {.mm_hash = hash, .session_id = session};
    ect__wire_buf_t b;
    ect__wire_buf_init(&b);
    CHECK_OK(ect__wire_encode_done(&done, &b));
    dealer_send(d, &b);
    ect__wire_buf_cleanup(&b);
}

/* Wait until the producer's outstanding grants are `want`. */
static void
wait_grants(struct ect_cli_instance *p, uint64_t want, double within_s)
{
    uint64_t end = ts_now_ns() + (uint64_t)(within_s * 1e9);
    while (ts_p2p_metrics(p).grants_outstanding != want && ts_now_ns() < end)
        usleep(2000);
    CHECK_EQ_U64(ts_p2p_metrics(p).grants_outstanding, want);
}

/* A producer whose grants last until "done" (same-host only: no stream
 * ends them), with one entry announced; its compat hash and port. */
static void
producer_with_entry(struct ect_cli_instance *p, const char *extra, char hash[65], char compat[65],
                    unsigned *port_p)
{
    char cfg[256];
    snprintf(cfg, sizeof(cfg), "\"transport\": \"same_host\"%s%s", extra ? ", " : "",
             extra ? extra : "");
    ts_p2p_open_instance(p, "ec_producer", 1 << 20, HIDDEN, cfg, "m");
    ts_p2p_save_pattern(p, 0, 10, BLOCK, hash);
    ect_mm_feature_t f = {.identifier = hash, .mm_hash = hash, .num_tokens = 10};
    ect_request_t req = {.request_id = hash, .features = &f, .n_features = 1};
    char *params = NULL;
    CHECK_OK(ect_scheduler_request_finished(p->sched, &req, &params));
    const char *at = params != NULL ? strstr(params, "\"peer_port\":") : NULL;
    CHECK(at != NULL);
    *port_p = (unsigned)strtoul(at + 12, NULL, 10);
    ect_free(params);
    CHECK_OK(ect__compat_hash("0.11.0", "m", "torch.bfloat16", BLOCK, compat));
}

static void
test_grants_are_capped_per_connection_and_in_total(void)
{
    struct ect_cli_instance p;
    char hash[65], compat[65];
    unsigned port;
    producer_with_entry(&p, "\"max_grants\": 6, \"max_grants_per_peer\": 4", hash, compat, &port);
    struct ts_hostile_dealer a, b;
    ts_hostile_dealer_open(&a, port);
    ts_hostile_dealer_open(&b, port);
    char s[32];
    for (int i = 0; i < 4; i++) {
        snprintf(s, sizeof(s), "a%d", i);
        CHECK_EQ_INT(request(&a, hash, compat, s), ECT_XFER_OK);
    }
    /* The fifth from the same connection, with yet another session id. */
    CHECK_EQ_INT(request(&a, hash, compat, "a4"), ECT_XFER_NACK_NOT_READY);
    /* Another connection gets what is left of the total. */
    CHECK_EQ_INT(request(&b, hash, compat, "b0"), ECT_XFER_OK);
    CHECK_EQ_INT(request(&b, hash, compat, "b1"), ECT_XFER_OK);
    CHECK_EQ_INT(request(&b, hash, compat, "b2"), ECT_XFER_NACK_NOT_READY);
    ect_metrics_t m = ts_p2p_metrics(&p);
    CHECK_EQ_U64(m.grants_outstanding, 6);
    CHECK_EQ_U64(m.grants_refused, 2);
    CHECK_EQ_U64(m.cache.pins, 6); /* one pin per grant, nothing more */
    /* A repeated request replaces its own grant: not refused, not counted twice. */
    CHECK_EQ_INT(request(&a, hash, compat, "a0"), ECT_XFER_OK);
    CHECK_EQ_U64(ts_p2p_metrics(&p).grants_outstanding, 6);
    /* The first connection dies: its four grants come back, and the other
     * connection may have more. */
    ts_hostile_dealer_close(&a);
    wait_grants(&p, 2, 15);
    CHECK_EQ_INT(request(&b, hash, compat, "b2"), ECT_XFER_OK);
    CHECK_EQ_U64(ts_p2p_metrics(&p).cache.pins, 3);
    ts_hostile_dealer_close(&b);
    wait_grants(&p, 0, 15);
    CHECK_EQ_U64(ts_p2p_metrics(&p).cache.pins, 0);
    ect_cli_instance_close(&p);
}

static void
test_thousands_of_long_session_ids_hold_at_most_the_cap(void)
{
    struct ect_cli_instance p;
    char hash[65], compat[65];
    unsigned port;
    producer_with_entry(&p, "\"max_grants\": 64, \"max_grants_per_peer\": 64", hash, compat, &port);
    struct ts_hostile_dealer a;
    ts_hostile_dealer_open(&a, port);
    /* 4 KiB session ids, the longest the wire takes. */
    char *s = malloc(ECT_WIRE_MAX_STR + 1);
    memset(s, 'x', ECT_WIRE_MAX_STR);
    s[ECT_WIRE_MAX_STR] = '\0';
    unsigned ok = 0, refused = 0;
    for (unsigned i = 0; i < 1000; i++) {
        snprintf(s, 16, "%08u", i);
        s[8] = 'x';
        int st = request(&a, hash, compat, s);
        ok += st == ECT_XFER_OK;
        refused += st == ECT_XFER_NACK_NOT_READY;
    }
    CHECK_EQ_INT(ok, 64);
    CHECK_EQ_INT(refused, 1000 - 64);
    ect_metrics_t m = ts_p2p_metrics(&p);
    CHECK_EQ_U64(m.grants_outstanding, 64);
    CHECK_EQ_U64(m.grants_refused, 1000 - 64);
    free(s);
    ts_hostile_dealer_close(&a);
    wait_grants(&p, 0, 15);
    ect_cli_instance_close(&p);
}

static void
test_done_from_another_connection_does_not_end_the_grant(void)
{
    struct ect_cli_instance p;
    char hash[65], compat[65];
    unsigned port;
    producer_with_entry(&p, NULL, hash, compat, &port);
    struct ts_hostile_dealer holder, other;
    ts_hostile_dealer_open(&holder, port);
    ts_hostile_dealer_open(&other, port);
    CHECK_EQ_INT(request(&holder, hash, compat, "sess"), ECT_XFER_OK);
    /* The other connection knows the session id and sends "done". */
    send_done(&other, hash, "sess");
    uint64_t end = ts_now_ns() + 3ull * 1000000000ull;
    while (ts_p2p_metrics(&p).dones_rejected == 0 && ts_now_ns() < end)
        usleep(2000);
    ect_metrics_t m = ts_p2p_metrics(&p);
    CHECK_EQ_U64(m.dones_rejected, 1);
    CHECK_EQ_U64(m.grants_outstanding, 1);
    CHECK_EQ_U64(m.cache.pins, 1);
    /* Nor may it take the grant over by asking under the same name. */
    CHECK_EQ_INT(request(&other, hash, compat, "sess"), ECT_XFER_NACK_NOT_READY);
    CHECK_EQ_U64(ts_p2p_metrics(&p).grants_outstanding, 1);
    /* The holder's own "done" ends it. */
    send_done(&holder, hash, "sess");
    wait_grants(&p, 0, 3);
    CHECK_EQ_U64(ts_p2p_metrics(&p).cache.pins, 0);
    ts_hostile_dealer_close(&other);
    ts_hostile_dealer_close(&holder);
    ect_cli_instance_close(&p);
}

/* A seed consumer gets src_block_indices; an ectier consumer (ectier_runs)
 * gets the entry's runs in the descriptor and no indices. */
static void
test_ack_carries_runs_for_consumers_that_take_them(void)
{
    struct ect_cli_instance p;
    char hash[65], compat[65];
    unsigned port;
    producer_with_entry(&p, NULL, hash, compat, &port);
    struct ts_hostile_dealer d;
    ts_hostile_dealer_open(&d, port);
    size_t blocks = 99, runs = 99;
    CHECK_EQ_INT(request_ex(&d, hash, compat, "seed", 0, &blocks, &runs), ECT_XFER_OK);
    CHECK_EQ_U64(blocks, 10);
    CHECK_EQ_U64(runs, 0);
    CHECK_EQ_INT(request_ex(&d, hash, compat, "ectier", 1, &blocks, &runs), ECT_XFER_OK);
    CHECK_EQ_U64(blocks, 0);
    CHECK_EQ_U64(runs, 1);
    ts_hostile_dealer_close(&d);
    wait_grants(&p, 0, 15);
    ect_cli_instance_close(&p);
}

/* The consumer's wait for a producer that never answers: the ack timeout
 * (0.5 s), not the defer budget (30 s), whatever the connection does. */
static void
gives_up_after_the_ack_timeout(unsigned port)
{
    struct ect_cli_instance c;
    ts_p2p_open_instance(&c, "ec_consumer", 1 << 20, HIDDEN,
                         "\"consumer_ack_timeout_s\": 0.5, \"defer_budget_s\": 30", "m");
    char params[256];
    snprintf(params, sizeof(params),
             "{\"h\": {\"metadata\": {}, \"peer_host\": \"127.0.0.1\", \"peer_port\": %u, "
             "\"size_bytes\": %u}}",
             port, 10 * BLOCK);
    uint64_t t0 = ts_now_ns();
    CHECK_EQ_INT(ts_p2p_fetch(&c, "h", 10, params, 1, 40), TS_P2P_ENCODE_LOCALLY);
    double waited = (double)(ts_now_ns() - t0) / 1e9;
    CHECK_MSG(waited >= 0.45 && waited < 4.0, "gave up after %.2f s", waited);
    ect_metrics_t m = ts_p2p_metrics(&c);
    CHECK_EQ_U64(m.p2p_ack_timeouts, 1);
    CHECK_EQ_U64(m.p2p_fallbacks, 1);
    CHECK_EQ_U64(m.cache.entries, 0);
    ts_p2p_finish(&c, "h", 10);
    CHECK(!ect_scheduler_has_pending_push_work(c.sched));
    ect_cli_instance_close(&c);
}

static void
test_unreachable_producer_costs_the_ack_timeout_not_the_defer_budget(void)
{
    gives_up_after_the_ack_timeout(ts_free_loopback_port());
}

static void
test_producer_that_accepts_but_never_speaks_costs_the_ack_timeout(void)
{
    /* The kernel completes the TCP handshakes (backlog); nobody accepts,
     * so the ZeroMQ handshake never completes, as with a frozen producer. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 64) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    gives_up_after_the_ack_timeout(ntohs(a.sin_port));
    close(fd);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_grants_are_capped_per_connection_and_in_total),
    ECT_CASE(test_thousands_of_long_session_ids_hold_at_most_the_cap),
    ECT_CASE(test_done_from_another_connection_does_not_end_the_grant),
    ECT_CASE(test_ack_carries_runs_for_consumers_that_take_them),
    ECT_CASE(test_unreachable_producer_costs_the_ack_timeout_not_the_defer_budget),
    ECT_CASE(test_producer_that_accepts_but_never_speaks_costs_the_ack_timeout),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
