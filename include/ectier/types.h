/*
 * Small value types shared by several ectier objects.
 */
#ifndef ECTIER_TYPES_H
#define ECTIER_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A run of consecutive block ids of the region: first, first+1, ...,
 * first+count-1.  An entry's blocks are a list of runs, ascending by first. */
typedef struct ect_run {
    uint64_t first;
    uint64_t count;
} ect_run_t;

#ifdef __cplusplus
}
#endif
#endif /* ECTIER_TYPES_H */
