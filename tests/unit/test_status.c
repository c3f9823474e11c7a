/* Status strings, the thread-local last-error message and the log sink. */
#include <errno.h>
#include <pthread.h>

#include <ectier/ectier.h>

#include "common/error.h"
#include "harness.h"

static void
test_every_status_has_a_distinct_string(void)
{
    const char *seen[32] = {0};
    for (int s = 0; s >= ECT_ERR_INTERNAL; s--) {
        const char *text = ect_status_str((ect_status_t)s);
        CHECK(text != NULL && *text != '\0');
        CHECK_MSG(strcmp(text, "unknown status") != 0, "status %d has no string", s);
        for (int j = 0; j < -s; j++)
            CHECK_MSG(strcmp(seen[j], text) != 0, "statuses %d and %d share '%s'", -j, s, text);
        seen[-s] = text;
    }
    CHECK_STR_EQ(ect_status_str((ect_status_t)-999), "unknown status");
}

static void
test_error_sets_message_and_returns_status(void)
{
    CHECK_STR_EQ(ect_last_error(), "");
    ect_status_t s = ect__error(ECT_ERR_CONFIG, "key '%s' value %d", "ec_role", 7);
    CHECK_EQ_INT(s, ECT_ERR_CONFIG);
    CHECK_STR_EQ(ect_last_error(), "key 'ec_role' value 7");
    ect_clear_error();
    CHECK_STR_EQ(ect_last_error(), "");
}

static void
test_error_message_may_quote_previous_message(void)
{
    ect__error(ECT_ERR_IO, "inner");
    ect__error(ECT_ERR_IO, "outer: %s", ect_last_error());
    CHECK_STR_EQ(ect_last_error(), "outer: inner");
}

static void
test_error_errno_appends_strerror(void)
{
    errno = ENOENT;
    ect__error_errno(ECT_ERR_IO, "open %s", "/nope");
    CHECK_CONTAINS(ect_last_error(), "open /nope: ");
    CHECK_CONTAINS(ect_last_error(), "No such file");
}

static void
test_long_message_is_truncated_not_overflowed(void)
{
    char big[4000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ect__error(ECT_ERR_IO, "%s", big);
    CHECK(strlen(ect_last_error()) < sizeof(big));
    CHECK(strlen(ect_last_error()) > 500);
    /* Only the message's bytes are copied: a short one after the long one
     * reads exactly as written, and so does a truncated one with a suffix. */
    ect__error(ECT_ERR_IO, "short");
    CHECK_STR_EQ(ect_last_error(), "short");
    errno = ENOENT;
    ect__error_errno(ECT_ERR_IO, "%s", big);
    size_t len = strlen(ect_last_error());
    CHECK(len > 500 && len < sizeof(big));
    ect__error_errno(ECT_ERR_IO, "open");
    CHECK(strncmp(ect_last_error(), "open: ", 6) == 0);
    CHECK(strchr(ect_last_error(), 'x') == NULL);
}

static void *
thread_sets_error(void *arg)
{
    (void)arg;
    ect__error(ECT_ERR_TIMEOUT, "from the other thread");
    return NULL;
}

static void
test_last_error_is_per_thread(void)
{
    ect__error(ECT_ERR_IO, "mine");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_sets_error, NULL) == 0);
    pthread_join(t, NULL);
    CHECK_STR_EQ(ect_last_error(), "mine");
}

struct captured {
    int calls;
    ect_log_level_t level;
    char line[256];
};

static void
capture_sink(ect_log_level_t level, const char *message, void *user)
{
    struct captured *c = user;
    c->calls++;
    c->level = level;
    snprintf(c->line, sizeof(c->line), "%s", message);
}

static int format_calls;

static const char *
counted(void)
{
    format_calls++;
    return "x";
}

static void
test_log_sink_receives_lines_at_or_below_threshold(void)
{
    struct captured c = {0};
    ect_log_set_sink(capture_sink, &c);
    ect_log_set_level(ECT_LOG_WARN);
    ECT_LOG_W("region %s: %d", "r0", 3);
    CHECK_EQ_INT(c.calls, 1);
    CHECK_EQ_INT(c.level, ECT_LOG_WARN);
    CHECK_STR_EQ(c.line, "region r0: 3");
    /* Above the threshold: dropped before any argument is formatted. */
    format_calls = 0;
    ECT_LOG_D("%s", counted());
    CHECK_EQ_INT(c.calls, 1);
    CHECK_EQ_INT(format_calls, 0);
    ect_log_set_level(ECT_LOG_DEBUG);
    ECT_LOG_D("%s", counted());
    CHECK_EQ_INT(c.calls, 2);
    CHECK_EQ_INT(format_calls, 1);
    ect_log_set_sink(NULL, NULL);
}

static void
test_log_level_parse(void)
{
    ect_log_level_t l;
    CHECK_OK(ect_log_level_parse("DEBUG", &l));
    CHECK_EQ_INT(l, ECT_LOG_DEBUG);
    CHECK_OK(ect_log_level_parse("warning", &l));
    CHECK_EQ_INT(l, ECT_LOG_WARN);
    l = ECT_LOG_TRACE;
    CHECK_STATUS(ect_log_level_parse("loud", &l), ECT_ERR_INVALID_ARG);
    CHECK_EQ_INT(l, ECT_LOG_TRACE); /* output untouched on error */
    CHECK_CONTAINS(ect_last_error(), "'loud'");
}

static void
test_log_level_from_environment(void)
{
    setenv("ECTIER_LOG_LEVEL", "info", 1);
    /* First use in this (forked) process reads the environment. */
    CHECK_EQ_INT(ect_log_get_level(), ECT_LOG_INFO);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_every_status_has_a_distinct_string),
    ECT_CASE(test_error_sets_message_and_returns_status),
    ECT_CASE(test_error_message_may_quote_previous_message),
    ECT_CASE(test_error_errno_appends_strerror),
    ECT_CASE(test_long_message_is_truncated_not_overflowed),
    ECT_CASE(test_last_error_is_per_thread),
    ECT_CASE(test_log_sink_receives_lines_at_or_below_threshold),
    ECT_CASE(test_log_level_parse),
    ECT_CASE(test_log_level_from_environment),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
