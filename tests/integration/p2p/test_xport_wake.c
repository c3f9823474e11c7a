/*
 * Who a same-host read wakes when it lands, on real components (a producer
 * process serving a real /dev/shm region, a consumer region in the test
 * process, the client's own copy engine): a read copied inside its own
 * start wakes nobody (its caller polls it right after, transport.h), and a
 * read that lands on a copy thread after its start has returned always
 * wakes the caller.
 */
#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "support/xport.h"

#define NB 64

static void
count_wake(void *arg)
{
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
    ts_xport_check_landed(&c, &p, remote, NB, &all, 1);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_same_host_read_copied_in_its_start_wakes_nobody),
    ECT_CASE(test_same_host_read_landing_after_its_start_wakes_the_caller),
};

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], TS_XPORT_PRODUCER_ARG) == 0)
        return ts_xport_producer_main(argc, argv);
    return ECT_TEST_MAIN(argc, argv, cases);
}
