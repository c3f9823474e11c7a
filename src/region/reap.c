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
 * reaper is neither a zombie of the engine nor in the engine's process group
 * or session, and a group kill of the engine leaves it alone).  The engine
 * may be multi-threaded, so after fork the children call only
 * async-signal-safe functions.  No locks of our own; no shared state.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "region/region_internal.h"

/* Everything the reaper needs, prepared before fork. */
struct reaper_args {
    int file_fd; /* own open file description, no lock */
    int dir_fd;  /* the directory, for unlinkat by name */
    dev_t dev;
    ino_t ino;
    const char *file_name;
    const char *tmp_name; /* NULL if none */
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

static void
close_all_but(int a, int b, unsigned max_fd)
{
    unsigned lo = (unsigned)(a < b ? a : b), hi = (unsigned)(a < b ? b : a);
    int ok = 1;
    if (lo > 0)
        ok = ok && close_range(0, lo - 1, 0) == 0;
    if (hi > lo + 1)
        ok = ok && close_range(lo + 1, hi - 1, 0) == 0;
    ok = ok && close_range(hi + 1, ~0u, 0) == 0;
    if (ok)
        return;
    /* A kernel before 5.9 has no close_range. */
    for (unsigned fd = 0; fd < max_fd; fd++)
        if (fd != lo && fd != hi)
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
     * would hang) and keep the creator's locked file description alive. */
    close_all_but(a->file_fd, a->dir_fd, a->max_fd);
    while (flock(a->file_fd, LOCK_EX) != 0)
        if (errno != EINTR)
            _exit(1);
    unlink_if_ours(a, a->file_name);
    unlink_if_ours(a, a->tmp_name);
    _exit(0);
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

    pid_t child = fork();
    if (child < 0) {
        status = ect__error_errno(ECT_ERR_IO, "region reaper: fork");
        goto close_file;
    }
    if (child == 0) {
        if (setsid() < 0)
            _exit(1);
        pid_t grandchild = fork_in_child();
        if (grandchild < 0)
            _exit(1);
        if (grandchild > 0)
            _exit(0);
        reaper_main(&a);
    }
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

close_file:
    close(a.file_fd);
close_dir:
    close(a.dir_fd);
    return status;
}
