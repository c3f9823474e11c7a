/*
 * The P2P control plane (SPEC §8.3): ZeroMQ sockets that carry opaque
 * control messages between a producer and its consumers.  This layer knows
 * frames, peers, liveness and security; it knows nothing of the messages'
 * meaning (src/proto decodes them, src/p2p/producer.c and consumer.c act).
 *
 * Producer: one ROUTER bound at tcp://HOST:PORT (PORT 0 picks a free port).
 * It receives [identity, "", payload] and answers to the same identity;
 * frames that do not have that shape are dropped and counted, never
 * answered.  It notices dead consumers (ZeroMQ heartbeats on the ROUTER plus
 * a socket monitor: each message's source fd maps the monitor's
 * disconnect events back to identities) so their grants can be released at
 * once.
 *
 * Consumer: a pool of DEALERs, one per producer (host, port), created on
 * first use, with heartbeats (2 s interval, 4 s timeout, 8 s TTL) and a
 * socket monitor that reports a disconnected producer.  Sends ["", payload].
 *
 * Security (SPEC §9.6), optional: ZeroMQ CURVE.  The producer loads its key
 * pair from a file and (optionally) an allow-list of consumer public keys,
 * enforced through a ZAP handler; a consumer loads its own key pair and the
 * producer's public key.  Key files hold Z85 text: see ect__ctl_keyfile_*.
 *
 * Threading: an ect_ctl_server_t or ect_ctl_client_t is used by one thread
 * at a time (ZeroMQ sockets are not thread-safe).  Each owns its ZeroMQ
 * context (and, for a producer with an allow-list, the ZAP thread).
 *
 * Connections that never speak: the producer's listener defers accepting a
 * connection until its first bytes arrive (TCP_DEFER_ACCEPT; the kernel
 * holds a silent one in the SYN queue for a minute, using no descriptor,
 * then accepts it after all), and drops an accepted connection that has not
 * finished the ZMTP handshake within ECT_CTL_HANDSHAKE_MS.  Not covered:
 * peers that finish the handshake and then idle (ZeroMQ heartbeats keep a
 * live peer connected, and libzmq 4.3 cannot cap a ROUTER's connections);
 * peers that send a byte and stall, again and again; silent connections at
 * the end of their deferral; and a SYN queue overflow into SYN cookies (more
 * than 1024, or net.core.somaxconn, pending connections), which skips the
 * deferral.  Each of those holds a descriptor for up to the handshake
 * interval (or for good), and at the process's RLIMIT_NOFILE libzmq 4.3
 * retries accept() in a busy loop until one is free.
 *
 * Sizes: a frame larger than ECT_CTL_MAX_MESSAGE but within
 * ECT_CTL_HARD_MAX_FRAME is read, dropped and counted; a frame beyond
 * ECT_CTL_HARD_MAX_FRAME makes libzmq cut that connection before we see it
 * (ZMQ_MAXMSGSIZE), which shows up as a disconnect, not as a drop.
 */
#ifndef ECT_P2P_CONTROL_H
#define ECT_P2P_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/metrics.h>
#include <ectier/status.h>

/* Largest control message accepted (bigger ones are dropped and counted). */
#define ECT_CTL_MAX_MESSAGE (1u << 20)
/* Largest frame libzmq buffers at all (ZMQ_MAXMSGSIZE); bigger frames cost
 * the sender its connection. */
#define ECT_CTL_HARD_MAX_FRAME (2u * ECT_CTL_MAX_MESSAGE)
#define ECT_CTL_HOST_MAX       255
/* How long a consumer's new DEALER may take to complete its first
 * handshake before the producer is reported dead and what was queued for it
 * is discarded. */
#define ECT_CTL_CONNECT_WAIT_MS 2000
/* How long the producer gives an accepted connection to complete the ZMTP
 * handshake (greeting and, with CURVE, the key exchange) before dropping it
 * (ZMQ_HANDSHAKE_IVL; libzmq's default is 30 s).  As long as a consumer
 * waits for its own first handshake. */
#define ECT_CTL_HANDSHAKE_MS ECT_CTL_CONNECT_WAIT_MS

typedef struct ect_ctl_security {
    /* Producer: file with its CURVE key pair; NULL/"" = no CURVE. */
    const char *server_key_file;
    /* Producer: file of allowed consumer public keys (one Z85 key per
     * line, '#' comments); NULL/"" = any consumer with a valid handshake. */
    const char *allowed_clients_file;
    /* Consumer: file with its key pair and the producer's public key;
     * NULL/"" = no CURVE. */
    const char *client_key_file;
} ect_ctl_security_t;

/* A ROUTER identity (ZeroMQ makes them at most 255 bytes). */
typedef struct ect_ctl_peer {
    uint8_t id[255];
    uint8_t len;
} ect_ctl_peer_t;

typedef struct ect_ctl_counters {
    uint64_t received; /* well-framed messages delivered */
    uint64_t dropped;  /* malformed framing or oversized; never answered */
    uint64_t sent;
    uint64_t send_failed;
    uint64_t disconnects;      /* peers seen going away */
    uint64_t handshake_failed; /* connections refused in the handshake (CURVE) */
    uint64_t from_dead;        /* messages a consumer queued before it died, dropped */
} ect_ctl_counters_t;

/* ---- producer side ------------------------------------------------------ */

typedef struct ect_ctl_server ect_ctl_server_t;

/* Bind a ROUTER at tcp://host:port (port 0: a free port).  host is an IP
 * address or a resolvable name ("localhost" binds 127.0.0.1).  security may
 * be NULL.  Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_TRANSPORT (bind
 * failed: the message names the endpoint and the ZeroMQ error),
 * ECT_ERR_CONFIG (unreadable or malformed key file), ECT_ERR_NO_MEMORY. */
ect_status_t ect__ctl_server_open(const char *host, uint16_t port,
                                  const ect_ctl_security_t *security, ect_ctl_server_t **server_p);

/* The bound port (the real one when 0 was asked for). */
uint16_t ect__ctl_server_port(const ect_ctl_server_t *server);

/* Wait up to timeout_ms (0: don't wait, -1: forever) for one well-framed
 * message.  On ECT_OK *peer_p names the sender and *payload_p / *len_p the
 * payload (valid until the next recv or close).  ECT_ERR_TIMEOUT: nothing
 * arrived.  Malformed messages are dropped and counted inside. */
ect_status_t ect__ctl_server_recv(ect_ctl_server_t *server, int timeout_ms, ect_ctl_peer_t *peer_p,
                                  const void **payload_p, size_t *len_p);

/* Send payload to peer as [identity, "", payload] without blocking.
 * ECT_ERR_TRANSPORT if the peer is gone or its queue is full (counted);
 * ECT_ERR_OVERFLOW if len exceeds ECT_CTL_MAX_MESSAGE; ECT_ERR_INVALID_ARG. */
ect_status_t ect__ctl_server_send(ect_ctl_server_t *server, const ect_ctl_peer_t *peer,
                                  const void *payload, size_t len);

/* Peers whose connection went away since the last call (heartbeat timeout,
 * closed socket, killed process): up to cap written to peers; returns how
 * many.  Call it regularly (each poll round). */
size_t ect__ctl_server_take_dead_peers(ect_ctl_server_t *server, ect_ctl_peer_t *peers, size_t cap);

/* A snapshot of the counters.  May be called from any thread while another
 * uses the server (each counter is read atomically; the set is not one
 * instant). */
void ect__ctl_server_counters(const ect_ctl_server_t *server, ect_ctl_counters_t *counters_p);

/* Add the server's counters that ect_metrics_t exports to m
 * (control_framing_dropped).  Any thread, as ect__ctl_server_counters. */
void ect__ctl_server_add_metrics(const ect_ctl_server_t *server, ect_metrics_t *m);

/* Close the sockets and the context (linger 0).  NULL is a no-op. */
void ect__ctl_server_close(ect_ctl_server_t *server);

/* ---- consumer side ------------------------------------------------------ */

typedef struct ect_ctl_client ect_ctl_client_t;

/* An empty DEALER pool.  security may be NULL. */
ect_status_t ect__ctl_client_create(const ect_ctl_security_t *security,
                                    ect_ctl_client_t **client_p);

/* Send payload to the producer at (host, port) as ["", payload], creating
 * and connecting its DEALER on first use.  Never blocks.  While the
 * DEALER's first connection is being made, ZeroMQ queues the message and
 * sends it once connected; if no handshake completes within
 * ECT_CTL_CONNECT_WAIT_MS (refused, CURVE refused, no answer), what was
 * queued is discarded, counted in send_failed, and the producer is
 * reported by take_dead_peers.  Once a producer is known unreachable,
 * sends fail at once with ECT_ERR_TRANSPORT (counted) until it is back;
 * so they do when its queue is full.  Also ECT_ERR_INVALID_ARG (host
 * empty, longer than ECT_CTL_HOST_MAX or not [A-Za-z0-9.:_-], port 0),
 * ECT_ERR_OVERFLOW (len over ECT_CTL_MAX_MESSAGE), ECT_ERR_NO_MEMORY. */
ect_status_t ect__ctl_client_send(ect_ctl_client_t *client, const char *host, uint16_t port,
                                  const void *payload, size_t len);

/* Wait up to timeout_ms for one reply from any producer.  On ECT_OK,
 * host_out (ECT_CTL_HOST_MAX + 1 bytes) and *port_p name the producer and
 * *payload_p / *len_p the payload (valid until the next recv, remove or
 * destroy).  ECT_ERR_TIMEOUT when none.  Replies without the empty
 * delimiter frame are dropped and counted. */
ect_status_t ect__ctl_client_recv(ect_ctl_client_t *client, int timeout_ms, char *host_out,
                                  uint16_t *port_p, const void **payload_p, size_t *len_p);

/* Producers whose DEALER saw a disconnect since the last call: up to cap
 * (host, port) pairs written; returns how many.  The pool entry stays (its
 * DEALER renewed, reconnecting by itself) until ect__ctl_client_remove.  A
 * producer is reported once per loss: when a live connection drops, or when
 * its first connection fails (refused, handshake refused, timed out); not
 * again for each failed retry, and again only after it was reachable. */
size_t ect__ctl_client_take_dead_peers(ect_ctl_client_t *client,
                                       char (*hosts)[ECT_CTL_HOST_MAX + 1], uint16_t *ports,
                                       size_t cap);

/* Make a recv that is waiting (in another thread) return ECT_ERR_TIMEOUT at
 * once, so its thread can act on new work.  The only client function that
 * may be called from any thread. */
void ect__ctl_client_wake(ect_ctl_client_t *client);

/* Close and forget the DEALER for (host, port).  ECT_ERR_NOT_FOUND if none. */
ect_status_t ect__ctl_client_remove(ect_ctl_client_t *client, const char *host, uint16_t port);

void ect__ctl_client_counters(const ect_ctl_client_t *client, ect_ctl_counters_t *counters_p);

/* Close every DEALER and the context.  NULL is a no-op. */
void ect__ctl_client_destroy(ect_ctl_client_t *client);

/* ---- CURVE key files ---------------------------------------------------- */

/* Write a new key pair file: lines "public = <z85>" and "secret = <z85>"
 * (mode 0600).  With server_public (40-char Z85) also a line "server =
 * <z85>", which makes it a consumer's key file.  Used by `ectier keygen`. */
ect_status_t ect__ctl_keyfile_generate(const char *path, const char *server_public);

/* Read the public key of a key file into out (41 bytes). */
ect_status_t ect__ctl_keyfile_public(const char *path, char out[41]);

#endif /* ECT_P2P_CONTROL_H */
