/*
 * Region parameters, private /dev/shm directories, holder processes and the
 * leftover check (see region.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "support/region.h"

void
ts_region_params(ect_region_params_t *p, const char *name, const char *dir, uint64_t num_blocks)
{
    memset(p, 0, sizeof(*p));
    p->name = name;
    p->dir = dir;
    p->geometry = (ect_geometry_t){.hidden_dim = 64,
                                   .dtype = ECT_DTYPE_F32,
                                   .block_size_bytes = 256,
                                   .num_blocks = num_blocks};
}

void
ts_region_path(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s.mmap", dir, name);
}

unsigned
ts_count_prefix(const char *dir, const char *prefix)
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

const char *
ts_case_prefix(char *buf, size_t len)
{
    snprintf(buf, len, "ectt_%d_", (int)getpid());
    return buf;
}

void
ts_check_no_leftovers(void)
{
    char prefix[64];
    ts_case_prefix(prefix, sizeof(prefix));
    unsigned n = ts_count_prefix(TS_SHM, prefix);
    CHECK_MSG(n == 0, "%u entries named %s* left in /dev/shm", n, prefix);
}

void
ts_shm_make_dir(char *buf, size_t len)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    snprintf(buf, len, TS_SHM "/%sd", name);
    CHECK_MSG(mkdir(buf, 0700) == 0, "mkdir %s: %s", buf, strerror(errno));
}

void
ts_shm_remove_dir(const char *dir)
{
    unsigned n = ts_count_prefix(dir, "");
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

void
ts_remove_tree(const char *path)
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

unsigned
ts_remove_leftovers_of(pid_t pid)
{
    char prefix[64], path[512];
    snprintf(prefix, sizeof(prefix), "ectt_%d_", (int)pid);
    DIR *d = opendir(TS_SHM);
    CHECK(d != NULL);
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        snprintf(path, sizeof(path), TS_SHM "/%s", e->d_name);
        ts_remove_tree(path);
        n++;
    }
    closedir(d);
    return n;
}

void
ts_isolated(void (*body)(void))
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
    unsigned left = ts_remove_leftovers_of(pid);
    if (WIFEXITED(st) && WEXITSTATUS(st) == ECT_TEST_SKIP_CODE)
        _exit(ECT_TEST_SKIP_CODE);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "case body ended with status %d", st);
    CHECK_MSG(left == 0, "%u entries named ectt_%d_* were left in /dev/shm", left, (int)pid);
}

int
ts_wait_gone(const char *path, int timeout_ms)
{
    for (int waited = 0; waited <= timeout_ms; waited += 5) {
        if (!ts_exists(path))
            return 1;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return !ts_exists(path);
}

void
ts_holder_spawn(struct ts_holder *h, const ect_region_params_t *p, enum ts_holder_end end)
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
        if (end == TS_HOLDER_CLOSE)
            ect_region_close(r);
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    int res[2];
    ts_read_all(up[0], res, sizeof(res));
    close(up[0]);
    h->pid = pid;
    h->release_fd = down[1];
    h->status = res[0];
    h->creator = res[1];
}

void
ts_holder_release(struct ts_holder *h)
{
    ts_write_all(h->release_fd, "x", 1);
    close(h->release_fd);
    int st;
    CHECK(waitpid(h->pid, &st, 0) == h->pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "holder %d ended with status %d", (int)h->pid,
              st);
}

void
ts_holder_kill(struct ts_holder *h)
{
    kill(h->pid, SIGKILL);
    int st;
    waitpid(h->pid, &st, 0);
    close(h->release_fd);
}

void
ts_region_make_orphan(const char *dir, const char *name, uint64_t num_blocks)
{
    ect_region_params_t p;
    ts_region_params(&p, name, dir, num_blocks);
    p.flags = ECT_REGION_NO_REAPER | ECT_REGION_NO_SWEEP;
    struct ts_holder h;
    ts_holder_spawn(&h, &p, TS_HOLDER_EXIT_NO_CLOSE);
    CHECK_EQ_INT(h.status, ECT_OK);
    ts_holder_release(&h);
    char path[512];
    ts_region_path(path, sizeof(path), dir, name);
    CHECK_MSG(ts_exists(path), "orphan %s was not left behind", path);
}

static int
find_cb(const ect_region_info_t *info, void *user)
{
    struct ts_found_region *f = user;
    if (strcmp(info->name, f->name) == 0) {
        f->info = *info;
        f->seen = 1;
    }
    return 0;
}

struct ts_found_region
ts_region_find(const char *dir, const char *name)
{
    struct ts_found_region f;
    memset(&f, 0, sizeof(f));
    snprintf(f.name, sizeof(f.name), "%s", name);
    CHECK_OK(ect_region_list(dir, find_cb, &f));
    return f;
}

struct ts_found_region
ts_region_find_with_reaper(const char *dir, const char *name)
{
    struct ts_found_region f;
    for (int waited = 0; waited < 5000; waited += 2) {
        f = ts_region_find(dir, name);
        if (f.seen && f.info.n_waiters > 0)
            break;
        nanosleep(&(struct timespec){0, 2 * 1000 * 1000}, NULL);
    }
    CHECK(f.seen);
    CHECK_MSG(f.info.n_waiters == 1, "%u processes wait for %s (expected the reaper)",
              f.info.n_waiters, name);
    return f;
}
