/*
 * `ectier bench xport`'s consumer process (bench_xport_consumer.h): its
 * reads, their cold and warm states, and their ceilings.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "../bench.h"
#include "bench_xport_consumer.h"
#include "cli_io.h"
#include "common/clock.h"
#include "p2p/xport_internal.h"

/* ---- consumer ---------------------------------------------------------------------- */

static int
check_landed(ect_region_t *region, const struct shape *s)
{
    uint64_t k = 0;
    for (size_t j = 0; j < s->n_local; j++)
        for (uint64_t b = 0; b < s->local[j].count; b++, k++) {
            const uint8_t *p = ect_region_block_ptr(region, s->local[j].first + b);
            for (uint64_t w = 0; w < BLOCK / 8; w++) {
                uint64_t v = ect_bench_xport_pattern(s->remote[k], w), got;
                memcpy(&got, p + 8 * w, 8);
                if (got != v) {
                    fprintf(stderr, "bench xport: local block %llu does not hold remote %llu\n",
                            (unsigned long long)(s->local[j].first + b),
                            (unsigned long long)s->remote[k]);
                    return 1;
                }
            }
        }
    return 0;
}

/* The consumer's eventfd the transport's settled callback writes, and when
 * it last came (for the hand-off's cost). */
static int settled_fd = -1;
static uint64_t settled_at_ns; /* atomic */

/* How long the waiting thread sleeps between polls when no read settles:
 * a same-host read's copy threads are polled every millisecond; tcp reads
 * always call back, so the thread sleeps as long as the consumer's session
 * thread does (p2p/consumer.c: IDLE_POLL_MS), and does not take the lock
 * that the receiving thread wants every millisecond. */
static int wait_tick_ms = 1;

/* The reads timed_reads has in flight, shared with the settled callback as
 * a consumer shares its transfer table (p2p/consumer.c: read_settled):
 * under `lock`, which the callback only tries, so the clients are used by
 * one thread at a time. */
static struct {
    pthread_mutex_t lock;
    ect_xport_client_t *const *c;
    ect_xport_read_t *const *r;
    ect_xport_read_state_t *st;
    size_t n, pending;
    uint64_t done_ns; /* when the callback saw the last read DONE; 0: it did not */
} inflight = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Poll the reads still PENDING; how many still are. */
static size_t
inflight_poll_locked(void)
{
    for (size_t k = 0; k < inflight.n; k++)
        if (inflight.st[k] == ECT_XPORT_READ_PENDING &&
            (inflight.st[k] = ect__xport_read_poll(inflight.c[k], inflight.r[k])) !=
                ECT_XPORT_READ_PENDING)
            inflight.pending--;
    return inflight.pending;
}

/* As the consumer does: a tcp read is seen DONE on the thread that received
 * its last byte, when the lock is free (the consumer then marks its entry
 * ready there; here the clock stops); a same-host read, or a busy lock, is
 * the waiting thread's, woken. */
static void
read_settled(void *arg, ect_xport_kind_t kind)
{
    __atomic_store_n(&settled_at_ns, ect__now_ns(), __ATOMIC_RELEASE);
    if (kind == ECT_XPORT_TCP && pthread_mutex_trylock(&inflight.lock) == 0) {
        if (inflight.pending > 0 && inflight_poll_locked() == 0)
            inflight.done_ns = ect__now_ns();
        pthread_mutex_unlock(&inflight.lock);
    }
    /* The waiting thread wakes in any case (the bench's loop must go on);
     * the clock has stopped before, where the reads were seen DONE. */
    uint64_t one = 1;
    if (write(*(int *)arg, &one, sizeof(one)) < 0 && errno != EAGAIN)
        fprintf(stderr, "bench xport: wake-up: %s\n", strerror(errno));
}

/* n reads at once, reads[k] of shape s[k] (whose hash names it, with the
 * slot it sits at, for the bench's grant table) with client c[k]: from the
 * first start to the last DONE seen (on the receiving thread, or on this
 * one), in seconds; < 0 on failure.  *parts gets the parts (starting them
 * all; handoff < 0 when no settled callback came; on_rx 1 when the
 * receiving thread saw the last read DONE). */
static double
timed_reads(ect_xport_client_t *const *c, size_t n, const struct producer *p,
            const struct shape *const *s, const uint64_t *slot_blocks, struct read_parts *parts)
{
    char hash[MAX_READERS][64];
    /* Every read its own token, as every real grant has: a read of the
     * same hash right after another must not find that one's stripe group,
     * which lives until its last stripe's sender has finished it. */
    static uint64_t reads_made;
    uint8_t desc[MAX_READERS][ECT_XPORT_DESC_LEN];
    ect_xport_read_t *r[MAX_READERS];
    ect_xport_read_state_t st[MAX_READERS];
    size_t started = 0, pending = n;
    size_t desc_len = 0;
    for (size_t k = 0; k < n && k < MAX_READERS; k++) {
        ect_xport_desc_t d = {.block_size = BLOCK, .num_blocks = REGION_BLOCKS};
        uint64_t token = ++reads_made;
        memcpy(d.token, &token, sizeof(token));
        if (ect__xport_desc_encode(&d, NULL, 0, desc[k], sizeof(desc[k]), &desc_len) != ECT_OK) {
            fprintf(stderr, "bench xport: descriptor: %s\n", ect_last_error());
            return -1;
        }
    }
    int failed = 0;
    pthread_mutex_lock(&inflight.lock);
    uint64_t t0 = ect__now_ns();
    for (; started < n && started < MAX_READERS; started++) {
        const struct shape *sk = s[started];
        snprintf(hash[started], sizeof(hash[started]), "shape-%zu-%u-%llu", sk->mib, sk->frags,
                 (unsigned long long)slot_blocks[started]);
        ect_xport_read_params_t rp = {.host = "127.0.0.1",
                                      .port = 1,
                                      .session_id = "bench",
                                      .mm_hash = hash[started],
                                      .agent_metadata = p->agent,
                                      .agent_len = p->agent_len,
                                      .mem_descriptor = desc[started],
                                      .desc_len = desc_len,
                                      .remote_blocks = sk->remote,
                                      .n_remote = sk->n_blocks,
                                      .local_runs = sk->local,
                                      .n_local_runs = sk->n_local};
        if (ect__xport_read_start(c[started], &rp, &r[started], NULL) != ECT_OK) {
            fprintf(stderr, "bench xport: read: %s\n", ect_last_error());
            failed = 1;
            break;
        }
        st[started] = ECT_XPORT_READ_PENDING;
    }
    parts->start = (double)(ect__now_ns() - t0) / 1e9;
    inflight.c = c;
    inflight.r = r;
    inflight.st = st;
    inflight.n = inflight.pending = pending = started;
    inflight.done_ns = 0;
    /* Wait as a consumer's session thread does: asleep until a read settles
     * (the settled callback may have seen them all DONE by then), or
     * polling every so often while the copy threads work (same host). */
    while (pending > 0) {
        if ((pending = inflight_poll_locked()) == 0)
            break;
        pthread_mutex_unlock(&inflight.lock);
        struct pollfd pfd = {.fd = settled_fd, .events = POLLIN};
        int woken = poll(&pfd, 1, wait_tick_ms);
        uint64_t v;
        if (woken > 0 && read(settled_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            failed = 1;
        pthread_mutex_lock(&inflight.lock);
        pending = inflight.pending;
        if (failed)
            break;
    }
    uint64_t t1 = inflight.done_ns != 0 ? inflight.done_ns : ect__now_ns();
    parts->on_rx = inflight.done_ns != 0;
    inflight.n = inflight.pending = 0;
    uint64_t landed = __atomic_load_n(&settled_at_ns, __ATOMIC_ACQUIRE);
    parts->handoff = landed >= t0 && landed <= t1 ? (double)(t1 - landed) / 1e9 : -1;
    for (size_t k = 0; k < started; k++) {
        failed |= st[k] != ECT_XPORT_READ_DONE;
        ect__xport_read_release(c[k], r[k]);
    }
    pthread_mutex_unlock(&inflight.lock);
    if (failed) {
        fprintf(stderr, "bench xport: a read failed\n");
        return -1;
    }
    return (double)(t1 - t0) / 1e9;
}

/* Blocks a shape spans on either side. */
static uint64_t
shape_span(const struct shape *s)
{
    uint64_t span = 0;
    for (uint64_t k = 0; k < s->n_blocks; k++)
        span = s->remote[k] + 1 > span ? s->remote[k] + 1 : span;
    for (size_t j = 0; j < s->n_local; j++)
        span = s->local[j].first + s->local[j].count > span ? s->local[j].first + s->local[j].count
                                                            : span;
    return span;
}

/* Move the shape by delta blocks on both sides. */
static void
shift_shape(struct shape *s, int64_t delta)
{
    for (uint64_t k = 0; k < s->n_blocks; k++)
        s->remote[k] = (uint64_t)((int64_t)s->remote[k] + delta);
    for (size_t j = 0; j < s->n_local; j++)
        s->local[j].first = (uint64_t)((int64_t)s->local[j].first + delta);
}

/* ---- measuring one shape --------------------------------------------------------------- */

/* The cold state of one slot: its bytes in both regions evicted from the
 * caches.  The producer's are evicted through flush_view, a mapping of its
 * region that nothing copies from: a flush loads the translations of the
 * pages it flushes, and through the ceiling's own view (theirs) it would
 * hand the ceiling's copies warm translations that the read's view (the
 * transport client's own mapping) does not get.  Ours are evicted through
 * mine, which the read and the ceiling both write through. */
struct slot_state {
    ect_region_t *mine;
    const ect_region_t *theirs;
    size_t off, len;
};

static const ect_region_t *flush_view;

static void
make_cold(void *arg)
{
    const struct slot_state *ss = arg;
    ect_bench_cold((const uint8_t *)ect_region_data(flush_view) + ss->off, ss->len);
    ect_bench_cold((uint8_t *)ect_region_data(ss->mine) + ss->off, ss->len);
}

/* A cold read writes blocks whose pages were last written a rotation of the
 * region's slots before, while the ceiling beside it copies right after
 * the read, into the pages the read has just written; on the project's VMs
 * a page left alone costs more to write the longer it was (`ectier bench
 * step`'s machine line: 1 MiB into pages written 0 s / 1.1 s before).  So
 * after a cold figure a paced pass times the ceiling's winning way copying
 * the read's bytes into each slot in turn, the oldest first, each once it
 * is exactly as old as the reads' destinations were (age_ns, their median
 * age) and in the read's cache state (made cold just before): a ceiling
 * that meets the pages as the read does.  Every other copy is by the
 * ceiling's winning way among those that find no thread polling (one
 * thread, or helpers asleep 1 ms or more and woken when the clock starts),
 * which also meets the copy threads as a read does.  written[slot] has when
 * each slot was last written and is kept up to date.  Fills o's GB/s and
 * way; returns 0, or -1 when out of memory (message printed). */
static int
as_old_pages(ect_bench_ceiling_t *ceiling, const struct slot_state *first, uint64_t span,
             uint64_t slots, uint64_t start, uint64_t *written, uint64_t age_ns, double bytes,
             struct as_old *o)
{
    enum { MIN_COPIES = 15 };
    size_t n = slots * 2 < MIN_COPIES ? MIN_COPIES : (size_t)slots * 2;
    double *t = malloc(n * sizeof(*t)), *w = malloc(n * sizeof(*w));
    if (t == NULL || w == NULL) {
        fprintf(stderr, "bench xport: out of memory for the as-old copies\n");
        free(t);
        free(w);
        return -1;
    }
    const char *way;
    (void)ect_bench_ceiling_gbps(ceiling, bytes, NULL);        /* the winners copy_best and ... */
    (void)ect_bench_ceiling_asleep_gbps(ceiling, bytes, &way); /* ... copy_asleep_best use */
    snprintf(o->asleep_way, WAY_LEN, "%s", way);
    size_t nt = 0, nw = 0;
    for (size_t k = 0; k < 2 * n; k++) {
        uint64_t slot = (start + k) % slots;
        struct slot_state ss = *first;
        ss.off = (size_t)(slot * span * BLOCK);
        while (ect__now_ns() < written[slot] + age_ns)
            ;
        make_cold(&ss);
        ect_copy_op_t op = {.dst = (uint8_t *)ect_region_data(ss.mine) + ss.off,
                            .src = (const uint8_t *)ect_region_data(ss.theirs) + ss.off,
                            .len = (size_t)bytes};
        if (k % 2 == 0)
            t[nt++] = ect_bench_ceiling_copy_best(ceiling, &op, 1);
        else
            w[nw++] = ect_bench_ceiling_copy_asleep_best(ceiling, &op, 1);
        written[slot] = ect__now_ns();
    }
    double med = ect_bench_median(t, nt), med_w = ect_bench_median(w, nw);
    o->gbps = med > 0 ? bytes / med / 1e9 : 0;
    o->asleep_gbps = med_w > 0 ? bytes / med_w / 1e9 : 0;
    free(t);
    free(w);
    return 0;
}

/* ect_bench_copy_stats_fn of a transport client's copy engine. */
static int
client_copy_stats(const void *client, struct ect__copy_cpu_stats *st)
{
    return ect__xport_client_copy_stats(client, st) != ECT_OK;
}

/* Before a timed same-host read: an untimed read of the slot before (the
 * same entry when warm), so the client's own state is where a run of reads
 * leaves it rather than where the ceiling's samples (helpers asleep 1 ms
 * or more, several copies of the bytes) leave it, then the client's copy
 * threads asleep for 1 ms or more while this thread spins
 * (ect_bench_rest_copy_threads).  written[] (NULL: untracked) records the
 * slot's new write.  Returns 0, or 1 with a message printed. */
static int
read_before(ect_xport_client_t *client, const struct producer *p, struct shape *s, uint64_t span,
            uint64_t slot, uint64_t slots, uint64_t *written)
{
    uint64_t prev = (slot + slots - 1) % slots, at = prev * span;
    int64_t delta = ((int64_t)prev - (int64_t)slot) * (int64_t)span;
    const struct shape *shapes[1] = {s};
    struct read_parts untimed;
    shift_shape(s, delta);
    double t = timed_reads(&client, 1, p, shapes, &at, &untimed);
    shift_shape(s, -delta);
    if (t < 0)
        return 1;
    if (written != NULL)
        written[prev] = ect__now_ns();
    return ect_bench_rest_copy_threads(client_copy_stats, client, "xport");
}

/* Warm: the same entry into the same blocks every rep (cache-hot for 1
 * and 8 MiB, as ucx_perftest).  Cold: each rep the next slot of the region
 * on both sides, evicted from the caches before the read and before each
 * ceiling rep, as a fresh entry would be.  Same-host, the ceiling (bench.h:
 * the best copy on 1 thread and on as many as copy one batch in the
 * client's engine) copies the same bytes from our read-only view of the
 * producer's region into ours; over tcp, bare (NULL same-host) moves them
 * over a bare connection, received each rep both ways
 * (bench_xport_ceilings.h).  A same-host read of one reader comes after
 * read_before (an untimed read, then the copy threads' rest), as bench step
 * times a step after a step pair.  The ceiling is the faster way's median, as the
 * read's figure is its median (a median of each rep's faster way would
 * compare the better of two tries with one).  With n_readers > 1 (tcp,
 * warm only) client k reads the shape moved by k times its span, all at
 * once, and bare moves all their bytes at once.  *gbps_p gets all readers'
 * bytes over the median rep, *way what the ceiling was, *parts_p the
 * medians of the reads' parts.  With as_old (a struct as_old; NULL: not
 * wanted), a cold same-host figure of a region of three slots or more also
 * gets the ceiling that meets pages as old as the reads' (as_old_pages):
 * as_old->gbps, and the reads' median page age as_old->age_s. */
static int
measure_shape(ect_xport_client_t *const *client, size_t n_readers, ect_region_t *mine,
              const ect_region_t *theirs, const struct producer *p, struct shape *s,
              ect_bench_ceiling_t *ceiling, struct ect_bench_tcp_ceiling *bare, int cold,
              double *gbps_p, double *ceiling_p, char way[WAY_LEN], struct read_parts *parts_p,
              struct as_old *as_old)
{
    uint64_t span = shape_span(s), slots = cold ? REGION_BLOCKS / span : 1;
    if (n_readers == 0 || n_readers > MAX_READERS || (n_readers > 1 && (cold || ceiling)) ||
        span * n_readers > REGION_BLOCKS) {
        fprintf(stderr, "bench xport: %zu readers of this shape cannot be measured\n", n_readers);
        return 1;
    }
    static struct shape moved[MAX_READERS];
    const struct shape *shapes[MAX_READERS] = {s};
    uint64_t at[MAX_READERS] = {0};
    for (size_t k = 1; k < n_readers; k++) {
        moved[k] = *s;
        shift_shape(&moved[k], (int64_t)(k * span));
        shapes[k] = &moved[k];
        at[k] = k * span;
    }
    double bytes = (double)s->n_blocks * BLOCK * (double)n_readers;
    if (ceiling != NULL)
        ect_bench_ceiling_reset(ceiling);
    /* Correctness first, then warm-up. */
    memset(ect_region_data(mine), 0, (size_t)REGION_BLOCKS * BLOCK);
    struct read_parts parts;
    if (timed_reads(client, n_readers, p, shapes, at, &parts) < 0)
        return 1;
    for (size_t k = 0; k < n_readers; k++)
        if (check_landed(mine, shapes[k]) != 0)
            return 1;
    for (int i = 0; i < 2; i++)
        if (timed_reads(client, n_readers, p, shapes, at, &parts) < 0)
            return 1;
    enum { MAX_REPS = 2000, N_BARE_WAYS = 2 };
    static double t_read[MAX_REPS], t_bare[N_BARE_WAYS][MAX_REPS];
    static double t_start[MAX_REPS], t_handoff[MAX_REPS], t_age[MAX_REPS];
    size_t n = 0, n_handoff = 0, n_age = 0, n_on_rx = 0;
    uint64_t slot = 0;
    /* When each slot was last written (0: not yet), for the as-old ceiling. */
    int paced = as_old != NULL && cold && ceiling != NULL && slots >= 3;
    uint64_t *written = paced ? calloc(slots, sizeof(*written)) : NULL;
    if (paced && written == NULL) {
        fprintf(stderr, "bench xport: out of memory for the slots' ages\n");
        return 1;
    }
    uint64_t end = ect__now_ns() + (uint64_t)(READ_SECONDS * 1e9);
    while (n < MAX_REPS && (n < 5 || ect__now_ns() < end)) {
        struct slot_state ss = {.mine = mine,
                                .theirs = theirs,
                                .off = (size_t)(slot * span * BLOCK),
                                .len = (size_t)(span * BLOCK)};
        if (ceiling != NULL && n_readers == 1 &&
            read_before(client[0], p, s, span, slot, slots, written) != 0) {
            free(written);
            return 1;
        }
        if (cold)
            make_cold(&ss);
        at[0] = slot * span;
        if (written != NULL && written[slot] != 0)
            t_age[n_age++] = (double)(ect__now_ns() - written[slot]);
        if ((t_read[n] = timed_reads(client, n_readers, p, shapes, at, &parts)) < 0) {
            free(written);
            return 1;
        }
        t_start[n] = parts.start;
        n_on_rx += parts.on_rx > 0;
        if (parts.handoff >= 0)
            t_handoff[n_handoff++] = parts.handoff;
        if (ceiling != NULL) {
            ect_copy_op_t op = {.dst = (uint8_t *)ect_region_data(mine) + ss.off,
                                .src = (const uint8_t *)ect_region_data(theirs) + ss.off,
                                .len = (size_t)bytes};
            if (ect_bench_ceiling_sample(ceiling, &op, 1, cold ? make_cold : NULL, &ss) != 0) {
                free(written);
                return 1;
            }
            if (written != NULL)
                written[slot] = ect__now_ns();
        }
        if (bare != NULL) {
            /* Both ways to receive (bench_xport_ceilings.h): recv(MSG_WAITALL),
             * and the stream client's own. */
            for (int way_i = 0; way_i < N_BARE_WAYS; way_i++) {
                if (cold)
                    make_cold(&ss);
                bare->as_client = way_i;
                t_bare[way_i][n] =
                    ect_bench_tcp_ceiling_once(bare, ect_region_data(mine), ss.off, (size_t)bytes);
                if (t_bare[way_i][n] < 0)
                    return 1;
            }
        }
        n++;
        if (slots > 1) {
            uint64_t next = (slot + 1) % slots;
            shift_shape(s, ((int64_t)next - (int64_t)slot) * (int64_t)span);
            slot = next;
        }
    }
    shift_shape(s, -(int64_t)(slot * span));
    *gbps_p = bytes / ect_bench_median(t_read, n) / 1e9;
    parts_p->start = ect_bench_median(t_start, n);
    parts_p->handoff = n_handoff > 0 ? ect_bench_median(t_handoff, n_handoff) : -1;
    parts_p->on_rx = (double)n_on_rx / (double)n;
    *ceiling_p = 0;
    way[0] = '\0';
    if (ceiling != NULL) {
        const char *w;
        *ceiling_p = ect_bench_ceiling_gbps(ceiling, bytes, &w);
        snprintf(way, WAY_LEN, "%s", w);
    }
    if (written != NULL && n_age > 0) {
        /* The main loop ended before reading `slot`: the oldest. */
        struct slot_state first = {.mine = mine, .theirs = theirs, .len = (size_t)(span * BLOCK)};
        double age_ns = ect_bench_median(t_age, n_age);
        as_old->age_s = age_ns / 1e9;
        if (as_old_pages(ceiling, &first, span, slots, slot, written, (uint64_t)age_ns, bytes,
                         as_old) != 0) {
            free(written);
            return 1;
        }
    }
    free(written);
    if (bare != NULL) {
        double waitall = ect_bench_median(t_bare[0], n), lowat = ect_bench_median(t_bare[1], n);
        *ceiling_p = bytes / (waitall < lowat ? waitall : lowat) / 1e9;
        if (waitall < lowat)
            snprintf(way, WAY_LEN, "send/recv, same buffers, recv(MSG_WAITALL)");
        else
            snprintf(way, WAY_LEN, "send/recv, same buffers, woken as our client");
    }
    return 0;
}

/* The consumer process: reads one size index per command byte from cmd
 * and answers with its status and its figures, until end-of-file. */
static int
consumer_main(int cmd, int up, const struct producer *p, enum mode mode)
{
    static struct shape shape;
    char name[sizeof(p->region_name) + 16];
    snprintf(name, sizeof(name), "%s_consumer", p->region_name);
    ect_region_params_t rp;
    ect_bench_xport_region_params(&rp, name);
    ect_region_t *mine = NULL, *theirs = NULL, *flush = NULL;
    ect_xport_client_t *client = NULL, *striped_client = NULL, *readers[MAX_READERS] = {NULL};
    ect_bench_ceiling_t *ceiling = NULL;
    int rc = 1;
    if (ect_region_open(&rp, &mine) != ECT_OK)
        goto fail;
    /* The producer's region, read-only: the same-host ceiling copies from
     * it, and a cold read evicts its bytes through a second view (in either
     * mode: the caches are physically tagged, so our view flushes the
     * producer's lines; see make_cold for why a second one). */
    if (ect_region_open_readonly(p->path, NULL, &theirs) != ECT_OK)
        goto close_mine;
    if (ect_region_open_readonly(p->path, NULL, &flush) != ECT_OK)
        goto close_theirs;
    flush_view = flush;
    /* Forked before this process starts any thread (the client's). */
    struct ect_bench_tcp_ceiling bare_s = {0}, striped = {0}, *bare = NULL;
    if (mode == MODE_TCP) {
        if (ect_bench_tcp_ceiling_start(&bare_s, ect_region_data(theirs),
                                        (size_t)REGION_BLOCKS * BLOCK, 1) != 0 ||
            ect_bench_tcp_ceiling_start(&striped, ect_region_data(theirs),
                                        (size_t)REGION_BLOCKS * BLOCK,
                                        ECT_BENCH_TCP_MAX_CONNS) != 0)
            goto stop_bare;
        bare = &bare_s;
    }
    if ((settled_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        goto stop_bare;
    wait_tick_ms = mode == MODE_TCP ? 20 : 1;
    ect_xport_client_params_t cp = {.data = ect_region_data(mine),
                                    .block_size = BLOCK,
                                    .num_blocks = REGION_BLOCKS,
                                    .prefer = mode == MODE_SAME_HOST ? ECT_TRANSPORT_SAME_HOST
                                                                     : ECT_TRANSPORT_TCP,
                                    .wake = read_settled,
                                    .wake_arg = &settled_fd,
                                    .touch_pages = 1}; /* prefault's default */
    if (ect__xport_client_create(&cp, &client) != ECT_OK)
        goto stop_bare;
    readers[0] = client;
    for (size_t k = 1; k < MAX_READERS && mode == MODE_TCP; k++)
        if (ect__xport_client_create(&cp, &readers[k]) != ECT_OK)
            goto destroy_client;
    cp.tcp_stripes = ECT_STREAM_MAX_STRIPES;
    if (mode == MODE_TCP && ect__xport_client_create(&cp, &striped_client) != ECT_OK)
        goto destroy_client;
    /* The client's copy engine has the default 2 copy threads (cp.copy is zero). */
    if (mode == MODE_SAME_HOST &&
        (ceiling = ect_bench_ceiling_create(ect__copy_cpu_copiers(2))) == NULL)
        goto destroy_client;
    if (ceiling != NULL)
        ect_bench_ceiling_add_asleep(ceiling);
    uint8_t i;
    while (ect_cli_read_full(cmd, &i, 1) == 0 && (i < N_SIZES || i >= SEED_CMD)) {
        static struct answer a;
        memset(&a, 0, sizeof(a));
        if (i >= READERS_CMD) {
            /* fig[0] the readers' bytes a second, fig[1] the same over as
             * many bare connections. */
            unsigned k = (i - READERS_CMD) % 3;
            ect_xport_client_t *one[MAX_READERS];
            for (size_t j = 0; j < MAX_READERS; j++)
                one[j] = striped_client;
            ect_bench_xport_make_shape(&shape, READERS[k].mib, 1);
            a.status =
                measure_shape(READERS[k].one_consumer ? one : readers,
                              mode == MODE_TCP ? MAX_READERS : 1, mine, theirs, p, &shape, ceiling,
                              &striped, 0, &a.fig[0], &a.fig[1], a.way[1], &a.parts[0], NULL);
        } else if (i >= SEED_CMD) {
            /* A SEED_MIB entry in SEED_FRAGS[i - SEED_CMD] runs, warm: fig[0]
             * over one connection and fig[1] the same bytes over one bare
             * connection; fig[2] striped and fig[3] over as many bare
             * connections at once. */
            ect_bench_xport_make_shape(&shape, SEED_MIB, SEED_FRAGS[(i - SEED_CMD) % 3]);
            a.status = measure_shape(&client, 1, mine, theirs, p, &shape, ceiling, bare, 0,
                                     &a.fig[0], &a.fig[1], a.way[1], &a.parts[0], NULL);
            if (a.status == 0 && striped_client != NULL)
                a.status =
                    measure_shape(&striped_client, 1, mine, theirs, p, &shape, ceiling, &striped, 0,
                                  &a.fig[2], &a.fig[3], a.way[3], &a.parts[1], NULL);
        }
        if (ect__xport_client_copy_stats(client, &a.copy_a) != ECT_OK)
            a.status = 1;
        for (int cold = 0; cold < 2 && i < N_SIZES; cold++)
            for (int fr = 0; fr < 2 && a.status == 0; fr++) {
                ect_bench_xport_make_shape(&shape, SIZES_MIB[i], fr ? FRAGS : 1);
                a.status = measure_shape(&client, 1, mine, theirs, p, &shape, ceiling, bare, cold,
                                         &a.fig[FIG(cold, fr, 0)], &a.fig[FIG(cold, fr, 1)],
                                         a.way[FIG(cold, fr, 1)], &a.parts[FIG(cold, fr, 0) / 2],
                                         fr ? NULL : &a.as_old[FIG(cold, fr, 0) / 2]);
                if (a.status == 0 && ceiling != NULL) {
                    const char *w;
                    int k = FIG(cold, fr, 0) / 2;
                    a.asleep[k] =
                        ect_bench_ceiling_asleep_gbps(ceiling, (double)shape.n_blocks * BLOCK, &w);
                    snprintf(a.asleep_way[k], WAY_LEN, "%s", w);
                }
            }
        if (a.status == 0 && ect__xport_client_copy_stats(client, &a.copy_z) != ECT_OK)
            a.status = 1;
        if (a.status != 0)
            fprintf(stderr, "bench xport: consumer: %s\n", ect_last_error());
        if (ect_cli_write_full(up, &a, sizeof(a)))
            break;
    }
    rc = 0;
    ect_bench_ceiling_destroy(ceiling);
destroy_client:
    ect__xport_client_destroy(striped_client);
    for (size_t k = 1; k < MAX_READERS; k++)
        ect__xport_client_destroy(readers[k]);
    ect__xport_client_destroy(client);
stop_bare:
    ect_bench_tcp_ceiling_stop(&bare_s);
    ect_bench_tcp_ceiling_stop(&striped);
    ect_region_close(flush);
close_theirs:
    ect_region_close(theirs);
close_mine:
    ect_region_close(mine);
fail:
    if (rc != 0) {
        fprintf(stderr, "bench xport: consumer: %s\n", ect_last_error());
        static struct answer a = {.status = 1};
        ect_cli_write_full(up, &a, sizeof(a));
    }
    return rc;
}

int
ect_bench_xport_consumer_start(struct consumer *c, const struct producer *p, enum mode mode)
{
    int cmd[2], up[2];
    c->pid = -1;
    if (pipe(cmd) != 0 || pipe(up) != 0) {
        perror("bench xport: pipe");
        return 1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("bench xport: fork");
        return 1;
    }
    if (pid == 0) {
        close(cmd[1]);
        close(up[0]);
        _exit(consumer_main(cmd[0], up[1], p, mode));
    }
    close(cmd[0]);
    close(up[1]);
    c->pid = pid;
    c->cmd_fd = cmd[1];
    c->res_fd = up[0];
    return 0;
}

/* Have the consumer measure size index i (figures indexed by FIG). */
int
ect_bench_xport_consumer_measure(struct consumer *c, uint8_t i, struct answer *a)
{
    if (ect_cli_write_full(c->cmd_fd, &i, 1) || ect_cli_read_full(c->res_fd, a, sizeof(*a)))
        return 1;
    for (int k = 0; k < N_FIGS; k++)
        a->way[k][WAY_LEN - 1] = '\0';
    return a->status;
}

void
ect_bench_xport_consumer_stop(struct consumer *c)
{
    if (c->pid <= 0)
        return;
    close(c->cmd_fd);
    close(c->res_fd);
    waitpid(c->pid, NULL, 0);
}
