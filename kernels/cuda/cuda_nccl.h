/* kernels/cuda/cuda_nccl.h: the CUDA module's NCCL row (internal to the
 * module; built when configure finds NCCL). */
#ifndef TD_KERNELS_CUDA_NCCL_H
#define TD_KERNELS_CUDA_NCCL_H

#include "kernels/module.h"

extern const td_nccl_ops_t td_cuda_nccl_ops;

#endif /* TD_KERNELS_CUDA_NCCL_H */
