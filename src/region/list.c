/*
 * Listing and garbage collection of region files (`ectier inspect`, `ectier
 * gc`) and the orphan sweep that ect_region_open() runs first.
 *
 * Which files count: "*.mmap" files that start with the ectier magic (any
 * name, so regions with a configured name are covered), "ectier_*.mmap"
 * files even without it (listed as FOREIGN, never removed), and
 * "*.ectier.tmp" files (creations through a named temp file).  A file is
 * classified from an open descriptor, so what is read and what is locked
 * are the same inode.  Only files proven to be ectier's are ever locked or
 * removed (info.gc_eligible): a regular "*.mmap" file that starts with the
 * ectier magic, or a temp file named "<region>.XXXXXX.ectier.tmp" that
 * starts with an ectier header naming <region>.  Anything else named like
 * ours (no magic, another program's temp file, a link, FIFO or directory)
 * is reported and left: a stray exclusive lock could stall another
 * program's own protocol, and an unlink could destroy its data.
 *
 * Liveness for gc is the lock itself: a file on which LOCK_EX|LOCK_NB
 * succeeds has no holder, and it is unlinked while we hold that lock and
 * only if its name still refers to the locked inode.  Listing takes no locks
 * and reports holders and waiters from /proc/locks (FLOCK entries matched
 * by device major:minor and inode), and the owner's pid from its OFD pid
 * byte (region.c).  No state is kept between calls.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/error.h"
#include "region/region_internal.h"

/* ---- /proc/locks -------------------------------------------------------------- */

struct lock_entry {
    unsigned major, minor;
    uint64_t ino;
    int32_t pid;
    int blocked;
    int32_t owner_pid; /* an owner's pid byte (OFDLCK), else 0 */
};

struct lock_table {
    struct lock_entry *v;
    size_t n, cap;
};

/* Parse one line: "1: FLOCK  ADVISORY  READ 1234 00:1a:5678 0 EOF", or with
 * "->" after the id for a blocked request; or an owner's pid byte, "2:
 * OFDLCK ADVISORY  READ -1 00:1a:5678 START END" with START in the owner pid
 * range (region_internal.h).  Returns 0 for either, -1 for anything else. */
static int
parse_lock_line(char *line, struct lock_entry *e)
{
    char *save = NULL;
    char *tok = strtok_r(line, " \t\n", &save); /* "1:" */
    if (tok == NULL)
        return -1;
    tok = strtok_r(NULL, " \t\n", &save);
    e->blocked = tok != NULL && strcmp(tok, "->") == 0;
    if (e->blocked)
        tok = strtok_r(NULL, " \t\n", &save);
    int ofd = tok != NULL && strcmp(tok, "OFDLCK") == 0;
    if (tok == NULL || (strcmp(tok, "FLOCK") != 0 && !ofd))
        return -1;
    char *mode = strtok_r(NULL, " \t\n", &save);   /* ADVISORY */
    char *kind = strtok_r(NULL, " \t\n", &save);   /* READ or WRITE */
    char *pid = strtok_r(NULL, " \t\n", &save);    /* pid in our namespace; -1 for OFD */
    char *devino = strtok_r(NULL, " \t\n", &save); /* hex major:minor:decimal inode */
    char *start = strtok_r(NULL, " \t\n", &save);  /* first byte */
    if (mode == NULL || kind == NULL || pid == NULL || devino == NULL)
        return -1;
    char *end;
    long p = strtol(pid, &end, 10);
    if (*end != '\0' || p < INT32_MIN || p > INT32_MAX)
        return -1;
    e->pid = (int32_t)p;
    if (sscanf(devino, "%x:%x:%" SCNu64, &e->major, &e->minor, &e->ino) != 3)
        return -1;
    e->owner_pid = 0;
    if (ofd) {
        if (e->blocked || start == NULL)
            return -1;
        errno = 0;
        long long off = strtoll(start, &end, 10);
        if (errno != 0 || *end != '\0' || off <= ECT__REGION_OWNER_PID_BASE ||
            off >= ECT__REGION_OWNER_PID_BASE + ECT__REGION_OWNER_PID_MAX)
            return -1;
        e->owner_pid = (int32_t)(off - ECT__REGION_OWNER_PID_BASE);
    }
    return 0;
}

/* Read /proc/locks.  Without /proc the table stays empty (holders unknown). */
static ect_status_t
read_locks(struct lock_table *t)
{
    FILE *f = fopen("/proc/locks", "re");
    if (f == NULL) {
        ECT_LOG_D("region list: /proc/locks: %s", strerror(errno));
        return ECT_OK;
    }
    char line[512];
    ect_status_t st = ECT_OK;
    while (fgets(line, sizeof(line), f) != NULL) {
        struct lock_entry e;
        if (parse_lock_line(line, &e) != 0)
            continue;
        if (t->n == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 64;
            struct lock_entry *v = ect__realloc(t->v, cap * sizeof(*v));
            if (v == NULL) {
                st = ect__error(ECT_ERR_NO_MEMORY, "region list: out of memory");
                break;
            }
            t->v = v;
            t->cap = cap;
        }
        t->v[t->n++] = e;
    }
    fclose(f);
    return st;
}

static void
fill_lockers(const struct lock_table *t, const struct stat *st, ect_region_info_t *info)
{
    for (size_t i = 0; i < t->n; i++) {
        const struct lock_entry *e = &t->v[i];
        if (e->ino != (uint64_t)st->st_ino || e->major != major(st->st_dev) ||
            e->minor != minor(st->st_dev))
            continue;
        if (e->owner_pid != 0) {
            info->owner_pid = e->owner_pid;
        } else if (e->blocked) {
            if (info->n_waiters < ECT_REGION_MAX_PIDS)
                info->waiter_pids[info->n_waiters] = e->pid;
            info->n_waiters++;
        } else {
            if (info->n_holders < ECT_REGION_MAX_PIDS)
                info->holder_pids[info->n_holders] = e->pid;
            info->n_holders++;
        }
    }
}

/* ---- one file ------------------------------------------------------------------- */

/* A file under inspection; info's pointers point into it. */
struct file_view {
    ect_region_info_t info;
    int fd;
    struct stat st;
    struct ect__region_header h;
    char name[NAME_MAX + 1];
    char path[PATH_MAX];
    char problem[256];
};

static int
has_suffix(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int
is_candidate(const char *name)
{
    return name[0] != '.' &&
           (has_suffix(name, ECT__REGION_SUFFIX) || has_suffix(name, ECT__REGION_TMP_SUFFIX));
}

static double
seconds_since(uint64_t unix_ns)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t n = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    return n > unix_ns ? (double)(n - unix_ns) / 1e9 : 0.0;
}

static void
view_problem(struct file_view *v, ect_region_file_kind_t kind, const char *what, int err)
{
    v->info.kind = kind;
    if (err != 0)
        snprintf(v->problem, sizeof(v->problem), "%s: %s", what, strerror(err));
    else
        snprintf(v->problem, sizeof(v->problem), "%s", what);
}

/* What a file that is not a regular file is, for messages. */
static const char *
type_name(mode_t mode)
{
    if (S_ISLNK(mode))
        return "a symbolic link";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "something else";
}

static void
not_regular(struct file_view *v, ect_region_file_kind_t kind, const struct stat *st)
{
    v->info.kind = kind;
    v->info.file_size = (uint64_t)st->st_size;
    v->info.age_s =
        seconds_since((uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec);
    snprintf(v->problem, sizeof(v->problem), "%s, not a regular file", type_name(st->st_mode));
}

/* Whether an open temp file is provably one of our creations: its name is
 * "<region>.XXXXXX.ectier.tmp" (region.c's make_temp, mkostemps' six
 * letters and digits) and it starts with an ectier header of this layout
 * that names that region.  The creator writes the header before it reserves
 * any page, so only a creator that died in its first moments leaves a temp
 * file this cannot prove (and its reaper removes that one).  Returns NULL
 * if it is ours, else why not. */
static const char *
temp_not_ours(struct file_view *v)
{
    size_t n = strlen(v->name), sl = strlen(ECT__REGION_TMP_SUFFIX);
    const char *rand = n >= sl + 8 ? v->name + n - sl - 6 : NULL;
    for (int i = 0; rand != NULL && i < 6; i++) {
        unsigned char c = (unsigned char)rand[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
            rand = NULL;
    }
    size_t region_len = n - sl - 7;
    size_t at;
    if (rand == NULL || rand[-1] != '.' ||
        ect__region_name_fault(v->name, region_len, ECT_REGION_NAME_MAX, &at) != ECT__NAME_OK)
        return "not provably ectier's: not named <region>.XXXXXX" ECT__REGION_TMP_SUFFIX;
    ssize_t got = pread(v->fd, &v->h, sizeof(v->h), 0);
    const struct ect__region_header *h = &v->h;
    if (got != (ssize_t)sizeof(v->h) || !ect__region_has_magic(h->magic, sizeof(h->magic)) ||
        h->layout_version != ECT__REGION_LAYOUT_VERSION || h->header_size != sizeof(*h))
        return "not provably ectier's: no ectier header";
    if (strnlen(h->name, sizeof(h->name)) != region_len || memcmp(h->name, v->name, region_len))
        return "not provably ectier's: its ectier header names another region";
    return NULL;
}

/* Classify dir/name from an open descriptor.  Returns 1 if the file is one
 * to report (v filled; v->fd may be -1 if it could not be opened), 0 to
 * skip it.  info.gc_eligible is set for the files gc may remove. */
static int
view_file(int dir_fd, const char *dir, const char *name, struct file_view *v)
{
    memset(v, 0, sizeof(*v));
    v->fd = -1;
    snprintf(v->name, sizeof(v->name), "%s", name);
    snprintf(v->path, sizeof(v->path), "%s/%s", dir, name);
    int temp = has_suffix(name, ECT__REGION_TMP_SUFFIX);
    int ours_by_name = temp || strncmp(name, ECT__REGION_PREFIX, strlen(ECT__REGION_PREFIX)) == 0;
    ect_region_file_kind_t kind_by_name = temp ? ECT_REGION_FILE_TEMP : ECT_REGION_FILE_BAD;
    v->info.name = v->name;
    v->info.path = v->path;
    v->info.problem = v->problem;
    v->info.instance_id = "";
    if (!temp)
        v->name[strlen(v->name) - strlen(ECT__REGION_SUFFIX)] = '\0';

    /* O_NONBLOCK: never block on a FIFO planted under such a name. */
    v->fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (v->fd < 0) {
        int err = errno;
        if (err == ENOENT || !ours_by_name)
            return 0;
        struct stat ls;
        if (fstatat(dir_fd, name, &ls, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(ls.st_mode))
            not_regular(v, kind_by_name, &ls);
        else
            view_problem(v, kind_by_name, "cannot open", err);
        return 1;
    }
    int known = fstat(v->fd, &v->st) == 0, stat_err = errno;
    if (!known || !S_ISREG(v->st.st_mode)) {
        close(v->fd);
        v->fd = -1;
        if (!ours_by_name)
            return 0;
        if (known)
            not_regular(v, kind_by_name, &v->st);
        else
            view_problem(v, kind_by_name, "cannot stat", stat_err);
        return 1;
    }
    v->info.file_size = (uint64_t)v->st.st_size;
    v->info.age_s = seconds_since((uint64_t)v->st.st_mtim.tv_sec * 1000000000u +
                                  (uint64_t)v->st.st_mtim.tv_nsec);
    if (temp) {
        v->info.kind = ECT_REGION_FILE_TEMP;
        const char *why = temp_not_ours(v);
        if (why == NULL)
            v->info.gc_eligible = 1;
        else
            view_problem(v, ECT_REGION_FILE_TEMP, why, 0);
        memset(&v->h, 0, sizeof(v->h));
        return 1;
    }
    ssize_t got = pread(v->fd, &v->h, sizeof(v->h), 0);
    if (got < (ssize_t)ECT__REGION_MAGIC_LEN || !ect__region_has_magic(v->h.magic, (size_t)got)) {
        if (!ours_by_name) {
            close(v->fd);
            v->fd = -1;
            return 0;
        }
        view_problem(v, ECT_REGION_FILE_FOREIGN, "not an ectier region (no ectier magic)", 0);
        return 1;
    }
    /* The magic is the proof: gc may remove it whether its header is
     * valid or not. */
    v->info.gc_eligible = 1;
    if (got < (ssize_t)sizeof(v->h))
        memset((char *)&v->h + got, 0, sizeof(v->h) - (size_t)got);
    char why[200];
    if (ect__region_header_check(&v->h, (uint64_t)v->st.st_size, why, sizeof(why)) != 0) {
        view_problem(v, ECT_REGION_FILE_BAD, why, 0);
        return 1;
    }
    const struct ect__region_header *h = &v->h;
    ect_region_info_t *i = &v->info;
    i->kind = ECT_REGION_FILE_REGION;
    i->layout_version = h->layout_version;
    i->hidden_dim = h->hidden_dim;
    i->dtype_code = h->dtype_code;
    i->element_size = h->element_size;
    i->block_size_bytes = h->block_size_bytes;
    i->num_blocks = h->num_blocks;
    i->data_offset = h->data_offset;
    i->creator_pid = h->creator_pid;
    i->created_unix_ns = h->created_unix_ns;
    i->instance_id = h->instance_id;
    i->age_s = seconds_since(h->created_unix_ns);
    return 1;
}

static void
view_close(struct file_view *v)
{
    if (v->fd >= 0)
        close(v->fd);
    v->fd = -1;
}

/* ---- directory scan --------------------------------------------------------------- */

struct name_list {
    char **v;
    size_t n;
};

static void
names_free(struct name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        ect__free(l->v[i]);
    ect__free(l->v);
}

static int
cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Open dir and collect the candidate names, sorted. */
static ect_status_t
scan_dir(const char *dir, int *dir_fd_p, struct name_list *out)
{
    ect_status_t st = ECT_OK;
    struct name_list l = {NULL, 0};
    size_t cap = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ect__error_errno(errno == ENOENT ? ECT_ERR_NOT_FOUND : ECT_ERR_IO,
                                "region directory %s", dir);
    int fd2 = dup(fd);
    DIR *d = fd2 >= 0 ? fdopendir(fd2) : NULL;
    if (d == NULL) {
        st = ect__error_errno(ECT_ERR_IO, "region directory %s: opendir", dir);
        if (fd2 >= 0)
            close(fd2);
        goto close_fd;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_candidate(e->d_name))
            continue;
        if (l.n == cap) {
            size_t ncap = cap ? cap * 2 : 32;
            char **v = ect__realloc(l.v, ncap * sizeof(*v));
            if (v == NULL) {
                st = ect__error(ECT_ERR_NO_MEMORY, "region directory %s: out of memory", dir);
                goto free_names;
            }
            l.v = v;
            cap = ncap;
        }
        if ((l.v[l.n] = ect__strdup(e->d_name)) == NULL) {
            st = ect__error(ECT_ERR_NO_MEMORY, "region directory %s: out of memory", dir);
            goto free_names;
        }
        l.n++;
    }
    closedir(d);
    if (l.n > 1)
        qsort(l.v, l.n, sizeof(*l.v), cmp_names);
    *dir_fd_p = fd;
    *out = l;
    return ECT_OK;

free_names:
    names_free(&l);
    closedir(d);
close_fd:
    close(fd);
    return st;
}

static const char *
dir_or_default(const char *dir)
{
    return dir != NULL ? dir : ECT_REGION_DEFAULT_DIR;
}

ect_status_t
ect_region_list(const char *dir, ect_region_list_fn fn, void *user)
{
    if (fn == NULL || (dir != NULL && dir[0] == '\0'))
        return ect__error(ECT_ERR_INVALID_ARG, "region list: NULL callback or empty directory");
    dir = dir_or_default(dir);
    struct name_list names;
    int dir_fd;
    ect_status_t st = scan_dir(dir, &dir_fd, &names);
    if (st != ECT_OK)
        return st;
    struct lock_table locks = {NULL, 0, 0};
    if ((st = read_locks(&locks)) != ECT_OK)
        goto free_all;
    struct file_view *v = ect__malloc(sizeof(*v));
    if (v == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "region list: out of memory");
        goto free_all;
    }
    for (size_t i = 0; i < names.n; i++) {
        if (!view_file(dir_fd, dir, names.v[i], v))
            continue;
        if (v->fd >= 0)
            fill_lockers(&locks, &v->st, &v->info);
        view_close(v);
        if (fn(&v->info, user) != 0)
            break;
    }
    ect__free(v);

free_all:
    ect__free(locks.v);
    names_free(&names);
    close(dir_fd);
    return st;
}

ect_status_t
ect_region_gc(const char *dir, int dry_run, ect_region_gc_fn fn, void *user, unsigned *removed_p)
{
    if (dir != NULL && dir[0] == '\0')
        return ect__error(ECT_ERR_INVALID_ARG, "region gc: empty directory");
    dir = dir_or_default(dir);
    struct name_list names;
    int dir_fd;
    ect_status_t st = scan_dir(dir, &dir_fd, &names);
    if (st != ECT_OK)
        return st;
    struct file_view *v = ect__malloc(sizeof(*v));
    if (v == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "region gc: out of memory");
        goto free_names;
    }
    unsigned removed = 0;
    for (size_t i = 0; i < names.n; i++) {
        if (!view_file(dir_fd, dir, names.v[i], v))
            continue;
        if (!v->info.gc_eligible || v->fd < 0) {
            /* Named like ours, but not provably ours: left, and said so. */
            view_close(v);
            if (fn != NULL)
                fn(&v->info, ECT_ERR_INCOMPATIBLE, user);
            continue;
        }
        /* A holder or a removal in progress: not an orphan (now). */
        struct stat now;
        if (flock(v->fd, LOCK_EX | LOCK_NB) != 0 ||
            fstatat(dir_fd, names.v[i], &now, AT_SYMLINK_NOFOLLOW) != 0 ||
            now.st_dev != v->st.st_dev || now.st_ino != v->st.st_ino) {
            view_close(v);
            continue;
        }
        ect_status_t outcome = ECT_OK;
        if (!dry_run && unlinkat(dir_fd, names.v[i], 0) != 0) {
            outcome = ECT_ERR_IO;
            view_problem(v, v->info.kind, "cannot remove", errno);
        }
        if (outcome == ECT_OK)
            removed++;
        view_close(v);
        if (fn != NULL)
            fn(&v->info, outcome, user);
    }
    ect__free(v);
    if (removed_p != NULL)
        *removed_p = removed;

free_names:
    names_free(&names);
    close(dir_fd);
    return st;
}

static void
sweep_report(const ect_region_info_t *info, ect_status_t outcome, void *user)
{
    (void)user;
    if (outcome == ECT_ERR_INCOMPATIBLE) {
        ECT_LOG_D("region sweep: left %s: %s", info->path, info->problem);
        return;
    }
    if (outcome != ECT_OK) {
        ECT_LOG_I("region sweep: orphan %s: %s", info->path, info->problem);
        return;
    }
    switch (info->kind) {
    case ECT_REGION_FILE_REGION:
        ECT_LOG_W("region sweep: removed orphaned region %s (%" PRIu64
                  " bytes, created by pid %" PRId32 " %.0f s ago)",
                  info->path, info->file_size, info->creator_pid, info->age_s);
        break;
    case ECT_REGION_FILE_TEMP:
        ECT_LOG_W("region sweep: removed stale temp file %s (%" PRIu64 " bytes)", info->path,
                  info->file_size);
        break;
    default:
        ECT_LOG_W("region sweep: removed orphaned region file %s with a bad header (%s)",
                  info->path, info->problem);
        break;
    }
}

void
ect__region_sweep(const char *dir)
{
    if (ect_region_gc(dir, 0, sweep_report, NULL, NULL) != ECT_OK)
        ect__log_last_error(ECT_LOG_DEBUG, "region sweep");
}
