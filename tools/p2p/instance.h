/*
 * A whole ectier instance inside one CLI process, for `ectier producer` and
 * `ectier consumer`: the scheduler side and one worker (CPU copy engine),
 * driven through the same public calls an engine makes.
 */
#ifndef ECT_TOOLS_P2P_INSTANCE_H
#define ECT_TOOLS_P2P_INSTANCE_H

#include <ectier/ectier.h>

struct ect_cli_instance {
    ect_config_t cfg;
    ect_geometry_t geom;
    ect_scheduler_t *sched;
    ect_worker_t *worker;
    char instance_id[64];
};

struct ect_cli_instance_args {
    const char *cmd;    /* for messages */
    const char *config; /* JSON text, or @FILE */
    const char *model;
    const char *hidden; /* decimal */
    const char *dtype;
    const char *engine_version; /* NULL: the library version */
    const char *listen;         /* HOST:PORT or NULL */
};

/* Parse the arguments and start the instance.  Returns 0, 1 (runtime
 * failure, message printed) or 2 (bad arguments, message printed). */
int ect_cli_instance_open(struct ect_cli_instance *in, const struct ect_cli_instance_args *args,
                          const char *usage);

void ect_cli_instance_close(struct ect_cli_instance *in);

/* Run one engine step that saves payload under key (tokens rows) and wait
 * until the entry is ready.  Returns ECT_OK or the failure (message set). */
ect_status_t ect_cli_instance_save(struct ect_cli_instance *in, const char *key, uint64_t tokens,
                                   const void *payload, size_t nbytes);

/* Run one engine step that loads key (a ready entry of tokens rows) into
 * buf (tokens x block size bytes).  Returns ECT_OK or the failure. */
ect_status_t ect_cli_instance_load(struct ect_cli_instance *in, const char *key, uint64_t tokens,
                                   void *buf, size_t cap);

#endif /* ECT_TOOLS_P2P_INSTANCE_H */
