/* runtime/coll/step.h: the step interface the algorithms are written
 * against (internal): one collective of one group (coll_op_t), its steps
 * (isend, irecv, sendrecv, wait) addressed by group rank, its scratch,
 * and the group's shape (g->n, g->me, g->ranks: match.h). Below the
 * algorithms (allreduce.c, tree.c, gather.c, shm.c); above the receive
 * path, the in-place channel and the wait.
 *
 * C8 Receives of a collective are posted under exact keys (group, seq,
 *    step tag, source), so steps and operations never steal each other's
 *    messages, whatever order they arrive in.
 * C18 A call of an unbroken group may begin without coll_lock
 *    (coll_op_begin_lean, match.h L8): it publishes itself (a seqlock)
 *    and in_op, and leaves C5's look at what arrived before it to
 *    coll_op_check_queued, which its caller makes before it waits for
 *    anything a member in another call would never send. A call whose
 *    exchange completed needs none: the tagged pair (allreduce.c T2)
 *    completes only with the peer's message of the same call. A
 *    collective message queued after the look is compared with the
 *    current call by rx.c once it is queued (C5; a seq_cst fence and
 *    store on either side: one of the two sees the other). The mutex's
 *    two locked instructions, its calls and the store's fence were
 *    20-30 ns of the 2-host 8 B all_reduce's ~400 ns user-space path
 *    (issue 30).
 * C16 A call may begin and post its first receive in one hold of
 *    coll_lock (coll_op_begin_irecv): what coll_op_begin then coll_irecv
 *    do, in that order, with the receive posted only once the begin
 *    succeeded (no broken group, no mismatch with what arrived, C5), so
 *    a message arriving meanwhile is matched or compared exactly as
 *    between the two calls. The announcement (shm.c S4) follows the
 *    post; it is read only by members waiting in a segment, never by
 *    the receive path. One locked section a call less (issue 30).
 *
 * Thread safety: an operation is driven by the one thread running it
 * (work.c). */
#ifndef TD_RUNTIME_COLL_STEP_H
#define TD_RUNTIME_COLL_STEP_H

#include "runtime/coll/match.h"

/* The context an algorithm runs in: one collective of one group. */
typedef struct {
    td_group_t   *g;
    coll_desc_t   desc;
    coll_algo_t   algo;            /* what runs: desc.algo, or for "shm"
                                    * without a segment, auto's choice */
    uint32_t      seq;
    double        deadline;        /* td_now_s; 0 through a mapped segment
                                    * until its wait first reads the clock */
    size_t        esize;           /* bytes per element */
    int           ring_far;        /* a ring's links that cross hosts:
                                    * COLL_RING_FAR_TX (to the right
                                    * neighbour), _RX (from the left);
                                    * run.c, from the group's host map
                                    * (A1), so that both ends of a link
                                    * agree (ring.c R2) */
    uint64_t      tree_far;        /* a binomial broadcast's links that
                                    * cross hosts: bit b for the peer at
                                    * virtual rank vr ^ 2^b (run.c, as
                                    * ring_far; tree.c T1) */
} coll_op_t;

#define COLL_RING_FAR_TX 1
#define COLL_RING_FAR_RX 2

/* Segments of *SEG elements in MAX elements: at most 0xffff (step tags
 * hold 16 bits of segment), *SEG grown if need be, alike on both ends of
 * a link since both know MAX (ring.c R2, hier.c H12). */
static inline size_t
coll_segs(size_t max, size_t *seg)
{
    size_t segs = (max + *seg - 1) / *seg;

    if (segs > 0xffff) {
        *seg = (max + 0xfffe) / 0xffff;
        segs = (max + *seg - 1) / *seg;
    }
    return segs > 0 ? segs : 1;
}

/* A collective starts on G (op->g, op->desc set): its sequence number and
 * deadline, the description the receive path compares against, checked
 * against what arrived already (C5), then ANNOUNCE(g, seq, desc) when
 * not NULL (shm.c S4) before a mismatch fails the group. */
td_status_t coll_op_begin(coll_op_t *op,
                          void (*announce)(td_group_t *g, uint32_t seq,
                                           const coll_desc_t *d));
/* coll_op_begin with op->deadline left 0, for the wait to set at its
 * first look at the clock (allreduce.c T5), without coll_lock and without
 * C5's look at what arrived (C18): the caller makes it with
 * coll_op_check_queued (a mismatch fails the group and is returned). */
td_status_t coll_op_begin_lean(coll_op_t *op,
                               void (*announce)(td_group_t *g, uint32_t seq,
                                                const coll_desc_t *d));
td_status_t coll_op_check_queued(coll_op_t *op);
void        coll_op_end(coll_op_t *op);
/* coll_op_begin, then coll_irecv(op, R, SRC, TAG, BUF, NBYTES), in one
 * hold of coll_lock (C16). On failure R is not posted. */
td_status_t coll_op_begin_irecv(coll_op_t *op,
                                void (*announce)(td_group_t *g, uint32_t seq,
                                                 const coll_desc_t *d),
                                coll_req_t *r, int src, uint32_t tag,
                                void *buf, size_t nbytes);

/* Post a receive of step TAG from group rank SRC into BUF. */
td_status_t coll_irecv(coll_op_t *op, coll_req_t *r, int src, uint32_t tag,
                       void *buf, size_t nbytes);
/* coll_irecv, where a body that comes with its message (eager) is
 * reduced on arrival instead of landing in BUF, with the call's dtype
 * and operation: DST op= body, or with WITH, DST = body op WITH (DST
 * overlapping neither); r->red_done then says so, and BUF is untouched
 * unless it is DST. A body that lands otherwise (queued before the
 * receive was posted, rendezvous, read in place) is in BUF as with
 * coll_irecv (ring.c R4). */
td_status_t coll_irecv_reduce(coll_op_t *op, coll_req_t *r, int src,
                              uint32_t tag, void *buf, size_t nbytes,
                              void *dst, const void *with);
/* Send step TAG to group rank DST (offered in place when large). */
td_status_t coll_isend(coll_op_t *op, coll_req_t *r, int dst, uint32_t tag,
                       const void *buf, size_t nbytes);
/* An exchange: send to DST (-1: none), receive from SRC (-1 and no RBUF:
 * none), waited for. */
td_status_t coll_sendrecv(coll_op_t *op, int dst, const void *sbuf,
                          size_t slen, int src, void *rbuf, size_t rlen,
                          uint32_t tag);
/* Wait for REQS[0..N) of the operation until its deadline (wait.h C4). */
td_status_t coll_step_wait(coll_op_t *op, coll_req_t **reqs, int n);
/* Scratch of at least LEN bytes owned by G's running operation. */
void       *coll_scratch(td_group_t *g, size_t len);

#endif /* TD_RUNTIME_COLL_STEP_H */
