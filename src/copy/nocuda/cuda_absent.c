/*
 * The CUDA copy engine in a build without the CUDA toolkit (or with a
 * sanitizer, which the CUDA runtime does not support): creating it is a clear
 * error that says how to get it.  Everything else about copy engines works
 * with the CPU engine.
 */
#include "common/error.h"
#include "copy/engine.h"

ect_status_t
ect_copy_engine_create_cuda(const ect_copy_cuda_params_t *params, ect_copy_engine_t **engine_p)
{
    (void)params;
    (void)engine_p;
    return ect__error(ECT_ERR_UNSUPPORTED,
                      "this build has no CUDA support: rebuild with the CUDA toolkit (nvcc) "
                      "installed and -DECT_WITH_CUDA=ON");
}
