/*
 * The lifecycle event stream (SPEC §9.1; formats in src/p2p/events.h) as a
 * router sees it: a real producer instance (scheduler + worker, CPU copies,
 * real /dev/shm region) or a real `ectier producer` process, with
 * events_endpoint and events_replay_endpoint set, and real ZeroMQ SUB and
 * DEALER sockets of the test's own (tests/support/events.h).
 *
 * Live: each message is [topic, seq, JSON batch]; seqs have no gaps; saving
 * publishes "stored", announcing "announced", filling the cache "evicted",
 * and evicting an announced entry "evicted" then "withdrawn".  Late: a
 * router that connects after the work was done rebuilds the same view the
 * cache holds from replay (the whole history, or a snapshot in parts when
 * the buffer is small), and follows the live stream from there, replaying
 * the gaps a tiny high-water mark makes (and the metric counts).  Events
 * lost to a full queue: the snapshot a router then asks for is the cache,
 * never a view the publisher is still rebuilding, whenever it asks.
 * Hostile peers of the replay endpoint: test_events_hostile.c.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "p2p/events.h"
#include "pattern.h"
#include "step/scheduler_hooks.h"
#include "support/events.h"
#include "support/cli.h"

static void
test_batches_are_numbered_and_follow_save_announce_and_eviction(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_open(&fx, 16, "30", "");
    struct ts_ev_view v = {0};
    void *dealer = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    void *sub = ts_ev_live_sub(&fx, &v, dealer, 0);
    ts_ev_save(&fx.in, "img", 2);
    ts_ev_follow_until(&v, sub, dealer, "stored", "img");
    ts_ev_announce(&fx.in, "img", 2);
    ts_ev_follow_until(&v, sub, dealer, "announced", "img");
    /* "old" is the oldest evictable entry after the warm-up ones; "img" is
     * held by its announcement and must outlive the fills. */
    ts_ev_save(&fx.in, "old", 3);
    ts_ev_follow_until(&v, sub, dealer, "stored", "old");
    for (unsigned i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", i);
        ts_ev_save(&fx.in, key, 4);
    }
    ts_ev_follow_until(&v, sub, dealer, "gone", "old");
    ts_ev_follow_until(&v, sub, dealer, "stored", "fill-3");
    CHECK(ts_ev_view_find(&v, "img") != NULL);
    /* A live subscriber sees every batch in order: nothing more to replay
     * once synced (the live messages up to the replay's end are skipped). */
    CHECK_EQ_INT(v.gaps_replayed, 0);
    const char *ann[] = {"img"};
    ts_ev_check_view_is_the_cache(&v, &fx.in, ann, 1);
    ect_metrics_t m = ts_p2p_metrics(&fx.in);
    CHECK(m.cache.evicted_entries > 0);
    CHECK_EQ_U64(m.events_batches, v.last + 1);
    CHECK_EQ_U64(m.events_dropped, 0);
    ts_ev_view_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    ts_ev_fx_close(&fx, 1);
}

static void
test_evicting_an_announced_entry_publishes_withdrawn(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_open(&fx, 8, "0.05", "");
    ts_ev_save(&fx.in, "img", 2);
    ts_ev_announce(&fx.in, "img", 2);
    /* Let the announcement's lease lapse; the next steps expire its hold. */
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    for (unsigned i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof(key), "fill-%u", i);
        ts_ev_save(&fx.in, key, 4);
    }
    /* The events in stream order, read raw from a replay of the history. */
    void *dealer = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    int evicted_at = -1, withdrawn_at = -1, index = 0;
    for (int tries = 0; tries < 100 && withdrawn_at < 0; tries++) {
        index = 0;
        ts_ev_send_request(dealer, 0);
        for (;;) {
            zmq_msg_t f[3];
            int n = ts_ev_recv_frames(dealer, 5000, f, 3);
            CHECK_EQ_INT(n, 3);
            if (ts_ev_be64(zmq_msg_data(&f[1])) == ECT_EVENTS_END_SEQ) {
                ts_ev_close_frames(f, n);
                break;
            }
            cJSON *o = ts_ev_frame_json(&f[2]);
            const cJSON *e;
            cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(o, "events"))
            {
                const cJSON *key = cJSON_GetObjectItemCaseSensitive(e, "key");
                if (cJSON_IsString(key) && strcmp(key->valuestring, "img") == 0) {
                    if (strcmp(ts_ev_jstr(e, "event"), "evicted") == 0)
                        evicted_at = index;
                    if (strcmp(ts_ev_jstr(e, "event"), "withdrawn") == 0) {
                        withdrawn_at = index;
                        CHECK_EQ_U64(ts_ev_jnum(e, "n_blocks"), 2);
                    }
                }
                index++;
            }
            cJSON_Delete(o);
            ts_ev_close_frames(f, n);
        }
        if (withdrawn_at < 0)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(evicted_at >= 0 && withdrawn_at == evicted_at + 1,
              "withdrawn (event %d) must follow evicted (event %d)", withdrawn_at, evicted_at);
    zmq_close(dealer);
    ts_ev_fx_close(&fx, 1);
}

/* ---- late routers ------------------------------------------------------------------ */

static void
test_late_router_rebuilds_the_view_from_replay_and_follows_on(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_open(&fx, 20, "30", "");
    /* Work done before anyone listens: stores, announcements, evictions. */
    char keys[12][16];
    for (unsigned i = 0; i < 12; i++) {
        snprintf(keys[i], sizeof(keys[i]), "item-%u", i);
        ts_ev_save(&fx.in, keys[i], 1 + i % 3);
    }
    ts_ev_announce(&fx.in, keys[10], 1 + 10 % 3);
    ts_ev_announce(&fx.in, keys[11], 1 + 11 % 3);
    const char *ann[] = {keys[10], keys[11]};
    CHECK(ts_p2p_metrics(&fx.in).cache.evicted_entries > 0);

    struct ts_ev_view v = {0};
    void *sub = ts_ev_fx_socket(&fx, ZMQ_SUB, fx.endpoint);
    void *dealer = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    ts_ev_view_replay_until(&v, dealer, keys[11]);
    /* The whole history is buffered: batches from 0 ("cleared"), no
     * snapshot. */
    CHECK_EQ_INT(v.snapshot_parts, 0);
    CHECK(v.batches >= 2);
    ts_ev_check_view_is_the_cache(&v, &fx.in, ann, 2);

    /* And on from there: the live stream, replaying what the subscription
     * missed while it was being set up. */
    for (unsigned i = 12; i < 20; i++) {
        char key[16];
        snprintf(key, sizeof(key), "item-%u", i);
        ts_ev_save(&fx.in, key, 2);
        ts_ev_follow_until(&v, sub, dealer, "stored", key);
    }
    ts_ev_check_view_is_the_cache(&v, &fx.in, ann, 2);
    ect_metrics_t m = ts_p2p_metrics(&fx.in);
    CHECK(m.events_replays >= 1);
    CHECK_EQ_U64(m.events_replay_errors, 0);
    ts_ev_view_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    ts_ev_fx_close(&fx, 1);
}

static void
test_a_small_replay_buffer_answers_with_a_snapshot_in_parts(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_open(&fx, 1500, "30", "\"events_replay_buffer\": 3");
    /* More entries than one snapshot part holds. */
    for (unsigned i = 0; i < 1200; i++) {
        char key[16];
        snprintf(key, sizeof(key), "e%u", i);
        ts_ev_save(&fx.in, key, 1);
    }
    ts_ev_announce(&fx.in, "e7", 1);
    const char *ann[] = {"e7"};
    void *sub = ts_ev_fx_socket(&fx, ZMQ_SUB, fx.endpoint);
    void *dealer = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    struct ts_ev_view v = {0};
    ts_ev_view_replay_until(&v, dealer, "e7"); /* batch 0 is long gone */
    CHECK_EQ_INT(v.snapshot_parts, 2);
    CHECK_EQ_U64(v.last + 1, ts_p2p_metrics(&fx.in).events_batches);
    ts_ev_check_view_is_the_cache(&v, &fx.in, ann, 1);
    CHECK_EQ_U64(v.n, 1200);

    /* Asking for a snapshot (-1) or for a seq from the future (another
     * life of the stream) gets one too; asking from within the buffer gets
     * just the batches. */
    struct ts_ev_view w = {0};
    ts_ev_view_replay(&w, dealer, ECT_EVENTS_END_SEQ);
    CHECK_EQ_INT(w.snapshot_parts, 2);
    CHECK_EQ_U64(w.n, 1200);
    ts_ev_view_free(&w);
    w = (struct ts_ev_view){0};
    ts_ev_view_replay(&w, dealer, v.last + 1000);
    CHECK_EQ_INT(w.snapshot_parts, 2);
    ts_ev_view_free(&w);
    /* From the snapshot on, the live stream (and replay of what it
     * misses) keeps the view equal to the cache. */
    for (unsigned i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "more-%u", i);
        ts_ev_save(&fx.in, key, 1);
        ts_ev_follow_until(&v, sub, dealer, "stored", key);
    }
    CHECK(v.batches >= 1);
    ts_ev_check_view_is_the_cache(&v, &fx.in, ann, 1);
    ts_ev_view_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    ts_ev_fx_close(&fx, 1);
}

static void
test_subscriber_past_its_high_water_mark_misses_batches_counts_them_and_replays(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_open(&fx, 64, "30", "\"events_hwm\": 1");
    struct ts_ev_view v = {0};
    void *dealer = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    void *sub = ts_ev_live_sub(&fx, &v, dealer, 1);
    /* Not read while the instance works: with a high-water mark of one
     * message, and long keys, batches overflow the subscriber's queue. */
    uint64_t hwm_drops = 0;
    /* Bounded by time, not by a count of saves: the instance publishes on
     * its own thread, which on a busy machine runs far behind the saves. */
    time_t end = time(NULL) + 60;
    for (unsigned i = 0; i < 999999 && hwm_drops == 0 && time(NULL) < end; i++) {
        char key[1000];
        ts_ev_big_key(key, sizeof(key), i);
        ts_ev_save(&fx.in, key, 1);
        if (i % 100 == 99)
            hwm_drops = ts_p2p_metrics(&fx.in).events_hwm_drops;
    }
    CHECK_MSG(hwm_drops > 0, "no batch met the high-water mark");
    /* The metric is exported. */
    ect_metrics_t m = ts_p2p_metrics(&fx.in);
    char text[32768];
    size_t len;
    CHECK_OK(ect_metrics_format_prometheus(&m, text, sizeof(text), &len));
    CHECK_CONTAINS(text, "\nectier_events_hwm_drops_total ");
    CHECK(strstr(text, "\nectier_events_hwm_drops_total 0\n") == NULL);
    /* The router reads its backlog, and once its queue has room again the
     * next batch shows the gap in the numbering, which it replays. */
    while (ts_ev_view_follow(&v, sub, dealer, 300))
        ;
    ts_ev_save(&fx.in, "last", 1);
    ts_ev_follow_until(&v, sub, dealer, "stored", "last");
    /* On a busy machine the publisher may also fall behind the saves and
     * drop events from its queue; the snapshot the router then asks for
     * covers the numbering gap too. */
    CHECK(v.gaps_replayed + v.losses_seen > 0);
    ts_ev_check_view_is_the_cache(&v, &fx.in, NULL, 0);
    ts_ev_view_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    ts_ev_fx_close(&fx, 1);
}

/* Events come faster than the publisher sends them: the queue overflows
 * and drops some.  The batch that says so comes once the instance has
 * rebuilt its view from the cache, so a router that then asks for a
 * snapshot again sees exactly the cache. */
static void
test_events_lost_to_a_full_queue_are_in_the_next_snapshot(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_open(&fx, 64, "30", "");
    struct ts_ev_view v = {0};
    void *dealer = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    void *sub = ts_ev_live_sub(&fx, &v, dealer, 0);
    ect_cache_t *cache = ect__scheduler_cache(fx.in.sched);
    uint64_t dropped = 0;
    time_t end = time(NULL) + 30;
    for (unsigned i = 0; dropped == 0 && time(NULL) < end; i++) {
        ts_ev_alloc_ready(cache, i);
        if (i % 512 == 511)
            dropped = ts_p2p_metrics(&fx.in).events_dropped;
    }
    CHECK_MSG(dropped > 0, "the event queue never overflowed");
    ts_ev_save(&fx.in, "last", 1);
    ts_ev_follow_until(&v, sub, dealer, "stored", "last");
    CHECK(v.losses_seen > 0);
    ts_ev_check_view_is_the_cache(&v, &fx.in, NULL, 0);
    /* A router that joins now gets the same from a snapshot. */
    struct ts_ev_view w = {0};
    ts_ev_view_replay(&w, dealer, ECT_EVENTS_END_SEQ);
    ts_ev_check_view_is_the_cache(&w, &fx.in, NULL, 0);
    ts_ev_view_free(&w);
    ts_ev_view_free(&v);
    zmq_close(sub);
    zmq_close(dealer);
    ts_ev_fx_close(&fx, 1);
}

/* A router that keeps up with the stream while the event queue overflows
 * asks for a snapshot soon after a batch says "lost": while the publisher
 * may still be applying again the events queued before it rebuilt its view
 * from the cache, a view that then holds entries long evicted.  Each
 * snapshot must be a state the cache could be in (never more blocks than
 * the cache has), and the router ends with exactly the cache. */
struct keeping_up {
    struct ts_ev_view v;
    void *sub, *dealer;
    _Atomic uint64_t lost_at; /* the batch that said "lost" */
};

/* Skim batches (no parsing: it keeps up with the publisher) until one says
 * "lost", skim two more (or a quiet 200 ms), ask for a snapshot, check it,
 * and follow from there until the test's last save. */
static void *
keep_up(void *arg)
{
    struct keeping_up *k = arg;
    struct ts_ev_view *v = &k->v;
    time_t end = time(NULL) + 60;
    for (unsigned after = 0; after < 2;) {
        CHECK_MSG(time(NULL) < end, "no batch said \"lost\"");
        zmq_msg_t f[3];
        int n = ts_ev_recv_frames(k->sub, 200, f, 3);
        if (n == 0 && k->lost_at != 0)
            break;
        if (n == 3 && k->lost_at != 0)
            after++;
        else if (n == 3 && memmem(zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), "\"lost\":", 7) != NULL)
            atomic_store(&k->lost_at, ts_ev_be64(zmq_msg_data(&f[1])));
        ts_ev_close_frames(f, n);
    }
    unsigned parts = v->snapshot_parts;
    ts_ev_view_replay(v, k->dealer, ECT_EVENTS_END_SEQ);
    CHECK(v->snapshot_parts > parts && v->last >= k->lost_at);
    uint64_t blocks = 0;
    for (size_t i = 0; i < v->n; i++)
        blocks += v->e[i].n_blocks;
    CHECK_MSG(blocks <= 64,
              "the snapshot of batch %llu (loss told in %llu) holds %zu entries of %llu blocks; "
              "the cache has 64",
              (unsigned long long)v->last, (unsigned long long)k->lost_at, v->n,
              (unsigned long long)blocks);
    ts_ev_follow_until(v, k->sub, k->dealer, "stored", "last");
    return NULL;
}

static void
test_a_router_keeping_up_through_a_loss_gets_snapshots_the_cache_could_hold(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_open(&fx, 64, "30", "");
    struct keeping_up k = {0};
    k.dealer = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    k.sub = ts_ev_live_sub(&fx, &k.v, k.dealer, 0);
    pthread_t router;
    CHECK_EQ_INT(pthread_create(&router, NULL, keep_up, &k), 0);
    ect_cache_t *cache = ect__scheduler_cache(fx.in.sched);
    /* Overflow the queue, then go on in bursts that fit the room the
     * publisher makes (the pause doubles while events are still dropped):
     * the loss is told, and the view rebuilt, while the queue holds many
     * events of entries the cache has already evicted. */
    uint64_t dropped = 0;
    time_t end = time(NULL) + 30;
    unsigned i = 0;
    for (; dropped == 0 && time(NULL) < end; i++) {
        ts_ev_alloc_ready(cache, i);
        if (i % 512 == 511)
            dropped = ts_p2p_metrics(&fx.in).events_dropped;
    }
    long pause_us = 2000;
    while (atomic_load(&k.lost_at) == 0 && time(NULL) < end) {
        nanosleep(&(struct timespec){0, pause_us * 1000}, NULL);
        for (unsigned j = 0; j < 100; j++, i++)
            ts_ev_alloc_ready(cache, i);
        uint64_t now = ts_p2p_metrics(&fx.in).events_dropped;
        if (now != dropped && pause_us < 256000)
            pause_us *= 2;
        dropped = now;
    }
    CHECK_MSG(dropped > 0, "the event queue never overflowed");
    ts_ev_save(&fx.in, "last", 1);
    CHECK_EQ_INT(pthread_join(router, NULL), 0);
    ts_ev_check_view_is_the_cache(&k.v, &fx.in, NULL, 0);
    ts_ev_view_free(&k.v);
    zmq_close(k.sub);
    zmq_close(k.dealer);
    ts_ev_fx_close(&fx, 1);
}

/* The scenario of the issue: a router started after `ectier producer
 * --fill` finished still learns every entry it holds and announced. */
static void
test_late_router_learns_what_a_producer_process_filled(void)
{
    struct ts_ev_fx fx;
    ts_ev_fx_endpoints(&fx);
    char cfg[768];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 65536, \"ec_enable_nixl\": true, "
             "\"events_endpoint\": \"%s\", \"events_replay_endpoint\": \"%s\"}}",
             fx.endpoint, fx.replay);
    const char *const argv[] = {"ectier",   "producer",    "--config",   cfg,       "--model",
                                "m",        "--hidden",    TS_EV_HIDDEN, "--dtype", "bf16",
                                "--listen", "127.0.0.1:0", "--fill",     "20",      "--tokens",
                                "3",        NULL};
    FILE *f;
    pid_t pid = ts_cli_spawn(argv, &f, NULL);
    CHECK(f != NULL);
    char line[4096];
    unsigned announced = 0;
    while (fgets(line, sizeof(line), f) != NULL && strncmp(line, "ready", 5) != 0)
        announced += line[0] == '{';
    CHECK_EQ_INT(announced, 20);

    struct ts_ev_view v = {0};
    void *dealer = ts_ev_fx_socket(&fx, ZMQ_DEALER, fx.replay);
    char last[65];
    ect_pattern_mm_hash(19, last);
    ts_ev_view_replay_until(&v, dealer, last);
    CHECK_EQ_U64(v.n, 20);
    for (unsigned i = 0; i < 20; i++) {
        char hash[65];
        ect_pattern_mm_hash(i, hash);
        struct ts_ev_entry *e = ts_ev_view_find(&v, hash);
        CHECK_MSG(e != NULL, "entry %u (%s) is not in the view", i, hash);
        CHECK(e->ready && e->announced);
        CHECK_EQ_U64(e->n_blocks, 3);
    }
    ts_ev_view_free(&v);
    zmq_close(dealer);
    CHECK(kill(pid, SIGTERM) == 0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    fclose(f);
    ts_ev_fx_close(&fx, 0);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_batches_are_numbered_and_follow_save_announce_and_eviction),
    ECT_CASE(test_evicting_an_announced_entry_publishes_withdrawn),
    ECT_CASE(test_late_router_rebuilds_the_view_from_replay_and_follows_on),
    ECT_CASE(test_a_small_replay_buffer_answers_with_a_snapshot_in_parts),
    ECT_CASE(test_subscriber_past_its_high_water_mark_misses_batches_counts_them_and_replays),
    ECT_CASE(test_events_lost_to_a_full_queue_are_in_the_next_snapshot),
    ECT_CASE(test_a_router_keeping_up_through_a_loss_gets_snapshots_the_cache_could_hold),
    ECT_CASE(test_late_router_learns_what_a_producer_process_filled),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
