/* runtime/coll/gather.h: the all-to-all family through the transport
 * (internal): all_gather, reduce_scatter, all_to_all and the barrier on
 * the step interface (step.h). */
#ifndef TD_RUNTIME_COLL_GATHER_H
#define TD_RUNTIME_COLL_GATHER_H

#include "runtime/coll/step.h"

td_status_t coll_all_gather_run(coll_op_t *op, void *out, const void *in,
                                size_t nbytes);
td_status_t coll_reduce_scatter_run(coll_op_t *op, void *out, const void *in,
                                    size_t count);
td_status_t coll_all_to_all_run(coll_op_t *op, void *out, const void *in,
                                size_t block_bytes);
td_status_t coll_barrier_run(coll_op_t *op);

#endif /* TD_RUNTIME_COLL_GATHER_H */
