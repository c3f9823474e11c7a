/*
 * The reaper: a tiny process that removes a region file once every process
 * holding it has closed it or died, SIGKILL included (SPEC §4: no byte may
 * stay in /dev/shm after an instance dies, without waiting for a later
 * start to sweep it).
 *
 * The creator forks it right after taking its own shared lock on the new
 * file and before mapping anything, so fork copies no region page tables.
 * The reaper owns a separate open file description of the file, holds no
 * lock, and blocks in flock(LOCK_EX).  Linux grants a new LOCK_SH while an
 * exclusive request is waiting (flock has no writer preference), so joiners
 * are never held up by it; the request is granted only when no shared lock
 * is left.  The reaper then unlinks the file's name, but only while the name
 * still refers to its inode (a new region may have taken the name after a
 * last holder or `gc` removed ours), and exits.  A joiner that opened the
 * name just before the unlink sees the inode change after its own LOCK_SH
 * and starts over as a creator.
 *
 * Process shape: fork, setsid, fork again, first child exits at once (so the
 * reaper is not a child of the engine, whose own wait(-1) never meets it,
 * and is in neither the engine's process group nor its session: a group
 * kill of the engine leaves it alone).  The engine may be multi-threaded, so
 * after fork the children call only async-signal-safe functions.
 *
 * Who collects the reaper's exit status: the orphan goes to the nearest
 * child subreaper, else to PID 1 of the PID namespace.  When that is the
 * engine itself (PID 1 of its container, or a supervisor that set
 * PR_SET_CHILD_SUBREAPER) nobody else would wait for it, and every region
 * would leave a zombie.  So the reaper tells us its pid through a pipe,
 * once it has closed every descriptor it inherited (until then it shares
 * the creator's open file description, and the owner lock the creator takes
 * on it next: the creator waits for that word, so closing its region always
 * frees the ownership).  Once the first child is gone, waitpid(WNOHANG) on that
 * pid says whether the reaper became our own child.  Those (only those) are
 * remembered in `ours` and collected by ect__region_reap(): at once after
 * the close that lets the reaper go (bounded), and without waiting at every
 * later open and close.  A pid in `ours` is waited for only while
 * /proc/<pid>/stat shows the start time it had at spawn, so a pid that the
 * engine's own waitpid(-1) collected and the kernel gave to a new child of
 * the engine is left alone.
 *
 * Locking: `ours_lock` guards `ours` (any thread may open or close a
 * region); it is never held across a fork or a wait that blocks, and a
 * child made by fork() starts with a fresh lock and an empty list
 * (pthread_atfork, registered with the first entry).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/error.h"
#include "region/region_internal.h"

/* More reapers than this alive as our children at once are not tracked
 * (each region a process creates has one until its last holder is gone). */
#define OURS_MAX 4096
/* How long a last close waits for the reaper it let go. */
#define WAIT_AFTER_CLOSE_NS (200L * 1000 * 1000)
/* How long a creator waits for its new reaper to report its pid. */
#define REAPER_START_TIMEOUT_MS 5000

/* Reapers that are our own children: see the file comment. */
struct our_reaper {
    pid_t pid;
    unsigned long long start; /* start_time(pid): the pid is this process */
    dev_t dev;
    ino_t ino;
};
static pthread_mutex_t ours_lock = PTHREAD_MUTEX_INITIALIZER;
static struct our_reaper *ours;
static size_t n_ours, cap_ours;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* In a child made by fork(), `ours` names its parent's children, and
 * ours_lock may have been held by a thread that the child does not have. */
static void
ours_in_child(void)
{
    pthread_mutex_init(&ours_lock, NULL);
    n_ours = 0;
}

static void
ours_register_atfork(void)
{
    if (pthread_atfork(NULL, NULL, ours_in_child) != 0)
        ECT_LOG_D("region reaper: pthread_atfork failed; a forked child may not reap");
}

/* Everything the reaper needs, prepared before fork. */
struct reaper_args {
    int file_fd; /* own open file description, no lock */
    int dir_fd;  /* the directory, for unlinkat by name */
    dev_t dev;
    ino_t ino;
    const char *file_name;
    const char *tmp_name; /* NULL if none */
    int pid_fd;           /* write end of the pid pipe */
    int slow_start;       /* ECT__REGION_TEST_SLOW_REAPER */
    unsigned max_fd;      /* for the close() loop where close_range is missing */
};

static pid_t
fork_in_child(void)
{
    /* glibc's fork() runs atfork handlers, which are not async-signal-safe
     * in a child of a multi-threaded process; _Fork() does not. */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    return _Fork();
#else
    return fork();
#endif
}

/* Close every descriptor but the three in keep (distinct, any order). */
static void
close_all_but(int keep[3], unsigned max_fd)
{
    /* Sort the three (async-signal-safe: no qsort). */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2 - i; j++)
            if (keep[j] > keep[j + 1]) {
                int t = keep[j];
                keep[j] = keep[j + 1];
                keep[j + 1] = t;
            }
    int ok = 1;
    unsigned from = 0;
    for (int i = 0; i < 3; i++) {
        if ((unsigned)keep[i] > from)
            ok = ok && close_range(from, (unsigned)keep[i] - 1, 0) == 0;
        from = (unsigned)keep[i] + 1;
    }
    ok = ok && close_range(from, ~0u, 0) == 0;
    if (ok)
        return;
    /* A kernel before 5.9 has no close_range. */
    for (unsigned fd = 0; fd < max_fd; fd++)
        if ((int)fd != keep[0] && (int)fd != keep[1] && (int)fd != keep[2])
            close((int)fd);
}

static void
unlink_if_ours(const struct reaper_args *a, const char *name)
{
    struct stat st;
    if (name != NULL && fstatat(a->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        st.st_dev == a->dev && st.st_ino == a->ino)
        unlinkat(a->dir_fd, name, 0);
}

static void __attribute__((noreturn)) reaper_main(const struct reaper_args *a)
{
    /* The engine's signal handlers and mask mean nothing here. */
    static const struct sigaction dfl; /* zero: SIG_DFL, no flags */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL);
    /* Keep no directory busy (a mount point could not be unmounted) and let
     * `ps` say what this is. */
    if (chdir("/") != 0) {
        /* nothing depends on the working directory */
    }
    prctl(PR_SET_NAME, "ectier-reaper", 0, 0, 0);
    /* Inherited descriptors would keep pipes open (a parent reading to EOF
     * would hang; the pid pipe among them) and keep the creator's locked
     * file description alive. */
    if (a->slow_start) {
        struct timespec nap = {0, 50 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    int keep[3] = {a->file_fd, a->dir_fd, a->pid_fd};
    close_all_but(keep, a->max_fd);
    /* Only now, holding nothing of the creator's, tell it our pid: until
     * here this process shared the creator's open file description, and
     * with it the owner lock the creator takes next, so a creator that went
     * on earlier could close its region and still find it owned. */
    pid_t self = getpid();
    ssize_t put = write(a->pid_fd, &self, sizeof(self));
    close(a->pid_fd);
    if (put != (ssize_t)sizeof(self))
        _exit(1);
    while (flock(a->file_fd, LOCK_EX) != 0)
        if (errno != EINTR)
            _exit(1);
    unlink_if_ours(a, a->file_name);
    unlink_if_ours(a, a->tmp_name);
    _exit(0);
}

/* The start time of pid (field 22 of /proc/<pid>/stat, clock ticks after
 * boot), which with the pid names one process for good; 0 if unknown. */
static unsigned long long
start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* comm may hold anything, ')' too: field 3 starts after the last one.
     * Step to the space before field 22. */
    const char *p = strrchr(buf, ')');
    for (int field = 3; field <= 22 && p != NULL; field++)
        p = strchr(p + 1, ' ');
    return p != NULL ? strtoull(p + 1, NULL, 10) : 0;
}

ect_status_t
ect__region_spawn_reaper(int fd, const char *dir, const char *file_name, const char *tmp_name)
{
    ect_status_t status = ECT_OK;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ect__error_errno(ECT_ERR_IO, "region reaper: fstat");

    struct reaper_args a = {.dev = st.st_dev,
                            .ino = st.st_ino,
                            .file_name = file_name,
                            .tmp_name = tmp_name,
                            .max_fd = 65536};
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        rl.rlim_cur < a.max_fd)
        a.max_fd = (unsigned)rl.rlim_cur;

    a.dir_fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (a.dir_fd < 0)
        return ect__error_errno(ECT_ERR_IO, "region reaper: open directory %s", dir);

    /* A new open file description (reopening through /proc works for an
     * O_TMPFILE file too): a dup would share the creator's lock. */
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    a.file_fd = open(proc, O_RDONLY | O_CLOEXEC);
    if (a.file_fd < 0 && tmp_name != NULL)
        a.file_fd = openat(a.dir_fd, tmp_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (a.file_fd < 0) {
        status = ect__error_errno(ECT_ERR_IO, "region reaper: reopen %s/%s", dir, file_name);
        goto close_dir;
    }
    struct stat st2;
    if (fstat(a.file_fd, &st2) != 0 || st2.st_ino != st.st_ino || st2.st_dev != st.st_dev) {
        status =
            ect__error(ECT_ERR_IO, "region reaper: reopened %s/%s is another file", dir, file_name);
        goto close_file;
    }

    /* The first child writes the reaper's pid here before it exits. */
    int pid_pipe[2];
    if (pipe2(pid_pipe, O_CLOEXEC) != 0) {
        status = ect__error_errno(ECT_ERR_IO, "region reaper: pipe");
        goto close_file;
    }
    a.pid_fd = pid_pipe[1];
    a.slow_start = (ect__region_test_flags & ECT__REGION_TEST_SLOW_REAPER) != 0;
    pid_t child = fork();
    if (child < 0) {
        status = ect__error_errno(ECT_ERR_IO, "region reaper: fork");
        close(pid_pipe[0]);
        close(pid_pipe[1]);
        goto close_file;
    }
    if (child == 0) {
        if (setsid() < 0)
            _exit(1);
        pid_t grandchild = fork_in_child();
        if (grandchild < 0) {
            /* Say so, so that the read below never waits on another fork's
             * copy of the pipe (a pid <= 0 says it failed). */
            ssize_t put = write(pid_pipe[1], &grandchild, sizeof(grandchild));
            (void)put;
            _exit(1);
        }
        if (grandchild > 0)
            _exit(0); /* the reaper writes its own pid (reaper_main) */
        reaper_main(&a);
    }
    close(pid_pipe[1]);
    /* Bounded: a reaper killed before it writes, while another thread's
     * fork holds a copy of the pipe, would otherwise leave no EOF. */
    pid_t reaper = 0;
    ssize_t got = -1;
    struct pollfd pfd = {.fd = pid_pipe[0], .events = POLLIN};
    int ready;
    while ((ready = poll(&pfd, 1, REAPER_START_TIMEOUT_MS)) < 0 && errno == EINTR)
        ;
    if (ready > 0)
        while ((got = read(pid_pipe[0], &reaper, sizeof(reaper))) < 0 && errno == EINTR)
            ;
    close(pid_pipe[0]);
    if (ready == 0)
        ECT_LOG_W("region reaper: no word from the reaper of %s/%s within %d ms; it may still "
                  "hold the creator's file description",
                  dir, file_name, REAPER_START_TIMEOUT_MS);
    if (got != (ssize_t)sizeof(reaper))
        reaper = 0;
    int wst = 0;
    pid_t w;
    do {
        w = waitpid(child, &wst, 0);
    } while (w < 0 && errno == EINTR);
    /* ECHILD: the engine reaps children itself (SIGCHLD ignored or a handler
     * that waits for everything); the reaper was still started. */
    if (w == child && !(WIFEXITED(wst) && WEXITSTATUS(wst) == 0))
        status =
            ect__error(ECT_ERR_IO, "region reaper: intermediate process failed (status %d)", wst);
    /* The first child is gone, so the reaper has its final parent.  It
     * cannot have exited yet (it waits for our lock), so 0 here means it is
     * our own child and nobody else will collect it. */
    if (reaper > 0 && waitpid(reaper, &wst, WNOHANG) == 0) {
        pthread_once(&atfork_once, ours_register_atfork);
        pthread_mutex_lock(&ours_lock);
        if (n_ours == cap_ours && cap_ours < OURS_MAX) {
            size_t ncap = cap_ours ? cap_ours * 2 : 16;
            struct our_reaper *grown = ect__realloc(ours, ncap * sizeof(*ours));
            if (grown != NULL) {
                ours = grown;
                cap_ours = ncap;
            }
        }
        if (n_ours < cap_ours)
            ours[n_ours++] = (struct our_reaper){reaper, start_time(reaper), st.st_dev, st.st_ino};
        else
            ECT_LOG_W("region reaper: %zu reapers are children of this process; pid %d will "
                      "stay a zombie when it ends",
                      n_ours, (int)reaper);
        pthread_mutex_unlock(&ours_lock);
    }

close_file:
    close(a.file_fd);
close_dir:
    close(a.dir_fd);
    return status;
}

/* Collect our reapers that have exited; 1 if the one of (dev, ino) was
 * among them or is not ours to wait for. */
static int
reap_exited(int match, dev_t dev, ino_t ino)
{
    int matched_gone = 1;
    pthread_mutex_lock(&ours_lock);
    for (size_t i = 0; i < n_ours;) {
        struct our_reaper *o = &ours[i];
        int st;
        unsigned long long t = start_time(o->pid);
        pid_t w = t != 0 && t == o->start ? waitpid(o->pid, &st, WNOHANG) : -1;
        if (w == 0) {
            if (match && o->dev == dev && o->ino == ino)
                matched_gone = 0;
            i++;
            continue;
        }
        /* Collected now, or by someone else (ECHILD; or gone from /proc). */
        ours[i] = ours[--n_ours];
    }
    pthread_mutex_unlock(&ours_lock);
    return matched_gone;
}

void
ect__region_reap(int last_holder, dev_t dev, ino_t ino)
{
    if (!reap_exited(last_holder, dev, ino) && last_holder) {
        /* Our close let that reaper go: it unlinks and exits within a moment.
         * Wait briefly, so that a loop of regions leaves no zombie; if it is
         * slower (a descriptor of the file still open in a forked child),
         * a later open or close collects it. */
        long nap_ns = 50 * 1000, waited_ns = 0;
        while (waited_ns < WAIT_AFTER_CLOSE_NS) {
            struct timespec ts = {0, nap_ns};
            nanosleep(&ts, NULL);
            waited_ns += nap_ns;
            if (nap_ns < 5 * 1000 * 1000)
                nap_ns *= 2;
            if (reap_exited(1, dev, ino))
                break;
        }
    }
}
