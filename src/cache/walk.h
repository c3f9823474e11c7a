/*
 * A walk over every entry of a cache, for a module that must rebuild its own
 * picture of the cache from scratch (the event stream after it lost events).
 */
#ifndef ECT_CACHE_WALK_H
#define ECT_CACHE_WALK_H

#include <stdbool.h>
#include <stdint.h>

#include <ectier/cache.h>

/* Called once per entry with its key (valid only during the call), its size
 * in blocks and whether it is ready. */
typedef void (*ect__cache_walk_fn)(const char *key, uint64_t n_blocks, bool ready, void *user);

/* Call fn for every entry of cache, in no particular order, under the
 * cache's lock, which is held for the whole walk (O(entries): the engine's
 * cache calls wait meanwhile).  fn must not call into the cache, nor take a
 * lock that the cache's listener takes.  A NULL cache or fn does nothing. */
void ect__cache_walk(ect_cache_t *cache, ect__cache_walk_fn fn, void *user);

#endif
