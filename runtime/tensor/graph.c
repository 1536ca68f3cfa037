/* runtime/tensor/graph.c: recording the autograd graph: grad mode, node
 * creation, the leaves' accumulate nodes and gradient edges, recording an
 * op's node (td__autograd_record) and saved tensors. What the views and
 * the ops need; below them. Running the graph backward (hooks, leaf
 * accumulation, the engine) is autograd.c's, above the ops it calls to sum
 * gradients. The invariants (I1-I8) are listed in include/todist/autograd.h. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/tensor_internal.h"

static _Thread_local int grad_disabled;
static atomic_ullong next_sequence;

int
td_grad_enabled(void)
{
    return !grad_disabled;
}

int
td_grad_set_enabled(int enabled)
{
    int was = !grad_disabled;

    grad_disabled = !enabled;
    return was;
}

/* ---- nodes ----------------------------------------------------------- */

td_status_t
td_node_create(const td_node_ops_t *ops, void *state, int n_inputs,
               const td_edge_t *next, int n_next, td_node_t **out)
{
    td_node_t *node;

    if (ops == NULL || ops->backward == NULL || n_inputs < 0 || n_next < 0) {
        return td_error(TD_ERR_INVALID, "autograd: node needs ops with a "
                        "backward and n_inputs, n_next >= 0");
    }
    node = calloc(1, sizeof(*node));
    if (node == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
    }
    if (n_next > 0) {
        node->next = calloc((size_t)n_next, sizeof(td_edge_t));
        if (node->next == NULL) {
            free(node);
            return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
        }
    }
    atomic_init(&node->refcount, 1);
    atomic_init(&node->released, 0);
    pthread_mutex_init(&node->lock, NULL);
    node->ops = ops;
    node->state = state;
    node->n_inputs = n_inputs;
    node->n_next = n_next;
    node->sequence = atomic_fetch_add(&next_sequence, 1);
    for (int i = 0; i < n_next; i++) {
        node->next[i] = next[i];
        td_node_retain(next[i].node);
    }
    *out = node;
    return TD_OK;
}


/* ---- leaves: the accumulate node (I4) -----------------------------------
 * The leaf owns its accumulate node; the node points back weakly and the
 * leaf clears that pointer when it dies (td_tensor_release). */

static td_status_t
accumulate_backward(td_node_t *node, td_tensor_t *const *gin, td_tensor_t **gout)
{
    /* never called: the engine delivers leaf gradients itself */
    return td_error(TD_ERR_STATE, "AccumulateGrad: run outside the engine");
}

static const td_node_ops_t accumulate_ops = {"AccumulateGrad",
                                             accumulate_backward, NULL, NULL};

td_tensor_t *
td_node_leaf(const td_node_t *node)
{
    return node->ops == &accumulate_ops ? node->leaf : NULL;
}

td_tensor_t *
td__node_leaf_ref(td_node_t *node)
{
    td_tensor_t *leaf;

    if (node->ops != &accumulate_ops) {
        return NULL;
    }
    pthread_mutex_lock(&node->lock);
    leaf = node->leaf;
    if (leaf != NULL && atomic_load(&leaf->refcount) > 0) {
        td_tensor_retain(leaf);
    } else {
        leaf = NULL;
    }
    pthread_mutex_unlock(&node->lock);
    return leaf;
}

td_edge_t
td_tensor_gradient_edge(td_tensor_t *t)
{
    td_node_t *acc;

    if (t->grad_fn != NULL) {
        return (td_edge_t){t->grad_fn, t->output_nr};
    }
    if (!t->requires_grad) {
        return (td_edge_t){NULL, 0};
    }
    pthread_mutex_lock(&t->lock);
    acc = t->grad_acc;
    if (acc == NULL && td_node_create(&accumulate_ops, NULL, 1, NULL, 0,
                                      &acc) == TD_OK) {
        acc->leaf = t;
        t->grad_acc = acc;
    }
    pthread_mutex_unlock(&t->lock);
    return (td_edge_t){acc, 0};
}

td_node_t *
td_tensor_grad_fn(const td_tensor_t *t)
{
    return t->grad_fn;
}

td_status_t
td_tensor_set_grad_fn(td_tensor_t *t, td_node_t *node, uint32_t input_nr)
{
    if (node != NULL && input_nr >= (uint32_t)node->n_inputs) {
        return td_error(TD_ERR_RANGE, "autograd: output %u of %s, which has "
                        "%d inputs", input_nr, node->ops->name, node->n_inputs);
    }
    if (node != NULL && !td_dtype_is_float(t->dtype)) {
        return td_error(TD_ERR_DTYPE, "autograd: %s output of dtype %s cannot "
                        "require grad", node->ops->name, td_dtype_name(t->dtype));
    }
    td_node_retain(node);
    td_node_release(t->grad_fn);
    t->grad_fn = node;
    t->output_nr = input_nr;
    t->requires_grad = node != NULL;
    return TD_OK;
}

int
td__any_requires_grad(td_tensor_t *const *ts, int n)
{
    for (int i = 0; i < n; i++) {
        if (ts[i] != NULL && td_tensor_requires_grad(ts[i])) {
            return 1;
        }
    }
    return 0;
}

td_status_t
td__autograd_record(const td_node_ops_t *ops, void *state,
                   td_tensor_t *const *inputs, int n_inputs, td_tensor_t *out)
{
    td_edge_t edges[16], *e = edges;
    td_node_t *node;
    td_status_t status;

    if (!td_grad_enabled() || !td__any_requires_grad(inputs, n_inputs) ||
        !td_dtype_is_float(out->dtype)) {
        if (ops->destroy != NULL) {
            ops->destroy(state);
        }
        return TD_OK;
    }
    if (n_inputs > 16) {
        e = calloc((size_t)n_inputs, sizeof(*e));
        if (e == NULL) {
            if (ops->destroy != NULL) {
                ops->destroy(state);
            }
            return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
        }
    }
    for (int i = 0; i < n_inputs; i++) {
        e[i] = inputs[i] != NULL ? td_tensor_gradient_edge(inputs[i])
                                 : (td_edge_t){NULL, 0};
    }
    status = td_node_create(ops, state, 1, e, n_inputs, &node);
    if (e != edges) {
        free(e);
    }
    if (status != TD_OK) {
        if (ops->destroy != NULL) {
            ops->destroy(state);
        }
        return status;
    }
    status = td_tensor_set_grad_fn(out, node, 0);
    td_node_release(node);
    return status;
}

/* ---- saved tensors (I7) --------------------------------------------- */

void
td_saved_init(td_saved_t *saved, td_tensor_t *t)
{
    saved->tensor = td_tensor_retain(t);
    saved->version = t != NULL ? td_tensor_version(t) : 0;
}

td_status_t
td_saved_unpack(const td_saved_t *saved, const td_node_t *node,
                td_tensor_t **t_p)
{
    const char *name = node != NULL ? node->ops->name : "autograd";

    if (saved->tensor == NULL) {
        return td_error(TD_ERR_STATE, "%s: trying to backward through the "
                        "graph a second time (its saved tensors were freed); "
                        "pass retain_graph the first time", name);
    }
    if (td_tensor_version(saved->tensor) != saved->version) {
        return td_error(TD_ERR_STATE, "%s: a tensor %s saved for backward was "
                        "modified in place (version %llu, saved at %llu)",
                        name, TD_SHAPE_STR(saved->tensor),
                        (unsigned long long)td_tensor_version(saved->tensor),
                        (unsigned long long)saved->version);
    }
    *t_p = saved->tensor;
    return TD_OK;
}

void
td_saved_release(td_saved_t *saved)
{
    td_tensor_release(saved->tensor);
    saved->tensor = NULL;
}

int
td__node_is_accumulate(const td_node_t *node)
{
    return node->ops == &accumulate_ops;
}
