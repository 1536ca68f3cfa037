/* runtime/coll/tx.h: the transport channel's sending side (internal):
 * messages out through td__transport_send (bodies, acks, answers to
 * offers, aborts) and the failure of a group that tells its members.
 * Above the matching and the mailboxes (an ack offers our inbox).
 *
 * C1 Receive callbacks and send completions run on the transport's token
 *    holder; they take coll_lock only briefly and never call
 *    td__transport_send while holding it (a direct send may complete, and
 *    call back, on the sending thread): nothing here is called with
 *    coll_lock held (match.h L4).
 *
 * Thread safety: all functions are thread-safe; none may be called with
 * coll_lock held. */
#ifndef TD_RUNTIME_COLL_TX_H
#define TD_RUNTIME_COLL_TX_H

#include "runtime/coll/match.h"

/* Send HDR (its header bytes) and R's body to world rank DST as R
 * (R->pending is set: 1, or 2 for a p2p send that also waits for its
 * ack, posted before the message leaves). */
td_status_t coll_post_send(coll_req_t *r, int dst, const uint8_t *hdr,
                           size_t hdr_len);
/* Send R's header (r->hdr) and body to DST again, completing R by the
 * transport's completion (R's pending and posting are the caller's). */
td_status_t coll_tx_send_body(coll_req_t *r, int dst);
/* A collective's offer in place (cma.h C9): R posted for its reader's
 * answer, and H (R's header and the offer) sent to DST. R completes by
 * both, the transport's completion and the answer (pending 2, C3); a
 * send that fails, then or later, ends R and its call (wait.h C19). On
 * an error returned here R is done. */
td_status_t coll_tx_offer(coll_req_t *r, int dst, const uint8_t *h,
                          size_t len);
/* A header with no body, nothing to complete. */
td_status_t coll_tx_send_hdr(int dst, const uint8_t *h, size_t len);
/* The ack of p2p message SEQ of group GID (DIGEST) to DST: STATUS and our
 * shape; the first ack to a sender offers our inbox (mbox.c). */
void        coll_send_ack(int dst, uint32_t gid, uint32_t digest,
                          uint32_t seq, td_status_t status, uint8_t dtype,
                          int ndim, const int64_t *shape);
/* Mark G broken with CODE and MSG (the first failure wins, C6) and fail
 * its posted receives; TELL: send MSG_ABORT(SEQ) to every other member. */
void        coll_group_fail(td_group_t *g, td_status_t code, int tell,
                            uint32_t seq, const char *msg);
/* The same for the group with id GID if it is still registered (transport
 * callbacks: the group may be destroyed meanwhile). */
void        coll_group_fail_id(uint32_t gid, td_status_t code, int tell,
                               uint32_t seq, const char *msg);
/* Fail G here (if it is not broken yet) and send MSG_ABORT to every other
 * member the transport still reaches, even when G was broken already:
 * runtime/elastic's recovery, so that no member stays blocked in an
 * operation of G (one whose peers were not the dead rank's) until its
 * timeout, while the others agree on the next epoch. */
void        coll_group_abort_all(td_group_t *g, td_status_t code,
                                 const char *msg);

#endif /* TD_RUNTIME_COLL_TX_H */
