/*
 * The shared region in one process: layout, argument checks, joins and
 * their refusals, last-holder removal, read-only opens, pre-fault and a
 * full file system.  Real files in /dev/shm (or a private directory there,
 * or a small tmpfs mounted for the case).  Multi-process behaviour (races,
 * SIGKILL, the reaper, sweep, gc, the CLI) is in
 * tests/integration/test_region_procs.c.
 */
#include <errno.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>

#include "region/region_internal.h"

#include "support/region.h"

/* Rss in KiB of the mapping that starts at start, from /proc/self/smaps. */
static long
rss_kb_of(const void *start)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f != NULL);
    char line[512];
    int in = 0;
    long rss = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {
            in = a == (unsigned long)(uintptr_t)start;
            continue;
        }
        if (in && sscanf(line, "Rss: %ld kB", &rss) == 1)
            break;
    }
    fclose(f);
    CHECK_MSG(rss >= 0, "no mapping at %p in smaps", start);
    return rss;
}

static void
read_header(const char *path, struct ect__region_header *h)
{
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK(pread(fd, h, sizeof(*h), 0) == (ssize_t)sizeof(*h));
    close(fd);
}

/* Write a file at path: the given header (if any) followed by filler up to size. */
static void
write_file(const char *path, const struct ect__region_header *h, uint64_t size, char filler)
{
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK_MSG(fd >= 0, "create %s: %s", path, strerror(errno));
    char buf[4096];
    memset(buf, filler, sizeof(buf));
    for (uint64_t off = 0; off < size; off += sizeof(buf)) {
        size_t n = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
        CHECK(pwrite(fd, buf, n, (off_t)off) == (ssize_t)n);
    }
    if (h != NULL)
        CHECK(pwrite(fd, h, sizeof(*h), 0) == (ssize_t)sizeof(*h));
    close(fd);
}

/* A valid header as the library writes it, for crafting files. */
static void
header_for(const ect_region_params_t *p, struct ect__region_header *h)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, ECT__REGION_MAGIC, ECT__REGION_MAGIC_LEN);
    h->layout_version = ECT__REGION_LAYOUT_VERSION;
    h->header_size = sizeof(*h);
    h->data_offset = 4096;
    const ect_geometry_t *g = &p->geometry;
    h->hidden_dim = g->hidden_dim;
    h->dtype_code = (uint32_t)g->dtype;
    h->element_size = (uint32_t)ect_dtype_size(g->dtype);
    h->block_size_bytes = g->block_size_bytes;
    h->num_blocks = g->num_blocks;
    h->file_size = 4096 + g->num_blocks * g->block_size_bytes;
    h->creator_pid = 1;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h->created_unix_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    snprintf(h->name, sizeof(h->name), "%s", p->name);
}

/* ---- layout ---------------------------------------------------------------------- */

TS_SHM_CASE(test_open_creates_file_with_header_and_blocks)
{
    char name[64], path[256];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 100);
    p.instance_id = "inst-7";
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    CHECK(r != NULL);
    CHECK_EQ_INT(ect_region_is_creator(r), 1);
    CHECK_EQ_INT(ect_region_is_readonly(r), 0);
    CHECK_STR_EQ(ect_region_path(r), path);
    CHECK_STR_EQ(ect_region_name(r), name);
    CHECK_EQ_U64(ect_region_geometry(r)->block_size_bytes, 256);
    CHECK_EQ_U64(ect_region_geometry(r)->num_blocks, 100);
    CHECK_EQ_U64(ect_region_geometry(r)->hidden_dim, 64);
    CHECK_EQ_INT(ect_region_geometry(r)->dtype, ECT_DTYPE_F32);
    CHECK_EQ_INT(ect_dtype_size(ect_region_geometry(r)->dtype), 4);
    uint64_t off = ect_region_data_offset(r);
    CHECK(off >= 4096 && off % (uint64_t)sysconf(_SC_PAGESIZE) == 0);
    CHECK_EQ_U64(ect_region_file_size(r), off + 100 * 256);
    CHECK(ect_region_fd(r) >= 0);

    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK_EQ_U64(st.st_size, off + 100 * 256);
    /* Every page is reserved (fallocate), not a sparse file. */
    CHECK_MSG((uint64_t)st.st_blocks * 512 >= (uint64_t)st.st_size, "%lld blocks for %lld bytes",
              (long long)st.st_blocks, (long long)st.st_size);

    struct ect__region_header h;
    read_header(path, &h);
    CHECK(memcmp(h.magic, ECT__REGION_MAGIC, 8) == 0);
    CHECK_EQ_INT(h.layout_version, ECT__REGION_LAYOUT_VERSION);
    CHECK_EQ_INT(h.header_size, 512);
    CHECK_EQ_U64(h.data_offset, off);
    CHECK_EQ_U64(h.file_size, st.st_size);
    CHECK_EQ_U64(h.hidden_dim, 64);
    CHECK_EQ_INT(h.dtype_code, ECT_DTYPE_F32);
    CHECK_EQ_INT(h.element_size, 4);
    CHECK_EQ_U64(h.block_size_bytes, 256);
    CHECK_EQ_U64(h.num_blocks, 100);
    CHECK_EQ_INT(h.creator_pid, getpid());
    CHECK_STR_EQ(h.name, name);
    CHECK_STR_EQ(h.instance_id, "inst-7");
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    CHECK(h.created_unix_ns <= now_ns && now_ns - h.created_unix_ns < 60ull * 1000000000u);

    uint8_t *base = ect_region_data(r);
    CHECK(ect_region_block_ptr(r, 0) == base);
    CHECK(ect_region_block_ptr(r, 99) == base + 99 * 256);
    CHECK(ect_region_block_ptr(r, 100) == NULL);
    memset(ect_region_block_ptr(r, 99), 0xab, 256);
    /* Block i is at data_offset + i * block_size in the file. */
    int fd = open(path, O_RDONLY);
    uint8_t b = 0;
    CHECK(pread(fd, &b, 1, (off_t)(off + 99 * 256 + 255)) == 1);
    close(fd);
    CHECK_EQ_INT(b, 0xab);

    ect_region_close(r);
    CHECK(!ts_exists(path));
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_default_name_comes_from_instance_and_rank)
{
    char dir[256], inst[64], want[512];
    ts_shm_make_dir(dir, sizeof(dir));
    ect_test_unique_name(inst, sizeof(inst), "i");
    ect_region_params_t p;
    ts_region_params(&p, NULL, dir, 4);
    p.instance_id = inst;
    p.dp_rank = 3;
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    snprintf(want, sizeof(want), "ectier_%s_dp3", inst);
    CHECK_STR_EQ(ect_region_name(r), want);
    snprintf(want, sizeof(want), "%s/ectier_%s_dp3.mmap", dir, inst);
    CHECK_STR_EQ(ect_region_path(r), want);
    CHECK(ts_exists(want));
    ect_region_close(r);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

/* ---- argument checks ------------------------------------------------------------- */

static void
expect_bad_name(const char *dir, const char *name, const char *in_message)
{
    ect_region_params_t p;
    ts_region_params(&p, name, dir, 4);
    ect_region_t *r = (ect_region_t *)0x1;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK(r == (ect_region_t *)0x1); /* not written on failure */
    CHECK_CONTAINS(ect_last_error(), in_message);
}

TS_SHM_CASE(test_bad_names_are_rejected_and_create_nothing)
{
    char dir[256];
    ts_shm_make_dir(dir, sizeof(dir));
    char longname[202];
    memset(longname, 'a', 201);
    longname[201] = '\0';
    expect_bad_name(dir, "a/b", "'a/b'");
    expect_bad_name(dir, "..", "'..'");
    expect_bad_name(dir, "x..y", "\"..\"");
    expect_bad_name(dir, ".x", "starts with '.'");
    expect_bad_name(dir, "a b", "0x20");
    expect_bad_name(dir, longname, "longer than 200");

    /* The longest allowed name works. */
    longname[200] = '\0';
    ect_region_params_t p;
    ts_region_params(&p, longname, dir, 4);
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    ect_region_close(r);

    /* No name and no instance id; a bad instance id. */
    ts_region_params(&p, NULL, dir, 4);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "neither a name nor an instance id");
    p.instance_id = "x/y";
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "instance id 'x/y'");

    CHECK_EQ_INT(ts_count_prefix(dir, ""), 0);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_bad_geometry_and_directory_are_rejected)
{
    char dir[256], name[64], file[300];
    ts_shm_make_dir(dir, sizeof(dir));
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t p;
    ect_region_t *r = NULL;

    /* The geometry's one check (ect_geometry_validate), named with the region. */
    ts_region_params(&p, name, dir, 4);
    p.geometry.dtype = (ect_dtype_t)99;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), name);
    CHECK_CONTAINS(ect_last_error(), "dtype value 99 is not a known dtype");

    ts_region_params(&p, name, dir, 4);
    p.geometry.hidden_dim = 0;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "hidden_dim must be positive");

    ts_region_params(&p, name, dir, 4);
    p.geometry.block_size_bytes = 512;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(),
                   "block_size_bytes 512 is not hidden_dim 64 x 4-byte float32 = 256");

    ts_region_params(&p, name, dir, 0);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "num_blocks is 0");

    ts_region_params(&p, name, dir, UINT64_MAX / 256);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "do not fit");

    ts_region_params(&p, name, dir, 4);
    p.geometry.hidden_dim = UINT64_MAX / 2;
    p.geometry.block_size_bytes = 0;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_OVERFLOW);
    CHECK_CONTAINS(ect_last_error(), "exceeds the limit");

    ts_region_params(&p, name, dir, 4);
    p.flags = 1u << 20;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "unknown flags");

    snprintf(file, sizeof(file), "%s/nonexistent", dir);
    ts_region_params(&p, name, file, 4);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_NOT_FOUND);
    CHECK_CONTAINS(ect_last_error(), file);

    ts_region_params(&p, name, "", 4);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);

    snprintf(file, sizeof(file), "%s/plainfile", dir);
    write_file(file, NULL, 10, 'x');
    ts_region_params(&p, name, file, 4);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INVALID_ARG);
    CHECK_CONTAINS(ect_last_error(), "is not a directory");
    unlink(file);

    CHECK_STATUS(ect_region_open(NULL, &r), ECT_ERR_INVALID_ARG);
    ts_region_params(&p, name, dir, 4);
    CHECK_STATUS(ect_region_open(&p, NULL), ECT_ERR_INVALID_ARG);

    CHECK_EQ_INT(ts_count_prefix(dir, ""), 0);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

/* ---- joining ------------------------------------------------------------------- */

TS_SHM_CASE(test_second_open_joins_and_shares_memory)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 16);
    ect_region_t *a = NULL, *b = NULL;
    CHECK_OK(ect_region_open(&p, &a));
    p.flags = ECT_REGION_NO_PREFAULT;
    CHECK_OK(ect_region_open(&p, &b));
    CHECK_EQ_INT(ect_region_is_creator(a), 1);
    CHECK_EQ_INT(ect_region_is_creator(b), 0);
    CHECK(ect_region_data(a) != ect_region_data(b)); /* two mappings ... */
    memset(ect_region_block_ptr(a, 5), 0x5a, 256);
    /* ... of the same pages */
    CHECK_EQ_INT(((uint8_t *)ect_region_block_ptr(b, 5))[17], 0x5a);
    ((uint8_t *)ect_region_block_ptr(b, 15))[255] = 0x77;
    CHECK_EQ_INT(((uint8_t *)ect_region_block_ptr(a, 15))[255], 0x77);
    struct stat sa, sb;
    CHECK(fstat(ect_region_fd(a), &sa) == 0 && fstat(ect_region_fd(b), &sb) == 0);
    CHECK(sa.st_ino == sb.st_ino);
    /* A joiner's descriptor, fit to hand to another process, blocks normally. */
    CHECK_EQ_INT(fcntl(ect_region_fd(b), F_GETFL) & (O_NONBLOCK | O_ACCMODE), O_RDWR);
    CHECK(fcntl(ect_region_fd(b), F_GETFD) & FD_CLOEXEC);
    ect_region_close(a);
    ect_region_close(b);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_join_with_other_geometry_is_incompatible)
{
    char name[64], path[256];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 16);
    ect_region_t *a = NULL, *b = NULL;
    CHECK_OK(ect_region_open(&p, &a));

    p.geometry.hidden_dim = 32;
    p.geometry.block_size_bytes = 128;
    CHECK_STATUS(ect_region_open(&p, &b), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "hidden_dim=64 dtype=3 element_size=4 block_size=256 "
                                     "num_blocks=16");
    CHECK_CONTAINS(ect_last_error(), "asked for hidden_dim=32 dtype=3 element_size=4 "
                                     "block_size=128 num_blocks=16");
    ts_region_params(&p, name, NULL, 17);
    CHECK_STATUS(ect_region_open(&p, &b), ECT_ERR_INCOMPATIBLE);
    /* Same row bytes, another dtype: 128 x bfloat16 = 64 x float32. */
    ts_region_params(&p, name, NULL, 16);
    p.geometry.dtype = ECT_DTYPE_BF16;
    p.geometry.hidden_dim = 128;
    CHECK_STATUS(ect_region_open(&p, &b), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "dtype=1 element_size=2");

    /* The failed joins took nothing away: the region is intact and the
     * last close still removes it. */
    CHECK(ts_exists(path));
    memset(ect_region_data(a), 1, 16 * 256);
    ect_region_close(a);
    CHECK(!ts_exists(path));
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_garbage_file_under_the_name_is_incompatible_and_untouched)
{
    char name[64], path[256];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    write_file(path, NULL, 8192, 'x');
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 16);
    ect_region_t *r = NULL;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "not an ectier region");
    CHECK_CONTAINS(ect_last_error(), path);
    /* A tiny file too. */
    unlink(path);
    write_file(path, NULL, 3, 'y');
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "smaller than an ectier header");
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK_EQ_U64(st.st_size, 3);
    char *content = ect_test_read_file(path, NULL);
    CHECK_STR_EQ(content, "yyy");
    free(content);
    unlink(path);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_wrong_size_or_bad_header_file_is_incompatible_and_untouched)
{
    char dir[256], name[64], path[512];
    ts_shm_make_dir(dir, sizeof(dir));
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), dir, name);
    ect_region_params_t p;
    ts_region_params(&p, name, dir, 16);
    p.flags = ECT_REGION_NO_SWEEP; /* the file is an orphan: keep the sweep off it */
    struct ect__region_header h;
    header_for(&p, &h);
    ect_region_t *r = NULL;

    /* Valid header, file shorter than it says. */
    write_file(path, &h, h.file_size - 256, 0);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "bytes but its header says");
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK_EQ_U64(st.st_size, h.file_size - 256);
    unlink(path);

    /* A well-formed header naming a dtype this build does not know (or a
     * size the dtype does not have): a read-only open (the same-host
     * transport's) refuses it, and the file stays as it is. */
    struct ect__region_header odd = h;
    odd.dtype_code = 99;
    write_file(path, &odd, h.file_size, 0);
    CHECK_STATUS(ect_region_open_readonly(path, NULL, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "header geometry is unusable");
    CHECK_CONTAINS(ect_last_error(), "dtype value 99");
    CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == h.file_size);
    unlink(path);
    odd.dtype_code = ECT_DTYPE_BF16; /* 2 bytes, the header says 4 */
    write_file(path, &odd, h.file_size, 0);
    CHECK_STATUS(ect_region_open_readonly(path, NULL, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "is not hidden_dim 64 x 2-byte bfloat16");
    CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == h.file_size);
    unlink(path);

    /* Header numbers that contradict each other. */
    struct ect__region_header bad = h;
    bad.block_size_bytes = 100;
    write_file(path, &bad, h.file_size, 0);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "is not hidden_dim");
    unlink(path);
    bad = h;
    bad.layout_version = 99;
    write_file(path, &bad, h.file_size, 0);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "layout version 99");
    unlink(path);
    bad = h;
    bad.num_blocks = UINT64_MAX / 8;
    bad.file_size = h.file_size;
    write_file(path, &bad, h.file_size, 0);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "do not fit");

    /* With the sweep on, the same file is an orphan with ectier magic: it
     * is removed and a fresh region created in its place. */
    p.flags = 0;
    CHECK_OK(ect_region_open(&p, &r));
    CHECK_EQ_INT(ect_region_is_creator(r), 1);
    ect_region_close(r);

    /* A crafted but valid file is joined like any region. */
    write_file(path, &h, h.file_size, 0);
    p.flags = ECT_REGION_NO_SWEEP;
    CHECK_OK(ect_region_open(&p, &r));
    CHECK_EQ_INT(ect_region_is_creator(r), 0);
    ect_region_close(r); /* last holder: removes it */
    CHECK(!ts_exists(path));
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_symlink_or_fifo_under_the_name_is_refused_without_hanging)
{
    char dir[256], name[64], path[512], target[512];
    ts_shm_make_dir(dir, sizeof(dir));
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), dir, name);
    snprintf(target, sizeof(target), "%s/target", dir);
    ect_region_params_t p;
    ts_region_params(&p, name, dir, 16);
    ect_region_t *r = NULL;

    CHECK(symlink(target, path) == 0);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "symbolic link");
    CHECK(!ts_exists(target)); /* nothing created through the link */
    unlink(path);

    CHECK(mkfifo(path, 0600) == 0);
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_INCOMPATIBLE);
    CHECK_CONTAINS(ect_last_error(), "not a regular file");
    CHECK_STATUS(ect_region_open_readonly(path, NULL, &r), ECT_ERR_INCOMPATIBLE);
    unlink(path);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_exclusively_held_file_gives_busy_then_joins)
{
    char dir[256], name[64], path[512];
    ts_shm_make_dir(dir, sizeof(dir));
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), dir, name);
    ect_region_params_t p;
    ts_region_params(&p, name, dir, 16);
    struct ect__region_header h;
    header_for(&p, &h);
    write_file(path, &h, h.file_size, 0);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    CHECK(flock(fd, LOCK_EX | LOCK_NB) == 0); /* some foreign program */

    p.lock_timeout_ms = 200;
    ect_region_t *r = NULL;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_BUSY);
    CHECK_CONTAINS(ect_last_error(), "exclusively for 200 ms");
    CHECK(ts_exists(path)); /* the sweep did not take a locked file */

    close(fd);
    p.flags = ECT_REGION_NO_SWEEP; /* now it is an orphan the sweep would take */
    CHECK_OK(ect_region_open(&p, &r));
    CHECK_EQ_INT(ect_region_is_creator(r), 0);
    ect_region_close(r);
    CHECK(!ts_exists(path));
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

/* ---- the owner lock -------------------------------------------------------------------- */

struct owner_seen {
    const char *name;
    int seen;
    int32_t owner_pid;
    unsigned n_holders;
};

static int
owner_cb(const ect_region_info_t *info, void *user)
{
    struct owner_seen *o = user;
    if (strcmp(info->name, o->name) == 0) {
        o->seen = 1;
        o->owner_pid = info->owner_pid;
        o->n_holders = info->n_holders;
    }
    return 0;
}

static struct owner_seen
list_owner(const char *name)
{
    struct owner_seen o = {.name = name};
    CHECK_OK(ect_region_list(TS_SHM, owner_cb, &o));
    CHECK(o.seen);
    return o;
}

TS_SHM_CASE(test_second_owner_in_one_process_is_refused_joiners_are_not)
{
    char name[64], path[256], pid[32];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    snprintf(pid, sizeof(pid), "pid %d", (int)getpid());
    ect_region_params_t owner, joiner;
    ts_region_params(&owner, name, NULL, 8);
    owner.flags = ECT_REGION_OWNER;
    ts_region_params(&joiner, name, NULL, 8);

    ect_region_t *a = NULL, *b = NULL, *c = NULL, *ro = NULL;
    CHECK_OK(ect_region_open(&owner, &a));
    memset(ect_region_block_ptr(a, 2), 0x5a, 256);
    /* A second owner, even in the owner's own process, is refused with the
     * region and the owner named, and changes nothing. */
    b = (ect_region_t *)&b;
    CHECK_STATUS(ect_region_open(&owner, &b), ECT_ERR_BUSY);
    CHECK(b == (ect_region_t *)&b);
    CHECK_CONTAINS(ect_last_error(), path);
    CHECK_CONTAINS(ect_last_error(), pid);
    CHECK_EQ_INT(((uint8_t *)ect_region_block_ptr(a, 2))[255], 0x5a);
    struct owner_seen o = list_owner(name);
    CHECK_EQ_INT(o.owner_pid, getpid());
    CHECK_EQ_INT(o.n_holders, 1); /* the refused open let its hold go */

    /* Joiners and read-only mappers are not owners. */
    CHECK_OK(ect_region_open(&joiner, &b));
    CHECK_OK(ect_region_open_readonly(name, NULL, &ro));
    CHECK_EQ_INT(((const uint8_t *)ect_region_block_ptr(ro, 2))[0], 0x5a);
    CHECK_EQ_INT(list_owner(name).n_holders, 3);

    /* The owner goes: the region lives on with its joiners, and the next
     * owner gets in at once. */
    ect_region_close(a);
    CHECK(ts_exists(path));
    CHECK_EQ_INT(list_owner(name).owner_pid, 0);
    CHECK_OK(ect_region_open(&owner, &c));
    CHECK_EQ_INT(ect_region_is_creator(c), 0);
    CHECK_EQ_INT(list_owner(name).owner_pid, getpid());
    /* The owner lock does not get in the way of the last-holder removal. */
    ect_region_close(ro);
    ect_region_close(b);
    ect_region_close(c);
    CHECK(!ts_exists(path));
    ts_check_no_leftovers();
}

/* The creator's new reaper shares the creator's open file description
 * until it has closed what it inherited; ownership taken on that
 * description must still end with the creator's close, however soon. */
TS_SHM_CASE(test_ownership_ends_with_the_close_even_right_after_creation)
{
    /* A reaper slow to start (a loaded machine) makes the window wide. */
    ect__region_test_flags = ECT__REGION_TEST_SLOW_REAPER;
    for (int round = 0; round < 3; round++) {
        char name[64], path[256];
        ect_test_unique_name(name, sizeof(name), "ectt_");
        ts_region_path(path, sizeof(path), TS_SHM, name);
        ect_region_params_t owner, joiner;
        ts_region_params(&owner, name, NULL, 4);
        owner.flags = ECT_REGION_OWNER;
        ts_region_params(&joiner, name, NULL, 4);
        ect_region_t *a = NULL, *b = NULL, *c = NULL;
        CHECK_OK(ect_region_open(&owner, &a));
        CHECK(ect_region_is_creator(a));
        CHECK_OK(ect_region_open(&joiner, &b));
        ect_region_close(a);
        CHECK_MSG(ect_region_open(&owner, &c) == ECT_OK, "round %d: %s", round, ect_last_error());
        ect_region_close(c);
        ect_region_close(b);
        CHECK(!ts_exists(path));
    }
    ect__region_test_flags = 0;
    ts_check_no_leftovers();
}

/* ---- closing ----------------------------------------------------------------------- */

TS_SHM_CASE(test_only_the_last_close_removes_the_file)
{
    char name[64], path[256];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 8);
    ect_region_t *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(ect_region_open(&p, &a));
    CHECK_OK(ect_region_open(&p, &b));
    CHECK_OK(ect_region_open(&p, &c));
    ect_region_close(a); /* the creator goes first */
    CHECK(ts_exists(path));
    ect_region_close(c);
    CHECK(ts_exists(path));
    ect_region_close(b);
    CHECK(!ts_exists(path));
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_close_and_accessors_accept_null)
{
    ect_region_close(NULL);
    CHECK(ect_region_data(NULL) == NULL);
    CHECK(ect_region_block_ptr(NULL, 0) == NULL);
    CHECK(ect_region_geometry(NULL) == NULL);
    CHECK_EQ_U64(ect_region_file_size(NULL), 0);
    CHECK(ect_region_path(NULL) == NULL);
    CHECK(ect_region_name(NULL) == NULL);
    CHECK_EQ_INT(ect_region_is_creator(NULL), 0);
    CHECK_EQ_INT(ect_region_fd(NULL), -1);
}

/* ---- read-only ----------------------------------------------------------------------- */

TS_SHM_CASE(test_readonly_open_sees_data_and_keeps_region_alive)
{
    char name[64], path[256];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 8);
    p.instance_id = "ro-inst";
    ect_region_t *w = NULL, *ro = NULL, *ro2 = NULL;
    CHECK_OK(ect_region_open(&p, &w));
    memset(ect_region_block_ptr(w, 7), 0x42, 256);

    CHECK_OK(ect_region_open_readonly(name, NULL, &ro));
    CHECK_OK(ect_region_open_readonly(path, NULL, &ro2));
    CHECK_EQ_INT(ect_region_is_readonly(ro), 1);
    CHECK_EQ_INT(ect_region_is_creator(ro), 0);
    CHECK_STR_EQ(ect_region_name(ro2), name);
    CHECK_EQ_U64(ect_region_geometry(ro)->num_blocks, 8);
    CHECK_EQ_U64(ect_region_geometry(ro)->block_size_bytes, 256);
    CHECK_EQ_U64(ect_region_geometry(ro)->hidden_dim, 64);
    CHECK_EQ_INT(ect_region_geometry(ro)->dtype, ECT_DTYPE_F32);
    CHECK_EQ_U64(ect_region_data_offset(ro), ect_region_data_offset(w));
    CHECK_EQ_INT(((uint8_t *)ect_region_block_ptr(ro, 7))[100], 0x42);
    CHECK_EQ_INT(((uint8_t *)ect_region_block_ptr(ro2, 7))[255], 0x42);
    CHECK_EQ_INT(fcntl(ect_region_fd(ro), F_GETFL) & O_ACCMODE, O_RDONLY);

    /* The read-only holders keep the file after the writer closes. */
    ect_region_close(w);
    CHECK(ts_exists(path));
    ect_region_close(ro);
    CHECK(ts_exists(path));
    ect_region_close(ro2);
    CHECK(!ts_exists(path));

    CHECK_STATUS(ect_region_open_readonly(name, NULL, &ro), ECT_ERR_NOT_FOUND);
    char missing[128];
    snprintf(missing, sizeof(missing), "../ectier-no-such-dir-%d/x", (int)getpid());
    CHECK_STATUS(ect_region_open_readonly(missing, NULL, &ro), ECT_ERR_NOT_FOUND);
    CHECK_STATUS(ect_region_open_readonly(".x", NULL, &ro), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_region_open_readonly(name, "", &ro), ECT_ERR_INVALID_ARG);
    CHECK_STATUS(ect_region_open_readonly(NULL, NULL, &ro), ECT_ERR_INVALID_ARG);
    write_file(path, NULL, 8192, 'g');
    CHECK_STATUS(ect_region_open_readonly(path, NULL, &ro), ECT_ERR_INCOMPATIBLE);
    unlink(path);
    ts_check_no_leftovers();
}

/* ---- pre-fault ------------------------------------------------------------------------ */

TS_SHM_CASE(test_prefault_maps_every_page_for_creator_and_joiner)
{
    char name[64];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ect_region_params_t p;
    /* 8 MiB of blocks: 32768 x 256 B */
    ts_region_params(&p, name, NULL, 32768);
    ect_region_t *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(ect_region_open(&p, &a));
    long kb = rss_kb_of(ect_region_data(a));
    CHECK_MSG(kb >= 8192, "creator's mapping has %ld KiB resident", kb);

    p.flags = ECT_REGION_NO_PREFAULT;
    CHECK_OK(ect_region_open(&p, &b));
    kb = rss_kb_of(ect_region_data(b));
    CHECK_MSG(kb < 1024, "unprefaulted mapping has %ld KiB resident", kb);

    p.flags = 0;
    CHECK_OK(ect_region_open(&p, &c));
    kb = rss_kb_of(ect_region_data(c));
    CHECK_MSG(kb >= 8192, "joiner's mapping has %ld KiB resident", kb);
    ect_region_close(c);
    ect_region_close(b);
    ect_region_close(a);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_touch_fallback_faults_pages_and_keeps_bytes)
{
    char name[64], path[256];
    ect_test_unique_name(name, sizeof(name), "ectt_");
    ts_region_path(path, sizeof(path), TS_SHM, name);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = 64 * page;
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, (off_t)len) == 0);
    /* Bytes on a few pages, written through the file: the rest of the file
     * has no pages yet. */
    for (size_t pg = 3; pg < 64; pg += 10)
        CHECK(pwrite(fd, "pattern", 7, (off_t)(pg * page + 100)) == 7);
    uint8_t *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(map != MAP_FAILED);
    unsigned char vec[64];
    CHECK(mincore(map, len, vec) == 0);
    CHECK_EQ_INT(vec[3] & 1, 1);
    CHECK_EQ_INT(vec[4] & 1, 0);
    CHECK(rss_kb_of(map) < (long)(len / 1024));

    ect__region_test_flags = ECT__REGION_TEST_FORCE_TOUCH;
    CHECK_OK(ect__region_prefault(map, len));
    ect__region_test_flags = 0;
    CHECK(mincore(map, len, vec) == 0);
    for (size_t pg = 0; pg < 64; pg++)
        CHECK_MSG(vec[pg] & 1, "page %zu not resident", pg);
    CHECK_EQ_INT(rss_kb_of(map), (long)(len / 1024));
    for (size_t pg = 0; pg < 64; pg++) {
        int want = pg % 10 == 3;
        CHECK_MSG((memcmp(map + pg * page + 100, "pattern", 7) == 0) == want,
                  "page %zu bytes changed", pg);
        CHECK_EQ_INT(map[pg * page], 0);
    }
    munmap(map, len);
    close(fd);
    unlink(path);

    /* And through open: the fallback fills the mapping too. */
    ect_region_params_t p;
    ts_region_params(&p, name, NULL, 32768);
    ect__region_test_flags = ECT__REGION_TEST_FORCE_TOUCH;
    ect_region_t *r = NULL;
    CHECK_OK(ect_region_open(&p, &r));
    ect__region_test_flags = 0;
    long kb = rss_kb_of(ect_region_data(r));
    CHECK_MSG(kb >= 8192, "fallback left %ld KiB resident", kb);
    ect_region_close(r);
    ts_check_no_leftovers();
}

/* ---- a full file system ---------------------------------------------------------------- */

/* Mount a 1 MiB tmpfs on dir in a mount namespace of this case's own, so it
 * disappears with the case whatever happens.  SKIPs where not permitted. */
static void
mount_small_tmpfs(const char *dir)
{
    if (unshare(CLONE_NEWNS) != 0) {
        rmdir(dir);
        SKIP("unshare(CLONE_NEWNS): %s", strerror(errno));
    }
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", dir, "tmpfs", 0, "size=1m") != 0) {
        rmdir(dir);
        SKIP("mount tmpfs: %s", strerror(errno));
    }
}

static void
full_filesystem_case(unsigned test_flags)
{
    char dir[256], n1[64], n2[64];
    ts_shm_make_dir(dir, sizeof(dir));
    mount_small_tmpfs(dir);
    ect_test_unique_name(n1, sizeof(n1), "ectt_");
    ect_test_unique_name(n2, sizeof(n2), "ectt_");
    ect__region_test_flags = test_flags;

    ect_region_params_t p;
    ts_region_params(&p, n1, dir, 16384); /* 4 MiB in a 1 MiB file system */
    ect_region_t *r = NULL, *r2 = NULL;
    CHECK_STATUS(ect_region_open(&p, &r), ECT_ERR_NO_SPACE);
    CHECK_CONTAINS(ect_last_error(),
                   "needs 4198400 bytes (16384 blocks x 256 bytes + 4096 header)");
    CHECK_CONTAINS(ect_last_error(), "of 1048576 bytes free");
    CHECK_EQ_INT(ts_count_prefix(dir, ""), 0);

    /* What fits works, and a second region that no longer fits fails
     * cleanly while the first stays usable. */
    ts_region_params(&p, n1, dir, 2048); /* 512 KiB */
    CHECK_OK(ect_region_open(&p, &r));
    ts_region_params(&p, n2, dir, 2400);
    CHECK_STATUS(ect_region_open(&p, &r2), ECT_ERR_NO_SPACE);
    CHECK_EQ_INT(ts_count_prefix(dir, ""), 1);
    memset(ect_region_data(r), 0x11, 2048 * 256);
    ect_region_close(r);
    CHECK_EQ_INT(ts_count_prefix(dir, ""), 0);
    ect__region_test_flags = 0;

    CHECK(umount2(dir, MNT_DETACH) == 0);
    ts_shm_remove_dir(dir);
    ts_check_no_leftovers();
}

TS_SHM_CASE(test_full_filesystem_gives_no_space_and_leaves_nothing)
{
    full_filesystem_case(0);
}

TS_SHM_CASE(test_full_filesystem_caught_by_fallocate_without_free_space_check)
{
    full_filesystem_case(ECT__REGION_TEST_SKIP_SPACE_CHECK);
}

TS_SHM_CASE(test_full_filesystem_with_named_temp_file_leaves_nothing)
{
    full_filesystem_case(ECT__REGION_TEST_SKIP_SPACE_CHECK | ECT__REGION_TEST_NAMED_TMP);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_open_creates_file_with_header_and_blocks),
    ECT_CASE(test_default_name_comes_from_instance_and_rank),
    ECT_CASE(test_bad_names_are_rejected_and_create_nothing),
    ECT_CASE(test_bad_geometry_and_directory_are_rejected),
    ECT_CASE(test_second_open_joins_and_shares_memory),
    ECT_CASE(test_join_with_other_geometry_is_incompatible),
    ECT_CASE(test_garbage_file_under_the_name_is_incompatible_and_untouched),
    ECT_CASE(test_wrong_size_or_bad_header_file_is_incompatible_and_untouched),
    ECT_CASE(test_symlink_or_fifo_under_the_name_is_refused_without_hanging),
    ECT_CASE(test_exclusively_held_file_gives_busy_then_joins),
    ECT_CASE(test_second_owner_in_one_process_is_refused_joiners_are_not),
    ECT_CASE(test_ownership_ends_with_the_close_even_right_after_creation),
    ECT_CASE(test_only_the_last_close_removes_the_file),
    ECT_CASE(test_close_and_accessors_accept_null),
    ECT_CASE(test_readonly_open_sees_data_and_keeps_region_alive),
    ECT_CASE(test_prefault_maps_every_page_for_creator_and_joiner),
    ECT_CASE(test_touch_fallback_faults_pages_and_keeps_bytes),
    ECT_CASE(test_full_filesystem_gives_no_space_and_leaves_nothing),
    ECT_CASE(test_full_filesystem_caught_by_fallocate_without_free_space_check),
    ECT_CASE(test_full_filesystem_with_named_temp_file_leaves_nothing),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
