/* kernels/cuda/cuda_device.h: the CUDA device backend (internal; built
 * only with CUDA, see configure --with-cuda).
 *
 * Built into the module libtodist-cuda.so (kernels/module.h), never into
 * libtodist itself. Per device: one non-blocking stream that every kernel and copy of the
 * device is queued on, a caching allocator over cudaMalloc
 * (kernels/block_cache.h; stream order makes reuse safe), a cuBLAS handle
 * on that stream. State is made on first use of a device.
 *
 * Invariants:
 *  G1. No device, no driver: td__cuda_count() and everything after it fail
 *      with TD_ERR_UNSUPPORTED "no CUDA device (...)", never a crash; the
 *      answer is found once and kept.
 *  G2. All work of device N is ordered on its one stream; a host-visible
 *      result (td__device_memcpy to the host) synchronises that stream.
 *  G3. Kernel-table entries return nothing: a launch error is logged
 *      (base/log.h) with the kernel's name and recorded for
 *      td__cuda_last_launch_error(), so tests can see it.
 *  G4. A copy of at most TD_CUDA_SMALL_COPY bytes between the host and
 *      device N goes through N's pinned bounce ring (CUDA_BOUNCE_SLOTS
 *      slots, made on the first such copy), not through pageable memory:
 *      device to host is one async copy into a slot, one stream
 *      synchronisation and a memcpy out; host to device is a memcpy into
 *      a slot and one async copy, left in flight (G2 orders every later
 *      use of the destination after it), with an event that must have
 *      fired before the slot is written again. The ring's lock (owner:
 *      the copying thread, held for the whole copy) guards the slots and
 *      their events; it is taken after nothing and nothing is taken under
 *      it but the CUDA runtime's own locks. So a small device body costs
 *      one stream synchronisation per round trip on each side, not two.
 *      TODIST_CUDA_BOUNCE=0 (read at a device's first use) turns it off.
 * Thread-safe: all functions. */

#ifndef TD_KERNELS_CUDA_DEVICE_H
#define TD_KERNELS_CUDA_DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <todist/status.h>

#include "kernels/block_cache.h"
#include "kernels/device.h"

/* Largest copy through the bounce ring (G4): the RPC's eager bodies
 * (runtime/rpc/rpc_wire.h TD_RPC_WIRE_EAGER_MAX). */
#define TD_CUDA_SMALL_COPY ((size_t)64 << 10)

#ifdef __cplusplus
extern "C" {
#endif

td_status_t td__cuda_count(int *n_p);
/* Device INDEX's stream (a cudaStream_t) and cuBLAS handle; made once. */
td_status_t td__cuda_stream(int index, void **stream_p);
td_status_t td__cuda_blas(int index, void **handle_p);
/* The device a device pointer lives on (-1 with an error if none). */
int         td__cuda_device_of(const void *ptr);
/* Make INDEX current on the calling thread and return its stream. */
td_status_t td__cuda_enter(int index, void **stream_p);
/* Pinned host memory (malloc + cudaHostRegister: readable by another
 * process's process_vm_readv), for staging buffers. */
td_status_t td__cuda_host_alloc(size_t nbytes, void **ptr_p);
void        td__cuda_host_free(void *ptr);
/* Asynchronous copy on device INDEX's stream; then td__cuda_sync. */
td_status_t td__cuda_copy_async(int index, void *dst, const void *src,
                               size_t nbytes);
td_status_t td__cuda_sync(int index);
/* Allocator statistics of device INDEX. */
td_status_t td__cuda_cache_stats(int index, td_block_cache_stats_t *stats_p);
/* Record a failed launch (G3); the last one is kept per process. */
void        td__cuda_launch_failed(const char *kernel, const char *why);
const char *td__cuda_last_launch_error(void);

/* The kernels/device.h row of this backend (cuda_module.c hands it to
 * libtodist). */
extern const td_device_ops_t td_cuda_device_ops;

#ifdef __cplusplus
}
#endif
#endif /* TD_KERNELS_CUDA_DEVICE_H */
