/* kernels/cuda/cuda_host.h: the host table libtodist lends the CUDA
 * module (kernels/module.h), kept for the forwards of cuda_host.c
 * (td_error, td_last_error, td__log_print, td__device_alloc, ...: the
 * libtodist functions the backend calls). Set once, by the module's entry,
 * before any other call; read-only after. */
#ifndef TD_KERNELS_CUDA_CUDA_HOST_H
#define TD_KERNELS_CUDA_CUDA_HOST_H

#include "kernels/module.h"

void cuda_host_set(const td_device_host_t *h);

#endif /* TD_KERNELS_CUDA_CUDA_HOST_H */
