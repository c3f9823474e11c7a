/*
 * A hostile peer against a real `ectier producer` process (issue 9): the
 * attacker has read our source and speaks every protocol with its own code
 * (msgpack-c for the control plane, raw sockets for the data stream, UCX
 * directly), never through ectier's consumer.  The promises under test:
 *
 *   - a peer gets exactly the bytes of an entry it holds a grant for, once,
 *     and nothing for a forged, zero, foreign, replayed or used-up token, a
 *     wrong name or size, or malformed bytes; bad requests cut only the
 *     attacker's connection;
 *   - striped (version 2 requests): each stripe of a grant once, exactly
 *     its share of the entry's bytes; a request that disagrees with its
 *     group (a stripe taken, other stripes, another size, a forged token)
 *     is refused and leaves the group as it was; malformed stripe fields cut
 *     the connection; a group missing stripes gives the grant back at its
 *     deadline, one whose stripe the attacker cut gives it back as soon as
 *     no stripe is being sent, and takes no stripe more;
 *   - the producer listens on the documented ports only (control plane,
 *     data stream, metrics), each bound to the configured address, and
 *     loads no UCX, so UCX one-sided operations (real and synthesised
 *     worker addresses, foreign and all-zero keys, unmapped and arbitrary
 *     addresses, with UCX_TLS=tcp and the default transports) reach
 *     nothing;
 *   - consumers SIGKILLed in the middle of their reads, 50 times with many
 *     grants held, never take the producer down, and their grants come
 *     back;
 *   - after every attack the producer still serves every entry intact to a
 *     legitimate `ectier consumer --verify-pattern`.
 */
#include <dirent.h>
#include <fcntl.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <zmq.h>

#include "harness.h"
#include "pattern.h"
#include "proto/wire.h"
#include "support/util.h"

#define HIDDEN    "1792" /* bf16: 3584-byte blocks */
#define BLOCK     3584u
#define TOKEN_LEN 16u

/* ---- small helpers ------------------------------------------------------------------ */

static unsigned
free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* A connection to port on loopback; with a receive buffer of rcvbuf bytes
 * when not 0 (set before the handshake, so the window never grows past
 * it: a peer that stops reading holds the sender up for sure). */
static int
tcp_connect_rcvbuf(unsigned port, int rcvbuf)
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

static int
tcp_connect(unsigned port)
{
    return tcp_connect_rcvbuf(port, 0);
}

/* Read up to cap bytes until EOF or timeout_ms of silence; how many. */
static size_t
read_until_eof(int fd, uint8_t *buf, size_t cap, int timeout_ms, int *eof_p)
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

/* Read exactly n bytes unless EOF or timeout_ms of silence comes first;
 * how many came. */
static size_t
read_exact(int fd, uint8_t *buf, size_t n, int timeout_ms, int *eof_p)
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

static void
put_u32(uint8_t *p, uint32_t v)
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

static uint32_t
get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

/* ---- the producer -------------------------------------------------------------------- */

struct producer {
    pid_t pid;
    unsigned ctl_port;
    unsigned metrics_port;
    unsigned n;
    uint64_t tokens;
    char hashes[64][65];
    char params_path[256];
};

/* extra: more settings for ec_connector_extra_config ("\"name\": value, ..."), or
 * NULL. */
static void
spawn_producer_with(struct producer *p, unsigned n, uint64_t tokens, const char *extra)
{
    CHECK(n <= 64);
    memset(p, 0, sizeof(*p));
    p->n = n;
    p->tokens = tokens;
    p->metrics_port = free_port();
    char cfg[768], fill[16], tok[32];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu, \"ec_enable_nixl\": true, "
             "\"metrics_address\": \"127.0.0.1:%u\"%s%s}}",
             (unsigned long long)(n * tokens * BLOCK + (1u << 20)), p->metrics_port,
             extra != NULL ? ", " : "", extra != NULL ? extra : "");
    snprintf(fill, sizeof(fill), "%u", n);
    snprintf(tok, sizeof(tok), "%llu", (unsigned long long)tokens);
    snprintf(p->params_path, sizeof(p->params_path), "/tmp/ectier_hostile_%d_params.jsonl",
             (int)getpid());
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl(ECT_CLI_PATH, "ectier", "producer", "--config", cfg, "--model", "m", "--hidden",
              HIDDEN, "--dtype", "bf16", "--engine-version", "0.11.0", "--listen", "127.0.0.1:0",
              "--fill", fill, "--tokens", tok, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    p->pid = pid;
    FILE *f = fdopen(fds[0], "r");
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

static void
spawn_producer(struct producer *p, unsigned n, uint64_t tokens)
{
    spawn_producer_with(p, n, tokens, NULL);
}

static int
producer_alive(const struct producer *p)
{
    int st;
    return waitpid(p->pid, &st, WNOHANG) == 0 && kill(p->pid, 0) == 0;
}

static void
stop_producer(struct producer *p)
{
    CHECK_MSG(producer_alive(p), "the producer died");
    kill(p->pid, SIGTERM);
    int st;
    CHECK(waitpid(p->pid, &st, 0) == p->pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the producer ended with status %d", st);
    unlink(p->params_path);
}

/* One counter or gauge from the producer's Prometheus endpoint (-1: absent). */
static double
metric(const struct producer *p, const char *name)
{
    int fd = tcp_connect(p->metrics_port);
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    CHECK(send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof(req) - 1));
    static uint8_t body[1 << 20];
    int eof;
    size_t n = read_until_eof(fd, body, sizeof(body) - 1, 3000, &eof);
    close(fd);
    body[n < sizeof(body) ? n : sizeof(body) - 1] = '\0';
    char needle[160];
    snprintf(needle, sizeof(needle), "\n%s ", name);
    const char *at = strstr((const char *)body, needle);
    return at != NULL ? strtod(at + strlen(needle), NULL) : -1;
}

/* Poll a metric until it reads want or `seconds` pass; its last reading. */
static double
metric_await(const struct producer *p, const char *name, double want, double seconds)
{
    uint64_t end = ts_now_ns() + (uint64_t)(seconds * 1e9);
    double v = metric(p, name);
    while (v != want && ts_now_ns() < end) {
        usleep(10000);
        v = metric(p, name);
    }
    return v;
}

/* A legitimate consumer fetches and verifies every entry over the stream. */
static void
legit_consumer_verifies_all(const struct producer *p)
{
    char cfg[512];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_consumer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu, \"ec_enable_nixl\": true, "
             "\"transport\": \"tcp\", \"prefault\": false}}",
             (unsigned long long)(p->n * p->tokens * BLOCK + (1u << 20)));
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, STDOUT_FILENO);
        execl(ECT_CLI_PATH, "ectier", "consumer", "--config", cfg, "--model", "m", "--hidden",
              HIDDEN, "--dtype", "bf16", "--engine-version", "0.11.0", "--params", p->params_path,
              "--verify-pattern", (char *)NULL);
        _exit(127);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "a legitimate consumer could not fetch and verify every entry (status %d)", st);
}

/* ---- the attacker's own control-plane client ------------------------------------------ */

struct grant {
    int status;
    size_t n_blocks;
    unsigned data_port;
    uint8_t token[TOKEN_LEN];
    uint8_t desc[64];
    size_t desc_len;
};

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

/* Ask for a grant of hash under session with our own DEALER; decode the
 * ack ourselves, offer and descriptor included. */
static struct grant
ask(void *dealer, const char *hash, const char *session)
{
    char compat[65];
    CHECK_OK(ect__compat_hash("0.11.0", "m", "torch.bfloat16", BLOCK, compat));
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
    struct grant g = {.status = -1};
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
            CHECK(v->via.bin.size >= TOKEN_LEN && v->via.bin.size <= sizeof(g.desc));
            memcpy(g.desc, v->via.bin.ptr, v->via.bin.size);
            g.desc_len = v->via.bin.size;
            memcpy(g.token, v->via.bin.ptr + v->via.bin.size - TOKEN_LEN, TOKEN_LEN);
        } else if (key_is(k, "agent_metadata") && v->type == MSGPACK_OBJECT_BIN) {
            /* "ECTA" u32 version, 16-byte instance, u32 count, entries. */
            const uint8_t *b = (const uint8_t *)v->via.bin.ptr;
            size_t len = v->via.bin.size, at = 28;
            while (at + 8 <= len) {
                uint32_t kind = get_u32(b + at), elen = get_u32(b + at + 4);
                if (kind == 1 && elen == 4)
                    g.data_port = get_u32(b + at + 8);
                at += 8 + elen;
            }
        }
    }
    msgpack_unpacked_destroy(&u);
    return g;
}

struct dealer {
    void *ctx, *sock;
};

static void
dealer_open(struct dealer *d, unsigned port)
{
    d->ctx = zmq_ctx_new();
    d->sock = zmq_socket(d->ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d->sock, ZMQ_LINGER, &zero, sizeof(zero));
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", port);
    CHECK(zmq_connect(d->sock, ep) == 0);
}

static void
dealer_close(struct dealer *d)
{
    zmq_close(d->sock);
    zmq_ctx_term(d->ctx);
}

/* ---- the attacker's own data-stream client -------------------------------------------- */

/* A request as proto/stream.h lays it out, of any version: version 2
 * carries u32 stripe and u32 stripes at 40 and its strings from 48 on,
 * whatever numbers the attacker puts there. */
static size_t
stream_request_v(uint8_t *out, uint32_t version, const char *session, const char *hash,
                 const uint8_t *token, uint64_t expect, uint32_t stripe, uint32_t stripes)
{
    size_t sl = strlen(session), hl = strlen(hash), at = 40;
    memcpy(out, "ECTR", 4);
    put_u32(out + 4, version);
    put_u32(out + 8, (uint32_t)sl);
    put_u32(out + 12, (uint32_t)hl);
    put_u64(out + 16, expect);
    memcpy(out + 24, token, TOKEN_LEN);
    if (version == 2) {
        put_u32(out + 40, stripe);
        put_u32(out + 44, stripes);
        at = 48;
    }
    memcpy(out + at, session, sl);
    memcpy(out + at + sl, hash, hl);
    return at + sl + hl;
}

/* The whole grant (version 1). */
static size_t
stream_request(uint8_t *out, const char *session, const char *hash, const uint8_t *token,
               uint64_t expect)
{
    return stream_request_v(out, 1, session, hash, token, expect, 0, 0);
}

struct answer {
    size_t got;         /* bytes received in all */
    uint32_t status;    /* from the 16-byte header, when one came */
    uint64_t announced; /* its payload length */
    int closed;         /* the producer closed the connection */
};

/* Send raw bytes on a fresh connection and collect what comes back. */
static struct answer
stream_raw(unsigned port, const uint8_t *bytes, size_t len, uint8_t *buf, size_t cap,
           int silence_ms)
{
    int fd = tcp_connect(port);
    if (len > 0)
        CHECK(send(fd, bytes, len, MSG_NOSIGNAL) == (ssize_t)len);
    struct answer a = {0};
    a.got = read_until_eof(fd, buf, cap, silence_ms, &a.closed);
    if (a.got >= 16 && memcmp(buf, "ECTS", 4) == 0) {
        a.status = get_u32(buf + 4);
        a.announced = get_u64(buf + 8);
    }
    close(fd);
    return a;
}

static struct answer
stream_ask(unsigned port, const char *session, const char *hash, const uint8_t *token,
           uint64_t expect, uint8_t *buf, size_t cap)
{
    uint8_t req[8300];
    size_t len = stream_request(req, session, hash, token, expect);
    return stream_raw(port, req, len, buf, cap, 3000);
}

/* Connect (rcvbuf as tcp_connect_rcvbuf) and ask for stripe `stripe` of
 * `stripes` (version 2).  The connection. */
static int
stripe_send(unsigned port, int rcvbuf, const char *session, const char *hash, const uint8_t *token,
            uint64_t expect, uint32_t stripe, uint32_t stripes)
{
    uint8_t req[8300];
    size_t len = stream_request_v(req, 2, session, hash, token, expect, stripe, stripes);
    int fd = tcp_connect_rcvbuf(port, rcvbuf);
    CHECK(send(fd, req, len, MSG_NOSIGNAL) == (ssize_t)len);
    return fd;
}

/* The answer on fd, which is closed: the header; when OK, exactly the
 * announced payload (into buf + 16) and a look for any byte beyond it
 * (the producer sends none: the connection then waits for a next
 * request); when refused, everything until the producer hangs up. */
static struct answer
stripe_recv(int fd, uint8_t *buf, size_t cap)
{
    struct answer a = {0};
    CHECK(cap >= 16);
    a.got = read_exact(fd, buf, 16, 10000, &a.closed);
    if (a.got == 16 && memcmp(buf, "ECTS", 4) == 0) {
        a.status = get_u32(buf + 4);
        a.announced = get_u64(buf + 8);
    }
    if (a.got == 16 && a.status == 0 && a.announced > 0) {
        CHECK_MSG(a.announced <= cap - 16, "announced %llu bytes", (unsigned long long)a.announced);
        a.got += read_exact(fd, buf + 16, (size_t)a.announced, 10000, &a.closed);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        uint8_t extra[4096];
        ssize_t n;
        if (!a.closed && poll(&p, 1, 200) == 1 && (n = recv(fd, extra, sizeof(extra), 0)) >= 0) {
            a.got += (size_t)n;
            a.closed = n == 0;
        }
    } else if (!a.closed) {
        a.got += read_until_eof(fd, buf + a.got, cap - a.got, 3000, &a.closed);
    }
    close(fd);
    return a;
}

static struct answer
stripe_ask(unsigned port, const char *session, const char *hash, const uint8_t *token,
           uint64_t expect, uint32_t stripe, uint32_t stripes, uint8_t *buf, size_t cap)
{
    return stripe_recv(stripe_send(port, 0, session, hash, token, expect, stripe, stripes), buf,
                       cap);
}

/* Refused: a bare 16-byte header with that status, then the connection
 * closed; no payload byte. */
static void
check_refused(const struct answer *a, uint32_t status)
{
    CHECK_EQ_U64(a->got, 16);
    CHECK_EQ_U64(a->status, status);
    CHECK_EQ_U64(a->announced, 0);
    CHECK(a->closed);
}

/* ---- the data stream ---------------------------------------------------------------- */

static void
test_stream_gives_exactly_the_granted_entry_and_nothing_else(void)
{
    struct producer p;
    spawn_producer(&p, 4, 16);
    const uint64_t size = 16 * BLOCK;
    struct dealer d;
    dealer_open(&d, p.ctl_port);
    struct grant g0 = ask(d.sock, p.hashes[0], "atk");
    CHECK_EQ_INT(g0.status, ECT_XFER_OK);
    CHECK_EQ_U64(g0.n_blocks, 16);
    CHECK(g0.data_port != 0);
    static uint8_t buf[1 << 20];
    unsigned denied = 0;

    /* Entry 1 with entry 0's token, a forged token, an all-zero token,
     * the right token under another session. */
    struct answer a =
        stream_ask(g0.data_port, "atk", p.hashes[1], g0.token, size, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    uint8_t forged[TOKEN_LEN];
    memcpy(forged, g0.token, TOKEN_LEN);
    forged[7] ^= 0x40;
    a = stream_ask(g0.data_port, "atk", p.hashes[0], forged, size, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    uint8_t zero[TOKEN_LEN] = {0};
    a = stream_ask(g0.data_port, "atk", p.hashes[0], zero, size, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    a = stream_ask(g0.data_port, "other", p.hashes[0], g0.token, size, buf, sizeof(buf));
    check_refused(&a, 1), denied++;

    /* The grant itself: exactly its entry's bytes, the test pattern. */
    a = stream_ask(g0.data_port, "atk", p.hashes[0], g0.token, size, buf, sizeof(buf));
    CHECK_EQ_U64(a.status, 0);
    CHECK_EQ_U64(a.announced, size);
    CHECK_EQ_U64(a.got, 16 + size);
    static uint8_t want[16 * BLOCK];
    ect_pattern_fill(p.hashes[0], want, size);
    CHECK(memcmp(buf + 16, want, size) == 0);
    /* Replayed: nothing. */
    a = stream_ask(g0.data_port, "atk", p.hashes[0], g0.token, size, buf, sizeof(buf));
    check_refused(&a, 1), denied++;

    /* Asking for more (or fewer) bytes than the grant: refused, and the
     * grant is used up. */
    struct grant g2 = ask(d.sock, p.hashes[2], "atk");
    CHECK_EQ_INT(g2.status, ECT_XFER_OK);
    a = stream_ask(g0.data_port, "atk", p.hashes[2], g2.token, size + BLOCK, buf, sizeof(buf));
    check_refused(&a, 2), denied++;
    a = stream_ask(g0.data_port, "atk", p.hashes[2], g2.token, size, buf, sizeof(buf));
    check_refused(&a, 1), denied++;

    /* Malformed: not our protocol, absurd lengths, an unknown version, a
     * NUL in a name: the connection is cut without a byte. */
    unsigned bad = 0;
    const char http[] = "GET / HTTP/1.0\r\n\r\n....................................";
    a = stream_raw(g0.data_port, (const uint8_t *)http, sizeof(http) - 1, buf, sizeof(buf), 3000);
    CHECK_EQ_U64(a.got, 0);
    CHECK(a.closed);
    bad++;
    uint8_t req[8300];
    size_t len = stream_request(req, "atk", p.hashes[3], zero, size);
    put_u32(req + 8, 0xffffffffu);
    a = stream_raw(g0.data_port, req, len, buf, sizeof(buf), 3000);
    CHECK_EQ_U64(a.got, 0);
    CHECK(a.closed);
    bad++;
    len = stream_request(req, "atk", p.hashes[3], zero, size);
    put_u32(req + 4, 9);
    a = stream_raw(g0.data_port, req, len, buf, sizeof(buf), 3000);
    CHECK_EQ_U64(a.got, 0);
    bad++;
    len = stream_request(req, "a\x01k", p.hashes[3], zero, size);
    req[41] = '\0';
    a = stream_raw(g0.data_port, req, len, buf, sizeof(buf), 3000);
    CHECK_EQ_U64(a.got, 0);
    bad++;
    /* Half a request, then silence: the producer hangs up on its own. */
    uint64_t t0 = ts_now_ns();
    a = stream_raw(g0.data_port, req, 10, buf, sizeof(buf), 9000);
    double held = (double)(ts_now_ns() - t0) / 1e9;
    CHECK(a.closed && a.got == 0);
    CHECK_MSG(held < 8.0, "a silent half request held a connection %.1f s", held);

    CHECK(producer_alive(&p));
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_served_total"), 1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_denied_total"), denied);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bad_requests_total"), bad);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_timeouts_total"), 1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bytes_total"), size);
    /* Streamed and refused grants are over; only none remain. */
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 0);
    dealer_close(&d);
    legit_consumer_verifies_all(&p);
    stop_producer(&p);
}

/* ---- the striped data stream ---------------------------------------------------------- */

/* Stripe `stripe` of `stripes` of a payload of `blocks` blocks, as
 * proto/stream.h words it for the shares this file asks for: equal shares,
 * in entry order.  The byte offset of the share, and its length. */
static uint64_t
share_of(uint64_t blocks, uint32_t stripe, uint32_t stripes, uint64_t *len_p)
{
    CHECK(blocks % stripes == 0);
    *len_p = blocks / stripes * BLOCK;
    return stripe * *len_p;
}

/* OK with exactly the share's bytes of the entry (want holds its pattern),
 * and nothing after them. */
static void
check_share(const struct answer *a, const uint8_t *buf, const uint8_t *want, uint64_t blocks,
            uint32_t stripe, uint32_t stripes)
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
    struct producer p;
    spawn_producer_with(&p, 4, 16, "\"read_timeout_s\": 60, \"producer_pin_lease_s\": 600");
    const uint64_t size = 16 * BLOCK, half = 8 * BLOCK;
    struct dealer d;
    dealer_open(&d, p.ctl_port);
    struct grant g0 = ask(d.sock, p.hashes[0], "atk");
    CHECK_EQ_INT(g0.status, ECT_XFER_OK);
    CHECK_EQ_U64(g0.n_blocks, 16);
    CHECK(g0.data_port != 0);
    const unsigned port = g0.data_port;
    const char *h0 = p.hashes[0];
    static uint8_t buf[1 << 20], want[16 * BLOCK];
    ect_pattern_fill(h0, want, size);
    unsigned denied = 0;
    uint64_t bytes = 0;

    /* Stripe 0 of 2 claims the grant: exactly the entry's first half. */
    struct answer a = stripe_ask(port, "atk", h0, g0.token, size, 0, 2, buf, sizeof(buf));
    check_share(&a, buf, want, 16, 0, 2);
    bytes += half;
    /* The group keeps the grant (and its pin) for the stripe still to come. */
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_pins"), 1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 1);

    /* Disagreeing with the group: the stripe already taken, another stripe
     * count, another size (the whole grant's plus a block, the stripe's
     * own), a forged token, another session, the whole grant unstriped. */
    a = stripe_ask(port, "atk", h0, g0.token, size, 0, 2, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    a = stripe_ask(port, "atk", h0, g0.token, size, 1, 3, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    a = stripe_ask(port, "atk", h0, g0.token, size + BLOCK, 1, 2, buf, sizeof(buf));
    check_refused(&a, 2), denied++;
    a = stripe_ask(port, "atk", h0, g0.token, half, 1, 2, buf, sizeof(buf));
    check_refused(&a, 2), denied++;
    uint8_t forged[TOKEN_LEN];
    memcpy(forged, g0.token, TOKEN_LEN);
    forged[TOKEN_LEN - 1] ^= 0x01;
    a = stripe_ask(port, "atk", h0, forged, size, 1, 2, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    a = stripe_ask(port, "other", h0, g0.token, size, 1, 2, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    a = stream_ask(port, "atk", h0, g0.token, size, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_pins"), 1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_served_total"), 0);

    /* None of that touched the group: stripe 1 of 2 gets exactly the second
     * half, and the grant is served, once, and its pin released. */
    a = stripe_ask(port, "atk", h0, g0.token, size, 1, 2, buf, sizeof(buf));
    check_share(&a, buf, want, 16, 1, 2);
    bytes += half;
    CHECK_EQ_U64((uint64_t)metric_await(&p, "ectier_pins", 0, 20), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_served_total"), 1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 0);

    /* Used up: any stripe of it, in any grouping, and the whole grant. */
    a = stripe_ask(port, "atk", h0, g0.token, size, 0, 2, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    a = stripe_ask(port, "atk", h0, g0.token, size, 1, 2, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    a = stripe_ask(port, "atk", h0, g0.token, size, 2, 4, buf, sizeof(buf));
    check_refused(&a, 1), denied++;
    a = stream_ask(port, "atk", h0, g0.token, size, buf, sizeof(buf));
    check_refused(&a, 1), denied++;

    /* Malformed stripe fields, with a live grant's own token: stripes 1, 0
     * and 5, a stripe equal to (or past) its stripes.  The connection is cut
     * without a byte and the grant is not touched. */
    struct grant g3 = ask(d.sock, p.hashes[3], "atk");
    CHECK_EQ_INT(g3.status, ECT_XFER_OK);
    const char *h3 = p.hashes[3];
    static const uint32_t malformed[][2] = {{0, 1}, {0, 0}, {0, 5}, {2, 2}, {4, 4}, {7, 4}};
    unsigned bad = 0;
    for (size_t i = 0; i < sizeof(malformed) / sizeof(malformed[0]); i++) {
        uint8_t req[8300];
        size_t len =
            stream_request_v(req, 2, "atk", h3, g3.token, size, malformed[i][0], malformed[i][1]);
        a = stream_raw(port, req, len, buf, sizeof(buf), 3000);
        CHECK_MSG(a.got == 0 && a.closed, "stripe %u of %u: %zu bytes back, closed %d",
                  malformed[i][0], malformed[i][1], a.got, a.closed);
        bad++;
    }
    CHECK(producer_alive(&p));
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bad_requests_total"), bad);
    /* A grant pins its entry from the ack on: g3's pin, nothing else. */
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_pins"), 1);
    /* Its four stripes (the most there may be), each once, last to first. */
    ect_pattern_fill(h3, want, size);
    for (uint32_t s = 4; s-- > 0;) {
        a = stripe_ask(port, "atk", h3, g3.token, size, s, 4, buf, sizeof(buf));
        check_share(&a, buf, want, 16, s, 4);
        bytes += 4 * BLOCK;
    }
    CHECK_EQ_U64((uint64_t)metric_await(&p, "ectier_pins", 0, 20), 0);

    CHECK(producer_alive(&p));
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_served_total"), 2);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_denied_total"), denied);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bad_requests_total"), bad);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_timeouts_total"), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_send_failures_total"), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bytes_total"), bytes);
    CHECK_EQ_U64(bytes, 2 * size);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 0);
    dealer_close(&d);
    legit_consumer_verifies_all(&p);
    stop_producer(&p);
}

static void
test_striped_stream_releases_an_incomplete_group_at_its_deadline(void)
{
    /* The group's deadline is the producer's send timeout, read_timeout_s,
     * counted from the claim: 3 s here.  The pin lease is far longer, so
     * only the deadline can release the grant. */
    const double deadline_s = 3;
    struct producer p;
    spawn_producer_with(&p, 2, 15, "\"read_timeout_s\": 3, \"producer_pin_lease_s\": 600");
    const uint64_t size = 15 * BLOCK;
    struct dealer d;
    dealer_open(&d, p.ctl_port);
    struct grant g0 = ask(d.sock, p.hashes[0], "atk");
    CHECK_EQ_INT(g0.status, ECT_XFER_OK);
    const unsigned port = g0.data_port;
    const char *h0 = p.hashes[0];
    static uint8_t buf[1 << 20], want[15 * BLOCK];
    ect_pattern_fill(h0, want, size);

    /* Stripe 0 of 3, read in full; stripes 1 and 2 never come. */
    uint64_t t0 = ts_now_ns();
    struct answer a = stripe_ask(port, "atk", h0, g0.token, size, 0, 3, buf, sizeof(buf));
    check_share(&a, buf, want, 15, 0, 3);
    double pins = metric(&p, "ectier_pins");
    double early = (double)(ts_now_ns() - t0) / 1e9;
    if (early < deadline_s) /* read before the deadline could have passed */
        CHECK_MSG(pins == 1, "the grant's pin was gone %.1f s after the claim (%.0f pins)", early,
                  pins);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_served_total"), 0);

    /* The deadline gives up on them: the grant is released, and not before. */
    CHECK_EQ_U64((uint64_t)metric_await(&p, "ectier_pins", 0, 30), 0);
    double released = (double)(ts_now_ns() - t0) / 1e9;
    CHECK_MSG(released >= deadline_s, "the pin was released %.2f s after the claim", released);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_timeouts_total"), 1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 0);

    /* Late stripes find nothing. */
    a = stripe_ask(port, "atk", h0, g0.token, size, 1, 3, buf, sizeof(buf));
    check_refused(&a, 1);
    a = stripe_ask(port, "atk", h0, g0.token, size, 2, 3, buf, sizeof(buf));
    check_refused(&a, 1);

    CHECK(producer_alive(&p));
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_served_total"), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_denied_total"), 2);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bad_requests_total"), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_timeouts_total"), 1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_send_failures_total"), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bytes_total"), 5 * BLOCK);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_pins"), 0);
    dealer_close(&d);
    legit_consumer_verifies_all(&p);
    stop_producer(&p);
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
    uint64_t tokens = (3 * stripe_min / BLOCK + 6) / 6 * 6;
    const uint64_t size = tokens * BLOCK;
    struct producer p;
    spawn_producer_with(&p, 2, tokens, "\"read_timeout_s\": 60, \"producer_pin_lease_s\": 600");
    struct dealer d;
    dealer_open(&d, p.ctl_port);
    struct grant g0 = ask(d.sock, p.hashes[0], "atk");
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
    int fd = stripe_send(port, rcvbuf, "atk", h0, g0.token, size, 0, 2);
    int eof;
    CHECK_EQ_U64(read_exact(fd, buf, 16 + peek, 10000, &eof), 16 + peek);
    CHECK(memcmp(buf, "ECTS", 4) == 0);
    CHECK_EQ_U64(get_u32(buf + 4), 0);
    CHECK_EQ_U64(get_u64(buf + 8), len0);
    CHECK(memcmp(buf + 16, want, peek) == 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_pins"), 1);
    close(fd); /* unread bytes: a reset */
    uint64_t t_cut = ts_now_ns();
    CHECK_EQ_U64((uint64_t)metric_await(&p, "ectier_data_stream_send_failures_total", 1, 30), 1);
    /* The group failed: stripe 1 may not join it (nor stripe 0 again). */
    struct answer a = stripe_ask(port, "atk", h0, g0.token, size, 1, 2, buf, size + 16);
    check_refused(&a, 1), denied++;
    a = stripe_ask(port, "atk", h0, g0.token, size, 0, 2, buf, size + 16);
    check_refused(&a, 1), denied++;
    /* No stripe is being sent: the grant goes at once, not at the deadline. */
    CHECK_EQ_U64((uint64_t)metric_await(&p, "ectier_pins", 0, 30), 0);
    double after = (double)(ts_now_ns() - t_cut) / 1e9;
    CHECK_MSG(after < 30, "the pin of a failed group was released %.1f s after the cut", after);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 0);

    /* Entry 1: stripes 0 and 1 of 3 both under way, stripe 0 cut.  While
     * stripe 1 is still being sent the failed group takes no stripe 2 and
     * keeps the pin; once stripe 1 is sent, in full, the grant goes, not
     * counted as served. */
    struct grant g1 = ask(d.sock, h1, "atk");
    CHECK_EQ_INT(g1.status, ECT_XFER_OK);
    ect_pattern_fill(h1, want, size);
    int fd0 = stripe_send(port, rcvbuf, "atk", h1, g1.token, size, 0, 3);
    CHECK_EQ_U64(read_exact(fd0, buf, 16 + peek, 10000, &eof), 16 + peek);
    CHECK_EQ_U64(get_u32(buf + 4), 0);
    CHECK(memcmp(buf + 16, want, peek) == 0);
    int fd1 = stripe_send(port, rcvbuf, "atk", h1, g1.token, size, 1, 3);
    uint64_t len1;
    share_of(tokens, 1, 3, &len1);
    CHECK_EQ_U64(read_exact(fd1, buf, 16, 10000, &eof), 16);
    CHECK_EQ_U64(get_u32(buf + 4), 0);
    CHECK_EQ_U64(get_u64(buf + 8), len1);
    close(fd0);
    t_cut = ts_now_ns();
    CHECK_EQ_U64((uint64_t)metric_await(&p, "ectier_data_stream_send_failures_total", 2, 30), 2);
    a = stripe_ask(port, "atk", h1, g1.token, size, 2, 3, buf, size + 16);
    check_refused(&a, 1), denied++;
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_pins"), 1);
    /* The rest of stripe 1's answer (its header came before). */
    a = (struct answer){.status = 0, .announced = len1};
    a.got = 16 + read_exact(fd1, buf + 16, (size_t)len1, 10000, &a.closed);
    close(fd1);
    check_share(&a, buf, want, tokens, 1, 3);
    CHECK_EQ_U64((uint64_t)metric_await(&p, "ectier_pins", 0, 30), 0);
    after = (double)(ts_now_ns() - t_cut) / 1e9;
    CHECK_MSG(after < 30, "the pin of a failed group was released %.1f s after the cut", after);

    CHECK(producer_alive(&p));
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_served_total"), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_streams_denied_total"), denied);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bad_requests_total"), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_timeouts_total"), 0);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_send_failures_total"), 2);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_data_stream_bytes_total"), len1);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 0);
    free(want);
    free(buf);
    dealer_close(&d);
    legit_consumer_verifies_all(&p);
    stop_producer(&p);
}

/* ---- ports and libraries -------------------------------------------------------------- */

/* Socket inodes of pid's descriptors. */
static size_t
socket_inodes(pid_t pid, unsigned long *out, size_t cap)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < cap) {
        char path[320], link[128];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        ssize_t l = readlink(path, link, sizeof(link) - 1);
        if (l <= 0)
            continue;
        link[l] = '\0';
        unsigned long ino;
        if (sscanf(link, "socket:[%lu]", &ino) == 1)
            out[n++] = ino;
    }
    closedir(d);
    return n;
}

/* Listening TCP sockets of pid in one /proc/net table: "addr:port" hex of
 * each into out; how many. */
static size_t
listeners(pid_t pid, const char *table, char (*out)[64], size_t cap)
{
    unsigned long inodes[512];
    size_t n_ino = socket_inodes(pid, inodes, 512);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/net/%s", (int)pid, table);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char line[512];
    size_t n = 0;
    CHECK(fgets(line, sizeof(line), f) != NULL); /* header */
    while (fgets(line, sizeof(line), f) != NULL && n < cap) {
        char local[64], remote[64], state[8];
        unsigned long ino = 0;
        if (sscanf(line, "%*d: %63s %63s %7s %*s %*s %*s %*s %*s %lu", local, remote, state,
                   &ino) != 4)
            continue;
        if (strcmp(state, "0A") != 0) /* TCP_LISTEN */
            continue;
        for (size_t i = 0; i < n_ino; i++)
            if (inodes[i] == ino)
                snprintf(out[n++], 64, "%s", local);
    }
    fclose(f);
    return n;
}

static void
test_producer_listens_only_on_documented_ports_and_loads_no_ucx(void)
{
    struct producer p;
    spawn_producer(&p, 1, 4);
    struct dealer d;
    dealer_open(&d, p.ctl_port);
    struct grant g = ask(d.sock, p.hashes[0], "s");
    CHECK_EQ_INT(g.status, ECT_XFER_OK);
    dealer_close(&d);
    char v4[16][64], v6[16][64];
    size_t n4 = listeners(p.pid, "tcp", v4, 16), n6 = listeners(p.pid, "tcp6", v6, 16);
    CHECK_EQ_U64(n6, 0);
    CHECK_EQ_U64(n4, 3);
    unsigned want[3] = {p.ctl_port, g.data_port, p.metrics_port};
    for (size_t w = 0; w < 3; w++) {
        char expect[64];
        snprintf(expect, sizeof(expect), "0100007F:%04X", want[w]);
        int found = 0;
        for (size_t i = 0; i < n4; i++)
            found |= strcmp(v4[i], expect) == 0;
        CHECK_MSG(found, "no listener %s (the port bound to 127.0.0.1)", expect);
    }
    /* No UCX in the producer at all: nothing that could serve a get. */
    char maps[64];
    snprintf(maps, sizeof(maps), "/proc/%d/maps", (int)p.pid);
    FILE *f = fopen(maps, "r");
    CHECK(f != NULL);
    char line[1024];
    while (fgets(line, sizeof(line), f) != NULL)
        CHECK_MSG(strstr(line, "libucp") == NULL && strstr(line, "libuct") == NULL &&
                      strstr(line, "libucs") == NULL,
                  "the producer maps %s", line);
    fclose(f);
    stop_producer(&p);
}

/* ---- UCX ------------------------------------------------------------------------------ */

static void
ucx_err(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    *(ucs_status_t *)arg = status;
}

/* Wait for a request (bounded); its final status, or UCS_INPROGRESS. */
static ucs_status_t
ucx_wait(ucp_worker_h w, ucs_status_ptr_t req, double seconds)
{
    if (req == NULL)
        return UCS_OK;
    if (UCS_PTR_IS_ERR(req))
        return UCS_PTR_STATUS(req);
    uint64_t end = ts_now_ns() + (uint64_t)(seconds * 1e9);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && ts_now_ns() < end)
        ucp_worker_progress(w);
    ucs_status_t st = ucp_request_check_status(req);
    if (st == UCS_INPROGRESS)
        ucp_request_cancel(w, req);
    ucp_request_free(req);
    return st;
}

/* In a child process: aim every one-sided operation a UCX peer could at
 * one port of the producer.  Exit status: 0 when none completed, 1 when
 * one did, 2 when the attack could not even be set up.  (UCX itself may
 * abort the attacker when the other side does not speak UCX: that is the
 * attacker's crash, and still nothing was read or written.) */
static void
ucx_attack_port(unsigned target, const char *tls)
{
    unsigned mine = free_port();
    char range[32];
    snprintf(range, sizeof(range), "%u-%u", mine, mine);
    setenv("UCX_TCP_PORT_RANGE", range, 1);
    if (tls != NULL)
        setenv("UCX_TLS", tls, 1);
    else
        unsetenv("UCX_TLS");
    setenv("UCX_NET_DEVICES", "lo", 1); /* loopback only, like every test */
    ucp_config_t *config;
    CHECK(ucp_config_read(NULL, NULL, &config) == UCS_OK);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                           .features = UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | UCP_FEATURE_AM};
    ucp_context_h ctx;
    CHECK(ucp_init(&params, config, &ctx) == UCS_OK);
    ucp_config_release(config);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h worker;
    CHECK(ucp_worker_create(ctx, &wp, &worker) == UCS_OK);
    /* A key of our own memory: a foreign key to the producer. */
    static uint8_t local[4096];
    ucp_mem_map_params_t mp = {.field_mask =
                                   UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = local,
                               .length = sizeof(local)};
    ucp_mem_h memh;
    CHECK(ucp_mem_map(ctx, &mp, &memh) == UCS_OK);
    void *rkey_buf;
    size_t rkey_len;
    CHECK(ucp_rkey_pack(ctx, memh, &rkey_buf, &rkey_len) == UCS_OK);
    ucp_address_t *addr;
    size_t addr_len;
    CHECK(ucp_worker_get_address(worker, &addr, &addr_len) == UCS_OK);
    /* Synthesise the producer's "worker addresses": ours, with our tcp
     * port replaced by each port the producer listens on. */
    uint8_t port_be[2] = {(uint8_t)(mine >> 8), (uint8_t)mine};
    int patched_any = 0;
    unsigned attempts = 0, completed_ok = 0;
    uint64_t targets_addr[] = {0x1000, 0x400000, 0x7f0000000000ull, (uint64_t)(uintptr_t)local};
    for (int t = 0; t < 1; t++) {
        uint8_t *synth = malloc(addr_len);
        memcpy(synth, addr, addr_len);
        int patched = 0;
        for (size_t i = 0; i + 1 < addr_len; i++)
            if (synth[i] == port_be[0] && synth[i + 1] == port_be[1]) {
                synth[i] = (uint8_t)(target >> 8);
                synth[i + 1] = (uint8_t)target;
                patched = 1;
            }
        patched_any |= patched;
        ucs_status_t ep_status = UCS_OK;
        ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                                   UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                                   UCP_EP_PARAM_FIELD_ERR_HANDLER,
                                     .address = (ucp_address_t *)synth,
                                     .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                                     .err_handler = {.cb = ucx_err, .arg = &ep_status}};
        ucp_ep_h ep;
        if (!patched || ucp_ep_create(worker, &ep_params, &ep) != UCS_OK) {
            free(synth);
            continue;
        }
        ucp_rkey_h rkey = NULL;
        uint8_t zero_key[256] = {0};
        for (int k = 0; k < 2; k++) {
            ucp_rkey_h rk = NULL;
            if (ucp_ep_rkey_unpack(ep, k == 0 ? rkey_buf : zero_key, &rk) != UCS_OK)
                continue; /* an all-zero key may not even unpack: nothing to send */
            for (size_t a = 0; a < sizeof(targets_addr) / sizeof(targets_addr[0]); a++) {
                uint8_t out[64];
                ucp_request_param_t rp = {.op_attr_mask = 0};
                attempts++;
                completed_ok += ucx_wait(worker, ucp_get_nbx(ep, out, 8, targets_addr[a], rk, &rp),
                                         0.5) == UCS_OK;
                memset(out, 0x66, sizeof(out));
                attempts++;
                completed_ok += ucx_wait(worker, ucp_put_nbx(ep, out, 64, targets_addr[a], rk, &rp),
                                         0.5) == UCS_OK;
            }
            rkey = rk;
            ucp_rkey_destroy(rkey);
        }
        ucp_request_param_t cp = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                  .flags = UCP_EP_CLOSE_FLAG_FORCE};
        ucx_wait(worker, ucp_ep_close_nbx(ep, &cp), 2.0);
        free(synth);
    }
    ucp_worker_release_address(worker, addr);
    ucp_rkey_buffer_release(rkey_buf);
    ucp_mem_unmap(ctx, memh);
    ucp_worker_destroy(worker);
    ucp_cleanup(ctx);
    if (completed_ok != 0)
        fprintf(stderr, "%u of %u one-sided operations on port %u completed\n", completed_ok,
                attempts, target);
    _exit(!patched_any ? 2 : completed_ok != 0 ? 1 : 0);
}

/* Attack each of the producer's ports from its own attacker process. */
static void
ucx_attack(const struct producer *p, unsigned data_port, const char *tls)
{
    unsigned targets[3] = {p->ctl_port, data_port, p->metrics_port};
    unsigned self_aborted = 0;
    for (int t = 0; t < 3; t++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, STDERR_FILENO); /* UCX's own abort report */
            ucx_attack_port(targets[t], tls);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK_MSG(!(WIFEXITED(st) && WEXITSTATUS(st) == 1),
                  "a one-sided operation on the producer's port %u completed", targets[t]);
        CHECK_MSG(!(WIFEXITED(st) && WEXITSTATUS(st) == 2),
                  "could not synthesise an address for port %u", targets[t]);
        self_aborted += WIFSIGNALED(st);
        CHECK_MSG(producer_alive(p), "the producer died attacked on port %u", targets[t]);
    }
    printf("  (UCX aborted the attacker itself on %u of 3 ports: they do not speak UCX)\n",
           self_aborted);
}

static void
ucx_case(const char *tls)
{
    struct producer p;
    spawn_producer(&p, 3, 16);
    struct dealer d;
    dealer_open(&d, p.ctl_port);
    struct grant g = ask(d.sock, p.hashes[0], "s");
    CHECK_EQ_INT(g.status, ECT_XFER_OK);
    ucx_attack(&p, g.data_port, tls);
    dealer_close(&d);
    CHECK(producer_alive(&p));
    legit_consumer_verifies_all(&p);
    stop_producer(&p);
}

static void
test_ucx_peer_reaches_nothing_over_ucx_tcp(void)
{
    ucx_case("tcp");
}

static void
test_ucx_peer_reaches_nothing_over_the_default_transports(void)
{
    ucx_case(NULL);
}

/* ---- consumers killed mid-read ------------------------------------------------------------ */

static void
test_consumers_killed_mid_read_never_take_the_producer_down(void)
{
    /* 8 entries of 16 MiB (2340 blocks): every consumer asks for all 8 at
     * once, and each stream is longer than what the sender's and the
     * receiver's socket buffers hold (4 and 6 MiB at most by default), so a
     * consumer killed mid-read leaves the producer with bytes still to send
     * however fast it hands them to the kernel. */
    enum { ENTRIES = 8, TOKENS = 2340 };
    struct producer p;
    spawn_producer(&p, ENTRIES, TOKENS);
    char cfg[512];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_consumer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu, \"ec_enable_nixl\": true, "
             "\"transport\": \"tcp\", \"prefault\": false}}",
             (unsigned long long)((uint64_t)ENTRIES * TOKENS * BLOCK + (1u << 20)));
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    unsigned held_at_kill = 0;
    double most_held = 0;
    const unsigned rounds = 50;
    for (unsigned round = 0; round < rounds; round++) {
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            int null = open("/dev/null", O_WRONLY);
            dup2(null, STDOUT_FILENO);
            dup2(null, STDERR_FILENO);
            execl(ECT_CLI_PATH, "ectier", "consumer", "--config", cfg, "--model", "m", "--hidden",
                  HIDDEN, "--dtype", "bf16", "--engine-version", "0.11.0", "--params",
                  p.params_path, (char *)NULL);
            _exit(127);
        }
        /* Kill it once it holds grants, a little later each time. */
        uint64_t end = ts_now_ns() + 10ull * 1000000000ull;
        while (metric(&p, "ectier_grants_outstanding") <= 0 && ts_now_ns() < end)
            usleep(500);
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        usleep((useconds_t)((seed >> 33) % 20000));
        double held = metric(&p, "ectier_grants_outstanding");
        held_at_kill += held > 0;
        most_held = held > most_held ? held : most_held;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        CHECK_MSG(producer_alive(&p), "the producer died in round %u", round);
    }
    CHECK_MSG(held_at_kill >= rounds / 2, "only %u of %u kills found grants held", held_at_kill,
              rounds);
    /* Some kills cut a stream the producer was sending. */
    double cut = metric(&p, "ectier_data_stream_send_failures_total");
    printf("  %u of %u kills with grants held (at most %.0f), %.0f streams cut mid-send\n",
           held_at_kill, rounds, most_held, cut);
    CHECK(cut > 0);
    /* Every grant of the dead comes back. */
    uint64_t end = ts_now_ns() + 15ull * 1000000000ull;
    while (metric(&p, "ectier_grants_outstanding") != 0 && ts_now_ns() < end)
        usleep(10000);
    CHECK_EQ_U64((uint64_t)metric(&p, "ectier_grants_outstanding"), 0);
    legit_consumer_verifies_all(&p);
    stop_producer(&p);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_stream_gives_exactly_the_granted_entry_and_nothing_else),
    ECT_CASE(test_striped_stream_serves_each_stripe_once_and_refuses_what_disagrees),
    ECT_CASE(test_striped_stream_releases_an_incomplete_group_at_its_deadline),
    ECT_CASE(test_striped_stream_cut_mid_payload_fails_its_group_at_once),
    ECT_CASE(test_producer_listens_only_on_documented_ports_and_loads_no_ucx),
    ECT_CASE(test_ucx_peer_reaches_nothing_over_ucx_tcp),
    ECT_CASE(test_ucx_peer_reaches_nothing_over_the_default_transports),
    ECT_CASE(test_consumers_killed_mid_read_never_take_the_producer_down),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
