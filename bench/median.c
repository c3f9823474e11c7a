/*
 * Medians for the benchmarks (bench.h), in a file of their own so that the
 * copy ceiling (copy_ceiling.c), which takes medians, builds without the
 * rest of the command: the CLI and test_copy_ceiling link both.
 */
#include <stdlib.h>

#include "bench.h"

static int
cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double
ect_bench_median(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
