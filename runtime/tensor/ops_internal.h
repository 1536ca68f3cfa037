/* runtime/tensor/ops_internal.h: what the differentiable ops share
 * (runtime/tensor/ops_{elementwise,reduce,nn,index,loss}.c): the saved
 * state of an op node, its life cycle, the checks every op makes and the
 * broadcast rule. Internal to libtodist.
 *
 * Invariants:
 *  1. Each op's backward sits right after its forward and is written with
 *     the public ops, so it is itself differentiable (create_graph); a
 *     fused kernel backward is taken only when grad mode is off (first
 *     order), and gives the same values as the composed formula.
 *  2. A forward calls one kernel of the device's table per output, never a
 *     loop over elements.
 *  3. An op records a node only when grad mode is on and an input requires
 *     grad (td__op_needs_state); the no-grad path allocates no state.
 * Thread-safe as the ops are: no shared mutable state. */
#ifndef TD_RUNTIME_TENSOR_OPS_INTERNAL_H
#define TD_RUNTIME_TENSOR_OPS_INTERNAL_H

#include "runtime/tensor/tensor_internal.h"

/* The saved state of every op node (one struct for all: small, and the
 * shared release/destroy below handle it). */
typedef struct {
    td_saved_t sv[3];
    double     c;
    int        dim;
    int        ndim_a, ndim_b;
    int64_t    shape_a[TD_MAX_DIMS], shape_b[TD_MAX_DIMS];
    uint32_t   mask;        /* reduced dims */
} td_op_state_t;

void td__op_release_saved(td_node_t *node);
void td__op_destroy(void *state);
/* node ops of an op named NAME (e.g. "MulBackward") with BACKWARD */
#define TD_OP_NODE(name, backward) \
    {name, backward, td__op_release_saved, td__op_destroy}

/* grad mode on and one of INS requires grad: the op must record a node */
int td__op_needs_state(td_tensor_t *const *ins, int n);
/* a zeroed state, or NULL when out of memory */
td_op_state_t *td__op_state_new(void);
/* Record ST (may be NULL: nothing to record) for OUT and set *OUT_P;
 * takes ST; releases OUT on failure. */
td_status_t td__op_finish(const td_node_ops_t *ops, td_op_state_t *st,
                         td_tensor_t *const *ins, int n, td_tensor_t *out,
                         td_tensor_t **out_p);

td_status_t td__op_check_float(const char *op, td_tensor_t *a);

/* Batch norm's running statistics: BUF[i] = (1 - M) BUF[i] + M V[i] for
 * C channels, in BUF's dtype (batchnorm.c; SyncBatchNorm uses it too). */
void td__bn_running_update(td_tensor_t *buf, const double *v, double m,
                          int64_t c);
/* both float, one dtype, one device */
td_status_t td__op_check_pair(const char *op, td_tensor_t *a, td_tensor_t *b);
/* Broadcast A and B (numpy rules): SHAPE[*NDIM_P] and each operand's
 * strides over it (0 along broadcast dims). */
td_status_t td__op_broadcast_shape(const char *op, td_tensor_t *a,
                                  td_tensor_t *b, int64_t *shape,
                                  int *ndim_p, int64_t *sa, int64_t *sb);

/* outer / inner element counts around DIM of SHAPE */
static inline void
td_op_around(const int64_t *shape, int ndim, int dim, int64_t *outer,
             int64_t *inner)
{
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < dim; d++) {
        *outer *= shape[d];
    }
    for (int d = dim + 1; d < ndim; d++) {
        *inner *= shape[d];
    }
}

/* Unwinding inside a backward: R = F(...) or jump to the function's `out`
 * label, where every temporary is released. */
#define TD_OP_TRY(expr)                                                     \
    do {                                                                    \
        status = (expr);                                                    \
        if (status != TD_OK) goto out;                                      \
    } while (0)

/* On failure a backward releases what it produced in GOUT[0..n). */
static inline td_status_t
td_op_backward_done(td_status_t status, td_node_t *node, td_tensor_t **gout)
{
    if (status != TD_OK) {
        for (int i = 0; i < node->n_next; i++) {
            td_tensor_release(gout[i]);
            gout[i] = NULL;
        }
    }
    return status;
}

#endif /* TD_RUNTIME_TENSOR_OPS_INTERNAL_H */
