/*
 * The step protocol across processes (SPEC §1.2, §6, §7; issue 3): the
 * scheduler side in this process and tensor-parallel workers in forked
 * processes, exchanging encoded step metadata and encoded reports over
 * pipes, as the reference engine loop does (examples/engine_loop.c).
 *
 * Worker processes make each save's bytes from the key, so every process
 * can check a reload byte for byte.  A worker can be told to stop in the
 * middle of a step (metadata bound, loads submitted, nothing reported) so
 * that the test can SIGKILL it there.
 *
 * What a dead rank means for the scheduler (asserted below): a load needs a
 * report from every rank, so a load whose rank died stays pinned.  Load pins
 * have no lease; an engine treats a dead worker as fatal for the instance
 * (vLLM does), and shutting the scheduler down releases everything.  The
 * scheduler stays consistent meanwhile: its other entries, saves and
 * evictions work, and the pinned entry is never evicted under a load.
 */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "support/step.h"

#define MSG_STEP    0u
#define MSG_STOP    1u
#define FLAG_STALL  1u /* stop after start_load until killed */
#define MAX_ITEMS   8
#define STALL_SHOWN 'S'

static int
xread(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int
xwrite(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The bytes an item's encoder output has: a function of its key. */
static void
pattern(const char *key, unsigned char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (const char *c = key; *c; c++)
        h = (h ^ (unsigned char)*c) * 16777619u;
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)((h >> (8 * (i % 4))) + i * 3);
}

/* Payload of an entry of n blocks: short of the last block by 3 bytes, so
 * every entry ends in a partial block. */
static size_t
payload_bytes(uint64_t n_blocks)
{
    return n_blocks ? (size_t)(n_blocks * TS_STEP_BLOCK - 3) : 0;
}

/* ---- the worker process ---------------------------------------------------- */

struct loads {
    unsigned n;
    char keys[MAX_ITEMS][64];
    unsigned char *bufs[MAX_ITEMS];
    size_t nbytes[MAX_ITEMS];
};

static ect_status_t
load_target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    struct loads *l = user;
    (void)n_tokens;
    if (l->n == MAX_ITEMS)
        return ECT_ERR_NO_MEMORY;
    snprintf(l->keys[l->n], sizeof(l->keys[0]), "%s", key);
    l->bufs[l->n] = malloc(nbytes ? nbytes : 1);
    l->nbytes[l->n] = nbytes;
    *dst_p = l->bufs[l->n++];
    return *dst_p != NULL ? ECT_OK : ECT_ERR_NO_MEMORY;
}

/* One step: u32 kind, u32 flags, u32 meta_len, meta.  Reply: u32
 * report_len, report, u32 verified loads, u32 mismatched loads. */
static int
worker_step(ect_worker_t *w, int down, int up, uint32_t flags, const void *meta, size_t len)
{
    if (ect_worker_bind_metadata(w, meta, len) != ECT_OK)
        return 4;
    struct loads l = {0};
    if (ect_worker_start_load(w, load_target, &l, NULL) != ECT_OK)
        return 5;
    if (flags & FLAG_STALL) {
        char c = STALL_SHOWN;
        if (xwrite(up, &c, 1) != 0 || xread(down, &c, 1) != 0)
            return 6;
    }
    const ect_step_meta_t *m = ect_worker_metadata(w);
    unsigned char *srcs[MAX_ITEMS] = {0};
    size_t n_saves = ect_step_meta_n_saves(m);
    for (size_t i = 0; i < n_saves && i < MAX_ITEMS; i++) {
        const ect_step_item_t *it = ect_step_meta_save(m, i);
        size_t n = payload_bytes(it->n_blocks);
        srcs[i] = malloc(n ? n : 1);
        pattern(it->key, srcs[i], n);
        if (ect_worker_save(w, it->key, srcs[i], n, NULL, NULL) != ECT_OK)
            return 7;
    }
    if (ect_worker_get_finished(w) != ECT_OK || ect_worker_wait(w) != ECT_OK)
        return 8;
    uint32_t verified = 0, mismatches = 0;
    for (unsigned i = 0; i < l.n; i++) {
        size_t n = l.nbytes[i] >= 3 ? l.nbytes[i] - 3 : 0;
        unsigned char *want = malloc(n ? n : 1);
        pattern(l.keys[i], want, n);
        verified++;
        mismatches += memcmp(want, l.bufs[i], n) != 0;
        free(want);
        free(l.bufs[i]);
    }
    ect_worker_clear_metadata(w);
    ect_step_report_t *r = NULL;
    if (ect_worker_take_report(w, &r) != ECT_OK)
        return 9;
    size_t cap = r ? ect_step_report_encoded_size(r) : 0, rlen = 0;
    unsigned char *bytes = malloc(cap ? cap : 1);
    if (r != NULL && ect_step_report_encode(r, bytes, cap, &rlen) != ECT_OK)
        return 10;
    uint32_t hdr = (uint32_t)rlen, tail[2] = {verified, mismatches};
    int rc = xwrite(up, &hdr, 4) || xwrite(up, bytes, rlen) || xwrite(up, tail, sizeof(tail));
    free(bytes);
    ect_step_report_destroy(r);
    for (size_t i = 0; i < MAX_ITEMS; i++)
        free(srcs[i]);
    return rc ? 11 : 0;
}

static int
worker_main(const struct ts_step_instance *in, unsigned rank, int down, int up)
{
    ect_worker_params_t p = {
        .config = &in->cfg, .geometry = &in->geom, .instance_id = in->id, .tp_rank = rank};
    ect_worker_t *w = NULL;
    if (ect_worker_create(&p, &w) != ECT_OK)
        return 2;
    int rc = 3;
    for (;;) {
        uint32_t hdr[3];
        if (xread(down, hdr, sizeof(hdr)) != 0)
            break;
        if (hdr[0] == MSG_STOP) {
            rc = 0;
            break;
        }
        unsigned char *meta = malloc(hdr[2] ? hdr[2] : 1);
        if (xread(down, meta, hdr[2]) != 0) {
            free(meta);
            break;
        }
        rc = worker_step(w, down, up, hdr[1], meta, hdr[2]);
        free(meta);
        if (rc != 0)
            break;
        rc = 3;
    }
    ect_worker_destroy(w);
    return rc;
}

/* ---- the scheduler's side ---------------------------------------------- */

struct proc {
    pid_t pid;
    int down, up;
};

static void
spawn_workers(const struct ts_step_instance *in, struct proc *procs, unsigned n)
{
    for (unsigned r = 0; r < n; r++) {
        int down[2], up[2];
        CHECK(pipe(down) == 0 && pipe(up) == 0);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(down[1]);
            close(up[0]);
            for (unsigned k = 0; k < r; k++) {
                close(procs[k].down);
                close(procs[k].up);
            }
            _exit(worker_main(in, r, down[0], up[1]));
        }
        close(down[0]);
        close(up[1]);
        procs[r] = (struct proc){pid, down[1], up[0]};
    }
}

static void
send_step(struct proc *p, const ect_step_meta_t *m, uint32_t flags)
{
    size_t len;
    void *bytes = ts_encode_meta(m, &len);
    uint32_t hdr[3] = {MSG_STEP, flags, (uint32_t)len};
    CHECK(xwrite(p->down, hdr, sizeof(hdr)) == 0);
    CHECK(xwrite(p->down, bytes, len) == 0);
    free(bytes);
}

struct reply {
    unsigned char *report;
    uint32_t len;
    uint32_t verified, mismatches;
};

static void
recv_reply(struct proc *p, struct reply *r)
{
    CHECK_MSG(xread(p->up, &r->len, 4) == 0, "worker %d died before replying", (int)p->pid);
    r->report = malloc(r->len ? r->len : 1);
    uint32_t tail[2];
    CHECK(xread(p->up, r->report, r->len) == 0);
    CHECK(xread(p->up, tail, sizeof(tail)) == 0);
    r->verified = tail[0];
    r->mismatches = tail[1];
}

/* Send one step to every worker and apply their concatenated reports. */
static void
run_step(ect_scheduler_t *s, struct proc *procs, unsigned n, struct reply *replies)
{
    ect_step_meta_t *m = ts_step(s);
    for (unsigned r = 0; r < n; r++)
        send_step(&procs[r], m, 0);
    size_t total = 0;
    for (unsigned r = 0; r < n; r++) {
        recv_reply(&procs[r], &replies[r]);
        total += replies[r].len;
    }
    unsigned char *all = malloc(total ? total : 1), *at = all;
    for (unsigned r = 0; r < n; r++) {
        memcpy(at, replies[r].report, replies[r].len);
        at += replies[r].len;
    }
    CHECK_OK(ect_scheduler_update_connector_output(s, all, total));
    free(all);
    ect_step_meta_destroy(m);
}

static void
free_replies(struct reply *replies, unsigned n)
{
    for (unsigned r = 0; r < n; r++)
        free(replies[r].report);
}

static void
stop_worker(struct proc *p)
{
    uint32_t hdr[3] = {MSG_STOP, 0, 0};
    CHECK(xwrite(p->down, hdr, sizeof(hdr)) == 0);
    int st;
    CHECK(waitpid(p->pid, &st, 0) == p->pid);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "worker %d ended with status %d", (int)p->pid,
              st);
    close(p->down);
    close(p->up);
}

/* Save "img" (3 blocks) through a step on both ranks. */
static void
save_img(ect_scheduler_t *s, struct proc *procs)
{
    struct reply rep[2];
    CHECK(!ect_scheduler_has_cache_item(s, "img"));
    ts_alloc(s, "img", 3);
    run_step(s, procs, 2, rep);
    CHECK(rep[0].len > 0);       /* rank 0 saved */
    CHECK_EQ_U64(rep[1].len, 0); /* rank 1 had nothing to report */
    CHECK(ts_cached(s, "img"));
    free_replies(rep, 2);
}

static void
test_load_needs_both_ranks_reports_across_processes(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct ts_step_instance in;
    ts_step_instance_init(&in, ECT_ROLE_BOTH, 16, true);
    ect_scheduler_t *s = ts_scheduler(&in, 2);
    struct proc procs[2];
    spawn_workers(&in, procs, 2);
    save_img(s, procs);

    CHECK(ect_scheduler_has_cache_item(s, "img"));
    ts_alloc(s, "img", 3);
    ect_step_meta_t *m = ts_step(s);
    CHECK_EQ_U64(ect_step_meta_n_loads(m), 1);
    struct reply rep[2];
    for (unsigned r = 0; r < 2; r++)
        send_step(&procs[r], m, 0);
    for (unsigned r = 0; r < 2; r++) {
        recv_reply(&procs[r], &rep[r]);
        CHECK_EQ_U64(rep[r].verified, 1); /* each rank got the saved bytes */
        CHECK_EQ_U64(rep[r].mismatches, 0);
    }
    /* One rank's report is not enough to release the pin. */
    CHECK_OK(ect_scheduler_update_connector_output(s, rep[0].report, rep[0].len));
    ect_metrics_t mt = ts_metrics(s);
    CHECK_EQ_U64(mt.cache.pins, 1);
    CHECK_EQ_U64(mt.loads_completed, 0);
    CHECK(ect_scheduler_has_pending_push_work(s));
    CHECK_OK(ect_scheduler_update_connector_output(s, rep[1].report, rep[1].len));
    mt = ts_metrics(s);
    CHECK_EQ_U64(mt.cache.pins, 0);
    CHECK_EQ_U64(mt.loads_completed, 1);
    CHECK(mt.load_bytes >= 2 * 3 * TS_STEP_BLOCK); /* both ranks' copies */
    CHECK(!ect_scheduler_has_pending_push_work(s));
    /* A replay of either report changes nothing. */
    CHECK_OK(ect_scheduler_update_connector_output(s, rep[1].report, rep[1].len));
    CHECK_EQ_U64(ts_metrics(s).loads_completed, 1);
    free_replies(rep, 2);
    ect_step_meta_destroy(m);

    for (unsigned r = 0; r < 2; r++)
        stop_worker(&procs[r]);
    ect_scheduler_destroy(s);
    ts_check_gone(in.path);
}

static void
test_sigkill_of_a_worker_mid_step_leaves_the_load_pinned(void)
{
    signal(SIGPIPE, SIG_IGN);
    struct ts_step_instance in;
    ts_step_instance_init(&in, ECT_ROLE_BOTH, 16, true);
    ect_scheduler_t *s = ts_scheduler(&in, 2);
    struct proc procs[2];
    spawn_workers(&in, procs, 2);
    save_img(s, procs);

    ts_alloc(s, "img", 3);
    ect_step_meta_t *m = ts_step(s);
    send_step(&procs[0], m, 0);
    send_step(&procs[1], m, FLAG_STALL);
    char c = 0;
    CHECK(xread(procs[1].up, &c, 1) == 0 && c == STALL_SHOWN); /* mid-step */
    CHECK(kill(procs[1].pid, SIGKILL) == 0);
    int st;
    CHECK(waitpid(procs[1].pid, &st, 0) == procs[1].pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    close(procs[1].down);
    close(procs[1].up);
    struct reply rep;
    recv_reply(&procs[0], &rep);
    CHECK_EQ_U64(rep.mismatches, 0);
    CHECK_OK(ect_scheduler_update_connector_output(s, rep.report, rep.len));
    free(rep.report);
    ect_step_meta_destroy(m);

    /* The load waits for a report that will never come: the entry stays
     * pinned and the instance has pending work. */
    ect_metrics_t mt = ts_metrics(s);
    CHECK_EQ_U64(mt.cache.pins, 1);
    CHECK_EQ_U64(mt.cache.entries_pinned, 1);
    CHECK_EQ_U64(mt.loads_completed, 0);
    CHECK(ect_scheduler_has_pending_push_work(s));
    CHECK(ts_cached(s, "img"));

    /* Consistent otherwise: the surviving rank saves a new item, and a save
     * that would need the pinned blocks is skipped rather than evicting
     * them. */
    ts_alloc(s, "other", 2);
    struct reply one;
    run_step(s, procs, 1, &one);
    free_replies(&one, 1);
    CHECK(ts_cached(s, "other"));
    ts_alloc(s, "huge", 14);
    m = ts_step(s);
    CHECK_EQ_U64(ect_step_meta_n_saves(m), 0);
    ect_step_meta_destroy(m);
    CHECK_EQ_U64(ts_metrics(s).saves_skipped_full, 1);
    CHECK(ts_cached(s, "img"));
    CHECK_EQ_U64(ts_metrics(s).cache.pins, 1);

    /* Tearing down releases everything: nothing stays in /dev/shm. */
    stop_worker(&procs[0]);
    ect_scheduler_destroy(s);
    ts_check_gone(in.path);
}

/* ---- the reference engine loop with a worker killed ----------------------- */

/* Live (not zombie) children of parent, from /proc. */
static size_t
children_of(pid_t parent, pid_t *out, size_t cap)
{
    size_t n = ect_test_children(parent, 0, out, cap);
    return n < cap ? n : cap;
}

static void
test_demo_fails_cleanly_when_a_worker_is_killed(void)
{
    /* Its log where this case removes it (by default the demo keeps one
     * in $TMPDIR for its user). */
    char log[128];
    snprintf(log, sizeof(log), "/tmp/ectt_demo_kill_%d.log", (int)getpid());
    int out[2];
    CHECK(pipe(out) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t demo = fork();
    CHECK(demo >= 0);
    if (demo == 0) {
        dup2(out[1], STDOUT_FILENO);
        dup2(out[1], STDERR_FILENO);
        close(out[0]);
        close(out[1]);
        execl(ECT_CLI_PATH, "ectier", "demo", "--no-progress", "--log", log, (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    /* Catch it while its two workers run, and kill one mid-run. */
    pid_t kids[4];
    size_t n = 0;
    for (int polls = 0; polls < 20000 && n < 2; polls++) {
        int st;
        CHECK_MSG(waitpid(demo, &st, WNOHANG) == 0, "the demo ended before its workers were seen");
        n = children_of(demo, kids, 4);
        if (n < 2)
            nanosleep(&(struct timespec){0, 200 * 1000}, NULL);
    }
    CHECK_EQ_U64(n, 2);
    /* No CHECK while it is stopped: a failing case must not leave it so. */
    CHECK(kill(demo, SIGSTOP) == 0);
    n = children_of(demo, kids, 4);
    int killed = n == 2 && kill(kids[1], SIGKILL) == 0;
    kill(demo, SIGCONT);
    if (!killed)
        kill(demo, SIGKILL);
    CHECK_EQ_U64(n, 2);
    CHECK(killed);

    static char text[65536];
    size_t len = 0;
    ssize_t got;
    while ((got = read(out[0], text + len, sizeof(text) - 1 - len)) > 0 ||
           (got < 0 && errno == EINTR))
        if (got > 0)
            len += (size_t)got;
    text[len] = '\0';
    close(out[0]);
    int st;
    CHECK(waitpid(demo, &st, 0) == demo);
    unlink(log);
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 1,
              "the demo should fail with exit status 1, not %s %d:\n%s",
              WIFSIGNALED(st) ? "signal" : "status",
              WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), text);
    CHECK_CONTAINS(text, "the engine loop failed");
    CHECK_EQ_U64(children_of(demo, kids, 4), 0);
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/ectier_loop%d_dp0.mmap", (int)demo);
    ts_check_gone(path);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_load_needs_both_ranks_reports_across_processes),
    ECT_CASE(test_sigkill_of_a_worker_mid_step_leaves_the_load_pinned),
    ECT_CASE(test_demo_fails_cleanly_when_a_worker_is_killed),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
