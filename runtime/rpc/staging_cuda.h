/* runtime/rpc/staging_cuda.h: the staging engine's copy functions on a
 * CUDA device (internal): pinned host buffers from cudaHostAlloc, copies
 * by cudaMemcpyAsync on the device's stream (so they are ordered after the
 * kernels that produced the data, cuda_device.h G2), and a stream
 * synchronise as the wait. TD_ERR_UNSUPPORTED "no CUDA device" without a
 * device or without CUDA in the build. The engine itself is tested with
 * host memory (tests/transport/staging_peer.c); these functions have run on no GPU
 * yet (see bench/RESULTS.md). Thread-safe. */
#ifndef TD_RUNTIME_RPC_STAGING_CUDA_H
#define TD_RUNTIME_RPC_STAGING_CUDA_H

#include "ucx_transport/staging.h"

/* Fill OPS for device cuda:INDEX (ops->ctx encodes the index). */
td_status_t td_staging_cuda_ops(int index, td_staging_copy_ops_t *ops);

/* Fill OPS for the staging engine of RPC, which moves bodies of every
 * device of this process: each copy runs on the stream of the device its
 * device-side pointer lives on, and the wait synchronises the devices
 * copied on since the last wait (the engine calls both from its one
 * thread, staging.h S7). With the test backend (kernels/device.h D4):
 * malloc and memcpy. TD_ERR_UNSUPPORTED "no CUDA device" otherwise. */
td_status_t td_staging_device_ops(td_staging_copy_ops_t *ops);

#endif /* TD_RUNTIME_RPC_STAGING_CUDA_H */
