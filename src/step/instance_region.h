/*
 * Opening the instance's region from its configuration and geometry: the
 * one place that turns (config, geometry, instance id, dp rank) into region
 * parameters, so the scheduler and every worker of an instance open exactly
 * the same region.
 */
#ifndef ECT_STEP_INSTANCE_REGION_H
#define ECT_STEP_INSTANCE_REGION_H

#include <ectier/config.h>
#include <ectier/geometry.h>
#include <ectier/region.h>

/* Create or join the region named by cfg->region_name, or by
 * "ectier_<instance_id>_dp<dp_rank>" when that is empty.  dir NULL means
 * /dev/shm.  owner: open as the region's one owner (ECT_REGION_OWNER; the
 * scheduler, which keeps the cache index), else as a joiner (workers).
 * Returns the statuses of ect_region_open (ECT_ERR_BUSY when owner is set
 * and another process owns the region), or ECT_ERR_CONFIG when neither a
 * region name nor an instance id is given. */
ect_status_t ect__instance_region_open(const ect_config_t *cfg, const ect_geometry_t *geometry,
                                       const char *instance_id, unsigned dp_rank, const char *dir,
                                       int owner, ect_region_t **region_p);

#endif /* ECT_STEP_INSTANCE_REGION_H */
