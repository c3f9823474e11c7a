/*
 * The CPU copy ceiling the benchmarks share (bench.h): the machine's best
 * copy of the same bytes, by memcpy, non-temporal stores and rep movsb
 * (each thread's share of pages prefetched first, as the engine prefetches
 * a piece's), on one thread and on as many threads as the engine copies
 * with (in equal shares, or in pieces each thread takes as it comes), its
 * helper threads spinning when the clock starts; and, where a bench asks,
 * the same ways with the helpers asleep and woken by the copying thread
 * (the best copy that finds no thread polling).
 *
 * Not thread-safe: one driver thread per ceiling (bench.h); the helpers
 * are the ceiling's own.
 */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "common/clock.h"
#include "copy/ntcopy.h"

/* ---- the CPU copy ceiling -------------------------------------------------------------- */

enum way_kernel { WAY_MEMCPY, WAY_NT, WAY_MOVSB };

struct way {
    enum way_kernel kernel;
    unsigned threads;
    int asleep; /* helpers asleep when the clock starts, woken by the driver */
    int pieces; /* helpers spinning, every thread claiming pieces as it comes
                 * (else an equal share each); ways with sleeping helpers
                 * always take pieces */
    char name[48];
};

/* A way in pieces (every way with sleeping helpers, and one of each kernel
 * with spinning helpers) copies pieces claimed one at a time, so that the
 * threads that come first or copy faster copy more: eight a thread, but
 * none below MIN_PIECE_BYTES. */
#define PIECES_PER_THREAD 8
#define MIN_PIECE_BYTES   ((size_t)64 << 10)

/* Locking: `lock` guards job, armed, asleep_job, pieces_job, the job's
 * description, joined, sleeping, slept_at_ns and stop, and helpers sleep on cv.
 * While a multi-threaded copy is timed the driver and the helpers meet on
 * the atomics ready, go and done (helpers already spinning; next_piece too
 * in pieces), or next_piece and done (helpers woken), without the lock. */
struct ect_bench_ceiling {
    unsigned threads;
    struct way ways[ECT_BENCH_MAX_WAYS];
    unsigned n_ways;
    unsigned rotate;
    unsigned best;                 /* the way that won the last ect_bench_ceiling_gbps */
    unsigned best_asleep;          /* ... and the last ect_bench_ceiling_asleep_gbps */
    double *t[ECT_BENCH_MAX_WAYS]; /* samples (seconds) of each way */
    size_t n, cap;
    char describe[512];

    pthread_t *helpers;
    unsigned n_helpers;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int armed, stop;
    int asleep_job;       /* the current job is a way with sleeping helpers */
    int pieces_job;       /* the current job takes pieces (every asleep_job does) */
    unsigned sleeping;    /* helpers waiting on cv */
    uint64_t slept_at_ns; /* when the last of them began to */
    unsigned job;         /* increases per multi-threaded copy */
    const ect_copy_op_t *ops;
    size_t n_ops, total;
    enum way_kernel kernel;
    size_t n_pieces;                      /* of the current job, when it takes pieces */
    unsigned ready, go, done, next_piece; /* atomics */
    /* Helpers that took the current job (under lock) and that are done with
     * it (atomic): a job's driver waits, untimed, until every helper that
     * took it is done, so that none still claims pieces or counts done when
     * the next job resets them. */
    unsigned joined, left;
    /* Ways with sleeping helpers: when the driver began to wake them, each
     * helper's delay from then to its first piece in the current job (0:
     * it took none; written before its first piece is counted done), and
     * the delays of every job so far. */
    uint64_t woke_at_ns;
    uint64_t *first_piece_ns; /* [threads]; index 0 unused */
    double *starts;
    size_t n_starts, cap_starts;
};

/* Copy the bytes [lo, hi) of the ops' concatenated stream. */
static void
copy_share(const ect_copy_op_t *ops, size_t n_ops, size_t lo, size_t hi, enum way_kernel kernel)
{
    /* Pass 0 prefetches every page of the share, both sides, as the copy
     * engine does before each piece (copy/ntcopy.h), so that no figure beats
     * its ceiling with that; pass 1 copies. */
    for (int pass = 0; pass < 2; pass++) {
        size_t pos = 0;
        for (size_t i = 0; i < n_ops && pos < hi; i++) {
            size_t end = pos + ops[i].len;
            if (end > lo) {
                size_t a = lo > pos ? lo - pos : 0, b = (hi < end ? hi : end) - pos;
                char *d = (char *)ops[i].dst + a;
                const char *s = (const char *)ops[i].src + a;
                if (pass == 0) {
                    ect__copy_prefetch_pages(d, b - a);
                    ect__copy_prefetch_pages(s, b - a);
                } else if (kernel == WAY_NT) {
                    ect__copy_nt(d, s, b - a);
                } else if (kernel == WAY_MOVSB) {
                    ect__copy_movsb(d, s, b - a);
                } else {
                    memcpy(d, s, b - a);
                }
            }
            pos = end;
        }
    }
    if (kernel == WAY_NT)
        ect__copy_nt_fence();
}

/* Thread j of k copies an equal share, cut at cache-line multiples. */
static void
share_bounds(size_t total, unsigned j, unsigned k, size_t *lo, size_t *hi)
{
    *lo = j == 0 ? 0 : (size_t)((double)total * j / k) & ~(size_t)63;
    *hi = j + 1 == k ? total : (size_t)((double)total * (j + 1) / k) & ~(size_t)63;
}

struct helper_arg {
    ect_bench_ceiling_t *c;
    unsigned index; /* 1 .. threads-1; the driver is 0 */
};

/* The piece size of a way in pieces for `total` bytes on `threads`
 * threads: a multiple of 64 bytes. */
static size_t
piece_bytes(size_t total, unsigned threads)
{
    size_t piece = (total / ((size_t)threads * PIECES_PER_THREAD)) & ~(size_t)63;
    return piece > MIN_PIECE_BYTES ? piece : MIN_PIECE_BYTES;
}

/* Claim pieces of the current job and copy them until none is left; a
 * helper `me` (0: the driver) woken at woke_at_ns (0: it was spinning)
 * notes when it took its first. */
static void
copy_pieces(ect_bench_ceiling_t *c, unsigned me, const ect_copy_op_t *ops, size_t n_ops,
            size_t total, size_t n_pieces, enum way_kernel kernel, uint64_t woke_at_ns)
{
    size_t piece = piece_bytes(total, c->threads);
    for (bool first = true;; first = false) {
        size_t i = __atomic_fetch_add(&c->next_piece, 1, __ATOMIC_RELAXED);
        if (i >= n_pieces)
            return;
        if (first && me > 0 && woke_at_ns != 0)
            c->first_piece_ns[me] = ect__now_ns() - woke_at_ns;
        size_t lo = i * piece, hi = lo + piece;
        copy_share(ops, n_ops, lo, hi < total ? hi : total, kernel);
        __atomic_fetch_add(&c->done, 1, __ATOMIC_RELEASE);
    }
}

static void *
helper_main(void *p)
{
    struct helper_arg *a = p;
    ect_bench_ceiling_t *c = a->c;
    unsigned me = a->index, last = 0;
    free(a);
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->stop && (!c->armed || c->job == last)) {
            c->sleeping++;
            c->slept_at_ns = ect__now_ns();
            pthread_cond_wait(&c->cv, &c->lock);
            c->sleeping--;
        }
        if (c->stop)
            break;
        unsigned job = last = c->job;
        c->joined++;
        const ect_copy_op_t *ops = c->ops;
        size_t n_ops = c->n_ops, total = c->total, n_pieces = c->n_pieces, lo, hi;
        enum way_kernel kernel = c->kernel;
        int asleep = c->asleep_job, pieces = c->pieces_job;
        uint64_t woke_at_ns = c->woke_at_ns;
        pthread_mutex_unlock(&c->lock);
        if (asleep) {
            copy_pieces(c, me, ops, n_ops, total, n_pieces, kernel, woke_at_ns);
        } else {
            share_bounds(total, me, c->threads, &lo, &hi);
            __atomic_fetch_add(&c->ready, 1, __ATOMIC_ACQ_REL);
            while (__atomic_load_n(&c->go, __ATOMIC_ACQUIRE) != job)
                __builtin_ia32_pause();
            if (pieces) {
                copy_pieces(c, me, ops, n_ops, total, n_pieces, kernel, 0);
            } else {
                copy_share(ops, n_ops, lo, hi, kernel);
                __atomic_fetch_add(&c->done, 1, __ATOMIC_RELEASE);
            }
        }
        __atomic_fetch_add(&c->left, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* A way whose helpers sleep when the clock starts: the driver wakes them
 * (one broadcast, as a copy engine signals its sleeping threads) and starts
 * on the pieces at once; a helper takes pieces from when it runs.  So the
 * time is the best a copy can do that finds no thread polling: the
 * wake-up's cost to the driver, and the helpers' late start, are in it. */
static double
time_asleep_way(ect_bench_ceiling_t *c, const struct way *w, const ect_copy_op_t *ops, size_t n_ops,
                size_t total)
{
    /* Untimed: every helper back on cv since the last job, for at least
     * ECT_BENCH_ASLEEP_MIN_NS. */
    pthread_mutex_lock(&c->lock);
    while (c->sleeping != c->n_helpers) {
        pthread_mutex_unlock(&c->lock);
        sched_yield();
        pthread_mutex_lock(&c->lock);
    }
    uint64_t slept_ns = ect__now_ns() - c->slept_at_ns;
    pthread_mutex_unlock(&c->lock);
    if (slept_ns < ECT_BENCH_ASLEEP_MIN_NS) {
        uint64_t left = ECT_BENCH_ASLEEP_MIN_NS - slept_ns;
        nanosleep(&(struct timespec){.tv_sec = 0, .tv_nsec = (long)left}, NULL);
    }
    size_t piece = piece_bytes(total, c->threads);
    size_t n_pieces = (total + piece - 1) / piece;
    for (unsigned h = 1; h < c->threads; h++)
        c->first_piece_ns[h] = 0;
    uint64_t t0 = ect__now_ns();
    pthread_mutex_lock(&c->lock);
    c->woke_at_ns = t0;
    c->ops = ops;
    c->n_ops = n_ops;
    c->total = total;
    c->n_pieces = n_pieces;
    c->kernel = w->kernel;
    c->asleep_job = 1;
    c->pieces_job = 1;
    c->joined = 0;
    __atomic_store_n(&c->left, 0, __ATOMIC_RELAXED);
    c->job++;
    __atomic_store_n(&c->next_piece, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->done, 0, __ATOMIC_RELAXED);
    c->armed = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->lock);
    copy_pieces(c, 0, ops, n_ops, total, n_pieces, w->kernel, t0);
    while (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE) != n_pieces)
        __builtin_ia32_pause();
    double s = (double)(ect__now_ns() - t0) / 1e9;
    pthread_mutex_lock(&c->lock);
    c->armed = 0;
    c->asleep_job = 0;
    c->pieces_job = 0;
    unsigned joined = c->joined;
    pthread_mutex_unlock(&c->lock);
    while (__atomic_load_n(&c->left, __ATOMIC_ACQUIRE) != joined)
        __builtin_ia32_pause();
    /* Every piece is done, so every helper that took one has noted when. */
    for (unsigned h = 1; h < c->threads; h++) {
        if (c->first_piece_ns[h] == 0)
            continue;
        if (c->n_starts == c->cap_starts) {
            size_t cap = c->cap_starts ? c->cap_starts * 2 : 256;
            double *v = realloc(c->starts, cap * sizeof(*v));
            if (v == NULL)
                break; /* a figure short of samples, not a failure */
            c->starts = v;
            c->cap_starts = cap;
        }
        c->starts[c->n_starts++] = (double)c->first_piece_ns[h] / 1e3;
    }
    return s;
}

static double
time_way(ect_bench_ceiling_t *c, const struct way *w, const ect_copy_op_t *ops, size_t n_ops,
         size_t total)
{
    if (w->threads == 1) {
        uint64_t t0 = ect__now_ns();
        copy_share(ops, n_ops, 0, total, w->kernel);
        return (double)(ect__now_ns() - t0) / 1e9;
    }
    if (w->asleep)
        return time_asleep_way(c, w, ops, n_ops, total);
    size_t piece = piece_bytes(total, c->threads);
    size_t n_pieces = (total + piece - 1) / piece;
    pthread_mutex_lock(&c->lock);
    c->ops = ops;
    c->n_ops = n_ops;
    c->total = total;
    c->kernel = w->kernel;
    c->pieces_job = w->pieces;
    c->n_pieces = n_pieces;
    c->joined = 0;
    __atomic_store_n(&c->left, 0, __ATOMIC_RELAXED);
    c->job++;
    unsigned job = c->job;
    __atomic_store_n(&c->ready, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&c->next_piece, 0, __ATOMIC_RELAXED);
    c->armed = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->lock);
    /* Untimed: every helper awake and spinning on go. */
    while (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) != c->n_helpers)
        __builtin_ia32_pause();
    size_t lo, hi;
    share_bounds(total, 0, c->threads, &lo, &hi);
    uint64_t t0 = ect__now_ns();
    __atomic_store_n(&c->go, job, __ATOMIC_RELEASE);
    if (w->pieces)
        copy_pieces(c, 0, ops, n_ops, total, n_pieces, w->kernel, 0);
    else
        copy_share(ops, n_ops, lo, hi, w->kernel);
    unsigned want = w->pieces ? (unsigned)n_pieces : c->n_helpers;
    while (__atomic_load_n(&c->done, __ATOMIC_ACQUIRE) != want)
        __builtin_ia32_pause();
    double s = (double)(ect__now_ns() - t0) / 1e9;
    pthread_mutex_lock(&c->lock);
    c->armed = 0;
    c->pieces_job = 0;
    pthread_mutex_unlock(&c->lock);
    /* Untimed: every helper out of the job (all of them took it). */
    while (__atomic_load_n(&c->left, __ATOMIC_ACQUIRE) != c->n_helpers)
        __builtin_ia32_pause();
    return s;
}

ect_bench_ceiling_t *
ect_bench_ceiling_create(unsigned threads)
{
    ect_bench_ceiling_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        fprintf(stderr, "bench: out of memory for the copy ceiling\n");
        return NULL;
    }
    c->threads = threads > 0 ? threads : 1;
    static const char *const kernel_names[] = {"memcpy", "NT stores", "rep movsb"};
    const int have[] = {1, ect__copy_nt_available(), ect__copy_movsb_available()};
    /* 0: one thread; 1: an equal share a thread; 2: pieces as they come. */
    for (unsigned split = 0; split <= (c->threads > 1 ? 2u : 0u); split++) {
        for (enum way_kernel k = WAY_MEMCPY; k <= WAY_MOVSB; k++) {
            if (!have[k])
                continue;
            struct way *w = &c->ways[c->n_ways++];
            w->kernel = k;
            w->threads = split > 0 ? c->threads : 1;
            w->pieces = split == 2;
            snprintf(w->name, sizeof(w->name), "%s, %u thread%s%s", kernel_names[k], w->threads,
                     w->threads == 1 ? "" : "s", w->pieces ? " in pieces" : "");
        }
    }
    char on[32] = "1 thread";
    if (c->threads > 1)
        snprintf(on, sizeof(on), "1 and %u threads", c->threads);
    snprintf(c->describe, sizeof(c->describe),
             "the best of memcpy%s%s on %s%s, each thread's pages prefetched first as the "
             "engine's are%s: the same bytes between the same buffers, in the same cache state",
             ect__copy_nt_available() ? ", non-temporal stores" : "",
             ect__copy_movsb_available() ? ", rep movsb" : "", on,
             c->threads > 1 ? " (helpers already spinning when the clock starts)" : "",
             c->threads > 1 ? ", in equal shares or in pieces taken as they come" : "");
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->helpers = calloc(c->threads, sizeof(*c->helpers));
    c->first_piece_ns = calloc(c->threads, sizeof(*c->first_piece_ns));
    if (c->helpers == NULL || c->first_piece_ns == NULL) {
        fprintf(stderr, "bench: out of memory for the copy ceiling\n");
        ect_bench_ceiling_destroy(c);
        return NULL;
    }
    for (unsigned i = 1; i < c->threads; i++) {
        struct helper_arg *a = malloc(sizeof(*a));
        if (a == NULL || (a->c = c, a->index = i,
                          pthread_create(&c->helpers[c->n_helpers], NULL, helper_main, a) != 0)) {
            free(a);
            fprintf(stderr, "bench: cannot start the ceiling's copy threads\n");
            ect_bench_ceiling_destroy(c);
            return NULL;
        }
        c->n_helpers++;
    }
    return c;
}

void
ect_bench_ceiling_destroy(ect_bench_ceiling_t *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->lock);
    for (unsigned i = 0; i < c->n_helpers; i++)
        pthread_join(c->helpers[i], NULL);
    free(c->helpers);
    free(c->first_piece_ns);
    free(c->starts);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->lock);
    for (unsigned w = 0; w < ECT_BENCH_MAX_WAYS; w++)
        free(c->t[w]);
    free(c);
}

void
ect_bench_ceiling_reset(ect_bench_ceiling_t *c)
{
    c->n = 0;
    c->n_starts = 0;
}

double
ect_bench_ceiling_helper_start_us(ect_bench_ceiling_t *c, size_t *n_p, double *mean_p)
{
    *n_p = c->n_starts;
    *mean_p = -1;
    if (c->n_starts == 0)
        return -1;
    double sum = 0;
    for (size_t i = 0; i < c->n_starts; i++)
        sum += c->starts[i];
    *mean_p = sum / (double)c->n_starts;
    /* A copy: the median sorts, and the samples stay in their order. */
    double *v = malloc(c->n_starts * sizeof(*v));
    if (v == NULL)
        return -1;
    memcpy(v, c->starts, c->n_starts * sizeof(*v));
    double m = ect_bench_median(v, c->n_starts);
    free(v);
    return m;
}

int
ect_bench_ceiling_sample(ect_bench_ceiling_t *c, const ect_copy_op_t *ops, size_t n_ops,
                         void (*prepare)(void *arg), void *arg)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        for (unsigned w = 0; w < c->n_ways; w++) {
            double *t = realloc(c->t[w], cap * sizeof(*t));
            if (t == NULL) {
                fprintf(stderr, "bench: out of memory for ceiling samples\n");
                return -1;
            }
            c->t[w] = t;
        }
        c->cap = cap;
    }
    size_t total = 0;
    for (size_t i = 0; i < n_ops; i++)
        total += ops[i].len;
    for (unsigned k = 0; k < c->n_ways; k++) {
        unsigned w = (k + c->rotate) % c->n_ways;
        if (prepare != NULL)
            prepare(arg);
        c->t[w][c->n] = time_way(c, &c->ways[w], ops, n_ops, total);
    }
    c->rotate++;
    c->n++;
    return 0;
}

/* The best of the median times of the ways with sleeping helpers or one
 * thread (asleep 1), or of the others (asleep 0); *way_p gets its index. */
static double
best_of(ect_bench_ceiling_t *c, double bytes, int asleep, unsigned *way_p)
{
    double best = 0;
    unsigned best_way = 0;
    for (unsigned w = 0; w < c->n_ways && c->n > 0; w++) {
        const struct way *x = &c->ways[w];
        if (asleep ? !(x->asleep || x->threads == 1) : x->asleep)
            continue;
        double med = ect_bench_median(c->t[w], c->n);
        double gbps = med > 0 ? bytes / med / 1e9 : 0;
        if (gbps > best) {
            best = gbps;
            best_way = w;
        }
    }
    *way_p = best_way;
    return best;
}

double
ect_bench_ceiling_gbps(ect_bench_ceiling_t *c, double bytes, const char **way_p)
{
    double best = best_of(c, bytes, 0, &c->best);
    if (way_p != NULL)
        *way_p = c->ways[c->best].name;
    return best;
}

double
ect_bench_ceiling_asleep_gbps(ect_bench_ceiling_t *c, double bytes, const char **way_p)
{
    double best = best_of(c, bytes, 1, &c->best_asleep);
    if (way_p != NULL)
        *way_p = c->ways[c->best_asleep].name;
    return best;
}

void
ect_bench_ceiling_add_asleep(ect_bench_ceiling_t *c)
{
    if (c->threads == 1 || c->cap > 0) /* sampled already: the ways have their arrays */
        return;
    unsigned n = c->n_ways;
    for (unsigned w = 0; w < n; w++) {
        if (c->ways[w].threads == 1 || c->ways[w].asleep || c->ways[w].pieces ||
            c->n_ways == ECT_BENCH_MAX_WAYS)
            continue;
        struct way *x = &c->ways[c->n_ways++];
        *x = c->ways[w];
        x->asleep = 1;
        snprintf(x->name, sizeof(x->name), "%s, helpers woken", c->ways[w].name);
    }
    size_t len = strlen(c->describe);
    snprintf(c->describe + len, sizeof(c->describe) - len,
             ";\n    and with no thread polling: the best of 1 thread and %u threads whose helpers "
             "have slept %g ms or more when the clock starts, woken by the copying thread, each "
             "taking pieces (%d a thread, at least %zu KiB) as it comes",
             c->threads, (double)ECT_BENCH_ASLEEP_MIN_NS / 1e6, PIECES_PER_THREAD,
             MIN_PIECE_BYTES >> 10);
}

/* Copy the ops once with way w; returns seconds. */
static double
copy_once(ect_bench_ceiling_t *c, unsigned w, const ect_copy_op_t *ops, size_t n_ops)
{
    size_t total = 0;
    for (size_t i = 0; i < n_ops; i++)
        total += ops[i].len;
    return time_way(c, &c->ways[w], ops, n_ops, total);
}

double
ect_bench_ceiling_copy_best(ect_bench_ceiling_t *c, const ect_copy_op_t *ops, size_t n_ops)
{
    return copy_once(c, c->best, ops, n_ops);
}

double
ect_bench_ceiling_copy_asleep_best(ect_bench_ceiling_t *c, const ect_copy_op_t *ops, size_t n_ops)
{
    return copy_once(c, c->best_asleep, ops, n_ops);
}

const char *
ect_bench_ceiling_describe(const ect_bench_ceiling_t *c)
{
    return c->describe;
}
