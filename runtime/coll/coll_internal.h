/* runtime/coll/coll_internal.h: what the files of runtime/coll share
 * (internal, not installed): the wire header, requests (one expected
 * message or one send), groups, the operation context the algorithms run
 * in, and the reduction kernels.
 *
 * Thread safety: the request and unexpected-message tables are guarded by
 * coll_lock (coll.c); a group's sequence numbers and scratch buffer belong
 * to the one thread running its current operation (work.c serializes
 * them). */
#ifndef TD_RUNTIME_COLL_INTERNAL_H
#define TD_RUNTIME_COLL_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "todist/coll.h"
#include "runtime/runtime.h"

#define COLL_TRANSPORT_ID  2          /* transport handler id (rpc is 1) */
#define COLL_WIRE_VERSION  1
#define COLL_ERR_MAX       640        /* bytes of an error message */
#define COLL_UNEXPECTED_MAX 65536     /* queued unmatched messages */

/* Message types. */
enum {
    MSG_P2P   = 1,    /* a td_send body */
    MSG_ACK   = 2,    /* the receiver matched a td_send (status, its shape) */
    MSG_COLL  = 3,    /* one step of a collective */
    MSG_ABORT = 4,    /* a member failed the collective at SEQ: text */
    MSG_CMA   = 5,    /* a body offered in place was read (status 0),
                       * could not be (1: send it, and stop offering),
                       * or is not wanted in place (2: send it) */
    MSG_POKE  = 6     /* look at the sender's mailbox: a message or an ack
                       * is there and a waiter here sleeps (mbox.c M5) */
};

#define COLL_CMA_MIN  (64u * 1024u)   /* bodies read in place from here on */
#define COLL_F_CMA    0x01            /* header flag: body offered in place */
#define COLL_F_RESEND 0x02            /* P2P: the body of an offer answered
                                       * 1 or 2; matches only the receive
                                       * that answered (exact_seq) */
#define COLL_F_MBOX   0x04            /* ACK: the receiver's inbox offer
                                       * follows (MBOX_OFFER_BYTES) */
#define MBOX_OFFER_BYTES 32
#define MBOX_BODY     4096            /* bodies sent through a mailbox */
#define MBOX_SPIN_S   10e-6           /* poll mailboxes alone this long */
#define MBOX_RECHECK_S 50e-6          /* a sleeper's first nap (mbox.c M5) */

/* Collective kinds (in the description). */
typedef enum {
    COLL_NONE = 0, COLL_ALL_REDUCE, COLL_BROADCAST, COLL_REDUCE,
    COLL_ALL_GATHER, COLL_GATHER, COLL_SCATTER, COLL_REDUCE_SCATTER,
    COLL_ALL_TO_ALL, COLL_BARRIER, COLL_NUM_KINDS
} coll_kind_t;

/* Algorithms. */
typedef enum {
    ALGO_AUTO = 0, ALGO_RD, ALGO_RING, ALGO_BINOMIAL, ALGO_LINEAR,
    ALGO_DIRECT, ALGO_PAIRWISE, ALGO_DISSEMINATION, ALGO_SHM, ALGO_NUM
} coll_algo_t;

/* What one member called: every message of a collective carries it, and
 * members compare (the mismatch check, invariant C5 in coll.c). */
typedef struct {
    uint8_t  kind;     /* coll_kind_t */
    uint8_t  dtype;
    uint8_t  op;
    uint8_t  algo;     /* coll_algo_t actually chosen */
    int32_t  root;     /* group rank, -1 when none */
    uint64_t count;    /* elements of the per-rank tensor */
} coll_desc_t;

/* Wire header, big-endian, COLL_WIRE_BYTES fixed then extras:
 *   u8 version | u8 type | u8 dtype | u8 ndim |
 *   u32 group id | u32 group digest | u32 seq | u32 tag | u64 nbytes |
 *   COLL: 16 bytes of description (u8 kind, dtype, op, algo, u32 root,
 *         u64 count); with flag COLL_F_CMA (byte 20) and no body, 32 more:
 *         u32 pid | u32 0 | u64 address | u64 token address | u64 token
 *   CMA:  u32 status (0 read, 1 send the body and stop offering, 2 send
 *         the body this time)
 *   P2P:  ndim x u64 dims; with COLL_F_CMA and no body, the same 32 bytes
 *         of offer as COLL
 *   ACK:  u32 status (two's complement) | ndim x u64 dims (the receiver's);
 *         with COLL_F_MBOX, 32 more: u32 pid | u32 fd | u64 token |
 *         u64 boot id hash | u64 inbox size (mbox.c)
 *   POKE: nothing more
 *   ABORT: u16 text length | text (< COLL_ERR_MAX) */
#define COLL_WIRE_BYTES 32

/* A wire header, decoded and checked (wire.c). */
typedef struct {
    uint8_t        type, dtype, ndim, flags;
    uint32_t       gid, digest, seq, tag;
    uint64_t       nbytes;
    int64_t        shape[TD_MAX_DIMS];  /* P2P, ACK */
    coll_desc_t    desc;                /* COLL */
    uint32_t       word;                /* ACK: status; CMA: answer */
    int            cma;                 /* P2P, COLL: offered in place */
    int32_t        cma_pid;
    uint64_t       cma_addr, cma_token_addr, cma_token;
    const uint8_t *offer;               /* ACK + COLL_F_MBOX: its 32 bytes */
    const char    *text;                /* ABORT: TEXT_LEN bytes */
    size_t         text_len;
} coll_wire_t;

/* Decode header H of LEN bytes that came with N_BODIES bodies (the first
 * BODY_LEN bytes long) into *M: TD_OK, or TD_ERR_PROTOCOL when anything
 * is malformed (wire.c W1-W3). */
td_status_t coll_wire_parse(const uint8_t *h, size_t len, unsigned n_bodies,
                            size_t body_len, coll_wire_t *m);

/* A group's shared-memory segment (shm.c) and whether it has one. */
typedef struct coll_shm coll_shm_t;
enum { SHM_UNTRIED = 0, SHM_ON = 1, SHM_OFF = 2 };

/* A group (todist/coll.h). */
struct td_group {
    uint32_t        id;            /* 0: the world */
    uint32_t        digest;        /* FNV-1a of the member list */
    int             n;             /* members */
    int             me;            /* group rank, -1: not a member */
    int            *ranks;         /* group rank -> world rank */
    int            *of_world;      /* world rank -> group rank or -1 */
    /* owned by the thread running the current operation (work.c) */
    uint32_t        seq;           /* next collective's sequence number */
    uint32_t       *send_seq;      /* per peer: td_send counter */
    void           *scratch;
    size_t          scratch_len;
    int             watched;       /* endpoints to every member requested */
    coll_shm_t     *shm;           /* shm.c: the segment, when SHM_ON */
    int             shm_state;
    /* guarded by coll_lock */
    int             in_op;         /* a collective with seq cur_seq runs */
    uint32_t        cur_seq;
    coll_desc_t     cur_desc;
    td_status_t     broken;        /* TD_OK, or the first failure */
    char            broken_msg[COLL_ERR_MAX];
    int             registered;    /* in the table of live groups */
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
    /* single-copy path (coll.c): a receive whose sender offered its
     * buffer in place (cma_ready_a: the waiter reads it), a send waiting for
     * the reader's MSG_CMA (cma_send; hdr kept to resend with the body). */
    atomic_int         cma_ready_a;
    int                cma_send;
    int32_t            cma_pid;
    uint64_t           cma_addr, cma_token_addr, cma_token;
    void              *cma_dst;    /* coll recv: an offered body is read
                                    * here instead of BUF (a hot buffer
                                    * the reduction reads at once) ... */
    int                cma_landed; /* ... and this says it was */
    int                exact_seq;  /* p2p recv re-posted for the resent
                                    * body of offer SEQ from PEER only */
    atomic_int         tp_counted; /* p2p send through the transport,
                                    * counted in mbox.c's tp_busy (M2) */
    size_t             hdr_len;
    /* Written before they are read (the header when sent, the error with
     * its status), so a request on the stack zeroes only what is above
     * (COLL_REQ_ZERO): 8 B round trips were paying for 1 KB of memset. */
    uint8_t            hdr[COLL_WIRE_BYTES + 8 * TD_MAX_DIMS + 48];
    char               err[COLL_ERR_MAX];
} coll_req_t;

#define COLL_REQ_ZERO offsetof(coll_req_t, hdr)

/* A collective's arguments, checked (api.c), tensors retained while a
 * work handle holds them. */
typedef struct {
    coll_kind_t     kind;
    td_tensor_t    *t;             /* in place / out */
    td_tensor_t    *in;
    td_tensor_t   **outs;          /* all_gather's list form (n entries) */
    int             n_outs;
    int             root;
    td_reduce_op_t  op;
} coll_args_t;

/* A work handle (todist/coll.h). */
struct td_work {
    atomic_int       refs;
    atomic_int       done;
    td_status_t      status;
    char             err[COLL_ERR_MAX];
    pthread_mutex_t  lock;
    pthread_cond_t   cond;
    int              p2p;          /* 1: req below; 0: a queued collective */
    coll_req_t       req;
    double           deadline;     /* p2p: when the operation times out */
    td_group_t      *g;
    td_tensor_t     *tensor;       /* p2p: retained */
    coll_args_t      args;         /* collective: tensors retained */
    struct td_work  *next;         /* the group's queue */
};

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
} coll_op_t;

/* ---- coll.c: the core ------------------------------------------------- */

/* The runtime module of the collectives (a line of the module table in
 * runtime/modules.c). */
extern const td_runtime_module_t td_coll_module;

td_transport_t *coll_transport(void);
int             coll_world_rank(void);
int             coll_world_size(void);
double          coll_timeout(void);
coll_algo_t     coll_algo_forced(coll_kind_t kind);
const char     *coll_kind_name(coll_kind_t k);
const char     *coll_algo_name(coll_algo_t a);

/* Post a receive (its fields filled by the caller; done/status set here):
 * matched at once against unexpected messages, else when one arrives. */
td_status_t coll_post_recv(coll_req_t *r);
/* td_recv's fast path (mbox.c M10): R, a p2p receive from one rank of
 * this host, taken straight from its sender's mailbox while this thread
 * polls it: 1 done (R's status and err set), 0 not (use coll_post_recv). */
int         coll_p2p_recv_fast(coll_req_t *r);
/* Send HDR (its header bytes) and BUF[0..NBYTES) to world rank DST as R
 * (R->pending is set: 1, or 2 for a p2p send that also waits for its
 * ack, posted before the message leaves). */
td_status_t coll_post_send(coll_req_t *r, int dst, const uint8_t *hdr,
                           size_t hdr_len);
/* Send R, its header in r->hdr (r->hdr_len bytes), to world rank WDST:
 * offered in place when the single-copy path may serve it (coll.c C9). */
td_status_t coll_post_send_offer(coll_req_t *r, int wdst);
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
/* Operations in flight (td_finalize's join waits for 0): add D. */
long        coll_active_add(long d);
/* Mark G broken with CODE and MSG (the first failure wins) and fail its
 * posted receives; TELL: send MSG_ABORT(SEQ) to every other member. */
void        coll_group_fail(td_group_t *g, td_status_t code, int tell,
                            uint32_t seq, const char *msg);
/* The status G is in (TD_OK unless broken; records the message). */
td_status_t coll_group_check(td_group_t *g);
/* Group registry (for the receive path and dead peers). */
td_status_t coll_group_register(td_group_t *g);
void        coll_group_unregister(td_group_t *g);

/* A collective starts / ends on G (sets and clears the description the
 * receive path compares against, and checks what arrived already). */
td_status_t coll_op_begin(coll_op_t *op);
void        coll_op_end(coll_op_t *op);
/* Header of a collective message. */
size_t      coll_hdr_coll(uint8_t *h, const coll_op_t *op, uint32_t tag,
                          size_t nbytes);
/* Scratch of at least LEN bytes owned by G's running operation. */
void       *coll_scratch(td_group_t *g, size_t len);

/* ---- collective steps (coll.c) ---------------------------------------- */

/* Post a receive of step TAG from group rank SRC into BUF. */
td_status_t coll_irecv(coll_op_t *op, coll_req_t *r, int src, uint32_t tag,
                       void *buf, size_t nbytes);
td_status_t coll_isend(coll_op_t *op, coll_req_t *r, int dst, uint32_t tag,
                       const void *buf, size_t nbytes);
/* Blocking forms, and an exchange (send to DST, receive from SRC). */
td_status_t coll_sendrecv(coll_op_t *op, int dst, const void *sbuf,
                          size_t slen, int src, void *rbuf, size_t rlen,
                          uint32_t tag);

/* Has the runtime shut down (pending operations fail)? */
int         coll_stopped(void);
/* The text naming two calls at one sequence number (C5). */
void        coll_mismatch_text(char *msg, size_t len, const td_group_t *g,
                               uint32_t seq, int other,
                               const coll_desc_t *theirs,
                               const coll_desc_t *ours);

/* ---- shm.c: collectives through a shared segment ------------------------ */

/* Read TODIST_COLL_SHM and this host's boot id (module setup). */
void        coll_shm_setup(const td_world_t *w);
/* May auto pick the shm algorithm for G? (same answer on every member) */
int         coll_shm_eligible(const td_group_t *g);
/* The handshake at G's first shm call (shm.c S1); *USABLE: 1 when every
 * member has the segment, else the call runs another algorithm. */
td_status_t coll_shm_attach(coll_op_t *op, int *usable);
/* Announce the call SEQ/D in G's segment (S4); no-op without one. */
void        coll_shm_announce(td_group_t *g, uint32_t seq,
                              const coll_desc_t *d);
/* Fail G as a mismatch if a member announced another call at SEQ. */
td_status_t coll_shm_check(td_group_t *g, uint32_t seq,
                           const coll_desc_t *mine);
void        coll_shm_detach(td_group_t *g);
td_status_t coll_all_reduce_shm(coll_op_t *op, void *buf, size_t count);
td_status_t coll_barrier_shm(coll_op_t *op);
td_status_t coll_broadcast_shm(coll_op_t *op, void *buf, size_t nbytes);
td_status_t coll_all_gather_shm(coll_op_t *op, void *out, const void *in,
                                size_t nbytes);
td_status_t coll_reduce_scatter_shm(coll_op_t *op, void *out, const void *in,
                                    size_t count);

/* This host's boot id ("" unknown). */
const char *coll_shm_boot_id(void);

/* ---- mbox.c: point-to-point through shared memory ------------------------ */

/* A message read from a mailbox (mbox.c), handed to coll_p2p_arrive. */
typedef struct {
    int            src, slot;      /* world rank, slot of its mailbox */
    uint32_t       gid, digest, seq, tag;
    uint8_t        dtype, ndim;
    size_t         nbytes;
    int64_t        shape[TD_MAX_DIMS];
    const uint8_t *body;           /* in the slot */
} coll_mbox_msg_t;

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
 * under coll_lock). */
void        coll_mbox_ack(int src, int slot, td_status_t status,
                          uint8_t dtype, int ndim, const int64_t *shape,
                          int poke);
/* Hand SRC's waiting mailbox messages to the matching engine (before a
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

/* coll.c for mbox.c (mbox.c M4: mailboxes are drained and their acks
 * taken under coll_lock). */
typedef struct {
    td_status_t code;              /* the matched receive's status */
    int         fail;              /* fail the message's group with msg */
    char        msg[COLL_ERR_MAX];
} coll_arrive_t;

void        coll_lock(void);
void        coll_unlock(void);
/* A mailbox message arrived (coll_lock held): the receive it matched
 * (copied and acked; complete it after the unlock), or NULL. */
coll_req_t *coll_p2p_arrive_locked(const coll_mbox_msg_t *m,
                                   coll_arrive_t *a);
/* The send SEQ of group GID to SRC whose ack came (coll_lock held). */
coll_req_t *coll_p2p_ack_take_locked(int src, uint32_t gid, uint32_t seq);
/* Complete it with the ack (no lock held). */
void        coll_p2p_ack_complete(coll_req_t *r, int src, td_status_t st,
                                  uint8_t dtype, int ndim,
                                  const int64_t *shape);
/* A MSG_ACK: take and complete. */
void        coll_p2p_acked(int src, uint32_t gid, uint32_t seq,
                           td_status_t st, uint8_t dtype, int ndim,
                           const int64_t *shape);
/* Post R as a mailbox send to DST (coll_lock held). */
void        coll_p2p_post_mbox_locked(coll_req_t *r, int dst);
void        coll_req_complete(coll_req_t *r, td_status_t status,
                              const char *msg);
void        coll_group_fail_id(uint32_t gid, td_status_t code, uint32_t seq,
                               const char *msg);
void        coll_poke(int dst);
/* A mailbox spin looks at the clock (every 64th turn): 1 once MBOX_SPIN_S
 * passed since its first look, the runtime stopped or G (or NULL) broke. */
int         coll_spin_over(double *t_first, const td_group_t *g);
/* One more send (SEND) or receive done on the fast path (a debug count,
 * logged at shutdown). */
void        coll_fast_count(int send);
/* TODIST_FAULT for a mailbox message: TD_TRANSPORT_FAULT_* (tests only). */
int         coll_fault_roll(void);

/* ---- reduce.c: the reductions, dispatched to the kernel table ---------- */

/* DST[i] = DST[i] op SRC[i], i < COUNT (AVG sums). */
void        coll_reduce_into(void *dst, const void *src, size_t count,
                             td_dtype_t dtype, td_reduce_op_t op);
/* DST[i] /= N (AVG's last step). */
void        coll_divide(void *dst, size_t count, td_dtype_t dtype, int n);
/* Is OP defined on DTYPE? (bitwise ones only on integers) */
int         coll_op_valid(td_reduce_op_t op, td_dtype_t dtype);

/* ---- algorithms -------------------------------------------------------- */

td_status_t coll_all_reduce_rd(coll_op_t *op, void *buf, size_t count);
td_status_t coll_all_reduce_ring(coll_op_t *op, void *buf, size_t count);
td_status_t coll_broadcast_run(coll_op_t *op, void *buf, size_t nbytes);
td_status_t coll_reduce_run(coll_op_t *op, void *buf, size_t count);
td_status_t coll_all_gather_run(coll_op_t *op, void *out, const void *in,
                                size_t nbytes);
td_status_t coll_gather_run(coll_op_t *op, void *out, const void *in,
                            size_t nbytes);
td_status_t coll_scatter_run(coll_op_t *op, void *out, const void *in,
                             size_t nbytes);
td_status_t coll_reduce_scatter_run(coll_op_t *op, void *out, const void *in,
                                    size_t count);
td_status_t coll_all_to_all_run(coll_op_t *op, void *out, const void *in,
                                size_t block_bytes);
td_status_t coll_barrier_run(coll_op_t *op);

/* ---- work.c ------------------------------------------------------------ */

/* Run the collective A on G: now on this thread when G is idle and
 * WORK_P is NULL (blocking), else queued to G's thread (WORK_P gets the
 * handle; NULL: wait for it here). Takes references on A's tensors. */
td_status_t coll_submit(td_group_t *g, const coll_args_t *a,
                        td_work_t **work_p);
/* A work handle for a point-to-point request (refs: 2, the caller's and
 * the request's, dropped by its on_done). */
td_work_t  *coll_work_p2p_new(td_group_t *g, td_tensor_t *t);
void        coll_work_p2p_done(coll_req_t *r);

/* ---- api.c ------------------------------------------------------------- */

/* Run checked arguments A on G (this thread). */
td_status_t coll_run(td_group_t *g, const coll_args_t *a);

/* Stop G's operation thread (after its queue drained). */
void        coll_group_stop_thread(td_group_t *g);

/* ---- group.c ----------------------------------------------------------- */

td_status_t coll_world_group_create(int rank, int size);
void        coll_world_group_free(void);
void        coll_groups_reset(void);

#endif /* TD_RUNTIME_COLL_INTERNAL_H */
