/* runtime/rpc/rpc_internal.h: what other runtime modules (rref, mapreduce,
 * dist_autograd) get from RPC beyond todist/rpc.h (internal, not installed).
 *
 * Distributed autograd hooks in here:
 *   - every message header carries an autograd context id and message id
 *     (td_rpc_wire_meta_t);
 *   - td_rpc_set_autograd_hooks() installs three callbacks:
 *       current_context() - the calling thread's context id (0: none);
 *       on_send()  - called on the sending thread, before encoding, when a
 *                    message (call or reply) carries at least one tensor that
 *                    requires grad and a context is current (for a reply: the
 *                    context of the call being answered). It records a send
 *                    node and returns the autograd message id to put in the
 *                    header;
 *       on_recv()  - called on a pool thread, before the handler runs or the
 *                    future completes, for a message whose header carries a
 *                    context id. It records a recv node and may replace the
 *                    list's tensors (td_rpc_list_set_tensor) with ones
 *                    attached to it; while the handler runs, the context is
 *                    current on that thread (set_context()).
 *   - internal functions (propagate gradients, release a context) are plain
 *     registered functions whose names start with "_td."; td_rpc_register
 *     accepts them before td_init like any other.
 *
 * Thread safety: as in todist/rpc.h; set the hooks before td_init. */
#ifndef TD_RUNTIME_RPC_INTERNAL_H
#define TD_RUNTIME_RPC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <todist/rpc.h>
#include <todist/tensor.h>

/* One item of a value list. */
typedef struct {
    td_value_kind_t kind;
    union {
        td_tensor_t *tensor;
        int64_t      i;
        double       d;
        struct {
            char   *data;    /* NUL-terminated copy, also for bytes */
            size_t  len;
        } bytes;
        td_rref_t   *rref;
    } u;
} td_value_t;

struct td_rpc_list {
    size_t      n;
    size_t      cap;
    td_value_t *items;
};

/* ---- distributed autograd hooks ---------------------------------------- */

typedef struct {
    uint64_t (*current_context)(void *arg);
    /* Set the calling thread's current context (0 clears); returns the
     * previous one. Used around handlers of messages with a context. */
    uint64_t (*set_context)(void *arg, uint64_t context_id);
    /* LIST's tensors that require grad go to DST inside CONTEXT_ID; record
     * the send node and set *MSG_ID_P. */
    td_status_t (*on_send)(void *arg, uint64_t context_id, int dst,
                           const td_rpc_list_t *list, uint64_t *msg_id_p);
    /* LIST came from SRC with CONTEXT_ID / MSG_ID; record the recv node and
     * replace the tensors that require grad in LIST. */
    td_status_t (*on_recv)(void *arg, uint64_t context_id, uint64_t msg_id,
                           int src, td_rpc_list_t *list);
    void *arg;
} td_rpc_autograd_hooks_t;

/* Install (or with NULL remove) the hooks. Before td_init. */
td_status_t td_rpc_set_autograd_hooks(const td_rpc_autograd_hooks_t *hooks);

/* true when LIST holds a tensor that requires grad. */
int td_rpc_list_requires_grad(const td_rpc_list_t *list);

/* ---- for the rref module ----------------------------------------------- */

/* Send a message of TYPE (a td_rpc_msg_type_t) to DST. FUNCTION_ID is the
 * wire field (function id, or rref id for rref messages). With FUT_P a
 * reply is expected and *FUT_P receives the future; NAME (may be NULL)
 * names the call in errors. */
td_status_t td_rpc_send_typed(int dst, int type, uint64_t function_id,
                              const char *name, const td_rpc_list_t *args,
                              double timeout, td_future_t **fut_p);

/* Handler of an rref message type on the owner or a user; runs on a pool
 * thread. RESULT is sent back when the message expected a reply. */
typedef td_status_t (*td_rpc_typed_fn)(void *arg, int src, uint64_t field,
                                       td_rpc_list_t *args,
                                       td_rpc_list_t *result);
td_status_t td_rpc_set_typed_handler(int type, td_rpc_typed_fn fn, void *arg);

/* Run a registered function locally (the owner of an rref runs the
 * creating call this way). */
td_status_t td_rpc_run_local(uint64_t function_id, int caller,
                             const td_rpc_list_t *args, td_rpc_list_t *result);

/* Error text for a remote failure: "Error on rank N (workerN): MSG". */
void td_rpc_format_remote_error(char *buf, size_t len, int rank,
                                const char *msg);

/* Completion of futures from the progress thread: set the value without
 * running callbacks there (they are handed to the pool). */
td_status_t td_future_complete_async(td_future_t *fut, td_rpc_list_t *value);
td_status_t td_future_fail_async(td_future_t *fut, td_status_t status,
                                 const char *msg);

/* Called by td_future_wait before it sleeps: drive the transport on this
 * thread while waiting on FUT, for at most TIMEOUT seconds (< 0: none; less
 * in blocking progress mode). TD_OK when FUT is done; TD_ERR_TIMEOUT (no
 * error text) when the caller should go on waiting by sleeping; another
 * error (with text) when this thread must not wait at all (an inline
 * handler, a transport callback). */
td_status_t td_rpc_drive(td_future_t *fut, double timeout);
/* The same for any condition: PRED(ARG) true ends it (make it an atomic
 * load; whoever makes it true calls td_rpc_notify_done after). */
td_status_t td_rpc_drive_until(int (*pred)(void *arg), void *arg,
                               double timeout);
/* Around a sleep of a handler-pool thread (a condition variable wait):
 * ON=1 before, 0 after. While cores are scarce the progress thread steps
 * aside for running jobs; a sleeping one must not count. No-op on other
 * threads. */
void td_rpc_blocking(int on);
/* A future was completed: wake a waiter asleep inside td_rpc_drive. */
void td_rpc_notify_done(void);

/* Hand FN(ARG) to the handler pool (or run it inline when no pool runs). */
td_status_t td_rpc_pool_post(void (*fn)(void *arg), void *arg);

#endif /* TD_RUNTIME_RPC_INTERNAL_H */
