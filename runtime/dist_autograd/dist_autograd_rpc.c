/* runtime/dist_autograd/dist_autograd_rpc.c: distributed autograd over RPC, the
 * engine's adapter. A runtime module (td_dist_autograd_module, after RPC
 * and rref in runtime/modules.c) whose attach plugs into RPC like remote
 * references do (td__rpc_plug: record send/recv nodes, the current context
 * on handler threads) and registers the engine's propagate and release
 * messages as the internal functions "_td.dist.propagate" (header codec:
 * dist_wire.c) and "_td.dist.release"; its setup makes the engine of this
 * worker at td_init.
 *
 * The propagate handler is async (td_rpc_register_async): it runs the
 * local part of its pass on an RPC pool thread and hands back a future the
 * engine completes when the pass and everything it started are done, so a
 * backward that goes back and forth between workers N times holds no
 * handler thread while it waits (tested at 1,000 bounces under
 * TODIST_RPC_THREADS=1). */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist_autograd/dist_internal.h"
#include "runtime/dist_autograd/dist_wire.h"
#include "runtime/rpc/rpc_internal.h"
#include "runtime/rpc/pool.h"
#include "runtime/runtime.h"

#define PROPAGATE_FN "_td.dist.propagate"
#define RELEASE_FN   "_td.dist.release"

static td_dist_engine_t *engine;     /* between setup and shutdown */

/* ---- the wire: engine -> RPC -------------------------------------------- */

typedef struct {
    td_dist_reply_fn done;
    void            *done_arg;
    int              dst;
} call_t;

/* RPC wraps a handler's error as "Error on rank N (workerN): TEXT"; when
 * TEXT carries the engine's own tag (the rank where the failure happened),
 * keep only that. */
static const char *
innermost(const char *msg)
{
    const char *colon;

    while (msg != NULL && strncmp(msg, "Error on rank ", 14) == 0 &&
           (colon = strchr(msg, ':')) != NULL &&
           strncmp(colon, ": Error on rank ", 16) == 0) {
        msg = colon + 2;
    }
    return msg;
}

static void
propagate_done(void *arg, td_future_t *fut)
{
    call_t *c = arg;
    td_status_t status = td_future_status(fut);

    c->done(c->done_arg, status,
            status == TD_OK ? NULL : innermost(td_future_error(fut)));
    td_future_release(fut);
    free(c);
}

static td_status_t
wire_propagate(void *arg, int dst, int64_t ctx_id, int64_t msg_id,
               td_tensor_t *const *grads, int n, int retain_graph,
               td_dist_reply_fn done, void *done_arg)
{
    td_dist_propagate_hdr_t h;
    uint8_t hdr[20 + TD_DIST_GRADS_MAX / 8];
    td_rpc_list_t *list = NULL;
    td_future_t *fut = NULL;
    td_status_t status;
    size_t len;
    call_t *c;

    (void)arg;
    memset(&h, 0, sizeof(h));
    h.ctx_id = ctx_id;
    h.msg_id = msg_id;
    h.retain_graph = retain_graph;
    h.n = n;
    for (int i = 0; i < n && i < TD_DIST_GRADS_MAX; i++) {
        if (grads[i] != NULL) {
            h.present[i / 8] |= (uint8_t)(1u << (i % 8));
        }
    }
    status = td__dist_propagate_hdr_encode(&h, hdr, sizeof(hdr), &len);
    if (status != TD_OK) {
        return status;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "dist_autograd: out of memory");
    }
    c->done = done;
    c->done_arg = done_arg;
    c->dst = dst;
    status = td_rpc_list_create(&list);
    if (status == TD_OK) {
        status = td_rpc_list_add_bytes(list, hdr, len);
    }
    for (int i = 0; i < n && status == TD_OK; i++) {
        if (grads[i] != NULL) {
            status = td_rpc_list_add_tensor(list, grads[i]);
        }
    }
    if (status == TD_OK) {
        status = td_rpc_async(dst, PROPAGATE_FN, list, TD_RPC_DEFAULT_TIMEOUT,
                              &fut);
    }
    td_rpc_list_free(list);
    if (status != TD_OK) {
        free(c);
        return status;
    }
    /* runs at once when the future is done already (the engine allows
     * DONE before this returns) */
    status = td_future_then(fut, propagate_done, c);
    if (status != TD_OK) {
        td_future_release(fut);
        free(c);
    }
    return status;
}

static void
release_done(void *arg, td_future_t *fut)
{
    (void)arg;
    td_future_release(fut);
}

static void
wire_release(void *arg, int dst, int64_t ctx_id)
{
    td_rpc_list_t *list = NULL;
    td_future_t *fut = NULL;

    (void)arg;
    if (td_rpc_list_create(&list) == TD_OK &&
        td_rpc_list_add_int(list, ctx_id) == TD_OK &&
        td_rpc_async(dst, RELEASE_FN, list, TD_RPC_DEFAULT_TIMEOUT,
                     &fut) == TD_OK) {
        td_future_then(fut, release_done, NULL);   /* best effort */
    }
    td_rpc_list_free(list);
}

/* ---- handlers: RPC -> engine -------------------------------------------- */

/* The engine's answer to one propagate: complete the future RPC answers
 * the caller with (the handler is async, R9 of rpc.c). */
static void
handler_reply(void *arg, td_status_t status, const char *msg)
{
    td_future_t *fut = arg;

    if (status == TD_OK) {
        td_future_complete(fut, NULL);
    } else {
        td_future_fail(fut, status, "%s", msg != NULL ? msg : "");
    }
    td_future_release(fut);
}

/* Async: the pass runs its local part here and sends its own propagates;
 * the answer goes when they are all acknowledged, and no pool thread
 * waits for that, so a backward bouncing between workers any number of
 * times holds no handler threads. */
static td_status_t
propagate_handler(void *arg, const td_rpc_call_info_t *info,
                  const td_rpc_list_t *args, td_future_t **fut_p)
{
    td_tensor_t *grads[TD_DIST_GRADS_MAX] = {0};
    td_dist_propagate_hdr_t h;
    td_future_t *fut = NULL;
    const void *hdr;
    size_t len, k = 1;
    td_status_t status;

    (void)arg;
    if (engine == NULL) {
        return td_error(TD_ERR_STATE, "dist_autograd: not running");
    }
    status = td_rpc_list_bytes(args, 0, &hdr, &len);
    if (status == TD_OK) {
        status = td__dist_propagate_hdr_decode(hdr, len, info->caller, &h);
    }
    if (status != TD_OK) {
        return status;
    }
    for (int i = 0; i < h.n; i++) {
        if (h.present[i / 8] & (1u << (i % 8))) {
            status = td_rpc_list_tensor(args, k++, &grads[i]);
            if (status != TD_OK) {
                return td_error(TD_ERR_PROTOCOL, "dist_autograd: rank %d "
                                "marks gradient %d present but sent %zu "
                                "values", info->caller, i,
                                td_rpc_list_len(args));
            }
        }
    }
    if (k != td_rpc_list_len(args)) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: rank %d sent %zu "
                        "values for %zu present gradients", info->caller,
                        td_rpc_list_len(args), k - 1);
    }
    status = td_future_create(&fut);
    if (status != TD_OK) {
        return status;
    }
    /* one reference for the engine's answer, one handed to RPC; GRADS are
     * used only inside this call (the local part runs here) */
    td_future_retain(fut);
    td__dist_on_propagate(engine, info->caller, h.ctx_id, h.msg_id, grads,
                         h.n, h.retain_graph, handler_reply, fut);
    *fut_p = fut;
    return TD_OK;
}

static td_status_t
release_handler(void *arg, const td_rpc_call_info_t *info,
                const td_rpc_list_t *args, td_rpc_list_t *result)
{
    int64_t ctx_id;
    td_status_t status;

    (void)arg;
    (void)result;
    status = td_rpc_list_int(args, 0, &ctx_id);
    if (status != TD_OK) {
        return status;
    }
    if (engine != NULL) {
        td__dist_on_release(engine, info->caller, ctx_id);
    }
    return TD_OK;
}

/* ---- the RPC layer's hooks ------------------------------------------------ */

static uint64_t
hook_current(void *arg)
{
    int64_t id = td_dist_autograd_current();

    (void)arg;
    return id == TD_DIST_NO_CONTEXT ? 0 : (uint64_t)id;
}

static uint64_t
hook_set_context(void *arg, uint64_t ctx_id)
{
    (void)arg;
    int64_t prev = td__dist_set_current(ctx_id == 0 ? TD_DIST_NO_CONTEXT
                                                   : (int64_t)ctx_id);

    return prev == TD_DIST_NO_CONTEXT ? 0 : (uint64_t)prev;
}

/* The tensors of LIST (at most MAX), and their requires_grad bits. */
static int
list_tensors(const td_rpc_list_t *list, td_tensor_t **ts, uint8_t *rg,
             int max)
{
    int n = 0;

    for (size_t i = 0; i < td_rpc_list_len(list) && n < max; i++) {
        if (td_rpc_list_kind(list, i) == TD_VALUE_TENSOR &&
            td_rpc_list_tensor(list, i, &ts[n]) == TD_OK) {
            rg[n] = (uint8_t)td_tensor_requires_grad(ts[n]);
            n++;
        }
    }
    return n;
}

static td_status_t
hook_on_send(void *arg, uint64_t ctx_id, int dst, const td_rpc_list_t *list,
             uint64_t *msg_id_p)
{
    td_tensor_t *ts[TD_DIST_GRADS_MAX];
    uint8_t rg[TD_DIST_GRADS_MAX];
    td_dist_engine_t *e = engine;
    int64_t msg_id = 0;
    td_status_t status;
    int n;

    (void)arg;
    if (td_rpc_list_len(list) > TD_DIST_GRADS_MAX) {
        return td_error(TD_ERR_RANGE, "dist_autograd: a message with %zu "
                        "values (at most %d in a context)",
                        td_rpc_list_len(list), TD_DIST_GRADS_MAX);
    }
    if (e == NULL) {
        return td_error(TD_ERR_STATE, "dist_autograd: not running");
    }
    n = list_tensors(list, ts, rg, TD_DIST_GRADS_MAX);
    status = td__dist_on_send(e, (int64_t)ctx_id, dst, ts, n, &msg_id);
    if (status == TD_OK) {
        *msg_id_p = (uint64_t)msg_id;
    }
    return status;
}

static td_status_t
hook_on_recv(void *arg, uint64_t ctx_id, uint64_t msg_id, int src,
             td_rpc_list_t *list)
{
    td_tensor_t *ts[TD_DIST_GRADS_MAX];
    uint8_t rg[TD_DIST_GRADS_MAX];
    int n;

    (void)arg;
    if (engine == NULL) {
        return td_error(TD_ERR_STATE, "dist_autograd: not running");
    }
    if (td_rpc_list_len(list) > TD_DIST_GRADS_MAX) {
        return td_error(TD_ERR_PROTOCOL, "dist_autograd: rank %d sent %zu "
                        "values in context %llu (at most %d)", src,
                        td_rpc_list_len(list), (unsigned long long)ctx_id,
                        TD_DIST_GRADS_MAX);
    }
    n = list_tensors(list, ts, rg, TD_DIST_GRADS_MAX);
    if (n == 0 || msg_id == 0) {
        return TD_OK;     /* nothing requires grad: nothing to record */
    }
    /* the received tensors are fresh leaves: attach them in place */
    return td__dist_on_recv(engine, (int64_t)ctx_id, src, (int64_t)msg_id, ts,
                           rg, n);
}

/* ---- the runtime module ---------------------------------------------------- */

static td_status_t
module_setup(void *arg, td_transport_t *tp, const td_world_t *w)
{
    td_dist_wire_t wire = {wire_propagate, wire_release, NULL};
    td_status_t status;

    (void)arg;
    (void)tp;
    status = td__dist_engine_create(w->rank, &wire, &engine);
    if (status == TD_OK) {
        td__dist_engine_set_default(engine);
    }
    return status;
}

static size_t
module_outstanding(void *arg)
{
    (void)arg;
    return engine != NULL ? td__dist_engine_outstanding(engine) : 0;
}

static void
module_peer_failed(void *arg, int rank, td_status_t why)
{
    (void)arg;
    (void)why;
    if (engine != NULL) {
        td__dist_peer_failed(engine, rank);
    }
}

static void
module_shutdown(void *arg)
{
    td_dist_engine_t *e = engine;

    (void)arg;
    engine = NULL;
    td__dist_engine_set_default(NULL);
    td__dist_engine_destroy(e);
}

/* Before td_init publishes the address: the internal functions, and the
 * hooks through which RPC records send and recv nodes. */
static td_status_t
module_attach(void *arg)
{
    td_rpc_plugin_t p;
    td_status_t status;

    (void)arg;
    memset(&p, 0, sizeof(p));
    p.name = "dist_autograd";
    p.current_context = hook_current;
    p.set_context = hook_set_context;
    p.on_send = hook_on_send;
    p.on_recv = hook_on_recv;
    if ((status = td_rpc_register_async(PROPAGATE_FN, propagate_handler,
                                  NULL)) != TD_OK ||
        (status = td_rpc_register(RELEASE_FN, release_handler,
                                  NULL)) != TD_OK) {
        return status;
    }
    return td__rpc_plug(&p);
}

const td_runtime_module_t td_dist_autograd_module = {
    .name = "dist_autograd",
    .attach = module_attach,
    .setup = module_setup,
    .outstanding = module_outstanding,
    .peer_failed = module_peer_failed,
    .shutdown = module_shutdown,
};
