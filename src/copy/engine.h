/*
 * The copy-engine interface seen from inside: each engine embeds
 * struct ect_copy_engine first and supplies its operations.  src/copy/engine.c
 * checks arguments once and dispatches, so engines only see valid batches.
 */
#ifndef ECT_COPY_ENGINE_H
#define ECT_COPY_ENGINE_H

#include <ectier/copy.h>

struct ect_copy_engine_ops {
    const char *kind;
    ect_status_t (*register_host)(ect_copy_engine_t *e, void *base, size_t len);
    ect_status_t (*unregister_host)(ect_copy_engine_t *e, void *base);
    ect_status_t (*submit)(ect_copy_engine_t *e, const ect_copy_batch_t *batch, uint64_t *ticket_p);
    ect_status_t (*query)(ect_copy_engine_t *e, uint64_t ticket);
    ect_status_t (*wait)(ect_copy_engine_t *e, uint64_t ticket);
    void (*destroy)(ect_copy_engine_t *e);
};

struct ect_copy_engine {
    const struct ect_copy_engine_ops *ops;
};

#endif /* ECT_COPY_ENGINE_H */
