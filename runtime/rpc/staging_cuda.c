/* runtime/rpc/staging_cuda.c: the staging engine's CUDA copy functions
 * (see staging_cuda.h). */
#include "config.h"

#include <stdint.h>

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
#endif

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
