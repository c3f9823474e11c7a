/*
 * The region's on-file layout: name rules, header checks and pre-faulting.
 *
 * Header numbers come from a file anyone may have written, so every one of
 * them is checked against the others and against the file's real size
 * before a mapping is sized from them.  Pre-faulting never changes a byte:
 * joiners may pre-fault while other processes already write blocks.
 * No state, no locks.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/error.h"
#include "region/region_internal.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

unsigned ect__region_test_flags;

int
ect__region_name_fault(const char *text, size_t len, size_t max, size_t *at_p)
{
    if (len == 0)
        return ECT__NAME_EMPTY;
    if (len > max)
        return ECT__NAME_TOO_LONG;
    if (text[0] == '.')
        return ECT__NAME_DOT_FIRST;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '.' && i + 1 < len && text[i + 1] == '.')
            return ECT__NAME_DOTDOT;
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        if (!ok) {
            *at_p = i;
            return ECT__NAME_BAD_CHAR;
        }
    }
    return ECT__NAME_OK;
}

ect_status_t
ect__region_check_name(const char *what, const char *text, size_t max)
{
    size_t len = text != NULL ? strnlen(text, max + 1) : 0, at = 0;
    switch (ect__region_name_fault(text, len, max, &at)) {
    case ECT__NAME_OK:
        return ECT_OK;
    case ECT__NAME_EMPTY:
        return ect__error(ECT_ERR_INVALID_ARG, "%s is empty; use 1..%zu characters of A-Za-z0-9._-",
                          what, max);
    case ECT__NAME_TOO_LONG:
        return ect__error(ECT_ERR_INVALID_ARG, "%s '%.40s...' is longer than %zu characters", what,
                          text, max);
    case ECT__NAME_DOT_FIRST:
        return ect__error(ECT_ERR_INVALID_ARG, "%s '%s' starts with '.'; allowed: A-Za-z0-9._-",
                          what, text);
    case ECT__NAME_DOTDOT:
        return ect__error(ECT_ERR_INVALID_ARG, "%s '%s' contains \"..\"", what, text);
    default:
        return ect__error(ECT_ERR_INVALID_ARG,
                          "%s '%s' has character 0x%02x at %zu; allowed: A-Za-z0-9._-", what, text,
                          (unsigned char)text[at], at);
    }
}

int
ect__region_has_magic(const void *buf, size_t len)
{
    return len >= ECT__REGION_MAGIC_LEN &&
           memcmp(buf, ECT__REGION_MAGIC, ECT__REGION_MAGIC_LEN) == 0;
}

void
ect__region_format_geometry(char *buf, size_t len, uint64_t hidden_dim, uint32_t dtype_code,
                            uint32_t element_size, uint64_t block_size_bytes, uint64_t num_blocks)
{
    snprintf(buf, len,
             "hidden_dim=%" PRIu64 " dtype=%" PRIu32 " element_size=%" PRIu32 " block_size=%" PRIu64
             " num_blocks=%" PRIu64,
             hidden_dim, dtype_code, element_size, block_size_bytes, num_blocks);
}

static int header_fail(char *why, size_t why_len, const char *fmt, ...) ECT_PRINTF(3, 4);

static int
header_fail(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return -1;
}

int
ect__region_header_check(const struct ect__region_header *h, uint64_t st_size, char *why,
                         size_t why_len)
{
    if (st_size < sizeof(*h))
        return header_fail(why, why_len,
                           "file is %" PRIu64 " bytes, smaller than an ectier header (%zu)",
                           st_size, sizeof(*h));
    if (!ect__region_has_magic(h->magic, sizeof(h->magic)))
        return header_fail(why, why_len, "not an ectier region (no ectier magic at offset 0)");
    if (h->layout_version != ECT__REGION_LAYOUT_VERSION)
        return header_fail(why, why_len, "layout version %" PRIu32 ", this build reads %u",
                           h->layout_version, ECT__REGION_LAYOUT_VERSION);
    if (h->header_size != sizeof(*h))
        return header_fail(why, why_len, "header size %" PRIu32 ", expected %zu", h->header_size,
                           sizeof(*h));
    if (h->data_offset < ECT__REGION_HEADER_AREA || h->data_offset % ECT__REGION_HEADER_AREA != 0 ||
        h->data_offset > (1u << 24))
        return header_fail(why, why_len,
                           "data offset %" PRIu64 " is not a multiple of %u in [%u, 16 MiB]",
                           h->data_offset, ECT__REGION_HEADER_AREA, ECT__REGION_HEADER_AREA);
    if (h->element_size != 1 && h->element_size != 2 && h->element_size != 4 &&
        h->element_size != 8)
        return header_fail(why, why_len, "element size %" PRIu32 " is not 1, 2, 4 or 8",
                           h->element_size);
    if (h->hidden_dim == 0 || h->hidden_dim > UINT64_MAX / h->element_size ||
        h->hidden_dim * h->element_size != h->block_size_bytes)
        return header_fail(why, why_len,
                           "block size %" PRIu64 " is not hidden_dim %" PRIu64
                           " x element size %" PRIu32,
                           h->block_size_bytes, h->hidden_dim, h->element_size);
    if (h->num_blocks == 0 || h->num_blocks > (UINT64_MAX - h->data_offset) / h->block_size_bytes)
        return header_fail(why, why_len, "%" PRIu64 " blocks of %" PRIu64 " bytes do not fit",
                           h->num_blocks, h->block_size_bytes);
    uint64_t expect = h->data_offset + h->num_blocks * h->block_size_bytes;
    if (h->file_size != expect)
        return header_fail(why, why_len,
                           "header file size %" PRIu64 " but its geometry needs %" PRIu64,
                           h->file_size, expect);
    if (st_size != h->file_size)
        return header_fail(why, why_len, "file is %" PRIu64 " bytes but its header says %" PRIu64,
                           st_size, h->file_size);
    if (memchr(h->name, '\0', sizeof(h->name)) == NULL ||
        memchr(h->instance_id, '\0', sizeof(h->instance_id)) == NULL)
        return header_fail(why, why_len, "name or instance id in the header is not terminated");
    return 0;
}

ect_status_t
ect__region_join_path(char *buf, size_t len, const char *dir, const char *name, const char *suffix)
{
    int n = snprintf(buf, len, "%s/%s%s", dir, name, suffix);
    if (n < 0 || (size_t)n >= len)
        return ect__error(ECT_ERR_INVALID_ARG, "region path '%s/%s%s' is longer than %zu bytes",
                          dir, name, suffix, len - 1);
    return ECT_OK;
}

/* madvise that retries when interrupted: populate stops at a pending signal
 * and returns EINTR; the pages done so far stay done. */
static int
madvise_retry(void *addr, size_t len, int advice)
{
    for (;;) {
        if (madvise(addr, len, advice) == 0)
            return 0;
        if (errno != EINTR && errno != EAGAIN)
            return -1;
    }
}

ect_status_t
ect__region_prefault(void *base, size_t len)
{
    long page_l = sysconf(_SC_PAGESIZE);
    size_t page = page_l > 0 ? (size_t)page_l : 4096;
    if (len == 0)
        return ECT_OK;
    if (!(ect__region_test_flags & ECT__REGION_TEST_FORCE_TOUCH)) {
        /* One page first: a kernel without MADV_POPULATE_WRITE (before 5.14)
         * says EINVAL at once, and any other error shows on a small range. */
        size_t probe = len < page ? len : page;
        if (madvise_retry(base, probe, MADV_POPULATE_WRITE) == 0) {
            if (madvise_retry(base, len, MADV_POPULATE_WRITE) != 0)
                return ect__error_errno(ECT_ERR_IO, "region prefault: madvise(%zu bytes)", len);
            /* And touch each page anyway.  Under a hypervisor that shadows
             * the guest's page tables, the kernel's populate does not make
             * the user-space translation: the first store to each page then
             * still traps, ~5 us a page on the project's VMs (a cold 1.75 MiB
             * copy 4.7 ms instead of 0.1).  After the populate the touch is
             * one store per page (2.4x cheaper than touching alone there,
             * and cheap where the populate already did it all). */
        } else if (errno != EINVAL) {
            return ect__error_errno(ECT_ERR_IO, "region prefault: madvise probe");
        } else {
            ECT_LOG_D("region prefault: MADV_POPULATE_WRITE unsupported, touching each page");
        }
    }
    /* A compare-and-swap of a byte with its own value write-faults the page
     * and cannot lose a store that another process makes to the same byte at
     * the same moment, which a plain read-modify-write could.  (An atomic OR
     * of zero may be lowered to a plain load, which only read-faults.) */
    uint8_t *p = base;
    for (size_t off = 0; off < len; off += page) {
        uint8_t v = __atomic_load_n(&p[off], __ATOMIC_RELAXED);
        while (!__atomic_compare_exchange_n(&p[off], &v, v, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            ;
    }
    return ECT_OK;
}
