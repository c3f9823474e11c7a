/*
 * The cache against a simple reference model (random operations, every
 * status, eviction and state predicted), the seed's thread scenarios, and
 * the key index through its incremental rehash.
 *
 * The model keeps per-key entries with a block count, ready flag, pins and
 * holds, and a sequence stamp set whenever an entry becomes evictable, so
 * it predicts FIFO eviction order exactly.  It does not predict block ids;
 * those are checked for invariants: no block in two entries, runs ascending,
 * free + used = num_blocks (ect__cache_check verifies the rest inside).
 */
#include <pthread.h>
#include <stdlib.h>

#include <ectier/cache.h>

#include "cache/cache_internal.h"
#include "support/cache.h"
#include "harness.h"

/* ---- deterministic random numbers ----------------------------------------------- */

static uint64_t
rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint64_t
rng_below(uint64_t *s, uint64_t n)
{
    return rng_next(s) % n;
}

/* ---- the reference model ---------------------------------------------------------- */

#define NB     96 /* blocks */
#define NKEYS  40
#define NHOLDS 4096

struct m_entry {
    int live;
    uint64_t n;
    int ready;
    uint64_t pins, holds_active, holds_pending;
    uint64_t seq; /* when it last became evictable */
};

struct m_hold {
    int live;
    int key;
    uint64_t id, deadline;
    int pending;
};

struct model {
    struct m_entry e[NKEYS];
    struct m_hold h[NHOLDS];
    int n_holds;
    uint64_t seq;
    uint64_t now;
};

static int
m_evictable(const struct m_entry *e)
{
    return e->live && e->ready && e->pins == 0 && e->holds_active == 0;
}

static uint64_t
m_used(const struct model *m)
{
    uint64_t u = 0;
    for (int k = 0; k < NKEYS; k++)
        if (m->e[k].live)
            u += m->e[k].n;
    return u;
}

static uint64_t
m_evictable_blocks(const struct model *m)
{
    uint64_t u = 0;
    for (int k = 0; k < NKEYS; k++)
        if (m_evictable(&m->e[k]))
            u += m->e[k].n;
    return u;
}

static void
m_became_evictable(struct model *m, int k)
{
    m->e[k].seq = ++m->seq;
}

static void
m_release_hold(struct model *m, struct m_hold *h)
{
    struct m_entry *e = &m->e[h->key];
    h->live = 0;
    if (h->pending) {
        e->holds_pending--;
    } else {
        e->holds_active--;
        if (m_evictable(e))
            m_became_evictable(m, h->key);
    }
}

static void
key_name(char *buf, size_t len, int k)
{
    snprintf(buf, len, "key-%d", k);
}

/* Eviction log filled by the listener. */
struct evictions {
    int n;
    char keys[NKEYS][16];
};

static void
log_evictions(const ect_cache_event_t *ev, void *user)
{
    struct evictions *log = user;
    if (ev->type == ECT_CACHE_EVENT_EVICTED && log->n < NKEYS)
        snprintf(log->keys[log->n++], sizeof(log->keys[0]), "%s", ev->key);
}

/* How many times compare_with_model saw an entry of several runs. */
static uint64_t multi_run_checks;

static void
compare_with_model(ect_cache_t *c, const struct model *m)
{
    CHECK_OK(ect__cache_check(c));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.used_blocks, m_used(m));
    CHECK_EQ_U64(st.free_blocks + st.used_blocks, NB);
    CHECK_EQ_U64(st.evictable_blocks, m_evictable_blocks(m));
    static unsigned char owner[NB];
    memset(owner, 0, sizeof(owner));
    uint64_t live = 0, pins = 0, active = 0, pending = 0;
    for (int k = 0; k < NKEYS; k++) {
        char key[16];
        key_name(key, sizeof(key), k);
        const struct m_entry *e = &m->e[k];
        ect_cache_entry_t info;
        ect_status_t s = ect_cache_get(c, key, &info);
        if (!e->live) {
            CHECK_EQ_INT(s, ECT_ERR_NOT_FOUND);
            continue;
        }
        CHECK_OK(s);
        live++;
        pins += e->pins;
        active += e->holds_active;
        pending += e->holds_pending;
        CHECK_EQ_U64(info.n_blocks, e->n);
        CHECK_EQ_U64(info.pin_count, e->pins + e->holds_active);
        CHECK_EQ_U64(info.holds_pending, e->holds_pending);
        ect_cache_entry_state_t want = !e->ready                       ? ECT_CACHE_ENTRY_NOT_READY
                                       : e->pins + e->holds_active > 0 ? ECT_CACHE_ENTRY_PINNED
                                                                       : ECT_CACHE_ENTRY_READY;
        CHECK_EQ_INT(info.state, want);
        uint64_t ids[NB];
        size_t n = ts_entry_ids(c, key, ids, NB);
        if (info.n_runs > 1)
            multi_run_checks++;
        CHECK_EQ_U64(n, e->n);
        for (size_t i = 0; i < n; i++) {
            CHECK(ids[i] < NB);
            CHECK(i == 0 || ids[i] > ids[i - 1]);
            CHECK_MSG(!owner[ids[i]], "block %llu is in two entries", (unsigned long long)ids[i]);
            owner[ids[i]] = 1;
        }
    }
    CHECK_EQ_U64(st.entries, live);
    CHECK_EQ_U64(st.pins, pins);
    CHECK_EQ_U64(st.holds_active, active);
    CHECK_EQ_U64(st.holds_pending, pending);
}

static void
model_step(ect_cache_t *c, struct model *m, struct evictions *log, uint64_t *rs)
{
    int k = (int)rng_below(rs, NKEYS);
    char key[16];
    key_name(key, sizeof(key), k);
    struct m_entry *e = &m->e[k];
    ect_status_t s;
    switch (rng_below(rs, 10)) {
    case 0:
    case 1: { /* alloc, sizes skewed small with the odd oversize request */
        uint64_t n = rng_below(rs, 8) == 0 ? rng_below(rs, NB + 3) : rng_below(rs, 16);
        log->n = 0;
        s = ect_cache_alloc(c, key, n);
        if (e->live) {
            CHECK_EQ_INT(s, ECT_ERR_EXISTS);
        } else if (n > NB) {
            CHECK_EQ_INT(s, ECT_ERR_OVERFLOW);
        } else if (NB - m_used(m) + m_evictable_blocks(m) < n) {
            CHECK_EQ_INT(s, ECT_ERR_NO_SPACE);
        } else {
            CHECK_OK(s);
            /* Predict evictions: oldest evictable first until n are free. */
            int predicted = 0;
            while (NB - m_used(m) < n) {
                int oldest = -1;
                for (int j = 0; j < NKEYS; j++)
                    if (m_evictable(&m->e[j]) && (oldest < 0 || m->e[j].seq < m->e[oldest].seq))
                        oldest = j;
                CHECK(oldest >= 0);
                char victim[16];
                key_name(victim, sizeof(victim), oldest);
                CHECK_MSG(predicted < log->n, "expected %s to be evicted", victim);
                CHECK_STR_EQ(log->keys[predicted], victim);
                predicted++;
                m->e[oldest].live = 0;
            }
            CHECK_EQ_INT(log->n, predicted);
            *e = (struct m_entry){.live = 1, .n = n};
        }
        if (s != ECT_OK)
            CHECK_EQ_INT(log->n, 0);
        break;
    }
    case 2:
        s = ect_cache_mark_ready(c, key);
        if (!e->live) {
            CHECK_EQ_INT(s, ECT_ERR_NOT_FOUND);
        } else if (e->ready) {
            CHECK_EQ_INT(s, ECT_ERR_STATE);
        } else {
            CHECK_OK(s);
            e->ready = 1;
            e->holds_active = e->holds_pending;
            e->holds_pending = 0;
            for (int i = 0; i < m->n_holds; i++)
                if (m->h[i].live && m->h[i].key == k)
                    m->h[i].pending = 0;
            if (m_evictable(e))
                m_became_evictable(m, k);
        }
        break;
    case 3:
        s = ect_cache_pin(c, key);
        if (!e->live)
            CHECK_EQ_INT(s, ECT_ERR_NOT_FOUND);
        else if (!e->ready)
            CHECK_EQ_INT(s, ECT_ERR_STATE);
        else {
            CHECK_OK(s);
            e->pins++;
        }
        break;
    case 4:
        s = ect_cache_unpin(c, key);
        if (!e->live)
            CHECK_EQ_INT(s, ECT_ERR_NOT_FOUND);
        else if (e->pins == 0)
            CHECK_EQ_INT(s, ECT_ERR_STATE);
        else {
            CHECK_OK(s);
            e->pins--;
            if (m_evictable(e))
                m_became_evictable(m, k);
        }
        break;
    case 5: {
        ect_pin_result_t r;
        CHECK_OK(ect_cache_pin_if_ready(c, key, &r));
        if (!e->live)
            CHECK_EQ_INT(r, ECT_PIN_ABSENT);
        else if (!e->ready)
            CHECK_EQ_INT(r, ECT_PIN_NOT_READY);
        else {
            CHECK_EQ_INT(r, ECT_PIN_PINNED);
            e->pins++;
        }
        break;
    }
    case 6:
        s = ect_cache_discard(c, key);
        if (!e->live)
            CHECK_EQ_INT(s, ECT_ERR_NOT_FOUND);
        else if (e->ready)
            CHECK_EQ_INT(s, ECT_ERR_STATE);
        else {
            CHECK_OK(s);
            e->live = 0;
            for (int i = 0; i < m->n_holds; i++)
                if (m->h[i].live && m->h[i].key == k)
                    m->h[i].live = 0;
        }
        break;
    case 7: {
        if (m->n_holds == NHOLDS)
            break;
        uint64_t id, deadline = m->now + rng_below(rs, 50);
        s = ect_cache_hold(c, key, deadline, &id);
        if (!e->live) {
            CHECK_EQ_INT(s, ECT_ERR_NOT_FOUND);
            break;
        }
        CHECK_OK(s);
        struct m_hold *h = &m->h[m->n_holds++];
        *h = (struct m_hold){
            .live = 1, .key = k, .id = id, .deadline = deadline, .pending = !e->ready};
        if (e->ready)
            e->holds_active++;
        else
            e->holds_pending++;
        break;
    }
    case 8: { /* release a random hold ever issued, live or not */
        if (m->n_holds == 0)
            break;
        struct m_hold *h = &m->h[rng_below(rs, (uint64_t)m->n_holds)];
        s = ect_cache_release_hold(c, h->id);
        if (h->live) {
            CHECK_OK(s);
            m_release_hold(m, h);
        } else {
            CHECK_EQ_INT(s, ECT_ERR_NOT_FOUND);
        }
        break;
    }
    case 9: { /* time passes; leases lapse in (deadline, id) order */
        m->now += rng_below(rs, 20);
        size_t expired;
        CHECK_OK(ect_cache_expire_holds(c, m->now, &expired));
        size_t want = 0;
        for (;;) {
            struct m_hold *next = NULL;
            for (int i = 0; i < m->n_holds; i++) {
                struct m_hold *h = &m->h[i];
                if (h->live && h->deadline <= m->now &&
                    (next == NULL || h->deadline < next->deadline ||
                     (h->deadline == next->deadline && h->id < next->id)))
                    next = h;
            }
            if (next == NULL)
                break;
            m_release_hold(m, next);
            want++;
        }
        CHECK_EQ_U64(expired, want);
        break;
    }
    }
}

static void
test_random_ops_match_reference_model(void)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    const char *env = getenv("ECT_TEST_SEED");
    if (env != NULL)
        seed = strtoull(env, NULL, 0);
    fprintf(stderr, "  seed 0x%llx (set ECT_TEST_SEED to replay)\n", (unsigned long long)seed);
    ect_cache_t *c = NULL;
    CHECK_OK(ect_cache_create(NB, &c));
    static struct model m;
    static struct evictions log;
    CHECK_OK(ect_cache_set_listener(c, log_evictions, &log));
    uint64_t rs = seed;
    for (int op = 0; op < 20000; op++) {
        model_step(c, &m, &log, &rs);
        compare_with_model(c, &m);
    }
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    /* The run must have exercised the interesting paths. */
    CHECK(st.evicted_entries > 100);
    CHECK(st.alloc_no_space > 10);
    CHECK(st.holds_expired > 100);
    CHECK(multi_run_checks > 100); /* entries split into several runs were checked */
    ect_cache_destroy(c);
}

/* ---- threads -------------------------------------------------------------------------- */

struct pin_arg {
    ect_cache_t *cache;
    int bad;
};

static void *
pin_unpin_worker(void *p)
{
    struct pin_arg *a = p;
    for (int i = 0; i < 500; i++) {
        ect_cache_entry_t info;
        if (ect_cache_pin(a->cache, "shared") != ECT_OK ||
            ect_cache_get(a->cache, "shared", &info) != ECT_OK ||
            info.state != ECT_CACHE_ENTRY_PINNED || info.pin_count == 0 ||
            ect_cache_unpin(a->cache, "shared") != ECT_OK)
            a->bad++;
    }
    return NULL;
}

static void
test_concurrent_pin_unpin(void)
{
    ect_cache_t *c = NULL;
    CHECK_OK(ect_cache_create(16, &c));
    ts_alloc_ready(c, "shared", 4);
    pthread_t t[8];
    struct pin_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct pin_arg){.cache = c};
        CHECK(pthread_create(&t[i], NULL, pin_unpin_worker, &args[i]) == 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_INT(args[i].bad, 0);
    }
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, "shared", &info));
    CHECK_EQ_INT(info.state, ECT_CACHE_ENTRY_READY);
    CHECK_EQ_U64(info.pin_count, 0);
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.pins, 0);
    CHECK_EQ_U64(st.evictable_blocks, 4);
    CHECK_OK(ect__cache_check(c));
    ect_cache_destroy(c);
}

struct alloc_arg {
    ect_cache_t *cache;
    int id;
    uint64_t allocs, no_space, discards, bad;
};

static void *
alloc_evict_worker(void *p)
{
    struct alloc_arg *a = p;
    uint64_t rs = 0x1234567ull * (uint64_t)(a->id + 1);
    char key[32], prev[32] = "";
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "t%d-%d", a->id, i);
        ect_status_t s = ect_cache_alloc(a->cache, key, 1 + rng_below(&rs, 8));
        if (s == ECT_ERR_NO_SPACE) {
            a->no_space++;
            continue;
        }
        if (s != ECT_OK) {
            a->bad++;
            continue;
        }
        a->allocs++;
        if (rng_below(&rs, 8) == 0) {
            if (ect_cache_discard(a->cache, key) != ECT_OK)
                a->bad++;
            a->discards++;
            continue;
        }
        uint64_t hold;
        if (rng_below(&rs, 4) == 0 &&
            ect_cache_hold(a->cache, key, (uint64_t)i + 3, &hold) != ECT_OK)
            a->bad++;
        if (ect_cache_mark_ready(a->cache, key) != ECT_OK)
            a->bad++;
        /* Pin the previous key if another thread has not evicted it yet. */
        ect_pin_result_t r;
        if (prev[0] != '\0' && ect_cache_pin_if_ready(a->cache, prev, &r) == ECT_OK &&
            r == ECT_PIN_PINNED && ect_cache_unpin(a->cache, prev) != ECT_OK)
            a->bad++;
        if (ect_cache_expire_holds(a->cache, (uint64_t)i, NULL) != ECT_OK)
            a->bad++;
        snprintf(prev, sizeof(prev), "%s", key);
    }
    return NULL;
}

static void
count_events(const ect_cache_event_t *ev, void *user)
{
    /* Runs under the cache lock, so plain increments do not race. */
    uint64_t *counts = user;
    counts[ev->type]++;
}

static void
test_concurrent_alloc_evict(void)
{
    ect_cache_t *c = NULL;
    CHECK_OK(ect_cache_create(64, &c));
    uint64_t events[3] = {0};
    CHECK_OK(ect_cache_set_listener(c, count_events, events));
    enum { T = 4 };
    pthread_t t[T];
    struct alloc_arg args[T];
    for (int i = 0; i < T; i++) {
        args[i] = (struct alloc_arg){.cache = c, .id = i};
        CHECK(pthread_create(&t[i], NULL, alloc_evict_worker, &args[i]) == 0);
    }
    uint64_t allocs = 0, discards = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ_U64(args[i].bad, 0);
        allocs += args[i].allocs;
        discards += args[i].discards;
    }
    CHECK_OK(ect_cache_expire_holds(c, UINT64_MAX, NULL));
    CHECK_OK(ect__cache_check(c));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.allocs, allocs);
    CHECK_EQ_U64(events[ECT_CACHE_EVENT_DISCARDED], discards);
    CHECK_EQ_U64(events[ECT_CACHE_EVENT_EVICTED], st.evicted_entries);
    CHECK_EQ_U64(events[ECT_CACHE_EVENT_STORED], allocs - discards);
    CHECK_EQ_U64(st.entries, allocs - discards - st.evicted_entries);
    CHECK(st.evicted_entries > 1000); /* the threads really competed for space */
    CHECK_EQ_U64(st.pins, 0);
    CHECK_EQ_U64(st.holds_active + st.holds_pending, 0);
    CHECK_EQ_INT(ect_cache_has_held_entries(c), 0);
    ect_cache_destroy(c);
}

/* ---- the index through growth -------------------------------------------------------- */

static void
test_index_finds_every_key_through_incremental_rehash(void)
{
    enum { N = 100000 };
    ect_cache_t *c = NULL;
    CHECK_OK(ect_cache_create(8, &c));
    char key[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "item-%d", i);
        CHECK_OK(ect_cache_alloc(c, key, 0));
        /* Probe an older key at every step, so lookups run mid-rehash. */
        snprintf(key, sizeof(key), "item-%d", i / 2);
        CHECK(ts_entry_exists(c, key));
    }
    for (int i = 0; i < N; i += 2) {
        snprintf(key, sizeof(key), "item-%d", i);
        CHECK_OK(ect_cache_discard(c, key));
    }
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "item-%d", i);
        CHECK_EQ_INT(ts_entry_exists(c, key), i % 2);
    }
    CHECK_STATUS(ect_cache_alloc(c, "item-1", 0), ECT_ERR_EXISTS);
    CHECK_OK(ect__cache_check(c));
    ect_cache_stats_t st;
    CHECK_OK(ect_cache_stats(c, &st));
    CHECK_EQ_U64(st.entries, N / 2);
    ect_cache_destroy(c);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_random_ops_match_reference_model),
    ECT_CASE(test_concurrent_pin_unpin),
    ECT_CASE(test_concurrent_alloc_evict),
    ECT_CASE(test_index_finds_every_key_through_incremental_rehash),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
