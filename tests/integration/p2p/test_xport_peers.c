/*
 * The data transports' per-peer behaviour on real processes: producer
 * restarts (new process, same peer key, new offer), a producer SIGKILLed in
 * the middle of a large tcp read, same-host offers that must not be used
 * (other boot, path outside the region directory, wrong inode, a symlink)
 * and the fallback to tcp, the connection and mapping cache, forgetting a
 * peer, detached reads, and the choice being logged and counted.
 */
#include <time.h>

#include <ectier/log.h>

#include "common/clock.h"
#include "copy/cpu.h"
#include "support/xport.h"

#define NB 64

static const uint64_t REMOTE[] = {5, 6, 7, 1, 60, 61, 30};
static const ect_run_t LOCAL[] = {{10, 4}, {40, 3}};
#define N_REMOTE (sizeof(REMOTE) / sizeof(REMOTE[0]))
#define N_LOCAL  (sizeof(LOCAL) / sizeof(LOCAL[0]))

/* Read REMOTE into LOCAL from p under peer key; expect kind and DONE. */
static void
read_ok(struct ts_xport_consumer *c, struct ts_xport_producer *p, uint16_t key,
        const uint8_t *agent, size_t agent_len, ect_xport_kind_t expect)
{
    ect_xport_read_t *r;
    ect_xport_kind_t kind;
    CHECK_OK(ts_xport_read_start(c, p, key, agent, agent_len, REMOTE, N_REMOTE, LOCAL, N_LOCAL, &r,
                                 &kind));
    CHECK_EQ_INT(kind, expect);
    CHECK_EQ_INT(ts_xport_wait(c, r, 20), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c->client, r);
    ts_xport_check_landed(c, p, REMOTE, N_REMOTE, LOCAL, N_LOCAL);
}

static void
names(char *a, char *b, char *d)
{
    ect_test_unique_name(a, 64, "ectt_");
    ect_test_unique_name(b, 64, "ectt_");
    if (d != NULL)
        ect_test_unique_name(d, 64, "ectt_");
}

/* ---- restarts ----------------------------------------------------------------------- */

static void
restart_case(ect_transport_t prefer, ect_xport_kind_t expect)
{
    char a[64], b[64], cname[64];
    names(a, b, cname);
    struct ts_xport_producer first, second;
    ts_xport_producer_start(&first, a, TS_XPORT_HIDDEN, NB, 1001, 1, 1);

    CHECK_OK(first.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, prefer, NULL);
    read_ok(&c, &first, 5601, first.agent, first.agent_len, expect);
    char first_path[512];
    snprintf(first_path, sizeof(first_path), "%s", first.path);
    ts_xport_producer_stop(&first);

    /* A new process answers on the same host:port with a new offer. */
    ts_xport_producer_start(&second, b, TS_XPORT_HIDDEN, NB, 2002, 1, 1);
    CHECK_OK(second.status);
    read_ok(&c, &second, 5601, second.agent, second.agent_len, expect);
    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.peer_restarts, 1);
    CHECK_EQ_U64(k.reads[expect], 2);
    CHECK_EQ_U64(k.failures, 0);
    /* The old mapping was dropped, so the old region file is gone. */
    CHECK_MSG(!ts_exists(first_path), "%s still exists after the restart", first_path);
    /* Same bytes again: no new restart. */
    read_ok(&c, &second, 5601, second.agent, second.agent_len, expect);
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.peer_restarts, 1);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&second);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_producer_restart_over_tcp_is_noticed_counted_and_read_works)
{
    restart_case(ECT_TRANSPORT_TCP, ECT_XPORT_TCP);
}

TS_SHM_CASE(test_producer_restart_over_same_host_is_noticed_counted_and_read_works)
{
    restart_case(ECT_TRANSPORT_AUTO, ECT_XPORT_SAME_HOST);
}

/* ---- a producer killed mid-read ------------------------------------------------------- */

/* 64 KiB blocks (16384 x 4 bytes); 2048 of them = 128 MiB. */
#define BIG_HIDDEN 16384u
#define BIG_NB     2048u

TS_SHM_CASE(test_producer_killed_during_large_tcp_read_fails_the_read)
{
    char pname[64], cname[64];
    names(pname, cname, NULL);
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, BIG_NB, 9, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, BIG_NB, ECT_TRANSPORT_TCP, NULL);
    uint64_t *remote = malloc(BIG_NB * sizeof(*remote));
    CHECK(remote != NULL);
    /* Eight 16 MiB runs on the producer. */
    for (uint64_t i = 0; i < BIG_NB; i++)
        remote[i] = (i / 256 % 2 ? i - 256 : i + 256) % BIG_NB;
    ect_run_t all = {0, BIG_NB};
    /* A second grant for after the kill. */
    uint64_t one_block[] = {0};
    char later_hash[64];
    uint8_t later_desc[ECT_XPORT_DESC_LEN];
    ts_xport_grant(&p, one_block, 1, later_hash, later_desc);
    ect_xport_read_t *r;
    CHECK_OK(
        ts_xport_read_start(&c, &p, 9, p.agent, p.agent_len, remote, BIG_NB, &all, 1, &r, NULL));
    /* Kill the producer while the stream is in flight. */
    CHECK_EQ_INT(ect__xport_read_poll(c.client, r), ECT_XPORT_READ_PENDING);
    uint64_t t0 = ect__now_ns();
    ts_xport_producer_kill(&p);
    ect_xport_read_state_t s = ts_xport_wait(&c, r, 30);
    double waited = (double)(ect__now_ns() - t0) / 1e9;
    /* The kernel resets the dead producer's connection: the read ends at
     * once (unless it had already landed in full). */
    CHECK_MSG(s != ECT_XPORT_READ_PENDING, "still pending after %.3f s", waited);
    CHECK_MSG(waited < 5.0, "settled only after %.3f s", waited);
    ect__xport_read_release(c.client, r);
    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.failures + k.reads[ECT_XPORT_TCP], 1);

    /* A grant of the dead producer: the connection is refused, either at
     * once or through the read; nothing hangs. */
    ect_run_t one = {0, 1};
    ect_xport_read_params_t rp = {.host = "127.0.0.1",
                                  .port = 9,
                                  .session_id = TS_XPORT_SESSION,
                                  .mm_hash = later_hash,
                                  .agent_metadata = p.agent,
                                  .agent_len = p.agent_len,
                                  .mem_descriptor = later_desc,
                                  .desc_len = ECT_XPORT_DESC_LEN,
                                  .remote_blocks = one_block,
                                  .n_remote = 1,
                                  .local_runs = &one,
                                  .n_local_runs = 1};
    ect_status_t st = ect__xport_read_start(c.client, &rp, &r, NULL);
    if (st == ECT_OK) {
        CHECK_EQ_INT(ts_xport_wait(&c, r, 30), ECT_XPORT_READ_FAILED);
        ect__xport_read_release(c.client, r);
    } else {
        CHECK_STATUS(st, ECT_ERR_TRANSPORT);
    }
    free(remote);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    /* The producer's reaper removes its region once the holder is gone. */
    char path[512];
    ts_region_path(path, sizeof(path), TS_SHM, pname);
    CHECK(ts_wait_gone(path, 5000));
    ts_check_no_leftovers();
}

/* ---- same-host offers that must not be used ------------------------------------------------ */

enum bad_offer { OTHER_BOOT, OUTSIDE_DIR, WRONG_INODE, THROUGH_SYMLINK, DOT_DOT };

/* The producer's offer with its same-host entry altered. */
static uint8_t *
altered_offer(const struct ts_xport_producer *p, enum bad_offer how, const char *link_path,
              size_t *len_p)
{
    ect_xport_offer_t o;
    CHECK_OK(ect__xport_offer_decode(p->agent, p->agent_len, &o));
    CHECK(o.kinds & (1u << ECT_XPORT_SAME_HOST));
    char path[600];
    switch (how) {
    case OTHER_BOOT:
        o.boot_id[0] = o.boot_id[0] == 'a' ? 'b' : 'a';
        break;
    case OUTSIDE_DIR:
        /* The producer's file really is there; our region_dir is not. */
        break;
    case WRONG_INODE:
        o.ino += 1;
        break;
    case THROUGH_SYMLINK:
        snprintf(path, sizeof(path), "%s", link_path);
        o.path = path;
        o.path_len = strlen(path);
        break;
    case DOT_DOT:
        snprintf(path, sizeof(path), "/dev/shm/../shm/%s", strrchr(p->path, '/') + 1);
        o.path = path;
        o.path_len = strlen(path);
        break;
    }
    uint8_t *blob;
    CHECK_OK(ect__xport_offer_encode(&o, &blob, len_p));
    return blob;
}

static void
bad_same_host_offer(enum bad_offer how, const char *expect_why)
{
    char pname[64], cname[64], lname[64], dir[256] = "", link_path[512] = "";
    names(pname, cname, lname);
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 4242, 1, 1);
    CHECK_OK(p.status);
    if (how == OUTSIDE_DIR)
        ts_shm_make_dir(dir, sizeof(dir));
    if (how == THROUGH_SYMLINK) {
        snprintf(link_path, sizeof(link_path), TS_SHM "/%s.mmap", lname);
        CHECK(symlink(p.path, link_path) == 0);
    }
    size_t alen;
    uint8_t *agent = altered_offer(&p, how, link_path, &alen);
    struct ts_xport_log log;
    ts_xport_log_capture(&log);

    /* auto: falls back to tcp, says why, and the bytes are right. */
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_AUTO, dir[0] ? dir : NULL);
    read_ok(&c, &p, 1, agent, alen, ECT_XPORT_TCP);
    CHECK_EQ_INT(
        ts_xport_log_count(&log, "peer 127.0.0.1:1: reading over tcp (same-host not usable"), 1);
    CHECK_EQ_INT(ts_xport_log_count(&log, expect_why), 1);
    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.reads[ECT_XPORT_TCP], 1);
    CHECK_EQ_U64(k.reads[ECT_XPORT_SAME_HOST], 0);
    ts_xport_consumer_close(&c);

    /* same_host only: refused, nothing written. */
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_SAME_HOST,
                           dir[0] ? dir : NULL);
    ect_xport_read_t *r;
    CHECK_STATUS(
        ts_xport_read_start(&c, &p, 1, agent, alen, REMOTE, N_REMOTE, LOCAL, N_LOCAL, &r, NULL),
        ECT_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ect_last_error(), expect_why);
    ts_xport_check_untouched(&c);
    ts_xport_consumer_close(&c);

    ect_log_set_sink(NULL, NULL);
    free(agent);
    if (link_path[0])
        unlink(link_path);
    if (dir[0])
        ts_shm_remove_dir(dir);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_same_host_offer_from_another_boot_falls_back_to_tcp)
{
    bad_same_host_offer(OTHER_BOOT, "another host or boot");
}

TS_SHM_CASE(test_same_host_offer_outside_our_region_dir_falls_back_to_tcp)
{
    bad_same_host_offer(OUTSIDE_DIR, "is not a file directly inside");
}

TS_SHM_CASE(test_same_host_offer_with_wrong_inode_falls_back_to_tcp)
{
    bad_same_host_offer(WRONG_INODE, "another file than the producer's");
}

TS_SHM_CASE(test_same_host_offer_through_a_symlink_falls_back_to_tcp)
{
    bad_same_host_offer(THROUGH_SYMLINK, "not a regular file");
}

TS_SHM_CASE(test_same_host_offer_with_dot_dot_path_falls_back_to_tcp)
{
    bad_same_host_offer(DOT_DOT, "is not a file directly inside");
}

/* ---- cache, forget, detach, logging ---------------------------------------------------------- */

TS_SHM_CASE(test_transport_choice_is_logged_once_per_peer_and_counted)
{
    char pname[64], qname[64], cname[64];
    names(pname, qname, cname);
    struct ts_xport_producer p, q;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 31, 1, 1);
    ts_xport_producer_start(&q, qname, TS_XPORT_HIDDEN, NB, 32, 1, 0);
    CHECK_OK(p.status);
    CHECK_OK(q.status);
    struct ts_xport_log log;
    ts_xport_log_capture(&log);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_AUTO, NULL);
    read_ok(&c, &p, 1, p.agent, p.agent_len, ECT_XPORT_SAME_HOST);
    read_ok(&c, &p, 1, p.agent, p.agent_len, ECT_XPORT_SAME_HOST);
    read_ok(&c, &q, 2, q.agent, q.agent_len, ECT_XPORT_TCP);
    read_ok(&c, &q, 2, q.agent, q.agent_len, ECT_XPORT_TCP);
    read_ok(&c, &q, 2, q.agent, q.agent_len, ECT_XPORT_TCP);
    CHECK_EQ_INT(ts_xport_log_count(&log, "peer 127.0.0.1:1: reading over same_host"), 1);
    CHECK_EQ_INT(ts_xport_log_count(&log, "peer 127.0.0.1:2: reading over tcp"), 1);
    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.reads[ECT_XPORT_SAME_HOST], 2);
    CHECK_EQ_U64(k.reads[ECT_XPORT_TCP], 3);
    CHECK_EQ_U64(k.bytes[ECT_XPORT_SAME_HOST], 2 * N_REMOTE * TS_XPORT_BLOCK);
    CHECK_EQ_U64(k.bytes[ECT_XPORT_TCP], 3 * N_REMOTE * TS_XPORT_BLOCK);
    CHECK_EQ_U64(k.reads[ECT_XPORT_NONE], 0);
    ts_xport_consumer_close(&c);
    ect_log_set_sink(NULL, NULL);
    ts_xport_producer_stop(&q);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

/* The copy threads' prewakes so far, once all of them sleep (at most
 * 5 s): a prewake wakes no thread while another one polls. */
static uint64_t
prewakes_once_all_asleep(ect_xport_client_t *client)
{
    struct ect__copy_cpu_stats st;
    for (int tries = 0; tries < 5000; tries++) {
        CHECK_OK(ect__xport_client_copy_stats(client, &st));
        if (st.threads > 0 && st.threads_asleep == st.threads)
            break;
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    }
    CHECK(st.threads > 0 && st.threads_asleep == st.threads);
    return st.prewakes;
}

TS_SHM_CASE(test_a_read_expected_from_a_same_host_peer_wakes_the_copy_threads)
{
    /* Expecting a read wakes the copy threads only for a peer read through
     * the same-host copy: not before its first read, not for a tcp peer,
     * not for a peer never met. */
    char pname[64], qname[64], cname[64];
    names(pname, qname, cname);
    struct ts_xport_producer p, q;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 33, 1, 1);
    ts_xport_producer_start(&q, qname, TS_XPORT_HIDDEN, NB, 34, 1, 0);
    CHECK_OK(p.status);
    CHECK_OK(q.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_AUTO, NULL);
    const uint64_t budget = 1000 * 1000;
    ect__xport_client_expect_read(c.client, "127.0.0.1", 1, budget);
    struct ect__copy_cpu_stats st;
    CHECK_OK(ect__xport_client_copy_stats(c.client, &st));
    CHECK_EQ_U64(st.prewakes, 0); /* no copy engine yet */
    read_ok(&c, &q, 2, q.agent, q.agent_len, ECT_XPORT_TCP);
    read_ok(&c, &p, 1, p.agent, p.agent_len, ECT_XPORT_SAME_HOST);
    uint64_t before = prewakes_once_all_asleep(c.client);
    ect__xport_client_expect_read(c.client, "127.0.0.1", 2, budget);
    ect__xport_client_expect_read(c.client, "127.0.0.1", 3, budget);
    ect__xport_client_expect_read(NULL, "127.0.0.1", 1, budget);
    ect__xport_client_expect_read(c.client, NULL, 1, budget);
    CHECK_OK(ect__xport_client_copy_stats(c.client, &st));
    CHECK_EQ_U64(st.prewakes, before);
    ect__xport_client_expect_read(c.client, "127.0.0.1", 1, budget);
    CHECK_OK(ect__xport_client_copy_stats(c.client, &st));
    CHECK(st.prewakes > before);
    /* The read it was woken for lands as any other. */
    read_ok(&c, &p, 1, p.agent, p.agent_len, ECT_XPORT_SAME_HOST);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&q);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_connections_are_pooled_per_peer)
{
    /* Two keys for one producer: one choice logged per key, and repeated
     * reads reuse pooled connections (one each while reads are serial). */
    char pname[64], cname[64];
    names(pname, cname, NULL);
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 41, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_log log;
    ts_xport_log_capture(&log);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_TCP, NULL);
    for (int i = 0; i < 3; i++) {
        read_ok(&c, &p, 11, p.agent, p.agent_len, ECT_XPORT_TCP);
        read_ok(&c, &p, 12, p.agent, p.agent_len, ECT_XPORT_TCP);
    }
    CHECK_EQ_INT(ts_xport_log_count(&log, "peer 127.0.0.1:11: reading over tcp"), 1);
    CHECK_EQ_INT(ts_xport_log_count(&log, "peer 127.0.0.1:12: reading over tcp"), 1);
    CHECK_EQ_INT(ts_xport_log_count(&log, "restarted"), 0);
    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.peer_restarts, 0);
    CHECK_EQ_U64(k.reads[ECT_XPORT_TCP], 6);
    /* Six streams over two pooled connections. */
    ect_xport_server_counters_t sk;
    uint64_t fin[2];
    ts_xport_producer_counters_after(&p, 6, &sk, fin);
    CHECK_EQ_U64(sk.streams_served, 6);
    CHECK_EQ_U64(sk.connections, 2);
    ts_xport_consumer_close(&c);
    ect_log_set_sink(NULL, NULL);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_remove_remote_peer_forget_is_safe_and_reconnects)
{
    char pname[64], cname[64];
    names(pname, cname, NULL);
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, 256, 51, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, 256, ECT_TRANSPORT_TCP, NULL);
    ect__xport_client_forget_peer(c.client, "never.seen", 1);
    uint64_t remote[256];
    for (int i = 0; i < 256; i++)
        remote[i] = 255 - (uint64_t)i;
    ect_run_t all = {0, 256};
    ect_xport_read_t *r;
    CHECK_OK(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, 256, &all, 1, &r, NULL));
    /* Forgotten while its read is in flight: the read still completes. */
    ect__xport_client_forget_peer(c.client, "127.0.0.1", 1);
    CHECK_EQ_INT(ts_xport_wait(&c, r, 30), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c.client, r);
    ts_xport_check_landed(&c, &p, remote, 256, &all, 1);
    /* And the next read makes a new peer; it is not a restart. */
    for (int i = 0; i < 256; i++)
        remote[i] = (uint64_t)i;
    CHECK_OK(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, 256, &all, 1, &r, NULL));
    CHECK_EQ_INT(ts_xport_wait(&c, r, 30), ECT_XPORT_READ_DONE);
    ect__xport_read_release(c.client, r);
    ts_xport_check_landed(&c, &p, remote, 256, &all, 1);
    ect_xport_counters_t k;
    ect__xport_client_counters(c.client, &k);
    CHECK_EQ_U64(k.peer_restarts, 0);
    CHECK_EQ_U64(k.reads[ECT_XPORT_TCP], 2);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_released_pending_same_host_read_is_detached_and_lands_before_destroy)
{
    char pname[64], cname[64];
    names(pname, cname, NULL);
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, BIG_HIDDEN, 256, 61, 1, 1);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, BIG_HIDDEN, 256, ECT_TRANSPORT_SAME_HOST, NULL);
    uint64_t remote[256];
    for (int i = 0; i < 256; i++)
        remote[i] = (uint64_t)(i * 7 % 256); /* 7 is coprime with 256 */
    ect_run_t all = {0, 256};
    ect_xport_read_t *r;
    CHECK_OK(ts_xport_read_start(&c, &p, 1, p.agent, p.agent_len, remote, 256, &all, 1, &r, NULL));
    /* Released at once, most likely still PENDING: a copy cannot be cut,
     * so it is detached. */
    ect__xport_read_release(c.client, r);
    /* Destroy waits for it, so afterwards every byte is there. */
    ect__xport_client_destroy(c.client);
    c.client = NULL;
    ts_xport_check_landed(&c, &p, remote, 256, &all, 1);
    ect_region_close(c.region);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_same_host_mapping_keeps_a_stopped_producers_file_until_forgotten)
{
    char pname[64], cname[64];
    names(pname, cname, NULL);
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 71, 0, 1);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_AUTO, NULL);
    read_ok(&c, &p, 1, p.agent, p.agent_len, ECT_XPORT_SAME_HOST);
    char path[512];
    snprintf(path, sizeof(path), "%s", p.path);
    ts_xport_producer_stop(&p);
    /* Our shared lock keeps it (the reader of a mapping must not lose it). */
    CHECK(ts_exists(path));
    ect__xport_client_forget_peer(c.client, "127.0.0.1", 1);
    CHECK(ts_wait_gone(path, 5000));
    ts_xport_consumer_close(&c);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_idle_producer_sleeps_instead_of_spinning)
{
    char pname[64], cname[64];
    names(pname, cname, NULL);
    struct ts_xport_producer p;
    ts_xport_producer_start(&p, pname, TS_XPORT_HIDDEN, NB, 81, 1, 0);
    CHECK_OK(p.status);
    struct ts_xport_consumer c;
    ts_xport_consumer_open(&c, cname, TS_XPORT_HIDDEN, NB, ECT_TRANSPORT_TCP, NULL);
    /* Serve a read, then go idle with the connection still pooled. */
    read_ok(&c, &p, 1, p.agent, p.agent_len, ECT_XPORT_TCP);
    struct timespec settle = {0, 100 * 1000 * 1000};
    nanosleep(&settle, NULL);
    double before = ts_cpu_seconds(p.pid);
    struct timespec idle = {1, 0};
    nanosleep(&idle, NULL);
    double used = ts_cpu_seconds(p.pid) - before;
    /* A spinning server thread would use about a whole second. */
    CHECK_MSG(used < 0.2, "the idle producer used %.2f s of CPU in 1 s", used);
    /* And it still wakes up for the next read. */
    read_ok(&c, &p, 1, p.agent, p.agent_len, ECT_XPORT_TCP);
    ts_xport_consumer_close(&c);
    ts_xport_producer_stop(&p);
    ts_check_no_leftovers();
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_producer_restart_over_tcp_is_noticed_counted_and_read_works),
    ECT_CASE(test_producer_restart_over_same_host_is_noticed_counted_and_read_works),
    ECT_CASE(test_producer_killed_during_large_tcp_read_fails_the_read),
    ECT_CASE(test_same_host_offer_from_another_boot_falls_back_to_tcp),
    ECT_CASE(test_same_host_offer_outside_our_region_dir_falls_back_to_tcp),
    ECT_CASE(test_same_host_offer_with_wrong_inode_falls_back_to_tcp),
    ECT_CASE(test_same_host_offer_through_a_symlink_falls_back_to_tcp),
    ECT_CASE(test_same_host_offer_with_dot_dot_path_falls_back_to_tcp),
    ECT_CASE(test_transport_choice_is_logged_once_per_peer_and_counted),
    ECT_CASE(test_connections_are_pooled_per_peer),
    ECT_CASE(test_remove_remote_peer_forget_is_safe_and_reconnects),
    ECT_CASE(test_released_pending_same_host_read_is_detached_and_lands_before_destroy),
    ECT_CASE(test_same_host_mapping_keeps_a_stopped_producers_file_until_forgotten),
    ECT_CASE(test_idle_producer_sleeps_instead_of_spinning),
    ECT_CASE(test_a_read_expected_from_a_same_host_peer_wakes_the_copy_threads),
};

int
main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], TS_XPORT_PRODUCER_ARG) == 0)
        return ts_xport_producer_main(argc, argv);
    return ECT_TEST_MAIN(argc, argv, cases);
}
