/*
 * Fuzz target for the Prometheus text parser of `ectier stats`
 * (src/metrics/scrape.c), which reads whatever a metrics endpoint sends.
 *
 * Besides "no crash, no leak, no sanitizer report": an accepted text gives
 * samples that every lookup finds again, buckets in order and a quantile
 * inside the bounds; a refused one always leaves a message.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <ectier/ectier.h>

#include "metrics/scrape.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ect__prom_t p;
    ect_clear_error();
    if (ect__prom_parse((const char *)data, size, &p) != ECT_OK) {
        if (ect_last_error()[0] == '\0')
            abort();
        return 0;
    }
    for (size_t i = 0; i < p.n; i++) {
        double v;
        if (!ect__prom_get(&p, p.samples[i].name, p.samples[i].labels, &v))
            abort();
        if (!(v == p.samples[i].value || (isnan(v) && isnan(p.samples[i].value))))
            abort();
        size_t nl = strlen(p.samples[i].name);
        if (nl > 7 && strcmp(p.samples[i].name + nl - 7, "_bucket") == 0) {
            char base[ECT_PROM_NAME_MAX + 1];
            memcpy(base, p.samples[i].name, nl - 7);
            base[nl - 7] = '\0';
            double le[64], cum[64];
            size_t n = ect__prom_buckets(&p, base, le, cum, 64);
            if (n > 64)
                n = 64;
            for (size_t b = 1; b < n; b++)
                if (le[b] < le[b - 1])
                    abort();
            /* Inside the bounds: at most the largest finite one. */
            double q = ect__prom_quantile(le, cum, n, 0.5), top = -INFINITY;
            for (size_t b = 0; b < n; b++)
                if (isfinite(le[b]) && le[b] > top)
                    top = le[b];
            if (!isnan(q) && q > top && !(n > 0 && q == le[0]))
                abort();
        }
    }
    ect__prom_cleanup(&p);
    return 0;
}
