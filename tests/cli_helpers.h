/*
 * Running the built `ectier` binary (ECT_CLI_PATH) from a test: its stdout
 * and stderr go to memfds (nothing is left on disk), it is killed when it
 * outlives its deadline, and the caller gets the exit status, both outputs
 * and how long it ran.  Used by the CLI tests that check what a person sees
 * (tests/integration/test_cli_tools.c, test_cli_stats.c).
 */
#ifndef ECT_TESTS_CLI_HELPERS_H
#define ECT_TESTS_CLI_HELPERS_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>

#include "harness.h"

struct cli_run {
    int rc;      /* exit status, 128 + signal, or -1 when killed at the deadline */
    double secs; /* how long it ran */
    char *out;   /* stdout, NUL-terminated (malloc'd) */
    char *err;   /* stderr, likewise */
};

static inline double
cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline char *
cli_slurp(int fd)
{
    off_t end = lseek(fd, 0, SEEK_END);
    CHECK(end >= 0);
    char *buf = malloc((size_t)end + 1);
    CHECK(buf != NULL);
    size_t off = 0;
    lseek(fd, 0, SEEK_SET);
    while (off < (size_t)end) {
        ssize_t n = read(fd, buf + off, (size_t)end - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    buf[off] = '\0';
    close(fd);
    return buf;
}

/* Run argv (argv[0] is the program; NULL-terminated) with at most
 * deadline_s seconds; sh 1 runs argv[0] as a /bin/sh command line instead. */
static inline void
cli_exec(struct cli_run *r, double deadline_s, int sh, const char *const *argv)
{
    int out = memfd_create("ectt_cli_out", MFD_CLOEXEC);
    int err = memfd_create("ectt_cli_err", MFD_CLOEXEC);
    CHECK(out >= 0 && err >= 0);
    fflush(NULL);
    double t0 = cli_now_s();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(out, 1);
        dup2(err, 2);
        if (sh)
            execl("/bin/sh", "sh", "-c", argv[0], (char *)NULL);
        else
            execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    r->rc = -2;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        CHECK(w >= 0 || errno == EINTR);
        if (w == pid)
            break;
        if (cli_now_s() - t0 > deadline_s) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0)
                CHECK(errno == EINTR);
            r->rc = -1;
            break;
        }
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    r->secs = cli_now_s() - t0;
    if (r->rc != -1)
        r->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = cli_slurp(out);
    r->err = cli_slurp(err);
}

/* Run `ectier ARGS...` (NULL-terminated) within deadline_s seconds. */
static inline void
cli_run(struct cli_run *r, double deadline_s, const char *arg0, ...)
{
    const char *argv[64];
    int argc = 0;
    argv[argc++] = ECT_CLI_PATH;
    va_list ap;
    va_start(ap, arg0);
    for (const char *a = arg0; a != NULL; a = va_arg(ap, const char *)) {
        CHECK(argc < 63);
        argv[argc++] = a;
    }
    va_end(ap);
    argv[argc] = NULL;
    cli_exec(r, deadline_s, 0, argv);
}

static inline void
cli_run_free(struct cli_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

#define CHECK_CLI_RC(r, want)                                                                      \
    CHECK_MSG((r)->rc == (want), "exit %d, expected %d\nstdout: %s\nstderr: %s", (r)->rc, (want),  \
              (r)->out, (r)->err)

#endif /* ECT_TESTS_CLI_HELPERS_H */
