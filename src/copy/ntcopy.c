/*
 * Copy kernels (see ntcopy.h).  Non-temporal: the middle of the copy moves
 * in 128-byte steps: four 32-byte AVX2 stores where the CPU has AVX2 (chosen
 * once per call from the CPU's feature bits, which libgcc reads at start),
 * else eight 16-byte SSE2 stores, which every x86-64 CPU has.  Loads are
 * unaligned (the source may sit anywhere); stores are aligned because the
 * head up to the destination's next 64-byte boundary is copied with memcpy.
 * String move: one `rep movsb` where CPUID says the CPU has ERMS.  The
 * page prefetch is plain C, built everywhere.
 */
#include <stdint.h>
#include <string.h>

#include "copy/ntcopy.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define ECT_NT_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ECT_NT_SANITIZED 1
#endif

#define PAGE_STRIDE 4096u

void
ect__copy_prefetch_pages(const void *p, size_t n)
{
    if (n == 0)
        return;
    const char *b = p;
    for (size_t i = 0; i < n; i += PAGE_STRIDE)
        __builtin_prefetch(b + i, 0, 3);
    /* The last page, where the stride stepped past its start. */
    __builtin_prefetch(b + n - 1, 0, 3);
}

#if defined(__x86_64__)
#include <cpuid.h>

int
ect__cpu_leaf7_ebx_has(unsigned bit)
{
    static int64_t known = -1; /* EBX; racy but idempotent: every thread computes the same */
    int64_t ebx = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (ebx < 0) {
        unsigned a, b, c, d;
        ebx = __get_cpuid_count(7, 0, &a, &b, &c, &d) ? (int64_t)b : 0;
        __atomic_store_n(&known, ebx, __ATOMIC_RELAXED);
    }
    return bit < 32 && (ebx & ((int64_t)1 << bit)) != 0;
}
#else
int
ect__cpu_leaf7_ebx_has(unsigned bit)
{
    (void)bit;
    return 0;
}
#endif

#if defined(__x86_64__) && !defined(ECT_NT_SANITIZED)
#include <immintrin.h>

#define STEP 128u
/* Below this, the fence and the two memcpy ends cost more than they save. */
#define NT_MIN 512u

__attribute__((target("avx2"))) static void
body_avx2(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += STEP) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64));
        __m256i e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_stream_si256((__m256i *)(d + i), a);
        _mm256_stream_si256((__m256i *)(d + i + 32), b);
        _mm256_stream_si256((__m256i *)(d + i + 64), c);
        _mm256_stream_si256((__m256i *)(d + i + 96), e);
    }
}

static void
body_sse2(char *d, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i += STEP) {
        for (size_t k = 0; k < STEP; k += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(s + i + k));
            __m128i b = _mm_loadu_si128((const __m128i *)(s + i + k + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(s + i + k + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(s + i + k + 48));
            _mm_stream_si128((__m128i *)(d + i + k), a);
            _mm_stream_si128((__m128i *)(d + i + k + 16), b);
            _mm_stream_si128((__m128i *)(d + i + k + 32), c);
            _mm_stream_si128((__m128i *)(d + i + k + 48), e);
        }
    }
}

void
ect__copy_nt(void *dst, const void *src, size_t n)
{
    char *d = dst;
    const char *s = src;
    if (n < NT_MIN) {
        memcpy(d, s, n);
        return;
    }
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)(STEP - 1);
    if (__builtin_cpu_supports("avx2"))
        body_avx2(d, s, body);
    else
        body_sse2(d, s, body);
    memcpy(d + body, s + body, n - body);
}

void
ect__copy_nt_fence(void)
{
    _mm_sfence();
}

int
ect__copy_nt_available(void)
{
    return 1;
}

/* Enhanced rep movsb. */
static int
has_erms(void)
{
    return ect__cpu_leaf7_ebx_has(9);
}

void
ect__copy_movsb(void *dst, const void *src, size_t n)
{
    if (!has_erms()) {
        memcpy(dst, src, n);
        return;
    }
    __asm__ volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(n) : : "memory");
}

int
ect__copy_movsb_available(void)
{
    return has_erms();
}

#else

void
ect__copy_nt(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

void
ect__copy_nt_fence(void)
{
}

int
ect__copy_nt_available(void)
{
    return 0;
}

void
ect__copy_movsb(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

int
ect__copy_movsb_available(void)
{
    return 0;
}

#endif
