/* The intrusive AVL tree (src/common/avl.c) against a sorted-array model. */
#include <stdint.h>

#include "common/avl.h"
#include "harness.h"
#include "support/util.h"

struct item {
    struct ect__avl_node node;
    uint64_t key;
    int in_tree;
};

#define ITEM(n) ect__avl_entry((n), struct item, node)

static int
cmp_item(const struct ect__avl_node *a, const struct ect__avl_node *b)
{
    uint64_t x = ITEM(a)->key, y = ITEM(b)->key;
    return x < y ? -1 : x > y;
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t
rng(void)
{
    return ts_xorshift64(&rng_state);
}

static void
test_empty_tree_has_no_first_last_or_lower_bound(void)
{
    struct ect__avl_tree t;
    ect__avl_init(&t, cmp_item);
    struct item probe = {.key = 5};
    CHECK(ect__avl_first(&t) == NULL);
    CHECK(ect__avl_last(&t) == NULL);
    CHECK(ect__avl_lower_bound(&t, &probe.node) == NULL);
    CHECK(ect__avl_find(&t, &probe.node) == NULL);
    CHECK_EQ_INT(ect__avl_check(&t), 0);
}

static void
test_ascending_inserts_stay_balanced(void)
{
    enum { N = 4096 };
    static struct item items[N];
    struct ect__avl_tree t;
    ect__avl_init(&t, cmp_item);
    for (int i = 0; i < N; i++) {
        items[i].key = (uint64_t)i;
        ect__avl_insert(&t, &items[i].node);
    }
    CHECK_EQ_INT(ect__avl_check(&t), 0);
    /* An AVL tree of 4096 nodes is at most 1.44 log2(n) high: 17. */
    CHECK(t.root->height <= 17);
    CHECK_EQ_U64(t.count, N);
    int i = 0;
    for (struct ect__avl_node *n = ect__avl_first(&t); n != NULL; n = ect__avl_next(n), i++)
        CHECK_EQ_U64(ITEM(n)->key, (uint64_t)i);
    CHECK_EQ_INT(i, N);
    i = N - 1;
    for (struct ect__avl_node *n = ect__avl_last(&t); n != NULL; n = ect__avl_prev(n), i--)
        CHECK_EQ_U64(ITEM(n)->key, (uint64_t)i);
    CHECK_EQ_INT(i, -1);
}

static void
test_random_inserts_and_removes_match_a_model(void)
{
    enum { N = 512, OPS = 20000 };
    static struct item items[N];
    struct ect__avl_tree t;
    ect__avl_init(&t, cmp_item);
    /* Even keys only, so probes at odd keys test lower_bound between keys. */
    for (int i = 0; i < N; i++)
        items[i].key = 2 * (uint64_t)i;
    size_t in = 0;
    for (int op = 0; op < OPS; op++) {
        struct item *it = &items[rng() % N];
        if (it->in_tree) {
            ect__avl_remove(&t, &it->node);
            it->in_tree = 0;
            in--;
        } else {
            ect__avl_insert(&t, &it->node);
            it->in_tree = 1;
            in++;
        }
        if (op % 16 == 0)
            CHECK_MSG(ect__avl_check(&t) == 0, "tree invalid after op %d", op);
        CHECK_EQ_U64(t.count, in);
        /* lower_bound of a random probe is the smallest present key >= it. */
        struct item probe = {.key = rng() % (2 * N + 2)};
        struct ect__avl_node *lb = ect__avl_lower_bound(&t, &probe.node);
        uint64_t want = UINT64_MAX;
        for (int i = 0; i < N; i++)
            if (items[i].in_tree && items[i].key >= probe.key && items[i].key < want)
                want = items[i].key;
        if (want == UINT64_MAX)
            CHECK(lb == NULL);
        else
            CHECK(lb != NULL && ITEM(lb)->key == want);
        struct ect__avl_node *f = ect__avl_find(&t, &probe.node);
        CHECK((f != NULL) == (want == probe.key));
    }
    CHECK_EQ_INT(ect__avl_check(&t), 0);
}

static void
test_removing_root_with_two_children_relinks_successor(void)
{
    struct item items[7];
    struct ect__avl_tree t;
    ect__avl_init(&t, cmp_item);
    uint64_t keys[7] = {40, 20, 60, 10, 30, 50, 70};
    for (int i = 0; i < 7; i++) {
        items[i].key = keys[i];
        ect__avl_insert(&t, &items[i].node);
    }
    CHECK(ITEM(t.root)->key == 40);
    ect__avl_remove(&t, t.root);
    CHECK_EQ_INT(ect__avl_check(&t), 0);
    CHECK_EQ_U64(ITEM(t.root)->key, 50); /* the successor took its place */
    CHECK(items[1].node.left != NULL && items[1].node.right != NULL);
    ect__avl_remove(&t, &items[1].node); /* 20: two children, successor 30 is its child */
    CHECK_EQ_INT(ect__avl_check(&t), 0);
    uint64_t want[] = {10, 30, 50, 60, 70};
    int i = 0;
    for (struct ect__avl_node *n = ect__avl_first(&t); n != NULL; n = ect__avl_next(n))
        CHECK_EQ_U64(ITEM(n)->key, want[i++]);
    CHECK_EQ_INT(i, 5);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_empty_tree_has_no_first_last_or_lower_bound),
    ECT_CASE(test_ascending_inserts_stay_balanced),
    ECT_CASE(test_random_inserts_and_removes_match_a_model),
    ECT_CASE(test_removing_root_with_two_children_relinks_successor),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
