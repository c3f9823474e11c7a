/*
 * Shared by the data-transport tests (test_xport.c, test_xport_peers.c):
 * a producer in its own process that opens a real region, fills it with
 * pseudo-random bytes (never zero), starts a transport server and hands its
 * offer back through a pipe, then serves until it is told to stop (or is
 * killed); and a consumer region in the test process.
 *
 * The producer keeps a small grant table of its own (the real one is in
 * src/p2p/producer.c): the test asks it over a pipe to grant blocks and gets
 * the grant's descriptor back, as a consumer gets it in an XferAck.
 *
 * A producer is the test program itself, forked AND exec'd with
 * XF_PRODUCER_ARG (each test program's main dispatches to
 * xf_producer_exec_main): a restarted producer is a fresh process, and the
 * child starts with no threads of the parent.
 *
 * Every region is named "ectt_<case pid>_<n>" by the case's own process,
 * so the TS_SHM_CASE wrapper (support/region.h) can check and clean /dev/shm
 * afterwards.
 */
#ifndef ECT_TESTS_XPORT_FIXTURE_H
#define ECT_TESTS_XPORT_FIXTURE_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>

#include <ectier/log.h>
#include <ectier/region.h>

#include "common/clock.h"
#include "p2p/transport.h"
#include "p2p/xport_internal.h"

#include "support/region.h"

/* 7168-byte blocks (1792 x 4 bytes), as an encoder row of bf16 x 3584. */
#define XF_HIDDEN 1792u
#define XF_BLOCK  (XF_HIDDEN * 4u)

/* The byte pattern of a producer: 8 bytes per word from a mix of (seed,
 * block, word), with the low bit of every byte set so no byte is zero. */
static inline uint64_t
xf_word(uint64_t seed, uint64_t block, uint64_t word)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (block + 1) * 0xBF58476D1CE4E5B9ull ^
                 (word + 1) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 29;
    return x | 0x0101010101010101ull;
}

static inline void
xf_fill_block(uint8_t *dst, uint64_t block_size, uint64_t seed, uint64_t block)
{
    for (uint64_t w = 0; w < block_size / 8; w++) {
        uint64_t v = xf_word(seed, block, w);
        memcpy(dst + 8 * w, &v, 8);
    }
}

/* Does dst hold the producer's block? */
static inline int
xf_block_matches(const uint8_t *dst, uint64_t block_size, uint64_t seed, uint64_t block)
{
    for (uint64_t w = 0; w < block_size / 8; w++) {
        uint64_t v = xf_word(seed, block, w), got;
        memcpy(&got, dst + 8 * w, 8);
        if (got != v)
            return 0;
    }
    return 1;
}

static inline void
xf_region_params(ect_region_params_t *p, const char *name, uint64_t hidden, uint64_t num_blocks)
{
    memset(p, 0, sizeof(*p));
    p->name = name;
    p->geometry = (ect_geometry_t){.hidden_dim = hidden,
                                   .dtype = ECT_DTYPE_F32,
                                   .block_size_bytes = hidden * 4,
                                   .num_blocks = num_blocks};
}

/* ---- the producer child ----------------------------------------------------------- */

/* Every grant the fixture's producer makes is in this session. */
#define XF_SESSION    "xf-session"
#define XF_MAX_GRANTS 128

struct xf_producer {
    pid_t pid;
    int cmd_fd; /* commands: 'g' grant, 'c' counters, 'q' stop */
    int reply_fd;
    int status; /* its ect__xport_server_start status */
    unsigned kinds;
    uint8_t *agent;
    size_t agent_len;
    char path[512];
    uint64_t seed;
    uint64_t block_size;
    uint64_t num_blocks;
    unsigned next_grant;
};

static inline int
xf_write_full(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline int
xf_read_full(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline int
xf_write_blob(int fd, const void *buf, size_t len)
{
    uint32_t n = (uint32_t)len;
    return xf_write_full(fd, &n, sizeof(n)) || (len && xf_write_full(fd, buf, len)) ? -1 : 0;
}

static inline uint8_t *
xf_read_blob(int fd, size_t *len_p)
{
    uint32_t n;
    ts_read_all(fd, &n, sizeof(n));
    uint8_t *b = malloc(n ? n : 1);
    CHECK(b != NULL);
    if (n)
        ts_read_all(fd, b, n);
    *len_p = n;
    return b;
}

#define XF_PRODUCER_ARG "--xport-test-producer"

/* The child's grant table: what the real producer keeps, reduced to what
 * the transport needs (runs, size, token, one stream each). */
struct xf_grant {
    char hash[64];
    uint8_t token[ECT_STREAM_TOKEN_LEN];
    ect_run_t runs[4096];
    size_t n_runs;
    uint64_t bytes;
    int claimed;
};

struct xf_table {
    pthread_mutex_t lock;
    struct xf_grant g[XF_MAX_GRANTS];
    size_t n;
    uint64_t finished_sent, finished_cut;
};

static inline ect_stream_status_t
xf_claim(void *user, const char *session, const char *hash, const uint8_t *token, uint64_t expect,
         ect_xport_grant_view_t *view_p, void **grant_p)
{
    struct xf_table *t = user;
    ect_stream_status_t st = ECT_STREAM_DENIED;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        struct xf_grant *g = &t->g[i];
        if (strcmp(session, XF_SESSION) != 0 || strcmp(hash, g->hash) != 0 || g->claimed ||
            memcmp(token, g->token, ECT_STREAM_TOKEN_LEN) != 0)
            continue;
        g->claimed = 1;
        if (expect != g->bytes) {
            st = ECT_STREAM_SIZE_MISMATCH;
            break;
        }
        *view_p = (ect_xport_grant_view_t){g->runs, g->n_runs, g->bytes};
        *grant_p = g;
        st = ECT_STREAM_OK;
        break;
    }
    pthread_mutex_unlock(&t->lock);
    return st;
}

static inline void
xf_finish(void *user, void *grant, int sent)
{
    struct xf_table *t = user;
    (void)grant;
    pthread_mutex_lock(&t->lock);
    if (sent)
        t->finished_sent++;
    else
        t->finished_cut++;
    pthread_mutex_unlock(&t->lock);
}

/* 'g': u32 n, n x u64 block ids, u32 hash_len, hash -> the descriptor blob
 * (empty when the grant cannot be made). */
static inline int
xf_child_grant(struct xf_table *t, const ect_xport_server_t *server, uint64_t block_size, int down,
               int up)
{
    uint32_t n, hl;
    uint64_t ids[4096];
    char hash[64] = "";
    if (xf_read_full(down, &n, sizeof(n)) || n > 4096 || xf_read_full(down, ids, 8ull * n) ||
        xf_read_full(down, &hl, sizeof(hl)) || hl >= sizeof(hash) || xf_read_full(down, hash, hl))
        return -1;
    uint8_t desc[ECT_XPORT_DESC_LEN];
    size_t dlen = 0;
    pthread_mutex_lock(&t->lock);
    if (server != NULL && t->n < XF_MAX_GRANTS) {
        struct xf_grant *g = &t->g[t->n];
        memset(g, 0, sizeof(*g));
        snprintf(g->hash, sizeof(g->hash), "%s", hash);
        for (uint32_t i = 0; i < n; i++) {
            if (g->n_runs > 0 &&
                g->runs[g->n_runs - 1].first + g->runs[g->n_runs - 1].count == ids[i])
                g->runs[g->n_runs - 1].count++;
            else if (g->n_runs < 4096)
                g->runs[g->n_runs++] = (ect_run_t){ids[i], 1};
        }
        g->bytes = (uint64_t)n * block_size;
        if (ect__xport_new_token(g->token) == ECT_OK) {
            if (ect__xport_server_descriptor(server, g->token, NULL, 0, desc, sizeof(desc),
                                             &dlen) == ECT_OK)
                t->n++;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return xf_write_blob(up, desc, dlen);
}

/* The producer process (argv: XF_PRODUCER_ARG up_fd down_fd region_name
 * hidden num_blocks seed serve_tcp serve_same_host).  Reports back through
 * up_fd, then answers commands until 'q' or end-of-file on down_fd. */
static inline int
xf_producer_exec_main(int argc, char **argv)
{
    if (argc != 10)
        return 2;
    int up = atoi(argv[2]), down = atoi(argv[3]);
    const char *region_name = argv[4];
    uint64_t hidden = strtoull(argv[5], NULL, 10), num_blocks = strtoull(argv[6], NULL, 10);
    uint64_t seed = strtoull(argv[7], NULL, 10);
    int serve_tcp = atoi(argv[8]), serve_same_host = atoi(argv[9]);
    ect_region_params_t rp;
    xf_region_params(&rp, region_name, hidden, num_blocks);
    ect_region_t *region = NULL;
    int st = ect_region_open(&rp, &region);
    ect_xport_server_t *server = NULL;
    static struct xf_table table;
    pthread_mutex_init(&table.lock, NULL);
    ect_xport_grant_ops_t ops = {.user = &table, .claim = xf_claim, .finish = xf_finish};
    uint64_t bs = hidden * 4;
    if (st == ECT_OK) {
        for (uint64_t b = 0; b < num_blocks; b++)
            xf_fill_block(ect_region_block_ptr(region, b), bs, seed, b);
        ect_xport_server_params_t sp = {.data = ect_region_data(region),
                                        .block_size = bs,
                                        .num_blocks = num_blocks,
                                        .region_path = ect_region_path(region),
                                        .data_offset = ect_region_data_offset(region),
                                        .bind_host = "127.0.0.1",
                                        .send_timeout_ns = 20ull * 1000 * 1000 * 1000,
                                        .grants = &ops,
                                        .serve_tcp = serve_tcp,
                                        .serve_same_host = serve_same_host};
        st = ect__xport_server_start(&sp, &server);
    }
    size_t alen = 0;
    const void *agent = st == ECT_OK ? ect__xport_server_agent_metadata(server, &alen) : NULL;
    unsigned kinds = st == ECT_OK ? ect__xport_server_kinds(server) : 0;
    const char *path = region != NULL ? ect_region_path(region) : "";
    if (xf_write_full(up, &st, sizeof(st)) || xf_write_full(up, &kinds, sizeof(kinds)) ||
        xf_write_blob(up, agent, alen) || xf_write_blob(up, path, strlen(path)))
        _exit(3);
    for (;;) {
        char c;
        if (xf_read_full(down, &c, 1) != 0 || c == 'q')
            break;
        if (c == 'g' && xf_child_grant(&table, server, bs, down, up) != 0)
            break;
        if (c == 'c') {
            ect_xport_server_counters_t k;
            ect__xport_server_counters(server, &k);
            pthread_mutex_lock(&table.lock);
            uint64_t fin[2] = {table.finished_sent, table.finished_cut};
            pthread_mutex_unlock(&table.lock);
            if (xf_write_full(up, &k, sizeof(k)) || xf_write_full(up, fin, sizeof(fin)))
                break;
        }
    }
    ect__xport_server_stop(server);
    ect_region_close(region);
    _exit(0);
}

/* Start a producer process serving a fresh region of num_blocks blocks of
 * hidden x 4 bytes named region_name (made by the caller with
 * ect_test_unique_name). */
static inline void
xf_producer_start(struct xf_producer *p, const char *region_name, uint64_t hidden,
                  uint64_t num_blocks, uint64_t seed, int serve_tcp, int serve_same_host)
{
    memset(p, 0, sizeof(*p));
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0);
    char args[7][32];
    snprintf(args[0], sizeof(args[0]), "%d", up[1]);
    snprintf(args[1], sizeof(args[1]), "%d", down[0]);
    snprintf(args[2], sizeof(args[2]), "%llu", (unsigned long long)hidden);
    snprintf(args[3], sizeof(args[3]), "%llu", (unsigned long long)num_blocks);
    snprintf(args[4], sizeof(args[4]), "%llu", (unsigned long long)seed);
    snprintf(args[5], sizeof(args[5]), "%d", serve_tcp);
    snprintf(args[6], sizeof(args[6]), "%d", serve_same_host);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        execl("/proc/self/exe", "xport-producer", XF_PRODUCER_ARG, args[0], args[1], region_name,
              args[2], args[3], args[4], args[5], args[6], (char *)NULL);
        _exit(4);
    }
    close(up[1]);
    close(down[0]);
    p->pid = pid;
    p->cmd_fd = down[1];
    p->reply_fd = up[0];
    p->seed = seed;
    p->block_size = hidden * 4;
    p->num_blocks = num_blocks;
    ts_read_all(up[0], &p->status, sizeof(p->status));
    ts_read_all(up[0], &p->kinds, sizeof(p->kinds));
    p->agent = xf_read_blob(up[0], &p->agent_len);
    size_t plen;
    uint8_t *path = xf_read_blob(up[0], &plen);
    snprintf(p->path, sizeof(p->path), "%.*s", (int)plen, (const char *)path);
    free(path);
}

/* Have the producer grant blocks remote[0..n) under a new hash (written to
 * hash, 64 bytes); desc gets the grant's descriptor (ECT_XPORT_DESC_LEN). */
static inline void
xf_grant(struct xf_producer *p, const uint64_t *remote, size_t n, char hash[64], uint8_t *desc)
{
    snprintf(hash, 64, "xf-hash-%u", p->next_grant++);
    uint32_t n32 = (uint32_t)n, hl = (uint32_t)strlen(hash);
    CHECK(n <= 4096);
    ts_write_all(p->cmd_fd, "g", 1);
    ts_write_all(p->cmd_fd, &n32, sizeof(n32));
    if (n)
        ts_write_all(p->cmd_fd, remote, 8 * n);
    ts_write_all(p->cmd_fd, &hl, sizeof(hl));
    ts_write_all(p->cmd_fd, hash, hl);
    size_t dlen;
    uint8_t *d = xf_read_blob(p->reply_fd, &dlen);
    CHECK_EQ_U64(dlen, ECT_XPORT_DESC_LEN);
    memcpy(desc, d, ECT_XPORT_DESC_LEN);
    free(d);
}

/* The producer's stream counters and its finished grants (sent, cut). */
static inline void
xf_producer_counters(struct xf_producer *p, ect_xport_server_counters_t *k, uint64_t fin[2])
{
    ts_write_all(p->cmd_fd, "c", 1);
    ts_read_all(p->reply_fd, k, sizeof(*k));
    ts_read_all(p->reply_fd, fin, 2 * sizeof(uint64_t));
}

/* The same once the producer has counted `served` streams (or 5 s passed):
 * a consumer can hold every byte of a stream a moment before the
 * producer's thread, back from its last send, counts it. */
static inline void
xf_producer_counters_after(struct xf_producer *p, uint64_t served, ect_xport_server_counters_t *k,
                           uint64_t fin[2])
{
    uint64_t deadline = ect__now_ns() + 5ull * 1000 * 1000 * 1000;
    for (;;) {
        xf_producer_counters(p, k, fin);
        if (k->streams_served >= served || ect__now_ns() >= deadline)
            return;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Tell the producer to stop and wait for it; CHECKs a clean exit. */
static inline void
xf_producer_stop(struct xf_producer *p)
{
    if (p->pid > 0) {
        ts_write_all(p->cmd_fd, "q", 1);
        close(p->cmd_fd);
        close(p->reply_fd);
        int st;
        CHECK(waitpid(p->pid, &st, 0) == p->pid);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "producer ended with status %d", st);
        p->pid = 0;
    }
    free(p->agent);
    p->agent = NULL;
}

static inline void
xf_producer_kill(struct xf_producer *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        int st;
        waitpid(p->pid, &st, 0);
        close(p->cmd_fd);
        close(p->reply_fd);
        p->pid = 0;
    }
}

/* ---- the consumer ------------------------------------------------------------------- */

struct xf_consumer {
    ect_region_t *region;
    ect_xport_client_t *client;
    uint64_t block_size;
    uint64_t num_blocks;
};

/* Background byte of our own blocks: never equal to any producer byte
 * pattern by accident over a whole block. */
#define XF_LOCAL_SEED 0xC0FFEEull

static inline void
xf_consumer_open(struct xf_consumer *c, const char *region_name, uint64_t hidden,
                 uint64_t num_blocks, ect_transport_t prefer, const char *region_dir)
{
    memset(c, 0, sizeof(*c));
    ect_region_params_t rp;
    xf_region_params(&rp, region_name, hidden, num_blocks);
    CHECK_OK(ect_region_open(&rp, &c->region));
    c->block_size = ect_region_geometry(c->region)->block_size_bytes;
    c->num_blocks = num_blocks;
    for (uint64_t b = 0; b < num_blocks; b++)
        xf_fill_block(ect_region_block_ptr(c->region, b), c->block_size, XF_LOCAL_SEED, b);
    ect_xport_client_params_t cp = {.data = ect_region_data(c->region),
                                    .block_size = c->block_size,
                                    .num_blocks = num_blocks,
                                    .prefer = prefer,
                                    .region_dir = region_dir};
    CHECK_OK(ect__xport_client_create(&cp, &c->client));
}

static inline void
xf_consumer_close(struct xf_consumer *c)
{
    ect__xport_client_destroy(c->client);
    ect_region_close(c->region);
}

/* Start a read of the blocks remote[0..n) of p (granted for the occasion)
 * into runs, under the peer key 127.0.0.1:key_port, with the given offer
 * (p's own unless altered).  desc_out (optional) gets the grant's
 * descriptor. */
static inline ect_status_t
xf_read_start(struct xf_consumer *c, struct xf_producer *p, uint16_t key_port, const uint8_t *agent,
              size_t agent_len, const uint64_t *remote, size_t n, const ect_run_t *runs,
              size_t n_runs, ect_xport_read_t **r_p, ect_xport_kind_t *kind_p)
{
    char hash[64];
    uint8_t desc[ECT_XPORT_DESC_LEN];
    xf_grant(p, remote, n, hash, desc);
    ect_xport_read_params_t rp = {.host = "127.0.0.1",
                                  .port = key_port,
                                  .session_id = XF_SESSION,
                                  .mm_hash = hash,
                                  .agent_metadata = agent,
                                  .agent_len = agent_len,
                                  .mem_descriptor = desc,
                                  .desc_len = sizeof(desc),
                                  .remote_blocks = remote,
                                  .n_remote = n,
                                  .local_runs = runs,
                                  .n_local_runs = n_runs};
    return ect__xport_read_start(c->client, &rp, r_p, kind_p);
}

/* Poll a read until it is no longer PENDING or timeout_s passes. */
static inline ect_xport_read_state_t
xf_wait(struct xf_consumer *c, ect_xport_read_t *r, double timeout_s)
{
    uint64_t deadline = ect__now_ns() + (uint64_t)(timeout_s * 1e9);
    ect_xport_read_state_t s;
    while ((s = ect__xport_read_poll(c->client, r)) == ECT_XPORT_READ_PENDING &&
           ect__now_ns() < deadline) {
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
    return s;
}

/* Every local block named by runs holds the producer's block named by the
 * matching remote id, and every other local block still holds its own
 * background bytes. */
static inline void
xf_check_landed(const struct xf_consumer *c, const struct xf_producer *p, const uint64_t *remote,
                size_t n_remote, const ect_run_t *runs, size_t n_runs)
{
    uint8_t *written = calloc(c->num_blocks, 1);
    CHECK(written != NULL);
    size_t k = 0;
    for (size_t j = 0; j < n_runs; j++)
        for (uint64_t b = 0; b < runs[j].count; b++, k++) {
            uint64_t local = runs[j].first + b;
            CHECK(k < n_remote);
            CHECK_MSG(xf_block_matches(ect_region_block_ptr(c->region, local), c->block_size,
                                       p->seed, remote[k]),
                      "local block %llu does not hold remote block %llu", (unsigned long long)local,
                      (unsigned long long)remote[k]);
            written[local] = 1;
        }
    CHECK_EQ_U64(k, n_remote);
    for (uint64_t b = 0; b < c->num_blocks; b++)
        if (!written[b])
            CHECK_MSG(xf_block_matches(ect_region_block_ptr(c->region, b), c->block_size,
                                       XF_LOCAL_SEED, b),
                      "untouched local block %llu changed", (unsigned long long)b);
    free(written);
}

/* Every local block still holds its background bytes. */
static inline void
xf_check_untouched(const struct xf_consumer *c)
{
    for (uint64_t b = 0; b < c->num_blocks; b++)
        CHECK_MSG(
            xf_block_matches(ect_region_block_ptr(c->region, b), c->block_size, XF_LOCAL_SEED, b),
            "local block %llu was written", (unsigned long long)b);
}

/* ---- log capture ------------------------------------------------------------------------ */

struct xf_log {
    pthread_mutex_t lock;
    char text[16384];
    size_t len;
};

static inline void
xf_log_sink(ect_log_level_t level, const char *message, void *user)
{
    (void)level;
    struct xf_log *l = user;
    pthread_mutex_lock(&l->lock);
    int n = snprintf(l->text + l->len, sizeof(l->text) - l->len, "%s\n", message);
    if (n > 0 && l->len + (size_t)n < sizeof(l->text))
        l->len += (size_t)n;
    pthread_mutex_unlock(&l->lock);
}

static inline void
xf_log_capture(struct xf_log *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
    ect_log_set_sink(xf_log_sink, l);
    ect_log_set_level(ECT_LOG_INFO);
}

/* How often needle occurs in the captured text. */
static inline unsigned
xf_log_count(struct xf_log *l, const char *needle)
{
    unsigned n = 0;
    pthread_mutex_lock(&l->lock);
    for (const char *s = l->text; (s = strstr(s, needle)) != NULL; s += strlen(needle))
        n++;
    pthread_mutex_unlock(&l->lock);
    return n;
}

#endif /* ECT_TESTS_XPORT_FIXTURE_H */
