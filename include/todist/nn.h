/* todist/nn.h: Linear layers and an MLP whose parameters live in one flat
 * buffer (and whose gradients live in another), so an optimizer or an
 * allreduce touches one contiguous block.
 *
 * Layer i computes x W_i^T + b_i (W_i is [out, in], as torch.nn.Linear,
 * initialised U(-1/sqrt(in), 1/sqrt(in)) from a seed); ReLU between layers,
 * none after the last.
 *
 * Clone modes (TorchOpt's module cloning):
 *  - TD_CLONE_REFERENCE: the clone shares the very parameter tensors;
 *  - TD_CLONE_COPY: parameters become non-leaf copies whose gradient flows
 *    back to the originals (never detached, also across RPC);
 *  - TD_CLONE_DEEPCOPY: independent leaves with their own flat buffers.
 * Threads: a module is used by one thread at a time. */
#ifndef TODIST_NN_H
#define TODIST_NN_H

#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_mlp td_mlp_t;

typedef enum {
    TD_CLONE_REFERENCE = 0,
    TD_CLONE_COPY      = 1,
    TD_CLONE_DEEPCOPY  = 2
} td_clone_mode_t;

/* SIZES[n_sizes] = {in, hidden..., out}; n_sizes >= 2. */
td_status_t td_mlp_create(const int64_t *sizes, int n_sizes, td_dtype_t dtype,
                          uint64_t seed, td_mlp_t **out);
td_status_t td_mlp_forward(td_mlp_t *mlp, td_tensor_t *x, td_tensor_t **out);
/* 2 * n_layers parameters, W0, b0, W1, b1, ... (borrowed) */
int          td_mlp_num_params(const td_mlp_t *mlp);
td_tensor_t *const *td_mlp_params(const td_mlp_t *mlp);
/* The flat parameter and gradient buffers (NULL for a COPY clone or after
 * set_params); borrowed. */
td_tensor_t *td_mlp_flat_params(const td_mlp_t *mlp);
td_tensor_t *td_mlp_flat_grads(const td_mlp_t *mlp);
/* Replace the parameters by PARAMS (retained), e.g. MetaSGD's outputs. */
td_status_t td_mlp_set_params(td_mlp_t *mlp, td_tensor_t *const *params);
td_status_t td_mlp_clone(const td_mlp_t *mlp, td_clone_mode_t mode,
                         td_mlp_t **out);
void        td_mlp_free(td_mlp_t *mlp);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_NN_H */
