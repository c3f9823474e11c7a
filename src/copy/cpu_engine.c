/*
 * The CPU copy engine's life (copy/cpu_internal.h; the data path and the
 * design are in cpu.c): create with its copy threads, destroy and
 * shutdown (every batch lands first), the hold used by tests, counters,
 * host-memory registrations (recorded only: the CPU needs nothing from the
 * OS), and the thread and copier counts the config and benchmarks ask for.
 */
#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/thread.h"
#include "copy/cpu_internal.h"

/* ---- host registrations ------------------------------------------------------- */

static ect_status_t
cpu_register_host(ect_copy_engine_t *engine, void *base, size_t len)
{
    struct cpu_engine *e = cpu_of(engine);
    char *b = base;
    ect_status_t s = ECT_OK;

    if ((uintptr_t)b > UINTPTR_MAX - len)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "copy register: range of %zu bytes at %p wraps the address space", len,
                          base);
    engine_lock(e);
    for (size_t i = 0; i < e->n_regs; i++) {
        const struct host_reg *r = &e->regs[i];
        if (b < r->base + r->len && r->base < b + len) {
            s = ect__error(ECT_ERR_EXISTS,
                           "copy register: range %p+%zu overlaps the registered range %p+%zu", base,
                           len, (void *)r->base, r->len);
            goto unlock;
        }
    }
    if (e->n_regs == e->cap_regs) {
        size_t cap = e->cap_regs > 0 ? e->cap_regs * 2 : REGS_MIN_CAP;
        struct host_reg *regs = ect__realloc(e->regs, cap * sizeof(*regs));
        if (regs == NULL) {
            s = ect__error(ECT_ERR_NO_MEMORY, "copy register: cannot grow to %zu ranges", cap);
            goto unlock;
        }
        count_alloc(e);
        e->regs = regs;
        e->cap_regs = cap;
    }
    /* The CPU engine needs nothing from the OS; recording the range keeps
     * register/unregister pairing checkable, as with the CUDA engine. */
    e->regs[e->n_regs++] = (struct host_reg){.base = b, .len = len};
unlock:
    pthread_mutex_unlock(&e->lock);
    return s;
}

static ect_status_t
cpu_unregister_host(ect_copy_engine_t *engine, void *base)
{
    struct cpu_engine *e = cpu_of(engine);
    engine_lock(e);
    for (size_t i = 0; i < e->n_regs; i++) {
        if (e->regs[i].base == (char *)base) {
            e->regs[i] = e->regs[--e->n_regs];
            pthread_mutex_unlock(&e->lock);
            return ECT_OK;
        }
    }
    pthread_mutex_unlock(&e->lock);
    return ect__error(ECT_ERR_NOT_FOUND, "copy unregister: no range registered at %p", base);
}

/* ---- life ----------------------------------------------------------------------- */

static void
stop_threads(struct cpu_engine *e, unsigned n_started)
{
    engine_lock(e);
    e->stopping = true;
    pthread_cond_broadcast(&e->work_cv);
    pthread_mutex_unlock(&e->lock);
    for (unsigned i = 0; i < n_started; i++)
        pthread_join(e->threads[i], NULL);
    e->joined = true;
}

ect_status_t
ect__copy_cpu_shutdown(ect_copy_engine_t *engine)
{
    if (engine == NULL || engine->ops != &ect__cpu_ops)
        return ect__error(ECT_ERR_INVALID_ARG, "copy shutdown: not a cpu engine");
    struct cpu_engine *e = cpu_of(engine);
    if (!e->joined)
        stop_threads(e, e->n_threads);
    return ECT_OK;
}

ect_status_t
ect__copy_cpu_hold(ect_copy_engine_t *engine, bool hold)
{
    if (engine == NULL || engine->ops != &ect__cpu_ops)
        return ect__error(ECT_ERR_INVALID_ARG, "copy hold: not a cpu engine");
    struct cpu_engine *e = cpu_of(engine);
    engine_lock(e);
    __atomic_store_n(&e->held, hold, __ATOMIC_RELAXED); /* pollers read it without the lock */
    if (!hold)
        pthread_cond_broadcast(&e->work_cv);
    pthread_mutex_unlock(&e->lock);
    return ECT_OK;
}

ect_status_t
ect__copy_cpu_prewake(ect_copy_engine_t *engine, uint64_t budget_ns)
{
    if (engine == NULL || engine->ops != &ect__cpu_ops)
        return ect__error(ECT_ERR_INVALID_ARG, "copy prewake: not a cpu engine");
    struct cpu_engine *e = cpu_of(engine);
    if (budget_ns < e->spin_ns)
        budget_ns = e->spin_ns;
    if (budget_ns > ECT_COPY_CPU_PREWAKE_MAX_NS)
        budget_ns = ECT_COPY_CPU_PREWAKE_MAX_NS;
    unsigned wake = 0;
    engine_lock(e);
    if (e->spin_ns > 0 && !e->stopping && !e->held) {
        uint64_t until = ect__now_ns() + budget_ns;
        if (until > e->warm_until_ns)
            e->warm_until_ns = until;
        unsigned busy = e->spinners + e->copiers;
        wake = busy < e->max_spinners ? e->max_spinners - busy : 0;
        if (wake > e->sleepers)
            wake = e->sleepers;
        e->stats.prewakes += wake;
    }
    pthread_mutex_unlock(&e->lock);
    for (unsigned i = 0; i < wake; i++)
        pthread_cond_signal(&e->work_cv);
    return ECT_OK;
}

ect_status_t
ect__copy_cpu_stats(ect_copy_engine_t *engine, struct ect__copy_cpu_stats *stats_p)
{
    if (engine == NULL || engine->ops != &ect__cpu_ops || stats_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "copy stats: not a cpu engine, or NULL stats_p");
    struct cpu_engine *e = cpu_of(engine);
    engine_lock(e);
    *stats_p = e->stats;
    stats_p->threads = e->n_threads;
    stats_p->threads_asleep = e->sleepers;
    pthread_mutex_unlock(&e->lock);
    stats_p->wake_signal_ns = __atomic_load_n(&e->wake_signal_ns, __ATOMIC_RELAXED);
    return ECT_OK;
}

uint64_t
ect__copy_cpu_alloc_count(ect_copy_engine_t *engine)
{
    if (engine == NULL || engine->ops != &ect__cpu_ops)
        return 0;
    return __atomic_load_n(&cpu_of(engine)->allocs, __ATOMIC_RELAXED);
}

/* Free everything but the threads, which must be joined already. */
static void
free_engine(struct cpu_engine *e)
{
    ect__tickets_each(&e->tickets, ect__cpu_free_batch_value);
    while (e->free_list != NULL) {
        struct cpu_batch *b = e->free_list;
        e->free_list = b->next;
        ect__cpu_free_batch(b);
    }
    ect__tickets_cleanup(&e->tickets);
    ect__free(e->regs);
    ect__free(e->threads);
    pthread_cond_destroy(&e->done_cv);
    pthread_cond_destroy(&e->work_cv);
    pthread_mutex_destroy(&e->lock);
    ect__free(e);
}

static void
cpu_destroy(ect_copy_engine_t *engine)
{
    struct cpu_engine *e = cpu_of(engine);
    if (!e->joined)
        stop_threads(e, e->n_threads);
    free_engine(e);
}

const struct ect_copy_engine_ops ect__cpu_ops = {
    .kind = "cpu",
    .register_host = cpu_register_host,
    .unregister_host = cpu_unregister_host,
    .submit = ect__cpu_submit,
    .query = ect__cpu_query,
    .wait = ect__cpu_wait,
    .destroy = cpu_destroy,
};

/* Start the copy threads (common/thread.h: signals blocked, named). */
static ect_status_t
start_threads(struct cpu_engine *e)
{
    ect_status_t s = ECT_OK;
    unsigned started = 0;
    for (; started < e->n_threads; started++) {
        char name[16];
        /* started < MAX_THREADS, so the name fits the kernel's 16 bytes. */
        snprintf(name, sizeof(name), "ect-copy-%u", (unsigned)(unsigned char)started);
        if ((s = ect__thread_start(&e->threads[started], ect__cpu_copy_thread_main, e, name)) !=
            ECT_OK)
            break;
    }
    if (s != ECT_OK)
        stop_threads(e, started);
    return s;
}

ect_copy_cpu_params_t
ect__copy_cpu_params_of(const ect_config_t *cfg)
{
    return (ect_copy_cpu_params_t){.threads = cfg->copy_threads,
                                   .spin_us = cfg->copy_spin_us == 0 ? ECT_COPY_CPU_NO_SPIN
                                                                     : cfg->copy_spin_us};
}

/* CPUs this process may run on (its affinity mask), at least 1. */
unsigned
ect__copy_cpu_usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return (unsigned)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

/* Copy threads woken for work at once: one fewer than the CPUs, leaving
 * one to the caller, who copies its own batch when it waits. */
static unsigned
max_active_for(unsigned threads)
{
    unsigned cpus = ect__copy_cpu_usable_cpus();
    unsigned others = cpus > 1 ? cpus - 1 : 1;
    return threads < others ? threads : others;
}

unsigned
ect__copy_cpu_copiers(unsigned threads)
{
    return max_active_for(threads > 0 ? threads : DEFAULT_THREADS) + 1;
}

bool
ect__copy_cpu_cpus_to_spare(unsigned threads)
{
    return ect__copy_cpu_usable_cpus() >= ect__copy_cpu_copiers(threads) + 2;
}

ect_status_t
ect_copy_engine_create_cpu(const ect_copy_cpu_params_t *params, ect_copy_engine_t **engine_p)
{
    unsigned threads = params != NULL && params->threads > 0 ? params->threads : DEFAULT_THREADS;
    size_t split =
        params != NULL && params->split_bytes > 0 ? params->split_bytes : DEFAULT_SPLIT_BYTES;
    ect_status_t s;

    if (engine_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "copy cpu: NULL engine_p");
    if (threads > MAX_THREADS)
        return ect__error(ECT_ERR_INVALID_ARG, "copy cpu: threads %u is more than the %d allowed",
                          threads, MAX_THREADS);
    if (split < MIN_SPLIT_BYTES)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "copy cpu: split_bytes %zu is below the minimum of %d (0 picks 1 MiB)",
                          split, MIN_SPLIT_BYTES);
    unsigned spin_us = params != NULL && params->spin_us > 0 ? params->spin_us : DEFAULT_SPIN_US;
    if (spin_us == ECT_COPY_CPU_NO_SPIN)
        spin_us = 0;
    else if (spin_us > MAX_SPIN_US)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "copy cpu: spin_us %u is more than the %d allowed (0 picks %d, "
                          "ECT_COPY_CPU_NO_SPIN never polls)",
                          spin_us, MAX_SPIN_US, DEFAULT_SPIN_US);
    size_t inline_bytes =
        params != NULL && params->inline_bytes > 0 ? params->inline_bytes : DEFAULT_INLINE_BYTES;
    size_t inline_max = params != NULL && params->inline_max_bytes > 0 ? params->inline_max_bytes
                                                                       : DEFAULT_INLINE_MAX;
    if (inline_bytes == ECT_COPY_CPU_NO_INLINE)
        inline_bytes = inline_max = 0;
    else if (inline_max == ECT_COPY_CPU_NO_INLINE)
        inline_max = 0;

    struct cpu_engine *e = ect__calloc(1, sizeof(*e));
    if (e == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot allocate the engine");
    e->base.ops = &ect__cpu_ops;
    e->n_threads = threads;
    e->split_bytes = split;
    e->inline_bytes = inline_bytes;
    e->inline_max = inline_max;
    e->spin_ns = (uint64_t)spin_us * 1000;
    e->max_active = max_active_for(threads);
    e->max_spinners = e->max_active;
    e->fine_cut = ect__copy_cpu_cpus_to_spare(threads);
    e->next_ticket = 1;
    s = ect__tickets_init(&e->tickets, TABLE_MIN_CAP);
    if (s != ECT_OK)
        goto free_engine;
    e->threads = ect__calloc(threads, sizeof(*e->threads));
    if (e->threads == NULL) {
        s = ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot allocate %u thread handles", threads);
        goto free_table;
    }
    if (pthread_mutex_init(&e->lock, NULL) != 0) {
        s = ect__error(ECT_ERR_IO, "copy cpu: cannot initialise the engine's mutex");
        goto free_threads;
    }
    if (pthread_cond_init(&e->work_cv, NULL) != 0) {
        s = ect__error(ECT_ERR_IO, "copy cpu: cannot initialise the work condition");
        goto destroy_lock;
    }
    if (pthread_cond_init(&e->done_cv, NULL) != 0) {
        s = ect__error(ECT_ERR_IO, "copy cpu: cannot initialise the done condition");
        goto destroy_work_cv;
    }
    s = start_threads(e);
    if (s != ECT_OK)
        goto destroy_done_cv;
    *engine_p = &e->base;
    return ECT_OK;

destroy_done_cv:
    pthread_cond_destroy(&e->done_cv);
destroy_work_cv:
    pthread_cond_destroy(&e->work_cv);
destroy_lock:
    pthread_mutex_destroy(&e->lock);
free_threads:
    ect__free(e->threads);
free_table:
    ect__tickets_cleanup(&e->tickets);
free_engine:
    ect__free(e);
    return s;
}
