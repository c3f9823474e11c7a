/*
 * The extent allocator behind the embedding cache: it owns the free block
 * ids of the region as maximal runs ("free runs") and hands out entries'
 * blocks as runs.
 *
 * Policy.  An allocation of n blocks takes one run when some free run holds
 * n: the smallest such run (best fit; ties go to the lowest first id), from
 * its low end.  Otherwise it takes the fewest runs: the largest free runs
 * whole while the rest still exceeds the next largest, then the best fit for
 * what remains.  bench/bench_cache.c measures the result (runs per entry
 * after a million random allocations and frees at 90 % occupancy, and under
 * FIFO eviction at full occupancy).  A log-like policy (continue from where
 * the last allocation ended, wrapping) was measured too and did no better:
 * eviction stops once free blocks suffice (the seed's semantics), so free
 * space is never only at the cursor.
 *
 * Invariants: free runs are disjoint, never adjacent (freeing coalesces with
 * both neighbours) and lie inside [0, num_blocks); free_blocks is their sum.
 * Each free run sits in two trees: by first id (to find neighbours) and by
 * (count, first) (best fit and largest).  Freeing a run needs at most one
 * new node, so the allocator keeps at least one spare node per allocated run:
 * ect__extents_give can then never fail, which lets eviction never fail.
 * Nodes come from a pool (chunks that double in size), so a cache filling
 * a large region allocates a few times, not once per entry.
 *
 * Locking: none; the cache's mutex serialises every call.
 */
#ifndef ECT_CACHE_EXTENT_H
#define ECT_CACHE_EXTENT_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/cache.h>

#include "common/avl.h"
#include "common/pool.h"

struct ect__free_run;

struct ect__extents {
    struct ect__avl_tree by_first;
    struct ect__avl_tree by_size;
    uint64_t num_blocks;
    uint64_t free_blocks;
    uint64_t allocated_runs; /* runs handed out and not given back */
    struct ect__pool nodes;  /* every free-run node; its free objects are the spares */
};

/* All num_blocks (> 0) blocks free.  ECT_OK or ECT_ERR_NO_MEMORY. */
ect_status_t ect__extents_init(struct ect__extents *x, uint64_t num_blocks);

/* Free every node.  The allocator must be initialised. */
void ect__extents_cleanup(struct ect__extents *x);

/* How many runs taking n blocks (0 < n <= free_blocks) would give now. */
size_t ect__extents_plan(const struct ect__extents *x, uint64_t n);

/* Make sure taking k more runs keeps a spare node per allocated run.
 * ECT_OK or ECT_ERR_NO_MEMORY (nothing else changes). */
ect_status_t ect__extents_reserve(struct ect__extents *x, size_t k);

/* Take n blocks (0 < n <= free_blocks) as exactly k runs, where k is what
 * ect__extents_plan(x, n) returned and ect__extents_reserve(x, k) succeeded
 * since.  runs[0 .. k) gets them sorted by first id.  Cannot fail. */
void ect__extents_take(struct ect__extents *x, uint64_t n, ect_run_t *runs, size_t k);

/* Give back k runs taken earlier (any order).  Cannot fail. */
void ect__extents_give(struct ect__extents *x, const ect_run_t *runs, size_t k);

/* Number of free runs, and the largest one's size (0 if none). */
uint64_t ect__extents_free_runs(const struct ect__extents *x);
uint64_t ect__extents_largest(const struct ect__extents *x);

/* Call fn on every free run in ascending order (O(free runs)). */
void ect__extents_each_free(const struct ect__extents *x, void (*fn)(ect_run_t run, void *arg),
                            void *arg);

/* Verify the invariants above; 0 if they hold, else -1 with a message.
 * O(free runs): tests only. */
int ect__extents_check(const struct ect__extents *x);

#endif /* ECT_CACHE_EXTENT_H */
