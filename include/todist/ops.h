/* todist/ops.h: differentiable tensor operations (PyTorch semantics).
 *
 * Every op returns a new tensor in *OUT (set only on success) and, when
 * grad mode is on and an input requires grad, records its backward node.
 * Elementwise ops broadcast as NumPy/PyTorch do; their gradients are summed
 * back over broadcast dimensions. Arithmetic needs float32 or float64 with
 * both operands of the same dtype; index tensors are int64.
 * Errors (TD_ERR_SHAPE, TD_ERR_DTYPE, TD_ERR_RANGE) name the op and the
 * shapes. All functions are thread-safe.
 *
 * Backward formulas are written with these same ops, so gradients are
 * differentiable again (create_graph), except: gelu is twice
 * differentiable, relu/abs/max have zero second derivative almost
 * everywhere, as in PyTorch. */
#ifndef TODIST_OPS_H
#define TODIST_OPS_H

#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TD_REDUCTION_MEAN = 0,
    TD_REDUCTION_SUM  = 1,
    TD_REDUCTION_NONE = 2
} td_reduction_t;

typedef enum {
    TD_BAG_SUM  = 0,
    TD_BAG_MEAN = 1
} td_bag_mode_t;

/* binary, broadcasting */
td_status_t td_add(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out);
td_status_t td_sub(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out);
td_status_t td_mul(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out);
td_status_t td_div(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out);

/* unary and with a scalar */
td_status_t td_neg(td_tensor_t *a, td_tensor_t **out);
td_status_t td_pow_scalar(td_tensor_t *a, double exponent, td_tensor_t **out);
td_status_t td_mul_scalar(td_tensor_t *a, double c, td_tensor_t **out);
td_status_t td_add_scalar(td_tensor_t *a, double c, td_tensor_t **out);
td_status_t td_exp(td_tensor_t *a, td_tensor_t **out);
td_status_t td_log(td_tensor_t *a, td_tensor_t **out);
td_status_t td_sqrt(td_tensor_t *a, td_tensor_t **out);
td_status_t td_abs(td_tensor_t *a, td_tensor_t **out);
td_status_t td_tanh(td_tensor_t *a, td_tensor_t **out);
td_status_t td_sigmoid(td_tensor_t *a, td_tensor_t **out);
td_status_t td_relu(td_tensor_t *a, td_tensor_t **out);
td_status_t td_gelu(td_tensor_t *a, td_tensor_t **out);  /* exact (erf) */

/* reductions: over all elements (0-d result), or over DIMS[n] */
td_status_t td_sum(td_tensor_t *a, td_tensor_t **out);
td_status_t td_mean(td_tensor_t *a, td_tensor_t **out);
td_status_t td_sum_dims(td_tensor_t *a, const int *dims, int n, int keepdim,
                        td_tensor_t **out);
td_status_t td_mean_dims(td_tensor_t *a, const int *dims, int n, int keepdim,
                         td_tensor_t **out);
/* max along DIM: values (differentiable) and int64 indices (first max) */
td_status_t td_max_dim(td_tensor_t *a, int dim, int keepdim,
                       td_tensor_t **values, td_tensor_t **indices);

/* linear algebra (CBLAS): 1-D, 2-D and batched with broadcast batch dims */
td_status_t td_matmul(td_tensor_t *a, td_tensor_t *b, td_tensor_t **out);
/* x[..., in] W[out, in]^T + bias[out] (bias may be NULL) */
td_status_t td_linear(td_tensor_t *x, td_tensor_t *weight, td_tensor_t *bias,
                      td_tensor_t **out);

/* activations and losses */
td_status_t td_softmax(td_tensor_t *a, int dim, td_tensor_t **out);
td_status_t td_log_softmax(td_tensor_t *a, int dim, td_tensor_t **out);
/* input[N, C] log-probabilities, target[N] int64 classes */
td_status_t td_nll_loss(td_tensor_t *input, td_tensor_t *target,
                        td_reduction_t reduction, td_tensor_t **out);
td_status_t td_cross_entropy(td_tensor_t *logits, td_tensor_t *target,
                             td_reduction_t reduction, td_tensor_t **out);
td_status_t td_mse_loss(td_tensor_t *a, td_tensor_t *b,
                        td_reduction_t reduction, td_tensor_t **out);

/* indexing */
td_status_t td_index_select(td_tensor_t *a, int dim, td_tensor_t *index,
                            td_tensor_t **out);
/* zeros(SHAPE) with SRC's slices added at INDEX along DIM */
td_status_t td_index_add_new(const int64_t *shape, int ndim, int dim,
                             td_tensor_t *index, td_tensor_t *src,
                             td_tensor_t **out);
/* out[..] = a[.., index[..], ..] along DIM; INDEX has A's shape without DIM */
td_status_t td_gather_dim(td_tensor_t *a, int dim, td_tensor_t *index,
                          td_tensor_t **out);
td_status_t td_scatter_dim_new(td_tensor_t *src, int dim, td_tensor_t *index,
                               int64_t size, td_tensor_t **out);
/* weight[V, D], indices of any shape (int64) -> indices.shape + [D] */
td_status_t td_embedding(td_tensor_t *weight, td_tensor_t *indices,
                         td_tensor_t **out);
/* 1-D indices split into bags by OFFSETS[B] (offsets[0] == 0) */
td_status_t td_embedding_bag(td_tensor_t *weight, td_tensor_t *indices,
                             td_tensor_t *offsets, td_bag_mode_t mode,
                             td_tensor_t **out);
/* Zero elements with probability P (mask from SEED), scale by 1/(1-p). */
td_status_t td_dropout(td_tensor_t *a, double p, int training, uint64_t seed,
                       td_tensor_t **out);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_OPS_H */
