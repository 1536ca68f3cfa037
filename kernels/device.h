/* kernels/device.h: device memory behind the kernel table (internal).
 *
 * What a device type provides besides its kernels: how many devices there
 * are, allocation (through a caching allocator), and byte copies between it
 * and the host. runtime/tensor allocates storage and crosses devices only
 * through these calls, so a CUDA tensor needs no second code path there.
 * The CPU row is plain malloc/memcpy; the CUDA row (kernels/cuda/) comes
 * from the module libtodist-cuda.so, loaded on the first request for a
 * cuda device (kernels/module.h); without the module, or without a
 * driver, every call for a cuda device fails with TD_ERR_UNSUPPORTED
 * naming what is missing.
 *
 * Invariants:
 *  D1. td__device_alloc(dev, n) of any n (0 included) returns memory of at
 *      least n bytes that td__device_free(dev, p) gives back; p is never
 *      reused before it was freed.
 *  D2. td__device_memcpy returns when SRC may be reused and DST holds the
 *      bytes for every later reader: at once for a host DST (synchronous
 *      for the host); for a device DST, for all later work on the
 *      device's stream and every later copy to the host (a row may leave
 *      a small host-to-device copy in flight on that stream, as the CUDA
 *      row does: cuda_device.h G4). Device work before it on the device's
 *      stream is ordered before the copy.
 *  D3. A machine without a usable device (no module, no driver, no GPU)
 *      gets TD_ERR_UNSUPPORTED "no CUDA device: <what is missing>" from
 *      every call, never a crash.
 *  D4. (below) the test backend is reachable from test programs only.
 * Thread-safe: all functions. */
#ifndef TD_KERNELS_DEVICE_H
#define TD_KERNELS_DEVICE_H

#include <stddef.h>
#include <todist/status.h>
#include <todist/tensor.h>

#include "kernels/block_cache.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What device INDEX's copies have cost so far (td__device_copy_counts):
 * the per-message work of a small device body made visible to tests and
 * benchmarks (docs/gpus.md, "Small device bodies"). */
typedef struct {
    unsigned long long copies;     /* host<->device copies (td__device_memcpy) */
    unsigned long long bounced;    /* of them, through the pinned bounce ring */
    unsigned long long syncs;      /* stream synchronisations (any cause) */
} td_device_copy_counts_t;

typedef struct {
    const char  *name;                                   /* "cuda" */
    td_status_t (*count)(int *n_p);
    td_status_t (*alloc)(int index, size_t nbytes, void **ptr_p);
    void        (*free)(int index, void *ptr);
    /* NBYTES from SRC on SDEV to DST on DDEV; one of them may be the host
     * (TD_DEVICE_CPU); synchronous (D2). */
    td_status_t (*memcpy)(void *dst, td_device_t ddev, const void *src,
                          td_device_t sdev, size_t nbytes);
    td_status_t (*synchronize)(int index);
    int          host_memory;  /* 1: its "device memory" is host memory
                                * (the test backend): UCX moves it as host
                                * memory */
    /* Staging through host memory (ucx_transport/staging_device.c): host
     * buffers the device copies from fast (pinned), copies queued on
     * device INDEX's stream (ordered after its kernels) and finished by
     * synchronize, and the device a device pointer lives on (-1: none). */
    td_status_t (*host_alloc)(size_t nbytes, void **ptr_p);
    void        (*host_free)(void *ptr);
    td_status_t (*copy_async)(int index, void *dst, const void *src,
                              size_t nbytes);
    int         (*device_of)(const void *ptr);
    /* For tests (NULL where the row has none): allocator statistics of
     * device INDEX, and the last failed kernel launch ("" if none). */
    td_status_t (*cache_stats)(int index, td_block_cache_stats_t *stats_p);
    const char *(*last_launch_error)(void);
    /* For tests and benchmarks (NULL where the row has none). */
    td_status_t (*copy_counts)(int index, td_device_copy_counts_t *c_p);
} td_device_ops_t;

/* The row of device type TYPE, loading its module on the first call
 * (NULL for the cpu, and with td_error set when there is no module). */
const td_device_ops_t *td__device_ops(td_device_type_t type);

/* Number of devices of TYPE (cpu: 1), loading its module when needed.
 * TD_ERR_UNSUPPORTED "no CUDA device: ..." when there is none. */
td_status_t td__device_count_of(td_device_type_t type, int *n_p);

/* The same without loading anything: 0 devices when TYPE's module is not
 * there (yet). For start-up, which must not pay for a backend no one
 * asked for (kernels/module.h M3). */
int         td__device_count_loaded(td_device_type_t type);

/* TD_OK when DEV exists here; else the error names the device. */
td_status_t td__device_check(td_device_t dev);

td_status_t td__device_alloc(td_device_t dev, size_t nbytes, void **ptr_p);
void        td__device_free(td_device_t dev, void *ptr);
td_status_t td__device_memcpy(void *dst, td_device_t ddev, const void *src,
                             td_device_t sdev, size_t nbytes);

/* Order the host after the work queued on DEV (no-op for the cpu). */
td_status_t td__device_sync(td_device_t dev);

/* DEV's copy counts so far (td_device_copy_counts_t); TD_ERR_UNSUPPORTED
 * for the cpu or a row without them. */
td_status_t td__device_copy_counts(td_device_t dev,
                                  td_device_copy_counts_t *c_p);

/* D4. The test backend (tests only; no environment variable, option or
 * public header selects it): N_DEVICES "cuda" devices whose memory is
 * host memory (malloc; copies by memcpy) and whose kernels are the CPU
 * row, so every host-side part of the GPU path (RPC of device tensors,
 * device maps, staging, collectives' routing) runs on a machine without
 * a GPU. It replaces the cuda row for the rest of the process; call it
 * before td_init. N_DEVICES <= TD_DEVICE_TEST_MAX. */
#define TD_DEVICE_TEST_MAX 8
td_status_t td__device_test_backend_install(int n_devices);
/* 1 when the cuda row is the test backend. */
int         td__device_test_backend(void);
/* Test backend: blocks of device INDEX allocated and not yet freed, and
 * allocations made so far (tests check where a tensor's memory came
 * from). -1 for an index out of range. */
long        td__device_test_live(int index);
long        td__device_test_allocs(int index);

#ifdef __cplusplus
}
#endif
#endif /* TD_KERNELS_DEVICE_H */
