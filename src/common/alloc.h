/*
 * The library's one allocator: every heap allocation in src/ goes through
 * ect__malloc / ect__calloc / ect__realloc / ect__aligned_alloc /
 * ect__strdup / ect__strndup and comes back through ect__free, and so do
 * cJSON's (its hooks are set to these once, before main: see alloc.c;
 * they are process-wide, so another user of libcjson in the process
 * allocates through them too, which is harmless: the memory is libc's).
 * The public ect_free (include/ectier/types.h) is ect__free, so whatever
 * the library hands out is returned the same way.  Without the test hooks
 * the functions are libc's, one call deeper; with them the pointers are
 * still libc's, so a stray free() is harmless, though it skews the count.
 *
 * Test hooks (built when CMake's ECT_TEST_HOOKS is on, the default; the
 * generated ectier_build_config.h says so as ECT_TEST_HOOKS 1): counters
 * and a failure injector for the allocation-failure sweep
 * (tests/support/sweep.c, tests/unit/test_alloc_sweep.c,
 * tests/integration/p2p/test_alloc_sweep_p2p.c).  They are internal (never exported from
 * libectier.so, which builds with -fvisibility=hidden); tests link the
 * static library.  Counters are relaxed atomics, so any thread may
 * allocate; the injector applies to every thread (the copy engine's and
 * the P2P threads' included), so a failure there is in scope.
 *
 * Not covered: memory that third-party libraries allocate for themselves
 * (ZeroMQ's contexts, sockets, messages and I/O threads, UCX, libcrypto,
 * pthreads, getline's buffer in control_curve.c, the CUDA runtime).  Those
 * can neither be failed nor counted here; the sweep sees only what ectier
 * itself allocates.  (msgpack-c only packs, through ectier's own writer,
 * into ectier's buffers: it allocates nothing.)
 */
#ifndef ECT_COMMON_ALLOC_H
#define ECT_COMMON_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *ect__malloc(size_t size);
void *ect__calloc(size_t n, size_t size);
/* Like realloc; on failure ptr is untouched.  size 0 is taken as 1. */
void *ect__realloc(void *ptr, size_t size);
void *ect__aligned_alloc(size_t alignment, size_t size);
char *ect__strdup(const char *s);
char *ect__strndup(const char *s, size_t n);
/* NULL is a no-op. */
void ect__free(void *ptr);

/* bytes of zeroed anonymous memory that starts on a 2 MiB boundary and is
 * advised as transparent huge pages (MADV_HUGEPAGE; a hint: where the
 * kernel has none the memory still works in small pages).  Aligned here
 * rather than left to the kernel, which aligns large anonymous mappings
 * only since Linux 6.7: a 2 MiB chunk mapped anywhere else spans two huge
 * page frames and gets neither.  The length is rounded up to a multiple of
 * 2 MiB; only touched pages take memory.  NULL when out of memory, bytes
 * is 0, or the size overflows (no message: the caller says what failed);
 * counted and failable like the allocations above.  Back through
 * ect__unmap_huge with the same bytes; NULL is a no-op there. */
void *ect__map_huge(size_t bytes);
void ect__unmap_huge(void *p, size_t bytes);

/* Make *arr, an ect__realloc'able array of *cap elements of elem_size
 * bytes of which `used` are in use (used <= *cap), hold at least n more,
 * doubling its capacity (from 8) as often as needed.  Returns 0, or -1 when
 * memory runs out or the size would overflow: then nothing changed and no
 * message is set (the caller says what ran out).  Arrays kept across uses
 * reach their peak size and stop allocating. */
int ect__array_reserve(void **arr, size_t *cap, size_t used, size_t n, size_t elem_size);

/* How many allocations have failed on the calling thread (real or
 * injected), ever.  A parser that cannot tell "out of memory" from "bad
 * input" (cJSON returns NULL for both) compares it before and after.
 * Always built; thread-safe. */
unsigned long ect__alloc_thread_failures(void);

/* Set cJSON's hooks to the functions above (idempotent, thread-safe; also
 * run by a constructor when the library loads). */
void ect__alloc_init(void);

/* ---- test hooks ---------------------------------------------------------
 * Defined only when ectier_build_config.h has ECT_TEST_HOOKS 1: a library
 * built with -DECT_TEST_HOOKS=OFF has no hook at all, and a test that needs
 * one checks the macro and skips. */

/* Zero the allocation count and the injected-failure count (the live count
 * is never reset: it is a balance). */
void ect__alloc_reset(void);

/* Fail allocation number n (counted from the last reset, 1-based) and,
 * when `and_later` is non-zero, every one after it; n = 0 disarms. */
void ect__alloc_fail_at(uint64_t n, int and_later);

/* Allocations attempted since the last reset (failed ones included). */
uint64_t ect__alloc_count(void);

/* Allocations failed by the injector since the last reset. */
uint64_t ect__alloc_failed(void);

/* Allocations live now: successful allocations minus ect__free calls on
 * non-NULL pointers, since the process began.  A leak detector that needs
 * no sanitizer. */
int64_t ect__alloc_live(void);

#endif /* ECT_COMMON_ALLOC_H */
