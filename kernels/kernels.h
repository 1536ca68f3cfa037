/* kernels/kernels.h: the per-device kernel table (internal to libtodist).
 *
 * Every compute loop of the runtime lives behind this table: ops in
 * runtime/tensor/ only wire autograd and call one kernel per tensor, never
 * one per element. kernels/cpu/ fills the CPU row; a CUDA backend fills its
 * row with td_kernels_register(), so no op needs a second code path.
 * This layer uses base/ and the public tensor types only.
 * Thread-safe: kernels hold no state; td_kernels_register is called once,
 * before any op runs on that device type. */
#ifndef TD_KERNELS_KERNELS_H
#define TD_KERNELS_KERNELS_H

#include <stdint.h>
#include <todist/tensor.h>

typedef enum {
    TD_BIN_ADD, TD_BIN_SUB, TD_BIN_MUL, TD_BIN_DIV,
    TD_BIN_RELU_MASK    /* a * (b > 0): relu's backward, fused */
} td_binary_op_t;

typedef enum {
    TD_UN_NEG, TD_UN_EXP, TD_UN_LOG, TD_UN_SQRT, TD_UN_ABS, TD_UN_TANH,
    TD_UN_SIGMOID, TD_UN_RELU, TD_UN_GELU, TD_UN_GELU_GRAD, TD_UN_GELU_GRAD2,
    TD_UN_SIGN, TD_UN_STEP, TD_UN_POW, TD_UN_MUL_SCALAR, TD_UN_ADD_SCALAR
} td_unary_op_t;

/* A strided operand: first-element pointer and per-dim strides over the
 * common SHAPE of the kernel call. */
typedef struct {
    void          *data;
    const int64_t *strides;
} td_operand_t;

typedef struct {
    /* out (contiguous, dtype) = a OP b over shape[ndim] */
    void (*binary)(td_binary_op_t op, td_dtype_t dtype, void *out,
                   td_operand_t a, td_operand_t b, const int64_t *shape,
                   int ndim);
    /* out (contiguous) = OP(a, scalar) */
    void (*unary)(td_unary_op_t op, td_dtype_t dtype, void *out,
                  td_operand_t a, double scalar, const int64_t *shape,
                  int ndim);
    /* dst (strided, ddtype) = src (strided, sdtype) over shape */
    void (*copy)(td_dtype_t ddtype, td_operand_t dst, td_dtype_t sdtype,
                 td_operand_t src, const int64_t *shape, int ndim);
    void (*fill)(td_dtype_t dtype, td_operand_t dst, double value,
                 const int64_t *shape, int ndim);
    /* out[outer, inner] = sum over the middle of a contiguous
     * [outer, mid, inner] block */
    void (*sum_mid)(td_dtype_t dtype, void *out, const void *in,
                    int64_t outer, int64_t mid, int64_t inner);
    /* C[m,n] = alpha * op(A) op(B) + beta * C, row-major, lda etc. */
    void (*gemm)(td_dtype_t dtype, int trans_a, int trans_b, int64_t m,
                 int64_t n, int64_t k, double alpha, const void *a,
                 int64_t lda, const void *b, int64_t ldb, double beta,
                 void *c, int64_t ldc);
} td_kernels_t;

const td_kernels_t *td_kernels_get(td_device_t device);
void td_kernels_register(td_device_type_t type, const td_kernels_t *k);
extern const td_kernels_t td_cpu_kernels;


#endif /* TD_KERNELS_KERNELS_H */
