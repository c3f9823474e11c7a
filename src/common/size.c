/*
 * ect_size_parse: byte sizes written by people ("8GiB", "512 MB", "4096").
 *
 * Decimal digits, optional spaces, an optional suffix from a fixed list
 * (case-insensitive).  Anything else (a sign, a fraction, hex, an unknown
 * suffix, trailing text) is refused rather than guessed at, and the product
 * is computed with overflow checks.  No state.
 */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include <ectier/config.h>

#include "common/error.h"

struct suffix {
    const char *text;
    uint64_t factor;
};

#define KIB UINT64_C(1024)
#define KB  UINT64_C(1000)

static const struct suffix suffixes[] = {
    {"b", 1},
    {"kb", KB},
    {"mb", KB *KB},
    {"gb", KB *KB *KB},
    {"tb", KB *KB *KB *KB},
    {"kib", KIB},
    {"mib", KIB *KIB},
    {"gib", KIB *KIB *KIB},
    {"tib", KIB *KIB *KIB *KIB},
    {"k", KIB},
    {"m", KIB *KIB},
    {"g", KIB *KIB *KIB},
    {"t", KIB *KIB *KIB *KIB},
};

#define SUFFIX_HELP                                                                                \
    "use B, KB MB GB TB (powers of 1000), KiB MiB GiB TiB or K M G T (powers of 1024)"

static bool
is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* The text for a message: at most 64 bytes, control bytes shown as '?'. */
static const char *
shown(char *buf, size_t cap, const char *p, const char *end)
{
    size_t n = (size_t)(end - p), o = 0;
    bool cut = n > 64;
    if (cut)
        n = 64;
    for (size_t i = 0; i < n && o + 4 < cap; i++)
        buf[o++] = ((unsigned char)p[i] < 0x20 || p[i] == 0x7f) ? '?' : p[i];
    if (cut && o + 4 < cap) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

ect_status_t
ect_size_parse(const char *text, uint64_t *bytes_p)
{
    const char *start, *p, *end;
    char q[80];
    uint64_t v = 0;

    if (text == NULL || bytes_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "size: NULL argument");
    start = text;
    end = text + strlen(text);
    while (start < end && is_blank(*start))
        start++;
    while (end > start && is_blank(end[-1]))
        end--;
    p = start;

    if (p == end)
        return ect__error(ECT_ERR_PARSE, "size is empty: give a number of bytes such as 8GiB");
    if (*p == '-' || *p == '+')
        return ect__error(ECT_ERR_PARSE, "size '%s' has a sign: give a plain number of bytes",
                          shown(q, sizeof(q), start, end));
    if (!isdigit((unsigned char)*p))
        return ect__error(ECT_ERR_PARSE, "size '%s' does not start with a digit",
                          shown(q, sizeof(q), start, end));
    for (; p < end && isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return ect__error(ECT_ERR_OVERFLOW, "size '%s' is larger than 2^64 - 1 bytes",
                              shown(q, sizeof(q), start, end));
        v = v * 10 + d;
    }
    if (p < end && (*p == '.' || *p == ','))
        return ect__error(ECT_ERR_PARSE,
                          "size '%s' has a fraction: give a whole number of bytes or a smaller "
                          "unit",
                          shown(q, sizeof(q), start, end));
    while (p < end && is_blank(*p))
        p++;
    if (p == end) {
        *bytes_p = v;
        return ECT_OK;
    }
    size_t slen = (size_t)(end - p);
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if (slen != strlen(suffixes[i].text) || strncasecmp(p, suffixes[i].text, slen) != 0)
            continue;
        uint64_t f = suffixes[i].factor;
        if (v > UINT64_MAX / f)
            return ect__error(ECT_ERR_OVERFLOW, "size '%s' is larger than 2^64 - 1 bytes",
                              shown(q, sizeof(q), start, end));
        *bytes_p = v * f;
        return ECT_OK;
    }
    char sq[80];
    return ect__error(ECT_ERR_PARSE, "size '%s' has an unknown suffix '%s': " SUFFIX_HELP,
                      shown(q, sizeof(q), start, end), shown(sq, sizeof(sq), p, end));
}
