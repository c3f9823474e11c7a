/*
 * Who a read wakes when it lands, on real components (a producer process
 * serving a real /dev/shm region, a consumer region in the test process,
 * the client's own copy engine, loopback TCP): a same-host read copied
 * inside its own start wakes nobody (its caller polls it right after,
 * transport.h), and one that lands on a copy thread after its start has
 * returned always wakes the caller.  A tcp read's wake comes from its
 * receiving thread with no lock of the client's held, so the owner can
 * finish the read right there, as the consumer does.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "support/xport.h"

#define NB 64

/* Wake-ups that named another kind than the same-host reads these are
 * (checked on the test's thread: a check cannot end a case from a copy
 * thread). */
static unsigned wrong_kind;

static void
count_wake(void *arg, ect_xport_kind_t kind)
{
    if (kind != ECT_XPORT_SAME_HOST)
        __atomic_fetch_add(&wrong_kind, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add((unsigned *)arg, 1, __ATOMIC_SEQ_CST);
}

/* Replace c's client by a same-host one whose wake callback counts into
 * *wakes, with these copy settings. */
static void
client_counting_wakes(struct ts_xport_consumer *c, unsigned *wakes,
                      const ect_copy_cpu_params_t *copy)
{
    ect__xport_client_destroy(c->client);
    ect_xport_client_params_t cp = {.data = ect_region_data(c->region),
                                    .block_size = c->block_size,
                                    .num_blocks = c->num_blocks,
                                    .prefer = ECT_TRANSPORT_SAME_HOST,
                                    .wake = count_wake,
                                    .wake_arg = wakes,
                                    .touch_pages = 1,
                                    .copy = *copy};
    CHECK_OK(ect__xport_client_create(&cp, &c->client));
}

/* A read copied inside its own start has landed when the start returns:
 * the caller polls it then (transport.h), so no wake-up is spent on it. */
TS_SHM_CASE(test_same_host_read_copied_in_its_start_wakes_nobody)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 79, 0, 1);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_SAME_HOST, NULL);
    unsigned wakes = 0;
    /* Every read of this region is copied inside submit. */
    ect_copy_cpu_params_t copy = {.inline_bytes = (size_t)NB * TS_XPORT_BLOCK};
    client_counting_wakes(&c, &wakes, &copy);
    uint64_t remote[NB];
    for (int i = 0; i < NB; i++)
        remote[i] = NB - 1 - (uint64_t)i;
    ect_run_t all = {0, NB};
    for (int round = 0; round < 4; round++) {
        ect_xport_read_t *r;
        ect_xport_kind_t kind;
        CHECK_OK(
            ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, NB, &all, 1, &r, &kind));
        CHECK_EQ_INT(kind, ECT_XPORT_SAME_HOST);
        CHECK_EQ_INT(ect__xport_read_poll(c.client, r), ECT_XPORT_READ_DONE);
        ect__xport_read_release(c.client, r);
    }
    CHECK_EQ_U64(__atomic_load_n(&wakes, __ATOMIC_SEQ_CST), 0);
    ts_xport_check_landed(&c, &p, remote, NB, &all, 1);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* Reads handed to polling copy threads in small pieces, so that a copy
 * thread often copies the last byte after the start has returned: every
 * read is DONE at the first poll after its start, or a wake-up comes and
 * then it is DONE.  A lost wake-up shows as a read still PENDING with no
 * wake-up 5 s later. */
TS_SHM_CASE(test_same_host_read_landing_after_its_start_wakes_the_caller)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 80, 0, 1);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_SAME_HOST, NULL);
    unsigned wakes = 0;
    ect_copy_cpu_params_t copy = {
        .inline_bytes = ECT_COPY_CPU_NO_INLINE, .split_bytes = 4096, .spin_us = 100000};
    client_counting_wakes(&c, &wakes, &copy);
    uint64_t remote[NB];
    for (int i = 0; i < NB; i++)
        remote[i] = (uint64_t)((i * 7) % NB);
    ect_run_t all = {0, NB};
    unsigned late = 0;
    /* The producer keeps at most 128 grants (support/xport.c). */
    enum { ROUNDS = 120 };
    for (int round = 0; round < ROUNDS; round++) {
        ect_xport_read_t *r;
        CHECK_OK(
            ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, NB, &all, 1, &r, NULL));
        unsigned before = __atomic_load_n(&wakes, __ATOMIC_SEQ_CST);
        ect_xport_read_state_t st = ect__xport_read_poll(c.client, r);
        if (st == ECT_XPORT_READ_PENDING) {
            late++;
            uint64_t until = ect__now_ns() + 5000000000ull;
            while (__atomic_load_n(&wakes, __ATOMIC_SEQ_CST) == before && ect__now_ns() < until)
                ;
            CHECK_MSG(__atomic_load_n(&wakes, __ATOMIC_SEQ_CST) != before,
                      "read %d landed after its start and woke nobody", round);
            st = ect__xport_read_poll(c.client, r);
        }
        CHECK_EQ_INT(st, ECT_XPORT_READ_DONE);
        ect__xport_read_release(c.client, r);
    }
    printf("    %u of %d reads were still being copied at their first poll\n", late, ROUNDS);
    CHECK_EQ_U64(__atomic_load_n(&wrong_kind, __ATOMIC_SEQ_CST), 0);
    ts_xport_check_landed(&c, &p, remote, NB, &all, 1);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* ---- tcp ------------------------------------------------------------------------------- */

#define BIG_HIDDEN 16384u /* 64 KiB blocks */
enum { TCP_NB = 64 };     /* 4 MiB: four stripes of ECT_XPORT_STRIPE_MIN_BYTES */

/* The owner of a tcp client, as the consumer owns its transfer table: the
 * read in flight is published under `lock`, and the wake callback finishes
 * it itself when it gets the lock at once (p2p/consumer.c: read_settled). */
static struct tcp_owner {
    pthread_mutex_t lock;
    ect_xport_client_t *client;
    ect_xport_read_t *read; /* NULL: none in flight */
    unsigned finished_in_wake;
    unsigned wakes, busy, wrong_kind; /* atomic */
} owner = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void
finish_in_wake(void *arg, ect_xport_kind_t kind)
{
    struct tcp_owner *o = arg;
    __atomic_fetch_add(&o->wakes, 1, __ATOMIC_SEQ_CST);
    if (kind != ECT_XPORT_TCP)
        __atomic_fetch_add(&o->wrong_kind, 1, __ATOMIC_SEQ_CST);
    if (pthread_mutex_trylock(&o->lock) != 0) {
        __atomic_fetch_add(&o->busy, 1, __ATOMIC_SEQ_CST);
        return;
    }
    if (o->read != NULL && ect__xport_read_poll(o->client, o->read) == ECT_XPORT_READ_DONE) {
        ect__xport_read_release(o->client, o->read);
        o->read = NULL;
        o->finished_in_wake++;
    }
    pthread_mutex_unlock(&o->lock);
}

/* Reads of the whole region, unstriped and in four stripes (each stripe
 * settles on a receiving thread of its own and wakes the owner): each is
 * finished by the wake callback, which polls and releases it on the
 * receiving thread, or, where the callback found the lock held (by this
 * thread, or by another stripe's callback that saw its read still
 * pending), by this thread's poll; every byte lands either way.  Were the
 * callback called with the client's lock held, its poll would never
 * return. */
TS_SHM_CASE(test_tcp_read_can_be_finished_in_its_wake_callback)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, TCP_NB, 81, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, TCP_NB, ECT_TRANSPORT_TCP, NULL);
    uint64_t remote[TCP_NB];
    for (int i = 0; i < TCP_NB; i++)
        remote[i] = (uint64_t)((i * 5 + 3) % TCP_NB);
    ect_run_t all = {0, TCP_NB};
    enum { ROUNDS = 8 };
    unsigned by_poll = 0;
    for (unsigned stripes = 1; stripes <= 4; stripes += 3) {
        ect__xport_client_destroy(c.client);
        ect_xport_client_params_t cp = {.data = ect_region_data(c.region),
                                        .block_size = c.block_size,
                                        .num_blocks = c.num_blocks,
                                        .prefer = ECT_TRANSPORT_TCP,
                                        .wake = finish_in_wake,
                                        .wake_arg = &owner,
                                        .touch_pages = 1,
                                        .tcp_stripes = stripes};
        CHECK_OK(ect__xport_client_create(&cp, &c.client));
        owner.client = c.client;
        for (int round = 0; round < ROUNDS; round++) {
            memset(ect_region_data(c.region), 0, (size_t)TCP_NB * c.block_size);
            pthread_mutex_lock(&owner.lock);
            ect_xport_read_t *r;
            CHECK_OK(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, TCP_NB, &all, 1,
                                         &r, NULL));
            owner.read = r;
            pthread_mutex_unlock(&owner.lock);
            uint64_t until = ect__now_ns() + 20000000000ull;
            for (;;) {
                pthread_mutex_lock(&owner.lock);
                if (owner.read == NULL) {
                    pthread_mutex_unlock(&owner.lock);
                    break;
                }
                ect_xport_read_state_t st = ect__xport_read_poll(c.client, owner.read);
                CHECK_MSG(st != ECT_XPORT_READ_FAILED, "round %d of %u stripes failed", round,
                          stripes);
                if (st == ECT_XPORT_READ_DONE) {
                    ect__xport_read_release(c.client, owner.read);
                    owner.read = NULL;
                    by_poll++;
                }
                pthread_mutex_unlock(&owner.lock);
                CHECK_MSG(ect__now_ns() < until, "round %d of %u stripes never landed", round,
                          stripes);
                nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
            }
            ts_xport_check_landed(&c, &p, remote, TCP_NB, &all, 1);
        }
    }
    /* A stripe that settled last may still be in its wake callback: read
     * what it writes as it writes it (atomically, or under the lock). */
    unsigned wakes = __atomic_load_n(&owner.wakes, __ATOMIC_SEQ_CST);
    unsigned busy = __atomic_load_n(&owner.busy, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&owner.lock);
    unsigned in_wake = owner.finished_in_wake;
    pthread_mutex_unlock(&owner.lock);
    printf("    %u of %d reads finished in the wake callback (%u wake-ups, %u found the lock "
           "held)\n",
           in_wake, 2 * ROUNDS, wakes, busy);
    CHECK_EQ_U64(in_wake + by_poll, 2 * ROUNDS);
    CHECK(in_wake > 0);
    /* A wake for every read and stripe that settled. */
    CHECK(wakes >= ROUNDS + 4 * ROUNDS);
    CHECK_EQ_U64(__atomic_load_n(&owner.wrong_kind, __ATOMIC_SEQ_CST), 0);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_same_host_read_copied_in_its_start_wakes_nobody),
    ECT_CASE(test_same_host_read_landing_after_its_start_wakes_the_caller),
    ECT_CASE(test_tcp_read_can_be_finished_in_its_wake_callback),
};

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], TS_XPORT_PRODUCER_ARG) == 0)
        return ts_xport_producer_main(argc, argv);
    return ECT_TEST_MAIN(argc, argv, cases);
}
