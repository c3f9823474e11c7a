/*
 * A complete engine step loop over ectier's public API: the reference for
 * anyone embedding ectier in an LLM serving engine.
 *
 * Processes: this process is the engine's *scheduler*; it forks tp_size
 * *worker* processes (tensor-parallel ranks).  They exchange, over pipes,
 * exactly what a real engine ships between its processes: the scheduler's
 * encoded step metadata (ect_step_meta_encode) and each worker's encoded
 * report (ect_step_report_encode).  The region in /dev/shm is shared by
 * all of them; ectier creates it and removes it when the last one closes.
 *
 * Each step the scheduler admits a few requests, each with media items
 * ("images").  For every item not in the stand-in GPU encoder cache it asks
 * ectier whether the CPU tier has it (has_cache_item): if so the item is
 * loaded from the tier, otherwise the workers encode it and rank 0 saves the
 * output to the tier.  The GPU cache is small, so items fall out of it and
 * later requests reload them instead of encoding again.  Every reloaded entry
 * is compared byte for byte with a fresh encode.
 *
 * encode_item() stands in for a vision encoder: it is deterministic, and its
 * cost grows with the item's size (tokens x hidden x mixing rounds), so the
 * encode time that CPU-tier hits avoid is real time, measured.
 *
 * Build: part of the project (build/examples/engine_loop); run it with no
 * arguments for the default workload.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ectier/ectier.h>

#include "engine_loop.h"

#define MAX_TP  8
#define KEY_LEN 32

/* ---- the vision encoder stand-in ---------------------------------------- */

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define MAX_TOKENS 256

/* Tokens (rows) of item's encoder output: 64..MAX_TOKENS, fixed per item. */
static uint64_t
item_tokens(unsigned item)
{
    return 64 + (uint64_t)((item * 2654435761u) >> 8) % (MAX_TOKENS - 63);
}

static void
item_key(unsigned item, char key[KEY_LEN])
{
    snprintf(key, KEY_LEN, "img-%u", item);
}

static int
key_item(const char *key, unsigned *item_p)
{
    return sscanf(key, "img-%u", item_p) == 1 ? 0 : -1;
}

/* Stand-in for a vision encoder (see the file comment): fills out with
 * nbytes of deterministic output for item.  Not a real model. */
static void
encode_item(unsigned item, unsigned work, uint8_t *out, size_t nbytes)
{
    uint64_t state = 0x9E3779B97F4A7C15ull * (item + 1);
    for (size_t off = 0; off < nbytes; off += 8) {
        uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        for (unsigned r = 0; r < work; r++) {
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            z ^= z >> 31;
        }
        size_t n = nbytes - off < 8 ? nbytes - off : 8;
        memcpy(out + off, &z, n);
    }
}

/* ---- framed messages over pipes ----------------------------------------- */

static int
write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int
read_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* A growable byte buffer for building one message. */
struct msg {
    uint8_t *data;
    size_t len, cap;
};

static void
msg_put(struct msg *m, const void *src, size_t n)
{
    /* An empty part (no items to encode, an empty report) may come with a
     * NULL pointer, which memcpy must never see, even for 0 bytes. */
    if (n == 0)
        return;
    if (m->len + n > m->cap) {
        size_t cap = m->cap ? m->cap : 256;
        while (cap < m->len + n)
            cap *= 2;
        uint8_t *grown = realloc(m->data, cap);
        if (grown == NULL) {
            fprintf(stderr, "engine_loop: out of memory\n");
            exit(1);
        }
        m->data = grown;
        m->cap = cap;
    }
    memcpy(m->data + m->len, src, n);
    m->len += n;
}

static void
msg_u32(struct msg *m, uint32_t v)
{
    msg_put(m, &v, 4);
}

static void
msg_u64(struct msg *m, uint64_t v)
{
    msg_put(m, &v, 8);
}

static int
msg_send(int fd, const struct msg *m)
{
    uint32_t len = (uint32_t)m->len;
    return write_all(fd, &len, 4) || write_all(fd, m->data, m->len) ? -1 : 0;
}

/* Receive one message into m (replacing its contents). */
static int
msg_recv(int fd, struct msg *m)
{
    uint32_t len;
    if (read_all(fd, &len, 4) != 0)
        return -1;
    if (len > m->cap) {
        uint8_t *grown = realloc(m->data, len);
        if (grown == NULL)
            return -1;
        m->data = grown;
        m->cap = len;
    }
    m->len = len;
    return read_all(fd, m->data, len);
}

/* Reading side of a received message; never reads past the end. */
struct cursor {
    const uint8_t *p, *end;
};

static int
take(struct cursor *c, void *dst, size_t n)
{
    if ((size_t)(c->end - c->p) < n)
        return -1;
    memcpy(dst, c->p, n);
    c->p += n;
    return 0;
}

/*
 * The step message, scheduler -> worker:
 *   u32 flags (1 = stop), u32 meta_len, meta bytes (ectier's encoding),
 *   u32 n_encode, n_encode x u32 item, u32 n_free, n_free x u32 item
 * The worker's reply:
 *   u32 report_len, report bytes (ectier's encoding), then u64 encode_ns,
 *   u64 verified, u64 mismatches, u64 avoided_encode_ns
 */
#define STEP_STOP 1u

/* ---- worker process ------------------------------------------------------ */

struct worker_ctx {
    uint8_t **gpu; /* stand-in GPU encoder cache: item -> buffer */
    unsigned max_item;
    uint64_t row_bytes;
};

/* ect_load_target_fn: where a load from the CPU tier lands. */
static ect_status_t
load_target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    struct worker_ctx *ctx = user;
    unsigned item;
    if (key_item(key, &item) != 0 || item > ctx->max_item || n_tokens != item_tokens(item))
        return ECT_ERR_INVALID_ARG;
    free(ctx->gpu[item]);
    ctx->gpu[item] = malloc(nbytes);
    *dst_p = ctx->gpu[item];
    return ctx->gpu[item] != NULL ? ECT_OK : ECT_ERR_NO_MEMORY;
}

static int
worker_main(unsigned rank, int fd_in, int fd_out, const struct ect_loop_workload *wl,
            const ect_config_t *cfg, const ect_geometry_t *geom, const char *instance)
{
    ect_worker_params_t wp = {
        .config = cfg, .geometry = geom, .instance_id = instance, .tp_rank = rank};
    ect_worker_t *worker;
    if (ect_worker_create(&wp, &worker) != ECT_OK) {
        fprintf(stderr, "engine_loop: worker %u: %s\n", rank, ect_last_error());
        return 1;
    }
    unsigned max_item = 0;
    for (unsigned r = 0; r < wl->n_requests; r++)
        for (unsigned i = 0; i < wl->requests[r].n_items; i++)
            if (wl->requests[r].items[i] > max_item)
                max_item = wl->requests[r].items[i];
    struct worker_ctx ctx = {calloc(max_item + 1, sizeof(uint8_t *)), max_item,
                             geom->block_size_bytes};
    uint8_t *fresh = malloc(MAX_TOKENS * ctx.row_bytes);
    struct msg in = {0}, out = {0};
    int rc = 1;
    for (;;) {
        if (msg_recv(fd_in, &in) != 0)
            goto done;
        struct cursor c = {in.data, in.data + in.len};
        uint32_t flags, meta_len;
        if (take(&c, &flags, 4) || (flags & STEP_STOP))
            break;
        if (take(&c, &meta_len, 4) || (size_t)(c.end - c.p) < meta_len)
            goto done;
        /* 1. The scheduler's decisions for this step. */
        if (ect_worker_bind_metadata(worker, c.p, meta_len) != ECT_OK) {
            fprintf(stderr, "engine_loop: worker %u: bind: %s\n", rank, ect_last_error());
            goto done;
        }
        c.p += meta_len;
        /* 2. Loads from the CPU tier start before the model runs.  Here
         *    the model (the stand-in encoder below) runs on the same cores
         *    as the copy threads, so the worker lets the loads land first:
         *    that costs only their copy time, and the copy time it reports
         *    (the load_ns of ectier's metrics, submit to landed) is then the
         *    copies' own rather than the encoding they would overlap.  A
         *    CUDA engine orders the loads on its compute stream instead. */
        if (ect_worker_start_load(worker, load_target, &ctx, NULL) != ECT_OK ||
            ect_worker_wait(worker) != ECT_OK) {
            fprintf(stderr, "engine_loop: worker %u: load: %s\n", rank, ect_last_error());
            goto done;
        }
        /* 3. The encoder runs on the items no tier had; each output is saved. */
        uint64_t encode_ns = 0, verified = 0, mismatches = 0, avoided_ns = 0;
        uint32_t n_encode, item;
        if (take(&c, &n_encode, 4))
            goto done;
        for (uint32_t k = 0; k < n_encode; k++) {
            if (take(&c, &item, 4) || item > max_item)
                goto done;
            size_t nbytes = item_tokens(item) * ctx.row_bytes;
            free(ctx.gpu[item]);
            ctx.gpu[item] = malloc(nbytes);
            uint64_t t0 = now_ns();
            encode_item(item, wl->encode_work, ctx.gpu[item], nbytes);
            encode_ns += now_ns() - t0;
            char key[KEY_LEN];
            item_key(item, key);
            if (ect_worker_save(worker, key, ctx.gpu[item], nbytes, NULL, NULL) != ECT_OK) {
                fprintf(stderr, "engine_loop: worker %u: save: %s\n", rank, ect_last_error());
                goto done;
            }
        }
        /* 4. End of the model run: the saves are submitted as one batch. */
        if (ect_worker_get_finished(worker) != ECT_OK)
            goto done;
        /* 5. The model reads loaded entries only after they landed (a CUDA
         *    engine orders this on its compute stream instead of waiting). */
        if (ect_worker_wait(worker) != ECT_OK) {
            fprintf(stderr, "engine_loop: worker %u: wait: %s\n", rank, ect_last_error());
            goto done;
        }
        const ect_step_meta_t *meta = ect_worker_metadata(worker);
        for (size_t i = 0; i < ect_step_meta_n_loads(meta); i++) {
            unsigned id;
            key_item(ect_step_meta_load(meta, i)->key, &id);
            size_t nbytes = item_tokens(id) * ctx.row_bytes;
            uint64_t t0 = now_ns();
            encode_item(id, wl->encode_work, fresh, nbytes);
            avoided_ns += now_ns() - t0;
            verified++;
            if (memcmp(fresh, ctx.gpu[id], nbytes) != 0)
                mismatches++;
        }
        /* 6. Report what landed; the scheduler marks saves ready, unpins loads. */
        ect_step_report_t *report = NULL;
        if (ect_worker_take_report(worker, &report) != ECT_OK)
            goto done;
        out.len = 0;
        size_t rlen = 0;
        if (report != NULL) {
            size_t cap = ect_step_report_encoded_size(report);
            uint8_t *rb = malloc(cap);
            if (rb == NULL || ect_step_report_encode(report, rb, cap, &rlen) != ECT_OK) {
                fprintf(stderr, "engine_loop: worker %u: report: %s\n", rank,
                        rb == NULL ? "out of memory" : ect_last_error());
                free(rb);
                ect_step_report_destroy(report);
                goto done;
            }
            msg_u32(&out, (uint32_t)rlen);
            msg_put(&out, rb, rlen);
            free(rb);
            /* Its memory collects the next step's outcomes. */
            ect_worker_recycle_report(worker, report);
        } else {
            msg_u32(&out, 0);
        }
        msg_u64(&out, encode_ns);
        msg_u64(&out, verified);
        msg_u64(&out, mismatches);
        msg_u64(&out, avoided_ns);
        if (msg_send(fd_out, &out) != 0)
            goto done;
        ect_worker_clear_metadata(worker);
        /* 7. Entries the scheduler dropped from the GPU cache. */
        uint32_t n_free;
        if (take(&c, &n_free, 4))
            goto done;
        for (uint32_t k = 0; k < n_free; k++) {
            if (take(&c, &item, 4) || item > max_item)
                goto done;
            free(ctx.gpu[item]);
            ctx.gpu[item] = NULL;
        }
    }
    rc = 0;
done:
    ect_worker_destroy(worker);
    for (unsigned i = 0; i <= max_item; i++)
        free(ctx.gpu[i]);
    free(ctx.gpu);
    free(fresh);
    free(in.data);
    free(out.data);
    return rc;
}

/* ---- the scheduler: a GPU encoder cache model and the step loop --------- */

struct gpu_cache {
    uint64_t capacity, used; /* tokens */
    uint64_t *last_used;     /* item -> step it was last used; 0 = not resident */
    unsigned max_item;
};

/* Make room for tokens, evicting least recently used items not used in this
 * step; their ids go to freed so the workers drop them too. */
static int
gpu_make_room(struct gpu_cache *g, uint64_t tokens, uint64_t step, struct msg *freed,
              uint32_t *n_freed)
{
    while (g->used + tokens > g->capacity) {
        unsigned victim = 0;
        uint64_t oldest = UINT64_MAX;
        for (unsigned i = 0; i <= g->max_item; i++)
            if (g->last_used[i] != 0 && g->last_used[i] < step && g->last_used[i] < oldest) {
                oldest = g->last_used[i];
                victim = i;
            }
        if (oldest == UINT64_MAX)
            return -1;
        g->last_used[victim] = 0;
        g->used -= item_tokens(victim);
        msg_u32(freed, victim);
        (*n_freed)++;
    }
    return 0;
}

static void
progress(const struct ect_loop_workload *wl, unsigned done, const struct ect_loop_summary *s)
{
    if (!wl->show_progress)
        return;
    fprintf(stderr, "\r  step %u: %u/%u requests, %" PRIu64 " CPU-tier hits, %" PRIu64 " encodes",
            s->steps, done, wl->n_requests, s->cpu_hits, s->misses);
    if (done == wl->n_requests)
        fprintf(stderr, "\n");
    fflush(stderr);
}

int
ect_loop_run(const struct ect_loop_workload *wl, struct ect_loop_summary *summary)
{
    memset(summary, 0, sizeof(*summary));
    if (wl->tp_size == 0 || wl->tp_size > MAX_TP || wl->requests_per_step == 0) {
        fprintf(stderr, "engine_loop: tp_size must be 1..%d and requests_per_step >= 1\n", MAX_TP);
        return 1;
    }
    /* The engine's --ec-transfer-config, exactly as a user would write it. */
    char json[256];
    snprintf(json, sizeof(json),
             "{\"ec_connector\": \"ECCPUConnector\", \"ec_role\": \"ec_both\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %" PRIu64 "}}",
             wl->cpu_bytes);
    ect_config_t cfg;
    ect_geometry_t geom;
    if (ect_config_parse(json, strlen(json), &cfg) != ECT_OK ||
        ect_geometry_init(wl->hidden_dim, ECT_DTYPE_BF16, cfg.cpu_bytes, &geom) != ECT_OK) {
        fprintf(stderr, "engine_loop: %s\n", ect_last_error());
        return 1;
    }
    char instance[64];
    snprintf(instance, sizeof(instance), "loop%d", (int)getpid());

    /* The scheduler side creates the region; the workers join it. */
    ect_scheduler_params_t sp = {
        .config = &cfg, .geometry = &geom, .instance_id = instance, .load_reports = wl->tp_size};
    ect_scheduler_t *sched;
    if (ect_scheduler_create(&sp, &sched) != ECT_OK) {
        fprintf(stderr, "engine_loop: scheduler: %s\n", ect_last_error());
        return 1;
    }
    /* A worker that dies closes its pipe: writing to it must fail with
     * EPIPE (the loop then stops cleanly) instead of killing the scheduler
     * with SIGPIPE before it can report and clean up.  The workers inherit
     * this too, should the scheduler die first. */
    struct sigaction ignore_pipe = {.sa_handler = SIG_IGN}, old_pipe;
    sigemptyset(&ignore_pipe.sa_mask);
    sigaction(SIGPIPE, &ignore_pipe, &old_pipe);

    int to_worker[MAX_TP], from_worker[MAX_TP];
    pid_t pids[MAX_TP];
    unsigned started = 0;
    int rc = 1;
    unsigned max_item = 0;
    for (unsigned r = 0; r < wl->n_requests; r++)
        for (unsigned i = 0; i < wl->requests[r].n_items; i++)
            if (wl->requests[r].items[i] > max_item)
                max_item = wl->requests[r].items[i];
    struct gpu_cache gpu = {wl->gpu_cache_tokens, 0, calloc(max_item + 1, sizeof(uint64_t)),
                            max_item};
    struct msg step_msg = {0}, enc = {0}, freed = {0}, reply = {0}, reports = {0};
    if (gpu.last_used == NULL)
        goto stop_workers;
    for (unsigned r = 0; r < wl->tp_size; r++) {
        int down[2], up[2];
        if (pipe(down) != 0 || pipe(up) != 0)
            goto stop_workers;
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
            goto stop_workers;
        if (pid == 0) {
            close(down[1]);
            close(up[0]);
            for (unsigned k = 0; k < started; k++) {
                close(to_worker[k]);
                close(from_worker[k]);
            }
            _exit(worker_main(r, down[0], up[1], wl, &cfg, &geom, instance));
        }
        close(down[0]);
        close(up[1]);
        to_worker[r] = down[1];
        from_worker[r] = up[0];
        pids[r] = pid;
        started++;
    }

    uint64_t t_start = now_ns();
    unsigned next = 0;
    /* Keep stepping until every request ran and ectier has nothing in flight. */
    while (next < wl->n_requests || ect_scheduler_has_pending_push_work(sched)) {
        uint64_t step = ++summary->steps;
        if (step > (uint64_t)wl->n_requests + 100) {
            fprintf(stderr, "engine_loop: push work never drained\n");
            goto stop_workers;
        }
        enc.len = freed.len = 0;
        uint32_t n_encode = 0, n_freed = 0;
        for (unsigned b = 0; b < wl->requests_per_step && next < wl->n_requests; b++, next++) {
            const struct ect_loop_request *lr = &wl->requests[next];
            ect_mm_feature_t feats[ECT_LOOP_MAX_ITEMS];
            char keys[ECT_LOOP_MAX_ITEMS][KEY_LEN];
            for (unsigned i = 0; i < lr->n_items; i++) {
                item_key(lr->items[i], keys[i]);
                feats[i] = (ect_mm_feature_t){.identifier = keys[i],
                                              .num_tokens = item_tokens(lr->items[i]),
                                              .has_local_input = 1};
            }
            char rid[32];
            snprintf(rid, sizeof(rid), "req-%u", next);
            ect_request_t req = {.request_id = rid, .features = feats, .n_features = lr->n_items};
            int available = 0;
            if (ect_scheduler_ensure_cache_available(sched, &req, &available) != ECT_OK ||
                !available) {
                fprintf(stderr, "engine_loop: request %s not admitted: %s\n", rid,
                        ect_last_error());
                goto stop_workers;
            }
            summary->requests++;
            for (unsigned i = 0; i < lr->n_items; i++) {
                unsigned item = lr->items[i];
                summary->items++;
                if (gpu.last_used[item] != 0) {
                    gpu.last_used[item] = step; /* still in the GPU cache */
                    summary->gpu_hits++;
                    continue;
                }
                if (gpu_make_room(&gpu, feats[i].num_tokens, step, &freed, &n_freed) != 0) {
                    fprintf(stderr, "engine_loop: GPU cache too small for one step\n");
                    goto stop_workers;
                }
                gpu.last_used[item] = step;
                gpu.used += feats[i].num_tokens;
                if (ect_scheduler_has_cache_item(sched, keys[i])) {
                    summary->cpu_hits++; /* loaded from the CPU tier, not encoded */
                } else {
                    summary->misses++;
                    msg_u32(&enc, item);
                    n_encode++;
                }
                if (ect_scheduler_update_state_after_alloc(sched, &req, i) != ECT_OK) {
                    fprintf(stderr, "engine_loop: %s\n", ect_last_error());
                    goto stop_workers;
                }
            }
            char *params = NULL;
            if (ect_scheduler_request_finished(sched, &req, &params) != ECT_OK) {
                fprintf(stderr, "engine_loop: %s\n", ect_last_error());
                goto stop_workers;
            }
            ect_free(params);
        }
        /* End of scheduling: the step's metadata goes to every worker. */
        ect_step_meta_t *meta;
        if (ect_scheduler_build_connector_meta(sched, &meta) != ECT_OK)
            goto stop_workers;
        size_t cap = ect_step_meta_encoded_size(meta), mlen = 0;
        uint8_t *mbytes = malloc(cap);
        if (mbytes == NULL || ect_step_meta_encode(meta, mbytes, cap, &mlen) != ECT_OK) {
            free(mbytes);
            ect_step_meta_destroy(meta);
            goto stop_workers;
        }
        /* Its memory holds the next step's saves and loads. */
        ect_scheduler_recycle_connector_meta(sched, meta);
        step_msg.len = 0;
        msg_u32(&step_msg, 0);
        msg_u32(&step_msg, (uint32_t)mlen);
        msg_put(&step_msg, mbytes, mlen);
        free(mbytes);
        msg_u32(&step_msg, n_encode);
        msg_put(&step_msg, enc.data, enc.len);
        msg_u32(&step_msg, n_freed);
        msg_put(&step_msg, freed.data, freed.len);
        for (unsigned r = 0; r < wl->tp_size; r++)
            if (msg_send(to_worker[r], &step_msg) != 0)
                goto stop_workers;
        /* The workers' reports, concatenated, as the engine aggregates them. */
        reports.len = 0;
        for (unsigned r = 0; r < wl->tp_size; r++) {
            if (msg_recv(from_worker[r], &reply) != 0) {
                fprintf(stderr, "engine_loop: worker %u died\n", r);
                goto stop_workers;
            }
            struct cursor c = {reply.data, reply.data + reply.len};
            uint32_t rlen;
            uint64_t stats[4];
            if (take(&c, &rlen, 4) || (size_t)(c.end - c.p) < rlen)
                goto stop_workers;
            msg_put(&reports, c.p, rlen);
            c.p += rlen;
            if (take(&c, stats, sizeof(stats)))
                goto stop_workers;
            if (r == 0) {
                summary->encode_ns += stats[0];
                summary->avoided_encode_ns += stats[3];
            }
            summary->verified += stats[1];
            summary->mismatches += stats[2];
        }
        if (ect_scheduler_update_connector_output(sched, reports.data, reports.len) != ECT_OK) {
            fprintf(stderr, "engine_loop: %s\n", ect_last_error());
            goto stop_workers;
        }
        progress(wl, next, summary);
    }
    summary->wall_ns = now_ns() - t_start;
    ect_metrics_t m;
    if (ect_scheduler_metrics(sched, &m) != ECT_OK) {
        fprintf(stderr, "engine_loop: %s\n", ect_last_error());
        goto stop_workers;
    }
    summary->evictions = m.cache.evicted_entries;
    summary->saves = m.saves_completed;
    summary->save_bytes = m.save_bytes;
    summary->save_ns = m.save_ns;
    summary->load_bytes = m.load_bytes;
    summary->load_ns = m.load_ns;
    rc = summary->mismatches == 0 ? 0 : 1;
    if (summary->mismatches != 0)
        fprintf(stderr, "engine_loop: %" PRIu64 " reloaded entries differ from a fresh encode\n",
                summary->mismatches);

stop_workers:
    step_msg.len = 0;
    msg_u32(&step_msg, STEP_STOP);
    for (unsigned r = 0; r < started; r++) {
        msg_send(to_worker[r], &step_msg);
        close(to_worker[r]);
        close(from_worker[r]);
    }
    for (unsigned r = 0; r < started; r++) {
        int st;
        if (waitpid(pids[r], &st, 0) == pids[r] && (!WIFEXITED(st) || WEXITSTATUS(st) != 0))
            rc = 1;
    }
    ect_scheduler_destroy(sched);
    free(gpu.last_used);
    free(step_msg.data);
    free(enc.data);
    free(freed.data);
    free(reply.data);
    free(reports.data);
    sigaction(SIGPIPE, &old_pipe, NULL);
    return rc;
}

/* ---- the default workload ------------------------------------------------ */

#define DEFAULT_REQUESTS 240
#define DEFAULT_IMAGES   48

void
ect_loop_default_workload(struct ect_loop_workload *wl)
{
    static struct ect_loop_request requests[DEFAULT_REQUESTS];
    /* A skewed, repeatable mix: a few popular images, a long tail. */
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (unsigned r = 0; r < DEFAULT_REQUESTS; r++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        requests[r].n_items = 1 + (unsigned)(x % 3);
        for (unsigned i = 0; i < requests[r].n_items; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            unsigned u = (unsigned)(x % 1000);
            requests[r].items[i] = (u * u / 1000) * DEFAULT_IMAGES / 1000;
        }
    }
    *wl = (struct ect_loop_workload){
        .requests = requests,
        .n_requests = DEFAULT_REQUESTS,
        .requests_per_step = 4,
        .hidden_dim = 3584,                  /* Qwen2-VL-7B: 7 KiB rows in bf16 */
        .cpu_bytes = 32ull << 20,            /* about 28 of the 48 images: evictions */
        .gpu_cache_tokens = 12 * MAX_TOKENS, /* one step's worst case: a dozen images */
        .encode_work = 30,                   /* ~17 ms per 256-token item: a small ViT */
        .tp_size = 2,
        .show_progress = isatty(STDERR_FILENO),
    };
}

static int
cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double
ect_loop_encode_ms(uint64_t tokens, uint64_t hidden, unsigned encode_work)
{
    size_t nbytes = (size_t)(tokens * hidden * 2);
    uint8_t *buf = malloc(nbytes);
    if (buf == NULL)
        return 0.0;
    /* The median of a few runs into memory already touched, so neither a
     * stray preemption nor first-touch page faults count as encoding. */
    enum { RUNS = 5 };
    uint64_t ns[RUNS];
    memset(buf, 0, nbytes);
    for (unsigned r = 0; r < RUNS; r++) {
        uint64_t t0 = now_ns();
        encode_item(1, encode_work, buf, nbytes);
        ns[r] = now_ns() - t0;
    }
    free(buf);
    qsort(ns, RUNS, sizeof(ns[0]), cmp_u64);
    return (double)ns[RUNS / 2] / 1e6;
}

double
ect_loop_load_ms_per_rank(const struct ect_loop_workload *wl, const struct ect_loop_summary *s)
{
    return wl->tp_size ? (double)s->load_ns / 1e6 / wl->tp_size : 0.0;
}

double
ect_loop_reload_speedup(const struct ect_loop_workload *wl, const struct ect_loop_summary *s)
{
    double load_ms = ect_loop_load_ms_per_rank(wl, s);
    return load_ms > 0 ? ((double)s->avoided_encode_ns / 1e6) / load_ms : 0.0;
}

void
ect_loop_format_speedup(char *buf, size_t len, double speedup)
{
    snprintf(buf, len, speedup >= 10 ? "%.0f\u00d7" : "%.1f\u00d7", speedup);
}

/* bytes per ns is GB/s (10^9 bytes a second). */
static double
gb_per_s(uint64_t bytes, double ns)
{
    return ns > 0 ? (double)bytes / ns : 0.0;
}

void
ect_loop_print_summary(const struct ect_loop_workload *wl, const struct ect_loop_summary *s)
{
    unsigned tp = wl->tp_size ? wl->tp_size : 1;
    double load_ms = ect_loop_load_ms_per_rank(wl, s);
    char speedup[32];
    ect_loop_format_speedup(speedup, sizeof(speedup), ect_loop_reload_speedup(wl, s));
    printf("local CPU tier: %u requests, %" PRIu64 " media items, %u steps, tp=%u "
           "(a scheduler, %u workers)\n",
           s->requests, s->items, s->steps, wl->tp_size, wl->tp_size);
    printf("  hits by tier       GPU cache %" PRIu64 ", CPU tier %" PRIu64
           " (reloaded, not encoded), misses %" PRIu64 "\n",
           s->gpu_hits, s->cpu_hits, s->misses);
    printf("  evictions          %" PRIu64 " CPU-tier entries, to make room for new saves\n",
           s->evictions);
    printf("  saves              %" PRIu64 " entries, %.1f MiB: the copies took %.1f ms, "
           "%.2f GB/s\n",
           s->saves, (double)s->save_bytes / 1048576.0, (double)s->save_ns / 1e6,
           gb_per_s(s->save_bytes, (double)s->save_ns));
    printf("  loads              %" PRIu64 " entries, %.1f MiB a rank: the copies took %.1f ms "
           "a rank, %.2f GB/s\n",
           s->cpu_hits, (double)s->load_bytes / tp / 1048576.0, load_ms,
           gb_per_s(s->load_bytes, (double)s->load_ns));
    printf("  copy times         submit to landed, timed by the workers, with nothing else "
           "running\n");
    printf("  verified reloads   %" PRIu64 " (%" PRIu64 " x %u ranks) against a fresh encode, "
           "byte for byte: %" PRIu64 " mismatches\n",
           s->verified, s->cpu_hits, wl->tp_size, s->mismatches);
    printf("  encode time spent  %.1f ms on the %" PRIu64 " misses\n", (double)s->encode_ns / 1e6,
           s->misses);
    printf("  encode avoided     %.1f ms: the %" PRIu64
           " reloaded items, re-encoded to verify them\n",
           (double)s->avoided_encode_ns / 1e6, s->cpu_hits);
    printf(
        "  reload vs encode   %.1f ms of load copies instead of %.1f ms of encoding: %s faster\n",
        load_ms, (double)s->avoided_encode_ns / 1e6, speedup);
    printf("  wall time          %.1f ms\n", (double)s->wall_ns / 1e6);
}

#ifndef ECT_EXAMPLE_NO_MAIN
int
main(void)
{
    struct ect_loop_workload wl;
    struct ect_loop_summary s;
    ect_loop_default_workload(&wl);
    int rc = ect_loop_run(&wl, &s);
    ect_loop_print_summary(&wl, &s);
    return rc;
}
#endif
