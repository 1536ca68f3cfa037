/* todist/device.h: devices, moving tensors between them, and the per-peer
 * device maps that say where a device tensor sent over RPC lands.
 *
 * Devices: "cpu" and "cuda:N". A library built with CUDA (configure
 * --with-cuda, the default when /usr/local/cuda has nvcc) allocates cuda
 * tensors through a stream-ordered caching allocator and runs their ops
 * on the kernels of kernels/cuda/; on a machine without a device (or built
 * --without-cuda) every cuda request fails with TD_ERR_UNSUPPORTED and the
 * message "no CUDA device (...)", never a crash.
 *
 * Device maps follow PyTorch's TensorPipe rules
 * (TensorPipeRpcBackendOptions.set_device_map and _validate_device_maps):
 * one map per peer, pairs SOURCE (this worker's device) -> TARGET (the
 * peer's device);
 *   M1. a source appears at most once (one-to-one),
 *   M2. a target appears at most once (one-to-one),
 *   M3. cuda indices are below the device count (sources: this worker's,
 *       targets: the peer's), cpu is allowed on either side (index 0),
 *   M4. the peer is a rank of the world,
 *   M5. replies travel by the reverse map (target -> source), derived,
 *       never given separately, so a reply lands where the call came from.
 * Every rejection names the map, the entry and the rule it broke.
 *
 * Device tensors over RPC (calls, replies, remote references, distributed
 * autograd):
 *   M6. a tensor on device D sent to a peer lands on map(D) there; a cpu
 *       tensor without an entry stays cpu; a device without an entry is
 *       TD_ERR_NOT_FOUND naming the device and the peer, before anything
 *       is sent;
 *   M7. a call carries the reverse of the caller's map: the reply (and a
 *       call back from that peer for a device its own map lacks, e.g.
 *       distributed autograd's gradients) lands on the device each tensor
 *       came from;
 *   M8. bodies go GPU-direct when UCX moves CUDA memory, else through
 *       pinned host buffers (staged, double-buffered); the result is the
 *       same either way.
 *
 * Environment form (read by td_init, after td_init_params_t.device_maps):
 *   TODIST_DEVICE_MAPS="worker1=cuda:0->cuda:1,cuda:1->cuda:0;2=cpu->cuda:0"
 * peers separated by ';', a peer named "workerN" or "N", pairs by ','.
 * Spaces around tokens are ignored.
 *
 * Threads: all functions are thread-safe on distinct maps; a map read by
 * several threads must not be changed meanwhile. */
#ifndef TODIST_DEVICE_H
#define TODIST_DEVICE_H

#include <todist/status.h>
#include <todist/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_DEVICE_MAP_PAIRS_MAX 16   /* pairs per peer */
#define TD_DEVICE_MAPS_MAX      64   /* peers with a map */
#define TD_DEVICE_MAPS_SPEC_MAX 4096 /* bytes of an environment form */

/* Number of devices of TYPE on this machine (cpu: 1). TD_ERR_UNSUPPORTED
 * "no CUDA device (...)" when there is none. */
td_status_t td_device_count(td_device_type_t type, int *n_p);

/* "cpu" / "cuda:3" into BUF. */
const char *td_device_str(td_device_t device, char *buf, size_t len);

/* T on DEVICE: T itself (retained) when it is there already, else a
 * contiguous copy there. Differentiable: the gradient goes back to T's
 * device (PyTorch's Tensor.to). */
td_status_t td_tensor_to(td_tensor_t *t, td_device_t device,
                         td_tensor_t **out);

typedef struct {
    td_device_t from;    /* this worker's device */
    td_device_t to;      /* the peer's device */
} td_device_pair_t;

typedef struct {
    int              peer;                       /* rank */
    int              n_pairs;
    td_device_pair_t pairs[TD_DEVICE_MAP_PAIRS_MAX];
} td_device_map_t;

typedef struct {
    int             n_maps;
    td_device_map_t maps[TD_DEVICE_MAPS_MAX];
} td_device_maps_t;

/* Add FROM -> TO to the map for PEER (PyTorch's set_device_map: an entry
 * for FROM already there must agree, M1, and no other source may map to
 * TO, M2). */
td_status_t td_device_maps_add(td_device_maps_t *maps, int peer,
                               td_device_t from, td_device_t to);

/* Parse the environment form into MAPS (added to what is there). */
td_status_t td_device_maps_parse(const char *spec, td_device_maps_t *maps);

/* Check every map (M1-M4) for worker SELF in a world of WORLD_SIZE whose
 * rank r has COUNTS[r] cuda devices. */
td_status_t td_device_maps_validate(const td_device_maps_t *maps, int self,
                                    int world_size, const int *counts);

/* The map for PEER (NULL: none). */
const td_device_map_t *td_device_maps_find(const td_device_maps_t *maps,
                                           int peer);

/* The maps td_init validated for this worker (td_init_params_t
 * .device_maps merged with TODIST_DEVICE_MAPS); NULL when not initialised.
 * Valid until td_finalize. */
const td_device_maps_t *td_device_maps(void);

/* M5: the map replies from PEER back to us travel by. */
td_status_t td_device_map_reverse(const td_device_map_t *map,
                                  td_device_map_t *out);

/* Where FROM lands at MAP's peer; TD_ERR_NOT_FOUND naming the device and
 * the peer when FROM has no entry (a cpu tensor with no entry stays cpu).
 * MAP may be NULL (no map for that peer). */
td_status_t td_device_map_lookup(const td_device_map_t *map, int peer,
                                 td_device_t from, td_device_t *to_p);

#ifdef __cplusplus
}
#endif
#endif /* TODIST_DEVICE_H */
