/*
 * Prometheus text of a metrics snapshot in a buffer of its own, for the
 * callers that hand the text on (the HTTP scrape, the binding).
 */
#ifndef ECT_METRICS_RENDER_H
#define ECT_METRICS_RENDER_H

#include <stddef.h>

#include <ectier/metrics.h>

/* ect_metrics_format_prometheus into a malloc'd, NUL-terminated buffer:
 * on ECT_OK *text_p (caller frees) holds *len_p bytes.  Returns ECT_OK,
 * ECT_ERR_INVALID_ARG, ECT_ERR_NO_MEMORY. */
ect_status_t ect__metrics_render(const ect_metrics_t *metrics, char **text_p, size_t *len_p);

#endif /* ECT_METRICS_RENDER_H */
