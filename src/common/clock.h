/*
 * Monotonic clock helpers.  All deadlines inside ectier are CLOCK_MONOTONIC
 * nanoseconds, so wall-clock jumps never expire a lease or a timeout.
 */
#ifndef ECT_COMMON_CLOCK_H
#define ECT_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t
ect__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double
ect__now_s(void)
{
    return (double)ect__now_ns() / 1e9;
}

#endif /* ECT_COMMON_CLOCK_H */
