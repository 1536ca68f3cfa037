/* todist/autograd.h: the local reverse-mode autograd engine.
 *
 * A graph node (td_node_t) is defined outside the engine: a backward
 * callback, its own state, a number of gradient inputs (one per forward
 * output) and next edges (one per differentiable forward input). Ops build
 * their nodes with the same public calls another module uses to build,
 * say, distributed autograd's send and recv nodes.
 *
 * td_autograd_run() runs one backward pass ("graph task") from given roots:
 * tensors with their gradients, and extra root nodes with their incoming
 * gradients (send nodes). Leaf gradients go to .grad, or to a caller's sink.
 *
 * Invariants of the engine (runtime/tensor/autograd.c keeps them):
 *  1. Dependencies are counted at backward time, by walking next edges
 *     from every root (tensor roots and extra root nodes) over the nodes
 *     reachable from them; nothing is counted at forward time.
 *  2. A node runs exactly once per pass, only after every reachable
 *     producer of its inputs has run (its count reached zero).
 *  3. Gradients arriving at the same input slot of a node are summed before
 *     the node runs; a NULL gradient means zero and is never materialised.
 *  4. A leaf's gradient is delivered in exactly one place: its accumulate
 *     node, which adds into .grad (under the leaf's lock) or hands the
 *     summed gradient to the sink, once per pass.
 *  5. All state of a pass (counts, input buffers, the ready queue) belongs
 *     to that pass; nodes are shared, immutable during backward except for
 *     saved tensors released under the node's lock. So independent passes
 *     may run in parallel threads, even over a shared graph with
 *     retain_graph.
 *  6. Without retain_graph, a node releases its saved tensors after it
 *     ran; running it again is a TD_ERR_STATE error naming the node.
 *  7. Saved tensors record the storage version when saved; unpacking one
 *     whose version moved is a TD_ERR_STATE error, never a wrong answer.
 *  8. Backward functions run with grad mode = create_graph, so with
 *     create_graph they build a differentiable graph of the gradient
 *     (higher-order gradients); without it they record nothing.
 *  9. With inputs (td_grad), only nodes on a path to an input run, leaves
 *     are not touched, and the gradient flowing into each input's edge is
 *     returned.
 * 10. On error the pass stops, drops its buffers, and returns the first
 *     error; .grad of leaves already accumulated stays as it is.
 *
 * Threads: everything here is thread-safe; grad mode is per thread. */
#ifndef TODIST_AUTOGRAD_H
#define TODIST_AUTOGRAD_H

#include <stdint.h>
#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_node td_node_t;

/* Where a gradient goes: input slot INPUT_NR of NODE (NULL: nowhere). */
typedef struct {
    td_node_t *node;
    uint32_t   input_nr;
} td_edge_t;

typedef struct {
    const char *name;  /* "MulBackward", "SendRpcBackward": used in errors */
    /* GRADS_IN[n_inputs] (NULL entries are zeros); set GRADS_OUT[n_next]
     * to new references (NULL for no gradient). Runs with grad mode set to
     * the pass's create_graph. */
    td_status_t (*backward)(td_node_t *node, td_tensor_t *const *grads_in,
                            td_tensor_t **grads_out);
    /* Drop saved tensors (after a pass without retain_graph); may be NULL. */
    void (*release_saved)(td_node_t *node);
    /* Free the state when the node dies; may be NULL. */
    void (*destroy)(void *state);
} td_node_ops_t;

/* A node with N_INPUTS gradient slots and N_NEXT next edges (retained;
 * edges with a NULL node are allowed). STATE belongs to the node. */
td_status_t td_node_create(const td_node_ops_t *ops, void *state,
                           int n_inputs, const td_edge_t *next, int n_next,
                           td_node_t **out);
td_node_t  *td_node_retain(td_node_t *node);
void        td_node_release(td_node_t *node);
void       *td_node_state(const td_node_t *node);
const char *td_node_name(const td_node_t *node);
int         td_node_n_inputs(const td_node_t *node);
int         td_node_n_next(const td_node_t *node);
td_edge_t   td_node_next(const td_node_t *node, int i);  /* borrowed */
/* Monotonic creation number (later nodes have larger numbers). */
uint64_t    td_node_sequence(const td_node_t *node);

/* The edge a tensor's gradient flows into: (grad_fn, output_nr) for a
 * non-leaf, the leaf's accumulate node for a leaf that requires grad
 * (created on first use), {NULL, 0} otherwise. The node is borrowed: it
 * lives as long as T (or the graph holding it). */
td_edge_t   td_tensor_gradient_edge(td_tensor_t *t);
td_node_t  *td_tensor_grad_fn(const td_tensor_t *t);   /* borrowed */
/* Make T the INPUT_NR-th output of NODE (T becomes a non-leaf that
 * requires grad). Used by ops and by modules that build their own nodes
 * (recv nodes). */
td_status_t td_tensor_set_grad_fn(td_tensor_t *t, td_node_t *node,
                                  uint32_t input_nr);
/* The leaf tensor an accumulate node delivers to (NULL for other nodes). */
td_tensor_t *td_node_leaf(const td_node_t *node);

/* Saved tensors: a reference plus the version at save time. */
typedef struct {
    td_tensor_t *tensor;
    uint64_t     version;
} td_saved_t;

void        td_saved_init(td_saved_t *saved, td_tensor_t *t); /* retains */
/* Borrowed tensor, or TD_ERR_STATE if modified in place since saved or
 * already released; NODE names the op in the message. */
td_status_t td_saved_unpack(const td_saved_t *saved, const td_node_t *node,
                            td_tensor_t **t_p);
void        td_saved_release(td_saved_t *saved);

/* Grad mode (per thread, on by default). Returns the previous mode. */
int td_grad_enabled(void);
int td_grad_set_enabled(int enabled);

/* Hooks. A tensor hook sees the gradient flowing into T before it is used
 * (for a leaf: before accumulation) and may replace it: set *NEW_GRAD to a
 * new reference, or leave it NULL to keep GRAD. */
typedef td_status_t (*td_tensor_hook_fn)(void *arg, td_tensor_t *grad,
                                         td_tensor_t **new_grad);
td_status_t td_tensor_register_hook(td_tensor_t *t, td_tensor_hook_fn fn,
                                    void *arg);
/* Runs after LEAF's .grad was accumulated (data parallelism starts its
 * allreduce here). When a sink receives the gradient instead, the engine
 * does not run them; the sink may (td_tensor_run_post_accumulate_hooks):
 * distributed autograd does, after adding into its context, as PyTorch's
 * DistAccumulateGradCaptureHook runs AccumulateGrad's post hooks. */
typedef td_status_t (*td_post_accumulate_fn)(void *arg, td_tensor_t *leaf);
td_status_t td_tensor_register_post_accumulate_hook(td_tensor_t *leaf,
                                                    td_post_accumulate_fn fn,
                                                    void *arg);
/* Run LEAF's post-accumulate hooks in registration order; the first error
 * stops them and is returned. */
td_status_t td_tensor_run_post_accumulate_hooks(td_tensor_t *leaf);
/* Remove the hook registered with FN and ARG (TD_ERR_NOT_FOUND if none).
 * Not while a backward pass may run it. */
td_status_t td_tensor_remove_post_accumulate_hook(td_tensor_t *leaf,
                                                  td_post_accumulate_fn fn,
                                                  void *arg);

/* Receives a leaf's summed gradient instead of .grad (distributed autograd
 * accumulates into its context). GRAD is borrowed; retain to keep it. */
typedef td_status_t (*td_grad_sink_fn)(void *arg, td_tensor_t *leaf,
                                       td_tensor_t *grad);

typedef struct {
    /* Tensor roots and their gradients (a NULL gradient means 1 and is
     * allowed only for a one-element root). */
    td_tensor_t *const *roots;
    td_tensor_t *const *root_grads;
    int                 n_roots;
    /* Extra root nodes (send nodes): node i receives
     * extra_root_grads[i][0..n_inputs-1] (NULL entries are zeros). */
    td_node_t *const          *extra_roots;
    td_tensor_t *const *const *extra_root_grads;
    int                        n_extra_roots;
    int retain_graph;
    int create_graph;
    /* td_grad mode: when n_inputs > 0, input_grads[i] receives a new
     * reference to the gradient of inputs[i] (NULL only if allow_unused). */
    td_tensor_t *const *inputs;
    int                 n_inputs;
    td_tensor_t       **input_grads;
    int                 allow_unused;
    /* Leaf sink; NULL accumulates into .grad. */
    td_grad_sink_fn sink;
    void           *sink_arg;
} td_backward_opts_t;

td_status_t td_autograd_run(const td_backward_opts_t *opts);

/* torch.autograd.backward: GRADS may be NULL (all roots scalar). */
td_status_t td_backward(td_tensor_t *const *roots, td_tensor_t *const *grads,
                        int n, int retain_graph, int create_graph);
/* torch.autograd.grad: GRADS_OUT[n_inputs] get new references. */
td_status_t td_grad(td_tensor_t *const *outputs,
                    td_tensor_t *const *grad_outputs, int n_outputs,
                    td_tensor_t *const *inputs, int n_inputs,
                    int retain_graph, int create_graph, int allow_unused,
                    td_tensor_t **grads_out);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_AUTOGRAD_H */
