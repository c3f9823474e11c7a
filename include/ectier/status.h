/*
 * ectier status codes and the thread-local last-error message.
 *
 * Every fallible ectier function returns an ect_status_t.  ECT_OK is zero and
 * every error is negative; values are never renumbered, so they may be stored
 * or sent across processes.  The human detail of the most recent error on the
 * calling thread ("ec_cpu_bytes must be specified ...") is kept separately and
 * read with ect_last_error().
 */
#ifndef ECTIER_STATUS_H
#define ECTIER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ECT_API __attribute__((visibility("default")))
#else
#define ECT_API
#endif

/* Marks every public function that returns an ect_status_t: a caller that
 * ignores the status gets a compiler warning (a failed call changes nothing,
 * so an unchecked one hides a lost save, load or setting). */
#if defined(__GNUC__)
#define ECT_MUST_CHECK __attribute__((warn_unused_result))
#else
#define ECT_MUST_CHECK
#endif

typedef enum ect_status {
    ECT_OK = 0,
    ECT_ERR_INVALID_ARG = -1,  /* a caller passed a bad argument */
    ECT_ERR_NO_MEMORY = -2,    /* an allocation failed */
    ECT_ERR_CONFIG = -3,       /* a configuration value is missing or invalid */
    ECT_ERR_IO = -4,           /* a system call failed */
    ECT_ERR_NOT_FOUND = -5,    /* no such key, entry, file or peer */
    ECT_ERR_EXISTS = -6,       /* the key or object already exists */
    ECT_ERR_NO_SPACE = -7,     /* not enough free or evictable space */
    ECT_ERR_STATE = -8,        /* the object is in the wrong state for this call */
    ECT_ERR_INCOMPATIBLE = -9, /* geometry, layout or version mismatch */
    ECT_ERR_UNSUPPORTED = -10, /* the feature is not built in or not available */
    ECT_ERR_PARSE = -11,       /* malformed bytes, JSON or text */
    ECT_ERR_TIMEOUT = -12,     /* a deadline passed */
    ECT_ERR_BUSY = -13,        /* in use; try again later */
    ECT_ERR_TRANSPORT = -14,   /* the data or control transport failed */
    ECT_ERR_PEER = -15,        /* the peer refused or misbehaved */
    ECT_ERR_CUDA = -16,        /* a CUDA call failed */
    ECT_ERR_OVERFLOW = -17,    /* a size or count is out of range */
    ECT_ERR_SHUTDOWN = -18,    /* the object was shut down */
    ECT_ERR_INTERNAL = -19,    /* an internal invariant failed */
} ect_status_t;

/* Short constant text for a status ("invalid argument"); never NULL.
 * Thread safety: safe. */
ECT_API const char *ect_status_str(ect_status_t status);

/* The detail message of the last error set on the calling thread, or "" if
 * none.  The pointer stays valid until the next ectier call on this thread.
 * Thread safety: per thread. */
ECT_API const char *ect_last_error(void);

/* Clear the calling thread's last-error message. */
ECT_API void ect_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_STATUS_H */
