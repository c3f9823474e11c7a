/*
 * The same-host data transport (SPEC §8.7, §9.3): when producer and
 * consumer run on one host, the consumer maps the producer's region file
 * read-only and copies with memcpy: no UCX, no ptrace rights, no producer
 * CPU.
 *
 * What makes an offer usable, all checked before anything is mapped:
 *   - the producer's boot id equals ours (the same running kernel; a file
 *     name and inode mean nothing across hosts or reboots);
 *   - the path names a plain file directly inside the consumer's region
 *     directory (no other directory, no "..", no symlink), so a peer cannot
 *     make us open an arbitrary file;
 *   - the file's device and inode equal the offered ones, both at lstat and
 *     on the descriptor actually opened (so the file is the producer's one
 *     and not another under the same name, e.g. in a different /dev/shm
 *     mount namespace);
 *   - ect_region_open_readonly() accepts it (valid ectier header; it takes a
 *     shared flock, so the file outlives the producer while we map it), and
 *     its geometry and data offset agree with the offer and descriptor.
 *
 * A mapping keeps the producer's region file alive (our shared lock) until
 * it is closed: the dispatcher closes it when the producer's offer changes,
 * when the peer is forgotten, and at client destroy.
 *
 * Copies run on the client's CPU copy engine: its copy threads and the
 * caller of read_start, which copies what they have not taken yet (see
 * start_same_host in xport.c); nothing sleeps waiting for a copy.
 *
 * Locking: none here; a peer's mapping is immutable once opened and only
 * read by the copy threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ectier/region.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/thread.h"
#include "copy/cpu.h"
#include "p2p/xport_internal.h"

#define BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
#ifdef MADV_POPULATE_READ
#define MADV_POPULATE_READ_ADVICE MADV_POPULATE_READ
#else
#define MADV_POPULATE_READ_ADVICE 22 /* Linux 5.14 */
#endif

struct ect_xport_shm_peer {
    ect_region_t *region;
    const uint8_t *data;
    size_t len;
    pthread_t toucher; /* reads the mapping's pages in the background */
    bool toucher_started;
    bool stop; /* atomic: the toucher stops at its next check */
};

/* Pages the toucher reads between looks at stop. */
#define TOUCH_CHECK_PAGES 1024

/* Fault the whole read-only mapping in, in the background, once per
 * producer: the kernel populates the page tables (MADV_POPULATE_READ, Linux
 * 5.14; without it the reads fault each page in), then one byte of every
 * page is read, which also makes the translation a hypervisor that shadows
 * page tables needs.  Otherwise each fetch pays its pages' first reads
 * itself: about 3 us a page on the project's VMs, most of a 1.75 MiB
 * same-host fetch (demo, one at a time: p50 1.7 ms, as slow as the TCP
 * stream; 0.6 ms once the pages were read).  In the background because a
 * producer's region may be GiBs: fetches go on meanwhile and fault their own
 * pages, as before. */
static void *
toucher_main(void *arg)
{
    ect_xport_shm_peer_t *p = arg;
    long page_l = sysconf(_SC_PAGESIZE);
    size_t page = page_l > 0 ? (size_t)page_l : 4096;
    size_t step = page * TOUCH_CHECK_PAGES;
    uint8_t x = 0;
    for (size_t off = 0; off < p->len && !__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE);
         off += step) {
        size_t n = p->len - off < step ? p->len - off : step;
        (void)madvise((void *)(p->data + off), n, MADV_POPULATE_READ_ADVICE);
        for (size_t k = 0; k < n; k += page)
            x ^= __atomic_load_n(&p->data[off + k], __ATOMIC_RELAXED);
    }
    __asm__ volatile("" : : "r"(x));
    return NULL;
}

static void
toucher_start(ect_xport_shm_peer_t *p)
{
    if (ect__thread_start(&p->toucher, toucher_main, p, "ect-touch") != ECT_OK) {
        ECT_LOG_D("xport same-host: no thread to read the producer's pages ahead: %s",
                  ect_last_error());
        return;
    }
    p->toucher_started = true;
}

ect_status_t
ect__xport_boot_id(char out[ECT_XPORT_BOOT_ID_LEN + 1])
{
    int fd = open(BOOT_ID_PATH, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ect__error_errno(ECT_ERR_IO, "xport: cannot open %s", BOOT_ID_PATH);
    char buf[64];
    ssize_t n;
    do
        n = read(fd, buf, sizeof(buf));
    while (n < 0 && errno == EINTR);
    int saved = errno;
    close(fd);
    errno = saved;
    if (n < 0)
        return ect__error_errno(ECT_ERR_IO, "xport: cannot read %s", BOOT_ID_PATH);
    if (n < (ssize_t)ECT_XPORT_BOOT_ID_LEN)
        return ect__error(ECT_ERR_IO, "xport: %s holds %zd bytes, not a boot id", BOOT_ID_PATH, n);
    memcpy(out, buf, ECT_XPORT_BOOT_ID_LEN);
    out[ECT_XPORT_BOOT_ID_LEN] = '\0';
    return ECT_OK;
}

/* The path names a file directly inside dir: "<dir>/<name>" with a name
 * that is not empty, ".", ".." and has no '/'. */
static int
directly_inside(const char *path, const char *dir)
{
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    if (strncmp(path, dir, dl) != 0)
        return 0;
    const char *name = path + dl;
    if (!(dl == 1 && dir[0] == '/')) {
        if (*name != '/')
            return 0;
        name++;
    }
    return name[0] != '\0' && strchr(name, '/') == NULL && strcmp(name, ".") != 0 &&
           strcmp(name, "..") != 0;
}

ect_status_t
ect__xport_shm_peer_open(const ect_xport_offer_t *offer, const ect_xport_desc_t *desc,
                         const char *region_dir, const char *our_boot_id, int touch_pages,
                         ect_xport_shm_peer_t **peer_p)
{
    if (!(offer->kinds & (1u << ECT_XPORT_SAME_HOST)))
        return ect__error(ECT_ERR_UNSUPPORTED, "the producer does not offer the same-host path");
    if (our_boot_id == NULL)
        return ect__error(ECT_ERR_UNSUPPORTED, "this host's boot id is unknown");
    if (strcmp(offer->boot_id, our_boot_id) != 0)
        return ect__error(ECT_ERR_UNSUPPORTED,
                          "the producer runs on another host or boot (boot id %s, ours %s)",
                          offer->boot_id, our_boot_id);
    char path[ECT_XPORT_MAX_PATH + 1];
    memcpy(path, offer->path, offer->path_len);
    path[offer->path_len] = '\0';
    const char *dir = region_dir != NULL ? region_dir : ECT_REGION_DEFAULT_DIR;
    if (!directly_inside(path, dir))
        return ect__error(ECT_ERR_UNSUPPORTED,
                          "the producer's region path '%s' is not a file directly inside %s", path,
                          dir);
    struct stat st;
    if (lstat(path, &st) != 0)
        return ect__error_errno(ECT_ERR_UNSUPPORTED, "cannot see the producer's region %s", path);
    if (!S_ISREG(st.st_mode))
        return ect__error(ECT_ERR_UNSUPPORTED, "the producer's region %s is not a regular file",
                          path);
    if ((uint64_t)st.st_dev != offer->dev || (uint64_t)st.st_ino != offer->ino)
        return ect__error(ECT_ERR_UNSUPPORTED,
                          "%s here is another file than the producer's (device/inode %llu/%llu, "
                          "offered %llu/%llu): a different /dev/shm?",
                          path, (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
                          (unsigned long long)offer->dev, (unsigned long long)offer->ino);
    ect_xport_shm_peer_t *p = ect__calloc(1, sizeof(*p));
    if (p == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport same-host: out of memory");
    ect_status_t s = ect_region_open_readonly(path, NULL, &p->region);
    if (s != ECT_OK) {
        if (s != ECT_ERR_NO_MEMORY)
            s = ect__error(ECT_ERR_UNSUPPORTED, "cannot map the producer's region %s: %s", path,
                           ect_last_error());
        goto free_peer;
    }
    /* The file opened is the one checked (it may have been replaced since). */
    if (fstat(ect_region_fd(p->region), &st) != 0 || (uint64_t)st.st_dev != offer->dev ||
        (uint64_t)st.st_ino != offer->ino) {
        s = ect__error(ECT_ERR_UNSUPPORTED, "the producer's region %s was replaced while opening",
                       path);
        goto close_region;
    }
    if (ect_region_geometry(p->region)->block_size_bytes != desc->block_size ||
        ect_region_geometry(p->region)->num_blocks != desc->num_blocks ||
        ect_region_data_offset(p->region) != offer->data_offset) {
        s = ect__error(ECT_ERR_UNSUPPORTED,
                       "the producer's region %s has %llu blocks of %llu bytes at offset %llu; "
                       "its offer says %llu of %llu at %llu",
                       path, (unsigned long long)ect_region_geometry(p->region)->num_blocks,
                       (unsigned long long)ect_region_geometry(p->region)->block_size_bytes,
                       (unsigned long long)ect_region_data_offset(p->region),
                       (unsigned long long)desc->num_blocks, (unsigned long long)desc->block_size,
                       (unsigned long long)offer->data_offset);
        goto close_region;
    }
    p->data = ect_region_data(p->region);
    p->len = (size_t)(desc->num_blocks * desc->block_size);
    if (touch_pages)
        toucher_start(p);
    *peer_p = p;
    return ECT_OK;

close_region:
    ect_region_close(p->region);
free_peer:
    ect__free(p);
    return s;
}

void
ect__xport_shm_peer_close(ect_xport_shm_peer_t *peer)
{
    if (peer == NULL)
        return;
    if (peer->toucher_started) {
        __atomic_store_n(&peer->stop, true, __ATOMIC_RELEASE);
        pthread_join(peer->toucher, NULL);
    }
    ect_region_close(peer->region);
    ect__free(peer);
}

ect_status_t
ect__xport_shm_post(ect_copy_engine_t *engine, const ect_xport_shm_peer_t *peer,
                    const ect_xport_segment_t *segs, size_t n_segs, void (*landed)(void *),
                    void *landed_arg, uint64_t *ticket_p)
{
    ect_copy_op_t *ops = NULL;
    if (n_segs != 0 && (ops = ect__malloc(n_segs * sizeof(*ops))) == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "xport same-host: out of memory");
    for (size_t i = 0; i < n_segs; i++)
        ops[i] = (ect_copy_op_t){
            .dst = segs[i].local, .src = peer->data + segs[i].remote_off, .len = segs[i].len};
    ect_copy_batch_t batch = {.dir = ECT_COPY_LOAD, .ops = ops, .n_ops = n_segs};
    ect_status_t st = ect__copy_cpu_submit_notify(engine, &batch, landed, landed_arg, ticket_p);
    ect__free(ops);
    return st;
}
