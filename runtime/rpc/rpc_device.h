/* runtime/rpc/rpc_device.h: device tensors over RPC (internal to
 * runtime/rpc). Which map a message's tensors follow, GPU-direct or
 * staged, their preparation for the codec (host copies made here, through
 * the staging module ucx_transport/staging.h, never in the codec), the
 * staging engine of the RPC module, and the receiver's table of staged
 * bodies waiting for their message.
 *
 * A call to DST follows this worker's device map for DST, then for
 * devices it lacks the reverse map DST attached to its own messages (so
 * dist autograd's gradients, sent back by the callee, land on the device
 * each tensor came from); a reply follows the reverse map the call
 * attached (M5). Bodies go GPU-direct when UCX moves CUDA memory
 * (td__transport_mem_types), else ahead of the message through the staging
 * engine (ucx_transport/staging.h); the message leaves only when every
 * staged body is in the receiver's device memory, so the receiver finds
 * them in its table when the message arrives.
 *
 * Invariants:
 *  DV1. A staged body's receive buffer is allocated on the device its
 *       transfer id names (rpc_wire.h V3), once, by the engine's dest
 *       callback; it is owned by the table until the message claims it
 *       (then by the tensor), and freed when the transfer fails or its
 *       sender dies before the message came.
 *  DV2. The table holds at most TD_RPC_DEVICE_LANDED_MAX bodies; beyond
 *       that a transfer is refused (NACK), never queued without bound.
 *  DV3. A staged send completes exactly once: the message is sent when
 *       every body arrived, else DONE gets the first error and the message
 *       is not sent.
 *  DV4. Without a device (no CUDA, no test backend) there is no engine
 *       and no thread; device tensors are refused with the device named.
 * Thread safety: all functions are thread-safe except setup/shutdown
 * (the RPC module's, from td_init / td_finalize). */
#ifndef TD_RUNTIME_RPC_RPC_DEVICE_H
#define TD_RUNTIME_RPC_RPC_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <todist/status.h>
#include <todist/device.h>
#include <todist/world.h>
#include "ucx_transport/transport.h"
#include "ucx_transport/staging.h"
#include "runtime/rpc/rpc_wire.h"

#define TD_RPC_STAGING_ID        3     /* transport handler id */
#define TD_RPC_DEVICE_LANDED_MAX 1024  /* DV2 */

td_status_t td__rpc_device_setup(td_transport_t *tp, const td_world_t *w);
void        td__rpc_device_shutdown(void);
void        td__rpc_device_peer_failed(int rank);
size_t      td__rpc_device_outstanding(void);

/* The routing of one message to DST of TYPE into *ROUTE (storage for
 * the maps it points at); NULL when nothing device-related applies (no
 * maps either way: cpu tensors stay cpu, device tensors are refused). */
typedef struct {
    td_rpc_wire_dev_t dev;
    td_device_map_t   own, learned, attach;
} td_rpc_device_route_t;
const td_rpc_wire_dev_t *td__rpc_device_route(int dst, int type,
                                             td_rpc_device_route_t *route);

/* Sender: ARGS' tensors for a message to DST routed by DEV (NULL: cpu
 * tensors only), prepared in OUT for the codec (rpc_wire.h): each one's
 * landing device (V1), contiguous, a host copy through the staging module
 * where it travels as host memory (landing on the peer's cpu, or eager,
 * V5), its place (body, eager, staged). On an error OUT is freed. */
td_status_t td__rpc_device_prepare(const td_rpc_list_t *args, int dst,
                                  const td_rpc_wire_dev_t *dev,
                                  td_rpc_wire_out_t *out);

/* The sender's two steps: ARGS' tensors prepared (above), then the codec
 * (td__rpc_wire_encode_dev) describes them in OUT. On an error OUT is
 * freed. */
td_status_t td__rpc_device_encode(const td_rpc_wire_meta_t *meta,
                                 const td_rpc_list_t *args, int dst,
                                 size_t header_max,
                                 td_rpc_wire_rref_out_fn rref_out,
                                 void *rref_arg, const td_rpc_wire_dev_t *dev,
                                 td_rpc_wire_out_t *out);

/* Receiver: the tensor on DEVICE for an eager body HOST (V5), copied in
 * by the staging module. */
td_status_t td__rpc_device_land_eager(td_tensor_t *host, td_device_t device,
                                     td_tensor_t **out);

/* Receiver: remember the reply map SRC attached (rpc_wire.h V2). */
void        td__rpc_device_learn(int src, const td_device_map_t *map);

/* Send OUT's staged bodies to DST; DONE(ARG, status) once (DV3), on the
 * engine's thread or, on an error return, not at all. */
td_status_t td__rpc_device_send_staged(int dst, const td_rpc_wire_out_t *out,
                                      void (*done)(void *arg,
                                                   td_status_t status),
                                      void *arg);
/* Order the host after the devices OUT's direct device bodies live on
 * (UCX reads them once the send is posted). */
td_status_t td__rpc_device_sync_out(const td_rpc_wire_out_t *out);

/* Receiver: the tensor for descriptor T of a message from SRC (device
 * memory, or the staged body claimed from the table) and the memory type
 * its body lands in. */
td_status_t td__rpc_device_rx_tensor(int src, const td_rpc_wire_tensor_t *t,
                                    td_tensor_t **out, td_mem_type_t *mem_p);

/* Tests only: force the route (TD_ROUTE_DIRECT or TD_ROUTE_STAGED; -1:
 * decide by the transport's memory types), and the engine's counters. */
void        td__rpc_device_force_route(int route);
td_status_t td__rpc_device_stats(td_staging_stats_t *stats_p,
                                size_t *landed_p);

#endif /* TD_RUNTIME_RPC_RPC_DEVICE_H */
