/* kernels/cpu/cpu.c: the CPU row of the kernel table, in one place; the
 * kernels themselves live by family in kernels/cpu/cpu_*.c. */
#include "config.h"

#include "kernels/cpu/cpu.h"

const td_kernels_t td_cpu_kernels = {
    .binary = td_cpu_binary,
    .unary = td_cpu_unary,
    .copy = td_cpu_copy,
    .fill = td_cpu_fill,
    .sum_mid = td_cpu_sum_mid,
    .gemm = td_cpu_gemm,
    .softmax = td_cpu_softmax,
    .softmax_backward = td_cpu_softmax_backward,
    .max_dim = td_cpu_max_dim,
    .index_check = td_cpu_index_check,
    .index_select = td_cpu_index_select,
    .index_add = td_cpu_index_add,
    .gather = td_cpu_gather,
    .scatter_add = td_cpu_scatter_add,
    .bag_plan = td_cpu_bag_plan,
    .batch_u8 = td_cpu_batch_u8,
    .random = td_cpu_random,
    .dropout_mask = td_cpu_dropout_mask,
    .sgd_step = td_cpu_sgd_step,
    .adam_step = td_cpu_adam_step,
    .bn_sums = td_cpu_bn_sums,
    .bn_apply = td_cpu_bn_apply,
    .bn_backward_reduce = td_cpu_bn_backward_reduce,
    .bn_backward_elemt = td_cpu_bn_backward_elemt,
    .reduce_into = td_cpu_reduce_into,
    .divide = td_cpu_divide,
};
