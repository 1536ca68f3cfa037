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
 *     (todist/elastic.h), a step fails with TD_ERR_STATE naming both
 *     sizes until td_zero_set_group re-cut the shards for the new group.
 *
 * Elastic recovery (todist/elastic.h; docs/elastic.md):
 *  R1 with opts.replicate, group rank r also keeps a replica of its ring
 *     neighbour (r + 1) % N's shard state, so one death loses nothing.
 *  R2 the replica is stepped by the same optimizer code from the same
 *     inputs as the owner's shard, so it is bit for bit the owner's: with
 *     DDP (the _averaged steps) every rank holds the whole averaged
 *     gradient and the parameters, so it costs no communication; without
 *     (td_zero_step, td_zero_dist_step) each rank sends its averaged
 *     shard gradient to rank r - 1 (a td_isend under tag TD_TAG_MAX - 90
 *     on the group: do not use that tag there).
 *  R3 a step is dropped unless its all-gather completed somewhere: the
 *     own state is stepped before the all-gather, so its state before
 *     the step is kept (a snapshot); the replica is stepped only after
 *     this rank's all-gather completed, its inputs kept until then. A
 *     step whose all-gather failed here leaves the optimizer refusing to
 *     step until td_zero_set_group.
 *  R4 td_zero_set_group(zero, group), collective over GROUP (the new
 *     epoch's members, joiners with td_zero_join): every member tells its
 *     old rank and step counts (one all_reduce); the step kept is the
 *     highest one whose all-gather completed on a member (the elastic
 *     plan's committed step when the program commits after each
 *     successful step); each old shard's state at that step comes from
 *     its owner if it survived (its snapshot when it had stepped past),
 *     else from the replica (stepped on from its kept inputs when it was
 *     one behind); the flat state then moves to the new cut in pieces of
 *     1M elements per state buffer, an integer sum of each piece where
 *     exactly one member wrote each element (bits exact), so a
 *     re-sharded state is the same numbers as the old one. Every member
 *     returns the same error when a shard is lost (its owner and its
 *     replica keeper both gone, or no replica): then free the optimizer,
 *     make it again over the group and td_checkpoint_load the last
 *     checkpoint. Memory: replicate holds the shard's state 3 times (own,
 *     snapshot, replica: 3/N of the unsharded state) plus 2 shard-sized
 *     parameter-dtype buffers; the re-shard briefly 8 MiB more.
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
    int             replicate; /* 1: keep the ring neighbour's shard too
                                  (R1-R3), so td_zero_set_group survives
                                  one death (or several not adjacent) */
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
/* R4: re-cut the shards for GROUP (the elastic epoch's group after
 * td_elastic_recover or a growth in td_elastic_admit; the same handle for
 * a subgroup re-formed in place), moving the optimizer state: collective
 * over GROUP, joiners calling td_zero_join. Call it after the parameters
 * were healed (td_checkpoint_broadcast, which skips ZeRO items).
 * TD_ERR_STATE when a shard's state is lost (see R4). */
td_status_t td_zero_set_group(td_zero_t *zero, td_group_t *group);
/* In a replacement (td_elastic_join): ZERO made over the new epoch's
 * group and never stepped receives its shard (and replica) in the
 * members' td_zero_set_group. */
td_status_t td_zero_join(td_zero_t *zero);
void        td_zero_free(td_zero_t *zero);         /* NULL is a no-op */

#ifdef __cplusplus
}
#endif
#endif /* TODIST_ZERO_H */
