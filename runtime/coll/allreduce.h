/* runtime/coll/allreduce.h: all_reduce through the transport (internal):
 * recursive doubling and ring, on the step interface (step.h). */
#ifndef TD_RUNTIME_COLL_ALLREDUCE_H
#define TD_RUNTIME_COLL_ALLREDUCE_H

#include "runtime/coll/step.h"

td_status_t coll_all_reduce_rd(coll_op_t *op, void *buf, size_t count);
td_status_t coll_all_reduce_ring(coll_op_t *op, void *buf, size_t count);

/* rd at two members, for bodies of at most COLL_PAIR_MAX bytes, as one
 * step that begins the call itself (op->desc set, not begun): the call
 * begun and the receive posted in one hold of coll_lock (step.h C16),
 * then the send, one wait, the reduction. On the wire the same messages
 * as coll_all_reduce_rd at n = 2, so either may run on either member. */
#define COLL_PAIR_MAX 256
td_status_t coll_all_reduce_pair(coll_op_t *op, void *buf, size_t count,
                                 void (*announce)(td_group_t *g, uint32_t seq,
                                                  const coll_desc_t *d));
/* Calls coll_all_reduce_pair completed, this process (for the tests). */
unsigned long coll_all_reduce_pair_count(void);

#endif /* TD_RUNTIME_COLL_ALLREDUCE_H */
