/* The framing shared by step metadata and worker reports (see frame.h). */
#include <string.h>

#include <ectier/types.h>

#include "common/error.h"
#include "step/frame.h"

ect_status_t
ect__step_check_key(const char *what, const char *key, size_t len)
{
    if (len == 0 || len > ECT_KEY_MAX)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: key of %zu bytes (allowed 1..%d)", what, len,
                          ECT_KEY_MAX);
    if (memchr(key, '\0', len) != NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: key contains a NUL byte", what);
    return ECT_OK;
}

void
ect__step_put_frame_header(ect_bytes_writer_t *w, const char *magic, uint64_t body_len)
{
    ect__put_bytes(w, magic, 4);
    ect__put_u32(w, ECT__STEP_LAYOUT_VERSION);
    ect__put_u64(w, body_len);
}

ect_status_t
ect__step_read_frame(ect_bytes_reader_t *r, const char *magic, const char *what,
                     ect_bytes_reader_t *body_p)
{
    const uint8_t *m = ect__get_bytes(r, 4);
    uint32_t version = ect__get_u32(r);
    uint64_t body_len = ect__get_u64(r);
    if (r->failed)
        return ect__error(ECT_ERR_PARSE, "%s: truncated frame header", what);
    if (memcmp(m, magic, 4) != 0)
        return ect__error(ECT_ERR_PARSE, "%s: bad magic (not %s bytes)", what, magic);
    if (version != ECT__STEP_LAYOUT_VERSION)
        return ect__error(ECT_ERR_PARSE, "%s: layout version %u, this build reads %u", what,
                          version, ECT__STEP_LAYOUT_VERSION);
    if (body_len > ect__remaining(r))
        return ect__error(ECT_ERR_PARSE, "%s: body of %llu bytes but only %zu remain", what,
                          (unsigned long long)body_len, ect__remaining(r));
    body_p->p = r->p;
    body_p->end = r->p + body_len;
    body_p->failed = 0;
    r->p += body_len;
    return ECT_OK;
}

ect_status_t
ect__step_read_key(ect_bytes_reader_t *r, const char *what, char *buf)
{
    uint32_t klen = ect__get_u32(r);
    if (r->failed)
        return ect__error(ECT_ERR_PARSE, "%s: truncated key length", what);
    if (klen == 0 || klen > ECT_KEY_MAX)
        return ect__error(ECT_ERR_PARSE, "%s: key length %u (allowed 1..%d)", what, klen,
                          ECT_KEY_MAX);
    const uint8_t *k = ect__get_bytes(r, klen);
    if (k == NULL)
        return ect__error(ECT_ERR_PARSE, "%s: truncated key", what);
    if (memchr(k, '\0', klen) != NULL)
        return ect__error(ECT_ERR_PARSE, "%s: key contains a NUL byte", what);
    memcpy(buf, k, klen);
    buf[klen] = '\0';
    return ECT_OK;
}
