/*
 * A two-way choice learned from timings (see learn.h).
 */
#include "copy/learn.h"

#define WEIGHT 0.25 /* of a new sample in the running average */

unsigned
ect__learn_class(size_t bytes)
{
    unsigned k = 0;
    while (k + 1 < ECT__LEARN_CLASSES && (bytes >> (ECT__LEARN_MIN_SHIFT + k + 1)) != 0)
        k++;
    return k;
}

void
ect__learn_record(struct ect__learned *l, int way, size_t bytes, uint64_t ns)
{
    double v = (double)ns * 1024.0 / (double)bytes;
    if (l->samples[way] == 0)
        l->ns_per_kib[way] = v;
    else
        l->ns_per_kib[way] += WEIGHT * (v - l->ns_per_kib[way]);
    if (l->samples[way] < UINT32_MAX)
        l->samples[way]++;
}

int
ect__learn_pick(struct ect__learned *l, int first)
{
    l->decisions++;
    if (l->samples[first] < ECT__LEARN_MIN)
        return first;
    if (l->samples[!first] < ECT__LEARN_MIN)
        return !first;
    int best = l->ns_per_kib[0] <= l->ns_per_kib[1] ? 0 : 1;
    return l->decisions % ECT__LEARN_EXPLORE_EVERY == 0 ? !best : best;
}
