/* todist/dist_optim.h: the distributed optimizer's per-owner part.
 *
 * PyTorch's DistributedOptimizer keeps one local optimizer on every worker
 * that owns some of the parameters, and step(ctx) asks each owner to apply
 * the gradients that distributed autograd accumulated in the context on
 * that owner. td_dist_optim_t is that per-owner optimizer: it holds local
 * parameters (leaf tensors, float32 or float64, contiguous, on any
 * device: the updates are todist/optim.h's) and
 * td_dist_optim_step() applies the context's gradients to them with SGD,
 * Adam or AdamW, exactly by PyTorch 1.13's rules (torch.optim.SGD / Adam /
 * AdamW, including momentum, dampening, nesterov, weight decay, amsgrad). Parameters no
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
#include <todist/optim.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_dist_optim td_dist_optim_t;

/* An optimizer over PARAMS[N] (retained) with the options of todist/optim.h
 * (PyTorch's meaning and defaults: td_adam_defaults(), td_adamw_defaults()).
 * State is per parameter and on its device, as in PyTorch: a parameter
 * skipped at some steps (no gradient in that context) keeps its own Adam
 * step count and starts its momentum buffer when it first gets a gradient.
 * Rejects bad options (negative lr or weight decay, betas outside [0, 1),
 * nesterov without momentum or with dampening) and parameters that are not
 * contiguous float32/float64 leaves. */
td_status_t td_dist_optim_sgd(td_tensor_t *const *params, int n,
                              const td_sgd_opts_t *opts,
                              td_dist_optim_t **optim_p);
td_status_t td_dist_optim_adam(td_tensor_t *const *params, int n,
                               const td_adam_opts_t *opts,
                               td_dist_optim_t **optim_p);
/* Adam with decoupled weight decay (torch.optim.AdamW). */
td_status_t td_dist_optim_adamw(td_tensor_t *const *params, int n,
                                const td_adam_opts_t *opts,
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
