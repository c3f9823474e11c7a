/* Build identity: version and which optional parts were compiled in. */
#include <ectier/ectier.h>

#include "ectier_build_config.h"

const char *
ect_version(void)
{
    return ECT_VERSION_STRING;
}

bool
ect_has_p2p(void)
{
    return ECT_HAVE_P2P;
}

bool
ect_has_cuda(void)
{
    return ECT_HAVE_CUDA;
}
