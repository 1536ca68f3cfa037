/* ucx_transport/staging_device.c: the device half of the staging module
 * (staging.h): the engine's copy functions over a device's row (pinned
 * host buffers, copies queued on the device's stream, a synchronise as the
 * wait), and host copies of device memory (H1, H2). The CUDA calls are the
 * CUDA module's (kernels/device.h); the test backend's row is malloc and
 * memcpy, so this file runs the same code on both. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "ucx_transport/staging.h"

static const td_device_ops_t *
cuda_row(void)
{
    return td__device_ops(TD_DEVICE_CUDA);
}

static td_status_t
host_alloc(void *ctx, size_t nbytes, void **ptr_p)
{
    (void)ctx;
    return cuda_row()->host_alloc(nbytes, ptr_p);
}

static void
host_free(void *ctx, void *ptr)
{
    (void)ctx;
    cuda_row()->host_free(ptr);
}

static td_status_t
copy(void *ctx, void *dst, const void *src, size_t nbytes,
     td_stage_dir_t dir)
{
    (void)dir;
    return cuda_row()->copy_async((int)(intptr_t)ctx, dst, src, nbytes);
}

static td_status_t
wait_copies(void *ctx)
{
    return cuda_row()->synchronize((int)(intptr_t)ctx);
}

/* Any device: the devices copied on since the last wait, one bit each
 * (only the engine thread touches it, S7). */
static uint64_t any_touched;

static td_status_t
any_copy(void *ctx, void *dst, const void *src, size_t nbytes,
         td_stage_dir_t dir)
{
    const td_device_ops_t *row = cuda_row();
    int dev = row->device_of(dir == TD_STAGE_D2H ? src : dst);

    (void)ctx;
    if (dev < 0) {
        dev = 0;                   /* a host buffer on both sides (cpu map) */
    }
    any_touched |= 1ull << (dev & 63);
    return row->copy_async(dev, dst, src, nbytes);
}

static td_status_t
any_wait(void *ctx)
{
    const td_device_ops_t *row = cuda_row();
    td_status_t status = TD_OK;

    (void)ctx;
    for (int d = 0; d < 64 && status == TD_OK; d++) {
        if (any_touched & (1ull << d)) {
            status = row->synchronize(d);
        }
    }
    any_touched = 0;
    return status;
}

td_status_t
td__staging_device_ops(td_staging_copy_ops_t *ops)
{
    int n;
    td_status_t status = td__device_count_of(TD_DEVICE_CUDA, &n);

    if (status != TD_OK) {
        return status;
    }
    *ops = (td_staging_copy_ops_t){host_alloc, host_free, any_copy, any_wait,
                                   NULL};
    return TD_OK;
}

td_status_t
td__staging_cuda_ops(int index, td_staging_copy_ops_t *ops)
{
    td_status_t status = td__device_check((td_device_t){TD_DEVICE_CUDA, index});

    if (status != TD_OK) {
        return status;
    }
    *ops = (td_staging_copy_ops_t){host_alloc, host_free, copy, wait_copies,
                                   (void *)(intptr_t)index};
    return TD_OK;
}

/* ---- host copies of device memory (H1, H2) ------------------------------ */

td_status_t
td__staging_host_in(td_device_t device, void *dev, size_t nbytes, int fill,
                    td_staging_host_t *h)
{
    void *host = malloc(nbytes ? nbytes : 1);
    td_status_t status;

    if (host == NULL) {
        return td_error(TD_ERR_NO_MEMORY, "staging: out of memory for a %zu "
                        "byte host copy of device memory", nbytes);
    }
    if (fill) {
        status = td__device_memcpy(host, TD_CPU, dev, device, nbytes);
        if (status != TD_OK) {
            free(host);
            return status;
        }
    }
    *h = (td_staging_host_t){device, dev, host, nbytes};
    return TD_OK;
}

td_status_t
td__staging_host_out(const td_staging_host_t *h)
{
    return td__device_memcpy(h->dev, h->device, h->host, TD_CPU, h->nbytes);
}

void
td__staging_host_free(td_staging_host_t *h)
{
    free(h->host);
    memset(h, 0, sizeof(*h));
}

td_status_t
td__staging_copy_in(td_device_t device, void *dev, const void *host,
                    size_t nbytes)
{
    return td__device_memcpy(dev, device, host, TD_CPU, nbytes);
}
