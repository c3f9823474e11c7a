/*
 * The attacker's fixtures shared by the hostile-peer tests
 * (test_hostile_peer.c: tokens, malformed requests, ports, UCX, consumers
 * killed mid-read; test_hostile_stripes.c: the striped data stream).
 *
 * The victim is a real `ectier producer` process serving the test pattern
 * (pattern.h), watched through its Prometheus endpoint, and checked after
 * every attack by a legitimate `ectier consumer --verify-pattern`.  The
 * attacker speaks every protocol with its own code, never through ectier's
 * consumer: a ZeroMQ DEALER with msgpack-c for the control plane, raw
 * sockets and its own request encoder (proto/stream.h's layout) for the data
 * stream.  Everything is on loopback.
 *
 * Each function fails the current case through CHECK (harness.h) where it
 * says so; the others report what happened and leave the verdict to the
 * case.  hostile.c needs ZeroMQ and msgpack-c: it is built, in
 * ect_test_support_p2p, only where P2P is.
 */
#ifndef ECT_TESTS_SUPPORT_HOSTILE_H
#define ECT_TESTS_SUPPORT_HOSTILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

/* The producer's entries: bf16 rows of 1792, 3584-byte blocks. */
#define TS_HOSTILE_HIDDEN "1792"
#define TS_HOSTILE_BLOCK  3584u
/* A grant's token: the last bytes of its mem_descriptor. */
#define TS_HOSTILE_TOKEN_LEN 16u

/* ---- sockets and bytes ------------------------------------------------------------ */

/* A connected TCP socket to 127.0.0.1:port.  When rcvbuf is not 0 its
 * SO_RCVBUF is set to rcvbuf before the handshake, so the advertised window
 * never grows past it and a peer that stops reading holds the sender up for
 * sure.  Fails the case when the socket, the option or the connection
 * fails. */
int ts_hostile_tcp_connect_rcvbuf(unsigned port, int rcvbuf);

/* ts_hostile_tcp_connect_rcvbuf(port, 0). */
int ts_hostile_tcp_connect(unsigned port);

/* Read from fd until end of file, an error, or timeout_ms without a byte.
 * The first cap bytes land in buf; later ones are read and counted but
 * dropped.  Returns how many bytes came in all; *eof_p is 1 when the peer
 * closed (or the read failed), 0 when silence ended it.  Never fails the
 * case. */
size_t ts_hostile_read_until_eof(int fd, uint8_t *buf, size_t cap, int timeout_ms, int *eof_p);

/* Read exactly n bytes from fd into buf, unless end of file (or an error)
 * or timeout_ms without a byte comes first.  Returns how many came (n on
 * success); *eof_p as ts_hostile_read_until_eof.  Never fails the case. */
size_t ts_hostile_read_exact(int fd, uint8_t *buf, size_t n, int timeout_ms, int *eof_p);

/* Little-endian integers, as the data stream and the offer carry them. */
void ts_hostile_put_u32(uint8_t *p, uint32_t v);
uint32_t ts_hostile_get_u32(const uint8_t *p);
uint64_t ts_hostile_get_u64(const uint8_t *p);

/* ---- the producer ------------------------------------------------------------------ */

/* An `ectier producer` child process and what it announced. */
struct ts_hostile_producer {
    pid_t pid;
    unsigned ctl_port;     /* control plane (ZeroMQ ROUTER) */
    unsigned metrics_port; /* Prometheus endpoint */
    unsigned n;            /* entries */
    uint64_t tokens;       /* rows (blocks) of each entry */
    char hashes[64][65];   /* their mm_hash, in announcement order */
    char params_path[256]; /* the announcements, for `ectier consumer --params` */
};

/* Start `ectier producer` (ECT_CLI_PATH) listening on 127.0.0.1 with n
 * (at most 64) entries of `tokens` blocks, each filled with the test
 * pattern, its metrics on a free port, and extra as more members of
 * ec_connector_extra_config ("\"name\": value, ...") or NULL.  Returns once
 * the producer has said "ready"; p then holds its pid, ports, hashes and a
 * file of its announcements (removed by ts_hostile_producer_stop).  The
 * child gets SIGKILL when the case's process dies.  Fails the case when
 * the producer does not announce every entry and then "ready". */
void ts_hostile_producer_spawn_with(struct ts_hostile_producer *p, unsigned n, uint64_t tokens,
                                    const char *extra);

/* ts_hostile_producer_spawn_with(p, n, tokens, NULL). */
void ts_hostile_producer_spawn(struct ts_hostile_producer *p, unsigned n, uint64_t tokens);

/* Whether the producer process is still running (not exited, not a
 * zombie).  Never fails the case. */
int ts_hostile_producer_alive(const struct ts_hostile_producer *p);

/* SIGTERM the producer, reap it and remove its announcements file.  Fails
 * the case when it had already died, or ends other than with status 0. */
void ts_hostile_producer_stop(struct ts_hostile_producer *p);

/* The value of the sample `name` (no labels) on the producer's /metrics
 * page, read over a fresh connection; -1 when the page has no such
 * sample.  Fails the case when the page cannot be requested. */
double ts_hostile_metric(const struct ts_hostile_producer *p, const char *name);

/* Read the sample `name` every 10 ms until it equals want or `seconds`
 * pass.  Returns the last reading (want, unless time ran out).  Fails the
 * case only as ts_hostile_metric does. */
double ts_hostile_metric_await(const struct ts_hostile_producer *p, const char *name, double want,
                               double seconds);

/* The config of an `ectier consumer` over the TCP stream whose region holds
 * every entry p announces (no prefault), into cfg[len]. */
void ts_hostile_consumer_config(const struct ts_hostile_producer *p, char *cfg, size_t len);

/* Start `ectier consumer` (cfg from ts_hostile_consumer_config) for every
 * entry of p; verify: with --verify-pattern and its stderr kept, else
 * silent.  Returns its pid (the caller waits for it). */
pid_t ts_hostile_consumer_start(const struct ts_hostile_producer *p, const char *cfg, bool verify);

/* Run `ectier consumer --verify-pattern` over the TCP stream against p's
 * announcements: it fetches every entry and checks each byte.  Fails the
 * case unless the consumer exits 0. */
void ts_hostile_legit_consumer_verifies_all(const struct ts_hostile_producer *p);

/* ---- the attacker's control-plane client --------------------------------------------- */

/* What an XferAck said, decoded by the attacker. */
struct ts_hostile_grant {
    int status;              /* ECT_XFER_*; -1 when the ack had none */
    size_t n_blocks;         /* length of src_block_indices */
    unsigned data_port;      /* the offer's tcp entry (agent_metadata); 0 without one */
    unsigned aligned_header; /* its tcp_aligned entry (kind 4), the header size; 0 without */
    uint8_t token[TS_HOSTILE_TOKEN_LEN];
    uint8_t desc[64]; /* mem_descriptor as it came */
    size_t desc_len;
};

/* A ZeroMQ DEALER of its own context, connected to the producer. */
struct ts_hostile_dealer {
    void *ctx, *sock;
};

/* Open d connected to tcp://127.0.0.1:port, with no linger.  Fails the
 * case when the connect call fails. */
void ts_hostile_dealer_open(struct ts_hostile_dealer *d, unsigned port);

/* Close d's socket and terminate its context. */
void ts_hostile_dealer_close(struct ts_hostile_dealer *d);

/* Send an XferReq for hash under session (the producer's model "m",
 * engine 0.11.0, bf16 blocks) on the DEALER socket `dealer` and decode the
 * ack: its status, block count, data port, token and descriptor.  Fails
 * the case when the request cannot be sent, no ack comes within 3 s, or
 * the ack is not a msgpack map (or its descriptor is shorter than a token
 * or longer than desc). */
struct ts_hostile_grant ts_hostile_ask(void *dealer, const char *hash, const char *session);

/* ---- the attacker's data-stream client ----------------------------------------------- */

/* A data-stream request laid out as proto/stream.h does, with whatever
 * numbers the attacker chooses: "ECTR", the version, the two string
 * lengths, expect (the payload size asked for) and the token; for versions
 * 2 and 4 also stripe and stripes (u32 at 40 and 44, the strings from 48 on);
 * then session and hash.  Written to out, which must hold 48 bytes and
 * both strings; returns its length.  No checks: any version goes. */
size_t ts_hostile_stream_request_v(uint8_t *out, uint32_t version, const char *session,
                                   const char *hash, const uint8_t *token, uint64_t expect,
                                   uint32_t stripe, uint32_t stripes);

/* A version 1 request: the whole grant. */
size_t ts_hostile_stream_request(uint8_t *out, const char *session, const char *hash,
                                 const uint8_t *token, uint64_t expect);

/* What came back on a data-stream connection. */
struct ts_hostile_answer {
    size_t got;         /* bytes received in all */
    uint32_t status;    /* from the header (16 or 64 bytes), when one came */
    uint64_t announced; /* its payload length */
    int closed;         /* the producer closed the connection */
};

/* Send len bytes (none when 0) on a fresh connection to port and collect
 * what comes back (into buf, up to cap) until the producer closes or
 * silence_ms pass without a byte; the header's fields are filled in when
 * the answer starts with "ECTS" and 16 bytes.  The connection is closed.
 * Fails the case when the connection or the send fails. */
struct ts_hostile_answer ts_hostile_stream_raw(unsigned port, const uint8_t *bytes, size_t len,
                                               uint8_t *buf, size_t cap, int silence_ms);

/* A version 1 request for the whole grant, sent with ts_hostile_stream_raw
 * (3 s of silence end it). */
struct ts_hostile_answer ts_hostile_stream_ask(unsigned port, const char *session, const char *hash,
                                               const uint8_t *token, uint64_t expect, uint8_t *buf,
                                               size_t cap);

/* Connect to port (rcvbuf as ts_hostile_tcp_connect_rcvbuf) and send a
 * request of this version (ts_hostile_stream_request_v) for stripe `stripe`
 * of `stripes`.  Returns the connection, for the caller to read and close.
 * Fails the case when the connection or the send fails. */
int ts_hostile_stream_send(unsigned port, int rcvbuf, uint32_t version, const char *session,
                           const char *hash, const uint8_t *token, uint64_t expect, uint32_t stripe,
                           uint32_t stripes);

/* ts_hostile_stream_send of a version 2 request. */
int ts_hostile_stripe_send(unsigned port, int rcvbuf, const char *session, const char *hash,
                           const uint8_t *token, uint64_t expect, uint32_t stripe,
                           uint32_t stripes);

/* Read the answer on fd, then close fd.  A header of hdr bytes (16, or 64
 * for an aligned answer) first (10 s of silence at most); when it says OK
 * with a payload, exactly the announced payload into buf + hdr and then a
 * 200 ms look for any byte beyond it (the producer sends none: the
 * connection waits for a next request); otherwise everything until the
 * producer hangs up (or 3 s of silence).  Fails the case when hdr is under
 * 16, buf holds less than hdr bytes or the announced payload does not fit
 * in it. */
struct ts_hostile_answer ts_hostile_stream_recv(int fd, size_t hdr, uint8_t *buf, size_t cap);

/* ts_hostile_stream_recv of a 16-byte header. */
struct ts_hostile_answer ts_hostile_stripe_recv(int fd, uint8_t *buf, size_t cap);

/* ts_hostile_stripe_send (default receive buffer) and then
 * ts_hostile_stripe_recv. */
struct ts_hostile_answer ts_hostile_stripe_ask(unsigned port, const char *session, const char *hash,
                                               const uint8_t *token, uint64_t expect,
                                               uint32_t stripe, uint32_t stripes, uint8_t *buf,
                                               size_t cap);

/* Fails the case unless a is a refusal: a bare 16-byte header with this
 * status and no payload announced, then the connection closed. */
void ts_hostile_check_refused(const struct ts_hostile_answer *a, uint32_t status);

#endif /* ECT_TESTS_SUPPORT_HOSTILE_H */
