/* runtime/coll/tree.h: the rooted collectives through the transport
 * (internal): broadcast, reduce, gather, scatter on the step interface
 * (step.h). */
#ifndef TD_RUNTIME_COLL_TREE_H
#define TD_RUNTIME_COLL_TREE_H

#include "runtime/coll/step.h"

td_status_t coll_broadcast_run(coll_op_t *op, void *buf, size_t nbytes);
td_status_t coll_reduce_run(coll_op_t *op, void *buf, size_t count);
td_status_t coll_gather_run(coll_op_t *op, void *out, const void *in,
                            size_t nbytes);
td_status_t coll_scatter_run(coll_op_t *op, void *out, const void *in,
                             size_t nbytes);

#endif /* TD_RUNTIME_COLL_TREE_H */
