/*
 * The copy kernels beyond memcpy.  Copies with non-temporal stores: the destination's lines go to
 * memory through the write-combining buffers instead of being read into the cache first (no read
 * for ownership) and they do not evict hot data.  For a destination nobody reads soon, such as a
 * region block being saved, this is 2-4x faster than memcpy on the project's VMs (bench/bench.c
 * measures both in every `ectier bench` run: the ceiling is the better of the two).
 *
 * One home for the kernels (and for the page prefetch that goes before a
 * copy): the CPU copy engine and the benchmarks' ceiling use them.  Where
 * a kernel is not built for x86-64, or in a sanitizer build (whose checks
 * would not see the vector stores), it is plain memcpy.
 */
#ifndef ECT_COPY_NTCOPY_H
#define ECT_COPY_NTCOPY_H

#include <stddef.h>

/*
 * Copy n bytes from src to dst (any alignment; the ranges must not overlap)
 * with non-temporal stores for the 64-byte-aligned middle and memcpy for the
 * ends.  The stores are weakly ordered: call ect__copy_nt_fence() before
 * publishing that the bytes have landed (one fence may cover many copies).
 * Thread safety: safe (no state).
 */
void ect__copy_nt(void *dst, const void *src, size_t n);

/* Order every non-temporal store of this thread before its later stores. */
void ect__copy_nt_fence(void);

/* Whether CPUID leaf 7 (subleaf 0) sets bit `bit` (< 32) of EBX: the CPU's
 * extended features (9: ERMS, 23: CLFLUSHOPT).  Asked once and kept (under
 * a hypervisor CPUID traps); 0 off x86-64.  Sanitizer builds ask too.
 * Thread safety: safe. */
int ect__cpu_leaf7_ebx_has(unsigned bit);

/* 1 when ect__copy_nt really uses non-temporal stores in this build. */
int ect__copy_nt_available(void);

/*
 * Copy n bytes from src to dst (the ranges must not overlap) with the CPU's
 * string move (`rep movsb`).  Where the CPU has ERMS (enhanced rep movsb)
 * this moves whole lines without vector registers, and on the project's VMs
 * it is the fastest copy below the size of the last-level cache, above all
 * after the thread slept: non-temporal stores then run at half speed for
 * the first tens of microseconds, and memcpy trails by 10-30 %
 * (bench/bench.c measures every way in each run).  Ordinary stores: no
 * fence needed.  Where ect__copy_movsb_available() is 0 it is memcpy.
 * Thread safety: safe (no state).
 */
void ect__copy_movsb(void *dst, const void *src, size_t n);

/* 1 when ect__copy_movsb really uses rep movsb (x86-64 with ERMS, not a
 * sanitizer build). */
int ect__copy_movsb_available(void);

/*
 * Prefetch one line in every 4 KiB page that [p, p + n) covers (lines of
 * the range only), before a copy streams through it.  Why: on the
 * project's VMs the first store to a region page that was last written
 * tens of milliseconds ago stalls (a page walk and its bookkeeping, paid
 * page after page as a copy reaches each one); prefetches issued together
 * let the core resolve the pages at once.  Measured with `ectier bench
 * step`, 3 runs each way alternating: a 1 MiB save step's copy 55-67 us
 * without, 34-35 us with (the same copy repeated at once takes 18-20 us);
 * loads and `ectier bench copy` (blocks reused at once) unchanged within
 * the noise.  On the GPU host (a KVM guest) the same within its noise with
 * and without, 2 runs each way: 1 MiB save step with polling copy threads
 * 0.52-0.54 with, 0.49-0.51 without; 32 MiB 0.56 / 0.73 with, 0.70 / 0.75
 * without (blocks as they come / written just before).  A prefetch never
 * faults and reads nothing into the program.
 * Thread safety: safe (no state).
 */
void ect__copy_prefetch_pages(const void *p, size_t n);

#endif /* ECT_COPY_NTCOPY_H */
