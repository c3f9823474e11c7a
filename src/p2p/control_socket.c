/*
 * ZeroMQ helpers shared by both halves of the control plane (see
 * control_socket.h).  No state but the monitor endpoint counter, which is
 * an atomic.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/error.h"
#include "p2p/control.h"
#include "p2p/control_socket.h"

#define QUEUE_HWM 10000 /* messages per connection and direction */

ect_status_t
ect__ctl_zmq_failure(ect_status_t status, const char *what)
{
    return ect__error(status, "control: %s: %s", what, zmq_strerror(zmq_errno()));
}

int
ect__ctl_set_int(void *sock, int option, int value)
{
    return zmq_setsockopt(sock, option, &value, sizeof(value));
}

/* Options both ends share: no linger (close never waits for a dead peer),
 * heartbeats, bounded queues and the libzmq frame cap. */
ect_status_t
ect__ctl_set_common_options(void *sock, bool ipv6)
{
    int64_t max_frame = ECT_CTL_HARD_MAX_FRAME;
    if (ect__ctl_set_int(sock, ZMQ_LINGER, 0) != 0 ||
        ect__ctl_set_int(sock, ZMQ_HEARTBEAT_IVL, ECT_CTL_HEARTBEAT_IVL_MS) != 0 ||
        ect__ctl_set_int(sock, ZMQ_HEARTBEAT_TIMEOUT, ECT_CTL_HEARTBEAT_TIMEOUT_MS) != 0 ||
        ect__ctl_set_int(sock, ZMQ_HEARTBEAT_TTL, ECT_CTL_HEARTBEAT_TTL_MS) != 0 ||
        ect__ctl_set_int(sock, ZMQ_SNDHWM, QUEUE_HWM) != 0 ||
        ect__ctl_set_int(sock, ZMQ_RCVHWM, QUEUE_HWM) != 0 ||
        zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max_frame, sizeof(max_frame)) != 0 ||
        ect__ctl_set_int(sock, ZMQ_IPV6, ipv6 ? 1 : 0) != 0)
        return ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot set socket options");
    return ECT_OK;
}

/* Attach a monitor for events to sock and connect a PAIR to it. */
ect_status_t
ect__ctl_monitor_open(void *ctx, void *sock, int events, void **pair_p)
{
    static unsigned seq;
    char endpoint[96];
    snprintf(endpoint, sizeof(endpoint), "inproc://ect-ctl-mon-%p-%u", sock,
             __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
    if (zmq_socket_monitor(sock, endpoint, events) != 0)
        return ect__ctl_zmq_failure(ECT_ERR_TRANSPORT, "cannot monitor a socket");
    int err;
    void *pair = zmq_socket(ctx, ZMQ_PAIR);
    if (pair == NULL) {
        err = zmq_errno();
        goto disable;
    }
    /* No receive limit: libzmq 4.3 sends monitor events with a blocking
     * send while holding the monitored socket's monitor mutex, so with a
     * full pipe its I/O thread stops (every connection of the socket with
     * it), and closing the socket, which takes that mutex to stop the
     * monitor, deadlocks.  A few thousand dropped connections between two
     * drains were enough.  With 0 the inproc pipe has no high-water mark;
     * both ends drain their monitor every poll round. */
    if (ect__ctl_set_int(pair, ZMQ_LINGER, 0) != 0 || ect__ctl_set_int(pair, ZMQ_RCVHWM, 0) != 0 ||
        zmq_connect(pair, endpoint) != 0) {
        err = zmq_errno();
        goto close_pair;
    }
    *pair_p = pair;
    return ECT_OK;
close_pair:
    zmq_close(pair);
disable:
    zmq_socket_monitor(sock, NULL, 0);
    return ect__error(ECT_ERR_TRANSPORT, "control: cannot connect a socket monitor: %s",
                      zmq_strerror(err));
}

/* The order matters (seed: close_with_monitor_disables_then_closes_both):
 * stop the monitor first, so libzmq no longer writes to its pipe, then close
 * our end, then the socket.  NULLs are skipped, so a half-built peer closes
 * too. */
void
ect__ctl_close_with_monitor(void *sock, void *pair)
{
    if (sock != NULL && pair != NULL)
        zmq_socket_monitor(sock, NULL, 0);
    if (pair != NULL)
        zmq_close(pair);
    if (sock != NULL)
        zmq_close(sock);
}

/* One event from a monitor PAIR without waiting: 1 got it, 0 none. */
int
ect__ctl_monitor_read(void *pair, uint16_t *event_p, uint32_t *value_p)
{
    for (;;) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, pair, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&m);
            return 0;
        }
        /* libzmq 4.3 event: [u16 event, u32 value][endpoint]. */
        bool ok = zmq_msg_size(&m) == 6;
        if (ok) {
            const uint8_t *p = zmq_msg_data(&m);
            memcpy(event_p, p, 2);
            memcpy(value_p, p + 2, 4);
        }
        /* The rest of a multipart message is already here: never blocks. */
        while (zmq_msg_more(&m) && zmq_msg_recv(&m, pair, 0) >= 0) {
        }
        zmq_msg_close(&m);
        if (ok)
            return 1;
    }
}

/* Read and discard what is left of a message whose last frame was m. */
void
ect__ctl_skip_rest(void *sock, zmq_msg_t *m)
{
    while (zmq_msg_more(m) && zmq_msg_recv(m, sock, 0) >= 0) {
    }
}

int
ect__ctl_ms_left(uint64_t deadline_ns, int timeout_ms)
{
    if (timeout_ms < 0)
        return -1;
    uint64_t now = ect__now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t left = (deadline_ns - now + 999999) / 1000000;
    return left > INT32_MAX ? INT32_MAX : (int)left;
}

uint64_t
ect__ctl_deadline(int timeout_ms)
{
    return timeout_ms > 0 ? ect__now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
}
