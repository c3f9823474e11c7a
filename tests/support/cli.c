/*
 * Running the `ectier` binary under a deadline with its outputs in memfds
 * (see cli.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "support/cli.h"
#include "support/util.h"

/* The whole content of fd (which it closes), NUL-terminated, malloc'd. */
static char *
slurp(int fd)
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

void
ts_cli_exec(struct ts_cli_run *r, double deadline_s, int sh, const char *const *argv)
{
    int out = memfd_create("ectt_cli_out", MFD_CLOEXEC);
    int err = memfd_create("ectt_cli_err", MFD_CLOEXEC);
    CHECK(out >= 0 && err >= 0);
    fflush(NULL);
    double t0 = ts_now_s();
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
        if (ts_now_s() - t0 > deadline_s) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0)
                CHECK(errno == EINTR);
            r->rc = -1;
            break;
        }
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    r->secs = ts_now_s() - t0;
    if (r->rc != -1)
        r->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = slurp(out);
    r->err = slurp(err);
}

void
ts_cli_run(struct ts_cli_run *r, double deadline_s, const char *arg0, ...)
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
    ts_cli_exec(r, deadline_s, 0, argv);
}

void
ts_cli_run_free(struct ts_cli_run *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

pid_t
ts_cli_spawn(const char *const *argv, FILE **out_p, FILE **err_p)
{
    int out[2], err[2] = {-1, -1};
    CHECK(pipe(out) == 0);
    CHECK(err_p == NULL || pipe(err) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(out[1], STDOUT_FILENO);
        close(out[0]);
        close(out[1]);
        if (err_p != NULL) {
            dup2(err[1], STDERR_FILENO);
            close(err[0]);
            close(err[1]);
        }
        execv(ECT_CLI_PATH, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    CHECK((*out_p = fdopen(out[0], "r")) != NULL);
    if (err_p != NULL) {
        close(err[1]);
        CHECK((*err_p = fdopen(err[0], "r")) != NULL);
    }
    return pid;
}
