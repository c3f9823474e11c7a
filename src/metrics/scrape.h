/*
 * The reading side of the Prometheus endpoint, for `ectier stats`: fetch a
 * metrics page over HTTP/1.0 and parse its text exposition (format 0.0.4).
 *
 * Both take input from outside (any server at any address), so both are
 * bounded: the fetch by a deadline over connect, send and receive and by a
 * byte limit on the answer; the parser by limits on lines, names, labels and
 * samples.  Nothing here trusts the peer: every refusal is a status and a
 * message that names what was wrong and where (the line, the quoted text).
 *
 * No state, no threads: each call owns what it allocates.
 */
#ifndef ECT_METRICS_SCRAPE_H
#define ECT_METRICS_SCRAPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

#include "common/strmap.h"

/* Parser limits. */
#define ECT_PROM_TEXT_MAX    (8u << 20) /* bytes of text */
#define ECT_PROM_LINE_MAX    65536      /* bytes of one line */
#define ECT_PROM_NAME_MAX    256        /* bytes of a metric or label name */
#define ECT_PROM_LABELS_MAX  16         /* labels of one sample */
#define ECT_PROM_SAMPLES_MAX 100000

typedef struct ect__prom_sample {
    char *name;   /* metric name */
    char *labels; /* canonical label text: name="value" pairs sorted by name,
                   * joined by ","; "" for none */
    double value;
} ect__prom_sample_t;

typedef struct ect__prom {
    ect__prom_sample_t *samples;
    size_t n, cap;
    ect_strmap_t index; /* "name{labels}" -> sample index + 1 */
} ect__prom_t;

/* Parse text (len bytes, need not be NUL-terminated) into *prom_p, which
 * the caller cleans up with ect__prom_cleanup.  Comments (# HELP, # TYPE)
 * and blank lines are skipped; a sample is `name{labels} value [timestamp]`
 * with the format's escapes in label values and Go's float syntax for the
 * value (+Inf, -Inf, NaN included).  Returns ECT_OK, ECT_ERR_INVALID_ARG,
 * ECT_ERR_PARSE (the message names the line and quotes it),
 * ECT_ERR_OVERFLOW (over a limit), ECT_ERR_NO_MEMORY.  *prom_p is written
 * only on success. */
ect_status_t ect__prom_parse(const char *text, size_t len, ect__prom_t *prom_p);

/* Free what parse allocated; a zeroed prom is fine too. */
void ect__prom_cleanup(ect__prom_t *prom);

/* The value of the sample name with canonical labels ("" for none, e.g.
 * "status=\"ok\""); false when there is none. */
bool ect__prom_get(const ect__prom_t *prom, const char *name, const char *labels, double *value_p);

/* The buckets of histogram name (samples name_bucket with an le label, and
 * no other label), sorted by bound: up to cap of them into le[] and cum[]
 * (cumulative counts).  Returns how many there are (may exceed cap); 0 when
 * none.  A bound that is not a number is skipped. */
size_t ect__prom_buckets(const ect__prom_t *prom, const char *name, double *le, double *cum,
                         size_t cap);

/* The q-quantile (0..1) of cumulative buckets (le ascending, the last +Inf)
 * as Prometheus's histogram_quantile computes it: linear inside the bucket
 * that holds the rank; the upper bound of the last finite bucket when the
 * rank falls in +Inf.  NaN for an empty histogram. */
double ect__prom_quantile(const double *le, const double *cum, size_t n, double q);

/* GET path from address ("host:port" or "[v6]:port") over HTTP/1.0 within
 * timeout_ms for everything (resolving, connecting, sending, reading).  On
 * ECT_OK *body_p is the malloc'd body (NUL-terminated) of *len_p bytes.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_CONFIG (the address does not
 * parse or resolve), ECT_ERR_IO (cannot connect; the message has the
 * system's reason), ECT_ERR_TIMEOUT (the deadline passed), ECT_ERR_PEER
 * (not HTTP, or a status other than 200, which the message quotes),
 * ECT_ERR_OVERFLOW (an answer over max_body bytes of body or 16 KiB of
 * headers), ECT_ERR_NO_MEMORY. */
ect_status_t ect__http_get(const char *address, const char *path, int timeout_ms, size_t max_body,
                           char **body_p, size_t *len_p);

#endif /* ECT_METRICS_SCRAPE_H */
