/*
 * Dispatch for the copy-engine interface (include/ectier/copy.h): argument
 * checks shared by every engine, then a call through the engine's ops.
 */
#include "copy/engine.h"
#include "common/error.h"

const char *
ect_copy_engine_kind(const ect_copy_engine_t *engine)
{
    return engine != NULL ? engine->ops->kind : "none";
}

ect_status_t
ect_copy_engine_register_host(ect_copy_engine_t *engine, void *base, size_t len)
{
    if (engine == NULL || base == NULL || len == 0)
        return ect__error(ECT_ERR_INVALID_ARG, "copy register: NULL engine or empty range");
    return engine->ops->register_host(engine, base, len);
}

ect_status_t
ect_copy_engine_unregister_host(ect_copy_engine_t *engine, void *base)
{
    if (engine == NULL || base == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "copy unregister: NULL argument");
    return engine->ops->unregister_host(engine, base);
}

ect_status_t
ect_copy_engine_submit(ect_copy_engine_t *engine, const ect_copy_batch_t *batch, uint64_t *ticket_p)
{
    if (engine == NULL || batch == NULL || ticket_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "copy submit: NULL argument");
    if (batch->dir != ECT_COPY_SAVE && batch->dir != ECT_COPY_LOAD)
        return ect__error(ECT_ERR_INVALID_ARG, "copy submit: direction %d is not save or load",
                          (int)batch->dir);
    if (batch->n_ops > 0 && batch->ops == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "copy submit: %zu ops but NULL op array",
                          batch->n_ops);
    for (size_t i = 0; i < batch->n_ops; i++) {
        const ect_copy_op_t *op = &batch->ops[i];
        if (op->len > 0 && (op->dst == NULL || op->src == NULL))
            return ect__error(ECT_ERR_INVALID_ARG, "copy submit: op %zu has a NULL pointer", i);
    }
    return engine->ops->submit(engine, batch, ticket_p);
}

ect_status_t
ect_copy_engine_query(ect_copy_engine_t *engine, uint64_t ticket)
{
    if (engine == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "copy query: NULL engine");
    return engine->ops->query(engine, ticket);
}

ect_status_t
ect_copy_engine_wait(ect_copy_engine_t *engine, uint64_t ticket)
{
    if (engine == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "copy wait: NULL engine");
    return engine->ops->wait(engine, ticket);
}

void
ect_copy_engine_destroy(ect_copy_engine_t *engine)
{
    if (engine != NULL)
        engine->ops->destroy(engine);
}
