/* runtime/rpc/rpc_internal.h: what other runtime modules (rref, mapreduce,
 * dist_autograd, dist_optim) get from RPC beyond todist/rpc.h (internal,
 * not installed).
 *
 * Layers that ride on RPC's messages plug in the same way: a runtime
 * module (runtime/modules.c) whose attach calls td__rpc_plug with one
 * td_rpc_plugin_t, filling only the hooks it needs:
 *   - message types: remote references own TD_RPC_MSG_REMOTE..RREF_ACK;
 *     handle() runs them on a pool thread and may answer later through a
 *     future, as an async handler does (R9), wants_reply() says which
 *     expect an answer; tick() runs on RPC's timer thread every 10 ms
 *     (expiring what a plug-in keeps waiting);
 *   - values: rref_out() / rref_in() carry a td_rref_t in a value list
 *     across the wire (rpc_wire.h), rref_retain() / rref_release() let
 *     lists hold one (rpc_list.h);
 *   - autograd: every message header carries an autograd context id and
 *     message id (td_rpc_wire_meta_t);
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
 * Each of the three kinds has at most one provider; the life cycle
 * (setup, peer_failed, shutdown) is the plug-in's own runtime module's.
 * Internal functions (propagate gradients, release a context, the
 * barrier) are plain registered functions whose names start with "_td.".
 *
 * Thread safety: as in todist/rpc.h; td__rpc_plug before td_init. */
#ifndef TD_RUNTIME_RPC_INTERNAL_H
#define TD_RUNTIME_RPC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <todist/rpc.h>
#include <todist/tensor.h>
#include "runtime/runtime.h"
#include "runtime/rpc/rpc_list.h"
#include "runtime/rpc/rpc_wire.h"
#include "runtime/rpc/future.h"
#include "runtime/rpc/drive.h"

/* ---- plug-ins ------------------------------------------------------------ */

typedef struct {
    const char *name;                  /* "rref", "dist_autograd" */
    /* Message types served: bit t for type t (TD_RPC_MSG_REMOTE and up).
     * HANDLE runs on a pool thread with the header's function id field;
     * RESULT goes back when WANTS_REPLY(type) (NULL: always) - unless
     * HANDLE returns TD_OK with a future in *FUT_P (the reference passes
     * to RPC): the answer is then that future's value or error, sent when
     * it completes, and no pool thread waits for it (R9). */
    uint32_t      types;
    td_status_t (*handle)(void *arg, int type, int src, uint64_t field,
                          td_rpc_list_t *args, td_rpc_list_t *result,
                          td_future_t **fut_p);
    int         (*wants_reply)(void *arg, int type);
    /* Optional: every RPC_TIMER_TICK_S on RPC's timer thread while RPC
     * runs, NOW = td_now_s(); must not block (complete futures there with
     * td__future_fail_async: callbacks go to the pool). */
    void        (*tick)(void *arg, double now);
    /* Remote references in value lists (all four or none): encode for a
     * destination, decode from a source, and how lists hold them. */
    td_rpc_wire_rref_out_fn rref_out;
    td_rpc_wire_rref_in_fn  rref_in;
    td_rref_t *(*rref_retain)(td_rref_t *rref);
    void       (*rref_release)(td_rref_t *rref);
    /* Autograd (all four or none). */
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
} td_rpc_plugin_t;

/* Plug PLUGIN (copied) in; the same name again replaces it. TD_ERR_EXISTS
 * when another plug-in provides one of its hooks or types already,
 * TD_ERR_INVALID for a half-filled kind, TD_ERR_STATE while RPC runs. */
td_status_t td__rpc_plug(const td_rpc_plugin_t *plugin);

/* RPC's runtime module: first in the table (runtime/modules.c). */
extern const td_runtime_module_t td_rpc_module;

/* ---- for the plug-ins ------------------------------------------------------ */

/* Send a message of TYPE (a td_rpc_msg_type_t) to DST. FUNCTION_ID is the
 * wire field (function id, or rref id for rref messages). With FUT_P a
 * reply is expected and *FUT_P receives the future; NAME (may be NULL)
 * names the call in errors. */
td_status_t td__rpc_send_typed(int dst, int type, uint64_t function_id,
                              const char *name, const td_rpc_list_t *args,
                              double timeout, td_future_t **fut_p);

/* Run a registered function locally (the owner of an rref runs the
 * creating call and method calls this way): a plain one fills RESULT and
 * sets *FUT_P to NULL; an async one (td_rpc_register_async) hands back its
 * future in *FUT_P (the caller owns the reference) and leaves RESULT
 * alone, so nothing waits for it here. */
td_status_t td__rpc_run_local(uint64_t function_id, int caller,
                             const td_rpc_list_t *args, td_rpc_list_t *result,
                             td_future_t **fut_p);

/* The calling thread's autograd context through the autograd plug-in (0:
 * none, or no plug-in), and setting it (returns the previous one): a
 * message answered later runs its function in the context it came with. */
uint64_t td__rpc_context_current(void);
uint64_t td__rpc_context_swap(uint64_t ctx);

/* Error text for a remote failure: "Error on rank N (workerN): MSG". */
void td__rpc_format_remote_error(char *buf, size_t len, int rank,
                                const char *msg);

#endif /* TD_RUNTIME_RPC_INTERNAL_H */
