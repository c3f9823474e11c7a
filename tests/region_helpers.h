/*
 * Helpers shared by the region tests (tests/unit/test_region.c and
 * tests/integration/test_region_procs.c): parameters, private directories,
 * child processes that hold a region, and the leftover check.
 *
 * Every name a case makes starts with "ectt_<pid>_" (ect_test_unique_name in
 * the case's own process), so rt_check_no_leftovers() can assert that the
 * case left nothing in /dev/shm even while other test programs run.  Cases
 * that need orphans (files nobody holds) make them in a private directory
 * under /dev/shm, because the sweep of any other program's region open
 * would otherwise remove them from /dev/shm under the case's feet.
 * Cases declared with RT_CASE run in a child, and whatever that child left
 * in /dev/shm is removed afterwards even when a CHECK failed half-way.
 */
#ifndef ECT_TESTS_REGION_HELPERS_H
#define ECT_TESTS_REGION_HELPERS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <ectier/region.h>

#include "harness.h"

#define RT_SHM "/dev/shm"

/* 256-byte blocks: hidden 64 x 4-byte elements. */
static inline void
rt_params(ect_region_params_t *p, const char *name, const char *dir, uint64_t num_blocks)
{
    memset(p, 0, sizeof(*p));
    p->name = name;
    p->dir = dir;
    p->geometry = (ect_geometry_t){
        .hidden_dim = 64, .dtype = ECT_DTYPE_F32, .block_size_bytes = 256, .num_blocks = num_blocks};
}

static inline int
rt_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static inline void
rt_path(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s.mmap", dir, name);
}

/* Entries of dir whose name starts with prefix ("" counts all but . and ..). */
static inline unsigned
rt_count_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "opendir %s: %s", dir, strerror(errno));
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* This case's prefix in /dev/shm: "ectt_<pid>_". */
static inline const char *
rt_case_prefix(char *buf, size_t len)
{
    snprintf(buf, len, "ectt_%d_", (int)getpid());
    return buf;
}

/* Nothing of this case is left in /dev/shm. */
static inline void
rt_check_no_leftovers(void)
{
    char prefix[64];
    rt_case_prefix(prefix, sizeof(prefix));
    unsigned n = rt_count_prefix(RT_SHM, prefix);
    CHECK_MSG(n == 0, "%u entries named %s* left in /dev/shm", n, prefix);
}

/* A private directory /dev/shm/ectt_<pid>_<n>d. */
static inline void
rt_make_dir(char *buf, size_t len)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    snprintf(buf, len, RT_SHM "/%sd", name);
    CHECK_MSG(mkdir(buf, 0700) == 0, "mkdir %s: %s", buf, strerror(errno));
}

/* Remove a private directory, which must be empty by then. */
static inline void
rt_remove_dir(const char *dir)
{
    unsigned n = rt_count_prefix(dir, "");
    if (n != 0) {
        /* Leave nothing behind even when failing. */
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                unlinkat(dirfd(d), e->d_name, 0);
        if (d != NULL)
            closedir(d);
        rmdir(dir);
        CHECK_MSG(0, "%u files left in %s", n, dir);
    }
    CHECK_MSG(rmdir(dir) == 0, "rmdir %s: %s", dir, strerror(errno));
}

/* Remove path: a file, or a directory and the files in it. */
static inline void
rt_remove_tree(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(path);
}

/* Remove whatever process pid left under /dev/shm/ectt_<pid>_*; returns how
 * many entries there were. */
static inline unsigned
rt_remove_leftovers_of(pid_t pid)
{
    char prefix[64], path[512];
    snprintf(prefix, sizeof(prefix), "ectt_%d_", (int)pid);
    DIR *d = opendir(RT_SHM);
    CHECK(d != NULL);
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(path, sizeof(path), RT_SHM "/%s", e->d_name);
        rt_remove_tree(path);
        n++;
    }
    closedir(d);
    return n;
}

/* Run body in a child process, then remove anything it left in /dev/shm
 * whether it passed or not, and fail if it failed or left anything. */
static inline void
rt_isolated(void (*body)(void))
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        body();
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    unsigned left = rt_remove_leftovers_of(pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == ECT_TEST_SKIP_CODE)
        _exit(ECT_TEST_SKIP_CODE);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "case body ended with status %d", st);
    CHECK_MSG(left == 0, "%u entries named ectt_%d_* were left in /dev/shm", left, (int)pid);
}

/* Declares test_NAME() running test_NAME_body() through rt_isolated. */
#define RT_CASE(name)                                                                              \
    static void name##_body(void);                                                                 \
    static void name(void)                                                                         \
    {                                                                                              \
        rt_isolated(name##_body);                                                                  \
    }                                                                                              \
    static void name##_body(void)

/* Poll until path is gone; returns 1 if it went within timeout_ms. */
static inline int
rt_wait_gone(const char *path, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 5) {
        if (!rt_exists(path))
            return 1;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return !rt_exists(path);
}

static inline void
rt_write_all(int fd, const void *buf, size_t len)
{
    CHECK_MSG(write(fd, buf, len) == (ssize_t)len, "write: %s", strerror(errno));
}

static inline void
rt_read_all(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        CHECK_MSG(n > 0, "read: %s", n == 0 ? "end of file" : strerror(errno));
        got += (size_t)n;
    }
}

/* How a holder child ends. */
enum rt_end {
    RT_CLOSE,        /* ect_region_close, then exit */
    RT_EXIT_NO_CLOSE /* exit without closing (the kernel drops the lock) */
};

struct rt_holder {
    pid_t pid;
    int release_fd; /* write a byte or close to let the child go on */
    int status;     /* what the child's ect_region_open returned */
    int creator;
};

/* Fork a child that opens the region and reports back, then waits until
 * released (or killed) and ends as told. */
static inline void
rt_spawn_holder(struct rt_holder *h, const ect_region_params_t *p, enum rt_end end)
{
    int up[2], down[2];
    CHECK(pipe(up) == 0);
    CHECK(pipe(down) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        ect_region_t *r = NULL;
        int res[2];
        res[0] = ect_region_open(p, &r);
        res[1] = ect_region_is_creator(r);
        if (write(up[1], res, sizeof(res)) != (ssize_t)sizeof(res))
            _exit(3);
        char c;
        while (read(down[0], &c, 1) < 0 && errno == EINTR)
            ;
        if (end == RT_CLOSE)
            ect_region_close(r);
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    int res[2];
    rt_read_all(up[0], res, sizeof(res));
    close(up[0]);
    h->pid = pid;
    h->release_fd = down[1];
    h->status = res[0];
    h->creator = res[1];
}

/* Let the child go on and wait for it; CHECKs that it exited 0.  A byte,
 * not end-of-file: other children may have inherited the pipe's write end. */
static inline void
rt_release(struct rt_holder *h)
{
    rt_write_all(h->release_fd, "x", 1);
    close(h->release_fd);
    int st;
    CHECK(waitpid(h->pid, &st, 0) == h->pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder %d ended with status %d", (int)h->pid,
              st);
}

static inline void
rt_kill(struct rt_holder *h)
{
    kill(h->pid, SIGKILL);
    int st;
    waitpid(h->pid, &st, 0);
    close(h->release_fd);
}

/* An orphan: a valid region file in dir that nobody holds (its creator
 * exited without closing and without a reaper). */
static inline void
rt_make_orphan(const char *dir, const char *name, uint64_t num_blocks)
{
    ect_region_params_t p;
    rt_params(&p, name, dir, num_blocks);
    p.flags = ECT_REGION_NO_REAPER | ECT_REGION_NO_SWEEP;
    struct rt_holder h;
    rt_spawn_holder(&h, &p, RT_EXIT_NO_CLOSE);
    CHECK_EQ_INT(h.status, ECT_OK);
    rt_release(&h);
    char path[512];
    rt_path(path, sizeof(path), dir, name);
    CHECK_MSG(rt_exists(path), "orphan %s was not left behind", path);
}

#endif /* ECT_TESTS_REGION_HELPERS_H */
