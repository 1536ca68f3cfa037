/* runtime/rpc/device_map.h: the device maps td_init validates and keeps
 * (internal). td_init publishes this worker's CUDA device count and
 * whether it can run NCCL in the store, in one key (td/dev/<rank> =
 * "<count> <0|1>": one round trip per rank), merges td_init_params_t.device_maps with
 * TODIST_DEVICE_MAPS, fetches the counts of the peers the maps name and
 * validates them (rules M1-M4 of todist/device.h) before the start-up
 * barrier, so a bad map fails td_init on the rank that has it, naming the
 * entry and the rule. td_device_maps() then returns them until
 * td_finalize. Not thread-safe against td_init/td_finalize (called from
 * them only); td_device_maps() is thread-safe in between. td_finalize
 * resets them only after the transport is destroyed: until then its
 * progress thread may route a reply through them. */
#ifndef TD_RUNTIME_RPC_DEVICE_MAP_H
#define TD_RUNTIME_RPC_DEVICE_MAP_H

#include <todist/device.h>
#include <todist/store.h>
#include <todist/world.h>

td_status_t td__device_maps_setup(td_store_t *store, const td_world_t *world,
                                 const td_device_maps_t *given,
                                 double timeout);
void        td__device_maps_reset(void);

/* Rank R's published device count and NCCL capability (td/dev/<R>),
 * waiting up to TIMEOUT for it. */
td_status_t td__device_maps_peer(td_store_t *store, int r, double timeout,
                                int *count_p, int *nccl_p);

#endif /* TD_RUNTIME_RPC_DEVICE_MAP_H */
