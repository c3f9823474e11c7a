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
 * owes (owed_saves, owed_loads: the bound step's and those of batches in
 * flight) and copies the step's save keys (pending_keys) up front; each
 * outcome then moves into carry without allocating, and a fresh carry is
 * reserved the same way before it replaces a taken one.  So every failure
 * after the bind is reported, and the scheduler releases what it pinned.
 *
 * The plan, the batch records and their arrays are reused across steps.
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

struct batch {
    uint64_t ticket;
    ect_copy_dir_t dir;
    char **keys; /* saves completed by this batch */
    size_t n_keys;
    uint64_t *tids; /* loads completed by this batch */
    size_t n_tids;
    uint64_t bytes;
    uint64_t t_submit_ns;
    uint64_t t_landed_ns; /* set by ect_worker_wait, which retires the ticket */
    int settled;
    ect_status_t result;
};

struct ect_worker {
    ect_geometry_t geom;
    ect_region_t *region;
    ect_copy_engine_t *engine;
    int own_engine;
    int save_rank;
    ect_copy_region_view_t view;

    ect_step_meta_t *meta;
    int loads_started;
    /* Save rank: per save of the bound step, its key (owned) until
     * ect_worker_save queues it (then NULL: a second save is refused). */
    char **pending_keys;
    /* Outcomes not yet in a report, all of them reserved in carry. */
    size_t owed_saves, owed_loads;
    ect_copy_plan_t save_plan;
    char **save_keys;
    size_t n_save_keys, cap_save_keys;
    uint64_t save_bytes;
    void *save_stream;
    ect_copy_plan_t load_plan;

    struct batch *inflight;
    size_t n_inflight, cap_inflight;
    ect_step_report_t *carry;
    /* A report handed out and given back undelivered, and its copy status:
     * the next take_report hands it out first. */
    ect_step_report_t *given_back;
    ect_status_t given_back_status;
};

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

static void
free_keys(char **keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ect__free(keys[i]);
    ect__free(keys);
}

static void
drop_batch(struct batch *b)
{
    free_keys(b->keys, b->n_keys);
    ect__free(b->tids);
}

/* Move a save's outcome (key owned) into rep, which has room reserved. */
static void
report_save(ect_worker_t *w, ect_step_report_t *rep, char *key, int failed)
{
    if (ect__step_report_adopt_save(rep, key, failed) != ECT_OK)
        ect__log_last_error(ECT_LOG_ERROR, "worker (a save reported without a reservation)");
    w->owed_saves--;
}

static void
report_load(ect_worker_t *w, ect_step_report_t *rep, uint64_t transfer_id)
{
    if (ect__step_report_push_load(rep, transfer_id) != ECT_OK)
        ect__log_last_error(ECT_LOG_ERROR, "worker (a load reported without a reservation)");
    w->owed_loads--;
}

ect_status_t
ect_worker_bind_metadata(ect_worker_t *w, const void *bytes, size_t len)
{
    if (w == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker bind: NULL worker");
    if (w->meta != NULL)
        return ect__error(ECT_ERR_STATE, "worker bind: metadata already bound this step");
    ect_step_meta_t *meta;
    ect_status_t st = ect_step_meta_decode(bytes, len, w->geom.num_blocks, &meta);
    if (st != ECT_OK)
        return st;
    /* Everything that reporting the step's outcomes will need, now, while
     * failing still changes nothing. */
    size_t n_saves = w->save_rank ? ect_step_meta_n_saves(meta) : 0;
    size_t n_loads = ect_step_meta_n_loads(meta);
    char **keys = NULL;
    if (n_saves > 0 && (keys = ect__calloc(n_saves, sizeof(*keys))) == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "worker bind: out of memory");
        goto err_meta;
    }
    for (size_t i = 0; i < n_saves; i++)
        if ((keys[i] = ect__strdup(ect_step_meta_save(meta, i)->key)) == NULL) {
            st = ect__error(ECT_ERR_NO_MEMORY, "worker bind: out of memory");
            goto err_keys;
        }
    st = ect__step_report_reserve(w->carry, w->owed_saves + n_saves, w->owed_saves + n_saves,
                                  w->owed_loads + n_loads);
    if (st != ECT_OK)
        goto err_keys;
    w->owed_saves += n_saves;
    w->owed_loads += n_loads;
    w->pending_keys = keys;
    w->meta = meta;
    w->loads_started = 0;
    return ECT_OK;

err_keys:
    free_keys(keys, n_saves);
err_meta:
    ect_step_meta_destroy(meta);
    return st;
}

/* Saves queued but never submitted end as failed: their entries' blocks are
 * freed by the scheduler instead of staying not-ready forever. */
static void
fail_queued_saves(ect_worker_t *w)
{
    for (size_t i = 0; i < w->n_save_keys; i++)
        report_save(w, w->carry, w->save_keys[i], 1);
    w->n_save_keys = 0;
    w->save_bytes = 0;
    ect__copy_plan_reset(&w->save_plan);
}

void
ect_worker_clear_metadata(ect_worker_t *w)
{
    if (w == NULL || w->meta == NULL)
        return;
    if (w->n_save_keys > 0) {
        ECT_LOG_W("worker: %zu saves queued but not submitted before clear_metadata",
                  w->n_save_keys);
        fail_queued_saves(w);
    }
    /* Saves of the step that this rank never queued (the engine did not
     * encode the item, or ect_worker_save refused it) end as failed: the
     * scheduler then frees their blocks instead of keeping a not-ready entry,
     * and its pending push work, forever. */
    if (w->save_rank) {
        for (size_t i = 0; i < ect_step_meta_n_saves(w->meta); i++)
            if (w->pending_keys[i] != NULL)
                report_save(w, w->carry, w->pending_keys[i], 1);
        ect__free(w->pending_keys);
        w->pending_keys = NULL;
    }
    /* Loads never started are still reported so their pins are released. */
    if (!w->loads_started)
        for (size_t i = 0; i < ect_step_meta_n_loads(w->meta); i++)
            report_load(w, w->carry, ect_step_meta_load(w->meta, i)->transfer_id);
    ect_step_meta_destroy(w->meta);
    w->meta = NULL;
}

static ect_status_t
push_batch(ect_worker_t *w, const struct batch *b)
{
    if (w->n_inflight == w->cap_inflight) {
        size_t cap = w->cap_inflight ? w->cap_inflight * 2 : 8;
        struct batch *grown = ect__realloc(w->inflight, cap * sizeof(*grown));
        if (grown == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "worker: out of memory tracking copies");
        w->inflight = grown;
        w->cap_inflight = cap;
    }
    w->inflight[w->n_inflight++] = *b;
    return ECT_OK;
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
    const ect_step_item_t **items = ect__malloc(n * sizeof(*items));
    b.tids = ect__malloc(n * sizeof(*b.tids));
    ect_status_t st = ECT_OK;
    if (items == NULL || b.tids == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "worker start_load: out of memory");
        goto err_report;
    }
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
        b.tids[b.n_tids++] = it->transfer_id;
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
    ect__free(items);
    return ECT_OK;

err_report:
    for (size_t i = 0; i < n; i++)
        report_load(w, w->carry, ect_step_meta_load(w->meta, i)->transfer_id);
    ect__free(b.tids);
    ect__free(items);
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
    if (w->pending_keys[idx] == NULL)
        return ect__error(ECT_ERR_EXISTS, "worker save: '%s' was already saved this step", key);
    /* Everything that can fail before the plan grows: a save that is
     * refused must leave no copy behind (its blocks may be freed). */
    if (w->n_save_keys == w->cap_save_keys) {
        size_t cap = w->cap_save_keys ? w->cap_save_keys * 2 : 8;
        char **grown = ect__realloc(w->save_keys, cap * sizeof(*grown));
        if (grown == NULL)
            return ect__error(ECT_ERR_NO_MEMORY, "worker save: out of memory");
        w->save_keys = grown;
        w->cap_save_keys = cap;
    }
    /* Last, as it cannot be undone; it changes nothing when it fails (and
     * clear_metadata then reports the save failed). */
    ect_status_t st = ect__copy_plan_add(&w->save_plan, ECT_COPY_SAVE, &w->view, it->runs,
                                         it->n_runs, (void *)src, nbytes);
    if (st != ECT_OK)
        return st;
    w->save_keys[w->n_save_keys++] = w->pending_keys[idx];
    w->pending_keys[idx] = NULL;
    w->save_bytes += nbytes;
    if (w->n_save_keys == 1)
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
    if (w->n_save_keys == 0)
        return ECT_OK;
    struct batch b = {.dir = ECT_COPY_SAVE, .bytes = w->save_bytes};
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
    b.keys = w->save_keys;
    b.n_keys = w->n_save_keys;
    if ((st = push_batch(w, &b)) != ECT_OK) {
        ect__log_failure(ect_copy_engine_wait(w->engine, b.ticket), "worker");
        fail_queued_saves(w);
        return st;
    }
    /* The batch owns the key array now. */
    w->save_keys = NULL;
    w->n_save_keys = w->cap_save_keys = 0;
    w->save_bytes = 0;
    ect__copy_plan_reset(&w->save_plan);
    return ECT_OK;
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
    ect_status_t failure = ECT_OK;
    ect_step_report_t *rep = w->carry;
    size_t kept = 0;
    uint64_t now = ect__now_ns();
    for (size_t i = 0; i < w->n_inflight; i++) {
        struct batch *b = &w->inflight[i];
        ect_status_t st = b->settled ? b->result : ect_copy_engine_query(w->engine, b->ticket);
        uint64_t landed = b->settled ? b->t_landed_ns : now;
        if (st == ECT_ERR_BUSY) {
            w->inflight[kept++] = *b;
            continue;
        }
        if (st != ECT_OK) {
            failure = st;
            ECT_LOG_E("worker: copy batch %llu failed: %s", (unsigned long long)b->ticket,
                      ect_last_error());
        }
        ect_step_copy_stats_t cs = {0};
        for (size_t k = 0; k < b->n_keys; k++)
            report_save(w, rep, b->keys[k], st != ECT_OK);
        b->n_keys = 0; /* the report owns the keys now */
        for (size_t k = 0; k < b->n_tids; k++)
            report_load(w, rep, b->tids[k]);
        if (st == ECT_OK) {
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
        drop_batch(b);
    }
    w->n_inflight = kept;
    if (ect_step_report_n_saves(rep) + ect_step_report_n_loads(rep) +
            ect_step_report_n_failed_saves(rep) ==
        0) {
        *report_p = NULL;
        return failure;
    }
    /* The fresh carry takes the outcomes still owed; until it has room for
     * them the completions stay in carry for the next call. */
    ect_step_report_t *fresh;
    ect_status_t st = ect_step_report_create(&fresh);
    if (st == ECT_OK && (st = ect__step_report_reserve(fresh, w->owed_saves, w->owed_saves,
                                                       w->owed_loads)) != ECT_OK)
        ect_step_report_destroy(fresh);
    if (st != ECT_OK)
        return st;
    w->carry = fresh;
    *report_p = rep;
    return failure;
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
    for (size_t i = 0; i < w->n_inflight; i++)
        drop_batch(&w->inflight[i]);
    ect__free(w->inflight);
    ect_worker_clear_metadata(w);
    free_keys(w->save_keys, w->n_save_keys);
    ect__copy_plan_cleanup(&w->save_plan);
    ect__copy_plan_cleanup(&w->load_plan);
    ect__log_failure(ect_copy_engine_unregister_host(w->engine, w->view.base), "worker");
    if (w->own_engine)
        ect_copy_engine_destroy(w->engine);
    ect_region_close(w->region);
    ect_step_report_destroy(w->carry);
    ect_step_report_destroy(w->given_back);
    ect__free(w);
}
