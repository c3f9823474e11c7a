/*
 * UTF-8 validation for text that arrives from outside (config JSON, key
 * names).  cJSON accepts any byte sequence inside strings, so ectier checks
 * the bytes itself before parsing.  Pure functions, no state.
 */
#ifndef ECT_COMMON_UTF8_H
#define ECT_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Whether the len bytes at s are well-formed UTF-8 (RFC 3629): no overlong
 * forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no
 * truncated sequence.  NUL bytes are well-formed here; callers that forbid
 * them check separately.  On false, *bad_off_p (optional) gets the offset of
 * the first byte of the first bad sequence.
 */
bool ect__utf8_valid(const char *s, size_t len, size_t *bad_off_p);

/* Length of the longest prefix of s[0..len) that does not end inside a
 * multi-byte sequence, and is at most max bytes: where to cut well-formed
 * UTF-8 for a message without splitting a character. */
size_t ect__utf8_cut(const char *s, size_t len, size_t max);

#endif /* ECT_COMMON_UTF8_H */
