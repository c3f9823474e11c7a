/*
 * ect__map_huge (src/common/alloc.c): mappings that start on a 2 MiB
 * boundary, so that a kernel with transparent huge pages can back all of
 * them, whatever it does with the address of a plain mmap; and that return
 * every byte of the over-sized mapping they are cut from.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "ectier_build_config.h"
#include "harness.h"

#define HUGE ((size_t)2 << 20)

/* The process's virtual size in KiB (VmSize in /proc/self/status). */
static uint64_t
vm_size_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL);
    char line[256];
    unsigned long long kib = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmSize: %llu kB", &kib) == 1)
            break;
    fclose(f);
    CHECK(kib > 0);
    return kib;
}

static void
test_huge_mappings_start_on_a_huge_page_and_keep_no_slack(void)
{
    static const size_t sizes[] = {1, 4096, HUGE - 1, HUGE, HUGE + 1, 9 * HUGE};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t bytes = sizes[i], len = (bytes + HUGE - 1) / HUGE * HUGE;
        uint64_t before = vm_size_kib();
        unsigned char *p = ect__map_huge(bytes);
        CHECK_MSG(p != NULL, "%zu bytes not mapped", bytes);
        CHECK_MSG((uintptr_t)p % HUGE == 0, "%zu bytes mapped at %p", bytes, (void *)p);
        /* What the mapping was cut from, beyond len, went back at once. */
        CHECK_EQ_U64(vm_size_kib() - before, len / 1024);
        CHECK(p[0] == 0 && p[bytes - 1] == 0 && p[len - 1] == 0);
        p[0] = 1;
        p[len - 1] = 2;
        ect__unmap_huge(p, bytes);
        CHECK_EQ_U64(vm_size_kib(), before);
    }
    ect__unmap_huge(NULL, HUGE); /* a no-op */
}

static void
test_huge_mapping_refuses_empty_and_overflowing_sizes(void)
{
    uint64_t before = vm_size_kib();
    CHECK(ect__map_huge(0) == NULL);
    CHECK(ect__map_huge(SIZE_MAX) == NULL);
    CHECK(ect__map_huge(SIZE_MAX - HUGE + 2) == NULL); /* would round up past SIZE_MAX */
    CHECK_EQ_U64(vm_size_kib(), before);
}

static void
test_huge_mappings_are_counted_and_failable_as_allocations(void)
{
#if !ECT_TEST_HOOKS
    SKIP("built without ECT_TEST_HOOKS: no allocation counter");
#else
    int64_t live = ect__alloc_live();
    void *p = ect__map_huge(HUGE);
    CHECK(p != NULL);
    CHECK_EQ_U64((uint64_t)(ect__alloc_live() - live), 1);
    ect__unmap_huge(p, HUGE);
    CHECK_EQ_U64((uint64_t)ect__alloc_live(), (uint64_t)live);

    uint64_t before = vm_size_kib();
    unsigned long failures = ect__alloc_thread_failures();
    ect__alloc_reset();
    ect__alloc_fail_at(1, 0);
    CHECK(ect__map_huge(HUGE) == NULL);
    ect__alloc_fail_at(0, 0);
    CHECK_EQ_U64(ect__alloc_failed(), 1);
    CHECK_EQ_U64(ect__alloc_thread_failures() - failures, 1);
    CHECK_EQ_U64(vm_size_kib(), before);
    CHECK_EQ_U64((uint64_t)ect__alloc_live(), (uint64_t)live);
#endif
}

static const struct ect_test_case cases[] = {
    ECT_CASE(test_huge_mappings_start_on_a_huge_page_and_keep_no_slack),
    ECT_CASE(test_huge_mapping_refuses_empty_and_overflowing_sizes),
    ECT_CASE(test_huge_mappings_are_counted_and_failable_as_allocations),
};

int
main(int argc, char **argv)
{
    return ECT_TEST_MAIN(argc, argv, cases);
}
