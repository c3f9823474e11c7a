/*
 * The CPU copy engine: a small pool of threads that copy batches between
 * host engine memory and the region (SPEC §7).  This file is its data
 * path; cpu_engine.c creates, stops and destroys it, and cpu_internal.h
 * holds the structures both use.
 *
 * A submitted batch is copied into a pooled batch record (records and their
 * op arrays are reused, so a warm engine does not allocate per submit),
 * given the next ticket and entered in the ticket table.  The batch's bytes
 * form one stream (its ops end to end), cut into pieces of `chunk` bytes
 * that copiers claim one at a time: a batch of at least PARALLEL_MIN bytes
 * is cut into about two pieces per copier that can run at once (the copy
 * threads that may run, plus the caller), and, on a host with CPUs to spare,
 * about eight for a batch under 4 MiB for which every copy thread must be
 * woken (they start tens of microseconds late, and smaller pieces let them
 * and the caller end together), at most split_bytes each and a whole number
 * of rounds of the copiers where it can be (ect__copy_cpu_piece_bytes), so
 * that whoever is awake shares the work and nobody is left with a long tail.
 *
 * Where the time of a small step goes on a VM is the hand-off, not the copy:
 * a sleeping thread takes 5-30 us to wake, about as long as copying 1 MiB.
 * So:
 *   - a batch of at most inline_bytes is copied by submit itself, on the
 *     calling thread (unless the engine is held), and has landed when
 *     submit returns;
 *   - a larger batch (up to inline_max_bytes) that would have to wake a
 *     sleeping copy thread is copied by submit too when that has been
 *     landing sooner on this machine.  The engine learns it: per direction
 *     and power-of-two size class it keeps the time to landed of both ways
 *     (submit's own copy; a hand-off to sleeping threads, from submit to
 *     the last piece landed), tries a way until it has a few samples, then
 *     takes the faster and still tries the other now and then (copy/learn.h).
 *     Where a wake-up costs a few microseconds two threads win from a few
 *     hundred KiB; on the project's VMs a sleeping thread takes 40-100 us to
 *     start (and often lands on the caller's CPU, pre-empting it), so one
 *     thread wins up to several MiB.  When a copy thread is awake (copying
 *     or polling) a hand-off costs no wake-up and is always taken, and so is
 *     a batch submitted less than spin_ns after the previous one: it is
 *     part of a burst (a caller that submits several entries as a batch
 *     each; the worker puts a step's saves, and its loads, in one batch),
 *     whose batches copied in submit one after another would never share
 *     the copy threads (32 batches of 1 MiB here: 23-28 -> 28-33 GB/s
 *     saved, 25-27 -> 34-37 GB/s loaded);
 *   - a thread in ect_copy_engine_wait claims pieces of its own batch before it
 *     waits, so a waiting caller never idles while its copy sits in the
 *     queue; ect__copy_cpu_help does the same for a caller that must not
 *     sleep (it returns instead), and a batch submitted with
 *     ect__copy_cpu_submit_notify calls its callback from whichever thread
 *     copies its last byte, so such a caller needs no thread of its own
 *     to learn that it landed;
 *   - a copy thread that runs out of work polls the queue for spin_ns before
 *     it sleeps, and a waiter whose last pieces are being copied by others
 *     polls the landing counter for as long before it sleeps on done_cv, so
 *     back-to-back batches pay neither a wake-up nor a futex call.  At most
 *     max_spinners copy threads poll at once, and at most max_active copy
 *     threads are woken for work at once: with the caller, never more than
 *     the CPUs this process may run on;
 *   - the copy kernel is learned the same way: a batch above inline_bytes
 *     is copied with the string move (`rep movsb` where the CPU has ERMS,
 *     else memcpy) or with non-temporal stores (copy/ntcopy.h: no read for
 *     ownership of the destination's lines), whichever has copied faster
 *     for its direction and size class, timed piece by piece on the
 *     copiers' clocks (so wake-ups do not count).  The best differs by
 *     machine: on the project's VMs non-temporal stores run at half speed
 *     for tens of microseconds after a thread slept and `rep movsb` wins
 *     below the cache's size; on the GPU host non-temporal stores save 1 MiB
 *     twice as fast (`ectier bench copy` times every kernel in each run).
 *     Smaller batches use the string move;
 *   - each piece first prefetches a line of every page it will touch, on
 *     both sides: on the project's VMs the first store to a region page
 *     written long ago stalls, page after page, unless the pages are
 *     resolved together up front (copy/ntcopy.h has the figures).
 *
 * Tickets start at 1 and increase; the ticket table (copy/tickets.h) finds
 * a batch by its ticket in O(1) however long an old ticket stays unretired.
 *
 * Locking: one mutex guards the queue, the table, the free records, the
 * dispatch cursors and remaining counts, the thread counts and the
 * registrations; it is taken through engine_lock (cpu_internal.h), which
 * counts the acquisitions that found it held.  It is never held across a
 * copy.  A piece's bytes are written (and fenced, for non-temporal stores)
 * before the copier takes the mutex to subtract the piece, and readers
 * learn that a batch has landed only under the same mutex, so whoever sees
 * "landed" also sees the bytes.
 * A batch's op array is written before the batch is published and read-only
 * until the batch is retired, which cannot happen while a piece is in
 * flight; copiers therefore read it without the mutex.  The pollers read
 * two counters without the mutex (`queued`, `landed_seq`, written under it
 * with atomic stores) only as hints: they take the mutex before acting.
 * Copy threads sleep on work_cv, waiters on done_cv.
 */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "copy/cpu_internal.h"
#include "copy/ntcopy.h"

/* ---- batch records ----------------------------------------------------------- */

void
ect__cpu_free_batch(struct cpu_batch *b)
{
    ect__free(b->ops);
    ect__free(b);
}

void
ect__cpu_free_batch_value(void *b)
{
    ect__cpu_free_batch(b);
}

static void
recycle_locked(struct cpu_engine *e, struct cpu_batch *b)
{
    if (e->n_free >= POOL_KEEP) {
        ect__cpu_free_batch(b);
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
    engine_lock(e);
    struct cpu_batch *b = e->free_list;
    if (b != NULL) {
        e->free_list = b->next;
        e->n_free--;
    }
    pthread_mutex_unlock(&e->lock);

    if (b == NULL) {
        b = ect__calloc(1, sizeof(*b));
        if (b == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "copy cpu: cannot allocate a batch record");
        count_alloc(e);
    }
    if (n_ops > b->cap_ops) {
        ect_copy_op_t *ops = ect__realloc(b->ops, n_ops * sizeof(*ops));
        if (ops == NULL) {
            engine_lock(e);
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
    __atomic_store_n(&e->queued, e->queued + 1, __ATOMIC_RELEASE);
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
    __atomic_store_n(&e->queued, e->queued - 1, __ATOMIC_RELAXED);
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
 * the op array is safe).  With `stamp` (or a batch whose kernel is
 * learned) the claim gets when the piece began and ended. */
static void
run_claim(struct claim *c, bool stamp)
{
    const ect_copy_op_t *ops = c->batch->ops;
    size_t left = c->len, i = c->op, off = c->off;
    enum kernel kernel = c->batch->kernel;
    bool timed = c->batch->kernel_learn != NULL;
    stamp = stamp || timed;
    uint64_t t0 = stamp ? ect__now_ns() : 0;
    /* First every page of the piece, both sides (a region may be either,
     * or both for a same-host read), so the copy does not meet them cold
     * one at a time (copy/ntcopy.h). */
    for (size_t j = c->op, jo = c->off, l = c->len; l > 0; j++, jo = 0) {
        size_t n = ops[j].len - jo < l ? ops[j].len - jo : l;
        ect__copy_prefetch_pages((const char *)ops[j].dst + jo, n);
        ect__copy_prefetch_pages((const char *)ops[j].src + jo, n);
        l -= n;
    }
    while (left > 0) {
        size_t n = ops[i].len - off < left ? ops[i].len - off : left;
        char *d = (char *)ops[i].dst + off;
        const char *s = (const char *)ops[i].src + off;
        if (kernel == KERNEL_NT)
            ect__copy_nt(d, s, n);
        else
            ect__copy_movsb(d, s, n);
        left -= n;
        i++;
        off = 0;
    }
    if (kernel == KERNEL_NT)
        ect__copy_nt_fence(); /* before the mutex publishes the piece */
    c->t_start = t0;
    c->t_end = stamp ? ect__now_ns() : 0;
    c->ns = timed ? c->t_end - t0 : 0;
}

/* What a copier does once it has dropped the lock after the last piece of
 * a batch: wake the waiters (so they do not wake into a held mutex) and
 * call the batch's landed callback (taken under the lock: the record may
 * serve another batch as soon as the ticket is retired). */
struct landing {
    bool wake_waiters;
    void (*fn)(void *);
    void *arg;
};

static bool
landing_due(const struct landing *l)
{
    return l->wake_waiters || l->fn != NULL;
}

static void
landing_announce(struct cpu_engine *e, const struct landing *l)
{
    if (l->wake_waiters)
        pthread_cond_broadcast(&e->done_cv);
    if (l->fn != NULL)
        l->fn(l->arg);
}

/* Count a copied piece; when it was the batch's last, *l says what to do
 * once the lock is dropped (landing_announce). */
static void
finish_claim_locked(struct cpu_engine *e, const struct claim *c, struct landing *l)
{
    struct cpu_batch *b = c->batch;
    b->remaining -= c->len;
    b->copy_ns += c->ns;
    if (b->kernel_learn != NULL) {
        e->stats.timed_piece_bytes[!b->is_save] += c->len;
        e->stats.timed_piece_ns[!b->is_save] += c->ns;
    }
    *l = (struct landing){0};
    if (b->remaining > 0)
        return;
    if (b->handed_off) { /* only a handed-off batch has a way to learn (submit) */
        b->t_landed_ns = ect__now_ns();
        e->stats.handed_landed++;
        e->stats.handed_landed_ns += b->t_landed_ns - b->t_submit_ns;
        if (b->learn != NULL) {
            ect__learn_record(b->learn, WAY_HANDOFF, b->bytes, b->t_landed_ns - b->t_submit_ns);
            b->learn = NULL;
        }
    }
    if (b->kernel_learn != NULL) {
        ect__learn_record(b->kernel_learn, (int)b->kernel, b->bytes, b->copy_ns);
        b->kernel_learn = NULL;
    }
    __atomic_store_n(&e->landed_seq, e->landed_seq + 1, __ATOMIC_RELEASE);
    *l = (struct landing){.wake_waiters = e->waiters > 0, .fn = b->landed, .arg = b->landed_arg};
    b->landed = NULL;
}

/* finish_claim_locked, then landing_announce without the lock; the lock is
 * held again on return. */
static void
finish_claim_and_announce_locked(struct cpu_engine *e, const struct claim *c)
{
    struct landing l;
    finish_claim_locked(e, c, &l);
    if (landing_due(&l)) {
        pthread_mutex_unlock(&e->lock);
        landing_announce(e, &l);
        engine_lock(e);
    }
}

/* A copier whose previous piece ended at prev_end (0: the piece c, stamped
 * by run_claim, began a run of its pieces) went straight on to c. */
static void
count_piece_gap_locked(struct cpu_engine *e, uint64_t prev_end, const struct claim *c)
{
    if (prev_end == 0)
        return;
    e->stats.piece_gaps++;
    e->stats.piece_gap_ns += c->t_start - prev_end;
}

/* Poll, without the mutex, until *counter differs from seen (or, with
 * want_work, until there is work the copy threads may take) or budget_ns
 * have passed.  Returns true when it saw the change. */
static bool
poll_until(const struct cpu_engine *e, const uint64_t *counter, uint64_t seen, bool want_work,
           uint64_t budget_ns)
{
    uint64_t deadline = ect__now_ns() + budget_ns;
    for (unsigned i = 1;; i++) {
        if (want_work ? __atomic_load_n(counter, __ATOMIC_ACQUIRE) > 0 &&
                            !__atomic_load_n(&e->held, __ATOMIC_RELAXED)
                      : __atomic_load_n(counter, __ATOMIC_ACQUIRE) != seen)
            return true;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (i % POLL_CLOCK_EVERY == 0) {
            if (ect__now_ns() >= deadline)
                return false;
            /* If another thread of ours shares this CPU (a busy machine),
             * let it run: it may be the one we are waiting for. */
            sched_yield();
        }
    }
}

/* A copy thread out of work polls for the next batch for budget_ns,
 * counted as a spinner meanwhile (submit then signals nobody), without the
 * mutex, which it holds again on return.  Returns true when work came. */
static bool
poll_for_work_locked(struct cpu_engine *e, uint64_t budget_ns)
{
    e->spinners++;
    pthread_mutex_unlock(&e->lock);
    bool found = poll_until(e, &e->queued, 0, true, budget_ns);
    engine_lock(e);
    e->spinners--;
    if (found)
        e->stats.polls_found_work++;
    else
        e->stats.polls_timed_out++;
    return found;
}

void *
ect__cpu_copy_thread_main(void *arg)
{
    struct cpu_engine *e = arg;
    struct claim c;
    bool may_spin = false, polled = false;
    uint64_t t_piece_end = 0; /* when this thread's last piece ended, if it went on at once */

    engine_lock(e);
    for (;;) {
        if (e->queue_head != NULL && !(e->held && !e->stopping)) {
            struct cpu_batch *b = e->queue_head;
            if (b->t_queued_ns != 0) {
                /* The hand-off: how long the batch waited for a copy
                 * thread, one that was polling or one that slept. */
                uint64_t waited = ect__now_ns() - b->t_queued_ns;
                b->t_queued_ns = 0;
                if (polled) {
                    e->stats.handoffs_polling++;
                    e->stats.handoff_polling_ns += waited;
                } else {
                    e->stats.handoffs_woken++;
                    e->stats.handoff_woken_ns += waited;
                }
            }
            claim_locked(e, b, &c);
            e->stats.pieces_by_threads++;
            e->copiers++;
            pthread_mutex_unlock(&e->lock);
            run_claim(&c, true);
            engine_lock(e);
            count_piece_gap_locked(e, t_piece_end, &c);
            t_piece_end = c.t_end;
            e->copiers--;
            may_spin = true;
            finish_claim_and_announce_locked(e, &c);
            continue;
        }
        t_piece_end = 0; /* out of work: the next piece starts no run */
        /* Stop only once the queue is drained: destroy promises that
         * every submitted batch lands. */
        if (e->stopping && e->queue_head == NULL)
            break;
        if (may_spin && e->spin_ns > 0 && !e->stopping && !e->held &&
            e->spinners < e->max_spinners) {
            /* Out of work: the next batch of a busy caller usually comes
             * within microseconds, and polling for it costs less than the
             * wake-up it saves.  Submit sees the spinner and does not
             * signal. */
            may_spin = poll_for_work_locked(e, e->spin_ns);
            polled = true;
            continue;
        }
        uint64_t now = ect__now_ns();
        if (!e->stopping && !e->held && now < e->warm_until_ns && e->spinners < e->max_spinners) {
            /* A batch is expected (ect__copy_cpu_prewake): poll for it
             * until the prewake's deadline, which a later prewake may
             * have moved on meanwhile. */
            e->stats.prewoken++;
            may_spin = poll_for_work_locked(e, e->warm_until_ns - now);
            polled = true;
            continue;
        }
        may_spin = false;
        e->sleepers++;
        pthread_cond_wait(&e->work_cv, &e->lock);
        e->sleepers--;
        polled = false;
    }
    pthread_mutex_unlock(&e->lock);
    return NULL;
}

/* ---- submit ---------------------------------------------------------------------- */

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

size_t
ect__copy_cpu_piece_bytes(size_t total, unsigned copiers, size_t split_bytes, bool woken)
{
    if (total < PARALLEL_MIN && total <= split_bytes)
        return total > 0 ? total : 1;
    if (copiers == 0)
        copiers = 1;
    if (split_bytes == 0)
        split_bytes = 1;
    bool fine = woken && total < WOKEN_CUT_MAX;
    size_t smallest = fine ? PIECE_MIN_WOKEN : PIECE_MIN;
    size_t per_copier = fine ? PIECES_A_COPIER_WOKEN : PIECES_A_COPIER;
    /* per_copier pieces a copier, within [fewest pieces of at most
     * split_bytes, most pieces of at least `smallest`]; the first bound wins
     * a conflict.  The count, not a piece size, is what is rounded: sizing
     * pieces at total / (2 copiers) rounded down cut 1 MiB over three
     * copiers into seven pieces, and the seventh made a third round that two
     * copiers sat out. */
    size_t fewest = total / split_bytes + (total % split_bytes != 0);
    size_t most = total / smallest > 0 ? total / smallest : 1;
    size_t pieces = per_copier * (size_t)copiers;
    if (pieces > most)
        pieces = most;
    if (pieces < fewest)
        pieces = fewest;
    /* More pieces than copiers: a whole number of rounds where the pieces
     * stay big enough (8 MiB in pieces of at most 1 MiB over three
     * copiers: nine pieces, not eight). */
    if (copiers > 1 && pieces > copiers && pieces % copiers != 0) {
        size_t rounded = (pieces / copiers + 1) * copiers;
        if (rounded <= most)
            pieces = rounded;
    }
    size_t chunk = total / pieces + (total % pieces != 0);
    if (chunk <= SIZE_MAX - PIECE_ALIGN)
        chunk = (chunk + PIECE_ALIGN - 1) / PIECE_ALIGN * PIECE_ALIGN;
    return chunk;
}

/* Copy threads to wake for a newly queued batch of `pieces` pieces: none
 * while a poller will take it, else one; more for a batch several can
 * share, leaving one piece to a caller that waits, and never more copy
 * threads at work than max_active. */
static unsigned
wanted_wakeups_locked(const struct cpu_engine *e, size_t pieces)
{
    size_t want = e->spinners > 0 ? 0 : 1;
    if (pieces > (size_t)e->spinners + 1 && pieces - e->spinners - 1 > want)
        want = pieces - e->spinners - 1;
    unsigned busy = e->copiers + e->spinners;
    size_t room = busy < e->max_active ? e->max_active - busy : 0;
    if (want > room)
        want = room;
    if (want > e->sleepers)
        want = e->sleepers;
    return (unsigned)want;
}

/* ---- the learned choices: submit's own copy or a hand-off, and the kernel ------------- */

/* The kernel of a batch of `total` bytes (see the file comment);
 * *learn_p gets the class its copy time will feed, or NULL. */
static enum kernel
kernel_locked(struct cpu_engine *e, ect_copy_dir_t dir, size_t total, struct ect__learned **learn_p)
{
    *learn_p = NULL;
    if (total <= e->inline_bytes || !ect__copy_nt_available())
        return KERNEL_STRING;
    *learn_p = &e->kernel_learn[dir == ECT_COPY_SAVE ? 0 : 1][ect__learn_class(total)];
    return (enum kernel)ect__learn_pick(*learn_p, KERNEL_STRING);
}

/* Whether submit copies a batch of `total` bytes itself (see the file
 * comment).  *learn_p gets the size class whose figures the batch will feed
 * when the choice was a learned one, else NULL. */
static bool
copy_here_locked(struct cpu_engine *e, ect_copy_dir_t dir, size_t total, uint64_t t_submit,
                 struct ect__learned **learn_p)
{
    *learn_p = NULL;
    /* A batch submitted within the copy threads' polling window after the
     * previous one is part of a burst (several entries, a batch each):
     * copied here one after another, its batches would never share the
     * copy threads. */
    bool burst = e->spin_ns > 0 && t_submit < e->last_submit_ns + e->spin_ns;
    if (t_submit > e->last_submit_ns)
        e->last_submit_ns = t_submit;
    if (total == 0 || e->held)
        return false;
    if (total <= e->inline_bytes)
        return true;
    /* Awake copy threads take it without a wake-up. */
    if (total > e->inline_max || burst || e->queue_head != NULL || e->copiers > 0 ||
        e->spinners > 0)
        return false;
    *learn_p = &e->learn[dir == ECT_COPY_SAVE ? 0 : 1][ect__learn_class(total)];
    return ect__learn_pick(*learn_p, WAY_HANDOFF) == WAY_HERE;
}

/* Submit, with an optional landed callback (ect__copy_cpu_submit_notify). */
static ect_status_t
submit(struct cpu_engine *e, const ect_copy_batch_t *batch, void (*landed)(void *), void *arg,
       uint64_t *ticket_p)
{
    uint64_t t_submit = ect__now_ns();
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
    b->bytes = total;
    b->learn = NULL;
    b->t_submit_ns = t_submit;
    b->t_landed_ns = 0;
    b->handed_off = false;
    b->waiter_started = false;
    /* An empty batch has landed already: its callback runs below. */
    b->landed = total > 0 ? landed : NULL;
    b->landed_arg = arg;
    b->chunk = total > 0 ? total : 1; /* one claim, unless it is queued below */
    b->prev = b->next = NULL;

    engine_lock(e);
    if (e->stopping) {
        s = ect__error(ECT_ERR_SHUTDOWN, "copy submit: the cpu engine is shut down");
        goto recycle_batch;
    }
    bool grew;
    s = ect__tickets_reserve(&e->tickets, &grew);
    if (s != ECT_OK)
        goto recycle_batch;
    if (grew)
        count_alloc(e);
    uint64_t ticket = e->next_ticket++;
    b->ticket = ticket;
    ect__tickets_insert(&e->tickets, ticket, b);
    b->kernel = kernel_locked(e, batch->dir, total, &b->kernel_learn);
    b->is_save = batch->dir == ECT_COPY_SAVE;
    b->copy_ns = 0;
    e->stats.batches_nt += b->kernel == KERNEL_NT;
    if (b->is_save) {
        e->stats.saves++;
        e->stats.saves_nt += b->kernel == KERNEL_NT;
    }
    /* A batch copied right here (see copy_here_locked) is in the table but
     * not queued, so nobody else claims it; under a hold it is queued like
     * any other. */
    struct ect__learned *learn;
    bool here = copy_here_locked(e, batch->dir, total, t_submit, &learn);
    unsigned wake = 0;
    if (total > 0 && !here) {
        /* Finer pieces when the batch is all the work and every copy thread
         * must be woken for it: they start late (cpu.h).  Not behind other
         * batches (a burst): there copiers that come free take its pieces
         * as they come, and finer pieces only cost claims (32 batches of
         * 1 MiB on the 2-CPU VM: 0.90 -> 0.85 of the ceiling).  Not where
         * the copy threads have no CPUs of their own (fine_cut): on the
         * 2-CPU VM cold same-host 1 MiB reads cut finer came out 0.06-0.09
         * lower.  Not when a copy thread polls for it: there the finer
         * cut moved the 1 MiB rows both ways on an H100 host (docs/performance.md). */
        bool woken = e->fine_cut && e->spinners == 0 && e->copiers == 0 && e->queue_head == NULL;
        b->chunk = ect__copy_cpu_piece_bytes(total, e->max_active + 1, e->split_bytes, woken);
        size_t pieces = total / b->chunk + (total % b->chunk != 0);
        b->learn = learn;
        b->handed_off = true;
        b->t_queued_ns = ect__now_ns();
        enqueue_locked(e, b);
        wake = wanted_wakeups_locked(e, pieces);
        e->stats.wakeups += wake;
        e->stats.learned_handoffs += learn != NULL;
    }
    e->stats.batches++;
    e->stats.batches_inline += here;
    e->stats.learned_inline += here && learn != NULL;
    pthread_mutex_unlock(&e->lock);
    if (here) {
        struct claim c = {.batch = b, .op = 0, .off = 0, .len = total};
        run_claim(&c, false);
        engine_lock(e);
        if (learn != NULL)
            ect__learn_record(learn, WAY_HERE, total, ect__now_ns() - t_submit);
        struct landing l;
        finish_claim_locked(e, &c, &l);
        pthread_mutex_unlock(&e->lock);
        landing_announce(e, &l);
    } else if (total == 0 && landed != NULL) {
        landed(arg);
    }
    /* Wake copy threads after unlocking, so they do not wake into a held
     * mutex.  What that costs the caller is counted: on a VM, waking a
     * sleeping thread can cost the waker tens of microseconds. */
    if (wake > 0) {
        uint64_t t_wake = ect__now_ns();
        for (unsigned i = 0; i < wake; i++)
            pthread_cond_signal(&e->work_cv);
        __atomic_fetch_add(&e->wake_signal_ns, ect__now_ns() - t_wake, __ATOMIC_RELAXED);
    }
    /* From here b may already be landed and retired by a thread that
     * guessed the ticket: use the copy taken under the lock. */
    *ticket_p = ticket;
    return ECT_OK;

recycle_batch:
    recycle_locked(e, b);
    pthread_mutex_unlock(&e->lock);
    return s;
}

ect_status_t
ect__cpu_submit(ect_copy_engine_t *engine, const ect_copy_batch_t *batch, uint64_t *ticket_p)
{
    return submit(cpu_of(engine), batch, NULL, NULL, ticket_p);
}

ect_status_t
ect__copy_cpu_submit_notify(ect_copy_engine_t *engine, const ect_copy_batch_t *batch,
                            void (*landed)(void *arg), void *arg, uint64_t *ticket_p)
{
    if (engine == NULL || engine->ops != &ect__cpu_ops || landed == NULL)
        return ect__error(ECT_ERR_INVALID_ARG,
                          "copy submit_notify: not a cpu engine, or no landed callback");
    return submit(cpu_of(engine), batch, landed, arg, ticket_p);
}

static ect_status_t
not_found(const char *what, uint64_t ticket)
{
    return ect__error(ECT_ERR_NOT_FOUND,
                      "copy %s: ticket %llu is not in flight (already retired or never issued)",
                      what, (unsigned long long)ticket);
}

ect_status_t
ect__cpu_query(ect_copy_engine_t *engine, uint64_t ticket)
{
    struct cpu_engine *e = cpu_of(engine);
    size_t slot;

    engine_lock(e);
    struct cpu_batch *b = ect__tickets_find(&e->tickets, ticket, &slot);
    if (b == NULL) {
        pthread_mutex_unlock(&e->lock);
        return not_found("query", ticket);
    }
    if (b->remaining > 0) {
        pthread_mutex_unlock(&e->lock);
        return ECT_ERR_BUSY;
    }
    ect__tickets_remove_at(&e->tickets, slot);
    recycle_locked(e, b);
    pthread_mutex_unlock(&e->lock);
    return ECT_OK;
}

/* The rest of ticket's batch as a caller sees it: copy the pieces nobody
 * has taken, then poll while others copy the last ones (their end is
 * usually microseconds away, less than a sleep and a wake-up).  may_sleep:
 * then sleep on done_cv until it lands, and retire the ticket (wait);
 * else return ECT_ERR_BUSY instead of sleeping, and leave the ticket in
 * flight (help).  Called and returns without the lock. */
static ect_status_t
finish_own_batch(struct cpu_engine *e, uint64_t ticket, bool may_sleep, const char *what)
{
    struct claim c;
    size_t slot;
    bool polled = false;      /* polled in vain since the last sleep: sleep now */
    uint64_t t_piece_end = 0; /* when our last piece ended, if we went on at once */
    uint64_t t_enter = ect__now_ns();

    engine_lock(e);
    for (;;) {
        /* Look the ticket up afresh each round: while we slept another
         * thread may have retired it and its record may serve a new batch. */
        struct cpu_batch *b = ect__tickets_find(&e->tickets, ticket, &slot);
        if (b == NULL) {
            pthread_mutex_unlock(&e->lock);
            return not_found(what, ticket);
        }
        if (b->remaining == 0) {
            /* The first look at it since it landed, counted when it
             * landed while we waited (cpu.h). */
            if (b->t_landed_ns != 0 && b->t_landed_ns >= t_enter) {
                e->stats.waiters_after_landing++;
                e->stats.waiter_after_landing_ns += ect__now_ns() - b->t_landed_ns;
            }
            b->t_landed_ns = 0;
            if (may_sleep) {
                ect__tickets_remove_at(&e->tickets, slot);
                recycle_locked(e, b);
            }
            pthread_mutex_unlock(&e->lock);
            return ECT_OK;
        }
        if (has_unclaimed(b)) {
            claim_locked(e, b, &c);
            e->stats.pieces_by_waiters++;
            if (b->handed_off && !b->waiter_started) {
                b->waiter_started = true;
                e->stats.waiter_first_pieces++;
                e->stats.waiter_first_piece_ns += ect__now_ns() - b->t_submit_ns;
            }
            pthread_mutex_unlock(&e->lock);
            run_claim(&c, true);
            engine_lock(e);
            count_piece_gap_locked(e, t_piece_end, &c);
            t_piece_end = c.t_end;
            finish_claim_and_announce_locked(e, &c);
            continue;
        }
        t_piece_end = 0;
        if (!polled && e->spin_ns > 0) {
            uint64_t seen = e->landed_seq;
            /* Long enough for the bytes still in flight at a slow 4 GB/s:
             * a caller that waits has nothing else to do, and a sleep
             * would add a wake-up to the end of its copy. */
            uint64_t budget = (uint64_t)(b->remaining / 4);
            budget = budget < e->spin_ns         ? e->spin_ns
                     : budget > MAX_WAIT_POLL_NS ? MAX_WAIT_POLL_NS
                                                 : budget;
            pthread_mutex_unlock(&e->lock);
            polled = !poll_until(e, &e->landed_seq, seen, false, budget);
            engine_lock(e);
            e->stats.waiter_polls++;
            continue;
        }
        if (!may_sleep) {
            pthread_mutex_unlock(&e->lock);
            return ECT_ERR_BUSY;
        }
        e->waiters++;
        e->stats.waiter_sleeps++;
        pthread_cond_wait(&e->done_cv, &e->lock);
        e->waiters--;
        polled = false;
    }
}

ect_status_t
ect__cpu_wait(ect_copy_engine_t *engine, uint64_t ticket)
{
    return finish_own_batch(cpu_of(engine), ticket, true, "wait");
}

ect_status_t
ect__copy_cpu_help(ect_copy_engine_t *engine, uint64_t ticket)
{
    if (engine == NULL || engine->ops != &ect__cpu_ops)
        return ect__error(ECT_ERR_INVALID_ARG, "copy help: not a cpu engine");
    return finish_own_batch(cpu_of(engine), ticket, false, "help");
}
