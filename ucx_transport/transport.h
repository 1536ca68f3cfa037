/* ucx_transport/transport.h: messages between ranks over UCX active messages
 * (internal interface used by the runtime, not installed).
 *
 * A message is a header (at most TD_TRANSPORT_HEADER_MAX bytes, copied at
 * send time) plus zero or more bodies, each a buffer with an explicit memory
 * type. All of a message travels as ONE UCP active message
 * (UCP_AM_SEND_FLAG_REPLY): small bodies eagerly, large ones by rendezvous
 * (ucp_am_recv_data_nbx) straight into the buffers the receiver names, so a
 * tensor body lands where it belongs without a copy. Between ranks of one
 * host, the large host bodies of handler ids that ask for it are offered
 * instead and read by the receiver in one copy (td__transport_set_inplace).
 *
 * One thread at a time is in the UCX worker: the holder of the progress
 * token. Normally that is the progress thread; a thread waiting for a
 * reply may take the token and drive progress itself (td__transport_drive),
 * and a sending thread that finds the token free sends at once. Every
 * callback (receive, body completion, send completion, peer failure) runs
 * on the holder, so possibly inside td__transport_send() or
 * td__transport_drive() of another thread: keep them short, never block in
 * them, take no lock a sender may hold; they may call td__transport_send().
 * Sends that find the token taken go through a queue (and a
 * ucp_worker_signal() wake-up unless the mode is BUSY).
 *
 * Progress modes: BUSY polls the worker (lowest latency, one core always
 * busy); BLOCKING sleeps on the worker's event fd (no idle CPU burn, a
 * wake-up costs a few microseconds); AUTO picks BUSY only when there are
 * peers and every local rank can have two cores of its own (see
 * bench/RESULTS.md for figures).
 *
 * Endpoints are made lazily: the first send to a rank asks the address
 * resolver (td_transport_params_t.resolve) for that rank's worker address.
 * Every endpoint uses UCP_ERR_HANDLING_MODE_PEER; a dead peer fails its
 * pending operations with TD_ERR_PEER naming the rank and calls peer_failed.
 *
 * UCX configuration: the transport defaults UCX_MM_ERROR_HANDLING=y (keeps
 * shared memory in use with PEER error handling) and a keepalive that
 * notices a dead peer within about a second; any UCX_* variable the user set
 * wins.
 *
 * Thread safety: td__transport_send(), td__transport_address(),
 * td__transport_peer_alive() and td__transport_flush() are thread-safe.
 * td__transport_set_handler() must be called before the worker address is
 * given to peers. td__transport_create()/td__transport_destroy() are not
 * thread-safe and must not be called from a callback. */
#ifndef TD_UCX_TRANSPORT_H
#define TD_UCX_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include <todist/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_TRANSPORT_HEADER_MAX   4096  /* bytes of user header per message */
#define TD_TRANSPORT_BODIES_MAX   64    /* bodies per message */
#define TD_TRANSPORT_HANDLERS_MAX 16    /* message handler ids 0..13 (14
                                         * answers offers in place, 15 is
                                         * the transport's liveness) */

typedef struct td_transport td_transport_t;

/* Where a buffer lives. */
typedef enum {
    TD_MEM_HOST = 0,
    TD_MEM_CUDA = 1   /* device memory; staged through pinned host buffers
                       * when UCX has no CUDA transport (not yet: returns
                       * TD_ERR_UNSUPPORTED until the CUDA path lands) */
} td_mem_type_t;

/* One body buffer. */
typedef struct {
    void          *buf;
    size_t         len;
    td_mem_type_t  mem;
} td_iov_t;

typedef enum {
    TD_PROGRESS_AUTO     = 0,
    TD_PROGRESS_BUSY     = 1,
    TD_PROGRESS_BLOCKING = 2
} td_progress_mode_t;

/* An incoming message, as seen by the receive handler (progress thread).
 * header and body_len are valid during the handler only. */
typedef struct td_transport_rx td_transport_rx_t;

/* Called once every body of RX has arrived (or failed: STATUS < 0, e.g.
 * TD_ERR_PEER when the sender died). BODIES[i] are the buffers the bodies
 * landed in: the ones the handler named, or for bodies the handler left
 * unnamed, host buffers the transport malloc'ed and hands over (the callee
 * owns them and free()s them, also on failure). Progress thread. */
typedef void (*td_transport_done_fn)(void *arg, td_status_t status, int src,
                                     td_iov_t *bodies, size_t n_bodies);

struct td_transport_rx {
    /* --- filled by the transport --- */
    int                 src;         /* sender's rank */
    uint16_t            handler_id;
    const void         *header;
    size_t              header_len;
    size_t              n_bodies;
    const size_t       *body_len;    /* n_bodies entries */
    const td_mem_type_t *body_mem;   /* the sender's memory types */
    /* --- may be set by the handler --- */
    td_iov_t           *dest;        /* n_bodies entries, buf == NULL preset:
                                      * set dest[i].buf (len body_len[i] or
                                      * more) and dest[i].mem to receive body
                                      * i there; leave NULL to get a malloc'ed
                                      * host buffer */
    td_transport_done_fn done;       /* NULL: bodies are dropped (freed) */
    void               *done_arg;
    /* --- small bodies from another host (transport.c S1) --- */
    const void         *eager;       /* the bodies' bytes back to back when
                                      * the message came eagerly from a
                                      * peer of another host, valid during
                                      * the handler only; else NULL */
    int                 taken;       /* set by the handler (eager != NULL
                                      * only): it copied the bodies out
                                      * itself; dest and done are then
                                      * ignored and the message is done */
};

/* Receive handler for one handler id. Runs on the token holder; may copy
 * the header out, name destinations and set done. */
typedef void (*td_transport_recv_fn)(void *arg, td_transport_rx_t *rx);

/* Send completion: TD_OK once the bodies may be reused, or an error
 * (TD_ERR_PEER naming the rank, TD_ERR_CANCELED at shutdown). Called exactly
 * once per accepted send, on the token holder. */
typedef void (*td_transport_send_fn)(void *arg, td_status_t status);

/* Fetches rank RANK's worker address (the blob td__transport_address() gave
 * on that rank) into a malloc'ed buffer. Called on the transport's own
 * resolver thread, never on the token holder (transport.c L11), when an
 * endpoint to RANK is first needed; may block (store round trips). */
typedef td_status_t (*td_transport_resolve_fn)(void *arg, int rank,
                                               void **addr_p, size_t *len_p);

/* A peer died or became unreachable: WHY is TD_ERR_PEER; or it dropped
 * this rank and said so (transport.c L12: it lives on, and goes on
 * without this rank): WHY is TD_ERR_STATE. Progress thread. */
typedef void (*td_transport_peer_fn)(void *arg, int rank, td_status_t why);

/* Is RANK's process known to have exited? 1 yes, 0 alive or unknown.
 * Asked on the token holder, every TD_TRANSPORT_LIVENESS_S at most, about
 * each peer an endpoint is held to; a yes fails the peer as a keepalive
 * error would (peer_failed, pending sends TD_ERR_PEER). UCX's keepalive
 * misses a peer that died before its endpoint's wire-up completed. */
typedef int (*td_transport_gone_fn)(void *arg, int rank);
#define TD_TRANSPORT_LIVENESS_S 0.25

typedef struct {
    int                     rank;
    int                     world_size;
    int                     local_world_size;  /* for TD_PROGRESS_AUTO */
    td_progress_mode_t      progress;          /* env TODIST_PROGRESS
                                                * (auto|busy|blocking) wins */
    td_transport_resolve_fn resolve;
    void                   *resolve_arg;
    td_transport_peer_fn    peer_failed;       /* may be NULL */
    /* 1 when RANK runs on this host (asked, with resolve_arg, once it is
     * connected); peers on other hosts get the liveness check
     * (TODIST_LIVENESS, transport.c L1-L4). NULL: no peer is checked. */
    int                   (*same_host)(void *arg, int rank);
    /* Milliseconds since RANK's host last answered at the network level
     * (an acknowledgement or data on a TCP connection to it), -1 unknown;
     * asked, with resolve_arg, about a peer on another host that answered
     * no ping for TODIST_LIVENESS (transport.c L7), and at its first ping,
     * when the answer is ignored: from then on its host must be made to
     * answer (L8: the runtime turns on TCP keepalive). NULL: never. */
    int                   (*peer_heard)(void *arg, int rank);
    void                   *peer_failed_arg;
    td_transport_gone_fn    peer_gone;         /* may be NULL */
    void                   *peer_gone_arg;
    /* td__transport_peer_revive reset RANK (token holder, with
     * peer_gone_arg): forget what was learnt of its old process (its pid,
     * asked by peer_gone). May be NULL. */
    void                  (*peer_reset)(void *arg, int rank);
    const char             *token;             /* TODIST_JOB_TOKEN: keys the
                                                * message tags; NULL or ""
                                                * = a tag anyone can make */
} td_transport_params_t;

/* Create the UCX context and worker and start the progress thread. */
td_status_t td__transport_create(const td_transport_params_t *params,
                                td_transport_t **tp_p);

/* Flush and close every endpoint (bounded by TIMEOUT seconds), fail what is
 * still pending with TD_ERR_CANCELED, stop the progress thread, destroy the
 * worker and context. NULL is a no-op. A peer that does not complete its
 * close (stopped, hung, partitioned) is abandoned after TIMEOUT + 1 s
 * without crashing UCX; TD_ERR_TIMEOUT then names its rank. */
td_status_t td__transport_destroy(td_transport_t *tp, double timeout);

/* Register the receive handler for ID (< TD_TRANSPORT_HANDLERS_MAX). Call
 * before this worker's address is published; messages for an id without a
 * handler (or malformed ones) are dropped and counted
 * (td__transport_dropped). */
td_status_t td__transport_set_handler(td_transport_t *tp, uint16_t id,
                                     td_transport_recv_fn fn, void *arg);

/* Bodies in place (transport.c O1-O5): host bodies of messages to handler
 * ID that hold MIN_BYTES or more (0: never, the default) are offered to a
 * peer of this host instead of sent, and that peer copies them once, with
 * process_vm_readv, straight into the destinations its handler names; the
 * send completes once it has. A receiver reads offers only for ids that
 * asked here too (else the sender falls back to UCX). Messages to the
 * handler keep their order; the receive handler and DONE run as for any
 * message. Call with set_handler. */
td_status_t td__transport_set_inplace(td_transport_t *tp, uint16_t id,
                                     size_t min_bytes);

/* Small messages through mailboxes (transport.c X1-X6): messages to
 * handler ID whose header and host bodies fit TD__MBOX_DATA bytes are
 * written into a mailbox in shared memory when the receiver is a peer of
 * this host that offered its inbox, instead of sent through UCX; they keep
 * their order with the rest. Makes our inbox on the first call (a user
 * thread). Call with set_handler, on every rank. */
td_status_t td__transport_set_mbox(td_transport_t *tp, uint16_t id);

/* Messages this worker wrote into mailboxes and received from them. */
void td__transport_mbox_counts(td_transport_t *tp, uint64_t *sent_p,
                              uint64_t *received_p);

/* Messages whose bodies this worker read in place, and offers it refused
 * (not of this host, a pid without the token, in-place reads off). */
void td__transport_inplace_counts(td_transport_t *tp, uint64_t *read_p,
                                 uint64_t *refused_p);

/* Messages whose bodies a receive handler took itself (rx.taken,
 * transport.c S1). */
uint64_t td__transport_taken_count(td_transport_t *tp);

/* Sends that took the lean path to a peer of another host (transport.c
 * S2). */
uint64_t td__transport_lean_count(td_transport_t *tp);

/* The progress thread's next nap in microseconds (transport.c N1). */
unsigned td__transport_nap_us(td_transport_t *tp);

/* Whether UCX gives this worker an event fd (transport.c N2: only where
 * some thread may sleep on it), asked of UCX itself. */
int td__transport_has_efd(td_transport_t *tp);

/* This worker's address blob (owned by the transport, valid until destroy). */
td_status_t td__transport_address(td_transport_t *tp, const void **addr_p,
                                 size_t *len_p);

/* Send HEADER (copied) and BODIES (must stay valid until CB) to rank DST's
 * handler ID. On TD_OK, CB (may be NULL) is called exactly once later; on an
 * error return it is not called. A message to oneself is delivered through
 * the same path (loopback endpoint). */
td_status_t td__transport_send(td_transport_t *tp, int dst, uint16_t id,
                              const void *header, size_t header_len,
                              const td_iov_t *bodies, size_t n_bodies,
                              td_transport_send_fn cb, void *arg);

/* Wait until every send posted before this call has completed (or failed),
 * at most TIMEOUT seconds. Not from a callback. */
td_status_t td__transport_flush(td_transport_t *tp, double timeout);

/* Messages this worker has sent (completed successfully) and received
 * (delivered to a handler) so far; the graceful join compares the sums. */
void td__transport_counts(td_transport_t *tp, uint64_t *sent_p,
                         uint64_t *received_p);

/* Messages dropped because they were malformed or had no handler. */
size_t td__transport_dropped(td_transport_t *tp);
/* Messages received by rendezvous so far (the rest came eager: host
 * bodies up to 64 KiB in all are sent eager unless UCX_RNDV_THRESH is
 * set; a rendezvous needs the sender to make progress after posting). */
size_t td__transport_rndv_received(td_transport_t *tp);
/* Events UCX's progress reported (ucp_worker_progress's counts) by any
 * thread: a message in shared memory is one per segment it took (X11). */
uint64_t td__transport_ucx_events(td_transport_t *tp);

/* Fault injection (tests only): TODIST_FAULT="RULE[,RULE...][,seed=N]",
 * RULE = drop:KIND:RATE | corrupt:KIND:RATE | delay:KIND:RATE:MS |
 * break:KIND:RATE:RANK, KIND =
 * any | call | reply | rref | coll | mbox | other | fn=PREFIX (calls to
 * functions whose name starts with PREFIX), RATE in [0, 1]; an unknown
 * KIND is refused ("mbox": messages that do not go through UCX, rolled
 * for by their layer with td__transport_fault_roll). Applied to outgoing
 * messages on the token holder with a PRNG seeded by seed and the rank, so
 * a run is
 * reproducible up to thread timing. A dropped message completes as sent
 * (as on a lossy link) but is not counted by the join; a corrupted one has
 * the first byte of its user header flipped (the upper layer's version or
 * magic: its decoder must reject it); a delayed one holds the sender for
 * MS ms; a broken one (break:KIND:RATE:RANK, to world rank RANK or any
 * with -1; only messages through UCX) is not sent and completes with
 * TD_ERR_TRANSPORT once its endpoint is made, as on an endpoint UCX
 * reports broken. The upper layer names a message's kind with a classifier, or
 * one kind for every message of a handler id (td__transport_set_kind). */
typedef struct {
    const char *kind;   /* "call", "reply", "rref" or "other" */
    const char *name;   /* for calls: the function's name, else NULL */
} td_transport_kind_t;

typedef td_transport_kind_t (*td_transport_classify_fn)(void *arg,
    uint16_t id, const void *header, size_t header_len);

/* Set the classifier for fault injection (before td_init ends; a no-op
 * without TODIST_FAULT). */
void td__transport_set_classifier(td_transport_t *tp,
                                 td_transport_classify_fn fn, void *arg);

/* Every message to handler ID is of KIND (a static string, e.g. "coll"),
 * without asking the classifier. Before td_init ends. */
void td__transport_set_kind(td_transport_t *tp, uint16_t id, const char *kind);

/* TODIST_FAULT for a message of KIND that does not go through UCX (a
 * point-to-point mailbox in shared memory): what its layer must do to it,
 * counted with the rest; a delay is slept here. Any thread. */
enum { TD_TRANSPORT_FAULT_NONE = 0, TD_TRANSPORT_FAULT_DROP,
       TD_TRANSPORT_FAULT_CORRUPT };
int td__transport_fault_roll(td_transport_t *tp, const char *kind);

/* Well-formed messages dropped because their job tag was wrong (not sent
 * by a rank of this job); the first and then every 2^k-th is logged. */
size_t td__transport_rejected(td_transport_t *tp);

/* The most body bytes a message to a peer on another host carries in one
 * UCX TCP segment of UCX's default size (64 KiB, less 1 KiB for the
 * headers; transport.c S3), for a layer that cuts a large transfer into
 * messages: each is then delivered without UCX's reassembly copy. A
 * constant, so that sender and receiver cut alike. */
#define TD_TRANSPORT_FAR_SEG_BYTES (63u * 1024u)

/* false once DST was reported dead. */
bool td__transport_peer_alive(td_transport_t *tp, int dst);

/* Seconds after a send to RANK failed with a plain error (not
 * TD_ERR_PEER) within which the transport may still report RANK dead: 2
 * for a peer of this host (L5 looks every TD_TRANSPORT_LIVENESS_S, after
 * L10's wait), L3's bound (TODIST_LIVENESS and its half) and 0.5 for one
 * elsewhere or not yet connected. A caller that would end its
 * wait on such a failure waits this long first, so that a peer's death,
 * named with its host, is what it reports (coll wait.h C19).
 * Thread-safe. */
double td__transport_fail_grace_s(td_transport_t *tp, int rank);

/* RANK dropped this rank (its liveness check found this rank silent) and
 * said so (transport.c L12): true, with into BUF (LEN bytes) "dropped
 * this rank: it heard nothing from it for 3.0 s (TODIST_LIVENESS=3)",
 * for an error text naming RANK. false when it did not (alive, died,
 * unreachable), BUF untouched. Thread-safe. */
bool td__transport_peer_fate(td_transport_t *tp, int rank, char *buf,
                             size_t len);

/* RANK left the job's members (runtime/elastic's in-place shrink): dead,
 * or cut off, though this rank's transport may never have seen it fail.
 * At teardown its endpoint is closed by force, not flushed (a flush to a
 * dead process never completes), and not reported as unclosed.
 * Thread-safe. */
void td__transport_peer_left(td_transport_t *tp, int rank);

/* A new process took world rank RANK (an elastic replacement,
 * runtime/elastic): forget the old one, so that the next send connects to
 * the address the resolver gives now. Blocks (at most TIMEOUT s) until
 * the token holder reset it. Not from a callback.
 *  R1 The reset runs on the token holder between rounds: the endpoint,
 *     if still open, is closed by force; failed, left, the host, the
 *     in-place state (refused, cma_pid) and the liveness state start
 *     over; the peer is failed again only by the new process.
 *     params.peer_reset runs there too (the runtime forgets the old pid),
 *     before the peer can be connected again.
 *  R2 An error UCX reports for an endpoint that is not the peer's
 *     current one (the old process's: one closed by a failure or by the
 *     reset, dead_ep) is ignored. */
td_status_t td__transport_peer_revive(td_transport_t *tp, int rank,
                                      double timeout);

/* The progress mode in use (AUTO resolved). */
td_progress_mode_t td__transport_progress_mode(td_transport_t *tp);

/* true when the calling thread holds the progress token (inside a
 * callback, or the progress thread in its round). */
bool td__transport_on_progress_thread(td_transport_t *tp);

/* Drive progress on the calling thread until DONE(ARG) is true, for at most
 * MAX_S seconds (< 0: no limit; the transport stopping also ends it).
 * Returns TD_OK when DONE held, TD_ERR_TIMEOUT when time ran out, and
 * TD_ERR_STATE when another thread already drives or the caller is in a
 * callback (then wait by other means); sets no error text. DONE is called
 * often: make it an atomic load. */
td_status_t td__transport_drive(td_transport_t *tp, int (*done)(void *arg),
                               void *arg, double max_s);

/* As td__transport_drive, for a thread standing in for the progress thread
 * while it waits for work (the RPC handler pool's leader): it never sleeps
 * on the event fd (td__transport_drive does after 10 us where cores are
 * scarce in busy mode, and after 1 ms in a rank allowed one core,
 * transport.c X10: the wake-up costs the next message several
 * microseconds), and
 * yields its core after 2 us without a message (a caller sharing that
 * core runs only then). Bound it by MAX_S and DONE. */
td_status_t td__transport_drive_polling(td_transport_t *tp,
                                       int (*done)(void *arg), void *arg,
                                       double max_s);

/* From DONE of a td__transport_drive: does another thread wait to drive
 * (it gets the token as soon as this driver leaves)? */
bool td__transport_drive_wanted(td_transport_t *tp);

/* ON: the calling thread will call td__transport_drive right after its
 * next sends (a synchronous call), so in blocking mode a direct send skips
 * arming the worker for the progress thread (the driver arms it when it
 * leaves). Thread-local; set it back to 0 after the sends. */
void td__transport_will_drive(int on);

/* Make sure there is an endpoint to RANK (made at the next round of
 * progress), so that its death is noticed (keepalive) and reported through
 * peer_failed even if nothing was ever sent to it. Cheap; any thread. */
void td__transport_watch(td_transport_t *tp, int rank);

/* A future was completed outside the worker (by another thread): wake a
 * driver asleep on the event fd so it sees it at once (cheap otherwise). */
void td__transport_wake(td_transport_t *tp);

/* In BUSY mode, the progress thread yields its core after each round while
 * *COUNTER > 0 (read atomically; e.g. the number of jobs handed to other
 * threads of the process), so that they run at once when they share the
 * core with the polling. NULL: never. */
void td__transport_yield_when(td_transport_t *tp, const int *counter);
/* The counter dropped: wake the progress thread if it sleeps on it (where
 * cores are scarce it sleeps instead of yielding). Cheap when it does not. */
void td__transport_yield_done(td_transport_t *tp);

/* ---- a tagged exchange with one peer of another host (transport.c U1-U6) */

#define TD_PAIR_RECV 1
#define TD_PAIR_SEND 2

/* One send and one receive of the same tag with one peer, through UCX's
 * own tag matching: no handler, no header, the receive lands in place.
 * Lives with its caller, who waits for both bits of DONE (U3). */
typedef struct {
    int           done;       /* TD_PAIR_* bits, atomic; set on the token
                               * holder by UCX's completions */
    td_status_t   rstatus, sstatus;
    size_t        rlen;       /* bytes received */
    void         *rreq;       /* the receive while in flight (U4) */
    void        (*notify)(void);  /* after each completion (a waiter may
                               * sleep); set by the caller */
    td_transport_t *tp;       /* set by td__transport_pair_post */
    int           dst;
} td_transport_pair_t;

/* Post X: a receive of up to RCAP bytes into RBUF and a send of SLEN bytes
 * of SBUF to DST, both tagged TAG; then, when DONE is given, drive as
 * td__transport_drive does until DONE(ARG) or SPIN_S passes, in the same
 * hold of the token (transport.c U7). TD_OK: posted (X's done bits say
 * what completed). TD_ERR_NOT_FOUND: no endpoint to DST yet (asked for;
 * drive and post again); TD_ERR_PEER: DST failed. Never blocks on the
 * store (L11); waits for the token. */
td_status_t td__transport_pair_post(td_transport_t *tp, int dst,
                                    uint64_t tag, const void *sbuf,
                                    size_t slen, void *rbuf, size_t rcap,
                                    td_transport_pair_t *x,
                                    int (*done)(void *arg), void *arg,
                                    double spin_s);
/* Cancel X's receive if it is still in flight: its completion then comes
 * with TD_ERR_CANCELED at the next round of progress (U4). */
void td__transport_pair_cancel(td_transport_t *tp, td_transport_pair_t *x);

/* Memory types UCX can move directly (bit (1 << td_mem_type_t)). */
unsigned td__transport_mem_types(td_transport_t *tp);

#ifdef __cplusplus
}
#endif
#endif /* TD_UCX_TRANSPORT_H */
