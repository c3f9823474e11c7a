/*
 * What the producer session's two files share: producer.c (grants, the
 * session thread, requests, start and stop) and producer_announce.c (the
 * announcements: the holds that keep announced entries until a consumer
 * reads them).  Locking and invariants: producer.h and the top of
 * producer.c; every field below `lock` is guarded by it.
 */
#ifndef ECT_P2P_PRODUCER_INTERNAL_H
#define ECT_P2P_PRODUCER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/cache.h>
#include <ectier/config.h>
#include <ectier/geometry.h>
#include <ectier/region.h>

#include "common/alloc.h"
#include "common/strmap.h"
#include "p2p/control.h"
#include "p2p/producer.h"
#include "p2p/transport.h"
#include "proto/wire.h"

struct ect__events;

/* A grant's name: "<decimal length>:" + session + hash. */
#define GRANT_KEY_MAX (2 * ECT_WIRE_MAX_STR + 24)

struct hold_ref {
    uint64_t id;
    uint64_t deadline_ns;
};

struct announcement {
    char *cache_key;
    struct hold_ref *holds; /* FIFO, oldest first */
    size_t n, cap;
};

struct ect_producer {
    ect_config_t cfg;
    ect_geometry_t geom;
    ect_cache_t *cache;
    ect_region_t *region;
    struct ect__events *events; /* NULL: no stream */
    char compat[65];
    ect_ctl_server_t *ctl;
    ect_xport_server_t *xport;
    char host[ECT_CONFIG_ADDR_MAX + 1];
    uint16_t port;
    uint64_t pin_lease_ns;
    uint64_t announce_lease_ns;

    pthread_t thread;
    int thread_started;
    int stop; /* atomic */

    pthread_mutex_t lock;
    ect_strmap_t grants;      /* grant name -> struct grant */
    ect_strmap_t peer_grants; /* hex identity -> grants held (as uintptr_t) */
    ect_strmap_t announced;   /* mm_hash -> struct announcement */
    uint64_t acks_sent[ECT_XFER_STATUS_COUNT];
    uint64_t wire_dropped;
    uint64_t grants_expired;
    uint64_t grants_released_dead_peer;
    uint64_t grants_refused;
    uint64_t dones_rejected;
    uint64_t announcements;

    /* Session-thread scratch, reused across requests. */
    uint64_t *blocks;
    size_t blocks_cap;
    ect_run_t *runs;
    size_t runs_cap;
    ect__wire_buf_t out;
    uint8_t *desc_buf; /* a grant's mem_descriptor */
    size_t desc_cap;
    char gkey[GRANT_KEY_MAX];
};

/* Keys collected while walking a map, copied because ending an item frees
 * its node. */
struct key_batch {
    char *keys[64];
    size_t n;
};

static inline void
key_batch_add(struct key_batch *b, const char *key)
{
    if (b->n < 64 && (b->keys[b->n] = ect__strdup(key)) != NULL)
        b->n++;
}

/* ---- producer_announce.c ---- */

/* A read of mm_hash was served: release its oldest live hold (and forget
 * the announcement once none is left). */
void ect__producer_announcement_served_locked(ect_producer_t *p, const char *mm_hash);
/* Lapse holds in the cache and forget announcements with none left. */
void ect__producer_announcements_sweep_locked(ect_producer_t *p, uint64_t now);
/* Stop: release every announcement's holds and free the map. */
void ect__producer_announcements_drop_locked(ect_producer_t *p);

#endif /* ECT_P2P_PRODUCER_INTERNAL_H */
