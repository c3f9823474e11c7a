/*
 * `ectier bench session`: the producer session end to end (SPEC §12): the
 * XferReq -> XferAck round trip through a real producer (decode, checks,
 * pin, grant, ack with block ids and transport descriptors) against a bare
 * ZeroMQ DEALER/ROUTER echo of the same request bytes measured in the same
 * run (target <= 1.3x), and the producer's throughput in acks per second
 * with 8 concurrent consumers.  Clients are threads with their own ZeroMQ
 * contexts; the producer is a full in-process instance (tools/p2p).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zmq.h>

#include "../bench.h"
#include "common/clock.h"
#include "p2p/instance.h"
#include "p2p/pattern.h"
#include "proto/wire.h"

#define WARMUP     300
#define TIMED      3000
#define CLIENTS    8
#define PER_CLIENT 1500

struct client {
    unsigned port;
    const uint8_t *req;
    size_t req_len;
    int echo; /* bare server: expect the request back */
    size_t n;
    uint64_t *rtt_ns; /* n entries, or NULL */
    size_t ok;
};

static void *
client_main(void *arg)
{
    struct client *c = arg;
    void *ctx = zmq_ctx_new();
    void *d = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof(zero));
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", c->port);
    zmq_connect(d, ep);
    uint8_t buf[1 << 16];
    for (size_t i = 0; i < c->n; i++) {
        uint64_t t0 = ect__now_ns();
        zmq_send(d, "", 0, ZMQ_SNDMORE);
        zmq_send(d, c->req, c->req_len, 0);
        zmq_recv(d, buf, sizeof(buf), 0); /* delimiter */
        int n = zmq_recv(d, buf, sizeof(buf), 0);
        if (c->rtt_ns != NULL)
            c->rtt_ns[i] = ect__now_ns() - t0;
        if (n > 0 && !c->echo) {
            ect_xfer_ack_t ack;
            if (ect_wire_decode_ack(buf, (size_t)n, &ack) == ECT_OK) {
                c->ok += ack.status == ECT_XFER_OK;
                ect_xfer_ack_cleanup(&ack);
            }
        } else if (n == (int)c->req_len) {
            c->ok++;
        }
    }
    zmq_close(d);
    zmq_ctx_term(ctx);
    return NULL;
}

struct echo {
    void *ctx, *router;
    unsigned port;
    pthread_t thread;
};

static void *
echo_main(void *arg)
{
    struct echo *e = arg;
    for (;;) {
        zmq_msg_t parts[3];
        int n = 0, more = 1;
        while (more && n < 3) {
            zmq_msg_init(&parts[n]);
            if (zmq_msg_recv(&parts[n], e->router, 0) < 0)
                return NULL; /* context terminated */
            more = zmq_msg_more(&parts[n]);
            n++;
        }
        for (int i = 0; i < n; i++)
            zmq_msg_send(&parts[i], e->router, i + 1 < n ? ZMQ_SNDMORE : 0);
    }
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void
rtt(unsigned port, const ect_wire_buf_t *req, int echo, double *p50_us, double *p99_us)
{
    uint64_t *t = calloc(WARMUP + TIMED, sizeof(*t));
    struct client c = {port, req->data, req->len, echo, WARMUP + TIMED, t, 0};
    client_main(&c);
    qsort(t + WARMUP, TIMED, sizeof(*t), cmp_u64);
    *p50_us = (double)t[WARMUP + TIMED / 2] / 1e3;
    *p99_us = (double)t[WARMUP + TIMED * 99 / 100] / 1e3;
    free(t);
}

int
ect_bench_session(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    static const char cfg[] =
        "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
        "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": \"64MiB\", \"ec_enable_nixl\": true, "
        "\"announce_lease_s\": 0}}";
    struct ect_cli_instance p;
    struct ect_cli_instance_args a = {.cmd = "bench",
                                      .config = cfg,
                                      .model = "m",
                                      .hidden = "3584",
                                      .dtype = "bf16",
                                      .engine_version = "0.11.0",
                                      .listen = "127.0.0.1:0"};
    if (ect_cli_instance_open(&p, &a, "") != 0)
        return 1;
    char hash[65];
    ect_pattern_mm_hash(0, hash);
    const uint64_t tokens = 256;
    size_t nbytes = tokens * p.geom.block_size_bytes;
    uint8_t *payload = malloc(nbytes);
    ect_pattern_fill(hash, payload, nbytes);
    int rc = 1;
    if (ect_cli_instance_save(&p, hash, tokens, payload, nbytes) != ECT_OK) {
        fprintf(stderr, "bench session: %s\n", ect_last_error());
        goto out;
    }
    ect_mm_feature_t f = {.identifier = hash, .mm_hash = hash, .num_tokens = tokens};
    ect_request_t r = {.request_id = hash, .features = &f, .n_features = 1};
    char *params = NULL;
    ect_scheduler_request_finished(p.sched, &r, &params);
    const char *at = params ? strstr(params, "\"peer_port\":") : NULL;
    unsigned port = at ? (unsigned)strtoul(at + 12, NULL, 10) : 0;
    ect_free(params);
    char compat[65];
    ect_compat_hash("0.11.0", "m", "torch.bfloat16", p.geom.block_size_bytes, compat);
    ect_xfer_req_t req = {.mm_hash = hash,
                          .compatibility_hash = compat,
                          .session_id = "0d5e8a4c-1b7f-4e29-9c3a-6f2d8b1e7a90",
                          .connector_version = 1,
                          .has_connector_version = true};
    ect_wire_buf_t rb;
    ect_wire_buf_init(&rb);
    ect_wire_encode_req(&req, &rb);

    struct echo e = {.ctx = zmq_ctx_new()};
    e.router = zmq_socket(e.ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(e.router, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_bind(e.router, "tcp://127.0.0.1:*");
    char ep[64];
    size_t len = sizeof(ep);
    zmq_getsockopt(e.router, ZMQ_LAST_ENDPOINT, ep, &len);
    e.port = (unsigned)strtoul(strrchr(ep, ':') + 1, NULL, 10);
    pthread_create(&e.thread, NULL, echo_main, &e);

    printf("  request %zu bytes; ack for an entry of %llu blocks (%.2f MiB)\n", rb.len,
           (unsigned long long)tokens, (double)nbytes / 1048576.0);
    /* Alternate the two so drift on the machine hits both alike; report the
     * second pair (the first warms sockets, caches and the producer). */
    double ours50 = 0, ours99 = 0, bare50 = 0, bare99 = 0;
    for (int round = 0; round < 2; round++) {
        rtt(port, &rb, 0, &ours50, &ours99);
        rtt(e.port, &rb, 1, &bare50, &bare99);
    }
    printf("  XferReq->XferAck p50 %.1f us, p99 %.1f us; bare ZeroMQ echo p50 %.1f us, p99 "
           "%.1f us; ours/bare %.2f (target <= 1.30%s)\n",
           ours50, ours99, bare50, bare99, ours50 / bare50,
           ours50 / bare50 <= 1.30 ? "" : ", MISSED");

    /* Each consumer has its own session id, as real ones do (a grant's
     * name belongs to the connection that holds it). */
    struct client cl[CLIENTS];
    pthread_t th[CLIENTS];
    ect_wire_buf_t creq[CLIENTS];
    for (int i = 0; i < CLIENTS; i++) {
        char session[64];
        snprintf(session, sizeof(session), "0d5e8a4c-1b7f-4e29-9c3a-6f2d8b1e7a9%d", i);
        req.session_id = session;
        ect_wire_buf_init(&creq[i]);
        ect_wire_encode_req(&req, &creq[i]);
    }
    uint64_t t0 = ect__now_ns();
    for (int i = 0; i < CLIENTS; i++) {
        cl[i] = (struct client){port, creq[i].data, creq[i].len, 0, PER_CLIENT, NULL, 0};
        pthread_create(&th[i], NULL, client_main, &cl[i]);
    }
    size_t ok = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(th[i], NULL);
        ok += cl[i].ok;
    }
    double secs = (double)(ect__now_ns() - t0) / 1e9;
    printf("  producer throughput with %d concurrent consumers: %.0f acks/s (%zu OK of %d)\n",
           CLIENTS, (double)ok / secs, ok, CLIENTS * PER_CLIENT);
    rc = ok == (size_t)CLIENTS * PER_CLIENT ? 0 : 1;
    for (int i = 0; i < CLIENTS; i++)
        ect_wire_buf_cleanup(&creq[i]);
    zmq_ctx_shutdown(e.ctx);
    pthread_join(e.thread, NULL);
    zmq_close(e.router);
    zmq_ctx_term(e.ctx);
    ect_wire_buf_cleanup(&rb);
out:
    free(payload);
    ect_cli_instance_close(&p);
    return rc;
}
