/*
 * The TCP data stream's client (transport.h, format in proto/stream.h): the
 * consumer receives granted runs straight into its blocks.
 *
 * Client.  A receive thread with epoll.  Every read's socket state and its
 * bytes are touched only with the client's lock held, so cancelling a read
 * (closing its socket under the lock) guarantees nothing of it lands
 * afterwards.  Epoll events carry a read's id, never its pointer: a read
 * freed between epoll_wait and the lock is simply not found.  Connections
 * that finished a stream are pooled per producer (keyed by address, port
 * and instance) for POOL_IDLE_NS, below the server's IDLE_NS; a pooled
 * connection that turns out dead before any answer byte is replaced by a
 * fresh one once.  A striped read is one read per stripe, each on a client
 * of its own (xport.c), so its stripes are received on as many threads.
 * The wake callback comes after the lock is let go (unlock_and_wake), so
 * the owner may complete a read from it on this thread, without a hand-off
 * to a thread of its own.
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

#define POOL_IDLE_NS (10ull * 1000 * 1000 * 1000)
#define POOL_MAX     32
#define TICK_MS      1000

ect_status_t
ect__xport_resolve(const char *host, uint16_t port, int passive, struct sockaddr_storage *addr_p,
                   socklen_t *len_p)
{
    if (passive && strcmp(host, "*") == 0)
        host = "0.0.0.0"; /* as the control plane binds "*" */
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return ect__error(ECT_ERR_TRANSPORT, "xport tcp: host '%s' does not resolve: %s", host,
                          gai_strerror(rc));
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = res; a != NULL && pick == NULL; a = a->ai_next)
        if (a->ai_family == AF_INET)
            pick = a;
    for (const struct addrinfo *a = res; a != NULL && pick == NULL; a = a->ai_next)
        if (a->ai_family == AF_INET6)
            pick = a;
    if (pick == NULL || pick->ai_addrlen > sizeof(*addr_p)) {
        freeaddrinfo(res);
        return ect__error(ECT_ERR_TRANSPORT, "xport tcp: host '%s' has no IP address", host);
    }
    memset(addr_p, 0, sizeof(*addr_p));
    memcpy(addr_p, pick->ai_addr, pick->ai_addrlen);
    *len_p = (socklen_t)pick->ai_addrlen;
    freeaddrinfo(res);
    if (addr_p->ss_family == AF_INET)
        ((struct sockaddr_in *)addr_p)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)addr_p)->sin6_port = htons(port);
    return ECT_OK;
}

void
ect__xport_set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

struct pooled {
    int fd;
    uint64_t idle_since_ns;
    char key[ECT_XPORT_POOL_KEY_MAX + 1];
    struct pooled *next;
};

struct ect_xport_stream_read {
    uint64_t id;
    /* Written under the lock, once, with release (settle_locked), after why
     * and after every byte landed: read_state reads it (and then why)
     * without the lock, so polling a read never waits for a receive thread
     * that holds the lock while it copies another stripe's bytes. */
    ect_xport_read_state_t state;
    char why[200];
    int fd;           /* -1 once settled */
    int connecting;   /* a non-blocking connect is under way */
    int reused;       /* the connection came from the pool */
    int retried;      /* already replaced a dead pooled connection */
    int any_answer;   /* a byte of the answer has arrived */
    int lowat;        /* the socket's SO_RCVLOWAT, when set above 1 */
    uint32_t watched; /* the events the epoll set waits for on fd; 0: not in it */
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char key[ECT_XPORT_POOL_KEY_MAX + 1];
    uint8_t *req;
    size_t req_len, req_off;
    uint8_t hdr[ECT_STREAM_RESP_ALIGNED_LEN];
    size_t hdr_len, hdr_off; /* the response header's bytes (proto/stream.h), and those in */
    struct iovec *iov;
    size_t n_iov, iov_i;
    uint64_t expect, got;
    struct ect_xport_stream_read *prev, *next;
};

struct ect_xport_stream_client {
    pthread_mutex_t lock;
    int epoll_fd;
    int stop_fd;
    pthread_t thread;
    int stop; /* atomic */
    void (*wake)(void *);
    void *wake_arg;
    int settled; /* a read settled since the lock was last let go */
    uint64_t next_id;
    struct pooled *pool;
    size_t n_pool;
    ect_xport_stream_read_t *reads;
};

static ect_xport_stream_read_t *
find_read_locked(ect_xport_stream_client_t *c, uint64_t id)
{
    for (ect_xport_stream_read_t *r = c->reads; r != NULL; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

static void
pool_put_locked(ect_xport_stream_client_t *c, int fd, const char *key)
{
    struct pooled *p = c->n_pool < POOL_MAX ? ect__malloc(sizeof(*p)) : NULL;
    if (p == NULL) {
        close(fd);
        return;
    }
    p->fd = fd;
    p->idle_since_ns = ect__now_ns();
    snprintf(p->key, sizeof(p->key), "%s", key);
    p->next = c->pool;
    c->pool = p;
    c->n_pool++;
}

/* A pooled connection to key young enough to trust, or -1. */
static int
pool_take_locked(ect_xport_stream_client_t *c, const char *key)
{
    uint64_t now = ect__now_ns();
    for (struct pooled **pp = &c->pool; *pp != NULL; pp = &(*pp)->next) {
        struct pooled *p = *pp;
        if (strcmp(p->key, key) == 0 && now - p->idle_since_ns < POOL_IDLE_NS) {
            int fd = p->fd;
            *pp = p->next;
            ect__free(p);
            c->n_pool--;
            return fd;
        }
    }
    return -1;
}

static void
pool_sweep_locked(ect_xport_stream_client_t *c, uint64_t now)
{
    for (struct pooled **pp = &c->pool; *pp != NULL;) {
        struct pooled *p = *pp;
        if (now - p->idle_since_ns >= POOL_IDLE_NS) {
            *pp = p->next;
            close(p->fd);
            ect__free(p);
            c->n_pool--;
        } else {
            pp = &p->next;
        }
    }
}

/* Wait for what r needs next: the connection or room for the request
 * (EPOLLOUT), else the answer (EPOLLIN).  A system call only when that
 * changes: a read on a pooled connection whose request goes out at once
 * costs one (the ADD), not one per phase. */
static void
read_watch_locked(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r)
{
    uint32_t events = (r->connecting || r->req_off < r->req_len) ? EPOLLOUT : EPOLLIN;
    if (r->watched == events)
        return;
    struct epoll_event ev = {.events = events, .data.u64 = r->id};
    if (epoll_ctl(c->epoll_fd, r->watched == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, r->fd, &ev) == 0)
        r->watched = events;
}

static void
read_unwatch_locked(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r)
{
    if (r->watched != 0)
        epoll_ctl(c->epoll_fd, EPOLL_CTL_DEL, r->fd, NULL);
    r->watched = 0;
}

/* The socket's receive low-water mark (best effort: without it the read
 * is woken more often, not wrong). */
static void
set_rcvlowat(ect_xport_stream_read_t *r, int bytes)
{
    if (setsockopt(r->fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)) == 0)
        r->lowat = bytes;
}

/* Settle a read; done: the connection goes back to the pool. */
static void
settle_locked(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r, int done, const char *why)
{
    if (r->state != ECT_XPORT_READ_PENDING)
        return;
    if (r->fd >= 0) {
        read_unwatch_locked(c, r);
        /* A pooled socket must wake for an answer's header alone (16 or
         * 64 bytes): one that cannot be set back is not pooled. */
        if (done && r->lowat > 1)
            set_rcvlowat(r, 1);
        if (done && r->lowat <= 1)
            pool_put_locked(c, r->fd, r->key);
        else
            close(r->fd);
        r->fd = -1;
    }
    if (!done)
        snprintf(r->why, sizeof(r->why), "%s", why);
    __atomic_store_n(&r->state, done ? ECT_XPORT_READ_DONE : ECT_XPORT_READ_FAILED,
                     __ATOMIC_RELEASE);
    c->settled = 1;
}

/* Let go of the lock, then call the wake callback if a read settled while
 * it was held: with no lock of ours held, the callback may call back into
 * this client (poll, free). */
static void
unlock_and_wake(ect_xport_stream_client_t *c)
{
    void (*wake)(void *) = c->settled ? c->wake : NULL;
    void *arg = c->wake_arg;
    c->settled = 0;
    pthread_mutex_unlock(&c->lock);
    if (wake != NULL)
        wake(arg);
}

static int
connect_fresh_locked(ect_xport_stream_read_t *r)
{
    int fd = socket(r->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    ect__xport_set_nodelay(fd);
    r->connecting = 0;
    if (connect(fd, (struct sockaddr *)&r->addr, r->addr_len) != 0) {
        if (errno != EINPROGRESS) {
            int saved = errno;
            close(fd);
            errno = saved;
            return -1;
        }
        r->connecting = 1;
    }
    r->fd = fd;
    return 0;
}

static void progress_locked(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r);

/* The connection failed.  A pooled one that died before any answer (the
 * producer closed it while idle) is replaced by a fresh one, once. */
static void
conn_failed_locked(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r, const char *what,
                   int err)
{
    char why[200];
    snprintf(why, sizeof(why), "%s: %s", what, err ? strerror(err) : "connection closed");
    if (r->reused && !r->retried && !r->any_answer) {
        read_unwatch_locked(c, r);
        close(r->fd);
        r->fd = -1;
        r->lowat = 0;
        r->retried = 1;
        r->reused = 0;
        r->req_off = 0;
        if (connect_fresh_locked(r) == 0) {
            progress_locked(c, r);
            return;
        }
        snprintf(why, sizeof(why), "reconnect: %s", strerror(errno));
    }
    settle_locked(c, r, 0, why);
}

static void
progress_locked(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r)
{
    if (r->state != ECT_XPORT_READ_PENDING)
        return;
    if (r->connecting) {
        /* SO_ERROR reads 0 while the handshake is still under way: only a
         * writable (or failed) socket has finished connecting. */
        struct pollfd pfd = {.fd = r->fd, .events = POLLOUT};
        if (poll(&pfd, 1, 0) == 0) {
            read_watch_locked(c, r);
            return;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err != 0) {
            char why[128];
            snprintf(why, sizeof(why), "cannot connect: %s", strerror(err));
            settle_locked(c, r, 0, why);
            return;
        }
        r->connecting = 0;
    }
    while (r->req_off < r->req_len) {
        ssize_t n =
            send(r->fd, r->req + r->req_off, r->req_len - r->req_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            read_watch_locked(c, r);
            return;
        }
        if (n < 0) {
            conn_failed_locked(c, r, "sending the request", errno);
            return;
        }
        r->req_off += (size_t)n;
        if (r->req_off == r->req_len) {
            /* The answer needs the producer awake first: leave it to
             * epoll (level-triggered, so one already queued is reported
             * at once) rather than try a recv that would find nothing. */
            read_watch_locked(c, r);
            return;
        }
    }
    while (r->hdr_off < r->hdr_len) {
        ssize_t n = recv(r->fd, r->hdr + r->hdr_off, r->hdr_len - r->hdr_off, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            read_watch_locked(c, r);
            return;
        }
        if (n <= 0) {
            conn_failed_locked(c, r, "reading the answer", n < 0 ? errno : 0);
            return;
        }
        r->any_answer = 1;
        r->hdr_off += (size_t)n;
        if (r->hdr_off < r->hdr_len)
            continue;
        uint32_t status;
        uint64_t len;
        if (ect__stream_resp_decode(r->hdr, r->hdr_len, &status, &len) != ECT_OK) {
            settle_locked(c, r, 0, ect_last_error());
            return;
        }
        if (status != ECT_STREAM_OK) {
            char why[96];
            snprintf(why, sizeof(why), "the producer refused the stream: %s",
                     ect__stream_status_str(status));
            settle_locked(c, r, 0, why);
            return;
        }
        if (len != r->expect) {
            char why[128];
            snprintf(why, sizeof(why),
                     "the producer announced %" PRIu64 " bytes, %" PRIu64 " expected", len,
                     r->expect);
            settle_locked(c, r, 0, why);
            return;
        }
    }
    while (r->got < r->expect) {
        int lowat = ect__xport_stream_rcvlowat(r->expect - r->got);
        if (lowat != r->lowat)
            set_rcvlowat(r, lowat);
        size_t n_iov = r->n_iov - r->iov_i;
        struct msghdr mh = {.msg_iov = r->iov + r->iov_i,
                            .msg_iovlen =
                                n_iov < ECT_XPORT_STREAM_IOV ? n_iov : ECT_XPORT_STREAM_IOV};
        ssize_t n = recvmsg(r->fd, &mh, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            read_watch_locked(c, r);
            return;
        }
        if (n <= 0) {
            char why[128];
            snprintf(why, sizeof(why),
                     "the stream ended after %" PRIu64 " of %" PRIu64 " bytes%s%s", r->got,
                     r->expect, n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
            settle_locked(c, r, 0, why);
            return;
        }
        r->got += (uint64_t)n;
        size_t k = (size_t)n;
        while (k > 0) {
            struct iovec *v = &r->iov[r->iov_i];
            if (k < v->iov_len) {
                v->iov_base = (uint8_t *)v->iov_base + k;
                v->iov_len -= k;
                k = 0;
            } else {
                k -= v->iov_len;
                v->iov_len = 0;
                r->iov_i++;
            }
        }
    }
    settle_locked(c, r, 1, NULL);
}

static void *
client_main(void *arg)
{
    ect_xport_stream_client_t *c = arg;
    uint64_t next_sweep = 0;
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        struct epoll_event evs[64];
        int n = epoll_wait(c->epoll_fd, evs, 64, TICK_MS);
        if (n < 0 && errno != EINTR) {
            ECT_LOG_E("xport tcp client: epoll_wait failed: %s", strerror(errno));
            break;
        }
        pthread_mutex_lock(&c->lock);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == 0)
                continue; /* the stop eventfd */
            ect_xport_stream_read_t *r = find_read_locked(c, evs[i].data.u64);
            if (r != NULL)
                progress_locked(c, r);
        }
        uint64_t now = ect__now_ns();
        if (now >= next_sweep) {
            pool_sweep_locked(c, now);
            next_sweep = now + 1000ull * 1000 * 1000;
        }
        unlock_and_wake(c);
    }
    return NULL;
}

ect_status_t
ect__xport_stream_client_create(void (*wake)(void *), void *wake_arg,
                                ect_xport_stream_client_t **client_p)
{
    static const char who[] = "xport tcp client";
    ect_xport_stream_client_t *c = ect__calloc(1, sizeof(*c));
    if (c == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", who);
    c->wake = wake;
    c->wake_arg = wake_arg;
    c->next_id = 1;
    c->epoll_fd = c->stop_fd = -1;
    ect_status_t st;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "%s: cannot create its mutex", who);
        goto free_client;
    }
    if ((c->epoll_fd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (c->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        st = ect__error_errno(ECT_ERR_IO, "%s: epoll/eventfd", who);
        goto close_fds;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
    if (epoll_ctl(c->epoll_fd, EPOLL_CTL_ADD, c->stop_fd, &ev) != 0) {
        st = ect__error_errno(ECT_ERR_IO, "%s: epoll_ctl", who);
        goto close_fds;
    }
    if ((st = ect__thread_start(&c->thread, client_main, c, "ect-stream-rx")) != ECT_OK)
        goto close_fds;
    *client_p = c;
    return ECT_OK;

close_fds:
    if (c->stop_fd >= 0)
        close(c->stop_fd);
    if (c->epoll_fd >= 0)
        close(c->epoll_fd);
    pthread_mutex_destroy(&c->lock);
free_client:
    ect__free(c);
    return st;
}

ect_status_t
ect__xport_stream_read_start(ect_xport_stream_client_t *c, const struct sockaddr_storage *addr,
                             socklen_t addr_len, const char *pool_key, const uint8_t *request,
                             size_t req_len, size_t resp_len, const ect_xport_segment_t *segs,
                             size_t n_segs, uint64_t expect, ect_xport_stream_read_t **read_p)
{
    if (c == NULL || addr == NULL || pool_key == NULL || request == NULL || req_len == 0 ||
        (resp_len != ECT_STREAM_RESP_LEN && resp_len != ECT_STREAM_RESP_ALIGNED_LEN) ||
        read_p == NULL || (segs == NULL && n_segs != 0) || expect == 0 ||
        strlen(pool_key) > ECT_XPORT_POOL_KEY_MAX || addr_len > sizeof(*addr))
        return ect__error(ECT_ERR_INVALID_ARG, "xport tcp read: bad argument");
    ect_xport_stream_read_t *r = ect__calloc(1, sizeof(*r));
    if (r == NULL || (r->req = ect__malloc(req_len)) == NULL ||
        (n_segs != 0 && (r->iov = ect__malloc(n_segs * sizeof(*r->iov))) == NULL)) {
        if (r != NULL)
            ect__free(r->req);
        ect__free(r);
        return ect__error(ECT_ERR_NO_MEMORY, "xport tcp read: out of memory");
    }
    memcpy(r->req, request, req_len);
    r->req_len = req_len;
    r->hdr_len = resp_len;
    /* Only our side's contiguity matters here: merge what touches. */
    uint64_t total = 0;
    for (size_t i = 0; i < n_segs; i++) {
        total += segs[i].len;
        if (r->n_iov > 0 &&
            (uint8_t *)r->iov[r->n_iov - 1].iov_base + r->iov[r->n_iov - 1].iov_len ==
                (uint8_t *)segs[i].local)
            r->iov[r->n_iov - 1].iov_len += segs[i].len;
        else
            r->iov[r->n_iov++] = (struct iovec){segs[i].local, segs[i].len};
    }
    if (total != expect) {
        ect__free(r->iov);
        ect__free(r->req);
        ect__free(r);
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport tcp read: segments of %" PRIu64 " bytes for %" PRIu64 " expected",
                          total, expect);
    }
    r->expect = expect;
    memcpy(&r->addr, addr, addr_len);
    r->addr_len = addr_len;
    snprintf(r->key, sizeof(r->key), "%s", pool_key);
    r->state = ECT_XPORT_READ_PENDING;
    pthread_mutex_lock(&c->lock);
    r->id = c->next_id++;
    r->fd = pool_take_locked(c, pool_key);
    r->reused = r->fd >= 0;
    if (r->fd < 0 && connect_fresh_locked(r) != 0) {
        pthread_mutex_unlock(&c->lock);
        ect_status_t st = ect__error_errno(ECT_ERR_TRANSPORT, "xport tcp read: cannot connect");
        ect__free(r->iov);
        ect__free(r->req);
        ect__free(r);
        return st;
    }
    r->next = c->reads;
    if (c->reads != NULL)
        c->reads->prev = r;
    c->reads = r;
    progress_locked(c, r);
    *read_p = r;
    unlock_and_wake(c);
    return ECT_OK;
}

ect_xport_read_state_t
ect__xport_stream_read_state(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r, char *why,
                             size_t cap)
{
    (void)c;
    ect_xport_read_state_t st = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
    if (st == ECT_XPORT_READ_FAILED && why != NULL && cap > 0)
        snprintf(why, cap, "%s", r->why); /* final: written before the state */
    return st;
}

void
ect__xport_stream_read_cancel(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r)
{
    pthread_mutex_lock(&c->lock);
    settle_locked(c, r, 0, "cancelled");
    unlock_and_wake(c);
}

void
ect__xport_stream_read_free(ect_xport_stream_client_t *c, ect_xport_stream_read_t *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    settle_locked(c, r, 0, "cancelled");
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        c->reads = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    unlock_and_wake(c);
    ect__free(r->iov);
    ect__free(r->req);
    ect__free(r);
}

void
ect__xport_stream_client_destroy(ect_xport_stream_client_t *c)
{
    if (c == NULL)
        return;
    __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(c->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        ECT_LOG_W("xport tcp client: cannot wake its thread: %s", strerror(errno));
    pthread_join(c->thread, NULL);
    /* No wake-ups from here on: the owner is going away too. */
    c->wake = NULL;
    for (ect_xport_stream_read_t *r = c->reads, *next; r != NULL; r = next) {
        next = r->next;
        settle_locked(c, r, 0, "client destroyed");
        ect__free(r->iov);
        ect__free(r->req);
        ect__free(r);
    }
    pool_sweep_locked(c, UINT64_MAX);
    close(c->stop_fd);
    close(c->epoll_fd);
    pthread_mutex_destroy(&c->lock);
    ect__free(c);
}
