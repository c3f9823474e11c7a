/*
 * The string map (src/common/strmap.h): keys and values survive node reuse
 * across key lengths, a cleared map works as a new one, the spare nodes it
 * keeps never outnumber the most keys it held, churn at a steady size
 * allocates nothing (with the test hooks), and its hash is keyed per
 * process, so a peer cannot compute which keys share a bucket.
 */
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/strmap.h"
#include "ectier_build_config.h"
#include "harness.h"

/* Key i: lengths 1 .. 200, so reused nodes meet longer and shorter keys. */
static void
key_of(unsigned i, char out[256])
{
    snprintf(out, 256, "%u%.*s", i, (int)(i * 37 % 200),
             "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
             "kkkkkkk"
             "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
             "kkkkkkk"
             "kkkkkkkkkkkkkkkkkkkk");
}

/* Spare nodes never outnumber the most keys of their class held at once. */
static void
check_spares_bounded(const ect_strmap_t *m)
{
    for (size_t c = 0; c < ECT_STRMAP_CLASSES; c++)
        CHECK_MSG(m->n_spare[c] <= m->peak[c], "class %zu: %zu spare nodes, peak %zu", c,
                  m->n_spare[c], m->peak[c]);
}

static void
count_node(ect_strmap_node_t *node, void *user)
{
    (void)node;
    (*(size_t *)user)++;
}

static void
test_keys_survive_node_reuse_and_clear(void)
{
    ect_strmap_t m;
    ect__strmap_init(&m);
    char key[256];
    /* A sliding window of 50 live keys over 2000: every put after the first
     * 50 may take a removed node. */
    for (unsigned i = 0; i < 2000; i++) {
        key_of(i, key);
        CHECK_OK(ect__strmap_put(&m, key, (void *)(uintptr_t)(i + 1), NULL));
        if (i >= 50) {
            key_of(i - 50, key);
            void *v = NULL;
            CHECK(ect__strmap_remove(&m, key, &v));
            CHECK_EQ_U64((uintptr_t)v, i - 50 + 1);
        }
        check_spares_bounded(&m);
    }
    CHECK_EQ_U64(m.count, 50);
    for (unsigned i = 1950; i < 2000; i++) {
        key_of(i, key);
        ect_strmap_node_t *n = ect__strmap_find(&m, key);
        CHECK_MSG(n != NULL, "key %u lost", i);
        CHECK_STR_EQ(n->key, key);
        CHECK_EQ_U64((uintptr_t)n->value, i + 1);
    }
    key_of(1949, key);
    CHECK(ect__strmap_find(&m, key) == NULL);
    CHECK_STATUS(ect__strmap_put(&m, "1950", NULL, NULL), ECT_OK);
    CHECK_STATUS(ect__strmap_put(&m, "1950", NULL, NULL), ECT_ERR_EXISTS);

    ect__strmap_clear(&m);
    CHECK_EQ_U64(m.count, 0);
    size_t n = 0;
    ect__strmap_each(&m, count_node, &n);
    CHECK_EQ_U64(n, 0);
    key_of(1999, key);
    CHECK(ect__strmap_find(&m, key) == NULL);
    CHECK(!ect__strmap_remove(&m, key, NULL));
    for (unsigned i = 0; i < 60; i++) {
        key_of(i * 7, key);
        CHECK_OK(ect__strmap_put(&m, key, NULL, NULL));
    }
    ect__strmap_each(&m, count_node, &n);
    CHECK_EQ_U64(n, 60);
    check_spares_bounded(&m);
    ect__strmap_cleanup(&m);
}

static void
test_steady_churn_allocates_nothing(void)
{
#if !ECT_TEST_HOOKS
    SKIP("built without ECT_TEST_HOOKS: no allocation counter");
#else
    ect_strmap_t m;
    ect__strmap_init(&m);
    char key[256];
    for (unsigned i = 0; i < 400; i++) {
        key_of(i, key);
        CHECK_OK(ect__strmap_put(&m, key, NULL, NULL));
        if (i >= 20) {
            key_of(i - 20, key);
            CHECK(ect__strmap_remove(&m, key, NULL));
        }
    }
    /* Keys of the lengths seen, at the size seen, and a clear. */
    ect__alloc_reset();
    for (unsigned round = 0; round < 10; round++) {
        for (unsigned i = 0; i < 20; i++) {
            key_of(380 + i, key);
            CHECK(ect__strmap_remove(&m, key, NULL));
        }
        for (unsigned i = 0; i < 20; i++) {
            key_of(380 + i, key);
            CHECK_OK(ect__strmap_put(&m, key, NULL, NULL));
        }
        ect__strmap_clear(&m);
        for (unsigned i = 0; i < 20; i++) {
            key_of(380 + i, key);
            CHECK_OK(ect__strmap_put(&m, key, NULL, NULL));
        }
    }
    CHECK_EQ_U64(ect__alloc_count(), 0);
    ect__strmap_cleanup(&m);
#endif
}

/* The same keys hash alike within a process and differently in another:
 * a fresh process draws its own 128-bit key, and all 8 hashes agree only
 * if the two keys do (or by a chance far below that). */
static void
test_hash_is_keyed_per_process(void)
{
    char key[256];
    uint64_t mine[8];
    for (unsigned i = 0; i < 8; i++) {
        key_of(i, key);
        mine[i] = ect__strhash(key);
        CHECK_EQ_U64(ect__strhash(key), mine[i]);
    }
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* A new program, not a fork: a fork inherits the key. */
        char fd_arg[16];
        snprintf(fd_arg, sizeof(fd_arg), "%d", fds[1]);
        close(fds[0]);
        execl("/proc/self/exe", "test_strmap", "--print-hashes", fd_arg, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    uint64_t theirs[8];
    size_t got = 0;
    while (got < sizeof(theirs)) {
        ssize_t n = read(fds[0], (char *)theirs + got, sizeof(theirs) - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ_U64(got, sizeof(theirs));
    size_t same = 0;
    for (unsigned i = 0; i < 8; i++)
        same += mine[i] == theirs[i];
    CHECK_MSG(same < 8, "all 8 hashes agree across two processes: the hash is not keyed");
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_keys_survive_node_reuse_and_clear),
    ECT_CASE(test_steady_churn_allocates_nothing),
    ECT_CASE(test_hash_is_keyed_per_process),
};

int
main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--print-hashes") == 0) {
        /* test_hash_is_keyed_per_process's other process. */
        int fd = atoi(argv[2]);
        char key[256];
        uint64_t h[8];
        for (unsigned i = 0; i < 8; i++) {
            key_of(i, key);
            h[i] = ect__strhash(key);
        }
        return write(fd, h, sizeof(h)) == (ssize_t)sizeof(h) ? 0 : 1;
    }
    return ECT_TEST_MAIN(argc, argv, cases);
}
