/*
 * `ectier-tcp-link`: the bare TCP ceiling of a link whose two ends run in
 * separate processes, such as the two network namespaces of
 * scripts/bench-two-hosts.sh.  The same transfer as `ectier bench xport`'s
 * bare TCP ceiling (bench/p2p/bench_xport_ceilings.h): one request per
 * transfer on one connection reused for all of them, TCP_NODELAY, one
 * blocking send() of the whole range, received with recv(MSG_WAITALL) and
 * woken at the stream client's receive marks (ect__xport_stream_rcvlowat,
 * as the stream's client receives), alternating; over several connections
 * each moves one stripe of the bytes at once, on a thread of its own at
 * both ends, as a striped read does.
 *
 *   ectier-tcp-link serve HOST PORT BYTES [CONNS]
 *       accept CONNS (default 1) connections on HOST:PORT and serve each
 *       BYTES of data, in a process of its own, until it closes
 *   ectier-tcp-link measure HOST PORT BYTES [REPS [CONNS]]
 *       make CONNS connections (retrying for up to 5 s while the server
 *       starts), move the BYTES REPS times (default 16, even, at least 4)
 *       and print the faster way's median in GB/s, each way's first
 *       transfer left out as warm-up; with LINK_VERBOSE set, each way's on
 *       stderr too
 *
 * HOST is a numeric IPv4 address.  Exit status 0, 1 on a failed transfer or
 * socket error, 2 on bad arguments.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../p2p/bench_xport_ceilings.h"
#include "common/clock.h"
#include "p2p/xport_internal.h"

#define MAX_REPS       1000
#define CONNECT_TRIES  50 /* 100 ms apart */
#define MAX_LINK_BYTES ((size_t)1 << 30)

static int
usage(const char *why)
{
    fprintf(stderr,
            "ectier-tcp-link: %s\n"
            "usage: ectier-tcp-link serve HOST PORT BYTES [CONNS]\n"
            "       ectier-tcp-link measure HOST PORT BYTES [REPS [CONNS]]\n",
            why);
    return 2;
}

/* A whole decimal number in [min, max], or -1. */
static long long
parse_count(const char *s, long long min, long long max)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return -1;
    return v;
}

static int
compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0 .. n) (n > 0; sorts v). */
static double
median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int
serve(const struct sockaddr_in *a, uint8_t *data, size_t bytes, unsigned conns)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(lfd, (const struct sockaddr *)a, sizeof(*a)) != 0 || listen(lfd, (int)conns) != 0) {
        perror("ectier-tcp-link: listen");
        if (lfd >= 0)
            close(lfd);
        return 1;
    }
    memset(data, 0x5a, bytes);
    int rc = 0;
    unsigned started = 0;
    for (; started < conns; started++) {
        int fd = accept(lfd, NULL, NULL);
        pid_t pid = fd >= 0 ? fork() : -1;
        if (pid == 0) {
            close(lfd);
            ect_bench_tcp_serve(fd, data, bytes);
            _exit(0);
        }
        if (fd >= 0)
            close(fd);
        if (pid < 0) {
            perror("ectier-tcp-link: accept");
            rc = 1;
            break;
        }
    }
    close(lfd);
    for (unsigned i = 0; i < started; i++)
        wait(NULL);
    return rc;
}

static int
connect_retrying(const struct sockaddr_in *a)
{
    for (int i = 0; i < CONNECT_TRIES; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            return fd;
        }
        close(fd);
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static int
measure(const struct sockaddr_in *a, uint8_t *buf, size_t bytes, int reps, unsigned conns)
{
    struct ect_bench_tcp_ceiling link = {0};
    int rc = 1;
    for (; link.n < conns; link.n++)
        if ((link.fd[link.n] = connect_retrying(a)) < 0) {
            perror("ectier-tcp-link: connect");
            goto close_all;
        }
    static double t[2][MAX_REPS / 2];
    for (int i = 0; i < reps; i++) {
        int way = i % 2;
        link.as_client = way;
        double s = ect_bench_tcp_ceiling_once(&link, buf, 0, bytes);
        if (s < 0) {
            fprintf(stderr, "ectier-tcp-link: transfer %d of %zu bytes failed\n", i + 1, bytes);
            goto close_all;
        }
        if (i >= 2) /* each way's first is warm-up */
            t[way][(i - 2) / 2] = s;
    }
    size_t n = (size_t)(reps - 2) / 2;
    double waitall = median(t[0], n), lowat = median(t[1], n);
    if (getenv("LINK_VERBOSE") != NULL)
        fprintf(stderr,
                "ectier-tcp-link: recv(MSG_WAITALL) %.3f GB/s, woken as our client %.3f GB/s\n",
                (double)bytes / waitall / 1e9, (double)bytes / lowat / 1e9);
    printf("%.3f\n", (double)bytes / (waitall < lowat ? waitall : lowat) / 1e9);
    rc = 0;
close_all:
    ect_bench_tcp_ceiling_stop(&link);
    return rc;
}

int
main(int argc, char **argv)
{
    if (argc < 5)
        return usage("missing arguments");
    int is_serve = strcmp(argv[1], "serve") == 0;
    if (!is_serve && strcmp(argv[1], "measure") != 0)
        return usage("the first argument is serve or measure");
    if ((is_serve && argc > 6) || (!is_serve && argc > 7))
        return usage("too many arguments");
    struct sockaddr_in a = {.sin_family = AF_INET};
    long long port = parse_count(argv[3], 1, 65535);
    long long bytes = parse_count(argv[4], 1, (long long)MAX_LINK_BYTES);
    long long reps = !is_serve && argc >= 6 ? parse_count(argv[5], 4, MAX_REPS) : 16;
    const char *conns_arg = is_serve ? (argc == 6 ? argv[5] : NULL) : (argc == 7 ? argv[6] : NULL);
    long long conns = conns_arg != NULL ? parse_count(conns_arg, 1, ECT_BENCH_TCP_MAX_CONNS) : 1;
    if (inet_pton(AF_INET, argv[2], &a.sin_addr) != 1)
        return usage("HOST is not a numeric IPv4 address");
    if (port < 0)
        return usage("PORT is not 1..65535");
    if (bytes < 0)
        return usage("BYTES is not 1..1073741824");
    if (reps < 0 || reps % 2 != 0)
        return usage("REPS is not an even number in 4..1000");
    _Static_assert(ECT_BENCH_TCP_MAX_CONNS == 4, "the message below says 1..4");
    if (conns < 0)
        return usage("CONNS is not 1..4");
    a.sin_port = htons((uint16_t)port);
    /* On a page boundary at both ends, as a region's blocks are: a buffer
     * 16 bytes off one (where malloc puts a large one) halves the kernel's
     * copies on some CPUs (proto/stream.h, "Aligned responses"). */
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *buf = aligned_alloc(page, ((size_t)bytes + page - 1) / page * page);
    if (buf == NULL) {
        fprintf(stderr, "ectier-tcp-link: cannot allocate %lld bytes\n", bytes);
        return 1;
    }
    int rc = is_serve ? serve(&a, buf, (size_t)bytes, (unsigned)conns)
                      : measure(&a, buf, (size_t)bytes, (int)reps, (unsigned)conns);
    free(buf);
    return rc;
}
