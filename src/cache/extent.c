/*
 * Extent allocator (see extent.h for the policy and invariants).
 *
 * Shrinking a free run from its low end does not move it in the by-first
 * tree (runs are disjoint, so their order by first id cannot change); only
 * its by-size position is refreshed.  Spare nodes are the node pool's free
 * objects, freed only at cleanup, so the node count is bounded by the peak
 * of free plus allocated runs (rounded up to the pool's last chunk).
 */
#include <stdlib.h>
#include <string.h>

#include "cache/extent.h"
#include "common/alloc.h"
#include "common/error.h"

struct ect__free_run {
    struct ect__avl_node by_first;
    struct ect__avl_node by_size;
    uint64_t first;
    uint64_t count;
};

#define RUN_BY_FIRST(n) ect__avl_entry((n), struct ect__free_run, by_first)
#define RUN_BY_SIZE(n)  ect__avl_entry((n), struct ect__free_run, by_size)

static int
cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

static int
cmp_by_first(const struct ect__avl_node *a, const struct ect__avl_node *b)
{
    return cmp_u64(RUN_BY_FIRST(a)->first, RUN_BY_FIRST(b)->first);
}

static int
cmp_by_size(const struct ect__avl_node *a, const struct ect__avl_node *b)
{
    const struct ect__free_run *ra = RUN_BY_SIZE(a), *rb = RUN_BY_SIZE(b);
    int c = cmp_u64(ra->count, rb->count);
    return c != 0 ? c : cmp_u64(ra->first, rb->first);
}

/* A spare node: there is one (the reservation's invariant). */
static struct ect__free_run *
spare_pop(struct ect__extents *x)
{
    return ect__pool_get(&x->nodes);
}

static void
spare_push(struct ect__extents *x, struct ect__free_run *r)
{
    ect__pool_put(&x->nodes, r);
}

static void
run_insert(struct ect__extents *x, struct ect__free_run *r)
{
    ect__avl_insert(&x->by_first, &r->by_first);
    ect__avl_insert(&x->by_size, &r->by_size);
}

static void
run_remove(struct ect__extents *x, struct ect__free_run *r)
{
    ect__avl_remove(&x->by_first, &r->by_first);
    ect__avl_remove(&x->by_size, &r->by_size);
}

ect_status_t
ect__extents_init(struct ect__extents *x, uint64_t num_blocks)
{
    ect__avl_init(&x->by_first, cmp_by_first);
    ect__avl_init(&x->by_size, cmp_by_size);
    x->num_blocks = num_blocks;
    x->free_blocks = 0;
    x->allocated_runs = 0;
    ect__pool_init(&x->nodes, sizeof(struct ect__free_run));
    struct ect__free_run *all = ect__pool_get(&x->nodes);
    if (all == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "cache: no memory for the free-run index");
    memset(all, 0, sizeof(*all));
    all->first = 0;
    all->count = num_blocks;
    run_insert(x, all);
    x->free_blocks = num_blocks;
    return ECT_OK;
}

void
ect__extents_cleanup(struct ect__extents *x)
{
    /* Every node, in the trees or spare, goes with the pool. */
    ect__pool_cleanup(&x->nodes);
    ect__avl_init(&x->by_first, cmp_by_first);
    ect__avl_init(&x->by_size, cmp_by_size);
    x->free_blocks = 0;
}

/* The smallest free run holding at least n blocks, or NULL. */
static struct ect__free_run *
best_fit(const struct ect__extents *x, uint64_t n)
{
    struct ect__free_run probe = {.first = 0, .count = n};
    struct ect__avl_node *node = ect__avl_lower_bound(&x->by_size, &probe.by_size);
    return node != NULL ? RUN_BY_SIZE(node) : NULL;
}

size_t
ect__extents_plan(const struct ect__extents *x, uint64_t n)
{
    if (best_fit(x, n) != NULL)
        return 1;
    /* Largest first: the k largest runs are the fewest that can add up to n.
     * The last piece is then a best fit among the rest, one more run. */
    size_t k = 0;
    uint64_t need = n;
    for (struct ect__avl_node *node = ect__avl_last(&x->by_size);; node = ect__avl_prev(node)) {
        const struct ect__free_run *r = RUN_BY_SIZE(node);
        if (r->count >= need)
            return k + 1;
        need -= r->count;
        k++;
    }
}

ect_status_t
ect__extents_reserve(struct ect__extents *x, size_t k)
{
    if (ect__pool_reserve(&x->nodes, x->allocated_runs + k) != ECT_OK)
        return ect__error(ECT_ERR_NO_MEMORY, "cache: no memory for %zu more block runs", k);
    return ECT_OK;
}

static int
cmp_run_first(const void *a, const void *b)
{
    return cmp_u64(((const ect_run_t *)a)->first, ((const ect_run_t *)b)->first);
}

/* Take n blocks from the low end of r (n <= r->count). */
static void
take_from(struct ect__extents *x, struct ect__free_run *r, uint64_t n, ect_run_t *out)
{
    out->first = r->first;
    out->count = n;
    if (n == r->count) {
        run_remove(x, r);
        spare_push(x, r);
    } else {
        ect__avl_remove(&x->by_size, &r->by_size);
        r->first += n;
        r->count -= n;
        ect__avl_insert(&x->by_size, &r->by_size);
    }
}

void
ect__extents_take(struct ect__extents *x, uint64_t n, ect_run_t *runs, size_t k)
{
    uint64_t need = n;
    size_t i = 0;
    /* Same walk as ect__extents_plan, now consuming the whole runs. */
    while (i + 1 < k) {
        struct ect__free_run *r = RUN_BY_SIZE(ect__avl_last(&x->by_size));
        need -= r->count;
        take_from(x, r, r->count, &runs[i++]);
    }
    take_from(x, best_fit(x, need), need, &runs[i]);
    x->free_blocks -= n;
    x->allocated_runs += k;
    if (k > 1)
        qsort(runs, k, sizeof(*runs), cmp_run_first);
}

static void
give_one(struct ect__extents *x, ect_run_t run)
{
    /* The free run after this one starts at or beyond its end (runs are
     * disjoint); the one before is that run's predecessor. */
    struct ect__free_run probe = {.first = run.first};
    struct ect__avl_node *next_node = ect__avl_lower_bound(&x->by_first, &probe.by_first);
    struct ect__avl_node *prev_node =
        next_node != NULL ? ect__avl_prev(next_node) : ect__avl_last(&x->by_first);
    struct ect__free_run *next = next_node != NULL ? RUN_BY_FIRST(next_node) : NULL;
    struct ect__free_run *prev = prev_node != NULL ? RUN_BY_FIRST(prev_node) : NULL;
    int join_prev = prev != NULL && prev->first + prev->count == run.first;
    int join_next = next != NULL && run.first + run.count == next->first;

    if (join_prev && join_next) {
        run_remove(x, next);
        ect__avl_remove(&x->by_size, &prev->by_size);
        prev->count += run.count + next->count;
        ect__avl_insert(&x->by_size, &prev->by_size);
        spare_push(x, next);
    } else if (join_prev) {
        ect__avl_remove(&x->by_size, &prev->by_size);
        prev->count += run.count;
        ect__avl_insert(&x->by_size, &prev->by_size);
    } else if (join_next) {
        /* Growing next downwards keeps its by-first position: nothing free
         * lies between prev and it. */
        ect__avl_remove(&x->by_size, &next->by_size);
        next->first = run.first;
        next->count += run.count;
        ect__avl_insert(&x->by_size, &next->by_size);
    } else {
        struct ect__free_run *r = spare_pop(x);
        r->first = run.first;
        r->count = run.count;
        run_insert(x, r);
    }
    x->free_blocks += run.count;
}

void
ect__extents_give(struct ect__extents *x, const ect_run_t *runs, size_t k)
{
    for (size_t i = 0; i < k; i++)
        give_one(x, runs[i]);
    x->allocated_runs -= k;
}

uint64_t
ect__extents_free_runs(const struct ect__extents *x)
{
    return x->by_first.count;
}

uint64_t
ect__extents_largest(const struct ect__extents *x)
{
    struct ect__avl_node *n = ect__avl_last(&x->by_size);
    return n != NULL ? RUN_BY_SIZE(n)->count : 0;
}

void
ect__extents_each_free(const struct ect__extents *x, void (*fn)(ect_run_t run, void *arg),
                       void *arg)
{
    for (struct ect__avl_node *n = ect__avl_first(&x->by_first); n != NULL; n = ect__avl_next(n)) {
        const struct ect__free_run *r = RUN_BY_FIRST(n);
        fn((ect_run_t){.first = r->first, .count = r->count}, arg);
    }
}

int
ect__extents_check(const struct ect__extents *x)
{
    if (ect__avl_check(&x->by_first) != 0 || ect__avl_check(&x->by_size) != 0) {
        ect__error(ECT_ERR_INTERNAL, "extents: a free-run tree is malformed");
        return -1;
    }
    if (x->by_first.count != x->by_size.count) {
        ect__error(ECT_ERR_INTERNAL, "extents: trees hold %zu and %zu runs", x->by_first.count,
                   x->by_size.count);
        return -1;
    }
    uint64_t sum = 0, end = 0;
    int have_prev = 0;
    for (struct ect__avl_node *n = ect__avl_first(&x->by_first); n != NULL; n = ect__avl_next(n)) {
        const struct ect__free_run *r = RUN_BY_FIRST(n);
        if (r->count == 0 || r->first + r->count > x->num_blocks ||
            (have_prev && r->first <= end)) {
            ect__error(ECT_ERR_INTERNAL,
                       "extents: free run [%llu, +%llu) is empty, out of range, overlapping or "
                       "adjacent to the previous one",
                       (unsigned long long)r->first, (unsigned long long)r->count);
            return -1;
        }
        end = r->first + r->count;
        have_prev = 1;
        sum += r->count;
    }
    if (sum != x->free_blocks) {
        ect__error(ECT_ERR_INTERNAL, "extents: free runs add up to %llu, counter says %llu",
                   (unsigned long long)sum, (unsigned long long)x->free_blocks);
        return -1;
    }
    if (x->nodes.n_free < x->allocated_runs) {
        ect__error(ECT_ERR_INTERNAL, "extents: %llu spare nodes for %llu allocated runs",
                   (unsigned long long)x->nodes.n_free, (unsigned long long)x->allocated_runs);
        return -1;
    }
    return ECT_OK;
}
