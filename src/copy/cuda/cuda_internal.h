/*
 * The CUDA copy engine's private structures, shared by cuda_engine.c
 * (creation, teardown, hooks), cuda_batch.c (pools, submit, completion) and
 * cuda_register.c (page-locking the region).
 *
 * Locking: `lock` guards the slot pool, the in-flight list, the ticket
 * counter, the stream cursor and the counters; `reg_lock` (read/write) guards
 * the registration list, read by submit while it translates host addresses.
 * When both are held, reg_lock is taken first (submit holds it for reading
 * while it queues work, so that an unregister cannot unpin memory under a
 * batch being queued).  Blocking CUDA calls (event and stream
 * synchronisation, registration) run without `lock`.
 */
#ifndef ECT_COPY_CUDA_INTERNAL_H
#define ECT_COPY_CUDA_INTERNAL_H

#include <pthread.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "copy/cuda/cuda_engine.h"
#include "copy/cuda_plan.h"
#include "copy/engine.h"

/* cuMemGetAddressRange, fetched through the runtime so that the library
 * needs no link against libcuda (and loads on machines without a driver). */
typedef CUresult (*ect__addr_range_fn)(CUdeviceptr *base_p, size_t *size_p, CUdeviceptr ptr);

/* One registered host range: [start, end) page-rounded around what the
 * caller passed, page-locked in n_chunks chunks of `chunk` bytes (the last
 * may be shorter).  dev[i] is the device's address of chunk i's first byte;
 * when the device view is one contiguous range (dev_contig, always so with
 * unified addressing) any address in the range translates directly. */
struct ect__cuda_reg {
    struct ect__cuda_reg *next;
    uintptr_t user_base;
    uintptr_t start, end;
    size_t chunk;
    size_t n_chunks;
    uintptr_t *dev;
    int dev_contig;
};

/* The resources of one batch, pooled and reused: two events, the host
 * scratch for coalescing and translating, and the kernel's descriptor block
 * (pinned host memory; a device copy only for batches too large to pass
 * inside the launch).  A slot is on the free list, or on the in-flight list
 * with a ticket, or owned by one submit call.  A save's copies run on
 * streams[stream_idx]; a load's on the compute stream it was submitted with
 * (cuda_batch.c says why), and `start` is then unused. */
struct ect__cuda_slot {
    struct ect__cuda_slot *next;
    uint64_t ticket;
    unsigned stream_idx;
    cudaEvent_t start;       /* recorded on the compute stream: what the batch waits for */
    cudaEvent_t end;         /* recorded after the copies: the batch has landed */
    ect_copy_op_t *runs;     /* scratch: coalesced runs (host addresses) */
    ect_copy_op_t *dev_runs; /* scratch: the same runs as the device sees them */
    size_t scratch_cap;
    struct ect__gather_block *host_block; /* pinned, written by submit */
    size_t host_cap;                      /* descriptors it has room for */
    struct ect__gather_block *dev_block;  /* device copy for large batches */
    size_t dev_cap;
    int empty;          /* nothing to copy: landed at submit */
    int on_compute;     /* queued on the batch's compute stream (a load), not streams[stream_idx] */
    cudaStream_t queue; /* the stream the copies were queued on */
    int retired;        /* off the in-flight list; result holds the outcome */
    unsigned waiters;   /* threads blocked in wait on this slot */
    ect_status_t result; /* valid once retired */
    char message[256];   /* error text for the result, for every waiter */
};

struct ect__cuda_engine {
    struct ect_copy_engine base;
    int device;
    int sm_count;
    unsigned n_streams;
    cudaStream_t *streams;
    ect__addr_range_fn addr_range;

    pthread_mutex_t lock;
    unsigned next_stream;
    uint64_t last_ticket;
    struct ect__cuda_slot *free_slots;
    struct ect__cuda_slot *inflight_head, *inflight_tail;
    struct ect__cuda_plan_policy policy;
    struct ect__cuda_copy_stats stats;
    int warned_unmapped;

    pthread_rwlock_t reg_lock;
    struct ect__cuda_reg *regs;
    size_t reg_chunk;
};

/* Make the engine's device current on this thread; *prev_p gets the
 * previous one for ect__cuda_device_leave.  Returns ECT_ERR_CUDA. */
ect_status_t ect__cuda_device_enter(struct ect__cuda_engine *e, int *prev_p);
void ect__cuda_device_leave(int prev);

/* Set the thread's error message from a CUDA error and return ECT_ERR_CUDA;
 * clears the runtime's last-error state so a later call does not report it
 * again (a sticky error cannot be cleared and keeps being returned). */
ect_status_t ect__cuda_error(cudaError_t err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Batches (cuda_batch.c): the engine's submit, query and wait operations. */
ect_status_t ect__cuda_submit(ect_copy_engine_t *engine, const ect_copy_batch_t *batch,
                              uint64_t *ticket_p);
ect_status_t ect__cuda_query(ect_copy_engine_t *engine, uint64_t ticket);
ect_status_t ect__cuda_wait(ect_copy_engine_t *engine, uint64_t ticket);
/* The in-flight slot holding ticket, or NULL.  Caller holds lock. */
struct ect__cuda_slot *ect__cuda_find_inflight_locked(struct ect__cuda_engine *e, uint64_t ticket);
/* Free a slot's events and buffers (destroy; its batch has landed). */
void ect__cuda_slot_destroy(struct ect__cuda_slot *s);

/* Registration (cuda_register.c). */
ect_status_t ect__cuda_register_host(ect_copy_engine_t *engine, void *base, size_t len);
ect_status_t ect__cuda_unregister_host(ect_copy_engine_t *engine, void *base);
/* Release every registration of the engine (destroy; streams are idle). */
void ect__cuda_unregister_all(struct ect__cuda_engine *e);
/* Translate [host, host + len) to the device's address of host, or 0 when
 * the range is not inside one registration (or crosses a chunk boundary of a
 * non-contiguous mapping).  Caller holds reg_lock for reading; *hint caches
 * the last registration found across calls of one batch. */
uintptr_t ect__cuda_translate_locked(struct ect__cuda_engine *e, uintptr_t host, size_t len,
                                     const struct ect__cuda_reg **hint);
/* Wait until every pooled stream is idle (used before unregistering). */
void ect__cuda_sync_streams(struct ect__cuda_engine *e);

#endif /* ECT_COPY_CUDA_INTERNAL_H */
