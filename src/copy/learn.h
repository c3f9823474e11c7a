/*
 * A choice between two ways of doing something, learned from how long each
 * took (the CPU copy engine's choices: copy a batch in submit or hand it off;
 * copy it with the string move or with non-temporal stores).  Each way is
 * tried until it has ECT__LEARN_MIN samples; then the faster one, by a
 * running average of nanoseconds per KiB, is taken, and the other still
 * once in ECT__LEARN_EXPLORE_EVERY decisions, so a change of the machine's
 * load is seen.  Choices are kept per power-of-two size class
 * (ect__learn_class).
 *
 * Thread safety: none; the caller serialises (the engine's mutex).
 */
#ifndef ECT_COPY_LEARN_H
#define ECT_COPY_LEARN_H

#include <stddef.h>
#include <stdint.h>

#define ECT__LEARN_MIN_SHIFT     16 /* class 0 holds batches below 2^17 bytes */
#define ECT__LEARN_CLASSES       16
#define ECT__LEARN_MIN           3
#define ECT__LEARN_EXPLORE_EVERY 16

/* What one class has shown of its two ways (0 and 1). */
struct ect__learned {
    double ns_per_kib[2];
    uint32_t samples[2];
    uint32_t decisions;
};

/* The class of a batch of `bytes`: class k holds [2^(ECT__LEARN_MIN_SHIFT
 * + k), 2^(ECT__LEARN_MIN_SHIFT + k + 1)); smaller ones fall in 0, larger in
 * the last.  Always < ECT__LEARN_CLASSES. */
unsigned ect__learn_class(size_t bytes);

/* Way `way` (0 or 1) moved `bytes` (> 0) in `ns`. */
void ect__learn_record(struct ect__learned *l, int way, size_t bytes, uint64_t ns);

/* The way the next decision takes (0 or 1), `first` tried first. */
int ect__learn_pick(struct ect__learned *l, int first);

#endif /* ECT_COPY_LEARN_H */
