/*
 * The consumer's transport client, its peer half (transport.h; the
 * client's creation and destruction, its reads and its entry points are in
 * xport.c, the state both share in xport_client_internal.h): the peers the
 * client caches, the transport it picks for each, and the check of every
 * block index and length of a read before any byte moves.
 *
 * Choice per peer (config `transport`):
 *   auto       same_host when the offer has it and it is usable from here
 *              (boot id, directory, inode, header, permissions:
 *              xport_shm.c), else tcp;
 *   tcp        tcp only;
 *   same_host  same_host only.
 * Neither possible: ECT_ERR_UNSUPPORTED saying why.  The choice is logged
 * (info) when a peer first uses a transport or switches.
 *
 * Peers.  A peer ("host:port" of its control plane) caches the offer bytes
 * it was last seen with, their decoded form, its resolved stream address,
 * and lazily its same-host mapping.  Different offer bytes from the same
 * key mean the producer restarted (the offer carries a per-start instance
 * id): the old peer is retired (counted in peer_restarts) and a new one
 * made from the new bytes, with no extra round trip.  A retired peer stays
 * alive while reads still use its mapping and is freed when the last one
 * ends.  Stream connections are pooled by the stream client under a key
 * that includes the instance id, so a restarted producer never gets a
 * connection made to its predecessor (xport.c's start_tcp).
 *
 * Threading: nothing here locks.  A client is used by one thread at a time
 * (transport.h) and only that thread reaches a peer: the stream and copy
 * threads touch the bytes and state of their own reads, never a peer, and
 * a same-host read gives its peer back (ect__xport_peer_unbusy) when the
 * caller polls it, not on the copy thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "p2p/xport_client_internal.h"

/* ---- peers ----------------------------------------------------------------------- */

void
ect__xport_peer_free(struct peer *p)
{
    ect__xport_shm_peer_close(p->shm);
    ect__free(p->agent);
    ect__free(p);
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

void
ect__xport_peer_retire(ect_xport_client_t *c, struct peer *p)
{
    unlink_peer(&c->peers, p);
    p->retired = 1;
    if (p->busy == 0) {
        ect__xport_peer_free(p);
    } else {
        p->next = c->retired;
        c->retired = p;
    }
}

void
ect__xport_peer_unbusy(ect_xport_client_t *c, struct peer *p)
{
    p->busy--;
    if (p->retired && p->busy == 0) {
        unlink_peer(&c->retired, p);
        ect__xport_peer_free(p);
    }
}

struct peer *
ect__xport_peer_find(ect_xport_client_t *c, const char *key)
{
    for (struct peer *p = c->peers; p != NULL; p = p->next)
        if (strcmp(p->key, key) == 0)
            return p;
    return NULL;
}

/* A new peer from validated offer bytes (copied). */
static ect_status_t
peer_create(const char *key, const char *host, const void *agent, size_t agent_len,
            struct peer **peer_p)
{
    struct peer *p = ect__calloc(1, sizeof(*p));
    if (p == NULL || (p->agent = ect__malloc(agent_len)) == NULL) {
        ect__free(p);
        return ect__error(ECT_ERR_NO_MEMORY, "xport client: out of memory");
    }
    snprintf(p->key, sizeof(p->key), "%s", key);
    snprintf(p->host, sizeof(p->host), "%s", host);
    memcpy(p->agent, agent, agent_len);
    p->agent_len = agent_len;
    /* Already validated by the caller; decoding again points into our copy. */
    ect__xport_offer_decode(p->agent, agent_len, &p->offer);
    *peer_p = p;
    return ECT_OK;
}

ect_status_t
ect__xport_peer_get(ect_xport_client_t *c, const char *key, const char *host, const void *agent,
                    size_t agent_len, struct peer **peer_p)
{
    struct peer *old = ect__xport_peer_find(c, key);
    if (old != NULL && old->agent_len == agent_len && memcmp(old->agent, agent, agent_len) == 0) {
        *peer_p = old;
        return ECT_OK;
    }
    struct peer *p = NULL;
    ect_status_t st = peer_create(key, host, agent, agent_len, &p);
    if (st != ECT_OK)
        return st;
    if (old != NULL) {
        c->counters.peer_restarts++;
        ECT_LOG_I("xport: peer %s sent a new offer (restarted); dropping what was cached for it",
                  key);
        p->logged = old->logged;
        ect__xport_peer_retire(c, old);
    }
    p->next = c->peers;
    c->peers = p;
    *peer_p = p;
    return ECT_OK;
}

/* ---- choosing and checking ------------------------------------------------------ */

static int
same_host_usable(ect_xport_client_t *c, struct peer *p, const ect_xport_desc_t *desc)
{
    if (!(p->offer.kinds & (1u << ECT_XPORT_SAME_HOST))) {
        snprintf(p->shm_why, sizeof(p->shm_why), "the producer does not offer it");
        return 0;
    }
    if (!p->shm_tried) {
        p->shm_tried = 1;
        p->shm_status =
            ect__xport_shm_peer_open(&p->offer, desc, c->region_dir,
                                     c->have_boot_id ? c->boot_id : NULL, c->touch_pages, &p->shm);
        if (p->shm_status != ECT_OK)
            snprintf(p->shm_why, sizeof(p->shm_why), "%s", ect_last_error());
    }
    return p->shm_status == ECT_OK;
}

ect_status_t
ect__xport_choose(ect_xport_client_t *c, struct peer *p, const ect_xport_desc_t *desc,
                  ect_xport_kind_t *kind_p)
{
    int has_tcp = (p->offer.kinds & (1u << ECT_XPORT_TCP)) != 0;
    ect_xport_kind_t kind = ECT_XPORT_NONE;
    switch (c->prefer) {
    case ECT_TRANSPORT_SAME_HOST:
        if (!same_host_usable(c, p, desc))
            return ect__error(ECT_ERR_UNSUPPORTED,
                              "xport: transport same_host is configured but peer %s cannot use "
                              "it: %s",
                              p->key, p->shm_why);
        kind = ECT_XPORT_SAME_HOST;
        break;
    case ECT_TRANSPORT_TCP:
        if (!has_tcp)
            return ect__error(ECT_ERR_UNSUPPORTED,
                              "xport: transport tcp is configured but peer %s does not offer it",
                              p->key);
        kind = ECT_XPORT_TCP;
        break;
    case ECT_TRANSPORT_AUTO:
        if (same_host_usable(c, p, desc))
            kind = ECT_XPORT_SAME_HOST;
        else if (has_tcp)
            kind = ECT_XPORT_TCP;
        else
            return ect__error(ECT_ERR_UNSUPPORTED,
                              "xport: peer %s offers no usable transport (no tcp; same-host: %s)",
                              p->key, p->shm_why);
        break;
    }
    if (kind != p->logged) {
        if (kind == ECT_XPORT_TCP && c->prefer == ECT_TRANSPORT_AUTO &&
            (p->offer.kinds & (1u << ECT_XPORT_SAME_HOST)))
            ECT_LOG_I("xport: peer %s: reading over tcp (same-host not usable: %s)", p->key,
                      p->shm_why);
        else
            ECT_LOG_I("xport: peer %s: reading over %s", p->key, ect__xport_kind_str(kind));
        p->logged = kind;
    }
    *kind_p = kind;
    return ECT_OK;
}

/* The producer's blocks of a read as runs, in entry order: the
 * descriptor's (a consumer that took runs; checked when decoded) or the
 * ack's indices, each checked against the producer's region and coalesced.
 * *runs_p is malloc'd (NULL for none). */
static ect_status_t
remote_runs(const char *peer_key, const ect_xport_desc_t *desc, const uint64_t *remote,
            size_t n_remote, ect_run_t **runs_p, size_t *n_runs_p, uint64_t *blocks_p)
{
    if (desc->n_runs != 0 && n_remote != 0)
        return ect__error(ECT_ERR_PEER,
                          "xport: peer %s sent both src_block_indices and runs in its descriptor",
                          peer_key);
    size_t cap = desc->n_runs != 0 ? desc->n_runs : n_remote;
    ect_run_t *runs = NULL;
    if (cap != 0 && (runs = ect__malloc(cap * sizeof(*runs))) == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport: out of memory");
    size_t n = 0;
    uint64_t blocks = 0;
    for (size_t i = 0; i < desc->n_runs; i++) {
        runs[n++] = ect__xport_desc_run(desc, i);
        blocks += runs[n - 1].count;
    }
    for (size_t i = 0; i < n_remote; i++) {
        if (remote[i] >= desc->num_blocks) {
            ect__free(runs);
            return ect__error(ECT_ERR_PEER,
                              "xport: peer %s named block %" PRIu64 " (index %zu); its region "
                              "has %" PRIu64 " blocks",
                              peer_key, remote[i], i, desc->num_blocks);
        }
        if (n > 0 && runs[n - 1].first + runs[n - 1].count == remote[i])
            runs[n - 1].count++;
        else
            runs[n++] = (ect_run_t){remote[i], 1};
        blocks++;
    }
    *runs_p = runs;
    *n_runs_p = n;
    *blocks_p = blocks;
    return ECT_OK;
}

ect_status_t
ect__xport_plan_segments(const ect_xport_client_t *c, const char *peer_key,
                         const ect_xport_desc_t *desc, const uint64_t *remote, size_t n_remote,
                         const ect_run_t *runs, size_t n_runs, ect_xport_segment_t **segs_p,
                         size_t *n_segs_p, uint64_t *bytes_p)
{
    if (desc->block_size != c->block_size)
        return ect__error(ECT_ERR_PEER,
                          "xport: peer %s has blocks of %" PRIu64 " bytes, ours are %" PRIu64,
                          peer_key, desc->block_size, c->block_size);
    ect_run_t *rr = NULL;
    size_t n_rr = 0;
    uint64_t n_blocks = 0;
    ect_status_t st = remote_runs(peer_key, desc, remote, n_remote, &rr, &n_rr, &n_blocks);
    if (st != ECT_OK)
        return st;
    for (size_t j = 0; j < n_runs; j++)
        if (runs[j].first >= c->num_blocks || runs[j].count > c->num_blocks - runs[j].first) {
            ect__free(rr);
            return ect__error(ECT_ERR_OVERFLOW,
                              "xport: local run %zu (blocks %" PRIu64 " + %" PRIu64
                              ") lies outside our %" PRIu64 " blocks",
                              j, runs[j].first, runs[j].count, c->num_blocks);
        }
    /* total never exceeds n_blocks, so the sum cannot overflow. */
    uint64_t total = 0;
    int mismatch = 0;
    for (size_t j = 0; j < n_runs && !mismatch; j++) {
        if (runs[j].count > n_blocks - total)
            mismatch = 1;
        else
            total += runs[j].count;
    }
    if (mismatch || total != n_blocks) {
        ect__free(rr);
        return ect__error(ECT_ERR_PEER,
                          "xport: peer %s sent %" PRIu64 " block indices for %s%" PRIu64
                          " local blocks",
                          peer_key, n_blocks, mismatch ? "more than " : "", total);
    }
    ect_xport_segment_t *segs = NULL;
    if (n_rr + n_runs != 0 && (segs = ect__malloc((n_rr + n_runs) * sizeof(*segs))) == NULL) {
        ect__free(rr);
        return ect__error(ECT_ERR_NO_MEMORY, "xport: out of memory");
    }
    /* Walk both lists of runs at once; a piece ends where either run does. */
    size_t n = 0, i = 0, j = 0;
    uint64_t ro = 0, lo = 0, bs = c->block_size;
    uint8_t *base = c->data;
    while (i < n_rr && j < n_runs) {
        uint64_t take =
            rr[i].count - ro < runs[j].count - lo ? rr[i].count - ro : runs[j].count - lo;
        uint64_t roff = (rr[i].first + ro) * bs;
        uint8_t *local = base + (runs[j].first + lo) * bs;
        ect_xport_segment_t *last = n ? &segs[n - 1] : NULL;
        if (last != NULL && last->remote_off + last->len == roff &&
            (uint8_t *)last->local + last->len == local)
            last->len += (size_t)(take * bs);
        else
            segs[n++] = (ect_xport_segment_t){
                .remote_off = roff, .local = local, .len = (size_t)(take * bs)};
        if ((ro += take) == rr[i].count) {
            i++;
            ro = 0;
        }
        if ((lo += take) == runs[j].count) {
            j++;
            lo = 0;
        }
    }
    ect__free(rr);
    *segs_p = segs;
    *n_segs_p = n;
    *bytes_p = n_blocks * bs;
    return ECT_OK;
}
