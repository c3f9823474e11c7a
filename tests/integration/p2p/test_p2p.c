/*
 * Peer-to-peer transfer end to end (SPEC §8, issue 4): real producer and
 * consumer instances (scheduler + worker + sessions), real ZeroMQ on
 * 127.0.0.1, the real TCP data stream and the same-host path, real processes where a
 * producer must die or stop.  Counterparts of the seed's loopback and
 * consumer/producer scenarios are named after them.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <zmq.h>

#include "p2p/control.h"
#include "support/p2p.h"
#include "proto/wire.h"

#define HIDDEN "64" /* bf16: 128-byte blocks */
#define BLOCK  128u

static void
open_instance(struct ect_cli_instance *in, const char *role, unsigned long long cpu_bytes,
              const char *extra, const char *model)
{
    ts_p2p_open_instance(in, role, cpu_bytes, HIDDEN, extra, model);
}

/* Save the test pattern of entry i (tokens rows) and announce it; the
 * announcement JSON is returned (caller frees with ect_free). */
static char *
produce(struct ect_cli_instance *p, unsigned i, uint64_t tokens, char hash[65])
{
    ts_p2p_save_pattern(p, i, tokens, BLOCK, hash);
    return ts_p2p_announce(p, hash, tokens);
}

/* Nothing pinned, granted or in flight once everything was served. */
static void
check_quiet(struct ect_cli_instance *in, double within_s)
{
    uint64_t end = ts_now_ns() + (uint64_t)(within_s * 1e9);
    ect_metrics_t m;
    do {
        CHECK_OK(ect_scheduler_metrics(in->sched, &m));
        if (m.grants_outstanding == 0 && m.cache.entries_not_ready == 0 && m.cache.pins == 0)
            return;
        usleep(1000);
    } while (ts_now_ns() < end);
    CHECK_MSG(0, "still busy: %llu grants, %llu not ready, %llu pins",
              (unsigned long long)m.grants_outstanding,
              (unsigned long long)m.cache.entries_not_ready, (unsigned long long)m.cache.pins);
}

static void
end_to_end(const char *transport)
{
    char extra[128];
    snprintf(extra, sizeof(extra), "\"transport\": \"%s\", \"announce_lease_s\": 0", transport);
    struct ect_cli_instance p, c;
    open_instance(&p, "ec_producer", 1 << 20, extra, "m");
    open_instance(&c, "ec_consumer", 1 << 20, extra, "m");
    char hash[65];
    char *params = produce(&p, 0, 100, hash);
    CHECK_EQ_INT(ts_p2p_fetch(&c, hash, 100, params, 0, 10), TS_P2P_FETCHED);
    ts_p2p_check_loaded(&c, hash, 100, BLOCK);
    ts_p2p_finish(&c, hash, 100);
    check_quiet(&p, 5);
    check_quiet(&c, 5);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(c.sched, &m));
    CHECK_EQ_U64(m.p2p_reads_completed, 1);
    CHECK_EQ_U64(m.acks_received[0], 1);
    CHECK_EQ_U64(m.p2p_read_bytes, 100 * BLOCK);
    /* The read is timed as part of the fetch: from the ack to the bytes
     * landed, inside the fetch's own span. */
    CHECK_EQ_U64(m.p2p_fetch_latency.count, 1);
    CHECK_EQ_U64(m.p2p_read_latency.count, 1);
    CHECK(m.p2p_read_latency.sum_ns > 0);
    CHECK(m.p2p_read_latency.sum_ns < m.p2p_fetch_latency.sum_ns);
    /* Over tcp the producer streamed exactly the entry, once. */
    CHECK_OK(ect_scheduler_metrics(p.sched, &m));
    int tcp = strcmp(transport, "tcp") == 0;
    CHECK_EQ_U64(m.stream_served, tcp);
    CHECK_EQ_U64(m.stream_bytes, tcp ? 100 * BLOCK : 0);
    CHECK_EQ_U64(m.stream_denied, 0);
    ect_free(params);
    ect_cli_instance_close(&c);
    ect_cli_instance_close(&p);
}

static void
test_end_to_end_single_xfer_same_host(void)
{
    end_to_end("same_host");
}

static void
test_end_to_end_single_xfer_tcp(void)
{
    end_to_end("tcp");
}

/* CURVE key files in a new directory under /tmp: the server's, an allowed
 * client's, another client's (keys the server does not allow) and the
 * allow list naming only the first client. */
struct curve_files {
    char dir[32];
    char server[128], client[128], other[128], allow[128];
};

static void
curve_files_make(struct curve_files *f)
{
    snprintf(f->dir, sizeof(f->dir), "/tmp/ectier_curve_XXXXXX");
    CHECK(mkdtemp(f->dir) != NULL);
    snprintf(f->server, sizeof(f->server), "%s/server.key", f->dir);
    snprintf(f->client, sizeof(f->client), "%s/client.key", f->dir);
    snprintf(f->other, sizeof(f->other), "%s/other.key", f->dir);
    snprintf(f->allow, sizeof(f->allow), "%s/allowed", f->dir);
    char server_pub[41], client_pub[41];
    CHECK_OK(ect__ctl_keyfile_generate(f->server, NULL));
    CHECK_OK(ect__ctl_keyfile_public(f->server, server_pub));
    CHECK_OK(ect__ctl_keyfile_generate(f->client, server_pub));
    CHECK_OK(ect__ctl_keyfile_public(f->client, client_pub));
    CHECK_OK(ect__ctl_keyfile_generate(f->other, server_pub));
    FILE *a = fopen(f->allow, "w");
    CHECK(a != NULL);
    fprintf(a, "%s\n", client_pub);
    fclose(a);
}

static void
curve_files_remove(const struct curve_files *f)
{
    unlink(f->server);
    unlink(f->client);
    unlink(f->other);
    unlink(f->allow);
    rmdir(f->dir);
}

/* With CURVE on, the grant and its token travel encrypted and only an
 * allowed consumer gets one; the stream then serves it as usual. */
static void
test_end_to_end_tcp_with_curve_and_an_allow_list(void)
{
    struct curve_files k;
    curve_files_make(&k);
    char pextra[512], cextra[512], oextra[512];
    snprintf(pextra, sizeof(pextra),
             "\"transport\": \"tcp\", \"curve_server_key_file\": \"%s\", "
             "\"curve_allowed_clients_file\": \"%s\"",
             k.server, k.allow);
    snprintf(cextra, sizeof(cextra), "\"transport\": \"tcp\", \"curve_client_key_file\": \"%s\"",
             k.client);
    snprintf(oextra, sizeof(oextra),
             "\"transport\": \"tcp\", \"curve_client_key_file\": \"%s\", "
             "\"consumer_ack_timeout_s\": 0.5",
             k.other);
    struct ect_cli_instance p, c, o;
    open_instance(&p, "ec_producer", 1 << 20, pextra, "m");
    open_instance(&c, "ec_consumer", 1 << 20, cextra, "m");
    open_instance(&o, "ec_consumer", 1 << 20, oextra, "m");
    char hash[65];
    char *params = produce(&p, 0, 100, hash);
    CHECK_EQ_INT(ts_p2p_fetch(&c, hash, 100, params, 0, 10), TS_P2P_FETCHED);
    ts_p2p_check_loaded(&c, hash, 100, BLOCK);
    ts_p2p_finish(&c, hash, 100);
    /* A consumer with keys the producer does not allow gets no grant. */
    CHECK_EQ_INT(ts_p2p_fetch(&o, hash, 100, params, 1, 10), TS_P2P_ENCODE_LOCALLY);
    ts_p2p_finish(&o, hash, 100);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(p.sched, &m));
    CHECK_EQ_U64(m.stream_served, 1);
    CHECK_EQ_U64(m.acks_sent[ECT_XFER_OK], 1);
    ect_free(params);
    ect_cli_instance_close(&o);
    ect_cli_instance_close(&c);
    ect_cli_instance_close(&p);
    curve_files_remove(&k);
}

/* A thread of this process: its name, and whether it blocks SIGINT,
 * SIGTERM, SIGHUP, SIGUSR1 and SIGCHLD (an application's handlers must
 * never run on a library thread). */
struct thread_seen {
    int tid;
    char name[32];
    int blocks_app_signals;
};

static void *
nothing(void *arg)
{
    return arg;
}

static size_t
other_threads(struct thread_seen *out, size_t cap)
{
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGCHLD};
    size_t n = 0;
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    struct dirent *de;
    while (d != NULL && (de = readdir(d)) != NULL && n < cap) {
        if (de->d_name[0] == '.' || atoi(de->d_name) == getpid())
            continue;
        char path[300], line[256];
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue; /* it ended meanwhile */
        struct thread_seen *t = &out[n];
        memset(t, 0, sizeof(*t));
        t->tid = atoi(de->d_name);
        if (fgets(t->name, sizeof(t->name), f) != NULL)
            t->name[strcspn(t->name, "\n")] = '\0';
        fclose(f);
        snprintf(path, sizeof(path), "/proc/self/task/%s/status", de->d_name);
        if ((f = fopen(path, "r")) == NULL)
            continue;
        unsigned long long blk = 0;
        while (fgets(line, sizeof(line), f) != NULL)
            if (sscanf(line, "SigBlk: %llx", &blk) == 1)
                break;
        fclose(f);
        t->blocks_app_signals = 1;
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
            if (!(blk & (1ull << (sigs[i] - 1))))
                t->blocks_app_signals = 0;
        n++;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

/* The threads of a producer and two consumers with everything on that
 * starts one (CURVE's ZAP handler, the event publisher, the metrics
 * server, the stream's two ends, the same-host copy threads and page
 * reader): each is named "ect-..." (ZeroMQ's own, "ZMQbg/...") and
 * blocks the application's signals. */
static void
test_every_library_thread_is_named_and_blocks_the_applications_signals(void)
{
    struct curve_files k;
    curve_files_make(&k);
    char pextra[768], textra[512], sextra[512];
    snprintf(pextra, sizeof(pextra),
             "\"curve_server_key_file\": \"%s\", \"curve_allowed_clients_file\": \"%s\", "
             "\"metrics_address\": \"127.0.0.1:0\", "
             "\"events_endpoint\": \"ipc://@ectier-threads-%d.sock\"",
             k.server, k.allow, (int)getpid());
    snprintf(textra, sizeof(textra), "\"transport\": \"tcp\", \"curve_client_key_file\": \"%s\"",
             k.client);
    snprintf(sextra, sizeof(sextra),
             "\"transport\": \"same_host\", \"curve_client_key_file\": \"%s\"", k.client);
    /* Threads that were here before are not ours.  A sanitizer may start
     * its own background thread at the process's first pthread_create:
     * make one first, so that it is among them. */
    pthread_t first;
    CHECK_EQ_INT(pthread_create(&first, NULL, nothing, NULL), 0);
    CHECK_EQ_INT(pthread_join(first, NULL), 0);
    struct thread_seen before[32];
    size_t n_before = other_threads(before, 32);
    struct ect_cli_instance p, ct, cs;
    open_instance(&p, "ec_producer", 1 << 20, pextra, "m");
    open_instance(&ct, "ec_consumer", 1 << 20, textra, "m");
    open_instance(&cs, "ec_consumer", 1 << 20, sextra, "m");
    char hash[65];
    char *params = produce(&p, 0, 100, hash);
    CHECK_EQ_INT(ts_p2p_fetch(&ct, hash, 100, params, 0, 10), TS_P2P_FETCHED);
    CHECK_EQ_INT(ts_p2p_fetch(&cs, hash, 100, params, 0, 10), TS_P2P_FETCHED);
    ts_p2p_check_loaded(&ct, hash, 100, BLOCK);
    ts_p2p_check_loaded(&cs, hash, 100, BLOCK);

    struct thread_seen all[128], seen[128];
    size_t n_all = other_threads(all, 128), n = 0;
    for (size_t i = 0; i < n_all; i++) {
        int old = 0;
        for (size_t j = 0; j < n_before; j++)
            old |= before[j].tid == all[i].tid;
        if (!old)
            seen[n++] = all[i];
    }
    const char *const expected[] = {"ect-producer",   "ect-consumer",  "ect-zap",
                                    "ect-events",     "ect-metrics",   "ect-stream-tx0",
                                    "ect-stream-tx3", "ect-stream-rx", "ect-copy-0"};
    for (size_t e = 0; e < sizeof(expected) / sizeof(expected[0]); e++) {
        int found = 0;
        for (size_t i = 0; i < n; i++)
            found |= strcmp(seen[i].name, expected[e]) == 0;
        CHECK_MSG(found, "no thread named %s among %zu (the first: %s)", expected[e], n,
                  n > 0 ? seen[0].name : "none");
    }
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(strncmp(seen[i].name, "ect-", 4) == 0 || strncmp(seen[i].name, "ZMQbg/", 6) == 0,
                  "a thread named '%s' is neither ours nor ZeroMQ's", seen[i].name);
        CHECK_MSG(seen[i].blocks_app_signals, "thread '%s' can take the application's signals",
                  seen[i].name);
    }
    ts_p2p_finish(&ct, hash, 100);
    ts_p2p_finish(&cs, hash, 100);
    ect_free(params);
    ect_cli_instance_close(&cs);
    ect_cli_instance_close(&ct);
    ect_cli_instance_close(&p);
    curve_files_remove(&k);
}

/* N fetches started before any is waited on, entry i of tokens_of(i)
 * rows, every one landing whole and counted once. */
static void
concurrent_xfers(const char *extra, unsigned long long cpu_bytes, uint64_t (*tokens_of)(unsigned))
{
    struct ect_cli_instance p, c;
    open_instance(&p, "ec_producer", cpu_bytes, extra, "m");
    open_instance(&c, "ec_consumer", cpu_bytes, extra, "m");
    enum { N = 24 };
    char hashes[N][65];
    char *params[N];
    for (unsigned i = 0; i < N; i++)
        params[i] = produce(&p, i, tokens_of(i), hashes[i]);
    /* Start every fetch before waiting on any. */
    ect_mm_feature_t f[N];
    ect_request_t req[N];
    int done[N] = {0}, n_done = 0;
    for (unsigned i = 0; i < N; i++) {
        f[i] = (ect_mm_feature_t){
            .identifier = hashes[i], .mm_hash = hashes[i], .num_tokens = tokens_of(i)};
        req[i] = (ect_request_t){.request_id = hashes[i],
                                 .features = &f[i],
                                 .n_features = 1,
                                 .ec_transfer_params_json = params[i]};
    }
    uint64_t end = ts_now_ns() + 20ull * 1000000000ull;
    while (n_done < N && ts_now_ns() < end) {
        for (unsigned i = 0; i < N; i++) {
            int available = 0;
            if (done[i])
                continue;
            CHECK_OK(ect_scheduler_ensure_cache_available(c.sched, &req[i], &available));
            if (available) {
                CHECK(ect_scheduler_has_cache_item(c.sched, hashes[i]));
                done[i] = 1;
                n_done++;
            }
        }
        usleep(500);
    }
    CHECK_EQ_INT(n_done, N);
    uint64_t bytes = 0;
    for (unsigned i = 0; i < N; i++) {
        ts_p2p_check_loaded(&c, hashes[i], tokens_of(i), BLOCK);
        ts_p2p_finish(&c, hashes[i], tokens_of(i));
        ect_free(params[i]);
        bytes += tokens_of(i) * BLOCK;
    }
    check_quiet(&p, 5);
    check_quiet(&c, 5);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(c.sched, &m));
    CHECK_EQ_U64(m.p2p_reads_completed, N);
    CHECK_EQ_U64(m.p2p_read_bytes, bytes);
    CHECK_EQ_U64(m.p2p_fetch_latency.count, N);
    CHECK_EQ_U64(m.p2p_read_latency.count, N);
    ect_cli_instance_close(&c);
    ect_cli_instance_close(&p);
}

static uint64_t
small_tokens(unsigned i)
{
    return 50 + i * 7;
}

static void
test_concurrent_xfers_different_mm_hashes(void)
{
    concurrent_xfers(NULL, 4 << 20, small_tokens);
}

/* Every fourth entry 4 MiB (in four stripes), the others small. */
static uint64_t
mixed_tokens(unsigned i)
{
    return i % 4 == 0 ? (4u << 20) / BLOCK : 50 + i * 7;
}

/* The same over tcp in stripes: a landed read is completed on the stream
 * thread that received its last byte, or by the session thread where that
 * thread found the consumer's lock held, while other reads land on other
 * threads; each is completed once. */
static void
test_concurrent_xfers_over_tcp_in_stripes(void)
{
    concurrent_xfers("\"transport\": \"tcp\", \"announce_lease_s\": 0, \"tcp_stripes\": 4",
                     64u << 20, mixed_tokens);
}

/* Announce hash under another name: the producer answers NACK_MISSING. */
static char *
rename_in_params(const char *params, const char *from, const char *to)
{
    char *out = malloc(strlen(params) + strlen(to) + 1);
    const char *at = strstr(params, from);
    CHECK(at != NULL);
    size_t head = (size_t)(at - params);
    memcpy(out, params, head);
    strcpy(out + head, to);
    strcat(out, at + strlen(from));
    return out;
}

static void
test_nack_missing_falls_back_with_local_input_and_is_request_scoped_without(void)
{
    struct ect_cli_instance p, c;
    open_instance(&p, "ec_producer", 1 << 20, NULL, "m");
    open_instance(&c, "ec_consumer", 1 << 20, NULL, "m");
    char hash[65], other[65];
    char *params = produce(&p, 0, 10, hash);
    ect_pattern_mm_hash(999, other);
    char *missing = rename_in_params(params, hash, other);
    CHECK_EQ_INT(ts_p2p_fetch(&c, other, 10, missing, 1, 10), TS_P2P_ENCODE_LOCALLY);
    ts_p2p_finish(&c, other, 10);
    /* The same failure without media to encode: the request fails, once. */
    CHECK_EQ_INT(ts_p2p_fetch(&c, other, 10, missing, 0, 10), TS_P2P_UNAVAILABLE);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(c.sched, &m));
    CHECK_EQ_U64(m.acks_received[ECT_XFER_NACK_MISSING], 2);
    CHECK_EQ_U64(m.p2p_fallbacks, 1);
    CHECK_EQ_U64(m.p2p_unavailable, 1);
    CHECK_EQ_U64(m.cache.entries, 0); /* the reserved blocks were freed */
    ts_p2p_finish(&c, other, 10);
    free(missing);
    ect_free(params);
    ect_cli_instance_close(&c);
    ect_cli_instance_close(&p);
}

static void
test_nack_incompat_when_models_differ(void)
{
    struct ect_cli_instance p, c;
    open_instance(&p, "ec_producer", 1 << 20, NULL, "model-a");
    open_instance(&c, "ec_consumer", 1 << 20, NULL, "model-b");
    char hash[65];
    char *params = produce(&p, 0, 10, hash);
    CHECK_EQ_INT(ts_p2p_fetch(&c, hash, 10, params, 1, 10), TS_P2P_ENCODE_LOCALLY);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(c.sched, &m));
    CHECK_EQ_U64(m.acks_received[ECT_XFER_NACK_INCOMPAT], 1);
    CHECK_OK(ect_scheduler_metrics(p.sched, &m));
    CHECK_EQ_U64(m.acks_sent[ECT_XFER_NACK_INCOMPAT], 1);
    ts_p2p_finish(&c, hash, 10);
    ect_free(params);
    ect_cli_instance_close(&c);
    ect_cli_instance_close(&p);
}

/* Send one raw request and wait for the ack's status (-1: no reply). */
static int
raw_request(void *dealer, const char *hash, const char *compat, const char *session,
            int64_t version, int with_version)
{
    ect_xfer_req_t req = {.mm_hash = hash,
                          .compatibility_hash = compat,
                          .session_id = session,
                          .connector_version = version,
                          .has_connector_version = with_version};
    ect__wire_buf_t b;
    ect__wire_buf_init(&b);
    CHECK_OK(ect__wire_encode_req(&req, &b));
    CHECK(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(dealer, b.data, b.len, 0) == (int)b.len);
    ect__wire_buf_cleanup(&b);
    zmq_pollitem_t it = {dealer, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, 2000) <= 0)
        return -1;
    char frame[4];
    CHECK(zmq_recv(dealer, frame, sizeof(frame), 0) == 0);
    uint8_t payload[65536];
    int n = zmq_recv(dealer, payload, sizeof(payload), 0);
    CHECK(n > 0);
    ect_xfer_ack_t ack;
    CHECK_OK(ect__wire_decode_ack(payload, (size_t)n, &ack));
    int status = (int)ack.status;
    ect__xfer_ack_cleanup(&ack);
    return status;
}

static void
test_producer_checks_version_hash_session_and_presence_in_order(void)
{
    struct ect_cli_instance p;
    open_instance(&p, "ec_producer", 1 << 20, NULL, "m");
    char hash[65], compat[65];
    char *params = produce(&p, 0, 10, hash);
    CHECK_OK(ect__compat_hash("0.11.0", "m", "torch.bfloat16", BLOCK, compat));
    void *ctx = zmq_ctx_new();
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", ts_p2p_params_port(params));
    CHECK(zmq_connect(d, ep) == 0);
    /* A version mismatch wins over everything else. */
    CHECK_EQ_INT(raw_request(d, hash, "bad", "", 2, 1), ECT_XFER_NACK_VERSION);
    CHECK_EQ_INT(raw_request(d, hash, "bad", "", 1, 1), ECT_XFER_NACK_INCOMPAT);
    CHECK_EQ_INT(raw_request(d, hash, compat, "", 1, 1), ECT_XFER_NACK_INTERNAL);
    CHECK_EQ_INT(raw_request(d, "absent", compat, "s1", 1, 1), ECT_XFER_NACK_MISSING);
    /* An absent version is compatible (the seed omits it). */
    CHECK_EQ_INT(raw_request(d, hash, compat, "s1", 1, 0), ECT_XFER_OK);
    /* A repeated request replaces the grant rather than pinning twice. */
    CHECK_EQ_INT(raw_request(d, hash, compat, "s1", 1, 1), ECT_XFER_OK);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(p.sched, &m));
    CHECK_EQ_U64(m.grants_outstanding, 1);
    CHECK_EQ_U64(m.cache.pins, 1);
    /* Garbage gets no reply and is counted. */
    CHECK(zmq_send(d, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(d, "\xc1garbage", 8, 0) == 8);
    zmq_pollitem_t it = {d, 0, ZMQ_POLLIN, 0};
    CHECK_EQ_INT(zmq_poll(&it, 1, 300), 0);
    CHECK_OK(ect_scheduler_metrics(p.sched, &m));
    CHECK_EQ_U64(m.wire_dropped, 1);
    /* The consumer vanishes: its grant is released without waiting 30 s. */
    zmq_close(d);
    zmq_ctx_term(ctx);
    check_quiet(&p, 15);
    CHECK_OK(ect_scheduler_metrics(p.sched, &m));
    CHECK_EQ_U64(m.grants_released_dead_peer, 1);
    ect_free(params);
    ect_cli_instance_close(&p);
}

static void
test_producer_that_never_answers_times_out_and_falls_back(void)
{
    void *ctx = zmq_ctx_new();
    void *r = zmq_socket(ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof(zero));
    CHECK(zmq_bind(r, "tcp://127.0.0.1:*") == 0);
    char ep[64];
    size_t len = sizeof(ep);
    zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &len);
    unsigned port = (unsigned)strtoul(strrchr(ep, ':') + 1, NULL, 10);
    struct ect_cli_instance c;
    open_instance(&c, "ec_consumer", 1 << 20, "\"consumer_ack_timeout_s\": 0.3", "m");
    char params[256];
    snprintf(params, sizeof(params),
             "{\"h\": {\"metadata\": {}, \"peer_host\": \"127.0.0.1\", \"peer_port\": %u, "
             "\"size_bytes\": %u}}",
             port, 10 * BLOCK);
    uint64_t t0 = ts_now_ns();
    CHECK_EQ_INT(ts_p2p_fetch(&c, "h", 10, params, 1, 10), TS_P2P_ENCODE_LOCALLY);
    CHECK((ts_now_ns() - t0) / 1000000 >= 250);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(c.sched, &m));
    CHECK_EQ_U64(m.p2p_ack_timeouts, 1);
    CHECK_EQ_U64(m.cache.entries, 0);
    CHECK(!ect_scheduler_has_pending_push_work(c.sched));
    ts_p2p_finish(&c, "h", 10);
    ect_cli_instance_close(&c);
    zmq_close(r);
    zmq_ctx_term(ctx);
}

static void
test_size_bytes_mismatch_fails_the_request_cleanly(void)
{
    struct ect_cli_instance c;
    open_instance(&c, "ec_consumer", 1 << 20, NULL, "m");
    const char *bad[] = {
        "{\"h\": {\"metadata\": {}, \"peer_host\": \"127.0.0.1\", \"peer_port\": 9, "
        "\"size_bytes\": 1281}}",
        "{\"h\": {\"metadata\": {}, \"peer_host\": \"127.0.0.1\", \"peer_port\": 9, "
        "\"size_bytes\": null}}",
        "{\"h\": {\"metadata\": {}, \"peer_host\": \"127.0.0.1\", \"peer_port\": 9, "
        "\"size_bytes\": \"1280\"}}",
        "{\"h\": {\"metadata\": {}, \"peer_host\": \"127.0.0.1\", \"peer_port\": 9}}",
        "{\"h\": {\"metadata\": {}, \"peer_host\": \"127.0.0.1\", \"peer_port\": 70000, "
        "\"size_bytes\": 1280}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_MSG(ts_p2p_fetch(&c, "h", 10, bad[i], 1, 5) == TS_P2P_UNAVAILABLE, "case %zu", i);
        ts_p2p_finish(&c, "h", 10);
    }
    /* Announcements without an address, or none at all: encode locally. */
    CHECK_EQ_INT(ts_p2p_fetch(&c, "h", 10, "{\"h\": {\"metadata\": {}}}", 1, 5),
                 TS_P2P_ENCODE_LOCALLY);
    CHECK_EQ_INT(ts_p2p_fetch(&c, "h", 10, "{\"x\": 123}", 1, 5), TS_P2P_ENCODE_LOCALLY);
    CHECK_EQ_INT(ts_p2p_fetch(&c, "h", 10, "[1, 2]", 1, 5), TS_P2P_ENCODE_LOCALLY);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(c.sched, &m));
    CHECK_EQ_U64(m.cache.entries, 0);
    ect_cli_instance_close(&c);
}

/* The per-request defer budget bounds the wait, whatever the producer does
 * (seed: remote_wait_budget_survives_retries_and_long_steps): a producer
 * that keeps quiet for longer than the budget costs the request only the
 * budget, then the item falls back (or the request fails without media). */
static void
test_defer_budget_bounds_the_wait_then_falls_back_or_fails(void)
{
    void *ctx = zmq_ctx_new();
    void *r = zmq_socket(ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof(zero));
    CHECK(zmq_bind(r, "tcp://127.0.0.1:*") == 0);
    char ep[64];
    size_t len = sizeof(ep);
    zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &len);
    unsigned port = (unsigned)strtoul(strrchr(ep, ':') + 1, NULL, 10);
    struct ect_cli_instance c;
    open_instance(&c, "ec_consumer", 1 << 20,
                  "\"consumer_ack_timeout_s\": 30, \"defer_budget_s\": 0.4", "m");
    char params[256];
    snprintf(params, sizeof(params),
             "{\"h\": {\"metadata\": {}, \"peer_host\": \"127.0.0.1\", \"peer_port\": %u, "
             "\"size_bytes\": %u}}",
             port, 10 * BLOCK);
    uint64_t t0 = ts_now_ns();
    CHECK_EQ_INT(ts_p2p_fetch(&c, "h", 10, params, 1, 10), TS_P2P_ENCODE_LOCALLY);
    uint64_t waited_ms = (ts_now_ns() - t0) / 1000000;
    CHECK_MSG(waited_ms >= 350 && waited_ms < 5000, "waited %llu ms",
              (unsigned long long)waited_ms);
    ts_p2p_finish(&c, "h", 10);
    /* The budget is per request: a new request waits its own budget. */
    t0 = ts_now_ns();
    CHECK_EQ_INT(ts_p2p_fetch(&c, "h", 10, params, 0, 10), TS_P2P_UNAVAILABLE);
    CHECK((ts_now_ns() - t0) / 1000000 >= 350);
    ts_p2p_finish(&c, "h", 10);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(c.sched, &m));
    CHECK_EQ_U64(m.p2p_fallbacks, 1);
    CHECK_EQ_U64(m.p2p_unavailable, 1);
    CHECK_EQ_U64(m.cache.entries, 0); /* cancelled fetches gave their blocks back */
    CHECK(!ect_scheduler_has_pending_push_work(c.sched));
    ect_cli_instance_close(&c);
    zmq_close(r);
    zmq_ctx_term(ctx);
}

/* A 4 MiB entry over tcp with tcp_stripes 4: fetched whole in four stripes,
 * each received on a thread of its own, and streamed (and counted) once. */
static void
test_end_to_end_tcp_in_stripes(void)
{
    enum { TOKENS = (4u << 20) / BLOCK };
    const char *extra = "\"transport\": \"tcp\", \"announce_lease_s\": 0, \"tcp_stripes\": 4";
    struct ect_cli_instance p, c;
    open_instance(&p, "ec_producer", 16u << 20, extra, "m");
    open_instance(&c, "ec_consumer", 16u << 20, extra, "m");
    CHECK_EQ_U64(ts_threads_named("ect-stream-rx"), 0);
    char hash[65];
    char *params = produce(&p, 0, TOKENS, hash);
    CHECK_EQ_INT(ts_p2p_fetch(&c, hash, TOKENS, params, 0, 10), TS_P2P_FETCHED);
    ts_p2p_check_loaded(&c, hash, TOKENS, BLOCK);
    ts_p2p_finish(&c, hash, TOKENS);
    check_quiet(&p, 5);
    check_quiet(&c, 5);
    CHECK_EQ_U64(ts_threads_named("ect-stream-rx"), 4);
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(c.sched, &m));
    CHECK_EQ_U64(m.p2p_reads_completed, 1);
    CHECK_EQ_U64(m.p2p_read_bytes, (uint64_t)TOKENS * BLOCK);
    CHECK_OK(ect_scheduler_metrics(p.sched, &m));
    CHECK_EQ_U64(m.stream_served, 1);
    CHECK_EQ_U64(m.stream_bytes, (uint64_t)TOKENS * BLOCK);
    CHECK_EQ_U64(m.stream_denied + m.stream_bad_requests + m.stream_send_failures, 0);
    /* Stripes are sent by the thread of their index: none moves. */
    CHECK_EQ_U64(m.stream_moved, 0);
    ect_free(params);
    ect_cli_instance_close(&c);
    ect_cli_instance_close(&p);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_defer_budget_bounds_the_wait_then_falls_back_or_fails),
    ECT_CASE(test_end_to_end_single_xfer_same_host),
    ECT_CASE(test_end_to_end_single_xfer_tcp),
    ECT_CASE(test_end_to_end_tcp_in_stripes),
    ECT_CASE(test_end_to_end_tcp_with_curve_and_an_allow_list),
    ECT_CASE(test_every_library_thread_is_named_and_blocks_the_applications_signals),
    ECT_CASE(test_concurrent_xfers_different_mm_hashes),
    ECT_CASE(test_concurrent_xfers_over_tcp_in_stripes),
    ECT_CASE(test_nack_missing_falls_back_with_local_input_and_is_request_scoped_without),
    ECT_CASE(test_nack_incompat_when_models_differ),
    ECT_CASE(test_producer_checks_version_hash_session_and_presence_in_order),
    ECT_CASE(test_producer_that_never_answers_times_out_and_falls_back),
    ECT_CASE(test_size_bytes_mismatch_fails_the_request_cleanly),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
