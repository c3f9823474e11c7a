/*
 * Strict reading of JSON text that arrives from outside: the engine's
 * ec_transfer_config, the binding's engine description and requests.
 *
 * cJSON alone accepts bad UTF-8, silently cuts strings at an escaped NUL,
 * takes "0123" or "1." as numbers, ignores text after the first value and
 * keeps both copies of a duplicate key.  ect__json_parse checks the bytes
 * first (size, NUL bytes, UTF-8, \u0000 escapes, numbers, nesting) and then
 * parses; ect__json_check_keys refuses duplicate keys in one object.
 *
 * Messages start with `what` ("config", "engine description", "request"),
 * so each caller's errors read as its own.  Pure functions, no state.
 */
#ifndef ECT_COMMON_JSON_H
#define ECT_COMMON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include <ectier/status.h>

/* The deepest nesting of arrays and objects accepted. */
#define ECT_JSON_DEPTH_MAX 32
/* The most keys one object may have (keeps duplicate detection cheap). */
#define ECT_JSON_KEYS_MAX 256

/* Check and parse the len bytes at json (need not be NUL-terminated) as one
 * JSON value of at most max_len bytes.  On ECT_OK *root_p is a tree the
 * caller frees with cJSON_Delete.  Returns ECT_ERR_PARSE with a message
 * naming `what`, the problem and its offset. */
ect_status_t ect__json_parse(const char *what, const char *json, size_t len, size_t max_len,
                             cJSON **root_p);

/* Refuse an object with more than ECT_JSON_KEYS_MAX keys or a key given
 * twice.  where says which object ("at the top level").  Returns ECT_OK or
 * ECT_ERR_CONFIG. */
ect_status_t ect__json_check_keys(const char *what, const cJSON *obj, const char *where);

/* Add item (owned: deleted if it cannot be added, as cJSON's own
 * cJSON_Add*ToObject do) to obj under key, or to the array obj when key is
 * NULL.  A NULL item is a failure too (what a failed cJSON_Create* gave).
 * Returns true when added. */
bool ect__json_put(cJSON *obj, const char *key, cJSON *item);

/* A JSON number that prints as the exact decimal integer v (a raw item:
 * for printing, not for reading back with cJSON's number accessors), or
 * NULL when out of memory.  cJSON's own numbers print at 15 significant
 * digits wherever that reads back within a relative 2.2e-16, which turns
 * integers above 2^51 into their neighbours (9007199254704869 prints as
 * 9.00719925470487e+15) and those above 10^15 into exponent notation that
 * readers take for a float; every 64-bit integer the library prints
 * (sizes, counters, nanosecond clocks) goes through here. */
cJSON *ect__json_uint_new(uint64_t v);

/* Add ect__json_uint_new(v) to obj under key (ect__json_put's rules). */
bool ect__json_put_uint(cJSON *obj, const char *key, uint64_t v);

/* An integer JSON number in lo..hi (both at most 2^53, where every integer
 * is exact in a double): 0 and *v_p set, else -1. */
int ect__json_uint(const cJSON *item, uint64_t lo, uint64_t hi, uint64_t *v_p);

#endif /* ECT_COMMON_JSON_H */
