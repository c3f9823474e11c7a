/*
 * Element types and block geometry (include/ectier/geometry.h, SPEC §3).
 *
 * The dtype table is the single place that knows names, aliases and sizes;
 * the canonical torch spelling it returns feeds the P2P compatibility hash,
 * so it must never change for an existing dtype.  All arithmetic on sizes is
 * overflow-checked even where the bounds make overflow impossible today,
 * because the bounds are the kind of thing that gets raised later.
 * src/geometry/ sits just above src/common/: the region and the cache use it,
 * it uses nothing of theirs.
 * No state, no locks.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <ectier/geometry.h>

#include "common/error.h"

struct dtype_info {
    ect_dtype_t dtype;
    size_t size;
    const char *name;       /* short name, also the first accepted alias */
    const char *torch_name; /* canonical, hashed */
    const char *aliases[4]; /* further accepted names, NULL-terminated */
};

static const struct dtype_info dtypes[] = {
    {ECT_DTYPE_BF16, 2, "bfloat16", "torch.bfloat16", {"bf16", NULL}},
    {ECT_DTYPE_F16, 2, "float16", "torch.float16", {"half", "fp16", "f16", NULL}},
    {ECT_DTYPE_F32, 4, "float32", "torch.float32", {"float", "fp32", "f32", NULL}},
    {ECT_DTYPE_F8_E4M3FN,
     1,
     "float8_e4m3fn",
     "torch.float8_e4m3fn",
     {"fp8_e4m3fn", "fp8_e4m3", "fp8", NULL}},
    {ECT_DTYPE_F8_E5M2, 1, "float8_e5m2", "torch.float8_e5m2", {"fp8_e5m2", NULL}},
    {ECT_DTYPE_F8_E4M3FNUZ, 1, "float8_e4m3fnuz", "torch.float8_e4m3fnuz", {"fp8_e4m3fnuz", NULL}},
    {ECT_DTYPE_F8_E5M2FNUZ, 1, "float8_e5m2fnuz", "torch.float8_e5m2fnuz", {"fp8_e5m2fnuz", NULL}},
};

#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

static const struct dtype_info *
dtype_lookup(ect_dtype_t dtype)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtypes[i].dtype == dtype)
            return &dtypes[i];
    return NULL;
}

/* "bfloat16|bf16|torch.bfloat16, float16|..." for error messages; built on
 * each call because errors are rare and a static buffer would need a lock. */
static void
accepted_names(char *buf, size_t len)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_DTYPES && off < len; i++) {
        int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", dtypes[i].name);
        if (n < 0)
            return;
        off += (size_t)n;
        for (size_t a = 0; dtypes[i].aliases[a] != NULL && off < len; a++) {
            n = snprintf(buf + off, len - off, "|%s", dtypes[i].aliases[a]);
            if (n < 0)
                return;
            off += (size_t)n;
        }
        if (off < len) {
            n = snprintf(buf + off, len - off, "|%s", dtypes[i].torch_name);
            if (n < 0)
                return;
            off += (size_t)n;
        }
    }
}

ect_status_t
ect_dtype_parse(const char *name, ect_dtype_t *dtype_p)
{
    if (name == NULL || dtype_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "dtype parse: NULL argument");
    for (size_t i = 0; i < N_DTYPES; i++) {
        const struct dtype_info *d = &dtypes[i];
        int match = strcasecmp(name, d->name) == 0 || strcasecmp(name, d->torch_name) == 0;
        for (size_t a = 0; !match && d->aliases[a] != NULL; a++)
            match = strcasecmp(name, d->aliases[a]) == 0;
        if (match) {
            *dtype_p = d->dtype;
            return ECT_OK;
        }
    }
    /* The name may come from a file or a command line: quote a printable
     * prefix of it, never raw control bytes. */
    char quoted[65];
    size_t i = 0;
    for (; name[i] != '\0' && i + 1 < sizeof(quoted); i++)
        quoted[i] = (name[i] >= 0x20 && name[i] < 0x7f) ? name[i] : '?';
    quoted[i] = '\0';
    char names[512];
    accepted_names(names, sizeof(names));
    return ect__error(ECT_ERR_INVALID_ARG, "dtype '%s' is not one of: %s", quoted, names);
}

size_t
ect_dtype_size(ect_dtype_t dtype)
{
    const struct dtype_info *d = dtype_lookup(dtype);
    return d != NULL ? d->size : 0;
}

const char *
ect_dtype_torch_name(ect_dtype_t dtype)
{
    const struct dtype_info *d = dtype_lookup(dtype);
    return d != NULL ? d->torch_name : NULL;
}

const char *
ect_dtype_name(ect_dtype_t dtype)
{
    const struct dtype_info *d = dtype_lookup(dtype);
    return d != NULL ? d->name : NULL;
}

/* The row: a known dtype and a hidden width in range; *block_p gets the
 * row's bytes.  The one check of both ect_geometry_init and _validate. */
static ect_status_t
check_row(uint64_t hidden_dim, ect_dtype_t dtype, const struct dtype_info **d_p, uint64_t *block_p)
{
    const struct dtype_info *d = dtype_lookup(dtype);
    if (d == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "geometry: dtype value %d is not a known dtype",
                          (int)dtype);
    if (hidden_dim == 0)
        return ect__error(ECT_ERR_INVALID_ARG, "geometry: hidden_dim must be positive, got 0");
    if (hidden_dim > ECT_GEOMETRY_MAX_HIDDEN_DIM)
        return ect__error(ECT_ERR_OVERFLOW,
                          "geometry: hidden_dim %" PRIu64 " exceeds the limit of %" PRIu64,
                          hidden_dim, ECT_GEOMETRY_MAX_HIDDEN_DIM);
    /* hidden_dim <= 2^20 and sizes <= 8: the product cannot overflow. */
    *d_p = d;
    *block_p = hidden_dim * (uint64_t)d->size;
    return ECT_OK;
}

ect_status_t
ect_geometry_init(uint64_t hidden_dim, ect_dtype_t dtype, uint64_t cpu_bytes,
                  ect_geometry_t *geometry_p)
{
    if (geometry_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "geometry: NULL output");
    const struct dtype_info *d;
    uint64_t block;
    ect_status_t st = check_row(hidden_dim, dtype, &d, &block);
    if (st != ECT_OK)
        return st;
    /* The seed treats a missing and a zero ec_cpu_bytes alike; keep its
     * wording so people searching for the message find both. */
    if (cpu_bytes == 0)
        return ect__error(ECT_ERR_CONFIG,
                          "ec_cpu_bytes must be specified in ec_connector_extra_config "
                          "(got 0; at least %" PRIu64 " bytes are needed for one block)",
                          block);
    if (cpu_bytes < block)
        return ect__error(ECT_ERR_CONFIG,
                          "ec_cpu_bytes %" PRIu64 " is smaller than one block of %" PRIu64
                          " bytes (hidden_dim %" PRIu64 " x %zu-byte %s): at least %" PRIu64
                          " bytes are needed",
                          cpu_bytes, block, hidden_dim, d->size, d->name, block);
    geometry_p->hidden_dim = hidden_dim;
    geometry_p->dtype = dtype;
    geometry_p->block_size_bytes = block;
    geometry_p->num_blocks = cpu_bytes / block;
    return ECT_OK;
}

ect_status_t
ect_geometry_validate(const ect_geometry_t *geometry)
{
    if (geometry == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "geometry: NULL");
    const struct dtype_info *d;
    uint64_t block;
    ect_status_t st = check_row(geometry->hidden_dim, geometry->dtype, &d, &block);
    if (st != ECT_OK)
        return st;
    if (geometry->block_size_bytes != block)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "geometry: block_size_bytes %" PRIu64 " is not hidden_dim %" PRIu64
                          " x %zu-byte %s = %" PRIu64,
                          geometry->block_size_bytes, geometry->hidden_dim, d->size, d->name,
                          block);
    if (geometry->num_blocks == 0)
        return ect__error(ECT_ERR_INVALID_ARG, "geometry: num_blocks is 0");
    return ECT_OK;
}

uint64_t
ect_geometry_entry_blocks(const ect_geometry_t *geometry, uint64_t payload_bytes)
{
    if (geometry == NULL || geometry->block_size_bytes == 0)
        return 0;
    /* Written this way rather than (p + b - 1) / b, which overflows near 2^64. */
    uint64_t b = geometry->block_size_bytes;
    return payload_bytes / b + (payload_bytes % b != 0);
}

ect_status_t
ect_geometry_payload_bytes(const ect_geometry_t *geometry, uint64_t n_tokens, uint64_t *bytes_p)
{
    if (geometry == NULL || bytes_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "geometry payload: NULL argument");
    if (geometry->block_size_bytes == 0)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "geometry payload: block size is 0 (not initialised)");
    uint64_t bytes;
    if (__builtin_mul_overflow(n_tokens, geometry->block_size_bytes, &bytes))
        return ect__error(ECT_ERR_OVERFLOW,
                          "geometry payload: %" PRIu64 " tokens x %" PRIu64 " bytes overflows",
                          n_tokens, geometry->block_size_bytes);
    *bytes_p = bytes;
    return ECT_OK;
}
