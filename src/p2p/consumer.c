/*
 * The consumer session: see consumer.h for the states and locking.
 *
 * Transfers are kept in a map keyed by the local cache key.  The session
 * thread waits on the DEALER pool for acks, woken early by new fetches and
 * by reads that settle (the transports call back), then walks the table for
 * deadlines, retries and read completion.  Cache calls (mark_ready, discard)
 * happen on this thread too, and a landed tcp read's on the stream thread
 * that received it (read_settled); the cache is thread-safe.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/strmap.h"
#include "common/thread.h"
#include "copy/cpu.h"
#include "p2p/consumer.h"
#include "p2p/control.h"
#include "p2p/transport.h"
#include "proto/wire.h"

#define IDLE_POLL_MS   20
#define RETRY_FIRST_NS (20ull * 1000 * 1000)
#define RETRY_MAX_NS   (500ull * 1000 * 1000)
/* How long a same-host peer's copy threads are kept polling for the read
 * a request will start (ect__xport_client_expect_read): twice the smoothed
 * request -> ack time, or this before the first ack. */
#define PREWAKE_FIRST_NS (1000ull * 1000)
/* Transfers one walk of the table acts on per kind (done, settled,
 * resent); the rest are left to the next walk. */
#define WALK_MAX 64

enum xfer_state {
    X_WAITING_ACK,
    X_READING,
    X_RETRY,
    X_QUARANTINED,
    X_FAILED,
};

struct xfer {
    char *key;
    char *mm_hash;
    char host[ECT_CTL_HOST_MAX + 1];
    uint16_t port;
    uint64_t n_blocks;
    enum xfer_state state;
    uint64_t deadline_ns; /* ack, read or quarantine deadline; retry time in X_RETRY */
    /* While a request is unanswered: when its ack is due.  A resend after a
     * lost connection keeps it (only an answer starts a new wait). */
    uint64_t ack_due_ns;
    uint64_t retry_delay_ns;
    uint64_t t_start_ns;
    uint64_t t_read_ns;  /* when the ack came and the read started */
    uint64_t t_asked_ns; /* when the request last sent was sent */
    ect_xport_read_t *read;
    ect_xport_kind_t kind; /* of the read in flight */
    char reason[160];
    int cancelled; /* quarantined on cancel: no failure to report */
};

struct ect_consumer {
    ect_config_t cfg;
    ect_geometry_t geom;
    ect_cache_t *cache;
    ect_region_t *region;
    char compat[65];
    char session_id[33];
    uint64_t ack_timeout_ns, read_timeout_ns, quarantine_ns;

    ect_ctl_client_t *ctl;
    ect_xport_client_t *xport;
    pthread_t thread;
    int thread_started;
    int stop; /* atomic */

    pthread_mutex_t lock;
    ect_strmap_t xfers; /* key -> struct xfer */
    size_t n_reading;
    ect_metrics_t m; /* only the p2p fields are used */

    ect__wire_buf_t out; /* session thread only */
    uint64_t ack_rtt_ns; /* request -> ack, smoothed (1/8 a sample); 0 before the first */
    /* Wake a same-host peer's copy threads when asking it (see
     * prewake_pays): only where CPUs are left over for their polling. */
    int prewake;
};

/* ---- helpers (lock held) ------------------------------------------------- */

static void
xfer_free(struct xfer *x)
{
    ect__free(x->key);
    ect__free(x->mm_hash);
    ect__free(x);
}

static void
xfer_forget_locked(ect_consumer_t *c, struct xfer *x)
{
    ect__strmap_remove(&c->xfers, x->key, NULL);
    xfer_free(x);
}

static void
fail_locked(ect_consumer_t *c, struct xfer *x, const char *fmt, const char *detail)
{
    snprintf(x->reason, sizeof(x->reason), fmt, detail);
    if (ect_cache_discard(c->cache, x->key) != ECT_OK)
        ect__log_last_error(ECT_LOG_WARN, "consumer: discarding a failed fetch");
    x->state = X_FAILED;
    ECT_LOG_I("consumer: fetch of '%s' from %s:%u failed: %s", x->mm_hash, x->host,
              (unsigned)x->port, x->reason);
}

static ect_status_t
send_request(ect_consumer_t *c, struct xfer *x)
{
    ect_xfer_req_t req = {.mm_hash = x->mm_hash,
                          .compatibility_hash = c->compat,
                          .session_id = c->session_id,
                          .connector_version = ECT_WIRE_CONNECTOR_VERSION,
                          .has_connector_version = true,
                          .accepts_runs = true};
    c->out.len = 0;
    ect_status_t st = ect__wire_encode_req(&req, &c->out);
    if (st == ECT_OK)
        st = ect__ctl_client_send(c->ctl, x->host, x->port, c->out.data, c->out.len);
    if (st == ECT_ERR_TRANSPORT) {
        /* The pool remembers this producer as unreachable.  It may have
         * restarted (same port, new process): connect afresh once; if it is
         * really gone, the ack timeout ends the wait. */
        ect__ctl_client_remove(c->ctl, x->host, x->port);
        st = ect__ctl_client_send(c->ctl, x->host, x->port, c->out.data, c->out.len);
    }
    if (st == ECT_OK)
        x->t_asked_ns = ect__now_ns();
    if (st == ECT_OK && c->prewake) {
        /* A same-host peer's read will start when the ack comes: its copy
         * threads wake now, while the request travels, not then. */
        ect__xport_client_expect_read(c->xport, x->host, x->port,
                                      c->ack_rtt_ns != 0 ? 2 * c->ack_rtt_ns : PREWAKE_FIRST_NS);
    }
    return st;
}

static void
send_done(ect_consumer_t *c, const struct xfer *x)
{
    ect_xfer_done_t done = {.mm_hash = x->mm_hash, .session_id = c->session_id};
    c->out.len = 0;
    if (ect__wire_encode_done(&done, &c->out) != ECT_OK ||
        ect__ctl_client_send(c->ctl, x->host, x->port, c->out.data, c->out.len) != ECT_OK)
        ECT_LOG_I("consumer: could not tell %s:%u that '%s' was read (its lease will end it)",
                  x->host, (unsigned)x->port, x->mm_hash);
}

/* A read stops being actively progressed (done, failed or quarantined). */
static void
leave_reading(ect_consumer_t *c, struct xfer *x)
{
    (void)c;
    x->kind = ECT_XPORT_NONE;
}

/* ---- acks ------------------------------------------------------------------ */

struct find_ctx {
    const char *host;
    uint16_t port;
    const char *mm_hash;
    struct xfer *found;
};

static void
find_waiting(ect_strmap_node_t *node, void *user)
{
    struct find_ctx *f = user;
    struct xfer *x = node->value;
    if (f->found == NULL && x->state == X_WAITING_ACK && x->port == f->port &&
        strcmp(x->mm_hash, f->mm_hash) == 0 && strcmp(x->host, f->host) == 0)
        f->found = x;
}

static void
start_read_locked(ect_consumer_t *c, struct xfer *x, const ect_xfer_ack_t *ack)
{
    size_t n_runs = 0;
    ect_run_t *runs = NULL;
    ect_status_t st = ect_cache_get_runs(c->cache, x->key, NULL, 0, &n_runs);
    if (st == ECT_OK && (runs = ect__malloc((n_runs ? n_runs : 1) * sizeof(*runs))) == NULL)
        st = ect__error(ECT_ERR_NO_MEMORY, "consumer: out of memory");
    if (st == ECT_OK && n_runs > 0)
        st = ect_cache_get_runs(c->cache, x->key, runs, n_runs, &n_runs);
    ect_xport_kind_t kind = ECT_XPORT_NONE;
    x->t_read_ns = ect__now_ns();
    ect_xport_read_params_t rp = {.host = x->host,
                                  .port = x->port,
                                  .session_id = c->session_id,
                                  .mm_hash = x->mm_hash,
                                  .agent_metadata = ack->agent_metadata,
                                  .agent_len = ack->agent_metadata_len,
                                  .mem_descriptor = ack->mem_descriptor,
                                  .desc_len = ack->mem_descriptor_len,
                                  .remote_blocks = ack->src_block_indices,
                                  .n_remote = ack->n_src_blocks,
                                  .local_runs = runs,
                                  .n_local_runs = n_runs};
    if (st == ECT_OK)
        st = ect__xport_read_start(c->xport, &rp, &x->read, &kind);
    ect__free(runs);
    if (st != ECT_OK) {
        c->m.p2p_transport_errors++;
        fail_locked(c, x, "read could not start: %s", ect_last_error());
        return;
    }
    ECT_LOG_D("consumer: reading '%s' from %s:%u over %s", x->mm_hash, x->host, (unsigned)x->port,
              ect__xport_kind_str(kind));
    x->state = X_READING;
    x->kind = kind;
    x->deadline_ns = ect__now_ns() + c->read_timeout_ns;
    c->n_reading++;
    c->m.p2p_reads_started++;
}

static void
handle_ack(ect_consumer_t *c, const char *host, uint16_t port, const void *payload, size_t len)
{
    ect_xfer_ack_t ack;
    if (ect__wire_decode_ack(payload, len, &ack) != ECT_OK) {
        ECT_LOG_I("consumer: dropping a reply from %s:%u: %s", host, (unsigned)port,
                  ect_last_error());
        pthread_mutex_lock(&c->lock);
        c->m.wire_dropped++;
        pthread_mutex_unlock(&c->lock);
        return;
    }
    pthread_mutex_lock(&c->lock);
    c->m.acks_received[ack.status]++;
    struct find_ctx f = {host, port, ack.mm_hash, NULL};
    ect__strmap_each(&c->xfers, find_waiting, &f);
    struct xfer *x = f.found;
    if (x == NULL || (ack.session_id[0] != '\0' && strcmp(ack.session_id, c->session_id) != 0)) {
        /* Late (after a timeout), repeated, or not ours: ignore. */
        pthread_mutex_unlock(&c->lock);
        ect__xfer_ack_cleanup(&ack);
        return;
    }
    uint64_t rtt = ect__now_ns() - x->t_asked_ns;
    c->ack_rtt_ns = c->ack_rtt_ns == 0 ? rtt : c->ack_rtt_ns - c->ack_rtt_ns / 8 + rtt / 8;
    if (ack.status == ECT_XFER_OK) {
        start_read_locked(c, x, &ack);
    } else if (ect__wire_status_is_retryable(ack.status)) {
        /* Announced but not saved yet: ask again soon, keeping the blocks. */
        x->state = X_RETRY;
        x->ack_due_ns = 0; /* answered: the next request starts a new wait */
        x->deadline_ns = ect__now_ns() + x->retry_delay_ns;
        x->retry_delay_ns =
            x->retry_delay_ns * 2 < RETRY_MAX_NS ? x->retry_delay_ns * 2 : RETRY_MAX_NS;
        c->m.p2p_retries++;
    } else {
        fail_locked(c, x, "%s", ect_xfer_status_str(ack.status));
    }
    pthread_mutex_unlock(&c->lock);
    ect__xfer_ack_cleanup(&ack);
}

/* ---- the session thread ---------------------------------------------------- */

struct step_ctx {
    ect_consumer_t *c;
    uint64_t now;
    struct xfer *done[WALK_MAX];
    size_t n_done;
    struct xfer *settled[WALK_MAX];
    size_t n_settled;
    struct xfer *resend[WALK_MAX];
    size_t n_resend;
};

static void
step_xfer(ect_strmap_node_t *node, void *user)
{
    struct step_ctx *s = user;
    ect_consumer_t *c = s->c;
    struct xfer *x = node->value;
    switch (x->state) {
    case X_WAITING_ACK:
        if (s->now >= x->ack_due_ns) {
            c->m.p2p_ack_timeouts++;
            fail_locked(c, x, "%s", "no ack within the ack timeout");
        }
        break;
    case X_RETRY:
        if (x->ack_due_ns != 0 && s->now >= x->ack_due_ns) {
            /* Resending after a lost connection: the ack stays due when it
             * was first due. */
            c->m.p2p_ack_timeouts++;
            fail_locked(c, x, "%s", "no ack within the ack timeout");
        } else if (s->now >= x->deadline_ns && s->n_resend < WALK_MAX) {
            s->resend[s->n_resend++] = x;
        }
        break;
    case X_READING: {
        ect_xport_read_state_t rs = ect__xport_read_poll(c->xport, x->read);
        if (rs == ECT_XPORT_READ_DONE) {
            if (s->n_done < WALK_MAX)
                s->done[s->n_done++] = x;
        } else if (rs == ECT_XPORT_READ_FAILED) {
            ect__xport_read_release(c->xport, x->read);
            x->read = NULL;
            c->n_reading--;
            leave_reading(c, x);
            c->m.p2p_transport_errors++;
            fail_locked(c, x, "%s", "the read failed");
        } else if (s->now >= x->deadline_ns) {
            /* Cut it (a tcp stream is cut at once; a same-host copy cannot
             * be, so its blocks stay fenced until it settles). */
            ect__xport_read_cancel(c->xport, x->read);
            leave_reading(c, x);
            x->state = X_QUARANTINED;
            x->deadline_ns = s->now + c->quarantine_ns;
            snprintf(x->reason, sizeof(x->reason), "read timed out");
            c->m.p2p_read_timeouts++;
            ECT_LOG_W("consumer: read of '%s' from %s:%u timed out; quarantined", x->mm_hash,
                      x->host, (unsigned)x->port);
        }
        break;
    }
    case X_QUARANTINED: {
        ect_xport_read_state_t rs =
            x->read != NULL ? ect__xport_read_poll(c->xport, x->read) : ECT_XPORT_READ_FAILED;
        if ((rs != ECT_XPORT_READ_PENDING || s->now >= x->deadline_ns) && s->n_settled < WALK_MAX)
            s->settled[s->n_settled++] = x;
        break;
    }
    case X_FAILED:
        break;
    }
}

/* A read is DONE: its entry becomes ready and the transfer is forgotten.
 * A stream's producer knows it sent everything; a same-host read must tell
 * it to let go of the pin, on the session thread's DEALER. */
static void
complete_locked(ect_consumer_t *c, struct xfer *x, uint64_t now)
{
    int same_host = x->kind == ECT_XPORT_SAME_HOST;
    ect__xport_read_release(c->xport, x->read);
    x->read = NULL;
    c->n_reading--;
    leave_reading(c, x);
    if (ect_cache_mark_ready(c->cache, x->key) != ECT_OK)
        ect__log_last_error(ECT_LOG_WARN, "consumer: a landed read");
    c->m.p2p_reads_completed++;
    c->m.p2p_read_bytes += x->n_blocks * c->geom.block_size_bytes;
    ect_latency_hist_add(&c->m.p2p_fetch_latency, now - x->t_start_ns);
    ect_latency_hist_add(&c->m.p2p_read_latency, now - x->t_read_ns);
    if (same_host)
        send_done(c, x);
    xfer_forget_locked(c, x);
}

static void
step_locked(ect_consumer_t *c)
{
    struct step_ctx s = {.c = c, .now = ect__now_ns()};
    ect__strmap_each(&c->xfers, step_xfer, &s);
    for (size_t i = 0; i < s.n_done; i++)
        complete_locked(c, s.done[i], s.now);
    for (size_t i = 0; i < s.n_settled; i++) {
        struct xfer *x = s.settled[i];
        ect__xport_read_release(c->xport, x->read);
        x->read = NULL;
        c->n_reading--;
        ect__log_failure(ect_cache_discard(c->cache, x->key), "consumer");
        /* Its failure was reported when it was quarantined (or it was
         * cancelled); now only the blocks come back. */
        if (x->cancelled || x->reason[0] == '\0')
            xfer_forget_locked(c, x);
        else
            x->state = X_FAILED;
    }
    for (size_t i = 0; i < s.n_resend; i++) {
        struct xfer *x = s.resend[i];
        x->state = X_WAITING_ACK;
        if (x->ack_due_ns == 0)
            x->ack_due_ns = s.now + c->ack_timeout_ns;
        if (send_request(c, x) != ECT_OK)
            fail_locked(c, x, "request could not be sent: %s", ect_last_error());
    }
}

struct peer_ctx {
    const char *host;
    uint16_t port;
};

static void
peer_down(ect_strmap_node_t *node, void *user)
{
    struct peer_ctx *p = user;
    struct xfer *x = node->value;
    /* A request that may never be answered goes back to the retry path
     * (ZeroMQ reconnects by itself; the defer budget bounds the wait).  A
     * read in flight is left to the transport and its deadline. */
    if (x->state == X_WAITING_ACK && x->port == p->port && strcmp(x->host, p->host) == 0) {
        x->state = X_RETRY; /* ack_due_ns stays: the wait is not reset */
        x->deadline_ns = ect__now_ns() + x->retry_delay_ns;
    }
}

static void *
session_thread(void *arg)
{
    ect_consumer_t *c = arg;
    while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
        /* New fetches and settled reads of either transport wake this
         * thread; the timeout only paces deadline checks. */
        int wait_ms = IDLE_POLL_MS;
        char host[ECT_CTL_HOST_MAX + 1];
        uint16_t port;
        const void *payload;
        size_t len;
        ect_status_t st = ect__ctl_client_recv(c->ctl, wait_ms, host, &port, &payload, &len);
        if (st == ECT_OK)
            handle_ack(c, host, port, payload, len);
        char dead_hosts[8][ECT_CTL_HOST_MAX + 1];
        uint16_t dead_ports[8];
        size_t n_dead = ect__ctl_client_take_dead_peers(c->ctl, dead_hosts, dead_ports, 8);
        pthread_mutex_lock(&c->lock);
        for (size_t i = 0; i < n_dead; i++) {
            struct peer_ctx p = {dead_hosts[i], dead_ports[i]};
            ect__strmap_each(&c->xfers, peer_down, &p);
            /* Drop its endpoint and same-host mapping (the mapping would keep
             * a dead producer's region file alive); reads in flight finish
             * or fail on their own. */
            ect__xport_client_forget_peer(c->xport, dead_hosts[i], dead_ports[i]);
        }
        step_locked(c);
        pthread_mutex_unlock(&c->lock);
    }
    return NULL;
}

/* ---- the scheduler's calls -------------------------------------------------- */

ect_status_t
ect__consumer_fetch(ect_consumer_t *c, const char *key, const char *mm_hash, const char *host,
                    uint16_t port, uint64_t n_blocks)
{
    pthread_mutex_lock(&c->lock);
    ect_status_t st;
    if (ect__strmap_find(&c->xfers, key) != NULL) {
        st = ect__error(ECT_ERR_EXISTS, "consumer: '%s' is already being fetched", key);
        goto out;
    }
    if (strlen(host) > ECT_CTL_HOST_MAX) {
        st = ect__error(ECT_ERR_INVALID_ARG, "consumer: peer host of %zu bytes", strlen(host));
        goto out;
    }
    if ((st = ect_cache_alloc(c->cache, key, n_blocks)) != ECT_OK)
        goto out;
    struct xfer *x = ect__calloc(1, sizeof(*x));
    if (x == NULL || (x->key = ect__strdup(key)) == NULL ||
        (x->mm_hash = ect__strdup(mm_hash)) == NULL) {
        if (x != NULL)
            xfer_free(x);
        ect__log_failure(ect_cache_discard(c->cache, key), "consumer");
        st = ect__error(ECT_ERR_NO_MEMORY, "consumer: out of memory");
        goto out;
    }
    snprintf(x->host, sizeof(x->host), "%s", host);
    x->port = port;
    x->n_blocks = n_blocks;
    x->t_start_ns = ect__now_ns();
    x->retry_delay_ns = RETRY_FIRST_NS;
    x->state = X_WAITING_ACK;
    x->deadline_ns = x->t_start_ns + c->ack_timeout_ns;
    if ((st = ect__strmap_put(&c->xfers, key, x, NULL)) != ECT_OK) {
        xfer_free(x);
        ect__log_failure(ect_cache_discard(c->cache, key), "consumer");
        goto out;
    }
    /* The DEALER belongs to the session thread; the request is sent from
     * there at once (the wake-up below) by the retry path. */
    x->state = X_RETRY;
    x->deadline_ns = 0;
    ect__ctl_client_wake(c->ctl);
out:
    pthread_mutex_unlock(&c->lock);
    return st;
}

ect_fetch_state_t
ect__consumer_state(ect_consumer_t *c, const char *key)
{
    pthread_mutex_lock(&c->lock);
    ect_strmap_node_t *node = ect__strmap_find(&c->xfers, key);
    ect_fetch_state_t st = ECT_FETCH_NONE;
    if (node != NULL) {
        struct xfer *x = node->value;
        st = x->state == X_FAILED ||
                     (x->state == X_QUARANTINED && !x->cancelled && x->reason[0] != '\0')
                 ? ECT_FETCH_FAILED
                 : ECT_FETCH_PENDING;
    }
    pthread_mutex_unlock(&c->lock);
    return st;
}

int
ect__consumer_take_failure(ect_consumer_t *c, const char *key, char *reason, size_t cap)
{
    pthread_mutex_lock(&c->lock);
    ect_strmap_node_t *node = ect__strmap_find(&c->xfers, key);
    int taken = 0;
    if (node != NULL) {
        struct xfer *x = node->value;
        if (x->state == X_FAILED) {
            snprintf(reason, cap, "%s", x->reason);
            xfer_forget_locked(c, x);
            taken = 1;
        } else if (x->state == X_QUARANTINED && !x->cancelled && x->reason[0] != '\0') {
            /* Reported once; the blocks stay fenced until it settles. */
            snprintf(reason, cap, "%s", x->reason);
            x->cancelled = 1;
            taken = 1;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return taken;
}

void
ect__consumer_cancel(ect_consumer_t *c, const char *key)
{
    pthread_mutex_lock(&c->lock);
    ect_strmap_node_t *node = ect__strmap_find(&c->xfers, key);
    if (node != NULL) {
        struct xfer *x = node->value;
        if (x->state == X_READING) {
            /* A stream is cut at once (its blocks then come back on the
             * next step); a same-host copy runs out under the fence. */
            ect__xport_read_cancel(c->xport, x->read);
            leave_reading(c, x);
            x->state = X_QUARANTINED;
            x->cancelled = 1;
            x->deadline_ns = ect__now_ns() + c->quarantine_ns;
        } else if (x->state != X_QUARANTINED) {
            if (x->state != X_FAILED)
                ect__log_failure(ect_cache_discard(c->cache, x->key), "consumer");
            xfer_forget_locked(c, x);
        } else {
            x->cancelled = 1;
        }
    }
    pthread_mutex_unlock(&c->lock);
}

int
ect__consumer_has_pending(ect_consumer_t *c)
{
    pthread_mutex_lock(&c->lock);
    int pending = c->xfers.count > 0;
    pthread_mutex_unlock(&c->lock);
    return pending;
}

/* Add the samples of b to a. */
static void
hist_merge(ect_latency_hist_t *a, const ect_latency_hist_t *b)
{
    for (size_t i = 0; i < ECT_METRICS_LATENCY_BUCKETS; i++)
        a->buckets[i] += b->buckets[i];
    a->count += b->count;
    a->sum_ns += b->sum_ns;
}

void
ect__consumer_metrics(ect_consumer_t *c, ect_metrics_t *m)
{
    pthread_mutex_lock(&c->lock);
    m->p2p_reads_started += c->m.p2p_reads_started;
    m->p2p_reads_completed += c->m.p2p_reads_completed;
    m->p2p_read_bytes += c->m.p2p_read_bytes;
    m->p2p_retries += c->m.p2p_retries;
    m->p2p_ack_timeouts += c->m.p2p_ack_timeouts;
    m->p2p_read_timeouts += c->m.p2p_read_timeouts;
    m->p2p_transport_errors += c->m.p2p_transport_errors;
    m->wire_dropped += c->m.wire_dropped;
    for (size_t i = 0; i < ECT_XFER_STATUS_COUNT; i++)
        m->acks_received[i] += c->m.acks_received[i];
    hist_merge(&m->p2p_fetch_latency, &c->m.p2p_fetch_latency);
    hist_merge(&m->p2p_read_latency, &c->m.p2p_read_latency);
    pthread_mutex_unlock(&c->lock);
}

/* ---- lifecycle ----------------------------------------------------------- */

struct landed_ctx {
    ect_consumer_t *c;
    struct xfer *done[WALK_MAX];
    size_t n_done;
    int for_session; /* a failed read, or more landed ones than done[] holds */
};

static void
find_landed_tcp(ect_strmap_node_t *node, void *user)
{
    struct landed_ctx *l = user;
    struct xfer *x = node->value;
    if (x->state != X_READING || x->kind != ECT_XPORT_TCP)
        return;
    ect_xport_read_state_t rs = ect__xport_read_poll(l->c->xport, x->read);
    if (rs == ECT_XPORT_READ_DONE && l->n_done < WALK_MAX)
        l->done[l->n_done++] = x;
    else if (rs != ECT_XPORT_READ_PENDING)
        l->for_session = 1;
}

/* A read settled, called by the transport (see ect_xport_client_params_t's
 * wake).  A tcp read that landed is completed here, on the thread that
 * received its last byte, so its entry is ready without waking the session
 * thread first (that hand-off took 20-80 us of a 1 MiB read on the
 * project's machines).  Everything else is the session thread's, woken:
 * a same-host read (its completion sends on the session thread's DEALER,
 * and its wake comes from a copy thread, which must not call the client),
 * a failed read (its failure path is the deadline walk's), and any read
 * while the session thread (perhaps the caller itself) holds the lock.  A
 * stripe that settled before the others of its read needs nobody. */
static void
read_settled(void *arg, ect_xport_kind_t kind)
{
    ect_consumer_t *c = arg;
    if (kind == ECT_XPORT_TCP && pthread_mutex_trylock(&c->lock) == 0) {
        struct landed_ctx l = {.c = c};
        ect__strmap_each(&c->xfers, find_landed_tcp, &l);
        uint64_t now = ect__now_ns();
        for (size_t i = 0; i < l.n_done; i++)
            complete_locked(c, l.done[i], now);
        pthread_mutex_unlock(&c->lock);
        if (!l.for_session)
            return;
    }
    ect__ctl_client_wake(c->ctl);
}

/* Whether waking the same-host read's copy threads at the request pays:
 * while they poll for the ack's read, the producer must still answer and
 * the session thread receive the ack.  Measured (1 MiB fetches, 64 a run,
 * `ectier consumer --one-at-a-time`): on a 16-CPU host the read's part
 * halved (p50 124-146 -> 68-74 us) and the fetch's fell by a fifth; on a
 * 2-CPU VM, whose copy threads alone fill its CPUs, neither moved beyond
 * the noise.  So only where the CPUs outnumber the copiers (copy threads at
 * once and the caller) by two. */
static int
prewake_pays(const ect_config_t *cfg)
{
    return ect__copy_cpu_cpus_to_spare(cfg->copy_threads);
}

/* The config's `tcp_stripes`; 0: one per online CPU, 1 to
 * ECT_STREAM_MAX_STRIPES (a stripe costs a receiving thread here and a
 * sending one at the producer while it runs). */
static unsigned
tcp_stripes_of(const ect_config_t *cfg)
{
    if (cfg->tcp_stripes != 0)
        return cfg->tcp_stripes;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1)
        return 1;
    return cpus > (long)ECT_STREAM_MAX_STRIPES ? ECT_STREAM_MAX_STRIPES : (unsigned)cpus;
}

ect_status_t
ect__consumer_start(const ect_consumer_params_t *params, ect_consumer_t **consumer_p)
{
    ect_consumer_t *c = ect__calloc(1, sizeof(*c));
    if (c == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "consumer: out of memory");
    c->cfg = *params->config;
    c->geom = *params->geometry;
    c->cache = params->cache;
    c->region = params->region;
    snprintf(c->compat, sizeof(c->compat), "%s", params->compat_hash);
    c->ack_timeout_ns = (uint64_t)(c->cfg.consumer_ack_timeout_s * 1e9);
    c->prewake = prewake_pays(&c->cfg);
    c->read_timeout_ns = (uint64_t)(c->cfg.read_timeout_s * 1e9);
    c->quarantine_ns = (uint64_t)(c->cfg.quarantine_s * 1e9);
    uint8_t rnd[16];
    if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
        uint64_t t = ect__now_ns() ^ ((uint64_t)getpid() << 32);
        memcpy(rnd, &t, 8);
        memcpy(rnd + 8, &c, sizeof(void *) < 8 ? sizeof(void *) : 8);
    }
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(c->session_id + 2 * i, 3, "%02x", rnd[i]);
    ect__strmap_init(&c->xfers);
    ect__wire_buf_init(&c->out);
    ect_status_t st;
    if (pthread_mutex_init(&c->lock, NULL) != 0) {
        st = ect__error(ECT_ERR_INTERNAL, "consumer: cannot create its mutex");
        goto err_free;
    }
    ect_ctl_security_t sec = {.client_key_file = c->cfg.curve_client_key_file};
    if ((st = ect__ctl_client_create(&sec, &c->ctl)) != ECT_OK)
        goto err_mutex;
    ect_xport_client_params_t xp = {.data = ect_region_data(c->region),
                                    .block_size = c->geom.block_size_bytes,
                                    .num_blocks = c->geom.num_blocks,
                                    .prefer = c->cfg.transport,
                                    .wake = read_settled,
                                    .wake_arg = c,
                                    .touch_pages = c->cfg.prefault,
                                    .copy = ect__copy_cpu_params_of(&c->cfg),
                                    .tcp_stripes = tcp_stripes_of(&c->cfg)};
    if ((st = ect__xport_client_create(&xp, &c->xport)) != ECT_OK)
        goto err_ctl;
    if ((st = ect__thread_start(&c->thread, session_thread, c, "ect-consumer")) != ECT_OK)
        goto err_xport;
    c->thread_started = 1;
    *consumer_p = c;
    return ECT_OK;

err_xport:
    ect__xport_client_destroy(c->xport);
err_ctl:
    ect__ctl_client_destroy(c->ctl);
err_mutex:
    pthread_mutex_destroy(&c->lock);
err_free:
    ect__wire_buf_cleanup(&c->out);
    ect__free(c);
    return st;
}

static void
drop_xfer(ect_strmap_node_t *node, void *user)
{
    ect_consumer_t *c = user;
    struct xfer *x = node->value;
    if (x->read != NULL)
        ect__xport_read_release(c->xport, x->read);
    if (x->state != X_FAILED)
        ect__log_failure(ect_cache_discard(c->cache, x->key), "consumer");
    xfer_free(x);
}

void
ect__consumer_stop(ect_consumer_t *c)
{
    if (c == NULL)
        return;
    __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    /* Reads still in flight may land: the transport client waits for them
     * (or detaches them) before the region can go away. */
    pthread_mutex_lock(&c->lock);
    ect__strmap_each(&c->xfers, drop_xfer, c);
    ect__strmap_cleanup(&c->xfers);
    pthread_mutex_unlock(&c->lock);
    ect__xport_client_destroy(c->xport);
    ect__ctl_client_destroy(c->ctl);
    pthread_mutex_destroy(&c->lock);
    ect__wire_buf_cleanup(&c->out);
    ect__free(c);
}
