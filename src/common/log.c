/*
 * The log sink and threshold.
 *
 * The threshold is an int read with relaxed atomics on every log call (the
 * macros test it before formatting).  The sink and its user pointer are
 * swapped under a mutex; emitting a line takes the mutex too, so a sink never
 * sees interleaved calls from two threads.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "common/error.h"

int ect__log_threshold = ECT_LOG_WARN;

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static ect_log_sink_fn sink_fn;
static void *sink_user;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

const char *
ect_log_level_str(ect_log_level_t level)
{
    if ((int)level < 0 || (int)level > ECT_LOG_TRACE)
        return "?";
    return level_names[level];
}

ect_status_t
ect_log_level_parse(const char *text, ect_log_level_t *level_p)
{
    if (text == NULL || level_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "log level: NULL argument");
    for (int i = 0; i <= ECT_LOG_TRACE; i++) {
        if (strcasecmp(text, level_names[i]) == 0) {
            *level_p = (ect_log_level_t)i;
            return ECT_OK;
        }
    }
    if (strcasecmp(text, "warning") == 0) {
        *level_p = ECT_LOG_WARN;
        return ECT_OK;
    }
    return ect__error(ECT_ERR_INVALID_ARG,
                      "log level '%s' is not one of error, warn, info, debug, trace", text);
}

static void
init_from_env(void)
{
    const char *env = getenv("ECTIER_LOG_LEVEL");
    ect_log_level_t level;
    if (env != NULL && *env != '\0') {
        if (ect_log_level_parse(env, &level) == ECT_OK)
            __atomic_store_n(&ect__log_threshold, (int)level, __ATOMIC_RELAXED);
        else
            fprintf(stderr, "ectier warn: ECTIER_LOG_LEVEL '%s' ignored: not a log level\n", env);
        ect_clear_error();
    }
}

void
ect__log_init_once(void)
{
    pthread_once(&init_once, init_from_env);
}

void
ect_log_set_sink(ect_log_sink_fn sink, void *user)
{
    pthread_mutex_lock(&sink_lock);
    sink_fn = sink;
    sink_user = user;
    pthread_mutex_unlock(&sink_lock);
}

void
ect_log_set_level(ect_log_level_t level)
{
    ect__log_init_once();
    if ((int)level < ECT_LOG_ERROR)
        level = ECT_LOG_ERROR;
    if ((int)level > ECT_LOG_TRACE)
        level = ECT_LOG_TRACE;
    __atomic_store_n(&ect__log_threshold, (int)level, __ATOMIC_RELAXED);
}

ect_log_level_t
ect_log_get_level(void)
{
    ect__log_init_once();
    return (ect_log_level_t)__atomic_load_n(&ect__log_threshold, __ATOMIC_RELAXED);
}

void
ect__log(ect_log_level_t level, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&sink_lock);
    if (sink_fn != NULL)
        sink_fn(level, line, sink_user);
    else
        fprintf(stderr, "ectier %s: %s\n", ect_log_level_str(level), line);
    pthread_mutex_unlock(&sink_lock);
}

void
ect__log_last_error(ect_log_level_t level, const char *what)
{
    ECT__LOG(level, "%s: %s", what, ect_last_error());
}
