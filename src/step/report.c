/*
 * Worker reports (worker -> scheduler): the in-memory value, its framed
 * little-endian encoding (step/frame.h) and the reservations the worker
 * relies on to never lose an outcome (step/report.h).
 *
 * Invariants: keys are 1..ECT_KEY_MAX bytes without NUL; decoding checks
 * every count against the bytes that remain before looping over it.
 */
#include <string.h>

#include <ectier/step.h>

#include "common/alloc.h"
#include "common/bytes.h"
#include "common/error.h"
#include "step/frame.h"
#include "step/report.h"

/* A list of keys: offsets into the report's key arena. */
struct key_list {
    size_t *off;
    size_t n, cap;
};

/* Every key (saves and failed saves alike) lives in one arena; clearing a
 * report keeps its memory. */
struct ect_step_report {
    struct key_list saves;
    struct key_list failed;
    char *keys;
    size_t keys_used, keys_cap;
    uint64_t *loads;
    size_t n_loads, cap_loads;
    ect_step_copy_stats_t stats;
};

static ect_status_t
grow_array(void **arr, size_t *cap, size_t used, size_t n, size_t size)
{
    return ect__array_reserve(arr, cap, used, n, size) == 0
               ? ECT_OK
               : ect__error(ECT_ERR_NO_MEMORY, "worker report: out of memory");
}

static ect_status_t
key_list_reserve(struct key_list *l, size_t n)
{
    return grow_array((void **)&l->off, &l->cap, l->n, n, sizeof(*l->off));
}

static ect_status_t
loads_reserve(ect_step_report_t *r, size_t n)
{
    return grow_array((void **)&r->loads, &r->cap_loads, r->n_loads, n, sizeof(*r->loads));
}

static ect_status_t
key_bytes_reserve(ect_step_report_t *r, size_t n)
{
    return grow_array((void **)&r->keys, &r->keys_cap, r->keys_used, n, 1);
}

/* Append key (len bytes, checked) to l: nothing changes on failure, and
 * nothing allocates within a reservation. */
static ect_status_t
key_list_push(ect_step_report_t *r, struct key_list *l, const char *key, size_t len)
{
    ect_status_t st = key_list_reserve(l, 1);
    if (st == ECT_OK)
        st = key_bytes_reserve(r, len + 1);
    if (st != ECT_OK)
        return st;
    memcpy(r->keys + r->keys_used, key, len + 1);
    l->off[l->n++] = r->keys_used;
    r->keys_used += len + 1;
    return ECT_OK;
}

static ect_status_t
key_list_add(ect_step_report_t *r, struct key_list *l, const char *what, const char *key)
{
    if (key == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL key", what);
    size_t len = strnlen(key, ECT_KEY_MAX + 1);
    ect_status_t st = ect__step_check_key(what, key, len);
    if (st != ECT_OK)
        return st;
    return key_list_push(r, l, key, len);
}

static const char *
key_at(const ect_step_report_t *r, const struct key_list *l, size_t i)
{
    return r->keys + l->off[i];
}

ect_status_t
ect__step_report_reserve(ect_step_report_t *report, size_t saves, size_t failed, size_t loads,
                         size_t key_bytes)
{
    ect_status_t st = key_list_reserve(&report->saves, saves);
    if (st == ECT_OK)
        st = key_list_reserve(&report->failed, failed);
    if (st == ECT_OK)
        st = loads_reserve(report, loads);
    if (st == ECT_OK)
        st = key_bytes_reserve(report, key_bytes);
    return st;
}

ect_status_t
ect__step_report_put_save(ect_step_report_t *report, const char *key, int failed)
{
    return key_list_push(report, failed ? &report->failed : &report->saves, key, strlen(key));
}

ect_status_t
ect__step_report_push_load(ect_step_report_t *report, uint64_t transfer_id)
{
    ect_status_t st = loads_reserve(report, 1);
    if (st == ECT_OK)
        report->loads[report->n_loads++] = transfer_id;
    return st;
}

ect_status_t
ect_step_report_create(ect_step_report_t **report_p)
{
    if (report_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker report: NULL output");
    ect_step_report_t *rep = ect__calloc(1, sizeof(*rep));
    if (rep == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "worker report: out of memory");
    *report_p = rep;
    return ECT_OK;
}

void
ect_step_report_destroy(ect_step_report_t *report)
{
    if (report == NULL)
        return;
    ect__free(report->saves.off);
    ect__free(report->failed.off);
    ect__free(report->keys);
    ect__free(report->loads);
    ect__free(report);
}

void
ect_step_report_clear(ect_step_report_t *report)
{
    if (report == NULL)
        return;
    report->saves.n = 0;
    report->failed.n = 0;
    report->keys_used = 0;
    report->n_loads = 0;
    memset(&report->stats, 0, sizeof(report->stats));
}

ect_status_t
ect_step_report_add_save(ect_step_report_t *report, const char *key)
{
    if (report == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker report save: NULL report");
    return key_list_add(report, &report->saves, "worker report save", key);
}

ect_status_t
ect_step_report_add_failed_save(ect_step_report_t *report, const char *key)
{
    if (report == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker report failed save: NULL report");
    return key_list_add(report, &report->failed, "worker report failed save", key);
}

ect_status_t
ect_step_report_add_load(ect_step_report_t *report, uint64_t transfer_id)
{
    if (report == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker report load: NULL report");
    return ect__step_report_push_load(report, transfer_id);
}

void
ect_step_report_add_stats(ect_step_report_t *report, const ect_step_copy_stats_t *stats)
{
    if (report == NULL || stats == NULL)
        return;
    report->stats.save_bytes += stats->save_bytes;
    report->stats.save_ns += stats->save_ns;
    report->stats.save_batches += stats->save_batches;
    report->stats.load_bytes += stats->load_bytes;
    report->stats.load_ns += stats->load_ns;
    report->stats.load_batches += stats->load_batches;
}

size_t
ect_step_report_n_saves(const ect_step_report_t *report)
{
    return report != NULL ? report->saves.n : 0;
}

size_t
ect_step_report_n_failed_saves(const ect_step_report_t *report)
{
    return report != NULL ? report->failed.n : 0;
}

size_t
ect_step_report_n_loads(const ect_step_report_t *report)
{
    return report != NULL ? report->n_loads : 0;
}

const char *
ect_step_report_save(const ect_step_report_t *report, size_t i)
{
    return report != NULL && i < report->saves.n ? key_at(report, &report->saves, i) : NULL;
}

const char *
ect_step_report_failed_save(const ect_step_report_t *report, size_t i)
{
    return report != NULL && i < report->failed.n ? key_at(report, &report->failed, i) : NULL;
}

uint64_t
ect_step_report_load(const ect_step_report_t *report, size_t i)
{
    return report != NULL && i < report->n_loads ? report->loads[i] : 0;
}

const ect_step_copy_stats_t *
ect_step_report_stats(const ect_step_report_t *report)
{
    return report != NULL ? &report->stats : NULL;
}

ect_status_t
ect_step_report_merge(ect_step_report_t *dst, const ect_step_report_t *src)
{
    if (dst == NULL || src == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker report merge: NULL argument");
    /* Room for all of src first (src may be dst: its counts are read before
     * anything grows, and its keys by offset, which growth keeps). */
    size_t src_saves = src->saves.n, src_failed = src->failed.n, src_loads = src->n_loads;
    ect_status_t st =
        ect__step_report_reserve(dst, src_saves, src_failed, src_loads, src->keys_used);
    if (st != ECT_OK)
        return st;
    for (size_t i = 0; i < src_saves; i++)
        (void)ect__step_report_put_save(dst, key_at(src, &src->saves, i), 0);
    for (size_t i = 0; i < src_failed; i++)
        (void)ect__step_report_put_save(dst, key_at(src, &src->failed, i), 1);
    for (size_t i = 0; i < src_loads; i++)
        dst->loads[dst->n_loads++] = src->loads[i];
    ect_step_report_add_stats(dst, &src->stats);
    return ECT_OK;
}

size_t
ect_step_report_encoded_size(const ect_step_report_t *report)
{
    if (report == NULL)
        return 0;
    size_t total = ECT__STEP_FRAME_HEADER + 12 + 6 * 8 + report->n_loads * 8;
    /* Each key's arena bytes are its length and a NUL: 4 + length on the
     * wire. */
    return total + report->keys_used + 3 * (report->saves.n + report->failed.n);
}

static void
put_keys(ect_bytes_writer_t *w, const ect_step_report_t *r, const struct key_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        const char *key = key_at(r, l, i);
        size_t klen = strlen(key);
        ect__put_u32(w, (uint32_t)klen);
        ect__put_bytes(w, key, klen);
    }
}

ect_status_t
ect_step_report_encode(const ect_step_report_t *report, void *buf, size_t cap, size_t *len_p)
{
    if (report == NULL || buf == NULL || len_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker report encode: NULL argument");
    size_t need = ect_step_report_encoded_size(report);
    if (cap < need)
        return ect__error(ECT_ERR_OVERFLOW, "worker report encode: need %zu bytes, have %zu", need,
                          cap);
    ect_bytes_writer_t w = {buf, (uint8_t *)buf + cap};
    ect__step_put_frame_header(&w, ECT__STEP_REPORT_MAGIC, need - ECT__STEP_FRAME_HEADER);
    ect__put_u32(&w, (uint32_t)report->saves.n);
    ect__put_u32(&w, (uint32_t)report->n_loads);
    ect__put_u32(&w, (uint32_t)report->failed.n);
    const ect_step_copy_stats_t *s = &report->stats;
    ect__put_u64(&w, s->save_bytes);
    ect__put_u64(&w, s->save_ns);
    ect__put_u64(&w, s->save_batches);
    ect__put_u64(&w, s->load_bytes);
    ect__put_u64(&w, s->load_ns);
    ect__put_u64(&w, s->load_batches);
    put_keys(&w, report, &report->saves);
    for (size_t i = 0; i < report->n_loads; i++)
        ect__put_u64(&w, report->loads[i]);
    put_keys(&w, report, &report->failed);
    *len_p = need;
    return ECT_OK;
}

static ect_status_t
decode_one_report(ect_bytes_reader_t *body, ect_step_report_t *rep)
{
    static const char what[] = "worker report decode";
    char key[ECT_KEY_MAX + 1];
    uint32_t n_saves = ect__get_u32(body), n_loads = ect__get_u32(body);
    uint32_t n_failed = ect__get_u32(body);
    ect_step_copy_stats_t s;
    s.save_bytes = ect__get_u64(body);
    s.save_ns = ect__get_u64(body);
    s.save_batches = ect__get_u64(body);
    s.load_bytes = ect__get_u64(body);
    s.load_ns = ect__get_u64(body);
    s.load_batches = ect__get_u64(body);
    if (body->failed)
        return ect__error(ECT_ERR_PARSE, "%s: truncated header", what);
    /* Each save needs at least 5 bytes and each load 8: reject absurd counts
     * before looping over them. */
    if (((uint64_t)n_saves + n_failed) * 5 + (uint64_t)n_loads * 8 > ect__remaining(body))
        return ect__error(ECT_ERR_PARSE,
                          "%s: %u saves, %u loads and %u failed saves cannot fit in %zu bytes",
                          what, n_saves, n_loads, n_failed, ect__remaining(body));
    ect_status_t st;
    for (uint32_t i = 0; i < n_saves; i++) {
        if ((st = ect__step_read_key(body, what, key)) != ECT_OK)
            return st;
        if ((st = ect_step_report_add_save(rep, key)) != ECT_OK)
            return st;
    }
    for (uint32_t i = 0; i < n_loads; i++) {
        uint64_t tid = ect__get_u64(body);
        if (body->failed)
            return ect__error(ECT_ERR_PARSE, "%s: truncated load list", what);
        if ((st = ect_step_report_add_load(rep, tid)) != ECT_OK)
            return st;
    }
    for (uint32_t i = 0; i < n_failed; i++) {
        if ((st = ect__step_read_key(body, what, key)) != ECT_OK)
            return st;
        if ((st = ect_step_report_add_failed_save(rep, key)) != ECT_OK)
            return st;
    }
    if (ect__remaining(body) != 0)
        return ect__error(ECT_ERR_PARSE, "%s: %zu unread bytes in the body", what,
                          ect__remaining(body));
    ect_step_report_add_stats(rep, &s);
    return ECT_OK;
}

ect_status_t
ect_step_report_decode_into(ect_step_report_t *report, const void *bytes, size_t len)
{
    static const char what[] = "worker report decode";
    if (report == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL report", what);
    ect_step_report_clear(report);
    if (bytes == NULL && len > 0)
        return ect__error(ECT_ERR_INVALID_ARG, "%s: NULL bytes", what);
    ect_bytes_reader_t r = {bytes, (const uint8_t *)bytes + len, 0}, body;
    ect_status_t st = ECT_OK;
    while (st == ECT_OK && ect__remaining(&r) > 0)
        if ((st = ect__step_read_frame(&r, ECT__STEP_REPORT_MAGIC, what, &body)) == ECT_OK)
            st = decode_one_report(&body, report);
    if (st != ECT_OK)
        ect_step_report_clear(report);
    return st;
}

ect_status_t
ect_step_report_decode(const void *bytes, size_t len, ect_step_report_t **report_p)
{
    if ((bytes == NULL && len > 0) || report_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "worker report decode: NULL argument");
    ect_step_report_t *rep;
    ect_status_t st = ect_step_report_create(&rep);
    if (st != ECT_OK)
        return st;
    if ((st = ect_step_report_decode_into(rep, bytes, len)) != ECT_OK) {
        ect_step_report_destroy(rep);
        return st;
    }
    *report_p = rep;
    return ECT_OK;
}
