/*
 * The lifecycle event stream (SPEC §9.1; src/p2p/events.c) as an
 * orchestrator sees it: a real producer instance (scheduler + worker, CPU
 * copies, real /dev/shm region) with events_endpoint set, and a real ZeroMQ
 * SUB socket subscribed to "ectier.".  Saving an entry publishes "stored",
 * announcing it "announced", filling the cache "evicted" for the oldest
 * entry, and the eviction of an announced entry whose lease lapsed
 * "evicted" then "withdrawn".  Each message is two frames: the topic and a
 * JSON object whose fields are checked.  A taken endpoint fails create.
 */
#include <arpa/inet.h>
#include <cJSON.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "instance.h"
#include "pattern.h"

#define HIDDEN "64" /* bf16: 128-byte blocks */
#define BLOCK  128u

struct ev_fx {
    struct ect_cli_instance in;
    char endpoint[128];
    void *zctx;
    void *sub;
    unsigned warm;
};

static void
open_producer(struct ect_cli_instance *in, const char *endpoint, unsigned num_blocks,
              const char *lease)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %u, \"ec_enable_nixl\": true, "
             "\"announce_lease_s\": %s, \"events_endpoint\": \"%s\"}}",
             num_blocks * BLOCK, lease, endpoint);
    setenv("ECTIER_SIDE_CHANNEL_HOST", "127.0.0.1", 1);
    setenv("ECTIER_SIDE_CHANNEL_PORT", "0", 1);
    struct ect_cli_instance_args a = {.cmd = "test",
                                      .config = cfg,
                                      .model = "m",
                                      .hidden = HIDDEN,
                                      .dtype = "bf16",
                                      .engine_version = "0.11.0"};
    CHECK_MSG(ect_cli_instance_open(in, &a, "") == 0, "instance: %s", ect_last_error());
}

static void
save(struct ect_cli_instance *in, const char *key, uint64_t tokens)
{
    size_t n = tokens * BLOCK;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    ect_pattern_fill(key, buf, n);
    CHECK_OK(ect_cli_instance_save(in, key, tokens, buf, n));
    free(buf);
}

static void
announce(struct ect_cli_instance *in, const char *key, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = key, .mm_hash = key, .num_tokens = tokens};
    ect_request_t req = {.request_id = key, .features = &f, .n_features = 1};
    char *params = NULL;
    CHECK_OK(ect_scheduler_request_finished(in->sched, &req, &params));
    CHECK_MSG(params != NULL && strstr(params, "peer_port") != NULL, "'%s' was not announced: %s",
              key, params ? params : "(null)");
    ect_free(params);
}

/* Receive one message within ms: topic and body (caller frees body). */
static int
recv_event(void *sub, int ms, char topic[64], cJSON **body_p)
{
    zmq_pollitem_t it = {.socket = sub, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, ms) <= 0)
        return 0;
    int n = zmq_recv(sub, topic, 63, 0);
    CHECK(n > 0);
    topic[n < 63 ? n : 63] = '\0';
    int more = 0;
    size_t ml = sizeof(more);
    CHECK(zmq_getsockopt(sub, ZMQ_RCVMORE, &more, &ml) == 0);
    CHECK_MSG(more, "topic '%s' came without a body frame", topic);
    char body[4096];
    n = zmq_recv(sub, body, sizeof(body) - 1, 0);
    CHECK(n > 0 && n < (int)sizeof(body));
    body[n] = '\0';
    CHECK_MSG(zmq_getsockopt(sub, ZMQ_RCVMORE, &more, &ml) == 0 && !more, "more than two frames");
    *body_p = cJSON_Parse(body);
    CHECK_MSG(*body_p != NULL, "body is not JSON: %s", body);
    return 1;
}

static uint64_t
unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Wait (5 s at most) for event `event` of key, skipping others; check its
 * body's fields. */
static void
expect_event(struct ev_fx *fx, const char *event, const char *key, uint64_t n_blocks)
{
    char want[64];
    snprintf(want, sizeof(want), "ectier.%s", event);
    for (int tries = 0; tries < 1000; tries++) {
        char topic[64];
        cJSON *o = NULL;
        if (!recv_event(fx->sub, 5000, topic, &o))
            break;
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "key");
        if (strcmp(topic, want) != 0 || !cJSON_IsString(k) || strcmp(k->valuestring, key) != 0) {
            cJSON_Delete(o);
            continue;
        }
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "event");
        const cJSON *nb = cJSON_GetObjectItemCaseSensitive(o, "n_blocks");
        const cJSON *inst = cJSON_GetObjectItemCaseSensitive(o, "instance");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "t");
        CHECK(cJSON_IsString(ev) && strcmp(ev->valuestring, event) == 0);
        CHECK(cJSON_IsNumber(nb) && (uint64_t)nb->valuedouble == n_blocks);
        CHECK(cJSON_IsString(inst));
        CHECK_CONTAINS(inst->valuestring, fx->in.instance_id);
        CHECK(cJSON_IsNumber(t));
        double age_s = ((double)unix_ns() - t->valuedouble) / 1e9;
        CHECK_MSG(age_s > -1 && age_s < 60, "t is %f s old", age_s);
        cJSON_Delete(o);
        return;
    }
    CHECK_MSG(0, "no %s event for '%s'", want, key);
}

static void
ev_fx_open(struct ev_fx *fx, unsigned num_blocks, const char *lease)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectev_");
    snprintf(fx->endpoint, sizeof(fx->endpoint), "ipc:///tmp/%s.sock", name);
    open_producer(&fx->in, fx->endpoint, num_blocks, lease);
    fx->zctx = zmq_ctx_new();
    CHECK(fx->zctx != NULL);
    fx->sub = zmq_socket(fx->zctx, ZMQ_SUB);
    CHECK(fx->sub != NULL);
    int linger = 0;
    zmq_setsockopt(fx->sub, ZMQ_LINGER, &linger, sizeof(linger));
    CHECK(zmq_setsockopt(fx->sub, ZMQ_SUBSCRIBE, "ectier.", 7) == 0);
    CHECK(zmq_connect(fx->sub, fx->endpoint) == 0);
    /* PUB drops what is sent before the subscription arrives: save small
     * entries until one is seen (then the stream is live). */
    fx->warm = 0;
    for (int live = 0; !live; fx->warm++) {
        CHECK_MSG(fx->warm < 200, "no event reached the subscriber");
        char key[32], topic[64];
        snprintf(key, sizeof(key), "warm-%u", fx->warm);
        save(&fx->in, key, 1);
        cJSON *o = NULL;
        live = recv_event(fx->sub, 50, topic, &o);
        cJSON_Delete(o);
    }
}

static void
ev_fx_close(struct ev_fx *fx)
{
    zmq_close(fx->sub);
    zmq_ctx_term(fx->zctx);
    ect_cli_instance_close(&fx->in);
    unlink(fx->endpoint + strlen("ipc://"));
}

static void
test_save_announce_and_eviction_are_published(void)
{
    struct ev_fx fx;
    ev_fx_open(&fx, 16, "30");
    save(&fx.in, "img", 2);
    expect_event(&fx, "stored", "img", 2);
    announce(&fx.in, "img", 2);
    expect_event(&fx, "announced", "img", 2);
    /* "old" is the oldest evictable entry after the warm-up ones; "img" is
     * held by its announcement and must outlive the fills. */
    save(&fx.in, "old", 3);
    expect_event(&fx, "stored", "old", 3);
    for (unsigned i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", i);
        save(&fx.in, key, 4);
    }
    expect_event(&fx, "evicted", "old", 3);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(fx.in.sched, &m));
    CHECK(m.cache.evicted_entries > 0);
    ev_fx_close(&fx);
}

static void
test_evicting_an_announced_entry_publishes_withdrawn(void)
{
    struct ev_fx fx;
    ev_fx_open(&fx, 8, "0.05");
    save(&fx.in, "img", 2);
    announce(&fx.in, "img", 2);
    expect_event(&fx, "announced", "img", 2);
    /* Let the announcement's lease lapse; the next steps expire its hold. */
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    for (unsigned i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", i);
        save(&fx.in, key, 4);
    }
    expect_event(&fx, "evicted", "img", 2);
    expect_event(&fx, "withdrawn", "img", 2);
    ev_fx_close(&fx);
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
    char endpoint[64];
    snprintf(endpoint, sizeof(endpoint), "tcp://127.0.0.1:%u", ntohs(a.sin_port));
    char cfg[512];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1024, "
             "\"events_endpoint\": \"%s\"}}",
             endpoint);
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
    CHECK_CONTAINS(ect_last_error(), endpoint);
    close(fd);
    char path[160];
    snprintf(path, sizeof(path), "/dev/shm/ectier_%s_dp0.mmap", id);
    CHECK_MSG(access(path, F_OK) != 0, "%s was left behind", path);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_save_announce_and_eviction_are_published),
    ECT_CASE(test_evicting_an_announced_entry_publishes_withdrawn),
    ECT_CASE(test_an_endpoint_in_use_fails_create_naming_it),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
