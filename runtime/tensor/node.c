/* runtime/tensor/node.c: the lifetime of autograd graph nodes (retain,
 * release, the leaf's accumulate node when the leaf dies) and their
 * accessors. At the bottom of runtime/tensor/: tensor.c releases the
 * nodes its tensors own through it, and it calls no other file here (a
 * node's saved tensors are released through its ops' function pointers).
 * Creating nodes and running them is autograd.c's. */
#include "config.h"

#include <stdlib.h>

#include "runtime/tensor/tensor_internal.h"

td_node_t *
td_node_retain(td_node_t *node)
{
    if (node != NULL) {
        atomic_fetch_add(&node->refcount, 1);
    }
    return node;
}

/* Destroying a node releases its next edges and its saved tensors, which
 * release their own grad_fn nodes, and so on down the graph. Done
 * recursively, a long chain (an unrolled loop of 100k ops) would overflow
 * the stack; so nodes whose count reaches zero while another is being
 * destroyed on this thread are queued and destroyed by the outermost call. */
static _Thread_local td_node_t *release_pending;
static _Thread_local int release_active;

static void
node_destroy(td_node_t *node)
{
    td_node_hook_t *h, *hn;

    if (node->ops->release_saved != NULL && !atomic_load(&node->released)) {
        node->ops->release_saved(node);
    }
    if (node->ops->destroy != NULL) {
        node->ops->destroy(node->state);
    }
    for (int i = 0; i < node->n_next; i++) {
        td_node_release(node->next[i].node);
    }
    for (h = node->pre_hooks; h != NULL; h = hn) {
        hn = h->next;
        free(h);
    }
    free(node->next);
    pthread_mutex_destroy(&node->lock);
    free(node);
}

void
td_node_release(td_node_t *node)
{
    if (node == NULL || atomic_fetch_sub(&node->refcount, 1) != 1) {
        return;
    }
    node->pending = release_pending;
    release_pending = node;
    if (release_active) {
        return;
    }
    release_active = 1;
    while (release_pending != NULL) {
        td_node_t *n = release_pending;
        release_pending = n->pending;
        node_destroy(n);
    }
    release_active = 0;
}

void *td_node_state(const td_node_t *node) { return node->state; }
const char *td_node_name(const td_node_t *node) { return node->ops->name; }
int td_node_n_inputs(const td_node_t *node) { return node->n_inputs; }
int td_node_n_next(const td_node_t *node) { return node->n_next; }
uint64_t td_node_sequence(const td_node_t *node) { return node->sequence; }

td_edge_t
td_node_next(const td_node_t *node, int i)
{
    if (i < 0 || i >= node->n_next) {
        return (td_edge_t){NULL, 0};
    }
    return node->next[i];
}

/* The leaf owns its accumulate node; the node points back weakly and the
 * leaf clears that pointer here when it dies (I4). */
void
td__autograd_leaf_dying(td_tensor_t *t)
{
    td_node_t *acc = t->grad_acc;

    if (acc != NULL) {
        pthread_mutex_lock(&acc->lock);
        acc->leaf = NULL;
        pthread_mutex_unlock(&acc->lock);
        td_node_release(acc);
        t->grad_acc = NULL;
    }
}
