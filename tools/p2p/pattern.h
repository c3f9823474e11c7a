/*
 * The deterministic test content of `ectier producer --fill` and
 * `ectier consumer --verify-pattern` (issue "Peer-to-peer transfer", item 6):
 *
 *   mm_hash of entry i = lowercase hex SHA-256 of the ASCII text "ectier-test-<i>"
 *   payload = little-endian 64-bit words splitmix64(seed), seed = FNV-1a 64
 *             of the mm_hash text, truncated to the payload size
 *
 * Black-box tests and other tools rely on exactly this.
 */
#ifndef ECT_TOOLS_P2P_PATTERN_H
#define ECT_TOOLS_P2P_PATTERN_H

#include <stddef.h>
#include <stdint.h>

/* out: 65 bytes. */
void ect_pattern_mm_hash(unsigned index, char out[65]);

/* Fill buf with the pattern of mm_hash. */
void ect_pattern_fill(const char *mm_hash, uint8_t *buf, size_t len);

/* Offset of the first byte that differs from the pattern, or len if none. */
size_t ect_pattern_check(const char *mm_hash, const uint8_t *buf, size_t len);

#endif /* ECT_TOOLS_P2P_PATTERN_H */
