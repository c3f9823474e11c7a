/*
 * The Prometheus scrape endpoint (src/metrics/http.h).
 *
 * One thread polls the listening socket and an eventfd; stop() writes the
 * eventfd and joins.  Connections are served one at a time: read at most
 * ECT_HTTP_REQ_MAX bytes until the blank line that ends the headers, answer,
 * close.  Every wait on a client is bounded by CLIENT_DEADLINE_MS and also
 * watches the eventfd, so neither a silent client nor stop() can hang the
 * other.  Only the thread touches the client socket; the listening socket
 * and the eventfd are closed by stop() after the join.
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

#include "common/clock.h"
#include "common/error.h"
#include "metrics/http.h"

#define ECT_HTTP_REQ_MAX   8192
#define CLIENT_DEADLINE_MS 2000
#define LINGER_MS          200
#define LINGER_MAX_BYTES   (256 * 1024)

struct ect__http {
    int lfd;
    int stop_fd;
    uint16_t port;
    pthread_t thread;
    ect__http_render_fn render;
    void *user;
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
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 16) != 0) {
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

/* Wait for fd to be ready for events, or the deadline, or stop.
 * Returns 1 ready, 0 give up. */
static int
wait_client(ect__http_t *s, int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        uint64_t now = ect__now_ns();
        if (now >= deadline_ns)
            return 0;
        struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = s->stop_fd, .events = POLLIN}};
        int ms = (int)((deadline_ns - now) / 1000000u) + 1;
        int n = poll(p, 2, ms);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (p[1].revents & POLLIN))
            return 0;
        if (p[0].revents != 0)
            return 1;
    }
}

static void
send_all(ect__http_t *s, int fd, const char *buf, size_t len, uint64_t deadline_ns)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_client(s, fd, POLLOUT, deadline_ns))
                return;
        } else {
            return;
        }
    }
}

static void
send_status(ect__http_t *s, int fd, const char *status, const char *text, uint64_t deadline_ns)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf),
                     "HTTP/1.0 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n%s",
                     status, strlen(text), text);
    send_all(s, fd, buf, (size_t)n, deadline_ns);
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

static void
answer(ect__http_t *s, int fd, const char *req, uint64_t deadline_ns)
{
    char method[16], target[1024];
    if (!parse_request_line(req, method, sizeof(method), target, sizeof(target))) {
        send_status(s, fd, "400 Bad Request", "bad request\n", deadline_ns);
        return;
    }
    size_t path_len = strcspn(target, "?");
    if (strcmp(method, "GET") != 0 || path_len != 8 || strncmp(target, "/metrics", 8) != 0) {
        send_status(s, fd, "404 Not Found", "only GET /metrics is served\n", deadline_ns);
        return;
    }
    char *body = NULL;
    size_t len = 0;
    if (s->render(s->user, &body, &len) != ECT_OK) {
        ect__log_last_error(ECT_LOG_WARN, "metrics http: rendering");
        send_status(s, fd, "500 Internal Server Error", "cannot render metrics\n", deadline_ns);
        return;
    }
    char head[160];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     len);
    send_all(s, fd, head, (size_t)n, deadline_ns);
    send_all(s, fd, body, len, deadline_ns);
    free(body);
}

static void
serve_client(ect__http_t *s, int fd)
{
    char req[ECT_HTTP_REQ_MAX + 1];
    size_t got = 0;
    uint64_t deadline = ect__now_ns() + (uint64_t)CLIENT_DEADLINE_MS * 1000000u;
    for (;;) {
        if (got == ECT_HTTP_REQ_MAX) {
            send_status(s, fd, "400 Bad Request", "request too large\n", deadline);
            return;
        }
        ssize_t n = recv(fd, req + got, ECT_HTTP_REQ_MAX - got, 0);
        if (n > 0) {
            got += (size_t)n;
            req[got] = '\0';
            if (memchr(req, '\0', got) != NULL) {
                send_status(s, fd, "400 Bad Request", "bad request\n", deadline);
                return;
            }
            if (strstr(req, "\r\n\r\n") != NULL) {
                answer(s, fd, req, deadline);
                return;
            }
        } else if (n == 0) {
            return; /* the client gave up before finishing its request */
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (!wait_client(s, fd, POLLIN, deadline))
                return;
        } else {
            return;
        }
    }
}

/* Close after reading what the client still sends (briefly, boundedly):
 * closing with unread bytes makes the kernel reset the connection, and the
 * client could lose the answer, e.g. the 400 to an oversized request. */
static void
linger_close(ect__http_t *s, int fd)
{
    shutdown(fd, SHUT_WR);
    uint64_t deadline = ect__now_ns() + (uint64_t)LINGER_MS * 1000000u;
    char sink[4096];
    for (size_t drained = 0; drained < LINGER_MAX_BYTES;) {
        ssize_t n = recv(fd, sink, sizeof(sink), 0);
        if (n > 0)
            drained += (size_t)n;
        else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            break;
        else if (errno != EINTR && !wait_client(s, fd, POLLIN, deadline))
            break;
    }
    close(fd);
}

static void *
server_main(void *arg)
{
    ect__http_t *s = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = s->lfd, .events = POLLIN},
                              {.fd = s->stop_fd, .events = POLLIN}};
        int n = poll(p, 2, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            ECT_LOG_E("metrics http: poll: %s", strerror(errno));
            return NULL;
        }
        if (p[1].revents & POLLIN)
            return NULL;
        if (!(p[0].revents & POLLIN))
            continue;
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0)
            continue; /* the client left, or a transient shortage: keep serving */
        serve_client(s, fd);
        linger_close(s, fd);
    }
}

ect_status_t
ect__http_start(const char *address, ect__http_render_fn render, void *user, ect__http_t **server_p)
{
    if (address == NULL || render == NULL || server_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "metrics http: NULL address, render or server_p");
    ect__http_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "metrics http: out of memory");
    s->render = render;
    s->user = user;
    s->lfd = -1;
    ect_status_t st = open_listener(s, address);
    if (st != ECT_OK)
        goto err_free;
    s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->stop_fd < 0) {
        st = ect__error_errno(ECT_ERR_IO, "metrics http: eventfd");
        goto err_listener;
    }
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "metrics http: cannot start its thread");
        goto err_eventfd;
    }
    *server_p = s;
    return ECT_OK;

err_eventfd:
    close(s->stop_fd);
err_listener:
    close(s->lfd);
err_free:
    free(s);
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
    free(server);
}
