/* runtime/ddp/ddp_internal.h: what Join (join.c) needs from DDP beyond
 * todist/ddp.h. Internal to libtodist. */
#ifndef TD_RUNTIME_DDP_INTERNAL_H
#define TD_RUNTIME_DDP_INTERNAL_H

#include <todist/ddp.h>
#include <todist/zero.h>

/* td_ddp_wait, with every reduced bucket multiplied by SCALE once all
 * completed and before the averages are handed out (.grad views, or the
 * context's gradients in a distributed backward, DDP9). 1.0: td_ddp_wait
 * exactly. Same thread rule as td_ddp_wait. */
td_status_t td__ddp_wait_scaled(td_ddp_t *ddp, double scale);

/* The bucket order, for checkpoints (runtime/elastic): ORDER[n] (n =
 * td_ddp_num_params) receives the parameter indices in launch order, and
 * *REBUILT whether the order is the one rebuilt from rank 0's first
 * iteration (DDP4). Not during a backward. */
void td__ddp_bucket_order(td_ddp_t *ddp, int *order, int *rebuilt);
/* Rebuild the buckets in ORDER[n] (a permutation of the parameters,
 * checked) and mark them rebuilt when REBUILT, so the first iteration
 * keeps them: a resumed run reduces in the saved run's buckets. Every
 * group member must set the same order before its first backward. */
td_status_t td__ddp_set_bucket_order(td_ddp_t *ddp, const int *order,
                                     int rebuilt);

/* ZeRO's group, for checkpoints (runtime/elastic/ckzero.c). Borrowed. */
td_group_t *td__zero_group(const td_zero_t *zero);
/* Copy this rank's shard of the parameters into the copy the shard's
 * optimizer steps (zero.c Z4): after the parameters were loaded. */
void        td__zero_sync_shard(td_zero_t *zero);
/* The replica this rank keeps (zero.h R1): its first element, its length
 * (0: none) and its optimizer (borrowed; NULL: none), for checkpoints. */
void        td__zero_replica(const td_zero_t *zero, int64_t *offset_p,
                             int64_t *len_p, td_optim_t **opt_p);
/* A checkpoint load wrote the state of step STEP into the shard's and the
 * replica's optimizers: every step count is STEP, nothing is pending, and
 * the shard of the parameters is re-taken (Z4). */
void        td__zero_loaded(td_zero_t *zero, int64_t step);

#endif /* TD_RUNTIME_DDP_INTERNAL_H */
