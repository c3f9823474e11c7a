/*
 * The CPU copy engine: a small pool of threads that memcpy batches between
 * host engine memory and the region (SPEC §7).
 *
 * A submitted batch is copied into a pooled batch record (records and their
 * op arrays are reused, so a warm engine does not allocate per submit),
 * given the next ticket, entered in the ticket table and appended to the
 * work queue.  The batch's bytes form one stream (its ops end to end); copy
 * threads claim pieces of that stream of `chunk` bytes, where a batch of more
 * than split_bytes is cut into near-equal pieces of at most about
 * split_bytes, so several threads share a big copy, while a small batch is
 * one piece.  Each finished piece is subtracted from the batch's remaining
 * byte count; the batch has landed when that reaches zero.  A thread in
 * ect_copy_wait claims pieces of its own batch too before it sleeps, so a
 * waiting caller never idles while its copy sits in the queue.
 *
 * Tickets start at 1 and increase.  The ticket table is an open-addressing
 * hash keyed by ticket (linear probing, backward-shift deletion); tickets are
 * consecutive, so `ticket & mask` spreads them perfectly and a lookup is O(1)
 * however long an old ticket stays unretired.
 *
 * Locking: one mutex guards the queue, the table, the free records, the
 * dispatch cursors and remaining counts, and the registrations.  It is never
 * held across a memcpy.  A piece's bytes are written before the copier takes
 * the mutex to subtract the piece, and readers learn that a batch has landed
 * only under the same mutex, so whoever sees "landed" also sees the bytes.
 * A batch's op array is written before the batch is published and read-only
 * until the batch is retired, which cannot happen while a piece is in
 * flight; copiers therefore read it without the mutex.  Copy threads wait on
 * work_cv, waiters on done_cv; nothing spins.
 */
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "copy/cpu.h"
#include "copy/engine.h"

enum {
    DEFAULT_THREADS = 2,
    MAX_THREADS = 64,
    MIN_SPLIT_BYTES = 4096,
    PIECE_ALIGN = 4096, /* pieces of a split batch are multiples of this */
    POOL_KEEP = 64,     /* idle batch records kept for reuse */
    TABLE_MIN_CAP = 64, /* ticket-table slots; always a power of two */
    REGS_MIN_CAP = 4,
};
#define DEFAULT_SPLIT_BYTES ((size_t)4 << 20)

struct cpu_batch {
    uint64_t ticket;
    ect_copy_op_t *ops; /* the batch's non-empty ops; capacity kept across reuse */
    size_t n_ops;
    size_t cap_ops;
    size_t chunk;   /* bytes per claimed piece */
    size_t next_op; /* dispatch cursor: first unclaimed byte is ops[next_op] + next_off */
    size_t next_off;
    size_t remaining;              /* bytes not yet copied; the batch has landed at 0 */
    struct cpu_batch *prev, *next; /* work queue links; next also links the free list */
};

/* A piece of one batch's byte stream, claimed by one copier. */
struct claim {
    struct cpu_batch *batch;
    size_t op;
    size_t off;
    size_t len;
};

struct host_reg {
    char *base;
    size_t len;
};

struct cpu_engine {
    struct ect_copy_engine base; /* first: the dispatcher casts */
    pthread_mutex_t lock;
    pthread_cond_t work_cv; /* copy threads: work queued, or stopping */
    pthread_cond_t done_cv; /* waiters: some batch landed */
    pthread_t *threads;
    unsigned n_threads;
    size_t split_bytes;
    bool stopping;
    bool joined;
    bool held; /* ect__copy_cpu_hold: copy threads leave the queue alone */
    unsigned waiters;
    uint64_t next_ticket;
    struct cpu_batch *queue_head, *queue_tail; /* batches with unclaimed bytes */
    struct cpu_batch **table;                  /* issued, unretired batches by ticket */
    size_t table_cap;
    size_t table_count;
    struct cpu_batch *free_list;
    unsigned n_free;
    struct host_reg *regs;
    size_t n_regs;
    size_t cap_regs;
    uint64_t allocs; /* atomic: allocations since creation */
};

static const struct ect_copy_engine_ops cpu_ops;

static struct cpu_engine *
cpu_of(ect_copy_engine_t *engine)
{
    return (struct cpu_engine *)engine;
}

static void
count_alloc(struct cpu_engine *e)
{
    __atomic_fetch_add(&e->allocs, 1, __ATOMIC_RELAXED);
}

/* ---- ticket table ---------------------------------------------------------- */

static size_t
find_slot_locked(const struct cpu_engine *e, uint64_t ticket, bool *found_p)
{
    size_t mask = e->table_cap - 1;
    size_t i = (size_t)ticket & mask;
    while (e->table[i] != NULL && e->table[i]->ticket != ticket)
        i = (i + 1) & mask;
    *found_p = e->table[i] != NULL;
    return i;
}

static struct cpu_batch *
lookup_locked(const struct cpu_engine *e, uint64_t ticket, size_t *slot_p)
{
    bool found;
    size_t i = find_slot_locked(e, ticket, &found);
    if (!found)
        return NULL;
    *slot_p = i;
    return e->table[i];
}

/* Make room for one more entry, keeping the load factor at most one half so
 * probe chains stay short. */
static ect_status_t
table_reserve_locked(struct cpu_engine *e)
{
    if ((e->table_count + 1) * 2 <= e->table_cap)
        return ECT_OK;
    size_t cap = e->table_cap * 2;
    struct cpu_batch **old = e->table;
    size_t old_cap = e->table_cap;
    struct cpu_batch **table = calloc(cap, sizeof(*table));
    if (table == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot grow the ticket table to %zu", cap);
    count_alloc(e);
    e->table = table;
    e->table_cap = cap;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i] != NULL) {
            bool found;
            e->table[find_slot_locked(e, old[i]->ticket, &found)] = old[i];
        }
    }
    free(old);
    return ECT_OK;
}

static void
table_insert_locked(struct cpu_engine *e, struct cpu_batch *b)
{
    bool found;
    size_t i = find_slot_locked(e, b->ticket, &found);
    e->table[i] = b;
    e->table_count++;
}

/* Backward-shift deletion: later members of the probe chain move up into the
 * hole unless their home slot lies cyclically after it, so lookups never need
 * tombstones. */
static void
table_remove_locked(struct cpu_engine *e, size_t hole)
{
    size_t mask = e->table_cap - 1;
    e->table[hole] = NULL;
    for (size_t j = (hole + 1) & mask; e->table[j] != NULL; j = (j + 1) & mask) {
        size_t home = (size_t)e->table[j]->ticket & mask;
        bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            e->table[hole] = e->table[j];
            e->table[j] = NULL;
            hole = j;
        }
    }
    e->table_count--;
}

/* ---- batch records ----------------------------------------------------------- */

static void
free_batch(struct cpu_batch *b)
{
    free(b->ops);
    free(b);
}

static void
recycle_locked(struct cpu_engine *e, struct cpu_batch *b)
{
    if (e->n_free >= POOL_KEEP) {
        free_batch(b);
        return;
    }
    b->next = e->free_list;
    e->free_list = b;
    e->n_free++;
}

/* A record with room for n_ops ops, from the pool when possible.  Called
 * without the lock: allocation never happens under it on the submit path. */
static ect_status_t
take_batch(struct cpu_engine *e, size_t n_ops, struct cpu_batch **batch_p)
{
    pthread_mutex_lock(&e->lock);
    struct cpu_batch *b = e->free_list;
    if (b != NULL) {
        e->free_list = b->next;
        e->n_free--;
    }
    pthread_mutex_unlock(&e->lock);

    if (b == NULL) {
        b = calloc(1, sizeof(*b));
        if (b == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot allocate a batch record");
        count_alloc(e);
    }
    if (n_ops > b->cap_ops) {
        ect_copy_op_t *ops = realloc(b->ops, n_ops * sizeof(*ops));
        if (ops == NULL) {
            pthread_mutex_lock(&e->lock);
            recycle_locked(e, b);
            pthread_mutex_unlock(&e->lock);
            return ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot allocate %zu copy ops", n_ops);
        }
        count_alloc(e);
        b->ops = ops;
        b->cap_ops = n_ops;
    }
    *batch_p = b;
    return ECT_OK;
}

/* ---- work queue and pieces ----------------------------------------------------- */

static void
enqueue_locked(struct cpu_engine *e, struct cpu_batch *b)
{
    b->next = NULL;
    b->prev = e->queue_tail;
    if (e->queue_tail != NULL)
        e->queue_tail->next = b;
    else
        e->queue_head = b;
    e->queue_tail = b;
}

static void
dequeue_locked(struct cpu_engine *e, struct cpu_batch *b)
{
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        e->queue_head = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    else
        e->queue_tail = b->prev;
    b->prev = b->next = NULL;
}

static bool
has_unclaimed(const struct cpu_batch *b)
{
    return b->next_op < b->n_ops;
}

/* Claim the next piece of b; a batch whose last byte is claimed leaves the
 * queue (it stays in the table until it lands and is retired). */
static void
claim_locked(struct cpu_engine *e, struct cpu_batch *b, struct claim *c)
{
    c->batch = b;
    c->op = b->next_op;
    c->off = b->next_off;
    c->len = 0;
    while (c->len < b->chunk && has_unclaimed(b)) {
        size_t avail = b->ops[b->next_op].len - b->next_off;
        size_t take = avail < b->chunk - c->len ? avail : b->chunk - c->len;
        c->len += take;
        b->next_off += take;
        if (b->next_off == b->ops[b->next_op].len) {
            b->next_op++;
            b->next_off = 0;
        }
    }
    if (!has_unclaimed(b))
        dequeue_locked(e, b);
}

/* The copy itself, without the lock (see the file comment for why reading
 * the op array is safe). */
static void
run_claim(const struct claim *c)
{
    const ect_copy_op_t *ops = c->batch->ops;
    size_t left = c->len, i = c->op, off = c->off;
    while (left > 0) {
        size_t n = ops[i].len - off < left ? ops[i].len - off : left;
        memcpy((char *)ops[i].dst + off, (const char *)ops[i].src + off, n);
        left -= n;
        i++;
        off = 0;
    }
}

/* Returns true when the batch has landed and someone waits on done_cv; the
 * caller broadcasts after dropping the lock, so the woken waiters do not
 * run straight into a held mutex. */
static bool
finish_claim_locked(struct cpu_engine *e, const struct claim *c)
{
    struct cpu_batch *b = c->batch;
    b->remaining -= c->len;
    return b->remaining == 0 && e->waiters > 0;
}

static void
wake_waiters_unlocked(struct cpu_engine *e)
{
    pthread_cond_broadcast(&e->done_cv);
}

static void *
copy_thread_main(void *arg)
{
    struct cpu_engine *e = arg;
    struct claim c;

    pthread_mutex_lock(&e->lock);
    for (;;) {
        if (e->queue_head == NULL || (e->held && !e->stopping)) {
            /* Stop only once the queue is drained: destroy promises that
             * every submitted batch lands. */
            if (e->stopping && e->queue_head == NULL)
                break;
            pthread_cond_wait(&e->work_cv, &e->lock);
            continue;
        }
        claim_locked(e, e->queue_head, &c);
        pthread_mutex_unlock(&e->lock);
        run_claim(&c);
        pthread_mutex_lock(&e->lock);
        if (finish_claim_locked(e, &c)) {
            pthread_mutex_unlock(&e->lock);
            wake_waiters_unlocked(e);
            pthread_mutex_lock(&e->lock);
        }
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- operations ---------------------------------------------------------------- */

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
    pthread_mutex_lock(&e->lock);
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
        struct host_reg *regs = realloc(e->regs, cap * sizeof(*regs));
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
    pthread_mutex_lock(&e->lock);
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

/* Checks the dispatcher leaves to engines, because they depend on the memory
 * being host memory: ranges that wrap or overlap (memcpy's contract), and a
 * batch size that fits size_t.  Counts the non-empty ops. */
static ect_status_t
check_batch(const ect_copy_batch_t *batch, size_t *n_ops_p, size_t *total_p)
{
    size_t n = 0, total = 0;
    for (size_t i = 0; i < batch->n_ops; i++) {
        const ect_copy_op_t *op = &batch->ops[i];
        uintptr_t d = (uintptr_t)op->dst, s = (uintptr_t)op->src;
        if (op->len == 0)
            continue;
        if (d > UINTPTR_MAX - op->len || s > UINTPTR_MAX - op->len)
            return ect__error(ECT_ERR_INVALID_ARG,
                              "copy submit: op %zu of %zu bytes wraps the address space", i,
                              op->len);
        if (d < s + op->len && s < d + op->len)
            return ect__error(ECT_ERR_INVALID_ARG,
                              "copy submit: op %zu copies %zu bytes between overlapping ranges", i,
                              op->len);
        if (op->len > SIZE_MAX - total)
            return ect__error(ECT_ERR_OVERFLOW, "copy submit: batch size overflows at op %zu", i);
        total += op->len;
        n++;
    }
    *n_ops_p = n;
    *total_p = total;
    return ECT_OK;
}

/* Piece size: the whole batch when it is small; otherwise near-equal pieces
 * of at most about split_bytes, rounded to whole pages so pieces of
 * page-aligned ops stay page-aligned. */
static size_t
piece_size(size_t total, size_t split)
{
    if (total <= split)
        return total > 0 ? total : 1;
    size_t pieces = total / split + (total % split != 0);
    size_t chunk = total / pieces + (total % pieces != 0);
    if (chunk <= SIZE_MAX - PIECE_ALIGN)
        chunk = (chunk + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN;
    return chunk;
}

static ect_status_t
cpu_submit(ect_copy_engine_t *engine, const ect_copy_batch_t *batch, uint64_t *ticket_p)
{
    struct cpu_engine *e = cpu_of(engine);
    struct cpu_batch *b = NULL;
    size_t n_ops = 0, total = 0;
    ect_status_t s;

    s = check_batch(batch, &n_ops, &total);
    if (s != ECT_OK)
        return s;
    s = take_batch(e, n_ops, &b);
    if (s != ECT_OK)
        return s;

    size_t k = 0;
    for (size_t i = 0; i < batch->n_ops; i++)
        if (batch->ops[i].len > 0)
            b->ops[k++] = batch->ops[i];
    b->n_ops = n_ops;
    b->next_op = 0;
    b->next_off = 0;
    b->remaining = total;
    b->chunk = piece_size(total, e->split_bytes);
    bool split = b->chunk < total;
    b->prev = b->next = NULL;

    pthread_mutex_lock(&e->lock);
    if (e->stopping) {
        s = ect__error(ECT_ERR_SHUTDOWN, "copy submit: the cpu engine is shut down");
        goto recycle_batch;
    }
    s = table_reserve_locked(e);
    if (s != ECT_OK)
        goto recycle_batch;
    uint64_t ticket = e->next_ticket++;
    b->ticket = ticket;
    table_insert_locked(e, b);
    if (total > 0)
        enqueue_locked(e, b);
    pthread_mutex_unlock(&e->lock);
    /* Wake copy threads after unlocking, so they do not wake into a held
     * mutex: one for a single piece, all for a split batch. */
    if (total > 0 && split)
        pthread_cond_broadcast(&e->work_cv);
    else if (total > 0)
        pthread_cond_signal(&e->work_cv);
    /* From here b may already be landed and retired by a thread that
     * guessed the ticket: use the copy taken under the lock. */
    *ticket_p = ticket;
    return ECT_OK;

recycle_batch:
    recycle_locked(e, b);
    pthread_mutex_unlock(&e->lock);
    return s;
}

static ect_status_t
not_found(const char *what, uint64_t ticket)
{
    return ect__error(ECT_ERR_NOT_FOUND,
                      "copy %s: ticket %llu is not in flight (already retired or never issued)",
                      what, (unsigned long long)ticket);
}

static ect_status_t
cpu_query(ect_copy_engine_t *engine, uint64_t ticket)
{
    struct cpu_engine *e = cpu_of(engine);
    size_t slot;

    pthread_mutex_lock(&e->lock);
    struct cpu_batch *b = lookup_locked(e, ticket, &slot);
    if (b == NULL) {
        pthread_mutex_unlock(&e->lock);
        return not_found("query", ticket);
    }
    if (b->remaining > 0) {
        pthread_mutex_unlock(&e->lock);
        return ECT_ERR_BUSY;
    }
    table_remove_locked(e, slot);
    recycle_locked(e, b);
    pthread_mutex_unlock(&e->lock);
    return ECT_OK;
}

static ect_status_t
cpu_wait(ect_copy_engine_t *engine, uint64_t ticket)
{
    struct cpu_engine *e = cpu_of(engine);
    struct claim c;
    size_t slot;

    pthread_mutex_lock(&e->lock);
    for (;;) {
        /* Look the ticket up afresh each round: while we slept another
         * thread may have retired it and its record may serve a new batch. */
        struct cpu_batch *b = lookup_locked(e, ticket, &slot);
        if (b == NULL) {
            pthread_mutex_unlock(&e->lock);
            return not_found("wait", ticket);
        }
        if (b->remaining == 0) {
            table_remove_locked(e, slot);
            recycle_locked(e, b);
            pthread_mutex_unlock(&e->lock);
            return ECT_OK;
        }
        if (has_unclaimed(b)) {
            claim_locked(e, b, &c);
            pthread_mutex_unlock(&e->lock);
            run_claim(&c);
            pthread_mutex_lock(&e->lock);
            if (finish_claim_locked(e, &c)) {
                pthread_mutex_unlock(&e->lock);
                wake_waiters_unlocked(e);
                pthread_mutex_lock(&e->lock);
            }
            continue;
        }
        e->waiters++;
        pthread_cond_wait(&e->done_cv, &e->lock);
        e->waiters--;
    }
}

static void
stop_threads(struct cpu_engine *e, unsigned n_started)
{
    pthread_mutex_lock(&e->lock);
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
    if (engine == NULL || engine->ops != &cpu_ops)
        return ect__error(ECT_ERR_INVALID_ARG, "copy shutdown: not a cpu engine");
    struct cpu_engine *e = cpu_of(engine);
    if (!e->joined)
        stop_threads(e, e->n_threads);
    return ECT_OK;
}

ect_status_t
ect__copy_cpu_hold(ect_copy_engine_t *engine, bool hold)
{
    if (engine == NULL || engine->ops != &cpu_ops)
        return ect__error(ECT_ERR_INVALID_ARG, "copy hold: not a cpu engine");
    struct cpu_engine *e = cpu_of(engine);
    pthread_mutex_lock(&e->lock);
    e->held = hold;
    if (!hold)
        pthread_cond_broadcast(&e->work_cv);
    pthread_mutex_unlock(&e->lock);
    return ECT_OK;
}

uint64_t
ect__copy_cpu_alloc_count(ect_copy_engine_t *engine)
{
    if (engine == NULL || engine->ops != &cpu_ops)
        return 0;
    return __atomic_load_n(&cpu_of(engine)->allocs, __ATOMIC_RELAXED);
}

/* Free everything but the threads, which must be joined already. */
static void
free_engine(struct cpu_engine *e)
{
    for (size_t i = 0; i < e->table_cap; i++)
        if (e->table[i] != NULL)
            free_batch(e->table[i]);
    while (e->free_list != NULL) {
        struct cpu_batch *b = e->free_list;
        e->free_list = b->next;
        free_batch(b);
    }
    free(e->table);
    free(e->regs);
    free(e->threads);
    pthread_cond_destroy(&e->done_cv);
    pthread_cond_destroy(&e->work_cv);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

static void
cpu_destroy(ect_copy_engine_t *engine)
{
    struct cpu_engine *e = cpu_of(engine);
    if (!e->joined)
        stop_threads(e, e->n_threads);
    free_engine(e);
}

static const struct ect_copy_engine_ops cpu_ops = {
    .kind = "cpu",
    .register_host = cpu_register_host,
    .unregister_host = cpu_unregister_host,
    .submit = cpu_submit,
    .query = cpu_query,
    .wait = cpu_wait,
    .destroy = cpu_destroy,
};

/* Start the copy threads with every signal blocked, so the application's
 * signals are delivered to its own threads, never to ours. */
static ect_status_t
start_threads(struct cpu_engine *e)
{
    sigset_t all, saved;
    ect_status_t s = ECT_OK;
    unsigned started = 0;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    for (; started < e->n_threads; started++) {
        int rc = pthread_create(&e->threads[started], NULL, copy_thread_main, e);
        if (rc != 0) {
            s = ect__error(ECT_ERR_IO, "copy cpu: cannot start copy thread %u of %u: %s",
                           started + 1, e->n_threads, strerror(rc));
            break;
        }
        char name[16];
        /* started < MAX_THREADS, so the name fits the kernel's 16 bytes. */
        snprintf(name, sizeof(name), "ect-copy-%u", (unsigned)(unsigned char)started);
        pthread_setname_np(e->threads[started], name);
    }
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    if (s != ECT_OK)
        stop_threads(e, started);
    return s;
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
                          "copy cpu: split_bytes %zu is below the minimum of %d (0 picks 4 MiB)",
                          split, MIN_SPLIT_BYTES);

    struct cpu_engine *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot allocate the engine");
    e->base.ops = &cpu_ops;
    e->n_threads = threads;
    e->split_bytes = split;
    e->next_ticket = 1;
    e->table_cap = TABLE_MIN_CAP;
    e->table = calloc(e->table_cap, sizeof(*e->table));
    if (e->table == NULL) {
        s = ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot allocate the ticket table");
        goto free_engine;
    }
    e->threads = calloc(threads, sizeof(*e->threads));
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
    free(e->threads);
free_table:
    free(e->table);
free_engine:
    free(e);
    return s;
}
