/* The library's thread start (src/common/thread.c): signals blocked on the
 * new thread, the caller's mask untouched, the name set and cut to fit. */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "common/thread.h"
#include "harness.h"

struct seen {
    sigset_t mask;
    char name[32];
};

static void *
record(void *arg)
{
    struct seen *s = arg;
    pthread_sigmask(SIG_BLOCK, NULL, &s->mask);
    pthread_getname_np(pthread_self(), s->name, sizeof(s->name));
    return NULL;
}

static void
test_a_started_thread_blocks_every_signal_and_is_named(void)
{
    sigset_t before, after;
    pthread_sigmask(SIG_BLOCK, NULL, &before);
    CHECK(!sigismember(&before, SIGUSR1)); /* the test runs with it open */
    struct seen s;
    memset(&s, 0, sizeof(s));
    pthread_t t;
    CHECK_OK(ect__thread_start(&t, record, &s, "ect-test"));
    CHECK_EQ_INT(pthread_join(t, NULL), 0);
    CHECK(sigismember(&s.mask, SIGINT));
    CHECK(sigismember(&s.mask, SIGTERM));
    CHECK(sigismember(&s.mask, SIGUSR1));
    CHECK_STR_EQ(s.name, "ect-test");
    pthread_sigmask(SIG_BLOCK, NULL, &after);
    CHECK(!sigismember(&after, SIGUSR1)); /* the caller's mask is back */
}

static void
test_a_long_name_is_cut_to_what_the_kernel_keeps(void)
{
    struct seen s;
    memset(&s, 0, sizeof(s));
    pthread_t t;
    CHECK_OK(ect__thread_start(&t, record, &s, "ect-a-name-longer-than-fifteen"));
    CHECK_EQ_INT(pthread_join(t, NULL), 0);
    CHECK_STR_EQ(s.name, "ect-a-name-long");
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_a_started_thread_blocks_every_signal_and_is_named),
    ECT_CASE(test_a_long_name_is_cut_to_what_the_kernel_keeps),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
