/*
 * `ectier bench cuda`: the CUDA copy engine against the PCIe ceiling
 * (SPEC §12: a fragmented save or load >= 0.9 x one contiguous pinned copy).
 *
 * Entries of 1, 7 and 32 MiB in blocks of 7 KiB (hidden 3584 in bf16), saved
 * from device memory into a real /dev/shm region registered with the engine
 * and loaded back, both as one contiguous run of blocks and fragmented (the
 * blocks at random places of the region: 1024 blocks for 7 MiB, scaled for
 * the others).  Each figure is the median of N event-timed repetitions; the
 * ceiling is one cudaMemcpyAsync of the same bytes between the same device
 * buffer and page-locked host memory, measured in the same run.  A gate
 * kernel holds the timing stream until everything is queued, so that the
 * figures are GPU time, not host submission time.  A load is timed on the
 * compute stream, where the engine queues it; a save up to an event on the
 * stream the engine queued it on, since nothing on the GPU waits for a save
 * (the host learns that it landed from its end event).  Two reference rows show
 * the alternatives for a fragmented entry (one cudaMemcpyAsync per block,
 * and CUDA 12.8+'s cudaMemcpyBatchAsync).
 *
 * Overlap: a compute-bound kernel of ~50 ms alone, then with a fragmented
 * 32 MiB save issued while it runs; the stretch of the compute kernel should
 * stay within 10 %, and the line says when the save landed.
 */
#include <stdio.h>

#include "ectier_build_config.h"

#include "bench.h"

#if !ECT_HAVE_CUDA

int
ect_bench_cuda(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("  skipped: this build has no CUDA support (rebuild with the CUDA toolkit and "
           "-DECT_WITH_CUDA=ON)\n");
    return 0;
}

#else

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <ectier/copy.h>

#include "bench_cuda_kernels.h"
#include "copy/cuda/cuda_engine.h"

#define BLOCK         7168u  /* one row of hidden 3584 in bf16 */
#define REGION_BLOCKS 20000u /* the 32 MiB entry (4682 blocks) scattered over 4x its size */
#define MAX_BYTES     ((size_t)32 << 20)
#define MAX_OPS       ((MAX_BYTES + BLOCK - 1) / BLOCK)
#define WARMUP        3
#define TARGET        0.9

struct ctx {
    ect_copy_engine_t *e;
    unsigned char *region;
    size_t region_len;
    void *dev;      /* the entry's device memory */
    void *pinned;   /* page-locked host memory for the ceiling */
    cudaStream_t s; /* the timing ("compute") stream */
    cudaStream_t side;
    cudaEvent_t t0, t1, t2;
    volatile int *gate; /* mapped pinned flag: the gate kernel waits for it */
    int *gate_dev;
    float *compute_out;
    int sm_count;
    ect_copy_op_t *ops;
    size_t *ids;
};

#define CK(expr)                                                                                   \
    do {                                                                                           \
        cudaError_t ck_ = (expr);                                                                  \
        if (ck_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "bench cuda: %s: %s\n", #expr, cudaGetErrorString(ck_));               \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

static int
cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float
median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_float);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double
gbps(size_t bytes, float ms)
{
    return ms > 0 ? (double)bytes / ((double)ms * 1e6) : 0.0;
}

/* Close the timing stream behind a gate; open_gate releases it. */
static int
close_gate(struct ctx *c)
{
    *c->gate = 0;
    CK(ect_bench_gate(c->gate_dev, c->s));
    return 0;
}

static void
open_gate(struct ctx *c)
{
    __atomic_store_n((int *)c->gate, 1, __ATOMIC_RELEASE);
}

/* One engine batch: t0 on the timing ("compute") stream, submit (ordered
 * after t0), then t1 on the stream the engine queued the copies on: the
 * compute stream itself for a load, a pooled stream for a save.  So a load
 * is timed as the compute stream sees it, and a save from the moment the
 * compute stream reached it to the moment it landed, which is when the host
 * can learn that it did; nothing on the GPU waits for a save.  Gated runs
 * exclude host submission; warm-ups run ungated, so that any pool growth
 * (which may synchronise the device) happens outside the gate. */
static int
time_engine(struct ctx *c, ect_copy_dir_t dir, size_t n, int gated, float *ms_p)
{
    if (gated && close_gate(c) != 0)
        return -1;
    CK(cudaEventRecord(c->t0, c->s));
    ect_copy_batch_t b = {dir, c->ops, n, c->s};
    uint64_t t;
    void *queue = NULL;
    ect_status_t st = ect_copy_engine_submit(c->e, &b, &t);
    if (st == ECT_OK)
        st = ect__copy_cuda_queue_stream(c->e, t, &queue);
    if (st == ECT_OK && cudaEventRecord(c->t1, (cudaStream_t)queue) != cudaSuccess)
        st = ECT_ERR_CUDA;
    if (gated)
        open_gate(c);
    if (st != ECT_OK) {
        fprintf(stderr, "bench cuda: submit: %s\n", ect_last_error());
        cudaStreamSynchronize(c->s);
        return -1;
    }
    if (ect_copy_engine_wait(c->e, t) != ECT_OK) {
        fprintf(stderr, "bench cuda: wait: %s\n", ect_last_error());
        return -1;
    }
    CK(cudaEventSynchronize(c->t1));
    CK(cudaEventElapsedTime(ms_p, c->t0, c->t1));
    return 0;
}

/* The ceiling: one contiguous copy between the device buffer and pinned memory. */
static int
time_ceiling(struct ctx *c, ect_copy_dir_t dir, size_t bytes, int gated, float *ms_p)
{
    if (gated && close_gate(c) != 0)
        return -1;
    CK(cudaEventRecord(c->t0, c->s));
    cudaError_t err = dir == ECT_COPY_SAVE
                          ? cudaMemcpyAsync(c->pinned, c->dev, bytes, cudaMemcpyDeviceToHost, c->s)
                          : cudaMemcpyAsync(c->dev, c->pinned, bytes, cudaMemcpyHostToDevice, c->s);
    if (gated)
        open_gate(c);
    CK(err);
    CK(cudaEventRecord(c->t1, c->s));
    CK(cudaEventSynchronize(c->t1));
    CK(cudaEventElapsedTime(ms_p, c->t0, c->t1));
    return 0;
}

/* Reference: the same ops through cudaMemcpyBatchAsync (CUDA 13 signature). */
static int
time_batch_api(struct ctx *c, size_t n, int gated, float *ms_p)
{
    void **dsts = malloc(n * sizeof(*dsts));
    const void **srcs = malloc(n * sizeof(*srcs));
    size_t *sizes = malloc(n * sizeof(*sizes));
    int rc = -1;
    if (dsts == NULL || srcs == NULL || sizes == NULL)
        goto out_free;
    for (size_t i = 0; i < n; i++) {
        dsts[i] = c->ops[i].dst;
        srcs[i] = c->ops[i].src;
        sizes[i] = c->ops[i].len;
    }
    struct cudaMemcpyAttributes attr;
    memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t attr_idx = 0;
    if (gated && close_gate(c) != 0)
        goto out_free;
    cudaError_t err = cudaEventRecord(c->t0, c->s);
    if (err == cudaSuccess)
        err = cudaMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &attr_idx, 1, c->s);
    if (gated)
        open_gate(c);
    if (err == cudaSuccess)
        err = cudaEventRecord(c->t1, c->s);
    if (err == cudaSuccess)
        err = cudaEventSynchronize(c->t1);
    if (err == cudaSuccess)
        err = cudaEventElapsedTime(ms_p, c->t0, c->t1);
    if (err != cudaSuccess) {
        fprintf(stderr, "bench cuda: cudaMemcpyBatchAsync run: %s\n", cudaGetErrorString(err));
        cudaGetLastError();
        cudaStreamSynchronize(c->s);
        goto out_free;
    }
    rc = 0;
out_free:
    free(sizes);
    free(srcs);
    free(dsts);
    return rc;
}

enum what { ENGINE, CEILING, BATCH_API };

/* Median of reps gated runs after WARMUP ungated ones; < 0 on failure. */
static float
measure(struct ctx *c, enum what w, ect_copy_dir_t dir, size_t n, size_t bytes, int reps)
{
    float v[64];
    for (int i = 0; i < WARMUP + reps; i++) {
        int gated = i >= WARMUP;
        float ms = 0;
        int rc = w == ENGINE    ? time_engine(c, dir, n, gated, &ms)
                 : w == CEILING ? time_ceiling(c, dir, bytes, gated, &ms)
                                : time_batch_api(c, n, gated, &ms);
        if (rc != 0)
            return -1;
        if (gated)
            v[i - WARMUP] = ms;
    }
    return median(v, reps);
}

/* Ops for an entry of `bytes` in blocks c->ids (the last block cut short). */
static size_t
build_ops(struct ctx *c, ect_copy_dir_t dir, size_t bytes)
{
    size_t n = (bytes + BLOCK - 1) / BLOCK;
    for (size_t k = 0; k < n; k++) {
        size_t len = bytes - k * BLOCK < BLOCK ? bytes - k * BLOCK : BLOCK;
        unsigned char *blk = c->region + c->ids[k] * BLOCK;
        unsigned char *d = (unsigned char *)c->dev + k * BLOCK;
        c->ops[k] =
            dir == ECT_COPY_SAVE ? (ect_copy_op_t){blk, d, len} : (ect_copy_op_t){d, blk, len};
    }
    return n;
}

static void
set_ids(struct ctx *c, size_t n, int fragmented, uint64_t seed)
{
    if (!fragmented) {
        for (size_t i = 0; i < n; i++)
            c->ids[i] = 100 + i;
        return;
    }
    /* A partial Fisher-Yates shuffle of all region blocks. */
    static size_t all[REGION_BLOCKS];
    for (size_t i = 0; i < REGION_BLOCKS; i++)
        all[i] = i;
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = i + (size_t)(x % (REGION_BLOCKS - i));
        size_t t = all[i];
        all[i] = all[j];
        all[j] = t;
        c->ids[i] = all[i];
    }
}

/* Reference rows for a fragmented entry (no target): the kernel with its
 * descriptors uploaded instead of passed in the launch, one DMA copy per
 * block, and cudaMemcpyBatchAsync. */
static int
bench_alternatives(struct ctx *c, ect_copy_dir_t dir, size_t n, size_t bytes, int reps,
                   double ceiling)
{
    const char *dname = dir == ECT_COPY_SAVE ? "save" : "load";
    const struct ect__cuda_plan_policy dflt = ect__cuda_plan_policy_default();
    struct ect__cuda_plan_policy upload = dflt;
    upload.inline_max = 0;
    const struct ect__cuda_plan_policy dma = {SIZE_MAX, 0, 0};
    const struct {
        const char *label;
        const struct ect__cuda_plan_policy *policy;
    } alts[] = {{"kernel, descriptors uploaded", &upload}, {"1 cudaMemcpyAsync per block", &dma}};
    char what[96];
    for (size_t i = 0; i < sizeof(alts) / sizeof(alts[0]); i++) {
        ect__copy_cuda_set_policy(c->e, alts[i].policy);
        float ms = measure(c, ENGINE, dir, n, bytes, reps);
        ect__copy_cuda_set_policy(c->e, &dflt);
        if (ms < 0)
            return -1;
        snprintf(what, sizeof(what), "  ref: %s, %s", dname, alts[i].label);
        ect_bench_fig_t fig = {.name = what,
                               .value = gbps(bytes, ms),
                               .unit = "GB/s",
                               .ceiling = ceiling,
                               .ceiling_is = "one pinned cudaMemcpyAsync"};
        ect_bench_figure(&fig);
    }
    /* The batched-copy API is new (12.8, changed in 13.0): if the driver
     * refuses it, say so and carry on with the engine's own figures. */
    float ms = measure(c, BATCH_API, dir, n, bytes, reps);
    snprintf(what, sizeof(what), "  ref: %s, cudaMemcpyBatchAsync", dname);
    if (ms < 0)
        printf("  %-44s failed (see above)\n", what);
    else
        ect_bench_figure(&(ect_bench_fig_t){.name = what,
                                            .value = gbps(bytes, ms),
                                            .unit = "GB/s",
                                            .ceiling = ceiling,
                                            .ceiling_is = "one pinned cudaMemcpyAsync"});
    return 0;
}

static int
bench_sizes(struct ctx *c)
{
    static const size_t mib[] = {1, 7, 32};
    static const ect_copy_dir_t dirs[] = {ECT_COPY_SAVE, ECT_COPY_LOAD};
    for (size_t si = 0; si < sizeof(mib) / sizeof(mib[0]); si++) {
        const size_t bytes = mib[si] << 20, n = (bytes + BLOCK - 1) / BLOCK;
        const int reps = mib[si] >= 32 ? 15 : 31;
        for (int di = 0; di < 2; di++) {
            const ect_copy_dir_t dir = dirs[di];
            const char *dname = dir == ECT_COPY_SAVE ? "save" : "load";
            float ceil_ms = measure(c, CEILING, dir, 0, bytes, reps);
            if (ceil_ms < 0)
                return -1;
            const double ceiling = gbps(bytes, ceil_ms);
            for (int frag = 0; frag < 2; frag++) {
                set_ids(c, n, frag, 1000 + si);
                build_ops(c, dir, bytes);
                float ms = measure(c, ENGINE, dir, n, bytes, reps);
                if (ms < 0)
                    return -1;
                char what[96];
                if (frag)
                    snprintf(what, sizeof(what), "%s %2zu MiB fragmented (%zu x 7 KiB)", dname,
                             mib[si], n);
                else
                    snprintf(what, sizeof(what), "%s %2zu MiB contiguous", dname, mib[si]);
                char series[32];
                snprintf(series, sizeof(series), "%s, %s", dname,
                         frag ? "fragmented" : "contiguous");
                ect_bench_fig_t fig = {.name = what,
                                       .value = gbps(bytes, ms),
                                       .unit = "GB/s",
                                       .ceiling = ceiling,
                                       .ceiling_is = "one pinned cudaMemcpyAsync",
                                       .target = TARGET,
                                       .bytes = (double)bytes,
                                       .series = series};
                ect_bench_figure(&fig);
                if (frag && mib[si] == 7 &&
                    bench_alternatives(c, dir, n, bytes, reps, ceiling) != 0)
                    return -1;
                fflush(stdout);
            }
        }
    }
    return 0;
}

/* Compute blocks per multiprocessor: many short blocks (~1.5 ms each for a
 * 50 ms kernel), like an encoder's sequence of kernels, so that the copy
 * kernel's blocks find free slots as compute blocks retire. */
#define COMPUTE_BLOCKS_PER_SM 256

/* One compute kernel on the timing stream and, optionally, a fragmented
 * 32 MiB save submitted while it runs (its own source is ready: it is
 * ordered after the idle side stream, not after the compute).  *ms_p: the
 * compute kernel's time; *save_ms_p: when the save landed, from the
 * kernel's start. */
static int
time_compute(struct ctx *c, uint32_t iters, int with_save, float *ms_p, float *save_ms_p)
{
    const unsigned blocks = (unsigned)c->sm_count * COMPUTE_BLOCKS_PER_SM;
    CK(cudaEventRecord(c->t0, c->s));
    CK(ect_bench_compute(c->compute_out, blocks, iters, c->s));
    CK(cudaEventRecord(c->t1, c->s));
    uint64_t t = 0;
    if (with_save) {
        ect_copy_batch_t b = {ECT_COPY_SAVE, c->ops, MAX_OPS, c->side};
        void *end;
        if (ect_copy_engine_submit(c->e, &b, &t) != ECT_OK ||
            ect__copy_cuda_end_event(c->e, t, &end) != ECT_OK) {
            fprintf(stderr, "bench cuda: overlap submit: %s\n", ect_last_error());
            return -1;
        }
        CK(cudaStreamWaitEvent(c->side, (cudaEvent_t)end, 0));
        CK(cudaEventRecord(c->t2, c->side));
        if (ect_copy_engine_wait(c->e, t) != ECT_OK) {
            fprintf(stderr, "bench cuda: overlap wait: %s\n", ect_last_error());
            return -1;
        }
    }
    CK(cudaEventSynchronize(c->t1));
    CK(cudaEventElapsedTime(ms_p, c->t0, c->t1));
    if (with_save) {
        CK(cudaEventSynchronize(c->t2));
        CK(cudaEventElapsedTime(save_ms_p, c->t0, c->t2));
    }
    return 0;
}

static int
bench_overlap(struct ctx *c)
{
    /* Calibrate the compute kernel to ~50 ms. */
    uint32_t iters = 1u << 12;
    float ms = 0, save_ms = 0;
    if (time_compute(c, iters, 0, &ms, NULL) != 0 || time_compute(c, iters, 0, &ms, NULL) != 0)
        return -1;
    double scaled = (double)iters * 50.0 / (ms > 0.01f ? ms : 0.01f);
    iters = scaled > 4e9 ? 4000000000u : (uint32_t)scaled;

    set_ids(c, MAX_OPS, 1, 77);
    build_ops(c, ECT_COPY_SAVE, MAX_BYTES);
    enum { REPS = 7 };
    float alone[REPS], with[REPS], landed[REPS];
    for (int i = 0; i < REPS + 1; i++) {
        /* The first round warms up the save's pool slot. */
        if (time_compute(c, iters, 0, &ms, NULL) != 0)
            return -1;
        if (i > 0)
            alone[i - 1] = ms;
        if (time_compute(c, iters, 1, &ms, &save_ms) != 0)
            return -1;
        if (i > 0) {
            with[i - 1] = ms;
            landed[i - 1] = save_ms;
        }
    }
    float a = median(alone, REPS), w = median(with, REPS), l = median(landed, REPS);
    ect_bench_row("compute speed beside a 32 MiB fragmented save", 1e3 / w, 1e3 / a, "runs/s",
                  1 / 1.1);
    printf(
        "  compute %.2f ms alone, %.2f ms with the save: stretch %+.1f %% (target <= +10 %%)\n"
        "  the save landed %.2f ms after the compute kernel started (%.1f GB/s over that time)\n",
        a, w, (w / a - 1) * 100, l, gbps(MAX_BYTES, l));
    return 0;
}

static unsigned char *
map_region(size_t len)
{
    char name[64];
    snprintf(name, sizeof(name), "/ectier_bench_cuda_%d", (int)getpid());
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        perror("bench cuda: shm_open");
        return NULL;
    }
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)len) == 0)
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    shm_unlink(name);
    close(fd);
    if (p == MAP_FAILED) {
        perror("bench cuda: mapping the region");
        return NULL;
    }
    memset(p, 0x5A, len); /* fault every page in, as the region's creator does */
    return p;
}

static int
run_all(struct ctx *c)
{
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    c->sm_count = prop.multiProcessorCount;
    printf("  device %s, %d SMs; region %zu MiB in /dev/shm, blocks of %u bytes; "
           "medians of event-timed runs\n",
           prop.name, c->sm_count, c->region_len >> 20, BLOCK);
    if (ect_copy_engine_register_host(c->e, c->region, c->region_len) != ECT_OK)
        return -1;
    struct ect__cuda_copy_stats st;
    if (ect__copy_cuda_stats(c->e, &st) != ECT_OK || st.reg_chunks == 0) {
        fprintf(stderr, "bench cuda: the region could not be page-locked (see the warning); "
                        "figures would measure the pageable fallback\n");
        return -1;
    }
    CK(cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
    CK(cudaEventCreate(&c->t0));
    CK(cudaEventCreate(&c->t1));
    CK(cudaEventCreate(&c->t2));
    CK(cudaMalloc(&c->dev, MAX_BYTES));
    CK(cudaMemset(c->dev, 0x3C, MAX_BYTES));
    CK(cudaHostAlloc(&c->pinned, MAX_BYTES, cudaHostAllocDefault));
    memset(c->pinned, 0x4B, MAX_BYTES);
    CK(cudaHostAlloc((void **)&c->gate, sizeof(int), cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&c->gate_dev, (void *)c->gate, 0));
    CK(cudaMalloc((void **)&c->compute_out,
                  (size_t)c->sm_count * COMPUTE_BLOCKS_PER_SM * 256 * sizeof(float)));
    CK(cudaDeviceSynchronize());
    if (bench_sizes(c) != 0)
        return -1;
    return bench_overlap(c);
}

int
ect_bench_cuda(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    struct ctx c;
    memset(&c, 0, sizeof(c));
    ect_status_t st = ect_copy_engine_create_cuda(NULL, &c.e);
    if (st == ECT_ERR_UNSUPPORTED) {
        printf("  skipped: %s\n", ect_last_error());
        return 0;
    }
    if (st != ECT_OK) {
        fprintf(stderr, "bench cuda: %s\n", ect_last_error());
        return 1;
    }
    int rc = 1;
    c.region_len = (size_t)REGION_BLOCKS * BLOCK;
    c.region = map_region(c.region_len);
    c.ops = malloc(MAX_OPS * sizeof(*c.ops));
    c.ids = malloc(MAX_OPS * sizeof(*c.ids));
    if (c.region != NULL && c.ops != NULL && c.ids != NULL)
        rc = run_all(&c) == 0 ? 0 : 1;
    /* Destroying the engine waits for its batches and unregisters the region. */
    ect_copy_engine_destroy(c.e);
    cudaDeviceSynchronize();
    if (c.gate != NULL)
        cudaFreeHost((void *)c.gate);
    if (c.pinned != NULL)
        cudaFreeHost(c.pinned);
    cudaFree(c.dev);
    cudaFree(c.compute_out);
    if (c.region != NULL)
        munmap(c.region, c.region_len);
    free(c.ops);
    free(c.ids);
    return rc;
}

#endif /* ECT_HAVE_CUDA */
