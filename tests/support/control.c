/*
 * Raw ZeroMQ sockets, helper processes and polling for dead peers, for the
 * control plane's tests (see control.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <zmq.h>

#include "common/clock.h"
#include "support/control.h"

extern char **environ;

void *
ts_raw_socket(void *ctx, int type)
{
    void *s = zmq_socket(ctx, type);
    CHECK(s != NULL);
    int zero = 0;
    CHECK(zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof(zero)) == 0);
    return s;
}

void *
ts_raw_router(void *ctx, uint16_t *port_p)
{
    void *s = ts_raw_socket(ctx, ZMQ_ROUTER);
    CHECK(zmq_bind(s, "tcp://127.0.0.1:*") == 0);
    char ep[128];
    size_t len = sizeof(ep);
    CHECK(zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, ep, &len) == 0);
    *port_p = (uint16_t)atoi(strrchr(ep, ':') + 1);
    return s;
}

void *
ts_raw_dealer(void *ctx, uint16_t port)
{
    void *s = ts_raw_socket(ctx, ZMQ_DEALER);
    char ep[64];
    snprintf(ep, sizeof(ep), "tcp://127.0.0.1:%u", (unsigned)port);
    CHECK(zmq_connect(s, ep) == 0);
    return s;
}

void
ts_raw_send(void *sock, size_t n, const void *const *data, const size_t *len)
{
    for (size_t i = 0; i < n; i++)
        CHECK_MSG(zmq_send(sock, data[i], len[i], i + 1 < n ? ZMQ_SNDMORE : 0) >= 0,
                  "raw send of frame %zu: %s", i, zmq_strerror(zmq_errno()));
}

size_t
ts_raw_recv(void *sock, int timeout_ms, struct ts_raw_frame *out, size_t max)
{
    zmq_pollitem_t item = {sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, timeout_ms) <= 0)
        return 0;
    size_t n = 0;
    int more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        CHECK(zmq_msg_recv(&m, sock, 0) >= 0);
        if (n < max) {
            size_t len = zmq_msg_size(&m);
            out[n].len = len;
            size_t copy = len < sizeof(out[n].data) - 1 ? len : sizeof(out[n].data) - 1;
            memcpy(out[n].data, zmq_msg_data(&m), copy);
            out[n].data[copy] = '\0';
        }
        n++;
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
    return n;
}

pid_t
ts_helper_spawn(const char *const *args, uint16_t *port_p)
{
    int fds[2];
    CHECK(pipe2(fds, O_CLOEXEC) == 0);
    const char *argv[16];
    size_t argc = 0;
    argv[argc++] = "/proc/self/exe";
    argv[argc++] = "--ctl-helper";
    char parent[24];
    snprintf(parent, sizeof(parent), "%d", (int)getpid());
    argv[argc++] = parent;
    for (size_t i = 0; args[i] != NULL && argc < 15; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    CHECK_MSG(rc == 0, "posix_spawn: %s", strerror(rc));
    char line[64];
    size_t got = 0;
    uint64_t deadline = ect__now_ns() + 20ull * 1000000000ull;
    while (got < sizeof(line) - 1 && (got == 0 || line[got - 1] != '\n')) {
        struct pollfd p = {fds[0], POLLIN, 0};
        int left = (int)((deadline - ect__now_ns()) / 1000000);
        if (ect__now_ns() >= deadline || poll(&p, 1, left) <= 0)
            break;
        ssize_t n = read(fds[0], line + got, sizeof(line) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    line[got] = '\0';
    unsigned port;
    if (sscanf(line, "ready %u", &port) != 1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        CHECK_MSG(0, "helper %s did not get ready (said \"%s\")", args[0], line);
    }
    if (port_p != NULL)
        *port_p = (uint16_t)port;
    return pid;
}

void
ts_helper_kill(pid_t pid)
{
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
}

static int
helper_echo_server(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    ect_ctl_security_t sec = {argc > 2 ? argv[2] : NULL, argc > 3 ? argv[3] : NULL, NULL};
    ect_ctl_server_t *server;
    if (ect__ctl_server_open(argv[0], (uint16_t)atoi(argv[1]), &sec, &server) != ECT_OK) {
        fprintf(stderr, "echo-server: %s\n", ect_last_error());
        return 1;
    }
    printf("ready %u\n", (unsigned)ect__ctl_server_port(server));
    fflush(stdout);
    for (;;) {
        ect_ctl_peer_t peer;
        const void *p;
        size_t len;
        if (ect__ctl_server_recv(server, -1, &peer, &p, &len) != ECT_OK)
            continue;
        char reply[512];
        size_t n = len < sizeof(reply) - 5 ? len : sizeof(reply) - 5;
        memcpy(reply, "echo:", 5);
        memcpy(reply + 5, p, n);
        ect__ctl_server_send(server, &peer, reply, n + 5);
    }
}

static int
helper_sender(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    ect_ctl_client_t *client;
    if (ect__ctl_client_create(NULL, &client) != ECT_OK ||
        ect__ctl_client_send(client, argv[0], (uint16_t)atoi(argv[1]), "hello", 5) != ECT_OK)
        return 1;
    printf("ready 0\n");
    fflush(stdout);
    for (;;) { /* read what comes; ZeroMQ's I/O thread answers heartbeats */
        char host[ECT_CTL_HOST_MAX + 1];
        uint16_t port;
        const void *p;
        size_t len;
        ect__ctl_client_recv(client, -1, host, &port, &p, &len);
    }
}

int
ts_control_helper_main(int argc, char **argv)
{
    if (argc < 4 || strcmp(argv[1], "--ctl-helper") != 0)
        return -1;
    /* Die with the case; if it is already gone, do not start at all. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != (pid_t)atoi(argv[2]))
        return 1;
    if (strcmp(argv[3], "echo-server") == 0)
        return helper_echo_server(argc - 4, argv + 4);
    if (strcmp(argv[3], "sender") == 0)
        return helper_sender(argc - 4, argv + 4);
    return 2;
}

int
ts_server_wait_dead(ect_ctl_server_t *server, const ect_ctl_peer_t *peer, int linger_ms)
{
    int seen = 0;
    uint64_t deadline = ect__now_ns() + (uint64_t)TS_DEAD_WITHIN_S * 1000000000ull;
    uint64_t stop = 0;
    while (ect__now_ns() < (stop != 0 ? stop : deadline)) {
        ect_ctl_peer_t dead[16];
        size_t n = ect__ctl_server_take_dead_peers(server, dead, 16);
        for (size_t i = 0; i < n; i++)
            if (dead[i].len == peer->len && memcmp(dead[i].id, peer->id, peer->len) == 0)
                seen++;
        if (seen != 0 && stop == 0) {
            if (linger_ms <= 0)
                break;
            stop = ect__now_ns() + (uint64_t)linger_ms * 1000000u;
        }
        ts_sleep_ms(20);
    }
    return seen;
}

bool
ts_client_wait_dead(ect_ctl_client_t *client, const char *host, uint16_t port)
{
    uint64_t deadline = ect__now_ns() + (uint64_t)TS_DEAD_WITHIN_S * 1000000000ull;
    while (ect__now_ns() < deadline) {
        char hosts[8][ECT_CTL_HOST_MAX + 1];
        uint16_t ports[8];
        size_t n = ect__ctl_client_take_dead_peers(client, hosts, ports, 8);
        for (size_t i = 0; i < n; i++)
            if (ports[i] == port && strcmp(hosts[i], host) == 0)
                return true;
        ts_sleep_ms(20);
    }
    return false;
}

/* A message as a string in buf[cap], cut to fit. */
static void
copy_str(char *buf, size_t cap, const void *p, size_t len)
{
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
}

ect_status_t
ts_server_recv_str(ect_ctl_server_t *server, int timeout_ms, ect_ctl_peer_t *peer, char *buf,
                   size_t cap)
{
    const void *p;
    size_t len;
    ect_status_t st = ect__ctl_server_recv(server, timeout_ms, peer, &p, &len);
    if (st == ECT_OK)
        copy_str(buf, cap, p, len);
    return st;
}

ect_status_t
ts_client_recv_str(ect_ctl_client_t *client, int timeout_ms, char *host, uint16_t *port, char *buf,
                   size_t cap)
{
    const void *p;
    size_t len;
    ect_status_t st = ect__ctl_client_recv(client, timeout_ms, host, port, &p, &len);
    if (st == ECT_OK)
        copy_str(buf, cap, p, len);
    return st;
}

bool
ts_peer_eq(const ect_ctl_peer_t *a, const ect_ctl_peer_t *b)
{
    return a->len == b->len && memcmp(a->id, b->id, a->len) == 0;
}
