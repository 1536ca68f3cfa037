/* runtime/tensor/autograd.c: running the graph backward: tensor hooks,
 * leaf accumulation and the backward engine (td_backward, td_grad). It
 * sums gradients with td_add, so it sits above the ops; recording the
 * graph is graph.c's. The engine's invariants are listed in
 * include/todist/autograd.h; the comments below say which one a piece of
 * code keeps ("I3" = invariant 3). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/tensor_internal.h"
#include <todist/ops.h>

/* ---- hooks ------------------------------------------------------------ */

td_status_t
td_tensor_register_hook(td_tensor_t *t, td_tensor_hook_fn fn, void *arg)
{
    if (!td_tensor_requires_grad(t)) {
        return td_error(TD_ERR_STATE, "hook: tensor %s does not require grad",
                        TD_SHAPE_STR(t));
    }
    if (t->grad_fn != NULL) {
        td_node_hook_t *h = calloc(1, sizeof(*h)), **pp;
        if (h == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "hook: out of memory");
        }
        h->input_nr = t->output_nr;
        h->fn = fn;
        h->arg = arg;
        pthread_mutex_lock(&t->grad_fn->lock);
        for (pp = &t->grad_fn->pre_hooks; *pp != NULL; pp = &(*pp)->next) {
        }
        *pp = h;   /* hooks run in registration order */
        pthread_mutex_unlock(&t->grad_fn->lock);
    } else {
        td_hook_t *h = calloc(1, sizeof(*h)), **pp;
        if (h == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "hook: out of memory");
        }
        h->fn = fn;
        h->arg = arg;
        pthread_mutex_lock(&t->lock);
        for (pp = &t->hooks; *pp != NULL; pp = &(*pp)->next) {
        }
        *pp = h;
        pthread_mutex_unlock(&t->lock);
    }
    return TD_OK;
}

td_status_t
td_tensor_register_post_accumulate_hook(td_tensor_t *leaf,
                                        td_post_accumulate_fn fn, void *arg)
{
    td_hook_t *h, **pp;

    if (leaf->grad_fn != NULL || !leaf->requires_grad) {
        return td_error(TD_ERR_STATE, "hook: post-accumulate hooks need a "
                        "leaf that requires grad (tensor %s)",
                        TD_SHAPE_STR(leaf));
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "hook: out of memory");
    }
    h->post_fn = fn;
    h->arg = arg;
    pthread_mutex_lock(&leaf->lock);
    for (pp = &leaf->post_hooks; *pp != NULL; pp = &(*pp)->next) {
    }
    *pp = h;
    pthread_mutex_unlock(&leaf->lock);
    return TD_OK;
}

td_status_t
td_tensor_remove_post_accumulate_hook(td_tensor_t *leaf,
                                      td_post_accumulate_fn fn, void *arg)
{
    td_hook_t *h = NULL, **pp;

    pthread_mutex_lock(&leaf->lock);
    for (pp = &leaf->post_hooks; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->post_fn == fn && (*pp)->arg == arg) {
            h = *pp;
            *pp = h->next;
            break;
        }
    }
    pthread_mutex_unlock(&leaf->lock);
    if (h == NULL) {
        return td_error(TD_ERR_NOT_FOUND, "hook: no such post-accumulate "
                        "hook on tensor %s", TD_SHAPE_STR(leaf));
    }
    free(h);
    return TD_OK;
}

/* Apply FN-style hooks to *G in order; *G stays a valid reference. */
static td_status_t
apply_hook(td_tensor_hook_fn fn, void *arg, td_tensor_t **g)
{
    td_tensor_t *ng = NULL;
    td_status_t status;

    if (*g == NULL) {
        return TD_OK;
    }
    status = fn(arg, *g, &ng);
    if (status != TD_OK) {
        return status;
    }
    if (ng != NULL) {
        td_tensor_release(*g);
        *g = ng;
    }
    return TD_OK;
}

/* ---- leaf accumulation (I4) ------------------------------------------- */

td_status_t
td__leaf_accumulate(td_tensor_t *leaf, td_tensor_t *g, int create_graph)
{
    td_tensor_t *sum = NULL, *old = NULL;
    td_status_t status = TD_OK;
    int was;

    if (!td__shape_equal(leaf, g) || leaf->dtype != g->dtype) {
        return td_error(TD_ERR_SHAPE, "AccumulateGrad: gradient %s %s does "
                        "not match leaf %s %s", td_dtype_name(g->dtype),
                        TD_SHAPE_STR(g), td_dtype_name(leaf->dtype),
                        TD_SHAPE_STR(leaf));
    }
    was = td_grad_set_enabled(create_graph);
    pthread_mutex_lock(&leaf->lock);
    if (leaf->grad == NULL) {
        /* own a contiguous copy unless the graph of G must be kept */
        if (create_graph) {
            leaf->grad = td_tensor_retain(g);
        } else {
            status = td_tensor_detach(g, &old);
            if (status == TD_OK) {
                status = td__tensor_copy_raw(old, old->dtype, &leaf->grad);
                td_tensor_release(old);
                old = NULL;
            }
        }
    } else if (create_graph || td_tensor_requires_grad(leaf->grad) ||
               !td_tensor_is_contiguous(leaf->grad)) {
        status = td_add(leaf->grad, g, &sum);
        if (status == TD_OK) {
            old = leaf->grad;
            leaf->grad = sum;
        }
    } else {
        /* in place into the contiguous .grad buffer (a flat-buffer slice
         * stays where DDP and the optimizer expect it) */
        td__kernels_get(leaf->device)->binary(
            TD_BIN_ADD, leaf->dtype, td_tensor_data(leaf->grad),
            (td_operand_t){td_tensor_data(leaf->grad), leaf->grad->strides},
            (td_operand_t){td_tensor_data(g), g->strides}, g->shape, g->ndim);
        td_tensor_bump_version(leaf->grad);
    }
    pthread_mutex_unlock(&leaf->lock);
    td_grad_set_enabled(was);
    td_tensor_release(old);
    if (status == TD_OK) {
        status = td_tensor_run_post_accumulate_hooks(leaf);
    }
    return status;
}

td_status_t
td_tensor_run_post_accumulate_hooks(td_tensor_t *leaf)
{
    td_status_t status = TD_OK;
    td_hook_t *h;

    pthread_mutex_lock(&leaf->lock);
    h = leaf->post_hooks;
    pthread_mutex_unlock(&leaf->lock);
    /* the list is only changed while no backward runs (see remove) */
    for (; status == TD_OK && h != NULL; h = h->next) {
        status = h->post_fn(h->arg, leaf);
    }
    return status;
}

/* ---- the engine --------------------------------------------------------- */

typedef struct {
    td_node_t    *node;
    int           deps;       /* producers not yet run (I1, I2) */
    int           needed;     /* -1 unknown, 0/1 (td_grad mode, I9) */
    int           queued;
    td_tensor_t **buf;        /* summed gradients per input slot (I3) */
} entry_t;

typedef struct {
    entry_t  *slots;
    size_t    cap, count;
    entry_t **ready;           /* LIFO of entries whose deps reached 0 */
    size_t    n_ready, ready_cap;
    const td_backward_opts_t *opts;
    td_edge_t *captures;       /* td_grad: the inputs' edges */
} task_t;

static size_t
hash_ptr(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;

    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static entry_t *
task_find(task_t *task, td_node_t *node)
{
    size_t i = hash_ptr(node, task->cap);

    while (task->slots[i].node != NULL) {
        if (task->slots[i].node == node) {
            return &task->slots[i];
        }
        i = (i + 1) & (task->cap - 1);
    }
    return NULL;
}

static td_status_t
task_grow(task_t *task)
{
    entry_t *old = task->slots;
    size_t old_cap = task->cap;

    task->cap = old_cap ? old_cap * 2 : 64;
    task->slots = calloc(task->cap, sizeof(entry_t));
    if (task->slots == NULL) {
        task->slots = old;
        task->cap = old_cap;
        return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
    }
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].node != NULL) {
            size_t j = hash_ptr(old[i].node, task->cap);
            while (task->slots[j].node != NULL) {
                j = (j + 1) & (task->cap - 1);
            }
            task->slots[j] = old[i];
        }
    }
    free(old);
    return TD_OK;
}

/* Entry for NODE, created if absent; *CREATED says which. */
static td_status_t
task_get(task_t *task, td_node_t *node, entry_t **e_p, int *created)
{
    entry_t *e;
    size_t i;

    if (task->cap == 0 || (task->count + 1) * 2 > task->cap) {
        td_status_t status = task_grow(task);
        if (status != TD_OK) {
            return status;
        }
    }
    e = task_find(task, node);
    *created = e == NULL;
    if (e == NULL) {
        i = hash_ptr(node, task->cap);
        while (task->slots[i].node != NULL) {
            i = (i + 1) & (task->cap - 1);
        }
        e = &task->slots[i];
        e->buf = calloc((size_t)(node->n_inputs > 0 ? node->n_inputs : 1),
                        sizeof(td_tensor_t *));
        if (e->buf == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
        }
        e->node = node;
        e->needed = -1;
        task->count++;
    }
    *e_p = e;
    return TD_OK;
}

static void
task_free(task_t *task)
{
    for (size_t i = 0; i < task->cap; i++) {
        entry_t *e = &task->slots[i];
        if (e->node != NULL) {
            for (int k = 0; k < e->node->n_inputs; k++) {
                td_tensor_release(e->buf[k]);
            }
            free(e->buf);
        }
    }
    free(task->slots);
    free(task->ready);
    free(task->captures);
}

/* I1: count, for every node reachable from the roots, how many reachable
 * edges point at it. Iterative (deep graphs must not overflow the stack). */
static td_status_t
count_dependencies(task_t *task, td_node_t **roots, int n_roots)
{
    td_node_t **stack = NULL;
    size_t n = 0, cap = 0;
    td_status_t status = TD_OK;
    entry_t *e;
    int created;

    for (int r = 0; r < n_roots; r++) {
        status = task_get(task, roots[r], &e, &created);
        if (status != TD_OK) {
            goto out;
        }
        if (!created) {
            continue;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            td_node_t **ns = realloc(stack, cap * sizeof(*stack));
            if (ns == NULL) {
                status = td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
                goto out;
            }
            stack = ns;
        }
        stack[n++] = roots[r];
        while (n > 0) {
            td_node_t *node = stack[--n];
            for (int i = 0; i < node->n_next; i++) {
                td_node_t *next = node->next[i].node;
                if (next == NULL) {
                    continue;
                }
                status = task_get(task, next, &e, &created);
                if (status != TD_OK) {
                    goto out;
                }
                e->deps++;
                if (created) {
                    if (n == cap) {
                        cap = cap ? cap * 2 : 64;
                        td_node_t **ns = realloc(stack, cap * sizeof(*stack));
                        if (ns == NULL) {
                            status = td_error(TD_ERR_NO_MEMORY,
                                              "autograd: out of memory");
                            goto out;
                        }
                        stack = ns;
                    }
                    stack[n++] = next;
                }
            }
        }
    }
out:
    free(stack);
    return status;
}

static int
is_capture(task_t *task, td_node_t *node)
{
    for (int i = 0; i < task->opts->n_inputs; i++) {
        if (task->captures[i].node == node) {
            return 1;
        }
    }
    return 0;
}

/* I9: a node is needed if it is an input's node or leads to one. A
 * post-order walk with an explicit stack (deep graphs). */
static td_status_t
mark_needed(task_t *task, entry_t *root)
{
    typedef struct { entry_t *e; int next; } frame_t;
    frame_t *st;
    size_t n = 0, cap = 64;

    if (root->needed >= 0) {
        return TD_OK;
    }
    st = malloc(cap * sizeof(*st));
    if (st == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
    }
    root->needed = is_capture(task, root->node) ? 1 : 2;   /* 2: visiting */
    st[n++] = (frame_t){root, 0};
    while (n > 0) {
        frame_t *f = &st[n - 1];
        td_node_t *node = f->e->node;
        if (f->next < node->n_next) {
            td_node_t *nx = node->next[f->next++].node;
            entry_t *ce;
            if (nx == NULL) {
                continue;
            }
            ce = task_find(task, nx);
            if (ce->needed < 0) {
                if (n == cap) {
                    frame_t *ns = realloc(st, cap * 2 * sizeof(*st));
                    if (ns == NULL) {
                        free(st);
                        return td_error(TD_ERR_NO_MEMORY, "autograd: out of "
                                        "memory");
                    }
                    st = ns;
                    cap *= 2;
                    f = &st[n - 1];
                }
                ce->needed = is_capture(task, nx) ? 1 : 2;
                st[n++] = (frame_t){ce, 0};
            }
            continue;
        }
        /* all children done: needed if captured or any child is needed */
        if (f->e->needed == 2) {
            f->e->needed = 0;
        }
        for (int i = 0; i < node->n_next && f->e->needed == 0; i++) {
            td_node_t *nx = node->next[i].node;
            if (nx != NULL && task_find(task, nx)->needed == 1) {
                f->e->needed = 1;
            }
        }
        n--;
    }
    free(st);
    return TD_OK;
}

/* I3: sum G into slot NR of E's buffer (takes over G). */
static td_status_t
buffer_add(entry_t *e, uint32_t nr, td_tensor_t *g)
{
    td_tensor_t *sum;
    td_status_t status;

    if (g == NULL) {
        return TD_OK;
    }
    if (e->buf[nr] == NULL) {
        e->buf[nr] = g;
        return TD_OK;
    }
    status = td_add(e->buf[nr], g, &sum);
    td_tensor_release(g);
    if (status != TD_OK) {
        return status;
    }
    td_tensor_release(e->buf[nr]);
    e->buf[nr] = sum;
    return TD_OK;
}

static td_status_t
push_ready(task_t *task, entry_t *e)
{
    if (task->n_ready == task->ready_cap) {
        size_t cap = task->ready_cap ? task->ready_cap * 2 : 64;
        entry_t **nr = realloc(task->ready, cap * sizeof(*nr));
        if (nr == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
        }
        task->ready = nr;
        task->ready_cap = cap;
    }
    e->queued = 1;
    task->ready[task->n_ready++] = e;
    return TD_OK;
}

/* The pass whose backward function runs on this thread, for
 * td__autograd_output_needed (saved and restored: passes may nest). */
static __thread task_t *running_task;

int
td__autograd_output_needed(const td_node_t *node, int i)
{
    entry_t *ne;

    if (i < 0 || i >= node->n_next || node->next[i].node == NULL) {
        return 0;
    }
    if (running_task == NULL || running_task->opts->n_inputs == 0) {
        return 1;
    }
    ne = task_find(running_task, node->next[i].node);
    return ne == NULL || ne->needed != 0;      /* I9: unneeded is dropped */
}

static td_status_t
run_pre_hooks(entry_t *e)
{
    td_node_t *node = e->node;
    td_node_hook_t *h;
    td_status_t status = TD_OK;
    td_tensor_t *leaf;

    pthread_mutex_lock(&node->lock);
    h = node->pre_hooks;
    pthread_mutex_unlock(&node->lock);
    for (; status == TD_OK && h != NULL; h = h->next) {
        status = apply_hook(h->fn, h->arg, &e->buf[h->input_nr]);
    }
    if (status == TD_OK && (leaf = td__node_leaf_ref(node)) != NULL) {
        td_hook_t *lh;
        pthread_mutex_lock(&leaf->lock);
        lh = leaf->hooks;
        pthread_mutex_unlock(&leaf->lock);
        for (; status == TD_OK && lh != NULL; lh = lh->next) {
            status = apply_hook(lh->fn, lh->arg, &e->buf[0]);
        }
        td_tensor_release(leaf);
    }
    return status;
}

/* Run one ready node: deliver (leaf), capture (td_grad) or call backward
 * and pass its gradients on. */
static td_status_t
run_node(task_t *task, entry_t *e)
{
    const td_backward_opts_t *o = task->opts;
    td_node_t *node = e->node;
    td_tensor_t *gout_stack[8], **gout = gout_stack;
    td_status_t status;
    int any = 0, was;

    status = run_pre_hooks(e);
    if (status != TD_OK) {
        return status;
    }
    if (o->n_inputs > 0) {
        for (int i = 0; i < o->n_inputs; i++) {
            if (task->captures[i].node == node && e->buf[task->captures[i].input_nr]) {
                td_tensor_release(o->input_grads[i]);
                o->input_grads[i] = td_tensor_retain(
                    e->buf[task->captures[i].input_nr]);
            }
        }
        if (td__node_is_accumulate(node)) {
            return TD_OK;      /* td_grad never touches leaves (I9) */
        }
    } else if (td__node_is_accumulate(node)) {
        td_tensor_t *leaf = td__node_leaf_ref(node);
        if (leaf == NULL || e->buf[0] == NULL) {
            td_tensor_release(leaf);
            return TD_OK;      /* the leaf died: nobody can see its grad */
        }
        if (o->sink != NULL) {
            status = o->sink(o->sink_arg, leaf, e->buf[0]);
        } else {
            status = td__leaf_accumulate(leaf, e->buf[0], o->create_graph);
        }
        td_tensor_release(leaf);
        return status;
    }

    for (int i = 0; i < node->n_inputs; i++) {
        any |= e->buf[i] != NULL;
    }
    if (node->n_next > 8) {
        gout = calloc((size_t)node->n_next, sizeof(*gout));
        if (gout == NULL) {
            return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
        }
    }
    memset(gout, 0, (size_t)node->n_next * sizeof(*gout));
    if (any) {
        if (atomic_load(&node->released) && node->ops->release_saved != NULL) {
            status = td_error(TD_ERR_STATE, "%s: trying to backward through "
                              "the graph a second time (its saved tensors "
                              "were freed); pass retain_graph the first time",
                              node->ops->name);
            goto out;
        }
        task_t *outer = running_task;

        was = td_grad_set_enabled(o->create_graph);   /* I8 */
        running_task = task;
        status = node->ops->backward(node, e->buf, gout);
        running_task = outer;
        td_grad_set_enabled(was);
        if (status != TD_OK) {
            goto out;
        }
    }
    /* I6: drop saved tensors once the node ran, unless retained */
    if (!o->retain_graph && node->ops->release_saved != NULL) {
        pthread_mutex_lock(&node->lock);
        if (!atomic_exchange(&node->released, 1)) {
            node->ops->release_saved(node);
        }
        pthread_mutex_unlock(&node->lock);
    }
    for (int i = 0; i < node->n_next; i++) {
        td_edge_t edge = node->next[i];
        entry_t *ne;
        if (edge.node == NULL) {
            continue;
        }
        ne = task_find(task, edge.node);
        if (ne->needed == 0 && o->n_inputs > 0) {
            continue;
        }
        status = buffer_add(ne, edge.input_nr, gout[i]);
        gout[i] = NULL;
        if (status != TD_OK) {
            goto out;
        }
        if (--ne->deps == 0) {
            status = push_ready(task, ne);
            if (status != TD_OK) {
                goto out;
            }
        }
    }
out:
    for (int i = 0; i < node->n_next; i++) {
        td_tensor_release(gout[i]);
    }
    if (gout != gout_stack) {
        free(gout);
    }
    return status;
}

static td_status_t
root_gradient(td_tensor_t *root, td_tensor_t *grad, int i, td_tensor_t **g_p)
{
    td_status_t status;

    if (grad == NULL) {
        if (td_tensor_numel(root) != 1) {
            return td_error(TD_ERR_SHAPE, "backward: root %d has shape %s; a "
                            "gradient is needed for a non-scalar root", i,
                            TD_SHAPE_STR(root));
        }
        /* on the root's device: the gradient flows through its ops */
        status = td_tensor_empty(root->shape, root->ndim, root->dtype,
                                 root->device, g_p);
        return status == TD_OK ? td_tensor_fill_(*g_p, 1.0) : status;
    }
    if (!td__shape_equal(root, grad) || root->dtype != grad->dtype) {
        return td_error(TD_ERR_SHAPE, "backward: gradient %d is %s %s but its "
                        "root is %s %s", i, td_dtype_name(grad->dtype),
                        TD_SHAPE_STR(grad), td_dtype_name(root->dtype),
                        TD_SHAPE_STR(root));
    }
    *g_p = td_tensor_retain(grad);
    return TD_OK;
}

static td_status_t
autograd_run(const td_backward_opts_t *o)
{
    task_t task = {0};
    td_node_t **roots = NULL;
    int n_roots = 0;
    td_status_t status = TD_OK;
    entry_t *e;
    int created;

    task.opts = o;
    roots = calloc((size_t)(o->n_roots + o->n_extra_roots + 1), sizeof(*roots));
    if (roots == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
    }
    for (int i = 0; i < o->n_roots; i++) {
        td_edge_t edge = td_tensor_gradient_edge(o->roots[i]);
        if (edge.node == NULL) {
            status = td_error(TD_ERR_STATE, "backward: root %d %s does not "
                              "require grad and has no grad_fn", i,
                              TD_SHAPE_STR(o->roots[i]));
            goto out;
        }
        roots[n_roots++] = edge.node;
    }
    for (int i = 0; i < o->n_extra_roots; i++) {
        roots[n_roots++] = o->extra_roots[i];
    }
    if (n_roots == 0) {
        status = td_error(TD_ERR_INVALID, "backward: no roots");
        goto out;
    }
    if (o->n_inputs > 0) {
        task.captures = calloc((size_t)o->n_inputs, sizeof(td_edge_t));
        if (task.captures == NULL) {
            status = td_error(TD_ERR_NO_MEMORY, "autograd: out of memory");
            goto out;
        }
        for (int i = 0; i < o->n_inputs; i++) {
            task.captures[i] = td_tensor_gradient_edge(o->inputs[i]);
            if (task.captures[i].node == NULL) {
                status = td_error(TD_ERR_STATE, "grad: input %d %s does not "
                                  "require grad", i, TD_SHAPE_STR(o->inputs[i]));
                goto out;
            }
            o->input_grads[i] = NULL;
        }
    }
    status = count_dependencies(&task, roots, n_roots);
    if (status != TD_OK) {
        goto out;
    }
    if (o->n_inputs > 0) {
        for (int r = 0; r < n_roots && status == TD_OK; r++) {
            status = mark_needed(&task, task_find(&task, roots[r]));
        }
        if (status != TD_OK) {
            goto out;
        }
    }
    /* seed the root gradients */
    for (int i = 0; i < o->n_roots; i++) {
        td_edge_t edge = td_tensor_gradient_edge(o->roots[i]);
        td_tensor_t *g;
        status = root_gradient(o->roots[i], o->root_grads ? o->root_grads[i]
                                                          : NULL, i, &g);
        if (status == TD_OK) {
            status = task_get(&task, edge.node, &e, &created);
        }
        if (status == TD_OK) {
            status = buffer_add(e, edge.input_nr, g);
        }
        if (status != TD_OK) {
            goto out;
        }
    }
    for (int i = 0; i < o->n_extra_roots; i++) {
        td_node_t *node = o->extra_roots[i];
        e = task_find(&task, node);
        for (int k = 0; k < node->n_inputs; k++) {
            td_tensor_t *g = o->extra_root_grads != NULL &&
                             o->extra_root_grads[i] != NULL
                                 ? o->extra_root_grads[i][k] : NULL;
            status = buffer_add(e, (uint32_t)k, td_tensor_retain(g));
            if (status != TD_OK) {
                goto out;
            }
        }
    }
    for (int r = 0; r < n_roots; r++) {
        e = task_find(&task, roots[r]);
        if (e->deps == 0 && !e->queued) {
            status = push_ready(&task, e);
            if (status != TD_OK) {
                goto out;
            }
        }
    }
    while (task.n_ready > 0) {
        e = task.ready[--task.n_ready];
        if (o->n_inputs > 0 && e->needed == 0) {
            continue;
        }
        status = run_node(&task, e);
        /* I3: a node's buffer is consumed once it ran */
        for (int k = 0; k < e->node->n_inputs; k++) {
            td_tensor_release(e->buf[k]);
            e->buf[k] = NULL;
        }
        if (status != TD_OK) {
            goto out;
        }
    }
    if (o->n_inputs > 0) {
        for (int i = 0; i < o->n_inputs; i++) {
            if (o->input_grads[i] == NULL && !o->allow_unused) {
                status = td_error(TD_ERR_STATE, "grad: input %d %s was not "
                                  "used in the graph (pass allow_unused)", i,
                                  TD_SHAPE_STR(o->inputs[i]));
                goto out;
            }
        }
    }
out:
    if (status != TD_OK && o->n_inputs > 0 && o->input_grads != NULL) {
        for (int i = 0; i < o->n_inputs; i++) {
            td_tensor_release(o->input_grads[i]);
            o->input_grads[i] = NULL;
        }
    }
    task_free(&task);
    free(roots);
    return status;
}

td_status_t
td_autograd_run(const td_backward_opts_t *o)
{
    /* I8: gradient sums and backward functions record a graph only with
     * create_graph */
    int was = td_grad_set_enabled(o->create_graph);
    td_status_t status = autograd_run(o);

    td_grad_set_enabled(was);
    return status;
}

td_status_t
td_backward(td_tensor_t *const *roots, td_tensor_t *const *grads, int n,
            int retain_graph, int create_graph)
{
    td_backward_opts_t o = {0};

    o.roots = roots;
    o.root_grads = grads;
    o.n_roots = n;
    o.retain_graph = retain_graph || create_graph;
    o.create_graph = create_graph;
    return td_autograd_run(&o);
}

td_status_t
td_grad(td_tensor_t *const *outputs, td_tensor_t *const *grad_outputs,
        int n_outputs, td_tensor_t *const *inputs, int n_inputs,
        int retain_graph, int create_graph, int allow_unused,
        td_tensor_t **grads_out)
{
    td_backward_opts_t o = {0};
    td_tensor_t **tmp;
    td_status_t status;

    if (n_inputs <= 0) {
        return td_error(TD_ERR_INVALID, "grad: no inputs");
    }
    tmp = calloc((size_t)n_inputs, sizeof(*tmp));
    if (tmp == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "grad: out of memory");
    }
    o.roots = outputs;
    o.root_grads = grad_outputs;
    o.n_roots = n_outputs;
    o.retain_graph = retain_graph || create_graph;
    o.create_graph = create_graph;
    o.inputs = inputs;
    o.n_inputs = n_inputs;
    o.input_grads = tmp;
    o.allow_unused = allow_unused;
    status = td_autograd_run(&o);
    if (status == TD_OK) {
        memcpy(grads_out, tmp, (size_t)n_inputs * sizeof(*tmp));
    }
    free(tmp);
    return status;
}
