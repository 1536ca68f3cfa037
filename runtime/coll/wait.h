/* runtime/coll/wait.h: waiting for requests (internal): drives the
 * transport, polls the mailboxes, reads offered bodies in place on the
 * waiting thread (cma.h C9), sleeps when another thread drives, and fails
 * what is still pending at the deadline. Above every channel.
 *
 * C4 coll_wait returns only when every request it was given is done: on
 *    failure it withdraws what is still posted and waits for bodies in
 *    flight, so no callback writes a stack request or buffer later.
 * C19 A collective's send that failed ends its call: the call cannot
 *    succeed (a member waits for what we could not send), so it does not
 *    wait out its deadline. The failure is recorded on the group
 *    (coll_group_tx_failed), not only on the request: the wait it must
 *    end may be for others (the ring waits for its receives, then for
 *    its sends). It ends the call once td__transport_fail_grace_s has
 *    passed since the failure was seen with the group still unbroken: a
 *    peer's death, which the transport may report in that time (a dead
 *    member breaks the group itself), is the error every member sees
 *    (C6). The call then breaks its group with the request's error and
 *    tells every member, as a timeout does. An offer in place counts:
 *    its header has a completion of its own (tx.h coll_tx_offer), and a
 *    header that fails after it left ends the offer, whose reader never
 *    saw it, and the call.
 *
 * Thread safety: any thread but the transport's progress thread, with no
 * lock held. */
#ifndef TD_RUNTIME_COLL_WAIT_H
#define TD_RUNTIME_COLL_WAIT_H

#include "runtime/coll/match.h"

/* Wait for REQS[0..N) (NULL entries skipped) until DEADLINE (td_now_s
 * clock; <= 0: none). On a failure of G (dead member, mismatch, timeout)
 * the receives are withdrawn, the sends waited for, and the first error
 * returned with its message recorded. */
td_status_t coll_wait(td_group_t *g, coll_req_t **reqs, int n,
                      double deadline);
/* coll_wait for one point-to-point operation (IS_COLL 0: a timeout fails
 * only these requests) or a collective (1: it breaks G); GIVE_UP > 0: the
 * caller stops waiting then (TD_ERR_TIMEOUT) and the operation goes on.
 * DEADLINE < 0: coll_timeout() after the wait begins. */
td_status_t coll_wait_ex(td_group_t *g, coll_req_t **reqs, int n,
                         double deadline, int is_coll, double give_up);
/* A check of G's running call that a layer above keeps (shm.c: a member
 * announced another call in the segment, S4), asked while a collective
 * of G with a segment waits; it fails G itself. */
void        coll_wait_set_group_check(void (*check)(td_group_t *g));
/* Waits for point-to-point receives in this process that went to sleep
 * because their spin (SPIN_S, or a request's coll_work_set_spin, P8) was
 * over, not because another thread held the transport: tests/pipe reads
 * it, a count of decisions rather than of the scheduler's switches. */
unsigned long coll_wait_spin_sleeps(void);

#endif /* TD_RUNTIME_COLL_WAIT_H */
