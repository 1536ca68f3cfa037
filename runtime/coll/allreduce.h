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
/* Two members on two hosts (T1..T4): the exchange as one message each way
 * through UCX's tag matching (transport.c U1..U6), the body and our call
 * (C5) in it. Whether G's members are on two hosts (asked once, T1). */
int coll_pair_tagged(td_group_t *g);
/* The call begun, the exchange, the call ended: coll_all_reduce_pair's
 * counterpart where coll_pair_tagged(G). */
td_status_t coll_all_reduce_pair_tag(coll_op_t *op, void *buf, size_t count,
                                     void (*announce)(td_group_t *g,
                                                      uint32_t seq,
                                                      const coll_desc_t *d));
/* The exchange of a call already begun (a staged one, run.c dispatch). */
td_status_t coll_all_reduce_pair_tag_run(coll_op_t *op, void *buf,
                                         size_t count);
/* Calls coll_all_reduce_pair_tag(_run) completed, this process (tests). */
unsigned long coll_all_reduce_pair_tag_count(void);
/* Posts of those refused for want of an endpoint (transport.c U2), each
 * posted again (T6), this process (tests). */
unsigned long coll_all_reduce_pair_unwired_count(void);
/* Calls coll_all_reduce_pair completed, this process (for the tests). */
unsigned long coll_all_reduce_pair_count(void);

#endif /* TD_RUNTIME_COLL_ALLREDUCE_H */
