/*
 * A hostile peer against the striped data stream of a real `ectier
 * producer` process (issue 9; version 2 requests; the other attacks are in
 * test_hostile_peer.c, the attacker's fixtures in support/hostile.h).  The
 * attacker speaks the control plane and the data stream with its own code
 * (msgpack-c, raw sockets), never through ectier's consumer.  The promises
 * under test:
 *
 *   - each stripe of a grant once, exactly its share of the entry's bytes;
 *     a request that disagrees with its group (a stripe taken, other
 *     stripes, another size, a forged token) is refused and leaves the
 *     group as it was; malformed stripe fields cut the connection;
 *   - a group missing stripes gives the grant back at its deadline, one
 *     whose stripe the attacker cut gives it back as soon as no stripe is
 *     being sent, and takes no stripe more;
 *   - after every attack the producer still serves every entry intact to a
 *     legitimate `ectier consumer --verify-pattern`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "pattern.h"
#include "proto/wire.h"
#include "support/hostile.h"
#include "support/util.h"

/* ---- the striped data stream ---------------------------------------------------------- */

/* Stripe `stripe` of `stripes` of a payload of `blocks` blocks, as
 * proto/stream.h words it for the shares this file asks for: equal shares,
 * in entry order.  The byte offset of the share, and its length. */
static uint64_t
share_of(uint64_t blocks, uint32_t stripe, uint32_t stripes, uint64_t *len_p)
{
    CHECK(blocks % stripes == 0);
    *len_p = blocks / stripes * TS_HOSTILE_BLOCK;
    return stripe * *len_p;
}

/* OK with exactly the share's bytes of the entry (want holds its pattern),
 * and nothing after them. */
static void
check_share(const struct ts_hostile_answer *a, const uint8_t *buf, const uint8_t *want,
            uint64_t blocks, uint32_t stripe, uint32_t stripes)
{
    uint64_t len, off = share_of(blocks, stripe, stripes, &len);
    CHECK_EQ_U64(a->status, 0);
    CHECK_EQ_U64(a->announced, len);
    CHECK_EQ_U64(a->got, 16 + len);
    CHECK_MSG(memcmp(buf + 16, want + off, len) == 0,
              "stripe %u of %u is not the entry's bytes [%llu, %llu)", stripe, stripes,
              (unsigned long long)off, (unsigned long long)(off + len));
}

static void
test_striped_stream_serves_each_stripe_once_and_refuses_what_disagrees(void)
{
    /* A group deadline (read_timeout_s) and a pin lease far longer than
     * this case: nothing here ends a grant but its stripes. */
    struct ts_hostile_producer p;
    ts_hostile_producer_spawn_with(&p, 4, 16,
                                   "\"read_timeout_s\": 60, \"producer_pin_lease_s\": 600");
    const uint64_t size = 16 * TS_HOSTILE_BLOCK, half = 8 * TS_HOSTILE_BLOCK;
    struct ts_hostile_dealer d;
    ts_hostile_dealer_open(&d, p.ctl_port);
    struct ts_hostile_grant g0 = ts_hostile_ask(d.sock, p.hashes[0], "atk");
    CHECK_EQ_INT(g0.status, ECT_XFER_OK);
    CHECK_EQ_U64(g0.n_blocks, 16);
    CHECK(g0.data_port != 0);
    const unsigned port = g0.data_port;
    const char *h0 = p.hashes[0];
    static uint8_t buf[1 << 20], want[16 * TS_HOSTILE_BLOCK];
    ect_pattern_fill(h0, want, size);
    unsigned denied = 0;
    uint64_t bytes = 0;

    /* Stripe 0 of 2 claims the grant: exactly the entry's first half. */
    struct ts_hostile_answer a =
        ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 0, 2, buf, sizeof(buf));
    check_share(&a, buf, want, 16, 0, 2);
    bytes += half;
    /* The group keeps the grant (and its pin) for the stripe still to come. */
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_pins"), 1);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_grants_outstanding"), 1);

    /* Disagreeing with the group: the stripe already taken, another stripe
     * count, another size (the whole grant's plus a block, the stripe's
     * own), a forged token, another session, the whole grant unstriped. */
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 0, 2, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 1, 3, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size + TS_HOSTILE_BLOCK, 1, 2, buf,
                              sizeof(buf));
    ts_hostile_check_refused(&a, 2), denied++;
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, half, 1, 2, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 2), denied++;
    uint8_t forged[TS_HOSTILE_TOKEN_LEN];
    memcpy(forged, g0.token, TS_HOSTILE_TOKEN_LEN);
    forged[TS_HOSTILE_TOKEN_LEN - 1] ^= 0x01;
    a = ts_hostile_stripe_ask(port, "atk", h0, forged, size, 1, 2, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;
    a = ts_hostile_stripe_ask(port, "other", h0, g0.token, size, 1, 2, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;
    a = ts_hostile_stream_ask(port, "atk", h0, g0.token, size, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_pins"), 1);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_served_total"), 0);

    /* None of that touched the group: stripe 1 of 2 gets exactly the second
     * half, and the grant is served, once, and its pin released. */
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 1, 2, buf, sizeof(buf));
    check_share(&a, buf, want, 16, 1, 2);
    bytes += half;
    CHECK_EQ_U64((uint64_t)ts_hostile_metric_await(&p, "ectier_pins", 0, 20), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_served_total"), 1);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_grants_outstanding"), 0);

    /* Used up: any stripe of it, in any grouping, and the whole grant. */
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 0, 2, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 1, 2, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 2, 4, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;
    a = ts_hostile_stream_ask(port, "atk", h0, g0.token, size, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1), denied++;

    /* Malformed stripe fields, with a live grant's own token: stripes 1, 0
     * and 5, a stripe equal to (or past) its stripes.  The connection is cut
     * without a byte and the grant is not touched. */
    struct ts_hostile_grant g3 = ts_hostile_ask(d.sock, p.hashes[3], "atk");
    CHECK_EQ_INT(g3.status, ECT_XFER_OK);
    const char *h3 = p.hashes[3];
    static const uint32_t malformed[][2] = {{0, 1}, {0, 0}, {0, 5}, {2, 2}, {4, 4}, {7, 4}};
    unsigned bad = 0;
    for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
        uint8_t req[8300];
        size_t len = ts_hostile_stream_request_v(req, 2, "atk", h3, g3.token, size, malformed[i][0],
                                                 malformed[i][1]);
        a = ts_hostile_stream_raw(port, req, len, buf, sizeof(buf), 3000);
        CHECK_MSG(a.got == 0 && a.closed, "stripe %u of %u: %zu bytes back, closed %d",
                  malformed[i][0], malformed[i][1], a.got, a.closed);
        bad++;
    }
    CHECK(ts_hostile_producer_alive(&p));
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_bad_requests_total"), bad);
    /* A grant pins its entry from the ack on: g3's pin, nothing else. */
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_grants_outstanding"), 1);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_pins"), 1);
    /* Its four stripes (the most there may be), each once, last to first. */
    ect_pattern_fill(h3, want, size);
    for (uint32_t s = 4; s-- > 0;) {
        a = ts_hostile_stripe_ask(port, "atk", h3, g3.token, size, s, 4, buf, sizeof(buf));
        check_share(&a, buf, want, 16, s, 4);
        bytes += 4 * TS_HOSTILE_BLOCK;
    }
    CHECK_EQ_U64((uint64_t)ts_hostile_metric_await(&p, "ectier_pins", 0, 20), 0);

    CHECK(ts_hostile_producer_alive(&p));
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_served_total"), 2);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_denied_total"), denied);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_bad_requests_total"), bad);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_timeouts_total"), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_send_failures_total"), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_bytes_total"), bytes);
    CHECK_EQ_U64(bytes, 2 * size);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_grants_outstanding"), 0);
    ts_hostile_dealer_close(&d);
    ts_hostile_legit_consumer_verifies_all(&p);
    ts_hostile_producer_stop(&p);
}

static void
test_striped_stream_releases_an_incomplete_group_at_its_deadline(void)
{
    /* The group's deadline is the producer's send timeout, read_timeout_s,
     * counted from the claim: 3 s here.  The pin lease is far longer, so
     * only the deadline can release the grant. */
    const double deadline_s = 3;
    struct ts_hostile_producer p;
    ts_hostile_producer_spawn_with(&p, 2, 15,
                                   "\"read_timeout_s\": 3, \"producer_pin_lease_s\": 600");
    const uint64_t size = 15 * TS_HOSTILE_BLOCK;
    struct ts_hostile_dealer d;
    ts_hostile_dealer_open(&d, p.ctl_port);
    struct ts_hostile_grant g0 = ts_hostile_ask(d.sock, p.hashes[0], "atk");
    CHECK_EQ_INT(g0.status, ECT_XFER_OK);
    const unsigned port = g0.data_port;
    const char *h0 = p.hashes[0];
    static uint8_t buf[1 << 20], want[15 * TS_HOSTILE_BLOCK];
    ect_pattern_fill(h0, want, size);

    /* Stripe 0 of 3, read in full; stripes 1 and 2 never come. */
    uint64_t t0 = ts_now_ns();
    struct ts_hostile_answer a =
        ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 0, 3, buf, sizeof(buf));
    check_share(&a, buf, want, 15, 0, 3);
    double pins = ts_hostile_metric(&p, "ectier_pins");
    double early = (double)(ts_now_ns() - t0) / 1e9;
    if (early < deadline_s) /* read before the deadline could have passed */
        CHECK_MSG(pins == 1, "the grant's pin was gone %.1f s after the claim (%.0f pins)", early,
                  pins);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_served_total"), 0);

    /* The deadline gives up on them: the grant is released, and not before. */
    CHECK_EQ_U64((uint64_t)ts_hostile_metric_await(&p, "ectier_pins", 0, 30), 0);
    double released = (double)(ts_now_ns() - t0) / 1e9;
    CHECK_MSG(released >= deadline_s, "the pin was released %.2f s after the claim", released);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_timeouts_total"), 1);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_grants_outstanding"), 0);

    /* Late stripes find nothing. */
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 1, 3, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1);
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 2, 3, buf, sizeof(buf));
    ts_hostile_check_refused(&a, 1);

    CHECK(ts_hostile_producer_alive(&p));
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_served_total"), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_denied_total"), 2);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_bad_requests_total"), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_timeouts_total"), 1);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_send_failures_total"), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_bytes_total"),
                 5 * TS_HOSTILE_BLOCK);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_pins"), 0);
    ts_hostile_dealer_close(&d);
    ts_hostile_legit_consumer_verifies_all(&p);
    ts_hostile_producer_stop(&p);
}

/* The most a TCP sender's buffer grows to here (tcp_wmem's maximum), taken
 * as at most 32 MiB: against a 64 KiB receive window it never grows that
 * far, and the entries stay of a size any test machine holds. */
static uint64_t
tcp_wmem_max(void)
{
    unsigned long long lo, def, hi = 4u << 20;
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
    if (f != NULL) {
        if (fscanf(f, "%llu %llu %llu", &lo, &def, &hi) != 3)
            hi = 4u << 20;
        fclose(f);
    }
    return hi < (32u << 20) ? hi : (32u << 20);
}

static void
test_striped_stream_cut_mid_payload_fails_its_group_at_once(void)
{
    /* Each stripe (of 2 or 3) is more than twice what the producer's send
     * buffer can grow to, and the attacker's receive buffer is 64 KiB: a
     * stripe the attacker stops reading is still being sent, for sure, when
     * it hangs up.  A 60 s group deadline and a longer pin lease: a prompt
     * release can only come from the failure. */
    const int rcvbuf = 64 << 10;
    uint64_t stripe_min = 2 * tcp_wmem_max() + (1u << 20);
    uint64_t tokens = (3 * stripe_min / TS_HOSTILE_BLOCK + 6) / 6 * 6;
    const uint64_t size = tokens * TS_HOSTILE_BLOCK;
    struct ts_hostile_producer p;
    ts_hostile_producer_spawn_with(&p, 2, tokens,
                                   "\"read_timeout_s\": 60, \"producer_pin_lease_s\": 600");
    struct ts_hostile_dealer d;
    ts_hostile_dealer_open(&d, p.ctl_port);
    struct ts_hostile_grant g0 = ts_hostile_ask(d.sock, p.hashes[0], "atk");
    CHECK_EQ_INT(g0.status, ECT_XFER_OK);
    const unsigned port = g0.data_port;
    const char *h0 = p.hashes[0], *h1 = p.hashes[1];
    uint8_t *want = malloc(size), *buf = malloc(size + 16);
    CHECK(want != NULL && buf != NULL);
    const size_t peek = 64 << 10;
    unsigned denied = 0;

    /* Entry 0: stripe 0 of 2, its header and first 64 KiB read (the
     * entry's first bytes), then the attacker hangs up. */
    ect_pattern_fill(h0, want, size);
    uint64_t len0;
    share_of(tokens, 0, 2, &len0);
    int fd = ts_hostile_stripe_send(port, rcvbuf, "atk", h0, g0.token, size, 0, 2);
    int eof;
    CHECK_EQ_U64(ts_hostile_read_exact(fd, buf, 16 + peek, 10000, &eof), 16 + peek);
    CHECK(memcmp(buf, "ECTS", 4) == 0);
    CHECK_EQ_U64(ts_hostile_get_u32(buf + 4), 0);
    CHECK_EQ_U64(ts_hostile_get_u64(buf + 8), len0);
    CHECK(memcmp(buf + 16, want, peek) == 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_pins"), 1);
    close(fd); /* unread bytes: a reset */
    uint64_t t_cut = ts_now_ns();
    CHECK_EQ_U64(
        (uint64_t)ts_hostile_metric_await(&p, "ectier_data_stream_send_failures_total", 1, 30), 1);
    /* The group failed: stripe 1 may not join it (nor stripe 0 again). */
    struct ts_hostile_answer a =
        ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 1, 2, buf, size + 16);
    ts_hostile_check_refused(&a, 1), denied++;
    a = ts_hostile_stripe_ask(port, "atk", h0, g0.token, size, 0, 2, buf, size + 16);
    ts_hostile_check_refused(&a, 1), denied++;
    /* No stripe is being sent: the grant goes at once, not at the deadline. */
    CHECK_EQ_U64((uint64_t)ts_hostile_metric_await(&p, "ectier_pins", 0, 30), 0);
    double after = (double)(ts_now_ns() - t_cut) / 1e9;
    CHECK_MSG(after < 30, "the pin of a failed group was released %.1f s after the cut", after);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_grants_outstanding"), 0);

    /* Entry 1: stripes 0 and 1 of 3 both under way, stripe 0 cut.  While
     * stripe 1 is still being sent the failed group takes no stripe 2 and
     * keeps the pin; once stripe 1 is sent, in full, the grant goes, not
     * counted as served. */
    struct ts_hostile_grant g1 = ts_hostile_ask(d.sock, h1, "atk");
    CHECK_EQ_INT(g1.status, ECT_XFER_OK);
    ect_pattern_fill(h1, want, size);
    int fd0 = ts_hostile_stripe_send(port, rcvbuf, "atk", h1, g1.token, size, 0, 3);
    CHECK_EQ_U64(ts_hostile_read_exact(fd0, buf, 16 + peek, 10000, &eof), 16 + peek);
    CHECK_EQ_U64(ts_hostile_get_u32(buf + 4), 0);
    CHECK(memcmp(buf + 16, want, peek) == 0);
    int fd1 = ts_hostile_stripe_send(port, rcvbuf, "atk", h1, g1.token, size, 1, 3);
    uint64_t len1;
    share_of(tokens, 1, 3, &len1);
    CHECK_EQ_U64(ts_hostile_read_exact(fd1, buf, 16, 10000, &eof), 16);
    CHECK_EQ_U64(ts_hostile_get_u32(buf + 4), 0);
    CHECK_EQ_U64(ts_hostile_get_u64(buf + 8), len1);
    close(fd0);
    t_cut = ts_now_ns();
    CHECK_EQ_U64(
        (uint64_t)ts_hostile_metric_await(&p, "ectier_data_stream_send_failures_total", 2, 30), 2);
    a = ts_hostile_stripe_ask(port, "atk", h1, g1.token, size, 2, 3, buf, size + 16);
    ts_hostile_check_refused(&a, 1), denied++;
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_pins"), 1);
    /* The rest of stripe 1's answer (its header came before). */
    a = (struct ts_hostile_answer){.status = 0, .announced = len1};
    a.got = 16 + ts_hostile_read_exact(fd1, buf + 16, (size_t)len1, 10000, &a.closed);
    close(fd1);
    check_share(&a, buf, want, tokens, 1, 3);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric_await(&p, "ectier_pins", 0, 30), 0);
    after = (double)(ts_now_ns() - t_cut) / 1e9;
    CHECK_MSG(after < 30, "the pin of a failed group was released %.1f s after the cut", after);

    CHECK(ts_hostile_producer_alive(&p));
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_served_total"), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_streams_denied_total"), denied);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_bad_requests_total"), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_timeouts_total"), 0);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_send_failures_total"), 2);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_data_stream_bytes_total"), len1);
    CHECK_EQ_U64((uint64_t)ts_hostile_metric(&p, "ectier_grants_outstanding"), 0);
    free(want);
    free(buf);
    ts_hostile_dealer_close(&d);
    ts_hostile_legit_consumer_verifies_all(&p);
    ts_hostile_producer_stop(&p);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_striped_stream_serves_each_stripe_once_and_refuses_what_disagrees),
    ECT_CASE(test_striped_stream_releases_an_incomplete_group_at_its_deadline),
    ECT_CASE(test_striped_stream_cut_mid_payload_fails_its_group_at_once),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
