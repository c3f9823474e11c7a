/*
 * The Prometheus scrape endpoint (src/metrics/http.h).
 *
 * One thread runs a poll loop over the listening socket, an eventfd (stop()
 * writes it and joins) and at most MAX_CLIENTS client connections, each in
 * one of three states: READING its request (at most ECT_HTTP_REQ_MAX bytes
 * until the blank line that ends the headers), WRITING the answer (built
 * whole before the first byte goes out), LINGERING (our side shut down,
 * draining what the client still sends, briefly).  Every client has one
 * deadline for the whole exchange, CLIENT_DEADLINE_MS after its accept; at
 * the deadline it is closed whatever its state.  Nothing ever blocks on one
 * client, so an idle connection, a slowloris that dribbles its request or a
 * client that never reads its answer costs a slot for at most the deadline
 * and delays nobody else.  When every slot is taken, a new connection takes
 * the slot of the oldest client still READING (a scraper sends its request
 * at once, so the oldest reader is the likeliest to be idle); when none is
 * reading, new connections wait in the listen backlog until a slot frees.
 *
 * Only the thread touches the clients; the listening socket and the eventfd
 * are closed by stop() after the join.  No locks.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/thread.h"
#include "metrics/http.h"

#define ECT_HTTP_REQ_MAX   8192
#define MAX_CLIENTS        32
#define LISTEN_BACKLOG     256 /* a burst of connections never costs a SYN retry */
#define CLIENT_DEADLINE_MS 1500
#define LINGER_MS          200
#define LINGER_MAX_BYTES   (256 * 1024)

enum client_state { FREE, READING, WRITING, LINGERING };

struct client {
    enum client_state state;
    int fd;
    uint64_t accepted_ns;
    uint64_t deadline_ns;
    char *req; /* ECT_HTTP_REQ_MAX + 1 bytes while READING */
    size_t got;
    char *out; /* the whole answer while WRITING */
    size_t out_len, out_off;
    size_t drained; /* LINGERING */
};

struct ect__http {
    int lfd;
    int stop_fd;
    uint16_t port;
    pthread_t thread;
    ect__http_render_fn render;
    void *user;
    struct client clients[MAX_CLIENTS];
};

ect_status_t
ect__http_split_address(const char *label, const char *address, char *host, size_t host_cap,
                        char *port, size_t port_cap)
{
    const char *colon = strrchr(address, ':');
    if (colon == NULL || colon[1] == '\0')
        return ect__error(ECT_ERR_CONFIG, "%s = \"%s\": use host:port", label, address);
    const char *h = address;
    size_t hl = (size_t)(colon - address);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= host_cap || strlen(colon + 1) >= port_cap)
        return ect__error(ECT_ERR_CONFIG, "%s = \"%s\": use host:port", label, address);
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    return ECT_OK;
}

static ect_status_t
open_listener(ect__http_t *s, const char *address)
{
    char host[256], port[16];
    ect_status_t st =
        ect__http_split_address("metrics_address", address, host, sizeof(host), port, sizeof(port));
    if (st != ECT_OK)
        return st;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return ect__error(ECT_ERR_CONFIG, "metrics_address = \"%s\": cannot resolve: %s", address,
                          gai_strerror(gai));
    st = ect__error(ECT_ERR_IO, "metrics_address = \"%s\": no usable address", address);
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            st = ect__error_errno(ECT_ERR_IO, "metrics_address = \"%s\": socket", address);
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, LISTEN_BACKLOG) != 0) {
            st = ect__error_errno(ECT_ERR_IO, "metrics_address = \"%s\": cannot listen", address);
            close(fd);
            continue;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
            st = ect__error_errno(ECT_ERR_IO, "metrics_address = \"%s\": getsockname", address);
            close(fd);
            continue;
        }
        char pbuf[16];
        getnameinfo((struct sockaddr *)&ss, sl, NULL, 0, pbuf, sizeof(pbuf), NI_NUMERICSERV);
        s->port = (uint16_t)atoi(pbuf);
        s->lfd = fd;
        st = ECT_OK;
        break;
    }
    freeaddrinfo(res);
    return st;
}

/* ---- answers ---------------------------------------------------------------------- */

/* Make "head + body" the client's answer and switch it to WRITING; a
 * failed allocation just closes (the client sees the connection end). */
static void
client_answer(struct client *c, const char *head, size_t head_len, const char *body,
              size_t body_len)
{
    ect__free(c->req);
    c->req = NULL;
    c->out = ect__malloc(head_len + body_len);
    if (c->out == NULL) {
        ECT_LOG_W("metrics http: out of memory for a %zu-byte answer", head_len + body_len);
        c->out_len = 0;
    } else {
        memcpy(c->out, head, head_len);
        if (body_len > 0)
            memcpy(c->out + head_len, body, body_len);
        c->out_len = head_len + body_len;
    }
    c->out_off = 0;
    c->state = WRITING;
}

static void
client_status(struct client *c, const char *status, const char *text)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf),
                     "HTTP/1.0 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     status, strlen(text), text);
    client_answer(c, buf, (size_t)n, NULL, 0);
}

/* 1: a request line "METHOD SP TARGET SP HTTP/1.x" with printable parts. */
static int
parse_request_line(const char *req, char *method, size_t mcap, char *target, size_t tcap)
{
    const char *eol = strstr(req, "\r\n");
    if (eol == NULL)
        return 0;
    const char *sp1 = memchr(req, ' ', (size_t)(eol - req));
    if (sp1 == NULL)
        return 0;
    const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
    if (sp2 == NULL)
        return 0;
    size_t ml = (size_t)(sp1 - req), tl = (size_t)(sp2 - sp1 - 1);
    size_t vl = (size_t)(eol - sp2 - 1);
    if (ml == 0 || ml >= mcap || tl == 0 || tl >= tcap || vl != 8 ||
        strncmp(sp2 + 1, "HTTP/1.", 7) != 0 || (sp2[8] != '0' && sp2[8] != '1'))
        return 0;
    for (const char *p = req; p < sp1; p++)
        if (*p < 'A' || *p > 'Z')
            return 0;
    for (const char *p = sp1 + 1; p < sp2; p++)
        if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
            return 0;
    memcpy(method, req, ml);
    method[ml] = '\0';
    memcpy(target, sp1 + 1, tl);
    target[tl] = '\0';
    return 1;
}

/* A whole request is in c->req: prepare its answer. */
static void
client_request(ect__http_t *s, struct client *c)
{
    char method[16], target[1024];
    if (!parse_request_line(c->req, method, sizeof(method), target, sizeof(target))) {
        client_status(c, "400 Bad Request", "bad request\n");
        return;
    }
    size_t path_len = strcspn(target, "?");
    if (strcmp(method, "GET") != 0 || path_len != 8 || strncmp(target, "/metrics", 8) != 0) {
        client_status(c, "404 Not Found", "only GET /metrics is served\n");
        return;
    }
    char *body = NULL;
    size_t len = 0;
    if (s->render(s->user, &body, &len) != ECT_OK) {
        ect__log_last_error(ECT_LOG_WARN, "metrics http: rendering");
        client_status(c, "500 Internal Server Error", "cannot render metrics\n");
        return;
    }
    char head[160];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     len);
    client_answer(c, head, (size_t)n, body, len);
    ect__free(body);
}

/* ---- clients ------------------------------------------------------------------------ */

static void
client_close(struct client *c)
{
    close(c->fd);
    ect__free(c->req);
    ect__free(c->out);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
    c->state = FREE;
}

/* Everything is sent: shut our side and drain what the client still sends
 * (briefly, boundedly) before closing.  Closing with unread bytes makes the
 * kernel reset the connection, and the client could lose the answer, e.g.
 * the 400 to an oversized request. */
static void
client_linger(struct client *c, uint64_t now)
{
    ect__free(c->out);
    c->out = NULL;
    shutdown(c->fd, SHUT_WR);
    uint64_t until = now + (uint64_t)LINGER_MS * 1000000u;
    if (until < c->deadline_ns)
        c->deadline_ns = until;
    c->state = LINGERING;
}

static void
client_read(ect__http_t *s, struct client *c)
{
    for (;;) {
        if (c->got == ECT_HTTP_REQ_MAX) {
            client_status(c, "400 Bad Request", "request too large\n");
            return;
        }
        ssize_t n = recv(c->fd, c->req + c->got, ECT_HTTP_REQ_MAX - c->got, 0);
        if (n > 0) {
            size_t from = c->got >= 3 ? c->got - 3 : 0; /* "\r\n\r\n" may straddle reads */
            c->got += (size_t)n;
            c->req[c->got] = '\0';
            if (memchr(c->req + from, '\0', c->got - from) != NULL) {
                client_status(c, "400 Bad Request", "bad request\n");
                return;
            }
            if (strstr(c->req + from, "\r\n\r\n") != NULL) {
                client_request(s, c);
                return;
            }
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return; /* wait for more */
        } else {
            client_close(c); /* gave up before finishing its request, or failed */
            return;
        }
    }
}

static void
client_write(struct client *c, uint64_t now)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
        if (n > 0)
            c->out_off += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return; /* the client reads slowly (or not at all): its deadline decides */
        else {
            client_close(c);
            return;
        }
    }
    client_linger(c, now);
}

static void
client_drain(struct client *c)
{
    char sink[4096];
    for (;;) {
        ssize_t n = recv(c->fd, sink, sizeof(sink), 0);
        if (n > 0) {
            c->drained += (size_t)n;
            if (c->drained < LINGER_MAX_BYTES)
                continue;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        client_close(c);
        return;
    }
}

/* A slot for a new client: a free one, else the oldest client still reading
 * its request, if evict (closed to make room).  NULL if there is none: every
 * slot is writing or lingering (or taken, without evict). */
static struct client *
slot_for_new(ect__http_t *s, int evict)
{
    struct client *oldest = NULL;
    for (size_t i = 0; i < MAX_CLIENTS; i++) {
        struct client *c = &s->clients[i];
        if (c->state == FREE)
            return c;
        if (c->state == READING && (oldest == NULL || c->accepted_ns < oldest->accepted_ns))
            oldest = c;
    }
    if (oldest != NULL && evict)
        client_close(oldest);
    return oldest;
}

/* Accept what is waiting, as far as slots allow.  A reader is evicted only
 * for a connection already accepted, never for one that might come. */
static void
accept_clients(ect__http_t *s, uint64_t now)
{
    while (slot_for_new(s, 0) != NULL) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            return; /* none left, the client left, or a transient shortage */
        char *req = ect__malloc(ECT_HTTP_REQ_MAX + 1);
        if (req == NULL) {
            ECT_LOG_W("metrics http: out of memory for a client");
            close(fd);
            return;
        }
        struct client *c = slot_for_new(s, 1); /* not NULL: checked above */
        if (c == NULL) {
            ect__free(req);
            close(fd);
            return;
        }
        req[0] = '\0';
        c->req = req;
        c->fd = fd;
        c->state = READING;
        c->accepted_ns = now;
        c->deadline_ns = now + (uint64_t)CLIENT_DEADLINE_MS * 1000000u;
    }
}

static void *
server_main(void *arg)
{
    ect__http_t *s = arg;
    struct pollfd p[2 + MAX_CLIENTS];
    struct client *who[2 + MAX_CLIENTS];
    for (;;) {
        uint64_t now = ect__now_ns();
        /* Deadlines first, so an expired client never gets another turn. */
        int timeout_ms = -1, room = 0;
        for (size_t i = 0; i < MAX_CLIENTS; i++) {
            struct client *c = &s->clients[i];
            if (c->state == FREE || c->state == READING) {
                room = 1; /* a free slot, or one a new client may take */
                if (c->state == FREE)
                    continue;
            }
            if (now >= c->deadline_ns) {
                client_close(c);
                room = 1;
                continue;
            }
            int ms = (int)((c->deadline_ns - now) / 1000000u) + 1;
            if (timeout_ms < 0 || ms < timeout_ms)
                timeout_ms = ms;
        }
        nfds_t n = 0;
        p[n] = (struct pollfd){.fd = s->stop_fd, .events = POLLIN};
        who[n++] = NULL;
        if (room) {
            p[n] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
            who[n++] = NULL;
        }
        size_t first_client = n;
        for (size_t i = 0; i < MAX_CLIENTS; i++) {
            struct client *c = &s->clients[i];
            if (c->state == FREE)
                continue;
            p[n] = (struct pollfd){.fd = c->fd, .events = c->state == WRITING ? POLLOUT : POLLIN};
            who[n++] = c;
        }
        int rc = poll(p, n, timeout_ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0) {
            ECT_LOG_E("metrics http: poll: %s", strerror(errno));
            break;
        }
        if (p[0].revents & POLLIN)
            break;
        now = ect__now_ns();
        for (size_t k = first_client; k < n; k++) {
            struct client *c = who[k];
            if (p[k].revents == 0 || c->state == FREE)
                continue;
            if (c->state == READING)
                client_read(s, c);
            if (c->state == WRITING)
                client_write(c, now); /* at once: the answer is usually sent whole */
            else if (c->state == LINGERING)
                client_drain(c);
        }
        if (room && (p[1].revents & POLLIN))
            accept_clients(s, now);
    }
    for (size_t i = 0; i < MAX_CLIENTS; i++)
        if (s->clients[i].state != FREE)
            client_close(&s->clients[i]);
    return NULL;
}

ect_status_t
ect__http_start(const char *address, ect__http_render_fn render, void *user, ect__http_t **server_p)
{
    if (address == NULL || render == NULL || server_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "metrics http: NULL address, render or server_p");
    ect__http_t *s = ect__calloc(1, sizeof(*s));
    if (s == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "metrics http: out of memory");
    s->render = render;
    s->user = user;
    s->lfd = -1;
    for (size_t i = 0; i < MAX_CLIENTS; i++)
        s->clients[i].fd = -1;
    ect_status_t st = open_listener(s, address);
    if (st != ECT_OK)
        goto err_free;
    s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->stop_fd < 0) {
        st = ect__error_errno(ECT_ERR_IO, "metrics http: eventfd");
        goto err_listener;
    }
    if ((st = ect__thread_start(&s->thread, server_main, s, "ect-metrics")) != ECT_OK)
        goto err_eventfd;
    *server_p = s;
    return ECT_OK;

err_eventfd:
    close(s->stop_fd);
err_listener:
    close(s->lfd);
err_free:
    ect__free(s);
    return st;
}

uint16_t
ect__http_port(const ect__http_t *server)
{
    return server != NULL ? server->port : 0;
}

void
ect__http_stop(ect__http_t *server)
{
    if (server == NULL)
        return;
    uint64_t one = 1;
    while (write(server->stop_fd, &one, sizeof(one)) < 0 && errno == EINTR)
        ;
    pthread_join(server->thread, NULL);
    close(server->stop_fd);
    close(server->lfd);
    ect__free(server);
}
