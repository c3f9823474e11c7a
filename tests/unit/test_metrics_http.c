/*
 * The Prometheus endpoint (SPEC §9.7; src/metrics/http.c) as a scraper sees
 * it: a real scheduler with metrics_address 127.0.0.1:0 and a real TCP
 * client.  GET /metrics answers 200 with the text exposition (which moves
 * when the scheduler counts), other paths 404, malformed and oversized
 * requests 400, a silent client does not stop the next scrape, a taken port
 * fails create naming the address, and shutdown frees the port.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "support/step.h"

static int
connect_port(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd >= 0);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Send req (len bytes), read the whole answer (the server closes). */
static char *
exchange(uint16_t port, const char *req, size_t len)
{
    int fd = connect_port(port);
    CHECK_MSG(fd >= 0, "cannot connect to port %u", port);
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, req + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            break; /* the server may answer and close before reading it all */
        off += (size_t)n;
    }
    size_t cap = 1 << 16, got = 0;
    char *buf = malloc(cap);
    CHECK(buf != NULL);
    for (;;) {
        if (got + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            CHECK(buf != NULL);
        }
        ssize_t n = recv(fd, buf + got, cap - 1 - got, 0);
        if (n < 0 && errno == ECONNRESET)
            break;
        CHECK_MSG(n >= 0, "recv: %s", strerror(errno));
        if (n == 0)
            break;
        got += (size_t)n;
    }
    buf[got] = '\0';
    close(fd);
    return buf;
}

static char *
get(uint16_t port, const char *path)
{
    char req[256];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
    return exchange(port, req, (size_t)n);
}

struct http_fx {
    struct ts_step_instance in;
    ect_scheduler_t *s;
    uint16_t port;
};

static void
http_fx_open(struct http_fx *fx)
{
    ts_step_instance_init(&fx->in, ECT_ROLE_BOTH, 16, true);
    snprintf(fx->in.cfg.metrics_address, sizeof(fx->in.cfg.metrics_address), "127.0.0.1:0");
    fx->s = ts_scheduler(&fx->in, 1);
    fx->port = ect__scheduler_metrics_port(fx->s);
    CHECK(fx->port != 0);
}

static void
http_fx_close(struct http_fx *fx)
{
    ect_scheduler_destroy(fx->s);
    ts_check_gone(fx->in.path);
}

static void
test_get_metrics_serves_prometheus_text_that_follows_the_counters(void)
{
    struct http_fx fx;
    http_fx_open(&fx);
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img"));
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img2"));
    char *r = get(fx.port, "/metrics");
    CHECK_CONTAINS(r, "HTTP/1.0 200 OK\r\n");
    CHECK_CONTAINS(r, "Content-Type: text/plain; version=0.0.4\r\n");
    CHECK_CONTAINS(r, "ectier_hits_total");
    CHECK_CONTAINS(r, "ectier_misses_total 2\n");
    /* Content-Length matches the body. */
    const char *body = strstr(r, "\r\n\r\n");
    CHECK(body != NULL);
    const char *cl = strstr(r, "Content-Length: ");
    CHECK(cl != NULL && cl < body);
    CHECK_EQ_U64(strtoull(cl + 16, NULL, 10), strlen(body + 4));
    free(r);
    /* A query string is still /metrics, and a new scrape sees new counts. */
    CHECK(!ect_scheduler_has_cache_item(fx.s, "img3"));
    r = get(fx.port, "/metrics?x=1");
    CHECK_CONTAINS(r, "HTTP/1.0 200 OK\r\n");
    CHECK_CONTAINS(r, "ectier_misses_total 3\n");
    free(r);
    http_fx_close(&fx);
}

static void
test_other_paths_and_methods_get_404(void)
{
    struct http_fx fx;
    http_fx_open(&fx);
    char *r = get(fx.port, "/");
    CHECK_CONTAINS(r, "HTTP/1.0 404 Not Found\r\n");
    CHECK(strstr(r, "ectier_") == NULL);
    free(r);
    r = get(fx.port, "/metricsx");
    CHECK_CONTAINS(r, "HTTP/1.0 404");
    free(r);
    const char post[] = "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
    r = exchange(fx.port, post, sizeof(post) - 1);
    CHECK_CONTAINS(r, "HTTP/1.0 404");
    free(r);
    http_fx_close(&fx);
}

static void
test_malformed_and_oversized_requests_get_400_and_serving_goes_on(void)
{
    struct http_fx fx;
    http_fx_open(&fx);
    static const char *const bad[] = {
        "garbage\r\n\r\n",
        "GET /metrics\r\n\r\n",
        "GET /metrics HTTP/9.9\r\n\r\n",
        "get /metrics HTTP/1.0\r\n\r\n",
        "GET  HTTP/1.0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *r = exchange(fx.port, bad[i], strlen(bad[i]));
        CHECK_MSG(strncmp(r, "HTTP/1.0 400", 12) == 0, "request %zu answered \"%.40s\"", i, r);
        free(r);
    }
    /* A NUL byte inside the request. */
    const char nul[] = "GET /met\0rics HTTP/1.0\r\n\r\n";
    char *r = exchange(fx.port, nul, sizeof(nul) - 1);
    CHECK_CONTAINS(r, "HTTP/1.0 400");
    free(r);
    /* More than 8 KiB without the end of the headers. */
    size_t big = 64 * 1024;
    char *huge = malloc(big);
    CHECK(huge != NULL);
    memcpy(huge, "GET /metrics HTTP/1.0\r\nX: ", 26);
    memset(huge + 26, 'a', big - 26);
    r = exchange(fx.port, huge, big);
    CHECK_CONTAINS(r, "HTTP/1.0 400");
    CHECK_CONTAINS(r, "too large");
    free(r);
    free(huge);
    r = get(fx.port, "/metrics");
    CHECK_CONTAINS(r, "HTTP/1.0 200 OK");
    free(r);
    http_fx_close(&fx);
}

static void
test_a_silent_client_is_dropped_and_the_next_scrape_served(void)
{
    struct http_fx fx;
    http_fx_open(&fx);
    int idle = connect_port(fx.port);
    CHECK(idle >= 0);
    CHECK(send(idle, "GET /met", 8, MSG_NOSIGNAL) == 8);
    /* The server gives the idle client its deadline, then serves this one. */
    char *r = get(fx.port, "/metrics");
    CHECK_CONTAINS(r, "HTTP/1.0 200 OK");
    free(r);
    char c;
    CHECK_EQ_INT((int)recv(idle, &c, 1, 0), 0); /* closed without an answer */
    close(idle);
    http_fx_close(&fx);
}

/* ---- clients that hold connections (issue 9, item 7) ------------------------- */

static uint64_t
now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* One scrape, timed; fails the case unless it is a 200 within limit_ms. */
static void
scrape_within(uint16_t port, uint64_t limit_ms)
{
    uint64_t t0 = now_ms();
    char *r = get(port, "/metrics");
    uint64_t took = now_ms() - t0;
    CHECK_MSG(strncmp(r, "HTTP/1.0 200 OK", 15) == 0, "scrape answered \"%.40s\"", r);
    CHECK_MSG(took <= limit_ms, "a scrape took %llu ms (limit %llu)", (unsigned long long)took,
              (unsigned long long)limit_ms);
    free(r);
}

/* stop: set by the case (atomically); sent: read after the join. */
struct slowloris {
    uint16_t port;
    int fd;
    int stop;
    size_t sent;
};

/* Dribble a request one byte per 100 ms, as long as the server takes it. */
static void *
slowloris_main(void *arg)
{
    struct slowloris *sl = arg;
    static const char req[] =
        "GET /metrics HTTP/1.0\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    for (size_t i = 0; i < sizeof(req) - 1 && !__atomic_load_n(&sl->stop, __ATOMIC_RELAXED); i++) {
        if (send(sl->fd, req + i, 1, MSG_NOSIGNAL) != 1)
            break;
        sl->sent++;
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    return NULL;
}

/* Whether the server closed fd (end of file or reset) within limit_ms. */
static int
closed_within(int fd, uint64_t limit_ms)
{
    struct timeval tv = {.tv_sec = (time_t)(limit_ms / 1000),
                         .tv_usec = (suseconds_t)(limit_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno == ECONNRESET))
            return 1;
        if (n < 0)
            return 0; /* timed out: still open */
    }
}

static void
test_idle_slow_and_deaf_clients_do_not_delay_a_scrape(void)
{
    struct http_fx fx;
    http_fx_open(&fx);
    /* Four idle connections, a slowloris and a client that sends a request
     * and never reads the answer, all at once. */
    int idle[4];
    for (int i = 0; i < 4; i++)
        CHECK((idle[i] = connect_port(fx.port)) >= 0);
    struct slowloris sl = {.port = fx.port, .fd = connect_port(fx.port)};
    CHECK(sl.fd >= 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, slowloris_main, &sl) == 0);
    int deaf = connect_port(fx.port);
    CHECK(deaf >= 0);
    int small = 1024;
    setsockopt(deaf, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
    CHECK(send(deaf, req, sizeof(req) - 1, MSG_NOSIGNAL) == (ssize_t)sizeof(req) - 1);

    /* Real scrapes are served at once, again and again. */
    for (int i = 0; i < 5; i++)
        scrape_within(fx.port, 500);
    /* Each holder is cut after its short deadline, without an answer. */
    for (int i = 0; i < 4; i++)
        CHECK_MSG(closed_within(idle[i], 4000), "idle connection %d still open after 4 s", i);
    CHECK_MSG(closed_within(sl.fd, 4000), "the slowloris is still connected after 4 s");
    __atomic_store_n(&sl.stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    CHECK_MSG(sl.sent < 40, "the slowloris sent %zu bytes before it was cut", sl.sent);
    CHECK_MSG(closed_within(deaf, 4000), "the deaf client is still connected after 4 s");
    for (int i = 0; i < 4; i++)
        close(idle[i]);
    close(sl.fd);
    close(deaf);
    scrape_within(fx.port, 500);
    http_fx_close(&fx);
}

static void
test_more_idle_connections_than_slots_do_not_lock_out_a_scrape(void)
{
    struct http_fx fx;
    http_fx_open(&fx);
    /* Far more than the server keeps: the oldest idle ones make room. */
    enum { N = 100 };
    int fds[N];
    int open_n = 0;
    for (int i = 0; i < N; i++)
        if ((fds[i] = connect_port(fx.port)) >= 0)
            open_n++;
    CHECK_MSG(open_n >= 64, "only %d of %d connections were made", open_n, N);
    for (int i = 0; i < 3; i++)
        scrape_within(fx.port, 500);
    for (int i = 0; i < N; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    http_fx_close(&fx);
}

static void
test_shutdown_closes_the_port(void)
{
    struct http_fx fx;
    http_fx_open(&fx);
    char *r = get(fx.port, "/metrics");
    CHECK_CONTAINS(r, "200 OK");
    free(r);
    ect_scheduler_shutdown(fx.s);
    CHECK_EQ_INT(ect__scheduler_metrics_port(fx.s), 0);
    int fd = connect_port(fx.port);
    CHECK_MSG(fd < 0, "port %u still accepts after shutdown", fx.port);
    http_fx_close(&fx);
}

static void
test_a_taken_port_fails_create_naming_the_address(void)
{
    struct http_fx fx;
    http_fx_open(&fx);
    struct ts_step_instance other;
    ts_step_instance_init(&other, ECT_ROLE_BOTH, 16, true);
    snprintf(other.cfg.metrics_address, sizeof(other.cfg.metrics_address), "127.0.0.1:%u", fx.port);
    ect_scheduler_params_t p = {
        .config = &other.cfg, .geometry = &other.geom, .instance_id = other.id};
    ect_scheduler_t *s = NULL;
    CHECK_STATUS(ect_scheduler_create(&p, &s), ECT_ERR_IO);
    CHECK(s == NULL);
    CHECK_CONTAINS(ect_last_error(), other.cfg.metrics_address);
    ts_check_gone(other.path);
    http_fx_close(&fx);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_get_metrics_serves_prometheus_text_that_follows_the_counters),
    ECT_CASE(test_other_paths_and_methods_get_404),
    ECT_CASE(test_malformed_and_oversized_requests_get_400_and_serving_goes_on),
    ECT_CASE(test_a_silent_client_is_dropped_and_the_next_scrape_served),
    ECT_CASE(test_idle_slow_and_deaf_clients_do_not_delay_a_scrape),
    ECT_CASE(test_more_idle_connections_than_slots_do_not_lock_out_a_scrape),
    ECT_CASE(test_shutdown_closes_the_port),
    ECT_CASE(test_a_taken_port_fails_create_naming_the_address),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
