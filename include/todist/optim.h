/* todist/optim.h: optimizers with PyTorch 1.13's exact update rules (SGD
 * with momentum/dampening/nesterov/weight decay, Adam, AdamW), and
 * TorchOpt's differentiable MetaSGD step for inner loops.
 *
 * An optimizer updates its parameters in place from their .grad (params
 * without a .grad are skipped, as in PyTorch) and bumps their version.
 * Parameters may live on any device (cpu, cuda); each keeps its own state
 * on its device, as in PyTorch: a parameter skipped at some steps keeps
 * its own Adam step count and starts its momentum buffer when it first
 * gets a gradient. A step checks every gradient before it changes any
 * parameter.
 * Threads: one optimizer is used by one thread at a time; distinct
 * optimizers are independent. */
#ifndef TODIST_OPTIM_H
#define TODIST_OPTIM_H

#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_optim td_optim_t;

typedef struct {
    double lr;
    double momentum;
    double dampening;
    double weight_decay;
    int    nesterov;
} td_sgd_opts_t;

typedef struct {
    double lr;            /* 1e-3 in PyTorch */
    double beta1, beta2;  /* 0.9, 0.999 */
    double eps;           /* 1e-8 */
    double weight_decay;  /* Adam: L2 added to the gradient; AdamW: decoupled */
    int    amsgrad;
} td_adam_opts_t;

/* PyTorch's defaults for Adam (weight_decay 0) and AdamW (0.01). */
td_adam_opts_t td_adam_defaults(void);
td_adam_opts_t td_adamw_defaults(void);

td_status_t td_optim_sgd(td_tensor_t *const *params, int n,
                         const td_sgd_opts_t *opts, td_optim_t **out);
td_status_t td_optim_adam(td_tensor_t *const *params, int n,
                          const td_adam_opts_t *opts, td_optim_t **out);
td_status_t td_optim_adamw(td_tensor_t *const *params, int n,
                           const td_adam_opts_t *opts, td_optim_t **out);
td_status_t td_optim_step(td_optim_t *opt);
/* Zero every parameter's .grad in place (keeps the buffers). */
td_status_t td_optim_zero_grad(td_optim_t *opt);
void        td_optim_set_lr(td_optim_t *opt, double lr);
void        td_optim_free(td_optim_t *opt);

/* MetaSGD (TorchOpt): NEW_PARAMS[i] = params[i] - lr * d loss / d params[i],
 * computed with create_graph so an outer loss differentiates through the
 * update (second-order MAML). NEW_PARAMS get new references. */
td_status_t td_meta_sgd_step(td_tensor_t *loss, td_tensor_t *const *params,
                             int n, double lr, td_tensor_t **new_params);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_OPTIM_H */
