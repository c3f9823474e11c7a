/*
 * Fuzz target: step metadata and worker report decoding.  Whatever decodes
 * must re-encode to bytes that decode to the same counts.
 */
#include <stdint.h>
#include <stdlib.h>

#include <ectier/step.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
        ect_step_report_destroy(again);
        free(buf);
        ect_step_report_destroy(r);
    }
    return 0;
}
