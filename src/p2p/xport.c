/*
 * The data-transport dispatcher (transport.h): the producer's server builds
 * one offer with every transport it serves; the consumer's client picks one
 * per peer, checks every block index and length before any byte moves, and
 * runs reads over UCX (xport_ucx.c) or the same-host path (xport_shm.c).
 *
 * Choice per peer (config `transport`):
 *   auto       same_host when the offer has it and it is usable from here
 *              (boot id, directory, inode, header: xport_shm.c), else ucx;
 *   ucx        ucx only;
 *   same_host  same_host only.
 * Neither possible: ECT_ERR_UNSUPPORTED saying why.  The choice is logged
 * (info) when a peer first uses a transport or switches.
 *
 * Peers.  A peer ("host:port") caches the offer and descriptor bytes it
 * was last seen with, their decoded form, and lazily its UCX endpoint + key
 * and its same-host mapping.  Different bytes from the same key mean the
 * producer restarted: the old peer is retired (counted in peer_restarts)
 * and a new one made from the new bytes, with no extra round trip.  A UCX
 * endpoint that failed is replaced the same way (not counted).  A retired
 * peer stays alive while reads still use its endpoint or mapping and is
 * freed when the last one ends.
 *
 * Reads.  Every read stays on the client's list until it is both released
 * and finished: a released PENDING read is detached (its memory and its
 * peer stay alive until the transport is done with it; a DMA may still
 * land) and reaped by a later poll or by destroy.  A read is finished when
 * every UCX operation has completed (error handling mode PEER makes a dead
 * producer's operations complete with an error) or its copy batch has
 * landed; FAILED is reported only then, so a caller that frees its blocks
 * on FAILED never races a late write.
 *
 * Counters count finished reads and their bytes by transport (DONE), and
 * failures (FAILED).
 *
 * Threading: transport.h.  The server's fields are immutable once started
 * (its UCX part has its own progress thread).  A client is used by one
 * thread at a time; the copy engine's threads touch only the bytes of a
 * batch, and UCX callbacks run inside read_poll on the caller's thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <ectier/copy.h>

#include "common/clock.h"
#include "common/error.h"
#include "p2p/xport_internal.h"

#define PEER_KEY_MAX 300
/* How long destroy waits for reads in flight before forcing them to end. */
#define DESTROY_WAIT_NS (2ull * 1000 * 1000 * 1000)

const char *
ect__xport_kind_str(ect_xport_kind_t kind)
{
    switch (kind) {
    case ECT_XPORT_UCX:
        return "ucx";
    case ECT_XPORT_SAME_HOST:
        return "same_host";
    case ECT_XPORT_NONE:
        break;
    }
    return "none";
}

/* ---- server ---------------------------------------------------------------- */

struct ect_xport_server {
    ect_xport_ucx_server_t *ucx;
    uint8_t *agent;
    size_t agent_len;
    uint8_t *desc;
    size_t desc_len;
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
    if (params->block_size == 0 || params->num_blocks == 0 ||
        params->num_blocks > SIZE_MAX / params->block_size)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport server: %" PRIu64 " blocks of %" PRIu64 " bytes is not a region",
                          params->num_blocks, params->block_size);
    if (!params->serve_ucx && !params->serve_same_host)
        return ect__error(ECT_ERR_INVALID_ARG, "xport server: asked to serve no transport");
    if (params->serve_same_host && params->region_path == NULL)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport server: the same-host path needs the region's file path");
    ect_xport_server_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport server: out of memory");
    size_t bytes = (size_t)(params->num_blocks * params->block_size);
    ect_xport_offer_t offer;
    memset(&offer, 0, sizeof(offer));
    ect_xport_desc_t desc = {.base = (uint64_t)(uintptr_t)params->data,
                             .block_size = params->block_size,
                             .num_blocks = params->num_blocks};
    ect_status_t st;
    if (params->serve_ucx) {
        st = ect__xport_ucx_server_start(params->data, bytes, &s->ucx);
        if (st == ECT_OK) {
            offer.kinds |= 1u << ECT_XPORT_UCX;
            offer.ucx_address = ect__xport_ucx_server_address(s->ucx, &offer.ucx_address_len);
            desc.rkey = ect__xport_ucx_server_rkey(s->ucx, &desc.rkey_len);
        } else if (st == ECT_ERR_NO_MEMORY || !params->serve_same_host) {
            goto free_server;
        } else {
            ect__log_last_error(ECT_LOG_WARN, "xport server: UCX not offered");
        }
    }
    if (params->serve_same_host) {
        st = same_host_entry(params, &offer);
        if (st == ECT_OK) {
            offer.kinds |= 1u << ECT_XPORT_SAME_HOST;
        } else if (offer.kinds == 0) {
            goto stop_ucx;
        } else {
            ect__log_last_error(ECT_LOG_WARN, "xport server: same-host path not offered");
        }
    }
    if (offer.kinds == 0) {
        st = ect__error(ECT_ERR_TRANSPORT, "xport server: no transport could be started");
        goto stop_ucx;
    }
    if ((st = ect__xport_offer_encode(&offer, &s->agent, &s->agent_len)) != ECT_OK)
        goto stop_ucx;
    if ((st = ect__xport_desc_encode(&desc, &s->desc, &s->desc_len)) != ECT_OK)
        goto free_agent;
    s->kinds = offer.kinds;
    ECT_LOG_I("xport server: offering%s%s for %" PRIu64 " blocks of %" PRIu64 " bytes",
              (s->kinds & (1u << ECT_XPORT_UCX)) ? " ucx" : "",
              (s->kinds & (1u << ECT_XPORT_SAME_HOST)) ? " same_host" : "", params->num_blocks,
              params->block_size);
    *server_p = s;
    return ECT_OK;

free_agent:
    free(s->agent);
stop_ucx:
    ect__xport_ucx_server_stop(s->ucx);
free_server:
    free(s);
    return st;
}

const void *
ect__xport_server_agent_metadata(const ect_xport_server_t *server, size_t *len_p)
{
    *len_p = server->agent_len;
    return server->agent;
}

const void *
ect__xport_server_mem_descriptor(const ect_xport_server_t *server, size_t *len_p)
{
    *len_p = server->desc_len;
    return server->desc;
}

unsigned
ect__xport_server_kinds(const ect_xport_server_t *server)
{
    return server->kinds;
}

void
ect__xport_server_stop(ect_xport_server_t *server)
{
    if (server == NULL)
        return;
    ect__xport_ucx_server_stop(server->ucx);
    free(server->agent);
    free(server->desc);
    free(server);
}

/* ---- client state ------------------------------------------------------------ */

struct peer {
    char key[PEER_KEY_MAX + 1];
    uint8_t *agent; /* the bytes this peer was made from; offer/desc borrow them */
    size_t agent_len;
    uint8_t *desc_bytes;
    size_t desc_len;
    ect_xport_offer_t offer;
    ect_xport_desc_t desc;
    ect_xport_ucx_peer_t *ucx;
    ect_xport_shm_peer_t *shm;
    int shm_tried; /* shm_status/shm_why hold the outcome */
    ect_status_t shm_status;
    char shm_why[320];
    ect_xport_kind_t logged; /* the transport last logged for this peer */
    unsigned busy;           /* reads in flight that use ucx or shm */
    int retired;             /* off the lookup list; freed when busy reaches 0 */
    struct peer *next;       /* active or retired list */
};

/* Same-host reads up to this size are copied by the caller's thread in
 * read_start (about 0.1-0.2 ms at memcpy speed); larger ones go to the copy
 * threads so read_poll never blocks for long. */
#define SHM_INLINE_BYTES (2u << 20)

struct ect_xport_read {
    struct peer *peer;
    ect_xport_kind_t kind;
    ect_xport_read_state_t state;
    uint64_t bytes;
    ect_xport_completion_t done; /* ucx */
    uint64_t ticket;             /* same-host copy batch */
    int copied;                  /* same-host read already copied in read_start */
    int detached;
    struct ect_xport_read *prev, *next;
};

struct ect_xport_client {
    void *data;
    uint64_t block_size;
    uint64_t num_blocks;
    ect_transport_t prefer;
    char region_dir[ECT_XPORT_MAX_PATH + 1];
    char boot_id[ECT_XPORT_BOOT_ID_LEN + 1];
    int have_boot_id;
    struct peer *peers;   /* active, by key */
    struct peer *retired; /* replaced or forgotten, still busy */
    ect_xport_read_t *reads;
    ect_xport_ucx_client_t *ucx; /* created on first UCX use */
    ect_copy_engine_t *copy;     /* created on first same-host use */
    ect_xport_counters_t counters;
};

ect_status_t
ect__xport_client_create(const ect_xport_client_params_t *params, ect_xport_client_t **client_p)
{
    if (params == NULL || client_p == NULL || params->data == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "xport client: NULL argument");
    if (params->block_size == 0 || params->num_blocks == 0 ||
        params->num_blocks > SIZE_MAX / params->block_size)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport client: %" PRIu64 " blocks of %" PRIu64 " bytes is not a region",
                          params->num_blocks, params->block_size);
    if (params->prefer != ECT_TRANSPORT_AUTO && params->prefer != ECT_TRANSPORT_UCX &&
        params->prefer != ECT_TRANSPORT_SAME_HOST)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport client: transport %d is not auto, ucx or same_host",
                          (int)params->prefer);
    const char *dir = params->region_dir != NULL ? params->region_dir : "/dev/shm";
    if (dir[0] != '/' || strlen(dir) > ECT_XPORT_MAX_PATH)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "xport client: region directory '%s' is not an absolute path of at "
                          "most %u bytes",
                          dir, ECT_XPORT_MAX_PATH);
    ect_xport_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport client: out of memory");
    c->data = params->data;
    c->block_size = params->block_size;
    c->num_blocks = params->num_blocks;
    c->prefer = params->prefer;
    snprintf(c->region_dir, sizeof(c->region_dir), "%s", dir);
    /* Without a boot id the same-host path is never usable; UCX still is. */
    if (params->prefer != ECT_TRANSPORT_UCX) {
        if (ect__xport_boot_id(c->boot_id) == ECT_OK)
            c->have_boot_id = 1;
        else
            ect__log_last_error(ECT_LOG_WARN, "xport client: same-host path unavailable");
    }
    *client_p = c;
    return ECT_OK;
}

static void
peer_free(ect_xport_client_t *c, struct peer *p, int force)
{
    ect__xport_ucx_peer_close(c->ucx, p->ucx, force);
    ect__xport_shm_peer_close(p->shm);
    free(p->agent);
    free(p->desc_bytes);
    free(p);
}

static void
unlink_peer(struct peer **list, struct peer *p)
{
    for (struct peer **pp = list; *pp != NULL; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            p->next = NULL;
            return;
        }
}

/* Take an active peer off the lookup list; free it now if nothing uses it. */
static void
retire_peer(ect_xport_client_t *c, struct peer *p)
{
    unlink_peer(&c->peers, p);
    p->retired = 1;
    if (p->busy == 0) {
        peer_free(c, p, 0);
    } else {
        p->next = c->retired;
        c->retired = p;
    }
}

static void
peer_unbusy(ect_xport_client_t *c, struct peer *p)
{
    p->busy--;
    if (p->retired && p->busy == 0) {
        unlink_peer(&c->retired, p);
        peer_free(c, p, 0);
    }
}

static struct peer *
find_peer(ect_xport_client_t *c, const char *key)
{
    for (struct peer *p = c->peers; p != NULL; p = p->next)
        if (strcmp(p->key, key) == 0)
            return p;
    return NULL;
}

/* A new peer from validated bytes (copied). */
static ect_status_t
peer_create(const char *key, const void *agent, size_t agent_len, const void *desc, size_t desc_len,
            struct peer **peer_p)
{
    struct peer *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport client: out of memory");
    snprintf(p->key, sizeof(p->key), "%s", key);
    if ((p->agent = malloc(agent_len)) == NULL || (p->desc_bytes = malloc(desc_len)) == NULL) {
        free(p->agent);
        free(p);
        return ect__error(ECT_ERR_NO_MEMORY, "xport client: out of memory");
    }
    memcpy(p->agent, agent, agent_len);
    p->agent_len = agent_len;
    memcpy(p->desc_bytes, desc, desc_len);
    p->desc_len = desc_len;
    /* Already validated by the caller; decoding again points into our copy. */
    ect__xport_offer_decode(p->agent, agent_len, &p->offer);
    ect__xport_desc_decode(p->desc_bytes, desc_len, &p->desc);
    *peer_p = p;
    return ECT_OK;
}

/* The peer to read from: the cached one if the bytes are the same and its
 * endpoint has not failed, else a new one (counting a restart when the
 * bytes changed). */
static ect_status_t
get_peer(ect_xport_client_t *c, const char *key, const void *agent, size_t agent_len,
         const void *desc, size_t desc_len, struct peer **peer_p)
{
    struct peer *old = find_peer(c, key);
    int same = old != NULL && old->agent_len == agent_len && old->desc_len == desc_len &&
               memcmp(old->agent, agent, agent_len) == 0 &&
               memcmp(old->desc_bytes, desc, desc_len) == 0;
    if (same && !(old->ucx != NULL && ect__xport_ucx_peer_failed(old->ucx))) {
        *peer_p = old;
        return ECT_OK;
    }
    struct peer *p = NULL;
    ect_status_t st = peer_create(key, agent, agent_len, desc, desc_len, &p);
    if (st != ECT_OK)
        return st;
    if (old != NULL) {
        if (!same) {
            c->counters.peer_restarts++;
            ECT_LOG_I("xport: peer %s sent a new offer (restarted); dropping its old endpoint "
                      "and mapping",
                      key);
        } else {
            ECT_LOG_I("xport: peer %s: its UCX endpoint failed; reconnecting", key);
        }
        p->logged = old->logged;
        retire_peer(c, old);
    }
    p->next = c->peers;
    c->peers = p;
    *peer_p = p;
    return ECT_OK;
}

/* ---- choosing and checking ------------------------------------------------------ */

static int
same_host_usable(ect_xport_client_t *c, struct peer *p)
{
    if (!(p->offer.kinds & (1u << ECT_XPORT_SAME_HOST))) {
        snprintf(p->shm_why, sizeof(p->shm_why), "the producer does not offer it");
        return 0;
    }
    if (!p->shm_tried) {
        p->shm_tried = 1;
        p->shm_status = ect__xport_shm_peer_open(&p->offer, &p->desc, c->region_dir,
                                                 c->have_boot_id ? c->boot_id : NULL, &p->shm);
        if (p->shm_status != ECT_OK)
            snprintf(p->shm_why, sizeof(p->shm_why), "%s", ect_last_error());
    }
    return p->shm_status == ECT_OK;
}

static ect_status_t
choose(ect_xport_client_t *c, struct peer *p, ect_xport_kind_t *kind_p)
{
    int has_ucx = (p->offer.kinds & (1u << ECT_XPORT_UCX)) != 0;
    ect_xport_kind_t kind = ECT_XPORT_NONE;
    switch (c->prefer) {
    case ECT_TRANSPORT_SAME_HOST:
        if (!same_host_usable(c, p))
            return ect__error(ECT_ERR_UNSUPPORTED,
                              "xport: transport same_host is configured but peer %s cannot use "
                              "it: %s",
                              p->key, p->shm_why);
        kind = ECT_XPORT_SAME_HOST;
        break;
    case ECT_TRANSPORT_UCX:
        if (!has_ucx)
            return ect__error(ECT_ERR_UNSUPPORTED,
                              "xport: transport ucx is configured but peer %s does not offer UCX",
                              p->key);
        kind = ECT_XPORT_UCX;
        break;
    case ECT_TRANSPORT_AUTO:
        if (same_host_usable(c, p))
            kind = ECT_XPORT_SAME_HOST;
        else if (has_ucx)
            kind = ECT_XPORT_UCX;
        else
            return ect__error(ECT_ERR_UNSUPPORTED,
                              "xport: peer %s offers no usable transport (no UCX; same-host: %s)",
                              p->key, p->shm_why);
        break;
    }
    if (kind != p->logged) {
        if (kind == ECT_XPORT_UCX && c->prefer == ECT_TRANSPORT_AUTO &&
            (p->offer.kinds & (1u << ECT_XPORT_SAME_HOST)))
            ECT_LOG_I("xport: peer %s: reading over ucx (same-host not usable: %s)", p->key,
                      p->shm_why);
        else
            ECT_LOG_I("xport: peer %s: reading over %s", p->key, ect__xport_kind_str(kind));
        p->logged = kind;
    }
    *kind_p = kind;
    return ECT_OK;
}

/* Check every index and length, then cut the read into segments: maximal
 * stretches that are contiguous on both sides.  Nothing is posted here. */
static ect_status_t
plan_segments(const ect_xport_client_t *c, const struct peer *p, const uint64_t *remote,
              size_t n_remote, const ect_run_t *runs, size_t n_runs, ect_xport_segment_t **segs_p,
              size_t *n_segs_p)
{
    if (p->desc.block_size != c->block_size)
        return ect__error(ECT_ERR_PEER,
                          "xport: peer %s has blocks of %" PRIu64 " bytes, ours are %" PRIu64,
                          p->key, p->desc.block_size, c->block_size);
    for (size_t i = 0; i < n_remote; i++)
        if (remote[i] >= p->desc.num_blocks)
            return ect__error(ECT_ERR_PEER,
                              "xport: peer %s named block %" PRIu64 " (index %zu); its region "
                              "has %" PRIu64 " blocks",
                              p->key, remote[i], i, p->desc.num_blocks);
    for (size_t j = 0; j < n_runs; j++)
        if (runs[j].first >= c->num_blocks || runs[j].count > c->num_blocks - runs[j].first)
            return ect__error(ECT_ERR_OVERFLOW,
                              "xport: local run %zu (blocks %" PRIu64 " + %" PRIu64
                              ") lies outside our %" PRIu64 " blocks",
                              j, runs[j].first, runs[j].count, c->num_blocks);
    /* total never exceeds n_remote, so the sum cannot overflow. */
    uint64_t total = 0;
    int mismatch = 0;
    for (size_t j = 0; j < n_runs && !mismatch; j++) {
        if (runs[j].count > (uint64_t)n_remote - total)
            mismatch = 1;
        else
            total += runs[j].count;
    }
    if (mismatch || total != n_remote)
        return ect__error(ECT_ERR_PEER,
                          "xport: peer %s sent %zu block indices for %s%" PRIu64 " local blocks",
                          p->key, n_remote, mismatch ? "more than " : "", total);
    ect_xport_segment_t *segs = NULL;
    if (n_remote != 0 && (segs = malloc(n_remote * sizeof(*segs))) == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport: out of memory");
    size_t n = 0, k = 0;
    uint8_t *base = c->data;
    for (size_t j = 0; j < n_runs; j++) {
        for (uint64_t b = 0; b < runs[j].count; b++, k++) {
            uint64_t local = runs[j].first + b;
            ect_xport_segment_t *last = n ? &segs[n - 1] : NULL;
            /* Extend the last segment when both sides continue it. */
            if (last != NULL && remote[k] == remote[k - 1] + 1 &&
                (uint8_t *)last->local + last->len == base + local * c->block_size) {
                last->len += c->block_size;
                continue;
            }
            segs[n++] = (ect_xport_segment_t){.remote_off = remote[k] * c->block_size,
                                              .local = base + local * c->block_size,
                                              .len = c->block_size};
        }
    }
    *segs_p = segs;
    *n_segs_p = n;
    return ECT_OK;
}

/* ---- reads ----------------------------------------------------------------------- */

static void
read_unlink(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        c->reads = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
}

/* Move a PENDING read to its final state once the transport is done. */
static void
read_update(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (r->state != ECT_XPORT_READ_PENDING)
        return;
    ect_status_t st;
    const char *why;
    if (r->kind == ECT_XPORT_UCX) {
        if (r->done.outstanding > 0)
            return;
        st = r->done.status;
        why = r->done.why;
    } else if (r->copied) {
        st = ECT_OK;
        why = "";
    } else {
        st = ect_copy_query(c->copy, r->ticket);
        if (st == ECT_ERR_BUSY)
            return;
        why = ect_last_error();
    }
    if (st == ECT_OK) {
        r->state = ECT_XPORT_READ_DONE;
        c->counters.reads[r->kind]++;
        c->counters.bytes[r->kind] += r->bytes;
    } else {
        r->state = ECT_XPORT_READ_FAILED;
        c->counters.failures++;
        ECT_LOG_W("xport: read of %" PRIu64 " bytes from %s over %s failed: %s", r->bytes,
                  r->peer->key, ect__xport_kind_str(r->kind), why);
    }
    struct peer *p = r->peer;
    r->peer = NULL;
    peer_unbusy(c, p);
}

/* Drive the transports and free detached reads that have finished. */
static void
client_progress(ect_xport_client_t *c)
{
    if (c->ucx != NULL)
        ect__xport_ucx_client_progress(c->ucx);
    for (ect_xport_read_t *r = c->reads, *next; r != NULL; r = next) {
        next = r->next;
        if (!r->detached)
            continue;
        read_update(c, r);
        if (r->state != ECT_XPORT_READ_PENDING) {
            read_unlink(c, r);
            free(r);
        }
    }
}

ect_status_t
ect__xport_read_start(ect_xport_client_t *c, const char *peer_key, const void *agent_metadata,
                      size_t agent_len, const void *mem_descriptor, size_t desc_len,
                      const uint64_t *remote_blocks, size_t n_remote, const ect_run_t *local_runs,
                      size_t n_local_runs, ect_xport_read_t **read_p, ect_xport_kind_t *kind_p)
{
    if (c == NULL || peer_key == NULL || read_p == NULL ||
        (remote_blocks == NULL && n_remote != 0) || (local_runs == NULL && n_local_runs != 0))
        return ect__error(ECT_ERR_INVALID_ARG, "xport read: NULL argument");
    if (peer_key[0] == '\0' || strlen(peer_key) > PEER_KEY_MAX)
        return ect__error(ECT_ERR_INVALID_ARG, "xport read: peer name of %zu bytes (1..%d)",
                          strlen(peer_key), PEER_KEY_MAX);
    client_progress(c);

    /* Validate the blobs before they can touch the cache: a malformed offer
     * from a live peer must not drop its good cached state. */
    ect_xport_offer_t offer;
    ect_xport_desc_t desc;
    ect_status_t st;
    if ((st = ect__xport_offer_decode(agent_metadata, agent_len, &offer)) != ECT_OK ||
        (st = ect__xport_desc_decode(mem_descriptor, desc_len, &desc)) != ECT_OK)
        return ect__error(st, "xport: from %s: %s", peer_key, ect_last_error());
    struct peer *p = NULL;
    if ((st = get_peer(c, peer_key, agent_metadata, agent_len, mem_descriptor, desc_len, &p)) !=
        ECT_OK)
        return st;
    ect_xport_segment_t *segs = NULL;
    size_t n_segs = 0;
    if ((st = plan_segments(c, p, remote_blocks, n_remote, local_runs, n_local_runs, &segs,
                            &n_segs)) != ECT_OK)
        return st;
    ect_xport_kind_t kind = ECT_XPORT_NONE;
    if ((st = choose(c, p, &kind)) != ECT_OK)
        goto free_segs;
    ect_xport_read_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "xport read: out of memory");
        goto free_segs;
    }
    r->kind = kind;
    r->bytes = (uint64_t)n_remote * c->block_size;
    r->state = ECT_XPORT_READ_PENDING;
    if (kind == ECT_XPORT_UCX && n_segs == 0) {
        /* Nothing to move: no endpoint either.  (An endpoint closed before
         * its connection is established can abort a UCX 1.13 producer;
         * see ect__xport_ucx_peer_close.) */
        st = ECT_OK;
    } else if (kind == ECT_XPORT_UCX) {
        if (c->ucx == NULL && (st = ect__xport_ucx_client_create(&c->ucx)) != ECT_OK)
            goto free_read;
        if (p->ucx == NULL && (st = ect__xport_ucx_peer_connect(c->ucx, p->key, &p->offer, &p->desc,
                                                                &p->ucx)) != ECT_OK)
            goto free_read;
        st = ect__xport_ucx_post(c->ucx, p->ucx, segs, n_segs, &r->done);
    } else if (r->bytes <= SHM_INLINE_BYTES) {
        /* A small read: handing it to a copy thread costs about what the
         * copy does (tens of microseconds), so copy it here and now. */
        ect__xport_shm_copy_now(p->shm, segs, n_segs);
        r->copied = 1; /* the first poll settles it */
        st = ECT_OK;
    } else {
        if (c->copy == NULL) {
            ect_copy_cpu_params_t cp = {.threads = 2};
            if ((st = ect_copy_engine_create_cpu(&cp, &c->copy)) != ECT_OK)
                goto free_read;
        }
        st = ect__xport_shm_post(c->copy, p->shm, segs, n_segs, &r->ticket);
    }
    if (st != ECT_OK)
        goto free_read;
    free(segs);
    r->peer = p;
    p->busy++;
    r->next = c->reads;
    if (c->reads != NULL)
        c->reads->prev = r;
    c->reads = r;
    if (kind_p != NULL)
        *kind_p = kind;
    *read_p = r;
    return ECT_OK;

free_read:
    free(r);
free_segs:
    free(segs);
    return st;
}

ect_xport_read_state_t
ect__xport_read_poll(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (c == NULL || r == NULL)
        return ECT_XPORT_READ_FAILED;
    client_progress(c);
    read_update(c, r);
    return r->state;
}

void
ect__xport_read_release(ect_xport_client_t *c, ect_xport_read_t *r)
{
    if (c == NULL || r == NULL)
        return;
    read_update(c, r);
    if (r->state == ECT_XPORT_READ_PENDING) {
        r->detached = 1;
        return;
    }
    read_unlink(c, r);
    free(r);
}

void
ect__xport_client_forget_peer(ect_xport_client_t *c, const char *peer_key)
{
    if (c == NULL || peer_key == NULL)
        return;
    struct peer *p = find_peer(c, peer_key);
    if (p != NULL) {
        ECT_LOG_D("xport: forgetting peer %s", peer_key);
        retire_peer(c, p);
    }
}

void
ect__xport_client_counters(const ect_xport_client_t *c, ect_xport_counters_t *counters_p)
{
    if (c != NULL && counters_p != NULL)
        *counters_p = c->counters;
}

static int
any_pending(ect_xport_client_t *c)
{
    for (ect_xport_read_t *r = c->reads; r != NULL; r = r->next) {
        read_update(c, r);
        if (r->state == ECT_XPORT_READ_PENDING)
            return 1;
    }
    return 0;
}

void
ect__xport_client_destroy(ect_xport_client_t *c)
{
    if (c == NULL)
        return;
    /* Let reads in flight finish for a while; then forced endpoint closes
     * end the rest (as cancelled), and the copy engine's destroy waits for
     * its batches, so nothing lands in our region after this returns. */
    uint64_t deadline = ect__now_ns() + DESTROY_WAIT_NS;
    while (any_pending(c) && ect__now_ns() < deadline)
        client_progress(c);
    int forced = any_pending(c);
    if (forced)
        ECT_LOG_W("xport client: reads still in flight at destroy; cancelling them");
    ect_copy_engine_destroy(c->copy);
    c->copy = NULL;
    /* Peers are freed before their reads: a forced close completes the UCX
     * operations, whose callbacks write into the reads' completion state. */
    struct peer *lists[2] = {c->peers, c->retired};
    c->peers = c->retired = NULL;
    for (int i = 0; i < 2; i++)
        for (struct peer *p = lists[i], *next; p != NULL; p = next) {
            next = p->next;
            peer_free(c, p, 1);
        }
    for (ect_xport_read_t *r = c->reads, *next; r != NULL; r = next) {
        next = r->next;
        if (r->kind == ECT_XPORT_UCX && r->done.outstanding > 0)
            ECT_LOG_E("xport client: %zu UCX operations of a read did not end at destroy",
                      r->done.outstanding);
        free(r);
    }
    c->reads = NULL;
    ect__xport_ucx_client_destroy(c->ucx);
    free(c);
}
