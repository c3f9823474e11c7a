/*
 * Status strings and the thread-local last-error message.
 *
 * The message buffer is thread-local and fixed-size, so setting an error
 * never allocates and never fails; long messages are truncated.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <ectier/types.h>

#include "common/error.h"

#define ECT_ERROR_MSG_MAX 1024

static _Thread_local char last_error[ECT_ERROR_MSG_MAX];

const char *
ect_status_str(ect_status_t status)
{
    switch (status) {
    case ECT_OK:
        return "ok";
    case ECT_ERR_INVALID_ARG:
        return "invalid argument";
    case ECT_ERR_NO_MEMORY:
        return "out of memory";
    case ECT_ERR_CONFIG:
        return "invalid configuration";
    case ECT_ERR_IO:
        return "system call failed";
    case ECT_ERR_NOT_FOUND:
        return "not found";
    case ECT_ERR_EXISTS:
        return "already exists";
    case ECT_ERR_NO_SPACE:
        return "no space";
    case ECT_ERR_STATE:
        return "wrong state";
    case ECT_ERR_INCOMPATIBLE:
        return "incompatible";
    case ECT_ERR_UNSUPPORTED:
        return "not supported";
    case ECT_ERR_PARSE:
        return "malformed input";
    case ECT_ERR_TIMEOUT:
        return "timed out";
    case ECT_ERR_BUSY:
        return "busy";
    case ECT_ERR_TRANSPORT:
        return "transport failure";
    case ECT_ERR_PEER:
        return "peer error";
    case ECT_ERR_CUDA:
        return "cuda error";
    case ECT_ERR_OVERFLOW:
        return "out of range";
    case ECT_ERR_SHUTDOWN:
        return "shut down";
    case ECT_ERR_INTERNAL:
        return "internal error";
    }
    return "unknown status";
}

const char *
ect_last_error(void)
{
    return last_error;
}

void
ect_clear_error(void)
{
    last_error[0] = '\0';
}

static void
set_message(const char *fmt, va_list ap, const char *suffix)
{
    char tmp[ECT_ERROR_MSG_MAX];
    /* Format into a temporary first: an argument may point into last_error. */
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    size_t len = strlen(tmp);
    if (suffix != NULL) {
        /* Truncation is fine here: the message is for humans. */
        int n = snprintf(tmp + len, sizeof(tmp) - len, ": %s", suffix);
        (void)n;
        len = strlen(tmp);
    }
    /* The message's bytes only: copying the whole buffer would touch 32
     * cache lines for a short message. */
    memcpy(last_error, tmp, len + 1);
}

void
ect__error_set(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_message(fmt, ap, NULL);
    va_end(ap);
}

void
ect__error_set_errno(const char *fmt, ...)
{
    int saved = errno;
    char errbuf[256];
    const char *text = strerror_r(saved, errbuf, sizeof(errbuf));
    va_list ap;
    va_start(ap, fmt);
    set_message(fmt, ap, text);
    va_end(ap);
    errno = saved;
}

const char *
ect_xfer_status_str(int status)
{
    static const char *const names[ECT_XFER_STATUS_COUNT] = {
        [ECT_XFER_OK] = "ok",
        [ECT_XFER_NACK_MISSING] = "nack_missing",
        [ECT_XFER_NACK_INCOMPAT] = "nack_incompat",
        [ECT_XFER_NACK_VERSION] = "nack_version",
        [ECT_XFER_NACK_INTERNAL] = "nack_internal",
        [ECT_XFER_NACK_NOT_READY] = "nack_not_ready",
    };
    return status >= 0 && status < ECT_XFER_STATUS_COUNT ? names[status] : "unknown";
}
