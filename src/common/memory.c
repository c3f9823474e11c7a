/*
 * ect_free (include/ectier/types.h): the one way back for memory the library
 * hands to its caller.
 */
#include <stdlib.h>

#include <ectier/types.h>

#include "common/alloc.h"

void
ect_free(void *ptr)
{
    ect__free(ptr);
}
