/* todist/batchnorm.h: batch normalisation over the features of a [N, C]
 * input, as torch.nn.functional.batch_norm and torch.nn.BatchNorm1d:
 *
 *   train: y = (x - mean_B) / sqrt(var_B + eps) * weight + bias, with the
 *          batch mean and the biased batch variance; the running
 *          statistics move by MOMENTUM towards the batch mean and the
 *          unbiased batch variance (var_B * N / (N - 1));
 *   eval:  the same with running_mean and running_var.
 *
 * The op is differentiable in x, weight and bias, twice as well (the
 * second-order backward is composed from the public ops). SyncBatchNorm
 * (todist/syncbn.h) is the same op with batch statistics over a group.
 * Thread-safe as the ops are; a module is used by one thread at a time. */
#ifndef TODIST_BATCHNORM_H
#define TODIST_BATCHNORM_H

#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X [N, C] (float32 or float64); WEIGHT, BIAS [C] of X's dtype or NULL (no
 * affine); RUNNING_MEAN, RUNNING_VAR contiguous [C] of X's dtype, both or
 * neither (NULL: train mode keeps no running statistics; eval mode needs
 * them). In train mode N must be at least 2 (PyTorch's rule) and the
 * running statistics are updated in place (not recorded by autograd). */
td_status_t td_batch_norm(td_tensor_t *x, td_tensor_t *running_mean,
                          td_tensor_t *running_var, td_tensor_t *weight,
                          td_tensor_t *bias, int training, double momentum,
                          double eps, td_tensor_t **out);

/* torch.nn.BatchNorm1d(num_features) over [N, C]: weight ones, bias zeros
 * (requires grad), running_mean zeros, running_var ones, eps 1e-5,
 * momentum 0.1, train mode. The fields may be changed between calls. */
typedef struct {
    int64_t      num_features;
    double       eps, momentum;
    int          training;
    int64_t      num_batches_tracked;
    td_tensor_t *weight, *bias;               /* parameters */
    td_tensor_t *running_mean, *running_var;  /* buffers */
} td_batchnorm1d_t;

td_status_t td_batchnorm1d_init(td_batchnorm1d_t *bn, int64_t num_features,
                                td_dtype_t dtype);
void        td_batchnorm1d_destroy(td_batchnorm1d_t *bn);
td_status_t td_batchnorm1d_forward(td_batchnorm1d_t *bn, td_tensor_t *x,
                                   td_tensor_t **out);

#ifdef __cplusplus
}
#endif

#endif /* TODIST_BATCHNORM_H */
