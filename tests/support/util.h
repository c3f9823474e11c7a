/*
 * Small helpers every kind of test uses: clocks, pseudo-random bytes,
 * sleeping, whole reads and writes on pipes, a process's CPU time and a
 * path's existence.  Each fails the current case through CHECK where it
 * says so (harness.h).
 */
#ifndef ECT_TESTS_SUPPORT_UTIL_H
#define ECT_TESTS_SUPPORT_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

/* Under AddressSanitizer, run LeakSanitizer on the spot and fail the case on
 * a leak: the harness's children leave with _exit() and would skip it. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define CHECK_NO_LEAKS() CHECK_MSG(__lsan_do_recoverable_leak_check() == 0, "leaks found")
#else
#define CHECK_NO_LEAKS() ((void)0)
#endif

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t ts_now_ns(void);

/* CLOCK_MONOTONIC in seconds. */
double ts_now_s(void);

/* The next value of Marsaglia's xorshift64 generator in *state (never 0
 * if the state is not): the tests' one source of reproducible pseudo-random
 * numbers. */
uint64_t ts_xorshift64(uint64_t *state);

/* Fill buf with bytes 1..255 from the xorshift generator seeded by seed:
 * never zero, so a copy that wrote zeros (or nothing into zeroed memory)
 * cannot pass a comparison with it. */
void ts_fill_nonzero(void *buf, size_t len, uint64_t seed);

/* Whether every one of the len bytes at buf is v. */
int ts_all_bytes_are(const void *buf, size_t len, unsigned char v);

/* malloc(len); fails the case when it returns NULL. */
unsigned char *ts_xmalloc(size_t len);

/* Sleep ms milliseconds, through interruptions. */
void ts_sleep_ms(int ms);

/* Whether path exists (lstat: a dangling link counts). */
int ts_exists(const char *path);

/* Write all len bytes to fd; fails the case otherwise. */
void ts_write_all(int fd, const void *buf, size_t len);

/* Read exactly len bytes from fd; fails the case on error or end of file. */
void ts_read_all(int fd, void *buf, size_t len);

/* utime + stime of process pid in seconds (/proc/PID/stat fields 14, 15);
 * fails the case when pid is gone. */
double ts_cpu_seconds(pid_t pid);

/* How many threads of this process are named `name` (the comm file of
 * each thread under /proc/self/task). */
unsigned ts_threads_named(const char *name);

/* A loopback TCP port free at the moment of the call (bound, read back and
 * released): nothing listens on it, so a connection to it is refused.
 * Fails the case when no socket can be bound. */
unsigned ts_free_loopback_port(void);

#endif /* ECT_TESTS_SUPPORT_UTIL_H */
