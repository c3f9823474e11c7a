/*
 * Geometry of the CPU tier: element types, block size and block count, and
 * the hidden width read from a HuggingFace model's config.json (SPEC §3).
 *
 * One block holds one embedding row of the encoder cache:
 *     block_size_bytes = hidden_dim x element size of the dtype
 *     num_blocks       = floor(ec_cpu_bytes / block_size_bytes)
 * An entry of n tokens takes n blocks (n x block_size_bytes of payload); a
 * payload that is not a whole number of rows takes one more, partial, block.
 *
 * Getting hidden_dim wrong truncates data silently, so it is derived from the
 * model's own config file by the rule vLLM's CPU connector uses: a vision
 * config with out_hidden_size and a non-empty deepstack_visual_indexes list
 * (Qwen3-VL) gives out_hidden_size x (1 + len(list)); every other model gives
 * the text model's input-embedding width (see ect_hf_config_parse for where
 * the text model is found and the details).
 *
 * Everything here is pure computation on caller storage: no locks, no global
 * state; every function may be called from any thread.
 */
#ifndef ECTIER_GEOMETRY_H
#define ECTIER_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of the encoder cache's tensors.  Values are fixed (they may
 * be stored in a region header); 0 is never valid, so a zeroed struct does
 * not pass for bfloat16. */
typedef enum ect_dtype {
    ECT_DTYPE_BF16 = 1,        /* torch.bfloat16, 2 bytes */
    ECT_DTYPE_F16 = 2,         /* torch.float16, 2 bytes */
    ECT_DTYPE_F32 = 3,         /* torch.float32, 4 bytes */
    ECT_DTYPE_F8_E4M3FN = 4,   /* torch.float8_e4m3fn, 1 byte */
    ECT_DTYPE_F8_E5M2 = 5,     /* torch.float8_e5m2, 1 byte */
    ECT_DTYPE_F8_E4M3FNUZ = 6, /* torch.float8_e4m3fnuz, 1 byte */
    ECT_DTYPE_F8_E5M2FNUZ = 7, /* torch.float8_e5m2fnuz, 1 byte */
} ect_dtype_t;

/* The largest hidden width accepted anywhere (1 Mi elements, 4 MiB rows in
 * float32).  Real models are below 64 Ki even with deepstack layers; a larger
 * number is a corrupt file or a mistake, not a model. */
#define ECT_GEOMETRY_MAX_HIDDEN_DIM (UINT64_C(1) << 20)

/* Parse a dtype name.  Accepted, case-insensitively (the first of each group
 * is the short name ect_dtype_name returns):
 *   bfloat16  bf16  torch.bfloat16
 *   float16   half  fp16  f16  torch.float16
 *   float32   float  fp32  f32  torch.float32
 *   float8_e4m3fn    fp8_e4m3fn  fp8_e4m3  fp8  torch.float8_e4m3fn
 *   float8_e5m2      fp8_e5m2    torch.float8_e5m2
 *   float8_e4m3fnuz  fp8_e4m3fnuz  torch.float8_e4m3fnuz
 *   float8_e5m2fnuz  fp8_e5m2fnuz  torch.float8_e5m2fnuz
 * ("fp8" means e4m3fn, as in vLLM's --kv-cache-dtype.)
 * name: borrowed, NUL-terminated.  dtype_p: out, written only on success.
 * Returns ECT_OK, or ECT_ERR_INVALID_ARG (NULL argument, or an unknown name:
 * the message quotes it and lists the accepted names). */
ECT_API ECT_MUST_CHECK ect_status_t ect_dtype_parse(const char *name, ect_dtype_t *dtype_p);

/* Bytes per element (2 for bfloat16), or 0 if dtype is not a valid value. */
ECT_API size_t ect_dtype_size(ect_dtype_t dtype);

/* The canonical "torch.<name>" spelling ("torch.bfloat16"), which is what the
 * P2P compatibility hash contains (SPEC §8.2); NULL if dtype is not valid.
 * The string is static. */
ECT_API const char *ect_dtype_torch_name(ect_dtype_t dtype);

/* The short name ("bfloat16"); NULL if dtype is not valid.  Static string. */
ECT_API const char *ect_dtype_name(ect_dtype_t dtype);

/* The block geometry of one region. */
typedef struct ect_geometry {
    uint64_t hidden_dim;       /* elements per embedding row */
    ect_dtype_t dtype;         /* element type */
    uint64_t block_size_bytes; /* hidden_dim x ect_dtype_size(dtype) */
    uint64_t num_blocks;       /* floor(cpu_bytes / block_size_bytes), >= 1 */
} ect_geometry_t;

/* Compute the geometry for a region of cpu_bytes.
 * geometry_p: out (caller storage), written only on success.
 * Returns ECT_OK;
 *   ECT_ERR_INVALID_ARG  geometry_p NULL, hidden_dim 0 or dtype invalid;
 *   ECT_ERR_OVERFLOW     hidden_dim above ECT_GEOMETRY_MAX_HIDDEN_DIM;
 *   ECT_ERR_CONFIG       cpu_bytes is 0 (the message says "ec_cpu_bytes must
 *                        be specified in ec_connector_extra_config") or smaller
 *                        than one block (the message gives cpu_bytes, the
 *                        block size and the minimum needed). */
ECT_API ECT_MUST_CHECK ect_status_t ect_geometry_init(uint64_t hidden_dim, ect_dtype_t dtype,
                                                      uint64_t cpu_bytes,
                                                      ect_geometry_t *geometry_p);

/* Check a geometry that did not come from ect_geometry_init (a caller's
 * own, or one read back): a known dtype, hidden_dim 1..
 * ECT_GEOMETRY_MAX_HIDDEN_DIM, block_size_bytes = hidden_dim x
 * ect_dtype_size(dtype) (SPEC §3: a block holds one embedding row),
 * num_blocks >= 1.  geometry: borrowed.  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG (NULL, or the message names the field that is wrong),
 * ECT_ERR_OVERFLOW (hidden_dim above the limit).  Thread safety: safe. */
ECT_API ECT_MUST_CHECK ect_status_t ect_geometry_validate(const ect_geometry_t *geometry);

/* Blocks needed for a payload of payload_bytes: ceil(payload / block size),
 * so a final partial block counts.  0 for an empty payload, or if geometry is
 * NULL or has a zero block size.  geometry: borrowed. */
ECT_API uint64_t ect_geometry_entry_blocks(const ect_geometry_t *geometry, uint64_t payload_bytes);

/* Payload bytes of an entry of n_tokens rows: n_tokens x block_size_bytes.
 * geometry: borrowed.  bytes_p: out, written only on success.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG (NULL argument or zero block size) or
 * ECT_ERR_OVERFLOW (the product does not fit in 64 bits). */
ECT_API ECT_MUST_CHECK ect_status_t ect_geometry_payload_bytes(const ect_geometry_t *geometry,
                                                               uint64_t n_tokens,
                                                               uint64_t *bytes_p);

/* ---- HuggingFace config.json ------------------------------------------- */

/* Files larger than this are refused by ect_hf_config_load (real ones are a
 * few KiB; the largest known are well under 1 MiB). */
#define ECT_HF_CONFIG_MAX_BYTES (16u << 20)

/* Length of the text buffers in ect_hf_model_t, NUL included. */
#define ECT_HF_SOURCE_LEN 112

/* What a model's config.json says about the encoder cache. */
typedef struct ect_hf_model {
    uint64_t hidden_dim; /* encoder-cache row width, 1..ECT_GEOMETRY_MAX_HIDDEN_DIM */
    int has_dtype;       /* 1 if the file declares a dtype, else 0 */
    ect_dtype_t dtype;   /* the declared dtype; meaningful only if has_dtype */
    /* Where hidden_dim came from, for people: "hidden_size",
     * "text_config.hidden_size", "language_config.hidden_size",
     * "vision_config.out_hidden_size 2048 x (1 + 3 deepstack layers)",
     * "default hidden_size 4096 of text_config.model_type 'llama'". */
    char hidden_dim_source[ECT_HF_SOURCE_LEN];
    /* Where the dtype came from ("torch_dtype", "text_config.dtype",
     * "vision_config.torch_dtype"); "" if has_dtype is 0. */
    char dtype_source[ECT_HF_SOURCE_LEN];
    /* The top-level model_type ("qwen3_vl"), "" if absent; truncated, and any
     * byte that is not printable ASCII replaced by '?'. */
    char model_type[ECT_HF_SOURCE_LEN];
} ect_hf_model_t;

/* Read the encoder-cache width and declared dtype from the text of a
 * HuggingFace config.json, by the engine's rules.
 *
 * The text config (the language model's settings) is, in the engine's order:
 * thinker_config.text_config (omni models), text_config, llm_config
 * (InternVL, Ovis), language_config (DeepSeek-VL2, Janus), else the top level
 * itself.  A second one of these that gives a different width is a
 * contradiction.  thinker_config without a text_config object is an error.
 *
 * Width, in order:
 *  1. vision_config.out_hidden_size x (1 + len(vision_config.
 *     deepstack_visual_indexes)) when both are present and the list is
 *     non-empty (Qwen3-VL's deepstack features are concatenated per token).
 *     Only the top-level vision_config counts, as in the engine; a file whose
 *     thinker_config.vision_config would satisfy the rule is refused, since
 *     the engine would size its rows for the text width alone.
 *  2. Otherwise the text config's width as the engine's
 *     get_inputs_embeds_size() gives it: projection_dim, else
 *     projection_size, else hidden_size.  A text config without any of them
 *     takes the default hidden_size of its model_type for the few whose
 *     default is fixed: llama, mistral, mixtral, qwen2 (4096) and
 *     gemma3_text (2304), as transformers would (llava-1.5 needs this); any
 *     other missing width is an error naming the field it looked for.
 *     A top-level hidden_size next to a text sub-config must agree with the
 *     sub-config's hidden_size.
 * Dtype, in the engine's order: torch_dtype or dtype at the top level, else
 * in the text config, else in vision_config, else in encoder_config (the last
 * two are read only when nothing before them declares one).  Where the top
 * level and the text config both declare one and they disagree, the top
 * level's is used, as the engine does, and a warning naming both goes to the
 * log sink (prefixed with the file name by ect_hf_config_load).  torch_dtype
 * and dtype in one object must agree.  null counts as absent.  This is the
 * dtype the file declares: vLLM's --dtype auto serves a float32 checkpoint
 * in bfloat16 or float16, which the caller must pass explicitly.
 * Every field read is type-checked: widths must be integers in
 * 1..ECT_GEOMETRY_MAX_HIDDEN_DIM, the deepstack list an array of
 * non-negative integers, dtypes known names (ect_dtype_parse).  A key that
 * occurs twice in one object with different values is a contradiction.
 *
 * json: borrowed, len bytes, need not be NUL-terminated.
 * model_p: out (caller storage), written only on success.
 * Returns ECT_OK;
 *   ECT_ERR_INVALID_ARG  json NULL with len > 0, or model_p NULL;
 *   ECT_ERR_PARSE        empty, not JSON, trailing bytes, or not an object;
 *   ECT_ERR_CONFIG       a missing, mistyped, out-of-range or contradicting
 *                        field, or a layout the engine's rule would size
 *                        wrongly (the message names the field and the value);
 *   ECT_ERR_NO_MEMORY.
 * Thread safety: safe; note that cJSON's parser records its last error
 * position in a process-wide variable that ectier never reads. */
ECT_API ECT_MUST_CHECK ect_status_t ect_hf_config_parse(const char *json, size_t len,
                                                        ect_hf_model_t *model_p);

/* Like ect_hf_config_parse, reading the file at path; if path is a directory
 * (a model snapshot), its config.json is read.  Error messages and logged
 * warnings start with the path.
 * path: borrowed.  model_p: out, written only on success.
 * Returns what ect_hf_config_parse returns, and
 *   ECT_ERR_NOT_FOUND  no such file;
 *   ECT_ERR_IO         it cannot be opened or read;
 *   ECT_ERR_OVERFLOW   it is larger than ECT_HF_CONFIG_MAX_BYTES.
 * Thread safety: safe. */
ECT_API ECT_MUST_CHECK ect_status_t ect_hf_config_load(const char *path, ect_hf_model_t *model_p);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_GEOMETRY_H */
