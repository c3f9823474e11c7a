/*
 * A choice between two ways of doing something, learned from how long each
 * took (the CPU copy engine's choices: copy a batch in submit or hand it off;
 * copy it with the string move or with non-temporal stores).  Each way is
 * tried until it has ECT__LEARN_MIN samples; then the faster one, by the
 * median nanoseconds per KiB of its last ECT__LEARN_WINDOW samples, is
 * taken, and the other still once in ECT__LEARN_EXPLORE_EVERY decisions, so
 * a change of the machine's load is seen.  Choices are kept per power-of-two
 * size class (ect__learn_class).
 *
 * Why a median: a hand-off's time has a long tail (a woken thread that
 * starts 100 us late once in a while).  A running average let one such
 * sample make the faster way look slower than the other, and the choice
 * then stayed on the slower way until the next exploring decision brought
 * a new sample: on the GPU host's 16 CPUs a 1 MiB save was copied by submit
 * alone in a third of the batches, at 80 us against 60 us for a hand-off.
 * The median of the window ignores up to ECT__LEARN_WINDOW / 2 - 1 such
 * samples and follows a lasting change after ECT__LEARN_WINDOW / 2 + 1 at
 * the latest.
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
#define ECT__LEARN_WINDOW        8 /* the samples a way's median is taken over */

/* What one class has shown of its two ways (0 and 1). */
struct ect__learned {
    float recent[2][ECT__LEARN_WINDOW]; /* ns per KiB, a ring per way */
    uint8_t next[2];                    /* the slot of recent[way] the next sample takes */
    float typical[2];                   /* the median of recent[way]'s filled slots */
    uint32_t samples[2];                /* all samples of the way (saturating) */
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
