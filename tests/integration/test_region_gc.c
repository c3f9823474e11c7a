/*
 * Orphaned regions across real processes: the sweep at open, listing, gc
 * (which removes only what it can prove is ectier's), and the `ectier
 * inspect` / `ectier gc` commands, against live, orphaned, foreign and
 * odd files (links, fifos, directories).
 *
 * Every case works in a private directory under /dev/shm (see
 * support/region.h) so that no other test program's sweep interferes.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "region/region_internal.h"

#include "support/region.h"

/* ---- sweep, list and gc ---------------------------------------------------------------- */

/* A file at dir/file_name: an ectier header naming header_name (NULL: no
 * header, just text) followed by zeros up to size bytes. */
static void
write_temp_like(const char *dir, const char *file_name, const char *header_name, size_t size)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file_name);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK_MSG(fd >= 0, "create %s: %s", path, strerror(errno));
    CHECK(ftruncate(fd, (off_t)size) == 0);
    if (header_name != NULL) {
        struct ect__region_header h;
        memset(&h, 0, sizeof(h));
        memcpy(h.magic, ECT__REGION_MAGIC, ECT__REGION_MAGIC_LEN);
        h.layout_version = ECT__REGION_LAYOUT_VERSION;
        h.header_size = sizeof(h);
        h.creator_pid = 1;
        snprintf(h.name, sizeof(h.name), "%s", header_name);
        CHECK(pwrite(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h));
    } else if (size > 0) {
        static const char text[] = "another program's temp file";
        CHECK(pwrite(fd, text, sizeof(text) - 1, 0) == (ssize_t)sizeof(text) - 1);
    }
    close(fd);
}

static int
exists_in(const char *dir, const char *file_name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, file_name);
    return ts_exists(path);
}

/* A directory with one of everything; returns the live holder. */
struct zoo {
    char dir[256];
    char live[64], orphan[64];
    char live_path[512], orphan_path[512], foreign_path[512], temp_path[512], other_path[512];
    char foreign_temp_path[512];
    struct ts_holder holder;
};

static void
make_zoo(struct zoo *z)
{
    memset(z, 0, sizeof(*z));
    ts_shm_make_dir(z->dir, sizeof(z->dir));
    ect_test_unique_name(z->live, sizeof(z->live), "ectt_");
    ect_test_unique_name(z->orphan, sizeof(z->orphan), "ectt_");
    ts_region_path(z->live_path, sizeof(z->live_path), z->dir, z->live);
    ts_region_path(z->orphan_path, sizeof(z->orphan_path), z->dir, z->orphan);
    snprintf(z->foreign_path, sizeof(z->foreign_path), "%s/ectier_foreign.mmap", z->dir);
    snprintf(z->temp_path, sizeof(z->temp_path), "%s/%s.Ab12Cd.ectier.tmp", z->dir, z->orphan);
    snprintf(z->other_path, sizeof(z->other_path), "%s/vllm_ec_other.mmap", z->dir);
    snprintf(z->foreign_temp_path, sizeof(z->foreign_temp_path), "%s/%s.Xy34Zw.ectier.tmp", z->dir,
             z->orphan);

    ect_region_params_t p;
    ts_region_params(&p, z->live, z->dir, 32);
    p.flags = ECT_REGION_NO_SWEEP;
    p.instance_id = "zoo";
    ts_holder_spawn(&z->holder, &p, TS_HOLDER_CLOSE);
    CHECK_EQ_INT(z->holder.status, ECT_OK);
    ts_region_find_with_reaper(z->dir, z->live);
    ts_region_make_orphan(z->dir, z->orphan, 8);
    /* A temp file of an interrupted creation of the orphan's name. */
    write_temp_like(z->dir, strrchr(z->temp_path, '/') + 1, z->orphan, 4096);
    const char *paths[] = {z->foreign_path, z->foreign_temp_path, z->other_path};
    for (int i = 0; i < 3; i++) {
        FILE *f = fopen(paths[i], "w");
        CHECK(f != NULL);
        fputs("not a region at all, just some bytes", f);
        fclose(f);
    }
}

static void
clean_zoo(struct zoo *z)
{
    unlink(z->foreign_path);
    unlink(z->other_path);
    unlink(z->foreign_temp_path);
    ts_holder_release(&z->holder); /* its close removes the live region */
    CHECK(!ts_exists(z->live_path));
    ts_shm_remove_dir(z->dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_sweep_at_open_removes_orphans_but_not_live_or_foreign_files)
{
    struct zoo z;
    make_zoo(&z);
    char other[64];
    ect_test_unique_name(other, sizeof(other), "ectt_");
    ect_region_params_t p;
    ts_region_params(&p, other, z.dir, 4);
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    CHECK(!ts_exists(z.orphan_path));
    CHECK(!ts_exists(z.temp_path));
    CHECK(ts_exists(z.live_path));
    CHECK(ts_exists(z.foreign_path));
    CHECK(ts_exists(z.other_path));
    CHECK(ts_exists(z.foreign_temp_path)); /* not provably ours */
    ect_region_close(r);
    clean_zoo(&z);
}

#define MAX_SEEN 16
struct seen_list {
    unsigned n;
    ect_region_info_t v[MAX_SEEN];
    char names[MAX_SEEN][256];
    char paths[MAX_SEEN][512];
    char problems[MAX_SEEN][256];
    char instances[MAX_SEEN][128];
    ect_status_t outcome[MAX_SEEN];
};

static void
keep(struct seen_list *s, const ect_region_info_t *info, ect_status_t outcome)
{
    CHECK(s->n < MAX_SEEN);
    unsigned i = s->n++;
    s->v[i] = *info;
    snprintf(s->names[i], sizeof(s->names[i]), "%s", info->name);
    snprintf(s->paths[i], sizeof(s->paths[i]), "%s", info->path);
    snprintf(s->problems[i], sizeof(s->problems[i]), "%s", info->problem);
    snprintf(s->instances[i], sizeof(s->instances[i]), "%s", info->instance_id);
    s->outcome[i] = outcome;
}

static int
list_cb(const ect_region_info_t *info, void *user)
{
    keep(user, info, ECT_OK);
    return 0;
}

static void
gc_cb(const ect_region_info_t *info, ect_status_t outcome, void *user)
{
    keep(user, info, outcome);
}

static int
seen_index(const struct seen_list *s, const char *name)
{
    for (unsigned i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0)
            return (int)i;
    return -1;
}

TS_SHM_CASE(test_list_reports_geometry_holders_and_problems)
{
    struct zoo z;
    make_zoo(&z);
    struct seen_list *s = calloc(1, sizeof(*s));
    CHECK_OK(ect_region_list(z.dir, list_cb, s));
    /* live, orphan, foreign, temp, foreign temp; not vllm_ec_other.mmap (no
     * magic, not our name). */
    CHECK_EQ_INT(s->n, 5);
    for (unsigned i = 1; i < s->n; i++)
        CHECK(strcmp(s->paths[i - 1], s->paths[i]) < 0); /* file name order */

    int li = seen_index(s, z.live);
    CHECK(li >= 0);
    const ect_region_info_t *l = &s->v[li];
    CHECK_EQ_INT(l->kind, ECT_REGION_FILE_REGION);
    CHECK_EQ_U64(l->num_blocks, 32);
    CHECK_EQ_U64(l->block_size_bytes, 256);
    CHECK_EQ_U64(l->hidden_dim, 64);
    CHECK_EQ_INT(l->dtype_code, ECT_DTYPE_F32);
    CHECK_EQ_INT(l->element_size, 4);
    CHECK_EQ_U64(l->file_size, l->data_offset + 32 * 256);
    CHECK_EQ_INT(l->creator_pid, z.holder.pid);
    CHECK_STR_EQ(s->instances[li], "zoo");
    CHECK_EQ_INT(l->n_holders, 1);
    CHECK_EQ_INT(l->holder_pids[0], z.holder.pid);
    CHECK_EQ_INT(l->n_waiters, 1); /* its reaper */
    CHECK(l->age_s >= 0 && l->age_s < 60);

    int oi = seen_index(s, z.orphan);
    CHECK(oi >= 0);
    CHECK_EQ_INT(s->v[oi].kind, ECT_REGION_FILE_REGION);
    CHECK_EQ_INT(s->v[oi].n_holders, 0);
    CHECK_EQ_INT(s->v[oi].n_waiters, 0);
    CHECK_EQ_U64(s->v[oi].num_blocks, 8);

    int fi = seen_index(s, "ectier_foreign");
    CHECK(fi >= 0);
    CHECK_EQ_INT(s->v[fi].kind, ECT_REGION_FILE_FOREIGN);
    CHECK_CONTAINS(s->problems[fi], "not an ectier region");

    char temp_name[128];
    snprintf(temp_name, sizeof(temp_name), "%s.Ab12Cd.ectier.tmp", z.orphan);
    int ti = seen_index(s, temp_name);
    CHECK(ti >= 0);
    CHECK_EQ_INT(s->v[ti].kind, ECT_REGION_FILE_TEMP);
    CHECK_EQ_INT(s->v[ti].gc_eligible, 1);
    CHECK_EQ_INT(s->v[li].gc_eligible, 1);
    CHECK_EQ_INT(s->v[oi].gc_eligible, 1);
    CHECK_EQ_INT(s->v[fi].gc_eligible, 0);
    int fti = seen_index(s, strrchr(z.foreign_temp_path, '/') + 1);
    CHECK(fti >= 0);
    CHECK_EQ_INT(s->v[fti].kind, ECT_REGION_FILE_TEMP);
    CHECK_EQ_INT(s->v[fti].gc_eligible, 0);
    CHECK_CONTAINS(s->problems[fti], "not provably ectier's");

    CHECK_STATUS(ect_region_list("/nonexistent-ectier-dir", list_cb, s), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_region_list(z.dir, NULL, s), ECT_ERR_INVALID_ARG);
    free(s);
    unlink(z.orphan_path);
    unlink(z.temp_path);
    clean_zoo(&z);
}

TS_SHM_CASE(test_gc_removes_only_orphans_and_reports_each)
{
    struct zoo z;
    make_zoo(&z);
    struct seen_list *s = calloc(1, sizeof(*s));
    unsigned removed = 99;
    CHECK_OK(ect_region_gc(z.dir, 1, gc_cb, s, &removed));
    CHECK_EQ_INT(removed, 2);
    CHECK_EQ_INT(s->n, 4); /* the two foreign files are reported as left */
    CHECK(ts_exists(z.orphan_path) && ts_exists(z.temp_path)); /* dry run */

    memset(s, 0, sizeof(*s));
    CHECK_OK(ect_region_gc(z.dir, 0, gc_cb, s, &removed));
    CHECK_EQ_INT(removed, 2);
    CHECK_EQ_INT(s->n, 4);
    int oi = seen_index(s, z.orphan);
    CHECK(oi >= 0);
    CHECK_EQ_INT(s->outcome[oi], ECT_OK);
    CHECK_EQ_INT(s->v[oi].kind, ECT_REGION_FILE_REGION);
    int fi = seen_index(s, "ectier_foreign");
    CHECK(fi >= 0);
    CHECK_EQ_INT(s->outcome[fi], ECT_ERR_INCOMPATIBLE);
    int fti = seen_index(s, strrchr(z.foreign_temp_path, '/') + 1);
    CHECK(fti >= 0);
    CHECK_EQ_INT(s->outcome[fti], ECT_ERR_INCOMPATIBLE);
    CHECK(ts_exists(z.foreign_temp_path));
    CHECK(!ts_exists(z.orphan_path));
    CHECK(!ts_exists(z.temp_path));
    CHECK(ts_exists(z.live_path));
    CHECK(ts_exists(z.foreign_path));
    CHECK(ts_exists(z.other_path));

    CHECK_OK(ect_region_gc(z.dir, 0, NULL, NULL, &removed));
    CHECK_EQ_INT(removed, 0);
    free(s);
    clean_zoo(&z);
}

/* ---- gc removes only what it can prove is ours ------------------------------------------ */

static char *run_cli(const char *args, int *rc_p);

TS_SHM_CASE(test_gc_and_sweep_remove_only_temp_files_that_are_provably_ours)
{
    char dir[256];
    ts_shm_make_dir(dir, sizeof(dir));
    /* Ours: the name pattern of a creation ("<region>.XXXXXX.ectier.tmp") and
     * a header that names that region, from a creator killed while it
     * reserved the pages (the file is shorter than the header says). */
    const char *ours = "reg.Ab12Cd.ectier.tmp", *ours2 = "reg.Ef34Gh.ectier.tmp";
    write_temp_like(dir, ours, "reg", 4096);
    write_temp_like(dir, ours2, "reg", 4096);
    /* Not provably ours: another program's file, an empty one, a header
     * naming another region, and names outside the pattern. */
    const char *left[] = {"app.Xy34Zw.ectier.tmp", "reg.Qq11Rr.ectier.tmp", "reg.Mm22Nn.ectier.tmp",
                          "reg.ectier.tmp", "reg.Ab12C!.ectier.tmp"};
    write_temp_like(dir, left[0], NULL, 64);
    write_temp_like(dir, left[1], NULL, 0);
    write_temp_like(dir, left[2], "other", 4096);
    write_temp_like(dir, left[3], "reg", 4096);
    write_temp_like(dir, left[4], "reg", 4096);
    const size_t n_left = sizeof(left) / sizeof(left[0]);

    struct seen_list *s = calloc(1, sizeof(*s));
    unsigned removed = 99;
    CHECK_OK(ect_region_gc(dir, 0, gc_cb, s, &removed));
    CHECK_EQ_INT(removed, 2);
    CHECK(!exists_in(dir, ours) && !exists_in(dir, ours2));
    for (size_t i = 0; i < n_left; i++) {
        CHECK_MSG(exists_in(dir, left[i]), "gc removed %s", left[i]);
        int k = seen_index(s, left[i]);
        CHECK_MSG(k >= 0, "gc did not report %s", left[i]);
        CHECK_EQ_INT(s->outcome[k], ECT_ERR_INCOMPATIBLE);
        CHECK_CONTAINS(s->problems[k], "not provably");
    }
    CHECK_EQ_INT(s->n, 2 + n_left);

    /* The sweep at open follows the same rule. */
    write_temp_like(dir, ours, "reg", 4096);
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t p;
    ts_region_params(&p, name, dir, 4);
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    CHECK(!exists_in(dir, ours));
    for (size_t i = 0; i < n_left; i++)
        CHECK_MSG(exists_in(dir, left[i]), "the sweep removed %s", left[i]);
    ect_region_close(r);

    /* `ectier gc` says what it left, and that is no failure. */
    char args[512], want[512];
    int rc;
    snprintf(args, sizeof(args), "gc --dir %s", dir);
    char *out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    snprintf(want, sizeof(want), "left %s/%s (", dir, left[0]);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "0 removed from");
    free(out);
    for (size_t i = 0; i < n_left; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", dir, left[i]);
        unlink(path);
    }
    free(s);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_inspect_and_gc_tell_the_truth_about_links_fifos_and_directories)
{
    char dir[256], path[512], args[512];
    ts_shm_make_dir(dir, sizeof(dir));
    snprintf(path, sizeof(path), "%s/ectier_link.mmap", dir);
    CHECK(symlink("/nonexistent-ectier-target", path) == 0);
    snprintf(path, sizeof(path), "%s/ectier_fifo.mmap", dir);
    CHECK(mkfifo(path, 0600) == 0);
    snprintf(path, sizeof(path), "%s/ectier_dir.mmap", dir);
    CHECK(mkdir(path, 0700) == 0);
    snprintf(path, sizeof(path), "%s/reg.Ab12Cd.ectier.tmp", dir);
    CHECK(mkfifo(path, 0600) == 0);

    int rc;
    snprintf(args, sizeof(args), "inspect --dir %s", dir);
    char *out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(strstr(out, "gc` removes it") == NULL, "inspect promises gc removes: %s", out);
    CHECK_CONTAINS(out, "a symbolic link");
    CHECK_CONTAINS(out, "a FIFO");
    CHECK_CONTAINS(out, "a directory");
    CHECK_CONTAINS(out, "`ectier gc` leaves it");
    CHECK_CONTAINS(out, "0 orphaned, 4 other");
    free(out);

    snprintf(args, sizeof(args), "inspect --json --dir %s", dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    cJSON *doc = cJSON_Parse(out);
    CHECK_MSG(cJSON_IsArray(doc) && cJSON_GetArraySize(doc) == 4, "inspect --json: %s", out);
    cJSON *o;
    cJSON_ArrayForEach(o, doc)
    {
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "orphaned")));
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "gc_eligible")));
    }
    cJSON_Delete(doc);
    free(out);

    snprintf(args, sizeof(args), "gc --dir %s", dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "0 removed from");
    CHECK_CONTAINS(out, "ectier_fifo.mmap (a FIFO");
    free(out);
    const char *names[] = {"ectier_link.mmap", "ectier_fifo.mmap", "ectier_dir.mmap",
                           "reg.Ab12Cd.ectier.tmp"};
    for (size_t i = 0; i < 4; i++)
        CHECK_MSG(exists_in(dir, names[i]), "gc removed %s", names[i]);
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        if (i == 2)
            rmdir(path);
        else
            unlink(path);
    }
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

/* ---- the CLI ------------------------------------------------------------------------ */

/* Run the CLI with args; returns its output (malloc'd) and exit code. */
static char *
run_cli(const char *args, int *rc_p)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "'%s' %s 2>&1", ECT_CLI_PATH, args);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    size_t cap = 65536, n = 0;
    char *out = malloc(cap);
    CHECK(out != NULL);
    size_t got;
    while ((got = fread(out + n, 1, cap - 1 - n, f)) > 0) {
        n += got;
        if (n == cap - 1) {
            cap *= 2;
            out = realloc(out, cap);
            CHECK(out != NULL);
        }
    }
    out[n] = '\0';
    int st = pclose(f);
    *rc_p = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
}

TS_SHM_CASE(test_cli_inspect_and_gc_on_live_and_orphaned_regions)
{
    struct zoo z;
    make_zoo(&z);
    char args[1024], want[1024];
    int rc;

    snprintf(args, sizeof(args), "inspect --dir %s", z.dir);
    char *out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, z.live_path);
    CHECK_CONTAINS(out, z.orphan_path);
    /* The dtype by name, sizes in human units. */
    CHECK_CONTAINS(out, "32 blocks x 256 B = 8.00 KiB (hidden_dim 64 x float32, 4 B/element)");
    CHECK(strstr(out, "element size disagrees") == NULL);
    snprintf(want, sizeof(want), "holders 1 (pid %d), waiting (reaper) 1", (int)z.holder.pid);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "holders 0, orphaned: `ectier gc` removes it");
    CHECK_CONTAINS(out, "not an ectier region");
    CHECK_CONTAINS(out, "instance \"zoo\"");
    CHECK_CONTAINS(out, "5 files in");
    CHECK_CONTAINS(out, "1 live region, 2 orphaned, 2 other");
    free(out);

    snprintf(args, sizeof(args), "inspect --json --dir=%s", z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    cJSON *doc = cJSON_Parse(out);
    CHECK_MSG(cJSON_IsArray(doc), "not a JSON array: %s", out);
    CHECK_EQ_INT(cJSON_GetArraySize(doc), 5);
    int found_live = 0;
    cJSON *o;
    cJSON_ArrayForEach(o, doc)
    {
        const char *nm = cJSON_GetStringValue(cJSON_GetObjectItem(o, "name"));
        CHECK(nm != NULL);
        if (strcmp(nm, z.live) != 0)
            continue;
        found_live = 1;
        CHECK_STR_EQ(cJSON_GetStringValue(cJSON_GetObjectItem(o, "kind")), "region");
        CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "num_blocks")), 32);
        CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "holders")), 1);
        cJSON *pids = cJSON_GetObjectItem(o, "holder_pids");
        CHECK_EQ_INT(cJSON_GetNumberValue(cJSON_GetArrayItem(pids, 0)), z.holder.pid);
        CHECK(cJSON_IsFalse(cJSON_GetObjectItem(o, "orphaned")));
    }
    CHECK(found_live);
    cJSON_Delete(doc);
    free(out);

    snprintf(args, sizeof(args), "inspect %s --dir %s", z.orphan, z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, z.orphan_path);
    CHECK(strstr(out, z.live_path) == NULL);
    free(out);
    snprintf(args, sizeof(args), "inspect no_such_region --dir %s", z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "no region named 'no_such_region'");
    free(out);
    out = run_cli("inspect --dir /nonexistent-ectier-dir", &rc);
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "/nonexistent-ectier-dir");
    free(out);

    snprintf(args, sizeof(args), "gc --dry-run --dir %s", z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    snprintf(want, sizeof(want), "would remove %s (orphaned region", z.orphan_path);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "2 would be removed");
    CHECK(ts_exists(z.orphan_path));
    free(out);

    snprintf(args, sizeof(args), "gc --dir %s", z.dir);
    out = run_cli(args, &rc);
    CHECK_EQ_INT(rc, 0);
    snprintf(want, sizeof(want), "removed %s (orphaned region, ", z.orphan_path);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof(want), "removed %s (stale temp file", z.temp_path);
    CHECK_CONTAINS(out, want);
    snprintf(want, sizeof(want), "left %s (not provably ectier's", z.foreign_temp_path);
    CHECK_CONTAINS(out, want);
    CHECK_CONTAINS(out, "2 removed from");
    CHECK_CONTAINS(out, ", 2 left (not provably ectier's)");
    CHECK(strstr(out, z.live) == NULL);
    free(out);
    CHECK(!ts_exists(z.orphan_path));
    CHECK(!ts_exists(z.temp_path));
    CHECK(ts_exists(z.live_path));
    CHECK(ts_exists(z.foreign_path));

    out = run_cli("gc --bogus", &rc);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "usage: ectier gc");
    free(out);
    out = run_cli("inspect a b", &rc);
    CHECK_EQ_INT(rc, 2);
    free(out);
    clean_zoo(&z);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_sweep_at_open_removes_orphans_but_not_live_or_foreign_files),
    ECT_CASE(test_list_reports_geometry_holders_and_problems),
    ECT_CASE(test_gc_removes_only_orphans_and_reports_each),
    ECT_CASE(test_cli_inspect_and_gc_on_live_and_orphaned_regions),
    ECT_CASE(test_gc_and_sweep_remove_only_temp_files_that_are_provably_ours),
    ECT_CASE(test_inspect_and_gc_tell_the_truth_about_links_fifos_and_directories),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
