/*
 * UTF-8 (RFC 3629, table 3-7 of the Unicode standard): the one decoder of
 * the library, and the checks built on it.
 *
 * A sequence is refused if it is overlong (C0, C1, E0 80..9F, F0 80..8F),
 * a UTF-16 surrogate (ED A0..BF), above U+10FFFF (F4 90..BF, F5..FF), has a
 * bad continuation byte or is cut short; Python's strict decoder refuses
 * the same.  Pure, no state.
 */
#include <stdint.h>
#include <string.h>

#include "common/utf8.h"

size_t
ect__utf8_next(const uint8_t *s, size_t n, uint32_t *cp_p)
{
    uint8_t b = s[0];
    size_t want;
    uint32_t cp, min;
    if (b < 0x80) {
        *cp_p = b;
        return 1;
    } else if (b >= 0xc2 && b <= 0xdf) {
        want = 2, cp = b & 0x1f, min = 0x80;
    } else if (b >= 0xe0 && b <= 0xef) {
        want = 3, cp = b & 0x0f, min = 0x800;
    } else if (b >= 0xf0 && b <= 0xf4) {
        want = 4, cp = b & 0x07, min = 0x10000;
    } else {
        return 0; /* continuation byte, overlong lead (c0, c1) or beyond f4 */
    }
    if (n < want)
        return 0;
    for (size_t i = 1; i < want; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return 0;
    *cp_p = cp;
    return want;
}

bool
ect__utf8_valid(const char *s, size_t len, size_t *bad_off_p)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        /* Identifiers are mostly ASCII (a hex mm_hash): eight bytes at a
         * time while no byte has its top bit set. */
        uint64_t w;
        if (len - i >= sizeof(w)) {
            memcpy(&w, p + i, sizeof(w));
            if ((w & 0x8080808080808080ull) == 0) {
                i += sizeof(w);
                continue;
            }
        }
        uint32_t cp;
        size_t k = ect__utf8_next(p + i, len - i, &cp);
        if (k == 0) {
            if (bad_off_p != NULL)
                *bad_off_p = i;
            return false;
        }
        i += k;
    }
    return true;
}

bool
ect__utf8_valid_nonul(const uint8_t *s, size_t n)
{
    /* An empty string may come as NULL (msgpack's empty str). */
    return n == 0 || (memchr(s, 0, n) == NULL && ect__utf8_valid((const char *)s, n, NULL));
}

size_t
ect__utf8_cut(const char *s, size_t len, size_t max)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = ect__utf8_next(p + i, len - i, &cp);
        if (k == 0)
            k = 1; /* a stray byte stands alone; the caller escapes it */
        if (i + k > max)
            break;
        i += k;
    }
    return i;
}
