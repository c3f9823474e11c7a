/*
 * The lifecycle event stream (SPEC §9.1; formats in src/p2p/events.h) as a
 * router sees it: a real producer instance (scheduler + worker, CPU copies,
 * real /dev/shm region) or a real `ectier producer` process, with
 * events_endpoint and events_replay_endpoint set, and real ZeroMQ SUB and
 * DEALER sockets of the test's own.
 *
 * Live: each message is [topic, seq, JSON batch]; seqs have no gaps; saving
 * publishes "stored", announcing "announced", filling the cache "evicted",
 * and evicting an announced entry "evicted" then "withdrawn".  Late: a
 * router that connects after the work was done rebuilds the same view the
 * cache holds from replay (the whole history, or a snapshot in parts when
 * the buffer is small), and follows the live stream from there, replaying
 * the gaps a tiny high-water mark makes (and the metric counts).  Hostile:
 * wrong frames, wrong lengths, huge frames, stalled and vanished peers get
 * an error or nothing, and a good router is served afterwards.  Taken
 * endpoints fail create naming them.
 */
#include <arpa/inet.h>
#include <cJSON.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "instance.h"
#include "p2p/events.h"
#include "pattern.h"
#include "step/scheduler_hooks.h"

#define HIDDEN "64" /* bf16: 128-byte blocks */
#define BLOCK  128u

/* ---- a router's view, built only from what the stream says ---------------- */

struct rentry {
    char *key; /* owned */
    uint64_t n_blocks;
    bool ready, announced;
};

struct rview {
    struct rentry *e;
    size_t n, cap;
    uint64_t last; /* seq of the last batch applied */
    bool synced;   /* last is meaningful */
    unsigned batches, snapshot_parts, gaps_replayed, quiet_replays;
    unsigned losses_seen; /* batches that said "lost" */
    bool want_snapshot;   /* a batch said "lost": the view misses events */
};

static struct rentry *
rview_find(struct rview *v, const char *key)
{
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->e[i].key, key) == 0)
            return &v->e[i];
    return NULL;
}

static struct rentry *
rview_get(struct rview *v, const char *key)
{
    struct rentry *e = rview_find(v, key);
    if (e != NULL)
        return e;
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->e = realloc(v->e, v->cap * sizeof(*v->e));
        CHECK(v->e != NULL);
    }
    e = &v->e[v->n++];
    memset(e, 0, sizeof(*e));
    e->key = strdup(key);
    CHECK(e->key != NULL);
    return e;
}

static void
rview_remove(struct rview *v, const char *key)
{
    struct rentry *e = rview_find(v, key);
    if (e != NULL) {
        free(e->key);
        *e = v->e[--v->n];
    }
}

static void
rview_clear(struct rview *v)
{
    while (v->n > 0)
        free(v->e[--v->n].key);
}

static void
rview_free(struct rview *v)
{
    rview_clear(v);
    free(v->e);
    *v = (struct rview){0};
}

static const char *
jstr(const cJSON *o, const char *name)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
    CHECK_MSG(s != NULL, "no string \"%s\"", name);
    return s;
}

static uint64_t
jnum(const cJSON *o, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, name);
    CHECK_MSG(cJSON_IsNumber(n), "no number \"%s\"", name);
    return (uint64_t)n->valuedouble;
}

static uint64_t
be64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

static void
put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

/* Check the fields every payload has; seq must match its frame. */
static void
check_head(const cJSON *o, const char *type, uint64_t seq)
{
    CHECK_STR_EQ(jstr(o, "type"), type);
    CHECK_CONTAINS(jstr(o, "instance"), "ectier_");
    CHECK(jnum(o, "epoch") > 1600000000ull * 1000000000ull);
    CHECK(jnum(o, "ts") >= jnum(o, "epoch"));
    CHECK_EQ_U64(jnum(o, "seq"), seq);
}

static void
rview_apply_batch(struct rview *v, const cJSON *o, uint64_t seq)
{
    check_head(o, "batch", seq);
    if (cJSON_GetObjectItemCaseSensitive(o, "lost") != NULL) {
        CHECK(jnum(o, "lost") > 0);
        v->losses_seen++;
        v->want_snapshot = true;
    }
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(o, "events");
    CHECK(cJSON_IsArray(events));
    const cJSON *e;
    cJSON_ArrayForEach(e, events)
    {
        const char *what = jstr(e, "event");
        CHECK(jnum(e, "t") > 0);
        if (strcmp(what, "cleared") == 0) {
            rview_clear(v);
            continue;
        }
        const char *key = jstr(e, "key");
        if (strcmp(what, "stored") == 0 || strcmp(what, "announced") == 0) {
            struct rentry *r = rview_get(v, key);
            r->n_blocks = jnum(e, "n_blocks");
            if (what[0] == 's')
                r->ready = true;
            else
                r->announced = true;
        } else if (strcmp(what, "evicted") == 0 || strcmp(what, "discarded") == 0) {
            rview_remove(v, key);
        } else {
            CHECK_MSG(strcmp(what, "withdrawn") == 0, "unknown event '%s'", what);
        }
    }
    v->last = seq;
    v->synced = true;
    v->batches++;
}

/* Receive one multipart message of at most max frames within ms into
 * frames[] (caller closes them).  Returns the frame count, 0 on timeout. */
static int
recv_frames(void *sock, int ms, zmq_msg_t *frames, int max)
{
    zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
    if (zmq_poll(&it, 1, ms) <= 0)
        return 0;
    int n = 0;
    for (;;) {
        CHECK_MSG(n < max, "a message of more than %d frames", max);
        zmq_msg_init(&frames[n]);
        CHECK(zmq_msg_recv(&frames[n], sock, 0) >= 0);
        int more = zmq_msg_more(&frames[n]);
        n++;
        if (!more)
            return n;
    }
}

static void
close_frames(zmq_msg_t *frames, int n)
{
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
}

static cJSON *
frame_json(zmq_msg_t *f)
{
    cJSON *o = cJSON_ParseWithLength(zmq_msg_data(f), zmq_msg_size(f));
    CHECK_MSG(o != NULL, "not JSON: %.*s", (int)zmq_msg_size(f), (const char *)zmq_msg_data(f));
    return o;
}

static void
send_request(void *dealer, uint64_t from)
{
    unsigned char seq[8];
    put_be64(seq, from);
    CHECK(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(dealer, seq, 8, 0) == 8);
}

/* Ask for everything since from and apply the answer up to its end marker:
 * a snapshot replaces the view, batches follow on.  Returns false when the
 * request was refused (busy), with the view unchanged. */
static bool
rview_try_replay(struct rview *v, void *dealer, uint64_t from)
{
    send_request(dealer, from);
    size_t parts = 0, parts_seen = 0;
    for (;;) {
        zmq_msg_t f[3];
        int n = recv_frames(dealer, 10000, f, 3);
        CHECK_MSG(n == 3, "a replay answer of %d frames", n);
        CHECK_EQ_U64(zmq_msg_size(&f[0]), 0);
        CHECK_EQ_U64(zmq_msg_size(&f[1]), 8);
        uint64_t seq = be64(zmq_msg_data(&f[1]));
        if (seq == ECT_EVENTS_END_SEQ) {
            bool refused = zmq_msg_size(&f[2]) > 0;
            if (refused) {
                cJSON *o = frame_json(&f[2]);
                CHECK_STR_EQ(jstr(o, "type"), "error");
                CHECK_MSG(parts_seen == 0 && strstr(jstr(o, "error"), "busy") != NULL,
                          "replay refused: %s", jstr(o, "error"));
                cJSON_Delete(o);
            }
            close_frames(f, n);
            if (refused)
                return false;
            break;
        }
        cJSON *o = frame_json(&f[2]);
        if (strcmp(jstr(o, "type"), "snapshot") == 0) {
            check_head(o, "snapshot", seq);
            if (jnum(o, "part") == 0) {
                rview_clear(v);
                v->want_snapshot = false;
                parts = jnum(o, "parts");
            }
            CHECK_EQ_U64(jnum(o, "part"), parts_seen);
            CHECK_EQ_U64(jnum(o, "parts"), parts);
            parts_seen++;
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "entries"))
            {
                struct rentry *r = rview_get(v, jstr(e, "key"));
                r->n_blocks = jnum(e, "n_blocks");
                r->ready = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "ready"));
                r->announced = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "announced"));
            }
            v->last = seq;
            v->synced = true;
            v->snapshot_parts++;
        } else if (!v->synced || seq == v->last + 1) {
            rview_apply_batch(v, o, seq);
        } else {
            CHECK_MSG(seq <= v->last, "replay jumped from %llu to %llu",
                      (unsigned long long)v->last, (unsigned long long)seq);
        }
        cJSON_Delete(o);
        close_frames(f, n);
    }
    CHECK_EQ_U64(parts_seen, parts);
    return true;
}

/* Replay from `from`; when a batch said "lost", then ask for a snapshot,
 * as a router does. */
static void
rview_replay(struct rview *v, void *dealer, uint64_t from)
{
    CHECK_MSG(rview_try_replay(v, dealer, from), "replay refused");
    if (v->want_snapshot)
        CHECK_MSG(rview_try_replay(v, dealer, ECT_EVENTS_END_SEQ), "snapshot refused");
    CHECK(!v->want_snapshot);
}

/* Rebuild v from replay (from 0) until it shows the last thing the test
 * did, key announced: the stream runs a little behind the cache. */
static void
rview_replay_until(struct rview *v, void *dealer, const char *key)
{
    for (int i = 0; i < 500; i++) {
        rview_clear(v);
        v->synced = false;
        v->batches = v->snapshot_parts = 0;
        rview_replay(v, dealer, 0);
        struct rentry *e = rview_find(v, key);
        if (e != NULL && e->announced)
            return;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(0, "replay never showed '%s' announced", key);
}

/* Take one live message within ms: skip what is known, replay a gap.
 * Returns 0 on timeout. */
static int
rview_follow(struct rview *v, void *sub, void *dealer, int ms)
{
    zmq_msg_t f[3];
    int n = recv_frames(sub, ms, f, 3);
    if (n == 0)
        return 0;
    CHECK_EQ_INT(n, 3);
    CHECK(zmq_msg_size(&f[0]) == strlen(ECT_EVENTS_TOPIC) &&
          memcmp(zmq_msg_data(&f[0]), ECT_EVENTS_TOPIC, zmq_msg_size(&f[0])) == 0);
    CHECK_EQ_U64(zmq_msg_size(&f[1]), 8);
    uint64_t seq = be64(zmq_msg_data(&f[1]));
    if (v->synced && seq > v->last + 1) {
        v->gaps_replayed++;
        rview_replay(v, dealer, v->last + 1);
    }
    if (!v->synced || seq == v->last + 1) {
        cJSON *o = frame_json(&f[2]);
        rview_apply_batch(v, o, seq);
        cJSON_Delete(o);
    }
    close_frames(f, n);
    if (v->want_snapshot)
        rview_replay(v, dealer, ECT_EVENTS_END_SEQ);
    return 1;
}

/* ---- instances and sockets ---------------------------------------------------- */

struct ev_fx {
    struct ect_cli_instance in;
    char endpoint[128];
    char replay[128];
    void *zctx;
};

static void
fx_endpoints(struct ev_fx *fx)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectev_");
    /* Linux's abstract namespace ("@"): no file, so nothing is left behind
     * when a case ends half-way. */
    snprintf(fx->endpoint, sizeof(fx->endpoint), "ipc://@%s.sock", name);
    snprintf(fx->replay, sizeof(fx->replay), "ipc://@%s.replay", name);
    fx->zctx = zmq_ctx_new();
    CHECK(fx->zctx != NULL);
}

/* A producer instance; extra: more extra-config members (or ""). */
static void
fx_open(struct ev_fx *fx, unsigned num_blocks, const char *lease, const char *extra)
{
    fx_endpoints(fx);
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %u, \"ec_enable_nixl\": true, "
             "\"announce_lease_s\": %s, \"events_endpoint\": \"%s\", "
             "\"events_replay_endpoint\": \"%s\"%s%s}}",
             num_blocks * BLOCK, lease, fx->endpoint, fx->replay, extra[0] ? ", " : "", extra);
    setenv("ECTIER_SIDE_CHANNEL_HOST", "127.0.0.1", 1);
    setenv("ECTIER_SIDE_CHANNEL_PORT", "0", 1);
    struct ect_cli_instance_args a = {.cmd = "test",
                                      .config = cfg,
                                      .model = "m",
                                      .hidden = HIDDEN,
                                      .dtype = "bf16",
                                      .engine_version = "0.11.0"};
    CHECK_MSG(ect_cli_instance_open(&fx->in, &a, "") == 0, "instance: %s", ect_last_error());
}

/* A socket of the test's; rcvhwm > 0 also makes it a slow reader (tiny
 * queue and kernel buffer). */
static void *
fx_slow_socket(struct ev_fx *fx, int type, const char *endpoint, int rcvhwm)
{
    void *s = zmq_socket(fx->zctx, type);
    CHECK(s != NULL);
    int linger = 0, rcvbuf = 4096;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    if (rcvhwm > 0) {
        CHECK(zmq_setsockopt(s, ZMQ_RCVHWM, &rcvhwm, sizeof(rcvhwm)) == 0);
        CHECK(zmq_setsockopt(s, ZMQ_RCVBUF, &rcvbuf, sizeof(rcvbuf)) == 0);
    }
    if (type == ZMQ_SUB)
        CHECK(zmq_setsockopt(s, ZMQ_SUBSCRIBE, "ectier.", 7) == 0);
    CHECK(zmq_connect(s, endpoint) == 0);
    return s;
}

static void *
fx_socket(struct ev_fx *fx, int type, const char *endpoint)
{
    return fx_slow_socket(fx, type, endpoint, 0);
}

static void
fx_close(struct ev_fx *fx, int with_instance)
{
    zmq_ctx_term(fx->zctx);
    if (with_instance)
        ect_cli_instance_close(&fx->in);
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

/* The view equals the cache: the same ready entries with their sizes, and
 * announced exactly for the keys in announced[] still cached. */
static void
check_view_is_the_cache(struct rview *v, struct ect_cli_instance *in, const char *const *announced,
                        size_t n_announced)
{
    ect_cache_t *cache = ect__scheduler_cache(in->sched);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(cache, &st));
    CHECK_EQ_U64(v->n, st.entries - st.entries_not_ready);
    for (size_t i = 0; i < v->n; i++) {
        ect_cache_entry_t e;
        CHECK_MSG(ect_cache_get(cache, v->e[i].key, &e) == ECT_OK, "'%s' is not in the cache",
                  v->e[i].key);
        CHECK(v->e[i].ready && e.state != ECT_CACHE_ENTRY_NOT_READY);
        CHECK_EQ_U64(v->e[i].n_blocks, e.n_blocks);
        bool want = false;
        for (size_t j = 0; j < n_announced; j++)
            want = want || strcmp(announced[j], v->e[i].key) == 0;
        CHECK_MSG(v->e[i].announced == want, "'%s' announced %d in the view", v->e[i].key,
                  v->e[i].announced);
    }
}

static ect_metrics_t
metrics(struct ect_cli_instance *in)
{
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(in->sched, &m));
    return m;
}

/* ---- live subscribers ---------------------------------------------------------- */

/* A key of len - 1 bytes, unique for i: large batches fill queues fast. */
static void
big_key(char *key, size_t len, unsigned i)
{
    int l = snprintf(key, len, "big-%06u-", i);
    memset(key + l, 'k', len - 1 - (size_t)l);
    key[len - 1] = '\0';
}

/* A router that is live and synced: small saves until one batch reaches
 * its subscriber, then the history from replay. */
static void *
live_sub(struct ev_fx *fx, struct rview *v, void *dealer, int rcvhwm)
{
    void *sub = fx_slow_socket(fx, ZMQ_SUB, fx->endpoint, rcvhwm);
    for (unsigned i = 0;; i++) {
        CHECK_MSG(i < 200, "no batch reached the subscriber");
        char key[32];
        snprintf(key, sizeof(key), "warm-%u", i);
        save(&fx->in, key, 1);
        zmq_msg_t f[3];
        int n = recv_frames(sub, 50, f, 3);
        close_frames(f, n);
        if (n > 0)
            break;
    }
    rview_replay(v, dealer, 0);
    return sub;
}

/* Follow the stream until an event `what` of key has been applied. */
static void
follow_until(struct rview *v, void *sub, void *dealer, const char *what, const char *key)
{
    /* Bounded by time: a slow subscriber may have a long backlog. */
    time_t end = time(NULL) + 30;
    while (time(NULL) < end) {
        struct rentry *e = rview_find(v, key);
        if ((strcmp(what, "stored") == 0 && e != NULL && e->ready) ||
            (strcmp(what, "announced") == 0 && e != NULL && e->announced) ||
            (strcmp(what, "gone") == 0 && e == NULL))
            return;
        /* Quiet: the last batch may have been missed (a subscription still
         * being set up, a full queue); ask for anything newer. */
        if (!rview_follow(v, sub, dealer, 200)) {
            v->quiet_replays++;
            rview_replay(v, dealer, v->last + 1);
        }
    }
    CHECK_MSG(0, "no %s of '%s' (view at batch %llu, %u batches, %u gaps replayed)", what, key,
              (unsigned long long)v->last, v->batches, v->gaps_replayed);
}

static void
test_batches_are_numbered_and_follow_save_announce_and_eviction(void)
{
    struct ev_fx fx;
    fx_open(&fx, 16, "30", "");
    struct rview v = {0};
    void *dealer = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    void *sub = live_sub(&fx, &v, dealer, 0);
    save(&fx.in, "img", 2);
    follow_until(&v, sub, dealer, "stored", "img");
    announce(&fx.in, "img", 2);
    follow_until(&v, sub, dealer, "announced", "img");
    /* "old" is the oldest evictable entry after the warm-up ones; "img" is
     * held by its announcement and must outlive the fills. */
    save(&fx.in, "old", 3);
    follow_until(&v, sub, dealer, "stored", "old");
    for (unsigned i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", i);
        save(&fx.in, key, 4);
    }
    follow_until(&v, sub, dealer, "gone", "old");
    follow_until(&v, sub, dealer, "stored", "fill-3");
    CHECK(rview_find(&v, "img") != NULL);
    /* A live subscriber sees every batch in order: nothing more to replay
     * once synced (the live messages up to the replay's end are skipped). */
    CHECK_EQ_INT(v.gaps_replayed, 0);
    const char *ann[] = {"img"};
    check_view_is_the_cache(&v, &fx.in, ann, 1);
    ect_metrics_t m = metrics(&fx.in);
    CHECK(m.cache.evicted_entries > 0);
    CHECK_EQ_U64(m.events_batches, v.last + 1);
    CHECK_EQ_U64(m.events_dropped, 0);
    rview_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    fx_close(&fx, 1);
}

static void
test_evicting_an_announced_entry_publishes_withdrawn(void)
{
    struct ev_fx fx;
    fx_open(&fx, 8, "0.05", "");
    save(&fx.in, "img", 2);
    announce(&fx.in, "img", 2);
    /* Let the announcement's lease lapse; the next steps expire its hold. */
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    for (unsigned i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", i);
        save(&fx.in, key, 4);
    }
    /* The events in stream order, read raw from a replay of the history. */
    void *dealer = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    int evicted_at = -1, withdrawn_at = -1, index = 0;
    for (int tries = 0; tries < 100 && withdrawn_at < 0; tries++) {
        index = 0;
        send_request(dealer, 0);
        for (;;) {
            zmq_msg_t f[3];
            int n = recv_frames(dealer, 5000, f, 3);
            CHECK_EQ_INT(n, 3);
            if (be64(zmq_msg_data(&f[1])) == ECT_EVENTS_END_SEQ) {
                close_frames(f, n);
                break;
            }
            cJSON *o = frame_json(&f[2]);
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "events"))
            {
                const cJSON *key = cJSON_GetObjectItemCaseSensitive(e, "key");
                if (cJSON_IsString(key) && strcmp(key->valuestring, "img") == 0) {
                    if (strcmp(jstr(e, "event"), "evicted") == 0)
                        evicted_at = index;
                    if (strcmp(jstr(e, "event"), "withdrawn") == 0) {
                        withdrawn_at = index;
                        CHECK_EQ_U64(jnum(e, "n_blocks"), 2);
                    }
                }
                index++;
            }
            cJSON_Delete(o);
            close_frames(f, n);
        }
        if (withdrawn_at < 0)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(evicted_at >= 0 && withdrawn_at == evicted_at + 1,
              "withdrawn (event %d) must follow evicted (event %d)", withdrawn_at, evicted_at);
    zmq_close(dealer);
    fx_close(&fx, 1);
}

/* ---- late routers ------------------------------------------------------------------ */

static void
test_late_router_rebuilds_the_view_from_replay_and_follows_on(void)
{
    struct ev_fx fx;
    fx_open(&fx, 20, "30", "");
    /* Work done before anyone listens: stores, announcements, evictions. */
    char keys[12][16];
    for (unsigned i = 0; i < 12; i++) {
        snprintf(keys[i], sizeof(keys[i]), "item-%u", i);
        save(&fx.in, keys[i], 1 + i % 3);
    }
    announce(&fx.in, keys[10], 1 + 10 % 3);
    announce(&fx.in, keys[11], 1 + 11 % 3);
    const char *ann[] = {keys[10], keys[11]};
    CHECK(metrics(&fx.in).cache.evicted_entries > 0);

    struct rview v = {0};
    void *sub = fx_socket(&fx, ZMQ_SUB, fx.endpoint);
    void *dealer = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    rview_replay_until(&v, dealer, keys[11]);
    /* The whole history is buffered: batches from 0 ("cleared"), no
     * snapshot. */
    CHECK_EQ_INT(v.snapshot_parts, 0);
    CHECK(v.batches >= 2);
    check_view_is_the_cache(&v, &fx.in, ann, 2);

    /* And on from there: the live stream, replaying what the subscription
     * missed while it was being set up. */
    for (unsigned i = 12; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "item-%u", i);
        save(&fx.in, key, 2);
        follow_until(&v, sub, dealer, "stored", key);
    }
    check_view_is_the_cache(&v, &fx.in, ann, 2);
    ect_metrics_t m = metrics(&fx.in);
    CHECK(m.events_replays >= 1);
    CHECK_EQ_U64(m.events_replay_errors, 0);
    rview_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    fx_close(&fx, 1);
}

static void
test_a_small_replay_buffer_answers_with_a_snapshot_in_parts(void)
{
    struct ev_fx fx;
    fx_open(&fx, 1500, "30", "\"events_replay_buffer\": 3");
    /* More entries than one snapshot part holds. */
    for (unsigned i = 0; i < 1200; i++) {
        char key[16];
        snprintf(key, sizeof(key), "e%u", i);
        save(&fx.in, key, 1);
    }
    announce(&fx.in, "e7", 1);
    const char *ann[] = {"e7"};
    void *sub = fx_socket(&fx, ZMQ_SUB, fx.endpoint);
    void *dealer = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    struct rview v = {0};
    rview_replay_until(&v, dealer, "e7"); /* batch 0 is long gone */
    CHECK_EQ_INT(v.snapshot_parts, 2);
    CHECK_EQ_U64(v.last + 1, metrics(&fx.in).events_batches);
    check_view_is_the_cache(&v, &fx.in, ann, 1);
    CHECK_EQ_U64(v.n, 1200);

    /* Asking for a snapshot (-1) or for a seq from the future (another
     * life of the stream) gets one too; asking from within the buffer gets
     * just the batches. */
    struct rview w = {0};
    rview_replay(&w, dealer, ECT_EVENTS_END_SEQ);
    CHECK_EQ_INT(w.snapshot_parts, 2);
    CHECK_EQ_U64(w.n, 1200);
    rview_free(&w);
    w = (struct rview){0};
    rview_replay(&w, dealer, v.last + 1000);
    CHECK_EQ_INT(w.snapshot_parts, 2);
    rview_free(&w);
    /* From the snapshot on, the live stream (and replay of what it
     * misses) keeps the view equal to the cache. */
    for (unsigned i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "more-%u", i);
        save(&fx.in, key, 1);
        follow_until(&v, sub, dealer, "stored", key);
    }
    CHECK(v.batches >= 1);
    check_view_is_the_cache(&v, &fx.in, ann, 1);
    rview_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    fx_close(&fx, 1);
}

static void
test_subscriber_past_its_high_water_mark_misses_batches_counts_them_and_replays(void)
{
    struct ev_fx fx;
    fx_open(&fx, 64, "30", "\"events_hwm\": 1");
    struct rview v = {0};
    void *dealer = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    void *sub = live_sub(&fx, &v, dealer, 1);
    /* Not read while the instance works: with a high-water mark of one
     * message, and long keys, batches overflow the subscriber's queue. */
    uint64_t hwm_drops = 0;
    /* Bounded by time, not by a count of saves: the instance publishes on
     * its own thread, which on a busy machine runs far behind the saves. */
    time_t end = time(NULL) + 60;
    for (unsigned i = 0; i < 999999 && hwm_drops == 0 && time(NULL) < end; i++) {
        char key[1000];
        big_key(key, sizeof(key), i);
        save(&fx.in, key, 1);
        if (i % 100 == 99)
            hwm_drops = metrics(&fx.in).events_hwm_drops;
    }
    CHECK_MSG(hwm_drops > 0, "no batch met the high-water mark");
    /* The metric is exported. */
    ect_metrics_t m = metrics(&fx.in);
    char text[32768];
    size_t len;
    CHECK_OK(ect_metrics_format_prometheus(&m, text, sizeof(text), &len));
    CHECK_CONTAINS(text, "\nectier_events_hwm_drops_total ");
    CHECK(strstr(text, "\nectier_events_hwm_drops_total 0\n") == NULL);
    /* The router reads its backlog, and once its queue has room again the
     * next batch shows the gap in the numbering, which it replays. */
    while (rview_follow(&v, sub, dealer, 300))
        ;
    save(&fx.in, "last", 1);
    follow_until(&v, sub, dealer, "stored", "last");
    /* On a busy machine the publisher may also fall behind the saves and
     * drop events from its queue; the snapshot the router then asks for
     * covers the numbering gap too. */
    CHECK(v.gaps_replayed + v.losses_seen > 0);
    check_view_is_the_cache(&v, &fx.in, NULL, 0);
    rview_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    fx_close(&fx, 1);
}

/* Events come faster than the publisher sends them: the queue overflows
 * and drops some.  The batch that says so comes once the instance has
 * rebuilt its view from the cache, so a router that then asks for a
 * snapshot again sees exactly the cache. */
static void
test_events_lost_to_a_full_queue_are_in_the_next_snapshot(void)
{
    struct ev_fx fx;
    fx_open(&fx, 64, "30", "");
    struct rview v = {0};
    void *dealer = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    void *sub = live_sub(&fx, &v, dealer, 0);
    ect_cache_t *cache = ect__scheduler_cache(fx.in.sched);
    /* Straight to the cache, from this thread: an allocation (with an
     * eviction) and a mark_ready take well under a microsecond, a batch of
     * long keys far more to build and send. */
    uint64_t dropped = 0;
    time_t end = time(NULL) + 30;
    for (unsigned i = 0; dropped == 0 && time(NULL) < end; i++) {
        char key[900];
        big_key(key, sizeof(key), i);
        CHECK_OK(ect_cache_alloc(cache, key, 1 + i % 3));
        CHECK_OK(ect_cache_mark_ready(cache, key));
        if (i % 512 == 511)
            dropped = metrics(&fx.in).events_dropped;
    }
    CHECK_MSG(dropped > 0, "the event queue never overflowed");
    save(&fx.in, "last", 1);
    follow_until(&v, sub, dealer, "stored", "last");
    CHECK(v.losses_seen > 0);
    check_view_is_the_cache(&v, &fx.in, NULL, 0);
    /* A router that joins now gets the same from a snapshot. */
    struct rview w = {0};
    rview_replay(&w, dealer, ECT_EVENTS_END_SEQ);
    check_view_is_the_cache(&w, &fx.in, NULL, 0);
    rview_free(&w);
    rview_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    fx_close(&fx, 1);
}

/* The scenario of the issue: a router started after `ectier producer
 * --fill` finished still learns every entry it holds and announced. */
static void
test_late_router_learns_what_a_producer_process_filled(void)
{
    struct ev_fx fx;
    fx_endpoints(&fx);
    char cfg[768];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 65536, \"ec_enable_nixl\": true, "
             "\"events_endpoint\": \"%s\", \"events_replay_endpoint\": \"%s\"}}",
             fx.endpoint, fx.replay);
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
              HIDDEN, "--dtype", "bf16", "--listen", "127.0.0.1:0", "--fill", "20", "--tokens", "3",
              (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    CHECK(f != NULL);
    char line[4096];
    unsigned announced = 0;
    while (fgets(line, sizeof(line), f) != NULL && strncmp(line, "ready", 5) != 0)
        announced += line[0] == '{';
    CHECK_EQ_INT(announced, 20);

    struct rview v = {0};
    void *dealer = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    char last[65];
    ect_pattern_mm_hash(19, last);
    rview_replay_until(&v, dealer, last);
    CHECK_EQ_U64(v.n, 20);
    for (unsigned i = 0; i < 20; i++) {
        char hash[65];
        ect_pattern_mm_hash(i, hash);
        struct rentry *e = rview_find(&v, hash);
        CHECK_MSG(e != NULL, "entry %u (%s) is not in the view", i, hash);
        CHECK(e->ready && e->announced);
        CHECK_EQ_U64(e->n_blocks, 3);
    }
    rview_free(&v);
    zmq_close(dealer);
    CHECK(kill(pid, SIGTERM) == 0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    fclose(f);
    fx_close(&fx, 0);
}

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
    int n = recv_frames(s, 5000, f, 3);
    CHECK_MSG(n == (delimiter ? 3 : 2), "a refusal of %d frames", n);
    int i = 0;
    if (delimiter)
        CHECK_EQ_U64(zmq_msg_size(&f[i++]), 0);
    CHECK(zmq_msg_size(&f[i]) == 8 && be64(zmq_msg_data(&f[i])) == ECT_EVENTS_END_SEQ);
    cJSON *o = frame_json(&f[i + 1]);
    CHECK_STR_EQ(jstr(o, "type"), "error");
    CHECK_CONTAINS(jstr(o, "error"), why);
    cJSON_Delete(o);
    close_frames(f, n);
}

static void
test_replay_endpoint_refuses_hostile_requests_and_still_serves(void)
{
    struct ev_fx fx;
    fx_open(&fx, 400, "30", "");
    /* A history of large batches, one per save (waiting for each, so that
     * none coalesce): more than a slow peer's queues hold. */
    for (unsigned i = 0; i < 1500; i++) {
        char key[1000];
        big_key(key, sizeof(key), i);
        uint64_t before = metrics(&fx.in).events_batches;
        save(&fx.in, key, 1);
        for (int ms = 0; ms < 5000 && metrics(&fx.in).events_batches == before; ms++)
            nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    void *bad = fx_socket(&fx, ZMQ_DEALER, fx.replay);
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
    void *huge = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    size_t big = 1u << 20;
    char *blob = calloc(1, big);
    CHECK(blob != NULL);
    send_raw(huge, (const void *[]){"", blob}, (size_t[]){0, big}, 2);
    zmq_msg_t f[3];
    CHECK_EQ_INT(recv_frames(huge, 300, f, 3), 0);
    free(blob);
    zmq_close(huge);

    /* Peers that ask for the whole history and never read hold all the
     * replay slots; the next one is told to come back later. */
    void *stalled[ECT_EVENTS_REPLAYS_MAX];
    for (int i = 0; i < ECT_EVENTS_REPLAYS_MAX; i++) {
        stalled[i] = fx_slow_socket(&fx, ZMQ_DEALER, fx.replay, 1);
        send_request(stalled[i], 0);
    }
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    void *late = fx_socket(&fx, ZMQ_DEALER, fx.replay);
    send_request(late, 0);
    expect_refusal(late, true, "busy");
    /* Peers that vanish free their slots: a good router is served. */
    for (int i = 0; i < ECT_EVENTS_REPLAYS_MAX; i++)
        zmq_close(stalled[i]);
    struct rview v = {0};
    bool served = false;
    for (int i = 0; i < 200 && !served; i++) {
        served = rview_try_replay(&v, late, 0);
        if (!served)
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(served, "a good router was not served after the hostile ones");
    CHECK(v.batches >= 1500);
    check_view_is_the_cache(&v, &fx.in, NULL, 0);
    ect_metrics_t m = metrics(&fx.in);
    CHECK(m.events_replay_errors >= 7 + ECT_EVENTS_REPLAYS_MAX);
    rview_free(&v);
    zmq_close(late);
    fx_close(&fx, 1);
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
    struct ev_fx fx;
    fx_endpoints(&fx);
    check_create_fails_on_taken(taken, fx.replay, "events_endpoint");
    CHECK_CONTAINS(ect_last_error(), taken);
    check_create_fails_on_taken(fx.endpoint, taken, "events_replay_endpoint");
    CHECK_CONTAINS(ect_last_error(), taken);
    close(fd);
    fx_close(&fx, 0);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_batches_are_numbered_and_follow_save_announce_and_eviction),
    ECT_CASE(test_evicting_an_announced_entry_publishes_withdrawn),
    ECT_CASE(test_late_router_rebuilds_the_view_from_replay_and_follows_on),
    ECT_CASE(test_a_small_replay_buffer_answers_with_a_snapshot_in_parts),
    ECT_CASE(test_subscriber_past_its_high_water_mark_misses_batches_counts_them_and_replays),
    ECT_CASE(test_events_lost_to_a_full_queue_are_in_the_next_snapshot),
    ECT_CASE(test_late_router_learns_what_a_producer_process_filled),
    ECT_CASE(test_replay_endpoint_refuses_hostile_requests_and_still_serves),
    ECT_CASE(test_an_endpoint_in_use_fails_create_naming_it),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
