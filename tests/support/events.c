/*
 * Event-stream test helpers (see events.h).
 */
#include "support/events.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "p2p/events.h"
#include "pattern.h"
#include "step/scheduler_hooks.h"

/* ---- a router's view, built only from what the stream says ---------------- */

struct ts_ev_entry *
ts_ev_view_find(struct ts_ev_view *v, const char *key)
{
    for (size_t i = 0; i < v->n; i++)
        if (strcmp(v->e[i].key, key) == 0)
            return &v->e[i];
    return NULL;
}

static struct ts_ev_entry *
view_get(struct ts_ev_view *v, const char *key)
{
    struct ts_ev_entry *e = ts_ev_view_find(v, key);
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
view_remove(struct ts_ev_view *v, const char *key)
{
    struct ts_ev_entry *e = ts_ev_view_find(v, key);
    if (e != NULL) {
        free(e->key);
        *e = v->e[--v->n];
    }
}

void
ts_ev_view_clear(struct ts_ev_view *v)
{
    while (v->n > 0)
        free(v->e[--v->n].key);
}

void
ts_ev_view_free(struct ts_ev_view *v)
{
    ts_ev_view_clear(v);
    free(v->e);
    *v = (struct ts_ev_view){0};
}

const char *
ts_ev_jstr(const cJSON *o, const char *name)
{
    const char *s = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, name));
    CHECK_MSG(s != NULL, "no string \"%s\"", name);
    return s;
}

uint64_t
ts_ev_jnum(const cJSON *o, const char *name)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(o, name);
    CHECK_MSG(cJSON_IsNumber(n), "no number \"%s\"", name);
    return (uint64_t)n->valuedouble;
}

uint64_t
ts_ev_be64(const unsigned char *p)
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
    CHECK_STR_EQ(ts_ev_jstr(o, "type"), type);
    CHECK_CONTAINS(ts_ev_jstr(o, "instance"), "ectier_");
    CHECK(ts_ev_jnum(o, "epoch") > 1600000000ull * 1000000000ull);
    CHECK(ts_ev_jnum(o, "ts") >= ts_ev_jnum(o, "epoch"));
    CHECK_EQ_U64(ts_ev_jnum(o, "seq"), seq);
}

static void
view_apply_batch(struct ts_ev_view *v, const cJSON *o, uint64_t seq)
{
    check_head(o, "batch", seq);
    if (cJSON_GetObjectItemCaseSensitive(o, "lost") != NULL) {
        CHECK(ts_ev_jnum(o, "lost") > 0);
        v->losses_seen++;
        v->want_snapshot = true;
    }
    const cJSON *events = cJSON_GetObjectItemCaseSensitive(o, "events");
    CHECK(cJSON_IsArray(events));
    const cJSON *e;
    cJSON_ArrayForEach(e, events)
    {
        const char *what = ts_ev_jstr(e, "event");
        CHECK(ts_ev_jnum(e, "t") > 0);
        if (strcmp(what, "cleared") == 0) {
            ts_ev_view_clear(v);
            continue;
        }
        const char *key = ts_ev_jstr(e, "key");
        if (strcmp(what, "stored") == 0 || strcmp(what, "announced") == 0) {
            struct ts_ev_entry *r = view_get(v, key);
            r->n_blocks = ts_ev_jnum(e, "n_blocks");
            if (what[0] == 's')
                r->ready = true;
            else
                r->announced = true;
        } else if (strcmp(what, "evicted") == 0 || strcmp(what, "discarded") == 0) {
            view_remove(v, key);
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
int
ts_ev_recv_frames(void *sock, int ms, zmq_msg_t *frames, int max)
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

void
ts_ev_close_frames(zmq_msg_t *frames, int n)
{
    for (int i = 0; i < n; i++)
        zmq_msg_close(&frames[i]);
}

cJSON *
ts_ev_frame_json(zmq_msg_t *f)
{
    cJSON *o = cJSON_ParseWithLength(zmq_msg_data(f), zmq_msg_size(f));
    CHECK_MSG(o != NULL, "not JSON: %.*s", (int)zmq_msg_size(f), (const char *)zmq_msg_data(f));
    return o;
}

void
ts_ev_send_request(void *dealer, uint64_t from)
{
    unsigned char seq[8];
    put_be64(seq, from);
    CHECK(zmq_send(dealer, "", 0, ZMQ_SNDMORE) == 0);
    CHECK(zmq_send(dealer, seq, 8, 0) == 8);
}

/* Ask for everything since from and apply the answer up to its end marker:
 * a snapshot replaces the view, batches follow on.  Returns false when the
 * request was refused (busy), with the view unchanged. */
bool
ts_ev_view_try_replay(struct ts_ev_view *v, void *dealer, uint64_t from)
{
    ts_ev_send_request(dealer, from);
    size_t parts = 0, parts_seen = 0;
    for (;;) {
        zmq_msg_t f[3];
        int n = ts_ev_recv_frames(dealer, 10000, f, 3);
        CHECK_MSG(n == 3, "a replay answer of %d frames", n);
        CHECK_EQ_U64(zmq_msg_size(&f[0]), 0);
        CHECK_EQ_U64(zmq_msg_size(&f[1]), 8);
        uint64_t seq = ts_ev_be64(zmq_msg_data(&f[1]));
        if (seq == ECT_EVENTS_END_SEQ) {
            bool refused = zmq_msg_size(&f[2]) > 0;
            if (refused) {
                cJSON *o = ts_ev_frame_json(&f[2]);
                CHECK_STR_EQ(ts_ev_jstr(o, "type"), "error");
                CHECK_MSG(parts_seen == 0 && strstr(ts_ev_jstr(o, "error"), "busy") != NULL,
                          "replay refused: %s", ts_ev_jstr(o, "error"));
                cJSON_Delete(o);
            }
            ts_ev_close_frames(f, n);
            if (refused)
                return false;
            break;
        }
        cJSON *o = ts_ev_frame_json(&f[2]);
        if (strcmp(ts_ev_jstr(o, "type"), "snapshot") == 0) {
            check_head(o, "snapshot", seq);
            if (ts_ev_jnum(o, "part") == 0) {
                ts_ev_view_clear(v);
                v->want_snapshot = false;
                parts = ts_ev_jnum(o, "parts");
            }
            CHECK_EQ_U64(ts_ev_jnum(o, "part"), parts_seen);
            CHECK_EQ_U64(ts_ev_jnum(o, "parts"), parts);
            parts_seen++;
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "entries"))
            {
                struct ts_ev_entry *r = view_get(v, ts_ev_jstr(e, "key"));
                r->n_blocks = ts_ev_jnum(e, "n_blocks");
                r->ready = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "ready"));
                r->announced = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "announced"));
            }
            v->last = seq;
            v->synced = true;
            v->snapshot_parts++;
        } else if (!v->synced || seq == v->last + 1) {
            view_apply_batch(v, o, seq);
        } else {
            CHECK_MSG(seq <= v->last, "replay jumped from %llu to %llu",
                      (unsigned long long)v->last, (unsigned long long)seq);
        }
        cJSON_Delete(o);
        ts_ev_close_frames(f, n);
    }
    CHECK_EQ_U64(parts_seen, parts);
    return true;
}

/* Replay from `from`; when a batch said "lost", then ask for a snapshot,
 * as a router does. */
void
ts_ev_view_replay(struct ts_ev_view *v, void *dealer, uint64_t from)
{
    CHECK_MSG(ts_ev_view_try_replay(v, dealer, from), "replay refused");
    if (v->want_snapshot)
        CHECK_MSG(ts_ev_view_try_replay(v, dealer, ECT_EVENTS_END_SEQ), "snapshot refused");
    CHECK(!v->want_snapshot);
}

/* Rebuild v from replay (from 0) until it shows the last thing the test
 * did, key announced: the stream runs a little behind the cache. */
void
ts_ev_view_replay_until(struct ts_ev_view *v, void *dealer, const char *key)
{
    for (int i = 0; i < 500; i++) {
        ts_ev_view_clear(v);
        v->synced = false;
        v->batches = v->snapshot_parts = 0;
        ts_ev_view_replay(v, dealer, 0);
        struct ts_ev_entry *e = ts_ev_view_find(v, key);
        if (e != NULL && e->announced)
            return;
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(0, "replay never showed '%s' announced", key);
}

/* Take one live message within ms: skip what is known, replay a gap.
 * Returns 0 on timeout. */
int
ts_ev_view_follow(struct ts_ev_view *v, void *sub, void *dealer, int ms)
{
    zmq_msg_t f[3];
    int n = ts_ev_recv_frames(sub, ms, f, 3);
    if (n == 0)
        return 0;
    CHECK_EQ_INT(n, 3);
    CHECK(zmq_msg_size(&f[0]) == strlen(ECT_EVENTS_TOPIC) &&
          memcmp(zmq_msg_data(&f[0]), ECT_EVENTS_TOPIC, zmq_msg_size(&f[0])) == 0);
    CHECK_EQ_U64(zmq_msg_size(&f[1]), 8);
    uint64_t seq = ts_ev_be64(zmq_msg_data(&f[1]));
    if (v->synced && seq > v->last + 1) {
        v->gaps_replayed++;
        ts_ev_view_replay(v, dealer, v->last + 1);
    }
    if (!v->synced || seq == v->last + 1) {
        cJSON *o = ts_ev_frame_json(&f[2]);
        view_apply_batch(v, o, seq);
        cJSON_Delete(o);
    }
    ts_ev_close_frames(f, n);
    if (v->want_snapshot)
        ts_ev_view_replay(v, dealer, ECT_EVENTS_END_SEQ);
    return 1;
}

/* ---- instances and sockets ---------------------------------------------------- */

void
ts_ev_fx_endpoints(struct ts_ev_fx *fx)
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
void
ts_ev_fx_open(struct ts_ev_fx *fx, unsigned num_blocks, const char *lease, const char *extra)
{
    ts_ev_fx_endpoints(fx);
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %u, \"ec_enable_nixl\": true, "
             "\"announce_lease_s\": %s, \"events_endpoint\": \"%s\", "
             "\"events_replay_endpoint\": \"%s\"%s%s}}",
             num_blocks * TS_EV_BLOCK, lease, fx->endpoint, fx->replay, extra[0] ? ", " : "",
             extra);
    setenv("ECTIER_SIDE_CHANNEL_HOST", "127.0.0.1", 1);
    setenv("ECTIER_SIDE_CHANNEL_PORT", "0", 1);
    struct ect_cli_instance_args a = {.cmd = "test",
                                      .config = cfg,
                                      .model = "m",
                                      .hidden = TS_EV_HIDDEN,
                                      .dtype = "bf16",
                                      .engine_version = "0.11.0"};
    CHECK_MSG(ect_cli_instance_open(&fx->in, &a, "") == 0, "instance: %s", ect_last_error());
}

/* A socket of the test's; rcvhwm > 0 also makes it a slow reader (tiny
 * queue and kernel buffer). */
void *
ts_ev_fx_slow_socket(struct ts_ev_fx *fx, int type, const char *endpoint, int rcvhwm)
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

void *
ts_ev_fx_socket(struct ts_ev_fx *fx, int type, const char *endpoint)
{
    return ts_ev_fx_slow_socket(fx, type, endpoint, 0);
}

void
ts_ev_fx_close(struct ts_ev_fx *fx, int with_instance)
{
    zmq_ctx_term(fx->zctx);
    if (with_instance)
        ect_cli_instance_close(&fx->in);
}

void
ts_ev_save(struct ect_cli_instance *in, const char *key, uint64_t tokens)
{
    size_t n = tokens * TS_EV_BLOCK;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    ect_pattern_fill(key, buf, n);
    CHECK_OK(ect_cli_instance_save(in, key, tokens, buf, n));
    free(buf);
}

void
ts_ev_announce(struct ect_cli_instance *in, const char *key, uint64_t tokens)
{
    char *params = ts_p2p_announce(in, key, tokens);
    CHECK_MSG(strstr(params, "peer_port") != NULL, "'%s' was not announced: %s", key, params);
    ect_free(params);
}

/* The view equals the cache: the same ready entries with their sizes, and
 * announced exactly for the keys in announced[] still cached. */
void
ts_ev_check_view_is_the_cache(struct ts_ev_view *v, struct ect_cli_instance *in,
                              const char *const *announced, size_t n_announced)
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

/* ---- live subscribers ---------------------------------------------------------- */

/* A key of len - 1 bytes, unique for i: large batches fill queues fast. */
void
ts_ev_big_key(char *key, size_t len, unsigned i)
{
    int l = snprintf(key, len, "big-%06u-", i);
    memset(key + l, 'k', len - 1 - (size_t)l);
    key[len - 1] = '\0';
}

void
ts_ev_alloc_ready(ect_cache_t *cache, unsigned i)
{
    char key[900];
    ts_ev_big_key(key, sizeof(key), i);
    CHECK_OK(ect_cache_alloc(cache, key, 1 + i % 3));
    CHECK_OK(ect_cache_mark_ready(cache, key));
}

/* A router that is live and synced: small saves until one batch reaches
 * its subscriber, then the history from replay. */
void *
ts_ev_live_sub(struct ts_ev_fx *fx, struct ts_ev_view *v, void *dealer, int rcvhwm)
{
    void *sub = ts_ev_fx_slow_socket(fx, ZMQ_SUB, fx->endpoint, rcvhwm);
    for (unsigned i = 0;; i++) {
        CHECK_MSG(i < 200, "no batch reached the subscriber");
        char key[32];
        snprintf(key, sizeof(key), "warm-%u", i);
        ts_ev_save(&fx->in, key, 1);
        zmq_msg_t f[3];
        int n = ts_ev_recv_frames(sub, 50, f, 3);
        ts_ev_close_frames(f, n);
        if (n > 0)
            break;
    }
    ts_ev_view_replay(v, dealer, 0);
    return sub;
}

/* Follow the stream until an event `what` of key has been applied. */
void
ts_ev_follow_until(struct ts_ev_view *v, void *sub, void *dealer, const char *what, const char *key)
{
    /* Bounded by time: a slow subscriber may have a long backlog. */
    time_t end = time(NULL) + 30;
    while (time(NULL) < end) {
        struct ts_ev_entry *e = ts_ev_view_find(v, key);
        if ((strcmp(what, "stored") == 0 && e != NULL && e->ready) ||
            (strcmp(what, "announced") == 0 && e != NULL && e->announced) ||
            (strcmp(what, "gone") == 0 && e == NULL))
            return;
        /* Quiet: the last batch may have been missed (a subscription still
         * being set up, a full queue); ask for anything newer. */
        if (!ts_ev_view_follow(v, sub, dealer, 200)) {
            v->quiet_replays++;
            ts_ev_view_replay(v, dealer, v->last + 1);
        }
    }
    CHECK_MSG(0, "no %s of '%s' (view at batch %llu, %u batches, %u gaps replayed)", what, key,
              (unsigned long long)v->last, v->batches, v->gaps_replayed);
}
