/*
 * ZeroMQ helpers shared by the control plane's producer (control.c) and
 * consumer (control_client.c) halves: socket options both ends use, socket
 * monitors, and the bits of framing and timing they have in common.
 * Internal to src/p2p.  No state, no locking.
 */
#ifndef ECT_P2P_CONTROL_SOCKET_H
#define ECT_P2P_CONTROL_SOCKET_H

#include <stdbool.h>
#include <stdint.h>

#include <zmq.h>

#include <ectier/status.h>

#define ECT_CTL_HEARTBEAT_IVL_MS     2000
#define ECT_CTL_HEARTBEAT_TIMEOUT_MS 4000
#define ECT_CTL_HEARTBEAT_TTL_MS     8000

/* Record "control: <what>: <zmq_strerror(zmq_errno())>" and return status. */
ect_status_t ect__ctl_zmq_failure(ect_status_t status, const char *what);

/* zmq_setsockopt for an int option; 0 or -1 as ZeroMQ. */
int ect__ctl_set_int(void *sock, int option, int value);

/* Options both ends share: linger 0 (closing never waits on a dead peer),
 * heartbeats (2 s / 4 s / 8 s TTL), bounded queues, ZMQ_MAXMSGSIZE =
 * ECT_CTL_HARD_MAX_FRAME, and ZMQ_IPV6 as asked.  ECT_ERR_TRANSPORT. */
ect_status_t ect__ctl_set_common_options(void *sock, bool ipv6);

/* Monitor events (ZMQ_EVENT_* mask) of sock (borrowed) through a PAIR
 * made in ctx and connected to a unique inproc endpoint
 * (inproc://ect-ctl-mon-<ptr>-<n>); *pair_p gets the PAIR.
 * ECT_ERR_TRANSPORT; nothing is left attached on failure. */
ect_status_t ect__ctl_monitor_open(void *ctx, void *sock, int events, void **pair_p);

/* Close a monitored socket: disable the monitor, close the PAIR, close the
 * socket, in that order.  Either may be NULL (skipped). */
void ect__ctl_close_with_monitor(void *sock, void *pair);

/* One monitor event without waiting: 1 (event and value written) or 0
 * (none queued). */
int ect__ctl_monitor_read(void *pair, uint16_t *event_p, uint32_t *value_p);

/* Read and discard the rest of a message whose last received frame is m. */
void ect__ctl_skip_rest(void *sock, zmq_msg_t *m);

/* Milliseconds until deadline_ns, rounded up; -1 when timeout_ms is -1
 * (wait forever); 0 once it has passed. */
int ect__ctl_ms_left(uint64_t deadline_ns, int timeout_ms);

/* Deadline for a timeout in ms from now (0 for timeouts <= 0). */
uint64_t ect__ctl_deadline(int timeout_ms);

#endif /* ECT_P2P_CONTROL_SOCKET_H */
