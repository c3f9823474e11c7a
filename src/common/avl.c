/*
 * Intrusive AVL tree with parent pointers (see avl.h).  After an insert or a
 * removal we walk from the lowest changed node to the root, recomputing
 * heights and rotating where a node's children differ by two.  Walking all
 * the way up (instead of stopping once a height is unchanged) costs at most
 * O(log n) and keeps the code short enough to check by eye.
 */
#include "common/avl.h"

static int
height(const struct ect__avl_node *n)
{
    return n != NULL ? n->height : 0;
}

static void
fix_height(struct ect__avl_node *n)
{
    int l = height(n->left), r = height(n->right);
    n->height = 1 + (l > r ? l : r);
}

/* Make new_child take old_child's place under parent (or at the root). */
static void
replace_child(struct ect__avl_tree *tree, struct ect__avl_node *parent,
              struct ect__avl_node *old_child, struct ect__avl_node *new_child)
{
    if (parent == NULL)
        tree->root = new_child;
    else if (parent->left == old_child)
        parent->left = new_child;
    else
        parent->right = new_child;
    if (new_child != NULL)
        new_child->parent = parent;
}

/* x's right child y becomes the subtree root; returns y. */
static struct ect__avl_node *
rotate_left(struct ect__avl_tree *tree, struct ect__avl_node *x)
{
    struct ect__avl_node *y = x->right;
    replace_child(tree, x->parent, x, y);
    x->right = y->left;
    if (y->left != NULL)
        y->left->parent = x;
    y->left = x;
    x->parent = y;
    fix_height(x);
    fix_height(y);
    return y;
}

/* Mirror of rotate_left. */
static struct ect__avl_node *
rotate_right(struct ect__avl_tree *tree, struct ect__avl_node *x)
{
    struct ect__avl_node *y = x->left;
    replace_child(tree, x->parent, x, y);
    x->left = y->right;
    if (y->right != NULL)
        y->right->parent = x;
    y->right = x;
    x->parent = y;
    fix_height(x);
    fix_height(y);
    return y;
}

static void
rebalance_up(struct ect__avl_tree *tree, struct ect__avl_node *n)
{
    while (n != NULL) {
        fix_height(n);
        int balance = height(n->left) - height(n->right);
        if (balance > 1) {
            if (height(n->left->left) < height(n->left->right))
                rotate_left(tree, n->left);
            n = rotate_right(tree, n);
        } else if (balance < -1) {
            if (height(n->right->right) < height(n->right->left))
                rotate_right(tree, n->right);
            n = rotate_left(tree, n);
        }
        n = n->parent;
    }
}

void
ect__avl_init(struct ect__avl_tree *tree, ect__avl_cmp_fn cmp)
{
    tree->root = NULL;
    tree->cmp = cmp;
    tree->count = 0;
}

void
ect__avl_insert(struct ect__avl_tree *tree, struct ect__avl_node *node)
{
    struct ect__avl_node *parent = NULL, **link = &tree->root;
    while (*link != NULL) {
        parent = *link;
        link = tree->cmp(node, parent) < 0 ? &parent->left : &parent->right;
    }
    node->parent = parent;
    node->left = node->right = NULL;
    node->height = 1;
    *link = node;
    tree->count++;
    rebalance_up(tree, parent);
}

static struct ect__avl_node *
subtree_min(struct ect__avl_node *n)
{
    while (n->left != NULL)
        n = n->left;
    return n;
}

static struct ect__avl_node *
subtree_max(struct ect__avl_node *n)
{
    while (n->right != NULL)
        n = n->right;
    return n;
}

void
ect__avl_remove(struct ect__avl_tree *tree, struct ect__avl_node *node)
{
    struct ect__avl_node *from;
    if (node->left != NULL && node->right != NULL) {
        /* Put the successor s (no left child) in node's place, relinking
         * nodes rather than swapping payloads, since the nodes are embedded
         * in the callers' objects. */
        struct ect__avl_node *s = subtree_min(node->right);
        if (s->parent == node) {
            from = s;
        } else {
            from = s->parent;
            from->left = s->right;
            if (s->right != NULL)
                s->right->parent = from;
            s->right = node->right;
            node->right->parent = s;
        }
        s->left = node->left;
        node->left->parent = s;
        replace_child(tree, node->parent, node, s);
        s->height = node->height;
    } else {
        struct ect__avl_node *child = node->left != NULL ? node->left : node->right;
        from = node->parent;
        replace_child(tree, node->parent, node, child);
    }
    node->parent = node->left = node->right = NULL;
    tree->count--;
    rebalance_up(tree, from);
}

struct ect__avl_node *
ect__avl_first(const struct ect__avl_tree *tree)
{
    return tree->root != NULL ? subtree_min(tree->root) : NULL;
}

struct ect__avl_node *
ect__avl_last(const struct ect__avl_tree *tree)
{
    return tree->root != NULL ? subtree_max(tree->root) : NULL;
}

struct ect__avl_node *
ect__avl_next(const struct ect__avl_node *node)
{
    if (node->right != NULL)
        return subtree_min(node->right);
    while (node->parent != NULL && node->parent->right == node)
        node = node->parent;
    return node->parent;
}

struct ect__avl_node *
ect__avl_prev(const struct ect__avl_node *node)
{
    if (node->left != NULL)
        return subtree_max(node->left);
    while (node->parent != NULL && node->parent->left == node)
        node = node->parent;
    return node->parent;
}

struct ect__avl_node *
ect__avl_lower_bound(const struct ect__avl_tree *tree, const struct ect__avl_node *key)
{
    struct ect__avl_node *n = tree->root, *best = NULL;
    while (n != NULL) {
        if (tree->cmp(n, key) >= 0) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

struct ect__avl_node *
ect__avl_find(const struct ect__avl_tree *tree, const struct ect__avl_node *key)
{
    struct ect__avl_node *n = ect__avl_lower_bound(tree, key);
    return n != NULL && tree->cmp(n, key) == 0 ? n : NULL;
}

/* Height of the subtree if it is a valid AVL subtree under parent, else -1;
 * counts its nodes into *count. */
static int
check_subtree(const struct ect__avl_tree *tree, const struct ect__avl_node *n,
              const struct ect__avl_node *parent, size_t *count)
{
    if (n == NULL)
        return 0;
    if (n->parent != parent)
        return -1;
    if (n->left != NULL && tree->cmp(n->left, n) >= 0)
        return -1;
    if (n->right != NULL && tree->cmp(n->right, n) <= 0)
        return -1;
    int l = check_subtree(tree, n->left, n, count);
    int r = check_subtree(tree, n->right, n, count);
    if (l < 0 || r < 0 || l - r > 1 || r - l > 1)
        return -1;
    int h = 1 + (l > r ? l : r);
    if (n->height != h)
        return -1;
    (*count)++;
    return h;
}

int
ect__avl_check(const struct ect__avl_tree *tree)
{
    size_t count = 0;
    if (check_subtree(tree, tree->root, NULL, &count) < 0 || count != tree->count)
        return -1;
    /* Local order at each node does not imply global order; walk it. */
    const struct ect__avl_node *prev = NULL;
    for (const struct ect__avl_node *n = ect__avl_first(tree); n != NULL; n = ect__avl_next(n)) {
        if (prev != NULL && tree->cmp(prev, n) >= 0)
            return -1;
        prev = n;
    }
    return 0;
}
