/*
 * Per-step values that cross between the scheduler side and the worker side
 * (SPEC §1.2, §6), and their byte encoding.
 *
 * The engine ships these between its processes: the scheduler builds a step
 * metadata value once per step (saves: key -> blocks; loads: key ->
 * (transfer id, blocks)), encodes it, and every worker rank decodes it; each
 * worker builds a report (completed saves by key, completed loads by transfer
 * id, saves that failed by key, copy statistics), encodes it, and the
 * scheduler decodes the reports of
 * all ranks.  Nothing in them is a pointer into another process.
 *
 * Blocks are given as runs of consecutive block ids, ascending, never
 * overlapping (within an item or across the items of one value).
 *
 * Encoding: little-endian, framed ("ECTM"/"ECTR" magic, layout version, body
 * length), so reports of several ranks may simply be concatenated and decoded
 * as one.  Decoding validates everything (lengths, counts, key bytes, block
 * ranges against the region's block count) and never trusts a count before
 * checking it against the bytes that remain.
 *
 * Thread safety: a value is not synchronised; use one from one thread at a
 * time.  Distinct values are independent.
 */
#ifndef ECTIER_STEP_H
#define ECTIER_STEP_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>
#include <ectier/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One save or load of a step.  Everything is owned by the value it came
 * from and valid until that value is destroyed. */
typedef struct ect_step_item {
    const char *key;       /* NUL-terminated */
    uint64_t transfer_id;  /* loads only; 0 for saves */
    uint64_t n_blocks;     /* sum of the runs' counts */
    const ect_run_t *runs; /* ascending, non-overlapping */
    size_t n_runs;
} ect_step_item_t;

typedef struct ect_step_meta ect_step_meta_t;

/* An empty step metadata value.  Returns ECT_OK or ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_meta_create(ect_step_meta_t **meta_p);

/* NULL is a no-op. */
ECT_API void ect_step_meta_destroy(ect_step_meta_t *meta);

/* Remove every item, keeping the value's memory for the next items (a
 * value reused step after step allocates only while it grows past its
 * largest step).  Items handed out before are invalid afterwards.  NULL is
 * a no-op. */
ECT_API void ect_step_meta_clear(ect_step_meta_t *meta);

/* Append a save / load.  key and runs are copied.  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG (empty or over-long key, a run of zero blocks, runs
 * not ascending or overlapping), ECT_ERR_EXISTS (key already saved / loaded
 * in this step), ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_meta_add_save(ect_step_meta_t *meta, const char *key,
                                                           const ect_run_t *runs, size_t n_runs);
ECT_API ECT_MUST_CHECK ect_status_t ect_step_meta_add_load(ect_step_meta_t *meta, const char *key,
                                                           uint64_t transfer_id,
                                                           const ect_run_t *runs, size_t n_runs);

ECT_API size_t ect_step_meta_n_saves(const ect_step_meta_t *meta);
ECT_API size_t ect_step_meta_n_loads(const ect_step_meta_t *meta);

/* The i-th save / load (borrowed), or NULL if i is out of range. */
ECT_API const ect_step_item_t *ect_step_meta_save(const ect_step_meta_t *meta, size_t i);
ECT_API const ect_step_item_t *ect_step_meta_load(const ect_step_meta_t *meta, size_t i);

/* The save for key, or NULL. */
ECT_API const ect_step_item_t *ect_step_meta_find_save(const ect_step_meta_t *meta,
                                                       const char *key);

/* The load for key, or NULL. */
ECT_API const ect_step_item_t *ect_step_meta_find_load(const ect_step_meta_t *meta,
                                                       const char *key);

/* Bytes needed to encode meta. */
ECT_API size_t ect_step_meta_encoded_size(const ect_step_meta_t *meta);

/* Encode into buf.  Returns ECT_OK with *len_p set, or ECT_ERR_OVERFLOW if
 * cap is smaller than ect_step_meta_encoded_size() (nothing written). */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_meta_encode(const ect_step_meta_t *meta, void *buf,
                                                         size_t cap, size_t *len_p);

/* Decode bytes made by ect_step_meta_encode.  num_blocks is the region's
 * block count: every run must lie inside it.  On ECT_OK *meta_p is a new
 * value the caller destroys.  Returns ECT_ERR_PARSE (with the reason) for
 * malformed bytes, ECT_ERR_OVERFLOW for blocks outside the region,
 * ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_meta_decode(const void *bytes, size_t len,
                                                         uint64_t num_blocks,
                                                         ect_step_meta_t **meta_p);

/* The same into an existing value, which is cleared first (its memory
 * reused): on ECT_OK it holds exactly the decoded step, on any error it is
 * empty.  Returns what ect_step_meta_decode does, and ECT_ERR_INVALID_ARG
 * for a NULL meta. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_meta_decode_into(ect_step_meta_t *meta,
                                                              const void *bytes, size_t len,
                                                              uint64_t num_blocks);

/* ---- worker -> scheduler ------------------------------------------------ */

/* Copy statistics carried by a worker report (summed when reports merge). */
typedef struct ect_step_copy_stats {
    uint64_t save_bytes;
    uint64_t save_ns; /* submit-to-landed time, summed over batches */
    uint64_t save_batches;
    uint64_t load_bytes;
    uint64_t load_ns;
    uint64_t load_batches;
} ect_step_copy_stats_t;

/* What a worker reports after a step (the scheduler's input to
 * ect_scheduler_update_connector_output): the saves that landed, the saves
 * that failed, the loads that landed (by transfer id) and copy statistics.
 * A report is owned by whoever created or took it.  Thread safety: a report
 * is used by one thread at a time; distinct reports are independent. */
typedef struct ect_step_report ect_step_report_t;

/* An empty report.  report_p: out, written only on success; free with
 * ect_step_report_destroy.  Returns ECT_OK, ECT_ERR_INVALID_ARG (NULL
 * report_p), ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_create(ect_step_report_t **report_p);

/* Free a report and every key it holds.  NULL is a no-op. */
ECT_API void ect_step_report_destroy(ect_step_report_t *report);

/* Remove every entry and zero the stats, keeping the report's memory for
 * what is added next.  Keys handed out before are invalid afterwards.
 * NULL is a no-op. */
ECT_API void ect_step_report_clear(ect_step_report_t *report);

/* Record a completed save (key copied) / load / failed save (the copy did
 * not land: the scheduler discards the entry instead of marking it ready).
 * key: borrowed, 1..ECT_KEY_MAX bytes (the scheduler checked its content
 * where the engine handed it in; an unknown key in a report is ignored
 * there).  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG (NULL report, NULL or bad key: the message says
 * which), ECT_ERR_NO_MEMORY; on error the report is unchanged. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_add_save(ect_step_report_t *report,
                                                             const char *key);
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_add_failed_save(ect_step_report_t *report,
                                                                    const char *key);
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_add_load(ect_step_report_t *report,
                                                             uint64_t transfer_id);

/* Add stats into the report's totals, field by field.  A NULL report or
 * stats is a no-op.  Cannot fail. */
ECT_API void ect_step_report_add_stats(ect_step_report_t *report,
                                       const ect_step_copy_stats_t *stats);

/* How many completed saves / landed loads / failed saves the report holds;
 * 0 for a NULL report. */
ECT_API size_t ect_step_report_n_saves(const ect_step_report_t *report);
ECT_API size_t ect_step_report_n_loads(const ect_step_report_t *report);
ECT_API size_t ect_step_report_n_failed_saves(const ect_step_report_t *report);

/* The i-th completed save's key / landed load's transfer id / failed save's
 * key, in the order they were added.  Keys are borrowed, valid until the
 * report changes or is destroyed.  NULL (0 for a load) for a NULL report or
 * an i out of range. */
ECT_API const char *ect_step_report_save(const ect_step_report_t *report, size_t i);
ECT_API uint64_t ect_step_report_load(const ect_step_report_t *report, size_t i);
ECT_API const char *ect_step_report_failed_save(const ect_step_report_t *report, size_t i);

/* The summed copy statistics (borrowed, valid until the report is
 * destroyed); NULL for a NULL report. */
ECT_API const ect_step_copy_stats_t *ect_step_report_stats(const ect_step_report_t *report);

/* Append every entry and the stats of src to dst (the seed's aggregate():
 * lists concatenate, so each reporting rank contributes its own copy).
 * Both borrowed.  Returns ECT_OK, ECT_ERR_INVALID_ARG (NULL argument),
 * ECT_ERR_NO_MEMORY; on error dst is unchanged. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_merge(ect_step_report_t *dst,
                                                          const ect_step_report_t *src);

/* Bytes ect_step_report_encode needs for report; 0 for a NULL report. */
ECT_API size_t ect_step_report_encoded_size(const ect_step_report_t *report);

/* Encode report into buf (cap bytes), a self-delimiting frame that
 * ect_step_report_decode reads; encodings may be concatenated.
 * len_p: out, the bytes written.  Returns ECT_OK, ECT_ERR_INVALID_ARG (NULL
 * argument), ECT_ERR_OVERFLOW (cap below ect_step_report_encoded_size; buf
 * untouched). */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_encode(const ect_step_report_t *report,
                                                           void *buf, size_t cap, size_t *len_p);

/* Decode one or more concatenated encoded reports into one merged report.
 * bytes: untrusted (they cross a process boundary), borrowed; every count
 * and key is checked.  Empty input gives an empty report.  report_p: out,
 * written only on success.  Returns ECT_OK, ECT_ERR_INVALID_ARG (NULL
 * argument), ECT_ERR_PARSE (malformed bytes: the message says where),
 * ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_decode(const void *bytes, size_t len,
                                                           ect_step_report_t **report_p);

/* The same into an existing report, which is cleared first (its memory
 * reused): on ECT_OK it holds exactly the decoded reports, on any error it
 * is empty.  Returns what ect_step_report_decode does (ECT_ERR_INVALID_ARG
 * for a NULL report). */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_decode_into(ect_step_report_t *report,
                                                                const void *bytes, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_STEP_H */
