/* The allocation failure sweep: see sweep.h. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "ectier_build_config.h"
#include "harness.h"
#include "support/sweep.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

void
ts_sweep_require_hooks(void)
{
#if !ECT_TEST_HOOKS
    SKIP("built with -DECT_TEST_HOOKS=OFF: no allocation failure injector");
#endif
}

size_t
ts_sweep_shm_entries(const char *id, char *first, size_t cap)
{
    DIR *d = opendir("/dev/shm");
    CHECK(d != NULL);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, id) != NULL) {
            if (n++ == 0 && first != NULL)
                snprintf(first, cap, "%s", e->d_name);
        }
    closedir(d);
    return n;
}

/* Sweep path for one mode; returns the n at which it completed. */
static uint64_t
sweep_mode(const char *what, ts_sweep_path_fn fn, const char *id, enum ts_sweep_mode mode,
           uint64_t dense, uint64_t stride)
{
    uint64_t n = 1;
    for (;;) {
        struct ts_sweep_run r = {.id = id, .mode = mode};
        int64_t live0 = ect__alloc_live();
        ect__alloc_reset();
        ect__alloc_fail_at(n, mode == TS_FAIL_FROM_N);
        ect_status_t st = fn(&r);
        ect__alloc_fail_at(0, 0);
        uint64_t failed = ect__alloc_failed();
        CHECK_MSG(st == ECT_OK || st == ECT_ERR_NO_MEMORY, "%s (%s, n=%llu): status %s: %s", what,
                  mode == TS_FAIL_FROM_N ? "from n" : "only n", (unsigned long long)n,
                  ect_status_str(st), ect_last_error());
        CHECK_MSG(failed > 0 || st == ECT_OK, "%s (n=%llu): NO_MEMORY without a failure", what,
                  (unsigned long long)n);
        int64_t live = ect__alloc_live();
        CHECK_MSG(live == live0, "%s (%s, n=%llu): %lld allocations leaked (status %s)", what,
                  mode == TS_FAIL_FROM_N ? "from n" : "only n", (unsigned long long)n,
                  (long long)(live - live0), ect_status_str(st));
        char left[256] = "";
        CHECK_MSG(ts_sweep_shm_entries(id, left, sizeof(left)) == 0,
                  "%s (n=%llu): /dev/shm/%s left behind", what, (unsigned long long)n, left);
        if (failed == 0)
            return n;
        n += n < dense ? 1 : stride;
    }
}

/* Out-of-memory paths log; thousands of lines help no one (ECT_SWEEP_LOG=1
 * keeps them). */
static void
drop_log(ect_log_level_t level, const char *message, void *user)
{
    (void)level;
    (void)message;
    (void)user;
}

void
ts_sweep_strided(const char *what, ts_sweep_path_fn fn, uint64_t dense, uint64_t stride)
{
    ts_sweep_require_hooks();
    if (getenv("ECT_SWEEP_DENSE") != NULL) /* every n, however long it takes */
        stride = 1;
    if (getenv("ECT_SWEEP_LOG") == NULL)
        ect_log_set_sink(drop_log, NULL);
    char id[64];
    ect_test_unique_name(id, sizeof(id), "ectas_");
    /* One clean run first: the path itself works. */
    struct ts_sweep_run clean = {.id = id, .mode = TS_FAIL_FROM_N};
    CHECK_MSG(fn(&clean) == ECT_OK, "%s: the path fails without injection: %s", what,
              ect_last_error());
    uint64_t a = sweep_mode(what, fn, id, TS_FAIL_FROM_N, dense, stride);
    uint64_t b = sweep_mode(what, fn, id, TS_FAIL_ONLY_N, dense, stride);
#if defined(__SANITIZE_ADDRESS__)
    /* The case's child ends with _exit, which LeakSanitizer does not see:
     * look now, for leaks the live count cannot see (libc's allocations
     * made for the library, by getline or a third-party library). */
    CHECK_MSG(__lsan_do_recoverable_leak_check() == 0, "%s: LeakSanitizer found leaks", what);
#endif
    printf("sweep %s: completed at n=%llu (fail from n) and n=%llu (fail only n)\n", what,
           (unsigned long long)a, (unsigned long long)b);
    fflush(stdout);
}

void
ts_sweep(const char *what, ts_sweep_path_fn fn)
{
    ts_sweep_strided(what, fn, TS_SWEEP_DENSE, TS_SWEEP_STRIDE);
}

ect_status_t
ts_sweep_report_step(ect_scheduler_t *s, ect_worker_t *w)
{
    ect_status_t st = ECT_OK;
    for (int tries = 0; tries < 3; tries++) {
        ect_status_t ws = ect_worker_wait(w);
        if (ws != ECT_OK && ws != ECT_ERR_NO_MEMORY)
            return ws;
        void *bytes = NULL;
        size_t len = 0;
        ect_status_t copy = ECT_OK;
        st = ect_worker_take_report_bytes(w, &bytes, &len, &copy);
        if (st == ECT_ERR_NO_MEMORY)
            continue;
        if (st != ECT_OK)
            return st;
        if (copy != ECT_OK && copy != ECT_ERR_NO_MEMORY) {
            ect_free(bytes);
            return copy;
        }
        st = ect_scheduler_update_connector_output(s, bytes, len);
        ect_free(bytes);
        if (st != ECT_OK || ect_worker_in_flight(w) == 0)
            return st;
    }
    return st;
}

ect_status_t
ts_sweep_bind_step(ect_scheduler_t *s, ect_worker_t *w)
{
    void *meta = NULL;
    size_t len = 0;
    ect_status_t st = ect_scheduler_build_connector_meta_bytes(s, &meta, &len);
    if (st != ECT_OK)
        return st;
    st = ect_worker_bind_metadata(w, meta, len);
    ect_free(meta);
    return st;
}
