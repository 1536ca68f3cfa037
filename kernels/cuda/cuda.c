/* kernels/cuda/cuda.c: the CUDA row of the kernel table, in one place; the
 * kernels live by family in kernels/cuda/cuda_*.cu. */
#include "config.h"

#include "kernels/cuda/cuda.h"

const td_kernels_t td_cuda_kernels = {
    .binary = td__cuda_binary,
    .unary = td__cuda_unary,
    .copy = td__cuda_copy,
    .fill = td__cuda_fill,
    .sum_mid = td__cuda_sum_mid,
    .gemm = td__cuda_gemm,
    .softmax = td__cuda_softmax,
    .softmax_backward = td__cuda_softmax_backward,
    .max_dim = td__cuda_max_dim,
    .index_check = td__cuda_index_check,
    .index_select = td__cuda_index_select,
    .index_add = td__cuda_index_add,
    .gather = td__cuda_gather,
    .scatter_add = td__cuda_scatter_add,
    .bag_plan = td__cuda_bag_plan,
    .random = td__cuda_random,
    .dropout_mask = td__cuda_dropout_mask,
    .sgd_step = td__cuda_sgd_step,
    .adam_step = td__cuda_adam_step,
};
