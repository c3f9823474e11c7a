/*
 * Reading cache entries and recording listener events (see cache.h).
 */
#include <stdio.h>

#include "support/cache.h"

size_t
ts_entry_runs(ect_cache_t *c, const char *key, ect_run_t *runs)
{
    size_t n = 0;
    CHECK_OK(ect_cache_get_runs(c, key, runs, TS_MAX_RUNS, &n));
    return n;
}

size_t
ts_entry_ids(ect_cache_t *c, const char *key, uint64_t *ids, size_t cap)
{
    ect_run_t runs[TS_MAX_RUNS];
    size_t n = ts_entry_runs(c, key, runs), k = 0;
    for (size_t i = 0; i < n; i++)
        for (uint64_t b = 0; b < runs[i].count; b++) {
            CHECK(k < cap);
            ids[k++] = runs[i].first + b;
        }
    return k;
}

ect_cache_entry_state_t
ts_entry_state(ect_cache_t *c, const char *key)
{
    ect_cache_entry_t info;
    CHECK_OK(ect_cache_get(c, key, &info));
    return info.state;
}

int
ts_entry_exists(ect_cache_t *c, const char *key)
{
    ect_cache_entry_t info;
    ect_status_t s = ect_cache_get(c, key, &info);
    CHECK(s == ECT_OK || s == ECT_ERR_NOT_FOUND);
    return s == ECT_OK;
}

void
ts_alloc_ready(ect_cache_t *c, const char *key, uint64_t n)
{
    CHECK_OK(ect_cache_alloc(c, key, n));
    CHECK_OK(ect_cache_mark_ready(c, key));
}

void
ts_record_event(const ect_cache_event_t *ev, void *user)
{
    struct ts_event_log *log = user;
    if (log->n < 64) {
        log->type[log->n] = ev->type;
        snprintf(log->key[log->n], sizeof(log->key[0]), "%s", ev->key);
        log->n_blocks[log->n] = ev->n_blocks;
    }
    log->n++;
}
