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

/* The state, for checkpoints (todist/checkpoint.h). Parameter I's step
 * count (updates it received; SGD's first update copies the gradient into
 * the momentum, Adam's bias correction counts from it), and its state
 * buffer B of td_optim_num_buffers (SGD: momentum (none without momentum);
 * Adam/AdamW: exp_avg, exp_avg_sq, max_exp_avg_sq with amsgrad), float64
 * shaped like the parameter, made zeroed when absent (a zero buffer with
 * step 0 updates as a missing one). Borrowed; valid until td_optim_free.
 * Not while td_optim_step runs. */
double      td_optim_lr(const td_optim_t *opt);
int         td_optim_num_params(const td_optim_t *opt);
int         td_optim_num_buffers(const td_optim_t *opt);
int64_t     td_optim_param_step(const td_optim_t *opt, int i);
td_status_t td_optim_set_param_step(td_optim_t *opt, int i, int64_t step);
td_status_t td_optim_buffer(td_optim_t *opt, int i, int b, td_tensor_t **out);

/* MetaSGD (TorchOpt): NEW_PARAMS[i] = params[i] - lr * d loss / d params[i],
 * computed with create_graph so an outer loss differentiates through the
 * update (second-order MAML). NEW_PARAMS get new references. */
td_status_t td_meta_sgd_step(td_tensor_t *loss, td_tensor_t *const *params,
                             int n, double lr, td_tensor_t **new_params);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_OPTIM_H */
