/*
 * Fixed-size object pool (see pool.h).  A chunk is a header followed by
 * objects; the header links the chunks for cleanup.  Small chunks come from
 * malloc; 2 MiB ones are a huge page each where the kernel gives one
 * (ect__map_huge), so a pool of a million objects costs few TLB misses.
 */
#include <stdint.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/pool.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define FIRST_CHUNK_OBJS 64
#define HUGE_CHUNK_BYTES ((size_t)2 << 20)

struct ect__pool_chunk {
    struct ect__pool_chunk *next;
    size_t bytes;
    int mapped;
    /* objects follow, 16-byte aligned */
};

#define CHUNK_HEADER ((sizeof(struct ect__pool_chunk) + 15) & ~(size_t)15)

void
ect__pool_init(struct ect__pool *p, size_t obj_size)
{
    p->obj_size = (obj_size + 15) & ~(size_t)15;
    p->free_list = NULL;
    p->n_free = 0;
    p->next_chunk_objs = FIRST_CHUNK_OBJS;
    p->chunks = NULL;
}

void
ect__pool_cleanup(struct ect__pool *p)
{
    while (p->chunks != NULL) {
        struct ect__pool_chunk *c = p->chunks;
        p->chunks = c->next;
        UNPOISON(c, c->bytes);
        if (c->mapped)
            ect__unmap_huge(c, c->bytes);
        else
            ect__free(c);
    }
    p->free_list = NULL;
    p->n_free = 0;
}

static void
push_free(struct ect__pool *p, void *obj)
{
    *(void **)obj = p->free_list;
    p->free_list = obj;
    p->n_free++;
    POISON(obj, p->obj_size); /* ect__pool_get unpoisons before reading the link */
}

static int
grow(struct ect__pool *p)
{
    size_t bytes = CHUNK_HEADER + p->next_chunk_objs * p->obj_size;
    struct ect__pool_chunk *c;
    int mapped = 0;
    if (bytes >= HUGE_CHUNK_BYTES) {
        bytes = HUGE_CHUNK_BYTES;
        c = ect__map_huge(bytes);
        if (c == NULL)
            return -1;
        mapped = 1;
    } else {
        c = ect__malloc(bytes);
        if (c == NULL)
            return -1;
        p->next_chunk_objs *= 2;
    }
    c->bytes = bytes;
    c->mapped = mapped;
    c->next = p->chunks;
    p->chunks = c;
    size_t n = (bytes - CHUNK_HEADER) / p->obj_size;
    /* Push in reverse so the first object is taken first. */
    for (size_t i = n; i-- > 0;)
        push_free(p, (char *)c + CHUNK_HEADER + i * p->obj_size);
    return 0;
}

ect_status_t
ect__pool_reserve(struct ect__pool *p, size_t n)
{
    while (p->n_free < n) {
        if (grow(p) != 0)
            return ect__error(ECT_ERR_NO_MEMORY,
                              "pool: no memory for %zu more objects of %zu bytes", n - p->n_free,
                              p->obj_size);
    }
    return ECT_OK;
}

void *
ect__pool_get(struct ect__pool *p)
{
    if (p->free_list == NULL && grow(p) != 0)
        return NULL;
    void *obj = p->free_list;
    UNPOISON(obj, p->obj_size);
    p->free_list = *(void **)obj;
    p->n_free--;
    return obj;
}

void
ect__pool_put(struct ect__pool *p, void *obj)
{
    push_free(p, obj);
}
