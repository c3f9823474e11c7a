/*
 * ectier logging: levels and a pluggable sink.
 *
 * The library never prints on its own except through the sink.  The default
 * sink writes "ectier <level>: <message>" lines to stderr at ECT_LOG_WARN and
 * above; ECTIER_LOG_LEVEL (error|warn|info|debug|trace) changes the default
 * threshold at first use.  Messages are formatted only when their level passes
 * the threshold.
 */
#ifndef ECTIER_LOG_H
#define ECTIER_LOG_H

#include <ectier/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ect_log_level {
    ECT_LOG_ERROR = 0,
    ECT_LOG_WARN = 1,
    ECT_LOG_INFO = 2,
    ECT_LOG_DEBUG = 3,
    ECT_LOG_TRACE = 4,
} ect_log_level_t;

/* A log sink receives the level and a formatted, NUL-terminated line without
 * a trailing newline.  It may be called from any ectier thread, concurrently. */
typedef void (*ect_log_sink_fn)(ect_log_level_t level, const char *message, void *user);

/* Route log lines to sink (NULL restores the stderr sink).  user is borrowed
 * and passed back on each call.  Thread safety: safe, but lines already being
 * formatted may still reach the old sink. */
ECT_API void ect_log_set_sink(ect_log_sink_fn sink, void *user);

/* Set the threshold: lines above level are dropped before formatting. */
ECT_API void ect_log_set_level(ect_log_level_t level);

/* The current threshold. */
ECT_API ect_log_level_t ect_log_get_level(void);

/* Parse "error|warn|info|debug|trace" (case-insensitive) into *level_p.
 * Returns ECT_OK or ECT_ERR_INVALID_ARG (with a message naming the text). */
ECT_API ECT_MUST_CHECK ect_status_t ect_log_level_parse(const char *text, ect_log_level_t *level_p);

/* Lower-case name of a level ("warn"). */
ECT_API const char *ect_log_level_str(ect_log_level_t level);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_LOG_H */
