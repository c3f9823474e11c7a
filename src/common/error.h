/*
 * Internal error and logging helpers shared by every module.
 *
 * ect__error(status, fmt, ...) records the detail message on the calling
 * thread and returns status, so a failure path reads
 *     return ect__error(ECT_ERR_CONFIG, "ec_role '%s' is not one of ...", v);
 * ect__error_errno() appends strerror(errno).  The log macros check the
 * threshold before formatting anything.
 */
#ifndef ECT_COMMON_ERROR_H
#define ECT_COMMON_ERROR_H

#include <ectier/log.h>
#include <ectier/status.h>

#if defined(__GNUC__)
#define ECT_PRINTF(a, b) __attribute__((format(printf, a, b)))
/* A function called only on failure or to log: the compiler takes every
 * branch that leads to a call of it as unlikely and moves that code out of
 * the function's hot part, so the lines a step runs stay few and dense (a
 * step's own state and code are out of the CPU caches after a large copy). */
#define ECT_COLD __attribute__((cold))
#else
#define ECT_PRINTF(a, b)
#define ECT_COLD
#endif

/* Set the thread's last-error message; through the macros below. */
void ect__error_set(const char *fmt, ...) ECT_PRINTF(1, 2) ECT_COLD;
/* The same with ": <strerror(errno)>" appended (errno read on entry). */
void ect__error_set_errno(const char *fmt, ...) ECT_PRINTF(1, 2) ECT_COLD;

/* Set the thread's last-error message and evaluate to status (once).  The
 * status is the call site's own expression, not a function's return value,
 * so the compiler knows a failure path returns a failure: out-parameters a
 * callee sets only on success are not "maybe uninitialized" after
 * `if (st != ECT_OK) return st;` in optimised builds. */
#define ect__error(status, ...)                                                                    \
    __extension__({                                                                                \
        ect_status_t ect_error_status_ = (status);                                                 \
        ect__error_set(__VA_ARGS__);                                                               \
        ect_error_status_;                                                                         \
    })

/* Like ect__error, with ": <strerror(errno)>" appended (errno read before
 * anything else is called). */
#define ect__error_errno(status, ...)                                                              \
    __extension__({                                                                                \
        ect_status_t ect_error_status_ = (status);                                                 \
        ect__error_set_errno(__VA_ARGS__);                                                         \
        ect_error_status_;                                                                         \
    })

/* Format and send one line to the sink; call through the macros below. */
void ect__log(ect_log_level_t level, const char *fmt, ...) ECT_PRINTF(2, 3) ECT_COLD;

/* The threshold as a plain load, for the macros' fast check. */
extern int ect__log_threshold;
void ect__log_init_once(void);

#define ECT__LOG(lvl, ...)                                                                         \
    do {                                                                                           \
        ect__log_init_once();                                                                      \
        if ((int)(lvl) <= __atomic_load_n(&ect__log_threshold, __ATOMIC_RELAXED))                  \
            ect__log((lvl), __VA_ARGS__);                                                          \
    } while (0)

#define ECT_LOG_E(...) ECT__LOG(ECT_LOG_ERROR, __VA_ARGS__)
#define ECT_LOG_W(...) ECT__LOG(ECT_LOG_WARN, __VA_ARGS__)
#define ECT_LOG_I(...) ECT__LOG(ECT_LOG_INFO, __VA_ARGS__)
#define ECT_LOG_D(...) ECT__LOG(ECT_LOG_DEBUG, __VA_ARGS__)
#define ECT_LOG_T(...) ECT__LOG(ECT_LOG_TRACE, __VA_ARGS__)

/* Log the current last-error message at level with a prefix ("region: ..."). */
void ect__log_last_error(ect_log_level_t level, const char *what) ECT_COLD;

/* For a call on a path that cannot report a failure to its caller (cleanup,
 * giving back what a failed operation took): if status is not ECT_OK, log
 * the last error at ERROR with the prefix what.  Every such call goes
 * through here, so none drops a status unseen. */
static inline void
ect__log_failure(ect_status_t status, const char *what)
{
    if (status != ECT_OK)
        ect__log_last_error(ECT_LOG_ERROR, what);
}

#endif /* ECT_COMMON_ERROR_H */
