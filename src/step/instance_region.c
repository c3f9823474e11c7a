/* See instance_region.h. */
#include "common/error.h"
#include "step/instance_region.h"

ect_status_t
ect__instance_region_open(const ect_config_t *cfg, const ect_geometry_t *geometry,
                          const char *instance_id, unsigned dp_rank, const char *dir, int owner,
                          ect_region_t **region_p)
{
    int named = cfg->region_name[0] != '\0';
    if (!named && (instance_id == NULL || instance_id[0] == '\0'))
        return ect__error(ECT_ERR_CONFIG,
                          "region: neither region_name nor an instance id was given");
    ect_region_params_t p = {
        .name = named ? cfg->region_name : NULL,
        .instance_id = instance_id,
        .dp_rank = dp_rank,
        .dir = dir,
        .geometry = *geometry,
        .flags = (cfg->prefault ? 0u : ECT_REGION_NO_PREFAULT) |
                 (cfg->region_reaper ? 0u : ECT_REGION_NO_REAPER) | (owner ? ECT_REGION_OWNER : 0u),
    };
    return ect_region_open(&p, region_p);
}
