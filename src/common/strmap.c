/*
 * String-keyed hash map: the scheduler's bookkeeping, the P2P producer's
 * grants and announcements, the consumer's transfers, the events view.
 * See strmap.h.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/siphash.h"
#include "common/strmap.h"

/* One SipHash key for every map of the process, drawn at the first hash. */
static pthread_once_t strhash_once = PTHREAD_ONCE_INIT;
static uint64_t strhash_k0, strhash_k1;

static void
strhash_key_init(void)
{
    ect__siphash_random_key(&strhash_k0, &strhash_k1);
}

uint64_t
ect__strhash(const char *s)
{
    pthread_once(&strhash_once, strhash_key_init);
    return ect__siphash13(s, strlen(s), strhash_k0, strhash_k1);
}

void
ect__strmap_init(ect_strmap_t *map)
{
    memset(map, 0, sizeof(*map));
}

#define CLASS_BYTES 64

/* The class of a node with room for a key of len bytes, and that room. */
static size_t
class_of(size_t len)
{
    size_t c = len / CLASS_BYTES;
    return c < ECT_STRMAP_CLASSES ? c : ECT_STRMAP_CLASSES - 1;
}

static size_t
room_of(size_t len)
{
    size_t c = len / CLASS_BYTES;
    return c < ECT_STRMAP_CLASSES - 1 ? (c + 1) * CLASS_BYTES : len + 1;
}

static void
free_chain(ect_strmap_node_t *n)
{
    while (n != NULL) {
        ect_strmap_node_t *next = n->next;
        ect__free(n);
        n = next;
    }
}

void
ect__strmap_cleanup(ect_strmap_t *map)
{
    for (size_t b = 0; b < map->n_buckets; b++)
        free_chain(map->buckets[b]);
    for (size_t c = 0; c < ECT_STRMAP_CLASSES; c++)
        free_chain(map->spare[c]);
    ect__free(map->buckets);
    memset(map, 0, sizeof(*map));
}

/* n leaves the map: keep it for reuse, or free it when the map already
 * keeps as many spare nodes of its class as it ever held keys of it. */
static void
keep_spare(ect_strmap_t *map, ect_strmap_node_t *n)
{
    size_t c = class_of(n->key_cap - 1);
    map->live[c]--;
    if (map->n_spare[c] >= map->peak[c]) {
        ect__free(n);
        return;
    }
    n->next = map->spare[c];
    map->spare[c] = n;
    map->n_spare[c]++;
}

void
ect__strmap_clear(ect_strmap_t *map)
{
    for (size_t b = 0; b < map->n_buckets; b++) {
        ect_strmap_node_t *n = map->buckets[b];
        while (n != NULL) {
            ect_strmap_node_t *next = n->next;
            keep_spare(map, n);
            n = next;
        }
        map->buckets[b] = NULL;
    }
    map->count = 0;
}

/* A node with room for a key of len bytes: a spare one of its class, else
 * a new one (NULL when memory runs out). */
static ect_strmap_node_t *
node_for(ect_strmap_t *map, size_t len)
{
    size_t c = class_of(len);
    ect_strmap_node_t *n = map->spare[c];
    if (n != NULL && n->key_cap > len) {
        map->spare[c] = n->next;
        map->n_spare[c]--;
    } else {
        size_t room = room_of(len);
        if ((n = ect__malloc(sizeof(*n) + room)) == NULL)
            return NULL;
        n->key_cap = room;
    }
    if (++map->live[c] > map->peak[c])
        map->peak[c] = map->live[c];
    return n;
}

ect_strmap_node_t *
ect__strmap_find(const ect_strmap_t *map, const char *key)
{
    if (map->n_buckets == 0)
        return NULL;
    uint64_t h = ect__strhash(key);
    for (ect_strmap_node_t *n = map->buckets[h & (map->n_buckets - 1)]; n; n = n->next)
        if (n->hash == h && strcmp(n->key, key) == 0)
            return n;
    return NULL;
}

static ect_status_t
grow(ect_strmap_t *map)
{
    size_t nb = map->n_buckets ? map->n_buckets * 2 : 16;
    ect_strmap_node_t **buckets = ect__calloc(nb, sizeof(*buckets));
    if (buckets == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "map: out of memory growing to %zu buckets", nb);
    for (size_t b = 0; b < map->n_buckets; b++) {
        ect_strmap_node_t *n = map->buckets[b];
        while (n != NULL) {
            ect_strmap_node_t *next = n->next;
            n->next = buckets[n->hash & (nb - 1)];
            buckets[n->hash & (nb - 1)] = n;
            n = next;
        }
    }
    ect__free(map->buckets);
    map->buckets = buckets;
    map->n_buckets = nb;
    return ECT_OK;
}

ect_status_t
ect__strmap_put(ect_strmap_t *map, const char *key, void *value, ect_strmap_node_t **node_p)
{
    if (ect__strmap_find(map, key) != NULL)
        return ect__error(ECT_ERR_EXISTS, "map: key '%s' already present", key);
    if (map->count >= map->n_buckets) {
        ect_status_t st = grow(map);
        if (st != ECT_OK)
            return st;
    }
    size_t len = strlen(key);
    ect_strmap_node_t *n = node_for(map, len);
    if (n == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "map: out of memory");
    n->hash = ect__strhash(key);
    n->value = value;
    memcpy(n->key, key, len + 1);
    size_t b = n->hash & (map->n_buckets - 1);
    n->next = map->buckets[b];
    map->buckets[b] = n;
    map->count++;
    if (node_p != NULL)
        *node_p = n;
    return ECT_OK;
}

int
ect__strmap_remove(ect_strmap_t *map, const char *key, void **value_p)
{
    if (map->n_buckets == 0)
        return 0;
    uint64_t h = ect__strhash(key);
    ect_strmap_node_t **link = &map->buckets[h & (map->n_buckets - 1)];
    for (; *link != NULL; link = &(*link)->next) {
        ect_strmap_node_t *n = *link;
        if (n->hash == h && strcmp(n->key, key) == 0) {
            *link = n->next;
            if (value_p != NULL)
                *value_p = n->value;
            keep_spare(map, n);
            map->count--;
            return 1;
        }
    }
    return 0;
}

void
ect__strmap_each(const ect_strmap_t *map, void (*fn)(ect_strmap_node_t *node, void *user),
                 void *user)
{
    for (size_t b = 0; b < map->n_buckets; b++)
        for (ect_strmap_node_t *n = map->buckets[b]; n; n = n->next)
            fn(n, user);
}
