/* todist/ddp.h: DistributedDataParallel (PyTorch's reducer, VLDB'20).
 *
 * Every rank holds a replica of the model. td_ddp_create broadcasts the
 * parameters from the group's rank 0 so the replicas start equal, then lays
 * their gradients out in buckets: flat buffers in reverse registration order
 * (the order backward produces gradients), the first about
 * first_bucket_bytes (1 MiB) so communication starts early, the rest up to
 * bucket_cap_bytes (25 MiB). Each parameter's .grad becomes a view of its
 * bucket, so no gradient is copied into or out of a bucket.
 *
 * During backward, the autograd engine's post-accumulate hook marks a
 * parameter ready; when every parameter of a bucket is ready the bucket's
 * all_reduce (average over the group) starts at once, while the rest of the
 * backward runs. Buckets start in the same order on every rank (a bucket
 * waits for the ones before it), as the collectives require. After the
 * first iteration the buckets are rebuilt once in the order gradients
 * arrived on rank 0 (PyTorch does the same), so later iterations start
 * communicating as early as possible.
 *
 * One iteration:
 *     td_mlp_forward(...); loss = ...;
 *     td_ddp_backward(ddp, loss);      (or td_ddp_prepare_backward + td_backward)
 *     td_ddp_wait(ddp);                gradients are now averaged
 *     td_optim_step(opt); td_optim_zero_grad(opt);
 * td_ddp_wait is explicit; an optimizer stepped before it fails with
 * TD_ERR_STATE rather than read gradients still being reduced.
 *
 * Inside a distributed autograd context (PyTorch's DDP under
 * dist_autograd.backward, as in the RPC + DDP tutorial), the gradients go
 * to the context, not .grad (todist/dist_autograd.h); DDP then reduces the
 * context's gradients and writes the averages back into the context:
 *     TD_DIST_AUTOGRAD_CONTEXT(ctx) {
 *         ... loss = ...;
 *         td_ddp_dist_backward(ddp, ctx, loss);  the context now holds
 *                                                the averaged gradients
 *         td_dist_optimizer_step(opt, ctx);
 *     }
 *
 * - find_unused_parameters: td_ddp_prepare_backward walks the graph from
 *   the outputs and marks parameters it does not reach ready at once (their
 *   gradients take part as they are). Without it a parameter that got no
 *   gradient is an error at td_ddp_wait naming it, as PyTorch's message
 *   does, never a hang.
 * - no_sync (td_ddp_set_require_sync(ddp, 0)): gradients accumulate
 *   locally, nothing is communicated; the next synchronised iteration
 *   reduces the accumulated sums (gradient accumulation).
 * - comm_hook: replaces the default bucket all_reduce (average); it must
 *   start one collective on the group for the bucket and hand back its
 *   work, leaving the bucket averaged when the work completes.
 * Uneven inputs (PyTorch's Join): todist/join.h; SyncBatchNorm:
 * todist/syncbn.h.
 * Invariants (DDP1-DDP9):
 *   DDP1 every rank launches buckets in the same order: bucket i starts only
 *        after buckets 0..i-1 started; a bucket starts once per iteration.
 *   DDP2 in a local backward, a parameter's .grad is a view of its bucket
 *        whenever a bucket is launched (a replaced .grad is copied back in
 *        and re-viewed first).
 *   DDP3 td_ddp_wait returns TD_OK only when every bucket's work completed;
 *        otherwise the iteration is void and the error names the cause
 *        (the unused parameters, or the collective's error).
 *   DDP4 the bucket order is rebuilt at most once, from rank 0's arrival
 *        order broadcast to all, at the end of the first synchronised
 *        iteration, so all ranks rebuild identically.
 *   DDP5 under no_sync no collective is issued.
 *   DDP6 the hooks only touch DDP state under its lock; destroy removes them.
 *   DDP7 from a bucket's launch until td_ddp_wait its buffer is marked
 *        pending, and td_optim_step refuses (TD_ERR_STATE) to read it.
 *   DDP8 without a comm hook the last bucket of an iteration is reduced on
 *        the thread that completes it (nothing is left to overlap with), in
 *        the group's order after the earlier, asynchronous ones.
 *   DDP9 an iteration's gradients come from one place: .grad (a local
 *        backward, or td_ddp_prepare_backward) or one distributed autograd
 *        context (td_ddp_prepare_dist_backward / td_ddp_dist_backward), or
 *        else whichever the first gradient comes from (the post-accumulate
 *        hook asks td_dist_autograd_accumulating()); a gradient from
 *        elsewhere voids the iteration (DDP3). In a distributed backward a
 *        ready parameter's context gradient (zeros if none reached it) is
 *        copied into a second flat buffer of its bucket, which is what is
 *        reduced; td_ddp_wait writes every average back into the context
 *        (td_dist_set_gradient) only after all buckets completed; .grad is
 *        neither read nor written.
 * Threads: one DDP object is driven by one thread at a time; the hooks may
 * run on autograd threads. */
#ifndef TODIST_DDP_H
#define TODIST_DDP_H

#include <stddef.h>
#include <todist/coll.h>
#include <todist/nn.h>
#include <todist/status.h>
#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct td_ddp td_ddp_t;

/* Start reducing BUCKET (a flat 1-d tensor) over GROUP; set *WORK_P. When
 * the work completes the bucket must hold the group's average. */
typedef td_status_t (*td_ddp_comm_hook_fn)(void *arg, td_group_t *group,
                                           td_tensor_t *bucket,
                                           td_work_t **work_p);

typedef struct {
    td_group_t *group;              /* NULL: td_group_world() */
    size_t      first_bucket_bytes; /* default 1 MiB */
    size_t      bucket_cap_bytes;   /* default 25 MiB (TODIST_DDP_BUCKET_CAP_MB) */
    int         find_unused_parameters; /* default 0 */
    int         broadcast_parameters;   /* default 1: from group rank 0 */
    double      timeout_s;          /* td_ddp_wait's bound; default 0: the
                                       collectives' own (TODIST_COLL_TIMEOUT) */
    td_ddp_comm_hook_fn comm_hook;  /* NULL: all_reduce average */
    void       *comm_hook_arg;
    const char *const *names;       /* optional names of the parameters,
                                       for messages ("fc1.weight") */
} td_ddp_opts_t;

td_ddp_opts_t td_ddp_defaults(void);

/* Wrap PARAMS[N] (leaves that require grad; retained). Collective over the
 * group: every member calls it with the same shapes and dtypes, in the same
 * order (a mismatch is reported by the broadcast). Bad input names the
 * parameter: a non-leaf, one without requires_grad, a non-contiguous or a
 * non-CPU one, a duplicate. */
td_status_t td_ddp_create(td_tensor_t *const *params, int n,
                          const td_ddp_opts_t *opts, td_ddp_t **ddp_p);
/* The same over an MLP's parameters (named "layers.K.weight/bias"). */
td_status_t td_ddp_create_mlp(td_mlp_t *mlp, const td_ddp_opts_t *opts,
                              td_ddp_t **ddp_p);

/* Mark the start of an iteration's backward. OUTPUTS are the tensors the
 * backward starts from; they are only read with find_unused_parameters. */
td_status_t td_ddp_prepare_backward(td_ddp_t *ddp, td_tensor_t *const *outputs,
                                    int n);
/* td_ddp_prepare_backward(LOSS) + td_backward(LOSS). */
td_status_t td_ddp_backward(td_ddp_t *ddp, td_tensor_t *loss);

/* As td_ddp_prepare_backward, for a distributed backward in CTX_ID: the
 * gradients are read from and written back into that context (DDP9). */
td_status_t td_ddp_prepare_dist_backward(td_ddp_t *ddp, int64_t ctx_id,
                                         td_tensor_t *const *outputs, int n);
/* td_ddp_prepare_dist_backward(CTX_ID, LOSS) + td_dist_backward(CTX_ID,
 * LOSS) + td_ddp_wait: returns when the context holds the averaged
 * gradients of the parameters (as PyTorch's dist_autograd.backward returns
 * after the reducer finalized), ready for td_dist_optimizer_step. */
td_status_t td_ddp_dist_backward(td_ddp_t *ddp, int64_t ctx_id,
                                 td_tensor_t *loss);
/* Wait for every bucket of this iteration; gradients are then averaged. */
td_status_t td_ddp_wait(td_ddp_t *ddp);

/* no_sync: ON=0 accumulates locally without communicating; ON=1 (default)
 * reduces from the next iteration on. */
void td_ddp_set_require_sync(td_ddp_t *ddp, int on);

/* Broadcast BUFFERS[N] (e.g. running statistics) from the group's rank 0. */
td_status_t td_ddp_broadcast_buffers(td_ddp_t *ddp, td_tensor_t *const *buffers,
                                     int n);

/* Introspection for tests and tuning. */
int         td_ddp_num_buckets(const td_ddp_t *ddp);
/* Parameter indices of bucket B in launch order (borrowed; *N_P set). */
const int  *td_ddp_bucket_params(const td_ddp_t *ddp, int b, int *n_p);
/* Bucket B's flat gradient buffer in launch order (borrowed; NULL when B
 * is out of range): Join's shadow reductions match its size and dtype. */
td_tensor_t *td_ddp_bucket_tensor(const td_ddp_t *ddp, int b);
/* The wrapped parameters, in registration order (borrowed). */
int         td_ddp_num_params(const td_ddp_t *ddp);
td_tensor_t *td_ddp_param(const td_ddp_t *ddp, int i);
/* Whether a comm_hook replaces the default all_reduce (average). */
int         td_ddp_has_comm_hook(const td_ddp_t *ddp);
/* The group the DDP object reduces over (borrowed). */
td_group_t *td_ddp_group(const td_ddp_t *ddp);
/* Reduce over GROUP (borrowed; this rank a member) from the next
 * iteration on, keeping the buckets and their order: the world shrank in
 * place (todist/elastic.h). Between iterations only (after td_ddp_wait,
 * a failed one too: TD_ERR_STATE during one); the replicas must already
 * be equal (td_checkpoint_broadcast), nothing is broadcast here. */
td_status_t td_ddp_set_group(td_ddp_t *ddp, td_group_t *group);

/* Remove the hooks and release the buckets; parameters keep their
 * gradients (as plain tensors). NULL is fine. */
void td_ddp_destroy(td_ddp_t *ddp);

/* An example communication hook, PyTorch's allreduce_hook: divide the
 * bucket by the group size, then all_reduce SUM (the same average as the
 * default, reached the way compression hooks do it). ARG is unused. */
td_status_t td_ddp_hook_divide_then_sum(void *arg, td_group_t *group,
                                        td_tensor_t *bucket,
                                        td_work_t **work_p);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_DDP_H */
