/*
 * Fuzz target for ect_hf_config_parse: a model's config.json comes from
 * outside, so any bytes must give ECT_OK with a sane result or an error with
 * a message, never a crash, hang or leak.  The checks below are on our own
 * invariants (what a success promises), so they may abort.
 * Corpus: fuzz/corpus/hf_config (the real files of tests/data/hf-configs and
 * malformed variants), replayed by test_fuzz_hf_config.  Log lines (the
 * dtype-disagreement warning) go to a sink that drops them, so the warning
 * is still formatted on every input but does not flood the output.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/geometry.h>
#include <ectier/log.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
drop_line(ect_log_level_t level, const char *message, void *user)
{
    (void)level;
    (void)message;
    (void)user;
}

static int
terminated(const char *s, size_t len)
{
    return memchr(s, '\0', len) != NULL;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ect_log_set_sink(drop_line, NULL);
    ect_hf_model_t m;
    memset(&m, 0xEE, sizeof(m));
    ect_status_t s = ect_hf_config_parse((const char *)data, size, &m);
    if (s == ECT_OK) {
        if (m.hidden_dim == 0 || m.hidden_dim > ECT_GEOMETRY_MAX_HIDDEN_DIM)
            abort();
        if (m.has_dtype != 0 && m.has_dtype != 1)
            abort();
        if (m.has_dtype && ect_dtype_size(m.dtype) == 0)
            abort();
        if (!terminated(m.hidden_dim_source, sizeof(m.hidden_dim_source)) ||
            !terminated(m.dtype_source, sizeof(m.dtype_source)) ||
            !terminated(m.model_type, sizeof(m.model_type)))
            abort();
        if (m.hidden_dim_source[0] == '\0' || (m.has_dtype && m.dtype_source[0] == '\0'))
            abort();
        /* A successful parse always gives a usable geometry. */
        ect_geometry_t g;
        ect_dtype_t dtype = m.has_dtype ? m.dtype : ECT_DTYPE_F32;
        if (ect_geometry_init(m.hidden_dim, dtype, UINT64_C(1) << 30, &g) != ECT_OK)
            abort();
    } else {
        if (s != ECT_ERR_PARSE && s != ECT_ERR_CONFIG && s != ECT_ERR_NO_MEMORY)
            abort();
        if (ect_last_error()[0] == '\0')
            abort();
        if (m.hidden_dim != 0xEEEEEEEEEEEEEEEEull) /* written only on success */
            abort();
    }
    return 0;
}
