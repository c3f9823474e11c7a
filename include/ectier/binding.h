/*
 * Entry points for language bindings (the Python package python/ectier/
 * calls them through ctypes): everything a binding needs, with no C struct
 * to lay out by hand on the other side.  Values cross as JSON text, byte
 * strings, plain integers and flat arrays; objects stay opaque handles
 * (ect_scheduler_t, ect_worker_t) used with the functions of scheduler.h and
 * worker.h that take only such values (has_cache_item, bind_metadata, save,
 * get_finished, clear_metadata, update_connector_output, ...).
 *
 * The engine description (a JSON object) says what ectier cannot learn from
 * the engine's ec_transfer_config:
 *
 *   key               type          default     meaning
 *   model             string        ""          model name (P2P compatibility hash)
 *   engine_version    string        ""          engine version (P2P compatibility hash)
 *   hidden_dim        integer       -           encoder-cache row width, or one of:
 *   hf_config         object        -             the model's config.json, inline
 *   hf_config_path    string        -             a path to it (or its snapshot directory)
 *   dtype             string        from hf     element type (ect_dtype_parse names);
 *                                   config      required with hidden_dim
 *   instance_id       string        ""          names the region (needed unless the
 *                                               config sets region_name)
 *   dp_rank           integer       0           data-parallel rank
 *   tp_rank           integer       0           tensor-parallel rank (worker)
 *   pcp_rank          integer       0           prefill context-parallel rank (worker)
 *   reports_per_load  integer >= 1  1           worker reports a load needs (scheduler:
 *                                               tp_size x pcp_size with one process per
 *                                               rank)
 *   memory            "host"|"cuda" "host"      the engine's encoder-cache memory (worker)
 *   cuda_device       integer       0           CUDA device of that memory (worker)
 *   region_dir        string        /dev/shm    directory of the region file
 *
 * Exactly one of hidden_dim, hf_config and hf_config_path is given; the
 * width rule for a model config is ect_hf_config_parse's.  Unknown keys,
 * duplicate keys and values of the wrong type are refused by name.  The
 * ec_transfer_config is checked by ect_config_parse (so the environment's
 * side-channel variables apply as there).
 *
 * A request (ensure_cache_available, update_state_after_alloc,
 * request_finished) is a JSON object:
 *
 *   {"request_id": "r1", "num_computed_tokens": 0,
 *    "ec_transfer_params": {...} or null,
 *    "features": [{"identifier": "...", "mm_hash": "..." or null,
 *                  "offset": 0, "length": 256, "num_tokens": 256,
 *                  "has_local_input": true, "metadata": {...}}]}
 *
 * request_id and each feature's identifier (1..ECT_KEY_MAX bytes) and
 * num_tokens (rows of the encoder output: the entry's blocks) are required.
 * offset and length (placeholder tokens in the prompt, default num_tokens)
 * place the item in the prompt: it counts as computed once offset + length
 * <= num_computed_tokens.  has_local_input (default true): the media is still
 * on the request.  metadata (default {}): placeholder fields a producer
 * publishes.  ec_transfer_params: a producer's announcements (SPEC §8.5),
 * any JSON value; one that is not an object is ignored with a warning.
 *
 * Memory: every char ** or void ** output is allocated by ectier and freed
 * by the caller with ect_free (scheduler.h).  Outputs are written only on
 * ECT_OK unless the contract says otherwise.
 *
 * Thread safety: the functions without a handle are safe from any thread;
 * those with one follow the handle's rules (scheduler.h, worker.h).
 */
#ifndef ECTIER_BINDING_H
#define ECTIER_BINDING_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/scheduler.h>
#include <ectier/status.h>
#include <ectier/worker.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this binding interface.  It changes whenever a function
 * here, or one a binding calls through ctypes, changes its parameters or
 * meaning; a binding refuses a library whose version differs from its own. */
#define ECT_ABI_VERSION 2

/* ECT_ABI_VERSION of the loaded library.  Thread safety: safe. */
ECT_API unsigned ect_abi_version(void);

/* Longest engine description, request or geometry spec accepted, in bytes. */
#define ECT_BIND_JSON_MAX (1024 * 1024)

/* Check an ec_transfer_config (len bytes at json, need not be
 * NUL-terminated) exactly as ect_config_parse does and describe the result:
 * *resolved_p gets a JSON object with one member per field of the settings
 * table (README "Settings"), keyed by the setting's name (ec_role,
 * ec_cpu_bytes, ec_enable_nixl, transport, ..., and the side-channel
 * environment variables by theirs) and valued as resolved: sizes, counts
 * and ports as integers, timeouts as numbers, flags as booleans, words and
 * names as strings.  Returns ECT_OK, the statuses of ect_config_parse,
 * ECT_ERR_INVALID_ARG, ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_config_check_json(const char *json, size_t len,
                                                          char **resolved_p);

/* Compute a block geometry.  spec: a JSON object with cpu_bytes (an integer
 * or a size text such as "8GiB"), one of hidden_dim / hf_config /
 * hf_config_path, and dtype (optional with a model config that declares
 * one), as in the engine description.  *geometry_p gets {"hidden_dim",
 * "dtype" (the torch.<name> spelling), "element_size", "block_size_bytes",
 * "num_blocks", "cpu_bytes", "hidden_dim_source", "dtype_source",
 * "model_type"}.  Returns ECT_OK, ECT_ERR_PARSE, ECT_ERR_CONFIG (a missing,
 * mistyped or contradicting field; a model config without the fields the
 * width rule needs), ECT_ERR_INVALID_ARG (unknown dtype), ECT_ERR_OVERFLOW,
 * ECT_ERR_NOT_FOUND / ECT_ERR_IO (model config file), ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_geometry_json(const char *spec, size_t len,
                                                      char **geometry_p);

/* What ect_region_list sees in dir (NULL: /dev/shm), as a JSON array with an
 * object per file (name, path, kind: region|bad|foreign|temp, problem,
 * file_size, age_s, holders, holder_pids, waiters, waiter_pids, orphaned,
 * and for regions the header's geometry, creator_pid, created_unix_ns,
 * instance_id).  Returns the statuses of ect_region_list. */
ECT_API ECT_MUST_CHECK ect_status_t ect_region_list_json(const char *dir, char **json_p);

/* ect_region_gc on dir (NULL: /dev/shm): *json_p gets a JSON array with an
 * object per orphan as in ect_region_list_json plus "removed" (true if it
 * was removed, or would be in a dry run) and, when not, "error".  Returns
 * the statuses of ect_region_gc. */
ECT_API ECT_MUST_CHECK ect_status_t ect_region_gc_json(const char *dir, int dry_run, char **json_p);

/* ---- scheduler side ---------------------------------------------------- */

/* Create the scheduler side from the engine's ec_transfer_config and the
 * engine description (above).  Returns ECT_OK, ECT_ERR_PARSE (bad JSON),
 * ECT_ERR_CONFIG (a bad key or value in either; the message names it), and
 * the statuses of ect_geometry_json and ect_scheduler_create.  Nothing is
 * left behind on error.  Destroy with ect_scheduler_destroy. */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_create_json(const char *config_json,
                                                              size_t config_len,
                                                              const char *engine_json,
                                                              size_t engine_len,
                                                              ect_scheduler_t **scheduler_p);

/* The geometry of an engine description under an ec_transfer_config, as
 * ect_geometry_json writes it, plus "role" (the ec_role word) and
 * "p2p_enabled": what the binding needs to size tensors.  Statuses as
 * ect_scheduler_create_json before it opens anything. */
ECT_API ECT_MUST_CHECK ect_status_t ect_engine_describe_json(const char *config_json,
                                                             size_t config_len,
                                                             const char *engine_json,
                                                             size_t engine_len, char **json_p);

/* ect_scheduler_ensure_cache_available / update_state_after_alloc /
 * request_finished with the request as JSON text (above).  A malformed
 * request is ECT_ERR_PARSE or ECT_ERR_CONFIG with a message naming the
 * field, and changes nothing.  request_finished: *params_json_p gets the
 * request's ec_transfer_params (a JSON object text) or NULL. */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_ensure_cache_available_json(
    ect_scheduler_t *scheduler, const char *request_json, size_t len, int *available_p);
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_update_state_after_alloc_json(
    ect_scheduler_t *scheduler, const char *request_json, size_t len, size_t index);
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_request_finished_json(ect_scheduler_t *scheduler,
                                                                        const char *request_json,
                                                                        size_t len,
                                                                        char **params_json_p);

/* ect_scheduler_build_connector_meta, encoded: *bytes_p (ect_free) and
 * *len_p get the step's metadata in ect_step_meta_encode's encoding, for
 * every worker.  Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t
ect_scheduler_build_connector_meta_bytes(ect_scheduler_t *scheduler, void **bytes_p, size_t *len_p);

/* ect_scheduler_take_unavailable_requests, all of them: *ids_json_p gets a
 * JSON array of request id strings (possibly empty), removed from the
 * scheduler.  Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NO_MEMORY (the
 * ids stay taken: they are logged). */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_take_unavailable_json(ect_scheduler_t *scheduler,
                                                                        char **ids_json_p);

/* ect_scheduler_metrics rendered by ect_metrics_format_prometheus:
 * *text_p gets the Prometheus text.  Returns ECT_OK, ECT_ERR_INVALID_ARG,
 * ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_scheduler_metrics_prometheus(ect_scheduler_t *scheduler,
                                                                     char **text_p);

/* ---- worker side --------------------------------------------------------- */

/* Create the worker side from the ec_transfer_config and the engine
 * description (tp_rank, pcp_rank, memory and cuda_device apply here).
 * Statuses as ect_scheduler_create_json and ect_worker_create.  Destroy with
 * ect_worker_destroy. */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_create_json(const char *config_json,
                                                           size_t config_len,
                                                           const char *engine_json,
                                                           size_t engine_len,
                                                           ect_worker_t **worker_p);

/* The bound step metadata as ect_step_meta_json writes it.  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG, ECT_ERR_STATE (nothing bound), ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_metadata_json(const ect_worker_t *worker,
                                                             char **json_p);

/* ect_worker_start_load with the destinations as flat arrays: load keys[i]
 * of the bound step goes to the n_bytes[i] bytes of engine memory at
 * address addrs[i] (a host address, or a device pointer such as a tensor's
 * data_ptr() for a CUDA worker).  Every load of the bound step must be given
 * exactly once, with n_bytes equal to its blocks' bytes; compute_stream is
 * a cudaStream_t as an integer (0: the default stream; ignored for host
 * memory).  Returns ECT_OK; ECT_ERR_INVALID_ARG (a key that is not a load
 * of the step or given twice, a wrong size, a NULL address; checked before
 * anything is copied, and then nothing is started, so clear_metadata still
 * reports the loads); the statuses of ect_worker_start_load (after which
 * every load is reported, as there). */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_start_load_arrays(ect_worker_t *worker, size_t n,
                                                                 const char *const *keys,
                                                                 const uint64_t *addrs,
                                                                 const uint64_t *n_bytes,
                                                                 uint64_t compute_stream);

/* ect_worker_take_report, encoded.  *bytes_p (ect_free) and *len_p get the
 * report in ect_step_report_encode's encoding, or NULL and 0 when nothing
 * finished.  *copy_status_p (may be NULL) gets ECT_OK, or the error of a copy
 * batch that failed (its saves are in the report as failed, its loads as
 * done: the engine must not use those entries).  Returns ECT_OK (also after
 * a failed copy: the report must still reach the scheduler),
 * ECT_ERR_INVALID_ARG, ECT_ERR_NO_MEMORY (the completions stay for the next
 * call). */
ECT_API ECT_MUST_CHECK ect_status_t ect_worker_take_report_bytes(ect_worker_t *worker,
                                                                 void **bytes_p, size_t *len_p,
                                                                 ect_status_t *copy_status_p);

/* ---- decoding for bindings and tests --------------------------------------- */

/* Decode step metadata (ect_step_meta_decode, blocks checked against
 * num_blocks) into JSON: {"saves": [{"key", "n_blocks", "runs": [[first,
 * count], ...]}], "loads": [{"key", "transfer_id", "n_blocks", "runs"}]}.
 * Returns ECT_OK, the statuses of ect_step_meta_decode, ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_meta_json(const void *bytes, size_t len,
                                                       uint64_t num_blocks, char **json_p);

/* Decode one or more concatenated worker reports into JSON: {"saves":
 * [keys], "failed_saves": [keys], "loads": [transfer ids], "stats":
 * {"save_bytes", "save_ns", "save_batches", "load_bytes", "load_ns",
 * "load_batches"}}.  Returns ECT_OK, ECT_ERR_PARSE, ECT_ERR_NO_MEMORY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_step_report_json(const void *bytes, size_t len,
                                                         char **json_p);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_BINDING_H */
