/*
 * The UCX data transport (SPEC §8.7): a producer's server maps its region
 * with UCX and keeps its worker progressing; a consumer's client reads with
 * ucp_get_nbx over an endpoint per producer.
 *
 * Why the server needs a progress thread: with UCX 1.13 and a region we
 * mapped ourselves, no transport here can serve a get one-sidedly.  tcp has
 * no get at all and posix/sysv shared memory only exposes memory UCX
 * allocated, so UCX emulates every get with active messages that the
 * TARGET's worker answers (reference/ceilings.md §6: with a producer that
 * never progresses, the first 4 KiB get never completes).
 *
 * The progress thread trades latency for idle CPU: after any activity it
 * spins on ucp_worker_progress for SPIN_NS, so the gets of one read and the
 * reads right after it are answered at once; then it arms the worker
 * (ucp_worker_arm) and sleeps in poll() on the worker's event fd and a stop
 * eventfd, so an idle producer uses no CPU.  A get that arrives while it
 * sleeps pays one wake-up, about 25-30 us on these VMs (ceilings.md §5) on
 * top of the transport's own latency.
 *
 * Both sides raise UCX's tcp send segment from 8 to 64 KiB (an explicit
 * UCX_TCP_TX_SEG_SIZE wins): the reply to an emulated get is sent in such
 * segments, and the bigger ones triple the loopback read bandwidth.
 *
 * Error handling mode PEER has a cost with UCX 1.13: the shared-memory
 * transports (posix, sysv) cannot detect a dead peer, so UCX leaves them
 * out and an endpoint uses tcp even under the default UCX_TLS.  Peers on
 * one host use the same-host transport instead (xport_shm.c).
 *
 * The client uses one context and worker, thread mode SERIALIZED (the
 * transport client is used by one thread at a time, not always the same
 * one).  Endpoints are created with error handling mode PEER, so a producer
 * that dies fails the operations in flight (their callbacks run with an
 * error status) instead of leaving them pending forever.  The client's
 * worker is progressed only from the caller's thread (read_poll), so
 * completion callbacks and the endpoint error callback run there too and
 * need no locking.
 *
 * Locking: the server's worker belongs to its progress thread from start to
 * stop (thread creation and join order the hand-overs); the only shared
 * state is the atomic stop flag.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "common/clock.h"
#include "common/error.h"
#include "p2p/xport_internal.h"

/* How long the server keeps spinning after its last activity. */
#define SPIN_NS (200 * 1000ull)
/* tcp segment size for sends (see context_create). */
#define TCP_TX_SEG_SIZE "64K"
/* How long closing an endpoint may take before we give up waiting. */
#define CLOSE_WAIT_NS (2ull * 1000 * 1000 * 1000)

struct ect_xport_ucx_server {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_mem_h memh;
    uint8_t *address;
    size_t address_len;
    uint8_t *rkey;
    size_t rkey_len;
    int event_fd; /* the worker's (owned by UCX) */
    int stop_fd;  /* ours: written by stop to wake the thread */
    int stop;     /* atomic */
    pthread_t thread;
};

struct ect_xport_ucx_client {
    ucp_context_h context;
    ucp_worker_h worker;
};

struct ect_xport_ucx_peer {
    ucp_ep_h ep;
    ucp_rkey_h rkey;
    uint64_t base;       /* the producer's block 0 */
    ucs_status_t failed; /* UCS_OK until the endpoint reports an error */
    char name[64];
};

static ect_status_t
ucx_error(const char *who, const char *call, ucs_status_t us)
{
    return ect__error(ECT_ERR_TRANSPORT, "%s: %s failed: %s", who, call, ucs_status_string(us));
}

static ect_status_t
context_create(uint64_t features, const char *who, ucp_context_h *context_p)
{
    ucp_config_t *config = NULL;
    ucs_status_t us = ucp_config_read(NULL, NULL, &config);
    if (us != UCS_OK)
        return ucx_error(who, "ucp_config_read", us);
    /* tcp sends a get's reply in TX_SEG_SIZE pieces; UCX's 8 KiB default
     * holds an emulated get to ~1.5 GB/s on loopback, 64 KiB (the default
     * receive segment, so every peer can take it) reaches ~5 GB/s
     * (`ectier bench xport`).  The key is the tcp transport's own field
     * name (ucp_config_modify hands unknown keys to the transports); an
     * explicit UCX_TCP_TX_SEG_SIZE wins. */
    if (getenv("UCX_TCP_TX_SEG_SIZE") == NULL) {
        us = ucp_config_modify(config, "TX_SEG_SIZE", TCP_TX_SEG_SIZE);
        if (us != UCS_OK)
            ECT_LOG_W("%s: cannot set the tcp TX_SEG_SIZE to %s: %s", who, TCP_TX_SEG_SIZE,
                      ucs_status_string(us));
    }
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = features};
    us = ucp_init(&params, config, context_p);
    ucp_config_release(config);
    if (us != UCS_OK)
        return ucx_error(who, "ucp_init", us);
    return ECT_OK;
}

static ect_status_t
worker_create(ucp_context_h context, const char *who, ucp_worker_h *worker_p)
{
    ucp_worker_params_t params = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                                  .thread_mode = UCS_THREAD_MODE_SERIALIZED};
    ucs_status_t us = ucp_worker_create(context, &params, worker_p);
    if (us != UCS_OK)
        return ucx_error(who, "ucp_worker_create", us);
    return ECT_OK;
}

/* ---- server ---------------------------------------------------------------- */

static int
stop_requested(const ect_xport_ucx_server_t *s)
{
    return __atomic_load_n(&s->stop, __ATOMIC_ACQUIRE);
}

static void *
progress_main(void *arg)
{
    ect_xport_ucx_server_t *s = arg;
    uint64_t last_activity = ect__now_ns();
    while (!stop_requested(s)) {
        if (ucp_worker_progress(s->worker) != 0) {
            last_activity = ect__now_ns();
            continue;
        }
        if (ect__now_ns() - last_activity < SPIN_NS)
            continue;
        /* Arm, then sleep; BUSY means events arrived since the last
         * progress and must be handled first. */
        ucs_status_t us = ucp_worker_arm(s->worker);
        if (us == UCS_ERR_BUSY)
            continue;
        struct pollfd fds[2] = {{.fd = s->event_fd, .events = POLLIN},
                                {.fd = s->stop_fd, .events = POLLIN}};
        /* If arming failed (not expected), poll with a timeout so the
         * worker is still progressed now and then. */
        int rc = poll(fds, 2, us == UCS_OK ? -1 : 1);
        if (rc < 0 && errno != EINTR) {
            ECT_LOG_E("xport ucx server: poll on the worker's event fd failed: %s",
                      strerror(errno));
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        last_activity = ect__now_ns();
    }
    return NULL;
}

ect_status_t
ect__xport_ucx_server_start(void *data, size_t len, ect_xport_ucx_server_t **server_p)
{
    static const char who[] = "xport ucx server";
    if (data == NULL || len == 0 || server_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: no memory to serve", who);
    ect_xport_ucx_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", who);
    s->stop_fd = -1;
    ect_status_t st;
    ucs_status_t us;
    if ((st = context_create(UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP, who, &s->context)) != ECT_OK)
        goto free_server;
    if ((st = worker_create(s->context, who, &s->worker)) != ECT_OK)
        goto cleanup_context;

    /* The region is our own /dev/shm mapping: register it, never let UCX
     * allocate (UCP_MEM_MAP_ALLOCATE would give a different memory). */
    ucp_mem_map_params_t mp = {.field_mask =
                                   UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = data,
                               .length = len};
    if ((us = ucp_mem_map(s->context, &mp, &s->memh)) != UCS_OK) {
        st = ucx_error(who, "ucp_mem_map of the region", us);
        goto destroy_worker;
    }
    void *rkey_buf = NULL;
    size_t rkey_len = 0;
    if ((us = ucp_rkey_pack(s->context, s->memh, &rkey_buf, &rkey_len)) != UCS_OK) {
        st = ucx_error(who, "ucp_rkey_pack", us);
        goto unmap;
    }
    if (rkey_len == 0 || rkey_len > ECT_XPORT_MAX_RKEY || (s->rkey = malloc(rkey_len)) == NULL) {
        ucp_rkey_buffer_release(rkey_buf);
        st = ect__error(rkey_len == 0 || rkey_len > ECT_XPORT_MAX_RKEY ? ECT_ERR_TRANSPORT
                                                                       : ECT_ERR_NO_MEMORY,
                        "%s: remote key of %zu bytes (at most %u fit the descriptor)", who,
                        rkey_len, ECT_XPORT_MAX_RKEY);
        goto unmap;
    }
    memcpy(s->rkey, rkey_buf, rkey_len);
    s->rkey_len = rkey_len;
    ucp_rkey_buffer_release(rkey_buf);

    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    if ((us = ucp_worker_get_address(s->worker, &addr, &addr_len)) != UCS_OK) {
        st = ucx_error(who, "ucp_worker_get_address", us);
        goto free_rkey;
    }
    if (addr_len == 0 || addr_len > ECT_XPORT_MAX_UCX_ADDR ||
        (s->address = malloc(addr_len)) == NULL) {
        ucp_worker_release_address(s->worker, addr);
        st = ect__error(addr_len == 0 || addr_len > ECT_XPORT_MAX_UCX_ADDR ? ECT_ERR_TRANSPORT
                                                                           : ECT_ERR_NO_MEMORY,
                        "%s: worker address of %zu bytes (at most %u fit the offer)", who, addr_len,
                        ECT_XPORT_MAX_UCX_ADDR);
        goto free_rkey;
    }
    memcpy(s->address, addr, addr_len);
    s->address_len = addr_len;
    ucp_worker_release_address(s->worker, addr);

    if ((us = ucp_worker_get_efd(s->worker, &s->event_fd)) != UCS_OK) {
        st = ucx_error(who, "ucp_worker_get_efd", us);
        goto free_address;
    }
    if ((s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        st = ect__error_errno(ECT_ERR_IO, "%s: eventfd", who);
        goto free_address;
    }
    int rc = pthread_create(&s->thread, NULL, progress_main, s);
    if (rc != 0) {
        errno = rc;
        st = ect__error_errno(ECT_ERR_IO, "%s: cannot start the progress thread", who);
        goto close_stop_fd;
    }
    ECT_LOG_I("%s: region of %zu bytes mapped (remote key %zu bytes, address %zu bytes)", who, len,
              s->rkey_len, s->address_len);
    *server_p = s;
    return ECT_OK;

close_stop_fd:
    close(s->stop_fd);
free_address:
    free(s->address);
free_rkey:
    free(s->rkey);
unmap:
    ucp_mem_unmap(s->context, s->memh);
destroy_worker:
    ucp_worker_destroy(s->worker);
cleanup_context:
    ucp_cleanup(s->context);
free_server:
    free(s);
    return st;
}

const uint8_t *
ect__xport_ucx_server_address(const ect_xport_ucx_server_t *server, size_t *len_p)
{
    *len_p = server->address_len;
    return server->address;
}

const uint8_t *
ect__xport_ucx_server_rkey(const ect_xport_ucx_server_t *server, size_t *len_p)
{
    *len_p = server->rkey_len;
    return server->rkey;
}

void
ect__xport_ucx_server_stop(ect_xport_ucx_server_t *s)
{
    if (s == NULL)
        return;
    __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(s->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        ECT_LOG_W("xport ucx server: cannot wake the progress thread: %s", strerror(errno));
    pthread_join(s->thread, NULL);
    close(s->stop_fd);
    /* Destroying the worker closes the connections consumers made to it:
     * their endpoints fail, and so do reads still in flight. */
    ucp_mem_unmap(s->context, s->memh);
    ucp_worker_destroy(s->worker);
    ucp_cleanup(s->context);
    free(s->address);
    free(s->rkey);
    free(s);
}

/* ---- client ---------------------------------------------------------------- */

ect_status_t
ect__xport_ucx_client_create(ect_xport_ucx_client_t **client_p)
{
    static const char who[] = "xport ucx client";
    ect_xport_ucx_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", who);
    ect_status_t st;
    if ((st = context_create(UCP_FEATURE_RMA, who, &c->context)) != ECT_OK)
        goto free_client;
    if ((st = worker_create(c->context, who, &c->worker)) != ECT_OK)
        goto cleanup_context;
    *client_p = c;
    return ECT_OK;

cleanup_context:
    ucp_cleanup(c->context);
free_client:
    free(c);
    return st;
}

void
ect__xport_ucx_client_progress(ect_xport_ucx_client_t *client)
{
    /* Bounded, so a stream of events cannot keep the caller here. */
    for (int i = 0; i < 64 && ucp_worker_progress(client->worker) != 0; i++)
        ;
}

void
ect__xport_ucx_client_destroy(ect_xport_ucx_client_t *client)
{
    if (client == NULL)
        return;
    ucp_worker_destroy(client->worker);
    ucp_cleanup(client->context);
    free(client);
}

static void
ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    (void)ep;
    ect_xport_ucx_peer_t *peer = arg;
    if (peer->failed == UCS_OK)
        ECT_LOG_I("xport ucx: endpoint to %s failed: %s", peer->name, ucs_status_string(status));
    peer->failed = status != UCS_OK ? status : UCS_ERR_IO_ERROR;
}

ect_status_t
ect__xport_ucx_peer_connect(ect_xport_ucx_client_t *client, const char *peer_name,
                            const ect_xport_offer_t *offer, const ect_xport_desc_t *desc,
                            ect_xport_ucx_peer_t **peer_p)
{
    if (desc->rkey_len == 0)
        return ect__error(ECT_ERR_PEER, "peer %s offers UCX but its descriptor has no remote key",
                          peer_name);
    ect_xport_ucx_peer_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport ucx: out of memory");
    snprintf(p->name, sizeof(p->name), "%s", peer_name);
    p->base = desc->base;
    p->failed = UCS_OK;
    ect_status_t st;
    ucs_status_t us;
    /* UCX parses the address it is given; copy it so the bytes it reads are
     * the ones we checked the length of, aligned as malloc aligns. */
    void *addr = malloc(offer->ucx_address_len);
    if (addr == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "xport ucx: out of memory");
        goto free_peer;
    }
    memcpy(addr, offer->ucx_address, offer->ucx_address_len);
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                               UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                               UCP_EP_PARAM_FIELD_ERR_HANDLER,
                                 .address = addr,
                                 .err_mode = UCP_ERR_HANDLING_MODE_PEER,
                                 .err_handler = {.cb = ep_error, .arg = p}};
    us = ucp_ep_create(client->worker, &ep_params, &p->ep);
    free(addr);
    if (us != UCS_OK) {
        st = ect__error(ECT_ERR_TRANSPORT, "xport ucx: cannot connect to %s: %s", peer_name,
                        ucs_status_string(us));
        goto free_peer;
    }
    void *rkey_buf = malloc(desc->rkey_len);
    if (rkey_buf == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "xport ucx: out of memory");
        goto close_ep;
    }
    memcpy(rkey_buf, desc->rkey, desc->rkey_len);
    us = ucp_ep_rkey_unpack(p->ep, rkey_buf, &p->rkey);
    free(rkey_buf);
    if (us != UCS_OK) {
        st = ect__error(ECT_ERR_PEER, "xport ucx: the remote key from %s does not unpack: %s",
                        peer_name, ucs_status_string(us));
        goto close_ep;
    }
    *peer_p = p;
    return ECT_OK;

close_ep:
    ect__xport_ucx_peer_close(client, p, 1);
    return st;
free_peer:
    free(p);
    return st;
}

int
ect__xport_ucx_peer_failed(const ect_xport_ucx_peer_t *peer)
{
    return peer->failed != UCS_OK;
}

void
ect__xport_ucx_peer_close(ect_xport_ucx_client_t *client, ect_xport_ucx_peer_t *peer, int force)
{
    if (peer == NULL)
        return;
    if (peer->rkey != NULL)
        ucp_rkey_destroy(peer->rkey);
    /* A failed endpoint cannot flush, and forcing is how operations still
     * in flight end (as cancelled); otherwise close gracefully so the
     * producer sees an orderly disconnect.
     *
     * UCX 1.13.1 (Debian, assertions on) aborts the PRODUCER when a consumer
     * closes an endpoint, or exits, before the producer's wireup reply has
     * gone out over tcp (ucp_request_send_state_ff asserts on a purged REP
     * message; the assertion was removed upstream in openucx/ucx#8175).  So
     * an endpoint is only created for a read with bytes to move, and such a
     * read ends only after the producer answered it. */
    force = force || peer->failed != UCS_OK;
    ucp_request_param_t param = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0};
    ucs_status_ptr_t req = ucp_ep_close_nbx(peer->ep, &param);
    if (UCS_PTR_IS_PTR(req)) {
        uint64_t deadline = ect__now_ns() + CLOSE_WAIT_NS;
        while (ucp_request_check_status(req) == UCS_INPROGRESS && ect__now_ns() < deadline)
            ucp_worker_progress(client->worker);
        if (ucp_request_check_status(req) == UCS_INPROGRESS)
            ECT_LOG_W("xport ucx: closing the endpoint to %s did not finish within %llu ms; "
                      "the worker finishes it",
                      peer->name, (unsigned long long)(CLOSE_WAIT_NS / 1000000));
        ucp_request_free(req);
    } else if (UCS_PTR_IS_ERR(req)) {
        ECT_LOG_D("xport ucx: closing the endpoint to %s: %s", peer->name,
                  ucs_status_string(UCS_PTR_STATUS(req)));
    }
    free(peer);
}

/* Runs on the client's thread, from ucp_worker_progress. */
static void
get_done(void *request, ucs_status_t status, void *user_data)
{
    ect_xport_completion_t *done = user_data;
    if (status != UCS_OK && done->status == ECT_OK) {
        done->status = ECT_ERR_TRANSPORT;
        snprintf(done->why, sizeof(done->why), "ucp_get_nbx completed with %s",
                 ucs_status_string(status));
    }
    done->outstanding--;
    ucp_request_free(request);
}

ect_status_t
ect__xport_ucx_post(ect_xport_ucx_client_t *client, ect_xport_ucx_peer_t *peer,
                    const ect_xport_segment_t *segs, size_t n_segs, ect_xport_completion_t *done)
{
    (void)client;
    ucp_request_param_t param = {.op_attr_mask =
                                     UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
                                 .cb.send = get_done,
                                 .user_data = done};
    for (size_t i = 0; i < n_segs; i++) {
        /* Counted before posting: a completion may be reported from inside
         * a later post's internal progress. */
        done->outstanding++;
        ucs_status_ptr_t req = ucp_get_nbx(peer->ep, segs[i].local, segs[i].len,
                                           peer->base + segs[i].remote_off, peer->rkey, &param);
        if (req == NULL) {
            done->outstanding--; /* completed in place; no callback */
        } else if (UCS_PTR_IS_ERR(req)) {
            done->outstanding--;
            if (i == 0)
                return ect__error(ECT_ERR_TRANSPORT, "xport ucx: ucp_get_nbx from %s failed: %s",
                                  peer->name, ucs_status_string(UCS_PTR_STATUS(req)));
            if (done->status == ECT_OK) {
                done->status = ECT_ERR_TRANSPORT;
                snprintf(done->why, sizeof(done->why), "ucp_get_nbx of segment %zu failed: %s", i,
                         ucs_status_string(UCS_PTR_STATUS(req)));
            }
            break;
        }
    }
    return ECT_OK;
}
