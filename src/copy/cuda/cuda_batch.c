/*
 * Batches of the CUDA copy engine: the slot pool, submit, query and wait.
 *
 * A batch: coalesce adjacent ops (cuda_plan.c), check the device side of
 * every run against the allocation that holds it, pick a path (one
 * cudaMemcpyAsync per run for few or large runs, one gather/scatter kernel
 * through the host mapping for many small ones), then queue it.  A save goes
 * on a pooled stream: it waits for an event recorded on the compute stream
 * (it reads the encoder's output), copies and records the end event, and
 * the compute stream's later work does not wait for it.  A load goes on the
 * compute stream itself (it may overwrite device memory the compute stream
 * was still using, and the compute stream's later work must see it: stream
 * order gives both, without two cross-stream event hops) and records the
 * end event there.  The ticket maps to the end event.
 *
 * Pools: batch resources (two events, host scratch, the pinned descriptor
 * block and, for large batches, its device copy) live in slots that return
 * to a free list when a batch retires; in steady state a batch allocates
 * nothing (counters in cuda_engine.h).  A slot is recycled only after its
 * end event has completed, so its buffers are never rewritten under a copy.
 *
 * Locking: see cuda_internal.h.  Order: reg_lock before lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "copy/cuda/cuda_internal.h"
#include "copy/cuda/gather.h"

#define SCRATCH_MIN 1024
/* 8192 descriptors cover a 56 MiB entry of 7 KiB blocks with no two blocks
 * adjacent (and always the ECT_GATHER_INLINE_MAX the inline kernel reads); a
 * larger batch grows the buffers once (cudaFree synchronises the device, so
 * growth should be rare). */
#define DESC_MIN 8192

/* ---- slots ------------------------------------------------------------------ */

void
ect__cuda_slot_destroy(struct ect__cuda_slot *s)
{
    cudaEventDestroy(s->start);
    cudaEventDestroy(s->end);
    if (s->host_block != NULL)
        cudaFreeHost(s->host_block);
    if (s->dev_block != NULL)
        cudaFree(s->dev_block);
    ect__free(s->runs);
    ect__free(s);
}

static ect_status_t
slot_create(struct ect__cuda_slot **slot_p)
{
    struct ect__cuda_slot *s = ect__calloc(1, sizeof(*s));
    if (s == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy cuda: out of memory for a batch slot");
    /* No timing: these events only order and signal, and timing-free events
     * are cheaper to record and query. */
    cudaError_t err = cudaEventCreateWithFlags(&s->start, cudaEventDisableTiming);
    if (err != cudaSuccess)
        goto out_free;
    err = cudaEventCreateWithFlags(&s->end, cudaEventDisableTiming);
    if (err != cudaSuccess)
        goto out_start;
    *slot_p = s;
    return ECT_OK;

out_start:
    cudaEventDestroy(s->start);
out_free:
    ect__free(s);
    return ect__cuda_error(err, "copy cuda: cudaEventCreate");
}

/* Take a slot from the pool (or create one), give it the next stream, and
 * copy the current policy for the caller. */
static ect_status_t
slot_acquire(struct ect__cuda_engine *e, struct ect__cuda_slot **slot_p,
             struct ect__cuda_plan_policy *policy_p)
{
    pthread_mutex_lock(&e->lock);
    struct ect__cuda_slot *s = e->free_slots;
    if (s != NULL) {
        e->free_slots = s->next;
        e->stats.slots_free--;
    }
    pthread_mutex_unlock(&e->lock);
    if (s == NULL) {
        ect_status_t st = slot_create(&s);
        if (st != ECT_OK)
            return st;
        pthread_mutex_lock(&e->lock);
        e->stats.slots_created++;
        e->stats.events_created += 2;
        pthread_mutex_unlock(&e->lock);
    }
    pthread_mutex_lock(&e->lock);
    s->stream_idx = e->next_stream++ % e->n_streams;
    *policy_p = e->policy;
    pthread_mutex_unlock(&e->lock);
    s->next = NULL;
    s->ticket = 0;
    s->empty = 0;
    s->retired = 0;
    s->waiters = 0;
    s->result = ECT_OK;
    s->message[0] = '\0';
    *slot_p = s;
    return ECT_OK;
}

static void
slot_push_free_locked(struct ect__cuda_engine *e, struct ect__cuda_slot *s)
{
    s->next = e->free_slots;
    e->free_slots = s;
    e->stats.slots_free++;
}

static void
slot_release(struct ect__cuda_engine *e, struct ect__cuda_slot *s)
{
    pthread_mutex_lock(&e->lock);
    slot_push_free_locked(e, s);
    pthread_mutex_unlock(&e->lock);
}

static size_t
grow_cap(size_t need, size_t min)
{
    size_t cap = min;
    while (cap < need && cap <= SIZE_MAX / 2)
        cap *= 2;
    return cap < need ? need : cap;
}

/* Room for n runs in both host scratch arrays.  *allocs counts reallocations. */
static ect_status_t
ensure_scratch(struct ect__cuda_slot *s, size_t n, uint64_t *allocs)
{
    if (n <= s->scratch_cap)
        return ECT_OK;
    if (n > SIZE_MAX / (2 * sizeof(ect_copy_op_t)))
        return ect__error(ECT_ERR_OVERFLOW, "copy submit: %zu ops are too many", n);
    size_t cap = grow_cap(n, SCRATCH_MIN);
    if (cap > SIZE_MAX / (2 * sizeof(ect_copy_op_t)))
        cap = n;
    ect_copy_op_t *p = ect__malloc(2 * cap * sizeof(*p));
    if (p == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy submit: out of memory for %zu ops", n);
    ect__free(s->runs);
    s->runs = p;
    s->dev_runs = p + cap;
    s->scratch_cap = cap;
    (*allocs)++;
    return ECT_OK;
}

/* Room for n kernel descriptors in the pinned block (never less than the
 * inline kernel reads) and, when upload is set, in the device block.  The
 * slot's previous batch has landed, so the old buffers are unused. */
static ect_status_t
ensure_desc(struct ect__cuda_slot *s, size_t n, int upload, uint64_t *allocs)
{
    if (n > (SIZE_MAX - sizeof(struct ect__gather_block)) / sizeof(struct ect__gather_desc) / 2)
        return ect__error(ECT_ERR_OVERFLOW, "copy submit: %zu descriptors are too many", n);
    if (n > s->host_cap) {
        size_t cap = grow_cap(n, DESC_MIN);
        void *host = NULL;
        cudaError_t err = cudaHostAlloc(&host, ECT_GATHER_BLOCK_BYTES(cap), cudaHostAllocDefault);
        if (err != cudaSuccess)
            return ect__cuda_error(err, "copy submit: cudaHostAlloc of %zu descriptors", cap);
        if (s->host_block != NULL)
            cudaFreeHost(s->host_block);
        s->host_block = host;
        s->host_cap = cap;
        (*allocs)++;
    }
    if (upload && n > s->dev_cap) {
        size_t cap = grow_cap(n, DESC_MIN);
        void *dev = NULL;
        cudaError_t err = cudaMalloc(&dev, ECT_GATHER_BLOCK_BYTES(cap));
        if (err != cudaSuccess)
            return ect__cuda_error(err, "copy submit: cudaMalloc of %zu descriptors", cap);
        if (s->dev_block != NULL)
            cudaFree(s->dev_block);
        s->dev_block = dev;
        s->dev_cap = cap;
        (*allocs)++;
    }
    return ECT_OK;
}

/* ---- checks and translation ------------------------------------------------- */

/* The last device allocation found while checking one batch. */
struct dev_range {
    uintptr_t lo, hi;
};

/* Check that [p, p + len) is memory the engine's device may touch: device
 * memory of this device (bounded by its allocation, or by adjacent ones),
 * managed memory or registered host memory.  A pointer the driver does not
 * know would fault the kernel (a sticky error) or fail the copy later. */
static ect_status_t
check_device_side(struct ect__cuda_engine *e, uintptr_t p, size_t len, size_t run,
                  struct dev_range *cache)
{
    const uintptr_t first = p;
    if (len > UINTPTR_MAX - p)
        return ect__error(ECT_ERR_INVALID_ARG, "copy submit: run %zu at %p + %zu bytes wraps", run,
                          (void *)p, len);
    const uintptr_t end = p + len;
    while (p < end) {
        if (p >= cache->lo && p < cache->hi) {
            p = cache->hi;
            continue;
        }
        struct cudaPointerAttributes attr;
        cudaError_t err = cudaPointerGetAttributes(&attr, (const void *)p);
        if (err == cudaErrorInvalidValue) {
            /* What runtimes before 11.0 said for memory they do not know. */
            cudaGetLastError();
            attr.type = cudaMemoryTypeUnregistered;
        } else if (err != cudaSuccess) {
            return ect__cuda_error(err, "copy submit: run %zu: cudaPointerGetAttributes(%p)", run,
                                   (void *)p);
        }
        if (attr.type == cudaMemoryTypeUnregistered) {
            if (p == first)
                return ect__error(ECT_ERR_CUDA,
                                  "copy submit: run %zu: engine-side address %p is not device, "
                                  "managed or registered host memory",
                                  run, (void *)p);
            return ect__error(ECT_ERR_CUDA,
                              "copy submit: run %zu: %p + %zu bytes runs past the end of its "
                              "device allocation at %p",
                              run, (void *)first, len, (void *)p);
        }
        if (attr.type == cudaMemoryTypeDevice && attr.device != e->device)
            return ect__error(ECT_ERR_CUDA,
                              "copy submit: run %zu: %p is memory of device %d but this engine "
                              "copies for device %d",
                              run, (void *)p, attr.device, e->device);
        CUdeviceptr base = 0;
        size_t size = 0;
        if (e->addr_range == NULL || e->addr_range(&base, &size, (CUdeviceptr)p) != CUDA_SUCCESS ||
            size == 0 || (uintptr_t)base > p)
            return ECT_OK; /* known to CUDA, extent unknown (registered host memory) */
        cache->lo = (uintptr_t)base;
        cache->hi = (uintptr_t)base + size;
    }
    return ECT_OK;
}

static ect_status_t
check_runs(struct ect__cuda_engine *e, ect_copy_dir_t dir, const ect_copy_op_t *runs, size_t n)
{
    struct dev_range cache = {0, 0};
    for (size_t i = 0; i < n; i++) {
        const void *dev = dir == ECT_COPY_SAVE ? runs[i].src : runs[i].dst;
        ect_status_t st = check_device_side(e, (uintptr_t)dev, runs[i].len, i, &cache);
        if (st != ECT_OK)
            return st;
    }
    return ECT_OK;
}

/* Fill s->dev_runs with the runs as the device sees them (host side through
 * the registered mapping).  Returns 0 when some host range is not mapped.
 * Caller holds reg_lock for reading. */
static int
translate_runs_locked(struct ect__cuda_engine *e, ect_copy_dir_t dir, struct ect__cuda_slot *s,
                      size_t n)
{
    const struct ect__cuda_reg *hint = NULL;
    for (size_t i = 0; i < n; i++) {
        ect_copy_op_t r = s->runs[i];
        uintptr_t host = (uintptr_t)(dir == ECT_COPY_SAVE ? r.dst : r.src);
        uintptr_t dev = ect__cuda_translate_locked(e, host, r.len, &hint);
        if (dev == 0)
            return 0;
        if (dir == ECT_COPY_SAVE)
            r.dst = (void *)dev;
        else
            r.src = (const void *)dev;
        s->dev_runs[i] = r;
    }
    return 1;
}

/* ---- submit ---------------------------------------------------------------- */

/* Queue the batch's work.  A save goes on its pooled stream, after an event
 * recorded on the compute stream (it reads what the compute stream wrote;
 * the compute stream's later work does not wait for it).  A load goes on
 * the compute stream itself: the order is the same (after the work already
 * queued there, before the work queued later), without the two
 * cross-stream event hops a pooled stream costs, which are a tenth of a
 * 1 MiB copy on an H200.  On failure after something was queued, wait for
 * that stream so the slot's buffers are idle again. */
static ect_status_t
enqueue(struct ect__cuda_engine *e, struct ect__cuda_slot *s, const ect_copy_batch_t *batch,
        ect__cuda_path_t path, size_t n_runs, int upload)
{
    cudaStream_t compute = (cudaStream_t)batch->compute_stream;
    int on_compute = batch->dir == ECT_COPY_LOAD;
    cudaStream_t copy = on_compute ? compute : e->streams[s->stream_idx];
    ect_status_t st;
    int queued = 0;
    s->on_compute = on_compute;
    s->queue = copy;
    if (!on_compute) {
        cudaError_t werr = cudaEventRecord(s->start, compute);
        if (werr != cudaSuccess) {
            st = ect__cuda_error(werr, "copy submit: cudaEventRecord on compute stream %p",
                                 (void *)compute);
            goto fail;
        }
        werr = cudaStreamWaitEvent(copy, s->start, 0);
        if (werr != cudaSuccess) {
            st = ect__cuda_error(werr, "copy submit: cudaStreamWaitEvent (copy after compute)");
            goto fail;
        }
    }
    cudaError_t err;
    queued = 1;
    if (path == ECT__CUDA_PATH_MEMCPY) {
        enum cudaMemcpyKind kind =
            batch->dir == ECT_COPY_SAVE ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
        for (size_t i = 0; i < n_runs; i++) {
            const ect_copy_op_t *r = &s->runs[i];
            err = cudaMemcpyAsync(r->dst, r->src, r->len, kind, copy);
            if (err != cudaSuccess) {
                st = ect__cuda_error(err,
                                     "copy submit: cudaMemcpyAsync of run %zu (%p <- %p, %zu "
                                     "bytes)",
                                     i, r->dst, r->src, r->len);
                goto fail;
            }
        }
    } else {
        /* The block was filled by submit; upload it only when it is too
         * large to ride in the launch. */
        const struct ect__gather_block *dev = NULL;
        if (upload) {
            err = cudaMemcpyAsync(s->dev_block, s->host_block,
                                  ECT_GATHER_BLOCK_BYTES(s->host_block->n), cudaMemcpyHostToDevice,
                                  copy);
            if (err != cudaSuccess) {
                st = ect__cuda_error(err, "copy submit: uploading %llu descriptors",
                                     (unsigned long long)s->host_block->n);
                goto fail;
            }
            dev = s->dev_block;
        }
        err = ect__gather_launch(s->host_block, dev, e->sm_count, copy);
        if (err != cudaSuccess) {
            st =
                ect__cuda_error(err, "copy submit: launching the gather kernel (%zu runs)", n_runs);
            goto fail;
        }
    }
    err = cudaEventRecord(s->end, copy);
    if (err != cudaSuccess) {
        st = ect__cuda_error(err, "copy submit: cudaEventRecord on the copy stream");
        goto fail;
    }
    return ECT_OK;

fail:
    if (queued && cudaStreamSynchronize(copy) != cudaSuccess)
        cudaGetLastError();
    return st;
}

ect_status_t
ect__cuda_submit(ect_copy_engine_t *engine, const ect_copy_batch_t *batch, uint64_t *ticket_p)
{
    struct ect__cuda_engine *e = (struct ect__cuda_engine *)engine;
    int prev = 0;
    ect_status_t st = ect__cuda_device_enter(e, &prev);
    if (st != ECT_OK)
        return st;
    struct ect__cuda_slot *s;
    struct ect__cuda_plan_policy policy;
    st = slot_acquire(e, &s, &policy);
    if (st != ECT_OK)
        goto out_device;

    uint64_t allocs_scratch = 0, allocs_desc = 0, n_ops = 0;
    size_t n_runs = 0, total = 0;
    ect__cuda_path_t path = ECT__CUDA_PATH_NONE;
    int unmapped = 0, upload = 0;
    st = ensure_scratch(s, batch->n_ops, &allocs_scratch);
    if (st != ECT_OK)
        goto out_slot;
    n_runs = ect__copy_coalesce(batch->ops, batch->n_ops, s->runs);
    for (size_t i = 0; i < batch->n_ops; i++)
        n_ops += batch->ops[i].len > 0;
    for (size_t i = 0; i < n_runs; i++)
        total = s->runs[i].len > SIZE_MAX - total ? SIZE_MAX : total + s->runs[i].len;
    if (n_runs == 0) {
        s->empty = 1;
        goto publish;
    }
    st = check_runs(e, batch->dir, s->runs, n_runs);
    if (st != ECT_OK)
        goto out_slot;

    /* The read lock spans translation and queueing, so that
     * ect_copy_engine_unregister_host (write lock, then a stream sync) cannot unpin
     * memory between the two. */
    pthread_rwlock_rdlock(&e->reg_lock);
    path = ect__cuda_choose_path(&policy, n_runs, total, 1);
    if (path == ECT__CUDA_PATH_KERNEL && !translate_runs_locked(e, batch->dir, s, n_runs)) {
        path = ECT__CUDA_PATH_MEMCPY;
        unmapped = 1;
    }
    if (path == ECT__CUDA_PATH_KERNEL) {
        size_t n_descs = ect__gather_desc_count(s->dev_runs, n_runs);
        size_t inline_max =
            policy.inline_max < ECT_GATHER_INLINE_MAX ? policy.inline_max : ECT_GATHER_INLINE_MAX;
        upload = n_descs > inline_max;
        st = ensure_desc(s, n_descs, upload, &allocs_desc);
        /* 2^32 chunks (64 TiB) would overflow the descriptors: DMA instead. */
        if (st == ECT_OK && ect__gather_fill(s->dev_runs, n_runs, s->host_block) != ECT_OK)
            path = ECT__CUDA_PATH_MEMCPY;
    }
    if (st == ECT_OK)
        st = enqueue(e, s, batch, path, n_runs, upload);
    pthread_rwlock_unlock(&e->reg_lock);
    if (st != ECT_OK)
        goto out_slot;

publish:
    pthread_mutex_lock(&e->lock);
    uint64_t ticket = ++e->last_ticket;
    s->ticket = ticket;
    if (e->inflight_tail != NULL)
        e->inflight_tail->next = s;
    else
        e->inflight_head = s;
    e->inflight_tail = s;
    e->stats.slots_in_flight++;
    e->stats.scratch_allocs += allocs_scratch;
    e->stats.desc_allocs += allocs_desc;
    if (!s->empty) {
        e->stats.batches++;
        e->stats.ops += n_ops;
        e->stats.runs += n_runs;
        e->stats.batches_memcpy += path == ECT__CUDA_PATH_MEMCPY;
        e->stats.batches_kernel += path == ECT__CUDA_PATH_KERNEL;
        e->stats.batches_uploaded += path == ECT__CUDA_PATH_KERNEL && upload;
        e->stats.batches_unmapped += (uint64_t)unmapped;
    }
    int warn = unmapped && !e->warned_unmapped;
    e->warned_unmapped |= unmapped;
    pthread_mutex_unlock(&e->lock);
    if (warn)
        ECT_LOG_W(
            "copy cuda: a batch of %zu runs touches host memory that is not registered with "
            "ect_copy_engine_register_host; it takes one cudaMemcpyAsync per run (slow); further "
            "such batches are counted, not logged",
            n_runs);
    ect__cuda_device_leave(prev);
    *ticket_p = ticket;
    return ECT_OK;

out_slot:
    pthread_mutex_lock(&e->lock);
    e->stats.scratch_allocs += allocs_scratch;
    e->stats.desc_allocs += allocs_desc;
    pthread_mutex_unlock(&e->lock);
    slot_release(e, s);
out_device:
    ect__cuda_device_leave(prev);
    return st;
}

/* ---- completion ------------------------------------------------------------ */

struct ect__cuda_slot *
ect__cuda_find_inflight_locked(struct ect__cuda_engine *e, uint64_t ticket)
{
    for (struct ect__cuda_slot *s = e->inflight_head; s != NULL; s = s->next)
        if (s->ticket == ticket)
            return s;
    return NULL;
}

/* Take s off the in-flight list with its result; back to the pool unless a
 * waiter still refers to it (the last waiter returns it). */
static void
retire_locked(struct ect__cuda_engine *e, struct ect__cuda_slot *s, ect_status_t result)
{
    struct ect__cuda_slot *prev = NULL;
    for (struct ect__cuda_slot *c = e->inflight_head; c != s; c = c->next)
        prev = c;
    if (prev != NULL)
        prev->next = s->next;
    else
        e->inflight_head = s->next;
    if (e->inflight_tail == s)
        e->inflight_tail = prev;
    s->retired = 1;
    s->result = result;
    if (result != ECT_OK)
        snprintf(s->message, sizeof(s->message), "%s", ect_last_error());
    e->stats.slots_in_flight--;
    if (s->waiters == 0)
        slot_push_free_locked(e, s);
}

static ect_status_t
not_in_flight(const char *what, uint64_t ticket)
{
    return ect__error(ECT_ERR_NOT_FOUND,
                      "copy %s: ticket %llu is not in flight (never issued or already retired)",
                      what, (unsigned long long)ticket);
}

ect_status_t
ect__cuda_query(ect_copy_engine_t *engine, uint64_t ticket)
{
    struct ect__cuda_engine *e = (struct ect__cuda_engine *)engine;
    pthread_mutex_lock(&e->lock);
    struct ect__cuda_slot *s = ect__cuda_find_inflight_locked(e, ticket);
    if (s == NULL) {
        pthread_mutex_unlock(&e->lock);
        return not_in_flight("query", ticket);
    }
    ect_status_t result = ECT_OK;
    if (!s->empty) {
        cudaError_t err = cudaEventQuery(s->end);
        if (err == cudaErrorNotReady) {
            /* The runtime records NotReady as the thread's last error; clear
             * it so that the caller's next cudaGetLastError does not see it. */
            cudaGetLastError();
            pthread_mutex_unlock(&e->lock);
            return ect__error(ECT_ERR_BUSY, "copy query: batch %llu is still in flight",
                              (unsigned long long)ticket);
        }
        if (err != cudaSuccess)
            result = ect__cuda_error(err, "copy batch %llu failed", (unsigned long long)ticket);
    }
    retire_locked(e, s, result);
    pthread_mutex_unlock(&e->lock);
    return result;
}

ect_status_t
ect__cuda_wait(ect_copy_engine_t *engine, uint64_t ticket)
{
    struct ect__cuda_engine *e = (struct ect__cuda_engine *)engine;
    pthread_mutex_lock(&e->lock);
    struct ect__cuda_slot *s = ect__cuda_find_inflight_locked(e, ticket);
    if (s == NULL) {
        pthread_mutex_unlock(&e->lock);
        return not_in_flight("wait", ticket);
    }
    s->waiters++;
    pthread_mutex_unlock(&e->lock);

    cudaError_t err = s->empty ? cudaSuccess : cudaEventSynchronize(s->end);

    pthread_mutex_lock(&e->lock);
    s->waiters--;
    if (!s->retired) {
        ect_status_t r = ECT_OK;
        if (err != cudaSuccess)
            r = ect__cuda_error(err, "copy batch %llu failed", (unsigned long long)ticket);
        retire_locked(e, s, r);
    } else if (s->waiters == 0) {
        /* Retired by a concurrent query or wait while we slept. */
        slot_push_free_locked(e, s);
    }
    ect_status_t result = s->result;
    char message[sizeof(s->message)];
    memcpy(message, s->message, sizeof(message));
    pthread_mutex_unlock(&e->lock);
    if (result != ECT_OK)
        return ect__error(result, "%s", message);
    return ECT_OK;
}
