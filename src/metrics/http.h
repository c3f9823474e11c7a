/*
 * A minimal HTTP/1.0 server for the Prometheus scrape (SPEC §9.7): one
 * thread serving up to 32 connections at once, `GET /metrics` answered with
 * the body a callback renders, anything else 404, malformed or oversized
 * requests 400.
 *
 * The server never touches the engine's threads: its thread only calls the
 * render callback, which must itself be safe to call from another thread.
 * Each client has 1.5 s for its whole exchange and never holds up another,
 * so idle, slow or non-reading clients cannot keep a scrape out (when all
 * slots are taken the oldest client still sending its request is dropped to
 * make room), and stop() always returns promptly.
 */
#ifndef ECT_METRICS_HTTP_H
#define ECT_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

typedef struct ect__http ect__http_t;

/* Render the response body: on ECT_OK *body_p is malloc'd text (the server
 * frees it) of *len_p bytes.  Called on the server's thread. */
typedef ect_status_t (*ect__http_render_fn)(void *user, char **body_p, size_t *len_p);

/* Listen on address ("host:port" or "[v6]:port"; port 0 picks a free port)
 * and serve from a new thread.  address is borrowed; user is borrowed for
 * the server's life.  Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_CONFIG
 * (the address does not parse or resolve), ECT_ERR_IO (cannot bind or
 * listen; the message names the address), ECT_ERR_NO_MEMORY,
 * ECT_ERR_INTERNAL (no thread). */
ect_status_t ect__http_start(const char *address, ect__http_render_fn render, void *user,
                             ect__http_t **server_p);

/* Split "host:port" or "[v6]:port" into host and port text (brackets
 * dropped), for the server and for scrapes.  label names the value in the
 * message.  Returns ECT_OK or ECT_ERR_CONFIG (no port, empty host, or a part
 * longer than its buffer). */
ect_status_t ect__http_split_address(const char *label, const char *address, char *host,
                                     size_t host_cap, char *port, size_t port_cap);

/* The port the server listens on (the one picked when port 0 was asked). */
uint16_t ect__http_port(const ect__http_t *server);

/* Stop the thread, close the listening socket (the port is free when this
 * returns) and free the server.  NULL is a no-op.  Must not be called from
 * the render callback. */
void ect__http_stop(ect__http_t *server);

#endif /* ECT_METRICS_HTTP_H */
