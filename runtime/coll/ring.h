/* runtime/coll/ring.h: one step of a ring of the group's members
 * (internal): a block to the right neighbour while one comes from the
 * left, both cut in segments, the receives posted first, the left's
 * segments taken as they arrive (in place, or reduced) while later ones
 * still move. The ring algorithms are written against it: all_reduce's
 * (allreduce.c), all_gather's and reduce_scatter's (gather.c). Its
 * invariants (R1, R2) are in ring.c.
 *
 * Thread safety: a ring belongs to the thread running its operation
 * (work.c). */
#ifndef TD_RUNTIME_COLL_RING_H
#define TD_RUNTIME_COLL_RING_H

#include "runtime/coll/step.h"

typedef struct {
    coll_op_t   *op;
    int          right, left;      /* group ranks */
    size_t       seg, rseg;        /* elements a segment: sent, received
                                    * (R2: each as its link is cut) */
    size_t       win;              /* R1: segments sent ahead of the
                                    * arrivals; 0: all at once */
    char        *land;             /* a landing block (coll_ring_init's
                                    * LAND elements), or NULL */
    char        *hot;              /* one segment of hot buffer after it:
                                    * a body read in place (cma.h C9)
                                    * lands there, reduced from cache */
    coll_req_t  *rr, *sr, **ptr;
    char        *side_dst;         /* R3: a copy of this rank's own, */
    const char  *side_src;         /* made between arrivals */
    size_t       side_len, side_done;   /* bytes */
} coll_ring_t;

/* A ring of OP's group for steps of at most MAX elements each way; LAND
 * > 0: a landing block of LAND elements (and a hot segment) in the
 * group's scratch, for steps that reduce what arrives into a buffer
 * they also read (all_reduce). The links that cross hosts are OP's
 * ring_far (run.c). */
td_status_t coll_ring_init(coll_ring_t *r, coll_op_t *op, size_t max,
                           size_t land);
void        coll_ring_free(coll_ring_t *r);

/* Step TAG0 (the low 16 bits: the segment): send SL elements at SBUF to
 * the right, receive RL elements from the left for RBUF, each segment
 * as it arrives:
 *   REDUCE 0            received into RBUF;
 *   REDUCE 1, WITH NULL received into the landing block (or the hot
 *                       segment), then RBUF op= it (coll_ring_init with
 *                       LAND >= RL);
 *   REDUCE 1, WITH set  received into RBUF, then RBUF op= WITH (the
 *                       operations commute: the same as WITH op it).
 * Every segment both ways is waited for, also after a failure (C4); the
 * first error is returned. A side copy (R3) is finished before it
 * returns, also after a failure. */
/* R3: copy LEN bytes from SRC to DST (not overlapping) a slice after
 * each arrival of the following steps, the rest at the end of a step. */
void        coll_ring_side_copy(coll_ring_t *r, char *dst, const char *src,
                                size_t len);

td_status_t coll_ring_step(coll_ring_t *r, uint32_t tag0, const char *sbuf,
                           size_t sl, char *rbuf, size_t rl, int reduce,
                           const char *with);

#endif /* TD_RUNTIME_COLL_RING_H */
