/*
 * The embedding cache: the scheduler side's index of the shared region's
 * blocks (SPEC §5).  It hands out block ids and tracks each entry's state; it
 * never touches the region's memory.
 *
 * An entry is keyed by the engine's feature identifier (a string) and owns a
 * list of runs of consecutive block ids, sorted by first id, so its flattened
 * block ids are ascending.  The allocator keeps entries as contiguous as free
 * space allows: one run when one free run is big enough, else the fewest runs.
 *
 * States:
 *   NOT_READY  allocated, being saved or read from a peer (or quarantined);
 *              never evicted; freed only by ect_cache_discard.
 *   READY      evictable; on the FIFO list.
 *   PINNED     ready with pin count >= 1 (explicit pins plus active holds);
 *              not evictable.
 * Eviction is FIFO by "time since the entry last became evictable":
 * mark_ready and the release of the last pin or hold append to the tail.
 *
 * Holds are leased pins taken for announcements (SPEC §8.6): each call takes
 * its own hold, which ends when released (a served read) or when its lease
 * lapses (ect_cache_expire_holds).  A hold on a not-ready entry is pending and
 * becomes a pin when the entry is marked ready.  A hold is a separate count
 * from explicit pins: ect_cache_unpin never releases a hold, and releasing a
 * hold twice is an error, not a second unpin.
 *
 * Costs: every operation is O(1) or O(log n) in entries and blocks, plus the
 * size of its result (the runs of the entry it allocates or frees, the
 * entries it evicts, the holds it expires or activates).  The key index grows
 * incrementally, never in one long pause.  Memory follows the peak number of
 * entries and holds and is returned at ect_cache_destroy.
 *
 * Thread safety: every function may be called from several threads on one
 * cache (one mutex inside), except ect_cache_destroy, which must not race
 * with anything else on the cache.  No function hands out a pointer into the
 * cache's memory.
 */
#ifndef ECTIER_CACHE_H
#define ECTIER_CACHE_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <ectier/status.h>
#include <ectier/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most blocks a cache may index (keeps every block-id sum far from overflow). */
#define ECT_CACHE_MAX_BLOCKS (UINT64_C(1) << 48)

/* Buckets of the runs-per-entry histogram: 1, 2, 3, 4, 5-8, 9-16, >16 runs. */
#define ECT_CACHE_RUN_BUCKETS 7

typedef struct ect_cache ect_cache_t;

typedef enum ect_cache_entry_state {
    ECT_CACHE_ENTRY_NOT_READY = 0,
    ECT_CACHE_ENTRY_READY = 1,
    ECT_CACHE_ENTRY_PINNED = 2,
} ect_cache_entry_state_t;

/* A snapshot of one entry (copied out; nothing in it points into the cache). */
typedef struct ect_cache_entry {
    ect_cache_entry_state_t state;
    uint64_t pin_count;     /* explicit pins + active holds */
    uint64_t holds_active;  /* holds that pin the entry now */
    uint64_t holds_pending; /* holds waiting for mark_ready */
    uint64_t n_blocks;
    size_t n_runs;
} ect_cache_entry_t;

typedef enum ect_pin_result {
    ECT_PIN_ABSENT = 0,    /* no entry with this key; nothing changed */
    ECT_PIN_NOT_READY = 1, /* the entry exists but is not ready; not pinned */
    ECT_PIN_PINNED = 2,    /* the entry was ready and is now pinned once more */
} ect_pin_result_t;

typedef enum ect_cache_event_type {
    ECT_CACHE_EVENT_STORED = 0,    /* mark_ready: the entry can be served */
    ECT_CACHE_EVENT_EVICTED = 1,   /* alloc evicted a ready entry to make room */
    ECT_CACHE_EVENT_DISCARDED = 2, /* discard freed a not-ready entry */
} ect_cache_event_type_t;

typedef struct ect_cache_event {
    ect_cache_event_type_t type;
    const char *key; /* valid only during the callback */
    uint64_t n_blocks;
} ect_cache_event_t;

/* Called with the cache's lock held, on the thread whose call caused the
 * event, before that call returns.  It must be quick and must not call into
 * the same cache: such a call fails with ECT_ERR_STATE instead of
 * deadlocking.  Copy the key if it is needed later. */
typedef void (*ect_cache_listener_fn)(const ect_cache_event_t *event, void *user);

typedef struct { /* no tag: C++ would see it hide ect_cache_stats() */
    uint64_t num_blocks;
    uint64_t free_blocks;
    uint64_t used_blocks;      /* num_blocks - free_blocks */
    uint64_t evictable_blocks; /* blocks of ready entries with no pin or hold */
    uint64_t free_runs;        /* maximal runs of free blocks */
    uint64_t largest_free_run; /* blocks in the largest free run (0 if none) */
    uint64_t entries;
    uint64_t entries_not_ready;
    uint64_t entries_ready; /* evictable */
    uint64_t entries_pinned;
    uint64_t pins; /* explicit pins outstanding, over all entries */
    uint64_t holds_active;
    uint64_t holds_pending;
    uint64_t allocs;          /* successful allocations, ever */
    uint64_t alloc_no_space;  /* allocations refused with ECT_ERR_NO_SPACE, ever */
    uint64_t evicted_entries; /* ever */
    uint64_t evicted_blocks;  /* ever */
    uint64_t holds_expired;   /* holds ended by their lease, ever */
    /* Live entries with at least one block, by number of runs:
     * [0] 1, [1] 2, [2] 3, [3] 4, [4] 5-8, [5] 9-16, [6] more than 16. */
    uint64_t runs_histogram[ECT_CACHE_RUN_BUCKETS];
} ect_cache_stats_t;

/* Create a cache over num_blocks blocks (ids 0 .. num_blocks - 1), all free.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG (cache_p NULL, num_blocks 0 or above
 * ECT_CACHE_MAX_BLOCKS), ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_create(uint64_t num_blocks, ect_cache_t **cache_p);

/* Free the cache, its entries and holds.  No events are sent.  NULL is a
 * no-op.  Must not race with any other call on the cache. */
ECT_API void ect_cache_destroy(ect_cache_t *cache);

/* Route events to fn (NULL stops them).  user is borrowed and passed back.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_STATE (called from the
 * listener). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_set_listener(ect_cache_t *cache,
                                                           ect_cache_listener_fn fn, void *user);

/* Allocate a not-ready entry of n_blocks blocks under key (borrowed, copied;
 * a NUL-terminated string of 1 .. ECT_KEY_MAX bytes).  n_blocks may be
 * 0 (an entry with no runs).  If fewer than n_blocks blocks are free, ready
 * entries with no pin or hold are evicted oldest-first until enough are;
 * if even that cannot succeed (free + evictable < n_blocks), nothing is
 * evicted and the call fails fast.  The blocks are then taken as one run when
 * a free run is large enough (the smallest such run), else as the fewest runs
 * (largest free runs first).  Read them back with ect_cache_get_runs.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG (NULL, empty or too long key),
 * ECT_ERR_EXISTS (the key is present), ECT_ERR_OVERFLOW (n_blocks >
 * num_blocks), ECT_ERR_NO_SPACE (free + evictable < n_blocks; nothing
 * changed), ECT_ERR_NO_MEMORY (if it happens after evictions, those stand:
 * the cache stays consistent), ECT_ERR_STATE (called from the listener). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_alloc(ect_cache_t *cache, const char *key,
                                                    uint64_t n_blocks);

/* Copy out a snapshot of the entry under key.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND, ECT_ERR_STATE. */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_get(ect_cache_t *cache, const char *key,
                                                  ect_cache_entry_t *info_p);

/* A hint that key will be looked up soon: starts loading the part of the
 * index that holds it into the CPU cache, so that several keys' lookups
 * (a request's media items) wait for memory once, together, rather than one
 * after another.  Changes nothing else; an invalid key (NULL, empty, too
 * long), a NULL cache and a call from the cache's listener are ignored. */
ECT_API void ect_cache_prefetch(ect_cache_t *cache, const char *key);

/* Whether key is cached, and if so a snapshot of its entry: ect_cache_get
 * for callers that ask rather than expect.  An absent key is an answer,
 * not an error: *found_p = false, *info_p unchanged, and no message is
 * recorded (a miss costs no formatting).  Returns ECT_OK (found or not),
 * ECT_ERR_INVALID_ARG (NULL cache, info_p or found_p; NULL, empty or too
 * long key), ECT_ERR_STATE (called from the listener). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_find(ect_cache_t *cache, const char *key,
                                                   ect_cache_entry_t *info_p, bool *found_p);

/* Copy the entry's runs (ascending by first id) into runs[0 .. cap) and set
 * *n_runs_p to their number.  With runs NULL and cap 0 it only reports the
 * number.  Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND,
 * ECT_ERR_STATE, ECT_ERR_OVERFLOW (cap is smaller than the number of runs;
 * nothing is written and the message says how many are needed). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_get_runs(ect_cache_t *cache, const char *key,
                                                       ect_run_t *runs, size_t cap,
                                                       size_t *n_runs_p);

/* A not-ready entry becomes ready: evictable at the FIFO tail, or pinned by
 * its pending holds, which become active.  Sends ECT_CACHE_EVENT_STORED.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND, ECT_ERR_STATE
 * (already ready). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_mark_ready(ect_cache_t *cache, const char *key);

/* Pin a ready entry once more (pins nest); it leaves the FIFO list.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND, ECT_ERR_STATE
 * (not ready). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_pin(ect_cache_t *cache, const char *key);

/* Drop one explicit pin.  When no pin or hold remains, the entry goes to the
 * FIFO tail.  Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND,
 * ECT_ERR_STATE (no explicit pin: a hold is never dropped by unpin). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_unpin(ect_cache_t *cache, const char *key);

/* Atomically: absent -> *result_p = ECT_PIN_ABSENT; not ready ->
 * ECT_PIN_NOT_READY (not pinned); ready -> pinned once more, ECT_PIN_PINNED.
 * Returns ECT_OK (any of the three), ECT_ERR_INVALID_ARG, ECT_ERR_STATE
 * (called from the listener). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_pin_if_ready(ect_cache_t *cache, const char *key,
                                                           ect_pin_result_t *result_p);

/* Free a not-ready entry and drop its pending holds.  Sends
 * ECT_CACHE_EVENT_DISCARDED.  Returns ECT_OK, ECT_ERR_INVALID_ARG,
 * ECT_ERR_NOT_FOUND, ECT_ERR_STATE (ready or pinned: ready entries leave
 * only by eviction). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_discard(ect_cache_t *cache, const char *key);

/* true while any entry is not ready or pinned (O(1)), else false (also for a NULL
 * cache).  Works from the listener too (that thread already holds the lock). */
ECT_API bool ect_cache_has_held_entries(ect_cache_t *cache);

/* Take one hold on the entry under key, with a lease that lapses at
 * lease_deadline_ns (CLOCK_MONOTONIC nanoseconds; one already past lapses at
 * the next ect_cache_expire_holds).  On a ready entry the hold pins it now;
 * on a not-ready one it is pending until mark_ready.  *hold_id_p gets the
 * hold's id (unique per cache, never 0).  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND, ECT_ERR_NO_MEMORY, ECT_ERR_STATE,
 * ECT_ERR_OVERFLOW (2^32 - 1 holds already on the entry). */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_hold(ect_cache_t *cache, const char *key,
                                                   uint64_t lease_deadline_ns, uint64_t *hold_id_p);

/* End a hold (the read it protected was served, or it is withdrawn).  An
 * active hold drops its pin; a pending one just goes.  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND (unknown id: already released,
 * expired or dropped with its entry; nothing changes), ECT_ERR_STATE. */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_release_hold(ect_cache_t *cache, uint64_t hold_id);

/* End every hold whose lease deadline is <= now_ns, as ect_cache_release_hold
 * would.  *expired_p (may be NULL) gets how many ended.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_STATE. */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_expire_holds(ect_cache_t *cache, uint64_t now_ns,
                                                           size_t *expired_p);

/* Copy out the counters (a consistent snapshot).
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_STATE. */
ECT_API ECT_MUST_CHECK ect_status_t ect_cache_stats(ect_cache_t *cache, ect_cache_stats_t *stats_p);

/* Text for an entry state ("not-ready", "ready", "pinned"). */
ECT_API const char *ect_cache_entry_state_str(ect_cache_entry_state_t state);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_CACHE_H */
