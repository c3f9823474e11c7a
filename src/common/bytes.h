/*
 * Little-endian byte writer and bounds-checked reader for ectier's own
 * binary encodings (step metadata, worker reports).
 *
 * The reader never reads past its end: every get returns 0 and leaves the
 * reader failed once a read would overrun, so a decoder can read a whole
 * record and check `r.failed` once.
 */
#ifndef ECT_COMMON_BYTES_H
#define ECT_COMMON_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct ect_bytes_writer {
    uint8_t *p;
    uint8_t *end;
} ect_bytes_writer_t;

/* The puts and gets spell their bytes out through a local pointer: the
 * compiler then makes each one store or load (on a little-endian host).
 * A loop over *w->p++ stored a byte at a time and wrote w->p back after
 * each, since a byte store may alias the pointer itself. */
static inline void
ect__put_u32(ect_bytes_writer_t *w, uint32_t v)
{
    uint8_t *p = w->p;
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
    w->p = p + 4;
}

static inline void
ect__put_u64(ect_bytes_writer_t *w, uint64_t v)
{
    ect__put_u32(w, (uint32_t)v);
    ect__put_u32(w, (uint32_t)(v >> 32));
}

static inline void
ect__put_bytes(ect_bytes_writer_t *w, const void *src, size_t n)
{
    memcpy(w->p, src, n);
    w->p += n;
}

typedef struct ect_bytes_reader {
    const uint8_t *p;
    const uint8_t *end;
    int failed;
} ect_bytes_reader_t;

static inline size_t
ect__remaining(const ect_bytes_reader_t *r)
{
    return (size_t)(r->end - r->p);
}

static inline int
ect__take(ect_bytes_reader_t *r, size_t n)
{
    if (r->failed || ect__remaining(r) < n) {
        r->failed = 1;
        return 0;
    }
    return 1;
}

static inline uint32_t
ect__get_u32(ect_bytes_reader_t *r)
{
    if (!ect__take(r, 4))
        return 0;
    const uint8_t *p = r->p;
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    r->p = p + 4;
    return v;
}

static inline uint64_t
ect__get_u64(ect_bytes_reader_t *r)
{
    if (!ect__take(r, 8))
        return 0;
    const uint8_t *p = r->p;
    uint64_t v = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
                 (uint64_t)p[3] << 24 | (uint64_t)p[4] << 32 | (uint64_t)p[5] << 40 |
                 (uint64_t)p[6] << 48 | (uint64_t)p[7] << 56;
    r->p = p + 8;
    return v;
}

/* Borrow n bytes from the input; NULL (and failed) if fewer remain. */
static inline const uint8_t *
ect__get_bytes(ect_bytes_reader_t *r, size_t n)
{
    if (!ect__take(r, n))
        return NULL;
    const uint8_t *at = r->p;
    r->p += n;
    return at;
}

#endif /* ECT_COMMON_BYTES_H */
