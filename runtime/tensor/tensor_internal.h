/* runtime/tensor/tensor_internal.h: the tensor, storage and node structs
 * and the helpers ops, autograd and the tensor layer share. Internal to
 * libtodist; compute loops live behind kernels/kernels.h. */
#ifndef TD_RUNTIME_TENSOR_INTERNAL_H
#define TD_RUNTIME_TENSOR_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <todist/autograd.h>
#include <todist/tensor.h>

#include "kernels/kernels.h"

typedef struct {
    atomic_long     refcount;
    void           *data;
    size_t          nbytes;
    td_device_t     device;
    void          (*deleter)(void *data, void *arg);
    void           *deleter_arg;
    atomic_ullong   version;
    atomic_int      pending;   /* a collective still writes it (a DDP bucket
                                  in flight): optimizers refuse to step */
} td_storage_t;

typedef struct td_hook {
    struct td_hook     *next;
    td_tensor_hook_fn   fn;
    td_post_accumulate_fn post_fn;
    void               *arg;
} td_hook_t;

struct td_tensor {
    atomic_long    refcount;
    td_storage_t  *storage;
    td_dtype_t     dtype;
    td_device_t    device;
    int            ndim;
    int64_t        shape[TD_MAX_DIMS];
    int64_t        strides[TD_MAX_DIMS];
    int64_t        offset;
    int            requires_grad;
    /* autograd: grad_fn is owned; grad_acc is weak (the accumulate node
     * owns the leaf and clears this pointer when it dies). */
    td_node_t     *grad_fn;
    uint32_t       output_nr;
    td_node_t     *grad_acc;
    td_tensor_t   *grad;
    td_hook_t     *hooks;       /* leaf hooks (non-leaf: on grad_fn) */
    td_hook_t     *post_hooks;
    pthread_mutex_t lock;       /* guards grad, grad_acc, hooks */
};

typedef struct td_node_hook {
    struct td_node_hook *next;
    uint32_t             input_nr;
    td_tensor_hook_fn    fn;
    void                *arg;
} td_node_hook_t;

struct td_node {
    atomic_long          refcount;
    const td_node_ops_t *ops;
    void                *state;
    int                  n_inputs;
    int                  n_next;
    td_edge_t           *next;
    uint64_t             sequence;
    td_tensor_t         *leaf;      /* accumulate nodes only (owned) */
    td_node_hook_t      *pre_hooks;
    atomic_int           released;  /* saved tensors dropped */
    pthread_mutex_t      lock;
    struct td_node      *pending;   /* deferred-destruction list link */
};

/* tensor.c: bytes of freed CPU storage kept for reuse (T1): malloc counts
 * them in use; runtime/pipe subtracts them from the heap it reports. */
size_t td__tensor_cache_bytes(void);

/* internal helpers shared by tensor.c, ops_*.c, autograd.c */
/* node.c: called by td_tensor_release just before a leaf is freed (drops
 * its accumulate node, I4). */
void td__autograd_leaf_dying(td_tensor_t *t);
/* graph.c: whether NODE is a leaf's accumulate node, and its leaf
 * retained (NULL when NODE is not one or the leaf died). */
int          td__node_is_accumulate(const td_node_t *node);
td_tensor_t *td__node_leaf_ref(td_node_t *node);
/* tensor.c: a contiguous copy of T converted to DTYPE on T's device,
 * recording nothing (clone and to_dtype record on top of it). */
td_status_t td__tensor_copy_raw(td_tensor_t *t, td_dtype_t dtype,
                                td_tensor_t **out);
/* Same device (cpu has one). */
static inline int
td__device_same(td_device_t a, td_device_t b)
{
    return a.type == b.type && (a.type == TD_DEVICE_CPU || a.index == b.index);
}

td_status_t td__tensor_new_view(td_tensor_t *base, const int64_t *shape,
                               const int64_t *strides, int ndim,
                               int64_t offset, td_tensor_t **out);
td_status_t td__tensor_empty_like(const td_tensor_t *t, td_tensor_t **out);
int  td__shape_equal(const td_tensor_t *a, const td_tensor_t *b);
const char *td__shape_str(const int64_t *shape, int ndim, char *buf,
                         size_t len);
#define TD_SHAPE_STR(t) td__shape_str((t)->shape, (t)->ndim, \
                                     (char[96]){0}, 96)
/* The view of td_tensor_expand without its autograd node (tensor.c). */
td_status_t td__tensor_expand_view(td_tensor_t *t, const int64_t *shape,
                                  int ndim, td_tensor_t **out);
/* Reduce G (broadcast result) to SHAPE by summing; retains G if equal
 * (ops_reduce.c). */
td_status_t td__sum_to(td_tensor_t *g, const int64_t *shape, int ndim,
                      td_tensor_t **out);
/* Record NODE as the grad_fn of OUT if grad mode is on and any of the
 * inputs requires grad; otherwise frees STATE with OPS->destroy.
 * Takes over STATE. */
td_status_t td__autograd_record(const td_node_ops_t *ops, void *state,
                               td_tensor_t *const *inputs, int n_inputs,
                               td_tensor_t *out);
int td__any_requires_grad(td_tensor_t *const *ts, int n);
/* Accumulate G into leaf->grad (thread-safe), then run post hooks. */
td_status_t td__leaf_accumulate(td_tensor_t *leaf, td_tensor_t *g,
                               int create_graph);
/* For a backward function: 1 if this pass needs the gradient of NODE's
 * I-th next edge (it has a node and, in td_grad mode, leads to an input:
 * I9), so ops skip the others' products (the pipeline's input-gradient and
 * weight-gradient passes each compute only their half). */
int td__autograd_output_needed(const td_node_t *node, int i);

#endif /* TD_RUNTIME_TENSOR_INTERNAL_H */
