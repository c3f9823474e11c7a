/*
 * Whole P2P instances driven through the engine calls (see p2p.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/p2p.h"

void
ts_p2p_open_instance(struct ect_cli_instance *in, const char *role, unsigned long long cpu_bytes,
                     const char *hidden, const char *extra, const char *model)
{
    char cfg[1024];
    snprintf(cfg, sizeof(cfg),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"%s\", \"ec_connector_extra_config\": "
             "{\"ec_cpu_bytes\": %llu, \"ec_enable_nixl\": true%s%s}}",
             role, cpu_bytes, extra ? ", " : "", extra ? extra : "");
    setenv("ECTIER_SIDE_CHANNEL_HOST", "127.0.0.1", 1);
    if (getenv("ECTIER_SIDE_CHANNEL_PORT") == NULL)
        setenv("ECTIER_SIDE_CHANNEL_PORT", "0", 1);
    struct ect_cli_instance_args a = {.cmd = "test",
                                      .config = cfg,
                                      .model = model,
                                      .hidden = hidden,
                                      .dtype = "bf16",
                                      .engine_version = "0.11.0"};
    CHECK_MSG(ect_cli_instance_open(in, &a, "") == 0, "instance: %s", ect_last_error());
}

char *
ts_p2p_announce(struct ect_cli_instance *p, const char *hash, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = hash, .mm_hash = hash, .num_tokens = tokens};
    ect_request_t req = {.request_id = hash, .features = &f, .n_features = 1};
    char *params = NULL;
    CHECK_OK(ect_scheduler_request_finished(p->sched, &req, &params));
    CHECK(params != NULL);
    return params;
}

void
ts_p2p_save_pattern(struct ect_cli_instance *p, unsigned i, uint64_t tokens, uint64_t block,
                    char hash[65])
{
    ect_pattern_mm_hash(i, hash);
    size_t n = tokens * block;
    uint8_t *buf = malloc(n);
    ect_pattern_fill(hash, buf, n);
    CHECK_OK(ect_cli_instance_save(p, hash, tokens, buf, n));
    free(buf);
}

enum ts_p2p_outcome
ts_p2p_ensure_once(struct ect_cli_instance *c, const char *hash, uint64_t tokens,
                   const char *params, int has_local_input)
{
    ect_mm_feature_t f = {.identifier = hash,
                          .mm_hash = hash,
                          .num_tokens = tokens,
                          .has_local_input = has_local_input};
    ect_request_t req = {
        .request_id = hash, .features = &f, .n_features = 1, .ec_transfer_params_json = params};
    int available = 0;
    CHECK_OK(ect_scheduler_ensure_cache_available(c->sched, &req, &available));
    if (available)
        return ect_scheduler_has_cache_item(c->sched, hash) ? TS_P2P_FETCHED
                                                            : TS_P2P_ENCODE_LOCALLY;
    char *ids[4];
    size_t k = ect_scheduler_take_unavailable_requests(c->sched, ids, 4);
    int mine = 0;
    for (size_t i = 0; i < k; i++) {
        mine |= strcmp(ids[i], hash) == 0;
        ect_free(ids[i]);
    }
    return mine ? TS_P2P_UNAVAILABLE : TS_P2P_DEFERRED;
}

enum ts_p2p_outcome
ts_p2p_fetch(struct ect_cli_instance *c, const char *hash, uint64_t tokens, const char *params,
             int has_local_input, double timeout_s)
{
    uint64_t end = ts_now_ns() + (uint64_t)(timeout_s * 1e9);
    enum ts_p2p_outcome o;
    while ((o = ts_p2p_ensure_once(c, hash, tokens, params, has_local_input)) == TS_P2P_DEFERRED &&
           ts_now_ns() < end)
        usleep(500);
    return o;
}

void
ts_p2p_finish(struct ect_cli_instance *c, const char *hash, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = hash, .mm_hash = hash, .num_tokens = tokens};
    ect_request_t req = {.request_id = hash, .features = &f, .n_features = 1};
    char *unused = NULL;
    CHECK_OK(ect_scheduler_request_finished(c->sched, &req, &unused));
    ect_free(unused);
}

void
ts_p2p_check_loaded(struct ect_cli_instance *c, const char *hash, uint64_t tokens, uint64_t block)
{
    size_t n = tokens * block;
    uint8_t *buf = calloc(1, n);
    CHECK_OK(ect_cli_instance_load(c, hash, tokens, buf, n));
    size_t bad = ect_pattern_check(hash, buf, n);
    CHECK_MSG(bad == n, "'%s' differs from the pattern at byte %zu", hash, bad);
    free(buf);
}

ect_metrics_t
ts_p2p_metrics(struct ect_cli_instance *in)
{
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(in->sched, &m));
    return m;
}

unsigned
ts_p2p_params_port(const char *params)
{
    const char *at = strstr(params, "\"peer_port\":");
    CHECK(at != NULL);
    return (unsigned)strtoul(at + 12, NULL, 10);
}
