/*
 * `ectier bench cache`: the embedding cache's two figures (SPEC §12, §5).
 *
 * 1. Call rate at 1 thousand and at 1 million entries.  A full cache of N
 *    ready entries, brought to its steady state by N untimed requests,
 *    serves requests, each making the engine's calls for one
 *    load of an existing key (find, pin, get_runs, unpin) and one save and
 *    announcement of a new key (find, alloc evicting the oldest, get_runs,
 *    mark_ready, hold, a later release_hold or lapse, expire_holds), after
 *    a prefetch of both keys (the scheduler's, when the engine first asks
 *    about the request: the two lookups then wait for memory together).  The
 *    existing key is drawn uniformly over all N (every load touches memory
 *    no other recent call touched) or by a Zipf(0.99) rank of recency (the
 *    YCSB default skew: recent items are asked for most).  Keys are 64 hex
 *    characters, like an mm_hash.  The ceiling of the large case is the
 *    small case's rate in the same run; target >= 0.7 (flat cost).  A
 *    thousand entries fit in the L2 cache and a million do not, so the
 *    output also prints the measured price of one cache miss at both sizes,
 *    and a per-call breakdown (for each key distribution, each call timed
 *    in a separate pass): what each call adds at a million entries, in
 *    misses, next to the room the target leaves a request and the lines a
 *    uniformly drawn load must read at the least.
 *
 * 2. Fragmentation.  A region of 1 Mi blocks takes 1 million random
 *    operations with entry sizes uniform in 64..4096 blocks (images of
 *    different sizes): each allocation first frees random entries until it
 *    fits under 90 % occupancy, so space is freed in random order, the worst
 *    case for holes.  The distribution of runs per allocation is printed
 *    with its median (target <= 2); the row's ratio is the share of
 *    allocations in at most 2 runs (>= 0.5 is the same target).  A second
 *    pass uses FIFO eviction at full occupancy, the cache's own pattern.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ectier/cache.h>

#include "bench.h"

#define KEY_LEN 64

static uint64_t
rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Key i into buf: 64 hex digits from a mix of i, like an mm_hash.  Built
 * on the fly (about 20 ns, the same at every size): a real caller holds its
 * key in a hot buffer, so a pre-built table of keys would add cache misses
 * that belong to the benchmark, not to the cache. */
static const char *
key_of(uint64_t i, char buf[KEY_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t s = i * 0x9e3779b97f4a7c15ull + 1;
    for (int w = 0; w < KEY_LEN / 16; w++) {
        uint64_t v = rng_next(&s);
        for (int d = 0; d < 16; d++)
            buf[w * 16 + d] = hex[(v >> (4 * d)) & 15];
    }
    buf[KEY_LEN] = '\0';
    return buf;
}

/* Zipf(theta) ranks in [0, n), by the method of Gray et al. ("Quickly
 * generating billion-record synthetic databases", 1994) that YCSB uses. */
struct zipf {
    double n, theta, alpha, zetan, eta;
};

static void
zipf_init(struct zipf *z, size_t n, double theta)
{
    double zetan = 0;
    for (size_t i = 1; i <= n; i++)
        zetan += 1.0 / pow((double)i, theta);
    double zeta2 = 1.0 + 1.0 / pow(2.0, theta);
    z->n = (double)n;
    z->theta = theta;
    z->alpha = 1.0 / (1.0 - theta);
    z->zetan = zetan;
    z->eta = (1.0 - pow(2.0 / (double)n, 1.0 - theta)) / (1.0 - zeta2 / zetan);
}

static uint64_t
zipf_next(const struct zipf *z, uint64_t *rs)
{
    double u = (double)(rng_next(rs) >> 11) / 9007199254740992.0;
    double uz = u * z->zetan;
    if (uz < 1.0)
        return 0;
    if (uz < 1.0 + pow(0.5, z->theta))
        return 1;
    uint64_t r = (uint64_t)(z->n * pow(z->eta * u - z->eta + 1.0, z->alpha));
    return r < (uint64_t)z->n ? r : (uint64_t)z->n - 1;
}

#define HOLD_RING      8 /* a hold is released by the read 8 requests later */
#define WARM_UP_ROUNDS 1 /* untimed requests before the clock, per entry */

/* The calls of one request, for the per-call breakdown. */
enum call {
    CALL_PREFETCH,
    CALL_FIND_HIT,
    CALL_PIN,
    CALL_GET_RUNS,
    CALL_UNPIN,
    CALL_FIND_ABSENT,
    CALL_ALLOC,
    CALL_GET_RUNS_NEW,
    CALL_MARK_READY,
    CALL_RELEASE_HOLD,
    CALL_HOLD,
    CALL_EXPIRE_HOLDS,
    N_CALLS
};
static const char *const CALL_NAMES[N_CALLS] = {
    "prefetch (2 keys)", "find (hit)",     "pin",        "get_runs",     "unpin", "find (absent)",
    "alloc (evicts)",    "get_runs (new)", "mark_ready", "release_hold", "hold",  "expire_holds"};

/* Per-call time: total ns and count of each call (NULL: not timed). */
struct call_times {
    double ns[N_CALLS];
    uint64_t n[N_CALLS];
    double timer_ns; /* what one empty timing costs, taken off each call */
};

/* Evaluate the cache call expr into s, timed as call `which` when t is set. */
#define CALL(t, which, s, expr)                                                                    \
    do {                                                                                           \
        double t0_ = (t) != NULL ? now_s() : 0;                                                    \
        (s) = (expr);                                                                              \
        if ((t) != NULL) {                                                                         \
            (t)->ns[which] += (now_s() - t0_) * 1e9 - (t)->timer_ns;                               \
            (t)->n[which]++;                                                                       \
        }                                                                                          \
    } while (0)

/* The request's two keys announced to the cache, as the scheduler does for
 * a request's media items when the engine first asks about the request
 * (ensure_cache_available), before it looks any of them up. */
static ect_status_t
prefetch_two(ect_cache_t *c, const char *a, const char *b)
{
    ect_cache_prefetch(c, a);
    ect_cache_prefetch(c, b);
    return ECT_OK;
}

/* The engine's calls for n_requests requests on a full cache of n_entries
 * ready entries, each request being a prefetch of its two keys (one call
 * each) and one of each:
 *   load:  find (has_cache_item), pin, get_runs, unpin: an existing key,
 *          chosen uniformly or by Zipf rank of recency (zipf != NULL);
 *   save:  find (absent), alloc (evicts the oldest), get_runs, mark_ready,
 *          hold (the announcement); the hold is released by the consumer's
 *          read HOLD_RING requests later, except one in four that nobody
 *          reads and that lapses (expire_holds runs once per request).
 * Before the clock starts, WARM_UP_ROUNDS x n_entries requests bring the
 * cache to its steady state: every entry then was saved by a request, and
 * the FIFO neighbours of an entry (which pin and unpin relink) are no longer
 * its neighbours in memory, as they are right after the fill.
 * times != NULL times every call after the warm-up (the rate then includes
 * the timing).  Returns cache calls per second, or a negative value on a
 * wrong status. */
static double
ops_rate(size_t n_entries, size_t n_requests, const struct zipf *zipf, struct call_times *times)
{
    const uint64_t blocks_per_entry = 4;
    double rate = -1;
    char k[KEY_LEN + 1], kl[KEY_LEN + 1]; /* the new key, the loaded one */
    ect_cache_t *c = NULL;
    if (ect_cache_create(n_entries * blocks_per_entry, &c) != ECT_OK)
        return -1;
    for (size_t i = 0; i < n_entries; i++) {
        if (ect_cache_alloc(c, key_of(i, k), blocks_per_entry) != ECT_OK ||
            ect_cache_mark_ready(c, k) != ECT_OK)
            goto destroy;
    }
    uint64_t rs = 0x2545f4914f6cdd1dull, ops = 0, holds[HOLD_RING] = {0};
    ect_cache_entry_t info;
    ect_run_t runs[8];
    size_t n_runs;
    ect_status_t s;
    double t0 = 0;
    for (size_t i = 0; i < n_entries * WARM_UP_ROUNDS + n_requests; i++) {
        if (i == n_entries * WARM_UP_ROUNDS) {
            ops = 0;
            t0 = now_s();
        }
        struct call_times *tt = i >= n_entries * WARM_UP_ROUNDS ? times : NULL;
        size_t next = n_entries + i;
        /* Load.  Loads move entries to the FIFO tail, so now and then the
         * chosen key has just been evicted: then it is a miss (1 call). */
        uint64_t back = zipf != NULL ? zipf_next(zipf, &rs) : rng_next(&rs) % n_entries;
        key_of(next - 1 - back, kl);
        key_of(next, k);
        CALL(tt, CALL_PREFETCH, s, prefetch_two(c, kl, k));
        bool found = false;
        CALL(tt, CALL_FIND_HIT, s, ect_cache_find(c, kl, &info, &found));
        ops += 3; /* the two prefetches and the find */
        if (s != ECT_OK)
            goto destroy;
        if (found) {
            CALL(tt, CALL_PIN, s, ect_cache_pin(c, kl));
            if (s != ECT_OK)
                goto destroy;
            CALL(tt, CALL_GET_RUNS, s, ect_cache_get_runs(c, kl, runs, 8, &n_runs));
            if (s != ECT_OK)
                goto destroy;
            CALL(tt, CALL_UNPIN, s, ect_cache_unpin(c, kl));
            if (s != ECT_OK)
                goto destroy;
            ops += 3;
        }
        /* Save and announce. */
        CALL(tt, CALL_FIND_ABSENT, s, ect_cache_find(c, k, &info, &found));
        if (s != ECT_OK || found)
            goto destroy;
        CALL(tt, CALL_ALLOC, s, ect_cache_alloc(c, k, blocks_per_entry));
        if (s != ECT_OK)
            goto destroy;
        CALL(tt, CALL_GET_RUNS_NEW, s, ect_cache_get_runs(c, k, runs, 8, &n_runs));
        if (s != ECT_OK)
            goto destroy;
        CALL(tt, CALL_MARK_READY, s, ect_cache_mark_ready(c, k));
        if (s != ECT_OK)
            goto destroy;
        uint64_t *slot = &holds[i % HOLD_RING];
        if (*slot != 0) {
            /* NOT_FOUND if it lapsed */
            CALL(tt, CALL_RELEASE_HOLD, s, ect_cache_release_hold(c, *slot));
            if (s != ECT_OK && s != ECT_ERR_NOT_FOUND)
                goto destroy;
            ops++;
        }
        CALL(tt, CALL_HOLD, s, ect_cache_hold(c, k, i + 2 * HOLD_RING, slot));
        if (s != ECT_OK)
            goto destroy;
        if (i % 4 == 0)
            *slot = 0; /* never read: it lapses */
        CALL(tt, CALL_EXPIRE_HOLDS, s, ect_cache_expire_holds(c, i, NULL));
        if (s != ECT_OK)
            goto destroy;
        ops += 6;
    }
    rate = (double)ops / (now_s() - t0);
destroy:
    if (rate < 0)
        fprintf(stderr, "bench cache: unexpected status: %s\n", ect_last_error());
    ect_cache_destroy(c);
    return rate;
}

/* Nanoseconds per dependent random load over bytes of memory: the price of
 * a cache miss at that working-set size, for reading the figures above. */
static double
load_latency_ns(size_t bytes)
{
    size_t n = bytes / 64;
    uint64_t *a = malloc(n * 64);
    if (a == NULL)
        return 0;
    /* One random cycle through all lines (Sattolo's shuffle). */
    for (size_t i = 0; i < n; i++)
        a[i * 8] = i;
    uint64_t rs = 0x9e3779b97f4a7c15ull;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = rng_next(&rs) % i;
        uint64_t t = a[i * 8];
        a[i * 8] = a[j * 8];
        a[j * 8] = t;
    }
    const size_t loads = 2000000;
    uint64_t p = 0;
    double t0 = now_s();
    for (size_t i = 0; i < loads; i++)
        p = a[p * 8];
    double ns = (now_s() - t0) / (double)loads * 1e9;
    free(a);
    return p < n ? ns : 0;
}

#define MAX_RUNS_TRACKED 64

struct frag_result {
    uint64_t allocs;
    uint64_t by_runs[MAX_RUNS_TRACKED + 1]; /* [k] allocations of k runs; last: more */
    ect_cache_stats_t end;
};

/* One fragmentation pass; fifo selects FIFO eviction at full occupancy
 * instead of random discards at 90 %.  Returns 0 or -1. */
static int
fragment(int fifo, uint64_t num_blocks, size_t n_ops, struct frag_result *res)
{
    enum { MAX_LIVE = 8192 };
    static uint64_t live[MAX_LIVE]; /* key numbers of live entries (random-discard pass) */
    size_t n_live = 0;
    uint64_t next_key = 0, rs = 0x853c49e6748fea9bull, used = 0;
    char key[32];
    ect_cache_t *c = NULL;
    memset(res, 0, sizeof(*res));
    if (ect_cache_create(num_blocks, &c) != ECT_OK)
        return -1;
    for (size_t op = 0; op < n_ops; op++) {
        uint64_t n = 64 + rng_next(&rs) % (4096 - 64 + 1);
        /* Random pass: free random entries until this one fits under 90 %
         * (each free counts as an operation), so sizes stay unbiased. */
        while (!fifo && used + n > num_blocks * 9 / 10 && n_live > 0 && op < n_ops) {
            size_t i = rng_next(&rs) % n_live;
            snprintf(key, sizeof(key), "e%llu", (unsigned long long)live[i]);
            ect_cache_entry_t info;
            if (ect_cache_get(c, key, &info) != ECT_OK || ect_cache_discard(c, key) != ECT_OK)
                goto fail;
            used -= info.n_blocks;
            live[i] = live[--n_live];
            op++;
        }
        snprintf(key, sizeof(key), "e%llu", (unsigned long long)next_key);
        if (ect_cache_alloc(c, key, n) != ECT_OK)
            goto fail;
        ect_cache_entry_t info;
        if (ect_cache_get(c, key, &info) != ECT_OK)
            goto fail;
        res->allocs++;
        res->by_runs[info.n_runs < MAX_RUNS_TRACKED ? info.n_runs : MAX_RUNS_TRACKED]++;
        if (fifo) {
            if (ect_cache_mark_ready(c, key) != ECT_OK)
                goto fail;
        } else {
            if (n_live == MAX_LIVE)
                goto fail;
            live[n_live++] = next_key;
            used += n;
        }
        next_key++;
    }
    if (ect_cache_stats(c, &res->end) != ECT_OK)
        goto fail;
    ect_cache_destroy(c);
    return 0;
fail:
    fprintf(stderr, "bench cache: fragmentation pass failed: %s\n", ect_last_error());
    ect_cache_destroy(c);
    return -1;
}

static void
print_fragmentation(const char *what, const struct frag_result *r)
{
    uint64_t half = (r->allocs + 1) / 2, seen = 0, median = 0, le2 = r->by_runs[1] + r->by_runs[2];
    for (int k = 1; k <= MAX_RUNS_TRACKED; k++) {
        seen += r->by_runs[k];
        if (seen >= half) {
            median = (uint64_t)k;
            break;
        }
    }
    printf("  %s: %llu allocations, runs per allocation:\n", what, (unsigned long long)r->allocs);
    /* The same buckets as the cache's runs histogram. */
    static const struct {
        int lo, hi;
        const char *label;
    } buckets[] = {{1, 1, "1"},
                   {2, 2, "2"},
                   {3, 3, "3"},
                   {4, 4, "4"},
                   {5, 8, "5-8"},
                   {9, 16, "9-16"},
                   {17, MAX_RUNS_TRACKED, ">16"}};
    for (size_t b = 0; b < sizeof(buckets) / sizeof(buckets[0]); b++) {
        uint64_t n = 0;
        for (int k = buckets[b].lo; k <= buckets[b].hi; k++)
            n += r->by_runs[k];
        printf("    %-5s %10llu  %6.2f %%   (live at end: %llu)\n", buckets[b].label,
               (unsigned long long)n, 100.0 * (double)n / (double)r->allocs,
               (unsigned long long)r->end.runs_histogram[b]);
    }
    printf("    median %llu runs; end: %llu entries, %.1f %% used, %llu free runs\n",
           (unsigned long long)median, (unsigned long long)r->end.entries,
           100.0 * (double)r->end.used_blocks / (double)r->end.num_blocks,
           (unsigned long long)r->end.free_runs);
    char row[96];
    snprintf(row, sizeof(row), "%s: share in <= 2 runs", what);
    ect_bench_fig_t fig = {.name = row,
                           .value = (double)le2 / (double)r->allocs,
                           .unit = "share",
                           .ceiling = 1.0,
                           .ceiling_is = "every allocation in <= 2 runs",
                           .target = 0.5};
    ect_bench_figure(&fig);
}

/* Best of three runs each, small and large alternating, so a neighbour's
 * burst of CPU use on a shared machine does not decide the ratio. */
static int
rates(const char *what, const struct zipf *z_small, const struct zipf *z_large)
{
    const size_t requests = 200000;
    double small = 0, large = 0;
    for (int rep = 0; rep < 3; rep++) {
        double s = ops_rate(1000, requests, z_small, NULL);
        double l = ops_rate(1000000, requests, z_large, NULL);
        if (s < 0 || l < 0)
            return -1;
        small = s > small ? s : small;
        large = l > large ? l : large;
    }
    printf("  %s keys: %.3f Mop/s at 1 thousand entries, %.3f Mop/s at 1 million\n", what,
           small / 1e6, large / 1e6);
    char row[96];
    snprintf(row, sizeof(row), "cache ops, 1M entries, %s keys (ceiling: 1K)", what);
    ect_bench_fig_t fig = {.name = row,
                           .value = large / 1e6,
                           .unit = "Mop/s",
                           .ceiling = small / 1e6,
                           .ceiling_is = "the 1K-entry rate in this run",
                           .target = 0.7};
    ect_bench_figure(&fig);
    return 0;
}

/* Where a request's time goes at both sizes, keys drawn as rates() draws
 * them (uniformly, or by Zipf rank with z_small / z_large), in DRAM
 * misses, and the room the target leaves: at 0.7 of the 1K rate a request
 * at 1M may take (1/0.7 - 1) x its 1K time longer, while loading a
 * uniformly drawn key reads at least one line (its state) that no recent
 * request touched, with any index. */
static int
breakdown(double miss_ns, const char *what, const struct zipf *z_small, const struct zipf *z_large)
{
    const size_t requests = 200000;
    static struct call_times t[2];
    const size_t sizes[2] = {1000, 1000000};
    double per_req[2], ops_per_req = 0;
    for (int i = 0; i < 2; i++) {
        memset(&t[i], 0, sizeof(t[i]));
        double t0 = now_s();
        for (int j = 0; j < 1000; j++)
            (void)now_s();
        t[i].timer_ns = (now_s() - t0) / 1000 * 1e9;
        if (ops_rate(sizes[i], requests, i == 0 ? z_small : z_large, &t[i]) < 0)
            return -1;
        per_req[i] = 0;
        for (int c = 0; c < N_CALLS; c++)
            per_req[i] += t[i].ns[c] / (double)requests;
    }
    for (int c = 0; c < N_CALLS; c++) /* a prefetch timing covers two calls */
        ops_per_req += (c == CALL_PREFETCH ? 2.0 : 1.0) * (double)t[1].n[c] / (double)requests;
    printf("  per call, %s keys (mean ns, timer taken off; misses = extra / %.0f ns):\n"
           "    %-16s %9s %8s %8s %7s %7s\n",
           what, miss_ns, "call", "calls/req", "1K ns", "1M ns", "extra", "misses");
    for (int c = 0; c < N_CALLS; c++) {
        if (t[0].n[c] == 0 || t[1].n[c] == 0)
            continue;
        double a = t[0].ns[c] / (double)t[0].n[c], b = t[1].ns[c] / (double)t[1].n[c];
        printf("    %-16s %9.2f %8.0f %8.0f %+7.0f %7.2f\n", CALL_NAMES[c],
               (double)t[1].n[c] / (double)requests, a, b, b - a, (b - a) / miss_ns);
    }
    double extra = per_req[1] - per_req[0], room = (1 / 0.7 - 1) * per_req[0];
    printf("    a request (%.1f calls): %.0f ns at 1K, %.0f ns at 1M: %+.0f ns, %.1f misses\n",
           ops_per_req, per_req[0], per_req[1], extra, extra / miss_ns);
    printf("  room at the 0.7 target: %+.0f ns a request, %.2f misses", room, room / miss_ns);
    if (z_large == NULL)
        printf("; a uniformly drawn key's load reads lines no recent call touched: with this "
               "index its bucket's pointer line and its entry (%.0f ns from memory), with any "
               "index at least the line that holds its state (%.0f ns)",
               2 * miss_ns, miss_ns);
    printf("\n");
    return 0;
}

int
ect_bench_cache(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    static struct zipf z_small, z_large;
    zipf_init(&z_small, 1000, 0.99);
    zipf_init(&z_large, 1000000, 0.99);
    if (rates("uniform", NULL, NULL) != 0 || rates("Zipf 0.99", &z_small, &z_large) != 0)
        return 1;
    double miss_ns = load_latency_ns((size_t)256 << 20);
    printf("  memory: a random dependent load costs %.0f ns over 256 KiB (a 1K-entry cache) "
           "and %.0f ns over 256 MiB (1M entries)\n",
           load_latency_ns((size_t)256 << 10), miss_ns);
    if (miss_ns > 0 && (breakdown(miss_ns, "uniform", NULL, NULL) != 0 ||
                        breakdown(miss_ns, "Zipf 0.99", &z_small, &z_large) != 0))
        return 1;

    struct frag_result r;
    if (fragment(0, 1u << 20, 1000000, &r) != 0)
        return 1;
    print_fragmentation("random frees at 90 %", &r);
    if (fragment(1, 1u << 20, 1000000, &r) != 0)
        return 1;
    print_fragmentation("FIFO eviction at 100 %", &r);
    return 0;
}
