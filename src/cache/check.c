/*
 * ect__cache_check: a full walk that verifies every invariant listed in
 * cache_internal.h.  O(n log n) and allocating, so tests and debugging only;
 * no public function calls it.
 *
 * Locking: takes the cache's mutex for the whole walk.
 */
#include <stdlib.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "common/alloc.h"
#include "common/error.h"

struct walk {
    struct ect_cache *c;
    ect_run_t *runs; /* every allocated and free run */
    size_t n_runs, cap_runs;
    uint64_t entries, not_ready, pinned, pins, holds_active, holds_pending, used_blocks;
    uint64_t histogram[ECT_CACHE_RUN_BUCKETS];
    int failed;
};

static void
fail(struct walk *w, const char *what, const char *key)
{
    if (!w->failed)
        ect__error(ECT_ERR_INTERNAL, "cache check: %s (entry '%.200s')", what, key);
    w->failed = 1;
}

static int
push_run(struct walk *w, ect_run_t r)
{
    if (w->n_runs == w->cap_runs) {
        size_t cap = w->cap_runs ? w->cap_runs * 2 : 256;
        ect_run_t *p = ect__realloc(w->runs, cap * sizeof(*p));
        if (p == NULL)
            return -1;
        w->runs = p;
        w->cap_runs = cap;
    }
    w->runs[w->n_runs++] = r;
    return 0;
}

static int
bucket(size_t n)
{
    return n <= 4 ? (int)n - 1 : n <= 8 ? 4 : n <= 16 ? 5 : 6;
}

static void
push_free_run(ect_run_t run, void *arg)
{
    struct walk *w = arg;
    if (push_run(w, run) != 0)
        fail(w, "no memory", "");
}

static void
check_entry(struct ect__entry *e, void *arg)
{
    struct walk *w = arg;
    w->entries++;
    if (e->key[e->key_len] != '\0' || strlen(e->key) != e->key_len)
        fail(w, "key length", e->key);
    uint64_t sum = 0;
    for (size_t i = 0; i < e->n_runs; i++) {
        if (e->runs[i].count == 0)
            fail(w, "empty run", e->key);
        if (i > 0 && e->runs[i].first <= e->runs[i - 1].first + e->runs[i - 1].count)
            fail(w, "runs not ascending, overlapping or adjacent", e->key);
        sum += e->runs[i].count;
        if (push_run(w, e->runs[i]) != 0)
            fail(w, "no memory", e->key);
    }
    if (sum != e->n_blocks)
        fail(w, "runs do not add up to n_blocks", e->key);
    if ((e->n_runs <= 1) != (e->runs == &e->run0))
        fail(w, "runs storage", e->key);
    if (e->pooled && e->key_len > ENTRY_POOL_KEY_MAX)
        fail(w, "pooled entry with a key too long for its slot", e->key);
    if (e->n_runs > 0)
        w->histogram[bucket(e->n_runs)]++;
    w->used_blocks += e->n_blocks;
    w->pins += e->pins;
    w->holds_active += e->holds_active;
    w->holds_pending += e->holds_pending;
    if (!e->ready) {
        w->not_ready++;
        if (e->pins != 0 || e->holds_active != 0)
            fail(w, "not-ready entry with pins or active holds", e->key);
    } else {
        if (e->holds_pending != 0)
            fail(w, "ready entry with pending holds", e->key);
        if (e->pins + e->holds_active > 0)
            w->pinned++;
    }
    uint64_t active = 0, pending = 0;
    for (struct ect__hold *h = e->holds; h != NULL; h = h->enext) {
        if (h->entry != e || (h->enext != NULL && h->enext->eprev != h))
            fail(w, "hold list links", e->key);
        if (h->pending)
            pending++;
        else
            active++;
    }
    if (active != e->holds_active || pending != e->holds_pending)
        fail(w, "hold list disagrees with the entry's hold counts", e->key);
    struct ect__entry *found = ect__index_find(&w->c->index, e->key, e->key_len, e->hash);
    if (found != e)
        fail(w, "index lookup does not find the entry", e->key);
}

static int
cmp_run(const void *a, const void *b)
{
    const ect_run_t *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

ect_status_t
ect__cache_check(ect_cache_t *cache)
{
    struct walk w;
    memset(&w, 0, sizeof(w));
    w.c = cache;
    pthread_mutex_lock(&cache->lock);
    struct ect_cache *c = cache;

    if (ect__extents_check(&c->extents) != 0) {
        pthread_mutex_unlock(&c->lock);
        return ECT_ERR_INTERNAL;
    }
    if (ect__index_check(&c->index) != ECT_OK) {
        pthread_mutex_unlock(&c->lock);
        return ECT_ERR_INTERNAL;
    }
    ect__index_each(&c->index, check_entry, &w);

    /* FIFO: exactly the ready entries with no pin or hold, linked both ways. */
    uint64_t fifo_entries = 0, fifo_blocks = 0;
    const struct ect__entry *prev = NULL;
    for (struct ect__entry *e = c->fifo_head; e != NULL; e = e->fifo_next) {
        if ((prev != NULL && (e->fifo_prev != prev || prev->fifo_next_hash != e->hash)) ||
            !e->ready || e->pins + e->holds_active != 0)
            fail(&w, "FIFO holds a non-evictable entry or is mislinked", e->key);
        fifo_entries++;
        fifo_blocks += e->n_blocks;
        prev = e;
        if (fifo_entries > w.entries)
            break;
    }
    if (prev != c->fifo_tail)
        fail(&w, "FIFO tail", "");
    if (fifo_entries != w.entries - w.not_ready - w.pinned)
        fail(&w, "FIFO length differs from the number of evictable entries", "");
    if (fifo_blocks != c->evictable_blocks)
        fail(&w, "evictable_blocks counter", "");

    if (w.entries != c->entries || w.not_ready != c->entries_not_ready ||
        w.pinned != c->entries_pinned || w.pins != c->pins || w.holds_active != c->holds_active ||
        w.holds_pending != c->holds_pending)
        fail(&w, "entry, pin or hold counters", "");
    if (memcmp(w.histogram, c->runs_histogram, sizeof(w.histogram)) != 0)
        fail(&w, "runs histogram", "");
    if (w.used_blocks + c->extents.free_blocks != c->extents.num_blocks)
        fail(&w, "used + free != num_blocks", "");
    if (c->holds_by_id.count != w.holds_active + w.holds_pending ||
        c->holds_by_deadline.count != c->holds_by_id.count ||
        ect__avl_check(&c->holds_by_id) != 0 || ect__avl_check(&c->holds_by_deadline) != 0)
        fail(&w, "hold trees", "");

    /* Allocated and free runs together tile [0, num_blocks) exactly: no
     * block is in two entries, or in an entry and free at once. */
    ect__extents_each_free(&c->extents, push_free_run, &w);
    if (!w.failed) {
        qsort(w.runs, w.n_runs, sizeof(*w.runs), cmp_run);
        uint64_t end = 0;
        for (size_t i = 0; i < w.n_runs; i++) {
            if (w.runs[i].first != end) {
                fail(&w, "a block is in two places, or in none", "");
                break;
            }
            end += w.runs[i].count;
        }
        if (end != c->extents.num_blocks)
            fail(&w, "runs do not cover every block", "");
    }
    pthread_mutex_unlock(&c->lock);
    ect__free(w.runs);
    return w.failed ? ECT_ERR_INTERNAL : ECT_OK;
}
