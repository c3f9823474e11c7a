/*
 * Helpers shared by the region tests (tests/unit/test_region.c,
 * tests/integration/test_region_procs.c) and the transport tests
 * (support/xport.h): parameters, private directories, child processes that
 * hold a region, and the leftover check.
 *
 * Every name a case makes starts with "ectt_<pid>_" (ect_test_unique_name in
 * the case's own process), so ts_check_no_leftovers() can assert that the
 * case left nothing in /dev/shm even while other test programs run.  Cases
 * that need orphans (files nobody holds) make them in a private directory
 * under /dev/shm, because the sweep of any other program's region open
 * would otherwise remove them from /dev/shm under the case's feet.
 * Cases declared with TS_SHM_CASE run in a child, and whatever that child left
 * in /dev/shm is removed afterwards even when a CHECK failed half-way.
 */
#ifndef ECT_TESTS_SUPPORT_REGION_H
#define ECT_TESTS_SUPPORT_REGION_H

#include <stdint.h>
#include <sys/types.h>

#include <ectier/region.h>

#include "harness.h"
#include "support/util.h"

#define TS_SHM "/dev/shm"

/* Parameters of region name in dir (NULL: the default) with num_blocks
 * 256-byte blocks: hidden 64 x 4-byte elements. */
void ts_region_params(ect_region_params_t *p, const char *name, const char *dir,
                      uint64_t num_blocks);

/* The region file of name in dir: "DIR/NAME.mmap" into buf. */
void ts_region_path(char *buf, size_t len, const char *dir, const char *name);

/* Entries of dir whose name starts with prefix ("" counts all but . and ..). */
unsigned ts_count_prefix(const char *dir, const char *prefix);

/* This case's prefix in /dev/shm: "ectt_<pid>_". */
const char *ts_case_prefix(char *buf, size_t len);

/* Nothing of this case is left in /dev/shm. */
void ts_check_no_leftovers(void);

/* A private directory /dev/shm/ectt_<pid>_<n>d. */
void ts_shm_make_dir(char *buf, size_t len);

/* Remove a private directory, which must be empty by then. */
void ts_shm_remove_dir(const char *dir);

/* Remove path: a file, or a directory and the files in it. */
void ts_remove_tree(const char *path);

/* Remove whatever process pid left under /dev/shm/ectt_<pid>_*; returns how
 * many entries there were. */
unsigned ts_remove_leftovers_of(pid_t pid);

/* Run body in a child process, then remove anything it left in /dev/shm
 * whether it passed or not, and fail if it failed or left anything. */
void ts_isolated(void (*body)(void));

/* Declares test_NAME() running test_NAME_body() through ts_isolated. */
#define TS_SHM_CASE(name)                                                                          \
    static void name##_body(void);                                                                 \
    static void name(void)                                                                         \
    {                                                                                              \
        ts_isolated(name##_body);                                                                  \
    }                                                                                              \
    static void name##_body(void)

/* Poll until path is gone; returns 1 if it went within timeout_ms. */
int ts_wait_gone(const char *path, int timeout_ms);

/* How a holder child ends. */
enum ts_holder_end {
    TS_HOLDER_CLOSE,        /* ect_region_close, then exit */
    TS_HOLDER_EXIT_NO_CLOSE /* exit without closing (the kernel drops the lock) */
};

struct ts_holder {
    pid_t pid;
    int release_fd; /* write a byte or close to let the child go on */
    int status;     /* what the child's ect_region_open returned */
    int creator;
};

/* Fork a child that opens the region and reports back, then waits until
 * released (or killed) and ends as told. */
void ts_holder_spawn(struct ts_holder *h, const ect_region_params_t *p, enum ts_holder_end end);

/* Let the child go on and wait for it; CHECKs that it exited 0.  A byte,
 * not end-of-file: other children may have inherited the pipe's write end. */
void ts_holder_release(struct ts_holder *h);

/* Kill the child (SIGKILL) and reap it, whatever state it is in. */
void ts_holder_kill(struct ts_holder *h);

/* An orphan: a valid region file in dir that nobody holds (its creator
 * exited without closing and without a reaper). */
void ts_region_make_orphan(const char *dir, const char *name, uint64_t num_blocks);

/* What ect_region_list says of one region (seen = 0: not listed). */
struct ts_found_region {
    char name[256];
    ect_region_info_t info;
    int seen;
};

/* The listing of region name in dir. */
struct ts_found_region ts_region_find(const char *dir, const char *name);

/* The same once its reaper waits in the lock queue: the creator forks the
 * reaper and returns, and the reaper queues a moment later (waits up to
 * 5 s; fails the case unless exactly one process waits). */
struct ts_found_region ts_region_find_with_reaper(const char *dir, const char *name);

#endif /* ECT_TESTS_SUPPORT_REGION_H */
