/* runtime/rpc/staging_cuda.h: the staging engine's copy functions on a
 * device (internal), over the device's row (kernels/device.h): pinned host
 * buffers, copies queued on the device's stream (so they are ordered after
 * the kernels that produced the data, cuda_device.h G2), and a stream
 * synchronise as the wait. For CUDA these are the CUDA module's; for the
 * test backend (device.h D4) malloc and memcpy, so the same code runs on
 * every machine (the engine: tests/transport/staging_peer.c).
 * TD_ERR_UNSUPPORTED "no CUDA device: ..." without a
 * device. The CUDA copies have run on no GPU yet (see bench/RESULTS.md).
 * Thread-safe. */
#ifndef TD_RUNTIME_RPC_STAGING_CUDA_H
#define TD_RUNTIME_RPC_STAGING_CUDA_H

#include "ucx_transport/staging.h"

/* Fill OPS for device cuda:INDEX (ops->ctx encodes the index). */
td_status_t td_staging_cuda_ops(int index, td_staging_copy_ops_t *ops);

/* Fill OPS for the staging engine of RPC, which moves bodies of every
 * device of this process: each copy runs on the stream of the device its
 * device-side pointer lives on, and the wait synchronises the devices
 * copied on since the last wait (the engine calls both from its one
 * thread, staging.h S7). TD_ERR_UNSUPPORTED "no CUDA device: ..."
 * without one. */
td_status_t td_staging_device_ops(td_staging_copy_ops_t *ops);

#endif /* TD_RUNTIME_RPC_STAGING_CUDA_H */
