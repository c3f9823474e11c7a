/*
 * The CPU copy engine (src/copy/cpu.c) with real memory: random non-zero
 * bytes moved through plans between heap "engine" buffers and a real
 * /dev/shm mapping (created, mapped twice and unlinked by each case), with
 * poisoned bytes around every destination to prove nothing else is written.
 * Concurrency cases are meant for the thread sanitizer build as much as for
 * the plain one: a reader that learns "landed" must see the bytes.  No case
 * asserts timing; batches are kept in flight deterministically with
 * ect__copy_cpu_hold.  Where and how a batch is copied (on the caller or
 * handed off, polling, the learned choices, the kernels) is
 * test_copy_cpu_placement.c.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include <ectier/ectier.h>

#include "copy/cpu.h"
#include "copy/plan.h"
#include "harness.h"
#include "support/util.h"

#define BS     7168u /* 3584 hidden x bf16 */
#define POISON 0xEE

/* A /dev/shm file mapped twice (as the scheduler and a worker would map the
 * region); the name is unlinked before any check can fail, so nothing stays
 * behind. */
struct shm_pair {
    unsigned char *a, *b;
    size_t len;
};

static struct shm_pair
map_shm(size_t len)
{
    char name[64], path[128];
    ect_test_unique_name(name, sizeof(name), "ectt_copycpu_");
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK_MSG(fd >= 0, "create %s", path);
    int sized = ftruncate(fd, (off_t)len);
    void *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    void *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    unlink(path);
    close(fd);
    CHECK(sized == 0 && a != MAP_FAILED && b != MAP_FAILED && a != b);
    return (struct shm_pair){.a = a, .b = b, .len = len};
}

static void
unmap_shm(struct shm_pair *m)
{
    munmap(m->a, m->len);
    munmap(m->b, m->len);
}

static ect_copy_engine_t *
make_engine(unsigned threads, size_t split)
{
    ect_copy_cpu_params_t params = {.threads = threads, .split_bytes = split};
    ect_copy_engine_t *e = NULL;
    CHECK_OK(ect_copy_engine_create_cpu(&params, &e));
    CHECK(e != NULL);
    return e;
}

/* Plan one entry and move it, waiting for it to land. */
static void
move_entry(ect_copy_engine_t *e, ect_copy_dir_t dir, void *region, const ect_run_t *runs,
           size_t n_runs, void *engine_buf, uint64_t payload)
{
    ect_copy_region_view_t rv = {.base = region, .block_size = BS, .num_blocks = 10};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, dir, &rv, runs, n_runs, engine_buf, payload));
    ect_copy_batch_t batch = {.dir = dir, .ops = plan.ops, .n_ops = plan.n_ops};
    uint64_t ticket = 0;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &ticket));
    ect__copy_plan_cleanup(&plan); /* submit copied the ops */
    CHECK_OK(ect_copy_engine_wait(e, ticket));
}

/* Save `payload` bytes into blocks 7, 2, 5, 0 of a 10-block shm region
 * through mapping a, check every block through mapping b, then load them back
 * into a fresh buffer. */
static void
save_and_load_scattered(uint64_t payload)
{
    const uint64_t ids[] = {7, 2, 5, 0};
    const ect_run_t runs[] = {{7, 1}, {2, 1}, {5, 1}, {0, 1}};
    struct shm_pair m = map_shm(10 * BS);
    memset(m.a, POISON, m.len);
    unsigned char *src = ts_xmalloc(payload);
    ts_fill_nonzero(src, payload, payload);
    ect_copy_engine_t *e = make_engine(2, 0);

    move_entry(e, ECT_COPY_SAVE, m.a, runs, 4, src, payload);

    int assigned[10] = {0};
    for (uint64_t k = 0; k < 4; k++) {
        uint64_t off = k * BS;
        unsigned char *blk = m.b + ids[k] * BS;
        assigned[ids[k]] = 1;
        uint64_t n = off >= payload ? 0 : (payload - off < BS ? payload - off : BS);
        CHECK_MSG(memcmp(blk, src + off, n) == 0, "block %llu holds the wrong bytes",
                  (unsigned long long)ids[k]);
        CHECK_MSG(ts_all_bytes_are(blk + n, BS - n, POISON),
                  "block %llu was written past the payload's tail", (unsigned long long)ids[k]);
    }
    for (int id = 0; id < 10; id++)
        if (!assigned[id])
            CHECK_MSG(ts_all_bytes_are(m.b + (size_t)id * BS, BS, POISON),
                      "unassigned block %d was written", id);

    /* Load through the other mapping into a buffer with a guard after the
     * payload: the exact tail must hold there too. */
    unsigned char *dst = ts_xmalloc(payload + 64);
    memset(dst, POISON, payload + 64);
    move_entry(e, ECT_COPY_LOAD, m.b, runs, 4, dst, payload);
    CHECK(memcmp(dst, src, payload) == 0);
    CHECK(ts_all_bytes_are(dst + payload, 64, POISON));

    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
    unmap_shm(&m);
}

static void
test_exact_fit_round_trips_through_scattered_shm_blocks(void)
{
    save_and_load_scattered(4 * BS);
}

static void
test_partial_last_block_leaves_rest_of_block_untouched(void)
{
    save_and_load_scattered(3 * BS + 100);
}

static void
test_short_payload_leaves_later_blocks_untouched(void)
{
    save_and_load_scattered(2 * BS + 1);
}

static void
test_contiguous_blocks_round_trip_as_one_copy(void)
{
    const ect_run_t runs[] = {{1, 3}, {4, 5}};
    struct shm_pair m = map_shm(10 * BS);
    memset(m.a, POISON, m.len);
    uint64_t payload = 8 * BS - 17;
    unsigned char *src = ts_xmalloc(payload), *dst = ts_xmalloc(payload);
    ts_fill_nonzero(src, payload, 99);
    ect_copy_region_view_t rv = {.base = m.a, .block_size = BS, .num_blocks = 10};
    ect_copy_plan_t plan;
    ect__copy_plan_init(&plan);
    CHECK_OK(ect__copy_plan_add(&plan, ECT_COPY_SAVE, &rv, runs, 2, src, payload));
    CHECK_EQ_U64(plan.n_ops, 1);
    ect__copy_plan_cleanup(&plan);

    ect_copy_engine_t *e = make_engine(0, 0);
    move_entry(e, ECT_COPY_SAVE, m.a, runs, 2, src, payload);
    CHECK(ts_all_bytes_are(m.b, BS, POISON));
    CHECK(memcmp(m.b + BS, src, payload) == 0);
    CHECK(ts_all_bytes_are(m.b + BS + payload, 17 + BS, POISON));
    move_entry(e, ECT_COPY_LOAD, m.b, runs, 2, dst, payload);
    CHECK(memcmp(dst, src, payload) == 0);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
    unmap_shm(&m);
}

static void
test_split_batches_copy_every_byte_across_piece_boundaries(void)
{
    /* With 4 KiB pieces, odd-sized ops from tiny to several MiB are cut at
     * every possible place: inside ops, at op ends, across many small ops. */
    enum { N_OPS = 300 };
    size_t lens[N_OPS], total = 0;
    uint64_t x = 12345;
    for (int i = 0; i < N_OPS; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        lens[i] = i % 50 == 0 ? (size_t)(1 << 20) + (x >> 50) : 1 + (size_t)(x >> 51);
        total += lens[i];
    }
    unsigned char *src = ts_xmalloc(total), *dst = ts_xmalloc(total + N_OPS);
    ts_fill_nonzero(src, total, 7);
    memset(dst, POISON, total + N_OPS);
    /* Destination ops are spaced one poison byte apart. */
    ect_copy_op_t ops[N_OPS];
    size_t s_off = 0, d_off = 0;
    for (int i = 0; i < N_OPS; i++) {
        ops[i] = (ect_copy_op_t){.dst = dst + d_off, .src = src + s_off, .len = lens[i]};
        s_off += lens[i];
        d_off += lens[i] + 1;
    }
    ect_copy_engine_t *e = make_engine(3, 4096);
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = ops, .n_ops = N_OPS};
    uint64_t ticket;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &ticket));
    CHECK_OK(ect_copy_engine_wait(e, ticket));
    s_off = d_off = 0;
    for (int i = 0; i < N_OPS; i++) {
        CHECK_MSG(memcmp(dst + d_off, src + s_off, lens[i]) == 0, "op %d differs", i);
        CHECK_MSG(dst[d_off + lens[i]] == POISON, "op %d wrote past its end", i);
        s_off += lens[i];
        d_off += lens[i] + 1;
    }
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

static void
test_batches_in_flight_land_in_any_order(void)
{
    enum { N = 12, LEN = 300 * 1000 };
    unsigned char *src = ts_xmalloc(LEN), *dst[N];
    ts_fill_nonzero(src, LEN, 3);
    ect_copy_engine_t *e = make_engine(2, 64 * 1024);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    uint64_t tickets[N];
    for (int i = 0; i < N; i++) {
        dst[i] = ts_xmalloc(LEN);
        memset(dst[i], 0, LEN);
        ect_copy_op_t op = {.dst = dst[i], .src = src, .len = LEN};
        ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
        CHECK_OK(ect_copy_engine_submit(e, &batch, &tickets[i]));
        if (i > 0)
            CHECK(tickets[i] > tickets[i - 1]);
    }
    for (int i = 0; i < N; i++)
        CHECK_STATUS(ect_copy_engine_query(e, tickets[i]), ECT_ERR_BUSY);
    /* While the copy threads are held, waiting lands batches in the order
     * the waiter picks: the newest first, then every other one. */
    const int order[] = {11, 9, 7, 5, 3, 1};
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        int i = order[k];
        CHECK_OK(ect_copy_engine_wait(e, tickets[i]));
        CHECK_MSG(memcmp(dst[i], src, LEN) == 0, "batch %d landed with wrong bytes", i);
        CHECK_STATUS(ect_copy_engine_query(e, tickets[i]), ECT_ERR_NOT_FOUND);
        if (i > 0)
            CHECK_STATUS(ect_copy_engine_query(e, tickets[i - 1]), ECT_ERR_BUSY);
    }
    /* The rest land through the copy threads. */
    CHECK_OK(ect__copy_cpu_hold(e, false));
    for (int i = 10; i >= 0; i -= 2) {
        CHECK_OK(ect_copy_engine_wait(e, tickets[i]));
        CHECK(memcmp(dst[i], src, LEN) == 0);
    }
    ect_copy_engine_destroy(e);
    for (int i = 0; i < N; i++)
        free(dst[i]);
    free(src);
}

static void
test_query_reports_busy_until_landed_then_retires(void)
{
    enum { LEN = 1 << 20 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 5);
    memset(dst, 0, LEN);
    ect_copy_engine_t *e = make_engine(1, 0);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_BUSY);
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_BUSY);
    CHECK(ts_all_bytes_are(dst, LEN, 0)); /* queries never copy */
    CHECK_OK(ect__copy_cpu_hold(e, false));
    ect_status_t s;
    while ((s = ect_copy_engine_query(e, t)) == ECT_ERR_BUSY)
        nanosleep(&(struct timespec){0, 100 * 1000}, NULL);
    CHECK_OK(s);
    CHECK(memcmp(dst, src, LEN) == 0);
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_copy_engine_wait(e, t), ECT_ERR_NOT_FOUND);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

struct poller {
    ect_copy_engine_t *e;
    uint64_t ticket;
    int use_wait;
    const unsigned char *src, *dst;
    size_t len;
    int ok;
};

static void *
poller_main(void *arg)
{
    struct poller *p = arg;
    ect_status_t s;
    if (p->use_wait) {
        s = ect_copy_engine_wait(p->e, p->ticket);
    } else {
        while ((s = ect_copy_engine_query(p->e, p->ticket)) == ECT_ERR_BUSY)
            nanosleep(&(struct timespec){0, 50 * 1000}, NULL);
    }
    /* Reading dst here is the point: TSAN reports a race if "landed" did
     * not order the copier's writes before this read. */
    p->ok = s == ECT_OK && memcmp(p->dst, p->src, p->len) == 0;
    return NULL;
}

static void
test_landed_bytes_are_visible_to_other_threads(void)
{
    enum { LEN = 3 << 20 };
    unsigned char *src = ts_xmalloc(LEN), *d1 = ts_xmalloc(LEN), *d2 = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 11);
    memset(d1, 0, LEN);
    memset(d2, 0, LEN);
    ect_copy_engine_t *e = make_engine(2, 256 * 1024);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    ect_copy_op_t op1 = {.dst = d1, .src = src, .len = LEN};
    ect_copy_op_t op2 = {.dst = d2, .src = src, .len = LEN};
    ect_copy_batch_t b1 = {.dir = ECT_COPY_LOAD, .ops = &op1, .n_ops = 1};
    ect_copy_batch_t b2 = {.dir = ECT_COPY_LOAD, .ops = &op2, .n_ops = 1};
    uint64_t t1, t2;
    CHECK_OK(ect_copy_engine_submit(e, &b1, &t1));
    CHECK_OK(ect_copy_engine_submit(e, &b2, &t2));
    struct poller p1 = {.e = e, .ticket = t1, .use_wait = 0, .src = src, .dst = d1, .len = LEN};
    struct poller p2 = {.e = e, .ticket = t2, .use_wait = 1, .src = src, .dst = d2, .len = LEN};
    pthread_t th1, th2;
    CHECK(pthread_create(&th1, NULL, poller_main, &p1) == 0);
    CHECK(pthread_create(&th2, NULL, poller_main, &p2) == 0);
    nanosleep(&(struct timespec){0, 2 * 1000 * 1000}, NULL);
    CHECK_OK(ect__copy_cpu_hold(e, false));
    pthread_join(th1, NULL);
    pthread_join(th2, NULL);
    CHECK(p1.ok);
    CHECK(p2.ok);
    ect_copy_engine_destroy(e);
    free(d2);
    free(d1);
    free(src);
}

enum { SUBMITTERS = 4, PER_SUBMITTER = 150 };

struct submitter {
    ect_copy_engine_t *e;
    int id;
    uint64_t tickets[PER_SUBMITTER];
    int failures;
};

static void *
submitter_main(void *arg)
{
    struct submitter *s = arg;
    enum { LEN = 40 * 1000 };
    unsigned char *src = malloc(3 * LEN), *dst = malloc(3 * LEN);
    if (src == NULL || dst == NULL) {
        s->failures++;
        goto out;
    }
    for (int i = 0; i < PER_SUBMITTER; i++) {
        size_t len = LEN - (size_t)(i * 97 % 1000);
        ts_fill_nonzero(src, 3 * LEN, (uint64_t)(s->id * 100000 + i));
        memset(dst, 0, 3 * LEN);
        /* Three ops, submitted in reverse order of their addresses. */
        ect_copy_op_t ops[3];
        for (int k = 0; k < 3; k++)
            ops[k] =
                (ect_copy_op_t){.dst = dst + (2 - k) * LEN, .src = src + (2 - k) * LEN, .len = len};
        ect_copy_batch_t batch = {.dir = (ect_copy_dir_t)(i & 1), .ops = ops, .n_ops = 3};
        if (ect_copy_engine_submit(s->e, &batch, &s->tickets[i]) != ECT_OK) {
            s->failures++;
            continue;
        }
        /* Alternate wait and polling query to exercise both paths. */
        ect_status_t st;
        if (i % 3 == 0) {
            while ((st = ect_copy_engine_query(s->e, s->tickets[i])) == ECT_ERR_BUSY)
                sched_yield();
        } else {
            st = ect_copy_engine_wait(s->e, s->tickets[i]);
        }
        if (st != ECT_OK)
            s->failures++;
        for (int k = 0; k < 3; k++)
            if (memcmp(dst + k * LEN, src + k * LEN, len) != 0 ||
                (len < LEN && dst[k * LEN + len] != 0))
                s->failures++;
    }
out:
    free(dst);
    free(src);
    return NULL;
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void
test_many_threads_submit_concurrently(void)
{
    ect_copy_engine_t *e = make_engine(2, 16 * 1024);
    static struct submitter subs[SUBMITTERS];
    pthread_t th[SUBMITTERS];
    for (int i = 0; i < SUBMITTERS; i++) {
        subs[i] = (struct submitter){.e = e, .id = i};
        CHECK(pthread_create(&th[i], NULL, submitter_main, &subs[i]) == 0);
    }
    for (int i = 0; i < SUBMITTERS; i++)
        pthread_join(th[i], NULL);
    static uint64_t all[SUBMITTERS * PER_SUBMITTER];
    size_t n = 0;
    for (int i = 0; i < SUBMITTERS; i++) {
        CHECK_EQ_INT(subs[i].failures, 0);
        for (int k = 0; k < PER_SUBMITTER; k++) {
            if (k > 0)
                CHECK(subs[i].tickets[k] > subs[i].tickets[k - 1]);
            all[n++] = subs[i].tickets[k];
        }
    }
    qsort(all, n, sizeof(all[0]), cmp_u64);
    for (size_t k = 1; k < n; k++)
        CHECK_MSG(all[k] != all[k - 1], "ticket %llu issued twice", (unsigned long long)all[k]);
    ect_copy_engine_destroy(e);
}

static void
test_empty_batch_lands_at_once(void)
{
    ect_copy_engine_t *e = make_engine(1, 0);
    CHECK_OK(ect__copy_cpu_hold(e, true)); /* landing must not need a copy thread */
    ect_copy_batch_t empty = {.dir = ECT_COPY_SAVE, .ops = NULL, .n_ops = 0};
    uint64_t t1, t2, t3;
    CHECK_OK(ect_copy_engine_submit(e, &empty, &t1));
    CHECK_OK(ect_copy_engine_query(e, t1));
    CHECK_STATUS(ect_copy_engine_query(e, t1), ECT_ERR_NOT_FOUND);
    /* Zero-length ops may carry NULL pointers and count as nothing. */
    ect_copy_op_t zeros[2] = {{NULL, NULL, 0}, {NULL, NULL, 0}};
    ect_copy_batch_t nothing = {.dir = ECT_COPY_LOAD, .ops = zeros, .n_ops = 2};
    CHECK_OK(ect_copy_engine_submit(e, &nothing, &t2));
    CHECK_OK(ect_copy_engine_submit(e, &empty, &t3));
    CHECK(t1 < t2 && t2 < t3);
    CHECK_OK(ect_copy_engine_wait(e, t3));
    CHECK_OK(ect_copy_engine_wait(e, t2));
    ect_copy_engine_destroy(e);
}

static void
test_retired_and_unknown_tickets_are_not_found(void)
{
    unsigned char src[4096], dst[4096];
    ts_fill_nonzero(src, sizeof(src), 1);
    ect_copy_engine_t *e = make_engine(2, 0);
    ect_copy_op_t op = {.dst = dst, .src = src, .len = sizeof(src)};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    uint64_t t1, t2;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t1));
    CHECK_OK(ect_copy_engine_wait(e, t1));
    CHECK_STATUS(ect_copy_engine_wait(e, t1), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), "not in flight");
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t2));
    ect_status_t s;
    while ((s = ect_copy_engine_query(e, t2)) == ECT_ERR_BUSY)
        sched_yield();
    CHECK_OK(s);
    CHECK_STATUS(ect_copy_engine_wait(e, t2), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_copy_engine_query(e, 0), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_copy_engine_query(e, t2 + 1), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_copy_engine_wait(e, UINT64_MAX), ECT_ERR_NOT_FOUND);
    ect_copy_engine_destroy(e);
}

static void
test_destroy_lands_batches_still_in_flight(void)
{
    enum { N = 6, LEN = 2 << 20 };
    unsigned char *src = ts_xmalloc(LEN), *dst[N];
    ts_fill_nonzero(src, LEN, 17);
    ect_copy_engine_t *e = make_engine(2, 512 * 1024);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    for (int i = 0; i < N; i++) {
        dst[i] = ts_xmalloc(LEN);
        memset(dst[i], 0, LEN);
        ect_copy_op_t op = {.dst = dst[i], .src = src, .len = LEN};
        ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
        uint64_t t;
        CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
        CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_BUSY);
    }
    /* Never queried, still held: destroy must land all of them anyway
     * (and the sanitizer build checks it frees every record). */
    ect_copy_engine_destroy(e);
    for (int i = 0; i < N; i++) {
        CHECK_MSG(memcmp(dst[i], src, LEN) == 0, "batch %d did not land before destroy", i);
        free(dst[i]);
    }
    free(src);
}

static void
test_invalid_arguments_are_rejected(void)
{
    ect_copy_engine_t *e = NULL;
    ect_copy_cpu_params_t too_many = {.threads = 65};
    CHECK_STATUS(ect_copy_engine_create_cpu(&too_many, &e), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "threads 65");
    ect_copy_cpu_params_t tiny = {.split_bytes = 100};
    CHECK_STATUS(ect_copy_engine_create_cpu(&tiny, &e), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "split_bytes 100");
    CHECK(e == NULL); /* output written only on success */
    CHECK_STATUS(ect_copy_engine_create_cpu(NULL, NULL), ECT_ERR_INVALID_ARG);

    CHECK_OK(ect_copy_engine_create_cpu(NULL, &e));
    CHECK_STR_EQ(ect_copy_engine_kind(e), "cpu");
    unsigned char a[256], b[256];
    uint64_t t = 42;
    ect_copy_op_t op = {.dst = a, .src = b, .len = sizeof(a)};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    CHECK_STATUS(ect_copy_engine_submit(NULL, &batch, &t), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_copy_engine_submit(e, NULL, &t), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_copy_engine_submit(e, &batch, NULL), ECT_ERR_INVALID_ARG);
    ect_copy_batch_t bad_dir = {.dir = (ect_copy_dir_t)2, .ops = &op, .n_ops = 1};
    CHECK_STATUS(ect_copy_engine_submit(e, &bad_dir, &t), ECT_ERR_INVALID_ARG);
    ect_copy_batch_t no_ops = {.dir = ECT_COPY_SAVE, .ops = NULL, .n_ops = 3};
    CHECK_STATUS(ect_copy_engine_submit(e, &no_ops, &t), ECT_ERR_INVALID_ARG);
    ect_copy_op_t null_dst = {.dst = NULL, .src = b, .len = 8};
    ect_copy_batch_t b_null = {.dir = ECT_COPY_SAVE, .ops = &null_dst, .n_ops = 1};
    CHECK_STATUS(ect_copy_engine_submit(e, &b_null, &t), ECT_ERR_INVALID_ARG);
    /* memcpy's contract: no overlap, no wrap. */
    ect_copy_op_t overlap = {.dst = a + 10, .src = a, .len = 100};
    ect_copy_batch_t b_overlap = {.dir = ECT_COPY_SAVE, .ops = &overlap, .n_ops = 1};
    CHECK_STATUS(ect_copy_engine_submit(e, &b_overlap, &t), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "overlapping");
    ect_copy_op_t wrap[2] = {{a, b, 16}, {(void *)(UINTPTR_MAX - 10), b, 100}};
    ect_copy_batch_t b_wrap = {.dir = ECT_COPY_SAVE, .ops = wrap, .n_ops = 2};
    CHECK_STATUS(ect_copy_engine_submit(e, &b_wrap, &t), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "op 1");
    CHECK_EQ_U64(t, 42); /* no failed submit wrote a ticket */

    CHECK_STATUS(ect_copy_engine_query(NULL, 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_copy_engine_wait(NULL, 1), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__copy_cpu_shutdown(NULL), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect__copy_cpu_hold(NULL, true), ECT_ERR_INVALID_ARG);
    CHECK_EQ_U64(ect__copy_cpu_alloc_count(NULL), 0);
    CHECK_STR_EQ(ect_copy_engine_kind(NULL), "none");
    ect_copy_engine_destroy(NULL);

    /* The engine still works after all that. */
    ts_fill_nonzero(b, sizeof(b), 2);
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK(memcmp(a, b, sizeof(a)) == 0);
    ect_copy_engine_destroy(e);
}

static void
test_host_registrations_are_recorded(void)
{
    struct shm_pair m = map_shm(16 * 4096);
    ect_copy_engine_t *e = make_engine(1, 0);
    CHECK_OK(ect_copy_engine_register_host(e, m.a, m.len));
    CHECK_OK(ect_copy_engine_register_host(e, m.b, m.len));
    CHECK_STATUS(ect_copy_engine_register_host(e, m.a + 4096, 4096), ECT_ERR_EXISTS);
    CHECK_CONTAINS(ect_last_error(), "overlaps");
    CHECK_STATUS(ect_copy_engine_unregister_host(e, m.a + 4096), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_copy_engine_register_host(e, NULL, 10), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_copy_engine_register_host(e, m.a, 0), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_copy_engine_register_host(e, (void *)(UINTPTR_MAX - 10), 100),
                 ECT_ERR_INVALID_ARG);
    CHECK_OK(ect_copy_engine_unregister_host(e, m.a));
    CHECK_STATUS(ect_copy_engine_unregister_host(e, m.a), ECT_ERR_NOT_FOUND);
    CHECK_OK(ect_copy_engine_register_host(e, m.a, m.len)); /* registrable again */
    /* Many ranges grow the table; destroy releases those still registered. */
    static unsigned char heap[64][64];
    for (int i = 0; i < 64; i++)
        CHECK_OK(ect_copy_engine_register_host(e, heap[i], sizeof(heap[i])));
    for (int i = 0; i < 64; i += 2)
        CHECK_OK(ect_copy_engine_unregister_host(e, heap[i]));
    ect_copy_engine_destroy(e);
    unmap_shm(&m);
}

static void
test_submit_after_shutdown_fails_but_old_tickets_answer_once(void)
{
    enum { LEN = 1 << 20 };
    unsigned char *src = ts_xmalloc(LEN), *dst = ts_xmalloc(LEN);
    ts_fill_nonzero(src, LEN, 23);
    memset(dst, 0, LEN);
    ect_copy_engine_t *e = make_engine(2, 0);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    ect_copy_op_t op = {.dst = dst, .src = src, .len = LEN};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    uint64_t t, t2 = 0;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_OK(ect__copy_cpu_shutdown(e)); /* lands t despite the hold */
    CHECK(memcmp(dst, src, LEN) == 0);
    CHECK_STATUS(ect_copy_engine_submit(e, &batch, &t2), ECT_ERR_SHUTDOWN);
    CHECK_CONTAINS(ect_last_error(), "shut down");
    CHECK_EQ_U64(t2, 0);
    CHECK_OK(ect__copy_cpu_shutdown(e)); /* idempotent */
    CHECK_OK(ect_copy_engine_query(e, t));
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_NOT_FOUND);
    ect_copy_engine_destroy(e);
    free(dst);
    free(src);
}

static void
submit_and_wait(ect_copy_engine_t *e, ect_copy_op_t *ops, size_t n)
{
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = ops, .n_ops = n};
    uint64_t t;
    CHECK_OK(ect_copy_engine_submit(e, &batch, &t));
    CHECK_OK(ect_copy_engine_wait(e, t));
}

static void
test_warm_engine_does_not_allocate_per_submit(void)
{
    enum { MAX_OPS = 64, SEG = 512 };
    static unsigned char src[MAX_OPS * SEG], dst[MAX_OPS * SEG];
    ect_copy_op_t ops[MAX_OPS];
    for (int i = 0; i < MAX_OPS; i++)
        ops[i] = (ect_copy_op_t){.dst = dst + i * SEG, .src = src + i * SEG, .len = SEG};
    ect_copy_engine_t *e = make_engine(2, 0);
    /* Warm up: one batch of the largest size lets the pooled record grow. */
    submit_and_wait(e, ops, MAX_OPS);
    uint64_t warm = ect__copy_cpu_alloc_count(e);
    CHECK(warm > 0); /* the counter does count */
    for (int i = 0; i < 2000; i++) {
        ts_fill_nonzero(src, sizeof(src), (uint64_t)i);
        size_t n = 1 + (size_t)(i * 7) % MAX_OPS;
        submit_and_wait(e, ops, n);
        CHECK(memcmp(dst, src, n * SEG) == 0);
    }
    CHECK_EQ_U64(ect__copy_cpu_alloc_count(e), warm);
    /* A larger batch than ever before does need a bigger op array. */
    static ect_copy_op_t more[MAX_OPS * 2];
    for (int i = 0; i < MAX_OPS * 2; i++)
        more[i] = (ect_copy_op_t){
            .dst = dst + (i % MAX_OPS) * SEG, .src = src + (i % MAX_OPS) * SEG, .len = SEG};
    submit_and_wait(e, more, MAX_OPS * 2);
    CHECK(ect__copy_cpu_alloc_count(e) > warm);
    ect_copy_engine_destroy(e);
}

static void
test_old_unretired_ticket_stays_answerable(void)
{
    /* One ticket left unretired while thousands of later ones come and go:
     * it must stay findable, and the table must not grow with the distance
     * between the oldest and newest ticket. */
    unsigned char src[1024], dst[1024], old_dst[1024];
    ts_fill_nonzero(src, sizeof(src), 31);
    memset(old_dst, 0, sizeof(old_dst));
    ect_copy_op_t op = {.dst = dst, .src = src, .len = sizeof(src)};
    ect_copy_op_t old_op = {.dst = old_dst, .src = src, .len = sizeof(src)};
    ect_copy_engine_t *e = make_engine(2, 0);
    ect_copy_batch_t old_batch = {.dir = ECT_COPY_LOAD, .ops = &old_op, .n_ops = 1};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = &op, .n_ops = 1};
    uint64_t old;
    CHECK_OK(ect_copy_engine_submit(e, &old_batch, &old));
    for (int i = 0; i < 200; i++)
        submit_and_wait(e, &op, 1);
    uint64_t warm = ect__copy_cpu_alloc_count(e);
    for (int i = 0; i < 20000; i++)
        submit_and_wait(e, &op, 1);
    CHECK_EQ_U64(ect__copy_cpu_alloc_count(e), warm);
    CHECK_OK(ect_copy_engine_wait(e, old));
    CHECK(memcmp(old_dst, src, sizeof(src)) == 0);
    CHECK_STATUS(ect_copy_engine_query(e, old), ECT_ERR_NOT_FOUND);

    /* And many unretired tickets at once grow the table and all stay
     * answerable exactly once.  They share one destination, so the copy
     * threads are held and each wait lands its own batch, one at a time. */
    enum { LIVE = 1000 };
    static uint64_t live[LIVE];
    CHECK_OK(ect__copy_cpu_hold(e, true));
    for (int i = 0; i < LIVE; i++)
        CHECK_OK(ect_copy_engine_submit(e, &batch, &live[i]));
    for (int i = 0; i < LIVE; i += 2)
        CHECK_OK(ect_copy_engine_wait(e, live[i]));
    for (int i = 1; i < LIVE; i += 2)
        CHECK_OK(ect_copy_engine_wait(e, live[i]));
    for (int i = 0; i < LIVE; i++)
        CHECK_STATUS(ect_copy_engine_query(e, live[i]), ECT_ERR_NOT_FOUND);
    ect_copy_engine_destroy(e);
}

static void
test_tickets_sharing_a_table_slot_stay_answerable(void)
{
    /* Keep every 64th ticket unretired while the ones between come and go:
     * whatever power-of-two size the ticket table has (64 to 512 here), the
     * kept tickets pile onto shared slots.  Retiring them in an order that
     * punches holes in the middle of such chains must not hide the rest.
     * The copy threads are held so kept tickets stay in flight (a query
     * answers BUSY without retiring them); waits land batches themselves. */
    enum { KEPT = 8, STRIDE = 64 };
    unsigned char src[512], dst[512];
    ts_fill_nonzero(src, sizeof(src), 41);
    ect_copy_op_t op = {.dst = dst, .src = src, .len = sizeof(src)};
    ect_copy_batch_t batch = {.dir = ECT_COPY_SAVE, .ops = &op, .n_ops = 1};
    ect_copy_engine_t *e = make_engine(2, 0);
    CHECK_OK(ect__copy_cpu_hold(e, true));
    uint64_t kept[KEPT];
    for (int k = 0; k < KEPT; k++) {
        CHECK_OK(ect_copy_engine_submit(e, &batch, &kept[k]));
        if (k > 0)
            CHECK_EQ_U64(kept[k] - kept[k - 1], STRIDE);
        for (int i = 0; i < STRIDE - 1; i++)
            submit_and_wait(e, &op, 1);
    }
    const int order[KEPT] = {3, 0, 6, 1, 7, 2, 5, 4};
    for (int k = 0; k < KEPT; k++) {
        CHECK_MSG(ect_copy_engine_wait(e, kept[order[k]]) == ECT_OK, "kept ticket %d lost",
                  order[k]);
        for (int j = k + 1; j < KEPT; j++)
            CHECK_MSG(ect_copy_engine_query(e, kept[order[j]]) == ECT_ERR_BUSY,
                      "retiring ticket %d hid ticket %d", order[k], order[j]);
    }
    ect_copy_engine_destroy(e);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_exact_fit_round_trips_through_scattered_shm_blocks),
    ECT_CASE(test_partial_last_block_leaves_rest_of_block_untouched),
    ECT_CASE(test_short_payload_leaves_later_blocks_untouched),
    ECT_CASE(test_contiguous_blocks_round_trip_as_one_copy),
    ECT_CASE(test_split_batches_copy_every_byte_across_piece_boundaries),
    ECT_CASE(test_batches_in_flight_land_in_any_order),
    ECT_CASE(test_query_reports_busy_until_landed_then_retires),
    ECT_CASE(test_landed_bytes_are_visible_to_other_threads),
    ECT_CASE(test_many_threads_submit_concurrently),
    ECT_CASE(test_empty_batch_lands_at_once),
    ECT_CASE(test_retired_and_unknown_tickets_are_not_found),
    ECT_CASE(test_destroy_lands_batches_still_in_flight),
    ECT_CASE(test_invalid_arguments_are_rejected),
    ECT_CASE(test_host_registrations_are_recorded),
    ECT_CASE(test_submit_after_shutdown_fails_but_old_tickets_answer_once),
    ECT_CASE(test_warm_engine_does_not_allocate_per_submit),
    ECT_CASE(test_old_unretired_ticket_stays_answerable),
    ECT_CASE(test_tickets_sharing_a_table_slot_stay_answerable),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
