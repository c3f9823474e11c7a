/*
 * The shared region: one file in /dev/shm per instance and data-parallel
 * rank, mapped by the scheduler side and by every worker of the instance.
 *
 * Layout: a 512-byte header (magic, layout version, geometry, creator pid,
 * creation time, name) at offset 0, and num_blocks blocks of
 * block_size_bytes each from the page-aligned data_offset on.  Block i lives
 * at data_offset + i * block_size_bytes.  The header holds offsets only.
 *
 * Liveness: every process that has the region open holds a shared flock on
 * it.  A region file with no holder is an orphan.  Three mechanisms remove
 * the file, whichever comes first:
 *   - the last holder's ect_region_close() unlinks it;
 *   - a small reaper process, forked by the creator, waits for an exclusive
 *     flock and unlinks the file when every holder has closed or died
 *     (including by SIGKILL), so nothing stays in /dev/shm after a crash;
 *   - ect_region_open() sweeps orphans in its directory first, and
 *     ect_region_gc() (`ectier gc`) removes them on demand.
 *
 * Thread safety: a region is immutable once opened; its accessors may be
 * called from any thread.  ect_region_close() must not race with any other
 * use of the same region.  Different regions are independent.
 */
#ifndef ECTIER_REGION_H
#define ECTIER_REGION_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include <ectier/geometry.h>
#include <ectier/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ect_region ect_region_t;

/* Longest region name (the file is "<dir>/<name>.mmap"). */
#define ECT_REGION_NAME_MAX 200
/* Longest instance id stored in the header. */
#define ECT_REGION_INSTANCE_MAX 127
/* Default directory. */
#define ECT_REGION_DEFAULT_DIR "/dev/shm"

/* Flags of ect_region_params_t: zero means every default is on. */
enum {
    /* Do not pre-fault this process's mapping at open. */
    ECT_REGION_NO_PREFAULT = 1u << 0,
    /* Do not fork the reaper process (for hosts that forbid fork).  A
     * SIGKILLed instance then leaves its file until the next sweep or gc. */
    ECT_REGION_NO_REAPER = 1u << 1,
    /* Do not sweep orphaned regions out of the directory before opening. */
    ECT_REGION_NO_SWEEP = 1u << 2,
    /* Open as the region's owner: the one process (the scheduler side,
     * which keeps the cache index of the blocks) that decides what the
     * blocks hold.  At most one open region is the owner at a time; other
     * owners are refused with ECT_ERR_BUSY while it lives.  Joiners
     * without this flag (workers) and read-only mappers are not affected.
     * Ownership ends with ect_region_close() or with the process, however
     * it dies (it is a lock on this open's file description: a child that
     * inherited the region's descriptor by fork keeps it until it exits or
     * execs, as it keeps the liveness hold). */
    ECT_REGION_OWNER = 1u << 3,
};

/* Parameters of ect_region_open().  Zero-initialise, then fill in.  Every
 * pointer is borrowed for the duration of the call only. */
typedef struct ect_region_params {
    /* Region name: 1..ECT_REGION_NAME_MAX characters of [A-Za-z0-9._-], not
     * starting with '.' and without "..".  NULL or "" uses
     * "ectier_<instance_id>_dp<dp_rank>". */
    const char *name;
    /* Instance id (same character rules, at most ECT_REGION_INSTANCE_MAX
     * characters); needed when name is NULL, stored in the header. */
    const char *instance_id;
    uint32_t dp_rank;
    /* Directory holding the file; NULL uses ECT_REGION_DEFAULT_DIR. */
    const char *dir;
    /* Geometry (ect_geometry_init makes one): checked by
     * ect_geometry_validate, written to the header, and on join compared
     * with the file's. */
    ect_geometry_t geometry;
    /* ECT_REGION_* flags. */
    uint32_t flags;
    /* How long to wait for a shared lock while another process holds the
     * file exclusively (a reaper or gc removing it, or a foreign program)
     * before giving up with ECT_ERR_BUSY; 0 means 5000 ms. */
    uint32_t lock_timeout_ms;
} ect_region_params_t;

/* Create the region, or join it if it exists (race-free between processes).
 *
 * Unless ECT_REGION_NO_SWEEP, first removes orphaned ectier regions (files
 * with an ectier header and no holder) from the directory, logging each.
 * A creator checks free space, reserves every page (fallocate, so a full
 * /dev/shm fails here rather than with SIGBUS later), writes the header and
 * publishes the file with link(); unless ECT_REGION_NO_REAPER it forks the
 * reaper first.  A joiner checks the header against the file and against
 * params.  Unless ECT_REGION_NO_PREFAULT, the data pages are faulted into
 * this process's page tables (MADV_POPULATE_WRITE, or one atomic
 * compare-and-swap of a byte with itself per page, which keeps concurrent
 * writes intact).
 *
 * params: borrowed.  region_p: out, written only on success; release with
 * ect_region_close().
 * Returns ECT_OK;
 *   ECT_ERR_INVALID_ARG (bad name, instance id, directory or geometry; the
 *     message names the value and what is allowed; nothing is created),
 *   ECT_ERR_OVERFLOW (hidden_dim above ECT_GEOMETRY_MAX_HIDDEN_DIM, or the
 *     blocks do not fit in a file),
 *   ECT_ERR_NOT_FOUND (the directory does not exist),
 *   ECT_ERR_INCOMPATIBLE (the file under the name is not an ectier region,
 *     has a bad header, the wrong size, or a different geometry; the message
 *     gives both geometries; the file is left untouched),
 *   ECT_ERR_NO_SPACE (the directory's file system cannot hold the region;
 *     the message gives the numbers; nothing is left behind),
 *   ECT_ERR_BUSY (the file stayed exclusively locked for lock_timeout_ms,
 *     kept being replaced while joining, or, with ECT_REGION_OWNER, another
 *     open of the region owns it: the message names the region and the
 *     owner's pid; nothing of the region is changed),
 *   ECT_ERR_IO, ECT_ERR_NO_MEMORY.
 * Thread safety: safe; concurrent opens of one name in several threads or
 * processes give one creator and joiners. */
ECT_API ECT_MUST_CHECK ect_status_t ect_region_open(const ect_region_params_t *params,
                                                    ect_region_t **region_p);

/* Map an existing region read-only (for inspection and for the same-host
 * transport): validates its header, takes a shared lock (so the region
 * stays alive while mapped) and never creates, sweeps or pre-faults.
 * path_or_name: a path if it contains '/', else a region name looked up in
 * dir (NULL: ECT_REGION_DEFAULT_DIR).  Both borrowed.  region_p: out.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND (no such file),
 * ECT_ERR_INCOMPATIBLE (not a valid ectier region, or a geometry this build cannot use),
 * ECT_ERR_BUSY, ECT_ERR_IO, ECT_ERR_NO_MEMORY.  Thread safety: safe. */
ECT_API ECT_MUST_CHECK ect_status_t ect_region_open_readonly(const char *path_or_name,
                                                             const char *dir,
                                                             ect_region_t **region_p);

/* Unmap the region and release this hold.  If nothing else holds the
 * region, the file is unlinked before this returns.  Holds are counted per
 * open file description: a child that inherited this region by fork shares
 * this hold, so it must not outlive the close.  Works the same for read-only
 * regions.  Reapers normally end as children of init, which collects them;
 * in a process that is their parent instead (PID 1 of a container, or a
 * child subreaper) opens and closes collect the exited ones, and the last
 * close of a region waits up to 200 ms for the reaper it lets go, so no
 * zombie is left.  NULL is a no-op.  Never fails (problems are logged). */
ECT_API void ect_region_close(ect_region_t *region);

/* Base of block 0 (data_offset bytes into the mapping); read-only memory for
 * a region from ect_region_open_readonly().  NULL for a NULL region. */
ECT_API void *ect_region_data(const ect_region_t *region);

/* Address of block i, or NULL if i >= num_blocks or region is NULL. */
ECT_API void *ect_region_block_ptr(const ect_region_t *region, uint64_t i);

/* The region's geometry (borrowed, valid until close); NULL for a NULL
 * region.  For a read-only open it is the file's, checked on open. */
ECT_API const ect_geometry_t *ect_region_geometry(const ect_region_t *region);
/* File facts (0 or NULL for a NULL region). */
/* Offset of block 0 in the file (page-aligned). */
ECT_API uint64_t ect_region_data_offset(const ect_region_t *region);
/* Size of the whole file: data_offset + num_blocks * block_size. */
ECT_API uint64_t ect_region_file_size(const ect_region_t *region);
/* Path of the file ("<dir>/<name>.mmap") and the region name; borrowed,
 * valid until close. */
ECT_API const char *ect_region_path(const ect_region_t *region);
ECT_API const char *ect_region_name(const ect_region_t *region);
/* true if this open created the file (false for a NULL region). */
ECT_API bool ect_region_is_creator(const ect_region_t *region);
/* true if opened with ect_region_open_readonly() (false for a NULL region). */
ECT_API bool ect_region_is_readonly(const ect_region_t *region);
/* The open file descriptor (O_CLOEXEC; read-write unless read-only).
 * Borrowed: do not close it; it carries this process's shared lock.  Valid
 * until close; -1 for a NULL region. */
ECT_API int ect_region_fd(const ect_region_t *region);

/* ---- listing and garbage collection (for `ectier inspect` and `gc`) ---- */

/* What a file in a region directory is. */
typedef enum ect_region_file_kind {
    ECT_REGION_FILE_REGION = 0,  /* an ectier region with a valid header */
    ECT_REGION_FILE_BAD = 1,     /* ectier magic but an invalid header, or an
                                    "ectier_*.mmap" that cannot be read or is
                                    not a regular file (problem says which) */
    ECT_REGION_FILE_FOREIGN = 2, /* named "ectier_*.mmap" without ectier magic */
    ECT_REGION_FILE_TEMP = 3,    /* "*.ectier.tmp": a creation in progress or
                                    interrupted, or (gc_eligible 0) a file
                                    that only has such a name */
} ect_region_file_kind_t;

/* Most holder and waiter pids reported per file. */
#define ECT_REGION_MAX_PIDS 16

/* One file, as seen by ect_region_list() and ect_region_gc().  Every pointer
 * is borrowed and valid only during the callback. */
typedef struct ect_region_info {
    ect_region_file_kind_t kind;
    const char *name;    /* file name without ".mmap" (temp files: full name) */
    const char *path;    /* full path */
    const char *problem; /* why kind is BAD or FOREIGN, else "" */
    uint64_t file_size;  /* st_size */
    double age_s;        /* since creation (header), else since last change */
    /* Header fields; zero unless kind is ECT_REGION_FILE_REGION. */
    uint32_t layout_version;
    uint64_t hidden_dim;
    uint32_t dtype_code;
    uint32_t element_size;
    uint64_t block_size_bytes;
    uint64_t num_blocks;
    uint64_t data_offset;
    int32_t creator_pid;
    uint64_t created_unix_ns; /* CLOCK_REALTIME at creation */
    const char *instance_id;  /* "" if none */
    /* flock holders (granted locks, from /proc/locks) and waiters (blocked
     * requests: normally the reaper).  Counts are exact; at most
     * ECT_REGION_MAX_PIDS pids are listed.  A holder is one open file
     * description: processes that share one by fork count once. */
    unsigned n_holders;
    int32_t holder_pids[ECT_REGION_MAX_PIDS];
    unsigned n_waiters;
    int32_t waiter_pids[ECT_REGION_MAX_PIDS];
    /* The pid of the process that owns the region (ECT_REGION_OWNER), from
     * /proc/locks; 0 if none. */
    int32_t owner_pid;
    /* 1 if the file is provably ectier's, so ect_region_gc() removes it once
     * nothing holds it: a regular "*.mmap" file with the ectier magic, or a
     * regular "<region>.XXXXXX.ectier.tmp" file whose ectier header names
     * <region>.  0: gc leaves it whatever its holders (problem says why). */
    int gc_eligible;
} ect_region_info_t;

/* Return 0 to go on, non-zero to stop the listing. */
typedef int (*ect_region_list_fn)(const ect_region_info_t *info, void *user);

/* Call fn for each region-related file in dir (NULL: ECT_REGION_DEFAULT_DIR),
 * in name order: every "*.mmap" file with ectier magic, every "ectier_*.mmap"
 * file (FOREIGN if it lacks the magic) and every "*.ectier.tmp" file.  Takes
 * no locks and changes nothing.  user is passed through.
 * Returns ECT_OK, ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND (no such directory),
 * ECT_ERR_IO, ECT_ERR_NO_MEMORY.  Thread safety: safe. */
ECT_API ECT_MUST_CHECK ect_status_t ect_region_list(const char *dir, ect_region_list_fn fn,
                                                    void *user);

/* Called by ect_region_gc() for each orphan: outcome ECT_OK if it was removed
 * (or would be, in a dry run), ECT_ERR_IO if the unlink failed; and for each
 * file that is named like ours but that gc leaves because it is not provably
 * ectier's (gc_eligible 0: no magic, another program's temp file, a link,
 * FIFO or directory, unreadable), outcome ECT_ERR_INCOMPATIBLE.
 * info->problem says why in both failure cases. */
typedef void (*ect_region_gc_fn)(const ect_region_info_t *info, ect_status_t outcome, void *user);

/* Remove orphans from dir (NULL: ECT_REGION_DEFAULT_DIR): files that are
 * provably ectier's (gc_eligible: ectier regions with a valid or bad header,
 * and temp files of region creations) on which an exclusive flock can be
 * taken without waiting, and whose path still names the locked file.  No
 * other file is locked or removed; those named like ours are reported (see
 * ect_region_gc_fn).  With dry_run, only reports.
 * fn may be NULL.  removed_p (optional, out): how many were (or would be)
 * removed.  Returns ECT_OK (even if some unlink failed: see the callback),
 * ECT_ERR_INVALID_ARG, ECT_ERR_NOT_FOUND, ECT_ERR_IO, ECT_ERR_NO_MEMORY.
 * Thread safety: safe. */
ECT_API ECT_MUST_CHECK ect_status_t ect_region_gc(const char *dir, int dry_run, ect_region_gc_fn fn,
                                                  void *user, unsigned *removed_p);

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_REGION_H */
