/*
 * The data transports on real components: a producer process serving a
 * real /dev/shm region through its grant table, a consumer region in the
 * test process, the TCP stream on loopback and the same-host path.  Reads
 * of scattered remote blocks into scattered local runs must land
 * byte-exact, leave every other local block untouched, and every bad index,
 * length, count or grant must be refused before any byte moves.  Striped
 * reads and the answer headers a consumer asks for are in
 * test_xport_stripes.c, reads at once in test_xport_spread.c.
 *
 * Counterparts of the seed's unit/test_data.py (adapted to our design):
 *   registers_memory_on_init        -> test_server_offers_its_stream_and_region
 *   raises_if_nixl_unavailable      -> test_server_without_any_transport_is_refused,
 *                                      test_same_host_only_client_refuses_a_tcp_only_offer
 *   accessors and descriptor round trip -> tests/unit/p2p/test_xport_offer.c
 *   post_read raises on count mismatch -> test_post_read_count_mismatch_is_peer_error
 *   post_read calls transfer          -> test_read_scattered_blocks_*
 *   release/deregister swallow errors -> test_release_and_deregister_tolerate_null_and_failed
 */
#include <sched.h>
#include <sys/stat.h>

#include "common/clock.h"
#include "support/xport.h"

#define NB 64

/* Remote ids out of order with runs of 3, 2 and 4, read into four local
 * runs that cut across them. */
static const uint64_t SCATTER_REMOTE[] = {7, 8, 9, 2, 3, 40, 0, 11, 12, 13, 14, 63, 31};
static const ect_run_t SCATTER_LOCAL[] = {{20, 2}, {5, 3}, {30, 1}, {50, 7}};
#define N_SCATTER (sizeof(SCATTER_REMOTE) / sizeof(SCATTER_REMOTE[0]))
#define N_LOCAL   (sizeof(SCATTER_LOCAL) / sizeof(SCATTER_LOCAL[0]))

static void
read_scattered(ect_transport_t prefer, int serve_tcp, int serve_same_host,
               ect_xport_kind_t expect_kind)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 0x5eed1, serve_tcp, serve_same_host);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, prefer, NULL);

    ect_xport_read_t *r = NULL;
    ect_xport_kind_t kind = ECT_XPORT_NONE;
    CHECK_OK(ts_xport_read_start(&c, &p, 7001, p.agent, p.agent_len, SCATTER_REMOTE, N_SCATTER,
                                 SCATTER_LOCAL, N_LOCAL, &r, &kind));
    CHECK_EQ_INT(kind, expect_kind);
    CHECK_EQ_INT(ts_xport_wait(&c, r, 20), ECT_XPORT_READ_DONE);
    /* Polling a finished read keeps reporting its outcome. */
    CHECK_EQ_INT(ect__xport_read_poll(c.client, r), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c.client, r);
    ts_xport_check_landed(&c, &p, SCATTER_REMOTE, N_SCATTER, SCATTER_LOCAL, N_LOCAL);

    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.reads[expect_kind], 1);
    CHECK_EQ_U64(k.bytes[expect_kind], N_SCATTER * TS_XPORT_BLOCK);
    CHECK_EQ_U64(k.reads[expect_kind == ECT_XPORT_TCP ? ECT_XPORT_SAME_HOST : ECT_XPORT_TCP], 0);
    CHECK_EQ_U64(k.failures, 0);
    CHECK_EQ_U64(k.peer_restarts, 0);
    /* Over tcp the producer streamed it once and finished the grant. */
    ect_xport_server_counters_t sk;
    uint64_t fin[2];
    ts_xport_producer_counters_after(&p, expect_kind == ECT_XPORT_TCP, &sk, fin);
    CHECK_EQ_U64(sk.streams_served, expect_kind == ECT_XPORT_TCP);
    CHECK_EQ_U64(sk.bytes_sent, expect_kind == ECT_XPORT_TCP ? N_SCATTER * TS_XPORT_BLOCK : 0);
    CHECK_EQ_U64(fin[0], expect_kind == ECT_XPORT_TCP);
    CHECK_EQ_U64(fin[1], 0);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_read_scattered_blocks_over_tcp_is_byte_exact)
{
    read_scattered(ECT_TRANSPORT_TCP, 1, 1, ECT_XPORT_TCP);
}

TS_SHM_CASE(test_read_scattered_blocks_over_same_host_is_byte_exact)
{
    read_scattered(ECT_TRANSPORT_SAME_HOST, 1, 1, ECT_XPORT_SAME_HOST);
}

TS_SHM_CASE(test_auto_picks_same_host_when_the_offer_has_it)
{
    read_scattered(ECT_TRANSPORT_AUTO, 1, 1, ECT_XPORT_SAME_HOST);
}

TS_SHM_CASE(test_auto_picks_tcp_when_the_producer_offers_only_tcp)
{
    read_scattered(ECT_TRANSPORT_AUTO, 1, 0, ECT_XPORT_TCP);
}

TS_SHM_CASE(test_same_host_only_producer_serves_without_tcp)
{
    read_scattered(ECT_TRANSPORT_AUTO, 0, 1, ECT_XPORT_SAME_HOST);
}

/* Many reads, each of the whole region in reverse block order (every block
 * its own run on the producer), back to back over pooled connections. */
TS_SHM_CASE(test_repeated_reads_over_pooled_connections_all_land)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 77, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_AUTO, NULL);
    uint64_t remote[NB];
    for (int i = 0; i < NB; i++)
        remote[i] = NB - 1 - (uint64_t)i;
    ect_run_t all = {0, NB};
    for (int round = 0; round < 8; round++) {
        ect_xport_read_t *r;
        CHECK_OK(
            ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, NB, &all, 1, &r, NULL));
        CHECK_EQ_INT(ts_xport_wait(&c, r, 20), ECT_XPORT_READ_DONE);
        ect__xport_read_release(c.client, r);
    }
    ts_xport_check_landed(&c, &p, remote, NB, &all, 1);
    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.reads[ECT_XPORT_TCP], 8);
    CHECK_EQ_U64(k.bytes[ECT_XPORT_TCP], 8ull * NB * TS_XPORT_BLOCK);
    ect_xport_server_counters_t sk;
    uint64_t fin[2];
    ts_xport_producer_counters_after(&p, 8, &sk, fin);
    CHECK_EQ_U64(sk.streams_served, 8);
    CHECK_EQ_U64(sk.streams_denied + sk.bad_requests + sk.send_failures, 0);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* Twelve reads in flight at once, each into its own local blocks. */
TS_SHM_CASE(test_concurrent_tcp_reads_land_without_crosstalk)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 78, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_TCP, NULL);
    enum { N = 12, PER = 5 };
    uint64_t remote[N][PER];
    ect_run_t runs[N];
    ect_xport_read_t *r[N];
    for (int i = 0; i < N; i++) {
        for (int b = 0; b < PER; b++)
            remote[i][b] = (uint64_t)((i * 11 + b * 3) % NB);
        runs[i] = (ect_run_t){(uint64_t)i * PER, PER};
        CHECK_OK(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote[i], PER, &runs[i], 1,
                                     &r[i], NULL));
    }
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(ts_xport_wait(&c, r[i], 20), ECT_XPORT_READ_DONE);
        ect__xport_read_release(c.client, r[i]);
    }
    for (int i = 0; i < N; i++)
        for (int b = 0; b < PER; b++)
            CHECK(ts_xport_block_matches(ect_region_block_ptr(c.region, (uint64_t)i * PER + b),
                                         TS_XPORT_BLOCK, p.seed, remote[i][b]));
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_empty_read_is_done_at_once)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 3, 1, 1);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_TCP, NULL);
    ect_xport_read_t *r;
    CHECK_OK(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, NULL, 0, NULL, 0, &r, NULL));
    CHECK_EQ_INT(ect__xport_read_poll(c.client, r), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c.client, r);
    ts_xport_check_untouched(&c);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* ---- grants: a stream is served only for a live grant, once ------------------------------- */

static ect_xport_read_params_t
params_for(const struct ts_xport_producer *p, const char *hash, const uint8_t *desc,
           const uint64_t *remote, size_t n, const ect_run_t *runs, size_t n_runs)
{
    return (ect_xport_read_params_t){.host = "127.0.0.1",
                                     .port = 1,
                                     .session_id = TS_XPORT_SESSION,
                                     .mm_hash = hash,
                                     .agent_metadata = p->agent,
                                     .agent_len = p->agent_len,
                                     .mem_descriptor = desc,
                                     .desc_len = ECT_XPORT_DESC_LEN,
                                     .remote_blocks = remote,
                                     .n_remote = n,
                                     .local_runs = runs,
                                     .n_local_runs = n_runs};
}

/* Read with these params; expect FAILED with "denied" and no byte landed. */
static void
expect_denied(struct ts_xport_consumer *c, const ect_xport_read_params_t *rp)
{
    ect_xport_read_t *r;
    CHECK_OK(ect__xport_read_start(c->client, rp, &r, NULL));
    CHECK_EQ_INT(ts_xport_wait(c, r, 20), ECT_XPORT_READ_FAILED);
    ect__xport_read_release(c->client, r);
    ts_xport_check_untouched(c);
}

TS_SHM_CASE(test_stream_serves_only_the_right_token_name_and_size_once)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 90, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_TCP, NULL);
    uint64_t remote[] = {3, 4, 5};
    ect_run_t run = {10, 3};
    char hash[64], other[64];
    uint8_t desc[ECT_XPORT_DESC_LEN], desc2[ECT_XPORT_DESC_LEN], forged[ECT_XPORT_DESC_LEN];
    ts_xport_grant(&p, remote, 3, hash, desc);
    ts_xport_grant(&p, remote, 3, other, desc2);
    /* A forged token (one bit off), an all-zero token. */
    memcpy(forged, desc, sizeof(forged));
    forged[ECT_XPORT_DESC_LEN - 1] ^= 1;
    ect_xport_read_params_t rp = params_for(&p, hash, forged, remote, 3, &run, 1);
    expect_denied(&c, &rp);
    memset(forged + ECT_XPORT_DESC_LEN - ECT_STREAM_TOKEN_LEN, 0, ECT_STREAM_TOKEN_LEN);
    expect_denied(&c, &rp);
    /* The other grant's token under this grant's name, and vice versa. */
    rp = params_for(&p, hash, desc2, remote, 3, &run, 1);
    expect_denied(&c, &rp);
    /* The right token and name, but the wrong size: refused, and used up. */
    ect_run_t two = {10, 2};
    rp = params_for(&p, other, desc2, remote, 2, &two, 1);
    expect_denied(&c, &rp);
    rp = params_for(&p, other, desc2, remote, 3, &run, 1);
    expect_denied(&c, &rp);
    /* The failed attempts did not use up the first grant. */
    rp = params_for(&p, hash, desc, remote, 3, &run, 1);
    ect_xport_read_t *r;
    CHECK_OK(ect__xport_read_start(c.client, &rp, &r, NULL));
    CHECK_EQ_INT(ts_xport_wait(&c, r, 20), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c.client, r);
    ts_xport_check_landed(&c, &p, remote, 3, &run, 1);
    /* Replayed: nothing more. */
    ect_run_t elsewhere = {30, 3};
    rp = params_for(&p, hash, desc, remote, 3, &elsewhere, 1);
    CHECK_OK(ect__xport_read_start(c.client, &rp, &r, NULL));
    CHECK_EQ_INT(ts_xport_wait(&c, r, 20), ECT_XPORT_READ_FAILED);
    ect__xport_read_release(c.client, r);
    ts_xport_check_landed(&c, &p, remote, 3, &run, 1);
    ect_xport_server_counters_t sk;
    uint64_t fin[2];
    ts_xport_producer_counters_after(&p, 1, &sk, fin);
    CHECK_EQ_U64(sk.streams_served, 1);
    CHECK_EQ_U64(sk.streams_denied, 6);
    CHECK_EQ_U64(sk.bytes_sent, 3 * TS_XPORT_BLOCK);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* 64 KiB blocks (16384 x 4 bytes). */
#define BIG_HIDDEN 16384u

/* Cut a 64 MiB read (over `stripes` connections) once it runs: nothing of
 * it lands afterwards, and the producer finishes its grant once.  On a busy
 * machine the whole read can land before this thread runs again to cut it
 * (64 MiB takes milliseconds): then it is tried again, up to 8 times, before
 * the case skips itself. */
static void
cancelled_read_writes_nothing_afterwards(unsigned stripes)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    enum { BIG = 1024, TRIES = 8 }; /* 64 MiB */
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, BIG, 91, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, BIG, ECT_TRANSPORT_TCP, NULL);
    uint64_t *remote = malloc(BIG * sizeof(*remote));
    CHECK(remote != NULL);
    for (uint64_t i = 0; i < BIG; i++)
        remote[i] = i;
    ect_run_t all = {0, BIG};
    const uint64_t block_bytes = BIG_HIDDEN * 4;
    size_t bytes = (size_t)BIG * block_bytes;
    ect_xport_read_t *r = NULL;
    int state = ECT_XPORT_READ_DONE;
    ect_xport_server_counters_t sk;
    uint64_t fin_before[2];
    for (int try = 0; try < TRIES && state == ECT_XPORT_READ_DONE; try++) {
        if (r != NULL) {
            /* The last try landed whole: the producer finishes its grant
             * after its last byte left, maybe after the consumer saw it
             * land; count from after that finish. */
            ect__xport_read_release(c.client, r);
            uint64_t last = fin_before[0] + fin_before[1];
            uint64_t until = ect__now_ns() + 5ull * 1000 * 1000 * 1000;
            do
                ts_xport_producer_counters(&p, &sk, fin_before);
            while (fin_before[0] + fin_before[1] == last && ect__now_ns() < until);
        }
        memset(ect_region_data(c.region), 0, bytes);
        ts_xport_consumer_new_client(&c, ECT_TRANSPORT_TCP, stripes);
        ts_xport_producer_counters(&p, &sk, fin_before);
        CHECK_OK(
            ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, BIG, &all, 1, &r, NULL));
        /* Cut once the stream runs: as soon as the first block has landed
         * (the rest of the 64 MiB takes milliseconds more). */
        uint64_t until = ect__now_ns() + 5ull * 1000 * 1000 * 1000;
        while (!ts_xport_block_matches(ect_region_block_ptr(c.region, 0), block_bytes, p.seed, 0) &&
               ect__now_ns() < until)
            sched_yield();
        ect__xport_read_cancel(c.client, r);
        state = ect__xport_read_poll(c.client, r);
    }
    if (state == ECT_XPORT_READ_DONE) {
        ect__xport_read_release(c.client, r);
        free(remote);
        ts_xport_consumer_close(&c);
        ts_xport_producer_stop(&p);
        SKIP("the whole read landed before this thread could cut it, 8 times (a busy machine)");
    }
    CHECK_EQ_INT(state, ECT_XPORT_READ_FAILED);
    /* Whatever landed before the cut stays; nothing lands after it. */
    uint8_t *snap = malloc(bytes);
    CHECK(snap != NULL);
    memcpy(snap, ect_region_data(c.region), bytes);
    struct timespec wait = {0, 300 * 1000 * 1000};
    nanosleep(&wait, NULL);
    CHECK(memcmp(snap, ect_region_data(c.region), bytes) == 0);
    ect__xport_read_release(c.client, r);
    free(snap);
    free(remote);
    ts_xport_consumer_close(&c);
    /* The producer saw the stream cut and finished the grant once (as not
     * sent, or as sent when its last byte left before the cut). */
    uint64_t deadline = ect__now_ns() + 5ull * 1000 * 1000 * 1000;
    uint64_t fin[2];
    do
        ts_xport_producer_counters(&p, &sk, fin);
    while (fin[1] + fin[0] == fin_before[0] + fin_before[1] && ect__now_ns() < deadline);
    CHECK_EQ_U64(fin[0] + fin[1], fin_before[0] + fin_before[1] + 1);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_cancelled_tcp_read_writes_nothing_afterwards)
{
    cancelled_read_writes_nothing_afterwards(1);
}

TS_SHM_CASE(test_cancelled_striped_read_writes_nothing_afterwards)
{
    cancelled_read_writes_nothing_afterwards(ECT_STREAM_MAX_STRIPES);
}

/* ---- refusals: nothing moves -------------------------------------------------------------- */

struct refusal_env {
    struct ts_xport_producer p;
    struct ts_xport_consumer c;
};

static void
refusal_open(struct refusal_env *e, ect_transport_t prefer, uint64_t consumer_hidden)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    ts_xport_producer_start(&e->p, pname, TS_XPORT_HIDDEN, NB, 11, 1, 1);
    CHECK_OK(e->p.status);
    ts_xport_consumer_open(&e->c, cname, consumer_hidden, NB, prefer, NULL);
}

static void
refusal_close(struct refusal_env *e)
{
    ts_xport_check_untouched(&e->c);
    ect_xport_counters_t k;
    ect__xport_client_counters(e->c.client, &k);
    CHECK_EQ_U64(k.reads[ECT_XPORT_TCP] + k.reads[ECT_XPORT_SAME_HOST], 0);
    ts_xport_consumer_close(&e->c);
    ts_xport_producer_stop(&e->p);
    ts_check_no_leftovers();
}

static ect_status_t
try_read(struct refusal_env *e, const uint64_t *remote, size_t n_remote, const ect_run_t *runs,
         size_t n_runs)
{
    ect_xport_read_t *r = (ect_xport_read_t *)(uintptr_t)0x1;
    ect_xport_kind_t kind = (ect_xport_kind_t)77;
    uint64_t granted[] = {1};
    char hash[64];
    uint8_t desc[ECT_XPORT_DESC_LEN];
    ts_xport_grant(&e->p, granted, 1, hash, desc);
    ect_xport_read_params_t rp = params_for(&e->p, hash, desc, remote, n_remote, runs, n_runs);
    ect_status_t st = ect__xport_read_start(e->c.client, &rp, &r, &kind);
    /* Outputs are written only on success. */
    if (st != ECT_OK) {
        CHECK(r == (ect_xport_read_t *)(uintptr_t)0x1);
        CHECK_EQ_INT(kind, 77);
    }
    return st;
}

static void
remote_block_out_of_range(ect_transport_t prefer)
{
    struct refusal_env e;
    refusal_open(&e, prefer, TS_XPORT_HIDDEN);
    uint64_t remote[] = {1, 2, NB};
    ect_run_t run = {0, 3};
    CHECK_STATUS(try_read(&e, remote, 3, &run, 1), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "block 64");
    uint64_t huge[] = {UINT64_MAX};
    ect_run_t one = {0, 1};
    CHECK_STATUS(try_read(&e, huge, 1, &one, 1), ECT_ERR_PEER);
    refusal_close(&e);
}

TS_SHM_CASE(test_remote_block_out_of_range_is_peer_error_over_tcp)
{
    remote_block_out_of_range(ECT_TRANSPORT_TCP);
}

TS_SHM_CASE(test_remote_block_out_of_range_is_peer_error_over_same_host)
{
    remote_block_out_of_range(ECT_TRANSPORT_SAME_HOST);
}

TS_SHM_CASE(test_block_size_mismatch_is_peer_error)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_AUTO, TS_XPORT_HIDDEN / 2);
    uint64_t remote[] = {1};
    ect_run_t run = {0, 1};
    CHECK_STATUS(try_read(&e, remote, 1, &run, 1), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "blocks of 7168 bytes, ours are 3584");
    refusal_close(&e);
}

TS_SHM_CASE(test_post_read_count_mismatch_is_peer_error)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_TCP, TS_XPORT_HIDDEN);
    uint64_t remote[] = {1, 2, 3};
    ect_run_t fewer = {0, 2}, more[] = {{0, 2}, {10, 2}};
    CHECK_STATUS(try_read(&e, remote, 3, &fewer, 1), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "3 block indices for 2 local blocks");
    CHECK_STATUS(try_read(&e, remote, 3, more, 2), ECT_ERR_PEER);
    CHECK_STATUS(try_read(&e, remote, 0, &fewer, 1), ECT_ERR_PEER);
    refusal_close(&e);
}

TS_SHM_CASE(test_local_run_outside_our_region_is_overflow)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_AUTO, TS_XPORT_HIDDEN);
    uint64_t remote[] = {1, 2, 3, 4};
    ect_run_t past_end[] = {{0, 2}, {NB - 1, 2}};
    CHECK_STATUS(try_read(&e, remote, 4, past_end, 2), ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "outside our 64 blocks");
    ect_run_t wraps[] = {{2, UINT64_MAX - 1}};
    CHECK_STATUS(try_read(&e, remote, 4, wraps, 1), ECT_ERR_OVERFLOW);
    ect_run_t starts_after[] = {{NB, 4}};
    CHECK_STATUS(try_read(&e, remote, 4, starts_after, 1), ECT_ERR_OVERFLOW);
    refusal_close(&e);
}

TS_SHM_CASE(test_malformed_offer_or_descriptor_from_peer_is_peer_error)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_AUTO, TS_XPORT_HIDDEN);
    uint64_t remote[] = {1};
    ect_run_t run = {0, 1};
    char hash[64];
    uint8_t desc[ECT_XPORT_DESC_LEN];
    ts_xport_grant(&e.p, remote, 1, hash, desc);
    ect_xport_read_t *r;
    static const uint8_t junk[] = "ECTA\x02\x00\x00\x00\xff\xff";
    ect_xport_read_params_t rp = params_for(&e.p, hash, desc, remote, 1, &run, 1);
    rp.agent_metadata = junk;
    rp.agent_len = sizeof(junk) - 1;
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_PEER);
    CHECK_CONTAINS(ect_last_error(), "127.0.0.1:1");
    rp = params_for(&e.p, hash, desc, remote, 1, &run, 1);
    rp.mem_descriptor = junk;
    rp.desc_len = sizeof(junk) - 1;
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_PEER);
    rp.agent_metadata = NULL;
    rp.agent_len = 0;
    rp.mem_descriptor = NULL;
    rp.desc_len = 0;
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_PEER);
    /* Refused before the peer cache: nothing counted as a restart. */
    ect_xport_counters_t k;
    ect__xport_client_counters(e.c.client, &k);
    CHECK_EQ_U64(k.peer_restarts, 0);
    refusal_close(&e);
}

TS_SHM_CASE(test_bad_arguments_are_refused)
{
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_AUTO, TS_XPORT_HIDDEN);
    uint64_t remote[] = {1};
    ect_run_t run = {0, 1};
    char hash[64];
    uint8_t desc[ECT_XPORT_DESC_LEN];
    ts_xport_grant(&e.p, remote, 1, hash, desc);
    ect_xport_read_t *r;
    ect_xport_read_params_t rp = params_for(&e.p, hash, desc, remote, 1, &run, 1);
    rp.host = NULL;
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_INVALID_ARG);
    rp.host = "";
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_INVALID_ARG);
    rp = params_for(&e.p, hash, desc, NULL, 1, &run, 1);
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_INVALID_ARG);
    rp = params_for(&e.p, hash, desc, remote, 1, NULL, 1);
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_INVALID_ARG);
    rp = params_for(&e.p, "", desc, remote, 1, &run, 1);
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_INVALID_ARG);
    rp = params_for(&e.p, hash, desc, remote, 1, &run, 1);
    rp.port = 0;
    CHECK_STATUS(ect__xport_read_start(e.c.client, &rp, &r, NULL), ECT_ERR_INVALID_ARG);
    ect_xport_client_t *cl = NULL;
    ect_xport_client_params_t cp = {.data = ect_region_data(e.c.region),
                                    .block_size = TS_XPORT_BLOCK,
                                    .num_blocks = 0,
                                    .prefer = ECT_TRANSPORT_AUTO};
    CHECK_STATUS(ect__xport_client_create(&cp, &cl), ECT_ERR_INVALID_ARG);
    cp.num_blocks = NB;
    cp.prefer = (ect_transport_t)9;
    CHECK_STATUS(ect__xport_client_create(&cp, &cl), ECT_ERR_INVALID_ARG);
    cp.prefer = ECT_TRANSPORT_AUTO;
    cp.region_dir = "relative/dir";
    CHECK_STATUS(ect__xport_client_create(&cp, &cl), ECT_ERR_INVALID_ARG);
    CHECK(cl == NULL);
    refusal_close(&e);
}

/* ---- server ------------------------------------------------------------------------------- */

static ect_stream_status_t
deny_all(void *user, const char *s, const char *h, const uint8_t *t, uint64_t n,
         ect_xport_grant_view_t *v, void **g)
{
    (void)user, (void)s, (void)h, (void)t, (void)n, (void)v, (void)g;
    return ECT_STREAM_DENIED;
}

static void
finish_none(void *user, void *grant, int sent)
{
    (void)user, (void)grant, (void)sent;
}

TS_SHM_CASE(test_server_offers_its_stream_and_region)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t rp;
    ts_xport_region_params(&rp, name, TS_XPORT_HIDDEN, NB);
    ect_region_t *region;
    CHECK_OK(ect_region_open(&rp, &region));
    ect_xport_grant_ops_t ops = {.claim = deny_all, .finish = finish_none};
    ect_xport_server_params_t sp = {.data = ect_region_data(region),
                                    .block_size = TS_XPORT_BLOCK,
                                    .num_blocks = NB,
                                    .region_path = ect_region_path(region),
                                    .data_offset = ect_region_data_offset(region),
                                    .bind_host = "127.0.0.1",
                                    .send_timeout_ns = 1000000000ull,
                                    .grants = &ops,
                                    .serve_tcp = 1,
                                    .serve_same_host = 1};
    ect_xport_server_t *s;
    CHECK_OK(ect__xport_server_start(&sp, &s));
    CHECK_EQ_INT(ect__xport_server_kinds(s), (1u << ECT_XPORT_TCP) | (1u << ECT_XPORT_SAME_HOST));
    size_t alen, dlen;
    const void *agent = ect__xport_server_agent_metadata(s, &alen);
    ect_xport_offer_t o;
    CHECK_OK(ect__xport_offer_decode(agent, alen, &o));
    CHECK(ect__xport_server_tcp_port(s) != 0);
    CHECK_EQ_INT(o.tcp_port, ect__xport_server_tcp_port(s));
    CHECK_EQ_INT(o.tcp_aligned, 1);
    CHECK_EQ_INT(o.tcp_stripes, ECT_STREAM_MAX_STRIPES);
    CHECK_EQ_U64(o.path_len, strlen(ect_region_path(region)));
    CHECK(memcmp(o.path, ect_region_path(region), o.path_len) == 0);
    CHECK_EQ_U64(o.data_offset, ect_region_data_offset(region));
    struct stat sb;
    CHECK(stat(ect_region_path(region), &sb) == 0);
    CHECK_EQ_U64(o.ino, sb.st_ino);
    CHECK_EQ_U64(o.dev, sb.st_dev);
    char boot[ECT_XPORT_BOOT_ID_LEN + 1];
    CHECK_OK(ect__xport_boot_id(boot));
    CHECK_STR_EQ(o.boot_id, boot);
    /* A grant's descriptor: the geometry and its token, and no address of
     * the producer's memory anywhere in it. */
    uint8_t token[ECT_STREAM_TOKEN_LEN], desc[ECT_XPORT_DESC_LEN];
    CHECK_OK(ect__xport_new_token(token));
    CHECK_OK(ect__xport_server_descriptor(s, token, NULL, 0, desc, sizeof(desc), &dlen));
    CHECK_EQ_U64(dlen, ECT_XPORT_DESC_LEN);
    ect_xport_desc_t d;
    CHECK_OK(ect__xport_desc_decode(desc, dlen, &d));
    CHECK_EQ_U64(d.block_size, TS_XPORT_BLOCK);
    CHECK_EQ_U64(d.num_blocks, NB);
    CHECK(memcmp(d.token, token, sizeof(token)) == 0);
    uint64_t base = (uint64_t)(uintptr_t)ect_region_data(region);
    for (size_t i = 0; i + 8 <= dlen; i++)
        CHECK(memcmp(desc + i, &base, 8) != 0);
    for (size_t i = 0; i + 8 <= alen; i++)
        CHECK(memcmp((const uint8_t *)agent + i, &base, 8) != 0);
    /* Two tokens differ (128 random bits each). */
    uint8_t token2[ECT_STREAM_TOKEN_LEN];
    CHECK_OK(ect__xport_new_token(token2));
    CHECK(memcmp(token, token2, sizeof(token)) != 0);
    /* The offer is stable for the server's life. */
    size_t alen2;
    CHECK(ect__xport_server_agent_metadata(s, &alen2) == agent && alen2 == alen);
    ect__xport_server_stop(s);
    ect_region_close(region);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_two_servers_on_one_region_differ_in_their_instance)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t rp;
    ts_xport_region_params(&rp, name, TS_XPORT_HIDDEN, NB);
    ect_region_t *region;
    CHECK_OK(ect_region_open(&rp, &region));
    ect_xport_grant_ops_t ops = {.claim = deny_all, .finish = finish_none};
    ect_xport_server_params_t sp = {.data = ect_region_data(region),
                                    .block_size = TS_XPORT_BLOCK,
                                    .num_blocks = NB,
                                    .region_path = ect_region_path(region),
                                    .bind_host = "127.0.0.1",
                                    .send_timeout_ns = 1000000000ull,
                                    .grants = &ops,
                                    .serve_same_host = 1};
    ect_xport_server_t *a, *b;
    CHECK_OK(ect__xport_server_start(&sp, &a));
    CHECK_OK(ect__xport_server_start(&sp, &b));
    size_t la, lb;
    const uint8_t *oa = ect__xport_server_agent_metadata(a, &la);
    const uint8_t *ob = ect__xport_server_agent_metadata(b, &lb);
    CHECK_EQ_U64(la, lb);
    CHECK(memcmp(oa, ob, la) != 0); /* a restart on the same port is told apart */
    ect__xport_server_stop(a);
    ect__xport_server_stop(b);
    ect_region_close(region);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_server_without_any_transport_is_refused)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t rp;
    ts_xport_region_params(&rp, name, TS_XPORT_HIDDEN, NB);
    ect_region_t *region;
    CHECK_OK(ect_region_open(&rp, &region));
    ect_xport_server_params_t sp = {.data = ect_region_data(region),
                                    .block_size = TS_XPORT_BLOCK,
                                    .num_blocks = NB,
                                    .region_path = ect_region_path(region)};
    ect_xport_server_t *s = NULL;
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "no transport");
    /* tcp without grant callbacks: refused. */
    sp.serve_tcp = 1;
    sp.bind_host = "127.0.0.1";
    sp.send_timeout_ns = 1;
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    sp.serve_tcp = 0;
    /* Same-host alone with a path that is not a file: nothing to offer. */
    sp.serve_same_host = 1;
    sp.region_path = "/dev/shm";
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    sp.region_path = NULL;
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    sp.region_path = ect_region_path(region);
    sp.block_size = 0;
    CHECK_STATUS(ect__xport_server_start(&sp, &s), ECT_ERR_INVALID_ARG);
    CHECK(s == NULL);
    ect_region_close(region);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_same_host_only_client_refuses_a_tcp_only_offer)
{
    char pname[64], cname[64];
    ect_test_unique_name(pname, sizeof(pname), "ectt_");
    ect_test_unique_name(cname, sizeof(cname), "ectt_");
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 5, 1, 0);
    CHECK_OK(p.status);
    CHECK_EQ_INT(p.kinds, 1u << ECT_XPORT_TCP);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_SAME_HOST, NULL);
    uint64_t remote[] = {1};
    ect_run_t run = {0, 1};
    ect_xport_read_t *r;
    CHECK_STATUS(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, 1, &run, 1, &r, NULL),
                 ECT_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ect_last_error(), "does not offer");
    ts_xport_check_untouched(&c);
    ts_xport_consumer_close(&c);
    /* And a tcp-only client refuses a same-host-only producer. */
    struct ts_xport_producer q;
    ts_xport_producer_start(&q, pname, TS_XPORT_HIDDEN, NB, 5, 0, 1);
    CHECK_OK(q.status);
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_TCP, NULL);
    CHECK_STATUS(ts_xport_read_start(&c, &q, 2, q.agent, q.agent_len, remote, 1, &run, 1, &r, NULL),
                 ECT_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ect_last_error(), "does not offer it");
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&q);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_release_and_deregister_tolerate_null_and_failed)
{
    ect__xport_read_release(NULL, NULL);
    ect__xport_read_cancel(NULL, NULL);
    ect__xport_client_destroy(NULL);
    ect__xport_server_stop(NULL);
    ect__xport_client_forget_peer(NULL, "h", 1);
    struct refusal_env e;
    refusal_open(&e, ECT_TRANSPORT_TCP, TS_XPORT_HIDDEN);
    ect__xport_read_release(e.c.client, NULL);
    CHECK_EQ_INT(ect__xport_read_poll(e.c.client, NULL), ECT_XPORT_READ_FAILED);
    CHECK_STR_EQ(ect__xport_kind_str(ECT_XPORT_TCP), "tcp");
    CHECK_STR_EQ(ect__xport_kind_str(ECT_XPORT_SAME_HOST), "same_host");
    CHECK_STR_EQ(ect__xport_kind_str(ECT_XPORT_NONE), "none");
    refusal_close(&e);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_read_scattered_blocks_over_tcp_is_byte_exact),
    ECT_CASE(test_read_scattered_blocks_over_same_host_is_byte_exact),
    ECT_CASE(test_auto_picks_same_host_when_the_offer_has_it),
    ECT_CASE(test_auto_picks_tcp_when_the_producer_offers_only_tcp),
    ECT_CASE(test_same_host_only_producer_serves_without_tcp),
    ECT_CASE(test_repeated_reads_over_pooled_connections_all_land),
    ECT_CASE(test_concurrent_tcp_reads_land_without_crosstalk),
    ECT_CASE(test_empty_read_is_done_at_once),
    ECT_CASE(test_stream_serves_only_the_right_token_name_and_size_once),
    ECT_CASE(test_cancelled_tcp_read_writes_nothing_afterwards),
    ECT_CASE(test_cancelled_striped_read_writes_nothing_afterwards),
    ECT_CASE(test_remote_block_out_of_range_is_peer_error_over_tcp),
    ECT_CASE(test_remote_block_out_of_range_is_peer_error_over_same_host),
    ECT_CASE(test_block_size_mismatch_is_peer_error),
    ECT_CASE(test_post_read_count_mismatch_is_peer_error),
    ECT_CASE(test_local_run_outside_our_region_is_overflow),
    ECT_CASE(test_malformed_offer_or_descriptor_from_peer_is_peer_error),
    ECT_CASE(test_bad_arguments_are_refused),
    ECT_CASE(test_server_offers_its_stream_and_region),
    ECT_CASE(test_two_servers_on_one_region_differ_in_their_instance),
    ECT_CASE(test_server_without_any_transport_is_refused),
    ECT_CASE(test_same_host_only_client_refuses_a_tcp_only_offer),
    ECT_CASE(test_release_and_deregister_tolerate_null_and_failed),
};

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], TS_XPORT_PRODUCER_ARG) == 0)
        return ts_xport_producer_main(argc, argv);
    return ECT_TEST_MAIN(argc, argv, cases);
}
