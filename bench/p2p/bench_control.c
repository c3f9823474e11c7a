/*
 * `ectier bench control`: the control plane's round trip (SPEC §12) against
 * a bare ZeroMQ DEALER/ROUTER round trip measured in the same run.
 *
 * Each side runs in two processes, the producer pinned to one CPU and the
 * consumer to another (when the machine has two): an echo server and a
 * client that sends a 218-byte XferReq (the size reference/ceilings.md §5
 * measured) and waits for it to come back.  "ectier" goes through
 * ect__ctl_server_* / ect__ctl_client_* with heartbeats, monitors and
 * framing checks; "bare" is the plainest DEALER/ROUTER echo.  The two
 * alternate in rounds so drift in the machine hits both alike.  Figures:
 * median and p99 round trip in microseconds; the ratio ours/bare is the
 * overhead (target <= 1.30).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zmq.h>

#include "../bench.h"
#include "common/clock.h"
#include "p2p/control.h"
#include "proto/wire.h"

#define ROUNDS       3
#define WARMUP       500
#define TIMED        4000
#define TARGET_RATIO 1.30

static const char *const lo = "127.0.0.1";

enum side { SIDE_ECTIER, SIDE_BARE };

static int cpu_server = -1, cpu_client = -1;

static void
pin_to(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

/* ---- the servers (child processes) ------------------------------------------------- */

static void
serve_ectier(int port_fd)
{
    ect_ctl_server_t *server;
    unsigned port = 0;
    if (ect__ctl_server_open(lo, 0, NULL, &server) == ECT_OK)
        port = ect__ctl_server_port(server);
    if (write(port_fd, &port, sizeof(port)) != (ssize_t)sizeof(port) || port == 0)
        _exit(1);
    for (;;) {
        ect_ctl_peer_t peer;
        const void *p;
        size_t len;
        if (ect__ctl_server_recv(server, -1, &peer, &p, &len) == ECT_OK)
            ect__ctl_server_send(server, &peer, p, len);
    }
}

static void
serve_bare(int port_fd)
{
    void *ctx = zmq_ctx_new();
    void *router = zmq_socket(ctx, ZMQ_ROUTER);
    unsigned port = 0;
    char ep[128];
    size_t len = sizeof(ep);
    if (router != NULL && zmq_bind(router, "tcp://127.0.0.1:*") == 0 &&
        zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &len) == 0)
        port = (unsigned)atoi(strrchr(ep, ':') + 1);
    if (write(port_fd, &port, sizeof(port)) != (ssize_t)sizeof(port) || port == 0)
        _exit(1);
    zmq_msg_t frames[3];
    for (;;) {
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t *m = &frames[n < 3 ? n : 2];
            zmq_msg_init(m);
            zmq_msg_recv(m, router, 0);
            more = zmq_msg_more(m);
            n++;
        }
        for (int i = 0; i < 3; i++)
            zmq_msg_send(&frames[i], router, i < 2 ? ZMQ_SNDMORE : 0);
    }
}

/* Fork the server of one side; returns its pid and port. */
static pid_t
start_server(enum side side, unsigned *port_p)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(fds[0]);
        pin_to(cpu_server);
        if (side == SIDE_ECTIER)
            serve_ectier(fds[1]);
        else
            serve_bare(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    unsigned port = 0;
    ssize_t n = pid > 0 ? read(fds[0], &port, sizeof(port)) : -1;
    close(fds[0]);
    if (pid > 0 && (n != (ssize_t)sizeof(port) || port == 0)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    *port_p = port;
    return pid;
}

/* ---- the clients ---------------------------------------------------------------------- */

/* One timed run of a side: TIMED round trips in us into samples. */
static int
run_ectier(unsigned port, const void *msg, size_t len, double *samples)
{
    ect_ctl_client_t *client;
    if (ect__ctl_client_create(NULL, &client) != ECT_OK)
        return -1;
    int rc = 0;
    for (int i = 0; i < WARMUP + TIMED && rc == 0; i++) {
        uint64_t t0 = ect__now_ns();
        char host[ECT_CTL_HOST_MAX + 1];
        uint16_t from;
        const void *p;
        size_t n;
        if (ect__ctl_client_send(client, lo, (uint16_t)port, msg, len) != ECT_OK ||
            ect__ctl_client_recv(client, 5000, host, &from, &p, &n) != ECT_OK || n != len)
            rc = -1;
        if (i >= WARMUP)
            samples[i - WARMUP] = (double)(ect__now_ns() - t0) / 1000.0;
    }
    ect__ctl_client_destroy(client);
    return rc;
}

static int
run_bare(unsigned port, const void *msg, size_t len, double *samples)
{
    void *ctx = zmq_ctx_new();
    void *dealer = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0, rc = 0;
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", port);
    zmq_setsockopt(dealer, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(dealer, ep) != 0)
        rc = -1;
    zmq_msg_t reply;
    zmq_msg_init(&reply);
    zmq_pollitem_t item = {dealer, 0, ZMQ_POLLIN, 0};
    for (int i = 0; i < WARMUP + TIMED && rc == 0; i++) {
        uint64_t t0 = ect__now_ns();
        if (zmq_send(dealer, "", 0, ZMQ_SNDMORE) < 0 || zmq_send(dealer, msg, len, 0) < 0 ||
            zmq_poll(&item, 1, 5000) != 1 || zmq_msg_recv(&reply, dealer, 0) < 0 ||
            zmq_msg_recv(&reply, dealer, 0) != (int)len)
            rc = -1;
        if (i >= WARMUP)
            samples[i - WARMUP] = (double)(ect__now_ns() - t0) / 1000.0;
    }
    zmq_msg_close(&reply);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
    return rc;
}

static int
compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double
percentile(const double *sorted, size_t n, double q)
{
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

/* Two CPUs of our affinity mask for server and client, if there are two. */
static void
choose_cpus(cpu_set_t *saved)
{
    CPU_ZERO(saved);
    if (sched_getaffinity(0, sizeof(*saved), saved) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, saved))
            continue;
        if (cpu_server < 0)
            cpu_server = c;
        else if (cpu_client < 0)
            cpu_client = c;
    }
    if (cpu_client < 0)
        cpu_server = -1; /* one CPU: pinning both to it would only add contention */
}

/* The 218-byte request of ceilings.md §5: two 64-hex hashes and a UUID. */
static int
make_request(ect__wire_buf_t *buf)
{
    ect_xfer_req_t req = {
        .mm_hash = "3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a3f2a",
        .compatibility_hash = "e5aa20f73125bdda9864ed0f48a40ab5c1c964812da6acc351d581f1c8b00dd1",
        .session_id = "0d5e8a4c-1b7f-4e29-9c3a-6f2d8b1e7a90",
    };
    ect__wire_buf_init(buf);
    return ect__wire_encode_req(&req, buf) == ECT_OK ? 0 : -1;
}

int
ect_bench_control(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    ect__wire_buf_t msg;
    if (make_request(&msg) != 0) {
        fprintf(stderr, "bench control: cannot encode the request\n");
        return 1;
    }
    cpu_set_t saved;
    choose_cpus(&saved);
    size_t n = (size_t)ROUNDS * TIMED;
    double *samples[2] = {malloc(n * sizeof(double)), malloc(n * sizeof(double))};
    int rc = samples[0] != NULL && samples[1] != NULL ? 0 : 1;
    for (int round = 0; round < ROUNDS && rc == 0; round++) {
        for (int s = 0; s < 2 && rc == 0; s++) {
            enum side side = s == 0 ? SIDE_ECTIER : SIDE_BARE;
            unsigned port;
            pid_t pid = start_server(side, &port);
            if (pid < 0) {
                fprintf(stderr, "bench control: cannot start the %s server\n",
                        side == SIDE_ECTIER ? "ectier" : "bare");
                rc = 1;
                break;
            }
            pin_to(cpu_client);
            double *out = samples[s] + (size_t)round * TIMED;
            int r = side == SIDE_ECTIER ? run_ectier(port, msg.data, msg.len, out)
                                        : run_bare(port, msg.data, msg.len, out);
            if (cpu_client >= 0)
                sched_setaffinity(0, sizeof(saved), &saved);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            if (r != 0) {
                fprintf(stderr, "bench control: a %s round trip failed\n",
                        side == SIDE_ECTIER ? "ectier" : "bare");
                rc = 1;
            }
        }
    }
    if (rc == 0) {
        qsort(samples[0], n, sizeof(double), compare_double);
        qsort(samples[1], n, sizeof(double), compare_double);
        double med[2] = {percentile(samples[0], n, 0.5), percentile(samples[1], n, 0.5)};
        double p99[2] = {percentile(samples[0], n, 0.99), percentile(samples[1], n, 0.99)};
        printf("  %zu-byte XferReq echoed, %d x %d timed round trips per side (after %d "
               "warm-up), producer on cpu %d, consumer on cpu %d\n",
               msg.len, ROUNDS, TIMED, WARMUP, cpu_server, cpu_client);
        printf("  ceiling: bare ZeroMQ DEALER/ROUTER echo in the same run; ratio = ours / bare, "
               "lower is better\n");
        ect_bench_figure(&(ect_bench_fig_t){.name = "round trip median, ectier vs bare",
                                            .value = med[0],
                                            .unit = "us",
                                            .ceiling = med[1],
                                            .ceiling_is = "bare ZeroMQ echo, median",
                                            .target = TARGET_RATIO,
                                            .lower_is_better = 1});
        ect_bench_figure(&(ect_bench_fig_t){.name = "round trip p99, ectier vs bare",
                                            .value = p99[0],
                                            .unit = "us",
                                            .ceiling = p99[1],
                                            .ceiling_is = "bare ZeroMQ echo, p99",
                                            .target = TARGET_RATIO,
                                            .lower_is_better = 1});
    }
    free(samples[0]);
    free(samples[1]);
    ect__wire_buf_cleanup(&msg);
    return rc;
}
