/*
 * The ceilings of `ectier bench xport` that run outside this process: a bare
 * loopback TCP transfer, and UCX's own ucx_perftest (bench_xport.c says how
 * each figure uses them).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_xport_ceilings.h"
#include "cli_io.h"
#include "common/clock.h"
#include "p2p/xport_internal.h"

/* ---- bare TCP ---------------------------------------------------------------------------- */

void
ect_bench_tcp_serve(int fd, const uint8_t *data, size_t size)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    uint64_t req[2];
    while (ect_cli_read_full(fd, req, sizeof(req)) == 0 && req[0] <= size &&
           req[1] <= size - req[0]) {
        if (ect_cli_write_full(fd, data + req[0], (size_t)req[1]) != 0)
            return;
    }
}

static void
server_main(int lfd, const uint8_t *data, size_t size)
{
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        _exit(1);
    ect_bench_tcp_serve(fd, data, size);
    _exit(0);
}

int
ect_bench_tcp_ceiling_start(struct ect_bench_tcp_ceiling *t, const uint8_t *data, size_t size,
                            unsigned n_conns)
{
    t->n = 0;
    if (n_conns == 0 || n_conns > ECT_BENCH_TCP_MAX_CONNS) {
        fprintf(stderr, "bench xport: tcp ceiling: %u connections (1 .. %d)\n", n_conns,
                ECT_BENCH_TCP_MAX_CONNS);
        return 1;
    }
    for (unsigned i = 0; i < n_conns; i++) {
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t alen = sizeof(a);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 1) != 0 ||
            getsockname(lfd, (struct sockaddr *)&a, &alen) != 0) {
            perror("bench xport: tcp ceiling: listen");
            if (lfd >= 0)
                close(lfd);
            return 1;
        }
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        if (pid == 0)
            server_main(lfd, data, size);
        close(lfd);
        if (pid < 0) {
            perror("bench xport: tcp ceiling: fork");
            return 1;
        }
        t->pid[i] = pid;
        t->fd[i] = -1;
        t->n = i + 1; /* stop reaps it from here on */
        if ((t->fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
            connect(t->fd[i], (struct sockaddr *)&a, alen) != 0) {
            perror("bench xport: tcp ceiling: connect");
            return 1;
        }
        int one = 1;
        setsockopt(t->fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return 0;
}

/* One stripe: its request, then its bytes. */
struct stripe {
    int fd;
    uint8_t *base;
    size_t off, len;
    int as_client;
    int failed;
};

/* The receiving threads of stripes 1..n-1 and what they are told: each
 * waits for `round` to pass the last one it ran, receives its stripe of
 * that round, and counts itself done. */
struct ect_bench_tcp_stripes {
    pthread_mutex_t lock;
    pthread_cond_t go, done;
    unsigned round, n_done, n_threads;
    int quit;
    struct stripe job[ECT_BENCH_TCP_MAX_CONNS];
    struct stripes_arg {
        struct ect_bench_tcp_stripes *all;
        unsigned index;
    } arg[ECT_BENCH_TCP_MAX_CONNS];
    pthread_t th[ECT_BENCH_TCP_MAX_CONNS];
};

static void stripe_run(struct stripe *s);

static void *
stripe_thread(void *arg)
{
    struct stripes_arg *a = arg;
    struct ect_bench_tcp_stripes *all = a->all;
    unsigned seen = 0;
    pthread_mutex_lock(&all->lock);
    for (;;) {
        while (!all->quit && all->round == seen)
            pthread_cond_wait(&all->go, &all->lock);
        if (all->quit)
            break;
        seen = all->round;
        pthread_mutex_unlock(&all->lock);
        stripe_run(&all->job[a->index]);
        pthread_mutex_lock(&all->lock);
        all->n_done++;
        pthread_cond_signal(&all->done);
    }
    pthread_mutex_unlock(&all->lock);
    return NULL;
}

/* Stop and join the receiving threads (none: nothing to do). */
static void
stripes_stop(struct ect_bench_tcp_ceiling *t)
{
    struct ect_bench_tcp_stripes *all = t->stripes;
    if (all == NULL)
        return;
    pthread_mutex_lock(&all->lock);
    all->quit = 1;
    pthread_cond_broadcast(&all->go);
    pthread_mutex_unlock(&all->lock);
    for (unsigned i = 1; i <= all->n_threads; i++)
        pthread_join(all->th[i], NULL);
    pthread_mutex_destroy(&all->lock);
    pthread_cond_destroy(&all->go);
    pthread_cond_destroy(&all->done);
    free(all);
    t->stripes = NULL;
}

/* Start the receiving threads of stripes 1..n-1: all of them, or none
 * (-1). */
static int
stripes_start(struct ect_bench_tcp_ceiling *t)
{
    struct ect_bench_tcp_stripes *all = calloc(1, sizeof(*all));
    if (all == NULL)
        return -1;
    pthread_mutex_init(&all->lock, NULL);
    pthread_cond_init(&all->go, NULL);
    pthread_cond_init(&all->done, NULL);
    t->stripes = all;
    for (unsigned i = 1; i < t->n; i++) {
        all->arg[i] = (struct stripes_arg){all, i};
        if (pthread_create(&all->th[i], NULL, stripe_thread, &all->arg[i]) != 0) {
            stripes_stop(t);
            return -1;
        }
        all->n_threads = i;
    }
    return 0;
}

void
ect_bench_tcp_ceiling_stop(struct ect_bench_tcp_ceiling *t)
{
    stripes_stop(t);
    for (unsigned i = 0; i < t->n; i++) {
        if (t->fd[i] >= 0)
            close(t->fd[i]);
        if (t->pid[i] > 0) {
            kill(t->pid[i], SIGKILL);
            waitpid(t->pid[i], NULL, 0);
        }
    }
    t->n = 0;
}

/* Receive len bytes at p the way the stream's client does: woken by poll()
 * once its receive mark for what is left is queued.  0 or -1. */
static int
recv_lowat(int fd, uint8_t *p, size_t len)
{
    size_t got = 0;
    while (got < len) {
        int lowat = ect__xport_stream_rcvlowat(len - got);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)) != 0 ||
            (poll(&pfd, 1, -1) < 0 && errno != EINTR))
            return -1;
        for (;;) {
            ssize_t n = recv(fd, p + got, len - got, MSG_DONTWAIT);
            if (n > 0) {
                got += (size_t)n;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                break;
            return -1;
        }
    }
    return 0;
}

int
ect_bench_tcp_fetch(int fd, uint8_t *base, size_t off, size_t len, int as_client)
{
    uint64_t req[2] = {off, len};
    /* A blocking recv(MSG_WAITALL) must find the mark at 1: with a higher
     * one it can sleep for good (seen on Linux 6.18). */
    int one = 1;
    if (!as_client && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one)) != 0)
        return -1;
    if (ect_cli_write_full(fd, req, sizeof(req)) != 0)
        return -1;
    if (as_client)
        return recv_lowat(fd, base + off, len);
    return len == 0 || recv(fd, base + off, len, MSG_WAITALL) == (ssize_t)len ? 0 : -1;
}

static void
stripe_run(struct stripe *s)
{
    s->failed = ect_bench_tcp_fetch(s->fd, s->base, s->off, s->len, s->as_client) != 0;
}

double
ect_bench_tcp_ceiling_once(struct ect_bench_tcp_ceiling *t, uint8_t *base, size_t off, size_t len)
{
    unsigned n = t->n;
    if (n == 0 || (n > 1 && t->stripes == NULL && stripes_start(t) != 0)) {
        fprintf(stderr, "bench xport: tcp ceiling: no connections, or no receiving threads\n");
        return -1;
    }
    struct stripe st[ECT_BENCH_TCP_MAX_CONNS];
    size_t part = (len / n + 4095) & ~(size_t)4095, at = 0;
    for (unsigned i = 0; i < n; i++) {
        size_t l = i + 1 < n ? (part < len - at ? part : len - at) : len - at;
        st[i] = (struct stripe){
            .fd = t->fd[i], .base = base, .off = off + at, .len = l, .as_client = t->as_client};
        at += l;
    }
    struct ect_bench_tcp_stripes *all = t->stripes;
    uint64_t t0 = ect__now_ns();
    if (n > 1) {
        pthread_mutex_lock(&all->lock);
        memcpy(all->job, st, sizeof(st));
        all->n_done = 0;
        all->round++;
        pthread_cond_broadcast(&all->go);
        pthread_mutex_unlock(&all->lock);
    }
    stripe_run(&st[0]);
    int failed = st[0].failed;
    if (n > 1) {
        pthread_mutex_lock(&all->lock);
        while (all->n_done < n - 1)
            pthread_cond_wait(&all->done, &all->lock);
        for (unsigned i = 1; i < n; i++)
            failed |= all->job[i].failed;
        pthread_mutex_unlock(&all->lock);
    }
    double s = (double)(ect__now_ns() - t0) / 1e9;
    if (failed) {
        fprintf(stderr, "bench xport: tcp ceiling: the transfer failed\n");
        return -1;
    }
    return s;
}

/* ---- ucx_perftest ---------------------------------------------------------------------- */

static char perftest_path[512];

int
ect_bench_perftest_find(void)
{
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof(dirs), "%s:/usr/bin:/usr/local/bin", path != NULL ? path : "");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d != NULL;
         d = strtok_r(NULL, ":", &save)) {
        snprintf(perftest_path, sizeof(perftest_path), "%s/ucx_perftest", d);
        if (access(perftest_path, X_OK) == 0)
            return 1;
    }
    perftest_path[0] = '\0';
    return 0;
}

static int
free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static pid_t
spawn(char *const argv[], int out_fd)
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(out_fd >= 0 ? out_fd : null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

double
ect_bench_perftest(const char *test, size_t bytes, int error_handling, unsigned outstanding,
                   size_t messages)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        int port = free_port();
        if (port < 0)
            return -1;
        char port_s[16], size_s[32], iters_s[24], warm_s[24];
        snprintf(port_s, sizeof(port_s), "%d", port);
        snprintf(size_s, sizeof(size_s), "%zu", bytes);
        size_t iters = messages;
        if (iters == 0) {
            iters = ((size_t)1 << 30) / bytes;
            iters = iters < 16 ? 16 : iters > 400 ? 400 : iters;
        }
        snprintf(iters_s, sizeof(iters_s), "%zu", iters);
        snprintf(warm_s, sizeof(warm_s), "%zu", iters / 5 + 2);
        char outstanding_s[16];
        snprintf(outstanding_s, sizeof(outstanding_s), "%u", outstanding);
        /* ectier 0.1's UCX contexts used 64 KiB tcp send segments; the
         * reference gets the same unless the user set one. */
        int set_seg = getenv("UCX_TCP_TX_SEG_SIZE") == NULL;
        if (set_seg)
            setenv("UCX_TCP_TX_SEG_SIZE", "64K", 1);
        char *server_argv[] = {perftest_path, "-p", port_s, NULL};
        pid_t server = spawn(server_argv, -1);
        struct timespec ts = {0, 300 * 1000 * 1000};
        nanosleep(&ts, NULL);
        int out[2];
        if (server < 0 || pipe(out) != 0) {
            if (set_seg)
                unsetenv("UCX_TCP_TX_SEG_SIZE");
            return -1;
        }
        char *client_argv[] = {perftest_path, "127.0.0.1",   "-p", port_s,
                               "-t",          (char *)test,  "-s", size_s,
                               "-n",          iters_s,       "-w", warm_s,
                               "-O",          outstanding_s, "-v", error_handling ? "-e" : NULL,
                               NULL};
        pid_t client = spawn(client_argv, out[1]);
        if (set_seg)
            unsetenv("UCX_TCP_TX_SEG_SIZE");
        close(out[1]);
        char buf[8192];
        size_t len = 0;
        ssize_t n;
        while (len + 1 < sizeof(buf) && (n = read(out[0], buf + len, sizeof(buf) - 1 - len)) > 0)
            len += (size_t)n;
        buf[len] = '\0';
        close(out[0]);
        int st = 1;
        waitpid(client, &st, 0);
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
        /* "iterations,...,avg_bw,overall_bw,..." then the figures. */
        char *line = strstr(buf, "iterations,");
        line = line != NULL ? strchr(line, '\n') : NULL;
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && line != NULL) {
            double v[8];
            if (sscanf(line + 1, " %lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &v[0], &v[1], &v[2], &v[3],
                       &v[4], &v[5], &v[6], &v[7]) == 8)
                return v[5] * 1048576.0 / 1e9;
        }
    }
    return -1;
}

int
ect_bench_perftest_available(void)
{
    return perftest_path[0] != '\0';
}
