/*
 * What the TCP stream server's two files share: xport_tcp_server.c (the
 * four worker threads, their connections, requests and sends, start and
 * stop; its opening comment describes the server and its defences) and
 * xport_tcp_groups.c (the stripe groups and the grant claim: a request's
 * grant claimed and its view checked, a stripe joined to its group).
 *
 * Who owns what:
 *   - data, block_size, num_blocks, send_timeout_ns, ops, port: set before
 *     the workers start, read-only after;
 *   - a worker's conns, epoll set and scratch, and the connections in
 *     them: that worker's thread (and start and stop's, before the workers
 *     run and after they are joined); a connection changes worker only
 *     through the receiving worker's handoff list, under its handoff_lock;
 *   - listen_fd's watch, accept_paused_until, next_owner: worker 0's;
 *   - stop, n_conns and each worker's load: atomics;
 *   - the groups list and every field of a stripe_group: groups_lock (a
 *     connection that joined a group reads the group's view without it:
 *     the view is fixed once the group is made, and the connection's
 *     reference keeps the group alive);
 *   - counters: counters_lock.
 *
 * Lock order (outer first):
 *   groups_lock
 *     the grant callbacks' own locks (ops.claim and ops.finish are called
 *       with groups_lock held: a group's first stripe claims the grant under
 *       it, and the last reference finishes it under it)
 *     counters_lock (COUNT, in ect__xport_group_put_locked and
 *       ect__xport_groups_sweep)
 *   handoff_lock and counters_lock are leaves: nothing is taken while
 *   either is held.
 */
#ifndef ECT_P2P_XPORT_TCP_SERVER_INTERNAL_H
#define ECT_P2P_XPORT_TCP_SERVER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "p2p/transport.h"
#include "p2p/xport_internal.h"
#include "proto/stream.h"

/* The limits the structs are sized by (the server's others, its timeouts:
 * xport_tcp_server.c).  MAX_CONNS counts every worker's connections. */
#define MAX_CONNS 512
#define N_WORKERS ECT_STREAM_MAX_STRIPES

enum sconn_state {
    S_REQUEST, /* reading a request (or idle before one) */
    S_SEND,    /* sending an OK header and the granted runs */
    S_REFUSE,  /* sending a refusal, then closing */
};

struct stripe_group;

struct sconn {
    int fd;
    size_t slot;      /* in the conns of the worker that owns it */
    uint32_t watched; /* the events its worker's epoll set waits for */
    enum sconn_state state;
    uint64_t deadline_ns;
    size_t req_len;  /* bytes of the request received */
    size_t req_need; /* ECT_STREAM_REQ_FIXED until the fixed part is in, then the total */
    uint8_t hdr[ECT_STREAM_RESP_ALIGNED_LEN];
    size_t hdr_len; /* the response header's bytes (proto/stream.h) */
    size_t hdr_off;
    void *grant;                /* unstriped: claimed; finished exactly once */
    struct stripe_group *group; /* striped: joined; left exactly once */
    uint32_t stripe_bit;
    const ect_run_t *runs;
    size_t n_runs, run_i;
    uint64_t run_off; /* bytes of runs[run_i] already sent */
    uint64_t left;    /* payload bytes still to send */
    uint64_t total;
    int loads;    /* counted in its worker's load */
    int balanced; /* moved for its request to a less busy worker: served there */
    struct sconn *next_handoff;
    uint8_t req[ECT_STREAM_REQ_MAX];
};

/* One grant streamed in stripes (proto/stream.h).  Lives on the server's
 * group list, under groups_lock, from the claim until its last reference
 * goes: one per connection sending a stripe of it, one while stripes are
 * still to come (dropped when the last stripe joins or at the deadline). */
struct stripe_group {
    uint8_t token[ECT_STREAM_TOKEN_LEN];
    uint64_t expect;
    uint32_t stripes;
    uint32_t joined; /* stripe bits */
    uint32_t sent;   /* stripe bits */
    int failed;
    int waiting; /* holds the reference of the stripes still to come */
    unsigned refs;
    uint64_t deadline_ns;
    void *grant;
    ect_xport_grant_view_t view;
    struct stripe_group *next;
    size_t session_len, hash_len;
    char names[]; /* session bytes then hash bytes */
};

/* A server thread: its own epoll and connections.  Worker 0 also accepts
 * and keeps the group deadlines.  A request for stripe i is served by
 * worker i % N_WORKERS (the connection is handed over), so the stripes of
 * one read are sent on as many threads.  An unstriped request is served
 * where it arrives unless that worker is sending already and another is
 * sending less (its load): then the connection moves there for it, so the
 * reads of several consumers are not all sent by one thread (a lone read
 * pays no hand-over). */
struct worker {
    ect_xport_stream_server_t *s;
    unsigned index;
    unsigned load; /* atomic: its connections sending, or moved to it to send */
    int epoll_fd;
    int wake_fd; /* eventfd: a hand-over or stop */
    pthread_t thread;
    int started;
    pthread_mutex_t handoff_lock;
    struct sconn *handoff; /* connections handed to this worker */
    struct sconn *conns[MAX_CONNS];
    char session[ECT_WIRE_MAX_STR + 1]; /* this thread's scratch */
    char hash[ECT_WIRE_MAX_STR + 1];
};

struct ect_xport_stream_server {
    int listen_fd;
    uint16_t port;
    const uint8_t *data;
    uint64_t block_size;
    uint64_t num_blocks;
    uint64_t send_timeout_ns;
    ect_xport_grant_ops_t ops;
    int stop;                     /* atomic */
    unsigned n_conns;             /* atomic; over all workers and hand-overs */
    uint64_t accept_paused_until; /* worker 0's */
    unsigned next_owner;          /* worker 0's: who gets the next accepted connection */
    pthread_mutex_t groups_lock;  /* taken before the grant callbacks' locks */
    struct stripe_group *groups;
    pthread_mutex_t counters_lock;
    ect_xport_server_counters_t counters;
    struct worker workers[N_WORKERS];
};

/* Add n to one of s's counters (takes counters_lock). */
#define COUNT(s, field, n)                                                                         \
    do {                                                                                           \
        pthread_mutex_lock(&(s)->counters_lock);                                                   \
        (s)->counters.field += (n);                                                                \
        pthread_mutex_unlock(&(s)->counters_lock);                                                 \
    } while (0)

/* ---- xport_tcp_groups.c ------------------------------------------------------ */

/* Drop one reference to g; the last one takes g off the server's list,
 * finishes its grant (sent only when no stripe failed and every stripe was
 * sent, then counted in streams_served first, as unstriped streams are)
 * and frees g.  Caller holds groups_lock (ops.finish is called with it
 * held). */
void ect__xport_group_put_locked(ect_xport_stream_server_t *s, struct stripe_group *g);

/* A connection is done with its stripe of g (stripe_bit): sent, or cut
 * (sent 0: the group fails, stops waiting for stripes still to come, and
 * its grant is finished unsent once no stripe of it is being sent).
 * Drops the connection's reference, so g may be freed.  Takes groups_lock;
 * any thread (the workers, or the stopping thread once they are joined). */
void ect__xport_group_leave(ect_xport_stream_server_t *s, struct stripe_group *g,
                            uint32_t stripe_bit, int sent);

/* Groups whose missing stripes did not come by their deadline (now, in
 * ect__now_ns time) give up waiting: each is failed, counted in timeouts,
 * logged, and its grant released as soon as no stripe of it is being
 * sent.  Takes groups_lock; worker 0 calls it each tick. */
void ect__xport_groups_sweep(ect_xport_stream_server_t *s, uint64_t now);

/* Claim the grant req names (session, hash, token, expect_bytes) through
 * the grant callbacks, passing the names NUL-terminated through w's
 * scratch, and check its view: every run inside the region, their bytes
 * adding up to view->bytes.  Returns ECT_STREAM_OK with *view_p and
 * *grant_p (claimed: the caller finishes it exactly once), or the
 * callbacks' ECT_STREAM_DENIED or ECT_STREAM_SIZE_MISMATCH; a view that
 * fails the check is finished at once, logged and ECT_STREAM_DENIED.  On
 * w's thread only (its scratch); with or without groups_lock
 * (ect__xport_stripe_join holds it). */
ect_stream_status_t ect__xport_grant_claim(struct worker *w, const ect_stream_req_t *req,
                                           ect_xport_grant_view_t *view_p, void **grant_p);

/* Join c to the stripe group req names (req->stripes > 1): an existing
 * group of that session, hash and token, or, for the first stripe to
 * arrive, a new one whose grant is claimed here (under groups_lock, so two
 * stripes arriving at once cannot both miss the group and the second find
 * the grant used up).  Returns ECT_STREAM_OK with c->group, c->stripe_bit,
 * c->runs and c->n_runs set (c holds a reference to the group, given back
 * with ect__xport_group_leave) and the stripe's blocks (*first_p, *count_p,
 * in the grant's order); ECT_STREAM_DENIED (the group failed, stopped
 * waiting or is past its deadline, the stripe count differs, the stripe
 * already joined, no grant, out of memory) or ECT_STREAM_SIZE_MISMATCH
 * (expect_bytes differs from the group's or the grant's, or the grant has
 * fewer blocks than stripes); a refusal leaves an existing group as it
 * was and c untouched.  On w's thread; takes groups_lock. */
ect_stream_status_t ect__xport_stripe_join(struct worker *w, struct sconn *c,
                                           const ect_stream_req_t *req, uint64_t *first_p,
                                           uint64_t *count_p);

#endif /* ECT_P2P_XPORT_TCP_SERVER_INTERNAL_H */
