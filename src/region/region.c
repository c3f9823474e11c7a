/*
 * Opening and closing the shared region (SPEC §4): race-free create-or-join
 * of "<dir>/<name>.mmap", the header check, the mapping and pre-fault.
 *
 * Invariants
 *   - The name never refers to a half-made file: a creator builds the file
 *     unnamed (O_TMPFILE, or a "<name>.XXXXXX.ectier.tmp" file where that is
 *     not available), takes its shared lock, writes the header, reserves
 *     every page and only then link()s it into place.  link() fails with EEXIST
 *     if another creator won; the loser drops its file and joins.
 *   - Every process that has the region open holds LOCK_SH on its own open
 *     file description.  A joiner takes LOCK_SH and then checks that the name
 *     still refers to the inode it opened; if not (a last holder, the
 *     reaper or gc removed it in between), it starts over.
 *   - A region file is removed only by whoever holds LOCK_EX on it, and only
 *     while its name still refers to the locked inode.
 *
 * Closing: ect_region_close() asks flock to convert our LOCK_SH into
 * LOCK_EX without waiting.  On Linux that conversion drops our shared lock
 * and checks for other holders in one step under the inode's lock list, so
 * it succeeds exactly when no other open file description holds a lock; a
 * waiting exclusive request (the reaper) is not a holder and does not get in
 * between.  If it succeeds we are the last holder and unlink the name before
 * returning; when two holders close at once, the second to convert sees the
 * first one gone and unlinks.  Either way our lock is gone after the call,
 * and close(fd) ends the hold.  Unmapping first is not required for
 * correctness, but it returns the memory before the unlink can free it.
 *
 * Ownership (ECT_REGION_OWNER): after the hold, an owner takes an OFD
 * write lock on one byte far beyond the data (region_internal.h) without
 * waiting; failing that, another open owns the region and we give up our
 * hold.  OFD locks and flock locks are separate on Linux (flock conversion,
 * the reaper's LOCK_EX and gc never see an OFD lock, and the reverse), and
 * an OFD lock belongs to the open file description, so it conflicts with a
 * second owner in the same process too and dies with the last descriptor of
 * it: close, exit or SIGKILL.
 *
 * Locking: no locks in memory; the region is immutable once opened.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "region/region_internal.h"

#define DEFAULT_LOCK_TIMEOUT_MS 5000u
/* Each attempt either creates, joins, or saw the name change under it
 * because another process created or removed the file at that moment.  Many
 * such changes in a row mean something keeps churning the name. */
#define MAX_ATTEMPTS 64

struct ect_region {
    int fd;
    int creator;
    int owner; /* holds the owner lock (ECT_REGION_OWNER) */
    int readonly;
    uint8_t *map;
    size_t map_len;
    uint64_t data_offset;
    uint64_t file_size;
    ect_geometry_t geom; /* validated (ect_geometry_validate) */
    char name[ECT_REGION_NAME_MAX + 1];
    char instance_id[ECT_REGION_INSTANCE_MAX + 1];
    char path[PATH_MAX];
};

/* What one attempt found. */
enum step {
    STEP_DONE,    /* the region's file is open, locked and checked */
    STEP_MISSING, /* no file under the name: create it */
    STEP_RETRY,   /* the name changed under us: start over */
};

/* ---- helpers ---------------------------------------------------------------- */

static int
same_file(const char *path, int fd)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* LOCK_SH, waiting up to timeout_ms for an exclusive holder to finish.  A
 * bounded wait rather than a blocking flock: a foreign program holding the
 * file exclusively must give an error, not a hang. */
static ect_status_t
lock_shared(int fd, const char *path, uint32_t timeout_ms)
{
    uint64_t deadline = ect__now_ns() + (uint64_t)timeout_ms * 1000000u;
    long nap_ns = 100 * 1000;
    for (;;) {
        if (flock(fd, LOCK_SH | LOCK_NB) == 0)
            return ECT_OK;
        if (errno == EINTR)
            continue;
        if (errno != EWOULDBLOCK)
            return ect__error_errno(ECT_ERR_IO, "region %s: flock(LOCK_SH)", path);
        if (ect__now_ns() >= deadline)
            return ect__error(ECT_ERR_BUSY,
                              "region %s: another process held it exclusively for %" PRIu32
                              " ms (see /proc/locks)",
                              path, timeout_ms);
        struct timespec ts = {0, nap_ns};
        nanosleep(&ts, NULL);
        if (nap_ns < 10 * 1000 * 1000)
            nap_ns *= 2;
    }
}

/* Give up this process's hold on an open region file: if we are the last
 * holder, unlink its name first (see the file comment for why the
 * conversion is race-free).  Closes fd, then collects the file's reaper if
 * it is our own child and this close let it go (ect__region_reap). */
static void
release_hold(int fd, const char *path)
{
    struct stat sb;
    int have_id = fstat(fd, &sb) == 0;
    int last = flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (last && same_file(path, fd)) {
        if (unlink(path) == 0)
            ECT_LOG_D("region %s: last holder, removed", path);
        else if (errno != ENOENT)
            ECT_LOG_W("region %s: last holder but unlink failed: %s", path, strerror(errno));
    }
    close(fd);
    ect__region_reap(last && have_id, have_id ? sb.st_dev : 0, have_id ? sb.st_ino : 0);
}

/* The header's geometry fields, as r's geometry writes them. */
static void
fill_geometry(const struct ect_region *r, struct ect__region_header *h)
{
    h->hidden_dim = r->geom.hidden_dim;
    h->dtype_code = (uint32_t)r->geom.dtype;
    h->element_size = (uint32_t)ect_dtype_size(r->geom.dtype);
    h->block_size_bytes = r->geom.block_size_bytes;
    h->num_blocks = r->geom.num_blocks;
}

static void
fill_header(struct ect__region_header *h, const struct ect_region *r)
{
    memset(h, 0, sizeof(*h));
    memcpy(h->magic, ECT__REGION_MAGIC, ECT__REGION_MAGIC_LEN);
    h->layout_version = ECT__REGION_LAYOUT_VERSION;
    h->header_size = sizeof(*h);
    h->data_offset = r->data_offset;
    h->file_size = r->file_size;
    fill_geometry(r, h);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    h->created_unix_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    h->creator_pid = (int32_t)getpid();
    snprintf(h->name, sizeof(h->name), "%s", r->name);
    snprintf(h->instance_id, sizeof(h->instance_id), "%s", r->instance_id);
}

/* Check the params and fill r's name, path and geometry. */
static ect_status_t
setup_from_params(struct ect_region *r, const ect_region_params_t *p, const char **dir_p)
{
    ect_status_t st;
    const unsigned known =
        ECT_REGION_NO_PREFAULT | ECT_REGION_NO_REAPER | ECT_REGION_NO_SWEEP | ECT_REGION_OWNER;
    if (p->flags & ~known)
        return ect__error(ECT_ERR_INVALID_ARG, "region: unknown flags 0x%x", p->flags & ~known);
    if (p->instance_id != NULL && p->instance_id[0] != '\0') {
        if ((st = ect__region_check_name("region instance id", p->instance_id,
                                         ECT_REGION_INSTANCE_MAX)) != ECT_OK)
            return st;
        snprintf(r->instance_id, sizeof(r->instance_id), "%s", p->instance_id);
    }
    if (p->name != NULL && p->name[0] != '\0') {
        if ((st = ect__region_check_name("region name", p->name, ECT_REGION_NAME_MAX)) != ECT_OK)
            return st;
        snprintf(r->name, sizeof(r->name), "%s", p->name);
    } else {
        if (r->instance_id[0] == '\0')
            return ect__error(ECT_ERR_INVALID_ARG,
                              "region: neither a name nor an instance id was given");
        snprintf(r->name, sizeof(r->name), ECT__REGION_PREFIX "%s_dp%" PRIu32, r->instance_id,
                 p->dp_rank);
    }

    const char *dir = p->dir != NULL ? p->dir : ECT_REGION_DEFAULT_DIR;
    if (dir[0] == '\0')
        return ect__error(ECT_ERR_INVALID_ARG, "region %s: directory is empty", r->name);
    if ((st = ect__region_join_path(r->path, sizeof(r->path), dir, r->name, ECT__REGION_SUFFIX)) !=
        ECT_OK)
        return st;
    struct stat ds;
    if (stat(dir, &ds) != 0)
        return ect__error_errno(errno == ENOENT ? ECT_ERR_NOT_FOUND : ECT_ERR_IO,
                                "region %s: directory %s", r->name, dir);
    if (!S_ISDIR(ds.st_mode))
        return ect__error(ECT_ERR_INVALID_ARG, "region %s: %s is not a directory", r->name, dir);

    if ((st = ect_geometry_validate(&p->geometry)) != ECT_OK)
        return ect__error(st, "region %s: %s", r->name, ect_last_error());
    const ect_geometry_t *g = &p->geometry;

    long page = sysconf(_SC_PAGESIZE);
    uint64_t data_offset = ECT__REGION_HEADER_AREA;
    if (page > 0 && (uint64_t)page > data_offset)
        data_offset = ((uint64_t)page + ECT__REGION_HEADER_AREA - 1) / ECT__REGION_HEADER_AREA *
                      ECT__REGION_HEADER_AREA;
    uint64_t limit = (uint64_t)INT64_MAX < (uint64_t)SIZE_MAX ? (uint64_t)INT64_MAX : SIZE_MAX;
    if (g->num_blocks > (limit - data_offset) / g->block_size_bytes)
        return ect__error(ECT_ERR_OVERFLOW,
                          "region %s: %" PRIu64 " blocks of %" PRIu64 " bytes do not fit in a file",
                          r->name, g->num_blocks, g->block_size_bytes);

    r->geom = *g;
    r->data_offset = data_offset;
    r->file_size = data_offset + g->num_blocks * g->block_size_bytes;
    *dir_p = dir;
    return ECT_OK;
}

/* ---- attach: open an existing file, lock it, check its header ----------------- */

/* Open r->path, take LOCK_SH, make sure the name still refers to the opened
 * file, and check its header.  On STEP_DONE r->fd is set and *h holds the
 * header.  Errors leave the file untouched. */
static ect_status_t
attach_once(struct ect_region *r, int oflags, uint32_t timeout_ms, struct ect__region_header *h,
            enum step *step_p)
{
    ect_status_t st;
    /* O_NONBLOCK: a FIFO planted under the name must not block open(). */
    int fd = open(r->path, oflags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ENOENT) {
            *step_p = STEP_MISSING;
            return ECT_OK;
        }
        if (errno == ELOOP)
            return ect__error(ECT_ERR_INCOMPATIBLE,
                              "region %s is a symbolic link, not an ectier region", r->path);
        return ect__error_errno(ECT_ERR_IO, "region %s: open", r->path);
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st = ect__error_errno(ECT_ERR_IO, "region %s: fstat", r->path);
        goto close_fd;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = ect__error(ECT_ERR_INCOMPATIBLE, "region %s is not a regular file", r->path);
        goto close_fd;
    }
    /* The descriptor may be handed to other processes (fd passing); give
     * it ordinary blocking semantics. */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    if ((st = lock_shared(fd, r->path, timeout_ms)) != ECT_OK)
        goto close_fd;
    if (!same_file(r->path, fd)) {
        close(fd);
        *step_p = STEP_RETRY;
        return ECT_OK;
    }
    /* The size now is the size for good: files are published complete. */
    if (fstat(fd, &sb) != 0) {
        st = ect__error_errno(ECT_ERR_IO, "region %s: fstat", r->path);
        goto close_fd;
    }
    memset(h, 0, sizeof(*h));
    ssize_t got = pread(fd, h, sizeof(*h), 0);
    if (got < 0) {
        st = ect__error_errno(ECT_ERR_IO, "region %s: read header", r->path);
        goto close_fd;
    }
    char why[256];
    if (ect__region_header_check(h, (uint64_t)sb.st_size, why, sizeof(why)) != 0) {
        st = ect__error(ECT_ERR_INCOMPATIBLE,
                        "region %s: %s; left untouched (remove it with `ectier gc` if it is an "
                        "orphaned region, or use another name)",
                        r->path, why);
        goto close_fd;
    }
    r->fd = fd;
    *step_p = STEP_DONE;
    return ECT_OK;

close_fd:
    close(fd);
    return st;
}

/* Join: attach, then insist on the same geometry. */
static ect_status_t
join_once(struct ect_region *r, uint32_t timeout_ms, enum step *step_p)
{
    struct ect__region_header h;
    ect_status_t st = attach_once(r, O_RDWR, timeout_ms, &h, step_p);
    if (st != ECT_OK || *step_p != STEP_DONE)
        return st;
    struct ect__region_header want_h;
    fill_geometry(r, &want_h);
    if (h.hidden_dim != want_h.hidden_dim || h.dtype_code != want_h.dtype_code ||
        h.element_size != want_h.element_size || h.block_size_bytes != want_h.block_size_bytes ||
        h.num_blocks != want_h.num_blocks) {
        char have[160], want[160];
        ect__region_format_geometry(have, sizeof(have), h.hidden_dim, h.dtype_code, h.element_size,
                                    h.block_size_bytes, h.num_blocks);
        ect__region_format_geometry(want, sizeof(want), want_h.hidden_dim, want_h.dtype_code,
                                    want_h.element_size, want_h.block_size_bytes,
                                    want_h.num_blocks);
        close(r->fd);
        r->fd = -1;
        return ect__error(ECT_ERR_INCOMPATIBLE,
                          "region %s exists with geometry %s (made by pid %" PRId32
                          "), but this process asked for %s",
                          r->path, have, h.creator_pid, want);
    }
    /* The creator's data offset rules; it is checked and page-aligned. */
    r->data_offset = h.data_offset;
    r->file_size = h.file_size;
    return ECT_OK;
}

/* ---- create ------------------------------------------------------------------- */

/* An unnamed file in dir, or a named temp file where O_TMPFILE or /proc (to
 * link it) is missing.  tmp_name gets the temp file's name, or "". */
static ect_status_t
make_temp(const char *dir, const char *name, char *tmp_path, size_t tmp_path_len, int *fd_p)
{
    tmp_path[0] = '\0';
    if (!(ect__region_test_flags & ECT__REGION_TEST_NAMED_TMP) &&
        access("/proc/self/fd", X_OK) == 0) {
        int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd >= 0) {
            *fd_p = fd;
            return ECT_OK;
        }
        if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
            return ect__error_errno(ECT_ERR_IO, "region %s: cannot create a file in %s", name, dir);
    }
    ect_status_t st =
        ect__region_join_path(tmp_path, tmp_path_len, dir, name, ".XXXXXX" ECT__REGION_TMP_SUFFIX);
    if (st != ECT_OK)
        return st;
    int fd = mkostemps(tmp_path, (int)strlen(ECT__REGION_TMP_SUFFIX), O_CLOEXEC);
    if (fd < 0) {
        st = ect__error_errno(ECT_ERR_IO, "region %s: cannot create %s", name, tmp_path);
        tmp_path[0] = '\0';
        return st;
    }
    *fd_p = fd;
    return ECT_OK;
}

static ect_status_t
no_space(const struct ect_region *r, const char *dir, uint64_t avail, uint64_t total)
{
    return ect__error(ECT_ERR_NO_SPACE,
                      "region %s needs %" PRIu64 " bytes (%" PRIu64 " blocks x %" PRIu64
                      " bytes + %" PRIu64 " header) but %s has %" PRIu64 " of %" PRIu64
                      " bytes free; lower ec_cpu_bytes or enlarge %s",
                      r->name, r->file_size, r->geom.num_blocks, r->geom.block_size_bytes,
                      r->data_offset, dir, avail, total, dir);
}

/* Fail early, with the numbers, when the file system cannot hold the region. */
static ect_status_t
check_space(int fd, const struct ect_region *r, const char *dir)
{
    struct statvfs vfs;
    if (ect__region_test_flags & ECT__REGION_TEST_SKIP_SPACE_CHECK)
        return ECT_OK;
    if (fstatvfs(fd, &vfs) != 0)
        return ECT_OK; /* fallocate below still catches a full file system */
    uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
    if (avail < r->file_size)
        return no_space(r, dir, avail, (uint64_t)vfs.f_blocks * vfs.f_frsize);
    return ECT_OK;
}

/* Reserve every page, so that a full file system fails here and not with a
 * SIGBUS on some later write into the mapping (the free-space check alone
 * races with other users of the file system). */
static ect_status_t
reserve_pages(int fd, const struct ect_region *r, const char *dir)
{
    for (;;) {
        if (fallocate(fd, 0, 0, (off_t)r->file_size) == 0)
            return ECT_OK;
        if (errno == EINTR)
            continue; /* tmpfs stops at a pending signal; pages so far stay */
        if (errno == ENOSPC || errno == ENOMEM) {
            struct statvfs vfs;
            uint64_t avail = 0, total = 0;
            if (fstatvfs(fd, &vfs) == 0) {
                avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
                total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
            }
            return no_space(r, dir, avail, total);
        }
        if (errno == EOPNOTSUPP)
            break;
        return ect__error_errno(ECT_ERR_IO, "region %s: fallocate(%" PRIu64 ")", r->name,
                                r->file_size);
    }
    ECT_LOG_I("region %s: %s cannot reserve pages; a full file system would show as SIGBUS",
              r->name, dir);
    if (ftruncate(fd, (off_t)r->file_size) != 0)
        return ect__error_errno(ECT_ERR_IO, "region %s: ftruncate(%" PRIu64 ")", r->name,
                                r->file_size);
    return ECT_OK;
}

static ect_status_t
create_once(struct ect_region *r, const char *dir, uint32_t flags, enum step *step_p)
{
    char tmp_path[PATH_MAX];
    int fd = -1;
    ect_status_t st = make_temp(dir, r->name, tmp_path, sizeof(tmp_path), &fd);
    if (st != ECT_OK)
        return st;
    const char *tmp_name = tmp_path[0] != '\0' ? strrchr(tmp_path, '/') + 1 : NULL;

    if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
        /* Only a sweep removing our fresh temp file can hold it. */
        if (errno == EWOULDBLOCK) {
            *step_p = STEP_RETRY;
            goto drop_temp;
        }
        st = ect__error_errno(ECT_ERR_IO, "region %s: flock(LOCK_SH)", r->name);
        goto drop_temp;
    }
    /* The header goes first: it is what proves a temp file left by a
     * creator that died from here on to be ours (list.c), so that gc and
     * the sweep may remove it. */
    struct ect__region_header h;
    fill_header(&h, r);
    if (pwrite(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
        st = ect__error_errno(ECT_ERR_IO, "region %s: write header", r->name);
        goto drop_temp;
    }
    if ((st = check_space(fd, r, dir)) == ECT_OK) {
        /* Before the slow part (reserving pages), so that from here on a
         * crash leaves nothing: the reaper removes a temp file too. */
        if (!(flags & ECT_REGION_NO_REAPER)) {
            const char *file_name = strrchr(r->path, '/') + 1;
            if (ect__region_spawn_reaper(fd, dir, file_name, tmp_name) != ECT_OK)
                ect__log_last_error(ECT_LOG_WARN,
                                    "region: no reaper; a crash would leave the file");
        }
        st = reserve_pages(fd, r, dir);
    }
    if (st != ECT_OK) {
        /* Maybe a racing creator took the space and already published:
         * then join it instead of failing. */
        if (st == ECT_ERR_NO_SPACE && access(r->path, F_OK) == 0) {
            st = ECT_OK;
            *step_p = STEP_RETRY;
        }
        goto drop_temp;
    }
    int rc;
    if (tmp_name == NULL) {
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        rc = linkat(AT_FDCWD, proc, AT_FDCWD, r->path, AT_SYMLINK_FOLLOW);
    } else {
        rc = link(tmp_path, r->path);
    }
    if (rc != 0) {
        /* EEXIST: another creator won; ENOENT: a sweep took our temp file. */
        if (errno == EEXIST || errno == ENOENT) {
            *step_p = STEP_RETRY;
            goto drop_temp;
        }
        st = ect__error_errno(ECT_ERR_IO, "region %s: link", r->path);
        goto drop_temp;
    }
    if (tmp_name != NULL && unlink(tmp_path) != 0)
        ECT_LOG_W("region %s: cannot remove %s: %s", r->name, tmp_path, strerror(errno));
    r->fd = fd;
    r->creator = 1;
    *step_p = STEP_DONE;
    return ECT_OK;

drop_temp:
    if (tmp_name != NULL && same_file(tmp_path, fd))
        unlink(tmp_path);
    close(fd);
    return st;
}

/* ---- ownership ------------------------------------------------------------------ */

static int
ofd_lock(int fd, short type, int64_t start, int64_t len)
{
    struct flock l = {.l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len};
    int rc;
    while ((rc = fcntl(fd, F_OFD_SETLK, &l)) != 0 && errno == EINTR)
        ;
    return rc;
}

/* The owner's pid from its pid byte, or 0 if none is set (yet). */
static int32_t
owner_pid(int fd)
{
    struct flock l = {.l_type = F_WRLCK,
                      .l_whence = SEEK_SET,
                      .l_start = ECT__REGION_OWNER_PID_BASE,
                      .l_len = ECT__REGION_OWNER_PID_MAX};
    if (fcntl(fd, F_OFD_GETLK, &l) != 0 || l.l_type == F_UNLCK)
        return 0;
    int64_t pid = (int64_t)l.l_start - ECT__REGION_OWNER_PID_BASE;
    return pid > 0 && pid < ECT__REGION_OWNER_PID_MAX ? (int32_t)pid : 0;
}

static ect_status_t
take_ownership(struct ect_region *r)
{
    if (ofd_lock(r->fd, F_WRLCK, ECT__REGION_OWNER_BYTE, 1) != 0) {
        if (errno != EAGAIN && errno != EACCES)
            return ect__error_errno(ECT_ERR_IO,
                                    "region %s: cannot take the owner lock (F_OFD_SETLK)", r->path);
        int32_t pid = owner_pid(r->fd);
        char who[48];
        if (pid > 0)
            snprintf(who, sizeof(who), "pid %" PRId32, pid);
        else
            snprintf(who, sizeof(who), "another process (pid unknown)");
        return ect__error(ECT_ERR_BUSY,
                          "region %s is already owned by %s: another scheduler or producer uses "
                          "this region (each instance and dp rank needs its own region_name or "
                          "instance id); stop that one first or choose another name",
                          r->path, who);
    }
    /* Only informs whoever is refused next, so a failure costs nothing. */
    if (ofd_lock(r->fd, F_RDLCK, ECT__REGION_OWNER_PID_BASE + (int64_t)getpid(), 1) != 0)
        ECT_LOG_D("region %s: cannot publish the owner pid: %s", r->path, strerror(errno));
    r->owner = 1;
    return ECT_OK;
}

/* ---- open / close --------------------------------------------------------------- */

static ect_status_t
map_region(struct ect_region *r, int prot)
{
    void *map = mmap(NULL, (size_t)r->file_size, prot, MAP_SHARED, r->fd, 0);
    if (map == MAP_FAILED)
        return ect__error_errno(ECT_ERR_IO, "region %s: mmap(%" PRIu64 ")", r->path, r->file_size);
    r->map = map;
    r->map_len = (size_t)r->file_size;
    /* The header is written once, by the creator, before anyone maps it; a
     * stray write into it would make the file unreadable to others. */
    if ((prot & PROT_WRITE) && mprotect(map, (size_t)r->data_offset, PROT_READ) != 0)
        ECT_LOG_D("region %s: cannot write-protect the header: %s", r->path, strerror(errno));
    return ECT_OK;
}

static void
region_free(struct ect_region *r)
{
    if (r->map != NULL)
        munmap(r->map, r->map_len);
    if (r->fd >= 0)
        release_hold(r->fd, r->path);
    ect__free(r);
}

ect_status_t
ect_region_open(const ect_region_params_t *params, ect_region_t **region_p)
{
    if (params == NULL || region_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "region open: NULL params or region_p");
    struct ect_region *r = ect__calloc(1, sizeof(*r));
    if (r == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "region open: out of memory");
    r->fd = -1;
    const char *dir = NULL;
    ect_status_t st = setup_from_params(r, params, &dir);
    if (st != ECT_OK)
        goto free_region;
    uint32_t timeout_ms =
        params->lock_timeout_ms != 0 ? params->lock_timeout_ms : DEFAULT_LOCK_TIMEOUT_MS;

    if (!(params->flags & ECT_REGION_NO_SWEEP))
        ect__region_sweep(dir);
    ect__region_reap(0, 0, 0);

    enum step step = STEP_RETRY;
    for (int attempt = 0; attempt < MAX_ATTEMPTS && step != STEP_DONE; attempt++) {
        if ((st = join_once(r, timeout_ms, &step)) != ECT_OK)
            goto free_region;
        if (step == STEP_MISSING && (st = create_once(r, dir, params->flags, &step)) != ECT_OK)
            goto free_region;
    }
    if (step != STEP_DONE) {
        st = ect__error(ECT_ERR_BUSY,
                        "region %s: the file kept being created and removed by other processes "
                        "(%d attempts)",
                        r->path, MAX_ATTEMPTS);
        goto free_region;
    }
    /* Before mapping or pre-faulting: a refused owner touches nothing. */
    if ((params->flags & ECT_REGION_OWNER) && (st = take_ownership(r)) != ECT_OK)
        goto free_region;
    if ((st = map_region(r, PROT_READ | PROT_WRITE)) != ECT_OK)
        goto free_region;
    if (!(params->flags & ECT_REGION_NO_PREFAULT) &&
        (st = ect__region_prefault(r->map + r->data_offset,
                                   (size_t)(r->file_size - r->data_offset))) != ECT_OK)
        goto free_region;
    ECT_LOG_I("region %s: %s%s (%" PRIu64 " blocks x %" PRIu64 " bytes)", r->path,
              r->creator ? "created" : "joined", r->owner ? " as owner" : "", r->geom.num_blocks,
              r->geom.block_size_bytes);
    *region_p = r;
    return ECT_OK;

free_region:
    region_free(r);
    return st;
}

ect_status_t
ect_region_open_readonly(const char *path_or_name, const char *dir, ect_region_t **region_p)
{
    ect_status_t st;
    if (path_or_name == NULL || region_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "region open_readonly: NULL argument");
    if (dir != NULL && dir[0] == '\0')
        return ect__error(ECT_ERR_INVALID_ARG, "region open_readonly: empty directory");
    struct ect_region *r = ect__calloc(1, sizeof(*r));
    if (r == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "region open_readonly: out of memory");
    r->fd = -1;
    r->readonly = 1;

    const char *slash = strrchr(path_or_name, '/');
    if (slash != NULL) {
        if (strlen(path_or_name) >= sizeof(r->path)) {
            st = ect__error(ECT_ERR_INVALID_ARG, "region path is longer than %zu bytes",
                            sizeof(r->path) - 1);
            goto free_region;
        }
        snprintf(r->path, sizeof(r->path), "%s", path_or_name);
        const char *base = slash + 1;
        size_t n = strlen(base), sl = strlen(ECT__REGION_SUFFIX);
        if (n > sl && strcmp(base + n - sl, ECT__REGION_SUFFIX) == 0)
            n -= sl;
        snprintf(r->name, sizeof(r->name), "%.*s",
                 (int)(n < ECT_REGION_NAME_MAX ? n : ECT_REGION_NAME_MAX), base);
    } else {
        if ((st = ect__region_check_name("region name", path_or_name, ECT_REGION_NAME_MAX)) !=
            ECT_OK)
            goto free_region;
        snprintf(r->name, sizeof(r->name), "%s", path_or_name);
        if ((st = ect__region_join_path(r->path, sizeof(r->path),
                                        dir != NULL ? dir : ECT_REGION_DEFAULT_DIR, r->name,
                                        ECT__REGION_SUFFIX)) != ECT_OK)
            goto free_region;
    }

    struct ect__region_header h;
    enum step step = STEP_RETRY;
    for (int attempt = 0; attempt < MAX_ATTEMPTS && step == STEP_RETRY; attempt++)
        if ((st = attach_once(r, O_RDONLY, DEFAULT_LOCK_TIMEOUT_MS, &h, &step)) != ECT_OK)
            goto free_region;
    if (step == STEP_MISSING) {
        st = ect__error(ECT_ERR_NOT_FOUND, "region %s does not exist", r->path);
        goto free_region;
    }
    if (step != STEP_DONE) {
        st = ect__error(ECT_ERR_BUSY, "region %s: the file kept being replaced", r->path);
        goto free_region;
    }
    r->geom = (ect_geometry_t){.hidden_dim = h.hidden_dim,
                               .dtype = (ect_dtype_t)h.dtype_code,
                               .block_size_bytes = h.block_size_bytes,
                               .num_blocks = h.num_blocks};
    /* A valid header can still name a dtype this build does not know, or
     * one whose size is not the header's element size (then the block size
     * is not hidden_dim x the dtype's size): not a region this library can
     * use. */
    if ((st = ect_geometry_validate(&r->geom)) != ECT_OK) {
        st = ect__error(ECT_ERR_INCOMPATIBLE, "region %s: header geometry is unusable: %s", r->path,
                        ect_last_error());
        /* Let go without the last-holder removal: a refused open leaves the
         * file as it found it. */
        close(r->fd);
        r->fd = -1;
        goto free_region;
    }
    r->data_offset = h.data_offset;
    r->file_size = h.file_size;
    snprintf(r->instance_id, sizeof(r->instance_id), "%s", h.instance_id);
    if ((st = map_region(r, PROT_READ)) != ECT_OK)
        goto free_region;
    *region_p = r;
    return ECT_OK;

free_region:
    region_free(r);
    return st;
}

void
ect_region_close(ect_region_t *region)
{
    if (region != NULL)
        region_free(region);
}

/* ---- accessors ------------------------------------------------------------------ */

void *
ect_region_data(const ect_region_t *region)
{
    return region != NULL ? region->map + region->data_offset : NULL;
}

void *
ect_region_block_ptr(const ect_region_t *region, uint64_t i)
{
    if (region == NULL || i >= region->geom.num_blocks)
        return NULL;
    return region->map + region->data_offset + i * region->geom.block_size_bytes;
}

const ect_geometry_t *
ect_region_geometry(const ect_region_t *region)
{
    return region != NULL ? &region->geom : NULL;
}

uint64_t
ect_region_data_offset(const ect_region_t *region)
{
    return region != NULL ? region->data_offset : 0;
}

uint64_t
ect_region_file_size(const ect_region_t *region)
{
    return region != NULL ? region->file_size : 0;
}

const char *
ect_region_path(const ect_region_t *region)
{
    return region != NULL ? region->path : NULL;
}

const char *
ect_region_name(const ect_region_t *region)
{
    return region != NULL ? region->name : NULL;
}

bool
ect_region_is_creator(const ect_region_t *region)
{
    return region != NULL && region->creator;
}

bool
ect_region_is_readonly(const ect_region_t *region)
{
    return region != NULL && region->readonly;
}

int
ect_region_fd(const ect_region_t *region)
{
    return region != NULL ? region->fd : -1;
}
