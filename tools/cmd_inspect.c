/*
 * `ectier inspect [NAME] [--dir D] [--json]`: show the ectier regions in a
 * directory (default /dev/shm): name, size, geometry, live holders and their
 * pids, the owner's pid, the waiting reaper, creator and age.  Files named like regions that
 * are not usable ones are shown with the reason.  Read-only: takes no locks
 * and changes nothing (ect_region_list).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include <ectier/geometry.h>
#include <ectier/region.h>

#include "bind/region_json.h"
#include "cli.h"

static const char usage[] =
    "usage: ectier inspect [NAME] [--dir DIR] [--json]\n"
    "  Show ectier regions in DIR (default " ECT_REGION_DEFAULT_DIR "), or only region NAME.\n"
    "  --json  one JSON array with an object per file\n";

struct inspect_ctx {
    const char *only;
    int json;
    cJSON *array;
    unsigned shown, live, orphaned, other;
};

static void
format_age(char *buf, size_t len, double s)
{
    if (s < 120)
        snprintf(buf, len, "%.1f s", s);
    else if (s < 7200)
        snprintf(buf, len, "%.1f min", s / 60);
    else if (s < 172800)
        snprintf(buf, len, "%.1f h", s / 3600);
    else
        snprintf(buf, len, "%.1f days", s / 86400);
}

static void
print_pids(const char *label, unsigned n, const int32_t *pids)
{
    printf("%s %u", label, n);
    if (n > 0) {
        printf(" (pid");
        for (unsigned i = 0; i < n && i < ECT_REGION_MAX_PIDS; i++)
            printf(" %" PRId32, pids[i]);
        if (n > ECT_REGION_MAX_PIDS)
            printf(" ...");
        printf(")");
    }
}

/* The region's geometry, each number with its unit and the dtype by name
 * (the header stores ect_dtype_t's value). */
static void
print_geometry(const ect_region_info_t *i, const char *file_size)
{
    char block[32], data[32], offset[32], dtype[48];
    ect_cli_format_bytes(block, sizeof(block), i->block_size_bytes);
    if (i->block_size_bytes != 0 && i->num_blocks > UINT64_MAX / i->block_size_bytes)
        snprintf(data, sizeof(data), "(too large)");
    else
        ect_cli_format_bytes(data, sizeof(data), i->num_blocks * i->block_size_bytes);
    ect_cli_format_bytes(offset, sizeof(offset), i->data_offset);
    const char *name = ect_dtype_name((ect_dtype_t)i->dtype_code);
    if (name != NULL)
        snprintf(dtype, sizeof(dtype), "%s", name);
    else
        snprintf(dtype, sizeof(dtype), "unknown dtype %" PRIu32, i->dtype_code);
    printf("  %" PRIu64 " blocks x %s = %s (hidden_dim %" PRIu64 " x %s, %" PRIu32 " B/element)\n",
           i->num_blocks, block, data, i->hidden_dim, dtype, i->element_size);
    size_t want = name != NULL ? ect_dtype_size((ect_dtype_t)i->dtype_code) : 0;
    if (want != 0 && want != i->element_size)
        printf("  (%s is %zu B/element: the header's element size disagrees)\n", name, want);
    printf("  file %s (%" PRIu64 " B), data at offset %s\n", file_size, i->file_size, offset);
}

static void
print_text(const ect_region_info_t *i)
{
    char size[32], age[32];
    ect_cli_format_bytes(size, sizeof(size), i->file_size);
    format_age(age, sizeof(age), i->age_s);
    printf("%s  %s\n", i->name, i->path);
    switch (i->kind) {
    case ECT_REGION_FILE_REGION:
        print_geometry(i, size);
        break;
    case ECT_REGION_FILE_TEMP:
        if (i->gc_eligible)
            printf("  temp file of a region creation (in progress or interrupted), %s\n", size);
        else
            printf("  named like a region's temp file, but %s (%s)\n", i->problem, size);
        break;
    default:
        printf("  not usable: %s (%s)\n", i->problem, size);
        break;
    }
    printf("  ");
    print_pids("holders", i->n_holders, i->holder_pids);
    if (i->owner_pid != 0)
        printf(", owner pid %" PRId32, i->owner_pid);
    if (i->n_waiters > 0) {
        printf(", ");
        print_pids("waiting (reaper)", i->n_waiters, i->waiter_pids);
    }
    /* Only what gc really removes is called orphaned (ect_region_gc and
     * gc_eligible share one rule). */
    if (i->n_holders == 0 && i->gc_eligible)
        printf(", orphaned: `ectier gc` removes it");
    else if (i->kind != ECT_REGION_FILE_FOREIGN && !i->gc_eligible)
        printf(", `ectier gc` leaves it (see above); remove it by hand if it is yours");
    printf("\n");
    if (i->kind == ECT_REGION_FILE_REGION)
        printf("  created by pid %" PRId32 ", %s ago%s%s%s\n", i->creator_pid, age,
               i->instance_id[0] ? ", instance \"" : "", i->instance_id,
               i->instance_id[0] ? "\"" : "");
    else
        printf("  last changed %s ago\n", age);
}

static int
on_file(const ect_region_info_t *info, void *user)
{
    struct inspect_ctx *c = user;
    if (c->only != NULL && strcmp(info->name, c->only) != 0)
        return 0;
    c->shown++;
    if (info->kind == ECT_REGION_FILE_REGION && info->n_holders > 0)
        c->live++;
    else if (info->gc_eligible && info->n_holders == 0)
        c->orphaned++;
    else
        c->other++;
    if (c->json) {
        cJSON *o = ect__region_info_json(info);
        if (o != NULL)
            cJSON_AddItemToArray(c->array, o);
    } else {
        print_text(info);
    }
    return 0;
}

int
ect_cli_inspect(int argc, char **argv)
{
    struct inspect_ctx c = {0};
    const char *dir = ECT_REGION_DEFAULT_DIR;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s", usage);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            c.json = 1;
        } else if (strcmp(argv[i], "--dir") == 0) {
            if (++i >= argc)
                return ect_cli_usage_error("inspect", usage, "--dir needs a directory");
            dir = argv[i];
        } else if (strncmp(argv[i], "--dir=", 6) == 0) {
            dir = argv[i] + 6;
        } else if (argv[i][0] == '-') {
            return ect_cli_usage_error("inspect", usage, "unknown option '%s'", argv[i]);
        } else if (c.only == NULL) {
            c.only = argv[i];
        } else {
            return ect_cli_usage_error("inspect", usage, "more than one NAME ('%s')", argv[i]);
        }
    }
    if (dir[0] == '\0')
        return ect_cli_usage_error("inspect", usage, "--dir is empty");
    if (c.json && (c.array = cJSON_CreateArray()) == NULL)
        return ect_cli_fail("inspect", "out of memory");

    ect_status_t st = ect_region_list(dir, on_file, &c);
    if (st != ECT_OK) {
        cJSON_Delete(c.array);
        return ect_cli_fail("inspect", "%s", ect_last_error());
    }
    int rc = 0;
    if (c.only != NULL && c.shown == 0) {
        rc = ect_cli_fail("inspect", "no region named '%s' in %s", c.only, dir);
    } else if (c.json) {
        char *text = cJSON_Print(c.array);
        if (text == NULL)
            rc = ect_cli_fail("inspect", "out of memory");
        else
            printf("%s\n", text);
        cJSON_free(text);
    } else if (c.only == NULL) {
        printf("%u file%s in %s: %u live region%s, %u orphaned, %u other\n", c.shown,
               c.shown == 1 ? "" : "s", dir, c.live, c.live == 1 ? "" : "s", c.orphaned, c.other);
    }
    cJSON_Delete(c.array);
    return rc;
}
