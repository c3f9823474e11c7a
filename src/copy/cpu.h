/*
 * Internal entry points of the CPU copy engine (src/copy/cpu.c) beyond the
 * public interface: an explicit shutdown for owners that must stop copies
 * before they release the memory, a hold that keeps the copy threads off the
 * queue (so tests can keep batches in flight deterministically), and an
 * allocation counter that lets tests prove the steady state does not
 * allocate.
 */
#ifndef ECT_COPY_CPU_H
#define ECT_COPY_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include <ectier/copy.h>

/*
 * Stop accepting batches, let every queued batch land and join the copy
 * threads.  Afterwards submit returns ECT_ERR_SHUTDOWN, while query and wait
 * still answer once for every ticket issued before.  Idempotent.
 * Returns ECT_OK, or ECT_ERR_INVALID_ARG if engine is not a CPU engine.
 * Thread safety: must not race with submit or destroy on the same engine.
 */
ect_status_t ect__copy_cpu_shutdown(ect_copy_engine_t *engine);

/*
 * hold true: copy threads stop claiming new pieces (pieces already claimed
 * finish); batches then land only through ect_copy_wait, whose caller copies
 * its own batch, or after hold false.  Shutdown and destroy ignore the hold,
 * so every batch still lands.  Returns ECT_OK, or ECT_ERR_INVALID_ARG if
 * engine is not a CPU engine.  Thread safety: safe.
 */
ect_status_t ect__copy_cpu_hold(ect_copy_engine_t *engine, bool hold);

/*
 * How many times the engine has allocated memory since creation (batch
 * records, op arrays, ticket-table growth).  0 for a non-CPU engine.
 * Thread safety: safe.
 */
uint64_t ect__copy_cpu_alloc_count(ect_copy_engine_t *engine);

#endif /* ECT_COPY_CPU_H */
