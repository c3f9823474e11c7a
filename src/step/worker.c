/*
 * The worker side of the step protocol (include/ectier/worker.h).
 *
 * Saves of a step are collected into one copy plan and submitted together by
 * get_finished; loads are submitted together by start_load.  Each submitted
 * batch is remembered in `inflight` (in submission order) with the keys or
 * transfer ids it completes; take_report polls them and reports only what
 * has landed.  Items that end without a copy (a save dropped by
 * clear_metadata, a save of the step that the engine never made or that was
 * refused, loads of an aborted start_load) go straight into `carry`, which
 * the next take_report hands over, so every bound load is reported exactly
 * once by every rank, and every bound save exactly once by the save rank.
 *
 * No outcome is ever lost to a failed allocation (step/report.h): binding
 * a step's metadata reserves room in carry for every outcome the worker
 * owes (owed_saves, owed_loads, owed_key_bytes: the bound step's and those
 * of batches in flight); each outcome then moves into carry without
 * allocating, and a fresh carry is reserved the same way before it
 * replaces a taken one.  So every failure after the bind is reported, and
 * the scheduler releases what it pinned.
 *
 * Nothing is allocated per step once the worker has seen its largest step:
 * the bound metadata is decoded into one kept value, the keys of saves
 * queued or in flight and the transfer ids of loads in flight live in
 * arrays kept across steps (each batch owns a stretch of them, in
 * submission order), the plans and batch records are reused, and a report
 * handed back with ect_worker_recycle_report becomes the next carry.
 */
#include <stdlib.h>
#include <string.h>

#include <ectier/worker.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "copy/cpu.h"
#include "copy/plan.h"
#include "step/instance_region.h"
#include "step/report.h"

/* One submitted copy batch.  Its keys are the next n_keys of the worker's
 * flight keys and its transfer ids the next n_tids of its flight tids,
 * after those of the batches before it. */
struct batch {
    uint64_t ticket;
    ect_copy_dir_t dir;
    size_t n_keys; /* saves completed by this batch */
    size_t n_tids; /* loads completed by this batch */
    uint64_t bytes;
    uint64_t t_submit_ns;
    uint64_t t_landed_ns; /* set by ect_worker_wait, which retires the ticket */
    int settled;
    ect_status_t result;
};

/* Keys of the saves in flight (every batch's, in order), then of those
 * queued for the next batch: NUL-terminated, back to back in `bytes`, in
 * the same order as their offsets. */
struct flight_keys {
    size_t *off;
    size_t n, cap;
    char *bytes;
    size_t used, bytes_cap;
};

struct ect_worker {
    ect_geometry_t geom;
    ect_region_t *region;
    ect_copy_engine_t *engine;
    int own_engine;
    int save_rank;
    ect_copy_region_view_t view;

    ect_step_meta_t *meta;       /* the bound step: meta_store, or NULL */
    ect_step_meta_t *meta_store; /* kept across steps */
    int loads_started;
    /* Save rank: per save of the bound step, whether ect_worker_save
     * queued it (a second save is refused). */
    unsigned char *queued;
    size_t cap_queued;
    /* Outcomes not yet in a report, all of them reserved in carry. */
    size_t owed_saves, owed_loads, owed_key_bytes;
    ect_copy_plan_t save_plan;
    size_t n_queued; /* the last n_queued flight keys: saves not submitted yet */
    uint64_t save_bytes;
    void *save_stream;
    ect_copy_plan_t load_plan;
    const ect_step_item_t **load_items; /* start_load's scratch, in block order */
    size_t cap_load_items;

    struct flight_keys keys;
    uint64_t *tids; /* loads in flight, batch after batch */
    size_t n_tids, cap_tids;
    struct batch *inflight;
    size_t n_inflight, cap_inflight;
    ect_step_report_t *carry;
    ect_step_report_t *spare; /* a recycled report: the next carry */
    /* A report handed out and given back undelivered, and its copy status:
     * the next take_report hands it out first. */
    ect_step_report_t *given_back;
    ect_status_t given_back_status;
};

static ect_status_t
reserve_more(void **arr, size_t *cap, size_t used, size_t n, size_t size, const char *what)
{
    return ect__array_reserve(arr, cap, used, n, size) == 0
               ? ECT_OK
               : ect__error(ECT_ERR_NO_MEMORY, "%s: out of memory", what);
}

ect_status_t
ect_worker_create(const ect_worker_params_t *params, ect_worker_t **worker_p)
{
    if (params == NULL || params->config == NULL || params->geometry == NULL || worker_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker: NULL params, config or geometry");
    ect_status_t st = ect_config_validate(params->config);
    if (st != ECT_OK)
        return st;
    ect_worker_t *w = ect__calloc(1, sizeof(*w));
    if (w == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "worker: out of memory");
    w->geom = *params->geometry;
    w->save_rank = params->tp_rank == 0 && params->pcp_rank == 0;
    ect__copy_plan_init(&w->save_plan);
    ect__copy_plan_init(&w->load_plan);
    if ((st = ect_step_report_create(&w->carry)) != ECT_OK)
        goto err_free;
    st = ect__instance_region_open(params->config, &w->geom, params->instance_id, params->dp_rank,
                                   params->region_dir, 0, &w->region);
    if (st != ECT_OK)
        goto err_carry;
    w->view.base = ect_region_data(w->region);
    w->view.block_size = w->geom.block_size_bytes;
    w->view.num_blocks = w->geom.num_blocks;
    if (params->engine != NULL) {
        w->engine = params->engine;
    } else if (params->memory == ECT_WORKER_CUDA_MEMORY) {
        ect_copy_cuda_params_t cp = {.device = params->cuda_device};
        if ((st = ect_copy_engine_create_cuda(&cp, &w->engine)) != ECT_OK)
            goto err_region;
        w->own_engine = 1;
    } else if (params->memory == ECT_WORKER_HOST_MEMORY) {
        ect_copy_cpu_params_t cp = ect__copy_cpu_params_of(params->config);
        if ((st = ect_copy_engine_create_cpu(&cp, &w->engine)) != ECT_OK)
            goto err_region;
        w->own_engine = 1;
    } else {
        st = ect__error(ECT_ERR_INVALID_ARG, "worker: memory kind %d is not host or CUDA",
                        (int)params->memory);
        goto err_region;
    }
    st = ect_copy_engine_register_host(w->engine, w->view.base,
                                       (size_t)(w->geom.num_blocks * w->geom.block_size_bytes));
    if (st != ECT_OK)
        goto err_engine;
    *worker_p = w;
    return ECT_OK;

err_engine:
    if (w->own_engine)
        ect_copy_engine_destroy(w->engine);
err_region:
    ect_region_close(w->region);
err_carry:
    ect_step_report_destroy(w->carry);
err_free:
    ect__free(w);
    return st;
}

bool
ect_worker_is_save_rank(const ect_worker_t *worker)
{
    return worker != NULL && worker->save_rank;
}

const ect_step_meta_t *
ect_worker_metadata(const ect_worker_t *worker)
{
    return worker != NULL ? worker->meta : NULL;
}

size_t
ect_worker_in_flight(const ect_worker_t *worker)
{
    return worker != NULL ? worker->n_inflight : 0;
}

/* Move a save's outcome into rep, which has room reserved. */
static void
report_save(ect_worker_t *w, ect_step_report_t *rep, const char *key, int failed)
{
    if (ect__step_report_put_save(rep, key, failed) != ECT_OK)
        ect__log_last_error(ECT_LOG_ERROR, "worker (a save reported without a reservation)");
    w->owed_saves--;
    w->owed_key_bytes -= strlen(key) + 1;
}

static void
report_load(ect_worker_t *w, ect_step_report_t *rep, uint64_t transfer_id)
{
    if (ect__step_report_push_load(rep, transfer_id) != ECT_OK)
        ect__log_last_error(ECT_LOG_ERROR, "worker (a load reported without a reservation)");
    w->owed_loads--;
}

static const char *
flight_key(const ect_worker_t *w, size_t i)
{
    return w->keys.bytes + w->keys.off[i];
}

ect_status_t
ect_worker_bind_metadata(ect_worker_t *w, const void *bytes, size_t len)
{
    if (w == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker bind: NULL worker");
    if (w->meta != NULL)
        return ect__error(ECT_ERR_STATE, "worker bind: metadata already bound this step");
    ect_status_t st;
    if (w->meta_store == NULL && (st = ect_step_meta_create(&w->meta_store)) != ECT_OK)
        return st;
    ect_step_meta_t *meta = w->meta_store;
    if ((st = ect_step_meta_decode_into(meta, bytes, len, w->geom.num_blocks)) != ECT_OK)
        return st;
    /* Everything that reporting the step's outcomes will need, now, while
     * failing still changes nothing. */
    size_t n_saves = w->save_rank ? ect_step_meta_n_saves(meta) : 0;
    size_t n_loads = ect_step_meta_n_loads(meta);
    size_t key_bytes = 0;
    for (size_t i = 0; i < n_saves; i++)
        key_bytes += strlen(ect_step_meta_save(meta, i)->key) + 1;
    if ((st = reserve_more((void **)&w->queued, &w->cap_queued, 0, n_saves, 1, "worker bind")) !=
            ECT_OK ||
        (st = ect__step_report_reserve(w->carry, w->owed_saves + n_saves, w->owed_saves + n_saves,
                                       w->owed_loads + n_loads, w->owed_key_bytes + key_bytes)) !=
            ECT_OK) {
        ect_step_meta_clear(meta);
        return st;
    }
    if (n_saves > 0)
        memset(w->queued, 0, n_saves);
    w->owed_saves += n_saves;
    w->owed_loads += n_loads;
    w->owed_key_bytes += key_bytes;
    w->meta = meta;
    w->loads_started = 0;
    return ECT_OK;
}

/* Drop the last n flight keys (their outcomes were reported). */
static void
drop_last_keys(ect_worker_t *w, size_t n)
{
    w->keys.n -= n;
    w->keys.used =
        w->keys.n > 0 ? w->keys.off[w->keys.n - 1] + strlen(flight_key(w, w->keys.n - 1)) + 1 : 0;
}

/* Saves queued but never submitted end as failed: their entries' blocks are
 * freed by the scheduler instead of staying not-ready forever. */
static void
fail_queued_saves(ect_worker_t *w)
{
    for (size_t i = w->keys.n - w->n_queued; i < w->keys.n; i++)
        report_save(w, w->carry, flight_key(w, i), 1);
    drop_last_keys(w, w->n_queued);
    w->n_queued = 0;
    w->save_bytes = 0;
    ect__copy_plan_reset(&w->save_plan);
}

void
ect_worker_clear_metadata(ect_worker_t *w)
{
    if (w == NULL || w->meta == NULL)
        return;
    if (w->n_queued > 0) {
        ECT_LOG_W("worker: %zu saves queued but not submitted before clear_metadata", w->n_queued);
        fail_queued_saves(w);
    }
    /* Saves of the step that this rank never queued (the engine did not
     * encode the item, or ect_worker_save refused it) end as failed: the
     * scheduler then frees their blocks instead of keeping a not-ready entry,
     * and its pending push work, forever. */
    if (w->save_rank)
        for (size_t i = 0; i < ect_step_meta_n_saves(w->meta); i++)
            if (!w->queued[i])
                report_save(w, w->carry, ect_step_meta_save(w->meta, i)->key, 1);
    /* Loads never started are still reported so their pins are released. */
    if (!w->loads_started)
        for (size_t i = 0; i < ect_step_meta_n_loads(w->meta); i++)
            report_load(w, w->carry, ect_step_meta_load(w->meta, i)->transfer_id);
    ect_step_meta_clear(w->meta);
    w->meta = NULL;
}

static ect_status_t
push_batch(ect_worker_t *w, const struct batch *b)
{
    ect_status_t st = reserve_more((void **)&w->inflight, &w->cap_inflight, w->n_inflight, 1,
                                   sizeof(*b), "worker: tracking copies");
    if (st == ECT_OK)
        w->inflight[w->n_inflight++] = *b;
    return st;
}

static int
cmp_load_by_block(const void *a, const void *b)
{
    const ect_step_item_t *x = *(const ect_step_item_t *const *)a;
    const ect_step_item_t *y = *(const ect_step_item_t *const *)b;
    uint64_t fx = x->n_runs ? x->runs[0].first : 0, fy = y->n_runs ? y->runs[0].first : 0;
    return fx < fy ? -1 : fx > fy;
}

ect_status_t
ect_worker_start_load(ect_worker_t *w, ect_load_target_fn target, void *user, void *compute_stream)
{
    if (w == NULL || target == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker start_load: NULL argument");
    if (w->meta == NULL || w->loads_started)
        return ect__error(ECT_ERR_STATE, "worker start_load: %s",
                          w->meta == NULL ? "no metadata bound" : "loads already started");
    w->loads_started = 1;
    size_t n = ect_step_meta_n_loads(w->meta);
    if (n == 0)
        return ECT_OK;
    struct batch b = {.dir = ECT_COPY_LOAD};
    size_t tids_before = w->n_tids;
    ect_status_t st = reserve_more((void **)&w->load_items, &w->cap_load_items, 0, n,
                                   sizeof(*w->load_items), "worker start_load");
    if (st != ECT_OK || (st = reserve_more((void **)&w->tids, &w->cap_tids, w->n_tids, n,
                                           sizeof(*w->tids), "worker start_load")) != ECT_OK)
        goto err_report;
    const ect_step_item_t **items = w->load_items;
    for (size_t i = 0; i < n; i++)
        items[i] = ect_step_meta_load(w->meta, i);
    /* Block order gives the copy engine the longest runs. */
    qsort(items, n, sizeof(*items), cmp_load_by_block);
    ect__copy_plan_reset(&w->load_plan);
    for (size_t i = 0; i < n; i++) {
        const ect_step_item_t *it = items[i];
        size_t nbytes = (size_t)(it->n_blocks * w->geom.block_size_bytes);
        void *dst = NULL;
        if ((st = target(user, it->key, it->n_blocks, nbytes, &dst)) != ECT_OK)
            goto err_report;
        if (dst == NULL && nbytes > 0) {
            st = ect__error(ECT_ERR_INVALID_ARG, "worker start_load: no destination for '%s'",
                            it->key);
            goto err_report;
        }
        st = ect__copy_plan_add(&w->load_plan, ECT_COPY_LOAD, &w->view, it->runs, it->n_runs, dst,
                                nbytes);
        if (st != ECT_OK)
            goto err_report;
        w->tids[w->n_tids++] = it->transfer_id;
        b.n_tids++;
        b.bytes += nbytes;
    }
    ect_copy_batch_t cb = {.dir = ECT_COPY_LOAD,
                           .ops = w->load_plan.ops,
                           .n_ops = w->load_plan.n_ops,
                           .compute_stream = compute_stream};
    b.t_submit_ns = ect__now_ns();
    if ((st = ect_copy_engine_submit(w->engine, &cb, &b.ticket)) != ECT_OK)
        goto err_report;
    if ((st = push_batch(w, &b)) != ECT_OK) {
        /* The copy runs on; wait for it so nothing writes after we report. */
        ect__log_failure(ect_copy_engine_wait(w->engine, b.ticket), "worker");
        goto err_report;
    }
    return ECT_OK;

err_report:
    w->n_tids = tids_before;
    for (size_t i = 0; i < n; i++)
        report_load(w, w->carry, ect_step_meta_load(w->meta, i)->transfer_id);
    return st;
}

ect_status_t
ect_worker_save(ect_worker_t *w, const char *key, const void *src, size_t nbytes,
                void *compute_stream, int *queued_p)
{
    if (w == NULL || key == NULL || (src == NULL && nbytes > 0))
        return ect__error(ECT_ERR_INVALID_ARG, "worker save: NULL argument");
    if (queued_p != NULL)
        *queued_p = 0;
    if (!w->save_rank || w->meta == NULL)
        return ECT_OK;
    const ect_step_item_t *it = ect_step_meta_find_save(w->meta, key);
    if (it == NULL)
        return ECT_OK;
    size_t idx = (size_t)(it - ect_step_meta_save(w->meta, 0));
    if (w->queued[idx])
        return ect__error(ECT_ERR_EXISTS, "worker save: '%s' was already saved this step", key);
    /* Everything that can fail before the plan grows: a save that is
     * refused must leave no copy behind (its blocks may be freed). */
    size_t klen = strlen(it->key) + 1;
    ect_status_t st = reserve_more((void **)&w->keys.off, &w->keys.cap, w->keys.n, 1,
                                   sizeof(*w->keys.off), "worker save");
    if (st == ECT_OK)
        st = reserve_more((void **)&w->keys.bytes, &w->keys.bytes_cap, w->keys.used, klen, 1,
                          "worker save");
    if (st != ECT_OK)
        return st;
    /* Last, as it cannot be undone; it changes nothing when it fails (and
     * clear_metadata then reports the save failed). */
    st = ect__copy_plan_add(&w->save_plan, ECT_COPY_SAVE, &w->view, it->runs, it->n_runs,
                            (void *)src, nbytes);
    if (st != ECT_OK)
        return st;
    memcpy(w->keys.bytes + w->keys.used, it->key, klen);
    w->keys.off[w->keys.n++] = w->keys.used;
    w->keys.used += klen;
    w->queued[idx] = 1;
    w->n_queued++;
    w->save_bytes += nbytes;
    if (w->n_queued == 1)
        w->save_stream = compute_stream;
    if (queued_p != NULL)
        *queued_p = 1;
    return ECT_OK;
}

ect_status_t
ect_worker_get_finished(ect_worker_t *w)
{
    if (w == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker get_finished: NULL worker");
    if (w->n_queued == 0)
        return ECT_OK;
    struct batch b = {.dir = ECT_COPY_SAVE, .bytes = w->save_bytes, .n_keys = w->n_queued};
    ect_copy_batch_t cb = {.dir = ECT_COPY_SAVE,
                           .ops = w->save_plan.ops,
                           .n_ops = w->save_plan.n_ops,
                           .compute_stream = w->save_stream};
    b.t_submit_ns = ect__now_ns();
    ect_status_t st = ect_copy_engine_submit(w->engine, &cb, &b.ticket);
    if (st != ECT_OK) {
        fail_queued_saves(w);
        return st;
    }
    if ((st = push_batch(w, &b)) != ECT_OK) {
        ect__log_failure(ect_copy_engine_wait(w->engine, b.ticket), "worker");
        fail_queued_saves(w);
        return st;
    }
    /* The batch owns the queued keys now. */
    w->n_queued = 0;
    w->save_bytes = 0;
    ect__copy_plan_reset(&w->save_plan);
    return ECT_OK;
}

/* Move flight key `from` down to index `to` (to <= from), its bytes to
 * *used_p, which then moves past them. */
static void
keep_key(ect_worker_t *w, size_t from, size_t to, size_t *used_p)
{
    const char *key = flight_key(w, from);
    size_t len = strlen(key) + 1;
    memmove(w->keys.bytes + *used_p, key, len);
    w->keys.off[to] = *used_p;
    *used_p += len;
}

ect_status_t
ect_worker_take_report(ect_worker_t *w, ect_step_report_t **report_p)
{
    if (w == NULL || report_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker take_report: NULL argument");
    if (w->given_back != NULL) {
        *report_p = w->given_back;
        w->given_back = NULL;
        return w->given_back_status;
    }
    /* The carry that replaces the one handed out, with room for every
     * outcome still owed; until there is one, the completions stay in carry
     * for the next call. */
    ect_status_t st = ECT_OK;
    if (w->spare == NULL)
        st = ect_step_report_create(&w->spare);
    if (st == ECT_OK)
        st = ect__step_report_reserve(w->spare, w->owed_saves, w->owed_saves, w->owed_loads,
                                      w->owed_key_bytes);
    if (st != ECT_OK)
        return st;
    ect_status_t failure = ECT_OK;
    ect_step_report_t *rep = w->carry;
    size_t kept = 0, key = 0, tid = 0, kept_keys = 0, kept_tids = 0, used = 0;
    uint64_t now = ect__now_ns();
    for (size_t i = 0; i < w->n_inflight; i++) {
        struct batch *b = &w->inflight[i];
        ect_status_t bst = b->settled ? b->result : ect_copy_engine_query(w->engine, b->ticket);
        uint64_t landed = b->settled ? b->t_landed_ns : now;
        if (bst == ECT_ERR_BUSY) {
            for (size_t k = 0; k < b->n_keys; k++)
                keep_key(w, key + k, kept_keys++, &used);
            for (size_t k = 0; k < b->n_tids; k++)
                w->tids[kept_tids++] = w->tids[tid + k];
            key += b->n_keys;
            tid += b->n_tids;
            w->inflight[kept++] = *b;
            continue;
        }
        if (bst != ECT_OK) {
            failure = bst;
            ECT_LOG_E("worker: copy batch %llu failed: %s", (unsigned long long)b->ticket,
                      ect_last_error());
        }
        ect_step_copy_stats_t cs = {0};
        for (size_t k = 0; k < b->n_keys; k++)
            report_save(w, rep, flight_key(w, key++), bst != ECT_OK);
        for (size_t k = 0; k < b->n_tids; k++)
            report_load(w, rep, w->tids[tid++]);
        if (bst == ECT_OK) {
            if (b->dir == ECT_COPY_SAVE) {
                cs.save_bytes = b->bytes;
                cs.save_ns = landed - b->t_submit_ns;
                cs.save_batches = 1;
            } else {
                cs.load_bytes = b->bytes;
                cs.load_ns = landed - b->t_submit_ns;
                cs.load_batches = 1;
            }
            ect_step_report_add_stats(rep, &cs);
        }
    }
    /* The queued saves' keys follow the batches'. */
    for (; key < w->keys.n; key++)
        keep_key(w, key, kept_keys++, &used);
    w->keys.n = kept_keys;
    w->keys.used = used;
    w->n_tids = kept_tids;
    w->n_inflight = kept;
    if (ect_step_report_n_saves(rep) + ect_step_report_n_loads(rep) +
            ect_step_report_n_failed_saves(rep) ==
        0) {
        *report_p = NULL;
        return failure;
    }
    w->carry = w->spare;
    w->spare = NULL;
    *report_p = rep;
    return failure;
}

void
ect_worker_recycle_report(ect_worker_t *w, ect_step_report_t *report)
{
    if (report == NULL)
        return;
    if (w == NULL || w->spare != NULL) {
        ect_step_report_destroy(report);
        return;
    }
    ect_step_report_clear(report);
    w->spare = report;
}

void
ect__worker_give_back_report(ect_worker_t *w, ect_step_report_t *report, ect_status_t copy_status)
{
    if (w->given_back != NULL) {
        ECT_LOG_E("worker: a second report given back; the first is kept");
        ect_step_report_destroy(report);
        return;
    }
    w->given_back = report;
    w->given_back_status = copy_status;
}

void *
ect__worker_region_data(const ect_worker_t *w)
{
    return w->view.base;
}

ect_status_t
ect_worker_wait(ect_worker_t *w)
{
    if (w == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker wait: NULL worker");
    ect_status_t failure = ECT_OK;
    for (size_t i = 0; i < w->n_inflight; i++) {
        struct batch *b = &w->inflight[i];
        if (b->settled)
            continue;
        b->result = ect_copy_engine_wait(w->engine, b->ticket);
        b->t_landed_ns = ect__now_ns();
        b->settled = 1;
        if (b->result != ECT_OK)
            failure = b->result;
    }
    return failure;
}

void
ect_worker_destroy(ect_worker_t *w)
{
    if (w == NULL)
        return;
    ect__log_failure(ect_worker_wait(w), "worker");
    ect__free(w->inflight);
    ect_worker_clear_metadata(w);
    ect_step_meta_destroy(w->meta_store);
    ect__free(w->queued);
    ect__free(w->keys.off);
    ect__free(w->keys.bytes);
    ect__free(w->tids);
    ect__free(w->load_items);
    ect__copy_plan_cleanup(&w->save_plan);
    ect__copy_plan_cleanup(&w->load_plan);
    ect__log_failure(ect_copy_engine_unregister_host(w->engine, w->view.base), "worker");
    if (w->own_engine)
        ect_copy_engine_destroy(w->engine);
    ect_region_close(w->region);
    ect_step_report_destroy(w->carry);
    ect_step_report_destroy(w->spare);
    ect_step_report_destroy(w->given_back);
    ect__free(w);
}
