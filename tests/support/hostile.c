/*
 * The attacker's fixtures for the hostile-peer tests (see hostile.h): a
 * real producer process, its metrics, a legitimate consumer, and the
 * attacker's own control-plane and data-stream clients.  Nothing here goes
 * through ectier's consumer; only the compatibility hash comes from the
 * library (proto/wire.h), as an attacker who read our source would compute
 * it.
 */
#include "support/hostile.h"

#include <fcntl.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "harness.h"
#include "proto/wire.h"
#include "support/cli.h"
#include "support/util.h"

/* ---- sockets and bytes ------------------------------------------------------------ */

int
ts_hostile_tcp_connect_rcvbuf(unsigned port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    CHECK(fd >= 0);
    if (rcvbuf != 0)
        CHECK(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)) == 0);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
    return fd;
}

int
ts_hostile_tcp_connect(unsigned port)
{
    return ts_hostile_tcp_connect_rcvbuf(port, 0);
}

size_t
ts_hostile_read_until_eof(int fd, uint8_t *buf, size_t cap, int timeout_ms, int *eof_p)
{
    size_t got = 0;
    *eof_p = 0;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            return got;
        uint8_t scratch[4096];
        uint8_t *dst = got < cap ? buf + got : scratch;
        size_t room = got < cap ? cap - got : sizeof(scratch);
        ssize_t n = recv(fd, dst, room, 0);
        if (n <= 0) {
            *eof_p = 1;
            return got;
        }
        got += (size_t)n;
    }
}

size_t
ts_hostile_read_exact(int fd, uint8_t *buf, size_t n, int timeout_ms, int *eof_p)
{
    size_t got = 0;
    *eof_p = 0;
    while (got < n) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            return got;
        ssize_t r = recv(fd, buf + got, n - got, 0);
        if (r <= 0) {
            *eof_p = 1;
            return got;
        }
        got += (size_t)r;
    }
    return got;
}

void
ts_hostile_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void
put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint32_t
ts_hostile_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t
ts_hostile_get_u64(const uint8_t *p)
{
    return (uint64_t)ts_hostile_get_u32(p) | (uint64_t)ts_hostile_get_u32(p + 4) << 32;
}

/* ---- the producer -------------------------------------------------------------------- */

void
ts_hostile_producer_spawn_with(struct ts_hostile_producer *p, unsigned n, uint64_t tokens,
                               const char *extra)
{
    CHECK(n <= 64);
    memset(p, 0, sizeof(*p));
    p->n = n;
    p->tokens = tokens;
    p->metrics_port = ts_free_loopback_port();
    char cfg[768], fill[16], tok[32];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu, \"ec_enable_nixl\": true, "
             "\"metrics_address\": \"127.0.0.1:%u\"%s%s}}",
             (unsigned long long)(n * tokens * TS_HOSTILE_BLOCK + (1u << 20)), p->metrics_port,
             extra != NULL ? ", " : "", extra != NULL ? extra : "");
    snprintf(fill, sizeof(fill), "%u", n);
    snprintf(tok, sizeof(tok), "%llu", (unsigned long long)tokens);
    snprintf(p->params_path, sizeof(p->params_path), "/tmp/ectier_hostile_%d_params.jsonl",
             (int)getpid());
    const char *const argv[] = {
        "ectier",   "producer",        "--config", cfg,    "--model",          "m",
        "--hidden", TS_HOSTILE_HIDDEN, "--dtype",  "bf16", "--engine-version", "0.11.0",
        "--listen", "127.0.0.1:0",     "--fill",   fill,   "--tokens",         tok,
        NULL};
    FILE *f;
    p->pid = ts_cli_spawn(argv, &f, NULL);
    FILE *out = fopen(p->params_path, "w");
    CHECK(f != NULL && out != NULL);
    char line[4096];
    for (unsigned i = 0; i < n; i++) {
        CHECK_MSG(fgets(line, sizeof(line), f) != NULL && line[0] == '{',
                  "the producer did not announce entry %u", i);
        fputs(line, out);
        CHECK(sscanf(line, "{\"%64[0-9a-f]\"", p->hashes[i]) == 1);
        const char *at = strstr(line, "\"peer_port\":");
        CHECK(at != NULL);
        p->ctl_port = (unsigned)strtoul(at + 12, NULL, 10);
    }
    CHECK(fgets(line, sizeof(line), f) != NULL && strncmp(line, "ready", 5) == 0);
    fclose(f);
    fclose(out);
}

void
ts_hostile_producer_spawn(struct ts_hostile_producer *p, unsigned n, uint64_t tokens)
{
    ts_hostile_producer_spawn_with(p, n, tokens, NULL);
}

int
ts_hostile_producer_alive(const struct ts_hostile_producer *p)
{
    int st;
    return waitpid(p->pid, &st, WNOHANG) == 0 && kill(p->pid, 0) == 0;
}

void
ts_hostile_producer_stop(struct ts_hostile_producer *p)
{
    CHECK_MSG(ts_hostile_producer_alive(p), "the producer died");
    kill(p->pid, SIGTERM);
    int st;
    CHECK(waitpid(p->pid, &st, 0) == p->pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the producer ended with status %d", st);
    unlink(p->params_path);
}

double
ts_hostile_metric(const struct ts_hostile_producer *p, const char *name)
{
    int fd = ts_hostile_tcp_connect(p->metrics_port);
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    CHECK(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(req) - 1));
    static uint8_t body[1 << 20];
    int eof;
    size_t n = ts_hostile_read_until_eof(fd, body, sizeof(body) - 1, 3000, &eof);
    close(fd);
    body[n < sizeof(body) ? n : sizeof(body) - 1] = '\0';
    char needle[160];
    snprintf(needle, sizeof(needle), "\n%s ", name);
    const char *at = strstr((const char *)body, needle);
    return at != NULL ? strtod(at + strlen(needle), NULL) : -1;
}

double
ts_hostile_metric_await(const struct ts_hostile_producer *p, const char *name, double want,
                        double seconds)
{
    uint64_t end = ts_now_ns() + (uint64_t)(seconds * 1e9);
    double v = ts_hostile_metric(p, name);
    while (v != want && ts_now_ns() < end) {
        usleep(10000);
        v = ts_hostile_metric(p, name);
    }
    return v;
}

void
ts_hostile_consumer_config(const struct ts_hostile_producer *p, char *cfg, size_t len)
{
    snprintf(cfg, len,
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_consumer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu, \"ec_enable_nixl\": true, "
             "\"transport\": \"tcp\", \"prefault\": false}}",
             (unsigned long long)((uint64_t)p->n * p->tokens * TS_HOSTILE_BLOCK + (1u << 20)));
}

pid_t
ts_hostile_consumer_start(const struct ts_hostile_producer *p, const char *cfg, bool verify)
{
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        if (!verify)
            dup2(null, STDERR_FILENO);
        execl(ECT_CLI_PATH, "ectier", "consumer", "--config", cfg, "--model", "m", "--hidden",
              TS_HOSTILE_HIDDEN, "--dtype", "bf16", "--engine-version", "0.11.0", "--params",
              p->params_path, verify ? "--verify-pattern" : (char *)NULL, (char *)NULL);
        _exit(127);
    }
    return pid;
}

void
ts_hostile_legit_consumer_verifies_all(const struct ts_hostile_producer *p)
{
    char cfg[512];
    ts_hostile_consumer_config(p, cfg, sizeof(cfg));
    pid_t pid = ts_hostile_consumer_start(p, cfg, true);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "a legitimate consumer could not fetch and verify every entry (status %d)", st);
}

/* ---- the attacker's own control-plane client ------------------------------------------ */

static void
pack_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static int
key_is(const msgpack_object *k, const char *name)
{
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(name) &&
           memcmp(k->via.str.ptr, name, k->via.str.size) == 0;
}

struct ts_hostile_grant
ts_hostile_ask(void *dealer, const char *hash, const char *session)
{
    char compat[65];
    CHECK_OK(ect__compat_hash("0.11.0", "m", "torch.bfloat16", TS_HOSTILE_BLOCK, compat));
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    pack_str(&pk, "type");
    pack_str(&pk, "req");
    pack_str(&pk, "mm_hash");
    pack_str(&pk, hash);
    pack_str(&pk, "compatibility_hash");
    pack_str(&pk, compat);
    pack_str(&pk, "session_id");
    pack_str(&pk, session);
    pack_str(&pk, "connector_version");
    msgpack_pack_int(&pk, 1);
    CHECK(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(dealer, sb.data, sb.size, 0) == (int)sb.size);
    msgpack_sbuffer_destroy(&sb);
    struct ts_hostile_grant g = {.status = -1};
    zmq_pollitem_t it = {dealer, 0, ZMQ_POLLIN, 0};
    CHECK_MSG(zmq_poll(&it, 1, 3000) == 1, "no ack");
    char empty[4];
    CHECK(zmq_recv(dealer, empty, sizeof(empty), 0) == 0);
    static uint8_t payload[1 << 20];
    int n = zmq_recv(dealer, payload, sizeof(payload), 0);
    CHECK(n > 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    CHECK(msgpack_unpack_next(&u, (const char *)payload, (size_t)n, NULL) ==
          MSGPACK_UNPACK_SUCCESS);
    CHECK(u.data.type == MSGPACK_OBJECT_MAP);
    for (uint32_t i = 0; i < u.data.via.map.size; i++) {
        const msgpack_object *k = &u.data.via.map.ptr[i].key, *v = &u.data.via.map.ptr[i].val;
        if (key_is(k, "status"))
            g.status = (int)v->via.u64;
        else if (key_is(k, "src_block_indices"))
            g.n_blocks = v->via.array.size;
        else if (key_is(k, "mem_descriptor") && v->type == MSGPACK_OBJECT_BIN) {
            CHECK(v->via.bin.size >= TS_HOSTILE_TOKEN_LEN && v->via.bin.size <= sizeof(g.desc));
            memcpy(g.desc, v->via.bin.ptr, v->via.bin.size);
            g.desc_len = v->via.bin.size;
            memcpy(g.token, v->via.bin.ptr + v->via.bin.size - TS_HOSTILE_TOKEN_LEN,
                   TS_HOSTILE_TOKEN_LEN);
        } else if (key_is(k, "agent_metadata") && v->type == MSGPACK_OBJECT_BIN) {
            /* "ECTA" u32 version, 16-byte instance, u32 count, entries. */
            const uint8_t *b = (const uint8_t *)v->via.bin.ptr;
            size_t len = v->via.bin.size, at = 28;
            while (at + 8 <= len) {
                uint32_t kind = ts_hostile_get_u32(b + at), elen = ts_hostile_get_u32(b + at + 4);
                if (kind == 1 && elen == 4)
                    g.data_port = ts_hostile_get_u32(b + at + 8);
                if (kind == 4 && elen == 4)
                    g.aligned_header = ts_hostile_get_u32(b + at + 8);
                at += 8 + elen;
            }
        }
    }
    msgpack_unpacked_destroy(&u);
    return g;
}

void
ts_hostile_dealer_open(struct ts_hostile_dealer *d, unsigned port)
{
    d->ctx = zmq_ctx_new();
    d->sock = zmq_socket(d->ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d->sock, ZMQ_LINGER, &zero, sizeof(zero));
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", port);
    CHECK(zmq_connect(d->sock, ep) == 0);
}

void
ts_hostile_dealer_close(struct ts_hostile_dealer *d)
{
    zmq_close(d->sock);
    zmq_ctx_term(d->ctx);
}

/* ---- the attacker's own data-stream client -------------------------------------------- */

size_t
ts_hostile_stream_request_v(uint8_t *out, uint32_t version, const char *session, const char *hash,
                            const uint8_t *token, uint64_t expect, uint32_t stripe,
                            uint32_t stripes)
{
    size_t sl = strlen(session), hl = strlen(hash), at = 40;
    memcpy(out, "ECTR", 4);
    ts_hostile_put_u32(out + 4, version);
    ts_hostile_put_u32(out + 8, (uint32_t)sl);
    ts_hostile_put_u32(out + 12, (uint32_t)hl);
    put_u64(out + 16, expect);
    memcpy(out + 24, token, TS_HOSTILE_TOKEN_LEN);
    if (version == 2 || version == 4) {
        ts_hostile_put_u32(out + 40, stripe);
        ts_hostile_put_u32(out + 44, stripes);
        at = 48;
    }
    memcpy(out + at, session, sl);
    memcpy(out + at + sl, hash, hl);
    return at + sl + hl;
}

size_t
ts_hostile_stream_request(uint8_t *out, const char *session, const char *hash, const uint8_t *token,
                          uint64_t expect)
{
    return ts_hostile_stream_request_v(out, 1, session, hash, token, expect, 0, 0);
}

struct ts_hostile_answer
ts_hostile_stream_raw(unsigned port, const uint8_t *bytes, size_t len, uint8_t *buf, size_t cap,
                      int silence_ms)
{
    int fd = ts_hostile_tcp_connect(port);
    if (len > 0)
        CHECK(send(fd, bytes, len, MSG_NOSIGNAL) == (ssize_t)len);
    struct ts_hostile_answer a = {0};
    a.got = ts_hostile_read_until_eof(fd, buf, cap, silence_ms, &a.closed);
    if (a.got >= 16 && memcmp(buf, "ECTS", 4) == 0) {
        a.status = ts_hostile_get_u32(buf + 4);
        a.announced = ts_hostile_get_u64(buf + 8);
    }
    close(fd);
    return a;
}

struct ts_hostile_answer
ts_hostile_stream_ask(unsigned port, const char *session, const char *hash, const uint8_t *token,
                      uint64_t expect, uint8_t *buf, size_t cap)
{
    uint8_t req[8300];
    size_t len = ts_hostile_stream_request(req, session, hash, token, expect);
    return ts_hostile_stream_raw(port, req, len, buf, cap, 3000);
}

int
ts_hostile_stream_send(unsigned port, int rcvbuf, uint32_t version, const char *session,
                       const char *hash, const uint8_t *token, uint64_t expect, uint32_t stripe,
                       uint32_t stripes)
{
    uint8_t req[8300];
    size_t len =
        ts_hostile_stream_request_v(req, version, session, hash, token, expect, stripe, stripes);
    int fd = ts_hostile_tcp_connect_rcvbuf(port, rcvbuf);
    CHECK(send(fd, req, len, MSG_NOSIGNAL) == (ssize_t)len);
    return fd;
}

int
ts_hostile_stripe_send(unsigned port, int rcvbuf, const char *session, const char *hash,
                       const uint8_t *token, uint64_t expect, uint32_t stripe, uint32_t stripes)
{
    return ts_hostile_stream_send(port, rcvbuf, 2, session, hash, token, expect, stripe, stripes);
}

struct ts_hostile_answer
ts_hostile_stream_recv(int fd, size_t hdr, uint8_t *buf, size_t cap)
{
    struct ts_hostile_answer a = {0};
    CHECK(hdr >= 16 && cap >= hdr);
    a.got = ts_hostile_read_exact(fd, buf, hdr, 10000, &a.closed);
    if (a.got == hdr && memcmp(buf, "ECTS", 4) == 0) {
        a.status = ts_hostile_get_u32(buf + 4);
        a.announced = ts_hostile_get_u64(buf + 8);
    }
    if (a.got == hdr && a.status == 0 && a.announced > 0) {
        CHECK_MSG(a.announced <= cap - hdr, "announced %llu bytes",
                  (unsigned long long)a.announced);
        a.got += ts_hostile_read_exact(fd, buf + hdr, (size_t)a.announced, 10000, &a.closed);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        uint8_t extra[4096];
        ssize_t n;
        if (!a.closed && poll(&p, 1, 200) == 1 && (n = recv(fd, extra, sizeof(extra), 0)) >= 0) {
            a.got += (size_t)n;
            a.closed = n == 0;
        }
    } else if (!a.closed) {
        a.got += ts_hostile_read_until_eof(fd, buf + a.got, cap - a.got, 3000, &a.closed);
    }
    close(fd);
    return a;
}

struct ts_hostile_answer
ts_hostile_stripe_recv(int fd, uint8_t *buf, size_t cap)
{
    return ts_hostile_stream_recv(fd, 16, buf, cap);
}

struct ts_hostile_answer
ts_hostile_stripe_ask(unsigned port, const char *session, const char *hash, const uint8_t *token,
                      uint64_t expect, uint32_t stripe, uint32_t stripes, uint8_t *buf, size_t cap)
{
    return ts_hostile_stripe_recv(
        ts_hostile_stripe_send(port, 0, session, hash, token, expect, stripe, stripes), buf, cap);
}

void
ts_hostile_check_refused(const struct ts_hostile_answer *a, uint32_t status)
{
    CHECK_EQ_U64(a->got, 16);
    CHECK_EQ_U64(a->status, status);
    CHECK_EQ_U64(a->announced, 0);
    CHECK(a->closed);
}
