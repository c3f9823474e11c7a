/*
 * Reads at once on the TCP stream, on real components (a producer process
 * serving a real /dev/shm region, a consumer region in the test process,
 * loopback): the producer deals its connections to its sending threads and
 * moves a request that finds its thread busy to an idle one; a consumer
 * receives reads in flight together on several threads.  The stalled
 * stream that keeps a thread busy is a peer of our own that does not read.
 */
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "support/xport.h"

#define NB         64
#define BIG_HIDDEN 16384u /* 64 KiB blocks */

/* A connection of our own to p's stream, with a receive buffer of 64 KiB
 * set before the handshake: a peer that does not read holds its sender. */
static int
stream_connect(const struct ts_xport_producer *p)
{
    ect_xport_offer_t offer;
    CHECK_OK(ect__xport_offer_decode(p->agent, p->agent_len, &offer));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rcvbuf = 64 << 10;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons(offer.tcp_port)};
    CHECK(fd >= 0);
    CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) == 0);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    return fd;
}

/* The stream server deals new connections to its threads in turn, and an
 * unstriped request that finds its thread sending already moves to an idle
 * one.  A peer of our own takes the first connection (thread 0) and
 * requests 64 MiB it does not read, so that thread stays busy; after one
 * idle connection for each other thread, the client's connection is
 * thread 0's again, and its read moves, lands whole, and its next read on
 * the same (now idle) thread does not move. */
TS_SHM_CASE(test_a_request_finding_its_sender_busy_moves_to_an_idle_one)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    enum { BIG = 1024 }; /* 64 MiB */
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, BIG, 93, 1, 0);
    CHECK_OK(p.status);
    uint64_t *remote = malloc(BIG * sizeof(*remote));
    CHECK(remote != NULL);
    for (uint64_t i = 0; i < BIG; i++)
        remote[i] = i;
    char hash[64];
    uint8_t desc_blob[ECT_XPORT_DESC_LEN];
    ts_xport_grant(&p, remote, BIG, hash, desc_blob);
    ect_xport_desc_t desc;
    CHECK_OK(ect__xport_desc_decode(desc_blob, sizeof(desc_blob), &desc));
    ect_stream_req_t req = {.session_id = TS_XPORT_SESSION,
                            .session_len = strlen(TS_XPORT_SESSION),
                            .mm_hash = hash,
                            .hash_len = strlen(hash),
                            .expect_bytes = (uint64_t)BIG * BIG_HIDDEN * 4};
    memcpy(req.token, desc.token, sizeof(req.token));
    uint8_t buf[ECT_STREAM_REQ_MAX];
    size_t len = 0;
    CHECK_OK(ect__stream_req_encode(&req, buf, sizeof(buf), &len));
    int busy = stream_connect(&p);
    CHECK(send(busy, buf, len, MSG_NOSIGNAL) == (ssize_t)len);
    struct pollfd pfd = {.fd = busy, .events = POLLIN};
    CHECK_MSG(poll(&pfd, 1, 5000) == 1, "the 64 MiB stream did not start");
    int idle[ECT_STREAM_MAX_STRIPES - 1];
    for (size_t i = 0; i < ECT_STREAM_MAX_STRIPES - 1; i++)
        idle[i] = stream_connect(&p);

    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, BIG, ECT_TRANSPORT_TCP, NULL);
    ts_xport_consumer_new_client(&c, ECT_TRANSPORT_TCP, 1);
    const uint64_t one[] = {5, 6, 7};
    const ect_run_t into = {100, 3};
    for (int round = 0; round < 2; round++) {
        ect_xport_read_t *r;
        CHECK_OK(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, one, 3, &into, 1, &r, NULL));
        CHECK_EQ_INT(ts_xport_wait(&c, r, 20), ECT_XPORT_READ_DONE);
        ect__xport_read_release(c.client, r);
        ts_xport_check_landed(&c, &p, one, 3, &into, 1);
        ect_xport_server_counters_t sk;
        uint64_t fin[2];
        ts_xport_producer_counters_after(&p, (uint64_t)round + 1, &sk, fin);
        CHECK_EQ_U64(sk.streams_served, round + 1);
        CHECK_EQ_U64(sk.streams_moved, 1);
    }

    /* The busy peer goes: its grant is finished as cut. */
    close(busy);
    for (size_t i = 0; i < ECT_STREAM_MAX_STRIPES - 1; i++)
        close(idle[i]);
    uint64_t deadline = ect__now_ns() + 5ull * 1000 * 1000 * 1000;
    ect_xport_server_counters_t sk;
    uint64_t fin[2];
    do
        ts_xport_producer_counters(&p, &sk, fin);
    while (fin[1] == 0 && ect__now_ns() < deadline);
    CHECK_EQ_U64(fin[1], 1);
    free(remote);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* A client that may use four connections receives unstriped reads in
 * flight together on as many threads (one stream client each, the one with
 * the fewest reads), and a lone read on the first. */
TS_SHM_CASE(test_unstriped_reads_at_once_are_received_on_several_threads)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 94, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_TCP, NULL);
    ts_xport_consumer_new_client(&c, ECT_TRANSPORT_TCP, ECT_STREAM_MAX_STRIPES);
    /* Read k: remote[3k .. 3k + 3) into into[k]. */
    static const uint64_t remote[9] = {0, 1, 2, 9, 8, 7, 30, 31, 32};
    static const ect_run_t into[3] = {{10, 3}, {20, 3}, {40, 3}};
    ect_xport_read_t *r[3];
    for (int k = 0; k < 3; k++)
        CHECK_OK(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, &remote[3 * k], 3, &into[k],
                                     1, &r[k], NULL));
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(ts_xport_wait(&c, r[k], 20), ECT_XPORT_READ_DONE);
        ect__xport_read_release(c.client, r[k]);
    }
    /* Named when made, whether or not they have run yet (the caller may
     * have received a small read itself: read_start makes what progress it
     * can). */
    CHECK_EQ_U64(ts_threads_named("ect-stream-rx"), 3);
    ts_xport_check_landed(&c, &p, remote, 9, into, 3);
    /* One at a time: always the first stream client, no new thread. */
    for (int round = 0; round < 3; round++) {
        CHECK_OK(
            ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, 3, into, 1, &r[0], NULL));
        CHECK_EQ_INT(ts_xport_wait(&c, r[0], 20), ECT_XPORT_READ_DONE);
        ect__xport_read_release(c.client, r[0]);
    }
    CHECK_EQ_U64(ts_threads_named("ect-stream-rx"), 3);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_a_request_finding_its_sender_busy_moves_to_an_idle_one),
    ECT_CASE(test_unstriped_reads_at_once_are_received_on_several_threads),
};

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], TS_XPORT_PRODUCER_ARG) == 0)
        return ts_xport_producer_main(argc, argv);
    return ECT_TEST_MAIN(argc, argv, cases);
}
