/*
 * Step metadata (scheduler -> worker): the in-memory value and its framed
 * little-endian encoding (the frame and the body layout: step/frame.h).
 *
 * Invariants of a value: keys are 1..ECT_KEY_MAX bytes without NUL; runs of
 * one item are ascending and non-overlapping with count >= 1; a key appears
 * at most once among the saves and once among the loads.  Decoding
 * re-establishes all of them and checks that no two runs of the whole
 * step's saves overlap and every run lies inside the region.
 */
#include <stdlib.h>
#include <string.h>

#include <ectier/step.h>

#include "common/alloc.h"
#include "common/bytes.h"
#include "common/error.h"
#include "common/strmap.h"
#include "step/frame.h"

#define RUN_BYTES 16u

/* ---- a growable list of items with a key index -------------------------- */

/* The items' runs and keys live in one arena per list, each item's runs
 * (8-byte aligned) followed by its key; clearing a list keeps the arena,
 * the item array and the index, so a value reused step after step stops
 * allocating once it has held its largest step. */
struct item_list {
    ect_step_item_t *items;
    uint64_t *hashes; /* each item's key hash (ect__strhash), cap of them */
    size_t n, cap;
    size_t *index; /* open addressing over items, SIZE_MAX = empty */
    size_t index_cap;
    unsigned char *arena;
    size_t arena_used, arena_cap;
};

struct ect_step_meta {
    struct item_list saves;
    struct item_list loads;
    ect_run_t *scratch; /* decoding: an item's runs, then the overlap check's */
    size_t scratch_cap;
};

static ect_status_t
index_rebuild(struct item_list *l, size_t cap)
{
    size_t *index = ect__malloc(cap * sizeof(*index));
    if (index == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "step metadata: out of memory for the key index");
    for (size_t i = 0; i < cap; i++)
        index[i] = SIZE_MAX;
    for (size_t i = 0; i < l->n; i++) {
        size_t slot = l->hashes[i] & (cap - 1);
        while (index[slot] != SIZE_MAX)
            slot = (slot + 1) & (cap - 1);
        index[slot] = i;
    }
    ect__free(l->index);
    l->index = index;
    l->index_cap = cap;
    return ECT_OK;
}

/* Room for `need` more arena bytes.  A grown arena is a new block: the
 * items' pointers move to it before the old one is freed. */
static ect_status_t
arena_reserve(struct item_list *l, size_t need, const char *what)
{
    if (l->arena_cap - l->arena_used >= need)
        return ECT_OK;
    if (need > SIZE_MAX / 2 - l->arena_used)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", what);
    size_t cap = l->arena_cap ? l->arena_cap : 512;
    while (cap - l->arena_used < need)
        cap *= 2;
    unsigned char *arena = ect__malloc(cap);
    if (arena == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", what);
    if (l->arena_used > 0)
        memcpy(arena, l->arena, l->arena_used);
    for (size_t i = 0; i < l->n; i++) {
        ect_step_item_t *it = &l->items[i];
        it->runs = (const ect_run_t *)(arena + ((const unsigned char *)it->runs - l->arena));
        it->key = (const char *)(arena + ((const unsigned char *)it->key - l->arena));
    }
    ect__free(l->arena);
    l->arena = arena;
    l->arena_cap = cap;
    return ECT_OK;
}

/* The item of key, whose hash is h, or NULL. */
static const ect_step_item_t *
list_find_hashed(const struct item_list *l, const char *key, uint64_t h)
{
    if (l->index_cap == 0)
        return NULL;
    size_t slot = h & (l->index_cap - 1);
    while (l->index[slot] != SIZE_MAX) {
        size_t i = l->index[slot];
        if (l->hashes[i] == h && strcmp(l->items[i].key, key) == 0)
            return &l->items[i];
        slot = (slot + 1) & (l->index_cap - 1);
    }
    return NULL;
}

static const ect_step_item_t *
list_find(const struct item_list *l, const char *key)
{
    return l->index_cap == 0 ? NULL : list_find_hashed(l, key, ect__strhash(key));
}

/* Empty the list, keeping its memory.  Each item's own index slot is
 * emptied (the loop finds it even where an earlier item's slot on its probe
 * path is empty already): O(items), however large the index grew. */
static void
list_clear(struct item_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        size_t slot = l->hashes[i] & (l->index_cap - 1);
        while (l->index[slot] != i)
            slot = (slot + 1) & (l->index_cap - 1);
        l->index[slot] = SIZE_MAX;
    }
    l->n = 0;
    l->arena_used = 0;
}

static void
list_free(struct item_list *l)
{
    ect__free(l->items);
    ect__free(l->hashes);
    ect__free(l->index);
    ect__free(l->arena);
    memset(l, 0, sizeof(*l));
}

static ect_status_t
check_runs(const char *what, const char *key, const ect_run_t *runs, size_t n_runs,
           uint64_t *n_blocks_p)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n_runs; i++) {
        if (runs[i].count == 0)
            return ect__error(ECT_ERR_INVALID_ARG, "%s '%s': run %zu has zero blocks", what, key,
                              i);
        if (runs[i].first > UINT64_MAX - runs[i].count)
            return ect__error(ECT_ERR_INVALID_ARG, "%s '%s': run %zu overflows block ids", what,
                              key, i);
        if (i > 0 && runs[i].first < runs[i - 1].first + runs[i - 1].count)
            return ect__error(ECT_ERR_INVALID_ARG,
                              "%s '%s': runs not ascending or overlapping at run %zu", what, key,
                              i);
        total += runs[i].count;
    }
    *n_blocks_p = total;
    return ECT_OK;
}

static ect_status_t
list_add(struct item_list *l, const char *what, const char *key, uint64_t tid,
         const ect_run_t *runs, size_t n_runs)
{
    if (key == NULL || (n_runs > 0 && runs == NULL))
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL key or runs", what);
    size_t len = strnlen(key, ECT_KEY_MAX + 1);
    ect_status_t st = ect__step_check_key(what, key, len);
    if (st != ECT_OK)
        return st;
    uint64_t n_blocks = 0;
    if ((st = check_runs(what, key, runs, n_runs, &n_blocks)) != ECT_OK)
        return st;
    uint64_t h = ect__strhash(key);
    if (list_find_hashed(l, key, h) != NULL)
        return ect__error(ECT_ERR_EXISTS, "%s: key '%s' is already in this step", what, key);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        ect_step_item_t *items = ect__realloc(l->items, cap * sizeof(*items));
        if (items == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", what);
        l->items = items;
        uint64_t *hashes = ect__realloc(l->hashes, cap * sizeof(*hashes));
        if (hashes == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", what);
        l->hashes = hashes;
        l->cap = cap;
    }
    if ((l->n + 1) * 2 > l->index_cap) {
        size_t cap = l->index_cap ? l->index_cap * 2 : 16;
        if ((st = index_rebuild(l, cap)) != ECT_OK)
            return st;
    }
    /* The item's runs, then its key, in the arena (runs is an array of
     * n_runs in memory, so n_runs * sizeof(run) + a key cannot overflow). */
    size_t runs_bytes = n_runs * sizeof(ect_run_t);
    size_t need = (runs_bytes + len + 1 + 7) & ~(size_t)7;
    if ((st = arena_reserve(l, need, what)) != ECT_OK)
        return st;
    ect_run_t *runs_copy = (ect_run_t *)(l->arena + l->arena_used);
    char *key_copy = (char *)(l->arena + l->arena_used + runs_bytes);
    l->arena_used += need;
    memcpy(key_copy, key, len + 1);
    if (n_runs > 0)
        memcpy(runs_copy, runs, runs_bytes);
    ect_step_item_t *it = &l->items[l->n];
    it->key = key_copy;
    it->transfer_id = tid;
    it->n_blocks = n_blocks;
    it->runs = runs_copy;
    it->n_runs = n_runs;
    l->hashes[l->n] = h;
    size_t slot = h & (l->index_cap - 1);
    while (l->index[slot] != SIZE_MAX)
        slot = (slot + 1) & (l->index_cap - 1);
    l->index[slot] = l->n;
    l->n++;
    return ECT_OK;
}

/* ---- step metadata ------------------------------------------------------ */

ect_status_t
ect_step_meta_create(ect_step_meta_t **meta_p)
{
    if (meta_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "step metadata: NULL output");
    ect_step_meta_t *m = ect__calloc(1, sizeof(*m));
    if (m == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "step metadata: out of memory");
    *meta_p = m;
    return ECT_OK;
}

void
ect_step_meta_destroy(ect_step_meta_t *meta)
{
    if (meta == NULL)
        return;
    list_free(&meta->saves);
    list_free(&meta->loads);
    ect__free(meta->scratch);
    ect__free(meta);
}

void
ect_step_meta_clear(ect_step_meta_t *meta)
{
    if (meta == NULL)
        return;
    list_clear(&meta->saves);
    list_clear(&meta->loads);
}

/* Room for n runs in meta's scratch array. */
static ect_status_t
scratch_reserve(ect_step_meta_t *m, size_t n, const char *what)
{
    if (n <= m->scratch_cap)
        return ECT_OK;
    size_t cap = m->scratch_cap ? m->scratch_cap : 16;
    while (cap < n)
        cap *= 2;
    /* The old contents are never needed: free, then allocate. */
    ect__free(m->scratch);
    m->scratch_cap = 0;
    if ((m->scratch = ect__malloc(cap * sizeof(*m->scratch))) == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", what);
    m->scratch_cap = cap;
    return ECT_OK;
}

ect_status_t
ect_step_meta_add_save(ect_step_meta_t *meta, const char *key, const ect_run_t *runs, size_t n_runs)
{
    if (meta == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "step metadata save: NULL metadata");
    return list_add(&meta->saves, "step metadata save", key, 0, runs, n_runs);
}

ect_status_t
ect_step_meta_add_load(ect_step_meta_t *meta, const char *key, uint64_t transfer_id,
                       const ect_run_t *runs, size_t n_runs)
{
    if (meta == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "step metadata load: NULL metadata");
    return list_add(&meta->loads, "step metadata load", key, transfer_id, runs, n_runs);
}

size_t
ect_step_meta_n_saves(const ect_step_meta_t *meta)
{
    return meta != NULL ? meta->saves.n : 0;
}

size_t
ect_step_meta_n_loads(const ect_step_meta_t *meta)
{
    return meta != NULL ? meta->loads.n : 0;
}

const ect_step_item_t *
ect_step_meta_save(const ect_step_meta_t *meta, size_t i)
{
    return meta != NULL && i < meta->saves.n ? &meta->saves.items[i] : NULL;
}

const ect_step_item_t *
ect_step_meta_load(const ect_step_meta_t *meta, size_t i)
{
    return meta != NULL && i < meta->loads.n ? &meta->loads.items[i] : NULL;
}

const ect_step_item_t *
ect_step_meta_find_save(const ect_step_meta_t *meta, const char *key)
{
    if (meta == NULL || key == NULL)
        return NULL;
    return list_find(&meta->saves, key);
}

const ect_step_item_t *
ect_step_meta_find_load(const ect_step_meta_t *meta, const char *key)
{
    if (meta == NULL || key == NULL)
        return NULL;
    return list_find(&meta->loads, key);
}

static size_t
items_size(const struct item_list *l, int with_tid)
{
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++)
        total +=
            4 + strlen(l->items[i].key) + (with_tid ? 8 : 0) + 4 + l->items[i].n_runs * RUN_BYTES;
    return total;
}

size_t
ect_step_meta_encoded_size(const ect_step_meta_t *meta)
{
    return ECT__STEP_FRAME_HEADER + 8 + items_size(&meta->saves, 0) + items_size(&meta->loads, 1);
}

static void
put_items(ect_bytes_writer_t *w, const struct item_list *l, int with_tid)
{
    for (size_t i = 0; i < l->n; i++) {
        const ect_step_item_t *it = &l->items[i];
        size_t klen = strlen(it->key);
        ect__put_u32(w, (uint32_t)klen);
        ect__put_bytes(w, it->key, klen);
        if (with_tid)
            ect__put_u64(w, it->transfer_id);
        ect__put_u32(w, (uint32_t)it->n_runs);
        for (size_t r = 0; r < it->n_runs; r++) {
            ect__put_u64(w, it->runs[r].first);
            ect__put_u64(w, it->runs[r].count);
        }
    }
}

ect_status_t
ect_step_meta_encode(const ect_step_meta_t *meta, void *buf, size_t cap, size_t *len_p)
{
    if (meta == NULL || buf == NULL || len_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "step metadata encode: NULL argument");
    size_t need = ect_step_meta_encoded_size(meta);
    if (cap < need)
        return ect__error(ECT_ERR_OVERFLOW, "step metadata encode: need %zu bytes, have %zu", need,
                          cap);
    ect_bytes_writer_t w = {buf, (uint8_t *)buf + cap};
    ect__step_put_frame_header(&w, ECT__STEP_META_MAGIC, need - ECT__STEP_FRAME_HEADER);
    ect__put_u32(&w, (uint32_t)meta->saves.n);
    ect__put_u32(&w, (uint32_t)meta->loads.n);
    put_items(&w, &meta->saves, 0);
    put_items(&w, &meta->loads, 1);
    *len_p = need;
    return ECT_OK;
}

static int
cmp_run(const void *a, const void *b)
{
    const ect_run_t *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* No two runs of the whole step may share a block: two saves into one block
 * would corrupt an entry. */
static ect_status_t
check_step_overlap(ect_step_meta_t *m)
{
    size_t total = 0;
    for (size_t i = 0; i < m->saves.n; i++)
        total += m->saves.items[i].n_runs;
    if (total < 2)
        return ECT_OK;
    ect_status_t st = scratch_reserve(m, total, "step metadata decode");
    if (st != ECT_OK)
        return st;
    ect_run_t *all = m->scratch;
    size_t k = 0;
    for (size_t i = 0; i < m->saves.n; i++)
        for (size_t r = 0; r < m->saves.items[i].n_runs; r++)
            all[k++] = m->saves.items[i].runs[r];
    qsort(all, total, sizeof(*all), cmp_run);
    for (size_t i = 1; i < total; i++)
        if (all[i].first < all[i - 1].first + all[i - 1].count)
            return ect__error(ECT_ERR_PARSE, "step metadata decode: saves overlap at block %llu",
                              (unsigned long long)all[i].first);
    return ECT_OK;
}

/* Decode n items into m's list l; each item's runs pass through m's
 * scratch array on their way into the list. */
static ect_status_t
decode_items(ect_bytes_reader_t *r, ect_step_meta_t *m, struct item_list *l, uint32_t n,
             int with_tid, uint64_t num_blocks, const char *what)
{
    char key[ECT_KEY_MAX + 1];
    ect_status_t st = ECT_OK;
    for (uint32_t i = 0; i < n && st == ECT_OK; i++) {
        if ((st = ect__step_read_key(r, what, key)) != ECT_OK)
            break;
        uint64_t tid = with_tid ? ect__get_u64(r) : 0;
        uint32_t n_runs = ect__get_u32(r);
        if (r->failed)
            return ect__error(ECT_ERR_PARSE, "%s '%s': truncated", what, key);
        if ((uint64_t)n_runs * RUN_BYTES > ect__remaining(r))
            return ect__error(ECT_ERR_PARSE, "%s '%s': %u runs but only %zu bytes remain", what,
                              key, n_runs, ect__remaining(r));
        if ((st = scratch_reserve(m, n_runs, what)) != ECT_OK)
            return st;
        ect_run_t *runs = m->scratch;
        for (uint32_t j = 0; j < n_runs; j++) {
            runs[j].first = ect__get_u64(r);
            runs[j].count = ect__get_u64(r);
            if (runs[j].count > num_blocks || runs[j].first > num_blocks - runs[j].count)
                return ect__error(
                    ECT_ERR_OVERFLOW, "%s '%s': blocks %llu+%llu outside the region's %llu blocks",
                    what, key, (unsigned long long)runs[j].first, (unsigned long long)runs[j].count,
                    (unsigned long long)num_blocks);
        }
        st = list_add(l, what, key, tid, runs, n_runs);
        if (st == ECT_ERR_INVALID_ARG || st == ECT_ERR_EXISTS)
            st = ECT_ERR_PARSE; /* the message already says what was wrong */
    }
    return st;
}

ect_status_t
ect_step_meta_decode_into(ect_step_meta_t *m, const void *bytes, size_t len, uint64_t num_blocks)
{
    static const char what[] = "step metadata decode";
    if (m == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL metadata", what);
    ect_step_meta_clear(m);
    if (bytes == NULL && len > 0)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL bytes", what);
    ect_bytes_reader_t r = {bytes, (const uint8_t *)bytes + len, 0}, body;
    ect_status_t st = ect__step_read_frame(&r, ECT__STEP_META_MAGIC, what, &body);
    if (st != ECT_OK)
        return st;
    if (ect__remaining(&r) != 0)
        return ect__error(ECT_ERR_PARSE, "%s: %zu trailing bytes after the frame", what,
                          ect__remaining(&r));
    uint32_t n_saves = ect__get_u32(&body), n_loads = ect__get_u32(&body);
    if (body.failed)
        return ect__error(ECT_ERR_PARSE, "%s: truncated counts", what);
    if ((st = decode_items(&body, m, &m->saves, n_saves, 0, num_blocks, "step metadata save")) !=
            ECT_OK ||
        (st = decode_items(&body, m, &m->loads, n_loads, 1, num_blocks, "step metadata load")) !=
            ECT_OK)
        goto err_clear;
    if (ect__remaining(&body) != 0) {
        st = ect__error(ECT_ERR_PARSE, "%s: %zu unread bytes in the body", what,
                        ect__remaining(&body));
        goto err_clear;
    }
    if ((st = check_step_overlap(m)) != ECT_OK)
        goto err_clear;
    return ECT_OK;

err_clear:
    ect_step_meta_clear(m);
    return st;
}

ect_status_t
ect_step_meta_decode(const void *bytes, size_t len, uint64_t num_blocks, ect_step_meta_t **meta_p)
{
    if ((bytes == NULL && len > 0) || meta_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "step metadata decode: NULL argument");
    ect_step_meta_t *m;
    ect_status_t st = ect_step_meta_create(&m);
    if (st != ECT_OK)
        return st;
    if ((st = ect_step_meta_decode_into(m, bytes, len, num_blocks)) != ECT_OK) {
        ect_step_meta_destroy(m);
        return st;
    }
    *meta_p = m;
    return ECT_OK;
}
