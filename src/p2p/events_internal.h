/*
 * What the event stream's two files share (events.c: the queue, the view,
 * batches and the publisher thread; events_replay.c: the ROUTER that
 * replays them).  The ownership rules and invariants are at the top of
 * events.c; everything below that is not under `lock` belongs to the
 * publisher thread.
 */
#ifndef ECT_P2P_EVENTS_INTERNAL_H
#define ECT_P2P_EVENTS_INTERNAL_H

#include <cJSON.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/config.h>

#include "common/alloc.h"
#include "common/strmap.h"
#include "p2p/events.h"

#define IDENTITY_MAX 255 /* ZeroMQ routing ids are at most 255 bytes */

struct event {
    ect__event_kind_t kind;
    uint64_t n_blocks;
    uint64_t t_ns;
    char *key; /* owned; NULL for "cleared" */
};

/* One message payload, shared by the ring and replays. */
struct msg {
    unsigned refs;
    uint64_t seq;
    size_t len;
    char data[];
};

struct view_entry {
    uint64_t n_blocks;
    bool ready;
    bool announced;
};

struct replay {
    bool active;
    unsigned char id[IDENTITY_MAX];
    size_t id_len;
    struct msg **msgs; /* one reference each */
    size_t n, sent;
    uint64_t deadline_ns;
};

struct stats {
    uint64_t batches, hwm_drops, replays, replay_errors;
};

struct ect__events {
    /* set by start, read-only afterwards */
    ect_cache_t *cache;
    char instance[ECT_CONFIG_ADDR_MAX + 1];
    uint64_t epoch_ns;
    unsigned replay_cap;
    int wake_fd; /* eventfd: the queue became non-empty, or stop */

    /* under lock */
    pthread_mutex_t lock;
    struct event queue[ECT_EVENTS_QUEUE_CAP];
    size_t head, n;
    int stopping;
    uint64_t dropped;         /* since start */
    uint64_t lost_unreported; /* dropped, not yet told in a batch's "lost" */
    uint64_t queued_total;    /* events ever queued */
    uint64_t taken_total;     /* events ever taken by the publisher */
    bool resync_pending;      /* the view missed an event: rebuild it ... */
    uint64_t resync_mark;     /* ... once taken_total reaches this */
    uint64_t view_whole_at;   /* the rebuilt view is whole once taken_total reaches this */
    struct stats stats;

    /* publisher thread only */
    pthread_t thread;
    void *zctx;
    void *pub;
    void *router;      /* NULL: no replay endpoint */
    ect_strmap_t view; /* key -> struct view_entry * */
    uint64_t next_seq;
    struct msg **ring; /* replay_cap slots, oldest at ring_head */
    size_t ring_head, ring_n, ring_bytes;
    struct replay replays[ECT_EVENTS_REPLAYS_MAX];
};

/* ---- events.c ---- */

/* Add name: v to o as a raw integer (cJSON's numbers are doubles and would
 * round it); false when out of memory. */
bool ect__events_add_u64(cJSON *o, const char *name, uint64_t v);
/* A new payload object with the fields every payload starts with (type,
 * instance, epoch, seq, ts); NULL when out of memory. */
cJSON *ect__events_payload_head(const struct ect__events *ev, const char *type, uint64_t seq);
/* Print o (consumed) into a new message of one reference; NULL when out of
 * memory. */
struct msg *ect__events_msg_from_json(cJSON *o, uint64_t seq);

/* ---- events_replay.c ---- */

/* Serve waiting replay requests (only when view_whole: a snapshot must not
 * show a view still being rebuilt; they wait in the socket) and advance the
 * replays in progress.  Returns true while some replay waits for its peer
 * (the publisher then polls again soon).  Publisher thread only. */
bool ect__events_replay_turn(struct ect__events *ev, bool view_whole);
/* Drop what r still had to send and free its slot. */
void ect__events_replay_end(struct replay *r);

/* ---- small shared helpers ---- */

/* One more of a `stats` counter (under lock: read by metrics). */
static inline void
ect__events_count(struct ect__events *ev, uint64_t *field)
{
    pthread_mutex_lock(&ev->lock);
    (*field)++;
    pthread_mutex_unlock(&ev->lock);
}

/* Drop one reference; the last frees m. */
static inline void
ect__events_msg_unref(struct msg *m)
{
    if (m != NULL && --m->refs == 0)
        ect__free(m);
}

/* Sequence numbers travel as 8 bytes, big-endian. */
static inline void
ect__events_put_be64(unsigned char out[8], uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        out[i] = (unsigned char)(v & 0xff);
}

static inline uint64_t
ect__events_get_be64(const unsigned char in[8])
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | in[i];
    return v;
}

/* The oldest sequence number the ring can replay. */
static inline uint64_t
ect__events_ring_lo(const struct ect__events *ev)
{
    return ev->ring_n > 0 ? ev->ring[ev->ring_head]->seq : ev->next_seq;
}

#endif /* ECT_P2P_EVENTS_INTERNAL_H */
