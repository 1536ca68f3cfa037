/* runtime/pipe/split.c: the backward of one micro-batch split in two, for
 * the zero-bubble schedule: the input pass (B) computes the gradient the
 * previous stage waits for, the weight pass (W) the parameters' gradients
 * later, in the bubble.
 *
 * Both are passes of the local engine in its td_grad mode (I9: only nodes
 * on a path to a requested input run, and ops compute only the outputs
 * that lead to one, td__autograd_output_needed). B requests the stage
 * input and, through a placeholder tensor per input slot, the gradient
 * entering every "weight node" (a node with an edge to a parameter's
 * accumulate node), keeping the graph; W then runs each weight node alone,
 * seeded with that gradient, requesting only its own parameters, and adds
 * the results into .grad. For a linear layer B computes g W and W
 * computes g^T x: together one whole backward. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/pipe/pipe_internal.h"
#include "runtime/tensor/tensor_internal.h"

/* A set of node pointers (open addressing), for the graph walk. */
typedef struct {
    const td_node_t **slot;
    size_t            cap, count;
} node_set_t;

static size_t
hash_node(const td_node_t *n, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)n;

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

/* 1 if N was added, 0 if present, negative on no memory. */
static int
set_add(node_set_t *s, const td_node_t *n)
{
    size_t i;

    if ((s->count + 1) * 2 > s->cap) {
        node_set_t big = {NULL, s->cap ? s->cap * 2 : 64, 0};
        big.slot = calloc(big.cap, sizeof(*big.slot));
        if (big.slot == NULL) {
            return -1;
        }
        for (size_t k = 0; k < s->cap; k++) {
            if (s->slot[k] != NULL) {
                set_add(&big, s->slot[k]);
            }
        }
        free(s->slot);
        *s = big;
    }
    for (i = hash_node(n, s->cap); s->slot[i] != NULL;
         i = (i + 1) & (s->cap - 1)) {
        if (s->slot[i] == n) {
            return 0;
        }
    }
    s->slot[i] = n;
    s->count++;
    return 1;
}

static int
param_index(td_tensor_t *const *params, int n_params, const td_tensor_t *t)
{
    for (int i = 0; i < n_params; i++) {
        if (params[i] == t) {
            return i;
        }
    }
    return -1;
}

/* Append NODE as a weight node with its parameter indices. */
static td_status_t
add_weight_node(pipe_split_t *sp, td_node_t *node, const int *idx, int n_idx)
{
    int n = sp->n_nodes;
    td_node_t **nodes = realloc(sp->nodes, sizeof(*nodes) * (size_t)(n + 1));
    int **params;
    int *n_params, *slots;

    if (nodes == NULL) {
        goto oom;
    }
    sp->nodes = nodes;
    params = realloc(sp->params, sizeof(*params) * (size_t)(n + 1));
    if (params == NULL) {
        goto oom;
    }
    sp->params = params;
    n_params = realloc(sp->n_params, sizeof(*n_params) * (size_t)(n + 1));
    if (n_params == NULL) {
        goto oom;
    }
    sp->n_params = n_params;
    slots = realloc(sp->slots, sizeof(*slots) * (size_t)(n + 1));
    if (slots == NULL) {
        goto oom;
    }
    sp->slots = slots;
    sp->params[n] = malloc(sizeof(int) * (size_t)n_idx);
    if (sp->params[n] == NULL) {
        goto oom;
    }
    memcpy(sp->params[n], idx, sizeof(int) * (size_t)n_idx);
    sp->n_params[n] = n_idx;
    sp->slots[n] = td_node_n_inputs(node);
    if (sp->slots[n] > sp->max_inputs) {
        sp->max_inputs = sp->slots[n];
    }
    sp->nodes[n] = td_node_retain(node);
    sp->n_nodes = n + 1;
    return TD_OK;
oom:
    return td_error(TD_ERR_NO_MEMORY, "pipe: out of memory (weight nodes)");
}

/* Every node reachable from ROOT with an edge to a parameter's
 * accumulate node, in discovery order. Iterative (deep graphs). */
static td_status_t
find_weight_nodes(pipe_split_t *sp, td_node_t *root,
                  td_tensor_t *const *params, int n_params)
{
    node_set_t seen = {0};
    td_node_t **stack = NULL;
    int *idx = NULL;
    size_t n = 0, cap = 0;
    td_status_t st = TD_OK;

    if (set_add(&seen, root) < 0) {
        goto oom;
    }
    cap = 64;
    stack = malloc(cap * sizeof(*stack));
    if (stack == NULL) {
        goto oom;
    }
    stack[n++] = root;
    while (n > 0 && st == TD_OK) {
        td_node_t *node = stack[--n];
        int n_next = td_node_n_next(node), n_idx = 0;

        free(idx);
        idx = malloc(sizeof(int) * (size_t)(n_next > 0 ? n_next : 1));
        if (idx == NULL) {
            goto oom;
        }
        for (int i = 0; i < n_next; i++) {
            td_edge_t e = td_node_next(node, i);
            td_tensor_t *leaf;
            int k, r;

            if (e.node == NULL) {
                continue;
            }
            leaf = td_node_leaf(e.node);
            if (leaf != NULL) {
                k = param_index(params, n_params, leaf);
                if (k >= 0) {
                    idx[n_idx++] = k;
                }
                continue;               /* a leaf has no next edges */
            }
            r = set_add(&seen, e.node);
            if (r < 0) {
                goto oom;
            }
            if (r == 1) {
                if (n == cap) {
                    td_node_t **s2 = realloc(stack, 2 * cap * sizeof(*stack));
                    if (s2 == NULL) {
                        goto oom;
                    }
                    stack = s2;
                    cap *= 2;
                }
                stack[n++] = e.node;
            }
        }
        if (n_idx > 0) {
            st = add_weight_node(sp, node, idx, n_idx);
        }
    }
    free(idx);
    free(stack);
    free(seen.slot);
    return st;
oom:
    free(idx);
    free(stack);
    free(seen.slot);
    return td_error(TD_ERR_NO_MEMORY, "pipe: out of memory (graph walk)");
}

td_status_t
pipe_split_input(pipe_split_t *sp, td_tensor_t *out, td_tensor_t *dout,
                 td_tensor_t *x, td_tensor_t *const *params, int n_params,
                 td_tensor_t **dx_p)
{
    td_backward_opts_t o = {0};
    td_tensor_t **inputs = NULL, **got = NULL;
    int n_in = 0, want_x = x != NULL && td_tensor_requires_grad(x);
    td_edge_t root = td_tensor_gradient_edge(out);
    td_status_t st;
    int64_t one = 1;

    *dx_p = NULL;
    memset(sp, 0, sizeof(*sp));
    if (root.node == NULL) {
        return td_error(TD_ERR_STATE, "pipe: the stage's output %s does not "
                        "require grad (no parameter or input reaches it)",
                        td_tensor_ndim(out) ? "tensor" : "scalar");
    }
    st = find_weight_nodes(sp, root.node, params, n_params);
    if (st != TD_OK) {
        pipe_split_clear(sp);
        return st;
    }
    /* inputs: x, then one placeholder per weight node slot whose gradient
     * edge is (node, slot): td_grad hands back what enters it */
    inputs = calloc((size_t)(1 + sp->n_nodes * (sp->max_inputs + 1)),
                    sizeof(*inputs));
    got = calloc((size_t)(1 + sp->n_nodes * (sp->max_inputs + 1)),
                 sizeof(*got));
    sp->grads = calloc((size_t)(sp->n_nodes * (sp->max_inputs + 1)),
                       sizeof(*sp->grads));
    if (inputs == NULL || got == NULL || sp->grads == NULL) {
        st = td_error(TD_ERR_NO_MEMORY, "pipe: out of memory (input pass)");
        goto out;
    }
    if (want_x) {
        inputs[n_in++] = td_tensor_retain(x);
    }
    for (int i = 0; i < sp->n_nodes; i++) {
        for (int k = 0; k < sp->slots[i]; k++) {
            td_tensor_t *ph;
            st = td_tensor_empty(&one, 1, td_tensor_dtype(out), TD_CPU, &ph);
            if (st != TD_OK) {
                goto out;
            }
            inputs[n_in++] = ph;
            st = td_tensor_set_grad_fn(ph, sp->nodes[i], (uint32_t)k);
            if (st != TD_OK) {
                goto out;
            }
        }
    }
    if (n_in == 0) {
        goto out;                 /* nothing needs a gradient */
    }
    o.roots = &out;
    o.root_grads = &dout;
    o.n_roots = 1;
    o.retain_graph = 1;           /* W runs the weight nodes again */
    o.inputs = inputs;
    o.n_inputs = n_in;
    o.input_grads = got;
    o.allow_unused = 1;
    st = td_autograd_run(&o);
    if (st != TD_OK) {
        goto out;
    }
    n_in = 0;
    if (want_x) {
        *dx_p = got[n_in];
        got[n_in++] = NULL;
    }
    for (int i = 0; i < sp->n_nodes; i++) {
        for (int k = 0; k < sp->slots[i]; k++) {
            sp->grads[i * sp->max_inputs + k] = got[n_in];
            got[n_in++] = NULL;
        }
    }
out:
    for (int i = 0; inputs != NULL && i < 1 + sp->n_nodes * (sp->max_inputs + 1);
         i++) {
        td_tensor_release(inputs[i]);
        td_tensor_release(got[i]);
    }
    free(inputs);
    free(got);
    if (st != TD_OK) {
        pipe_split_clear(sp);
    }
    return st;
}

td_status_t
pipe_split_weight(pipe_split_t *sp, td_tensor_t *const *params)
{
    td_status_t st = TD_OK;

    for (int i = 0; i < sp->n_nodes && st == TD_OK; i++) {
        td_tensor_t *const *g = &sp->grads[i * sp->max_inputs];
        td_tensor_t *in[8], *got[8] = {0};
        td_backward_opts_t o = {0};
        int any = 0, n = sp->n_params[i];

        for (int k = 0; k < sp->slots[i]; k++) {
            any |= g[k] != NULL;
        }
        if (!any) {
            continue;             /* this node got no gradient */
        }
        if (n > 8) {
            return td_error(TD_ERR_RANGE, "pipe: node %s has %d parameter "
                            "edges; at most 8 are supported",
                            td_node_name(sp->nodes[i]), n);
        }
        for (int k = 0; k < n; k++) {
            in[k] = params[sp->params[i][k]];
        }
        o.extra_roots = &sp->nodes[i];
        o.extra_root_grads = &g;
        o.n_extra_roots = 1;
        o.retain_graph = 0;       /* the node's saved tensors go now */
        o.inputs = in;
        o.n_inputs = n;
        o.input_grads = got;
        o.allow_unused = 1;
        st = td_autograd_run(&o);
        for (int k = 0; k < n; k++) {
            if (st == TD_OK && got[k] != NULL) {
                st = td__leaf_accumulate(in[k], got[k], 0);
            }
            td_tensor_release(got[k]);
        }
    }
    pipe_split_clear(sp);
    return st;
}

void
pipe_split_clear(pipe_split_t *sp)
{
    for (int i = 0; i < sp->n_nodes; i++) {
        for (int k = 0; sp->grads != NULL && k < sp->slots[i]; k++) {
            td_tensor_release(sp->grads[i * sp->max_inputs + k]);
        }
        td_node_release(sp->nodes[i]);
        free(sp->params[i]);
    }
    free(sp->nodes);
    free(sp->grads);
    free(sp->slots);
    free(sp->params);
    free(sp->n_params);
    memset(sp, 0, sizeof(*sp));
}
