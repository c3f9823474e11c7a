/*
 * What the CPU copy engine's two files share: cpu.c, the data path
 * (batches, pieces, copy threads, submit, query, wait, help; its file
 * comment explains the design and the locking), and cpu_engine.c, the
 * engine's life (create, destroy, shutdown, hold, counters, host
 * registrations, thread counts).  Every field of struct cpu_engine is
 * guarded by its lock unless its comment says otherwise.
 */
#ifndef ECT_COPY_CPU_INTERNAL_H
#define ECT_COPY_CPU_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "copy/cpu.h"
#include "copy/engine.h"
#include "copy/learn.h"
#include "copy/tickets.h"

enum {
    DEFAULT_THREADS = 2,
    MAX_THREADS = 64,
    MIN_SPLIT_BYTES = 4096,
    PIECE_ALIGN = 4096, /* pieces of a split batch are multiples of this */
    POOL_KEEP = 64,     /* idle batch records kept for reuse */
    TABLE_MIN_CAP = 64, /* ticket-table slots; always a power of two */
    REGS_MIN_CAP = 4,
    DEFAULT_SPIN_US = 50, /* about two wake-ups on the project's VMs */
    MAX_SPIN_US = 100000,
    POLL_CLOCK_EVERY = 64, /* pause instructions between clock reads while polling */
};
#define DEFAULT_SPLIT_BYTES ((size_t)1 << 20)
/* The longest a waiter polls before it sleeps (when spin_us > 0). */
#define MAX_WAIT_POLL_NS     ((uint64_t)1000000)
#define DEFAULT_INLINE_BYTES ((size_t)64 << 10)
#define DEFAULT_INLINE_MAX   ((size_t)16 << 20)
/* Below this a batch is one piece: sharing it would cost more than it saves. */
#define PARALLEL_MIN ((size_t)256 << 10)
/* The smallest piece of a shared batch, and the pieces a copier, when a
 * copy thread is polling for it (it starts within a microsecond). */
#define PIECE_MIN       ((size_t)128 << 10)
#define PIECES_A_COPIER 2
/* The same when every copy thread must be woken for it on a host with CPUs
 * to spare (struct cpu_engine's fine_cut): they start 30-50 us after submit
 * on the GPU hosts, by when the caller has copied a share alone; smaller
 * pieces let the latecomers and the caller end together (see
 * ect__copy_cpu_piece_bytes). */
#define PIECE_MIN_WOKEN       ((size_t)64 << 10)
#define PIECES_A_COPIER_WOKEN 8
/* From this size up a late start is a small part of the copy, and the
 * finer cut cost more than it won (ect__copy_cpu_piece_bytes). */
#define WOKEN_CUT_MAX ((size_t)4 << 20)

/* The two kernels the engine chooses between (the string move is memcpy
 * where rep movsb is not built). */
enum kernel { KERNEL_STRING, KERNEL_NT };

struct cpu_batch {
    uint64_t ticket;
    ect_copy_op_t *ops; /* the batch's non-empty ops; capacity kept across reuse */
    size_t n_ops;
    size_t cap_ops;
    size_t chunk;   /* bytes per claimed piece */
    size_t next_op; /* dispatch cursor: first unclaimed byte is ops[next_op] + next_off */
    size_t next_off;
    size_t remaining;                  /* bytes not yet copied; the batch has landed at 0 */
    size_t bytes;                      /* the batch's size */
    enum kernel kernel;                /* how its bytes are copied */
    bool is_save;                      /* its direction (for the counters) */
    struct ect__learned *learn;        /* a learned hand-off: timed until it lands; else NULL */
    struct ect__learned *kernel_learn; /* a learned kernel: its pieces' copy time; else NULL */
    uint64_t copy_ns;                  /* copy time of its pieces so far (with kernel_learn) */
    uint64_t t_submit_ns;              /* when submit started (for a learned hand-off) */
    uint64_t t_queued_ns;              /* when queued; 0 once a copy thread took a piece */
    uint64_t t_landed_ns;              /* when a queued batch's last byte was copied; else 0 */
    bool handed_off;                   /* queued for the copy threads (not copied in submit) */
    bool waiter_started;               /* its waiter has taken a piece */
    void (*landed)(void *);            /* ect__copy_cpu_submit_notify's callback, or NULL */
    void *landed_arg;
    struct cpu_batch *prev, *next; /* work queue links; next also links the free list */
};

/* A piece of one batch's byte stream, claimed by one copier. */
struct claim {
    struct cpu_batch *batch;
    size_t op;
    size_t off;
    size_t len;
    uint64_t ns; /* how long run_claim took (timed when the batch's kernel is learned) */
    uint64_t t_start, t_end; /* when run_claim began and ended, where it stamped them; else 0 */
};

struct host_reg {
    char *base;
    size_t len;
};

/* The two ways of the learned hand-off choice (copy/learn.h), timed from
 * submit to landed; the kernel choice's ways are enum kernel, timed by the
 * pieces' copy time. */
enum way { WAY_HERE, WAY_HANDOFF };

struct cpu_engine {
    struct ect_copy_engine base; /* first: the dispatcher casts */
    pthread_mutex_t lock;
    pthread_cond_t work_cv; /* copy threads: work queued, or stopping */
    pthread_cond_t done_cv; /* waiters: some batch landed */
    pthread_t *threads;
    unsigned n_threads;
    size_t split_bytes;
    size_t inline_bytes;
    size_t inline_max; /* largest batch the learned choice may copy in submit */
    uint64_t spin_ns;
    unsigned max_spinners; /* copy threads that may poll for work at once */
    unsigned max_active;   /* copy threads woken for work at once */
    bool fine_cut;         /* cut batches for woken threads finer (ect__copy_cpu_cpus_to_spare) */
    unsigned copiers;      /* copy threads copying a piece now */
    unsigned spinners;     /* copy threads polling for work now */
    unsigned sleepers;     /* copy threads waiting on work_cv */
    /* ect__copy_cpu_prewake: until then, a copy thread out of work polls
     * for more (up to max_spinners at once) instead of sleeping. */
    uint64_t warm_until_ns;
    uint64_t last_submit_ns; /* when the latest batch was submitted (copy_here_locked) */
    bool stopping;
    bool joined;
    bool held;           /* ect__copy_cpu_hold: copy threads leave the queue alone (atomic reads) */
    unsigned waiters;    /* threads sleeping on done_cv */
    uint64_t queued;     /* atomic stores: batches with unclaimed bytes */
    uint64_t landed_seq; /* atomic stores: +1 whenever a batch lands */
    uint64_t next_ticket;
    struct cpu_batch *queue_head, *queue_tail; /* batches with unclaimed bytes */
    struct ect__tickets tickets;               /* issued, unretired batches by ticket */
    struct cpu_batch *free_list;
    unsigned n_free;
    struct host_reg *regs;
    size_t n_regs;
    size_t cap_regs;
    uint64_t allocs;                                  /* atomic: allocations since creation */
    struct ect__learned learn[2][ECT__LEARN_CLASSES]; /* [save, load][size class] */
    struct ect__learned kernel_learn[2][ECT__LEARN_CLASSES]; /* [save, load][size class] */
    struct ect__copy_cpu_stats stats;
    uint64_t wake_signal_ns; /* stats.wake_signal_ns, added to without the lock (atomic) */
};

/* The engine's operations (cpu_engine.c); also how a CPU engine is told
 * from another. */
extern const struct ect_copy_engine_ops ect__cpu_ops;

static inline struct cpu_engine *
cpu_of(ect_copy_engine_t *engine)
{
    return (struct cpu_engine *)engine;
}

/* Take the engine's lock, counting an acquisition that found it held
 * (stats.lock_waits): the copiers of one batch tend to finish their pieces
 * together and meet at the lock. */
static inline void
engine_lock(struct cpu_engine *e)
{
    if (pthread_mutex_trylock(&e->lock) == 0)
        return;
    pthread_mutex_lock(&e->lock);
    e->stats.lock_waits++;
}

/* One more allocation (ect__copy_cpu_alloc_count). */
static inline void
count_alloc(struct cpu_engine *e)
{
    __atomic_fetch_add(&e->allocs, 1, __ATOMIC_RELAXED);
}

/* ---- cpu.c ---- */

/* A copy thread: takes pieces from the queue until stopping and drained. */
void *ect__cpu_copy_thread_main(void *arg);
/* Free a batch record and its op array. */
void ect__cpu_free_batch(struct cpu_batch *b);
void ect__cpu_free_batch_value(void *b); /* the same, for ect__tickets_each */
/* The engine operations of the data path (copy/engine.h). */
ect_status_t ect__cpu_submit(ect_copy_engine_t *engine, const ect_copy_batch_t *batch,
                             uint64_t *ticket_p);
ect_status_t ect__cpu_query(ect_copy_engine_t *engine, uint64_t ticket);
ect_status_t ect__cpu_wait(ect_copy_engine_t *engine, uint64_t ticket);

#endif /* ECT_COPY_CPU_INTERNAL_H */
