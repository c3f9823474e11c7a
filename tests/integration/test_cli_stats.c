/*
 * `ectier stats` end to end, from the built binary.  Against a real
 * scheduler serving metrics_address 127.0.0.1:0 in this process: the
 * summary shows the scheduler's own counters, and --watch shows rates while
 * a thread keeps looking items up.  Against a fake server of the test's
 * own: a crafted page gives the expected fetch percentiles; hostile ones
 * (garbage, not HTTP, an error status, not ectier's metrics, bad text, a
 * huge declared or streamed body, a body shorter than declared, silence, a
 * byte every 100 ms, a closed port) each end in a clear error, exit 1, well
 * within the deadline, never a crash.  Loopback only.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "support/cli.h"
#include "support/step.h"

/* ---- a real instance --------------------------------------------------------------- */

static void
open_instance(struct ts_step_fx *fx, char address[32])
{
    ts_step_instance_init(&fx->in, ECT_ROLE_BOTH, 64, true);
    snprintf(fx->in.cfg.metrics_address, sizeof(fx->in.cfg.metrics_address), "127.0.0.1:0");
    fx->s = ts_scheduler(&fx->in, 1);
    uint16_t port = ect__scheduler_metrics_port(fx->s);
    CHECK(port != 0);
    snprintf(address, 32, "127.0.0.1:%u", port);
}

static void
test_stats_summarises_a_real_instance(void)
{
    struct ts_step_fx fx;
    char address[32];
    open_instance(&fx, address);
    for (unsigned i = 0; i < 5; i++) {
        char key[16];
        snprintf(key, sizeof(key), "img-%u", i);
        ts_store_only(fx.s, key, 1 + i);
    }
    CHECK(ect_scheduler_has_cache_item(fx.s, "img-1"));
    CHECK(ect_scheduler_has_cache_item(fx.s, "img-2"));
    CHECK(!ect_scheduler_has_cache_item(fx.s, "other"));
    ect_step_meta_destroy(ts_step(fx.s)); /* releases the hit pins */
    ect_metrics_t m = ts_metrics(fx.s);
    CHECK_EQ_U64(m.hits, 2);
    CHECK_EQ_U64(m.cache.used_blocks, 15);

    struct ts_cli_run r;
    ts_cli_run(&r, 20, "stats", address, NULL);
    CHECK_CLI_RC(&r, 0);
    char want[160];
    snprintf(want, sizeof(want), "ectier stats %s: ", address);
    CHECK_CONTAINS(r.out, want);
    CHECK_CONTAINS(r.out, "\nlookups    3: CPU-tier hit rate 66.7% (2 hits, 1 misses)\n");
    CHECK_CONTAINS(r.out, "\nsaves      5 of 5 landed, 0 failed, 0 skipped (region full); ");
    CHECK_CONTAINS(r.out, "\nregion     15 of 64 blocks used (23.4%), 15 evictable\n");
    CHECK_CONTAINS(r.out, "\nentries    5, 0 not ready, 0 pinned\n");
    CHECK_CONTAINS(r.out, "\nfetch      none\n");
    CHECK_CONTAINS(r.out, "\nacks in    none\n");
    /* Zeros, not "-": the names stats reads are the ones the library exports. */
    CHECK_CONTAINS(r.out, "\ngrants     0 refused (max_grants, max_grants_per_peer), 0 'done' of "
                          "another connection\n");
    CHECK_CONTAINS(r.out, "\nstream     0 grants served, 0 B sent, 0 moved between threads; 0 "
                          "denied, 0 bad requests\n");
    CHECK_CONTAINS(r.out, "\nstream cut 0 connections refused, 0 timed out, 0 by the peer\n");
    /* A person's terminal: no line over 100 columns. */
    for (const char *l = r.out; *l != '\0';) {
        size_t len = strcspn(l, "\n");
        CHECK_MSG(len <= 100, "a line of %zu columns: %.*s", len, (int)len, l);
        l += len + (l[len] == '\n');
    }
    ts_cli_run_free(&r);
    ts_step_fx_close(&fx);
}

struct looker {
    ect_scheduler_t *s;
    atomic_int stop;
};

static void *
look_up(void *arg)
{
    struct looker *lk = arg;
    while (!atomic_load(&lk->stop)) {
        (void)ect_scheduler_has_cache_item(lk->s, "missing");
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    return NULL;
}

static void
test_watch_shows_rates_between_scrapes(void)
{
    struct ts_step_fx fx;
    char address[32];
    open_instance(&fx, address);
    struct looker lk = {.s = fx.s};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, look_up, &lk) == 0);
    struct ts_cli_run r;
    ts_cli_run(&r, 20, "stats", address, "--watch", "--count", "3", "--interval", "0.2", NULL);
    atomic_store(&lk.stop, 1);
    pthread_join(t, NULL);
    CHECK_CLI_RC(&r, 0);
    /* Three summaries, the last two with the rates since the one before. */
    unsigned summaries = 0, rates = 0;
    for (const char *p = r.out; (p = strstr(p, "ectier stats ")) != NULL; p++)
        summaries++;
    for (const char *p = r.out; (p = strstr(p, "\nlast 0.2")) != NULL; p++)
        rates++;
    CHECK_EQ_INT(summaries, 3);
    CHECK_EQ_INT(rates, 2);
    const char *l = strstr(r.out, "\n  lookups  ");
    CHECK(l != NULL);
    double per_s = strtod(l + strlen("\n  lookups  "), NULL);
    CHECK_MSG(per_s > 10, "lookups at %g/s while a thread looks up every millisecond", per_s);
    CHECK_CONTAINS(l, "/s, CPU-tier hit rate 0.0%");
    ts_cli_run_free(&r);
    ts_step_fx_close(&fx);
}

/* ---- fake servers --------------------------------------------------------------------- */

enum fake_mode {
    FAKE_PAGE,       /* 200 with `page` */
    FAKE_GARBAGE,    /* not HTTP */
    FAKE_STATUS_500, /* an error status */
    FAKE_HUGE_LENGTH,
    FAKE_HUGE_STREAM, /* no length, bytes until the client leaves */
    FAKE_SHORT_BODY,  /* less than Content-Length, then close */
    FAKE_SILENT,      /* accept, never answer */
    FAKE_DRIP,        /* one byte every 100 ms */
    FAKE_CLOSE,       /* accept and close */
};

struct fake {
    enum fake_mode mode;
    const char *page;
    int lfd;
    int stop[2];
    uint16_t port;
    pthread_t thread;
};

/* Wait for fd (events) or stop, ms at most: 1 ready, 0 not. */
static int
fake_wait(struct fake *f, int fd, short events, int ms)
{
    struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = f->stop[0], .events = POLLIN}};
    return poll(p, 2, ms) > 0 && !(p[1].revents & POLLIN) && p[0].revents != 0;
}

static void
fake_send(int fd, const char *s, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        s += n;
        len -= (size_t)n;
    }
}

static void
fake_say(int fd, const char *s)
{
    fake_send(fd, s, strlen(s));
}

static void
fake_serve(struct fake *f, int fd)
{
    /* Read the request (what there is of it within a second). */
    char req[4096];
    if (fake_wait(f, fd, POLLIN, 1000))
        (void)!recv(fd, req, sizeof(req), 0);
    char head[256];
    static char junk[65536];
    memset(junk, 'x', sizeof(junk));
    switch (f->mode) {
    case FAKE_PAGE:
        snprintf(head, sizeof(head), "HTTP/1.0 200 OK\r\nContent-Length: %zu\r\n\r\n",
                 strlen(f->page));
        fake_send(fd, head, strlen(head));
        fake_send(fd, f->page, strlen(f->page));
        break;
    case FAKE_GARBAGE:
        fake_say(fd, "SSH-2.0-OpenSSH_9.2\r\n\x01\x02\x03\r\n\r\n");
        break;
    case FAKE_STATUS_500:
        fake_say(fd, "HTTP/1.0 500 Internal Server Error\r\n\r\noops\n");
        break;
    case FAKE_HUGE_LENGTH:
        fake_say(fd, "HTTP/1.0 200 OK\r\nContent-Length: 99999999999\r\n\r\n");
        while (fake_wait(f, fd, POLLOUT, 100) && send(fd, junk, sizeof(junk), MSG_NOSIGNAL) > 0)
            ;
        break;
    case FAKE_HUGE_STREAM:
        fake_say(fd, "HTTP/1.0 200 OK\r\n\r\nectier_hits_total 1\n");
        while (fake_wait(f, fd, POLLOUT, 100) && send(fd, junk, sizeof(junk), MSG_NOSIGNAL) > 0)
            ;
        break;
    case FAKE_SHORT_BODY:
        fake_say(fd, "HTTP/1.0 200 OK\r\nContent-Length: 100\r\n\r\nectier_hits_total 1\n");
        break;
    case FAKE_SILENT:
        fake_wait(f, fd, 0, 20000);
        break;
    case FAKE_DRIP:
        for (const char *p = "HTTP/1.0 200 OK\r\nX-Slow: yes yes yes yes yes yes yes\r\n";
             *p != '\0' && !fake_wait(f, fd, 0, 100); p++)
            fake_send(fd, p, 1);
        break;
    case FAKE_CLOSE:
        break;
    }
}

static void *
fake_main(void *arg)
{
    struct fake *f = arg;
    while (fake_wait(f, f->lfd, POLLIN, 30000)) {
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        fake_serve(f, fd);
        close(fd);
    }
    return NULL;
}

static void
fake_start(struct fake *f, enum fake_mode mode, const char *page)
{
    *f = (struct fake){.mode = mode, .page = page};
    CHECK(pipe(f->stop) == 0);
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(f->lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    CHECK(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(f->lfd, 4) == 0);
    CHECK(getsockname(f->lfd, (struct sockaddr *)&a, &al) == 0);
    f->port = ntohs(a.sin_port);
    CHECK(pthread_create(&f->thread, NULL, fake_main, f) == 0);
}

static void
fake_stop(struct fake *f)
{
    CHECK(write(f->stop[1], "x", 1) == 1);
    pthread_join(f->thread, NULL);
    close(f->lfd);
    close(f->stop[0]);
    close(f->stop[1]);
}

/* `ectier stats` against a fake server: its result. */
static void
stats_of_fake(struct ts_cli_run *r, enum fake_mode mode, const char *page)
{
    struct fake f;
    fake_start(&f, mode, page);
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.1:%u", f.port);
    ts_cli_run(r, 20, "stats", address, "--timeout", "1", NULL);
    fake_stop(&f);
}

static void
test_stats_reads_percentiles_from_the_buckets(void)
{
    /* 100 fetches: 10 under 0.5 ms, 80 more under 1 ms, 10 more under 10
     * ms.  p50 = 0.5 + 0.5 x 40/80 ms, p90 = 1 ms, p99 = 1 + 9 x 9/10 ms. */
    static const char page[] =
        "# TYPE ectier_hits_total counter\n"
        "ectier_hits_total 9\nectier_misses_total 1\n"
        "ectier_acks_received_total{status=\"ok\"} 90\n"
        "ectier_acks_received_total{status=\"nack_missing\"} 4\n"
        "ectier_acks_received_total{status=\"nack_version\"} 0\n"
        "ectier_p2p_fetch_seconds_bucket{le=\"0.0005\"} 10\n"
        "ectier_p2p_fetch_seconds_bucket{le=\"0.001\"} 90\n"
        "ectier_p2p_fetch_seconds_bucket{le=\"0.01\"} 100\n"
        "ectier_p2p_fetch_seconds_bucket{le=\"+Inf\"} 100\n"
        "ectier_p2p_fetch_seconds_sum 0.1\nectier_p2p_fetch_seconds_count 100\n"
        /* Their reads: 50 under 0.25 ms, 50 more under 0.5 ms. */
        "ectier_p2p_read_seconds_bucket{le=\"0.00025\"} 50\n"
        "ectier_p2p_read_seconds_bucket{le=\"0.0005\"} 100\n"
        "ectier_p2p_read_seconds_bucket{le=\"+Inf\"} 100\n"
        "ectier_p2p_read_seconds_sum 0.03\nectier_p2p_read_seconds_count 100\n";
    struct ts_cli_run r;
    stats_of_fake(&r, FAKE_PAGE, page);
    CHECK_CLI_RC(&r, 0);
    CHECK_CONTAINS(r.out, "\nlookups    10: CPU-tier hit rate 90.0% (9 hits, 1 misses)\n");
    CHECK_CONTAINS(r.out, "\nfetch      p50 750 us, p90 1.00 ms, p99 9.10 ms (100 fetches, "
                          "mean 1.00 ms)\n");
    CHECK_CONTAINS(r.out,
                   "\n  read     p50 250 us, p90 450 us, p99 495 us (100 reads, mean 300 us)\n");
    CHECK_CONTAINS(r.out, "\nacks in    ok 90, nack_missing 4\n");
    /* What the page lacks is shown as unknown, not as zero. */
    CHECK_CONTAINS(r.out, "\nsaves      - of - landed");
    ts_cli_run_free(&r);
}

static void
test_stats_shows_the_data_stream_and_grant_refusals(void)
{
    /* Every value distinct, so each lands where its name says. */
    static const char page[] = "ectier_hits_total 0\n"
                               "ectier_grants_refused_total 3\n"
                               "ectier_dones_rejected_total 1\n"
                               "ectier_data_streams_served_total 24\n"
                               "ectier_data_stream_bytes_total 44040192\n"
                               "ectier_data_streams_denied_total 2\n"
                               "ectier_data_stream_bad_requests_total 5\n"
                               "ectier_data_connections_refused_total 6\n"
                               "ectier_data_stream_timeouts_total 7\n"
                               "ectier_data_stream_send_failures_total 8\n"
                               "ectier_data_streams_moved_total 9\n";
    struct ts_cli_run r;
    stats_of_fake(&r, FAKE_PAGE, page);
    CHECK_CLI_RC(&r, 0);
    CHECK_CONTAINS(r.out, "\ngrants     3 refused (max_grants, max_grants_per_peer), 1 'done' of "
                          "another connection\n");
    CHECK_CONTAINS(r.out, "\nstream     24 grants served, 42.0 MiB sent, 9 moved between "
                          "threads; 2 denied, 5 bad requests\n");
    CHECK_CONTAINS(r.out, "\nstream cut 6 connections refused, 7 timed out, 8 by the peer\n");
    ts_cli_run_free(&r);
}

static void
test_hostile_servers_get_a_clear_error_in_bounded_time(void)
{
    static const struct {
        enum fake_mode mode;
        const char *page;
        const char *words;
    } cases[] = {
        {FAKE_GARBAGE, NULL, "not an HTTP answer"},
        {FAKE_STATUS_500, NULL, "the server answered \"500 Internal Server Error\""},
        {FAKE_PAGE, "node_cpu_seconds_total 5\n", "not an ectier metrics endpoint"},
        {FAKE_PAGE, "ectier_hits_total{ 1\n", "metrics text line 1"},
        {FAKE_PAGE, "ectier_hits_total 1\nectier_hits_total 2\n", "appears twice"},
        {FAKE_HUGE_LENGTH, NULL, "more than the 4194304 allowed"},
        {FAKE_HUGE_STREAM, NULL, "a body over 4194304 bytes"},
        {FAKE_SHORT_BODY, NULL, "where Content-Length said 100"},
        {FAKE_SILENT, NULL, "no complete answer within 1000 ms"},
        {FAKE_DRIP, NULL, "no complete answer within 1000 ms"},
        {FAKE_CLOSE, NULL, "before the HTTP headers ended"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct ts_cli_run r;
        stats_of_fake(&r, cases[i].mode, cases[i].page);
        CHECK_MSG(r.rc == 1, "case %zu: exit %d\nstdout: %s\nstderr: %s", i, r.rc, r.out, r.err);
        CHECK_CONTAINS(r.err, "ectier stats: 127.0.0.1:");
        CHECK_CONTAINS(r.err, cases[i].words);
        CHECK_MSG(r.secs < 3, "case %zu took %.1f s", i, r.secs);
        CHECK_STR_EQ(r.out, "");
        ts_cli_run_free(&r);
    }
    /* Nobody listening: the system's reason. */
    struct fake f;
    fake_start(&f, FAKE_CLOSE, NULL);
    char address[32];
    snprintf(address, sizeof(address), "127.0.0.1:%u", f.port);
    fake_stop(&f); /* the port is closed now */
    struct ts_cli_run r;
    ts_cli_run(&r, 20, "stats", address, "--timeout", "1", NULL);
    CHECK_CLI_RC(&r, 1);
    CHECK_CONTAINS(r.err, "cannot connect");
    CHECK_CONTAINS(r.err, "refused");
    ts_cli_run_free(&r);
    /* Usage errors. */
    ts_cli_run(&r, 10, "stats", NULL);
    CHECK_CLI_RC(&r, 2);
    CHECK_CONTAINS(r.err, "HOST:PORT");
    ts_cli_run_free(&r);
    ts_cli_run(&r, 10, "stats", "127.0.0.1", NULL);
    CHECK_CLI_RC(&r, 1);
    CHECK_CONTAINS(r.err, "use host:port");
    ts_cli_run_free(&r);
    ts_cli_run(&r, 10, "stats", "127.0.0.1:1", "--interval", "0", NULL);
    CHECK_CLI_RC(&r, 2);
    ts_cli_run_free(&r);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_stats_summarises_a_real_instance),
    ECT_CASE(test_watch_shows_rates_between_scrapes),
    ECT_CASE(test_stats_reads_percentiles_from_the_buckets),
    ECT_CASE(test_stats_shows_the_data_stream_and_grant_refusals),
    ECT_CASE(test_hostile_servers_get_a_clear_error_in_bounded_time),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
