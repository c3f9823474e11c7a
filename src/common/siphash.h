/*
 * SipHash-1-3: a keyed 64-bit hash for hash tables whose keys may come from
 * outside (a peer's mm_hash), so a chosen set of keys cannot pile into one
 * bucket without knowing the key.  Written from the SipHash paper (Aumasson
 * and Bernstein, 2012) with one compression and three finalisation rounds.
 * Pure function; thread safe.
 */
#ifndef ECT_COMMON_SIPHASH_H
#define ECT_COMMON_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

/* Hash len bytes at data (borrowed) under the 128-bit key (k0, k1). */
uint64_t ect__siphash13(const void *data, size_t len, uint64_t k0, uint64_t k1);

/* SipHash-2-4, the paper's default; slower.  The same code with more
 * rounds, so the published 2-4 test vectors check the shared code. */
uint64_t ect__siphash24(const void *data, size_t len, uint64_t k0, uint64_t k1);

/* A fresh random 128-bit key from getrandom(2); falls back to mixing the
 * clock and addresses if the kernel has none (the table stays correct, only
 * less resistant to chosen keys). */
void ect__siphash_random_key(uint64_t *k0, uint64_t *k1);

#endif /* ECT_COMMON_SIPHASH_H */
