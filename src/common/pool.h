/*
 * A pool of fixed-size objects: a LIFO free list over chunks that are kept
 * until cleanup.  For hot, churning objects (cache entries, holds), it
 * avoids malloc's per-free bookkeeping, and LIFO reuse hands back the object
 * freed last, usually still in the CPU cache.  Chunks grow geometrically to
 * 2 MiB; those are mapped with MADV_HUGEPAGE where the kernel allows it, so
 * a pool of a million objects costs few TLB misses.
 *
 * Memory follows the peak number of live objects and is returned only by
 * ect__pool_cleanup.  Address-sanitizer builds poison free objects, so a
 * use after put is still caught.
 *
 * Locking: none; the owner serialises access.
 */
#ifndef ECT_COMMON_POOL_H
#define ECT_COMMON_POOL_H

#include <stddef.h>

#include <ectier/status.h>

struct ect__pool_chunk;

struct ect__pool {
    size_t obj_size; /* rounded up to 16 bytes */
    void *free_list;
    size_t n_free;
    size_t next_chunk_objs;
    struct ect__pool_chunk *chunks;
};

/* An empty pool of objects of obj_size bytes (sizeof(void *) .. 64 KiB). */
void ect__pool_init(struct ect__pool *p, size_t obj_size);

/* Unmap every chunk.  Objects still in use become invalid. */
void ect__pool_cleanup(struct ect__pool *p);

/* Make sure n objects can be taken without allocating.
 * ECT_OK or ECT_ERR_NO_MEMORY (message set). */
ect_status_t ect__pool_reserve(struct ect__pool *p, size_t n);

/* An object (uninitialised), growing the pool if needed; NULL if memory
 * runs out (no message set). */
void *ect__pool_get(struct ect__pool *p);

/* Return obj, taken from this pool. */
void ect__pool_put(struct ect__pool *p, void *obj);

#endif /* ECT_COMMON_POOL_H */
