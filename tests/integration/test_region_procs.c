/*
 * The shared region across real processes: sharing, racing creators,
 * SIGKILL of every holder (the reaper must remove the file with no later
 * process helping), the flock behaviour the reaper relies on, the owner
 * lock, and no zombie reapers.  The orphan sweep, listing, gc and their CLI
 * commands are in test_region_gc.c.
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
    struct ts_found_region f = ts_region_find_with_reaper(dir, name);
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
    ts_region_find_with_reaper(TS_SHM, name);
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
    struct ts_found_region f = ts_region_find(TS_SHM, name);
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
    struct ts_found_region f = ts_region_find_with_reaper(dir, name);
    CHECK_EQ_INT(f.info.owner_pid, first.pid);

    /* The owner dies without closing: its lock goes with it, and a
     * restarted owner takes the region over at once. */
    ts_holder_kill(&first);
    ts_holder_spawn(&next, &owner, TS_HOLDER_CLOSE);
    CHECK_MSG(next.status == ECT_OK, "a new owner after SIGKILL got %d", next.status);
    CHECK_EQ_INT(next.creator, 0);
    /* The first creator's reaper still waits (it requeues itself behind the
     * remaining holders when the dead one's lock goes). */
    f = ts_region_find_with_reaper(dir, name);
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
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
