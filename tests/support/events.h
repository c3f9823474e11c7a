/*
 * Helpers shared by the event-stream tests (test_events.c, live and late
 * routers; test_events_hostile.c, hostile peers of the replay endpoint): a
 * router's view of a producer's cache built only from what the stream says,
 * the stream's frames, and a producer instance with both endpoints on
 * abstract-namespace ipc sockets.  Each fails the case on anything the
 * stream should not have said.
 */
#ifndef ECT_TESTS_SUPPORT_EVENTS_H
#define ECT_TESTS_SUPPORT_EVENTS_H

#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <zmq.h>

#include <ectier/ectier.h>

#include "instance.h"
#include "support/p2p.h" /* ts_p2p_metrics */

#define TS_EV_HIDDEN "64" /* bf16: 128-byte blocks */
#define TS_EV_BLOCK  128u

/* ---- a router's view ---------------------------------------------------------- */

struct ts_ev_entry {
    char *key; /* owned */
    uint64_t n_blocks;
    bool ready, announced;
};

struct ts_ev_view {
    struct ts_ev_entry *e;
    size_t n, cap;
    uint64_t last; /* seq of the last batch applied */
    bool synced;   /* last is meaningful */
    unsigned batches, snapshot_parts, gaps_replayed, quiet_replays;
    unsigned losses_seen; /* batches that said "lost" */
    bool want_snapshot;   /* a batch said "lost": the view misses events */
};

/* The view's entry for key, or NULL. */
struct ts_ev_entry *ts_ev_view_find(struct ts_ev_view *v, const char *key);
/* Forget every entry (the view stays usable); free: and its memory. */
void ts_ev_view_clear(struct ts_ev_view *v);
void ts_ev_view_free(struct ts_ev_view *v);
/* Ask the replay endpoint for everything since from and apply the answer:
 * a snapshot replaces the view, batches follow on.  false: refused (busy),
 * the view unchanged. */
bool ts_ev_view_try_replay(struct ts_ev_view *v, void *dealer, uint64_t from);
/* The same, failing the case when refused; a batch that said "lost" makes
 * it ask for a snapshot, as a router does. */
void ts_ev_view_replay(struct ts_ev_view *v, void *dealer, uint64_t from);
/* Rebuild the view from replay (from 0) until it shows key announced. */
void ts_ev_view_replay_until(struct ts_ev_view *v, void *dealer, const char *key);
/* Take one live message within ms (skip what is known, replay a gap);
 * 0 on timeout. */
int ts_ev_view_follow(struct ts_ev_view *v, void *sub, void *dealer, int ms);

/* ---- frames ------------------------------------------------------------------ */

/* A string / number member of a JSON object (the case fails without it). */
const char *ts_ev_jstr(const cJSON *o, const char *name);
uint64_t ts_ev_jnum(const cJSON *o, const char *name);
/* A big-endian 64-bit sequence number. */
uint64_t ts_ev_be64(const unsigned char *p);
/* One multipart message of at most max frames within ms into frames[]
 * (close them with ts_ev_close_frames); the frame count, 0 on timeout. */
int ts_ev_recv_frames(void *sock, int ms, zmq_msg_t *frames, int max);
void ts_ev_close_frames(zmq_msg_t *frames, int n);
/* A frame as JSON (cJSON_Delete it); the case fails if it is not. */
cJSON *ts_ev_frame_json(zmq_msg_t *f);
/* A replay request for everything since from: ["", seq]. */
void ts_ev_send_request(void *dealer, uint64_t from);

/* ---- a producer instance and the test's sockets ------------------------------------ */

struct ts_ev_fx {
    struct ect_cli_instance in;
    char endpoint[128];
    char replay[128];
    void *zctx;
};

/* Unique endpoints in Linux's abstract namespace and a ZeroMQ context. */
void ts_ev_fx_endpoints(struct ts_ev_fx *fx);
/* ts_ev_fx_endpoints and a producer instance of num_blocks blocks
 * publishing on them; lease: announce_lease_s; extra: more extra-config
 * members (or ""). */
void ts_ev_fx_open(struct ts_ev_fx *fx, unsigned num_blocks, const char *lease, const char *extra);
/* A socket of the test's connected to endpoint (SUB: subscribed to
 * "ectier."); rcvhwm > 0 also makes it a slow reader (tiny queue and kernel
 * buffer). */
void *ts_ev_fx_slow_socket(struct ts_ev_fx *fx, int type, const char *endpoint, int rcvhwm);
void *ts_ev_fx_socket(struct ts_ev_fx *fx, int type, const char *endpoint);
/* End the context (every socket must be closed) and the instance if asked. */
void ts_ev_fx_close(struct ts_ev_fx *fx, int with_instance);
/* Save / announce key (tokens blocks of the test pattern). */
void ts_ev_save(struct ect_cli_instance *in, const char *key, uint64_t tokens);
void ts_ev_announce(struct ect_cli_instance *in, const char *key, uint64_t tokens);
/* The view equals the cache: the same ready entries with their sizes, and
 * announced exactly for the keys in announced[] still cached. */
void ts_ev_check_view_is_the_cache(struct ts_ev_view *v, struct ect_cli_instance *in,
                                   const char *const *announced, size_t n_announced);

/* ---- live subscribers ---------------------------------------------------------- */

/* A key of len - 1 bytes, unique for i: large batches fill queues fast. */
void ts_ev_big_key(char *key, size_t len, unsigned i);
/* Entry i of 899-byte keys and 1 + i % 3 blocks, straight into the cache
 * from this thread and marked ready: an allocation (evicting as needed) and
 * a mark_ready take well under a microsecond, a batch of such keys far
 * more to build and send, so a loop of these overflows the event queue. */
void ts_ev_alloc_ready(ect_cache_t *cache, unsigned i);
/* A router that is live and synced: small saves until one batch reaches its
 * subscriber (returned), then the history from replay into v. */
void *ts_ev_live_sub(struct ts_ev_fx *fx, struct ts_ev_view *v, void *dealer, int rcvhwm);
/* Follow the stream until an event what ("stored", "announced", "gone") of
 * key has been applied; fails the case after 30 s. */
void ts_ev_follow_until(struct ts_ev_view *v, void *sub, void *dealer, const char *what,
                        const char *key);

#endif /* ECT_TESTS_SUPPORT_EVENTS_H */
