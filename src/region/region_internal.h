/*
 * Internals of the shared region shared by region.c (open/close),
 * layout.c (header, names, pre-fault), reap.c (the reaper process) and
 * list.c (listing, gc, the orphan sweep).
 *
 * The on-file header below is the only layout other processes see.  It is
 * native-endian (the file never leaves the host), has fixed-width fields and
 * holds no pointers.  Its size is fixed by a _Static_assert; any change to it
 * bumps ECT__REGION_LAYOUT_VERSION.
 */
#ifndef ECT_REGION_INTERNAL_H
#define ECT_REGION_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <ectier/region.h>

#define ECT__REGION_MAGIC          "ECTIERRG"
#define ECT__REGION_MAGIC_LEN      8
#define ECT__REGION_LAYOUT_VERSION 1u
/* The header area: data starts at the larger of this and the page size. */
#define ECT__REGION_HEADER_AREA 4096u
#define ECT__REGION_SUFFIX      ".mmap"
#define ECT__REGION_TMP_SUFFIX  ".ectier.tmp"
#define ECT__REGION_PREFIX      "ectier_"

struct ect__region_header {
    char magic[ECT__REGION_MAGIC_LEN]; /* ECT__REGION_MAGIC, not NUL-terminated */
    uint32_t layout_version;
    uint32_t header_size; /* sizeof(struct ect__region_header) */
    uint64_t data_offset; /* page-aligned offset of block 0 */
    uint64_t file_size;   /* data_offset + num_blocks * block_size_bytes */
    uint64_t hidden_dim;
    uint32_t dtype_code;
    uint32_t element_size;
    uint64_t block_size_bytes;
    uint64_t num_blocks;
    uint64_t created_unix_ns; /* CLOCK_REALTIME */
    int32_t creator_pid;
    uint32_t reserved0;
    char name[256];        /* NUL-terminated region name */
    char instance_id[128]; /* NUL-terminated; may be empty */
    uint8_t reserved[48];
};

_Static_assert(sizeof(struct ect__region_header) == 512, "region header layout changed");
_Static_assert(offsetof(struct ect__region_header, name) == 80, "region header layout changed");
_Static_assert(sizeof(struct ect__region_header) <= ECT__REGION_HEADER_AREA,
               "region header larger than its area");

/* The owner lock (ECT_REGION_OWNER): open file description (OFD) locks,
 * which Linux keeps apart from flock locks, so they never meet the
 * liveness holds or the reaper's LOCK_EX (region.c).  A write lock on byte
 * ECT__REGION_OWNER_BYTE is the ownership; the owner also takes a read
 * lock on the one byte at ECT__REGION_OWNER_PID_BASE + its pid, because an
 * OFD lock does not record a pid (/proc/locks and F_OFD_GETLK say -1), and
 * that byte's offset does.  Both are far from anything else and need not
 * lie inside the file. */
#define ECT__REGION_OWNER_BYTE     ((int64_t)1 << 61)
#define ECT__REGION_OWNER_PID_BASE ((int64_t)1 << 62)
#define ECT__REGION_OWNER_PID_MAX  ((int64_t)1 << 30) /* above any pid_max */

/* Test hooks (tests link the static library).  Not for production use. */
enum {
    /* Skip MADV_POPULATE_WRITE and take the page-touch fallback. */
    ECT__REGION_TEST_FORCE_TOUCH = 1u << 0,
    /* Create through a named temp file even where O_TMPFILE works. */
    ECT__REGION_TEST_NAMED_TMP = 1u << 1,
    /* Skip the statvfs free-space check, so fallocate meets a full disk. */
    ECT__REGION_TEST_SKIP_SPACE_CHECK = 1u << 2,
    /* The reaper sleeps 50 ms before it closes what it inherited. */
    ECT__REGION_TEST_SLOW_REAPER = 1u << 3,
};
extern unsigned ect__region_test_flags;

/* Check that text is a valid name component: 1..max characters of
 * [A-Za-z0-9._-], not starting with '.', without "..".  what names the
 * value in the message ("region name"). */
ect_status_t ect__region_check_name(const char *what, const char *text, size_t max);

/* The same rule on text[0..len) without a message: ECT__NAME_OK or the
 * first rule broken (*at_p gets the index of a bad character). */
enum {
    ECT__NAME_OK,
    ECT__NAME_EMPTY,
    ECT__NAME_TOO_LONG,
    ECT__NAME_DOT_FIRST,
    ECT__NAME_DOTDOT,
    ECT__NAME_BAD_CHAR
};
int ect__region_name_fault(const char *text, size_t len, size_t max, size_t *at_p);

/* Check a header read from a file of st_size bytes; on failure write a
 * human reason into why and return -1.  Also rejects a file without the
 * magic ("not an ectier region"). */
int ect__region_header_check(const struct ect__region_header *h, uint64_t st_size, char *why,
                             size_t why_len);

/* Whether the first bytes of a file are the ectier magic. */
int ect__region_has_magic(const void *buf, size_t len);

/* "hidden_dim=.. dtype=.. element_size=.. block_size=.. num_blocks=.." */
void ect__region_format_geometry(char *buf, size_t len, uint64_t hidden_dim, uint32_t dtype_code,
                                 uint32_t element_size, uint64_t block_size_bytes,
                                 uint64_t num_blocks);

/* Fault [base, base+len) into this process's page tables without changing
 * any byte: MADV_POPULATE_WRITE (probed on one page; EINVAL: not there),
 * then a compare-and-swap of one byte per page with its own value, which
 * also makes the translation a hypervisor's shadow page tables need.
 * base must be page-aligned.
 * Returns ECT_OK or ECT_ERR_IO. */
ect_status_t ect__region_prefault(void *base, size_t len);

/* Fork the reaper for the file open as fd: it waits for an exclusive flock
 * on its own open file description of that file and then unlinks
 * <dir>/<file_name> and <dir>/<tmp_name> (tmp_name may be NULL), each only
 * while it still names that file.  The caller must already hold its shared
 * lock on fd, so the reaper cannot win before the caller lets go.  If the
 * reaper is left as this process's own child, it is remembered for
 * ect__region_reap().
 * Returns ECT_OK, or ECT_ERR_IO when the reaper could not be started (the
 * region still works; only the cleanup after a crash is lost). */
ect_status_t ect__region_spawn_reaper(int fd, const char *dir, const char *file_name,
                                      const char *tmp_name);

/* Collect the exit status of reapers that ended up as this process's own
 * children (we are PID 1 of a namespace or a child subreaper; see reap.c),
 * without waiting.  last_holder: this process just closed the last hold of
 * the file (dev, ino), which lets its reaper go: wait up to 200 ms for that
 * one.  Never fails. */
void ect__region_reap(int last_holder, dev_t dev, ino_t ino);

/* Remove orphans from dir, logging each at warning level (the sweep at open). */
void ect__region_sweep(const char *dir);

/* Build "<dir>/<name><suffix>" into buf; ECT_ERR_INVALID_ARG if too long. */
ect_status_t ect__region_join_path(char *buf, size_t len, const char *dir, const char *name,
                                   const char *suffix);

#endif /* ECT_REGION_INTERNAL_H */
