/*
 * A small string-keyed hash map (separate chaining, power-of-two buckets,
 * grows at load factor 1).  Keys are copied; values are opaque pointers or
 * integers owned by the caller.  Not synchronised.
 *
 * Removed nodes are kept by the size class of their key room (64-byte
 * steps), up to the most keys of that class the map held at once, and
 * reused by later puts of that class, and a cleared map keeps its buckets: a map whose keys come
 * and go at a steady rate stops allocating.
 */
#ifndef ECT_COMMON_STRMAP_H
#define ECT_COMMON_STRMAP_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

typedef struct ect_strmap_node {
    struct ect_strmap_node *next;
    uint64_t hash;
    void *value;
    size_t key_cap; /* bytes of key[] */
    char key[];     /* NUL-terminated copy */
} ect_strmap_node_t;

/* Key room classes of spare nodes: 64, 128, ... bytes; the last also
 * holds every longer key's node. */
#define ECT_STRMAP_CLASSES 17

typedef struct ect_strmap {
    ect_strmap_node_t **buckets;
    size_t n_buckets; /* 0 or a power of two */
    size_t count;
    /* Per class: removed nodes kept for reuse, never more than the most
     * keys of that class held at once (peak), and the keys held now. */
    ect_strmap_node_t *spare[ECT_STRMAP_CLASSES];
    size_t n_spare[ECT_STRMAP_CLASSES];
    size_t live[ECT_STRMAP_CLASSES];
    size_t peak[ECT_STRMAP_CLASSES];
} ect_strmap_t;

/* An empty map (no allocation until the first put). */
void ect__strmap_init(ect_strmap_t *map);

/* Free the nodes; values are not touched. */
void ect__strmap_cleanup(ect_strmap_t *map);

/* Remove every key, keeping the buckets and the nodes for reuse; values
 * are not touched. */
void ect__strmap_clear(ect_strmap_t *map);

/* The node for key, or NULL. */
ect_strmap_node_t *ect__strmap_find(const ect_strmap_t *map, const char *key);

/* Insert key -> value; ECT_ERR_EXISTS if present (nothing changes),
 * ECT_ERR_NO_MEMORY.  *node_p (optional) gets the new node. */
ect_status_t ect__strmap_put(ect_strmap_t *map, const char *key, void *value,
                             ect_strmap_node_t **node_p);

/* Remove key; returns 1 and writes *value_p (optional) if it was present. */
int ect__strmap_remove(ect_strmap_t *map, const char *key, void **value_p);

/* Call fn on every node (fn may not modify the map). */
void ect__strmap_each(const ect_strmap_t *map, void (*fn)(ect_strmap_node_t *node, void *user),
                      void *user);

/* SipHash-1-3 of a NUL-terminated string under a random key drawn once per
 * process: the maps' keys can come from peers (a grant's session and
 * mm_hash, an announced key), and an unkeyed hash would let a peer choose
 * keys that share a bucket.  Thread safe. */
uint64_t ect__strhash(const char *s);

#endif /* ECT_COMMON_STRMAP_H */
