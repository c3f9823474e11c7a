/*
 * The peer-to-peer half of `ectier demo` (P2P builds only): run it, then
 * print its figures as text or as JSON (tools/cmd_demo.c puts them together
 * with the local CPU tier's).
 */
#ifndef ECT_TOOLS_P2P_DEMO_P2P_H
#define ECT_TOOLS_P2P_DEMO_P2P_H

#include <stdint.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

#define ECT_DEMO_P2P_ITEMS 24

/* One consumer process's run over the producer's announcements. */
struct ect_demo_fetches {
    const char *transport; /* "same_host" or "tcp" */
    int one_at_a_time;     /* 1: --one-at-a-time; 0: all asked at once (a burst) */
    pid_t pid;
    unsigned asked, fetched, fallbacks, failed;
    /* Each fetched item's latency in ms, in the order asked: one at a time,
     * from asking for it; in a burst, from asking for them all. */
    double latency_ms[ECT_DEMO_P2P_ITEMS + 1];
    /* The consumer's counters (its "metrics:" line); have_counters 0: none. */
    int have_counters;
    uint64_t reads, fallbacks_counted, unavailable, ack_timeouts, read_timeouts;
    uint64_t acks[6]; /* ok, nack_missing, nack_incompat, nack_version, nack_internal,
                         nack_not_ready */
};

/* Latency figures over a set of fetches, in ms (nearest-rank percentiles). */
struct ect_demo_latency {
    unsigned n;
    double p50, p99, mean, min, max;
};

struct ect_demo_p2p {
    unsigned items, tokens, hidden;
    uint64_t item_bytes;
    double encode_ms;         /* the stand-in encoder on one item of this size */
    double producer_ready_ms; /* from starting the producer to its "ready" */
    pid_t producer_pid;
    unsigned missing; /* announced to the burst's consumer, never held by the producer */
    struct ect_demo_fetches same_host, tcp, burst;
    int ok; /* every figure is there and every check passed */
};

/* Run a producer process and three consumer processes on loopback: one
 * item at a time over the same-host mapping, one at a time over the TCP
 * stream, then all items at once plus one the producer never had.  The
 * children's stderr and the consumers' output lines go to log_fd.
 * encode_ms is the stand-in encoder's cost for one item of the same size.
 * Fills *r (also on failure, as far as it got).  Returns 0 when r->ok, else
 * 1 with a message on stderr. */
int ect_demo_p2p_run(double encode_ms, int log_fd, struct ect_demo_p2p *r);

/* The latency of a one-at-a-time run over warm connections: its first
 * fetch, which opened the connections, is left out. */
void ect_demo_warm_latency(const struct ect_demo_fetches *f, struct ect_demo_latency *lat);

/* How many times faster a warm same-host fetch (p50) is than encoding one
 * item; 0 without figures. */
double ect_demo_p2p_speedup(const struct ect_demo_p2p *r);

/* Print the figures on stdout, in lines of at most 100 columns. */
void ect_demo_p2p_print(const struct ect_demo_p2p *r);

/* The same figures as a JSON object (the caller owns it), NULL when out of
 * memory. */
cJSON *ect_demo_p2p_json(const struct ect_demo_p2p *r);

#endif
