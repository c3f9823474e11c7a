/*
 * An in-process instance for the producer and consumer commands (see
 * instance.h).  One scheduler and one worker in the same process: step
 * metadata and reports still go through their byte encodings, exactly as
 * between an engine's processes.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "instance.h"

static char *
read_config_text(const char *cmd, const char *arg)
{
    if (arg[0] != '@')
        return strdup(arg);
    FILE *f = fopen(arg + 1, "rb");
    if (f == NULL) {
        ect_cli_fail(cmd, "--config %s: %s", arg + 1, strerror(errno));
        return NULL;
    }
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf == NULL)
        return NULL;
    buf[n] = '\0';
    return buf;
}

static int
parse_listen(const char *cmd, const char *usage, const char *text, ect_config_t *cfg)
{
    const char *colon = strrchr(text, ':');
    char *end = NULL;
    unsigned long port = colon ? strtoul(colon + 1, &end, 10) : 0;
    size_t host_len = colon ? (size_t)(colon - text) : 0;
    if (colon == NULL || host_len == 0 || host_len >= sizeof(cfg->side_channel_host) ||
        end == colon + 1 || *end != '\0' || port > 65535)
        return ect_cli_usage_error(cmd, usage, "--listen '%s' is not HOST:PORT (PORT 0..65535)",
                                   text);
    memcpy(cfg->side_channel_host, text, host_len);
    cfg->side_channel_host[host_len] = '\0';
    cfg->side_channel_port = (uint16_t)port;
    return 0;
}

int
ect_cli_instance_open(struct ect_cli_instance *in, const struct ect_cli_instance_args *a,
                      const char *usage)
{
    memset(in, 0, sizeof(*in));
    if (a->config == NULL || a->model == NULL || a->hidden == NULL || a->dtype == NULL)
        return ect_cli_usage_error(a->cmd, usage,
                                   "--config, --model, --hidden and --dtype are required");
    char *text = read_config_text(a->cmd, a->config);
    if (text == NULL)
        return 1;
    ect_status_t st = ect_config_parse(text, strlen(text), &in->cfg);
    free(text);
    if (st != ECT_OK)
        return ect_cli_fail(a->cmd, "--config: %s", ect_last_error());
    if (!in->cfg.p2p_enabled)
        return ect_cli_usage_error(a->cmd, usage,
                                   "the config must enable peer-to-peer transfer "
                                   "(\"ec_enable_nixl\": true in ec_connector_extra_config)");
    if (a->listen != NULL && parse_listen(a->cmd, usage, a->listen, &in->cfg) != 0)
        return 2;
    char *end = NULL;
    unsigned long long hidden = strtoull(a->hidden, &end, 10);
    if (end == a->hidden || *end != '\0' || hidden == 0)
        return ect_cli_usage_error(a->cmd, usage, "--hidden '%s' is not a positive integer",
                                   a->hidden);
    ect_dtype_t dtype;
    if (ect_dtype_parse(a->dtype, &dtype) != ECT_OK)
        return ect_cli_usage_error(a->cmd, usage, "--dtype: %s", ect_last_error());
    if (ect_geometry_init(hidden, dtype, in->cfg.cpu_bytes, &in->geom) != ECT_OK)
        return ect_cli_fail(a->cmd, "%s", ect_last_error());
    /* Unique per instance, so two instances in one process (tests) never
     * share a region. */
    static unsigned serial;
    snprintf(in->instance_id, sizeof(in->instance_id), "%s%d-%u", a->cmd, (int)getpid(),
             __atomic_fetch_add(&serial, 1, __ATOMIC_RELAXED));
    ect_scheduler_params_t sp = {.config = &in->cfg,
                                 .geometry = &in->geom,
                                 .instance_id = in->instance_id,
                                 .engine_version =
                                     a->engine_version ? a->engine_version : ect_version(),
                                 .model_name = a->model};
    if (ect_scheduler_create(&sp, &in->sched) != ECT_OK)
        return ect_cli_fail(a->cmd, "%s", ect_last_error());
    ect_worker_params_t wp = {
        .config = &in->cfg, .geometry = &in->geom, .instance_id = in->instance_id};
    if (ect_worker_create(&wp, &in->worker) != ECT_OK) {
        int rc = ect_cli_fail(a->cmd, "%s", ect_last_error());
        ect_scheduler_destroy(in->sched);
        in->sched = NULL;
        return rc;
    }
    return 0;
}

void
ect_cli_instance_close(struct ect_cli_instance *in)
{
    ect_worker_destroy(in->worker);
    ect_scheduler_destroy(in->sched);
    in->worker = NULL;
    in->sched = NULL;
}

/* Ship the step's metadata to the worker as bytes, like an engine would. */
static ect_status_t
bind_step(struct ect_cli_instance *in)
{
    ect_step_meta_t *meta;
    ect_status_t st = ect_scheduler_build_connector_meta(in->sched, &meta);
    if (st != ECT_OK)
        return st;
    size_t cap = ect_step_meta_encoded_size(meta), len = 0;
    void *bytes = malloc(cap);
    st = bytes ? ect_step_meta_encode(meta, bytes, cap, &len) : ECT_ERR_NO_MEMORY;
    ect_step_meta_destroy(meta);
    if (st == ECT_OK)
        st = ect_worker_bind_metadata(in->worker, bytes, len);
    free(bytes);
    return st;
}

/* Wait for the step's copies, hand the report to the scheduler as bytes. */
static ect_status_t
finish_step(struct ect_cli_instance *in)
{
    ect_status_t st = ect_worker_get_finished(in->worker);
    if (st == ECT_OK)
        st = ect_worker_wait(in->worker);
    ect_step_report_t *report = NULL;
    ect_status_t rst = ect_worker_take_report(in->worker, &report);
    if (st == ECT_OK)
        st = rst;
    if (report != NULL) {
        size_t cap = ect_step_report_encoded_size(report), len = 0;
        void *bytes = malloc(cap);
        ect_status_t est =
            bytes ? ect_step_report_encode(report, bytes, cap, &len) : ECT_ERR_NO_MEMORY;
        if (est == ECT_OK)
            est = ect_scheduler_update_connector_output(in->sched, bytes, len);
        if (st == ECT_OK)
            st = est;
        free(bytes);
        ect_step_report_destroy(report);
    }
    ect_worker_clear_metadata(in->worker);
    return st;
}

ect_status_t
ect_cli_instance_save(struct ect_cli_instance *in, const char *key, uint64_t tokens,
                      const void *payload, size_t nbytes)
{
    ect_mm_feature_t f = {
        .identifier = key, .mm_hash = key, .num_tokens = tokens, .has_local_input = 1};
    ect_request_t req = {.request_id = key, .features = &f, .n_features = 1};
    ect_status_t st = ect_scheduler_update_state_after_alloc(in->sched, &req, 0);
    if (st == ECT_OK)
        st = bind_step(in);
    int queued = 0;
    if (st == ECT_OK)
        st = ect_worker_save(in->worker, key, payload, nbytes, NULL, &queued);
    ect_status_t fst = finish_step(in);
    if (st == ECT_OK)
        st = fst;
    if (st == ECT_OK && !queued)
        st = ECT_ERR_NO_SPACE; /* the scheduler skipped the save: region full */
    return st;
}

struct load_dst {
    void *buf;
    size_t cap;
};

static ect_status_t
load_into(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    (void)key;
    (void)n_tokens;
    struct load_dst *d = user;
    if (nbytes > d->cap)
        return ECT_ERR_OVERFLOW;
    *dst_p = d->buf;
    return ECT_OK;
}

ect_status_t
ect_cli_instance_load(struct ect_cli_instance *in, const char *key, uint64_t tokens, void *buf,
                      size_t cap)
{
    ect_mm_feature_t f = {.identifier = key, .mm_hash = key, .num_tokens = tokens};
    ect_request_t req = {.request_id = key, .features = &f, .n_features = 1};
    if (!ect_scheduler_has_cache_item(in->sched, key))
        return ECT_ERR_NOT_FOUND;
    ect_status_t st = ect_scheduler_update_state_after_alloc(in->sched, &req, 0);
    if (st == ECT_OK)
        st = bind_step(in);
    struct load_dst d = {buf, cap};
    if (st == ECT_OK)
        st = ect_worker_start_load(in->worker, load_into, &d, NULL);
    ect_status_t fst = finish_step(in);
    return st == ECT_OK ? fst : st;
}
