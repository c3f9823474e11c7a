/*
 * The ceilings of `ectier bench xport` that run outside this process.
 */
#ifndef ECT_BENCH_XPORT_CEILINGS_H
#define ECT_BENCH_XPORT_CEILINGS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The bare TCP ceiling moves the same bytes between the same buffers as
 * the stream: a server process, forked by the consumer before it starts any
 * thread, sends [off, off + len) of the producer's region (its inherited
 * read-only view) with blocking send() for each 16-byte request; the
 * consumer receives them with one recv(MSG_WAITALL) into the same offset of
 * its own region.  One connection, reused like ours, TCP_NODELAY as ours. */
struct ect_bench_tcp_ceiling {
    pid_t pid;
    int fd;
};

/* Fork the sender of [data, data + size) (call before this process starts
 * any thread) and connect to it.  0, or 1 with a message on stderr (t is
 * then safe to stop). */
int ect_bench_tcp_ceiling_start(struct ect_bench_tcp_ceiling *t, const uint8_t *data, size_t size);

/* Close the connection and reap the sender; safe twice. */
void ect_bench_tcp_ceiling_stop(struct ect_bench_tcp_ceiling *t);

/* One transfer of the sender's [off, off + len) into base + off: seconds,
 * or < 0 on failure. */
double ect_bench_tcp_ceiling_once(struct ect_bench_tcp_ceiling *t, uint8_t *base, size_t off,
                                  size_t len);

/* Look for ucx_perftest on PATH, /usr/bin and /usr/local/bin: 1 if found. */
int ect_bench_perftest_find(void);

/* 1 after ect_bench_perftest_find found it. */
int ect_bench_perftest_available(void);

/* One ucx_perftest run (server and client on loopback) of test with
 * messages of bytes, outstanding requests in flight (-O), with
 * UCX's error handling (-e) if error_handling: the client's overall
 * bandwidth in GB/s (it prints MiB/s), or < 0. */
double ect_bench_perftest(const char *test, size_t bytes, int error_handling, unsigned outstanding);

#endif /* ECT_BENCH_XPORT_CEILINGS_H */
