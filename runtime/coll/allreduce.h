/* runtime/coll/allreduce.h: all_reduce through the transport (internal):
 * recursive doubling and ring, on the step interface (step.h). */
#ifndef TD_RUNTIME_COLL_ALLREDUCE_H
#define TD_RUNTIME_COLL_ALLREDUCE_H

#include "runtime/coll/step.h"

td_status_t coll_all_reduce_rd(coll_op_t *op, void *buf, size_t count);
td_status_t coll_all_reduce_ring(coll_op_t *op, void *buf, size_t count);

#endif /* TD_RUNTIME_COLL_ALLREDUCE_H */
