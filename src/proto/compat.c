/*
 * Peer-compatibility hash (SPEC §8.2): the SHA-256 of the JSON text Python
 * prints for json.dumps([engine_version, model, dtype, block_size_bytes],
 * separators=(",", ":")), byte for byte, so an ectier peer and a Python peer
 * that agree on the four factors agree on the hash.
 *
 * Python's default ensure_ascii escaping is reproduced exactly: printable
 * ASCII (0x20..0x7e) passes through except '"' and '\\'; the seven short
 * escapes \" \\ \n \r \t \b \f; every other code point as \uXXXX with
 * lowercase hex, including DEL (0x7f) and everything non-ASCII; code points
 * above U+FFFF as a UTF-16 surrogate pair.  Inputs are UTF-8 and must be
 * valid: Python has no str for invalid bytes, so there is no text to match.
 * No state, no locking.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "common/error.h"
#include "common/utf8.h"
#include "proto/wire.h"

static const char hex_digits[] = "0123456789abcdef";

/* One UTF-16 code unit as \uXXXX (Python writes lowercase hex). */
static ect_status_t
append_escape_u(ect__wire_buf_t *out, uint32_t unit)
{
    char esc[6] = {'\\',
                   'u',
                   hex_digits[(unit >> 12) & 0xf],
                   hex_digits[(unit >> 8) & 0xf],
                   hex_digits[(unit >> 4) & 0xf],
                   hex_digits[unit & 0xf]};
    return ect__wire_buf_append(out, esc, sizeof(esc));
}

/* Append s as a JSON string literal the way Python's ensure_ascii encoder
 * writes it. */
static ect_status_t
append_json_str(ect__wire_buf_t *out, const char *what, const char *s)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s);
    ect_status_t st = ect__wire_buf_append(out, "\"", 1);
    size_t i = 0;
    while (st == ECT_OK && i < n) {
        uint32_t cp;
        size_t step = ect__utf8_next(p + i, n - i, &cp);
        if (step == 0)
            return ect__error(ECT_ERR_INVALID_ARG,
                              "compat hash: %s has invalid UTF-8 at byte %zu (0x%02x)", what, i,
                              p[i]);
        i += step;
        const char *short_esc = NULL;
        switch (cp) {
        case '"':
            short_esc = "\\\"";
            break;
        case '\\':
            short_esc = "\\\\";
            break;
        case '\n':
            short_esc = "\\n";
            break;
        case '\r':
            short_esc = "\\r";
            break;
        case '\t':
            short_esc = "\\t";
            break;
        case '\b':
            short_esc = "\\b";
            break;
        case '\f':
            short_esc = "\\f";
            break;
        default:
            break;
        }
        if (short_esc != NULL) {
            st = ect__wire_buf_append(out, short_esc, 2);
        } else if (cp >= 0x20 && cp <= 0x7e) {
            char c = (char)cp;
            st = ect__wire_buf_append(out, &c, 1);
        } else if (cp < 0x10000) {
            st = append_escape_u(out, cp);
        } else {
            uint32_t v = cp - 0x10000;
            st = append_escape_u(out, 0xd800 | (v >> 10));
            if (st == ECT_OK)
                st = append_escape_u(out, 0xdc00 | (v & 0x3ff));
        }
    }
    if (st == ECT_OK)
        st = ect__wire_buf_append(out, "\"", 1);
    return st;
}

ect_status_t
ect__compat_text(const char *engine_version, const char *model, const char *dtype_torch_name,
                 uint64_t block_size_bytes, ect__wire_buf_t *out)
{
    if (engine_version == NULL || model == NULL || dtype_torch_name == NULL || out == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "compat hash: NULL argument");
    size_t start = out->len;
    char num[32];
    int num_len = snprintf(num, sizeof(num), "%" PRIu64 "]", block_size_bytes);
    ect_status_t st = ect__wire_buf_append(out, "[", 1);
    if (st == ECT_OK)
        st = append_json_str(out, "engine_version", engine_version);
    if (st == ECT_OK)
        st = ect__wire_buf_append(out, ",", 1);
    if (st == ECT_OK)
        st = append_json_str(out, "model", model);
    if (st == ECT_OK)
        st = ect__wire_buf_append(out, ",", 1);
    if (st == ECT_OK)
        st = append_json_str(out, "dtype", dtype_torch_name);
    if (st == ECT_OK)
        st = ect__wire_buf_append(out, ",", 1);
    if (st == ECT_OK)
        st = ect__wire_buf_append(out, num, (size_t)num_len);
    if (st != ECT_OK)
        out->len = start;
    return st;
}

ect_status_t
ect__compat_hash(const char *engine_version, const char *model, const char *dtype_torch_name,
                 uint64_t block_size_bytes, char hex_p[65])
{
    if (hex_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "compat hash: NULL output");
    ect__wire_buf_t text;
    ect__wire_buf_init(&text);
    ect_status_t st =
        ect__compat_text(engine_version, model, dtype_torch_name, block_size_bytes, &text);
    if (st != ECT_OK)
        goto free_text;
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    if (EVP_Digest(text.data, text.len, digest, &digest_len, EVP_sha256(), NULL) != 1 ||
        digest_len != 32) {
        st = ect__error(ECT_ERR_INTERNAL, "compat hash: libcrypto SHA-256 failed");
        goto free_text;
    }
    for (unsigned i = 0; i < 32; i++) {
        hex_p[2 * i] = hex_digits[digest[i] >> 4];
        hex_p[2 * i + 1] = hex_digits[digest[i] & 0x0f];
    }
    hex_p[64] = '\0';
free_text:
    ect__wire_buf_cleanup(&text);
    return st;
}
