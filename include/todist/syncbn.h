/* todist/syncbn.h: SyncBatchNorm (torch.nn.SyncBatchNorm) over the
 * features of a [N_r, C] input on every member of a group: in train mode
 * the batch mean and variance are those of the whole group's batch (the
 * concatenation of every rank's rows; ranks may hold different N_r), so
 * the result on each rank equals its rows of td_batch_norm over the
 * concatenated batch. The backward all_reduces the two per-channel terms
 * sum(dy) and sum(dy (x - mean)) (PyTorch's sync_batch_norm backward);
 * the weight and bias gradients stay local (DDP averages them), so their
 * sum over the group is the concatenated batch's gradient. Eval mode is
 * td_batch_norm with the running statistics, no communication.
 *
 * It is collective: every member calls the forward (and runs the
 * backward) the same number of times in the same order as its other
 * collectives on GROUP. First order only (no create_graph), as PyTorch.
 * Thread-safe as the collectives are; a module is used by one thread. */
#ifndef TODIST_SYNCBN_H
#define TODIST_SYNCBN_H

#include <todist/batchnorm.h>
#include <todist/coll.h>

#ifdef __cplusplus
extern "C" {
#endif

/* As td_batch_norm (todist/batchnorm.h), with batch statistics over GROUP
 * (NULL: td_group_world()); float64 per-channel sums on the wire. In train
 * mode the group's total N must be at least 2; a rank may hold 0 rows. */
td_status_t td_sync_batch_norm(td_group_t *group, td_tensor_t *x,
                               td_tensor_t *running_mean,
                               td_tensor_t *running_var, td_tensor_t *weight,
                               td_tensor_t *bias, int training,
                               double momentum, double eps,
                               td_tensor_t **out);

/* torch.nn.SyncBatchNorm over a td_batchnorm1d_t's parameters and buffers
 * (torch's convert_sync_batchnorm: the same module, synchronised). */
td_status_t td_syncbn_forward(td_batchnorm1d_t *bn, td_group_t *group,
                              td_tensor_t *x, td_tensor_t **out);

#ifdef __cplusplus
}
#endif

#endif /* TODIST_SYNCBN_H */
