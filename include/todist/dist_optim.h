/* todist/dist_optim.h: the distributed optimizer's per-owner part.
 *
 * PyTorch's DistributedOptimizer keeps one local optimizer on every worker
 * that owns some of the parameters, and step(ctx) asks each owner to apply
 * the gradients that distributed autograd accumulated in the context on
 * that owner. td_dist_optim_t is that per-owner optimizer: it holds local
 * parameters (leaf tensors, float32 or float64, contiguous) and
 * td_dist_optim_step() applies the context's gradients to them with SGD or
 * Adam, exactly by PyTorch 1.13's rules (torch.optim.SGD / Adam, including
 * momentum, dampening, nesterov, weight decay and amsgrad). Parameters no
 * gradient reached in the context are left alone, as PyTorch skips
 * parameters whose gradient is None. .grad is never read or written.
 *
 * Threads: td_dist_optim_step is thread-safe, and concurrent steps on one
 * optimizer are serialized (one at a time, in lock order), as PyTorch's
 * _LocalOptimizer does. create/destroy are not thread-safe with steps. */
#ifndef TODIST_DIST_OPTIM_H
#define TODIST_DIST_OPTIM_H

#include <stdint.h>
#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TD_OPTIM_SGD  = 0,
    TD_OPTIM_ADAM = 1
} td_optim_kind_t;

typedef struct {
    td_optim_kind_t kind;
    double lr;
    double weight_decay;
    /* SGD */
    double momentum;
    double dampening;
    int    nesterov;
    /* Adam */
    double beta1, beta2, eps;
    int    amsgrad;
} td_optim_params_t;

/* PyTorch's defaults: SGD(lr) and Adam(lr, betas=(0.9, 0.999), eps=1e-8). */
td_optim_params_t td_optim_sgd(double lr);
td_optim_params_t td_optim_adam(double lr);

typedef struct td_dist_optim td_dist_optim_t;

/* An optimizer over PARAMS[N] (retained). Rejects bad hyper-parameters
 * (negative lr, momentum, betas outside [0,1), nesterov without momentum
 * or with dampening) and non-leaf, non-float or non-contiguous params. */
td_status_t td_dist_optim_create(const td_optim_params_t *params,
                                 td_tensor_t *const *tensors, int n,
                                 td_dist_optim_t **optim_p);
void        td_dist_optim_destroy(td_dist_optim_t *optim);

/* Apply the gradients of CTX_ID on this worker to the parameters. */
td_status_t td_dist_optim_step(td_dist_optim_t *optim, int64_t ctx_id);

/* The number of steps taken (Adam's step count is per parameter). */
int64_t     td_dist_optim_steps(const td_dist_optim_t *optim);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_DIST_OPTIM_H */
