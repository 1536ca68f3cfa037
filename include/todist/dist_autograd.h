/* todist/dist_autograd.h: distributed autograd (PyTorch's FAST mode).
 *
 * A context groups one forward and backward pass that crosses workers.
 * Inside a context, every message that carries tensors requiring grad
 * (a remote call's arguments, its result, a remote object's value) is
 * recorded: the sender gets a send node whose next edges are those
 * tensors' gradient edges (a leaf parameter stays in the graph through its
 * accumulate node), the receiver a recv node that becomes the grad_fn of
 * the received tensors and remembers the sender and the message id.
 * td_dist_backward() runs the local graph from the roots; a recv node that
 * receives gradients ships them to its sender, which runs the matching send
 * node as a root, and so on. Gradients of leaves accumulate in the context
 * (never in .grad) on the worker that owns the leaf; after each such sum
 * the leaf's post-accumulate hooks run, and td_dist_autograd_accumulating()
 * names the context to them (DDP reduces context gradients this way).
 *
 * Context ids are (worker_id << 48) | counter, counter starting at 1, so
 * they are unique across the job and never TD_DIST_NO_CONTEXT.
 *
 * Unused sends (documented difference from PyTorch): PyTorch counts every
 * send node of a context as a dependency of the backward pass, so a remote
 * result that does not contribute to the loss leaves a send node that
 * never receives a gradient and the backward hangs. todist never waits for
 * a send node: every gradient message runs its own local pass (roots: that
 * send node), and a pass ends when its local work is done and every
 * gradient message it sent has been acknowledged, recursively. A send node
 * that receives nothing simply contributes nothing (its inputs get no
 * gradient from it) and the backward ends normally. Gradients are linear
 * in the incoming gradient, so a node reached by several passes sums its
 * contributions exactly as a single pass would.
 *
 * Errors: a failure on another worker ends the backward on the caller with
 * TD_ERR_REMOTE and the message "Error on rank N: ..." (N the worker where
 * it happened); a worker that dies while gradients are outstanding ends it
 * with TD_ERR_PEER, and one that does not answer within the timeout with
 * TD_ERR_TIMEOUT naming the ranks. Backward never hangs.
 *
 * Threads: every function is thread-safe. The current context is per
 * thread; several threads may each run their own context at once. A thread
 * has at most one current context: begin inside a context is rejected. */
#ifndef TODIST_DIST_AUTOGRAD_H
#define TODIST_DIST_AUTOGRAD_H

#include <stdint.h>
#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_DIST_NO_CONTEXT ((int64_t)-1)

/* Create a context and make it the calling thread's current one. */
td_status_t td_dist_autograd_begin(int64_t *ctx_id_p);
/* Leave CTX_ID (must be the current one): its state is released here and
 * on every worker it touched (who pass it on to the workers they touched). */
td_status_t td_dist_autograd_end(int64_t ctx_id);
/* The calling thread's current context, TD_DIST_NO_CONTEXT if none. */
int64_t     td_dist_autograd_current(void);

/* Scoped form: the block runs inside a fresh context, ended on leaving the
 * block normally (do not `break`/`return` out of it; use a flag).
 *     TD_DIST_AUTOGRAD_CONTEXT(ctx) { ... td_dist_backward(ctx, ...); } */
#define TD_DIST_AUTOGRAD_CONTEXT(ctx)                                      \
    for (int64_t ctx = TD_DIST_NO_CONTEXT, ctx##_once_ =                     \
             (td_dist_autograd_begin(&ctx) == TD_OK);                      \
         ctx##_once_; ctx##_once_ = 0, td_dist_autograd_end(ctx))

/* Distributed backward from ROOTS[N] (one-element tensors; their gradient
 * is 1). Returns when every worker involved has finished. With
 * RETAIN_GRAPH the graph may be run again and gradients accumulate;
 * without, a second backward in the same context is TD_ERR_STATE. */
td_status_t td_dist_backward(int64_t ctx_id, td_tensor_t *const *roots,
                             int n, int retain_graph);

/* The gradients accumulated in CTX_ID on this worker: *N_P pairs of
 * (leaf, gradient), new references in malloc'ed arrays the caller frees
 * with td_dist_gradients_free(). */
td_status_t td_dist_get_gradients(int64_t ctx_id, td_tensor_t ***leaves_p,
                                  td_tensor_t ***grads_p, int *n_p);
void        td_dist_gradients_free(td_tensor_t **leaves, td_tensor_t **grads,
                                   int n);
/* The gradient of one leaf in CTX_ID (a new reference), TD_ERR_NOT_FOUND
 * when none reached it. */
td_status_t td_dist_get_gradient(int64_t ctx_id, td_tensor_t *leaf,
                                 td_tensor_t **grad_p);

/* Replace (or add) the gradient of LEAF in CTX_ID on this worker with GRAD
 * (retained: the context takes a reference, so write no more into GRAD;
 * its dtype and shape must be the leaf's). Data parallelism writes the
 * averaged gradient back this way (PyTorch's runGradCallbackForVariable). */
td_status_t td_dist_set_gradient(int64_t ctx_id, td_tensor_t *leaf,
                                 td_tensor_t *grad);

/* Inside a leaf's post-accumulate hook (todist/autograd.h): the context
 * whose gradient of that leaf was just summed, when a distributed backward
 * delivers it (the gradient is then in the context, td_dist_get_gradient,
 * not in .grad); TD_DIST_NO_CONTEXT when a local backward accumulated
 * .grad, and anywhere outside such a hook. */
int64_t     td_dist_autograd_accumulating(void);

/* Backward from OUTPUTS[N_OUT] (retaining the graph), then the context's
 * gradients of the leaves INPUTS[N_IN] into GRADS_OUT (new references;
 * NULL for an input no gradient reached, allowed only with ALLOW_UNUSED). */
td_status_t td_dist_grad(int64_t ctx_id, td_tensor_t *const *outputs,
                         int n_out, td_tensor_t *const *inputs, int n_in,
                         int allow_unused, td_tensor_t **grads_out);
/* TorchOpt style: add the context's gradients of the leaves INPUTS[N] into
 * their .grad (inputs no gradient reached are left alone). */
td_status_t td_dist_accumulate_grad(int64_t ctx_id,
                                    td_tensor_t *const *inputs, int n);

/* Seconds a backward waits for other workers (default 60, env
 * TODIST_DIST_BACKWARD_TIMEOUT). */
double      td_dist_backward_timeout(void);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_DIST_AUTOGRAD_H */
