/* runtime/coll/cma.h: bodies read in place (internal): a large body is
 * offered (pid, address) instead of sent, and its receiver copies it with
 * process_vm_readv. A channel above the transport's sending side (tx.h).
 *
 * Invariants (comments cite them as C9..C12, C15, C17):
 *  C9 A body offered in place (COLL_F_CMA) stays untouched until its
 *     reader's MSG_CMA (or, p2p, an error ack) arrives (the send completes
 *     only then); the reader copies it on the waiting thread, never in a
 *     callback (C17's small p2p bodies excepted), and answers exactly once: 0 (read), 1 (could not: the
 *     sender resends the body through UCX and stops offering to that
 *     rank) or 2 (p2p only: not now, send the body). An offer dropped
 *     unread (its group failed or is gone at the reader) is answered as
 *     any message dropped there is (match.h C14): a p2p one by an error
 *     ack, a collective's by an abort of its group, which completes the
 *     offer with the group's failure (C6).
 * C10 A p2p offer is read in place only by a thread that is waiting for
 *     that receive (td_recv), or by td_irecv itself when the offer was
 *     there first; an offer matching an irecv posted earlier is answered
 *     2 from the callback (unless C12 or C17). So no offer waits on a
 *     thread that may be blocked elsewhere (two ranks that irecv then
 *     send cannot deadlock).
 *     The resent body (COLL_F_RESEND) matches only the receive that
 *     answered, by sender and sequence number, so C7's order holds.
 *     Limit: a p2p send that times out with its offer unanswered returns
 *     its error while a receive posted later may still read the buffer
 *     (collectives tell every member, C6; p2p timeouts are local): after
 *     a td_send/td_isend timeout, keep the tensor unchanged until the
 *     group is destroyed, as the README says.
 *
 * C12 C10's exception: an offer matching an irecv that a thread is
 *     waiting for (cma_waiters > 0: td_work_wait on it, counted by
 *     coll_wait_ex) is left for that thread to read in place, as a
 *     td_recv's is; the sender, computing by then, need not progress to
 *     resend it (a pipeline stage's activations of 64 KiB and more waited
 *     for the sender's next op). The callback stores cma_ready_a, then
 *     looks at cma_waiters; a waiter leaving without the body (its
 *     timeout) lowers cma_waiters, then takes cma_ready_a back: both
 *     sequentially consistent, and whoever takes cma_ready_a (an atomic
 *     exchange) alone reads or declines it (coll_cma_decline: answer 2,
 *     as C10). A thread waiting for the irecv never blocks elsewhere
 *     while it waits, so no offer waits on a thread blocked elsewhere.
 *
 * C17 C10's second exception: an offer matching an irecv that nobody
 *     waits for is read at once by the thread that received it (the
 *     token holder, in the transport's callback) when that costs no
 *     wait: a body of at most COLL_CMA_HOLDER_MAX bytes from a sender
 *     already known to be of this host whose pid was already checked (no
 *     store look-up, transport.c L11). A copy of at most that size is
 *     what an eager receive costs its callback anyway, and the holder
 *     never blocks elsewhere, so C10's deadlock cannot arise. Declined
 *     instead, the body would move only when the sender next drives its
 *     transport: a pipeline stage computing when its neighbour's
 *     activation came waited for the sender's next op (issue 33). Other
 *     offers go as C10 says. [test_coll "held offer"]
 *
 * C11 Offers go only to ranks of this host, and a receiver reads in place
 *     only from a rank of this host (td__runtime_same_host: one kernel and
 *     PID namespace, runtime/hostmap.h), learnt once per rank: a pid from
 *     another host names some other process here, or none.
 *
 * C15 A failed group does not give an offered buffer back while its
 *     reader may still copy it: a failure (C6) leaves the group's posted
 *     offers posted with the failure as their status, and each completes
 *     only when its reader answers (MSG_CMA: read, or 3, dropped unread;
 *     taken whatever the group's state, rx.c, even after the reader's
 *     own abort that failed it) or is known dead
 *     (coll_match_peer_dead), the send then ending with
 *     the group's failure; a waiter whose call failed withdraws its other
 *     requests at once and its offers only at the call's deadline (a
 *     reader that neither answers nor dies: logged as a warning). So a
 *     reader copying when a third member's death fails the group never
 *     sees the sender's next use of the buffer. The reader answers every
 *     collective offer it drops (its group failed or is gone, a full
 *     queue) with 3 as well as C14's abort; a p2p offer dropped is acked
 *     (C14), which ends it as before. [test_inplace 3g, through
 *     TODIST_TEST_CMA_STALL]
 *
 * Thread safety: all functions are thread-safe; none may be called with
 * coll_lock held. */
#ifndef TD_RUNTIME_COLL_CMA_H
#define TD_RUNTIME_COLL_CMA_H

#include "runtime/coll/match.h"

#define COLL_CMA_MIN  (64u * 1024u)   /* bodies read in place from here on */
#define COLL_CMA_HOLDER_MAX (1024u * 1024u)   /* C17: read by the holder */

/* td_init: TODIST_COLL_CMA, a new token, per-rank state for SIZE ranks. */
td_status_t coll_cma_setup(int size);
/* Send R (its header in r->hdr, r->hdr_len bytes) to world rank WDST:
 * offered in place when the single-copy path may serve it (C9), else
 * with its body. */
td_status_t coll_post_send_offer(coll_req_t *r, int wdst);
/* Copy R's offered body from its sender (C9), on the waiting thread, and
 * answer; R completes (or is posted again for the body). */
void        coll_cma_read(coll_req_t *r);
/* An offer matched irecv R (its fields in R, in a transport callback):
 * left to R's waiter (C12), else declined (C10). */
void        coll_cma_offered(coll_req_t *r);
/* How many offers the token holder read itself (C17; tests). */
unsigned long coll_cma_holder_reads(void);
/* Have the body of R's offer sent instead (answer 2, R posted again for
 * it only: C10); R's cma_ready_a taken by the caller. */
void        coll_cma_decline(coll_req_t *r);
/* Tell world rank DST what became of its offer R (0 read, 1 resend and
 * stop offering, 2 resend, 3 dropped unread: C15). */
void        coll_cma_answer(int dst, const coll_req_t *r, uint32_t status);
/* The same for the offer of call SEQ, TAG in group GID (DIGEST). */
void        coll_cma_answer_ids(int dst, uint32_t gid, uint32_t digest,
                                uint32_t seq, uint32_t tag, uint32_t status);
/* Our offer R to SRC was answered ANSWER (MSG_CMA, R taken off the posted
 * list): completed, or its body resent. */
void        coll_cma_answered(coll_req_t *r, int src, uint32_t answer);

#endif /* TD_RUNTIME_COLL_CMA_H */
