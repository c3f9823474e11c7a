/*
 * Peer-to-peer transfer in a build without it: the seam of
 * src/step/p2p_hooks.h, where creating a session or the event stream says
 * how to get one.
 */
#include "common/error.h"
#include "step/p2p_hooks.h"

ect_status_t
ect__p2p_create(const ect__p2p_params_t *params, struct ect__p2p **p2p_p)
{
    (void)params;
    (void)p2p_p;
    return ect__error(ECT_ERR_UNSUPPORTED,
                      "ec_enable_nixl needs a build with peer-to-peer support: install "
                      "libzmq3-dev libmsgpack-dev (scripts/install-deps.sh) and "
                      "rebuild with -DECT_WITH_P2P=ON");
}

void
ect__p2p_destroy(struct ect__p2p *p2p)
{
    (void)p2p;
}

ect_status_t
ect__p2p_announce(struct ect__p2p *p2p, const ect_request_t *request, char **params_json_p)
{
    (void)p2p;
    (void)request;
    *params_json_p = NULL;
    return ECT_OK;
}

ect_status_t
ect__p2p_ensure(struct ect__p2p *p2p, const ect_request_t *request, int *available_p)
{
    (void)p2p;
    (void)request;
    *available_p = 1;
    return ECT_OK;
}

void
ect__p2p_request_finished(struct ect__p2p *p2p, const ect_request_t *request)
{
    (void)p2p;
    (void)request;
}

size_t
ect__p2p_take_unavailable(struct ect__p2p *p2p, char **ids, size_t cap)
{
    (void)p2p;
    (void)ids;
    (void)cap;
    return 0;
}

int
ect__p2p_has_pending(struct ect__p2p *p2p)
{
    (void)p2p;
    return 0;
}

void
ect__p2p_metrics(struct ect__p2p *p2p, ect_metrics_t *metrics)
{
    (void)p2p;
    (void)metrics;
}

const char *
ect__p2p_host(const struct ect__p2p *p2p)
{
    (void)p2p;
    return "";
}

uint16_t
ect__p2p_port(const struct ect__p2p *p2p)
{
    (void)p2p;
    return 0;
}

ect_status_t
ect__p2p_events_start(const ect_config_t *config, ect_cache_t *cache, const char *instance,
                      struct ect__events **events_p)
{
    (void)config;
    (void)cache;
    (void)instance;
    (void)events_p;
    return ect__error(ECT_ERR_UNSUPPORTED,
                      "events_endpoint needs a build with ZeroMQ: install libzmq3-dev "
                      "libucx-dev libmsgpack-dev (scripts/install-deps.sh) and rebuild with "
                      "-DECT_WITH_P2P=ON");
}

void
ect__p2p_events_stop(struct ect__events *events)
{
    (void)events;
}

void
ect__p2p_events_metrics(struct ect__events *events, ect_metrics_t *metrics)
{
    (void)events;
    (void)metrics;
}
