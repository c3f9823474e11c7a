/*
 * Copy engines: asynchronous copies between the engine's encoder-cache memory
 * and the shared region.
 *
 * A batch is a list of (dst, src, len) operations submitted together; the
 * engine returns a ticket, and the batch has landed once ect_copy_engine_query()
 * reports ECT_OK for that ticket.  Two engines exist behind this interface:
 *
 *   cpu  - always built.  Engine memory is host memory; a small pool of
 *          threads performs the copies, small batches are copied inside
 *          submit, a waiter copies its own batch, and saves use
 *          non-temporal stores (src/copy/cpu.c says why).
 *   cuda - built with the CUDA toolkit.  Engine memory is device memory;
 *          a save runs on a pooled non-blocking stream after the work
 *          already queued on the engine's compute stream (which does not
 *          wait for it); a load runs on the compute stream itself, before
 *          the work queued there later.  Completion is a CUDA event.
 *
 * Thread safety: submit, query and wait may be called from several threads
 * on one engine.  destroy must not race with anything else on that engine.
 */
#ifndef ECTIER_COPY_H
#define ECTIER_COPY_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <ectier/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ect_copy_engine ect_copy_engine_t;

/* Direction of a batch, seen from the region. */
typedef enum ect_copy_dir {
    ECT_COPY_SAVE = 0, /* engine memory -> region (GPU: device to host) */
    ECT_COPY_LOAD = 1, /* region -> engine memory (GPU: host to device) */
} ect_copy_dir_t;

/* One contiguous copy.  Pointers are borrowed and must stay valid until the
 * batch has landed. */
typedef struct ect_copy_op {
    void *dst;
    const void *src;
    size_t len;
} ect_copy_op_t;

typedef struct ect_copy_batch {
    ect_copy_dir_t dir;
    const ect_copy_op_t *ops; /* borrowed; copied by submit, may be reused after it returns */
    size_t n_ops;
    /* CUDA only (ignored by the CPU engine): the engine's compute stream, a
     * cudaStream_t passed as void*.  A save starts only after the work
     * already queued on it (the encoder's output is ready); the compute
     * stream's later work waits for a load.  NULL: the legacy default stream. */
    void *compute_stream;
} ect_copy_batch_t;

typedef struct ect_copy_cpu_params {
    unsigned threads; /* copy threads; 0 picks a default (2) */
    /* The most bytes one copier claims at once: larger batches are cut into
     * pieces that several threads (and a caller in ect_copy_engine_wait) share;
     * batches of 256 KiB and more are cut in any case, into about two pieces
     * per copier that can run at once.  0 picks 1 MiB; at least 4096. */
    size_t split_bytes;
    /* Microseconds a copy thread that ran out of work, or a waiter whose
     * batch others are finishing, keeps polling before it sleeps (a wake-up
     * costs 5-30 us on a VM, a 1 MiB copy 25-50 us).  0 picks 50;
     * ECT_COPY_CPU_NO_SPIN never polls; at most 100000. */
    unsigned spin_us;
    /* Batches of at most this many bytes are copied inside submit, on the
     * calling thread (they have landed when it returns).  0 picks 64 KiB;
     * ECT_COPY_CPU_NO_INLINE hands every batch to the copy threads (and
     * turns inline_max_bytes off too). */
    size_t inline_bytes;
    /* A larger batch, up to this many bytes, that finds every copy thread
     * asleep is also copied inside submit when that has been landing sooner
     * than waking the threads: the engine times both ways per direction and
     * size class and takes the faster, trying the other now and then (a
     * sleeping thread takes 40-100 us to start on some VMs, a 1 MiB copy
     * 25-50 us).  A batch submitted within spin_us of the previous one is
     * part of a burst and always handed to the threads.  0 picks 16 MiB;
     * ECT_COPY_CPU_NO_INLINE (or a value at most inline_bytes) turns the
     * choice off. */
    size_t inline_max_bytes;
} ect_copy_cpu_params_t;

#define ECT_COPY_CPU_NO_SPIN   UINT_MAX
#define ECT_COPY_CPU_NO_INLINE SIZE_MAX

typedef struct ect_copy_cuda_params {
    int device;       /* CUDA device ordinal */
    unsigned streams; /* pooled streams; 0 picks a default (4) */
} ect_copy_cuda_params_t;

/* Create the CPU engine.  params may be NULL for defaults.
 * Returns ECT_OK, ECT_ERR_NO_MEMORY, ECT_ERR_IO (thread creation). */
ECT_API ECT_MUST_CHECK ect_status_t ect_copy_engine_create_cpu(const ect_copy_cpu_params_t *params,
                                                               ect_copy_engine_t **engine_p);

/* Create the CUDA engine.  Returns ECT_ERR_UNSUPPORTED in a build without
 * CUDA or where no device is usable (the message says which), ECT_ERR_CUDA
 * on a CUDA failure. */
ECT_API ECT_MUST_CHECK ect_status_t
ect_copy_engine_create_cuda(const ect_copy_cuda_params_t *params, ect_copy_engine_t **engine_p);

/* "cpu" or "cuda". */
ECT_API const char *ect_copy_engine_kind(const ect_copy_engine_t *engine);

/* Tell the engine about host memory that copies will use (the region).  The
 * CUDA engine page-locks it with the driver once, in chunks; failure only
 * warns (copies then take a slower, still correct path) and returns ECT_OK.
 * The CPU engine does nothing.  base/len are borrowed until
 * ect_copy_engine_unregister_host or destroy. */
ECT_API ECT_MUST_CHECK ect_status_t ect_copy_engine_register_host(ect_copy_engine_t *engine,
                                                                  void *base, size_t len);

/* Undo ect_copy_engine_register_host for base.  ECT_ERR_NOT_FOUND if not registered. */
ECT_API ECT_MUST_CHECK ect_status_t ect_copy_engine_unregister_host(ect_copy_engine_t *engine,
                                                                    void *base);

/* Submit a batch.  On ECT_OK *ticket_p identifies it (tickets are unique and
 * increasing per engine).  An empty batch is allowed and lands at once.
 * Returns ECT_ERR_INVALID_ARG (NULL pointer with a non-zero length, bad
 * direction), ECT_ERR_SHUTDOWN, ECT_ERR_CUDA. */
ECT_API ECT_MUST_CHECK ect_status_t ect_copy_engine_submit(ect_copy_engine_t *engine,
                                                           const ect_copy_batch_t *batch,
                                                           uint64_t *ticket_p);

/* Has the batch landed?  ECT_OK: yes, and the ticket is retired (a later
 * query of it returns ECT_ERR_NOT_FOUND); ECT_ERR_BUSY: still in flight; any
 * other status: the batch failed (message set) and the ticket is retired. */
ECT_API ECT_MUST_CHECK ect_status_t ect_copy_engine_query(ect_copy_engine_t *engine,
                                                          uint64_t ticket);

/* Block until the batch has landed; same results as query, never BUSY. */
ECT_API ECT_MUST_CHECK ect_status_t ect_copy_engine_wait(ect_copy_engine_t *engine,
                                                         uint64_t ticket);

/* Wait for every batch, release threads, streams and registrations.
 * NULL is a no-op. */
ECT_API void ect_copy_engine_destroy(ect_copy_engine_t *engine);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_COPY_H */
