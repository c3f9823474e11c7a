/*
 * The worker side over CUDA device memory (issue 5: "the engine is used by
 * the worker side whenever the engine hands it device memory"): a scheduler
 * and a worker made with ECT_WORKER_CUDA_MEMORY save an encoder output
 * straight from device memory into the region and load it back into other
 * device memory, through the encoded step metadata and reports.  Skips
 * without CUDA or a GPU.
 */
#include <ectier/ectier.h>

#include "ectier_build_config.h"
#include "harness.h"

#if ECT_HAVE_CUDA
#include <cuda_runtime.h>

#define HIDDEN 3584 /* bf16: 7 KiB rows */
#define TOKENS 300

struct step_ctx {
    ect_scheduler_t *s;
    ect_worker_t *w;
};

static void
bind_step(struct step_ctx *c)
{
    ect_step_meta_t *meta;
    CHECK_OK(ect_scheduler_build_connector_meta(c->s, &meta));
    size_t cap = ect_step_meta_encoded_size(meta), len;
    void *b = malloc(cap);
    CHECK_OK(ect_step_meta_encode(meta, b, cap, &len));
    ect_step_meta_destroy(meta);
    CHECK_OK(ect_worker_bind_metadata(c->w, b, len));
    free(b);
}

static void
finish_step(struct step_ctx *c)
{
    CHECK_OK(ect_worker_get_finished(c->w));
    CHECK_OK(ect_worker_wait(c->w));
    ect_step_report_t *r = NULL;
    CHECK_OK(ect_worker_take_report(c->w, &r));
    CHECK(r != NULL);
    CHECK_OK(ect_scheduler_apply_report(c->s, r));
    ect_step_report_destroy(r);
    ect_worker_clear_metadata(c->w);
}

static ect_status_t
device_target(void *user, const char *key, uint64_t n_tokens, size_t nbytes, void **dst_p)
{
    (void)key;
    (void)n_tokens;
    void **dev = user;
    if (cudaMalloc(dev, nbytes) != cudaSuccess)
        return ECT_ERR_CUDA;
    *dst_p = *dev;
    return ECT_OK;
}

static void
test_worker_saves_and_loads_device_memory_through_the_step_protocol(void)
{
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0)
        SKIP("no CUDA device");
    char json[256];
    snprintf(json, sizeof(json),
             "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\", "
             "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": %d}}",
             1000 * HIDDEN * 2);
    ect_config_t cfg;
    ect_geometry_t geom;
    CHECK_OK(ect_config_parse(json, strlen(json), &cfg));
    CHECK_OK(ect_geometry_init(HIDDEN, ECT_DTYPE_BF16, cfg.cpu_bytes, &geom));
    char id[64];
    ect_test_unique_name(id, sizeof(id), "cudaw");
    ect_scheduler_params_t sp = {.config = &cfg, .geometry = &geom, .instance_id = id};
    struct step_ctx c;
    CHECK_OK(ect_scheduler_create(&sp, &c.s));
    ect_worker_params_t wp = {.config = &cfg,
                              .geometry = &geom,
                              .instance_id = id,
                              .memory = ECT_WORKER_CUDA_MEMORY,
                              .cuda_device = 0};
    ect_status_t st = ect_worker_create(&wp, &c.w);
    if (st == ECT_ERR_UNSUPPORTED) {
        ect_scheduler_destroy(c.s);
        SKIP("%s", ect_last_error());
    }
    CHECK_OK(st);
    /* A payload one row short of whole, so the exact tail is exercised. */
    const size_t nbytes = (size_t)TOKENS * HIDDEN * 2 - 100;
    uint8_t *host = malloc(nbytes), *back = malloc((size_t)TOKENS * HIDDEN * 2);
    for (size_t i = 0; i < nbytes; i++)
        host[i] = (uint8_t)(i * 131u + 7u) | 1u;
    void *src = NULL;
    CHECK(cudaMalloc(&src, nbytes) == cudaSuccess);
    CHECK(cudaMemcpy(src, host, nbytes, cudaMemcpyHostToDevice) == cudaSuccess);

    ect_mm_feature_t f = {.identifier = "img", .num_tokens = TOKENS, .has_local_input = 1};
    ect_request_t req = {.request_id = "r1", .features = &f, .n_features = 1};
    CHECK(!ect_scheduler_has_cache_item(c.s, "img"));
    CHECK_OK(ect_scheduler_update_state_after_alloc(c.s, &req, 0));
    bind_step(&c);
    int queued = 0;
    CHECK_OK(ect_worker_save(c.w, "img", src, nbytes, NULL, &queued));
    CHECK(queued);
    finish_step(&c);

    req.request_id = "r2";
    CHECK(ect_scheduler_has_cache_item(c.s, "img"));
    CHECK_OK(ect_scheduler_update_state_after_alloc(c.s, &req, 0));
    bind_step(&c);
    void *dst = NULL;
    CHECK_OK(ect_worker_start_load(c.w, device_target, &dst, NULL));
    CHECK(dst != NULL);
    finish_step(&c);
    CHECK(cudaMemcpy(back, dst, nbytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(memcmp(back, host, nbytes) == 0);
    CHECK(!ect_scheduler_has_pending_push_work(c.s));
    cudaFree(src);
    cudaFree(dst);
    free(host);
    free(back);
    ect_worker_destroy(c.w);
    ect_scheduler_destroy(c.s);
}

#else

static void
test_worker_saves_and_loads_device_memory_through_the_step_protocol(void)
{
    SKIP("this build has no CUDA");
}

#endif

static void
test_device_memory_without_cuda_support_is_a_clear_error(void)
{
    if (ect_has_cuda())
        SKIP("this build has CUDA");
    char json[] = "{\"ec_connector\": \"ectier\", \"ec_role\": \"ec_both\", "
                  "\"ec_connector_extra_config\": {\"ec_cpu_bytes\": 1048576}}";
    ect_config_t cfg;
    ect_geometry_t geom;
    CHECK_OK(ect_config_parse(json, strlen(json), &cfg));
    CHECK_OK(ect_geometry_init(64, ECT_DTYPE_BF16, cfg.cpu_bytes, &geom));
    char id[64];
    ect_test_unique_name(id, sizeof(id), "cudaw");
    ect_worker_params_t wp = {
        .config = &cfg, .geometry = &geom, .instance_id = id, .memory = ECT_WORKER_CUDA_MEMORY};
    ect_worker_t *w = NULL;
    CHECK_STATUS(ect_worker_create(&wp, &w), ECT_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ect_last_error(), "CUDA");
    CHECK(w == NULL);
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_worker_saves_and_loads_device_memory_through_the_step_protocol),
    ECT_CASE(test_device_memory_without_cuda_support_is_a_clear_error),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
