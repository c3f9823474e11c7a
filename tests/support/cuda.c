/*
 * Shared set-up for the CUDA copy-engine tests (see cuda.h).
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ectier/log.h>

#include "support/cuda.h"
#include "support/util.h"

ect_copy_engine_t *
ts_cuda_engine(const ect_copy_cuda_params_t *params)
{
    ect_copy_engine_t *e = NULL;
    ect_status_t st = ect_copy_engine_create_cuda(params, &e);
    if (st == ECT_ERR_UNSUPPORTED)
        SKIP("%s", ect_last_error());
    CHECK_OK(st);
    CHECK_STR_EQ(ect_copy_engine_kind(e), "cuda");
    return e;
}

unsigned char *
ts_cuda_region_map(size_t len)
{
    char name[64];
    char path[80];
    ect_test_unique_name(name, sizeof(name), "ectt_cuda_");
    snprintf(path, sizeof(path), "/%s", name);
    int fd = shm_open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK_MSG(fd >= 0, "shm_open(%s) failed", path);
    int rc = ftruncate(fd, (off_t)len);
    void *p = rc == 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    shm_unlink(path);
    close(fd);
    CHECK_MSG(p != MAP_FAILED, "ftruncate/mmap of %zu bytes of /dev/shm%s failed", len, path);
    memset(p, TS_CUDA_POISON, len);
    return p;
}

void
ts_cuda_region_unmap(unsigned char *base, size_t len)
{
    munmap(base, len);
}

void *
ts_cuda_dev_alloc(size_t len)
{
    void *p = NULL;
    CHECK_CUDA(cudaMalloc(&p, len));
    CHECK_CUDA(cudaMemset(p, TS_CUDA_DPOISON, len));
    CHECK_CUDA(cudaDeviceSynchronize());
    return p;
}

void
ts_cuda_dev_fill(void *dev, size_t len, uint64_t seed)
{
    unsigned char *h = malloc(len);
    CHECK(h != NULL);
    for (size_t i = 0; i < len; i++)
        h[i] = ts_cuda_pattern(seed, i);
    CHECK_CUDA(cudaMemcpy(dev, h, len, cudaMemcpyHostToDevice));
    free(h);
}

unsigned char *
ts_cuda_dev_read(const void *dev, size_t len)
{
    unsigned char *h = malloc(len);
    CHECK(h != NULL);
    CHECK_CUDA(cudaMemcpy(h, dev, len, cudaMemcpyDeviceToHost));
    return h;
}

void
ts_cuda_check_pattern(const char *file, int line, const unsigned char *p, size_t len, uint64_t seed,
                      uint64_t first)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != ts_cuda_pattern(seed, first + i))
            ect_test_fail(file, line,
                          "byte %zu of %zu is 0x%02x, expected 0x%02x (pattern byte %llu)", i, len,
                          p[i], ts_cuda_pattern(seed, first + i), (unsigned long long)(first + i));
}

void
ts_cuda_check_bytes(const char *file, int line, const unsigned char *p, size_t len,
                    unsigned char byte)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != byte)
            ect_test_fail(file, line, "byte %zu of %zu is 0x%02x, expected untouched 0x%02x", i,
                          len, p[i], byte);
}

void
ts_cuda_random_ids(size_t *ids, size_t n, size_t n_blocks, uint64_t seed)
{
    CHECK(n <= n_blocks);
    size_t *all = malloc(n_blocks * sizeof(*all));
    CHECK(all != NULL);
    for (size_t i = 0; i < n_blocks; i++)
        all[i] = i;
    uint64_t x = seed | 1;
    for (size_t i = n_blocks - 1; i > 0; i--) {
        size_t j = (size_t)(ts_xorshift64(&x) % (i + 1));
        size_t t = all[i];
        all[i] = all[j];
        all[j] = t;
    }
    memcpy(ids, all, n * sizeof(*ids));
    free(all);
}

size_t
ts_cuda_entry_ops(ect_copy_dir_t dir, unsigned char *region, const size_t *ids, void *dev,
                  size_t bytes, ect_copy_op_t *ops)
{
    size_t n = (bytes + TS_CUDA_BLOCK - 1) / TS_CUDA_BLOCK;
    for (size_t k = 0; k < n; k++) {
        size_t len =
            bytes - k * TS_CUDA_BLOCK < TS_CUDA_BLOCK ? bytes - k * TS_CUDA_BLOCK : TS_CUDA_BLOCK;
        unsigned char *blk = region + ids[k] * TS_CUDA_BLOCK;
        unsigned char *d = (unsigned char *)dev + k * TS_CUDA_BLOCK;
        if (dir == ECT_COPY_SAVE)
            ops[k] = (ect_copy_op_t){.dst = blk, .src = d, .len = len};
        else
            ops[k] = (ect_copy_op_t){.dst = d, .src = blk, .len = len};
    }
    return n;
}

void
ts_cuda_check_saved(const unsigned char *region, const size_t *ids, size_t bytes, uint64_t seed)
{
    size_t n = (bytes + TS_CUDA_BLOCK - 1) / TS_CUDA_BLOCK;
    for (size_t k = 0; k < n; k++) {
        size_t len =
            bytes - k * TS_CUDA_BLOCK < TS_CUDA_BLOCK ? bytes - k * TS_CUDA_BLOCK : TS_CUDA_BLOCK;
        const unsigned char *blk = region + ids[k] * TS_CUDA_BLOCK;
        TS_CUDA_CHECK_PATTERN(blk, len, seed, (uint64_t)k * TS_CUDA_BLOCK);
        TS_CUDA_CHECK_BYTES(blk + len, TS_CUDA_BLOCK - len, TS_CUDA_POISON);
    }
}

void
ts_cuda_check_block_untouched(const unsigned char *region, size_t b)
{
    TS_CUDA_CHECK_BYTES(region + b * TS_CUDA_BLOCK, TS_CUDA_BLOCK, TS_CUDA_POISON);
}

void
ts_cuda_run(ect_copy_engine_t *e, ect_copy_dir_t dir, const ect_copy_op_t *ops, size_t n,
            void *compute_stream)
{
    ect_copy_batch_t b = {.dir = dir, .ops = ops, .n_ops = n, .compute_stream = compute_stream};
    uint64_t t = 0;
    CHECK_OK(ect_copy_engine_submit(e, &b, &t));
    CHECK_OK(ect_copy_engine_wait(e, t));
    CHECK_STATUS(ect_copy_engine_query(e, t), ECT_ERR_NOT_FOUND);
}

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[8192];

static void
log_sink(ect_log_level_t level, const char *message, void *user)
{
    (void)user;
    if (level > ECT_LOG_WARN)
        return;
    pthread_mutex_lock(&log_lock);
    size_t used = strlen(log_buf);
    snprintf(log_buf + used, sizeof(log_buf) - used, "%s\n", message);
    pthread_mutex_unlock(&log_lock);
}

void
ts_cuda_log_capture(void)
{
    log_buf[0] = '\0';
    ect_log_set_sink(log_sink, NULL);
}

const char *
ts_cuda_log_captured(void)
{
    return log_buf;
}

struct ect__cuda_copy_stats
ts_cuda_stats(ect_copy_engine_t *e)
{
    struct ect__cuda_copy_stats s;
    CHECK_OK(ect__copy_cuda_stats(e, &s));
    return s;
}
