/*
 * ectier: a CPU-memory tier for an LLM server's encoder cache, and
 * peer-to-peer transfer of encodings between serving instances.
 *
 * Umbrella header: includes every public header.  Each object has its own
 * header with the contracts of its functions.
 */
#ifndef ECTIER_ECTIER_H
#define ECTIER_ECTIER_H

#include <stdbool.h>

#include <ectier/status.h>
#include <ectier/log.h>
#include <ectier/types.h>
#include <ectier/config.h>
#include <ectier/cache.h>
#include <ectier/geometry.h>
#include <ectier/copy.h>
#include <ectier/step.h>
#include <ectier/region.h>
#include <ectier/metrics.h>
#include <ectier/scheduler.h>
#include <ectier/worker.h>
#include <ectier/binding.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The library version, "MAJOR.MINOR.PATCH". */
ECT_API const char *ect_version(void);

/* Whether this build has peer-to-peer transfer (ZeroMQ, msgpack-c). */
ECT_API bool ect_has_p2p(void);

/* Whether this build has the CUDA copy engine. */
ECT_API bool ect_has_cuda(void);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_ECTIER_H */
