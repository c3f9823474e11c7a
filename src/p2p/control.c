/*
 * The producer's half of the control plane (control.h, SPEC §8.3): one
 * ROUTER with the frame rules and dead-consumer detection.  The consumer's
 * DEALER pool is control_client.c; helpers both use, control_socket.c;
 * CURVE keys and the ZAP handler, control_curve.c.
 *
 * Dead consumers.  libzmq 4.3 without the draft API has no ROUTER_NOTIFY,
 * so the ROUTER's socket monitor reports disconnects by file descriptor and
 * each delivered message tells its source fd (ZMQ_SRCFD).  The server keeps
 * fd -> identity for every connection that has sent a well-framed message,
 * and turns a DISCONNECTED(fd) event into that identity on the dead list,
 * forgetting the fd.  Heartbeats on the ROUTER (4 s timeout) turn a frozen
 * or unreachable consumer into such a disconnect too.
 *
 * fd reuse.  libzmq emits DISCONNECTED before it closes the fd, so the
 * event is queued before any new connection can get that number; the
 * monitor is drained before a message's fd is recorded, so the old owner is
 * reported first.  If an event was lost anyway (the monitor's queue full),
 * a message that shows a new identity on a known fd reports the old one.
 * Residual race: a consumer that sets its own routing id and reconnects at
 * once is reported dead for its old connection while the new one lives
 * (its grants are released early, which is safe).  With libzmq's generated
 * ids, which our DEALERs use, a new connection is a new identity, so a
 * report always means that connection is gone.
 *
 * Messages of the dead.  A connection's messages already queued when it
 * died are still delivered after its DISCONNECTED event; acting on them
 * would create grants for a peer already reported dead, which nothing
 * would release before their lease.  So a slot remembers that a connection
 * died on it (and who, when it had sent anything) until the fd is accepted
 * again (ZMQ_EVENT_ACCEPTED, which libzmq emits before the new connection
 * can deliver a message), and a message on that fd from that identity (any,
 * when the dead connection had not been seen) is dropped (counted in
 * from_dead).  A remembered death is forgotten after STALE_NS in any case,
 * so a lost ACCEPTED event cannot silence a new connection for long.
 *
 * Connections that never speak (issue 9, item 7).  libzmq 4.3 accepts every
 * TCP connection at once, keeps one that never completes the ZMTP handshake
 * for ZMQ_HANDSHAKE_IVL (30 s by default), and when accept() fails for want
 * of a descriptor it retries at once, forever (tcp_listener.cpp: "TODO:
 * Handle specific errors like ENFILE/EMFILE"), which spins its I/O thread
 * at a whole core.  So a few hundred idle connections against a process
 * with a low RLIMIT_NOFILE both kept consumers out and burnt a core.  The
 * server therefore makes the listening socket itself and hands it to libzmq
 * (ZMQ_USE_FD) with TCP_DEFER_ACCEPT: the kernel keeps a connection that has
 * sent no byte in its SYN queue for DEFER_ACCEPT_S, costing no descriptor,
 * and does not wake the listener for it meanwhile, while a real consumer's
 * ZMTP greeting, its first bytes, gets it accepted at once.  The backlog is
 * large (LISTEN_BACKLOG, within net.core.somaxconn) so that the queue holds
 * a flood rather than overflowing into SYN cookies, which skip the
 * deferral.  A connection that is accepted but does not finish the
 * handshake within ECT_CTL_HANDSHAKE_MS is dropped (ZMQ_HANDSHAKE_IVL).
 * What remains is in control.h.
 *
 * Locking: none, but for the counters.  The server is used by one thread at
 * a time (control.h); the ZAP thread shares nothing mutable with it.  The
 * counters are written by that thread only and may be read from any thread
 * (ect__ctl_server_counters), so they are read and written atomically.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "p2p/control.h"
#include "p2p/control_curve.h"
#include "p2p/control_socket.h"

#define FD_MAP_MAX (1 << 16) /* slots of ~260 bytes; fds are small, dense numbers */
#define DEAD_MAX   65536
#define STALE_NS   (10ull * 1000 * 1000 * 1000)

/* The listen backlog; the kernel caps it at net.core.somaxconn (4096 by
 * default since Linux 5.4). */
#define LISTEN_BACKLOG 1024
/* TCP_DEFER_ACCEPT: how long a connection that has sent nothing waits in the
 * SYN queue.  At the end Linux accepts it anyway (it answers the last SYN-ACK
 * retransmission's ACK), and the handshake interval drops it 2 s later. */
#define DEFER_ACCEPT_S 60

#define HANDSHAKE_FAILED                                                                           \
    (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |                  \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
/* Not ZMQ_EVENT_ACCEPT_FAILED: at the descriptor limit libzmq retries
 * accept() in a busy loop and reports every retry, which would make this
 * thread spin with it. */
#define SERVER_EVENTS (ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | HANDSHAKE_FAILED)

/* Counters: one writer (the server's thread), readers anywhere. */
#define COUNT(server, field, n) __atomic_fetch_add(&(server)->counters.field, (n), __ATOMIC_RELAXED)
#define COUNTER(server, field)  __atomic_load_n(&(server)->counters.field, __ATOMIC_RELAXED)

/* Hex of the first bytes of an identity, for messages. */
static const char *
peer_hex(const ect_ctl_peer_t *peer, char *buf, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < peer->len && o + 3 < len && i < 16; i++)
        o += (size_t)snprintf(buf + o, len - o, "%02x", peer->id[i]);
    buf[o] = '\0';
    return buf;
}

/* ---- producer: the ROUTER -------------------------------------------------------- */

struct fd_slot {
    bool used;
    /* A connection died on this fd and no new one was accepted since:
     * until when its late messages count as stale (0: none died). */
    uint64_t dead_until_ns;
    ect_ctl_peer_t peer; /* len 0 when the dead one was never seen */
};

struct ect_ctl_server {
    void *ctx;
    void *router;
    void *monitor;
    ect_ctl_zap_t *zap;
    uint16_t port;
    zmq_msg_t payload; /* the last delivered payload; kept until the next recv */
    bool payload_live;
    int rcvtimeo;        /* the ROUTER's ZMQ_RCVTIMEO now (ms; -1: none) */
    struct fd_slot *fds; /* indexed by the connection's fd */
    size_t n_fds;
    bool fd_map_full_logged;
    ect_ctl_peer_t *dead;
    size_t n_dead, cap_dead;
    bool dead_full_logged;
    ect_ctl_counters_t counters;
};

/* The listening socket for libzmq (ZMQ_USE_FD): bound to addr:port,
 * non-blocking (libzmq polls it and does not set that itself), with
 * TCP_DEFER_ACCEPT and a large backlog (see the file comment).  *port_p gets
 * the bound port. */
static ect_status_t
open_listener(const char *host, const char *addr, bool ipv6, uint16_t port, int *fd_p,
              uint16_t *port_p)
{
    const char *lb = ipv6 ? "[" : "", *rb = ipv6 ? "]" : "";
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof(ss));
    if (ipv6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        if (inet_pton(AF_INET6, addr, &a->sin6_addr) != 1)
            return ect__error(ECT_ERR_INTERNAL, "control: cannot bind: bad address %s", addr);
        sl = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        if (inet_pton(AF_INET, addr, &a->sin_addr) != 1)
            return ect__error(ECT_ERR_INTERNAL, "control: cannot bind: bad address %s", addr);
        sl = sizeof(*a);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
    if (fd < 0)
        return ect__error_errno(ECT_ERR_TRANSPORT, "control: cannot bind tcp://%s%s%s:%u: socket",
                                lb, addr, rb, (unsigned)port);
    int one = 1, defer = DEFER_ACCEPT_S;
    ect_status_t st;
    /* As libzmq does for the sockets it makes (a restarted producer rebinds
     * its port at once). */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof(defer)) != 0)
        ECT_LOG_I("control: no TCP_DEFER_ACCEPT (%s): idle connections will be accepted",
                  strerror(errno));
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
        st = ect__error(ECT_ERR_TRANSPORT, "control: cannot bind tcp://%s%s%s:%u (host '%s'): %s",
                        lb, addr, rb, (unsigned)port, host, strerror(errno));
        goto close_fd;
    }
    sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        st = ect__error_errno(ECT_ERR_TRANSPORT, "control: getsockname of tcp://%s%s%s", lb, addr,
                              rb);
        goto close_fd;
    }
    *port_p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_p = fd;
    return ECT_OK;

close_fd:
    close(fd);
    return st;
}

/* Resolve host to a numeric address for bind: ZeroMQ does not resolve
 * names for bind in every version.  IPv4 first, because "localhost" often
 * lists ::1 first and consumers connect over IPv4 by default. */
static ect_status_t
resolve_bind_host(const char *host, char *out, size_t len, bool *ipv6_p)
{
    if (strcmp(host, "*") == 0)
        host = "0.0.0.0";
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return ect__error(ECT_ERR_TRANSPORT, "control: cannot bind: host '%s' does not resolve: %s",
                          host, gai_strerror(rc));
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai != NULL && pick == NULL; ai = ai->ai_next)
        if (ai->ai_family == AF_INET)
            pick = ai;
    for (const struct addrinfo *ai = res; ai != NULL && pick == NULL; ai = ai->ai_next)
        if (ai->ai_family == AF_INET6)
            pick = ai;
    const char *text = NULL;
    if (pick != NULL && pick->ai_family == AF_INET)
        text = inet_ntop(AF_INET, &((const struct sockaddr_in *)pick->ai_addr)->sin_addr, out,
                         (socklen_t)len);
    else if (pick != NULL)
        text = inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)pick->ai_addr)->sin6_addr, out,
                         (socklen_t)len);
    bool ipv6 = pick != NULL && pick->ai_family == AF_INET6;
    freeaddrinfo(res);
    if (text == NULL)
        return ect__error(ECT_ERR_TRANSPORT, "control: cannot bind: host '%s' has no IP address",
                          host);
    *ipv6_p = ipv6;
    return ECT_OK;
}

static void
server_push_dead(ect_ctl_server_t *server, const ect_ctl_peer_t *peer)
{
    if (server->n_dead == server->cap_dead) {
        size_t ncap = server->cap_dead != 0 ? server->cap_dead * 2 : 16;
        void *grown =
            ncap <= DEAD_MAX ? ect__realloc(server->dead, ncap * sizeof(*server->dead)) : NULL;
        if (grown == NULL) {
            /* Nobody is taking them; the pin lease still releases their grants. */
            if (!server->dead_full_logged)
                ECT_LOG_W("control: %zu dead consumers not taken; dropping further reports",
                          server->n_dead);
            server->dead_full_logged = true;
            return;
        }
        server->dead = grown;
        server->cap_dead = ncap;
    }
    server->dead[server->n_dead++] = *peer;
}

static void server_grow_fds(ect_ctl_server_t *server, int fd);

static void
server_fd_gone(ect_ctl_server_t *server, size_t fd)
{
    server_grow_fds(server, (int)fd);
    if (fd >= server->n_fds)
        return;
    struct fd_slot *slot = &server->fds[fd];
    if (slot->used)
        server_push_dead(server, &slot->peer); /* the peer is kept: its late messages are stale */
    else
        slot->peer.len = 0; /* never seen: every late message on the fd is stale */
    slot->used = false;
    slot->dead_until_ns = ect__now_ns() + STALE_NS;
}

/* A new connection on fd: whoever died there before is history. */
static void
server_fd_accepted(ect_ctl_server_t *server, size_t fd)
{
    if (fd < server->n_fds)
        server->fds[fd].dead_until_ns = 0;
}

static bool
same_peer(const ect_ctl_peer_t *a, const ect_ctl_peer_t *b)
{
    return a->len == b->len && memcmp(a->id, b->id, a->len) == 0;
}

/* A message on fd from the connection that died there. */
static bool
server_from_dead(const ect_ctl_server_t *server, int fd, const ect_ctl_peer_t *peer)
{
    if (fd < 0 || (size_t)fd >= server->n_fds)
        return false;
    const struct fd_slot *slot = &server->fds[fd];
    return slot->dead_until_ns != 0 && ect__now_ns() < slot->dead_until_ns &&
           (slot->peer.len == 0 || same_peer(&slot->peer, peer));
}

static void
server_drain_monitor(ect_ctl_server_t *server)
{
    uint16_t event;
    uint32_t value;
    while (ect__ctl_monitor_read(server->monitor, &event, &value) == 1) {
        if (event == ZMQ_EVENT_DISCONNECTED) {
            COUNT(server, disconnects, 1);
            server_fd_gone(server, value);
        } else if (event == ZMQ_EVENT_ACCEPTED) {
            server_fd_accepted(server, value);
        } else if (event & HANDSHAKE_FAILED) {
            COUNT(server, handshake_failed, 1);
        }
    }
}

/* Make room for slot fd (best effort: fds beyond FD_MAP_MAX are not
 * tracked, which the caller sees as fd >= n_fds). */
static void
server_grow_fds(ect_ctl_server_t *server, int fd)
{
    if (fd < 0 || (size_t)fd < server->n_fds)
        return;
    size_t n = server->n_fds != 0 ? server->n_fds : 64;
    while (n <= (size_t)fd)
        n *= 2;
    void *grown = n <= FD_MAP_MAX ? ect__realloc(server->fds, n * sizeof(*server->fds)) : NULL;
    if (grown == NULL) {
        if (!server->fd_map_full_logged)
            ECT_LOG_W("control: cannot track consumer on fd %d; its death will go unnoticed "
                      "until its lease lapses",
                      fd);
        server->fd_map_full_logged = true;
        return;
    }
    server->fds = grown;
    memset(server->fds + server->n_fds, 0, (n - server->n_fds) * sizeof(*server->fds));
    server->n_fds = n;
}

/* Remember that fd now carries peer. */
static void
server_track(ect_ctl_server_t *server, int fd, const ect_ctl_peer_t *peer)
{
    server_grow_fds(server, fd);
    if (fd < 0 || (size_t)fd >= server->n_fds)
        return;
    struct fd_slot *slot = &server->fds[fd];
    if (slot->used && !same_peer(&slot->peer, peer))
        server_push_dead(server, &slot->peer); /* its disconnect event was lost */
    slot->used = true;
    slot->dead_until_ns = 0;
    slot->peer = *peer;
}

static void
server_release_payload(ect_ctl_server_t *server)
{
    if (server->payload_live) {
        zmq_msg_close(&server->payload);
        server->payload_live = false;
    }
}

/* Read one message without waiting: 1 delivered, 0 none, -1 dropped,
 * -2 the socket failed. */
static int
server_read_one(ect_ctl_server_t *server, ect_ctl_peer_t *peer, int flags)
{
    zmq_msg_t id, delim, *payload = &server->payload;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, server->router, flags) < 0) {
        int err = zmq_errno();
        zmq_msg_close(&id);
        return err == EAGAIN || err == EINTR ? 0 : -2;
    }
    /* [identity, "", payload] exactly; anything else is read to its end,
     * from the last frame received (a frame's "more" flag is what says
     * whether the message goes on). */
    zmq_msg_t *last = &id;
    zmq_msg_init(&delim);
    zmq_msg_init(payload);
    if (zmq_msg_more(&id) && zmq_msg_recv(&delim, server->router, 0) >= 0) {
        last = &delim;
        if (zmq_msg_more(&delim) && zmq_msg_recv(payload, server->router, 0) >= 0)
            last = payload;
    }
    bool bad = zmq_msg_size(&id) == 0 || zmq_msg_size(&id) > sizeof(peer->id) || last != payload ||
               zmq_msg_size(&delim) != 0 || zmq_msg_more(payload) ||
               zmq_msg_size(payload) > ECT_CTL_MAX_MESSAGE;
    if (bad) {
        ect__ctl_skip_rest(server->router, last);
        COUNT(server, dropped, 1);
        ECT_LOG_D("control: dropped a malformed control message (wrong framing or over %u bytes)",
                  ECT_CTL_MAX_MESSAGE);
        zmq_msg_close(&id);
        zmq_msg_close(&delim);
        zmq_msg_close(payload);
        return -1;
    }
    peer->len = (uint8_t)zmq_msg_size(&id);
    memcpy(peer->id, zmq_msg_data(&id), peer->len);
    int fd = zmq_msg_get(payload, ZMQ_SRCFD);
    zmq_msg_close(&id);
    zmq_msg_close(&delim);
    server->payload_live = true;
    /* Apply any disconnect queued before this message, so a reused fd's
     * old owner is reported before the fd is given to this one. */
    server_drain_monitor(server);
    if (server_from_dead(server, fd, peer)) {
        COUNT(server, from_dead, 1);
        ECT_LOG_D("control: dropped a message queued by a consumer that has died");
        server_release_payload(server);
        return -1;
    }
    server_track(server, fd, peer);
    COUNT(server, received, 1);
    return 1;
}

ect_status_t
ect__ctl_server_open(const char *host, uint16_t port, const ect_ctl_security_t *security,
                     ect_ctl_server_t **server_p)
{
    if (host == NULL || server_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "control: NULL host or output");
    if (*host == '\0' || strlen(host) > ECT_CTL_HOST_MAX)
        return ect__error(ECT_ERR_INVALID_ARG, "control: bind host must be 1 to %d characters",
                          ECT_CTL_HOST_MAX);
    char addr[INET6_ADDRSTRLEN];
    bool ipv6 = false;
    ect_status_t st = resolve_bind_host(host, addr, sizeof(addr), &ipv6);
    if (st != ECT_OK)
        return st;
    const char *key_file = security != NULL ? security->server_key_file : NULL;
    const char *allow_file = security != NULL ? security->allowed_clients_file : NULL;
    bool curve = key_file != NULL && *key_file != '\0';
    if (!curve && allow_file != NULL && *allow_file != '\0')
        return ect__error(ECT_ERR_CONFIG,
                          "control: an allow-list (%s) needs the producer's key "
                          "file too: without CURVE there are no client keys",
                          allow_file);
    ect_ctl_keys_t keys;
    if (curve && (st = ect__ctl_keys_load(key_file, false, &keys)) != ECT_OK)
        return st;

    ect_ctl_server_t *server = ect__calloc(1, sizeof(*server));
    if (server == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "control: out of memory");
        goto wipe_keys;
    }
    server->rcvtimeo = -1;
    server->ctx = zmq_ctx_new();
    if (server->ctx == NULL) {
        st = ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot make a ZeroMQ context");
        goto free_server;
    }
    /* The ZAP handler must be bound before the ROUTER takes a connection. */
    if (curve && allow_file != NULL && *allow_file != '\0' &&
        (st = ect__ctl_zap_start(server->ctx, allow_file, &server->zap)) != ECT_OK)
        goto term_ctx;
    server->router = zmq_socket(server->ctx, ZMQ_ROUTER);
    if (server->router == NULL) {
        st = ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot make the ROUTER socket");
        goto term_ctx;
    }
    if ((st = ect__ctl_set_common_options(server->router, ipv6)) != ECT_OK)
        goto close_router;
    if (ect__ctl_set_int(server->router, ZMQ_ROUTER_MANDATORY, 1) != 0 ||
        ect__ctl_set_int(server->router, ZMQ_HANDSHAKE_IVL, ECT_CTL_HANDSHAKE_MS) != 0) {
        st = ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot set the ROUTER's options");
        goto close_router;
    }
    if (curve && (ect__ctl_set_int(server->router, ZMQ_CURVE_SERVER, 1) != 0 ||
                  zmq_setsockopt(server->router, ZMQ_CURVE_SECRETKEY, keys.secret_key,
                                 ECT_CTL_Z85_KEY_LEN) != 0)) {
        st = ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot set the CURVE server key");
        goto close_router;
    }
    if ((st = ect__ctl_monitor_open(server->ctx, server->router, SERVER_EVENTS,
                                    &server->monitor)) != ECT_OK)
        goto close_router;
    /* Our own listening socket (see the file comment); libzmq owns it from
     * a successful bind on and closes it with the ROUTER. */
    int lfd = -1;
    if ((st = open_listener(host, addr, ipv6, port, &lfd, &server->port)) != ECT_OK)
        goto close_router;
    char endpoint[INET6_ADDRSTRLEN + 16];
    const char *lb = ipv6 ? "[" : "", *rb = ipv6 ? "]" : "";
    snprintf(endpoint, sizeof(endpoint), "tcp://%s%s%s:%u", lb, addr, rb, (unsigned)server->port);
    if (ect__ctl_set_int(server->router, ZMQ_USE_FD, lfd) != 0 ||
        zmq_bind(server->router, endpoint) != 0) {
        st = ect__error(ECT_ERR_TRANSPORT, "control: cannot bind %s (host '%s'): %s", endpoint,
                        host, zmq_strerror(zmq_errno()));
        close(lfd);
        goto close_router;
    }
    char last[256];
    size_t last_len = sizeof(last);
    if (zmq_getsockopt(server->router, ZMQ_LAST_ENDPOINT, last, &last_len) != 0)
        snprintf(last, sizeof(last), "%s", endpoint);
    if (curve)
        ect__ctl_keys_wipe(&keys);
    ECT_LOG_I("control: producer listening on %s%s", last, curve ? " (CURVE)" : "");
    *server_p = server;
    return ECT_OK;

close_router:
    ect__ctl_close_with_monitor(server->router, server->monitor);
term_ctx:
    zmq_ctx_shutdown(server->ctx); /* wakes the ZAP thread */
    ect__ctl_zap_stop(server->zap);
    zmq_ctx_term(server->ctx);
free_server:
    ect__free(server);
wipe_keys:
    if (curve)
        ect__ctl_keys_wipe(&keys);
    return st;
}

uint16_t
ect__ctl_server_port(const ect_ctl_server_t *server)
{
    return server != NULL ? server->port : 0;
}

ect_status_t
ect__ctl_server_recv(ect_ctl_server_t *server, int timeout_ms, ect_ctl_peer_t *peer_p,
                     const void **payload_p, size_t *len_p)
{
    if (server == NULL || peer_p == NULL || payload_p == NULL || len_p == NULL || timeout_ms < -1)
        return ect__error(ECT_ERR_INVALID_ARG, "control: bad argument to server recv");
    server_release_payload(server);
    uint64_t deadline = ect__ctl_deadline(timeout_ms);
    server_drain_monitor(server);
    for (;;) {
        /* Blocked in the ROUTER's own receive, with the time left as its
         * timeout: a zmq_poll over the ROUTER and the monitor costs several
         * more system calls a message (each socket's events are read before
         * and after the poll), about 20 us a round trip on the project's
         * VMs.  The monitor is drained on every return instead (read_one
         * drains it before it records a message's fd; take_dead_peers, which
         * the caller runs each round, drains it too). */
        int wait = ect__ctl_ms_left(deadline, timeout_ms);
        if (wait != 0 && wait != server->rcvtimeo) {
            if (zmq_setsockopt(server->router, ZMQ_RCVTIMEO, &wait, sizeof(wait)) != 0)
                return ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot set the ROUTER's timeout");
            server->rcvtimeo = wait;
        }
        ect_ctl_peer_t peer;
        int r = server_read_one(server, &peer, wait == 0 ? ZMQ_DONTWAIT : 0);
        if (r == 1) {
            *peer_p = peer;
            *payload_p = zmq_msg_data(&server->payload);
            *len_p = zmq_msg_size(&server->payload);
            return ECT_OK;
        }
        if (r == -2)
            return ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "ROUTER receive failed");
        if (r == -1)
            continue;
        server_drain_monitor(server);
        if (wait == 0 || ect__ctl_ms_left(deadline, timeout_ms) == 0)
            return ECT_ERR_TIMEOUT;
    }
}

ect_status_t
ect__ctl_server_send(ect_ctl_server_t *server, const ect_ctl_peer_t *peer, const void *payload,
                     size_t len)
{
    if (server == NULL || peer == NULL || peer->len == 0 || (payload == NULL && len != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "control: bad argument to server send");
    if (len > ECT_CTL_MAX_MESSAGE)
        return ect__error(ECT_ERR_OVERFLOW, "control: reply of %zu bytes exceeds the %u-byte limit",
                          len, ECT_CTL_MAX_MESSAGE);
    /* With ROUTER_MANDATORY the identity frame fails (EHOSTUNREACH) for a
     * peer that is gone, and EAGAIN for a full queue; the later frames of a
     * message whose first frame went out always follow it. */
    if (zmq_send(server->router, peer->id, peer->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        int err = zmq_errno();
        char hex[40];
        COUNT(server, send_failed, 1);
        return ect__error(ECT_ERR_TRANSPORT, "control: cannot send to consumer %s: %s",
                          peer_hex(peer, hex, sizeof(hex)),
                          err == EHOSTUNREACH ? "it is gone"
                          : err == EAGAIN     ? "its queue is full"
                                              : zmq_strerror(err));
    }
    if (zmq_send(server->router, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(server->router, payload, len, ZMQ_DONTWAIT) < 0) {
        COUNT(server, send_failed, 1);
        return ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot finish a reply");
    }
    COUNT(server, sent, 1);
    return ECT_OK;
}

size_t
ect__ctl_server_take_dead_peers(ect_ctl_server_t *server, ect_ctl_peer_t *peers, size_t cap)
{
    if (server == NULL || (peers == NULL && cap != 0))
        return 0;
    server_drain_monitor(server);
    size_t n = server->n_dead < cap ? server->n_dead : cap;
    if (n == 0)
        return 0; /* server->dead may still be NULL */
    memcpy(peers, server->dead, n * sizeof(*peers));
    memmove(server->dead, server->dead + n, (server->n_dead - n) * sizeof(*server->dead));
    server->n_dead -= n;
    return n;
}

void
ect__ctl_server_counters(const ect_ctl_server_t *server, ect_ctl_counters_t *counters_p)
{
    if (server == NULL || counters_p == NULL)
        return;
    counters_p->received = COUNTER(server, received);
    counters_p->dropped = COUNTER(server, dropped);
    counters_p->sent = COUNTER(server, sent);
    counters_p->send_failed = COUNTER(server, send_failed);
    counters_p->disconnects = COUNTER(server, disconnects);
    counters_p->handshake_failed = COUNTER(server, handshake_failed);
    counters_p->from_dead = COUNTER(server, from_dead);
}

void
ect__ctl_server_add_metrics(const ect_ctl_server_t *server, ect_metrics_t *m)
{
    if (server != NULL && m != NULL)
        m->control_framing_dropped += COUNTER(server, dropped);
}

void
ect__ctl_server_close(ect_ctl_server_t *server)
{
    if (server == NULL)
        return;
    server_release_payload(server);
    ect__ctl_close_with_monitor(server->router, server->monitor);
    zmq_ctx_shutdown(server->ctx); /* wakes the ZAP thread, which closes its socket */
    ect__ctl_zap_stop(server->zap);
    zmq_ctx_term(server->ctx);
    ect__free(server->fds);
    ect__free(server->dead);
    ect__free(server);
}
