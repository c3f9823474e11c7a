/*
 * The ceilings of `ectier bench xport` that run outside this process.
 */
#ifndef ECT_BENCH_XPORT_CEILINGS_H
#define ECT_BENCH_XPORT_CEILINGS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The bare TCP ceiling moves the same bytes between the same buffers as
 * the stream: a server process per connection, forked by the consumer
 * before it starts any thread, sends [off, off + len) of the producer's
 * region (its inherited read-only view) with blocking send() for each
 * 16-byte request; the consumer receives them into the same offset of its
 * own region with recv(MSG_WAITALL), or (as_client) with non-blocking
 * recv() woken by poll() at the stream client's receive marks
 * (ect__xport_stream_rcvlowat), as the stream's client is.  Connections
 * are reused like ours, TCP_NODELAY as ours.  Over one connection it is the most a stream like
 * ours can carry; over several, each connection moves one stripe of the
 * range at once, on a thread of its own at both ends: what the link carries
 * when more than one connection shares a transfer. */
#define ECT_BENCH_TCP_MAX_CONNS 4
struct ect_bench_tcp_stripes;
struct ect_bench_tcp_ceiling {
    unsigned n;    /* connections made (0 after stop; a zeroed struct is stopped) */
    int as_client; /* 0: recv(MSG_WAITALL); 1: the client's SO_RCVLOWAT marks and poll() */
    pid_t pid[ECT_BENCH_TCP_MAX_CONNS]; /* the senders forked by start; 0 for none */
    int fd[ECT_BENCH_TCP_MAX_CONNS];
    /* The receiving threads of stripes 1..n-1: started by the first
     * transfer, asleep between transfers (as a stream client's receive
     * threads are), joined by stop. */
    struct ect_bench_tcp_stripes *stripes;
};
/* Fork the senders of [data, data + size) (call before this process starts
 * any thread) and make n_conns (1 .. ECT_BENCH_TCP_MAX_CONNS) connections
 * to them.  0, or 1 with a message on stderr (t is then safe to stop). */
int ect_bench_tcp_ceiling_start(struct ect_bench_tcp_ceiling *t, const uint8_t *data, size_t size,
                                unsigned n_conns);
/* Close the connections, reap the senders and join the receiving
 * threads; safe twice. */
void ect_bench_tcp_ceiling_stop(struct ect_bench_tcp_ceiling *t);
/* One transfer of the senders' [off, off + len) into base + off, split into
 * one stripe per connection (whole 4 KiB pages each, the last what is
 * left; a short range leaves the last stripes empty), all at once: seconds,
 * or < 0 on failure.  Stripe 0 is received on the calling thread, each
 * other on a thread of its own, woken for it (the first call starts them).
 * The fds may as well be connections the caller made (n of them, pids 0)
 * to peers that serve with ect_bench_tcp_serve (below); stop then closes
 * them. */
double ect_bench_tcp_ceiling_once(struct ect_bench_tcp_ceiling *t, uint8_t *base, size_t off,
                                  size_t len);
/* The two ends of one bare connection, for a ceiling whose ends run in
 * separate processes (bench/link/tcp_link.c, between network namespaces).
 * Serve: answer each 16-byte request {u64 off, u64 len} on fd with
 * [data + off, + len), one blocking send() each, until the peer closes or
 * asks for bytes outside [data, data + size).  Fetch: ask for [off, off +
 * len) and receive it into base + off, with recv(MSG_WAITALL) (as_client
 * 0) or woken by poll() at the stream client's receive marks (as_client 1);
 * 0, or -1 on a socket error or end of file. */
void ect_bench_tcp_serve(int fd, const uint8_t *data, size_t size);
int ect_bench_tcp_fetch(int fd, uint8_t *base, size_t off, size_t len, int as_client);

/* Look for ucx_perftest on PATH, /usr/bin and /usr/local/bin: 1 if found. */
int ect_bench_perftest_find(void);

/* 1 after ect_bench_perftest_find found it. */
int ect_bench_perftest_available(void);

/* One ucx_perftest run (server and client on loopback) of test with
 * messages of bytes, outstanding requests in flight (-O), with
 * UCX's error handling (-e) if error_handling, timing `messages` of them
 * (0: 1 GiB's worth, at least 16 and at most 400) after a fifth as many
 * to warm up: the client's overall bandwidth in GB/s (it prints MiB/s), or
 * < 0. */
double ect_bench_perftest(const char *test, size_t bytes, int error_handling, unsigned outstanding,
                          size_t messages);

#endif /* ECT_BENCH_XPORT_CEILINGS_H */
