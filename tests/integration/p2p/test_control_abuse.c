/*
 * A producer's control plane against clients that abuse it (issue 9):
 * badly framed messages, each kind from its own raw ZeroMQ socket, are
 * dropped and exported as a metric.  Every socket the case opens is its own.
 */
/* First: <sys/socket.h> defines PF_LOCAL, a name the fixture's outcome enum
 * also uses. */
#include "p2p_fixture.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <zmq.h>

#include "p2p/control.h"

#define HIDDEN "64" /* bf16: 128-byte blocks */
#define BLOCK  128u

/* ---- framing drops as a metric (item 8) ------------------------------------- */

/* A DEALER of its own connected to the producer at port. */
static void *
raw_dealer(void *ctx, unsigned port)
{
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    CHECK(d != NULL);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", port);
    CHECK(zmq_connect(d, ep) == 0);
    return d;
}

static uint64_t
framing_dropped(struct ect_cli_instance *p)
{
    return pf_metrics(p).control_framing_dropped;
}

/* Wait until the framing drops reach want (the producer reads on its own
 * thread). */
static void
wait_framing_dropped(struct ect_cli_instance *p, uint64_t want)
{
    uint64_t end = pf_now_ns() + 5000000000ull;
    while (framing_dropped(p) < want && pf_now_ns() < end)
        usleep(1000);
    CHECK_EQ_U64(framing_dropped(p), want);
}

/* pf_announce, out of line: inlined next to pf_params_port, GCC 12 takes
 * the announcement for a pointer into pf_announce's frame
 * (-Wdangling-pointer). */
static __attribute__((noinline)) char *
announce(struct ect_cli_instance *p, const char *hash, uint64_t tokens)
{
    return pf_announce(p, hash, tokens);
}

static void
test_each_kind_of_bad_framing_is_dropped_and_counted_in_the_metrics(void)
{
    struct ect_cli_instance p;
    pf_open_instance(&p, "ec_producer", 1 << 20, HIDDEN, NULL, "m");
    char hash[65];
    pf_save_pattern(&p, 0, 4, BLOCK, hash);
    char *params = announce(&p, hash, 4);
    unsigned port = pf_params_port(params);
    CHECK_EQ_U64(framing_dropped(&p), 0);

    void *ctx = zmq_ctx_new();
    /* No delimiter: [payload]. */
    void *d = raw_dealer(ctx, port);
    CHECK(zmq_send(d, "payload", 7, 0) == 7);
    wait_framing_dropped(&p, 1);
    zmq_close(d);
    /* No payload: [""]. */
    d = raw_dealer(ctx, port);
    CHECK(zmq_send(d, "", 0, 0) == 0);
    wait_framing_dropped(&p, 2);
    zmq_close(d);
    /* An extra frame: ["", payload, more]. */
    d = raw_dealer(ctx, port);
    CHECK(zmq_send(d, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(d, "payload", 7, ZMQ_SNDMORE) == 7);
    CHECK(zmq_send(d, "more", 4, 0) == 4);
    wait_framing_dropped(&p, 3);
    zmq_close(d);
    /* A non-empty delimiter: ["x", payload]. */
    d = raw_dealer(ctx, port);
    CHECK(zmq_send(d, "x", 1, ZMQ_SNDMORE) == 1);
    CHECK(zmq_send(d, "payload", 7, 0) == 7);
    wait_framing_dropped(&p, 4);
    zmq_close(d);
    /* An oversized payload (read, since it is within the hard frame cap). */
    size_t big = ECT_CTL_MAX_MESSAGE + 4096;
    char *buf = calloc(1, big);
    CHECK(buf != NULL);
    d = raw_dealer(ctx, port);
    CHECK(zmq_send(d, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(d, buf, big, 0) == (int)big);
    wait_framing_dropped(&p, 5);
    zmq_close(d);
    free(buf);
    /* Well framed but undecodable bytes are another counter. */
    d = raw_dealer(ctx, port);
    CHECK(zmq_send(d, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(d, "\xc1garbage", 8, 0) == 8);
    uint64_t end = pf_now_ns() + 5000000000ull;
    while (pf_metrics(&p).wire_dropped < 1 && pf_now_ns() < end)
        usleep(1000);
    CHECK_EQ_U64(pf_metrics(&p).wire_dropped, 1);
    CHECK_EQ_U64(framing_dropped(&p), 5);
    zmq_close(d);
    zmq_ctx_term(ctx);

    /* As a scraper sees it. */
    ect_metrics_t m = pf_metrics(&p);
    char text[65536];
    size_t len;
    CHECK_OK(ect_metrics_format_prometheus(&m, text, sizeof(text), &len));
    CHECK_CONTAINS(text, "# TYPE ectier_control_framing_dropped_total counter\n");
    CHECK_CONTAINS(text, "\nectier_control_framing_dropped_total 5\n");
    ect_free(params);
    ect_cli_instance_close(&p);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_each_kind_of_bad_framing_is_dropped_and_counted_in_the_metrics),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
