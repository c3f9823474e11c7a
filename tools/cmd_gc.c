/*
 * `ectier gc [--dry-run] [--dir D]`: remove orphaned ectier regions (files
 * with ectier magic that no process holds) and stale temp files of region
 * creations from a directory (default /dev/shm), print each and a count.
 * Files named like ours that are not provably ectier's (no magic, another
 * program's temp file, links, FIFOs, directories) are never touched, and
 * printed as "left".  Exit 1 if some orphan could not be removed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <ectier/region.h>

#include "cli.h"

static const char usage[] =
    "usage: ectier gc [--dry-run] [--dir DIR]\n"
    "  Remove orphaned ectier regions (no live holder) from DIR (default " ECT_REGION_DEFAULT_DIR
    ").\n"
    "  --dry-run  only list what would be removed\n";

struct gc_ctx {
    int dry_run;
    unsigned failed;
    unsigned left;
};

static void
on_orphan(const ect_region_info_t *i, ect_status_t outcome, void *user)
{
    struct gc_ctx *c = user;
    if (outcome == ECT_ERR_INCOMPATIBLE) {
        /* Named like ours but not provably ours: never removed. */
        c->left++;
        printf("left %s (%s)\n", i->path, i->problem);
        return;
    }
    if (outcome != ECT_OK) {
        c->failed++;
        fprintf(stderr, "ectier gc: cannot remove %s: %s\n", i->path, i->problem);
        return;
    }
    const char *verb = c->dry_run ? "would remove" : "removed";
    switch (i->kind) {
    case ECT_REGION_FILE_REGION:
        printf("%s %s (orphaned region, %" PRIu64 " bytes, created by pid %" PRId32
               " %.0f s ago)\n",
               verb, i->path, i->file_size, i->creator_pid, i->age_s);
        break;
    case ECT_REGION_FILE_TEMP:
        printf("%s %s (stale temp file, %" PRIu64 " bytes)\n", verb, i->path, i->file_size);
        break;
    default:
        printf("%s %s (orphaned region with a bad header: %s)\n", verb, i->path, i->problem);
        break;
    }
}

int
ect_cli_gc(int argc, char **argv)
{
    struct gc_ctx c = {0};
    const char *dir = ECT_REGION_DEFAULT_DIR;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("%s", usage);
            return 0;
        } else if (strcmp(argv[i], "--dry-run") == 0 || strcmp(argv[i], "-n") == 0) {
            c.dry_run = 1;
        } else if (strcmp(argv[i], "--dir") == 0) {
            if (++i >= argc)
                return ect_cli_usage_error("gc", usage, "--dir needs a directory");
            dir = argv[i];
        } else if (strncmp(argv[i], "--dir=", 6) == 0) {
            dir = argv[i] + 6;
        } else {
            return ect_cli_usage_error("gc", usage, "unexpected argument '%s'", argv[i]);
        }
    }
    if (dir[0] == '\0')
        return ect_cli_usage_error("gc", usage, "--dir is empty");
    unsigned removed = 0;
    if (ect_region_gc(dir, c.dry_run, on_orphan, &c, &removed) != ECT_OK)
        return ect_cli_fail("gc", "%s", ect_last_error());
    char left[64] = "";
    if (c.left > 0)
        snprintf(left, sizeof(left), ", %u left (not provably ectier's)", c.left);
    if (c.dry_run)
        printf("%u would be removed from %s%s (dry run)\n", removed, dir, left);
    else
        printf("%u removed from %s%s\n", removed, dir, left);
    return c.failed == 0 ? 0 : 1;
}
