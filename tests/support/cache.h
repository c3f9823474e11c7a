/*
 * Helpers shared by the cache test programs (test_cache*.c): read an entry's
 * runs and flatten them into block ids, and record listener events.  Each
 * fails the case on an unexpected status.
 */
#ifndef ECT_TESTS_SUPPORT_CACHE_H
#define ECT_TESTS_SUPPORT_CACHE_H

#include <ectier/cache.h>

#include "harness.h"

#define TS_MAX_RUNS 256

/* The entry's runs into runs[TS_MAX_RUNS]; returns their number. */
size_t ts_entry_runs(ect_cache_t *c, const char *key, ect_run_t *runs);

/* The entry's block ids, flattened into ids[cap]; returns their number. */
size_t ts_entry_ids(ect_cache_t *c, const char *key, uint64_t *ids, size_t cap);

/* The state of key's entry, which must exist. */
ect_cache_entry_state_t ts_entry_state(ect_cache_t *c, const char *key);

/* Whether key has an entry (ECT_OK or ECT_ERR_NOT_FOUND; anything else fails). */
int ts_entry_exists(ect_cache_t *c, const char *key);

/* Alloc then mark ready. */
void ts_alloc_ready(ect_cache_t *c, const char *key, uint64_t n);

/* The first 64 events a listener saw (n counts them all). */
struct ts_event_log {
    int n;
    ect_cache_event_type_t type[64];
    char key[64][64];
    uint64_t n_blocks[64];
};

/* A cache listener that appends to the struct event_log at user. */
void ts_record_event(const ect_cache_event_t *ev, void *user);

#endif /* ECT_TESTS_SUPPORT_CACHE_H */
