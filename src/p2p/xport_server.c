/*
 * The producer's side of the data-transport dispatcher (transport.h): one
 * offer naming every transport it serves (the tcp stream's port, the
 * same-host path's region file, boot id, device and inode, and a random
 * instance id that tells a restarted producer from its predecessor), and
 * a descriptor per grant.  A transport that cannot start is left out of
 * the offer with a warning as long as another one is offered.
 *
 * Threading: immutable once started; the stream server has its own thread.
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/error.h"
#include "p2p/xport_internal.h"

struct ect_xport_server {
    ect_xport_stream_server_t *tcp;
    uint8_t *agent;
    size_t agent_len;
    uint64_t block_size;
    uint64_t num_blocks;
    unsigned kinds;
};

/* Fill the offer's same-host fields; ECT_ERR_* with a message if the region
 * file cannot be described. */
static ect_status_t
same_host_entry(const ect_xport_server_params_t *params, ect_xport_offer_t *o)
{
    ect_status_t st = ect__xport_boot_id(o->boot_id);
    if (st != ECT_OK)
        return st;
    size_t n = strlen(params->region_path);
    if (n == 0 || n > ECT_XPORT_MAX_PATH)
        return ect__error(ECT_ERR_INVALID_ARG, "xport server: region path of %zu bytes", n);
    struct stat sb;
    if (lstat(params->region_path, &sb) != 0)
        return ect__error_errno(ECT_ERR_IO, "xport server: cannot stat %s", params->region_path);
    if (!S_ISREG(sb.st_mode))
        return ect__error(ECT_ERR_INVALID_ARG, "xport server: %s is not a regular file",
                          params->region_path);
    o->path = params->region_path;
    o->path_len = n;
    o->dev = (uint64_t)sb.st_dev;
    o->ino = (uint64_t)sb.st_ino;
    o->data_offset = params->data_offset;
    return ECT_OK;
}

ect_status_t
ect__xport_server_start(const ect_xport_server_params_t *params, ect_xport_server_t **server_p)
{
    if (params == NULL || server_p == NULL || params->data == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "xport server: NULL argument");
    ect_status_t st =
        ect__xport_check_own_region("xport server", params->block_size, params->num_blocks);
    if (st != ECT_OK)
        return st;
    if (!params->serve_tcp && !params->serve_same_host)
        return ect__error(ECT_ERR_INVALID_ARG, "xport server: asked to serve no transport");
    if (params->serve_same_host && params->region_path == NULL)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport server: the same-host path needs the region's file path");
    ect_xport_server_t *s = ect__calloc(1, sizeof(*s));
    if (s == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport server: out of memory");
    if (params->serve_tcp && params->touch_pages)
        ect__xport_touch_from_kernel(params->data,
                                     (size_t)(params->num_blocks * params->block_size));
    s->block_size = params->block_size;
    s->num_blocks = params->num_blocks;
    ect_xport_offer_t offer;
    memset(&offer, 0, sizeof(offer));
    /* A restarted producer must be told apart from its predecessor on the
     * same port: the offer carries a random instance id. */
    if ((st = ect__xport_new_token(offer.instance)) != ECT_OK)
        goto free_server;
    if (params->serve_tcp) {
        st = ect__xport_stream_server_start(params, &s->tcp);
        if (st == ECT_OK) {
            offer.kinds |= 1u << ECT_XPORT_TCP;
            offer.tcp_port = ect__xport_stream_server_port(s->tcp);
            offer.tcp_stripes = ECT_STREAM_MAX_STRIPES;
            offer.tcp_aligned = 1;
        } else if (st == ECT_ERR_NO_MEMORY || !params->serve_same_host) {
            goto free_server;
        } else {
            ect__log_last_error(ECT_LOG_WARN, "xport server: tcp stream not offered");
        }
    }
    if (params->serve_same_host) {
        st = same_host_entry(params, &offer);
        if (st == ECT_OK) {
            offer.kinds |= 1u << ECT_XPORT_SAME_HOST;
        } else if (offer.kinds == 0) {
            goto stop_tcp;
        } else {
            ect__log_last_error(ECT_LOG_WARN, "xport server: same-host path not offered");
        }
    }
    if ((st = ect__xport_offer_encode(&offer, &s->agent, &s->agent_len)) != ECT_OK)
        goto stop_tcp;
    s->kinds = offer.kinds;
    ECT_LOG_I("xport server: offering%s%s for %" PRIu64 " blocks of %" PRIu64 " bytes",
              (s->kinds & (1u << ECT_XPORT_TCP)) ? " tcp" : "",
              (s->kinds & (1u << ECT_XPORT_SAME_HOST)) ? " same_host" : "", params->num_blocks,
              params->block_size);
    *server_p = s;
    return ECT_OK;

stop_tcp:
    ect__xport_stream_server_stop(s->tcp);
free_server:
    ect__free(s);
    return st;
}

const void *
ect__xport_server_agent_metadata(const ect_xport_server_t *server, size_t *len_p)
{
    *len_p = server->agent_len;
    return server->agent;
}

ect_status_t
ect__xport_server_descriptor(const ect_xport_server_t *server,
                             const uint8_t token[ECT_STREAM_TOKEN_LEN], const ect_run_t *runs,
                             size_t n_runs, uint8_t *out, size_t cap, size_t *len_p)
{
    ect_xport_desc_t d = {.block_size = server->block_size, .num_blocks = server->num_blocks};
    memcpy(d.token, token, ECT_STREAM_TOKEN_LEN);
    return ect__xport_desc_encode(&d, runs, n_runs, out, cap, len_p);
}

unsigned
ect__xport_server_kinds(const ect_xport_server_t *server)
{
    return server->kinds;
}

uint16_t
ect__xport_server_tcp_port(const ect_xport_server_t *server)
{
    return server->tcp != NULL ? ect__xport_stream_server_port(server->tcp) : 0;
}

void
ect__xport_server_counters(ect_xport_server_t *server, ect_xport_server_counters_t *counters_p)
{
    memset(counters_p, 0, sizeof(*counters_p));
    if (server != NULL && server->tcp != NULL)
        ect__xport_stream_server_counters(server->tcp, counters_p);
}

void
ect__xport_server_stop(ect_xport_server_t *server)
{
    if (server == NULL)
        return;
    ect__xport_stream_server_stop(server->tcp);
    ect__free(server->agent);
    ect__free(server);
}
