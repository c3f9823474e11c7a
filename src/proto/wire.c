/*
 * Wire codec, encoding side (SPEC §8.1): status classification, the growable
 * buffer, UTF-8 checks shared with the decoder and the compatibility hash,
 * and the two encoders.
 *
 * Encoding goes through msgpack-c's packer, which already picks the
 * smallest encoding of every integer, string, blob, array and map header, as
 * the seed's encoder does.  Keys are written in declaration order after
 * "type"; a field equal to its default is left out, except connector_version
 * when the caller asks for it.  Everything is validated before the first
 * byte is written, and a failure rolls buf->len back, so a caller never sees
 * half a message.  No locking: no shared state.
 */
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/utf8.h"
#include "proto/wire.h"

/* ---- status classification --------------------------------------------- */

bool
ect__wire_status_valid(int64_t value)
{
    return value >= 0 && value < ECT_XFER_STATUS_COUNT;
}

bool
ect__wire_status_is_retryable(ect_xfer_status_t status)
{
    return status == ECT_XFER_NACK_NOT_READY;
}

bool
ect__wire_status_is_expected(ect_xfer_status_t status)
{
    return status == ECT_XFER_NACK_NOT_READY || status == ECT_XFER_NACK_MISSING;
}

/* ---- buffers -------------------------------------------------------------- */

void
ect__wire_buf_init(ect__wire_buf_t *buf)
{
    buf->data = NULL;
    buf->len = 0;
    buf->cap = 0;
}

void
ect__wire_buf_cleanup(ect__wire_buf_t *buf)
{
    if (buf == NULL)
        return;
    ect__free(buf->data);
    ect__wire_buf_init(buf);
}

ect_status_t
ect__wire_buf_append(ect__wire_buf_t *buf, const void *bytes, size_t n)
{
    if (n > SIZE_MAX - buf->len)
        return ect__error(ECT_ERR_NO_MEMORY, "wire buffer: %zu + %zu bytes overflows", buf->len, n);
    size_t need = buf->len + n;
    if (need > buf->cap) {
        size_t cap = buf->cap != 0 ? buf->cap : 256;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        uint8_t *grown = ect__realloc(buf->data, cap);
        if (grown == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "wire buffer: cannot grow to %zu bytes", cap);
        buf->data = grown;
        buf->cap = cap;
    }
    if (n > 0)
        memcpy(buf->data + buf->len, bytes, n);
    buf->len = need;
    return ECT_OK;
}

/* ---- encoding ------------------------------------------------------------- */

/* msgpack-c's write callback: append to an ect__wire_buf_t. */
static int
buf_write(void *data, const char *bytes, size_t n)
{
    return ect__wire_buf_append(data, bytes, n) == ECT_OK ? 0 : -1;
}

/* A string field the encoder may write: present, within its limit and
 * decodable by our own decoder. */
static ect_status_t
check_str(const char *what, const char *field, const char *s, bool required)
{
    if (s == NULL) {
        if (required)
            return ect__error(ECT_ERR_INVALID_ARG, "wire encode %s: %s is NULL", what, field);
        return ECT_OK;
    }
    size_t n = strlen(s);
    if (n > ECT_WIRE_MAX_STR)
        return ect__error(ECT_ERR_OVERFLOW, "wire encode %s: %s is %zu bytes, at most %u allowed",
                          what, field, n, ECT_WIRE_MAX_STR);
    if (!ect__utf8_valid_nonul((const uint8_t *)s, n))
        return ect__error(ECT_ERR_INVALID_ARG, "wire encode %s: %s is not valid UTF-8", what,
                          field);
    return ECT_OK;
}

static ect_status_t
check_blob(const char *field, const uint8_t *p, size_t n)
{
    if (n > ECT_WIRE_MAX_BLOB)
        return ect__error(ECT_ERR_OVERFLOW, "wire encode ack: %s is %zu bytes, at most %u allowed",
                          field, n, ECT_WIRE_MAX_BLOB);
    if (n > 0 && p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "wire encode ack: %s is NULL with length %zu", field,
                          n);
    return ECT_OK;
}

/* Each pack_* returns true on failure (the packer's callback could not
 * grow the buffer).  They are chained with || so the bytes are written in
 * order and writing stops at the first failure. */
static bool
pack_key(msgpack_packer *pk, const char *key)
{
    size_t n = strlen(key);
    return msgpack_pack_str(pk, n) != 0 || msgpack_pack_str_body(pk, key, n) != 0;
}

static bool
pack_str_field(msgpack_packer *pk, const char *key, const char *value)
{
    size_t n = strlen(value);
    return pack_key(pk, key) || msgpack_pack_str(pk, n) != 0 ||
           msgpack_pack_str_body(pk, value, n) != 0;
}

static bool
pack_bin_field(msgpack_packer *pk, const char *key, const uint8_t *value, size_t n)
{
    return pack_key(pk, key) || msgpack_pack_bin(pk, n) != 0 ||
           msgpack_pack_bin_body(pk, value, n) != 0;
}

static bool
pack_blocks_field(msgpack_packer *pk, const uint64_t *blocks, size_t n)
{
    if (pack_key(pk, "src_block_indices") || msgpack_pack_array(pk, n) != 0)
        return true;
    for (size_t i = 0; i < n; i++)
        if (msgpack_pack_uint64(pk, blocks[i]) != 0)
            return true;
    return false;
}

/* Shared tail of both encoders: roll back a partial message. */
static ect_status_t
finish(const char *what, bool failed, ect__wire_buf_t *buf, size_t start)
{
    if (!failed)
        return ECT_OK;
    buf->len = start;
    return ect__error(ECT_ERR_NO_MEMORY, "wire encode %s: out of memory", what);
}

static bool
present(const char *s)
{
    return s != NULL && s[0] != '\0';
}

ect_status_t
ect__wire_encode_req(const ect_xfer_req_t *req, ect__wire_buf_t *buf)
{
    if (req == NULL || buf == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "wire encode req: NULL argument");
    ect_status_t st;
    if ((st = check_str("req", "mm_hash", req->mm_hash, true)) != ECT_OK ||
        (st = check_str("req", "compatibility_hash", req->compatibility_hash, true)) != ECT_OK ||
        (st = check_str("req", "session_id", req->session_id, false)) != ECT_OK)
        return st;

    bool with_session = present(req->session_id);
    bool with_version = req->has_connector_version;
    size_t n_keys = 3 + (size_t)with_session + (size_t)with_version + (size_t)req->accepts_runs;
    size_t start = buf->len;
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, buf_write);
    bool failed =
        msgpack_pack_map(&pk, n_keys) != 0 || pack_str_field(&pk, "type", "req") ||
        pack_str_field(&pk, "mm_hash", req->mm_hash) ||
        pack_str_field(&pk, "compatibility_hash", req->compatibility_hash) ||
        (with_session && pack_str_field(&pk, "session_id", req->session_id)) ||
        (with_version && (pack_key(&pk, "connector_version") ||
                          msgpack_pack_int64(&pk, req->connector_version) != 0)) ||
        (req->accepts_runs && (pack_key(&pk, "ectier_runs") || msgpack_pack_true(&pk) != 0));
    return finish("req", failed, buf, start);
}

ect_status_t
ect__wire_encode_ack(const ect_xfer_ack_t *ack, ect__wire_buf_t *buf)
{
    if (ack == NULL || buf == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "wire encode ack: NULL argument");
    ect_status_t st;
    if ((st = check_str("ack", "mm_hash", ack->mm_hash, true)) != ECT_OK ||
        (st = check_str("ack", "session_id", ack->session_id, false)) != ECT_OK ||
        (st = check_blob("agent_metadata", ack->agent_metadata, ack->agent_metadata_len)) !=
            ECT_OK ||
        (st = check_blob("mem_descriptor", ack->mem_descriptor, ack->mem_descriptor_len)) != ECT_OK)
        return st;
    if (!ect__wire_status_valid(ack->status))
        return ect__error(ECT_ERR_INVALID_ARG, "wire encode ack: status %d is not 0..%d",
                          (int)ack->status, ECT_XFER_STATUS_COUNT - 1);
    /* The count is checked before the array is touched, so a wrong count
     * with a short array is refused rather than read past. */
    if (ack->n_src_blocks > ECT_WIRE_MAX_BLOCKS)
        return ect__error(ECT_ERR_OVERFLOW,
                          "wire encode ack: %zu src_block_indices, at most %u allowed",
                          ack->n_src_blocks, ECT_WIRE_MAX_BLOCKS);
    if (ack->n_src_blocks > 0 && ack->src_block_indices == NULL)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "wire encode ack: src_block_indices is NULL with %zu entries",
                          ack->n_src_blocks);

    bool with_session = present(ack->session_id);
    bool with_blocks = ack->n_src_blocks > 0;
    bool with_agent = ack->agent_metadata_len > 0;
    bool with_desc = ack->mem_descriptor_len > 0;
    size_t n_keys =
        3 + (size_t)with_session + (size_t)with_blocks + (size_t)with_agent + (size_t)with_desc;
    size_t start = buf->len;
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, buf_write);
    bool failed =
        msgpack_pack_map(&pk, n_keys) != 0 || pack_str_field(&pk, "type", "ack") ||
        pack_str_field(&pk, "mm_hash", ack->mm_hash) || pack_key(&pk, "status") ||
        msgpack_pack_uint8(&pk, (uint8_t)ack->status) != 0 ||
        (with_session && pack_str_field(&pk, "session_id", ack->session_id)) ||
        (with_blocks && pack_blocks_field(&pk, ack->src_block_indices, ack->n_src_blocks)) ||
        (with_agent &&
         pack_bin_field(&pk, "agent_metadata", ack->agent_metadata, ack->agent_metadata_len)) ||
        (with_desc &&
         pack_bin_field(&pk, "mem_descriptor", ack->mem_descriptor, ack->mem_descriptor_len));
    return finish("ack", failed, buf, start);
}

ect_status_t
ect__wire_encode_done(const ect_xfer_done_t *done, ect__wire_buf_t *buf)
{
    if (done == NULL || buf == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "wire encode done: NULL argument");
    ect_status_t st;
    if ((st = check_str("done", "mm_hash", done->mm_hash, true)) != ECT_OK ||
        (st = check_str("done", "session_id", done->session_id, true)) != ECT_OK)
        return st;
    if (!present(done->mm_hash) || !present(done->session_id))
        return ect__error(ECT_ERR_INVALID_ARG, "wire encode done: empty mm_hash or session_id");
    size_t start = buf->len;
    msgpack_packer pk;
    msgpack_packer_init(&pk, buf, buf_write);
    bool failed = msgpack_pack_map(&pk, 3) != 0 || pack_str_field(&pk, "type", "done") ||
                  pack_str_field(&pk, "mm_hash", done->mm_hash) ||
                  pack_str_field(&pk, "session_id", done->session_id);
    return finish("done", failed, buf, start);
}
