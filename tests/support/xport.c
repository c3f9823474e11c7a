/*
 * A producer process serving a real region through the data transport, and
 * the consumer beside the test (see xport.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ectier/log.h>

#include "cli_io.h"
#include "common/clock.h"
#include "support/xport.h"

#define MAX_GRANTS 128

/* Background byte of our own blocks: never equal to any producer byte
 * pattern by accident over a whole block. */
#define LOCAL_SEED 0xC0FFEEull

/* The byte pattern of a producer: 8 bytes per word from a mix of (seed,
 * block, word), with the low bit of every byte set so no byte is zero. */
static uint64_t
pattern_word(uint64_t seed, uint64_t block, uint64_t word)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull ^ (block + 1) * 0xBF58476D1CE4E5B9ull ^
                 (word + 1) * 0x94D049BB133111EBull;
    x ^= x >> 31;
    x *= 0xD6E8FEB86659FD93ull;
    x ^= x >> 29;
    return x | 0x0101010101010101ull;
}

static void
fill_block(uint8_t *dst, uint64_t block_size, uint64_t seed, uint64_t block)
{
    for (uint64_t w = 0; w < block_size / 8; w++) {
        uint64_t v = pattern_word(seed, block, w);
        memcpy(dst + 8 * w, &v, 8);
    }
}

int
ts_xport_block_matches(const uint8_t *dst, uint64_t block_size, uint64_t seed, uint64_t block)
{
    for (uint64_t w = 0; w < block_size / 8; w++) {
        uint64_t v = pattern_word(seed, block, w), got;
        memcpy(&got, dst + 8 * w, 8);
        if (got != v)
            return 0;
    }
    return 1;
}

void
ts_xport_region_params(ect_region_params_t *p, const char *name, uint64_t hidden,
                       uint64_t num_blocks)
{
    memset(p, 0, sizeof(*p));
    p->name = name;
    p->geometry = (ect_geometry_t){.hidden_dim = hidden,
                                   .dtype = ECT_DTYPE_F32,
                                   .block_size_bytes = hidden * 4,
                                   .num_blocks = num_blocks};
}

static int
write_blob(int fd, const void *buf, size_t len)
{
    uint32_t n = (uint32_t)len;
    return ect_cli_write_full(fd, &n, sizeof(n)) || (len && ect_cli_write_full(fd, buf, len)) ? -1
                                                                                              : 0;
}

static uint8_t *
read_blob(int fd, size_t *len_p)
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

/* The child's grant table: what the real producer keeps, reduced to what
 * the transport needs (runs, size, token, one stream each). */
struct child_grant {
    char hash[64];
    uint8_t token[ECT_STREAM_TOKEN_LEN];
    ect_run_t runs[4096];
    size_t n_runs;
    uint64_t bytes;
    int claimed;
};

struct grant_table {
    pthread_mutex_t lock;
    struct child_grant g[MAX_GRANTS];
    size_t n;
    uint64_t finished_sent, finished_cut;
};

static ect_stream_status_t
claim_grant(void *user, const char *session, const char *hash, const uint8_t *token,
            uint64_t expect, ect_xport_grant_view_t *view_p, void **grant_p)
{
    struct grant_table *t = user;
    ect_stream_status_t st = ECT_STREAM_DENIED;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        struct child_grant *g = &t->g[i];
        if (strcmp(session, TS_XPORT_SESSION) != 0 || strcmp(hash, g->hash) != 0 || g->claimed ||
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

static void
finish_grant(void *user, void *grant, int sent)
{
    struct grant_table *t = user;
    (void)grant;
    pthread_mutex_lock(&t->lock);
    if (sent)
        t->finished_sent++;
    else
        t->finished_cut++;
    pthread_mutex_unlock(&t->lock);
}

static int
grant_command(struct grant_table *t, const ect_xport_server_t *server, uint64_t block_size,
              int down, int up)
{
    uint32_t n, hl;
    uint64_t ids[4096];
    char hash[64] = "";
    if (ect_cli_read_full(down, &n, sizeof(n)) || n > 4096 ||
        ect_cli_read_full(down, ids, 8ull * n) || ect_cli_read_full(down, &hl, sizeof(hl)) ||
        hl >= sizeof(hash) || ect_cli_read_full(down, hash, hl))
        return -1;
    uint8_t desc[ECT_XPORT_DESC_LEN];
    size_t dlen = 0;
    pthread_mutex_lock(&t->lock);
    if (server != NULL && t->n < MAX_GRANTS) {
        struct child_grant *g = &t->g[t->n];
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
    return write_blob(up, desc, dlen);
}

int
ts_xport_producer_main(int argc, char **argv)
{
    if (argc != 10)
        return 2;
    int up = atoi(argv[2]), down = atoi(argv[3]);
    const char *region_name = argv[4];
    uint64_t hidden = strtoull(argv[5], NULL, 10), num_blocks = strtoull(argv[6], NULL, 10);
    uint64_t seed = strtoull(argv[7], NULL, 10);
    int serve_tcp = atoi(argv[8]), serve_same_host = atoi(argv[9]);
    ect_region_params_t rp;
    ts_xport_region_params(&rp, region_name, hidden, num_blocks);
    ect_region_t *region = NULL;
    int st = ect_region_open(&rp, &region);
    ect_xport_server_t *server = NULL;
    static struct grant_table table;
    pthread_mutex_init(&table.lock, NULL);
    ect_xport_grant_ops_t ops = {.user = &table, .claim = claim_grant, .finish = finish_grant};
    uint64_t bs = hidden * 4;
    if (st == ECT_OK) {
        for (uint64_t b = 0; b < num_blocks; b++)
            fill_block(ect_region_block_ptr(region, b), bs, seed, b);
        ect_xport_server_params_t sp = {.data = ect_region_data(region),
                                        .block_size = bs,
                                        .num_blocks = num_blocks,
                                        .region_path = ect_region_path(region),
                                        .data_offset = ect_region_data_offset(region),
                                        .bind_host = "127.0.0.1",
                                        .send_timeout_ns = 20ull * 1000 * 1000 * 1000,
                                        .grants = &ops,
                                        .serve_tcp = serve_tcp,
                                        .serve_same_host = serve_same_host,
                                        .touch_pages = 1};
        st = ect__xport_server_start(&sp, &server);
    }
    size_t alen = 0;
    const void *agent = st == ECT_OK ? ect__xport_server_agent_metadata(server, &alen) : NULL;
    unsigned kinds = st == ECT_OK ? ect__xport_server_kinds(server) : 0;
    const char *path = region != NULL ? ect_region_path(region) : "";
    if (ect_cli_write_full(up, &st, sizeof(st)) || ect_cli_write_full(up, &kinds, sizeof(kinds)) ||
        write_blob(up, agent, alen) || write_blob(up, path, strlen(path)))
        _exit(3);
    for (;;) {
        char c;
        if (ect_cli_read_full(down, &c, 1) != 0 || c == 'q')
            break;
        if (c == 'g' && grant_command(&table, server, bs, down, up) != 0)
            break;
        if (c == 'c') {
            ect_xport_server_counters_t k;
            ect__xport_server_counters(server, &k);
            pthread_mutex_lock(&table.lock);
            uint64_t fin[2] = {table.finished_sent, table.finished_cut};
            pthread_mutex_unlock(&table.lock);
            if (ect_cli_write_full(up, &k, sizeof(k)) || ect_cli_write_full(up, fin, sizeof(fin)))
                break;
        }
    }
    ect__xport_server_stop(server);
    ect_region_close(region);
    _exit(0);
}

void
ts_xport_producer_start(struct ts_xport_producer *p, const char *region_name, uint64_t hidden,
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
        execl("/proc/self/exe", "xport-producer", TS_XPORT_PRODUCER_ARG, args[0], args[1],
              region_name, args[2], args[3], args[4], args[5], args[6], (char *)NULL);
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
    p->agent = read_blob(up[0], &p->agent_len);
    size_t plen;
    uint8_t *path = read_blob(up[0], &plen);
    snprintf(p->path, sizeof(p->path), "%.*s", (int)plen, (const char *)path);
    free(path);
}

void
ts_xport_grant(struct ts_xport_producer *p, const uint64_t *remote, size_t n, char hash[64],
               uint8_t *desc)
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
    uint8_t *d = read_blob(p->reply_fd, &dlen);
    CHECK_EQ_U64(dlen, ECT_XPORT_DESC_LEN);
    memcpy(desc, d, ECT_XPORT_DESC_LEN);
    free(d);
}

void
ts_xport_producer_counters(struct ts_xport_producer *p, ect_xport_server_counters_t *k,
                           uint64_t fin[2])
{
    ts_write_all(p->cmd_fd, "c", 1);
    ts_read_all(p->reply_fd, k, sizeof(*k));
    ts_read_all(p->reply_fd, fin, 2 * sizeof(uint64_t));
}

void
ts_xport_producer_counters_after(struct ts_xport_producer *p, uint64_t served,
                                 ect_xport_server_counters_t *k, uint64_t fin[2])
{
    uint64_t deadline = ect__now_ns() + 5ull * 1000 * 1000 * 1000;
    for (;;) {
        ts_xport_producer_counters(p, k, fin);
        if (k->streams_served >= served || ect__now_ns() >= deadline)
            return;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void
ts_xport_producer_stop(struct ts_xport_producer *p)
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

void
ts_xport_producer_kill(struct ts_xport_producer *p)
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

void
ts_xport_consumer_open(struct ts_xport_consumer *c, const char *region_name, uint64_t hidden,
                       uint64_t num_blocks, ect_transport_t prefer, const char *region_dir)
{
    memset(c, 0, sizeof(*c));
    ect_region_params_t rp;
    ts_xport_region_params(&rp, region_name, hidden, num_blocks);
    CHECK_OK(ect_region_open(&rp, &c->region));
    c->block_size = ect_region_geometry(c->region)->block_size_bytes;
    c->num_blocks = num_blocks;
    for (uint64_t b = 0; b < num_blocks; b++)
        fill_block(ect_region_block_ptr(c->region, b), c->block_size, LOCAL_SEED, b);
    ect_xport_client_params_t cp = {.data = ect_region_data(c->region),
                                    .block_size = c->block_size,
                                    .num_blocks = num_blocks,
                                    .prefer = prefer,
                                    .region_dir = region_dir,
                                    /* as the consumer does by default: every
                                     * test runs the page touches */
                                    .touch_pages = 1};
    CHECK_OK(ect__xport_client_create(&cp, &c->client));
}

void
ts_xport_consumer_new_client(struct ts_xport_consumer *c, ect_transport_t prefer, unsigned stripes)
{
    ect__xport_client_destroy(c->client);
    ect_xport_client_params_t cp = {.data = ect_region_data(c->region),
                                    .block_size = c->block_size,
                                    .num_blocks = c->num_blocks,
                                    .prefer = prefer,
                                    .touch_pages = 1,
                                    .tcp_stripes = stripes};
    CHECK_OK(ect__xport_client_create(&cp, &c->client));
}

void
ts_xport_consumer_close(struct ts_xport_consumer *c)
{
    ect__xport_client_destroy(c->client);
    ect_region_close(c->region);
}

ect_status_t
ts_xport_read_start(struct ts_xport_consumer *c, struct ts_xport_producer *p, uint16_t key_port,
                    const uint8_t *agent, size_t agent_len, const uint64_t *remote, size_t n,
                    const ect_run_t *runs, size_t n_runs, ect_xport_read_t **r_p,
                    ect_xport_kind_t *kind_p)
{
    char hash[64];
    uint8_t desc[ECT_XPORT_DESC_LEN];
    ts_xport_grant(p, remote, n, hash, desc);
    ect_xport_read_params_t rp = {.host = "127.0.0.1",
                                  .port = key_port,
                                  .session_id = TS_XPORT_SESSION,
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

ect_xport_read_state_t
ts_xport_wait(struct ts_xport_consumer *c, ect_xport_read_t *r, double timeout_s)
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

void
ts_xport_check_landed(const struct ts_xport_consumer *c, const struct ts_xport_producer *p,
                      const uint64_t *remote, size_t n_remote, const ect_run_t *runs, size_t n_runs)
{
    uint8_t *written = calloc(c->num_blocks, 1);
    CHECK(written != NULL);
    size_t k = 0;
    for (size_t j = 0; j < n_runs; j++)
        for (uint64_t b = 0; b < runs[j].count; b++, k++) {
            uint64_t local = runs[j].first + b;
            CHECK(k < n_remote);
            CHECK_MSG(ts_xport_block_matches(ect_region_block_ptr(c->region, local), c->block_size,
                                             p->seed, remote[k]),
                      "local block %llu does not hold remote block %llu", (unsigned long long)local,
                      (unsigned long long)remote[k]);
            written[local] = 1;
        }
    CHECK_EQ_U64(k, n_remote);
    for (uint64_t b = 0; b < c->num_blocks; b++)
        if (!written[b])
            CHECK_MSG(ts_xport_block_matches(ect_region_block_ptr(c->region, b), c->block_size,
                                             LOCAL_SEED, b),
                      "untouched local block %llu changed", (unsigned long long)b);
    free(written);
}

void
ts_xport_check_untouched(const struct ts_xport_consumer *c)
{
    for (uint64_t b = 0; b < c->num_blocks; b++)
        CHECK_MSG(ts_xport_block_matches(ect_region_block_ptr(c->region, b), c->block_size,
                                         LOCAL_SEED, b),
                  "local block %llu was written", (unsigned long long)b);
}

static void
log_sink(ect_log_level_t level, const char *message, void *user)
{
    (void)level;
    struct ts_xport_log *l = user;
    pthread_mutex_lock(&l->lock);
    int n = snprintf(l->text + l->len, sizeof(l->text) - l->len, "%s\n", message);
    if (n > 0 && l->len + (size_t)n < sizeof(l->text))
        l->len += (size_t)n;
    pthread_mutex_unlock(&l->lock);
}

void
ts_xport_log_capture(struct ts_xport_log *l)
{
    memset(l, 0, sizeof(*l));
    pthread_mutex_init(&l->lock, NULL);
    ect_log_set_sink(log_sink, l);
    ect_log_set_level(ECT_LOG_INFO);
}

unsigned
ts_xport_log_count(struct ts_xport_log *l, const char *needle)
{
    unsigned n = 0;
    pthread_mutex_lock(&l->lock);
    for (const char *s = l->text; (s = strstr(s, needle)) != NULL; s += strlen(needle))
        n++;
    pthread_mutex_unlock(&l->lock);
    return n;
}
