/*
 * Allocation failure sweep of the P2P paths (issue 13; the driver is
 * tests/support/sweep.c): a producer instance saves an entry and announces it
 * at request_finished; a consumer instance on loopback is handed the
 * announcement, fetches the entry through its session and loads it through
 * its worker.  Allocation n fails in whichever thread makes it (the
 * engine's calls, the sessions' threads, the copy engine's), so failures
 * happen on either side.  The consumer must either get the bytes, or fall
 * back (the request is admitted to encode locally, or reported
 * unavailable) within its deferral budget: never crash, hang or leak.
 *
 * ZeroMQ's own allocations are not ectier's and never fail here.  Runs past
 * the first 200 step n by 5 (the path makes more allocations than the unit
 * paths, and each run starts two instances).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "ectier_build_config.h"
#include "harness.h"
#include "support/sweep.h"
#include "common/clock.h"

#define BLOCK  64 /* 32 x bf16 */
#define TOKENS 3

struct side {
    ect_config_t cfg;
    ect_geometry_t geom;
    char id[96];
    ect_scheduler_t *s;
    ect_worker_t *w;
};

/* One instance of role on 127.0.0.1 (a free port), named after the case. */
static ect_status_t
side_open(struct side *d, const struct ts_sweep_run *r, const char *role)
{
    char cfg[512];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"%s\", \"ec_connector_extra_config\": "
             "{\"ec_cpu_bytes\": 4096, \"ec_enable_nixl\": true, \"transport\": \"same_host\", "
             "\"region_reaper\": false, \"copy_threads\": 1, \"read_timeout_s\": 1, "
             "\"consumer_ack_timeout_s\": 1, \"defer_budget_s\": 2, \"announce_lease_s\": 5}}",
             role);
    setenv("ECTIER_SIDE_CHANNEL_HOST", "127.0.0.1", 1);
    setenv("ECTIER_SIDE_CHANNEL_PORT", "0", 1);
    d->s = NULL;
    d->w = NULL;
    snprintf(d->id, sizeof(d->id), "%s-%c", r->id, role[3]);
    ect_status_t st = ect_config_parse(cfg, strlen(cfg), &d->cfg);
    if (st != ECT_OK)
        return st;
    CHECK_OK(ect_geometry_init(32, ECT_DTYPE_BF16, d->cfg.cpu_bytes, &d->geom));
    ect_scheduler_params_t sp = {.config = &d->cfg,
                                 .geometry = &d->geom,
                                 .instance_id = d->id,
                                 .engine_version = "0.11.0",
                                 .model_name = "m"};
    if ((st = ect_scheduler_create(&sp, &d->s)) != ECT_OK)
        return st;
    ect_worker_params_t wp = {.config = &d->cfg,
                              .geometry = &d->geom,
                              .instance_id = d->id,
                              .memory = ECT_WORKER_HOST_MEMORY};
    return ect_worker_create(&wp, &d->w);
}

static void
side_close(struct side *d)
{
    ect_worker_destroy(d->w);
    ect_scheduler_destroy(d->s);
}

static ect_status_t
load_target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    (void)key;
    (void)n_tokens;
    CHECK(nbytes <= TOKENS * BLOCK);
    *dst_p = user;
    return ECT_OK;
}

static const char HASH[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static ect_status_t
path_p2p(struct ts_sweep_run *r)
{
    struct side p, c;
    unsigned char rows[TOKENS * BLOCK], back[TOKENS * BLOCK];
    for (size_t i = 0; i < sizeof(rows); i++)
        rows[i] = (unsigned char)(i * 11 + 3);
    memset(back, 0, sizeof(back));
    char *params = NULL;
    ect_mm_feature_t f = {
        .identifier = HASH, .mm_hash = HASH, .num_tokens = TOKENS, .has_local_input = 1};
    ect_request_t req = {.request_id = "r1", .features = &f, .n_features = 1};
    ect_status_t st = side_open(&p, r, "ec_producer");
    ect_status_t cst = side_open(&c, r, "ec_consumer");
    TS_TRY(st);
    TS_TRY(cst);

    /* The producer encodes, saves and announces. */
    TS_TRY(ect_scheduler_update_state_after_alloc(p.s, &req, 0));
    TS_TRY(ts_sweep_bind_step(p.s, p.w));
    int queued = 0;
    ect_status_t sa = ect_worker_save(p.w, HASH, rows, sizeof(rows), NULL, &queued);
    ect_status_t gf = ect_worker_get_finished(p.w);
    ect_worker_clear_metadata(p.w);
    TS_TRY(ts_sweep_report_step(p.s, p.w));
    TS_TRY(sa);
    TS_TRY(gf);
    TS_TRY(ect_scheduler_request_finished(p.s, &req, &params));
    if (params == NULL) {
        /* Nothing to announce (the save was skipped): only under failure. */
        CHECK(ect__alloc_failed() > 0);
        goto out;
    }

    /* The consumer is handed the announcement; the media is gone, so it
     * must fetch, or be told the request is unavailable. */
    f.has_local_input = 0;
    req.ec_transfer_params_json = params;
    int available = 0, unavailable = 0;
    uint64_t end = ect__now_ns() + 6000000000ull;
    for (;;) {
        TS_TRY(ect_scheduler_ensure_cache_available(c.s, &req, &available));
        char *ids[4];
        size_t k = ect_scheduler_take_unavailable_requests(c.s, ids, 4);
        for (size_t i = 0; i < k; i++) {
            unavailable |= strcmp(ids[i], "r1") == 0;
            ect_free(ids[i]);
        }
        if (available || unavailable)
            break;
        CHECK_MSG(ect__now_ns() < end, "the consumer deferred the request past its budget");
        usleep(500);
    }
    int fetched = available && ect_scheduler_has_cache_item(c.s, HASH);
    if (fetched) {
        TS_TRY(ect_scheduler_update_state_after_alloc(c.s, &req, 0));
        TS_TRY(ts_sweep_bind_step(c.s, c.w));
        ect_status_t sl = ect_worker_start_load(c.w, load_target, back, NULL);
        ect_worker_clear_metadata(c.w);
        TS_TRY(ts_sweep_report_step(c.s, c.w));
        TS_TRY(sl);
        /* Fetched: the bytes are the producer's. */
        CHECK(memcmp(rows, back, sizeof(rows)) == 0);
    }
    char *unused = NULL;
    TS_TRY(ect_scheduler_request_finished(c.s, &req, &unused));
    ect_free(unused);
    if (ect__alloc_failed() == 0) { /* nothing failed: the fetch worked */
        CHECK(fetched);
    }
out:
    ect_free(params);
    side_close(&c);
    side_close(&p);
    return st;
}

static void
test_sweep_producer_and_consumer(void)
{
    ts_sweep_strided("p2p producer and consumer", path_p2p, 200, 5);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_sweep_producer_and_consumer),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
