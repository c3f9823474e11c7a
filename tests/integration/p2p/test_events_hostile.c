/*
 * Hostile peers of the event stream's replay endpoint (SPEC §9.1), played
 * by the test's own ZeroMQ sockets against a real producer instance
 * (tests/support/events.h): wrong frames, wrong lengths, huge frames,
 * stalled and vanished peers get an error or nothing, and a good router is
 * served afterwards.  Taken endpoints fail create naming them.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "p2p/events.h"
#include "support/events.h"

/* ---- hostile peers -------------------------------------------------------------- */

/* Send raw frames (len SIZE_MAX ends the list). */
static void
send_raw(void *s, const void *const *data, const size_t *lens, int n)
{
    for (int i = 0; i < n; i++)
        CHECK(zmq_send(s, data[i], lens[i], i + 1 < n ? ZMQ_SNDMORE : 0) == (int)lens[i]);
}

/* The answer to a bad request: [("",) END, {"type":"error"}]. */
static void
expect_refusal(void *s, bool delimiter, const char *why)
{
    zmq_msg_t f[3];
    int n = ts_ev_recv_frames(s, 5000, f, 3);
    CHECK_MSG(n == (delimiter ? 3 : 2), "a refusal of %d frames", n);
    int i = 0;
    if (delimiter)
        CHECK_EQ_U64(zmq_msg_size(&f[i++]), 0);
    CHECK(zmq_msg_size(&f[i]) == 8 && ts_ev_be64(zmq_msg_data(&f[i])) == ECT_EVENTS_END_SEQ);
    cJSON *o = ts_ev_frame_json(&f[i + 1]);
    CHECK_STR_EQ(ts_ev_jstr(o, "type"), "error");
    CHECK_CONTAINS(ts_ev_jstr(o, "error"), why);
    cJSON_Delete(o);
    ts_ev_close_frames(f, n);
}

static void
test_replay_endpoint_refuses_hostile_requests_and_still_serves(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_open(&fx, 400, "30", "");
    /* A history of large batches, one per save (waiting for each, so that
     * none coalesce): more than a slow peer's queues hold. */
    for (unsigned i = 0; i < 1500; i++) {
        char key[1000];
        ts_ev_big_key(key, sizeof(key), i);
        uint64_t before = ts_p2p_metrics(&fx.in).events_batches;
        ts_ev_save(&fx.in, key, 1);
        for (int ms = 0; ms < 5000 && ts_p2p_metrics(&fx.in).events_batches == before; ms++)
            nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    void *bad = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    unsigned char seq[9] = {0};
    /* A 7-byte, a 9-byte and an empty sequence number. */
    send_raw(bad, (const void *[]){"", seq}, (size_t[]){0, 7}, 2);
    expect_refusal(bad, true, "sequence frame of 7 bytes");
    send_raw(bad, (const void *[]){"", seq}, (size_t[]){0, 9}, 2);
    expect_refusal(bad, true, "sequence frame of 9 bytes");
    send_raw(bad, (const void *[]){"", ""}, (size_t[]){0, 0}, 2);
    expect_refusal(bad, true, "bad request");
    /* No empty delimiter: refused without one. */
    send_raw(bad, (const void *[]){seq}, (size_t[]){8}, 1);
    expect_refusal(bad, false, "bad request");
    /* Extra frames, many of them. */
    const void *many[40];
    size_t many_len[40];
    for (int i = 0; i < 40; i++) {
        many[i] = i == 0 ? "" : (const void *)seq;
        many_len[i] = i == 0 ? 0 : 8;
    }
    send_raw(bad, many, many_len, 40);
    expect_refusal(bad, true, "40 frames");
    /* Garbage text where the number goes. */
    send_raw(bad, (const void *[]){"", "give me everything please"}, (size_t[]){0, 25}, 2);
    expect_refusal(bad, true, "bad request");
    zmq_close(bad);

    /* A frame over the size limit: ZeroMQ drops the peer, no answer. */
    void *huge = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    size_t big = 1u << 20;
    char *blob = calloc(1, big);
    CHECK(blob != NULL);
    send_raw(huge, (const void *[]){"", blob}, (size_t[]){0, big}, 2);
    zmq_msg_t f[3];
    CHECK_EQ_INT(ts_ev_recv_frames(huge, 300, f, 3), 0);
    free(blob);
    zmq_close(huge);

    /* Peers that ask for the whole history and never read hold all the
     * replay slots; the next one is told to come back later. */
    void *stalled[ECT_EVENTS_REPLAYS_MAX];
    for (int i = 0; i < ECT_EVENTS_REPLAYS_MAX; i++) {
        stalled[i] = ts_ev_fx_slow_socket(&fx, ZMQ_DEALER, fx.replay, 1);
        ts_ev_send_request(stalled[i], 0);
    }
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    void *late = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    ts_ev_send_request(late, 0);
    expect_refusal(late, true, "busy");
    /* Peers that vanish free their slots: a good router is served. */
    for (int i = 0; i < ECT_EVENTS_REPLAYS_MAX; i++)
        zmq_close(stalled[i]);
    struct ts_ev_view v = {0};
    bool served = false;
    for (int i = 0; i < 200 && !served; i++) {
        served = ts_ev_view_try_replay(&v, late, 0);
        if (!served)
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(served, "a good router was not served after the hostile ones");
    CHECK(v.batches >= 1500);
    ts_ev_check_view_is_the_cache(&v, &fx.in, NULL, 0);
    ect_metrics_t m = ts_p2p_metrics(&fx.in);
    CHECK(m.events_replay_errors >= 7 + ECT_EVENTS_REPLAYS_MAX);
    ts_ev_view_free(&v);
    zmq_close(late);
    ts_ev_fx_close(&fx, 1);
}

/* ---- endpoints in use --------------------------------------------------------------- */

static void
check_create_fails_on_taken(const char *events, const char *replay, const char *named)
{
    char cfg[512];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1024, "
             "\"events_endpoint\": \"%s\", \"events_replay_endpoint\": \"%s\"}}",
             events, replay);
    ect_config_t c;
    CHECK_OK(ect_config_parse(cfg, strlen(cfg), &c));
    ect_geometry_t g;
    CHECK_OK(ect_geometry_init(64, ECT_DTYPE_BF16, c.cpu_bytes, &g));
    char id[64];
    ect_test_unique_name(id, sizeof(id), "ectev_");
    ect_scheduler_params_t p = {.config = &c, .geometry = &g, .instance_id = id};
    ect_scheduler_t *s = NULL;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_TRANSPORT);
    CHECK(s == NULL);
    CHECK_CONTAINS(ect_last_error(), named);
    char path[160];
    snprintf(path, sizeof(path), "/dev/shm/ectier_%s_dp0.mmap", id);
    CHECK_MSG(access(path, F_OK) != 0, "%s was left behind", path);
}

static void
test_an_endpoint_in_use_fails_create_naming_it(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 1) == 0);
    socklen_t al = sizeof(a);
    CHECK(getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    char taken[64];
    snprintf(taken, sizeof(taken), "tcp://127.0.0.1:%u", ntohs(a.sin_port));
    struct ts_ev_fx fx;
    ts_ev_fx_endpoints(&fx);
    check_create_fails_on_taken(taken, fx.replay, "events_endpoint");
    CHECK_CONTAINS(ect_last_error(), taken);
    check_create_fails_on_taken(fx.endpoint, taken, "events_replay_endpoint");
    CHECK_CONTAINS(ect_last_error(), taken);
    close(fd);
    ts_ev_fx_close(&fx, 0);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_replay_endpoint_refuses_hostile_requests_and_still_serves),
    ECT_CASE(test_an_endpoint_in_use_fails_create_naming_it),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
