/* The fixed-size object pool (src/common/pool.c). */
#include <stdint.h>

#include "common/pool.h"
#include "harness.h"

static void
test_pool_reuses_the_last_object_put(void)
{
    struct ect__pool p;
    ect__pool_init(&p, 40);
    void *a = ect__pool_get(&p), *b = ect__pool_get(&p);
    CHECK(a != NULL && b != NULL && a != b);
    CHECK_EQ_U64((uintptr_t)a % 16, 0);
    CHECK_EQ_U64((uintptr_t)b % 16, 0);
    ect__pool_put(&p, a);
    CHECK(ect__pool_get(&p) == a); /* LIFO: the object freed last, still cached */
    ect__pool_put(&p, b);
    ect__pool_put(&p, a);
    ect__pool_cleanup(&p);
}

static void
test_pool_reserve_then_get_never_grows(void)
{
    struct ect__pool p;
    ect__pool_init(&p, 192);
    CHECK_OK(ect__pool_reserve(&p, 100));
    CHECK(p.n_free >= 100);
    size_t free_before = p.n_free;
    for (int i = 0; i < 100; i++)
        CHECK(ect__pool_get(&p) != NULL);
    CHECK_EQ_U64(p.n_free, free_before - 100);
    ect__pool_cleanup(&p);
}

static void
test_pool_grows_into_huge_chunks_with_distinct_objects(void)
{
    /* 40000 objects of 192 bytes: 7.3 MiB, past the 2 MiB mapped chunks. */
    enum { N = 40000 };
    struct ect__pool p;
    ect__pool_init(&p, 192);
    static unsigned char *objs[N];
    for (int i = 0; i < N; i++) {
        objs[i] = ect__pool_get(&p);
        CHECK(objs[i] != NULL);
        memset(objs[i], (unsigned char)i, 192); /* every byte writable */
    }
    for (int i = 0; i < N; i++)
        CHECK_MSG(objs[i][0] == (unsigned char)i && objs[i][191] == (unsigned char)i,
                  "object %d overlaps another", i);
    /* The newest chunk, first on the list, is a mapped one: a huge page. */
    CHECK_EQ_U64((uintptr_t)p.chunks % ((uintptr_t)2 << 20), 0);
    for (int i = 0; i < N; i++)
        ect__pool_put(&p, objs[i]);
    CHECK_EQ_U64(p.n_free >= N, 1);
    ect__pool_cleanup(&p);
    CHECK(p.chunks == NULL);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_pool_reuses_the_last_object_put),
    ECT_CASE(test_pool_reserve_then_get_never_grows),
    ECT_CASE(test_pool_grows_into_huge_chunks_with_distinct_objects),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
