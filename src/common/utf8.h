/*
 * UTF-8 for text that arrives from outside (config JSON, key names, wire
 * strings): the library's one decoder and the checks built on it.  cJSON
 * and msgpack accept any byte sequence inside strings, so ectier checks the
 * bytes itself.  Pure functions, no state.
 */
#ifndef ECT_COMMON_UTF8_H
#define ECT_COMMON_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decode one UTF-8 sequence at s (n > 0 bytes available): the number of
 * bytes it takes, with the code point in *cp_p, or 0 if it is invalid
 * (overlong, surrogate, beyond U+10FFFF, bad continuation, truncated). */
size_t ect__utf8_next(const uint8_t *s, size_t n, uint32_t *cp_p);

/*
 * Whether the len bytes at s are well-formed UTF-8 (RFC 3629): no overlong
 * forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no
 * truncated sequence.  NUL bytes are well-formed here; callers that forbid
 * them check separately.  On false, *bad_off_p (optional) gets the offset of
 * the first byte of the first bad sequence.
 */
bool ect__utf8_valid(const char *s, size_t len, size_t *bad_off_p);

/* True if the n bytes at s are well-formed UTF-8 containing no NUL (a wire
 * string that becomes a C string). */
bool ect__utf8_valid_nonul(const uint8_t *s, size_t n);

/* Length of the longest prefix of s[0..len) that does not end inside a
 * multi-byte sequence, and is at most max bytes: where to cut well-formed
 * UTF-8 for a message without splitting a character. */
size_t ect__utf8_cut(const char *s, size_t len, size_t max);

#endif /* ECT_COMMON_UTF8_H */
