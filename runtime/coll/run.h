/* runtime/coll/run.h: running one checked collective on this thread
 * (internal): the route (NCCL, staged, host: nccl.h), the choice of
 * algorithm (the table in todist/coll.h), and the call under its
 * sequence number and description (step.h, C5). Below work.c, above the
 * algorithms.
 *
 * Thread safety: on the thread work.c gives the group's operation. */
#ifndef TD_RUNTIME_COLL_RUN_H
#define TD_RUNTIME_COLL_RUN_H

#include "runtime/coll/args.h"

/* Run checked arguments A on G (this thread). */
td_status_t coll_run(td_group_t *g, const coll_args_t *a);

#endif /* TD_RUNTIME_COLL_RUN_H */
