/* runtime/coll/mbox.h: point-to-point through shared memory between ranks
 * of one host (internal): a channel above the matching (match.h), below
 * the transport channel (tx.c offers our inbox in its acks) and the
 * receive path (recv.c, rx.c). Invariants M1-M10 are in mbox.c.
 *
 * Thread safety: all functions are thread-safe; those named *_locked, and
 * coll_mbox_take, need coll_lock held (match.h L2). */
#ifndef TD_RUNTIME_COLL_MBOX_H
#define TD_RUNTIME_COLL_MBOX_H

#include "runtime/coll/match.h"

#define MBOX_BODY      4096           /* bodies sent through a mailbox */
#define MBOX_SPIN_S    10e-6          /* poll mailboxes alone this long */
#define MBOX_RECHECK_S 50e-6          /* a sleeper's first nap (M5) */

/* A message read from a mailbox. */
typedef struct {
    int            src, slot;      /* world rank, slot of its mailbox */
    uint32_t       gid, digest, seq, tag;
    uint8_t        dtype, ndim;
    size_t         nbytes;
    int64_t        shape[TD_MAX_DIMS];
    const uint8_t *body;           /* in the slot */
} coll_mbox_msg_t;

/* td_init: RANK of SIZE on the host BOOT_ID ("" unknown: no mailboxes). */
td_status_t coll_mbox_setup(int rank, int size, const char *boot_id);
void        coll_mbox_shutdown(void);
/* Our inbox exists (a receive is posted: user thread). */
void        coll_mbox_inbox_ensure(void);
/* Our inbox's offer to DST into T for an ack; its length or 0. */
size_t      coll_mbox_offer(int dst, uint8_t *t);
/* SRC offered its inbox (T: MBOX_OFFER_BYTES from its ack). */
void        coll_mbox_offered(int src, const uint8_t *t);
/* Post p2p send R to world rank DST through its mailbox: 1, or 0 (use
 * the transport). */
int         coll_mbox_send(coll_req_t *r, int dst);
/* td_send's fast path (M9): 1 done (R's status set), 2 sent and posted
 * (wait for R), 0 not sent (use coll_mbox_send or the transport). */
int         coll_mbox_send_fast(coll_req_t *r, int dst);
/* A transport p2p send to DST begins / ends (M2's order). */
void        coll_mbox_tp_begin(int dst);
void        coll_mbox_tp_end(int dst);
/* Ack slot SLOT of SRC's mailbox; POKE: wake a sleeping sender (never
 * under coll_lock, L4). */
void        coll_mbox_ack(int src, int slot, td_status_t status,
                          uint8_t dtype, int ndim, const int64_t *shape,
                          int poke);
/* Mailbox message M matched receive R: copied in when it fits and acked
 * in its slot (POKE as above). R's status, MSG naming both shapes when
 * it does not fit. */
td_status_t coll_mbox_receive(coll_req_t *r, const coll_mbox_msg_t *m,
                              char *msg, size_t len, int poke);
/* Hand SRC's waiting mailbox messages to the matching (before a
 * transport p2p message of SRC: M2). */
void        coll_mbox_drain(int src);
/* Take SRC's oldest mailbox message if it is for (GID, DIGEST, TAG): 1,
 * else 0 (coll_lock held). */
int         coll_mbox_take(int src, uint32_t gid, uint32_t digest,
                           uint32_t tag, coll_mbox_msg_t *m);
/* Has SRC written into our inbox (so it is on this host, M10)? */
int         coll_mbox_from(int src);
/* Is SRC's next message in our inbox? (a hint: taken under coll_lock) */
int         coll_mbox_ready(int src);
/* Drain every mailbox and take every ack that came back (any thread). */
void        coll_mbox_poll(void);
enum { MBOX_POLL_IN = 1, MBOX_POLL_ACKS = 2 };
void        coll_mbox_poll_some(int what);
int         coll_mbox_active(void);
int         coll_mbox_local(int rank);
/* A waiter goes to sleep / woke (M5): the cookie says what to undo. */
int         coll_mbox_sleep_begin(void);
void        coll_mbox_sleep_end(int cookie);
void        coll_mbox_peer_dead(int rank);
/* A mailbox spin looks at the clock (every 64th turn): 1 once MBOX_SPIN_S
 * passed since its first look, the runtime stopped or G (or NULL) broke. */
int         coll_spin_over(double *t_first, const td_group_t *g);
/* One more send (SEND) or receive done on the fast path (a debug count,
 * logged at shutdown). */
void        coll_mbox_fast_count(int send);

#endif /* TD_RUNTIME_COLL_MBOX_H */
