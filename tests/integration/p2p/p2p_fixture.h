/*
 * Helpers shared by the P2P end-to-end tests: whole instances (scheduler +
 * worker + sessions, tools/p2p/instance.h) driven through the engine calls,
 * the test pattern, and the consumer's admission loop.
 */
#ifndef ECT_TESTS_P2P_FIXTURE_H
#define ECT_TESTS_P2P_FIXTURE_H

#include <time.h>

#include <ectier/ectier.h>

#include "harness.h"
#include "instance.h"
#include "pattern.h"

static inline uint64_t
pf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* An instance with P2P on, listening on 127.0.0.1 (a free port unless
 * ECTIER_SIDE_CHANNEL_PORT is set); extra: more extra-config keys or NULL. */
static inline void
pf_open_instance(struct ect_cli_instance *in, const char *role, unsigned long long cpu_bytes,
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

/* request_finished on the producer: the announcement (ect_free it). */
static inline char *
pf_announce(struct ect_cli_instance *p, const char *hash, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = hash, .mm_hash = hash, .num_tokens = tokens};
    ect_request_t req = {.request_id = hash, .features = &f, .n_features = 1};
    char *params = NULL;
    CHECK_OK(ect_scheduler_request_finished(p->sched, &req, &params));
    CHECK(params != NULL);
    return params;
}

/* Save the test pattern of entry i (tokens rows of block bytes). */
static inline void
pf_save_pattern(struct ect_cli_instance *p, unsigned i, uint64_t tokens, uint64_t block,
                char hash[65])
{
    ect_pattern_mm_hash(i, hash);
    size_t n = tokens * block;
    uint8_t *buf = malloc(n);
    ect_pattern_fill(hash, buf, n);
    CHECK_OK(ect_cli_instance_save(p, hash, tokens, buf, n));
    free(buf);
}

enum pf_outcome { PF_FETCHED, PF_ENCODE_LOCALLY, PF_UNAVAILABLE, PF_DEFERRED };

/* One ensure_cache_available call for a one-item request. */
static inline enum pf_outcome
pf_ensure_once(struct ect_cli_instance *c, const char *hash, uint64_t tokens, const char *params,
               int has_local_input)
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
        return ect_scheduler_has_cache_item(c->sched, hash) ? PF_FETCHED : PF_ENCODE_LOCALLY;
    char *ids[4];
    size_t k = ect_scheduler_take_unavailable_requests(c->sched, ids, 4);
    int mine = 0;
    for (size_t i = 0; i < k; i++) {
        mine |= strcmp(ids[i], hash) == 0;
        ect_free(ids[i]);
    }
    return mine ? PF_UNAVAILABLE : PF_DEFERRED;
}

/* Ask until the item is decided or timeout_s passes (then PF_DEFERRED). */
static inline enum pf_outcome
pf_fetch(struct ect_cli_instance *c, const char *hash, uint64_t tokens, const char *params,
         int has_local_input, double timeout_s)
{
    uint64_t end = pf_now_ns() + (uint64_t)(timeout_s * 1e9);
    enum pf_outcome o;
    while ((o = pf_ensure_once(c, hash, tokens, params, has_local_input)) == PF_DEFERRED &&
           pf_now_ns() < end)
        usleep(500);
    return o;
}

static inline void
pf_finish(struct ect_cli_instance *c, const char *hash, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = hash, .mm_hash = hash, .num_tokens = tokens};
    ect_request_t req = {.request_id = hash, .features = &f, .n_features = 1};
    char *unused = NULL;
    CHECK_OK(ect_scheduler_request_finished(c->sched, &req, &unused));
    ect_free(unused);
}

/* Load the entry through the worker and compare it with the pattern. */
static inline void
pf_check_loaded(struct ect_cli_instance *c, const char *hash, uint64_t tokens, uint64_t block)
{
    size_t n = tokens * block;
    uint8_t *buf = calloc(1, n);
    CHECK_OK(ect_cli_instance_load(c, hash, tokens, buf, n));
    size_t bad = ect_pattern_check(hash, buf, n);
    CHECK_MSG(bad == n, "'%s' differs from the pattern at byte %zu", hash, bad);
    free(buf);
}

static inline ect_metrics_t
pf_metrics(struct ect_cli_instance *in)
{
    ect_metrics_t m;
    CHECK_OK(ect_scheduler_metrics(in->sched, &m));
    return m;
}

/* The producer's port, from an announcement. */
static inline unsigned
pf_params_port(const char *params)
{
    const char *at = strstr(params, "\"peer_port\":");
    CHECK(at != NULL);
    return (unsigned)strtoul(at + 12, NULL, 10);
}

/* utime + stime of a process in seconds (/proc/PID/stat fields 14, 15). */
static inline double
pf_cpu_seconds(pid_t pid)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold anything */
    CHECK(p != NULL);
    unsigned long long utime = 0, stime = 0;
    /* The first field after ')' is field 3. */
    CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) ==
          2);
    return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

#endif /* ECT_TESTS_P2P_FIXTURE_H */
