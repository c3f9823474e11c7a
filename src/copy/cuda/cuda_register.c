/*
 * Page-locking host memory for the CUDA copy engine (SPEC §4, anchors (b)7):
 * the region is registered once with cudaHostRegister(Portable | Mapped), in
 * chunks, because one call for a huge range fails on some systems (>= 512 GiB
 * on H200 NVL) and costs ~0.1 s/GB either way.  Failure only warns: the
 * engine then copies from pageable memory, slower but correct.
 *
 * Page-locking is process-wide state, so the chunks are kept in a
 * process-wide table with reference counts: two engines (two devices in one
 * process) registering the same region share the pinning, and the memory is
 * unregistered when the last of them lets go.  Each engine keeps its own
 * device addresses of the chunks (the mapping may differ per device).
 *
 * Locking: pin_lock guards the process-wide table and is held across
 * cudaHostRegister so that two engines never race to register one chunk; the
 * engine's reg_lock (write) guards its registration list.
 */
#include <stdlib.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "copy/cuda/cuda_internal.h"

struct pinned_chunk {
    struct pinned_chunk *next;
    uintptr_t start;
    size_t len;
    unsigned refs;
};

static pthread_mutex_t pin_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pinned_chunk *pinned;

/* Page-lock [start, start + len) or take a reference on an identical chunk
 * already locked by ectier.  A chunk that overlaps a different one is refused
 * with cudaErrorHostMemoryAlreadyRegistered, which is what the driver would
 * say too. */
static cudaError_t
pin_chunk(uintptr_t start, size_t len)
{
    cudaError_t err = cudaSuccess;
    pthread_mutex_lock(&pin_lock);
    for (struct pinned_chunk *c = pinned; c != NULL; c = c->next) {
        if (c->start == start && c->len == len) {
            c->refs++;
            goto out_unlock;
        }
        if (start < c->start + c->len && c->start < start + len) {
            err = cudaErrorHostMemoryAlreadyRegistered;
            goto out_unlock;
        }
    }
    struct pinned_chunk *c = ect__calloc(1, sizeof(*c));
    if (c == NULL) {
        err = cudaErrorMemoryAllocation;
        goto out_unlock;
    }
    err = cudaHostRegister((void *)start, len, cudaHostRegisterPortable | cudaHostRegisterMapped);
    if (err != cudaSuccess) {
        cudaGetLastError();
        ect__free(c);
        goto out_unlock;
    }
    c->start = start;
    c->len = len;
    c->refs = 1;
    c->next = pinned;
    pinned = c;
out_unlock:
    pthread_mutex_unlock(&pin_lock);
    return err;
}

/* Drop a reference taken by pin_chunk; the last one unregisters. */
static void
unpin_chunk(uintptr_t start, size_t len)
{
    pthread_mutex_lock(&pin_lock);
    for (struct pinned_chunk **pp = &pinned; *pp != NULL; pp = &(*pp)->next) {
        struct pinned_chunk *c = *pp;
        if (c->start != start || c->len != len)
            continue;
        if (--c->refs == 0) {
            cudaError_t err = cudaHostUnregister((void *)start);
            if (err != cudaSuccess) {
                ECT_LOG_W("copy cuda: cudaHostUnregister(%p, %zu bytes) failed: %s", (void *)start,
                          len, cudaGetErrorString(err));
                cudaGetLastError();
            }
            *pp = c->next;
            ect__free(c);
        }
        break;
    }
    pthread_mutex_unlock(&pin_lock);
}

static size_t
chunk_len(const struct ect__cuda_reg *r, size_t i)
{
    uintptr_t s = r->start + i * r->chunk;
    return (size_t)(r->end - s) < r->chunk ? (size_t)(r->end - s) : r->chunk;
}

static void
reg_release(struct ect__cuda_reg *r, size_t n_pinned)
{
    for (size_t i = 0; i < n_pinned; i++)
        unpin_chunk(r->start + i * r->chunk, chunk_len(r, i));
    ect__free(r->dev);
    ect__free(r);
}

ect_status_t
ect__cuda_register_host(ect_copy_engine_t *engine, void *base, size_t len)
{
    struct ect__cuda_engine *e = (struct ect__cuda_engine *)engine;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t b = (uintptr_t)base;
    if (b > UINTPTR_MAX - page || len > UINTPTR_MAX - page - b)
        return ect__error(ECT_ERR_INVALID_ARG, "copy register: range %p + %zu bytes wraps around",
                          base, len);

    pthread_rwlock_rdlock(&e->reg_lock);
    size_t chunk = e->reg_chunk;
    int dup = 0;
    for (struct ect__cuda_reg *r = e->regs; r != NULL; r = r->next)
        dup |= r->user_base == b;
    pthread_rwlock_unlock(&e->reg_lock);
    if (dup) {
        ECT_LOG_W("copy cuda: %p is already registered with this engine; ignoring the second "
                  "registration",
                  base);
        return ECT_OK;
    }

    struct ect__cuda_reg *r = ect__calloc(1, sizeof(*r));
    if (r == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy register: out of memory");
    r->user_base = b;
    r->start = b & ~(page - 1);
    r->end = (b + len + page - 1) & ~(page - 1);
    r->chunk = chunk;
    r->n_chunks = (r->end - r->start + chunk - 1) / chunk;
    r->dev = ect__calloc(r->n_chunks, sizeof(*r->dev));
    if (r->dev == NULL) {
        ect__free(r);
        return ect__error(ECT_ERR_NO_MEMORY, "copy register: out of memory");
    }

    int prev = 0;
    ect_status_t st = ect__cuda_device_enter(e, &prev);
    if (st != ECT_OK) {
        reg_release(r, 0);
        return st;
    }
    size_t n_pinned = 0, i;
    const double t0 = ect__now_s();
    cudaError_t err = cudaSuccess;
    const char *what = "cudaHostRegister";
    for (i = 0; i < r->n_chunks; i++) {
        uintptr_t cs = r->start + i * chunk;
        err = pin_chunk(cs, chunk_len(r, i));
        if (err != cudaSuccess)
            break;
        n_pinned++;
        void *dev = NULL;
        err = cudaHostGetDevicePointer(&dev, (void *)cs, 0);
        if (err != cudaSuccess) {
            cudaGetLastError();
            what = "cudaHostGetDevicePointer";
            break;
        }
        r->dev[i] = (uintptr_t)dev;
    }
    ect__cuda_device_leave(prev);

    if (err != cudaSuccess) {
        ECT_LOG_W("copy cuda: %s of host memory %p (+%zu bytes) failed at chunk %zu of %zu: %s; "
                  "copies from this memory will use the slower pageable path",
                  what, base, len, i, r->n_chunks, cudaGetErrorString(err));
        reg_release(r, n_pinned);
        pthread_mutex_lock(&e->lock);
        e->stats.reg_failures++;
        pthread_mutex_unlock(&e->lock);
        return ECT_OK;
    }

    r->dev_contig = 1;
    for (size_t k = 1; k < r->n_chunks; k++)
        r->dev_contig &= r->dev[k] == r->dev[0] + k * chunk;

    pthread_rwlock_wrlock(&e->reg_lock);
    r->next = e->regs;
    e->regs = r;
    pthread_rwlock_unlock(&e->reg_lock);
    pthread_mutex_lock(&e->lock);
    e->stats.reg_chunks += r->n_chunks;
    pthread_mutex_unlock(&e->lock);
    ECT_LOG_I("copy cuda: registered %p (+%zu bytes) in %zu chunk(s) for device %d in %.2f s", base,
              len, r->n_chunks, e->device, ect__now_s() - t0);
    return ECT_OK;
}

ect_status_t
ect__cuda_unregister_host(ect_copy_engine_t *engine, void *base)
{
    struct ect__cuda_engine *e = (struct ect__cuda_engine *)engine;
    pthread_rwlock_wrlock(&e->reg_lock);
    struct ect__cuda_reg *r = NULL;
    for (struct ect__cuda_reg **pp = &e->regs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->user_base == (uintptr_t)base) {
            r = *pp;
            *pp = r->next;
            break;
        }
    }
    pthread_rwlock_unlock(&e->reg_lock);
    if (r == NULL)
        return ect__error(ECT_ERR_NOT_FOUND, "copy unregister: %p is not registered", base);
    /* Batches already queued may still read or write through the mapping;
     * unregistering under them would fault the device.  Let them finish. */
    ect__cuda_sync_streams(e);
    size_t n = r->n_chunks;
    reg_release(r, n);
    pthread_mutex_lock(&e->lock);
    e->stats.reg_chunks -= n;
    pthread_mutex_unlock(&e->lock);
    return ECT_OK;
}

void
ect__cuda_unregister_all(struct ect__cuda_engine *e)
{
    while (e->regs != NULL) {
        struct ect__cuda_reg *r = e->regs;
        e->regs = r->next;
        reg_release(r, r->n_chunks);
    }
    e->stats.reg_chunks = 0;
}

static int
reg_contains(const struct ect__cuda_reg *r, uintptr_t host, size_t len)
{
    return host >= r->start && host < r->end && len <= r->end - host;
}

uintptr_t
ect__cuda_translate_locked(struct ect__cuda_engine *e, uintptr_t host, size_t len,
                           const struct ect__cuda_reg **hint)
{
    const struct ect__cuda_reg *r = *hint;
    if (r == NULL || !reg_contains(r, host, len)) {
        r = NULL;
        for (const struct ect__cuda_reg *c = e->regs; c != NULL; c = c->next) {
            if (reg_contains(c, host, len)) {
                r = c;
                break;
            }
        }
        if (r == NULL)
            return 0;
        *hint = r;
    }
    size_t off = host - r->start;
    if (r->dev_contig)
        return r->dev[0] + off;
    size_t i = off / r->chunk;
    if (len > 0 && (off + len - 1) / r->chunk != i)
        return 0;
    return r->dev[i] + (off - i * r->chunk);
}
