/* runtime/dist_autograd/dist_internal.h: the distributed autograd engine's internal side
 * (not installed): one engine per worker, the hooks the RPC layer calls
 * when it sends or receives tensors, and the messages the engine asks the
 * RPC layer to carry (a "wire": propagate gradients, release a context).
 *
 * How the RPC layer plugs in:
 *   - at setup, td__dist_engine_create(rank, &wire, &e) and
 *     td__dist_engine_set_default(e);
 *   - sending tensors inside td_dist_autograd_current(): call
 *     td__dist_on_send() and put the returned message id (0: nothing
 *     recorded) and the context id in the message header, together with
 *     each tensor's requires_grad bit;
 *   - receiving a message with a nonzero autograd message id: call
 *     td__dist_on_recv() on the received tensors, and run the handler with
 *     the context current (td__dist_engine_enter / td__dist_engine_leave) so
 *     nested calls record too;
 *   - a propagate-gradients message: td__dist_on_propagate(), whose REPLY
 *     callback fires (on any thread) when the pass and everything it
 *     started are done; send REPLY's status and message back;
 *   - a release message: td__dist_on_release();
 *   - a dead peer: td__dist_peer_failed().
 * The propagate header (context id, message id, flags, gradient count and
 * which gradients are present) has its own versioned codec in the RPC
 * adapter's runtime/dist_autograd/dist_wire.h; the gradient tensors travel as the
 * RPC layer's ordinary tensor bodies.
 *
 * Invariants of the engine (runtime/dist_autograd/dist_autograd.c keeps them):
 *  1. A context id is (rank << 48) | counter with counter >= 1; a thread
 *     has at most one current context, begin inside one is TD_ERR_STATE.
 *  2. A send node is recorded only inside a context and only when at least
 *     one sent tensor requires grad; its next edges are the gradient edges
 *     of the sent tensors (accumulate nodes for leaves, so a parameter
 *     stays in the graph). The context keeps it under a message id unique
 *     on this worker.
 *  3. A recv node is the grad_fn of the received tensors that require
 *     grad; it remembers (context, sender, message id) and has no next
 *     edges: its backward only posts a propagate message.
 *  4. Every local pass (the caller's, and one per propagate message) is a
 *     td_autograd_run with its own dependency counts; nothing waits for a
 *     send node that no gradient reaches (unused sends cannot hang).
 *  5. A pass completes when its local run returned and every propagate it
 *     posted was acknowledged; a propagate is acknowledged only when the
 *     receiver's pass completed. So td_dist_backward returns only after
 *     every worker involved has finished.
 *  6. Leaf gradients go to the context's gradient table through the
 *     engine's sink, summed under the context's lock; .grad is untouched.
 *  7. Local passes run with retain_graph internally (a node reached by two
 *     propagate messages runs twice, each time with its share of the
 *     gradient, and a send node may receive several propagate messages in
 *     one backward); a backward without retain_graph marks the context's
 *     graph as used on the worker that started it, and a later backward
 *     there is TD_ERR_STATE. Saved tensors are freed with the graph (when
 *     the context ends and the user drops the tensors), not after a pass.
 *  8. The first error of a pass wins; a local error is tagged "Error on
 *     rank <this rank>: ", a remote one keeps the tag of the rank it came
 *     from; a dead peer fails every pass waiting on it at once.
 *  9. A message naming an unknown or ended context is an error returned to
 *     the sender (TD_ERR_NOT_FOUND naming the context), never a crash.
 * 10. Ending a context removes it from the engine and sends one release to
 *     every worker it exchanged tensors with (except the one the release
 *     came from); a release for an unknown context is ignored, so the
 *     flood terminates. A pass holds its own reference, so a late
 *     acknowledgement after the context ended is harmless.
 * 11. A recv node reached by a local pass (td_backward / td_grad, not a
 *     distributed backward) does nothing: gradients cross workers only in
 *     td_dist_backward. With td_grad on received tensors (an inner loop on
 *     a worker) the gradient is captured at the recv node's edge as usual.
 * 12. After the sink summed a leaf's gradient into the context (6), the
 *     leaf's post-accumulate hooks run on the same thread, outside the
 *     context's lock, with td_dist_autograd_accumulating() naming the
 *     context; a hook's error fails the pass. Elsewhere it names none.
 *
 * Threads: all functions are thread-safe; the wire's callbacks may be
 * called from any thread. */
#ifndef TD_RUNTIME_DIST_AUTOGRAD_H
#define TD_RUNTIME_DIST_AUTOGRAD_H

#include <stddef.h>
#include <stdint.h>

#include <todist/dist_autograd.h>
#include <todist/autograd.h>
#include "runtime/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_dist_engine td_dist_engine_t;

/* How a propagate ended: TD_OK, or the error and its message ("Error on
 * rank N: ..."; MSG may be NULL with TD_OK). */
typedef void (*td_dist_reply_fn)(void *arg, td_status_t status,
                                 const char *msg);

typedef struct {
    /* Ship GRADS[N] (NULL entries are zeros; retain what you keep) for
     * message MSG_ID of context CTX_ID to rank DST; call DONE exactly once
     * (on any thread, possibly before this returns) with the remote reply
     * or the failure. A nonzero return means DONE will not be called. */
    td_status_t (*propagate)(void *arg, int dst, int64_t ctx_id,
                             int64_t msg_id, td_tensor_t *const *grads, int n,
                             int retain_graph, td_dist_reply_fn done,
                             void *done_arg);
    /* Tell rank DST to release CTX_ID (best effort, no reply). */
    void        (*release)(void *arg, int dst, int64_t ctx_id);
    void        *arg;
} td_dist_wire_t;

/* An engine for worker RANK (0 <= rank < 2^15). WIRE is copied; NULL makes
 * a local-only engine (sending to another worker is then TD_ERR_STATE). */
td_status_t td__dist_engine_create(int rank, const td_dist_wire_t *wire,
                                  td_dist_engine_t **engine_p);
/* Ends every context still open (no release messages) and frees. */
void        td__dist_engine_destroy(td_dist_engine_t *engine);
int         td__dist_engine_rank(const td_dist_engine_t *engine);
/* The engine the public API uses when the thread has none bound (NULL:
 * a local-only engine for rank td_world()'s rank, or 0, made on demand). */
void        td__dist_engine_set_default(td_dist_engine_t *engine);
/* The engine the public API uses on a thread with none bound. */
td_dist_engine_t *td__dist_engine_default(void);
/* Bind the calling thread to ENGINE (NULL: back to the default). Tests run
 * several engines in one process this way; RPC handler threads do not need
 * it. */
void        td__dist_engine_bind(td_dist_engine_t *engine);
/* Per-engine backward timeout in seconds (<= 0: td_dist_backward_timeout). */
void        td__dist_engine_set_timeout(td_dist_engine_t *engine, double s);

/* Make CTX_ID current on this thread for a handler (saving the previous
 * state in *SAVED) and restore it afterwards. */
typedef struct {
    td_dist_engine_t *engine;
    int64_t           ctx_id;
} td_dist_scope_t;
td_status_t td__dist_engine_enter(td_dist_engine_t *engine, int64_t ctx_id,
                                 td_dist_scope_t *saved);
void        td__dist_engine_leave(const td_dist_scope_t *saved);
/* Set the calling thread's current context (TD_DIST_NO_CONTEXT clears);
 * returns the previous one. RPC calls this around handlers. */
int64_t     td__dist_set_current(int64_t ctx_id);

/* Distributed autograd over RPC (runtime/dist_autograd/dist_autograd_rpc.c): the
 * runtime module that plugs the engine into RPC (hooks, internal
 * functions) and makes this worker's engine at td_init. */
extern const td_runtime_module_t td_dist_autograd_module;
/* The optimizer over remote references (runtime/dist_autograd/dist_optim_remote.c):
 * its internal functions, so any worker may own parameters. */
extern const td_runtime_module_t td_dist_optim_module;
extern const td_runtime_module_t td_remote_module_module;  /* remote_module.c */

/* Ids of contexts and messages: rank << 48 | counter, counter >= 1. */
#define TD_DIST_RANK_MAX     ((1 << 15) - 1)
#define TD_DIST_COUNTER_MASK ((INT64_C(1) << 48) - 1)
#define TD_DIST_GRADS_MAX    1024     /* tensors of one message */

static inline int
td_dist_id_valid(int64_t id)
{
    return id > 0 && (id >> 48) <= TD_DIST_RANK_MAX &&
           (id & TD_DIST_COUNTER_MASK) != 0;
}

/* Sender side: record a send node for TS[N] going to DST in CTX_ID.
 * *MSG_ID_P gets the autograd message id, or 0 when nothing was recorded
 * (no tensor requires grad, or CTX_ID is TD_DIST_NO_CONTEXT). */
td_status_t td__dist_on_send(td_dist_engine_t *engine, int64_t ctx_id, int dst,
                            td_tensor_t *const *ts, int n, int64_t *msg_id_p);
/* Receiver side: attach a recv node to the TS[i] with REQUIRES_GRAD[i]
 * set (received tensors: leaves without history). Creates the context
 * here if this worker has not seen it. */
td_status_t td__dist_on_recv(td_dist_engine_t *engine, int64_t ctx_id, int src,
                            int64_t msg_id, td_tensor_t *const *ts,
                            const uint8_t *requires_grad, int n);
/* A propagate message from SRC: runs the send node MSG_ID of CTX_ID with
 * GRADS[N]; REPLY fires once when done (possibly before this returns). A
 * nonzero return means REPLY was called with that error already. */
td_status_t td__dist_on_propagate(td_dist_engine_t *engine, int src,
                                 int64_t ctx_id, int64_t msg_id,
                                 td_tensor_t *const *grads, int n,
                                 int retain_graph, td_dist_reply_fn reply,
                                 void *reply_arg);
void        td__dist_on_release(td_dist_engine_t *engine, int src,
                               int64_t ctx_id);
void        td__dist_peer_failed(td_dist_engine_t *engine, int rank);

/* Introspection (tests, td_finalize's join). */
size_t      td__dist_engine_n_contexts(td_dist_engine_t *engine);
size_t      td__dist_engine_outstanding(td_dist_engine_t *engine);
/* Numbers about one context on this engine. */
typedef struct {
    int n_send, n_recv, n_grads;
    int n_known;
    int known[64];           /* first 64 known workers, ascending */
    int graph_used;
} td_dist_context_info_t;
td_status_t td__dist_context_info(td_dist_engine_t *engine, int64_t ctx_id,
                                 td_dist_context_info_t *info_p);
/* Borrowed send / recv node of CTX_ID by message id (NULL if none). */
td_node_t  *td__dist_context_send_node(td_dist_engine_t *engine, int64_t ctx_id,
                                      int64_t msg_id);

#ifdef __cplusplus
}
#endif
#endif /* TD_RUNTIME_DIST_AUTOGRAD_H */
