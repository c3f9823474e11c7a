/*
 * The shared region across real processes: sharing, racing creators,
 * SIGKILL of every holder (the reaper must remove the file with no later
 * process helping), the flock behaviour the reaper relies on, the orphan
 * sweep, listing and gc, and the `ectier inspect` / `ectier gc` commands.
 *
 * Cases that need orphans work in a private directory under /dev/shm (see
 * support/region.h) so that no other test program's sweep interferes.
 */
#include <errno.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "region/region_internal.h"

#include "support/region.h"

#define NPROC 8

/* ---- sharing between processes ---------------------------------------------------- */

TS_SHM_CASE(test_create_in_one_process_join_in_another_shares_memory)
{
    char name[64], path[256];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 16);

    /* The joiner is forked before the creator opens, so it inherits no
     * mapping or descriptor of the region. */
    int go[2], done[2];
    CHECK(pipe(go) == 0 && pipe(done) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        char c;
        close(go[1]);
        close(done[0]);
        if (read(go[0], &c, 1) != 1)
            _exit(10);
        ect_region_t *r = NULL;
        if (ect_region_open(&p, &r) != ECT_OK)
            _exit(11);
        if (ect_region_is_creator(r))
            _exit(12);
        const uint8_t *b1 = ect_region_block_ptr(r, 1);
        for (int i = 0; i < 256; i++)
            if (b1[i] != 0x11)
                _exit(13);
        memset(ect_region_block_ptr(r, 3), 0x33, 256);
        ect_region_close(r);
        if (write(done[1], "k", 1) != 1)
            _exit(14);
        _exit(0);
    }
    close(go[0]);
    close(done[1]);
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    CHECK_EQ_INT(ect_region_is_creator(r), 1);
    memset(ect_region_block_ptr(r, 1), 0x11, 256);
    ts_write_all(go[1], "g", 1);
    char c;
    ts_read_all(done[0], &c, 1);
    int st;
    CHECK(waitpid(child, &st, 0) == child);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "joiner status %d", st);
    const uint8_t *b3 = ect_region_block_ptr(r, 3);
    CHECK_EQ_INT(b3[0], 0x33);
    CHECK_EQ_INT(b3[255], 0x33);
    /* The joiner's close did not remove a region the creator still holds. */
    CHECK(ts_exists(path));
    ect_region_close(r);
    CHECK(!ts_exists(path));
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_creator_closing_first_leaves_region_to_joiner)
{
    char name[64], path[256];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 16);
    struct ts_holder creator, joiner;
    ts_holder_spawn(&creator, &p, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(creator.status, ECT_OK);
    CHECK_EQ_INT(creator.creator, 1);
    ts_holder_spawn(&joiner, &p, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(joiner.status, ECT_OK);
    CHECK_EQ_INT(joiner.creator, 0);
    ts_holder_release(&creator);
    CHECK(ts_exists(path));
    ts_holder_release(&joiner);
    CHECK(!ts_exists(path));
    ts_check_no_leftovers();
}

/* ---- racing creators ------------------------------------------------------------------ */

struct race_report {
    int status;
    int creator;
    uint64_t ino;
};

static void
race_case(unsigned test_flags)
{
    char dir[256], name[64], path[512];
    ts_shm_make_dir(dir, sizeof(dir));
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), dir, name);
    ect_region_params_t p;
    ts_region_params(&p, name, dir, NPROC);
    ect__region_test_flags = test_flags; /* inherited by the children */

    int start[2], report[2], verify_go[2], verified[2];
    CHECK(pipe(start) == 0 && pipe(report) == 0 && pipe(verify_go) == 0 && pipe(verified) == 0);
    pid_t kids[NPROC];
    for (int k = 0; k < NPROC; k++) {
        fflush(stdout);
        kids[k] = fork();
        CHECK(kids[k] >= 0);
        if (kids[k] != 0)
            continue;
        close(start[1]);
        close(report[0]);
        close(verify_go[1]);
        close(verified[0]);
        char c;
        /* Everyone is released at once when the parent closes start[1]. */
        if (read(start[0], &c, 1) != 0)
            _exit(10);
        ect_region_t *r = NULL;
        struct race_report rep = {0};
        rep.status = ect_region_open(&p, &r);
        if (rep.status == ECT_OK) {
            struct stat st;
            fstat(ect_region_fd(r), &st);
            rep.ino = st.st_ino;
            rep.creator = ect_region_is_creator(r);
            memset(ect_region_block_ptr(r, (uint64_t)k), k + 1, 256);
        }
        if (write(report[1], &rep, sizeof(rep)) != (ssize_t)sizeof(rep))
            _exit(11);
        if (rep.status != ECT_OK)
            _exit(12);
        if (read(verify_go[0], &c, 1) != 0)
            _exit(13);
        char ok = 1;
        for (int j = 0; j < NPROC; j++) {
            const uint8_t *b = ect_region_block_ptr(r, (uint64_t)j);
            if (b[0] != j + 1 || b[255] != j + 1)
                ok = 0;
        }
        if (write(verified[1], &ok, 1) != 1)
            _exit(14);
        ect_region_close(r);
        _exit(0);
    }
    close(start[0]);
    close(report[1]);
    close(verify_go[0]);
    close(verified[1]);
    close(start[1]); /* go */

    int creators = 0;
    uint64_t ino = 0;
    for (int k = 0; k < NPROC; k++) {
        struct race_report rep;
        ts_read_all(report[0], &rep, sizeof(rep));
        CHECK_MSG(rep.status == ECT_OK, "a racer's open returned %d", rep.status);
        creators += rep.creator;
        if (k == 0)
            ino = rep.ino;
        CHECK_MSG(rep.ino == ino, "racers saw inodes %llu and %llu", (unsigned long long)ino,
                  (unsigned long long)rep.ino);
    }
    CHECK_EQ_INT(creators, 1);
    close(verify_go[1]); /* every block is written: read them all */
    for (int k = 0; k < NPROC; k++) {
        char ok;
        ts_read_all(verified[0], &ok, 1);
        CHECK_MSG(ok == 1, "a racer did not see every other racer's block");
    }
    for (int k = 0; k < NPROC; k++) {
        int st;
        CHECK(waitpid(kids[k], &st, 0) == kids[k]);
        CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "racer %d status %d", k, st);
    }
    ect__region_test_flags = 0;
    /* The last one out removed the file; no temp file is left. */
    CHECK(!ts_exists(path));
    CHECK_EQ_INT(ts_count_prefix(dir, ""), 0);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_racing_processes_make_exactly_one_region)
{
    race_case(0);
}

TS_SHM_CASE(test_racing_processes_make_exactly_one_region_with_named_temp_files)
{
    race_case(ECT__REGION_TEST_NAMED_TMP);
}

/* ---- SIGKILL and the reaper ------------------------------------------------------------- */

struct found {
    char name[256];
    ect_region_info_t info;
    int seen;
};

static int
find_cb(const ect_region_info_t *info, void *user)
{
    struct found *f = user;
    if (strcmp(info->name, f->name) == 0) {
        f->info = *info;
        f->seen = 1;
    }
    return 0;
}

static struct found
find_region(const char *dir, const char *name)
{
    struct found f;
    memset(&f, 0, sizeof(f));
    snprintf(f.name, sizeof(f.name), "%s", name);
    CHECK_OK(ect_region_list(dir, find_cb, &f));
    return f;
}

/* The creator forks the reaper and returns; the reaper takes its place in
 * the lock queue a moment later.  Wait for it (up to 5 s). */
static struct found
find_region_with_reaper(const char *dir, const char *name)
{
    struct found f;
    for (int waited = 0; waited < 5000; waited += 2) {
        f = find_region(dir, name);
        if (f.seen && f.info.n_waiters > 0)
            break;
        nanosleep(&(struct timespec){0, 2 * 1000 * 1000}, NULL);
    }
    CHECK(f.seen);
    CHECK_MSG(f.info.n_waiters == 1, "%u processes wait for %s (expected the reaper)",
              f.info.n_waiters, name);
    return f;
}

/* Whether pid is gone (or a zombie nobody has collected yet). */
static int
process_gone(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')');
    return paren != NULL && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

static void
sigkill_case(unsigned test_flags)
{
    char dir[256], name[64], path[512];
    ts_shm_make_dir(dir, sizeof(dir));
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), dir, name);
    ect_region_params_t p;
    ts_region_params(&p, name, dir, 64);
    ect__region_test_flags = test_flags;

    struct ts_holder h[4];
    for (int k = 0; k < 4; k++) {
        ts_holder_spawn(&h[k], &p, TS_HOLDER_CLOSE);
        CHECK_EQ_INT(h[k].status, ECT_OK);
        CHECK_EQ_INT(h[k].creator, k == 0);
    }
    struct found f = find_region_with_reaper(dir, name);
    CHECK_EQ_INT(f.info.n_holders, 4);
    pid_t reaper = f.info.waiter_pids[0];
    for (int k = 0; k < 4; k++)
        CHECK(h[k].pid != reaper);

    /* The creator dies first: the joiners still hold the region, so it
     * stays, and a new process can still join it. */
    ts_holder_kill(&h[0]);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    CHECK(ts_exists(path));
    struct ts_holder late;
    ts_holder_spawn(&late, &p, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(late.status, ECT_OK);
    CHECK_EQ_INT(late.creator, 0);

    /* Now everyone dies; no process of ours opens or sweeps anything. */
    for (int k = 1; k < 4; k++)
        ts_holder_kill(&h[k]);
    ts_holder_kill(&late);
    CHECK_MSG(ts_wait_gone(path, 5000), "%s still exists 5 s after every holder was killed", path);
    CHECK_EQ_INT(ts_count_prefix(dir, ""), 0); /* no temp file either */
    int gone = 0;
    for (int waited = 0; waited < 5000 && !gone; waited += 10) {
        gone = process_gone(reaper);
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(gone, "reaper %d still running", (int)reaper);
    ect__region_test_flags = 0;
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_sigkill_of_every_holder_leaves_nothing)
{
    sigkill_case(0);
}

TS_SHM_CASE(test_sigkill_of_every_holder_leaves_nothing_with_named_temp_files)
{
    sigkill_case(ECT__REGION_TEST_NAMED_TMP);
}

/* /proc/locks says its size is 0: read until end of file. */
static void
read_proc_locks(char *buf, size_t len)
{
    int fd = open("/proc/locks", O_RDONLY);
    CHECK(fd >= 0);
    size_t n = 0;
    ssize_t got;
    while (n < len - 1 && (got = read(fd, buf + n, len - 1 - n)) > 0)
        n += (size_t)got;
    close(fd);
    buf[n] = '\0';
}

TS_SHM_CASE(test_flock_grants_shared_lock_while_exclusive_request_waits)
{
    /* The kernel behaviour the reaper depends on. */
    char dir[256], path[512];
    ts_shm_make_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/lockfile", dir);
    int a = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(a >= 0);
    CHECK(flock(a, LOCK_SH) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        /* Our copy of a would share the parent's locked file description
         * and keep our own request waiting for ever. */
        close(a);
        int fd = open(path, O_RDONLY);
        if (fd < 0 || flock(fd, LOCK_EX) != 0)
            _exit(1);
        _exit(0);
    }
    /* Wait until /proc/locks shows the child blocked on it. */
    struct stat st;
    CHECK(fstat(a, &st) == 0);
    char want[128];
    snprintf(want, sizeof(want), "-> FLOCK  ADVISORY  WRITE %d ", (int)child);
    int blocked = 0;
    for (int i = 0; i < 500 && !blocked; i++) {
        char locks[65536];
        read_proc_locks(locks, sizeof(locks));
        blocked = strstr(locks, want) != NULL;
        if (!blocked)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    CHECK_MSG(blocked, "the exclusive request never showed as blocked");
    int b = open(path, O_RDONLY);
    CHECK(b >= 0);
    CHECK_MSG(flock(b, LOCK_SH | LOCK_NB) == 0, "LOCK_SH refused while LOCK_EX waits: %s",
              strerror(errno));
    int w;
    CHECK(waitpid(child, &w, WNOHANG) == 0); /* still waiting */
    close(a);
    close(b);
    CHECK(waitpid(child, &w, 0) == child);
    CHECK(WIFEXITED(w) && WEXITSTATUS(w) == 0);
    unlink(path);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_waiting_reaper_does_not_delay_new_joiners)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 16);
    struct ts_holder creator;
    ts_holder_spawn(&creator, &p, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(creator.status, ECT_OK);
    find_region_with_reaper(TS_SHM, name);
    /* With a 50 ms lock timeout, a reaper that blocked shared locks would
     * make these fail with ECT_ERR_BUSY. */
    p.lock_timeout_ms = 50;
    ect_region_t *r[3];
    for (int k = 0; k < 2; k++) {
        CHECK_OK(ect_region_open(&p, &r[k]));
        CHECK_EQ_INT(ect_region_is_creator(r[k]), 0);
    }
    CHECK_OK(ect_region_open_readonly(name, NULL, &r[2]));
    for (int k = 0; k < 3; k++)
        ect_region_close(r[k]);
    ts_holder_release(&creator);
    ts_check_no_leftovers();
}

/* ---- the owner lock across processes ---------------------------------------------------- */

TS_SHM_CASE(test_owner_in_another_process_refuses_a_second_owner)
{
    char name[64], path[256], want[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    ect_region_params_t owner, joiner;
    ts_region_params(&owner, name, NULL, 16);
    owner.flags = ECT_REGION_OWNER;
    ts_region_params(&joiner, name, NULL, 16);
    struct ts_holder first, worker;
    ts_holder_spawn(&first, &owner, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(first.status, ECT_OK);
    /* A joiner in another process is welcome ... */
    ts_holder_spawn(&worker, &joiner, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(worker.status, ECT_OK);
    /* ... a second owner is not, here or in a third process. */
    ect_region_t *r = NULL;
    CHECK_STATUS(ect_region_open(&owner, &r), ECT_ERR_BUSY);
    snprintf(want, sizeof(want), "owned by pid %d", (int)first.pid);
    CHECK_CONTAINS(ect_last_error(), want);
    CHECK_CONTAINS(ect_last_error(), path);
    struct ts_holder second;
    ts_holder_spawn(&second, &owner, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(second.status, ECT_ERR_BUSY);
    ts_holder_release(&second);
    struct found f = find_region(TS_SHM, name);
    CHECK_EQ_INT(f.info.owner_pid, first.pid);
    CHECK_EQ_INT(f.info.n_holders, 2);
    ts_holder_release(&worker);
    ts_holder_release(&first);
    CHECK(!ts_exists(path));
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_sigkilled_owner_lets_a_new_owner_in_and_the_reaper_still_cleans_up)
{
    char dir[256], name[64], path[512];
    ts_shm_make_dir(dir, sizeof(dir));
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), dir, name);
    ect_region_params_t owner, joiner;
    ts_region_params(&owner, name, dir, 16);
    owner.flags = ECT_REGION_OWNER;
    ts_region_params(&joiner, name, dir, 16);
    struct ts_holder first, worker, next;
    ts_holder_spawn(&first, &owner, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(first.status, ECT_OK);
    CHECK_EQ_INT(first.creator, 1);
    ts_holder_spawn(&worker, &joiner, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(worker.status, ECT_OK);
    struct found f = find_region_with_reaper(dir, name);
    CHECK_EQ_INT(f.info.owner_pid, first.pid);

    /* The owner dies without closing: its lock goes with it, and a
     * restarted owner takes the region over at once. */
    ts_holder_kill(&first);
    ts_holder_spawn(&next, &owner, TS_HOLDER_CLOSE);
    CHECK_MSG(next.status == ECT_OK, "a new owner after SIGKILL got %d", next.status);
    CHECK_EQ_INT(next.creator, 0);
    /* The first creator's reaper still waits (it requeues itself behind the
     * remaining holders when the dead one's lock goes). */
    f = find_region_with_reaper(dir, name);
    CHECK_EQ_INT(f.info.owner_pid, next.pid);
    CHECK_EQ_INT(f.info.n_holders, 2);

    /* Everyone dies: the reaper removes the file, owner lock or not. */
    ts_holder_kill(&worker);
    ts_holder_kill(&next);
    CHECK_MSG(ts_wait_gone(path, 5000), "%s still exists 5 s after every holder was killed", path);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

/* ---- no zombie reapers ------------------------------------------------------------------ */

/* A process that is PID 1 of its container, or a child subreaper (a
 * supervisor), becomes the parent of every reaper it orphans by the double
 * fork; a loop of regions must not leave it one zombie each. */
TS_SHM_CASE(test_a_loop_of_regions_leaves_no_zombie_reapers_for_a_subreaper)
{
    CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
    char name[64], path[256];
    ect_region_params_t p;
    for (int i = 0; i < 50; i++) {
        ect_test_unique_name(name, sizeof(name), "ectt_");
        ts_region_path(path, sizeof(path), TS_SHM, name);
        ts_region_params(&p, name, NULL, 4);
        ect_region_t *a = NULL, *b = NULL;
        CHECK_OK(ect_region_open(&p, &a));
        CHECK_EQ_INT(ect_region_is_creator(a), 1);
        if (i % 2 == 1) {
            /* The creator is not the last one out. */
            CHECK_OK(ect_region_open(&p, &b));
            ect_region_close(a);
            ect_region_close(b);
        } else {
            ect_region_close(a);
        }
        CHECK(!ts_exists(path));
    }
    size_t zombies = ect_test_children(getpid(), 1, NULL, 0);
    size_t live = ect_test_children(getpid(), 0, NULL, 0);
    CHECK_MSG(zombies == 0 && live == 0,
              "after 50 regions this process has %zu zombie and %zu live children", zombies, live);
    ts_check_no_leftovers();
}

/* ---- sweep, list and gc ---------------------------------------------------------------- */

/* A file at dir/file_name: an ectier header naming header_name (NULL: no
 * header, just text) followed by zeros up to size bytes. */
static void
write_temp_like(const char *dir, const char *file_name, const char *header_name, size_t size)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file_name);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK_MSG(fd >= 0, "create %s: %s", path, strerror(errno));
    CHECK(ftruncate(fd, (off_t)size) == 0);
    if (header_name != NULL) {
        struct ect__region_header h;
        memset(&h, 0, sizeof(h));
        memcpy(h.magic, ECT__REGION_MAGIC, ECT__REGION_MAGIC_LEN);
        h.layout_version = ECT__REGION_LAYOUT_VERSION;
        h.header_size = sizeof(h);
        h.creator_pid = 1;
        snprintf(h.name, sizeof(h.name), "%s", header_name);
        CHECK(pwrite(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h));
    } else if (size > 0) {
        static const char text[] = "another program's temp file";
        CHECK(pwrite(fd, text, sizeof(text) - 1, 0) == (ssize_t)sizeof(text) - 1);
    }
    close(fd);
}

static int
exists_in(const char *dir, const char *file_name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file_name);
    return ts_exists(path);
}

/* A directory with one of everything; returns the live holder. */
struct zoo {
    char dir[256];
    char live[64], orphan[64];
    char live_path[512], orphan_path[512], foreign_path[512], temp_path[512], other_path[512];
    char foreign_temp_path[512];
    struct ts_holder holder;
};

static void
make_zoo(struct zoo *z)
{
    memset(z, 0, sizeof(*z));
    ts_shm_make_dir(z->dir, sizeof(z->dir));
    ect_test_unique_name(z->live, sizeof(z->live), "ectt_");
    ect_test_unique_name(z->orphan, sizeof(z->orphan), "ectt_");
    ts_region_path(z->live_path, sizeof(z->live_path), z->dir, z->live);
    ts_region_path(z->orphan_path, sizeof(z->orphan_path), z->dir, z->orphan);
    snprintf(z->foreign_path, sizeof(z->foreign_path), "%s/ectier_foreign.mmap", z->dir);
    snprintf(z->temp_path, sizeof(z->temp_path), "%s/%s.Ab12Cd.ectier.tmp", z->dir, z->orphan);
    snprintf(z->other_path, sizeof(z->other_path), "%s/vllm_ec_other.mmap", z->dir);
    snprintf(z->foreign_temp_path, sizeof(z->foreign_temp_path), "%s/%s.Xy34Zw.ectier.tmp", z->dir,
             z->orphan);

    ect_region_params_t p;
    ts_region_params(&p, z->live, z->dir, 32);
    p.flags = ECT_REGION_NO_SWEEP;
    p.instance_id = "zoo";
    ts_holder_spawn(&z->holder, &p, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(z->holder.status, ECT_OK);
    find_region_with_reaper(z->dir, z->live);
    ts_region_make_orphan(z->dir, z->orphan, 8);
    /* A temp file of an interrupted creation of the orphan's name. */
    write_temp_like(z->dir, strrchr(z->temp_path, '/') + 1, z->orphan, 4096);
    const char *paths[] = {z->foreign_path, z->foreign_temp_path, z->other_path};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(paths[i], "w");
        CHECK(f != NULL);
        fputs("not a region at all, just some bytes", f);
        fclose(f);
    }
}

static void
clean_zoo(struct zoo *z)
{
    unlink(z->foreign_path);
    unlink(z->other_path);
    unlink(z->foreign_temp_path);
    ts_holder_release(&z->holder); /* its close removes the live region */
    CHECK(!ts_exists(z->live_path));
    ts_shm_remove_dir(z->dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_sweep_at_open_removes_orphans_but_not_live_or_foreign_files)
{
    struct zoo z;
    make_zoo(&z);
    char other[64];
    ect_test_unique_name(other, sizeof(other), "ectt_");
    ect_region_params_t p;
    ts_region_params(&p, other, z.dir, 4);
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    CHECK(!ts_exists(z.orphan_path));
    CHECK(!ts_exists(z.temp_path));
    CHECK(ts_exists(z.live_path));
    CHECK(ts_exists(z.foreign_path));
    CHECK(ts_exists(z.other_path));
    CHECK(ts_exists(z.foreign_temp_path)); /* not provably ours */
    ect_region_close(r);
    clean_zoo(&z);
}

#define MAX_SEEN 16
struct seen_list {
    unsigned n;
    ect_region_info_t v[MAX_SEEN];
    char names[MAX_SEEN][256];
    char paths[MAX_SEEN][512];
    char problems[MAX_SEEN][256];
    char instances[MAX_SEEN][128];
    ect_status_t outcome[MAX_SEEN];
};

static void
keep(struct seen_list *s, const ect_region_info_t *info, ect_status_t outcome)
{
    CHECK(s->n < MAX_SEEN);
    unsigned i = s->n++;
    s->v[i] = *info;
    snprintf(s->names[i], sizeof(s->names[i]), "%s", info->name);
    snprintf(s->paths[i], sizeof(s->paths[i]), "%s", info->path);
    snprintf(s->problems[i], sizeof(s->problems[i]), "%s", info->problem);
    snprintf(s->instances[i], sizeof(s->instances[i]), "%s", info->instance_id);
    s->outcome[i] = outcome;
}

static int
list_cb(const ect_region_info_t *info, void *user)
{
    keep(user, info, ECT_OK);
    return 0;
}

static void
gc_cb(const ect_region_info_t *info, ect_status_t outcome, void *user)
{
    keep(user, info, outcome);
}

static int
seen_index(const struct seen_list *s, const char *name)
{
    for (unsigned i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0)
            return (int)i;
    return -1;
}

TS_SHM_CASE(test_list_reports_geometry_holders_and_problems)
{
    struct zoo z;
    make_zoo(&z);
    struct seen_list *s = calloc(1, sizeof(*s));
    CHECK_OK(ect_region_list(z.dir, list_cb, s));
    /* live, orphan, foreign, temp, foreign temp; not vllm_ec_other.mmap (no
     * magic, not our name). */
    CHECK_EQ_INT(s->n, 5);
    for (unsigned i = 1; i < s->n; i++)
        CHECK(strcmp(s->paths[i - 1], s->paths[i]) < 0); /* file name order */

    int li = seen_index(s, z.live);
    CHECK(li >= 0);
    const ect_region_info_t *l = &s->v[li];
    CHECK_EQ_INT(l->kind, ECT_REGION_FILE_REGION);
    CHECK_EQ_U64(l->num_blocks, 32);
    CHECK_EQ_U64(l->block_size_bytes, 256);
    CHECK_EQ_U64(l->hidden_dim, 64);
    CHECK_EQ_INT(l->dtype_code, ECT_DTYPE_F32);
    CHECK_EQ_INT(l->element_size, 4);
    CHECK_EQ_U64(l->file_size, l->data_offset + 32 * 256);
    CHECK_EQ_INT(l->creator_pid, z.holder.pid);
    CHECK_STR_EQ(s->instances[li], "zoo");
    CHECK_EQ_INT(l->n_holders, 1);
    CHECK_EQ_INT(l->holder_pids[0], z.holder.pid);
    CHECK_EQ_INT(l->n_waiters, 1); /* its reaper */
    CHECK(l->age_s >= 0 && l->age_s < 60);

    int oi = seen_index(s, z.orphan);
    CHECK(oi >= 0);
    CHECK_EQ_INT(s->v[oi].kind, ECT_REGION_FILE_REGION);
    CHECK_EQ_INT(s->v[oi].n_holders, 0);
    CHECK_EQ_INT(s->v[oi].n_waiters, 0);
    CHECK_EQ_U64(s->v[oi].num_blocks, 8);

    int fi = seen_index(s, "ectier_foreign");
    CHECK(fi >= 0);
    CHECK_EQ_INT(s->v[fi].kind, ECT_REGION_FILE_FOREIGN);
    CHECK_CONTAINS(s->problems[fi], "not an ectier region");

    char temp_name[128];
    snprintf(temp_name, sizeof(temp_name), "%s.Ab12Cd.ectier.tmp", z.orphan);
    int ti = seen_index(s, temp_name);
    CHECK(ti >= 0);
    CHECK_EQ_INT(s->v[ti].kind, ECT_REGION_FILE_TEMP);
    CHECK_EQ_INT(s->v[ti].gc_eligible, 1);
    CHECK_EQ_INT(s->v[li].gc_eligible, 1);
    CHECK_EQ_INT(s->v[oi].gc_eligible, 1);
    CHECK_EQ_INT(s->v[fi].gc_eligible, 0);
    int fti = seen_index(s, strrchr(z.foreign_temp_path, '/') + 1);
    CHECK(fti >= 0);
    CHECK_EQ_INT(s->v[fti].kind, ECT_REGION_FILE_TEMP);
    CHECK_EQ_INT(s->v[fti].gc_eligible, 0);
    CHECK_CONTAINS(s->problems[fti], "not provably ectier's");

    CHECK_STATUS(ect_region_list("/nonexistent-ectier-dir", list_cb, s), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_region_list(z.dir, NULL, s), ECT_ERR_INVALID_ARG);
    free(s);
    unlink(z.orphan_path);
    unlink(z.temp_path);
    clean_zoo(&z);
}

TS_SHM_CASE(test_gc_removes_only_orphans_and_reports_each)
{
    struct zoo z;
    make_zoo(&z);
    struct seen_list *s = calloc(1, sizeof(*s));
    unsigned removed = 99;
    CHECK_OK(ect_region_gc(z.dir, 1, gc_cb, s, &removed));
    CHECK_EQ_INT(removed, 2);
    CHECK_EQ_INT(s->n, 4); /* the two foreign files are reported as left */
    CHECK(ts_exists(z.orphan_path) && ts_exists(z.temp_path)); /* dry run */

    memset(s, 0, sizeof(*s));
    CHECK_OK(ect_region_gc(z.dir, 0, gc_cb, s, &removed));
    CHECK_EQ_INT(removed, 2);
    CHECK_EQ_INT(s->n, 4);
    int oi = seen_index(s, z.orphan);
    CHECK(oi >= 0);
    CHECK_EQ_INT(s->outcome[oi], ECT_OK);
    CHECK_EQ_INT(s->v[oi].kind, ECT_REGION_FILE_REGION);
    int fi = seen_index(s, "ectier_foreign");
    CHECK(fi >= 0);
    CHECK_EQ_INT(s->outcome[fi], ECT_ERR_INCOMPATIBLE);
    int fti = seen_index(s, strrchr(z.foreign_temp_path, '/') + 1);
    CHECK(fti >= 0);
    CHECK_EQ_INT(s->outcome[fti], ECT_ERR_INCOMPATIBLE);
    CHECK(ts_exists(z.foreign_temp_path));
    CHECK(!ts_exists(z.orphan_path));
    CHECK(!ts_exists(z.temp_path));
    CHECK(ts_exists(z.live_path));
    CHECK(ts_exists(z.foreign_path));
    CHECK(ts_exists(z.other_path));

    CHECK_OK(ect_region_gc(z.dir, 0, NULL, NULL, &removed));
    CHECK_EQ_INT(removed, 0);
    free(s);
    clean_zoo(&z);
}

/* ---- gc removes only what it can prove is ours ------------------------------------------ */

static char *run_cli(const char *args, int *rc_p);

TS_SHM_CASE(test_gc_and_sweep_remove_only_temp_files_that_are_provably_ours)
{
    char dir[256];
    ts_shm_make_dir(dir, sizeof(dir));
    /* Ours: the name pattern of a creation ("<region>.XXXXXX.ectier.tmp") and
     * a header that names that region, from a creator killed while it
     * reserved the pages (the file is shorter than the header says). */
    const char *ours = "reg.Ab12Cd.ectier.tmp", *ours2 = "reg.Ef34Gh.ectier.tmp";
    write_temp_like(dir, ours, "reg", 4096);
    write_temp_like(dir, ours2, "reg", 4096);
    /* Not provably ours: another program's file, an empty one, a header
     * naming another region, and names outside the pattern. */
    const char *left[] = {"app.Xy34Zw.ectier.tmp", "reg.Qq11Rr.ectier.tmp", "reg.Mm22Nn.ectier.tmp",
                          "reg.ectier.tmp", "reg.Ab12C!.ectier.tmp"};
    write_temp_like(dir, left[0], NULL, 64);
    write_temp_like(dir, left[1], NULL, 0);
    write_temp_like(dir, left[2], "other", 4096);
    write_temp_like(dir, left[3], "reg", 4096);
    write_temp_like(dir, left[4], "reg", 4096);
    const size_t n_left = sizeof(left) / sizeof(left[0]);

    struct seen_list *s = calloc(1, sizeof(*s));
    unsigned removed = 99;
    CHECK_OK(ect_region_gc(dir, 0, gc_cb, s, &removed));
    CHECK_EQ_INT(removed, 2);
    CHECK(!exists_in(dir, ours) && !exists_in(dir, ours2));
    for (size_t i = 0; i < n_left; i++) {
        CHECK_MSG(exists_in(dir, left[i]), "gc removed %s", left[i]);
        int k = seen_index(s, left[i]);
        CHECK_MSG(k >= 0, "gc did not report %s", left[i]);
        CHECK_EQ_INT(s->outcome[k], ECT_ERR_INCOMPATIBLE);
        CHECK_CONTAINS(s->problems[k], "not provably");
    }
    CHECK_EQ_INT(s->n, 2 + n_left);

    /* The sweep at open follows the same rule. */
    write_temp_like(dir, ours, "reg", 4096);
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t p;
    ts_region_params(&p, name, dir, 4);
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    CHECK(!exists_in(dir, ours));
    for (size_t i = 0; i < n_left; i++)
        CHECK_MSG(exists_in(dir, left[i]), "the sweep removed %s", left[i]);
    ect_region_close(r);

    /* `ectier gc` says what it left, and that is no failure. */
    char args[512], want[512];
    int rc;
    snprintf(args, sizeof(args), "gc --dir %s", dir);
    char *out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    snprintf(want, sizeof(want), "left %s/%s (", dir, left[0]);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "0 removed from");
    free(out);
    for (size_t i = 0; i < n_left; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, left[i]);
        unlink(path);
    }
    free(s);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_inspect_and_gc_tell_the_truth_about_links_fifos_and_directories)
{
    char dir[256], path[512], args[512];
    ts_shm_make_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/ectier_link.mmap", dir);
    CHECK(symlink("/nonexistent-ectier-target", path) == 0);
    snprintf(path, sizeof(path), "%s/ectier_fifo.mmap", dir);
    CHECK(mkfifo(path, 0600) == 0);
    snprintf(path, sizeof(path), "%s/ectier_dir.mmap", dir);
    CHECK(mkdir(path, 0700) == 0);
    snprintf(path, sizeof(path), "%s/reg.Ab12Cd.ectier.tmp", dir);
    CHECK(mkfifo(path, 0600) == 0);

    int rc;
    snprintf(args, sizeof(args), "inspect --dir %s", dir);
    char *out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(strstr(out, "gc` removes it") == NULL, "inspect promises gc removes: %s", out);
    CHECK_CONTAINS(out, "a symbolic link");
    CHECK_CONTAINS(out, "a FIFO");
    CHECK_CONTAINS(out, "a directory");
    CHECK_CONTAINS(out, "`ectier gc` leaves it");
    CHECK_CONTAINS(out, "0 orphaned, 4 other");
    free(out);

    snprintf(args, sizeof(args), "inspect --json --dir %s", dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    cJSON *doc = cJSON_Parse(out);
    CHECK_MSG(cJSON_IsArray(doc) && cJSON_GetArraySize(doc) == 4, "inspect --json: %s", out);
    cJSON *o;
    cJSON_ArrayForEach(o, doc)
    {
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "orphaned")));
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "gc_eligible")));
    }
    cJSON_Delete(doc);
    free(out);

    snprintf(args, sizeof(args), "gc --dir %s", dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "0 removed from");
    CHECK_CONTAINS(out, "ectier_fifo.mmap (a FIFO");
    free(out);
    const char *names[] = {"ectier_link.mmap", "ectier_fifo.mmap", "ectier_dir.mmap",
                           "reg.Ab12Cd.ectier.tmp"};
    for (size_t i = 0; i < 4; i++)
        CHECK_MSG(exists_in(dir, names[i]), "gc removed %s", names[i]);
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (i == 2)
            rmdir(path);
        else
            unlink(path);
    }
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

/* ---- the CLI ------------------------------------------------------------------------ */

/* Run the CLI with args; returns its output (malloc'd) and exit code. */
static char *
run_cli(const char *args, int *rc_p)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", ECT_CLI_PATH, args);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    size_t cap = 65536, n = 0;
    char *out = malloc(cap);
    CHECK(out != NULL);
    size_t got;
    while ((got = fread(out + n, 1, cap - 1 - n, f)) > 0) {
        n += got;
        if (n == cap - 1) {
            cap *= 2;
            out = realloc(out, cap);
            CHECK(out != NULL);
        }
    }
    out[n] = '\0';
    int st = pclose(f);
    *rc_p = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

TS_SHM_CASE(test_cli_inspect_and_gc_on_live_and_orphaned_regions)
{
    struct zoo z;
    make_zoo(&z);
    char args[1024], want[1024];
    int rc;

    snprintf(args, sizeof(args), "inspect --dir %s", z.dir);
    char *out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, z.live_path);
    CHECK_CONTAINS(out, z.orphan_path);
    /* The dtype by name, sizes in human units. */
    CHECK_CONTAINS(out, "32 blocks x 256 B = 8.00 KiB (hidden_dim 64 x float32, 4 B/element)");
    CHECK(strstr(out, "element size disagrees") == NULL);
    snprintf(want, sizeof(want), "holders 1 (pid %d), waiting (reaper) 1", (int)z.holder.pid);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "holders 0, orphaned: `ectier gc` removes it");
    CHECK_CONTAINS(out, "not an ectier region");
    CHECK_CONTAINS(out, "instance \"zoo\"");
    CHECK_CONTAINS(out, "5 files in");
    CHECK_CONTAINS(out, "1 live region, 2 orphaned, 2 other");
    free(out);

    snprintf(args, sizeof(args), "inspect --json --dir=%s", z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    cJSON *doc = cJSON_Parse(out);
    CHECK_MSG(cJSON_IsArray(doc), "not a JSON array: %s", out);
    CHECK_EQ_INT(cJSON_GetArraySize(doc), 5);
    int found_live = 0;
    cJSON *o;
    cJSON_ArrayForEach(o, doc)
    {
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(o, "name"));
        CHECK(nm != NULL);
        if (strcmp(nm, z.live) != 0)
            continue;
        found_live = 1;
        CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(o, "kind")), "region");
        CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "num_blocks")), 32);
        CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "holders")), 1);
        cJSON *pids = cJSON_GetObjectItem(o, "holder_pids");
        CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetArrayItem(pids, 0)), z.holder.pid);
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "orphaned")));
    }
    CHECK(found_live);
    cJSON_Delete(doc);
    free(out);

    snprintf(args, sizeof(args), "inspect %s --dir %s", z.orphan, z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, z.orphan_path);
    CHECK(strstr(out, z.live_path) == NULL);
    free(out);
    snprintf(args, sizeof(args), "inspect no_such_region --dir %s", z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "no region named 'no_such_region'");
    free(out);
    out = run_cli("inspect --dir /nonexistent-ectier-dir", &rc);
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "/nonexistent-ectier-dir");
    free(out);

    snprintf(args, sizeof(args), "gc --dry-run --dir %s", z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    snprintf(want, sizeof(want), "would remove %s (orphaned region", z.orphan_path);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "2 would be removed");
    CHECK(ts_exists(z.orphan_path));
    free(out);

    snprintf(args, sizeof(args), "gc --dir %s", z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    snprintf(want, sizeof(want), "removed %s (orphaned region, ", z.orphan_path);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof(want), "removed %s (stale temp file", z.temp_path);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof(want), "left %s (not provably ectier's", z.foreign_temp_path);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "2 removed from");
    CHECK_CONTAINS(out, ", 2 left (not provably ectier's)");
    CHECK(strstr(out, z.live) == NULL);
    free(out);
    CHECK(!ts_exists(z.orphan_path));
    CHECK(!ts_exists(z.temp_path));
    CHECK(ts_exists(z.live_path));
    CHECK(ts_exists(z.foreign_path));

    out = run_cli("gc --bogus", &rc);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "usage: ectier gc");
    free(out);
    out = run_cli("inspect a b", &rc);
    CHECK_EQ_INT(rc, 2);
    free(out);
    clean_zoo(&z);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_create_in_one_process_join_in_another_shares_memory),
    ECT_CASE(test_creator_closing_first_leaves_region_to_joiner),
    ECT_CASE(test_racing_processes_make_exactly_one_region),
    ECT_CASE(test_racing_processes_make_exactly_one_region_with_named_temp_files),
    ECT_CASE(test_sigkill_of_every_holder_leaves_nothing),
    ECT_CASE(test_sigkill_of_every_holder_leaves_nothing_with_named_temp_files),
    ECT_CASE(test_flock_grants_shared_lock_while_exclusive_request_waits),
    ECT_CASE(test_waiting_reaper_does_not_delay_new_joiners),
    ECT_CASE(test_owner_in_another_process_refuses_a_second_owner),
    ECT_CASE(test_sigkilled_owner_lets_a_new_owner_in_and_the_reaper_still_cleans_up),
    ECT_CASE(test_a_loop_of_regions_leaves_no_zombie_reapers_for_a_subreaper),
    ECT_CASE(test_sweep_at_open_removes_orphans_but_not_live_or_foreign_files),
    ECT_CASE(test_list_reports_geometry_holders_and_problems),
    ECT_CASE(test_gc_removes_only_orphans_and_reports_each),
    ECT_CASE(test_cli_inspect_and_gc_on_live_and_orphaned_regions),
    ECT_CASE(test_gc_and_sweep_remove_only_temp_files_that_are_provably_ours),
    ECT_CASE(test_inspect_and_gc_tell_the_truth_about_links_fifos_and_directories),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
