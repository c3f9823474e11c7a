/*
 * A small, dependency-free test harness.
 *
 * Each test case runs in its own forked child under a timeout
 * (ECT_TEST_TIMEOUT seconds, default 120), so a crash, hang or leaked global
 * state in one case cannot affect another.  A case fails by returning through
 * a failed CHECK (the child exits 1), by crashing, or by timing out; it is
 * skipped with SKIP("why") (the child exits 77).
 *
 * A test program declares its cases and hands them to ect_test_main:
 *
 *     static void test_alloc_zero_blocks(void) { ... CHECK(...); }
 *     static const struct ect_test_case cases[] = {
 *         ECT_CASE(test_alloc_zero_blocks),
 *     };
 *     int main(int argc, char **argv) { return ECT_TEST_MAIN(argc, argv, cases); }
 *
 * Arguments select cases by substring; "--no-fork" runs them in-process for
 * a debugger.  The program prints one line per case and ends with
 * "<program>: N passed, N failed, N skipped".  It exits 1 if any case failed,
 * ECT_TEST_SKIP_CODE (77) if every case it ran was skipped, else 0.
 */
#ifndef ECT_TESTS_HARNESS_H
#define ECT_TESTS_HARNESS_H

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

struct ect_test_case {
    const char *name;
    void (*fn)(void);
};

#define ECT_CASE(fn)                                                                               \
    {                                                                                              \
#fn, fn                                                                                    \
    }

#define ECT_TEST_SKIP_CODE 77

int ect_test_main(int argc, char **argv, const struct ect_test_case *cases, size_t n);

#define ECT_TEST_MAIN(argc, argv, cases)                                                           \
    ect_test_main((argc), (argv), (cases), sizeof(cases) / sizeof((cases)[0]))

/* Report a failed check and end the case.  Prints the detail message of the
 * last ectier error too, which is what one wants to see on a failed status. */
void ect_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ect_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);                                 \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ect_test_fail(__FILE__, __LINE__, __VA_ARGS__);                                        \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long ect_a_ = (long long)(a), ect_b_ = (long long)(b);                                \
        if (ect_a_ != ect_b_)                                                                      \
            ect_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, ect_a_, ect_b_);   \
    } while (0)

#define CHECK_EQ_U64(a, b)                                                                         \
    do {                                                                                           \
        unsigned long long ect_a_ = (unsigned long long)(a), ect_b_ = (unsigned long long)(b);     \
        if (ect_a_ != ect_b_)                                                                      \
            ect_test_fail(__FILE__, __LINE__, "%s == %s: %llu != %llu", #a, #b, ect_a_, ect_b_);   \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                                         \
    do {                                                                                           \
        const char *ect_a_ = (a), *ect_b_ = (b);                                                   \
        if (ect_a_ == NULL || ect_b_ == NULL || strcmp(ect_a_, ect_b_) != 0)                       \
            ect_test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,                \
                          ect_a_ ? ect_a_ : "(null)", ect_b_ ? ect_b_ : "(null)");                 \
    } while (0)

/* The string a contains the substring b. */
#define CHECK_CONTAINS(a, b)                                                                       \
    do {                                                                                           \
        const char *ect_a_ = (a), *ect_b_ = (b);                                                   \
        if (ect_a_ == NULL || strstr(ect_a_, ect_b_) == NULL)                                      \
            ect_test_fail(__FILE__, __LINE__, "\"%s\" does not contain \"%s\"",                    \
                          ect_a_ ? ect_a_ : "(null)", ect_b_);                                     \
    } while (0)

/* expr returns ECT_OK. */
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        int ect_s_ = (int)(expr);                                                                  \
        if (ect_s_ != 0)                                                                           \
            ect_test_fail(__FILE__, __LINE__, "%s returned %d", #expr, ect_s_);                    \
    } while (0)

/* expr returns the given status. */
#define CHECK_STATUS(expr, status)                                                                 \
    do {                                                                                           \
        int ect_s_ = (int)(expr);                                                                  \
        if (ect_s_ != (int)(status))                                                               \
            ect_test_fail(__FILE__, __LINE__, "%s returned %d, expected %s (%d)", #expr, ect_s_,   \
                          #status, (int)(status));                                                 \
    } while (0)

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "skip: ");                                                                 \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        fflush(stderr);                                                                            \
        _exit(ECT_TEST_SKIP_CODE);                                                                 \
    } while (0)

/* Paths baked in by the build. */
#ifndef ECT_TEST_DATA_DIR
#define ECT_TEST_DATA_DIR "tests/data"
#endif

/* Read a whole file into a NUL-terminated malloc'd buffer; fails the case
 * on error.  *len_p (optional) gets the length without the NUL. */
char *ect_test_read_file(const char *path, size_t *len_p);

/* A unique name for this test case's objects ("ectt_<pid>_<n>"), so parallel
 * test programs never collide in /dev/shm or on ports.  Returned in buf. */
const char *ect_test_unique_name(char *buf, size_t len, const char *prefix);

/* Children of parent from /proc: the zombies (State Z) if zombies is
 * non-zero, else the others.  Returns how many; at most cap pids are
 * written to out (which may be NULL when cap is 0). */
size_t ect_test_children(pid_t parent, int zombies, pid_t *out, size_t cap);

#endif /* ECT_TESTS_HARNESS_H */
