/* runtime/coll/recv.h: posting a receive and delivering what matched it
 * (internal): against the unexpected list, straight from a sender's
 * mailbox (mbox.c M3, M10), or posted for rx.c to match. Above every
 * channel (matching, mailboxes, the transport's sending side, in-place
 * reads); below rx.c, which completes receives through the callbacks
 * here.
 *
 * Thread safety: all functions are thread-safe; none but
 * coll_post_recv_locked may be called with coll_lock held. */
#ifndef TD_RUNTIME_COLL_RECV_H
#define TD_RUNTIME_COLL_RECV_H

#include "runtime/coll/match.h"
#include "runtime/runtime.h"

/* Post a receive (its fields filled by the caller; done/status set here):
 * matched at once against unexpected messages, else when one arrives. */
td_status_t coll_post_recv(coll_req_t *r);
/* coll_post_recv in two parts, for a caller that posts R within a hold of
 * coll_lock of its own (step.c C16): R's fields reset (no lock), then
 * the post, entered with coll_lock held, which it releases. */
void        coll_post_recv_prep(coll_req_t *r);
td_status_t coll_post_recv_locked(coll_req_t *r);
/* td_recv's fast path (mbox.c M10): R, a p2p receive from one rank of
 * this host, taken straight from its sender's mailbox while this thread
 * polls it: 1 done (R's status and err set), 0 not (use coll_post_recv). */
int         coll_p2p_recv_fast(coll_req_t *r);
/* The transport's completions (token holder, C1): the body of a message
 * that matched posted receive ARG landed / of unexpected entry ARG
 * landed. */
void        coll_recv_matched_done(void *arg, td_status_t status, int src,
                                   td_iov_t *bodies, size_t n_bodies);
void        coll_recv_unexp_done(void *arg, td_status_t status, int src,
                                 td_iov_t *bodies, size_t n_bodies);
/* match.h C14: tell the sender of dropped entry E (a p2p or collective
 * message: coll_ux_needs_answer) that it was dropped unreceived: its
 * group failed here with FAIL, MSG (relayed to a collective's sender), or
 * (TD_OK, NULL) was destroyed here unbroken. */
void        coll_recv_refuse(const coll_unexp_t *e, td_status_t fail,
                             const char *msg);
/* The same for message (GID, DIGEST, SEQ) of TYPE from SRC dropped on
 * arrival: a p2p one (its DTYPE, NDIM, SHAPE echoed in the ack) or a
 * collective's; FULL: the queue was full (C7). Other types are not
 * answered. */
void        coll_recv_refuse_msg(int src, uint8_t type, uint32_t gid,
                                 uint32_t digest, uint32_t seq, uint8_t dtype,
                                 int ndim, const int64_t *shape, int full,
                                 td_status_t fail, const char *msg);

#endif /* TD_RUNTIME_COLL_RECV_H */
