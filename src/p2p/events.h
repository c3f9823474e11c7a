/*
 * The lifecycle event stream (SPEC §9.1), shaped like the engine's KV-cache
 * event stream that cache-aware routers already follow: numbered batches on
 * a PUB socket, a bounded buffer of recent batches, and a ROUTER socket that
 * replays them, so a router that joins late or loses messages rebuilds its
 * view of the instance's cache.  The formats below are the contract; the
 * README repeats them for users.
 *
 * PUB (events_endpoint): three frames per message
 *     "ectier.events" | seq: 8 bytes, big-endian unsigned | payload: JSON
 * Batches are numbered 0, 1, 2, ... with no gaps for the stream's life.
 * Batch 0 is published at start and holds one "cleared" event: whatever a
 * router knew of this instance is void (it restarted).  A batch payload:
 *     {"type": "batch", "instance": "<region name>", "epoch": <ns>,
 *      "seq": <n>, "ts": <ns>, "lost": <k>, "events": [<event>, ...]}
 * epoch is the Unix time (ns) the stream started: it tells two lives of an
 * instance apart.  ts is when the batch was sent.  lost (present only when
 * not 0) counts events dropped before this batch because the in-process
 * queue was full (or memory ran out): a view built from the stream then
 * misses them, so a router asks for a snapshot.  A batch says lost only
 * once the instance has rebuilt its own view from the cache (it does so
 * before it serves another replay), so that snapshot is whole; only the
 * "announced" of an entry announced while events were lost may be missing.
 * Events, in the order they happened:
 *     {"event": "cleared", "t": <ns>}
 *     {"event": "stored"|"evicted"|"discarded"|"announced"|"withdrawn",
 *      "key": "<cache key>", "n_blocks": <n>, "t": <ns>}
 * stored: a save (or a peer read) made the entry ready; evicted: a ready
 * entry was evicted; discarded: a not-ready entry was freed; announced: the
 * producer announced the entry in ec_transfer_params; withdrawn: an
 * announced entry left the cache (right after its evicted/discarded).
 *
 * The view a router keeps: key -> {n_blocks, ready, announced}; stored sets
 * ready, announced sets announced (an entry may be announced while it is
 * still being saved), evicted and discarded remove the key, cleared empties
 * the view.
 *
 * ROUTER (events_replay_endpoint): a request is [identity, "", N] with N 8
 * bytes big-endian (a DEALER sends ["", N]; a REQ socket sends [N] and
 * ZeroMQ adds the empty frame, but takes only the first answer).  The
 * answer is a series of [identity, "", seq, payload] messages and then the
 * end marker [identity, "", 0xFFFFFFFFFFFFFFFF, ""]:
 *   - N within the buffer (oldest buffered <= N <= next seq): the batches
 *     N .. newest;
 *   - N older than the buffer, newer than the next batch (another life of
 *     the stream), or 0xFFFFFFFFFFFFFFFF (ask for it): a snapshot of the view
 *     after batch S = newest, in parts of at most 1024 entries:
 *         {"type": "snapshot", "instance", "epoch", "seq": S, "ts",
 *          "part": i, "parts": k, "entries": [{"key", "n_blocks", "ready",
 *          "announced"}, ...]}
 *     each sent with seq frame S; the router replaces its view with the
 *     union of the parts and continues from batch S + 1.
 * A malformed request (frames, lengths), or one refused because 4 replays
 * are in progress or this peer already has one, is answered by the end
 * marker with a payload {"type": "error", "error": "<why>"}.  Requests of
 * more than 64 bytes a frame disconnect the peer (ZeroMQ's maximum message
 * size).  A replay that its peer does not read within 30 s is abandoned.
 *
 * Producers of events never block and never touch a socket: they append to
 * a bounded queue under a mutex (the cache listener does so under the
 * cache's lock) and wake the publisher thread through an eventfd; that one
 * thread owns both sockets, the view, the replay buffer and the replays in
 * progress.  When the queue is full the event is dropped and counted.
 */
#ifndef ECT_P2P_EVENTS_H
#define ECT_P2P_EVENTS_H

#include <stdint.h>

#include <ectier/cache.h>
#include <ectier/status.h>

struct ect__events;

/* The PUB topic of every batch. */
#define ECT_EVENTS_TOPIC "ectier.events"
/* The seq frame of the replay's end marker (-1 as a signed 64-bit number);
 * also the request for a snapshot. */
#define ECT_EVENTS_END_SEQ UINT64_MAX
/* Events queued for the publisher at most (then dropped and counted). */
#define ECT_EVENTS_QUEUE_CAP 4096
/* Entries per snapshot message at most. */
#define ECT_EVENTS_SNAPSHOT_PART 1024
/* Replays in progress at most, and how long a peer has to read one. */
#define ECT_EVENTS_REPLAYS_MAX       4
#define ECT_EVENTS_REPLAY_DEADLINE_S 30
/* Bytes of a replay request frame at most. */
#define ECT_EVENTS_REQUEST_MAX 64

/* Events beyond the cache listener's. */
typedef enum ect__event_kind {
    ECT__EVENT_STORED = ECT_CACHE_EVENT_STORED,
    ECT__EVENT_EVICTED = ECT_CACHE_EVENT_EVICTED,
    ECT__EVENT_DISCARDED = ECT_CACHE_EVENT_DISCARDED,
    ECT__EVENT_ANNOUNCED,
    ECT__EVENT_WITHDRAWN,
    ECT__EVENT_CLEARED,
} ect__event_kind_t;

/* Queue one event (key borrowed, copied).  Never blocks on I/O; safe from
 * any thread, under any lock.  events NULL is a no-op. */
void ect__events_publish(struct ect__events *events, ect__event_kind_t kind, const char *key,
                         uint64_t n_blocks);

#endif /* ECT_P2P_EVENTS_H */
