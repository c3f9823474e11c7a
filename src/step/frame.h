/*
 * The framing that step metadata (step/meta.c) and worker reports
 * (step/report.c) share: one home for the frame header, the layout version
 * and the key rules of both encodings.
 *
 * Frame: magic (4 bytes), layout version u32, body length u64, body; every
 * integer little-endian.  A key on the wire is key_len u32 then its bytes
 * (1..ECT_KEY_MAX, no NUL).
 *   meta body:   n_saves u32, n_loads u32, then per item:
 *                key_len u32, key bytes, [transfer_id u64: loads only],
 *                n_runs u32, n_runs x (first u64, count u64)
 *   report body: n_saves u32, n_loads u32, n_failed u32, six u64 stats,
 *                then n_saves x (key_len u32, key bytes), n_loads x
 *                transfer_id u64, n_failed x (key_len u32, key bytes)
 *
 * Thread safety: none needed (no state).
 */
#ifndef ECT_STEP_FRAME_H
#define ECT_STEP_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

#include "common/bytes.h"

#define ECT__STEP_META_MAGIC     "ECTM"
#define ECT__STEP_REPORT_MAGIC   "ECTR"
#define ECT__STEP_FRAME_HEADER   16u /* magic, version, body length */
#define ECT__STEP_LAYOUT_VERSION 1u

/* A key of len bytes (the caller measured it with strnlen up to
 * ECT_KEY_MAX + 1) that a value may hold: ECT_OK, or ECT_ERR_INVALID_ARG
 * saying why, prefixed by what. */
ect_status_t ect__step_check_key(const char *what, const char *key, size_t len);

/* Write a frame header for a body of body_len bytes (w has room). */
void ect__step_put_frame_header(ect_bytes_writer_t *w, const char *magic, uint64_t body_len);

/* Read a frame header with this magic; on ECT_OK *body_p covers the body
 * and r has moved past it, to where a following frame would start.  Else
 * ECT_ERR_PARSE, prefixed by what. */
ect_status_t ect__step_read_frame(ect_bytes_reader_t *r, const char *magic, const char *what,
                                  ect_bytes_reader_t *body_p);

/* Read a key into buf (ECT_KEY_MAX + 1 bytes, NUL-terminated on ECT_OK);
 * ECT_ERR_PARSE, prefixed by what, for a truncated or invalid key. */
ect_status_t ect__step_read_key(ect_bytes_reader_t *r, const char *what, char *buf);

#endif /* ECT_STEP_FRAME_H */
