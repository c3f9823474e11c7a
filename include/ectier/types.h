/*
 * Small value types shared by several ectier objects.
 */
#ifndef ECTIER_TYPES_H
#define ECTIER_TYPES_H

#include <stdint.h>

#include <ectier/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Free memory that ectier handed to the caller: the texts and byte buffers
 * of the *_json and *_bytes functions, request ids, error details.  Only
 * for pointers ectier documents as "caller frees with ect_free" (they may
 * come from another allocator than the caller's free()).  NULL is a no-op.
 * Thread safety: safe. */
ECT_API void ect_free(void *ptr);

/* Longest identifier the engine hands in (feature identifier = cache key,
 * mm_hash, request id), in bytes without the NUL.  The one limit: the
 * scheduler refuses anything longer where it enters, with a message naming
 * the field, so no deeper layer ever cuts one. */
#define ECT_KEY_MAX 1024

/* A run of consecutive block ids of the region: first, first+1, ...,
 * first+count-1.  An entry's blocks are a list of runs, ascending by first. */
typedef struct ect_run {
    uint64_t first;
    uint64_t count;
} ect_run_t;

/* What a producer answers a read request (SPEC §8.1); the values are the
 * wire values.  The one definition: the wire codec, the metrics (counts by
 * status) and the tests all use it. */
typedef enum ect_xfer_status {
    ECT_XFER_OK = 0,
    ECT_XFER_NACK_MISSING = 1,   /* the producer no longer holds the encoding */
    ECT_XFER_NACK_INCOMPAT = 2,  /* compatibility hash mismatch */
    ECT_XFER_NACK_VERSION = 3,   /* connector version mismatch */
    ECT_XFER_NACK_INTERNAL = 4,  /* the producer hit an unexpected error */
    ECT_XFER_NACK_NOT_READY = 5, /* announced, but the save has not landed yet (or busy) */
} ect_xfer_status_t;

/* How many statuses there are (arrays by status have this many slots). */
#define ECT_XFER_STATUS_COUNT 6

/* "ok", "nack_missing", "nack_incompat", "nack_version", "nack_internal",
 * "nack_not_ready"; "unknown" for any other value.  Never NULL; thread-safe. */
ECT_API const char *ect_xfer_status_str(int status);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_TYPES_H */
