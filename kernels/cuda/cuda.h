/* kernels/cuda/cuda.h: the CUDA row of the kernel table, one function per
 * entry with the CPU row's semantics (kernels/cpu/cpu.h), split by family
 * over kernels/cuda/cuda_*.cu; kernels/cuda/cuda.c puts them into
 * td_cuda_kernels. Pointers are device memory of the device that owns the
 * output; work is queued on that device's stream (cuda_device.h).
 * Internal to kernels/cuda/ (and tests, which call the table).
 * Thread-safe: no function keeps state. */
#ifndef TD_KERNELS_CUDA_CUDA_H
#define TD_KERNELS_CUDA_CUDA_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cuda_elementwise.cu */
void td__cuda_binary(td_binary_op_t op, td_dtype_t dtype, void *out,
                    td_operand_t a, td_operand_t b, const int64_t *shape,
                    int ndim);
void td__cuda_unary(td_unary_op_t op, td_dtype_t dtype, void *out,
                   td_operand_t a, double scalar, const int64_t *shape,
                   int ndim);
void td__cuda_copy(td_dtype_t ddtype, td_operand_t dst, td_dtype_t sdtype,
                  td_operand_t src, const int64_t *shape, int ndim);
void td__cuda_fill(td_dtype_t dtype, td_operand_t dst, double value,
                  const int64_t *shape, int ndim);

/* cuda_reduce.cu */
void td__cuda_sum_mid(td_dtype_t dtype, void *out, const void *in,
                     int64_t outer, int64_t mid, int64_t inner);
td_status_t td__cuda_gemm(td_dtype_t dtype, int trans_a, int trans_b, int64_t m,
                  int64_t n, int64_t k, double alpha, const void *a,
                  int64_t lda, const void *b, int64_t ldb, double beta,
                  void *c, int64_t ldc);
void td__cuda_softmax(td_dtype_t dtype, int log_out, void *out, const void *in,
                     int64_t outer, int64_t mid, int64_t inner);
void td__cuda_softmax_backward(td_dtype_t dtype, int log_out, void *gx,
                              const void *y, const void *g, int64_t outer,
                              int64_t mid, int64_t inner);
void td__cuda_max_dim(td_dtype_t dtype, void *values, int64_t *indices,
                     const void *in, int64_t outer, int64_t mid,
                     int64_t inner);

/* cuda_index.cu */
int64_t td__cuda_index_check(const int64_t *ix, int64_t n, int64_t limit);
void td__cuda_index_select(td_dtype_t dtype, void *out, const void *in,
                          const int64_t *ix, int64_t nidx, int64_t outer,
                          int64_t in_mid, int64_t inner);
void td__cuda_index_add(td_dtype_t dtype, void *out, const void *src,
                       const int64_t *ix, int64_t nidx, int64_t outer,
                       int64_t out_mid, int64_t inner);
void td__cuda_gather(td_dtype_t dtype, void *out, const void *in,
                    const int64_t *ix, int64_t outer, int64_t mid,
                    int64_t inner);
void td__cuda_scatter_add(td_dtype_t dtype, void *out, const void *src,
                         const int64_t *ix, int64_t outer, int64_t mid,
                         int64_t inner);
int64_t td__cuda_bag_plan(const int64_t *offsets, int64_t nb, int64_t n,
                         int mean, int64_t *bag, double *scale);

/* cuda_random.cu */
void td__cuda_random(td_dtype_t dtype, void *out, int64_t n, int normal,
                    double a, double b, uint64_t seed);
void td__cuda_dropout_mask(td_dtype_t dtype, void *mask, int64_t n, double p,
                          uint64_t seed);

/* cuda_optim.cu */
void td__cuda_sgd_step(td_dtype_t dtype, void *param, const void *grad,
                      double *momentum_buf, int64_t n,
                      const td_sgd_args_t *args);
void td__cuda_adam_step(td_dtype_t dtype, void *param, const void *grad,
                       double *exp_avg, double *exp_avg_sq,
                       double *max_exp_avg_sq, int64_t n,
                       const td_adam_args_t *args);

extern const td_kernels_t td_cuda_kernels;

#ifdef __cplusplus
}
#endif
#endif /* TD_KERNELS_CUDA_CUDA_H */
