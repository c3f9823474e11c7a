/*
 * The TCP data stream's server (transport.h, format in proto/stream.h): the
 * producer sends granted runs straight out of its region.  This file holds
 * the worker threads, their connections, requests and sends, and start and
 * stop; xport_tcp_groups.c holds the stripe groups and the grant claim;
 * xport_tcp_server_internal.h the structs both use, who owns what and the
 * lock order.
 *
 * Server.  N_WORKERS threads, each with its own epoll set and connections,
 * non-blocking sockets, no allocation per unstriped stream (one per stripe
 * group).  Worker 0 accepts; a request for stripe i moves its connection
 * to worker i, so a striped read is sent on as many threads, and an
 * unstriped request that finds its worker already sending moves to a less
 * busy one, so several consumers' reads are sent on several threads
 * (struct worker).  Stripe groups live on one list under groups_lock, which is
 * taken before the grant callbacks' own locks (struct stripe_group,
 * xport_tcp_groups.c).  The peer is hostile, so:
 *   - the listener is bound to the control plane's address only;
 *   - at most MAX_CONNS connections; more are accepted and closed at once
 *     (counted), and when accept runs out of descriptors the listener is
 *     paused for ACCEPT_PAUSE_NS instead of spinning on it;
 *   - a new connection must deliver a whole request within REQUEST_NS, an
 *     idle one between requests is closed after IDLE_NS, a stream must be
 *     sent within the configured send timeout, and a stripe group waits
 *     for its stripes no longer than that: a silent, slow or non-reading
 *     peer costs one slot (and its grant) for a bounded time;
 *   - a request is at most ECT_STREAM_REQ_MAX bytes, read exactly (never
 *     beyond its own length), decoded by proto/stream.c; anything malformed
 *     cuts the connection; any answer but OK is sent and the connection
 *     closed;
 *   - what is sent comes only from the grant callbacks' runs: the peer's
 *     bytes never choose an address, and a stripe is a range of the
 *     grant's own blocks (ect__stream_stripe_blocks);
 *   - a grant's blocks are sent only while it is claimed: a stripe group
 *     finishes its grant when its last reference (a stripe being sent, or
 *     the wait for stripes to come) goes.
 * Sends use MSG_NOSIGNAL (a vanished peer is EPIPE, not SIGPIPE).
 *
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/thread.h"
#include "p2p/xport_tcp_server_internal.h"

#define REQUEST_NS      (5ull * 1000 * 1000 * 1000)
#define IDLE_NS         (30ull * 1000 * 1000 * 1000)
#define REFUSAL_NS      (1ull * 1000 * 1000 * 1000)
#define ACCEPT_PAUSE_NS (100ull * 1000 * 1000)
#define TICK_MS         100

/* epoll tags for the two non-connection descriptors. */
static int listen_tag, wake_tag;

/* ---- connections --------------------------------------------------------------- */

/* Wait for events on c (a system call only when they change). */
static void
conn_watch(struct worker *w, struct sconn *c, uint32_t events)
{
    if (c->watched == events)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(w->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev) == 0)
        c->watched = events;
}

/* End what the connection holds and free it (it is in no epoll set). */
static void
conn_free(ect_xport_stream_server_t *s, struct sconn *c)
{
    if (c->grant != NULL) {
        s->ops.finish(s->ops.user, c->grant, 0);
        c->grant = NULL;
    }
    if (c->group != NULL) {
        ect__xport_group_leave(s, c->group, c->stripe_bit, 0);
        c->group = NULL;
    }
    close(c->fd);
    __atomic_fetch_sub(&s->n_conns, 1, __ATOMIC_RELAXED);
    ect__free(c);
}

/* c no longer counts in w's load. */
static void
conn_unload(struct worker *w, struct sconn *c)
{
    if (c->loads) {
        __atomic_fetch_sub(&w->load, 1, __ATOMIC_RELAXED);
        c->loads = 0;
    }
}

static void
conn_close(struct worker *w, struct sconn *c)
{
    epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    w->conns[c->slot] = NULL;
    conn_unload(w, c);
    conn_free(w->s, c);
}

/* Put c in w's slots and epoll set.  Returns 0, or -1 (c is freed). */
static int
conn_adopt(struct worker *w, struct sconn *c, uint32_t events)
{
    size_t slot = 0;
    while (w->conns[slot] != NULL) /* a free one exists: n_conns <= MAX_CONNS */
        slot++;
    c->slot = slot;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, c->fd, &ev) != 0) {
        ECT_LOG_W("xport tcp server: cannot watch a connection: %s", strerror(errno));
        conn_unload(w, c);
        conn_free(w->s, c);
        return -1;
    }
    c->watched = events;
    w->conns[slot] = c;
    return 0;
}

/* Ready for the next request: idle until its first byte. */
static void
conn_expect_request(struct worker *w, struct sconn *c, uint64_t deadline_ns)
{
    c->state = S_REQUEST;
    c->req_len = 0;
    c->req_need = ECT_STREAM_REQ_FIXED;
    c->deadline_ns = deadline_ns;
    conn_watch(w, c, EPOLLIN);
}

/* Give c (in no epoll set or slots) to worker `to`: it adopts c, and
 * serves its request when c carries a whole one (adopt_handed). */
static void
handoff_push(struct sconn *c, struct worker *to)
{
    pthread_mutex_lock(&to->handoff_lock);
    c->next_handoff = to->handoff;
    to->handoff = c;
    pthread_mutex_unlock(&to->handoff_lock);
    uint64_t one = 1;
    if (write(to->wake_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        ECT_LOG_W("xport tcp server: cannot wake a stream thread: %s", strerror(errno));
}

static void
accept_all(struct worker *w)
{
    ect_xport_stream_server_t *s = w->s;
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The listener stays readable while the backlog holds a
                 * connection we cannot take: stop watching it for a while
                 * rather than spin. */
                ECT_LOG_W("xport tcp server: cannot accept: %s; pausing the listener for %llu ms",
                          strerror(errno), (unsigned long long)(ACCEPT_PAUSE_NS / 1000000));
                struct epoll_event ev = {.events = 0, .data.ptr = &listen_tag};
                epoll_ctl(w->epoll_fd, EPOLL_CTL_MOD, s->listen_fd, &ev);
                s->accept_paused_until = ect__now_ns() + ACCEPT_PAUSE_NS;
                COUNT(s, conns_refused, 1);
            }
            return; /* EAGAIN, or a connection that died in the backlog */
        }
        if (__atomic_load_n(&s->n_conns, __ATOMIC_RELAXED) >= MAX_CONNS) {
            close(fd);
            COUNT(s, conns_refused, 1);
            continue;
        }
        struct sconn *c = ect__malloc(sizeof(*c));
        if (c == NULL) {
            close(fd);
            COUNT(s, conns_refused, 1);
            continue;
        }
        memset(c, 0, offsetof(struct sconn, req));
        c->fd = fd;
        c->state = S_REQUEST;
        c->req_need = ECT_STREAM_REQ_FIXED;
        c->deadline_ns = ect__now_ns() + REQUEST_NS;
        ect__xport_set_nodelay(fd);
        __atomic_fetch_add(&s->n_conns, 1, __ATOMIC_RELAXED);
        /* Connections are dealt to the workers in turn, so that the
         * pooled connections of several consumers are served by several
         * threads from their first request on. */
        struct worker *owner = &s->workers[s->next_owner++ % N_WORKERS];
        if (owner != w)
            handoff_push(c, owner);
        else if (conn_adopt(w, c, EPOLLIN) != 0) {
            COUNT(s, conns_refused, 1);
            continue;
        }
        COUNT(s, connections, 1);
    }
}

/* Send what the socket takes now.  Returns 1 when everything is out, 0 when
 * the socket is full, -1 when the peer is gone. */
static int
send_some(ect_xport_stream_server_t *s, struct sconn *c)
{
    for (;;) {
        struct iovec iov[ECT_XPORT_STREAM_IOV];
        size_t n = 0;
        if (c->hdr_off < c->hdr_len)
            iov[n++] = (struct iovec){c->hdr + c->hdr_off, c->hdr_len - c->hdr_off};
        uint64_t off = c->run_off, budget = c->left;
        for (size_t i = c->run_i; i < c->n_runs && n < ECT_XPORT_STREAM_IOV && budget > 0;
             i++, off = 0) {
            const ect_run_t *r = &c->runs[i];
            uint64_t len = r->count * s->block_size - off;
            if (len > budget)
                len = budget; /* a stripe ends inside this run */
            budget -= len;
            iov[n++] =
                (struct iovec){(void *)(s->data + r->first * s->block_size + off), (size_t)len};
        }
        if (n == 0)
            return 1;
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n};
        ssize_t sent = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return 0;
            if (errno == EINTR)
                continue;
            return -1;
        }
        size_t k = (size_t)sent;
        if (c->hdr_off < c->hdr_len) {
            size_t h = c->hdr_len - c->hdr_off;
            size_t t = k < h ? k : h;
            c->hdr_off += t;
            k -= t;
        }
        c->left -= k;
        while (k > 0) {
            uint64_t run_left = c->runs[c->run_i].count * s->block_size - c->run_off;
            if (k < run_left) {
                c->run_off += k;
                k = 0;
            } else {
                k -= (size_t)run_left;
                c->run_i++;
                c->run_off = 0;
            }
        }
    }
}

static void
conn_send(struct worker *w, struct sconn *c)
{
    ect_xport_stream_server_t *s = w->s;
    int rc = send_some(s, c);
    if (rc == 0) {
        conn_watch(w, c, EPOLLOUT); /* the socket is full: go on when it drains */
        return;
    }
    if (rc < 0) {
        if (c->state == S_SEND)
            COUNT(s, send_failures, 1);
        conn_close(w, c);
        return;
    }
    if (c->state == S_REFUSE) {
        conn_close(w, c);
        return;
    }
    /* Counted before the grant ends, so whoever sees the grant gone sees
     * the stream counted. */
    pthread_mutex_lock(&s->counters_lock);
    s->counters.streams_served += c->group == NULL;
    s->counters.streams_unaligned += c->hdr_len == ECT_STREAM_RESP_LEN;
    s->counters.bytes_sent += c->total;
    pthread_mutex_unlock(&s->counters_lock);
    if (c->group != NULL) {
        ect__xport_group_leave(s, c->group, c->stripe_bit, 1);
        c->group = NULL;
    } else {
        s->ops.finish(s->ops.user, c->grant, 1);
        c->grant = NULL;
    }
    conn_unload(w, c);
    c->balanced = 0;
    conn_expect_request(w, c, ect__now_ns() + IDLE_NS);
}

/* The worker an unstriped request arriving at w should move to: one
 * sending less than w, when w is sending already; else NULL (stay). */
static struct worker *
less_busy_than(struct worker *w)
{
    unsigned mine = __atomic_load_n(&w->load, __ATOMIC_RELAXED);
    struct worker *best = NULL;
    for (unsigned k = 0; k < N_WORKERS && mine > 0; k++) {
        struct worker *o = &w->s->workers[k];
        unsigned load = __atomic_load_n(&o->load, __ATOMIC_RELAXED);
        if (load < mine) {
            mine = load;
            best = o;
        }
    }
    return best;
}

/* Hand c (out of w's epoll set and slots) to worker `to`. */
static void
hand_over(struct worker *w, struct sconn *c, struct worker *to)
{
    epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    w->conns[c->slot] = NULL;
    handoff_push(c, to);
}

static void
handle_request(struct worker *w, struct sconn *c)
{
    ect_xport_stream_server_t *s = w->s;
    ect_stream_req_t req;
    if (ect__stream_req_decode(c->req, c->req_len, &req) != ECT_OK) {
        ECT_LOG_I("xport tcp server: dropping a connection: %s", ect_last_error());
        COUNT(s, bad_requests, 1);
        conn_close(w, c);
        return;
    }
    if (req.stripes > 1 && req.stripe % N_WORKERS != w->index) {
        hand_over(w, c, &s->workers[req.stripe % N_WORKERS]);
        return;
    }
    struct worker *to = req.stripes > 1 || c->balanced ? NULL : less_busy_than(w);
    if (to != NULL) {
        /* Counted in its new worker's load now, so that requests arriving
         * meanwhile see it busy. */
        __atomic_fetch_add(&to->load, 1, __ATOMIC_RELAXED);
        c->loads = 1;
        c->balanced = 1;
        COUNT(s, streams_moved, 1);
        hand_over(w, c, to);
        return;
    }
    ect_stream_status_t st;
    uint64_t first = 0, count = 0;
    if (req.stripes > 1) {
        st = ect__xport_stripe_join(w, c, &req, &first, &count);
    } else {
        ect_xport_grant_view_t view = {0};
        st = ect__xport_grant_claim(w, &req, &view, &c->grant);
        c->runs = view.runs;
        c->n_runs = view.n_runs;
        count = view.bytes / s->block_size;
    }
    c->hdr_off = 0;
    if (st != ECT_STREAM_OK) {
        conn_unload(w, c);
        COUNT(s, streams_denied, 1);
        c->hdr_len = ect__stream_resp_encode(st, 0, req.aligned, c->hdr);
        c->state = S_REFUSE;
        c->deadline_ns = ect__now_ns() + REFUSAL_NS;
        c->grant = NULL;
        c->runs = NULL;
        c->n_runs = 0;
        c->left = 0;
    } else {
        /* Start at the payload's block `first`. */
        size_t i = 0;
        uint64_t skip = first;
        while (skip >= c->runs[i].count) {
            skip -= c->runs[i].count;
            i++;
        }
        c->run_i = i;
        c->run_off = skip * s->block_size;
        c->left = c->total = count * s->block_size;
        c->hdr_len = ect__stream_resp_encode(ECT_STREAM_OK, c->total, req.aligned, c->hdr);
        if (!c->loads) {
            __atomic_fetch_add(&w->load, 1, __ATOMIC_RELAXED);
            c->loads = 1;
        }
        c->state = S_SEND;
        c->deadline_ns = ect__now_ns() + s->send_timeout_ns;
    }
    /* Sent at once: most answers fit the socket, and then the connection
     * never waits for EPOLLOUT (conn_send asks for it when it must). */
    conn_send(w, c);
}

static void
conn_read(struct worker *w, struct sconn *c)
{
    ect_xport_stream_server_t *s = w->s;
    for (;;) {
        ssize_t n = recv(c->fd, c->req + c->req_len, c->req_need - c->req_len, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            if (c->req_len != 0)
                COUNT(s, bad_requests, 1); /* cut in the middle of a request */
            conn_close(w, c);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        if (c->req_len == 0)
            c->deadline_ns = ect__now_ns() + REQUEST_NS; /* the request has begun */
        c->req_len += (size_t)n;
        if (c->req_len < c->req_need)
            continue;
        if (c->req_need == ECT_STREAM_REQ_FIXED) {
            size_t total = 0;
            if (ect__stream_req_peek(c->req, c->req_len, &total) != ECT_OK) {
                ECT_LOG_I("xport tcp server: dropping a connection: %s", ect_last_error());
                COUNT(s, bad_requests, 1);
                conn_close(w, c);
                return;
            }
            c->req_need = total;
            if (c->req_len < total)
                continue;
        }
        handle_request(w, c);
        return;
    }
}

/* Take the connections handed to w: a new one waits for its request, one
 * moved for its request (req_len != 0: a whole one) has it served. */
static void
adopt_handed(struct worker *w)
{
    uint64_t n;
    if (read(w->wake_fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        ECT_LOG_W("xport tcp server: reading its wake-up: %s", strerror(errno));
    pthread_mutex_lock(&w->handoff_lock);
    struct sconn *list = w->handoff;
    w->handoff = NULL;
    pthread_mutex_unlock(&w->handoff_lock);
    for (struct sconn *c = list, *next; c != NULL; c = next) {
        next = c->next_handoff;
        if (conn_adopt(w, c, EPOLLIN) == 0 && c->req_len != 0)
            handle_request(w, c);
    }
}

static void
sweep(struct worker *w, uint64_t now)
{
    ect_xport_stream_server_t *s = w->s;
    for (size_t i = 0; i < MAX_CONNS; i++) {
        struct sconn *c = w->conns[i];
        if (c != NULL && now >= c->deadline_ns) {
            if (c->state == S_SEND || c->req_len != 0)
                COUNT(s, timeouts, 1);
            if (c->state == S_SEND)
                ECT_LOG_W("xport tcp server: a stream of %" PRIu64 " bytes did not finish in time; "
                          "cut",
                          c->total);
            conn_close(w, c);
        }
    }
    if (w->index != 0)
        return;
    ect__xport_groups_sweep(s, now);
    if (s->accept_paused_until != 0 && now >= s->accept_paused_until) {
        s->accept_paused_until = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};
        epoll_ctl(w->epoll_fd, EPOLL_CTL_MOD, s->listen_fd, &ev);
    }
}

static void *
worker_main(void *arg)
{
    struct worker *w = arg;
    ect_xport_stream_server_t *s = w->s;
    uint64_t next_sweep = 0;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        struct epoll_event evs[64];
        int n = epoll_wait(w->epoll_fd, evs, 64, TICK_MS);
        if (n < 0 && errno != EINTR) {
            ECT_LOG_E("xport tcp server: epoll_wait failed: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &listen_tag) {
                accept_all(w);
            } else if (tag == &wake_tag) {
                adopt_handed(w);
            } else {
                struct sconn *c = tag;
                /* An earlier event of this round may have closed it or
                 * handed it over. */
                if (w->conns[c->slot] != c)
                    continue;
                if (c->state == S_REQUEST && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                    conn_read(w, c);
                else if (c->state != S_REQUEST &&
                         (evs[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)))
                    conn_send(w, c);
            }
        }
        uint64_t now = ect__now_ns();
        if (now >= next_sweep) {
            sweep(w, now);
            next_sweep = now + TICK_MS * 1000000ull;
        }
    }
    return NULL;
}

/* After every worker has stopped: cut every connection (handed-over ones
 * too), then release the grants of groups still waiting for stripes. */
static void
close_everything(ect_xport_stream_server_t *s)
{
    for (unsigned k = 0; k < N_WORKERS; k++) {
        struct worker *w = &s->workers[k];
        for (size_t i = 0; i < MAX_CONNS; i++)
            if (w->conns[i] != NULL)
                conn_close(w, w->conns[i]);
        for (struct sconn *c = w->handoff, *next; c != NULL; c = next) {
            next = c->next_handoff;
            conn_free(s, c);
        }
        w->handoff = NULL;
    }
    pthread_mutex_lock(&s->groups_lock);
    while (s->groups != NULL) {
        struct stripe_group *g = s->groups;
        g->waiting = 0;
        g->failed = 1;
        ect__xport_group_put_locked(s, g); /* no connection holds it any more */
    }
    pthread_mutex_unlock(&s->groups_lock);
}

static ect_status_t
worker_init(ect_xport_stream_server_t *s, unsigned index)
{
    struct worker *w = &s->workers[index];
    w->epoll_fd = w->wake_fd = -1;
    if (pthread_mutex_init(&w->handoff_lock, NULL) != 0)
        return ect__error(ECT_ERR_INTERNAL, "xport tcp server: cannot create a mutex");
    w->s = s; /* from here on server_free cleans it up */
    w->index = index;
    if ((w->epoll_fd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        return ect__error_errno(ECT_ERR_IO, "xport tcp server: epoll/eventfd");
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &wake_tag};
    if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->wake_fd, &wev) != 0)
        return ect__error_errno(ECT_ERR_IO, "xport tcp server: epoll_ctl");
    if (index == 0) {
        struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_tag};
        if (epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &lev) != 0)
            return ect__error_errno(ECT_ERR_IO, "xport tcp server: epoll_ctl");
    }
    return ECT_OK;
}

/* Stop and join the started workers, close everything, free s. */
static void
server_free(ect_xport_stream_server_t *s)
{
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    for (unsigned k = 0; k < N_WORKERS; k++) {
        struct worker *w = &s->workers[k];
        uint64_t one = 1;
        if (w->started && write(w->wake_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
            ECT_LOG_W("xport tcp server: cannot wake its thread: %s", strerror(errno));
    }
    for (unsigned k = 0; k < N_WORKERS; k++)
        if (s->workers[k].started)
            pthread_join(s->workers[k].thread, NULL);
    close_everything(s);
    for (unsigned k = 0; k < N_WORKERS; k++) {
        struct worker *w = &s->workers[k];
        if (w->s == NULL)
            continue; /* never initialised */
        if (w->wake_fd >= 0)
            close(w->wake_fd);
        if (w->epoll_fd >= 0)
            close(w->epoll_fd);
        pthread_mutex_destroy(&w->handoff_lock);
    }
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    pthread_mutex_destroy(&s->groups_lock);
    pthread_mutex_destroy(&s->counters_lock);
    ect__free(s);
}

ect_status_t
ect__xport_stream_server_start(const ect_xport_server_params_t *params,
                               ect_xport_stream_server_t **server_p)
{
    static const char who[] = "xport tcp server";
    if (params == NULL || server_p == NULL || params->grants == NULL ||
        params->grants->claim == NULL || params->grants->finish == NULL ||
        params->bind_host == NULL || params->send_timeout_ns == 0)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: missing grant callbacks, host or timeout", who);
    ect_xport_stream_server_t *s = ect__calloc(1, sizeof(*s));
    if (s == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", who);
    s->data = params->data;
    s->block_size = params->block_size;
    s->num_blocks = params->num_blocks;
    s->send_timeout_ns = params->send_timeout_ns;
    s->ops = *params->grants;
    s->listen_fd = -1;
    if (pthread_mutex_init(&s->counters_lock, NULL) != 0) {
        ect__free(s);
        return ect__error(ECT_ERR_INTERNAL, "%s: cannot create its mutex", who);
    }
    if (pthread_mutex_init(&s->groups_lock, NULL) != 0) {
        pthread_mutex_destroy(&s->counters_lock);
        ect__free(s);
        return ect__error(ECT_ERR_INTERNAL, "%s: cannot create its mutex", who);
    }
    ect_status_t st;
    struct sockaddr_storage addr;
    socklen_t alen;
    if ((st = ect__xport_resolve(params->bind_host, params->tcp_port, 1, &addr, &alen)) != ECT_OK)
        goto fail;
    s->listen_fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "%s: socket", who);
        goto fail;
    }
    int one = 1;
    setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s->listen_fd, (struct sockaddr *)&addr, alen) != 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "%s: cannot bind %s:%u", who, params->bind_host,
                              (unsigned)params->tcp_port);
        goto fail;
    }
    if (listen(s->listen_fd, 128) != 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "%s: listen", who);
        goto fail;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(s->listen_fd, (struct sockaddr *)&bound, &blen) != 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "%s: getsockname", who);
        goto fail;
    }
    s->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                               : ((struct sockaddr_in6 *)&bound)->sin6_port);
    for (unsigned k = 0; k < N_WORKERS; k++)
        if ((st = worker_init(s, k)) != ECT_OK)
            goto fail;
    for (unsigned k = 0; k < N_WORKERS; k++) {
        char name[16];
        snprintf(name, sizeof(name), "ect-stream-tx%u", k);
        if ((st = ect__thread_start(&s->workers[k].thread, worker_main, &s->workers[k], name)) !=
            ECT_OK)
            goto fail;
        s->workers[k].started = 1;
    }
    ECT_LOG_I("%s: listening on %s port %u", who, params->bind_host, (unsigned)s->port);
    *server_p = s;
    return ECT_OK;

fail:
    server_free(s);
    return st;
}

uint16_t
ect__xport_stream_server_port(const ect_xport_stream_server_t *s)
{
    return s->port;
}

void
ect__xport_stream_server_counters(ect_xport_stream_server_t *s,
                                  ect_xport_server_counters_t *counters_p)
{
    pthread_mutex_lock(&s->counters_lock);
    *counters_p = s->counters;
    pthread_mutex_unlock(&s->counters_lock);
}

void
ect__xport_stream_server_stop(ect_xport_stream_server_t *s)
{
    if (s == NULL)
        return;
    server_free(s);
}
