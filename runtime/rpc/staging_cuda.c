/* runtime/rpc/staging_cuda.c: the staging engine's CUDA copy functions
 * (see staging_cuda.h). */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/device.h"
#include "runtime/rpc/staging_cuda.h"
#ifdef TD_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"

static td_status_t
host_alloc(void *ctx, size_t nbytes, void **ptr_p)
{
    return td_cuda_host_alloc(nbytes, ptr_p);
}

static void
host_free(void *ctx, void *ptr)
{
    td_cuda_host_free(ptr);
}

static td_status_t
copy(void *ctx, void *dst, const void *src, size_t nbytes,
     td_stage_dir_t dir)
{
    return td_cuda_copy_async((int)(intptr_t)ctx, dst, src, nbytes);
}

static td_status_t
wait_copies(void *ctx)
{
    return td_cuda_sync((int)(intptr_t)ctx);
}

/* Any device: the devices copied on since the last wait, one bit each
 * (only the engine thread touches it, S7). */
static uint64_t any_touched;

static td_status_t
any_copy(void *ctx, void *dst, const void *src, size_t nbytes,
         td_stage_dir_t dir)
{
    int dev = td_cuda_device_of(dir == TD_STAGE_D2H ? src : dst);

    (void)ctx;
    if (dev < 0) {
        dev = 0;                   /* a host buffer on both sides (cpu map) */
    }
    any_touched |= 1ull << (dev & 63);
    return td_cuda_copy_async(dev, dst, src, nbytes);
}

static td_status_t
any_wait(void *ctx)
{
    td_status_t status = TD_OK;

    (void)ctx;
    for (int d = 0; d < 64 && status == TD_OK; d++) {
        if (any_touched & (1ull << d)) {
            status = td_cuda_sync(d);
        }
    }
    any_touched = 0;
    return status;
}
#endif

/* The test backend: "device memory" is host memory. */
static td_status_t
test_host_alloc(void *ctx, size_t nbytes, void **ptr_p)
{
    (void)ctx;
    *ptr_p = malloc(nbytes ? nbytes : 1);
    return *ptr_p != NULL ? TD_OK
                          : td_error(TD_ERR_NO_MEMORY, "staging: cannot "
                                     "allocate a %zu byte buffer", nbytes);
}

static void
test_host_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static td_status_t
test_copy(void *ctx, void *dst, const void *src, size_t nbytes,
          td_stage_dir_t dir)
{
    (void)ctx;
    (void)dir;
    memcpy(dst, src, nbytes);
    return TD_OK;
}

static td_status_t
test_wait(void *ctx)
{
    (void)ctx;
    return TD_OK;
}

td_status_t
td_staging_device_ops(td_staging_copy_ops_t *ops)
{
    int n;
    td_status_t status;

    if (td_device_test_backend()) {
        *ops = (td_staging_copy_ops_t){test_host_alloc, test_host_free,
                                       test_copy, test_wait, NULL};
        return TD_OK;
    }
    status = td_device_count_of(TD_DEVICE_CUDA, &n);
    if (status != TD_OK) {
        return status;
    }
#ifdef TD_HAVE_CUDA
    *ops = (td_staging_copy_ops_t){host_alloc, host_free, any_copy, any_wait,
                                   NULL};
    return TD_OK;
#else
    return td_error(TD_ERR_UNSUPPORTED, "no CUDA device (libtodist was "
                    "built without it)");
#endif
}

td_status_t
td_staging_cuda_ops(int index, td_staging_copy_ops_t *ops)
{
    td_status_t status = td_device_check((td_device_t){TD_DEVICE_CUDA, index});

    if (status != TD_OK) {
        return status;
    }
#ifdef TD_HAVE_CUDA
    *ops = (td_staging_copy_ops_t){host_alloc, host_free, copy, wait_copies,
                                   (void *)(intptr_t)index};
    return TD_OK;
#else
    return td_error(TD_ERR_UNSUPPORTED, "no CUDA device (libtodist was "
                    "built without it)");
#endif
}
