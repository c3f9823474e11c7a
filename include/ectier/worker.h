/*
 * The worker side (SPEC §1.2, §7): one per tensor-parallel rank.  It joins
 * the instance's region and performs the copies between the engine's
 * encoder-cache memory and the region that the scheduler decided.
 *
 * The engine's calls each step, in order:
 *   ect_worker_bind_metadata     the scheduler's encoded step metadata
 *   ect_worker_start_load        copy this step's loads into engine memory
 *   ect_worker_save              once per newly encoded item (save rank only)
 *   ect_worker_get_finished      end of the step: submit the saves
 *   ect_worker_take_report       completions to send to the scheduler
 *   ect_worker_clear_metadata
 *
 * Engine memory is host memory for the CPU copy engine and device memory
 * (pointers as plain addresses, e.g. a tensor's data_ptr()) for the CUDA
 * engine.  Copies are asynchronous; a save or load is reported only after
 * its bytes have landed.  Only tensor-parallel rank 0 and context-parallel
 * rank 0 save; every rank loads.
 *
 * Thread safety: a worker is used by one thread at a time.
 */
#ifndef ECTIER_WORKER_H
#define ECTIER_WORKER_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <ectier/config.h>
#include <ectier/copy.h>
#include <ectier/geometry.h>
#include <ectier/status.h>
#include <ectier/step.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ect_worker ect_worker_t;

/* What the engine's encoder-cache memory is. */
typedef enum ect_worker_memory {
    ECT_WORKER_HOST_MEMORY = 0, /* host memory: a CPU copy engine */
    ECT_WORKER_CUDA_MEMORY = 1, /* CUDA device memory: a CUDA copy engine */
} ect_worker_memory_t;

typedef struct ect_worker_params {
    const ect_config_t *config;     /* borrowed, copied */
    const ect_geometry_t *geometry; /* borrowed, copied */
    const char *instance_id;        /* the region's name, as given to the scheduler */
    unsigned dp_rank;
    const char *region_dir; /* NULL = "/dev/shm" */
    unsigned tp_rank;       /* tensor-parallel rank */
    unsigned pcp_rank;      /* prefill context-parallel rank */
    /* Borrowed copy engine, or NULL for one the worker makes and owns: a
     * CPU engine of config->copy_threads threads for host memory, a CUDA
     * engine on cuda_device for device memory (ECT_ERR_UNSUPPORTED in a
     * build without CUDA or without a usable device). */
    ect_copy_engine_t *engine;
    ect_worker_memory_t memory;
    int cuda_device;
} ect_worker_params_t;

/* Join (or create) the region and register it with the copy engine.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_CONFIG, ECT_ERR_INCOMPATIBLE,
 * ECT_ERR_IO, ECT_ERR_NO_MEMORY.  Nothing is left behind on error. */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_create(const ect_worker_params_t *params,
                                                      ect_worker_t **worker_p);

/* Wait for every copy in flight, then release the region and the engine
 * (if owned).  NULL is a no-op. */
ECT_API void ect_worker_destroy(ect_worker_t *worker);

/* true if this rank saves (tp_rank == 0 and pcp_rank == 0); false for NULL. */
ECT_API bool ect_worker_is_save_rank(const ect_worker_t *worker);

/* Bind this step's metadata (the bytes of ect_step_meta_encode).  Every load
 * it names will be reported exactly once by this worker, and (on the save
 * rank) every save it names, as saved or as failed.  Returns ECT_OK,
 * ECT_ERR_STATE (metadata already bound), ECT_ERR_PARSE / ECT_ERR_OVERFLOW
 * (malformed bytes, blocks outside the region: nothing is bound),
 * ECT_ERR_NO_MEMORY (nothing is bound). */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_bind_metadata(ect_worker_t *worker,
                                                             const void *bytes, size_t len);

/* The bound metadata (borrowed until clear), or NULL. */
ECT_API const ect_step_meta_t *ect_worker_metadata(const ect_worker_t *worker);

/* Forget the bound metadata.  On the save rank, saves not submitted by
 * get_finished, and saves of the step that were never made (not called, or
 * refused), are reported as failed, so the scheduler frees their blocks.
 * Loads never started are reported as done (the engine did not use them).
 * No-op when nothing is bound. */
ECT_API void ect_worker_clear_metadata(ect_worker_t *worker);

/* Where a load goes: return engine memory for n_tokens x hidden elements
 * (nbytes bytes) of the entry under key in *dst_p, or an error status to
 * abort.  Called once per load, in block order. */
typedef ect_status_t (*ect_load_target_fn)(void *user, const char *key, uint64_t n_tokens,
                                           size_t nbytes, void **dst_p);

/* Copy every load of the bound step into engine memory obtained from
 * target, as one batch.  compute_stream (CUDA only, a cudaStream_t as void*,
 * NULL for the default stream) waits for the copy before later work.
 * Returns ECT_OK (also when there are no loads), ECT_ERR_STATE (nothing
 * bound, or loads already started), the target's status, or a copy engine
 * error.  Even on error every load's transfer id is reported, so the
 * scheduler releases its pins. */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_start_load(ect_worker_t *worker,
                                                          ect_load_target_fn target, void *user,
                                                          void *compute_stream);

/* The engine encoded key into src (nbytes bytes of engine memory).  If this
 * is the save rank and the step saves key, queue the copy (it is submitted
 * by ect_worker_get_finished) and set *queued_p (may be NULL) to 1, else 0.
 * src must stay valid until the save is reported.  compute_stream: the save
 * waits for the work queued on it (CUDA).  Returns ECT_OK, ECT_ERR_OVERFLOW
 * (nbytes exceeds the entry's blocks: an error, never a truncation),
 * ECT_ERR_EXISTS (key already saved this step), ECT_ERR_INVALID_ARG,
 * ECT_ERR_NO_MEMORY (not queued: clear_metadata reports the save failed). */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_save(ect_worker_t *worker, const char *key,
                                                    const void *src, size_t nbytes,
                                                    void *compute_stream, int *queued_p);

/* End of the step's model run: submit the queued saves as one batch.
 * Returns ECT_OK or a copy engine error (the saves are then reported as
 * failed). */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_get_finished(ect_worker_t *worker);

/* Collect the copies that have landed since the last call into a report
 * (*report_p, owned by the caller: destroy it, or hand it back with
 * ect_worker_recycle_report; NULL when nothing finished).  Encode it for
 * the scheduler.
 * Returns ECT_OK, ECT_ERR_NO_MEMORY (nothing taken: the completions wait for
 * the next call), or the error of a failed copy batch (its saves are in the
 * report as failed, its loads as done: the engine must not use those
 * entries).  No completion is ever lost to a failed allocation: the room
 * for every outcome of a step is reserved when its metadata binds. */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_take_report(ect_worker_t *worker,
                                                           ect_step_report_t **report_p);

/* Hand back a report that ect_worker_take_report returned, once it is
 * encoded: the worker empties it and collects later outcomes in its
 * memory, so steps stop allocating once the largest has been reported.
 * The worker keeps one such report; any other is destroyed, as is report
 * when worker is NULL.  report must not be used afterwards.  NULL report is
 * a no-op.  Cannot fail. */
ECT_API void ect_worker_recycle_report(ect_worker_t *worker, ect_step_report_t *report);

/* Block until every submitted copy has landed. */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_wait(ect_worker_t *worker);

/* Copies submitted and not yet reported (batches). */
ECT_API size_t ect_worker_in_flight(const ect_worker_t *worker);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_WORKER_H */
