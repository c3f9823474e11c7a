/*
 * Internal structure of the embedding cache, shared by cache.c (entries,
 * states, pins, eviction), holds.c (leased holds) and index.c (key lookup).
 *
 * Invariants (checked by ect__cache_check):
 * - every entry is in the index once; its runs are sorted, disjoint, not
 *   adjacent, and add up to n_blocks; with the free runs they tile
 *   [0, num_blocks) exactly, so no block is in two entries and
 *   free + used = num_blocks;
 * - an entry is on the FIFO list iff ready && pins == 0 && holds_active == 0;
 *   evictable_blocks is the sum of their n_blocks; every FIFO entry but the
 *   head has a valid fifo_prev (the head is known by fifo_head, so evicting
 *   it need not touch its successor);
 * - a pending hold sits on a not-ready entry, an active one on a ready entry;
 *   every hold is in both hold trees and on its entry's list;
 * - the counters equal what a full walk would count.
 *
 * Locking: every field is guarded by cache->lock; the helpers here expect it
 * held (they are the _locked half of the public functions).
 */
#ifndef ECT_CACHE_CACHE_INTERNAL_H
#define ECT_CACHE_CACHE_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/cache.h>

#include "cache/extent.h"
#include "common/avl.h"
#include "common/pool.h"

struct ect__hold;

/* What a lookup and the engine's calls read comes first: the hash (checked
 * before the key), the state, the runs, the FIFO links, then the key.  The
 * index holds pointers to entries; an entry holds no index links. */
struct ect__entry {
    uint64_t hash;
    uint64_t n_blocks;
    uint64_t pins;          /* explicit pins */
    uint32_t holds_active;  /* holds pinning the entry */
    uint32_t holds_pending; /* holds waiting for mark_ready */
    uint16_t key_len;
    uint8_t ready;
    uint8_t pooled; /* from entry_pool (short key) or ect__malloc (long key) */
    size_t n_runs;
    ect_run_t *runs; /* &run0 when n_runs <= 1, else its own array: a runs_pool
                      * slot up to POOLED_RUNS runs, else ect__malloc'd */
    ect_run_t run0;
    struct ect__entry *fifo_prev; /* stale while this entry is the FIFO head */
    struct ect__entry *fifo_next;
    uint64_t fifo_next_hash; /* fifo_next's hash, to prefetch the next victim */
    struct ect__hold *holds; /* every hold on this entry, pending or active */
    char key[];              /* NUL-terminated */
};

/* Entries with keys up to ENTRY_POOL_KEY_MAX bytes (mm_hash hex is 64) live
 * in ENTRY_SLOT_BYTES pool slots; longer keys get their own allocation. */
#define ENTRY_SLOT_BYTES   192
#define ENTRY_POOL_KEY_MAX (ENTRY_SLOT_BYTES - offsetof(struct ect__entry, key) - 1)
/* An entry of 2 .. POOLED_RUNS runs keeps them in a runs_pool slot: a
 * fragmented region's entries allocate nothing once the pool has grown. */
#define POOLED_RUNS 8

/* The key index (index.c) keeps each bucket in two parts: a control word
 * (a tag of each of up to seven entries' hashes, 0 for an empty slot, and
 * how many entries went past this bucket because it was full) in a dense
 * array of 8-byte words, and the seven entry pointers in a cache line of a
 * second array.  A lookup reads the control word, and the pointers' line
 * only when a tag matches. */
#define ECT__BUCKET_SLOTS 7
struct ect__bucket_ctrl {
    uint8_t tags[ECT__BUCKET_SLOTS];
    uint8_t overflow;
};
struct ect__bucket_slots {
    struct ect__entry *slot[ECT__BUCKET_SLOTS];
    uint64_t unused; /* pads the pointers to a cache line */
};

/* One table of buckets: size (a power of two) control words and as many
 * pointer lines, in one allocation; used counts its entries. */
struct ect__index_table {
    struct ect__bucket_slots *slots; /* NULL: no table */
    struct ect__bucket_ctrl *ctrl;   /* just past slots[size - 1] */
    size_t size;
    size_t used;
};

/* Open-addressing table of buckets keyed by the entry's key, grown by
 * doubling with an incremental rehash: while tab[1] exists, each operation
 * moves a couple of tab[0] buckets, so no single call pays for the whole
 * table.  Tables of 2 MiB or more are mmap'd (zeroed lazily, huge pages
 * advised). */
struct ect__index {
    struct ect__index_table tab[2];
    size_t rehash_pos; /* next tab[0] bucket to move while tab[1] exists */
    uint64_t k0, k1;   /* SipHash key */
};

struct ect__hold {
    struct ect__avl_node by_id;
    struct ect__avl_node by_deadline;
    uint64_t id;
    uint64_t deadline_ns;
    struct ect__entry *entry;
    struct ect__hold *eprev, *enext;
    int pending;
};

struct ect_cache {
    pthread_mutex_t lock;
    struct ect__index index;
    struct ect__extents extents;
    struct ect__pool entry_pool; /* ENTRY_SLOT_BYTES slots */
    struct ect__pool runs_pool;  /* run arrays of entries of 2 .. POOLED_RUNS runs */
    struct ect__pool hold_pool;
    struct ect__entry *fifo_head, *fifo_tail; /* oldest evictable first */
    struct ect__avl_tree holds_by_id;
    struct ect__avl_tree holds_by_deadline;
    uint64_t next_hold_id;
    ect_cache_listener_fn listener;
    void *listener_user;

    uint64_t entries;
    uint64_t entries_not_ready;
    uint64_t entries_pinned;
    uint64_t evictable_blocks;
    uint64_t pins;
    uint64_t holds_active;
    uint64_t holds_pending;
    uint64_t allocs;
    uint64_t alloc_no_space;
    uint64_t evicted_entries;
    uint64_t evicted_blocks;
    uint64_t holds_expired;
    uint64_t runs_histogram[ECT_CACHE_RUN_BUCKETS];
};

/* ---- index.c ---- */
ect_status_t ect__index_init(struct ect__index *ix);
void ect__index_cleanup(struct ect__index *ix); /* tables only, not entries */
uint64_t ect__index_hash(const struct ect__index *ix, const char *key, size_t len);
struct ect__entry *ect__index_find(struct ect__index *ix, const char *key, size_t len,
                                   uint64_t hash);
/* Make sure one more entry can be inserted (growing the table if due).
 * ECT_OK, or ECT_ERR_NO_MEMORY when the table is full and cannot grow. */
ect_status_t ect__index_reserve(struct ect__index *ix);
/* Insert e (e->hash set); a reserve must have succeeded since the last insert. */
void ect__index_insert(struct ect__index *ix, struct ect__entry *e);
void ect__index_remove(struct ect__index *ix, struct ect__entry *e);
/* Start loading the bucket of hash (both parts) into the CPU cache. */
void ect__index_prefetch(const struct ect__index *ix, uint64_t hash);
/* Call fn on every entry (destroy and checks; O(n)).  fn may free e but
 * must not call other index functions. */
void ect__index_each(struct ect__index *ix, void (*fn)(struct ect__entry *e, void *arg), void *arg);
/* The table's own invariants (tags, overflow counts, used counts); tests. */
ect_status_t ect__index_check(const struct ect__index *ix);

/* ---- cache.c ---- */
/* One more pin or active hold on a ready entry (leaves the FIFO at the first). */
void ect__cache_pin_locked(struct ect_cache *c, struct ect__entry *e);
/* One fewer; the last one appends the entry to the FIFO tail. */
void ect__cache_unpin_locked(struct ect_cache *c, struct ect__entry *e);
/* The calling thread is inside this cache's listener. */
int ect__cache_in_listener(const struct ect_cache *c);
/* Argument checks shared by every entry point: NULL cache, listener
 * re-entry.  Sets the message; what names the operation. */
ect_status_t ect__cache_enter_check(const struct ect_cache *c, const char *what);
/* The same plus the key: not NULL, 1 .. ECT_KEY_MAX bytes; *len_p
 * gets its length. */
ect_status_t ect__cache_enter_key(const struct ect_cache *c, const char *key, const char *what,
                                  size_t *len_p);

/* ---- holds.c ---- */
void ect__holds_init(struct ect_cache *c);
/* mark_ready: the entry's pending holds become active pins. */
void ect__holds_activate_locked(struct ect_cache *c, struct ect__entry *e);
/* discard: drop the entry's holds (all pending). */
void ect__holds_drop_locked(struct ect_cache *c, struct ect__entry *e);

/* Verify every invariant above; ECT_OK or ECT_ERR_INTERNAL with a message.
 * O(n log n): tests only.  Takes the lock. */
ect_status_t ect__cache_check(ect_cache_t *cache);

#endif /* ECT_CACHE_CACHE_INTERNAL_H */
