/* runtime/tensor/optim_internal.h: an optimizer step from gradients its
 * caller supplies (the distributed optimizer's come from a distributed
 * autograd context, not .grad). Internal to libtodist. */
#ifndef TD_RUNTIME_TENSOR_OPTIM_INTERNAL_H
#define TD_RUNTIME_TENSOR_OPTIM_INTERNAL_H

#include <todist/optim.h>

/* td_optim_step with GRADS[i] (borrowed; NULL: parameter i is skipped, as
 * one without .grad) in place of the parameters' .grad. Every gradient is
 * checked (dtype, shape and device of its parameter, no collective still
 * writing it) before any parameter changes. Same thread rule as
 * td_optim_step. */
td_status_t td__optim_step_grads(td_optim_t *o, td_tensor_t *const *grads);

#endif /* TD_RUNTIME_TENSOR_OPTIM_INTERNAL_H */
