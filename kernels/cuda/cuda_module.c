/* kernels/cuda/cuda_module.c: the entry of libtodist-cuda.so
 * (kernels/module.h): it hands the host table libtodist lends to
 * cuda_host.c (whose forwards the backend calls) and hands back the
 * module's rows. The module exports only TD_DEVICE_MODULE_ENTRY. */
#include "config.h"

#include "kernels/module.h"
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_host.h"
#include "kernels/cuda/cuda_device.h"
#ifdef TD_HAVE_NCCL
#include "kernels/cuda/cuda_nccl.h"
#endif

const td_device_module_t *td_device_module_entry(const td_device_host_t *h);

static const td_device_module_t cuda_module = {
    .abi = TD_DEVICE_MODULE_ABI,
    .type = TD_DEVICE_CUDA,
    .kernels = &td_cuda_kernels,
    .device = &td_cuda_device_ops,
#ifdef TD_HAVE_NCCL
    .nccl = &td_cuda_nccl_ops,
#else
    .nccl = NULL,
#endif
};

const td_device_module_t *
td_device_module_entry(const td_device_host_t *h)
{
    if (h == NULL || h->abi != TD_DEVICE_MODULE_ABI) {
        return NULL;                 /* the loader names the mismatch */
    }
    cuda_host_set(h);
    return &cuda_module;
}
