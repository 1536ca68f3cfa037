/* kernels/cpu/cpu.h: the CPU row of the kernel table, one function per
 * entry, split by family over kernels/cpu/cpu_*.c; kernels/cpu/cpu.c puts
 * them into td_cpu_kernels. Internal to kernels/cpu/ (and tests, which
 * call the table). Thread-safe: no function keeps state. */
#ifndef TD_KERNELS_CPU_CPU_H
#define TD_KERNELS_CPU_CPU_H

#include "kernels/kernels.h"

/* cpu_elementwise.c */
void td__cpu_binary(td_binary_op_t op, td_dtype_t dtype, void *out,
                   td_operand_t a, td_operand_t b, const int64_t *shape,
                   int ndim);
void td__cpu_unary(td_unary_op_t op, td_dtype_t dtype, void *out,
                  td_operand_t a, double scalar, const int64_t *shape,
                  int ndim);
void td__cpu_copy(td_dtype_t ddtype, td_operand_t dst, td_dtype_t sdtype,
                 td_operand_t src, const int64_t *shape, int ndim);
void td__cpu_fill(td_dtype_t dtype, td_operand_t dst, double value,
                 const int64_t *shape, int ndim);

/* cpu_reduce.c */
void td__cpu_sum_mid(td_dtype_t dtype, void *out, const void *in,
                    int64_t outer, int64_t mid, int64_t inner);
void td__cpu_softmax(td_dtype_t dtype, int log_out, void *out, const void *in,
                    int64_t outer, int64_t mid, int64_t inner);
void td__cpu_softmax_backward(td_dtype_t dtype, int log_out, void *gx,
                             const void *y, const void *g, int64_t outer,
                             int64_t mid, int64_t inner);
void td__cpu_max_dim(td_dtype_t dtype, void *values, int64_t *indices,
                    const void *in, int64_t outer, int64_t mid,
                    int64_t inner);

/* cpu_blas.c: CBLAS opened on first use; TD_ERR_UNSUPPORTED without one */
td_status_t td__cpu_gemm(td_dtype_t dtype, int trans_a, int trans_b,
                        int64_t m, int64_t n, int64_t k, double alpha,
                        const void *a, int64_t lda, const void *b,
                        int64_t ldb, double beta, void *c, int64_t ldc);

/* cpu_index.c */
int64_t td__cpu_index_check(const int64_t *ix, int64_t n, int64_t limit);
void td__cpu_index_select(td_dtype_t dtype, void *out, const void *in,
                         const int64_t *ix, int64_t nidx, int64_t outer,
                         int64_t in_mid, int64_t inner);
void td__cpu_index_add(td_dtype_t dtype, void *out, const void *src,
                      const int64_t *ix, int64_t nidx, int64_t outer,
                      int64_t out_mid, int64_t inner);
void td__cpu_gather(td_dtype_t dtype, void *out, const void *in,
                   const int64_t *ix, int64_t outer, int64_t mid,
                   int64_t inner);
void td__cpu_scatter_add(td_dtype_t dtype, void *out, const void *src,
                        const int64_t *ix, int64_t outer, int64_t mid,
                        int64_t inner);
int64_t td__cpu_bag_plan(const int64_t *offsets, int64_t nb, int64_t n,
                        int mean, int64_t *bag, double *scale);
void td__cpu_batch_u8(float *x, int64_t *y, const uint8_t *images,
                     const uint8_t *labels, const int64_t *rows, int64_t m,
                     int64_t row_len, float scale, float shift);

/* cpu_random.c */
void td__cpu_random(td_dtype_t dtype, void *out, int64_t n, int normal,
                   double a, double b, uint64_t seed);
void td__cpu_dropout_mask(td_dtype_t dtype, void *mask, int64_t n, double p,
                         uint64_t seed);

/* cpu_optim.c */
void td__cpu_sgd_step(td_dtype_t dtype, void *param, const void *grad,
                     double *momentum_buf, int64_t n,
                     const td_sgd_args_t *args);
void td__cpu_adam_step(td_dtype_t dtype, void *param, const void *grad,
                      double *exp_avg, double *exp_avg_sq,
                      double *max_exp_avg_sq, int64_t n,
                      const td_adam_args_t *args);

/* cpu_norm.c */
void td__cpu_bn_sums(td_dtype_t dtype, const void *x, int64_t n, int64_t c,
                    const double *shift, double *s1, double *s2);
void td__cpu_bn_apply(td_dtype_t dtype, void *y, const void *x, int64_t n,
                     int64_t c, const double *mean, const double *invstd,
                     const void *weight, const void *bias);
void td__cpu_bn_backward_reduce(td_dtype_t dtype, const void *g,
                               const void *x, int64_t n, int64_t c,
                               const double *mean, double *sum_dy,
                               double *sum_dy_xmu);
void td__cpu_bn_backward_elemt(td_dtype_t dtype, void *gx, const void *g,
                              const void *x, int64_t n, int64_t c,
                              const double *mean, const double *invstd,
                              const void *weight, const double *sum_dy,
                              const double *sum_dy_xmu, double count);

/* cpu_coll.c (sources at any byte where TD_CPU_REDUCE_ANY_SRC,
 * kernels/kernels.h) */
void td_cpu_reduce_into(td_dtype_t dtype, td_accumulate_op_t op, void *dst,
                        const void *src, size_t count);
void td_cpu_reduce_to(td_dtype_t dtype, td_accumulate_op_t op, void *dst,
                      const void *a, const void *src, size_t count);
void td_cpu_divide(td_dtype_t dtype, void *dst, size_t count, int n);

#endif /* TD_KERNELS_CPU_CPU_H */
