/* todist/remote_module.h: RemoteModule (torch.distributed.nn.RemoteModule):
 * a module created on a chosen worker (its owner), whose forward runs there
 * by RPC inside the caller's distributed autograd context, and whose
 * parameters are available as remote references for the distributed
 * optimizer (todist/dist_optim_remote.h).
 *
 * Kinds: TD_RM_LINEAR (in, out: y = x W^T + b, the weights of
 * td_mlp_create({in, out}, seed)), TD_RM_EMBEDDING_BAG (num, dim, mode:
 * weight[num, dim] ~ N(0, 1) from seed, forward(indices, offsets) as
 * td_embedding_bag) and TD_RM_MLP (sizes..., as td_mlp_create). Parameters
 * are float64 or float32 as asked.
 *
 * A forward called inside a distributed autograd context
 * (td_dist_autograd_begin) records the RPC's send/recv nodes, so
 * td_dist_backward reaches the owner's parameters, whose gradients land in
 * the context on the owner (not in .grad). td_remote_module_free releases
 * the module on its owner; parameters still held by remote references stay
 * alive until those are released too.
 *
 * Invariants:
 *  RM1 a module lives in its owner's table (at most TD_RM_MAX) from create
 *      to free; an id is never reused while the owner runs.
 *  RM2 forward and remote_parameters name the module by (owner, id): a
 *      freed or unknown id fails with TD_ERR_NOT_FOUND naming both.
 *  RM3 only the handle td_remote_module_create returned releases the
 *      module; a handle passed to another worker (add_to_list /
 *      from_list) refers to it without owning it, as long as it lives.
 * Threads: every function is thread-safe; one handle must not be used
 * after td_remote_module_free. */
#ifndef TODIST_REMOTE_MODULE_H
#define TODIST_REMOTE_MODULE_H

#include <stdint.h>

#include <todist/status.h>
#include <todist/tensor.h>
#include <todist/rref.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_RM_MAX 1024      /* live modules per owner */

typedef enum {
    TD_RM_LINEAR        = 1,
    TD_RM_EMBEDDING_BAG = 2,
    TD_RM_MLP           = 3
} td_rm_kind_t;

typedef struct td_remote_module td_remote_module_t;

/* Create a module of KIND on worker OWNER. CFG[N_CFG]: linear {in, out};
 * embedding_bag {num, dim, mode (TD_BAG_SUM / TD_BAG_MEAN)}; mlp {sizes}
 * (2..16 of them). */
td_status_t td_remote_module_create(int owner, td_rm_kind_t kind,
                                    const int64_t *cfg, int n_cfg,
                                    td_dtype_t dtype, uint64_t seed,
                                    td_remote_module_t **rm_p);
/* Forward on the owner: linear / mlp take X; embedding_bag takes INDICES
 * (int64, 1-d) and OFFSETS (int64, 1-d; may not be NULL). *OUT_P is a new
 * reference. */
td_status_t td_remote_module_forward(td_remote_module_t *rm, td_tensor_t *x,
                                     td_tensor_t *offsets,
                                     td_tensor_t **out_p);
/* The parameters as remote references (owned by the module's owner), in
 * the module's order (W, b per layer; the embedding weight). *RREFS_P is
 * malloc'ed; release each and free the array. */
td_status_t td_remote_module_parameters(td_remote_module_t *rm,
                                        td_rref_t ***rrefs_p, int *n_p);
int         td_remote_module_owner(const td_remote_module_t *rm);
/* The module's id in its owner's table (for messages and tests). */
int64_t     td_remote_module_id(const td_remote_module_t *rm);
/* Pass the module to another worker in a value list, as PyTorch passes a
 * RemoteModule in RPC arguments: append (owner, id, parameter count) as
 * three integers. */
td_status_t td_remote_module_add_to_list(const td_remote_module_t *rm,
                                         td_rpc_list_t *list);
/* A handle for the module at items INDEX..INDEX+2 of LIST (as added by
 * td_remote_module_add_to_list; anything else is TD_ERR_PROTOCOL). It
 * does not own the module (RM3). */
td_status_t td_remote_module_from_list(const td_rpc_list_t *list,
                                       size_t index,
                                       td_remote_module_t **rm_p);
/* Release it on its owner (errors are logged), then free the handle; a
 * handle from td_remote_module_from_list frees only itself (RM3). */
td_status_t td_remote_module_free(td_remote_module_t *rm);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_REMOTE_MODULE_H */
