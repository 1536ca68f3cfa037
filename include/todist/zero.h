/* todist/zero.h: ZeRO stage 1 (torch's ZeroRedundancyOptimizer): the
 * optimizer state sharded over a process group.
 *
 * The parameters (same dtype, CPU, contiguous) are seen as one flat vector
 * of T elements, cut into one contiguous shard per group rank, balanced to
 * within one element: rank r owns T/N elements, plus one when r < T % N
 * (PyTorch packs whole parameters greedily and can be off by a whole
 * parameter). Each rank keeps optimizer state (SGD momentum, Adam's moments)
 * for its shard only, through the ordinary optimizers (todist/optim.h) over
 * a shard-sized tensor, so the update rules are exactly theirs.
 *
 * One step (td_zero_step), with every parameter's .grad set:
 *   1. the gradients are reduce-scattered (average over the group) so each
 *      rank receives the averaged gradient of its own shard only;
 *   2. each rank steps its shard;
 *   3. the updated shards are all-gathered back into every parameter.
 * With DDP the gradients are already averaged (td_ddp_wait): use
 * td_zero_step_averaged, which skips step 1 and reads the rank's shard of
 * the .grads (DDP's buckets) directly. In a distributed autograd context
 * the gradients are the context's: td_zero_dist_step and
 * td_zero_dist_step_averaged.
 * The result equals the same optimizer over the whole model after an
 * all_reduce average of the gradients (tests/ddp/test_zero.sh: 1..4 ranks).
 *
 * Invariants:
 *  Z1 shard lengths differ by at most one element and sum to T; shard r
 *     starts at r * (T / N) + min(r, T % N).
 *  Z2 every member calls create/step/free in the same order (collectives).
 *  Z3 after a step that returned TD_OK every rank's parameters are equal
 *     (the all-gathered shards); a failed step leaves them as they were
 *     unless the all-gather itself failed (the group is then broken).
 *  Z4 the shard's optimizer steps its own copy of this rank's elements of
 *     the parameters, taken at create and again when a checkpoint load
 *     (todist/checkpoint.h, td_checkpoint_add_zero) wrote the parameters:
 *     between steps the parameters are the truth (Z3).
 *  Z5 the shards are cut for the group's size at create: when an elastic
 *     recovery re-forms the group with fewer or more members
 *     (todist/elastic.h), the lost shards' state is gone and a step
 *     fails with TD_ERR_STATE naming both sizes; make the optimizer again
 *     over the group and td_checkpoint_load the last checkpoint (its
 *     shards are re-cut, todist/checkpoint.h).
 * Threads: one object is used by one thread at a time. */
#ifndef TODIST_ZERO_H
#define TODIST_ZERO_H

#include <stdint.h>
#include <stddef.h>

#include <todist/status.h>
#include <todist/tensor.h>
#include <todist/optim.h>
#include <todist/coll.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_zero td_zero_t;

typedef enum {
    TD_ZERO_SGD   = 0,
    TD_ZERO_ADAM  = 1,
    TD_ZERO_ADAMW = 2
} td_zero_optim_t;

typedef struct {
    td_zero_optim_t optim;
    td_sgd_opts_t   sgd;       /* for TD_ZERO_SGD */
    td_adam_opts_t  adam;      /* for TD_ZERO_ADAM / TD_ZERO_ADAMW */
    td_group_t     *group;     /* NULL: the world */
} td_zero_opts_t;

/* Shard PARAMS[N] (leaves requiring grad, one floating dtype, CPU,
 * contiguous, distinct) over OPTS->group. Called by every member with the
 * same shapes (Z2). */
td_status_t td_zero_create(td_tensor_t *const *params, int n,
                           const td_zero_opts_t *opts, td_zero_t **zero_p);
/* Steps 1-3 above from the local .grads (a parameter without one is an
 * error naming it). */
td_status_t td_zero_step(td_zero_t *zero);
/* Steps 2-3 from .grads already averaged over the group (DDP). */
td_status_t td_zero_step_averaged(td_zero_t *zero);
/* The same two from the parameters' gradients in distributed autograd
 * context CTX_ID (todist/dist_autograd.h) instead of .grad, which is
 * neither read nor written: after td_dist_backward (steps 1-3), or after
 * DDP's td_ddp_dist_backward, which leaves the averages in the context
 * (steps 2-3). A parameter without a gradient in the context is an error
 * naming it. */
td_status_t td_zero_dist_step(td_zero_t *zero, int64_t ctx_id);
td_status_t td_zero_dist_step_averaged(td_zero_t *zero, int64_t ctx_id);
/* Zero every parameter's .grad in place. */
td_status_t td_zero_zero_grad(td_zero_t *zero);
/* This rank's shard: first element in the flat vector and length; and the
 * total T. */
void        td_zero_shard(const td_zero_t *zero, int64_t *offset_p,
                          int64_t *len_p, int64_t *total_p);
/* The shard's optimizer (todist/optim.h: one parameter, the shard; its
 * state buffers are this rank's elements of the flat state), for
 * inspection and checkpoints; NULL when the shard is empty (fewer
 * elements than ranks). Borrowed; do not step it. */
td_optim_t *td_zero_optim(const td_zero_t *zero);
/* Bytes of optimizer state this rank holds (shard length x state slots x
 * 8: the optimizers keep state in double). */
size_t      td_zero_state_bytes(const td_zero_t *zero);
void        td_zero_free(td_zero_t *zero);         /* NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif /* TODIST_ZERO_H */
