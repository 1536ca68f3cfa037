/* runtime/coll/match.h: matching, the bottom layer of the collectives'
 * messaging (internal): requests (one expected message or one send), the
 * posted list, the unexpected list, the table of live groups with each
 * group's failure state, request completion and the sleep/wake of
 * waiters. It sends nothing and knows no channel: the channels above
 * (mbox.c, tx.c, cma.c, recv.c, rx.c) put messages in and take requests
 * out; a mailbox's two needs from here (the end of a transport send, M2;
 * giving back the slot of a dropped message, M6) are hooks it registers,
 * and so is rx.c's answer to a dropped message (C14).
 *
 * Invariants of the matching (comments cite them as C2, C3, C6, C7, C11,
 * C13, C14; the rest of the C-list is where it is kept: C1, C5 rx.c, C4
 * wait.c, C8 step.c, C9, C10 cma.c):
 *  C2 A posted request is in exactly one place: the posted list, or
 *     matched (its body in flight, or an unexpected entry claiming it), or
 *     done. Whoever takes it off the posted list completes it.
 *  C3 A request completes exactly once: `pending` counts the completions
 *     due (a p2p send: the transport's and the receiver's ack) and `done`
 *     is stored last; the waiter may free it only after `done`.
 *  C6 A group is broken by its first failure (mismatch, dead member,
 *     timeout, abort) and stays so: later operations fail at once with
 *     that error; messages for it are dropped. The call it broke reports
 *     that error too, not a later failure of one of its requests (a send
 *     to a member that died after the one that broke it).
 *  C7 Unexpected messages are bounded (COLL_UNEXPECTED_MAX); p2p messages
 *     of one (sender, tag) match in arrival order, which is the order UCX
 *     delivers active messages of one endpoint.
 * C13 A message from another host whose body came with it (the transport's
 *     rx.eager, transport.c S1) is taken by the receive handler itself:
 *     matched, its body is copied into the receive's buffer and the
 *     receive completed there; unexpected and at most COLL_UX_SMALL bytes,
 *     its body is copied into its entry (small), which then has arrived.
 *     No buffer is allocated and no second pass through coll_lock made;
 *     the checks before (wire, group, description, size) are the same.
 *     One freed entry is kept for the next (coll_ux_free, exchanged
 *     atomically: the taker owns it), so a steady stream of early
 *     messages allocates nothing; C7's bound counts entries as before.
 * C11 Group ids grow in td_group_new's order; a message for an id at or
 *     below the highest registered here whose group is gone is dropped,
 *     and destroying a group frees what was queued for it, so messages
 *     that arrive late for destroyed groups hold no memory.
 * C14 A p2p or collective message dropped unreceived through the
 *     transport is answered, so that no sender waits out its timeout on
 *     a rank that is alive but will never take the message: dropped for
 *     a group that failed (C6) or is gone (C11) here, on arrival (rx.c),
 *     queued when that happened (ux_drop_group_locked: answered after
 *     the unlock, L4, through the hook rx.c registers) or landing after
 *     it (recv.c); for a full queue (C7); a resent body whose receive is
 *     gone (cma.h C10). A p2p message (a body or an offer in place: its
 *     sender waits for the ack, C3, C9) is acked TD_ERR_CANCELED
 *     (TD_ERR_NO_MEMORY: the queue was full), as a dropped mailbox
 *     message is (mbox.c M6): that td_send fails naming this rank. A
 *     collective's message (a step, a segment handshake's, an offer in
 *     place) gets an MSG_ABORT of its group to its sender alone: the
 *     group's own failure here, relayed (so every member reports the
 *     group's first failure, C6, not the drop), or, for a group destroyed
 *     here unbroken, TD_ERR_CANCELED naming this rank; the group fails at
 *     the sender, which completes its sends, offers included, and ends
 *     its call. A message for a group destroyed here broken gets none:
 *     that failure is told by whoever found it, or is a death every
 *     member sees (the last COLL_GONE_BROKEN such ids are kept). One
 *     abort per sender for what one failure or destruction drops. A p2p
 *     receive that timed out drops nothing: what arrives later waits for
 *     the next receive that matches it (the sender's wait has its own
 *     timeout), as it would had it come first.
 *
 * The lock (comments cite them as L1..L7):
 *  L1 coll_lock is one mutex, owned by match.c. It guards the posted list,
 *     the unexpected list and its count, the group table (slots, highest
 *     id), each group's in_op/cur_seq/cur_desc/begun/broken/broken_msg/
 *     tx_failed/_msg/_at/_to (written; tx_failed stored last, release,
 *     and read without the lock, acquire, before the other three)/
 *     registered/ask/ask_seq (late.c), a request's status and err once it
 *     is posted, and a mailbox's receive position (mbox.c in_t.rd).
 *  L2 A function named *_locked requires coll_lock held by its caller and
 *     neither takes nor drops it. Every other function of this header
 *     takes it itself when it needs it, so must be called without it.
 *  L3 Outside match.c, coll_lock()/coll_unlock() are called only where
 *     one decision spans several lists: rx.c (one transport message),
 *     recv.c (posting a receive), mbox.c (M4: from reading a slot until
 *     its message or ack is in the lists), step.c (an operation's start:
 *     its call against what arrived).
 *  L4 Nothing that may call back into the collectives runs under it:
 *     td__transport_send (a direct send may complete, and call back, on the
 *     sending thread: C1), a request's completion (its on_done), a poke,
 *     a group failure, a wake. They run after the unlock with what was
 *     collected under it. The mailbox hooks (coll_match_hooks_t) may run
 *     under it and take no lock.
 *  L5 Order: coll_lock, then a mailbox ring's spinlock (mbox.c out_t.ring,
 *     M4); never a ring's spinlock then coll_lock. A blocking mailbox send
 *     (M9) takes only the spinlock.
 *  L6 mbox.c's attach mutex (out_t.lock: syscalls) and the waiters' lock
 *     (wait_lock, here: the sleepers' condition variable) are never taken
 *     with coll_lock held, and neither is held while taking another.
 *  L8 A group's current call (in_op, cur_seq, cur_desc, begun) is also
 *     written without the lock by a lean begin (step.c C18): its writer
 *     (the thread running the group's call, L7) brackets cur_seq,
 *     cur_desc and begun with cur_gen (a seqlock: odd while written,
 *     coll_cur_publish), then stores in_op; readers on other threads take
 *     the three with in_op through coll_cur_get, which retries a read
 *     that met a write. begun is read alone, atomically. The count of
 *     unexpected entries (n_ux) is stored seq_cst under the lock and read
 *     without it (coll_ux_any) by that call's later look at the queue,
 *     after a seq_cst fence (coll_op_check_queued): rx.c compares a
 *     collective message it queued with the current call once more after
 *     queueing it (C5), so of such a message and that look, one sees the
 *     other.
 *  L7 A group's seq, send_seq and scratch are not under coll_lock: they
 *     belong to the one thread running its current operation (work.c
 *     serializes them).
 *
 * Thread safety: all functions are thread-safe under L2's rule. */
#ifndef TD_RUNTIME_COLL_MATCH_H
#define TD_RUNTIME_COLL_MATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "todist/coll.h"
#include "runtime/coll/desc.h"
#include "runtime/coll/wire.h"

#define COLL_UNEXPECTED_MAX 65536     /* queued unmatched messages (C7) */
#define COLL_UX_SMALL       256       /* C13: bodies kept in the entry */

/* A group's shared-memory segment (shm.c) and whether it has one. */
typedef struct coll_shm coll_shm_t;
enum { SHM_UNTRIED = 0, SHM_ON = 1, SHM_OFF = 2 };

/* A group (todist/coll.h): its shape (read by every layer), its failure
 * state (here, L1), and what the layers above keep per group (shm.c's
 * segment, work.c's queue), in one allocation. */
struct td_group {
    uint32_t        id;            /* 0: the world */
    uint32_t        digest;        /* FNV-1a of the member list */
    int             n;             /* members */
    int             me;            /* group rank, -1: not a member */
    int            *ranks;         /* group rank -> world rank */
    int            *of_world;      /* world rank -> group rank or -1 */
    /* owned by the thread running the current operation (L7) */
    uint32_t        seq;           /* next collective's sequence number */
    uint32_t       *send_seq;      /* per peer: td_send counter */
    void           *scratch;
    size_t          scratch_len;
    int             watched;       /* endpoints to every member requested */
    int             pair_tag;      /* allreduce.c T1: 1 its two members are
                                    * on two hosts, -1 not, 0 not asked */
    coll_shm_t     *shm;           /* shm.c: the segment, when SHM_ON */
    int             shm_state;
    struct coll_hostmap *hosts;    /* hier.c: each member's host, made at
                                    * the group's first call */
    coll_shm_t     *hshm;          /* hier.c H8: this host's segment */
    int             hshm_state;    /* SHM_ON: every host has one */
    uint64_t        hier_seg_bytes;    /* hier.c: written into hshm */
    uint64_t        hier_tp_bytes;     /* hier.c: sent to a member of
                                        * this host by the transport */
    uint64_t        ring_paced;    /* ring.c R1: ring sends held
                                    * back until an arrival */
    size_t          ring_seg_far;  /* ring.c R2: the last such
                                    * ring's segment, bytes */
    uint64_t        ring_rx_reduced;   /* ring.c R4: segments reduced
                                        * by the receive handler */
    uint64_t        tree_pieces;   /* tree.c T1: broadcast pieces sent
                                    * to another host */
    size_t          tree_piece_bytes;  /* T1: the last one's size */
    uint64_t        hier_xp_sent;  /* hier.c H12: all_reduce exchange
                                    * pieces sent to other leaders */
    size_t          hier_xp_bytes; /* hier.c H12: their size, bytes */
    uint64_t        hier_xq_sent;  /* hier.c H14: all_gather's and
                                    * reduce_scatter's leader pieces */
    size_t          hier_xq_bytes; /* hier.c H14: their size, bytes */
    /* guarded by coll_lock (L1), and cur_gen's seqlock (L8) */
    int             in_op;         /* a collective with seq cur_seq runs */
    unsigned        cur_gen;       /* L8: odd while the next is written */
    uint32_t        cur_seq;
    coll_desc_t     cur_desc;
    td_status_t     broken;        /* TD_OK, or the first failure */
    char            broken_msg[COLL_ERR_MAX];
    td_status_t     tx_failed;     /* wait.h C19: a call's first send
                                    * that failed, TD_OK none (stored
                                    * after the three below) */
    char            tx_failed_msg[COLL_ERR_MAX];
    double          tx_failed_at;  /* td_now_s when it was recorded */
    int             tx_failed_to;  /* the world rank it was sent to */
    int             registered;    /* in the table of live groups */
    uint32_t        begun;         /* the last call begun here: its seq
                                    * + 1 (0: none yet; late.c) */
    uint8_t        *ask;           /* late.c: per member, the answer to
                                    * our ask about call ask_seq (K2) */
    uint32_t        ask_seq;
    atomic_int      ask_left;      /* answers still due (read without
                                    * the lock by the asker's wait) */
    /* the operation queue (work.c) */
    pthread_mutex_t qlock;
    pthread_cond_t  qcond;
    struct td_work *q_head, *q_tail;   /* under qlock; q_head also read
                                        * without it (seq_cst, work.c) */
    atomic_int      running;       /* an operation of this group runs
                                    * (claimed by compare-and-swap) */
    int             thread_started;
    int             thread_stop;
    pthread_t       thread;
    /* group.c: a td_group_new group's creation list and id, for its
     * re-forms in elastic epochs (G1-G4); made_ranks NULL for the world's
     * and the epochs' groups. Written by the thread that re-forms (the
     * application's, in td_elastic_recover/admit/join) under made_lock. */
    int            *made_ranks;
    int             made_n;
    uint32_t        made_id;
    int             made_listed;   /* in group.c's list of made groups */
    struct td_group *made_prev, *made_next;
};

/* One expected message (a posted receive) or one send. Lives on the
 * stack of the thread that waits for it, or in a td_work_t. */
typedef enum { REQ_RECV_P2P, REQ_RECV_COLL, REQ_SEND_P2P, REQ_SEND_COLL }
    req_type_t;

typedef struct coll_req {
    struct coll_req   *next;       /* in the posted list */
    req_type_t         type;
    td_group_t        *g;
    uint32_t           group_id;
    int                peer;       /* world rank; -1: any (p2p recv) */
    uint32_t           tag;
    uint32_t           seq;
    void              *buf;
    size_t             nbytes;
    /* p2p: what the tensor is (checked against the sender's) */
    uint8_t            dtype;
    uint8_t            ndim;
    int64_t            shape[TD_MAX_DIMS];
    const coll_desc_t *desc;       /* coll recv: our call */
    atomic_int         pending;    /* completions still due (send: the
                                    * transport's and the ack) */
    atomic_int         done;
    td_status_t        status;
    int                from;       /* world rank the message came from */
    void             (*on_done)(struct coll_req *r);  /* after `done`; may
                                    * be NULL (a work handle's cleanup) */
    /* single-copy path (cma.c): a receive whose sender offered its
     * buffer in place (cma_ready_a: the waiter reads it), a send waiting for
     * the reader's MSG_CMA (cma_send; hdr kept to resend with the body). */
    atomic_int         cma_ready_a;
    atomic_int         cma_waiters; /* p2p irecv: threads in a wait for it
                                    * (an offer is left for them, C12) */
    int                cma_send;
    int32_t            cma_pid;
    uint64_t           cma_addr, cma_token_addr, cma_token;
    void              *cma_dst;    /* coll recv: an offered body is read
                                    * here instead of BUF (a hot buffer
                                    * the reduction reads at once) ... */
    int                cma_landed; /* ... and this says it was */
    void              *red_dst;    /* coll recv: a body that comes with
                                    * its message is reduced into here
                                    * (red_dst op= body; with red_with:
                                    * red_dst = body op red_with) instead
                                    * of copied to BUF (ring.c R4) ... */
    const void        *red_with;
    int                red_done;   /* ... and this says it was (written
                                    * before the request completes) */
    int                exact_seq;  /* p2p recv re-posted for the resent
                                    * body of offer SEQ from PEER only */
    atomic_int         tp_counted; /* p2p send through the transport,
                                    * counted in mbox.c's tp_busy (M2) */
    size_t             hdr_len;
    double             spin_s;     /* p2p: a waiter drives this long before
                                    * it sleeps (0: wait.c's own; a pipeline
                                    * stage's receive, coll_work_set_spin) */
    /* Written before they are read (the header when sent, the error with
     * its status), so a request on the stack zeroes only what is above
     * (COLL_REQ_ZERO): 8 B round trips were paying for 1 KB of memset. */
    uint8_t            hdr[COLL_WIRE_BYTES + 8 * TD_MAX_DIMS + 48];
    char               err[COLL_ERR_MAX];
} coll_req_t;

#define COLL_REQ_ZERO offsetof(coll_req_t, hdr)

/* A message no receive was posted for yet (C7), or an abort for a group
 * not made here yet. */
typedef struct coll_unexp {
    struct coll_unexp *next;
    uint8_t       type, dtype, ndim;
    uint32_t      group_id, digest, seq, tag;
    int           src;             /* world rank */
    size_t        nbytes;
    coll_desc_t   desc;
    int64_t       shape[TD_MAX_DIMS];
    int32_t       code;            /* ABORT */
    char         *text;            /* ABORT */
    void         *body;            /* arrived bytes (ours to free) */
    int           arrived;
    td_status_t   status;
    coll_req_t   *claim;           /* a receive matched before the body */
    int           orphan;          /* its group failed: free on arrival */
    int           cma;             /* an offer in place (C9), no body */
    int           mbox_slot;       /* 1 + its slot: a mailbox message, its
                                    * body in the slot (mbox.c M6) */
    int32_t       cma_pid;
    uint64_t      cma_addr, cma_token_addr, cma_token;
    /* last: not zeroed by coll_ux_new_locked */
    uint8_t       small[COLL_UX_SMALL];   /* C13: a small body from another
                                           * host, copied here (body) */
} coll_unexp_t;

/* What the mailboxes need from the matching (registered by mbox.c). */
typedef struct {
    void (*tp_end)(int dst);       /* a p2p send counted in tp_busy ended
                                    * (M2) */
    void (*slot_drop)(int src, int slot);  /* give back the slot of a
                                    * dropped mailbox message (M6): ack it
                                    * TD_ERR_CANCELED, no poke */
} coll_match_hooks_t;

void        coll_match_set_hooks(const coll_match_hooks_t *h);
/* C14: REFUSE(E, FAIL, MSG) answers dropped entry E's sender: FAIL and
 * MSG are its group's failure here (TD_OK, NULL: destroyed unbroken);
 * called with no lock held (registered by rx.c before any message). */
typedef void (*coll_refuse_fn)(const coll_unexp_t *e, td_status_t fail,
                               const char *msg);
void        coll_match_set_refuse(coll_refuse_fn refuse);
/* Does E's sender wait for an answer (C14)? */
int         coll_ux_needs_answer(const coll_unexp_t *e);

/* ---- the lock (L1-L5) ---- */
void        coll_lock(void);
void        coll_unlock(void);

/* ---- requests ---- */
/* One completion of R is due no more (C3); STATUS < 0 with MSG: the first
 * error is kept. Wakes the waiters. */
void        coll_req_complete(coll_req_t *r, td_status_t status,
                              const char *msg);
/* Into MSG (LEN bytes) why a message WHAT ("send to", "receiving from")
 * rank RANK failed with STATUS: "coll: send to rank 1 (on host h2, ranks
 * there: 1) failed: the rank died", or "the rank dropped this rank: ..."
 * (transport.c L12), or STATUS's text. */
void        coll_peer_fail_text(char *msg, size_t len, const char *what,
                                int rank, td_status_t status);
/* Complete every request of LIST (linked through next). */
void        coll_req_complete_list(coll_req_t *list, td_status_t code,
                                   const char *msg);

/* ---- the posted list ---- */
void        coll_posted_append_locked(coll_req_t *r);
/* 1 when R was posted (and now is not), else 0. */
int         coll_posted_remove_locked(coll_req_t *r);
/* The same, taking coll_lock. */
void        coll_post(coll_req_t *r);
int         coll_unpost(coll_req_t *r);
#define MSG_P2P_RESEND 0x100       /* posted_take: a P2P with COLL_F_RESEND */
/* Take (C2) the first posted request message TYPE (MSG_*) matches. */
coll_req_t *coll_posted_take_locked(unsigned type, uint32_t gid, int src,
                                    uint32_t seq, uint32_t tag);
/* Is a p2p receive posted earlier that a message from R's source to R's
 * group could match? */
int         coll_posted_p2p_from_locked(const coll_req_t *r);

/* ---- the unexpected list ---- */
/* A new entry (zeroed), or NULL when COLL_UNEXPECTED_MAX are queued or
 * memory is short (the caller drops the message, C7). */
coll_unexp_t *coll_ux_new_locked(void);
void        coll_ux_append_locked(coll_unexp_t *e);
void        coll_ux_remove_locked(coll_unexp_t *e);
size_t      coll_ux_count_locked(void);
/* Are entries queued (L8: without the lock, after a seq_cst store)? */
int         coll_ux_any(void);

/* ---- a group's current call (L8) ---- */
/* Make SEQ, D the current call of G (by the thread running its call; the
 * caller stores in_op after). */
void        coll_cur_publish(td_group_t *g, uint32_t seq,
                             const coll_desc_t *d);
/* G's current call into *SEQ, *D, consistent with each other; returns
 * in_op. Any thread, with or without coll_lock. */
int         coll_cur_get(const td_group_t *g, uint32_t *seq, coll_desc_t *d);
/* Free E (off the list); a mailbox message's slot is given back (M6). */
void        coll_ux_free(coll_unexp_t *e);
/* The first entry receive R matches, or NULL. */
coll_unexp_t *coll_ux_find_locked(const coll_req_t *r);
/* The first collective message of group GID at SEQ whose description is
 * not D (C5), or NULL. */
coll_unexp_t *coll_ux_mismatch_locked(uint32_t gid, uint32_t seq,
                                      const coll_desc_t *d);

/* ---- groups: the table and failure ---- */
/* Ids from here up are membership epochs' groups (coll_group_new_id, for
 * runtime/elastic: epoch E's group is BASE + E); td_group_new's ids count
 * up from 1 below it. C11's "destroyed here" is judged per range. */
#define COLL_EPOCH_ID_BASE 0x40000000u
/* Ids from here up are td_group_new groups re-formed for an elastic epoch
 * (group.c G2): COLL_REFORM_ID(E, made) for the group made with id MADE,
 * re-formed in epoch E; a range of its own, for C11, so that a re-formed
 * group never makes the next epoch's group look destroyed. */
#define COLL_REFORM_ID_BASE 0x80000000u
#define COLL_REFORM_EPOCHS  2048u           /* epochs a re-form can name */
#define COLL_REFORM_MADE    (1u << 20)      /* td_group_new ids it can */
#define COLL_REFORM_ID(e, made) \
    (COLL_REFORM_ID_BASE | ((uint32_t)(e) << 20) | (uint32_t)(made))
td_status_t coll_group_register(td_group_t *g);
void        coll_group_unregister(td_group_t *g);
td_group_t *coll_group_find_locked(uint32_t id);
/* Was group GID made here and destroyed since (C11)? */
int         coll_group_gone_locked(uint32_t gid);
/* ... and broken when it was (one of the last COLL_GONE_BROKEN: C14)? */
#define COLL_GONE_BROKEN 64
int         coll_group_gone_broken_locked(uint32_t gid);
/* The status G is in (TD_OK unless broken; records the message). */
td_status_t coll_group_check(td_group_t *g);
/* Fail group G, or (G NULL) the registered group GID: the first failure
 * wins (C6); its posted requests complete with CODE/MSG. Returns 1 when
 * this was the first failure; then, if TELL is not NULL, *TELL holds the
 * world ranks of the other members (malloc'd; *N_TELL of them) and
 * *GID_P and *DIGEST_P the group's, for the abort the caller sends. */
int         coll_group_fail_local(td_group_t *g, uint32_t gid,
                                  td_status_t code, const char *msg,
                                  int **tell, int *n_tell, uint32_t *gid_p,
                                  uint32_t *digest_p);
/* A send of one of G's collectives to world rank TO failed with
 * CODE/MSG (wait.h C19): recorded once, for its waits to end the call;
 * waiters woken. */
void        coll_group_tx_failed(td_group_t *g, int to, td_status_t code,
                                 const char *msg);
/* coll_group_fail_local telling nobody, logged, waiters woken. */
void        coll_group_fail_quiet(td_group_t *g, uint32_t gid,
                                  td_status_t code, const char *msg);
/* World rank RANK died: fail the groups it is a member of, and the
 * requests waiting for it in any group (TD_ERR_PEER). */
void        coll_match_peer_dead(int rank);
/* The live groups (at most TD_GROUPS_MAX) into LIVE; their number. */
int         coll_groups_live(td_group_t **live);
/* td_finalize: the posted requests fail TD_ERR_CANCELED, the table and
 * the unexpected list empty, ids start again. */
void        coll_match_reset(void);

/* ---- checks of a p2p message against its receive ---- */
/* "float32 [2, 3]" into S. */
void        coll_shape_text(char *s, size_t len, uint8_t dtype, int ndim,
                            const int64_t *shape);
/* A p2p message matched receive R: TD_OK when it fits, else the error
 * with MSG naming both shapes. */
td_status_t coll_p2p_fits(const coll_req_t *r, int src, uint8_t dtype,
                          int ndim, const int64_t *shape, size_t nbytes,
                          char *msg, size_t len);
/* Complete p2p send R with its ack from SRC (status ST, the receiver's
 * DTYPE, NDIM, SHAPE). */
void        coll_ack_complete(coll_req_t *r, int src, td_status_t st,
                              uint8_t dtype, int ndim, const int64_t *shape);

/* ---- waiting: completions, sleeping, waking ---- */
/* Requests completed so far (a progress hint). */
unsigned long coll_completions(void);
/* Wake every sleeper (and the transport's driver). */
void        coll_wake(void);
/* Sleep until CHECK(ARG) or a wake: a first nap of FIRST_NAP s (0: none)
 * after which POLL() runs and CHECK is asked again, then up to 2 ms. */
void        coll_sleep(int (*check)(const void *), const void *arg,
                       double first_nap, void (*poll)(void));

#endif /* TD_RUNTIME_COLL_MATCH_H */
