/*
 * The allocator wrappers and the allocation-failure test hooks (alloc.h).
 *
 * With ECT_TEST_HOOKS each attempt takes a number from one relaxed atomic
 * counter; the injector fails number fail_at (and every later one when
 * fail_later is set).  The live count moves by one on each successful new
 * allocation and each free of a non-NULL pointer.  Without the hooks these
 * are plain calls into libc.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "ectier_build_config.h"

static _Thread_local unsigned long thread_failures;

/* p, noting a failure on this thread when it is NULL. */
static void *
noted(void *p)
{
    if (p == NULL)
        thread_failures++;
    return p;
}

unsigned long
ect__alloc_thread_failures(void)
{
    return thread_failures;
}

#if ECT_TEST_HOOKS
static atomic_uint_fast64_t alloc_count;
static atomic_uint_fast64_t alloc_failed;
static atomic_uint_fast64_t fail_at;
static atomic_int fail_later;
static atomic_int_fast64_t alloc_live;

/* Whether this allocation attempt is one the injector fails. */
static int
inject_failure(void)
{
    uint64_t n = atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed) + 1;
    uint64_t at = atomic_load_explicit(&fail_at, memory_order_relaxed);
    if (at == 0 || n < at)
        return 0;
    if (n > at && !atomic_load_explicit(&fail_later, memory_order_relaxed))
        return 0;
    atomic_fetch_add_explicit(&alloc_failed, 1, memory_order_relaxed);
    return 1;
}

static void *
counted(void *p)
{
    if (p != NULL)
        atomic_fetch_add_explicit(&alloc_live, 1, memory_order_relaxed);
    return p;
}

#define INJECT()                                                                                   \
    do {                                                                                           \
        if (inject_failure())                                                                      \
            return noted(NULL);                                                                    \
    } while (0)
#else
#define INJECT()                                                                                   \
    do {                                                                                           \
    } while (0)
#define counted(p) (p)
#endif

void *
ect__malloc(size_t size)
{
    INJECT();
    return counted(noted(malloc(size)));
}

void *
ect__calloc(size_t n, size_t size)
{
    INJECT();
    return counted(noted(calloc(n, size)));
}

void *
ect__realloc(void *ptr, size_t size)
{
    INJECT();
    void *p = noted(realloc(ptr, size ? size : 1));
    if (ptr != NULL)
        return p; /* moved or not, still one allocation */
    return counted(p);
}

void *
ect__aligned_alloc(size_t alignment, size_t size)
{
    INJECT();
    return counted(noted(aligned_alloc(alignment, size)));
}

char *
ect__strdup(const char *s)
{
    INJECT();
    return counted(noted(strdup(s)));
}

char *
ect__strndup(const char *s, size_t n)
{
    INJECT();
    return counted(noted(strndup(s, n)));
}

#define HUGE_PAGE_BYTES ((size_t)2 << 20)

static size_t
huge_length(size_t bytes)
{
    return (bytes + HUGE_PAGE_BYTES - 1) & ~(HUGE_PAGE_BYTES - 1);
}

void *
ect__map_huge(size_t bytes)
{
    INJECT();
    if (bytes == 0 || bytes > SIZE_MAX / 2 - HUGE_PAGE_BYTES)
        return noted(NULL);
    /* Map a huge page more than asked, then give back what lies before the
     * first 2 MiB boundary and after the length (both page-aligned). */
    size_t len = huge_length(bytes);
    char *m = mmap(NULL, len + HUGE_PAGE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED)
        return noted(NULL);
    char *start = m + ((HUGE_PAGE_BYTES - (uintptr_t)m % HUGE_PAGE_BYTES) % HUGE_PAGE_BYTES);
    size_t head = (size_t)(start - m);
    if (head > 0)
        munmap(m, head);
    munmap(start + len, HUGE_PAGE_BYTES - head);
    (void)madvise(start, len, MADV_HUGEPAGE);
    return counted(start);
}

void
ect__unmap_huge(void *p, size_t bytes)
{
    if (p == NULL)
        return;
#if ECT_TEST_HOOKS
    atomic_fetch_sub_explicit(&alloc_live, 1, memory_order_relaxed);
#endif
    munmap(p, huge_length(bytes));
}

int
ect__array_reserve(void **arr, size_t *cap, size_t used, size_t n, size_t elem_size)
{
    if (*cap - used >= n)
        return 0;
    size_t c = *cap ? *cap : 8;
    while (c - used < n) {
        if (c > SIZE_MAX / 2 / elem_size)
            return -1;
        c *= 2;
    }
    void *grown = ect__realloc(*arr, c * elem_size);
    if (grown == NULL)
        return -1;
    *arr = grown;
    *cap = c;
    return 0;
}

void
ect__free(void *ptr)
{
    if (ptr == NULL)
        return;
#if ECT_TEST_HOOKS
    atomic_fetch_sub_explicit(&alloc_live, 1, memory_order_relaxed);
#endif
    free(ptr);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void
init_hooks(void)
{
    cJSON_Hooks hooks = {.malloc_fn = ect__malloc, .free_fn = ect__free};
    cJSON_InitHooks(&hooks);
}

void
ect__alloc_init(void)
{
    pthread_once(&init_once, init_hooks);
}

/* Before main (or when the shared library loads), so no cJSON tree can be
 * made by libc's malloc and freed by ect__free. */
__attribute__((constructor)) static void
alloc_constructor(void)
{
    ect__alloc_init();
}

#if ECT_TEST_HOOKS
void
ect__alloc_reset(void)
{
    atomic_store_explicit(&alloc_count, 0, memory_order_relaxed);
    atomic_store_explicit(&alloc_failed, 0, memory_order_relaxed);
}

void
ect__alloc_fail_at(uint64_t n, int and_later)
{
    atomic_store_explicit(&fail_later, and_later != 0, memory_order_relaxed);
    atomic_store_explicit(&fail_at, n, memory_order_relaxed);
}

uint64_t
ect__alloc_count(void)
{
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}

uint64_t
ect__alloc_failed(void)
{
    return atomic_load_explicit(&alloc_failed, memory_order_relaxed);
}

int64_t
ect__alloc_live(void)
{
    return atomic_load_explicit(&alloc_live, memory_order_relaxed);
}
#endif /* ECT_TEST_HOOKS */
