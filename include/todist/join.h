/* todist/join.h: uneven inputs with DistributedDataParallel (PyTorch's
 * `with Join([ddp]):`). Ranks may hold different numbers of batches; a rank
 * that runs out keeps answering the others' collectives (the per-iteration
 * join count and every DDP bucket all_reduce, with zero gradients, in
 * bucket order) until every rank has run out, so nobody hangs. Gradients
 * are averaged over the initial group size (PyTorch's default: the joined
 * ranks contribute zeros) or, with divide_by_initial_world_size = 0, over
 * the ranks still training in that iteration. At the end the parameters of
 * the last rank to join (the one that trained longest; the lowest group
 * rank among ties) are broadcast to all, as PyTorch's join hook does, so
 * the replicas end equal.
 *
 *     td_ddp_join_t *j;
 *     td_ddp_join_begin(ddp, NULL, &j);
 *     for (b = 0; b < my_batches; b++) {
 *         td_ddp_join_step(j);              collective: I still train
 *         forward; td_ddp_backward(ddp, loss);
 *         td_ddp_join_wait(j);              td_ddp_wait + the divisor
 *         td_optim_step(opt); td_optim_zero_grad(opt);
 *     }
 *     td_ddp_join_end(j);                   shadow until all are done
 *     td_ddp_join_destroy(j);
 *
 * Limits: the DDP object must use the default reduction (no comm_hook),
 * and every rank runs at least one iteration (the first iteration rebuilds
 * the buckets collectively); a rank that joins before its first iteration
 * makes every rank's td_ddp_join_step / td_ddp_join_end fail with
 * TD_ERR_UNSUPPORTED instead of hanging.
 * Threads: one join object is driven by the thread that drives its DDP. */
#ifndef TODIST_JOIN_H
#define TODIST_JOIN_H

#include <todist/ddp.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_ddp_join td_ddp_join_t;

typedef struct {
    int divide_by_initial_world_size;   /* default 1 (PyTorch's) */
} td_ddp_join_opts_t;

/* Start a join context over DDP (not collective). OPTS NULL: defaults. */
td_status_t td_ddp_join_begin(td_ddp_t *ddp, const td_ddp_join_opts_t *opts,
                              td_ddp_join_t **join_p);
/* Before each iteration a rank still trains: all_reduce of the join count
 * (collective with the joined ranks' shadow loop). */
td_status_t td_ddp_join_step(td_ddp_join_t *join);
/* td_ddp_wait, then (divide_by_initial_world_size = 0) the gradients scaled
 * from the group average to the average over the ranks still training. */
td_status_t td_ddp_join_wait(td_ddp_join_t *join);
/* This rank is out of batches: answer the others' join counts and bucket
 * reductions until every rank has called it, then broadcast the final
 * parameters from the last rank to join. Collective. */
td_status_t td_ddp_join_end(td_ddp_join_t *join);
/* Ranks still training in the last counted iteration (after step/end). */
int         td_ddp_join_active(const td_ddp_join_t *join);
/* Group rank whose parameters everyone holds after td_ddp_join_end. */
int         td_ddp_join_last_joiner(const td_ddp_join_t *join);
void        td_ddp_join_destroy(td_ddp_join_t *join);

#ifdef __cplusplus
}
#endif

#endif /* TODIST_JOIN_H */
