/*
 * Internal entry points of the CPU copy engine (src/copy/cpu.c) beyond the
 * public interface: an explicit shutdown for owners that must stop copies
 * before they release the memory, a hold that keeps the copy threads off the
 * queue (so tests can keep batches in flight deterministically), an
 * allocation counter that lets tests prove the steady state does not
 * allocate, counters of who copied and what the hand-offs cost (for
 * `ectier bench` and tests), and for a caller that must never sleep on a
 * copy (the same-host read path): a landed callback and a call that copies
 * its own batch's pieces without waiting.
 */
#ifndef ECT_COPY_CPU_H
#define ECT_COPY_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include <ectier/config.h>
#include <ectier/copy.h>

/*
 * Stop accepting batches, let every queued batch land and join the copy
 * threads.  Afterwards submit returns ECT_ERR_SHUTDOWN, while query and wait
 * still answer once for every ticket issued before.  Idempotent.
 * Returns ECT_OK, or ECT_ERR_INVALID_ARG if engine is not a CPU engine.
 * Thread safety: must not race with submit or destroy on the same engine.
 */
ect_status_t ect__copy_cpu_shutdown(ect_copy_engine_t *engine);

/*
 * hold true: copy threads stop claiming new pieces (pieces already claimed
 * finish); batches then land only through ect_copy_engine_wait, whose caller copies
 * its own batch, or after hold false.  Shutdown and destroy ignore the hold,
 * so every batch still lands.  Returns ECT_OK, or ECT_ERR_INVALID_ARG if
 * engine is not a CPU engine.  Thread safety: safe.
 */
ect_status_t ect__copy_cpu_hold(ect_copy_engine_t *engine, bool hold);

/*
 * ect_copy_engine_submit, and once the batch has landed, landed(arg) is
 * called exactly once, on whichever thread copied its last byte: a copy
 * thread, or the caller itself inside this call, ect__copy_cpu_help or
 * ect_copy_engine_wait.  The ticket stays in flight until query or wait
 * retires it, as for any batch, so the callback may run before or after
 * the caller learns the batch landed; it must be short and must not call
 * into this engine.  Destroy and shutdown let every batch land, so the
 * callback of every batch submitted with ECT_OK runs before they return.
 * Returns what submit returns, or ECT_ERR_INVALID_ARG if engine is not a
 * CPU engine or landed is NULL (no batch then).
 * Thread safety: as submit.
 */
ect_status_t ect__copy_cpu_submit_notify(ect_copy_engine_t *engine, const ect_copy_batch_t *batch,
                                         void (*landed)(void *arg), void *arg, uint64_t *ticket_p);

/*
 * Copy the batch's pieces that no copy thread has taken yet on the calling
 * thread, then poll (as ect_copy_engine_wait does, never sleeping) for the
 * pieces others are copying to land.  Unlike wait it does not retire the
 * ticket.  For a caller that must not sleep on a copy but would rather copy
 * its own bytes than wait for a copy thread to wake.
 * Returns ECT_OK when the batch has landed (a copy thread that copied its
 * last byte may still be about to make the landed callback: only the
 * callback itself says it has run), ECT_ERR_BUSY when other threads are
 * still copying it, ECT_ERR_NOT_FOUND for a ticket not in flight,
 * ECT_ERR_INVALID_ARG if engine is not a CPU engine.
 * Thread safety: safe.
 */
ect_status_t ect__copy_cpu_help(ect_copy_engine_t *engine, uint64_t ticket);

/* The longest a prewake keeps copy threads polling. */
#define ECT_COPY_CPU_PREWAKE_MAX_NS (2ull * 1000 * 1000)

/*
 * A batch is expected within about budget_ns: wake the copy threads that
 * sleep (as many as may poll at once, less those polling already) so that
 * they poll for it for max(budget_ns, the engine's spin_us), at most
 * ECT_COPY_CPU_PREWAKE_MAX_NS, instead of being woken by its submit: the
 * wake-up (tens of microseconds on a VM) then overlaps whatever the caller
 * waits for before it submits.  A no-op while the threads are polling or
 * copying, on an engine that never polls (spin_us ECT_COPY_CPU_NO_SPIN),
 * held, or shutting down.  The polling costs a CPU per woken thread for up
 * to that long when no batch comes.  Returns ECT_OK, or ECT_ERR_INVALID_ARG
 * if engine is not a CPU engine.
 * Thread safety: safe.
 */
ect_status_t ect__copy_cpu_prewake(ect_copy_engine_t *engine, uint64_t budget_ns);

/*
 * The engine a config asks for: its copy_threads and copy_spin_us (0 there
 * means never poll: ECT_COPY_CPU_NO_SPIN here), the rest default.  The
 * worker's own engine and `ectier bench` use it.  Thread safety: safe.
 */
ect_copy_cpu_params_t ect__copy_cpu_params_of(const ect_config_t *cfg);

/* The CPUs this process may run on (its affinity mask), at least 1.  Thread
 * safety: safe. */
unsigned ect__copy_cpu_usable_cpus(void);

/*
 * How many threads copy one batch at once in a CPU engine of `threads` copy
 * threads (0: the default) in this process: the copy threads woken for a
 * batch (at most one fewer than the CPUs it may run on) and the caller that
 * waits for it.  A benchmark's ceiling copies with as many.  Thread safety:
 * safe.
 */
unsigned ect__copy_cpu_copiers(unsigned threads);

/*
 * Whether the CPUs this process may run on outnumber the copiers of an
 * engine of `threads` copy threads (ect__copy_cpu_copiers) by two, so that
 * woken copy threads run beside the caller rather than on its CPU.  Where
 * they do, waking them early pays (the consumer's prewake) and a batch they
 * are woken for is cut finer (ect__copy_cpu_piece_bytes); on a 2-CPU VM
 * neither paid.  Thread safety: safe.
 */
bool ect__copy_cpu_cpus_to_spare(unsigned threads);

/*
 * The size of the pieces a batch of `total` bytes is cut into when
 * `copiers` threads may copy it at once (ect__copy_cpu_copiers) and a piece
 * may hold at most split_bytes: the whole batch when it is under 256 KiB
 * and fits split_bytes.  Otherwise, with `woken` false (a copy thread is
 * polling for the batch), two pieces a copier, but no fewer than
 * split_bytes allows and, where split_bytes leaves room, no more than
 * pieces of 128 KiB allow; with `woken` true (every copy thread must be
 * woken for it, and starts tens of microseconds after the caller) and a
 * batch under 4 MiB, eight pieces a copier within the same bounds but
 * pieces of 64 KiB.  Past one round, a whole number of rounds of the
 * copiers where the pieces stay that big (rounding pieces up to whole pages
 * may take one off a count above 32, or above 16 with the finer cut).  Each
 * piece but the last is this size, a multiple of 4 KiB (so pieces of
 * page-aligned ops stay page-aligned; with a split_bytes that is no
 * multiple of 4 KiB a piece may exceed it by less than 4 KiB).  At least 1.
 * Thread safety: safe (pure).
 *
 * Why: on H100 hosts of 16 CPUs (3 copiers, woken threads starting 30-50
 * us after submit) `ectier bench copy` with the finer cut, alternating
 * with the coarse one (2 runs each, two sessions), loaded 1 MiB after the
 * threads slept 1 ms at 0.83 / 0.88 of the no-polling ceiling instead of
 * 0.74 / 0.80; saves, which copy faster, moved no more than rows whose code
 * did not change; 8 MiB in 24 pieces instead of 9 came out 0.02-0.03
 * lower, so batches from 4 MiB up keep the coarse cut (docs/performance.md).
 */
size_t ect__copy_cpu_piece_bytes(size_t total, unsigned copiers, size_t split_bytes, bool woken);

/*
 * How many times the engine has allocated memory since creation (batch
 * records, op arrays, ticket-table growth).  0 for a non-CPU engine.
 * Thread safety: safe.
 */
uint64_t ect__copy_cpu_alloc_count(ect_copy_engine_t *engine);

/* Since the engine was created; every field only grows. */
struct ect__copy_cpu_stats {
    uint64_t batches;        /* submitted with ECT_OK */
    uint64_t batches_inline; /* of which copied inside submit, on the caller */
    /* Batches the learned choice placed (larger than inline_bytes, the copy
     * threads asleep): copied inside submit, or handed off. */
    uint64_t learned_inline, learned_handoffs;
    uint64_t batches_nt;        /* copied with non-temporal stores (the learned kernel) */
    uint64_t saves, saves_nt;   /* of the batches: saves, and saves with non-temporal stores */
    uint64_t pieces_by_threads; /* pieces copied by copy threads */
    uint64_t pieces_by_waiters; /* pieces copied by callers in wait or ect__copy_cpu_help */
    /* Pieces of batches above inline_bytes (the ones whose kernel is
     * learned), each timed on its copier's clock: their bytes and time,
     * [0] of saves and [1] of loads. */
    uint64_t timed_piece_bytes[2], timed_piece_ns[2];
    uint64_t wakeups; /* copy threads signalled to wake for work */
    /* The submitters' time in those signals (a futex wake each); counted
     * without the lock, so it may trail `wakeups` by signals in progress. */
    uint64_t wake_signal_ns;
    uint64_t polls_found_work; /* a copy thread polled and work came */
    uint64_t polls_timed_out;  /* ... and none came within spin_us */
    uint64_t waiter_polls;     /* waiters that polled while others finished */
    uint64_t waiter_sleeps;    /* waiters that slept on the landing condition */
    /* From queueing a batch to a copy thread taking its first piece (only
     * for batches a copy thread took a piece of), for a thread that was
     * polling and for one that had to be woken. */
    uint64_t handoffs_polling, handoff_polling_ns;
    uint64_t handoffs_woken, handoff_woken_ns;
    /* Not counters: the engine's copy threads, and those asleep on the work
     * condition when the stats were taken (a thread between its last piece
     * and its sleep, or polling, is not). */
    uint64_t threads, threads_asleep;
    uint64_t prewakes; /* copy threads signalled by ect__copy_cpu_prewake */
    uint64_t prewoken; /* polls begun for a prewake (a thread may poll more than once for one) */
    /* Acquisitions of the engine's lock that found it held by another
     * thread (a condition wait's re-acquisition is not counted). */
    uint64_t lock_waits;
    /* The timeline of a batch handed to the copy threads (queued, not
     * copied inside submit), for telling where its time goes beside the
     * copies: from submit to its last byte copied; from submit to its
     * waiter's first piece, for a batch whose waiter took one; from its
     * last byte copied to the first look at it landed, for a look by a
     * caller already in ect_copy_engine_wait or ect__copy_cpu_help when
     * it landed (a later caller's lag is its own, not the engine's).
     * And the time a copier spent between two pieces it copied in a row
     * (the lock, the count of the piece copied, the claim of the next). */
    uint64_t handed_landed, handed_landed_ns;
    uint64_t waiter_first_pieces, waiter_first_piece_ns;
    uint64_t waiters_after_landing, waiter_after_landing_ns;
    uint64_t piece_gaps, piece_gap_ns;
};

/*
 * A consistent copy of the counters into *stats_p.  Returns ECT_OK, or
 * ECT_ERR_INVALID_ARG if engine is not a CPU engine or stats_p is NULL.
 * Thread safety: safe.
 */
ect_status_t ect__copy_cpu_stats(ect_copy_engine_t *engine, struct ect__copy_cpu_stats *stats_p);

#endif /* ECT_COPY_CPU_H */
