/*
 * The event stream's replay (contract in src/p2p/events.h): a ROUTER
 * socket that answers "everything since batch N" with the buffered
 * batches from N on, or with a snapshot of the view when N is older than
 * the ring, then an end marker.  At most ECT_EVENTS_REPLAYS_MAX replays run
 * at once, one per peer; each sends what its peer can take and is
 * abandoned past its deadline, so a slow or vanished peer never stalls
 * publishing.  Every request is peer input: anything but [id, "", N] gets
 * an error reply naming what was wrong.
 *
 * Publisher thread only (events.c hands it the socket and the ring).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "p2p/events_internal.h"

#define REQUESTS_PER_TURN 64 /* replay requests read per loop, so publishing goes on */

/* Answer [id, ("",) END, error JSON]: the end marker with the reason. */
static void
reply_error(struct ect__events *ev, const unsigned char *id, size_t id_len, bool delimiter,
            const char *why)
{
    ect__events_count(ev, &ev->stats.replay_errors);
    cJSON *o = cJSON_CreateObject();
    char *text = NULL;
    if (o != NULL && cJSON_AddStringToObject(o, "type", "error") &&
        cJSON_AddStringToObject(o, "error", why))
        text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    unsigned char end[8];
    ect__events_put_be64(end, ECT_EVENTS_END_SEQ);
    /* Best effort: a peer that cannot take one small message loses it. */
    if (text != NULL && zmq_send(ev->router, id, id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) >= 0) {
        if (delimiter)
            zmq_send(ev->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->router, end, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->router, text, strlen(text), ZMQ_DONTWAIT);
    }
    ect__free(text);
}

void
ect__events_replay_end(struct replay *r)
{
    for (size_t i = r->sent; i < r->n; i++)
        ect__events_msg_unref(r->msgs[i]);
    ect__free(r->msgs);
    r->msgs = NULL;
    r->active = false;
}

struct snap_ctx {
    struct ect__events *ev;
    struct replay *r;
    size_t parts;
    cJSON *part; /* the part being filled */
    cJSON *entries;
    size_t in_part;
    bool failed;
};

/* Open a part: the head, its number and the count, an empty entries list. */
static bool
snap_open_part(struct snap_ctx *c)
{
    c->part = ect__events_payload_head(c->ev, "snapshot", c->ev->next_seq - 1);
    c->entries = NULL;
    c->in_part = 0;
    if (c->part != NULL && ect__events_add_u64(c->part, "part", c->r->n) &&
        ect__events_add_u64(c->part, "parts", c->parts))
        c->entries = cJSON_AddArrayToObject(c->part, "entries");
    if (c->entries == NULL)
        c->failed = true;
    return !c->failed;
}

static void
snap_close_part(struct snap_ctx *c)
{
    if (c->part == NULL)
        return;
    struct msg *m = c->failed ? (cJSON_Delete(c->part), NULL)
                              : ect__events_msg_from_json(c->part, c->ev->next_seq - 1);
    c->part = NULL;
    if (m == NULL)
        c->failed = true;
    else
        c->r->msgs[c->r->n++] = m;
}

static void
snap_add(ect_strmap_node_t *node, void *user)
{
    struct snap_ctx *c = user;
    const struct view_entry *ve = node->value;
    if (c->failed || (c->part == NULL && !snap_open_part(c)))
        return;
    cJSON *e = cJSON_CreateObject();
    if (e == NULL || !cJSON_AddStringToObject(e, "key", node->key) ||
        !ect__events_add_u64(e, "n_blocks", ve->n_blocks) ||
        !cJSON_AddBoolToObject(e, "ready", ve->ready) ||
        !cJSON_AddBoolToObject(e, "announced", ve->announced) ||
        !cJSON_AddItemToArray(c->entries, e)) {
        cJSON_Delete(e);
        c->failed = true;
        return;
    }
    if (++c->in_part == ECT_EVENTS_SNAPSHOT_PART)
        snap_close_part(c);
}

/* The snapshot of the view after batch next_seq-1 (next_seq > 0), as r's
 * messages.  Returns false when out of memory. */
static bool
replay_snapshot(struct ect__events *ev, struct replay *r)
{
    size_t entries = ev->view.count;
    size_t parts =
        entries == 0 ? 1 : (entries + ECT_EVENTS_SNAPSHOT_PART - 1) / ECT_EVENTS_SNAPSHOT_PART;
    if ((r->msgs = ect__calloc(parts, sizeof(*r->msgs))) == NULL)
        return false;
    struct snap_ctx c = {.ev = ev, .r = r, .parts = parts};
    if (entries == 0)
        snap_open_part(&c); /* one part, no entries */
    else
        ect__strmap_each(&ev->view, snap_add, &c);
    snap_close_part(&c);
    return !c.failed && r->n == parts;
}

/* r's messages: the buffered batches from n on. */
static bool
replay_batches(struct ect__events *ev, struct replay *r, uint64_t from)
{
    size_t skip = (size_t)(from - ect__events_ring_lo(ev));
    size_t count_ = ev->ring_n - skip;
    if (count_ > 0 && (r->msgs = ect__calloc(count_, sizeof(*r->msgs))) == NULL)
        return false;
    for (size_t i = 0; i < count_; i++) {
        struct msg *m = ev->ring[(ev->ring_head + skip + i) % ev->replay_cap];
        m->refs++;
        r->msgs[r->n++] = m;
    }
    return true;
}

/* Start answering a valid request for "everything since from". */
static void
replay_start(struct ect__events *ev, const unsigned char *id, size_t id_len, uint64_t from)
{
    struct replay *free_slot = NULL;
    for (size_t i = 0; i < ECT_EVENTS_REPLAYS_MAX; i++) {
        struct replay *r = &ev->replays[i];
        if (!r->active) {
            if (free_slot == NULL)
                free_slot = r;
        } else if (r->id_len == id_len && memcmp(r->id, id, id_len) == 0) {
            reply_error(ev, id, id_len, true, "busy: a replay to this peer is in progress");
            return;
        }
    }
    if (free_slot == NULL) {
        char why[80];
        snprintf(why, sizeof(why), "busy: %d replays are in progress; ask again later",
                 ECT_EVENTS_REPLAYS_MAX);
        reply_error(ev, id, id_len, true, why);
        return;
    }
    struct replay *r = free_slot;
    *r = (struct replay){.active = true, .id_len = id_len};
    memcpy(r->id, id, id_len);
    r->deadline_ns = ect__now_ns() + (uint64_t)ECT_EVENTS_REPLAY_DEADLINE_S * 1000000000ull;
    bool ok;
    /* next_seq is 0 only when batch 0 could not be built: nothing to show. */
    if (ev->next_seq == 0 || (from >= ect__events_ring_lo(ev) && from <= ev->next_seq))
        ok = replay_batches(ev, r, from);
    else
        ok = replay_snapshot(ev, r);
    if (!ok) {
        ect__events_replay_end(r);
        reply_error(ev, id, id_len, true, "out of memory: ask again later");
    }
}

/* Read one request (all of its frames) and answer or refuse it. */
static void
serve_request(struct ect__events *ev)
{
    unsigned char id[IDENTITY_MAX], seq[8];
    size_t id_len = 0, frames = 0;
    bool delimiter = false, seq_ok = false;
    size_t seq_len = 0;
    for (bool more = true; more;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, ev->router, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&part);
            if (frames == 0)
                return; /* nothing waiting */
            break;
        }
        size_t len = zmq_msg_size(&part);
        if (frames == 0 && len <= sizeof(id)) {
            memcpy(id, zmq_msg_data(&part), len);
            id_len = len;
        } else if (frames == 1) {
            delimiter = len == 0;
        } else if (frames == 2) {
            seq_len = len;
            if ((seq_ok = len == 8))
                memcpy(seq, zmq_msg_data(&part), 8);
        }
        frames++;
        more = zmq_msg_more(&part);
        zmq_msg_close(&part);
    }
    char why[160];
    if (!delimiter || frames != 3 || !seq_ok) {
        snprintf(why, sizeof(why),
                 "bad request (%zu frames, sequence frame of %zu bytes): send [\"\", N] with N "
                 "8 bytes big-endian",
                 frames > 0 ? frames - 1 : 0, seq_len);
        reply_error(ev, id, id_len, delimiter, why);
        return;
    }
    replay_start(ev, id, id_len, ect__events_get_be64(seq));
}

/* Send what r's peer can take now.  Returns true when r is finished. */
static bool
replay_advance(struct ect__events *ev, struct replay *r, uint64_t now)
{
    for (;;) {
        bool end = r->sent == r->n;
        unsigned char seq[8];
        ect__events_put_be64(seq, end ? ECT_EVENTS_END_SEQ : r->msgs[r->sent]->seq);
        if (zmq_send(ev->router, r->id, r->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
            if (zmq_errno() == EAGAIN && now < r->deadline_ns)
                return false; /* its queue is full: later */
            /* Gone (EHOSTUNREACH) or too slow: abandon. */
            ect__events_count(ev, &ev->stats.replay_errors);
            return true;
        }
        zmq_send(ev->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(ev->router, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
        if (end) {
            zmq_send(ev->router, "", 0, ZMQ_DONTWAIT);
            ect__events_count(ev, &ev->stats.replays);
            return true;
        }
        struct msg *m = r->msgs[r->sent];
        zmq_send(ev->router, m->data, m->len, ZMQ_DONTWAIT);
        r->msgs[r->sent++] = NULL;
        ect__events_msg_unref(m);
    }
}

/* Serve requests (once the view is whole) and advance replays.  Returns
 * true while some replay waits for its peer (the loop then polls again
 * soon). */
bool
ect__events_replay_turn(struct ect__events *ev, bool view_whole)
{
    if (ev->router == NULL)
        return false;
    for (int i = 0; view_whole && i < REQUESTS_PER_TURN; i++) {
        int events = 0;
        size_t len = sizeof(events);
        if (zmq_getsockopt(ev->router, ZMQ_EVENTS, &events, &len) != 0 || !(events & ZMQ_POLLIN))
            break;
        serve_request(ev);
    }
    bool waiting = false;
    uint64_t now = ect__now_ns();
    for (size_t i = 0; i < ECT_EVENTS_REPLAYS_MAX; i++) {
        struct replay *r = &ev->replays[i];
        if (!r->active)
            continue;
        if (replay_advance(ev, r, now))
            ect__events_replay_end(r);
        else
            waiting = true;
    }
    return waiting;
}
