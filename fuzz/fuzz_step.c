/*
 * Fuzz target: step metadata and worker report decoding.  Whatever decodes
 * must re-encode to bytes that decode to the same counts.  The same bytes
 * decoded into values kept across inputs (as the worker and the scheduler
 * do) must give the same counts, or leave the value empty on an error.
 */
#include <stdint.h>
#include <stdlib.h>

#include <ectier/step.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decode into the kept values; abort unless they agree with a fresh
 * decode (n_meta / n_report: its item counts, SIZE_MAX where it failed). */
static void
decode_into_kept(const uint8_t *data, size_t size, size_t n_meta, size_t n_report)
{
    static ect_step_meta_t *kept_meta;
    static ect_step_report_t *kept_report;
    if ((kept_meta == NULL && ect_step_meta_create(&kept_meta) != ECT_OK) ||
        (kept_report == NULL && ect_step_report_create(&kept_report) != ECT_OK))
        abort();
    int ok = ect_step_meta_decode_into(kept_meta, data, size, 1u << 20) == ECT_OK;
    size_t n = ect_step_meta_n_saves(kept_meta) + ect_step_meta_n_loads(kept_meta);
    if (ok != (n_meta != SIZE_MAX) || n != (ok ? n_meta : 0))
        abort();
    ok = ect_step_report_decode_into(kept_report, data, size) == ECT_OK;
    n = ect_step_report_n_saves(kept_report) + ect_step_report_n_loads(kept_report) +
        ect_step_report_n_failed_saves(kept_report);
    if (ok != (n_report != SIZE_MAX) || n != (ok ? n_report : 0))
        abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n_meta = SIZE_MAX, n_report = SIZE_MAX;
    ect_step_meta_t *m = NULL;
    if (ect_step_meta_decode(data, size, 1u << 20, &m) == ECT_OK) {
        size_t cap = ect_step_meta_encoded_size(m), len;
        void *buf = malloc(cap);
        ect_step_meta_t *again = NULL;
        if (buf == NULL || ect_step_meta_encode(m, buf, cap, &len) != ECT_OK ||
            ect_step_meta_decode(buf, len, 1u << 20, &again) != ECT_OK ||
            ect_step_meta_n_saves(again) != ect_step_meta_n_saves(m) ||
            ect_step_meta_n_loads(again) != ect_step_meta_n_loads(m))
            abort();
        n_meta = ect_step_meta_n_saves(m) + ect_step_meta_n_loads(m);
        ect_step_meta_destroy(again);
        free(buf);
        ect_step_meta_destroy(m);
    }
    ect_step_report_t *r = NULL;
    if (ect_step_report_decode(data, size, &r) == ECT_OK) {
        size_t cap = ect_step_report_encoded_size(r), len;
        void *buf = malloc(cap);
        ect_step_report_t *again = NULL;
        if (buf == NULL || ect_step_report_encode(r, buf, cap, &len) != ECT_OK ||
            ect_step_report_decode(buf, len, &again) != ECT_OK ||
            ect_step_report_n_loads(again) != ect_step_report_n_loads(r))
            abort();
        n_report = ect_step_report_n_saves(r) + ect_step_report_n_loads(r) +
                   ect_step_report_n_failed_saves(r);
        ect_step_report_destroy(again);
        free(buf);
        ect_step_report_destroy(r);
    }
    decode_into_kept(data, size, n_meta, n_report);
    return 0;
}
