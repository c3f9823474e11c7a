/*
 * TCP reads in stripes and the stream's answer headers, on real components
 * (a producer process serving a real /dev/shm region, a consumer region in
 * the test process, loopback): a read split over up to four connections
 * lands every byte where it belongs; it is striped only where both sides
 * allow it and each stripe gets enough bytes; and a consumer asks for
 * aligned answers (stream versions 3 and 4, proto/stream.h) only where the
 * producer's offer has them, whole and striped.  The other reads are
 * test_xport.c's, reads at once test_xport_spread.c's.
 */
#include "common/alloc.h"
#include "support/xport.h"

#define BIG_HIDDEN 16384u /* 64 KiB blocks (16384 x 4 bytes) */

enum { STRIPED_NB = 256 }; /* 16 MiB of 64 KiB blocks */

/* Read `n` of the producer's blocks, every one its own run there (a
 * permutation), into three local runs, with a fresh client allowing
 * `stripes`; returns how many connections the producer accepted for it. */
static uint64_t
striped_read(struct ts_xport_consumer *c, struct ts_xport_producer *p, const uint8_t *agent,
             size_t agent_len, unsigned stripes, uint64_t n)
{
    ts_xport_consumer_new_client(c, ECT_TRANSPORT_TCP, stripes);
    uint64_t remote[STRIPED_NB];
    for (uint64_t i = 0; i < n; i++)
        remote[i] = (i * 37 + 11) % STRIPED_NB;
    uint64_t third = n / 3;
    ect_run_t runs[3] = {{2 * third, n - 2 * third}, {0, third}, {third, third}};
    ect_xport_server_counters_t before, after;
    uint64_t fin[2];
    ts_xport_producer_counters(p, &before, fin);
    ect_xport_read_t *r;
    CHECK_OK(ts_xport_read_start(c, p, 1, agent, agent_len, remote, n, runs, 3, &r, NULL));
    CHECK_EQ_INT(ts_xport_wait(c, r, 20), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c->client, r);
    ts_xport_check_landed(c, p, remote, n, runs, 3);
    ts_xport_producer_counters_after(p, before.streams_served + 1, &after, fin);
    CHECK_EQ_U64(after.streams_served, before.streams_served + 1);
    CHECK_EQ_U64(after.bytes_sent, before.bytes_sent + n * c->block_size);
    CHECK_EQ_U64(after.streams_denied + after.bad_requests + after.send_failures, 0);
    return after.connections - before.connections;
}

/* A read split over 2, 3 and 4 connections (even and uneven shares, each
 * stripe crossing local and remote runs) lands every byte where it
 * belongs and nothing else; each stripe has a connection of its own. */
TS_SHM_CASE(test_striped_tcp_reads_land_every_byte)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, STRIPED_NB, 92, 1, 0);
    CHECK_OK(p.status);
    ect_xport_offer_t offer;
    CHECK_OK(ect__xport_offer_decode(p.agent, p.agent_len, &offer));
    CHECK_EQ_INT(offer.tcp_stripes, ECT_STREAM_MAX_STRIPES);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, STRIPED_NB, ECT_TRANSPORT_TCP, NULL);
    /* Uneven first: the last three blocks stay untouched for its check. */
    CHECK_EQ_U64(striped_read(&c, &p, p.agent, p.agent_len, 4, STRIPED_NB - 3), 4);
    CHECK_EQ_U64(striped_read(&c, &p, p.agent, p.agent_len, 2, STRIPED_NB), 2);
    CHECK_EQ_U64(striped_read(&c, &p, p.agent, p.agent_len, 3, STRIPED_NB), 3);
    CHECK_EQ_U64(striped_read(&c, &p, p.agent, p.agent_len, 4, STRIPED_NB), 4);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* Not striped: a read too small for two stripes of at least
 * ECT_XPORT_STRIPE_MIN_BYTES, a client allowing one stripe, and an offer
 * without stripes (an older producer). */
TS_SHM_CASE(test_tcp_reads_are_striped_only_where_both_sides_allow_and_it_pays)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, STRIPED_NB, 93, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, STRIPED_NB, ECT_TRANSPORT_TCP, NULL);
    uint64_t min_blocks = ECT_XPORT_STRIPE_MIN_BYTES / (BIG_HIDDEN * 4u);
    CHECK_EQ_U64(striped_read(&c, &p, p.agent, p.agent_len, 4, 2 * min_blocks - 1), 1);
    CHECK_EQ_U64(striped_read(&c, &p, p.agent, p.agent_len, 4, 2 * min_blocks), 2);
    CHECK_EQ_U64(striped_read(&c, &p, p.agent, p.agent_len, 1, STRIPED_NB), 1);
    ect_xport_offer_t offer;
    CHECK_OK(ect__xport_offer_decode(p.agent, p.agent_len, &offer));
    offer.tcp_stripes = 0;
    uint8_t *old_agent;
    size_t old_len;
    CHECK_OK(ect__xport_offer_encode(&offer, &old_agent, &old_len));
    CHECK(old_len < p.agent_len);
    CHECK_EQ_U64(striped_read(&c, &p, old_agent, old_len, 4, STRIPED_NB), 1);
    ect__free(old_agent);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* A consumer asks for aligned answers (stream versions 3 and 4) where the
 * offer says the producer gives them, and for the 16-byte header of
 * versions 1 and 2 where it does not (a producer from before them refuses
 * the newer versions); the producer answers each as asked, whole and
 * striped, and every byte lands. */
TS_SHM_CASE(test_consumer_asks_for_aligned_answers_only_where_offered)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, STRIPED_NB, 94, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, STRIPED_NB, ECT_TRANSPORT_TCP, NULL);
    ect_xport_offer_t offer;
    CHECK_OK(ect__xport_offer_decode(p.agent, p.agent_len, &offer));
    CHECK_EQ_INT(offer.tcp_aligned, 1);
    offer.tcp_aligned = 0;
    uint8_t *old_agent;
    size_t old_len;
    CHECK_OK(ect__xport_offer_encode(&offer, &old_agent, &old_len));
    CHECK_EQ_U64(old_len, p.agent_len - 12);
    /* striped_read checks that every byte landed (and returns the
     * connections); the producer counts the streams it sent after a
     * 16-byte header, a stripe as one. */
    const struct {
        int aligned;
        unsigned stripes;
        uint64_t unaligned_after;
    } reads[] = {{1, 1, 0}, {0, 1, 1}, {1, 4, 1}, {0, 4, 5}};
    for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
        CHECK_EQ_U64(striped_read(&c, &p, reads[i].aligned ? p.agent : old_agent,
                                  reads[i].aligned ? p.agent_len : old_len, reads[i].stripes,
                                  STRIPED_NB),
                     reads[i].stripes);
        ect_xport_server_counters_t sk;
        uint64_t fin[2];
        ts_xport_producer_counters_after(&p, i + 1, &sk, fin);
        CHECK_EQ_U64(sk.streams_served, i + 1);
        CHECK_EQ_U64(sk.streams_unaligned, reads[i].unaligned_after);
    }
    ect__free(old_agent);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_striped_tcp_reads_land_every_byte),
    ECT_CASE(test_tcp_reads_are_striped_only_where_both_sides_allow_and_it_pays),
    ECT_CASE(test_consumer_asks_for_aligned_answers_only_where_offered),
};

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], TS_XPORT_PRODUCER_ARG) == 0)
        return ts_xport_producer_main(argc, argv);
    return ECT_TEST_MAIN(argc, argv, cases);
}
