/*
 * Peer-to-peer transfer when things go wrong (issue 4): a save that lands
 * late (retried, keeping the reserved blocks), an entry evicted between its
 * announcement and the read, announcement holds, a producer stopped with
 * SIGSTOP during a read (read timeout, quarantine, settling after SIGCONT),
 * and a producer killed with SIGKILL during a read, then restarted on the
 * same port.  Producers that must die run in forked processes.
 */
#include <signal.h>
#include <sys/wait.h>

#include "support/p2p.h"
#include "support/cli.h"

static void
open_instance(struct ect_cli_instance *in, const char *role, unsigned long long cpu_bytes,
              const char *hidden, const char *extra)
{
    ts_p2p_open_instance(in, role, cpu_bytes, hidden, extra, "m");
}

static void
test_not_ready_is_retried_keeping_blocks_until_the_late_save_lands(void)
{
    struct ect_cli_instance p, c;
    open_instance(&p, "ec_producer", 1 << 20, "64", NULL);
    open_instance(&c, "ec_consumer", 1 << 20, "64", NULL);
    char hash[65];
    ect_pattern_mm_hash(7, hash);
    const uint64_t tokens = 30, block = 128;
    /* The producer allocates and announces, but its save has not landed. */
    ect_mm_feature_t f = {.identifier = hash, .mm_hash = hash, .num_tokens = tokens};
    ect_request_t req = {.request_id = hash, .features = &f, .n_features = 1};
    CHECK_OK(ect_scheduler_update_state_after_alloc(p.sched, &req, 0));
    ect_step_meta_t *meta;
    CHECK_OK(ect_scheduler_build_connector_meta(p.sched, &meta));
    size_t cap = ect_step_meta_encoded_size(meta), len;
    uint8_t *mb = malloc(cap);
    CHECK_OK(ect_step_meta_encode(meta, mb, cap, &len));
    ect_step_meta_destroy(meta);
    CHECK_OK(ect_worker_bind_metadata(p.worker, mb, len));
    free(mb);
    char *params = ts_p2p_announce(&p, hash, tokens);
    /* The consumer keeps asking; it is told NOT_READY and keeps its blocks. */
    uint64_t end = ts_now_ns() + 400ull * 1000 * 1000;
    while (ts_now_ns() < end)
        CHECK_EQ_INT(ts_p2p_ensure_once(&c, hash, tokens, params, 0), TS_P2P_DEFERRED);
    ect_metrics_t m = ts_p2p_metrics(&c);
    CHECK_MSG(m.acks_received[5] >= 2, "only %llu NOT_READY acks",
              (unsigned long long)m.acks_received[5]);
    CHECK_EQ_U64(m.cache.allocs, 1); /* one reservation across every retry */
    CHECK_EQ_U64(m.cache.entries_not_ready, 1);
    CHECK_EQ_U64(m.p2p_fallbacks, 0);
    /* The save lands late. */
    uint8_t *payload = malloc(tokens * block);
    ect_pattern_fill(hash, payload, tokens * block);
    CHECK_OK(ect_worker_save(p.worker, hash, payload, tokens * block, NULL, NULL));
    CHECK_OK(ect_worker_get_finished(p.worker));
    CHECK_OK(ect_worker_wait(p.worker));
    ect_step_report_t *rep = NULL;
    CHECK_OK(ect_worker_take_report(p.worker, &rep));
    CHECK(rep != NULL);
    CHECK_OK(ect_scheduler_apply_report(p.sched, rep));
    ect_step_report_destroy(rep);
    ect_worker_clear_metadata(p.worker);
    CHECK_EQ_INT(ts_p2p_fetch(&c, hash, tokens, params, 0, 10), TS_P2P_FETCHED);
    ts_p2p_check_loaded(&c, hash, tokens, block);
    CHECK_EQ_U64(ts_p2p_metrics(&c).cache.allocs, 1);
    ts_p2p_finish(&c, hash, tokens);
    free(payload);
    ect_free(params);
    ect_cli_instance_close(&c);
    ect_cli_instance_close(&p);
}

static void
evicted_or_held(int hold)
{
    /* 64 blocks: two 30-token entries fit, a third evicts the oldest. */
    struct ect_cli_instance p, c;
    open_instance(&p, "ec_producer", 64 * 128, "64",
                  hold ? "\"announce_lease_s\": 30" : "\"announce_lease_s\": 0");
    open_instance(&c, "ec_consumer", 1 << 20, "64", NULL);
    char a[65], b[65], x[65];
    ts_p2p_save_pattern(&p, 1, 30, 128, a);
    char *params = ts_p2p_announce(&p, a, 30);
    ts_p2p_save_pattern(&p, 2, 30, 128, b);
    ect_pattern_mm_hash(3, x);
    uint8_t *buf = malloc(30 * 128);
    ect_pattern_fill(x, buf, 30 * 128);
    ect_status_t st = ect_cli_instance_save(&p, x, 30, buf, 30 * 128);
    free(buf);
    if (hold) {
        /* The announced entry a is held, so making room for x evicts b. */
        CHECK_OK(st);
        CHECK_EQ_INT(ts_p2p_fetch(&c, a, 30, params, 0, 10), TS_P2P_FETCHED);
        ts_p2p_check_loaded(&c, a, 30, 128);
    } else {
        CHECK_OK(st); /* evicted a */
        CHECK_EQ_INT(ts_p2p_fetch(&c, a, 30, params, 0, 10), TS_P2P_UNAVAILABLE);
        CHECK_EQ_U64(ts_p2p_metrics(&c).acks_received[1], 1);
        CHECK_EQ_U64(ts_p2p_metrics(&c).cache.entries, 0);
    }
    ts_p2p_finish(&c, a, 30);
    ect_free(params);
    ect_cli_instance_close(&c);
    ect_cli_instance_close(&p);
}

static void
test_entry_evicted_between_announcement_and_read_fails_the_request(void)
{
    evicted_or_held(0);
}

static void
test_announced_encoding_is_not_evictable(void)
{
    evicted_or_held(1);
}

/* ---- producers in other processes ------------------------------------------ */

#define BIG_HIDDEN "4096" /* 8 KiB blocks */
#define BIG_BLOCK  8192u
#define BIG_TOKENS 32768u /* 256 MiB */
#define BIG_REGION (300ull << 20)

/* Start `ectier producer` (a fresh process) serving one test-pattern entry of tokens rows on port
 * (0: any); returns its pid and the entry's announcement. */
static pid_t
spawn_producer(unsigned port, uint64_t tokens, char **params_p)
{
    char listen[32], tok[32], cfg[512];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
    snprintf(tok, sizeof(tok), "%llu", (unsigned long long)tokens);
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_producer\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu, \"ec_enable_nixl\": true, "
             "\"transport\": \"tcp\"}}",
             (unsigned long long)BIG_REGION);
    const char *const argv[] = {
        "ectier",   "producer", "--config", cfg,    "--model",          "m",
        "--hidden", BIG_HIDDEN, "--dtype",  "bf16", "--engine-version", "0.11.0",
        "--listen", listen,     "--fill",   "1",    "--tokens",         tok,
        NULL};
    FILE *f;
    pid_t pid = ts_cli_spawn(argv, &f, NULL); /* dies with the test, whatever way it ends */
    char *line = calloc(1, 4096);
    CHECK_MSG(fgets(line, 4096, f) != NULL && line[0] == '{', "the producer did not announce: '%s'",
              line);
    char ready[16] = "";
    CHECK(fgets(ready, sizeof(ready), f) != NULL && strncmp(ready, "ready", 5) == 0);
    fclose(f);
    *params_p = line;
    return pid;
}

static const char *
params_hash(const char *params, char out[65])
{
    CHECK(sscanf(params, "{\"%64[0-9a-f]\"", out) == 1);
    return out;
}

/* Ask until the read has started (the ack arrived). */
static void
start_and_wait_for_read(struct ect_cli_instance *c, const char *hash, const char *params)
{
    uint64_t end = ts_now_ns() + 10ull * 1000000000ull;
    while (ts_p2p_metrics(c).p2p_reads_started == 0 && ts_now_ns() < end)
        CHECK_EQ_INT(ts_p2p_ensure_once(c, hash, BIG_TOKENS, params, 1), TS_P2P_DEFERRED);
    CHECK_MSG(ts_p2p_metrics(c).p2p_reads_started == 1, "the read never started");
}

static void
test_producer_stopped_during_read_times_out_quarantines_and_settles(void)
{
    /* The 256 MiB read takes ~0.1 s on loopback: on a busy machine it may
     * land before SIGSTOP.  Such an attempt proves nothing; try again (a
     * fresh producer each time) until one is stopped mid-read. */
    int stopped_mid_read = 0;
    for (int attempt = 0; attempt < 5 && !stopped_mid_read; attempt++) {
        struct ect_cli_instance c; /* a fresh one: a fetched entry would be a local hit */
        open_instance(&c, "ec_consumer", BIG_REGION, BIG_HIDDEN,
                      "\"transport\": \"tcp\", \"read_timeout_s\": 1, \"quarantine_s\": 30");
        char *params;
        pid_t child = spawn_producer(0, BIG_TOKENS, &params);
        char hash[65];
        params_hash(params, hash);
        uint64_t started = 0;
        uint64_t end = ts_now_ns() + 10ull * 1000000000ull;
        while (ts_p2p_metrics(&c).p2p_reads_started == started && ts_now_ns() < end)
            CHECK_EQ_INT(ts_p2p_ensure_once(&c, hash, BIG_TOKENS, params, 1), TS_P2P_DEFERRED);
        CHECK_MSG(ts_p2p_metrics(&c).p2p_reads_started == started + 1, "the read never started");
        CHECK(kill(child, SIGSTOP) == 0);
        ect_metrics_t before = ts_p2p_metrics(&c);
        enum ts_p2p_outcome o = ts_p2p_fetch(&c, hash, BIG_TOKENS, params, 1, 15);
        ect_metrics_t m = ts_p2p_metrics(&c);
        if (o == TS_P2P_FETCHED) {
            CHECK_EQ_U64(m.p2p_read_timeouts, before.p2p_read_timeouts);
        } else {
            /* The read could not finish: after the read timeout the item
             * falls back, and the cut stream frees its blocks while the
             * producer is still stopped, without waiting for the quarantine
             * (30 s here). */
            CHECK_EQ_INT(o, TS_P2P_ENCODE_LOCALLY);
            CHECK_EQ_U64(m.p2p_read_timeouts, before.p2p_read_timeouts + 1);
            end = ts_now_ns() + 5ull * 1000000000ull;
            while ((ts_p2p_metrics(&c).cache.entries_not_ready != 0 ||
                    ect_scheduler_has_pending_push_work(c.sched)) &&
                   ts_now_ns() < end)
                usleep(10000);
            CHECK_EQ_U64(ts_p2p_metrics(&c).cache.entries_not_ready, 0);
            CHECK(!ect_scheduler_has_pending_push_work(c.sched));
            stopped_mid_read = 1;
        }
        CHECK(kill(child, SIGCONT) == 0);
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        ts_p2p_finish(&c, hash, BIG_TOKENS);
        free(params);
        ect_cli_instance_close(&c);
    }
    CHECK_MSG(stopped_mid_read, "every 256 MiB read finished before SIGSTOP: test inconclusive");
}

static void
test_producer_killed_during_read_falls_back_and_a_restarted_one_serves(void)
{
    char *params;
    pid_t child = spawn_producer(0, BIG_TOKENS, &params);
    struct ect_cli_instance c;
    open_instance(&c, "ec_consumer", 2 * BIG_REGION, BIG_HIDDEN,
                  "\"transport\": \"tcp\", \"read_timeout_s\": 2, \"quarantine_s\": 3");
    char hash[65];
    params_hash(params, hash);
    start_and_wait_for_read(&c, hash, params);
    CHECK(kill(child, SIGKILL) == 0);
    waitpid(child, NULL, 0);
    enum ts_p2p_outcome o = ts_p2p_fetch(&c, hash, BIG_TOKENS, params, 1, 15);
    CHECK_MSG(o == TS_P2P_ENCODE_LOCALLY, "outcome %d: the read should fail or time out", o);
    ts_p2p_finish(&c, hash, BIG_TOKENS);
    /* A new producer on the same port (new stream port, new offer): the
     * consumer reconnects without an extra round trip and keeps serving. */
    char *params2;
    pid_t child2 = spawn_producer(ts_p2p_params_port(params), 1000, &params2);
    CHECK_EQ_U64(ts_p2p_params_port(params2), ts_p2p_params_port(params));
    char hash2[65];
    params_hash(params2, hash2); /* the same test entry, served by a new process */
    o = ts_p2p_fetch(&c, hash2, 1000, params2, 0, 15);
    CHECK_EQ_INT(o, TS_P2P_FETCHED);
    ts_p2p_check_loaded(&c, hash2, 1000, BIG_BLOCK);
    ts_p2p_finish(&c, hash2, 1000);
    kill(child2, SIGKILL);
    waitpid(child2, NULL, 0);
    free(params);
    free(params2);
    ect_cli_instance_close(&c);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_not_ready_is_retried_keeping_blocks_until_the_late_save_lands),
    ECT_CASE(test_entry_evicted_between_announcement_and_read_fails_the_request),
    ECT_CASE(test_announced_encoding_is_not_evictable),
    ECT_CASE(test_producer_stopped_during_read_times_out_quarantines_and_settles),
    ECT_CASE(test_producer_killed_during_read_falls_back_and_a_restarted_one_serves),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
