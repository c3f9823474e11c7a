/*
 * Worker reports that cannot lose an item (issue 13): the worker reserves
 * room for every outcome it owes (a save's completion or failure, a load's
 * landing) when the step's metadata binds, and later adds each outcome
 * without allocating.  A lost outcome would keep a load's pin or a save's
 * not-ready entry, and with it has_pending_push_work, forever.
 */
#ifndef ECT_STEP_REPORT_H
#define ECT_STEP_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/step.h>
#include <ectier/worker.h>

/* Make room in report for `saves` more completed saves, `failed` more
 * failed saves, `loads` more loads and `key_bytes` more bytes of keys
 * (each key's length + 1, whichever list it goes to) than it holds now.
 * Returns ECT_OK or ECT_ERR_NO_MEMORY (the contents are unchanged either
 * way). */
ect_status_t ect__step_report_reserve(ect_step_report_t *report, size_t saves, size_t failed,
                                      size_t loads, size_t key_bytes);

/* Add a copy of key (borrowed; a key that was checked where it entered) as
 * a completed save, or a failed one when failed is non-zero.  Does not
 * allocate within a reservation; beyond one it may fail with
 * ECT_ERR_NO_MEMORY (nothing added). */
ect_status_t ect__step_report_put_save(ect_step_report_t *report, const char *key, int failed);

/* Add a landed load; does not allocate within a reservation. */
ect_status_t ect__step_report_push_load(ect_step_report_t *report, uint64_t transfer_id);

/* Give back a report that ect_worker_take_report handed out but that could
 * not be delivered (the binding failed to encode it): the worker keeps it
 * (owned) and hands it out again, with copy_status, at the next
 * take_report, before anything newer.  Never allocates.  At most one
 * report is held; worker must not be NULL. */
void ect__worker_give_back_report(ect_worker_t *worker, ect_step_report_t *report,
                                  ect_status_t copy_status);

/* The worker's own mapping of the region's data (what its copies address;
 * for benchmarks that must copy the same bytes through the same mapping).
 * worker must not be NULL. */
void *ect__worker_region_data(const ect_worker_t *worker);

#endif /* ECT_STEP_REPORT_H */
