/* runtime/coll/nccl.h: collectives on device tensors (internal to
 * runtime/coll): the route (NCCL or staged through the host path), the
 * staging of device tensors through host buffers, and the NCCL
 * communicators, one per group, cached. (The staged route's host copies
 * are run.c's, through the staging module, ucx_transport/staging.h.)
 *
 * Route of one collective (coll_device_route):
 *   NCCL    the CUDA module (kernels/module.h) has NCCL, the tensor is on a
 *           real CUDA device, and
 *           every member of the group published "NCCL-capable" at td_init
 *           (td/dev/<rank> in the store: NCCL in the module, a device, not
 *           the test backend) and is on a GPU of its own (N5); all_reduce, broadcast, reduce, all_gather
 *           and reduce_scatter; the others are staged;
 *   STAGED  any other device tensor: copied to host buffers, the host
 *           algorithm (with its mismatch checks), copied back; exact, and
 *           in a group that is staged, members with cpu and device tensors
 *           mix freely (in an NCCL group they follow c10d's rule below);
 *   HOST    cpu tensors: the host path as it is.
 * The members agree without a message: the capability of every member
 * comes from the store, and the route depends only on it and on the
 * tensor's device, which c10d's contract already fixes (members pass
 * tensors on the same kind of device to one collective).
 *
 * Invariants:
 *  N1. A staged collective reads its device inputs before the host
 *      algorithm starts and writes its device outputs only after it
 *      succeeded; on an error the device tensors are left as they were.
 *  N2. One NCCL communicator per group (on one device per rank: a tensor
 *      on another device of the same rank is refused, naming both), made
 *      at the group's first NCCL collective from the unique id group rank
 *      0 puts in the store (td/nccl/id/<group id>/<digest>: no device
 *      index, since members number their GPUs as they like); kept until
 *      td_finalize.
 *  N3. An NCCL collective is queued on the tensor's device stream (after
 *      the kernels that made it) and the work completes after a stream
 *      synchronise: a completed td_work means the result is in place.
 *  N4. No NCCL call waits forever: the stream is polled until the
 *      collective timeout (TODIST_COLL_TIMEOUT), watching NCCL's async
 *      error; on either, the communicator is aborted (ncclCommAbort, and
 *      dropped from the cache) and the group fails (coll.c C6) with an
 *      error naming the group, the rank and the cause. A mismatched call
 *      (a member that passes a cpu tensor, or never calls) thus ends in
 *      an error, not NCCL's hang.
 *  N5. NCCL only where every member has a GPU of its own: at the group's
 *      first collective on device tensors the members trade which GPU
 *      each is on (host id and PCI bus id, td/nccl/gpu/<group>/<digest>/
 *      <rank>); if two share one (ranks sharing GPUs, --share-gpus) the
 *      group's device collectives are staged, logged once. All members
 *      read the same ids, so all choose the same route.
 * Thread safety: called on the group's operation thread (work.c); the
 * communicator cache has its own lock. */
#ifndef TD_RUNTIME_COLL_NCCL_H
#define TD_RUNTIME_COLL_NCCL_H

#include "runtime/coll/args.h"

typedef enum { COLL_ROUTE_HOST, COLL_ROUTE_STAGED, COLL_ROUTE_NCCL }
    coll_route_t;

coll_route_t coll_device_route(td_group_t *g, const coll_args_t *a);

/* Run A through NCCL (N2, N3). */
td_status_t coll_nccl_run(td_group_t *g, const coll_args_t *a);

/* td_finalize: destroy the communicators. (The capability is published
 * by td_init, runtime/rpc/device_map.c.) */
void        coll_nccl_shutdown(void);

#endif /* TD_RUNTIME_COLL_NCCL_H */
