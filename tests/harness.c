/*
 * Implementation of the test harness (see harness.h): fork per case, a
 * timeout per case, one result line per case and a closing count line.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <ectier/status.h>

#include "harness.h"

#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer defaults for every test program.  libzmq (and UCX) are not
 * built with it, so it cannot see their own synchronisation, and the
 * interceptors they call (memcmp, epoll_ctl, operator new) report races
 * between ZeroMQ's I/O thread and the socket's owner that are ordered by
 * libzmq's lock-free pipes.  Ignoring interceptor calls made from
 * uninstrumented modules keeps every check on our own code.  TSAN_OPTIONS
 * from the environment still applies on top. */
const char *__tsan_default_options(void);

const char *
__tsan_default_options(void)
{
    return "ignore_noninstrumented_modules=1";
}
#endif

void
ect_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "  %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    const char *detail = ect_last_error();
    if (detail != NULL && *detail != '\0')
        fprintf(stderr, "\n    last error: %s", detail);
    fprintf(stderr, "\n");
    fflush(stderr);
    _exit(1);
}

char *
ect_test_read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        ect_test_fail(__FILE__, __LINE__, "cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len)
        ect_test_fail(__FILE__, __LINE__, "cannot read %s", path);
    buf[len] = '\0';
    fclose(f);
    if (len_p != NULL)
        *len_p = (size_t)len;
    return buf;
}

const char *
ect_test_unique_name(char *buf, size_t len, const char *prefix)
{
    static unsigned counter;
    snprintf(buf, len, "%s%d_%u", prefix ? prefix : "ectt_", (int)getpid(), counter++);
    return buf;
}

size_t
ect_test_children(pid_t parent, int zombies, pid_t *out, size_t cap)
{
    DIR *d = opendir("/proc");
    if (d == NULL)
        ect_test_fail(__FILE__, __LINE__, "cannot open /proc: %s", strerror(errno));
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = '\0';
        /* "pid (comm) S ppid ...": comm may hold anything, so read after the last ')'. */
        char *rp = strrchr(buf, ')');
        char state;
        int ppid;
        if (rp == NULL || sscanf(rp + 1, " %c %d", &state, &ppid) != 2 || ppid != (int)parent ||
            (state == 'Z') != (zombies != 0))
            continue;
        if (n < cap)
            out[n] = (pid_t)atoi(e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static int
selected(int argc, char **argv, const char *name)
{
    int any = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-')
            continue;
        any = 1;
        if (strstr(name, argv[i]) != NULL)
            return 1;
    }
    return !any;
}

static double
elapsed_s(const struct timespec *t0)
{
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Wait for child up to timeout_s; kill its whole process group on timeout. */
static int
wait_child(pid_t child, int timeout_s, int *timed_out)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    *timed_out = 0;
    for (;;) {
        int st;
        pid_t r = waitpid(child, &st, WNOHANG);
        if (r == child)
            return st;
        if (r < 0 && errno != EINTR)
            return -1;
        if (elapsed_s(&t0) > timeout_s) {
            *timed_out = 1;
            kill(-child, SIGKILL);
            kill(child, SIGKILL);
            waitpid(child, &st, 0);
            return st;
        }
        struct timespec nap = {0, 2 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
}

int
ect_test_main(int argc, char **argv, const struct ect_test_case *cases, size_t n)
{
    const char *prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    int no_fork = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--no-fork") == 0)
            no_fork = 1;
    int timeout_s = 120;
    const char *env = getenv("ECT_TEST_TIMEOUT");
    if (env != NULL && atoi(env) > 0)
        timeout_s = atoi(env);

    unsigned passed = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < n; i++) {
        if (!selected(argc, argv, cases[i].name))
            continue;
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (no_fork) {
            cases[i].fn();
            printf("PASS %s (%.3fs)\n", cases[i].name, elapsed_s(&t0));
            passed++;
            continue;
        }
        fflush(stdout);
        fflush(stderr);
        pid_t child = fork();
        if (child < 0) {
            printf("FAIL %s (fork: %s)\n", cases[i].name, strerror(errno));
            failed++;
            continue;
        }
        if (child == 0) {
            /* Own process group, so a timeout can kill whatever the case forked. */
            setpgid(0, 0);
            ect_clear_error();
            cases[i].fn();
            fflush(stdout);
            fflush(stderr);
            _exit(0);
        }
        setpgid(child, child);
        int timed_out;
        int st = wait_child(child, timeout_s, &timed_out);
        double secs = elapsed_s(&t0);
        if (timed_out) {
            printf("FAIL %s (timed out after %ds)\n", cases[i].name, timeout_s);
            failed++;
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            printf("PASS %s (%.3fs)\n", cases[i].name, secs);
            passed++;
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == ECT_TEST_SKIP_CODE) {
            printf("SKIP %s\n", cases[i].name);
            skipped++;
        } else if (WIFSIGNALED(st)) {
            printf("FAIL %s (killed by signal %d: %s)\n", cases[i].name, WTERMSIG(st),
                   strsignal(WTERMSIG(st)));
            failed++;
        } else {
            printf("FAIL %s (exit %d)\n", cases[i].name, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            failed++;
        }
    }
    printf("%s: %u passed, %u failed, %u skipped\n", prog, passed, failed, skipped);
    /* All skipped (a GPU test without a GPU): the skip code, which CTest
     * reports as "Skipped" and run-tests.sh does not count as a failure. */
    if (failed != 0)
        return 1;
    return passed == 0 && skipped != 0 ? ECT_TEST_SKIP_CODE : 0;
}
