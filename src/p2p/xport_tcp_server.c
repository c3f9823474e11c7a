/*
 * The TCP data stream's server (transport.h, format in proto/stream.h): the
 * producer sends granted runs straight out of its region.
 *
 * Server.  One thread, epoll, non-blocking sockets, no allocation per
 * stream.  The peer is hostile, so:
 *   - the listener is bound to the control plane's address only;
 *   - at most MAX_CONNS connections; more are accepted and closed at once
 *     (counted), and when accept runs out of descriptors the listener is
 *     paused for ACCEPT_PAUSE_NS instead of spinning on it;
 *   - a new connection must deliver a whole request within REQUEST_NS, an
 *     idle one between requests is closed after IDLE_NS, a stream must be
 *     sent within the configured send timeout: a silent, slow or
 *     non-reading peer costs one slot for a bounded time;
 *   - a request is at most ECT_STREAM_REQ_MAX bytes, read exactly (never
 *     beyond its own length), decoded by proto/stream.c; anything malformed
 *     cuts the connection; any answer but OK is sent and the connection
 *     closed;
 *   - what is sent comes only from the grant callbacks' runs: the peer's
 *     bytes never choose an address.
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
#include "p2p/xport_internal.h"

#define MAX_CONNS       512
#define REQUEST_NS      (5ull * 1000 * 1000 * 1000)
#define IDLE_NS         (30ull * 1000 * 1000 * 1000)
#define REFUSAL_NS      (1ull * 1000 * 1000 * 1000)
#define ACCEPT_PAUSE_NS (100ull * 1000 * 1000)
#define TICK_MS         100

enum sconn_state {
    S_REQUEST, /* reading a request (or idle before one) */
    S_SEND,    /* sending an OK header and the granted runs */
    S_REFUSE,  /* sending a refusal, then closing */
};

struct sconn {
    int fd;
    size_t slot;
    enum sconn_state state;
    uint64_t deadline_ns;
    size_t req_len;  /* bytes of the request received */
    size_t req_need; /* ECT_STREAM_REQ_FIXED until the fixed part is in, then the total */
    uint8_t hdr[ECT_STREAM_RESP_LEN];
    size_t hdr_off;
    void *grant; /* claimed; finished exactly once */
    const ect_run_t *runs;
    size_t n_runs, run_i;
    uint64_t run_off; /* bytes of runs[run_i] already sent */
    uint64_t left;    /* payload bytes still to send */
    uint64_t total;
    uint8_t req[ECT_STREAM_REQ_MAX];
};

struct ect_xport_stream_server {
    int listen_fd;
    int epoll_fd;
    int stop_fd;
    uint16_t port;
    const uint8_t *data;
    uint64_t block_size;
    uint64_t num_blocks;
    uint64_t send_timeout_ns;
    ect_xport_grant_ops_t ops;
    pthread_t thread;
    int stop; /* atomic */
    uint64_t accept_paused_until;
    struct sconn *conns[MAX_CONNS];
    size_t n_conns;
    char session[ECT_WIRE_MAX_STR + 1]; /* server thread scratch */
    char hash[ECT_WIRE_MAX_STR + 1];
    pthread_mutex_t counters_lock;
    ect_xport_server_counters_t counters;
};

/* epoll tags for the two non-connection descriptors. */
static int listen_tag, stop_tag;

#define COUNT(s, field, n)                                                                         \
    do {                                                                                           \
        pthread_mutex_lock(&(s)->counters_lock);                                                   \
        (s)->counters.field += (n);                                                                \
        pthread_mutex_unlock(&(s)->counters_lock);                                                 \
    } while (0)

static void
conn_watch(ect_xport_stream_server_t *s, struct sconn *c, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void
conn_close(ect_xport_stream_server_t *s, struct sconn *c)
{
    if (c->grant != NULL) {
        s->ops.finish(s->ops.user, c->grant, 0);
        c->grant = NULL;
    }
    epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    s->conns[c->slot] = NULL;
    s->n_conns--;
    ect__free(c);
}

/* Ready for the next request: idle until its first byte. */
static void
conn_expect_request(ect_xport_stream_server_t *s, struct sconn *c, uint64_t deadline_ns)
{
    c->state = S_REQUEST;
    c->req_len = 0;
    c->req_need = ECT_STREAM_REQ_FIXED;
    c->deadline_ns = deadline_ns;
    conn_watch(s, c, EPOLLIN);
}

static void
accept_all(ect_xport_stream_server_t *s)
{
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
                epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, s->listen_fd, &ev);
                s->accept_paused_until = ect__now_ns() + ACCEPT_PAUSE_NS;
                COUNT(s, conns_refused, 1);
            }
            return; /* EAGAIN, or a connection that died in the backlog */
        }
        if (s->n_conns >= MAX_CONNS) {
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
        size_t slot = 0;
        while (s->conns[slot] != NULL)
            slot++;
        c->slot = slot;
        ect__xport_set_nodelay(fd);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            ect__free(c);
            COUNT(s, conns_refused, 1);
            continue;
        }
        s->conns[slot] = c;
        s->n_conns++;
        COUNT(s, connections, 1);
        c->state = S_REQUEST;
        c->req_need = ECT_STREAM_REQ_FIXED;
        c->deadline_ns = ect__now_ns() + REQUEST_NS;
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
        if (c->hdr_off < ECT_STREAM_RESP_LEN)
            iov[n++] = (struct iovec){c->hdr + c->hdr_off, ECT_STREAM_RESP_LEN - c->hdr_off};
        uint64_t off = c->run_off;
        for (size_t i = c->run_i; i < c->n_runs && n < ECT_XPORT_STREAM_IOV; i++, off = 0) {
            const ect_run_t *r = &c->runs[i];
            iov[n++] = (struct iovec){(void *)(s->data + r->first * s->block_size + off),
                                      (size_t)(r->count * s->block_size - off)};
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
        if (c->hdr_off < ECT_STREAM_RESP_LEN) {
            size_t h = ECT_STREAM_RESP_LEN - c->hdr_off;
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
conn_send(ect_xport_stream_server_t *s, struct sconn *c)
{
    int rc = send_some(s, c);
    if (rc == 0)
        return;
    if (rc < 0) {
        if (c->state == S_SEND)
            COUNT(s, send_failures, 1);
        conn_close(s, c);
        return;
    }
    if (c->state == S_REFUSE) {
        conn_close(s, c);
        return;
    }
    /* Counted before the grant ends, so whoever sees the grant gone sees
     * the stream counted. */
    pthread_mutex_lock(&s->counters_lock);
    s->counters.streams_served++;
    s->counters.bytes_sent += c->total;
    pthread_mutex_unlock(&s->counters_lock);
    s->ops.finish(s->ops.user, c->grant, 1);
    c->grant = NULL;
    conn_expect_request(s, c, ect__now_ns() + IDLE_NS);
}

/* Every run lies in the region and they add up to view->bytes. */
static int
view_ok(const ect_xport_stream_server_t *s, const ect_xport_grant_view_t *v)
{
    uint64_t blocks = 0;
    for (size_t i = 0; i < v->n_runs; i++) {
        const ect_run_t *r = &v->runs[i];
        if (r->count == 0 || r->first >= s->num_blocks || r->count > s->num_blocks - r->first)
            return 0;
        blocks += r->count;
    }
    return blocks * s->block_size == v->bytes;
}

static void
handle_request(ect_xport_stream_server_t *s, struct sconn *c)
{
    ect_stream_req_t req;
    if (ect__stream_req_decode(c->req, c->req_len, &req) != ECT_OK) {
        ECT_LOG_I("xport tcp server: dropping a connection: %s", ect_last_error());
        COUNT(s, bad_requests, 1);
        conn_close(s, c);
        return;
    }
    if (req.stripes > 1) {
        /* This producer's offer does not say it takes stripes. */
        ECT_LOG_I("xport tcp server: dropping a connection: a striped request");
        COUNT(s, bad_requests, 1);
        conn_close(s, c);
        return;
    }
    memcpy(s->session, req.session_id, req.session_len);
    s->session[req.session_len] = '\0';
    memcpy(s->hash, req.mm_hash, req.hash_len);
    s->hash[req.hash_len] = '\0';
    ect_xport_grant_view_t view = {0};
    void *grant = NULL;
    ect_stream_status_t st =
        s->ops.claim(s->ops.user, s->session, s->hash, req.token, req.expect_bytes, &view, &grant);
    if (st == ECT_STREAM_OK && !view_ok(s, &view)) {
        ECT_LOG_E("xport tcp server: the grant for '%s' names blocks outside the region", s->hash);
        s->ops.finish(s->ops.user, grant, 0);
        st = ECT_STREAM_DENIED;
    }
    c->hdr_off = 0;
    if (st != ECT_STREAM_OK) {
        COUNT(s, streams_denied, 1);
        ect__stream_resp_encode(st, 0, c->hdr);
        c->state = S_REFUSE;
        c->deadline_ns = ect__now_ns() + REFUSAL_NS;
        c->runs = NULL;
        c->n_runs = 0;
        c->left = 0;
    } else {
        ect__stream_resp_encode(ECT_STREAM_OK, view.bytes, c->hdr);
        c->state = S_SEND;
        c->deadline_ns = ect__now_ns() + s->send_timeout_ns;
        c->grant = grant;
        c->runs = view.runs;
        c->n_runs = view.n_runs;
        c->run_i = 0;
        c->run_off = 0;
        c->left = view.bytes;
        c->total = view.bytes;
    }
    conn_watch(s, c, EPOLLOUT);
    conn_send(s, c);
}

static void
conn_read(ect_xport_stream_server_t *s, struct sconn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->req + c->req_len, c->req_need - c->req_len, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            if (c->req_len != 0)
                COUNT(s, bad_requests, 1); /* cut in the middle of a request */
            conn_close(s, c);
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
                conn_close(s, c);
                return;
            }
            c->req_need = total;
            if (c->req_len < total)
                continue;
        }
        handle_request(s, c);
        return;
    }
}

static void
sweep(ect_xport_stream_server_t *s, uint64_t now)
{
    for (size_t i = 0; i < MAX_CONNS; i++) {
        struct sconn *c = s->conns[i];
        if (c != NULL && now >= c->deadline_ns) {
            if (c->state == S_SEND || c->req_len != 0)
                COUNT(s, timeouts, 1);
            if (c->state == S_SEND)
                ECT_LOG_W("xport tcp server: a stream of %" PRIu64 " bytes did not finish in time; "
                          "cut",
                          c->total);
            conn_close(s, c);
        }
    }
    if (s->accept_paused_until != 0 && now >= s->accept_paused_until) {
        s->accept_paused_until = 0;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &listen_tag};
        epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, s->listen_fd, &ev);
    }
}

static void *
server_main(void *arg)
{
    ect_xport_stream_server_t *s = arg;
    uint64_t next_sweep = 0;
    while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
        struct epoll_event evs[64];
        int n = epoll_wait(s->epoll_fd, evs, 64, TICK_MS);
        if (n < 0 && errno != EINTR) {
            ECT_LOG_E("xport tcp server: epoll_wait failed: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            void *tag = evs[i].data.ptr;
            if (tag == &listen_tag) {
                accept_all(s);
            } else if (tag == &stop_tag) {
                continue;
            } else {
                struct sconn *c = tag;
                /* An earlier event of this round may have closed it. */
                if (s->conns[c->slot] != c)
                    continue;
                if (c->state == S_REQUEST && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                    conn_read(s, c);
                else if (c->state != S_REQUEST &&
                         (evs[i].events & (EPOLLOUT | EPOLLHUP | EPOLLERR)))
                    conn_send(s, c);
            }
        }
        uint64_t now = ect__now_ns();
        if (now >= next_sweep) {
            sweep(s, now);
            next_sweep = now + TICK_MS * 1000000ull;
        }
    }
    for (size_t i = 0; i < MAX_CONNS; i++)
        if (s->conns[i] != NULL)
            conn_close(s, s->conns[i]);
    return NULL;
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
    s->listen_fd = s->epoll_fd = s->stop_fd = -1;
    ect_status_t st;
    if (pthread_mutex_init(&s->counters_lock, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "%s: cannot create its mutex", who);
        goto free_server;
    }
    struct sockaddr_storage addr;
    socklen_t alen;
    if ((st = ect__xport_resolve(params->bind_host, params->tcp_port, 1, &addr, &alen)) != ECT_OK)
        goto destroy_mutex;
    s->listen_fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "%s: socket", who);
        goto destroy_mutex;
    }
    int one = 1;
    setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(s->listen_fd, (struct sockaddr *)&addr, alen) != 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "%s: cannot bind %s:%u", who, params->bind_host,
                              (unsigned)params->tcp_port);
        goto close_fds;
    }
    if (listen(s->listen_fd, 128) != 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "%s: listen", who);
        goto close_fds;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(s->listen_fd, (struct sockaddr *)&bound, &blen) != 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "%s: getsockname", who);
        goto close_fds;
    }
    s->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                               : ((struct sockaddr_in6 *)&bound)->sin6_port);
    if ((s->epoll_fd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        st = ect__error_errno(ECT_ERR_IO, "%s: epoll/eventfd", who);
        goto close_fds;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_tag};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &stop_tag};
    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &lev) != 0 ||
        epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->stop_fd, &sev) != 0) {
        st = ect__error_errno(ECT_ERR_IO, "%s: epoll_ctl", who);
        goto close_fds;
    }
    if ((st = ect__thread_start(&s->thread, server_main, s, "ect-stream-tx")) != ECT_OK)
        goto close_fds;
    ECT_LOG_I("%s: listening on %s port %u", who, params->bind_host, (unsigned)s->port);
    *server_p = s;
    return ECT_OK;

close_fds:
    if (s->stop_fd >= 0)
        close(s->stop_fd);
    if (s->epoll_fd >= 0)
        close(s->epoll_fd);
    close(s->listen_fd);
destroy_mutex:
    pthread_mutex_destroy(&s->counters_lock);
free_server:
    ect__free(s);
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
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(s->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        ECT_LOG_W("xport tcp server: cannot wake its thread: %s", strerror(errno));
    pthread_join(s->thread, NULL);
    close(s->stop_fd);
    close(s->epoll_fd);
    close(s->listen_fd);
    pthread_mutex_destroy(&s->counters_lock);
    ect__free(s);
}
