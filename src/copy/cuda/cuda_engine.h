/*
 * Internal hooks of the CUDA copy engine for tests and benchmarks: counters
 * that show pooling and path choice, and knobs that force a path or a
 * registration chunk size.  No CUDA types, so a plain C test can use them;
 * they exist only in a CUDA build (ECT_HAVE_CUDA).  Each returns
 * ECT_ERR_INVALID_ARG when given an engine that is not the CUDA engine.
 * Thread safety: like ect_copy_engine_query (safe with concurrent submits).
 */
#ifndef ECT_COPY_CUDA_ENGINE_H
#define ECT_COPY_CUDA_ENGINE_H

#include <stdint.h>

#include <ectier/copy.h>

#include "copy/cuda_plan.h"

struct ect__cuda_copy_stats {
    uint64_t batches;          /* non-empty batches submitted successfully */
    uint64_t batches_memcpy;   /* ... moved by one cudaMemcpyAsync per run */
    uint64_t batches_kernel;   /* ... moved by one gather/scatter kernel */
    uint64_t batches_uploaded; /* ... of which uploaded their descriptors first */
    uint64_t batches_unmapped; /* wanted the kernel, but host memory was not mapped */
    uint64_t ops;              /* non-empty ops submitted */
    uint64_t runs;             /* runs left after coalescing */
    uint64_t slots_created;    /* batch resource sets (events, buffers) ever created */
    uint64_t slots_free;       /* ... currently idle in the pool */
    uint64_t slots_in_flight;  /* ... currently holding a ticket */
    uint64_t events_created;   /* cudaEventCreate calls */
    uint64_t desc_allocs;      /* descriptor buffer (re)allocations, pinned + device */
    uint64_t scratch_allocs;   /* host scratch (re)allocations */
    uint64_t reg_chunks;       /* registration chunks this engine holds now */
    uint64_t reg_failures;     /* ect_copy_engine_register_host calls that fell back */
};

/* Copy the engine's counters into *stats_p. */
ect_status_t ect__copy_cuda_stats(ect_copy_engine_t *engine, struct ect__cuda_copy_stats *stats_p);

/* Replace the path thresholds (cuda_plan.h), e.g. {1, SIZE_MAX,
 * ECT_GATHER_INLINE_MAX} forces the kernel for every mapped batch, {1,
 * SIZE_MAX, 0} forces it with uploaded descriptors, {SIZE_MAX, 0, 0} forces
 * DMA copies. */
ect_status_t ect__copy_cuda_set_policy(ect_copy_engine_t *engine,
                                       const struct ect__cuda_plan_policy *policy);

/* Registration chunk size for later ect_copy_engine_register_host calls (a
 * positive multiple of the page size; default 16 GiB). */
ect_status_t ect__copy_cuda_set_register_chunk(ect_copy_engine_t *engine, size_t bytes);

/* The cudaEvent_t recorded after the batch's copies (as void *), for a
 * benchmark that times the batch on its own stream.  Valid until the ticket
 * is retired.  ECT_ERR_NOT_FOUND for an unknown or empty batch. */
ect_status_t ect__copy_cuda_end_event(ect_copy_engine_t *engine, uint64_t ticket, void **event_p);

/* The cudaStream_t (as void *) the batch's copies were queued on: a pooled
 * stream for a save, the compute stream it was submitted with for a load.
 * A benchmark records its own timing event there to time the batch from
 * the compute stream's point of view.  Valid until the ticket is retired.
 * ECT_ERR_NOT_FOUND for an unknown or empty batch. */
ect_status_t ect__copy_cuda_queue_stream(ect_copy_engine_t *engine, uint64_t ticket,
                                         void **stream_p);

#endif /* ECT_COPY_CUDA_ENGINE_H */
