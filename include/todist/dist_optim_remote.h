/* todist/dist_optim_remote.h: the distributed optimizer over remote
 * references (torch.distributed.optim.DistributedOptimizer in C).
 *
 * Built from remote references (todist/rref.h) to parameter tensors held by
 * several owners: each reference's value list holds the parameter as its
 * first item. Construction groups the references by owner and creates, on
 * each owner, a per-owner optimizer (td_dist_optim_t, todist/dist_optim.h)
 * over that owner's parameters, by a call to an internal function; the
 * owner keeps it under an id. td_dist_optimizer_step(ctx) sends one call per
 * owner carrying the context id; each owner applies the gradients the
 * context accumulated on that worker to its parameters (SGD, Adam or AdamW
 * by PyTorch 1.13's rules), and the step waits for every owner and returns
 * the first failure in owner order, as "Error on rank N ...". Concurrent
 * steps that reach one owner are serialized by that owner's optimizer.
 * Destroying releases the owners' optimizers (best effort: a dead owner's
 * is gone with it).
 *
 * Threads: td_dist_optimizer_step and _step_async are thread-safe (several
 * threads may step one optimizer, each with its own context); create and
 * destroy are not thread-safe with steps on the same optimizer. */
#ifndef TODIST_DIST_OPTIM_REMOTE_H
#define TODIST_DIST_OPTIM_REMOTE_H

#include <stdint.h>
#include <todist/status.h>
#include <todist/optim.h>
#include <todist/rref.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_dist_optimizer td_dist_optimizer_t;

/* An optimizer over the parameters PARAMS[N] reference (N >= 1; the
 * references are not kept: each owner's optimizer keeps its tensors). The
 * options are checked on the owners (see todist/dist_optim.h); a failure on
 * any owner fails the whole construction and releases what was made. */
td_status_t td_dist_optimizer_sgd(td_rref_t *const *params, int n,
                                  const td_sgd_opts_t *opts,
                                  td_dist_optimizer_t **optim_p);
td_status_t td_dist_optimizer_adam(td_rref_t *const *params, int n,
                                   const td_adam_opts_t *opts,
                                   td_dist_optimizer_t **optim_p);
td_status_t td_dist_optimizer_adamw(td_rref_t *const *params, int n,
                                    const td_adam_opts_t *opts,
                                    td_dist_optimizer_t **optim_p);

/* Apply the gradients of distributed autograd context CTX_ID on every
 * owner (call before td_dist_autograd_end(CTX_ID)). */
td_status_t td_dist_optimizer_step(td_dist_optimizer_t *optim, int64_t ctx_id);
/* The same without waiting: *FUT_P (the caller's to release) completes
 * when every owner has stepped, failed with the first failure in owner
 * order. An async RPC handler (td_rpc_register_async) hands it back, so no
 * pool thread waits for the owners. */
td_status_t td_dist_optimizer_step_async(td_dist_optimizer_t *optim,
                                         int64_t ctx_id, td_future_t **fut_p);

/* The number of owners and the rank of owner I (0 <= I < owners). */
int         td_dist_optimizer_owners(const td_dist_optimizer_t *optim);
int         td_dist_optimizer_owner(const td_dist_optimizer_t *optim, int i);

void        td_dist_optimizer_destroy(td_dist_optimizer_t *optim);

/* The number of per-owner optimizers this worker holds for callers
 * (created and not yet destroyed): for leak checks and tests. */
int         td_dist_optimizer_held(void);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_DIST_OPTIM_REMOTE_H */
