/*
 * `ectier bench step`: the whole step protocol in one process — a scheduler
 * and a worker (CPU copy engine) over a real /dev/shm region — saving and
 * reloading 1, 8 and 32 MiB entries, against memcpy of the same bytes
 * between the same buffers in the same run (SPEC §12: CPU-tier save/load of
 * >= 1 MiB entries >= 0.9 x memcpy).
 *
 * A save step is timed from update_state_after_alloc to the worker's report
 * applied by the scheduler: build and encode the step metadata, bind it,
 * save, submit, wait until landed, take and encode the report, apply it.  A
 * load step likewise, from has_cache_item to the applied report.  So the
 * figure includes every cost the protocol adds to the copy itself.  The
 * ceiling copies the entry's bytes with memcpy between the same engine
 * buffer and the same region blocks.  Steps and memcpy repetitions
 * alternate, and so does which of the two goes first in a rep (the second
 * finds the bytes in cache); each figure is a median.  A first line gives
 * the fixed cost of a step, with a 1000-byte entry.  Every rep saves a new
 * entry; the
 * region holds a few, so older ones are evicted as in production.
 * Blocks are 7168 bytes (3584 hidden x bf16): entries end in a partial
 * block.  Everything is warmed (pre-faulted region, touched buffers, pooled
 * engine records) before timing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "bench.h"
#include "common/clock.h"

#define HIDDEN      3584u
#define BLOCK_BYTES (HIDDEN * 2u)
#define MAX_PAYLOAD ((size_t)32 << 20)
#define KEEP        3 /* largest entries the region holds at once */

struct step_bench {
    ect_config_t cfg;
    ect_geometry_t geom;
    char instance[64];
    ect_scheduler_t *sched;
    ect_worker_t *worker;
    ect_region_t *region; /* the bench's own view, for the memcpy ceiling */
    unsigned char *src;   /* engine memory saved from */
    unsigned char *dst;   /* engine memory loaded into */
    unsigned char *buf;   /* encoded metadata / report */
    size_t buf_cap;
};

static int
fail(const char *what)
{
    fprintf(stderr, "bench step: %s: %s\n", what, ect_last_error());
    return 1;
}

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double
median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int
grow(struct step_bench *b, size_t need)
{
    if (need <= b->buf_cap)
        return 0;
    unsigned char *p = realloc(b->buf, need);
    if (p == NULL) {
        fprintf(stderr, "bench step: out of memory\n");
        return 1;
    }
    b->buf = p;
    b->buf_cap = need;
    return 0;
}

static ect_status_t
load_target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    struct step_bench *b = user;
    (void)key;
    (void)n_tokens;
    if (nbytes > MAX_PAYLOAD + BLOCK_BYTES)
        return ECT_ERR_OVERFLOW;
    *dst_p = b->dst;
    return ECT_OK;
}

/* Scheduler -> worker: build and encode the step, bind it on the worker. */
static int
ship_meta(struct step_bench *b, ect_step_meta_t **meta_p)
{
    ect_step_meta_t *m;
    size_t len;
    if (ect_scheduler_build_connector_meta(b->sched, &m) != ECT_OK)
        return fail("build_connector_meta");
    if (grow(b, ect_step_meta_encoded_size(m)) != 0 ||
        ect_step_meta_encode(m, b->buf, b->buf_cap, &len) != ECT_OK ||
        ect_worker_bind_metadata(b->worker, b->buf, len) != ECT_OK) {
        ect_step_meta_destroy(m);
        return fail("ship the step metadata");
    }
    *meta_p = m;
    return 0;
}

/* Worker -> scheduler: wait until landed, end the step, encode the report
 * and apply it. */
static int
ship_report(struct step_bench *b)
{
    ect_worker_report_t *r = NULL;
    size_t len = 0;
    if (ect_worker_wait(b->worker) != ECT_OK)
        return fail("worker wait");
    ect_worker_clear_metadata(b->worker);
    if (ect_worker_take_report(b->worker, &r) != ECT_OK || r == NULL)
        return fail("take_report");
    int rc = grow(b, ect_worker_report_encoded_size(r)) != 0 ||
             ect_worker_report_encode(r, b->buf, b->buf_cap, &len) != ECT_OK ||
             ect_scheduler_update_connector_output(b->sched, b->buf, len) != ECT_OK;
    ect_worker_report_destroy(r);
    return rc ? fail("apply the report") : 0;
}

static int
update(struct step_bench *b, const char *key, uint64_t tokens)
{
    ect_mm_feature_t f = {.identifier = key, .num_tokens = tokens, .has_local_input = 1};
    ect_request_t req = {.request_id = "bench", .features = &f, .n_features = 1};
    return ect_scheduler_update_state_after_alloc(b->sched, &req, 0) != ECT_OK
               ? fail("update_state_after_alloc")
               : 0;
}

/* One save step of key; runs and n_runs get its blocks (for the ceiling). */
static int
save_step(struct step_bench *b, const char *key, size_t payload, ect_run_t *runs, size_t *n_runs)
{
    uint64_t tokens = (payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
    ect_step_meta_t *m;
    if (update(b, key, tokens) != 0 || ship_meta(b, &m) != 0)
        return 1;
    const ect_step_item_t *it = ect_step_meta_find_save(m, key);
    int rc = 1;
    if (it == NULL || it->n_runs > 64) {
        fprintf(stderr, "bench step: no save of %s in the step (region too small?)\n", key);
        goto destroy_meta;
    }
    memcpy(runs, it->runs, it->n_runs * sizeof(*runs));
    *n_runs = it->n_runs;
    if (ect_worker_save(b->worker, key, b->src, payload, NULL, NULL) != ECT_OK ||
        ect_worker_get_finished(b->worker) != ECT_OK) {
        fail("save");
        goto destroy_meta;
    }
    rc = ship_report(b);
destroy_meta:
    ect_step_meta_destroy(m);
    return rc;
}

static int
load_step(struct step_bench *b, const char *key, size_t payload)
{
    uint64_t tokens = (payload + BLOCK_BYTES - 1) / BLOCK_BYTES;
    ect_step_meta_t *m;
    if (!ect_scheduler_has_cache_item(b->sched, key)) {
        fprintf(stderr, "bench step: %s is not in the CPU tier after its save\n", key);
        return 1;
    }
    if (update(b, key, tokens) != 0 || ship_meta(b, &m) != 0)
        return 1;
    int rc = ect_step_meta_n_loads(m) != 1 ||
             ect_worker_start_load(b->worker, load_target, b, NULL) != ECT_OK;
    ect_step_meta_destroy(m);
    if (rc)
        return fail("start_load");
    return ship_report(b);
}

/* The ceiling: the same bytes between the same buffer and blocks. */
static void
memcpy_entry(struct step_bench *b, ect_copy_dir_t dir, const ect_run_t *runs, size_t n_runs,
             size_t payload)
{
    size_t off = 0;
    for (size_t i = 0; i < n_runs && off < payload; i++) {
        size_t len = (size_t)runs[i].count * BLOCK_BYTES;
        if (len > payload - off)
            len = payload - off;
        unsigned char *blk = ect_region_block_ptr(b->region, runs[i].first);
        if (dir == ECT_COPY_SAVE)
            memcpy(blk, b->src + off, len);
        else
            memcpy(b->dst + off, blk, len);
        off += len;
    }
}

static int
measure(struct step_bench *b, size_t payload, unsigned reps)
{
    double *t = malloc(4 * reps * sizeof(double));
    if (t == NULL) {
        fprintf(stderr, "bench step: out of memory\n");
        return 1;
    }
    double *t_save = t, *t_load = t + reps, *c_save = t + 2 * reps, *c_load = t + 3 * reps;
    ect_run_t runs[64];
    size_t n_runs = 0;
    char key[64];
    int rc = 1;
    /* Warm-up, with a byte-for-byte check (a fast wrong copy is no result). */
    for (unsigned i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "warm-%zu-%u", payload, i);
        memset(b->dst, 0, payload);
        if (save_step(b, key, payload, runs, &n_runs) != 0 || load_step(b, key, payload) != 0)
            goto free_times;
        if (memcmp(b->dst, b->src, payload) != 0) {
            fprintf(stderr, "bench step: a %zu-byte entry came back changed\n", payload);
            goto free_times;
        }
    }
    for (unsigned i = 0; i < reps; i++) {
        snprintf(key, sizeof(key), "e-%zu-%u", payload, i);
        /* Whichever copy runs second finds the bytes in cache: alternate
         * the order.  On odd reps memcpy goes first, into the previous
         * rep's entry (same size, still live; its bytes are the same). */
        uint64_t ts[5];
        if (i % 2 == 0) {
            ts[0] = ect__now_ns();
            if (save_step(b, key, payload, runs, &n_runs) != 0)
                goto free_times;
            ts[1] = ect__now_ns();
            memcpy_entry(b, ECT_COPY_SAVE, runs, n_runs, payload);
            ts[2] = ect__now_ns();
            if (load_step(b, key, payload) != 0)
                goto free_times;
            ts[3] = ect__now_ns();
            memcpy_entry(b, ECT_COPY_LOAD, runs, n_runs, payload);
            ts[4] = ect__now_ns();
            t_save[i] = (double)(ts[1] - ts[0]) / 1e9;
            c_save[i] = (double)(ts[2] - ts[1]) / 1e9;
            t_load[i] = (double)(ts[3] - ts[2]) / 1e9;
            c_load[i] = (double)(ts[4] - ts[3]) / 1e9;
        } else {
            ts[0] = ect__now_ns();
            memcpy_entry(b, ECT_COPY_SAVE, runs, n_runs, payload);
            ts[1] = ect__now_ns();
            if (save_step(b, key, payload, runs, &n_runs) != 0)
                goto free_times;
            ts[2] = ect__now_ns();
            memcpy_entry(b, ECT_COPY_LOAD, runs, n_runs, payload);
            ts[3] = ect__now_ns();
            if (load_step(b, key, payload) != 0)
                goto free_times;
            ts[4] = ect__now_ns();
            c_save[i] = (double)(ts[1] - ts[0]) / 1e9;
            t_save[i] = (double)(ts[2] - ts[1]) / 1e9;
            c_load[i] = (double)(ts[3] - ts[2]) / 1e9;
            t_load[i] = (double)(ts[4] - ts[3]) / 1e9;
        }
    }
    double ms = median(t_save, reps), mcs = median(c_save, reps);
    double ml = median(t_load, reps), mcl = median(c_load, reps);
    double gb = (double)payload / 1e9;
    if (payload < BLOCK_BYTES) {
        /* No copy worth the name: what a step costs by itself. */
        printf("  fixed cost of a step (one %zu-byte entry): save %.1f us, load %.1f us\n", payload,
               ms * 1e6, ml * 1e6);
        rc = 0;
        goto free_times;
    }
    char what[96];
    snprintf(what, sizeof(what), "save step %2zu MiB (schedule..report applied)", payload >> 20);
    ect_bench_row(what, gb / ms, gb / mcs, "GB/s", 0.9);
    snprintf(what, sizeof(what), "load step %2zu MiB (hit..report applied)", payload >> 20);
    ect_bench_row(what, gb / ml, gb / mcl, "GB/s", 0.9);
    snprintf(what, sizeof(what), "round trip %2zu MiB (save + load steps)", payload >> 20);
    ect_bench_row(what, 2 * gb / (ms + ml), 2 * gb / (mcs + mcl), "GB/s", 0.9);
    fflush(stdout);
    rc = 0;
free_times:
    free(t);
    return rc;
}

int
ect_bench_step(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    static const struct {
        size_t payload;
        unsigned reps;
    } plans[] = {{1000, 301}, {(size_t)1 << 20, 301}, {(size_t)8 << 20, 61}, {MAX_PAYLOAD, 21}};
    struct step_bench b = {0};
    int rc = 1;
    uint64_t blocks = KEEP * ((MAX_PAYLOAD + BLOCK_BYTES - 1) / BLOCK_BYTES + 1);
    char json[256];
    snprintf(json, sizeof(json),
             "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_both\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %llu}}",
             (unsigned long long)(blocks * BLOCK_BYTES));
    if (ect_config_parse(json, strlen(json), &b.cfg) != ECT_OK ||
        ect_geometry_init(HIDDEN, ECT_DTYPE_BF16, b.cfg.cpu_bytes, &b.geom) != ECT_OK)
        return fail("config");
    snprintf(b.instance, sizeof(b.instance), "bench_step_%d", (int)getpid());
    ect_scheduler_params_t sp = {
        .config = &b.cfg, .geometry = &b.geom, .instance_id = b.instance, .load_reports = 1};
    if (ect_scheduler_create(&sp, &b.sched) != ECT_OK)
        return fail("create the scheduler");
    ect_worker_params_t wp = {.config = &b.cfg, .geometry = &b.geom, .instance_id = b.instance};
    if (ect_worker_create(&wp, &b.worker) != ECT_OK) {
        fail("create the worker");
        goto destroy_scheduler;
    }
    ect_region_params_t rp = {.instance_id = b.instance,
                              .hidden_dim = b.geom.hidden_dim,
                              .dtype_code = (uint32_t)b.geom.dtype,
                              .element_size = (uint32_t)ect_dtype_size(b.geom.dtype),
                              .block_size_bytes = b.geom.block_size_bytes,
                              .num_blocks = b.geom.num_blocks,
                              .flags = ECT_REGION_NO_REAPER};
    if (ect_region_open(&rp, &b.region) != ECT_OK) {
        fail("join the region");
        goto destroy_worker;
    }
    b.src = malloc(MAX_PAYLOAD);
    b.dst = malloc(MAX_PAYLOAD + BLOCK_BYTES);
    if (b.src == NULL || b.dst == NULL) {
        fprintf(stderr, "bench step: out of memory\n");
        goto free_buffers;
    }
    for (size_t i = 0; i < MAX_PAYLOAD; i++)
        b.src[i] = (unsigned char)(i * 131 + (i >> 12) + 1);
    memset(b.dst, 0, MAX_PAYLOAD + BLOCK_BYTES);
    printf("  scheduler + worker in one process, cpu engine (%u copy threads); %u-byte blocks; "
           "region: /dev/shm, %.1f MiB, pre-faulted\n",
           b.cfg.copy_threads, BLOCK_BYTES, (double)(b.geom.num_blocks * BLOCK_BYTES) / (1 << 20));
    printf(
        "  figure: median step time, from the scheduler's call to the worker's report applied\n"
        "  ceiling: memcpy of the same bytes between the same buffer and blocks, reps "
        "alternating\n"
        "  N = 301, 61, 21 reps for 1, 8, 32 MiB; a new entry every rep (evictions included);\n"
        "  engine-first and memcpy-first reps alternate (the second finds the bytes in cache)\n");
    for (size_t p = 0; p < sizeof(plans) / sizeof(plans[0]); p++)
        if (measure(&b, plans[p].payload, plans[p].reps) != 0)
            goto free_buffers;
    rc = 0;
free_buffers:
    free(b.dst);
    free(b.src);
    free(b.buf);
    ect_region_close(b.region);
destroy_worker:
    ect_worker_destroy(b.worker);
destroy_scheduler:
    ect_scheduler_destroy(b.sched);
    return rc;
}
