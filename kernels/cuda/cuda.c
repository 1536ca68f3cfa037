/* kernels/cuda/cuda.c: the CUDA row of the kernel table, in one place; the
 * kernels live by family in kernels/cuda/cuda_*.cu. */
#include "config.h"

#include "kernels/cuda/cuda.h"

const td_kernels_t td_cuda_kernels = {
    .binary = td_cuda_binary,
    .unary = td_cuda_unary,
    .copy = td_cuda_copy,
    .fill = td_cuda_fill,
    .sum_mid = td_cuda_sum_mid,
    .gemm = td_cuda_gemm,
    .softmax = td_cuda_softmax,
    .softmax_backward = td_cuda_softmax_backward,
    .max_dim = td_cuda_max_dim,
    .index_check = td_cuda_index_check,
    .index_select = td_cuda_index_select,
    .index_add = td_cuda_index_add,
    .gather = td_cuda_gather,
    .scatter_add = td_cuda_scatter_add,
    .bag_plan = td_cuda_bag_plan,
    .random = td_cuda_random,
    .dropout_mask = td_cuda_dropout_mask,
    .sgd_step = td_cuda_sgd_step,
    .adam_step = td_cuda_adam_step,
};
