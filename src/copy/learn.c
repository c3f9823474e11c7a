/*
 * A two-way choice learned from timings (see learn.h).
 */
#include "copy/learn.h"

unsigned
ect__learn_class(size_t bytes)
{
    unsigned k = 0;
    while (k + 1 < ECT__LEARN_CLASSES && (bytes >> (ECT__LEARN_MIN_SHIFT + k + 1)) != 0)
        k++;
    return k;
}

/* The median of v[0..n), n in 1..ECT__LEARN_WINDOW (the mean of the two
 * middle values when n is even). */
static float
median_of(const float *v, unsigned n)
{
    float s[ECT__LEARN_WINDOW];
    for (unsigned i = 0; i < n; i++) {
        unsigned j = i;
        for (; j > 0 && s[j - 1] > v[i]; j--)
            s[j] = s[j - 1];
        s[j] = v[i];
    }
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

void
ect__learn_record(struct ect__learned *l, int way, size_t bytes, uint64_t ns)
{
    l->recent[way][l->next[way]] = (float)((double)ns * 1024.0 / (double)bytes);
    l->next[way] = (uint8_t)((l->next[way] + 1) % ECT__LEARN_WINDOW);
    if (l->samples[way] < UINT32_MAX)
        l->samples[way]++;
    uint32_t n = l->samples[way];
    l->typical[way] = median_of(l->recent[way], n < ECT__LEARN_WINDOW ? n : ECT__LEARN_WINDOW);
}

int
ect__learn_pick(struct ect__learned *l, int first)
{
    l->decisions++;
    if (l->samples[first] < ECT__LEARN_MIN)
        return first;
    if (l->samples[!first] < ECT__LEARN_MIN)
        return !first;
    int best = l->typical[0] <= l->typical[1] ? 0 : 1;
    return l->decisions % ECT__LEARN_EXPLORE_EVERY == 0 ? !best : best;
}
