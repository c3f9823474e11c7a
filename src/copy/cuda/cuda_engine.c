/*
 * The CUDA copy engine (copy.h, SPEC §7): creation, teardown and the test
 * hooks.  Batches (pools, submit, completion) are in cuda_batch.c and
 * registration in cuda_register.c.
 *
 * The engine owns its pooled streams, created once at the highest priority
 * (so that the gather kernel's blocks are scheduled ahead of compute blocks
 * waiting for an SM), and makes its device current only for the duration of
 * each call, restoring the caller's.
 *
 * Errors: a failing CUDA call gives ECT_ERR_CUDA with the CUDA error text and
 * leaves the engine usable, except for sticky errors: a kernel fault (device
 * memory freed, or host memory unmapped, while a batch was in flight) poisons
 * the CUDA context of the whole process.  From then on every query, wait and
 * submit returns ECT_ERR_CUDA ("an illegal memory access was encountered");
 * only a new process recovers.  Device addresses are checked before anything
 * is queued precisely so that a bad pointer from the worker gives a clean
 * status instead.  The compute stream handle cannot be checked: it must be a
 * live stream of the engine's device, NULL (legacy default stream) or
 * cudaStreamPerThread.
 *
 * Locking: see cuda_internal.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/error.h"
#include "copy/cuda/cuda_internal.h"

#define DEFAULT_STREAMS   4
#define DEFAULT_REG_CHUNK ((size_t)16 << 30)

static const struct ect_copy_engine_ops cuda_ops;

ect_status_t
ect__cuda_error(cudaError_t err, const char *fmt, ...)
{
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    cudaGetLastError();
    return ect__error(ECT_ERR_CUDA, "%s: %s (%s)", what, cudaGetErrorString(err),
                      cudaGetErrorName(err));
}

ect_status_t
ect__cuda_device_enter(struct ect__cuda_engine *e, int *prev_p)
{
    int prev = 0;
    cudaError_t err = cudaGetDevice(&prev);
    if (err != cudaSuccess)
        return ect__cuda_error(err, "copy cuda: cudaGetDevice");
    if (prev != e->device) {
        err = cudaSetDevice(e->device);
        if (err != cudaSuccess)
            return ect__cuda_error(err, "copy cuda: cudaSetDevice(%d)", e->device);
    }
    *prev_p = prev;
    return ECT_OK;
}

void
ect__cuda_device_leave(int prev)
{
    int cur;
    /* The caller's current device is per-thread state of the runtime that
     * the caller (PyTorch, say) relies on: put it back. */
    if (cudaGetDevice(&cur) == cudaSuccess && cur != prev)
        cudaSetDevice(prev);
}

void
ect__cuda_sync_streams(struct ect__cuda_engine *e)
{
    for (unsigned i = 0; i < e->n_streams; i++)
        if (cudaStreamSynchronize(e->streams[i]) != cudaSuccess)
            cudaGetLastError();
}

/* ---- lifecycle ---------------------------------------------------------------- */

static void
cuda_destroy(ect_copy_engine_t *engine)
{
    struct ect__cuda_engine *e = (struct ect__cuda_engine *)engine;
    int prev = 0;
    int entered = ect__cuda_device_enter(e, &prev) == ECT_OK;
    ect__cuda_sync_streams(e);
    while (e->inflight_head != NULL) {
        struct ect__cuda_slot *s = e->inflight_head;
        e->inflight_head = s->next;
        ect__cuda_slot_destroy(s);
    }
    while (e->free_slots != NULL) {
        struct ect__cuda_slot *s = e->free_slots;
        e->free_slots = s->next;
        ect__cuda_slot_destroy(s);
    }
    ect__cuda_unregister_all(e);
    for (unsigned i = 0; i < e->n_streams; i++)
        cudaStreamDestroy(e->streams[i]);
    ect__free(e->streams);
    cudaGetLastError();
    if (entered)
        ect__cuda_device_leave(prev);
    pthread_rwlock_destroy(&e->reg_lock);
    pthread_mutex_destroy(&e->lock);
    ect__free(e);
}

/* Errors of cudaGetDeviceCount / cudaSetDevice that mean "no usable GPU
 * here" rather than "CUDA failed". */
static int
means_no_device(cudaError_t err)
{
    switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
        return 1;
    default:
        return 0;
    }
}

static ect_status_t
no_device(cudaError_t err, const char *what, int device)
{
    ect_status_t st = means_no_device(err) ? ECT_ERR_UNSUPPORTED : ECT_ERR_CUDA;
    cudaGetLastError();
    return ect__error(st, "copy cuda: no usable CUDA device %d: %s failed: %s (%s)", device, what,
                      cudaGetErrorString(err), cudaGetErrorName(err));
}

ect_status_t
ect_copy_engine_create_cuda(const ect_copy_cuda_params_t *params, ect_copy_engine_t **engine_p)
{
    if (engine_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "copy cuda: NULL engine_p");
    int device = params != NULL ? params->device : 0;
    unsigned n_streams = params != NULL && params->streams > 0 ? params->streams : DEFAULT_STREAMS;

    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess)
        return no_device(err, "cudaGetDeviceCount", device);
    if (device < 0 || device >= count)
        return ect__error(ECT_ERR_UNSUPPORTED,
                          "copy cuda: CUDA device %d does not exist (this machine has %d)", device,
                          count);

    ect_status_t st;
    struct ect__cuda_engine *e = ect__calloc(1, sizeof(*e));
    if (e == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy cuda: out of memory");
    e->device = device;
    e->n_streams = n_streams;
    e->policy = ect__cuda_plan_policy_default();
    e->reg_chunk = DEFAULT_REG_CHUNK;
    if (pthread_mutex_init(&e->lock, NULL) != 0) {
        st = ect__error(ECT_ERR_NO_MEMORY, "copy cuda: pthread_mutex_init failed");
        goto out_free;
    }
    if (pthread_rwlock_init(&e->reg_lock, NULL) != 0) {
        st = ect__error(ECT_ERR_NO_MEMORY, "copy cuda: pthread_rwlock_init failed");
        goto out_mutex;
    }

    int prev = 0;
    err = cudaGetDevice(&prev);
    if (err != cudaSuccess) {
        st = no_device(err, "cudaGetDevice", device);
        goto out_rwlock;
    }
    err = cudaSetDevice(device);
    if (err != cudaSuccess) {
        st = no_device(err, "cudaSetDevice", device);
        goto out_rwlock;
    }
    err = cudaDeviceGetAttribute(&e->sm_count, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess) {
        st = ect__cuda_error(err, "copy cuda: reading the multiprocessor count of device %d",
                             device);
        goto out_device;
    }
    int prio_least = 0, prio_greatest = 0;
    err = cudaDeviceGetStreamPriorityRange(&prio_least, &prio_greatest);
    if (err != cudaSuccess) {
        st = ect__cuda_error(err, "copy cuda: cudaDeviceGetStreamPriorityRange");
        goto out_device;
    }
    e->streams = ect__calloc(n_streams, sizeof(*e->streams));
    if (e->streams == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "copy cuda: out of memory for %u streams", n_streams);
        goto out_device;
    }
    unsigned made;
    for (made = 0; made < n_streams; made++) {
        err = cudaStreamCreateWithPriority(&e->streams[made], cudaStreamNonBlocking, prio_greatest);
        if (err != cudaSuccess) {
            st = ect__cuda_error(err, "copy cuda: creating stream %u of %u", made, n_streams);
            goto out_streams;
        }
    }

    /* Optional: without it, device ranges are checked by type only. */
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                           &found);
    if (err == cudaSuccess && found == cudaDriverEntryPointSuccess && fn != NULL)
        memcpy(&e->addr_range, &fn, sizeof(fn)); /* object to function pointer, as dlsym */
    else
        cudaGetLastError();

    e->base.ops = &cuda_ops;
    ect__cuda_device_leave(prev);
    ECT_LOG_I("copy cuda: engine on device %d (%d SMs, %u streams)", device, e->sm_count,
              n_streams);
    *engine_p = &e->base;
    return ECT_OK;

out_streams:
    while (made-- > 0)
        cudaStreamDestroy(e->streams[made]);
    ect__free(e->streams);
out_device:
    ect__cuda_device_leave(prev);
out_rwlock:
    pthread_rwlock_destroy(&e->reg_lock);
out_mutex:
    pthread_mutex_destroy(&e->lock);
out_free:
    ect__free(e);
    return st;
}

/* ---- hooks (cuda_engine.h) -------------------------------------------------- */

static struct ect__cuda_engine *
as_cuda(ect_copy_engine_t *engine)
{
    if (engine == NULL || engine->ops != &cuda_ops) {
        ect__error(ECT_ERR_INVALID_ARG, "copy cuda: not a CUDA engine");
        return NULL;
    }
    return (struct ect__cuda_engine *)engine;
}

ect_status_t
ect__copy_cuda_stats(ect_copy_engine_t *engine, struct ect__cuda_copy_stats *stats_p)
{
    struct ect__cuda_engine *e = as_cuda(engine);
    if (e == NULL || stats_p == NULL)
        return ECT_ERR_INVALID_ARG;
    pthread_mutex_lock(&e->lock);
    *stats_p = e->stats;
    pthread_mutex_unlock(&e->lock);
    return ECT_OK;
}

ect_status_t
ect__copy_cuda_set_policy(ect_copy_engine_t *engine, const struct ect__cuda_plan_policy *policy)
{
    struct ect__cuda_engine *e = as_cuda(engine);
    if (e == NULL || policy == NULL)
        return ECT_ERR_INVALID_ARG;
    pthread_mutex_lock(&e->lock);
    e->policy = *policy;
    pthread_mutex_unlock(&e->lock);
    return ECT_OK;
}

ect_status_t
ect__copy_cuda_set_register_chunk(ect_copy_engine_t *engine, size_t bytes)
{
    struct ect__cuda_engine *e = as_cuda(engine);
    if (e == NULL)
        return ECT_ERR_INVALID_ARG;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes == 0 || bytes % page != 0)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "copy cuda: registration chunk %zu is not a positive multiple of the "
                          "page size %zu",
                          bytes, page);
    pthread_rwlock_wrlock(&e->reg_lock);
    e->reg_chunk = bytes;
    pthread_rwlock_unlock(&e->reg_lock);
    return ECT_OK;
}

ect_status_t
ect__copy_cuda_end_event(ect_copy_engine_t *engine, uint64_t ticket, void **event_p)
{
    struct ect__cuda_engine *e = as_cuda(engine);
    if (e == NULL || event_p == NULL)
        return ECT_ERR_INVALID_ARG;
    pthread_mutex_lock(&e->lock);
    struct ect__cuda_slot *s = ect__cuda_find_inflight_locked(e, ticket);
    void *ev = s != NULL && !s->empty ? (void *)s->end : NULL;
    pthread_mutex_unlock(&e->lock);
    if (ev == NULL)
        return ect__error(ECT_ERR_NOT_FOUND, "copy cuda: ticket %llu has no end event",
                          (unsigned long long)ticket);
    *event_p = ev;
    return ECT_OK;
}

ect_status_t
ect__copy_cuda_queue_stream(ect_copy_engine_t *engine, uint64_t ticket, void **stream_p)
{
    struct ect__cuda_engine *e = as_cuda(engine);
    if (e == NULL || stream_p == NULL)
        return ECT_ERR_INVALID_ARG;
    pthread_mutex_lock(&e->lock);
    struct ect__cuda_slot *s = ect__cuda_find_inflight_locked(e, ticket);
    int found = s != NULL && !s->empty;
    void *q = found ? (void *)s->queue : NULL;
    pthread_mutex_unlock(&e->lock);
    if (!found)
        return ect__error(ECT_ERR_NOT_FOUND, "copy cuda: ticket %llu has no queued copies",
                          (unsigned long long)ticket);
    *stream_p = q;
    return ECT_OK;
}

static const struct ect_copy_engine_ops cuda_ops = {
    .kind = "cuda",
    .register_host = ect__cuda_register_host,
    .unregister_host = ect__cuda_unregister_host,
    .submit = ect__cuda_submit,
    .query = ect__cuda_query,
    .wait = ect__cuda_wait,
    .destroy = cuda_destroy,
};
