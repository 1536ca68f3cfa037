/* kernels/cpu/cpu.c: the CPU row of the kernel table, in one place; the
 * kernels themselves live by family in kernels/cpu/cpu_*.c. */
#include "config.h"

#include "kernels/cpu/cpu.h"

const td_kernels_t td_cpu_kernels = {
    .binary = td__cpu_binary,
    .unary = td__cpu_unary,
    .copy = td__cpu_copy,
    .fill = td__cpu_fill,
    .sum_mid = td__cpu_sum_mid,
    .gemm = td__cpu_gemm,
    .softmax = td__cpu_softmax,
    .softmax_backward = td__cpu_softmax_backward,
    .max_dim = td__cpu_max_dim,
    .index_check = td__cpu_index_check,
    .index_select = td__cpu_index_select,
    .index_add = td__cpu_index_add,
    .gather = td__cpu_gather,
    .scatter_add = td__cpu_scatter_add,
    .bag_plan = td__cpu_bag_plan,
    .batch_u8 = td__cpu_batch_u8,
    .random = td__cpu_random,
    .dropout_mask = td__cpu_dropout_mask,
    .sgd_step = td__cpu_sgd_step,
    .adam_step = td__cpu_adam_step,
    .bn_sums = td__cpu_bn_sums,
    .bn_apply = td__cpu_bn_apply,
    .bn_backward_reduce = td__cpu_bn_backward_reduce,
    .bn_backward_elemt = td__cpu_bn_backward_elemt,
    .reduce_into = td_cpu_reduce_into,
    .reduce_to = td_cpu_reduce_to,
    .divide = td_cpu_divide,
};
