/*
 * UTF-8 validation (RFC 3629, table 3-7 of the Unicode standard).
 *
 * The second byte's allowed range depends on the lead byte; that is what
 * rules out overlong forms (E0 80..9F, F0 80..8F), surrogates (ED A0..BF)
 * and code points above U+10FFFF (F4 90..BF, F5..FF).  Pure, no state.
 */
#include <stdint.h>
#include <string.h>

#include "common/utf8.h"

/* Number of bytes of the sequence starting at s[0], or 0 if it is not a
 * well-formed sequence within the n bytes available. */
static size_t
sequence_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0; /* continuation byte, C0/C1 (overlong) or F5..FF */
    }
    if (n < need)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < need; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return need;
}

bool
ect__utf8_valid(const char *s, size_t len, size_t *bad_off_p)
{
    const unsigned char *p = (const unsigned char *)s;
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
        size_t k = sequence_len(p + i, len - i);
        if (k == 0) {
            if (bad_off_p != NULL)
                *bad_off_p = i;
            return false;
        }
        i += k;
    }
    return true;
}

size_t
ect__utf8_cut(const char *s, size_t len, size_t max)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        size_t k = sequence_len(p + i, len - i);
        if (k == 0)
            k = 1; /* a stray byte stands alone; the caller escapes it */
        if (i + k > max)
            break;
        i += k;
    }
    return i;
}
