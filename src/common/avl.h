/*
 * An intrusive AVL tree: the node lives inside the caller's object, so
 * inserting and removing never allocate and cannot fail.  Ordered by a
 * comparison function over nodes; keys must be unique under it (break ties
 * with an id).  Insert, remove and lower_bound are O(log n); first/last are
 * O(log n); next/prev are O(1) amortised over a walk.
 *
 * Invariants: every node's height is 1 + the larger child height (a missing
 * child counts 0), children's heights differ by at most 1, and in-order
 * traversal is strictly increasing under cmp.  ect__avl_check verifies them.
 *
 * Locking: none; the owner serialises access.
 */
#ifndef ECT_COMMON_AVL_H
#define ECT_COMMON_AVL_H

#include <stddef.h>

struct ect__avl_node {
    struct ect__avl_node *parent;
    struct ect__avl_node *left;
    struct ect__avl_node *right;
    int height;
};

/* <0, 0, >0 as a orders before, equal to, after b. */
typedef int (*ect__avl_cmp_fn)(const struct ect__avl_node *a, const struct ect__avl_node *b);

struct ect__avl_tree {
    struct ect__avl_node *root;
    ect__avl_cmp_fn cmp;
    size_t count;
};

/* The object that holds a node. */
#define ect__avl_entry(node, type, member) ((type *)(void *)((char *)(node)-offsetof(type, member)))

void ect__avl_init(struct ect__avl_tree *tree, ect__avl_cmp_fn cmp);

/* Insert node (not in any tree; its key unique in this one). */
void ect__avl_insert(struct ect__avl_tree *tree, struct ect__avl_node *node);

/* Remove node, which must be in this tree. */
void ect__avl_remove(struct ect__avl_tree *tree, struct ect__avl_node *node);

struct ect__avl_node *ect__avl_first(const struct ect__avl_tree *tree);
struct ect__avl_node *ect__avl_last(const struct ect__avl_tree *tree);
struct ect__avl_node *ect__avl_next(const struct ect__avl_node *node);
struct ect__avl_node *ect__avl_prev(const struct ect__avl_node *node);

/* The first node not ordered before key (a node used only as a probe, never
 * inserted), or NULL. */
struct ect__avl_node *ect__avl_lower_bound(const struct ect__avl_tree *tree,
                                           const struct ect__avl_node *key);

/* The node equal to key, or NULL. */
struct ect__avl_node *ect__avl_find(const struct ect__avl_tree *tree,
                                    const struct ect__avl_node *key);

/* Verify the invariants above and the count; 0 if they hold, else -1.
 * O(n): for tests and debugging only. */
int ect__avl_check(const struct ect__avl_tree *tree);

#endif /* ECT_COMMON_AVL_H */
