/*
 * Helpers shared by the cache test programs (test_cache*.c): read an entry's
 * runs and flatten them into block ids, and record listener events.
 */
#ifndef ECT_TESTS_CACHE_HELPERS_H
#define ECT_TESTS_CACHE_HELPERS_H

#include <ectier/cache.h>

#include "harness.h"

#define MAX_TEST_RUNS 256

/* The entry's runs into runs[MAX_TEST_RUNS]; returns their number. */
static inline size_t
entry_runs(ect_cache_t *c, const char *key, ect_run_t *runs)
{
    size_t n = 0;
    CHECK_OK(ect_cache_get_runs(c, key, runs, MAX_TEST_RUNS, &n));
    return n;
}

/* The entry's block ids, flattened into ids[cap]; returns their number. */
static inline size_t
entry_ids(ect_cache_t *c, const char *key, uint64_t *ids, size_t cap)
{
    ect_run_t runs[MAX_TEST_RUNS];
    size_t n = entry_runs(c, key, runs), k = 0;
    for (size_t i = 0; i < n; i++)
        for (uint64_t b = 0; b < runs[i].count; b++) {
            CHECK(k < cap);
            ids[k++] = runs[i].first + b;
        }
    return k;
}

static inline ect_cache_entry_state_t
entry_state(ect_cache_t *c, const char *key)
{
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, key, &info));
    return info.state;
}

static inline int
entry_exists(ect_cache_t *c, const char *key)
{
    ect_cache_entry_t info;
    ect_status_t s = ect_cache_get(c, key, &info);
    CHECK(s == ECT_OK || s == ECT_ERR_NOT_FOUND);
    return s == ECT_OK;
}

/* Alloc then mark ready. */
static inline void
alloc_ready(ect_cache_t *c, const char *key, uint64_t n)
{
    CHECK_OK(ect_cache_alloc(c, key, n));
    CHECK_OK(ect_cache_mark_ready(c, key));
}

struct event_log {
    int n;
    ect_cache_event_type_t type[64];
    char key[64][64];
    uint64_t n_blocks[64];
};

static inline void
record_event(const ect_cache_event_t *ev, void *user)
{
    struct event_log *log = user;
    if (log->n < 64) {
        log->type[log->n] = ev->type;
        snprintf(log->key[log->n], sizeof(log->key[0]), "%s", ev->key);
        log->n_blocks[log->n] = ev->n_blocks;
    }
    log->n++;
}

#endif /* ECT_TESTS_CACHE_HELPERS_H */
