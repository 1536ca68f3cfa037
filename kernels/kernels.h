/* kernels/kernels.h: the per-device kernel table (internal to libtodist).
 *
 * Every compute loop of the runtime lives behind this table: ops in
 * runtime/tensor/ only wire autograd and call one kernel per tensor, never
 * one per element. kernels/cpu/ fills the CPU row (kernels/cpu/cpu.c holds
 * the table; one file per family: elementwise, reduce, index, random,
 * optim, norm, and coll for the collectives' reductions); a CUDA backend
 * fills its row with td__kernels_register(), so no op needs a second code
 * path. Kernels take raw pointers, dtypes and shapes:
 * this layer uses base/ and the public tensor types only, nothing from
 * runtime/.
 *
 * Invariants:
 *  1. A kernel never fails: its caller has checked shapes, dtypes and
 *     index ranges (index_check and bag_plan are the checks themselves).
 *  2. copy, fill and index_select take any dtype, batch_u8 and the
 *     index/offset arrays fixed ones, reduce_into, reduce_to and divide
 *     the five dtypes of the collectives; every other kernel takes TD_FLOAT32
 *     or TD_FLOAT64 and computes in that dtype, accumulating
 *     sums as the CPU sum_mid does (double when inner == 1), so a fused
 *     kernel gives the same bits as the composed ops it replaces.
 *  3. Sizes of 0 are allowed everywhere and write nothing.
 *  4. Random kernels are counter-based: element i of a stream depends only
 *     on (seed, i), never on the device or on how the work is split.
 * Thread-safe: kernels hold no state; td__kernels_register is called once,
 * before any op runs on that device type. */
#ifndef TD_KERNELS_KERNELS_H
#define TD_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include <todist/tensor.h>

/* Bytes per element of DTYPE, 0 for an unknown one: the one table behind
 * td_dtype_size in libtodist (runtime/tensor/tensor.c) and in the CUDA
 * module (kernels/cuda/cuda_host.c), which may call nothing of runtime/. */
static inline size_t
td__dtype_bytes(td_dtype_t dtype)
{
    switch (dtype) {
    case TD_FLOAT32: return 4;
    case TD_FLOAT64: return 8;
    case TD_INT64: return 8;
    case TD_INT32: return 4;
    case TD_UINT8: return 1;
    default: return 0;
    }
}

/* 1 where the CPU row's reduce_into and reduce_to read SRC (and A) at
 * any byte, not only at a multiple of the element's size: a body where
 * the transport received it, after its headers. GCC and Clang read
 * through a type of alignment 1 (kernels/cpu/cpu_coll.c); elsewhere the
 * caller copies an unaligned body first (runtime/coll/rx.c). */
#if defined(__GNUC__)
#define TD_CPU_REDUCE_ANY_SRC 1
#else
#define TD_CPU_REDUCE_ANY_SRC 0
#endif

typedef enum {
    TD_BIN_ADD, TD_BIN_SUB, TD_BIN_MUL, TD_BIN_DIV,
    TD_BIN_RELU_MASK    /* a * (b > 0): relu's backward, fused */
} td_binary_op_t;

typedef enum {
    TD_UN_NEG, TD_UN_EXP, TD_UN_LOG, TD_UN_SQRT, TD_UN_ABS, TD_UN_TANH,
    TD_UN_SIGMOID, TD_UN_RELU, TD_UN_GELU, TD_UN_GELU_GRAD, TD_UN_GELU_GRAD2,
    TD_UN_SIGN, TD_UN_STEP, TD_UN_POW, TD_UN_MUL_SCALAR, TD_UN_ADD_SCALAR
} td_unary_op_t;

/* SGD (torch 1.13 single-tensor rule, arithmetic in the parameter's
 * dtype): d = g + wd p; b = first ? d : mom b + (1 - damp) d;
 * d = nesterov ? d + mom b : b; p -= lr d. No momentum: MOMENTUM_BUF NULL. */
typedef struct {
    double lr, momentum, dampening, weight_decay;
    int    nesterov;
    int    first;           /* the momentum buffer is not yet initialised */
} td_sgd_args_t;

/* Adam/AdamW (torch 1.13 _single_tensor_adam):
 *   g += wd p (Adam) | p *= 1 - lr wd (AdamW, DECOUPLED)
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g g;  vmax = max(vmax, v)
 *   p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps),  bcK = 1 - bK^step */
typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    double bc1, bc2;
    int    decoupled;
} td_adam_args_t;

/* The collectives' element-wise reductions (todist/coll.h's ops; an
 * average is a sum, then divide). Bitwise ops take integer dtypes only. */
typedef enum {
    TD_ACC_SUM, TD_ACC_PROD, TD_ACC_MIN, TD_ACC_MAX,
    TD_ACC_BAND, TD_ACC_BOR, TD_ACC_BXOR
} td_accumulate_op_t;

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
    /* C[m,n] = alpha * op(A) op(B) + beta * C, row-major, lda etc.; an
     * error when the BLAS (CPU: opened on first use) is not there */
    td_status_t (*gemm)(td_dtype_t dtype, int trans_a, int trans_b,
                        int64_t m, int64_t n, int64_t k, double alpha,
                        const void *a, int64_t lda, const void *b,
                        int64_t ldb, double beta, void *c, int64_t ldc);

    /* ---- reductions along the middle of [outer, mid, inner] ---------- */
    /* out = softmax (or log_softmax when LOG) of IN along mid */
    void (*softmax)(td_dtype_t dtype, int log_out, void *out, const void *in,
                    int64_t outer, int64_t mid, int64_t inner);
    /* gx = y (g - sum_mid g y) (softmax) or g - y sum_mid g (log_softmax),
     * Y the softmax (not log) of the forward's input */
    void (*softmax_backward)(td_dtype_t dtype, int log_out, void *gx,
                             const void *y, const void *g, int64_t outer,
                             int64_t mid, int64_t inner);
    /* indices[o, i] = argmax_m in[o, m, i] (first maximum; NaN wins);
     * values (may be NULL) = the maxima. mid >= 1. */
    void (*max_dim)(td_dtype_t dtype, void *values, int64_t *indices,
                    const void *in, int64_t outer, int64_t mid,
                    int64_t inner);

    /* ---- indexing (IX is int64, contiguous, already checked) --------- */
    /* position of the first IX[i] outside [0, limit), or -1 */
    int64_t (*index_check)(const int64_t *ix, int64_t n, int64_t limit);
    /* out[o, j, i] = in[o, ix[j], i]; in is [outer, in_mid, inner] */
    void (*index_select)(td_dtype_t dtype, void *out, const void *in,
                         const int64_t *ix, int64_t nidx, int64_t outer,
                         int64_t in_mid, int64_t inner);
    /* out[o, ix[j], i] += src[o, j, i]; out is [outer, out_mid, inner] */
    void (*index_add)(td_dtype_t dtype, void *out, const void *src,
                      const int64_t *ix, int64_t nidx, int64_t outer,
                      int64_t out_mid, int64_t inner);
    /* out[o, i] = in[o, ix[o, i], i]; in is [outer, mid, inner] */
    void (*gather)(td_dtype_t dtype, void *out, const void *in,
                   const int64_t *ix, int64_t outer, int64_t mid,
                   int64_t inner);
    /* out[o, ix[o, i], i] += src[o, i]; out is [outer, mid, inner] */
    void (*scatter_add)(td_dtype_t dtype, void *out, const void *src,
                        const int64_t *ix, int64_t outer, int64_t mid,
                        int64_t inner);
    /* embedding_bag's plan from OFFSETS[nb] over N indices: bag[j] = the
     * bag of index j, scale[j] = 1/|bag| (MEAN) or 1. Returns the first
     * bad offset (not starting at 0, decreasing, above n), or -1. */
    int64_t (*bag_plan)(const int64_t *offsets, int64_t nb, int64_t n,
                        int mean, int64_t *bag, double *scale);

    /* A batch of a uint8 dataset: x[r, :] = images[rows[r], :] * scale +
     * shift (float32, in float arithmetic), y[r] = labels[rows[r]] */
    void (*batch_u8)(float *x, int64_t *y, const uint8_t *images,
                     const uint8_t *labels, const int64_t *rows, int64_t m,
                     int64_t row_len, float scale, float shift);

    /* ---- random (counter-based: element i depends on seed and i only,
     * so every device draws the same stream) -------------------------- */
    /* out[i] (contiguous, float dtype) = a + (b - a) u_i (uniform) or
     * a + b N(0,1)_i (NORMAL: Box-Muller on draws 2i, 2i+1) */
    void (*random)(td_dtype_t dtype, void *out, int64_t n, int normal,
                   double a, double b, uint64_t seed);
    /* mask[i] = u_i >= p ? 1 / (1 - p) : 0, u_i the uniform draw i of SEED
     * rounded to DTYPE (so dropout equals uniform_ then compare) */
    void (*dropout_mask)(td_dtype_t dtype, void *mask, int64_t n, double p,
                         uint64_t seed);

    /* ---- optimizer updates (contiguous; state buffers in double) ----- */
    void (*sgd_step)(td_dtype_t dtype, void *param, const void *grad,
                     double *momentum_buf, int64_t n,
                     const td_sgd_args_t *args);
    void (*adam_step)(td_dtype_t dtype, void *param, const void *grad,
                      double *exp_avg, double *exp_avg_sq,
                      double *max_exp_avg_sq, int64_t n,
                      const td_adam_args_t *args);
    /* ---- batch normalisation over the features of a contiguous [n, c]
     * input (float dtypes; per-channel terms in double). CPU only for now:
     * the CUDA row leaves them NULL and td_batch_norm refuses non-CPU
     * inputs before it looks them up. ---------------------------------- */
    /* s1[j] = sum_r (x[r,j] - shift[j]), s2[j] = sum_r (x[r,j] - shift[j])^2
     * (SHIFT NULL: 0) */
    void (*bn_sums)(td_dtype_t dtype, const void *x, int64_t n, int64_t c,
                    const double *shift, double *s1, double *s2);
    /* y = (x - mean) invstd * weight + bias (WEIGHT, BIAS of DTYPE, NULL:
     * 1 and 0) */
    void (*bn_apply)(td_dtype_t dtype, void *y, const void *x, int64_t n,
                     int64_t c, const double *mean, const double *invstd,
                     const void *weight, const void *bias);
    /* sum_dy[j] = sum_r g, sum_dy_xmu[j] = sum_r g (x - mean) */
    void (*bn_backward_reduce)(td_dtype_t dtype, const void *g,
                               const void *x, int64_t n, int64_t c,
                               const double *mean, double *sum_dy,
                               double *sum_dy_xmu);
    /* gx = (g - sum_dy / count - (x - mean) invstd^2 sum_dy_xmu / count)
     *      invstd weight; SUM_DY NULL: gx = g invstd weight (eval mode) */
    void (*bn_backward_elemt)(td_dtype_t dtype, void *gx, const void *g,
                              const void *x, int64_t n, int64_t c,
                              const double *mean, const double *invstd,
                              const void *weight, const double *sum_dy,
                              const double *sum_dy_xmu, double count);

    /* ---- the collectives' reductions (contiguous; float32, float64,
     * int32, int64, uint8; integer sums and products wrap). CPU only for
     * now: the collectives reduce in host memory (device tensors are
     * staged or go through NCCL), so the CUDA row leaves them NULL. The
     * CPU row reads SRC and A at any byte where TD_CPU_REDUCE_ANY_SRC
     * (below: a body where the transport received it); DST is aligned
     * for its elements. ---- */
    /* dst[i] = dst[i] OP src[i], i < COUNT; DST and SRC do not overlap */
    void (*reduce_into)(td_dtype_t dtype, td_accumulate_op_t op, void *dst,
                        const void *src, size_t count);
    /* dst[i] = a[i] OP src[i]: the bits of copying A to DST, then
     * reduce_into from SRC, in one pass; DST overlaps neither */
    void (*reduce_to)(td_dtype_t dtype, td_accumulate_op_t op, void *dst,
                      const void *a, const void *src, size_t count);
    /* dst[i] = dst[i] / n (integers: truncating) */
    void (*divide)(td_dtype_t dtype, void *dst, size_t count, int n);
} td_kernels_t;

const td_kernels_t *td__kernels_get(td_device_t device);
void td__kernels_register(td_device_type_t type, const td_kernels_t *k);
extern const td_kernels_t td_cpu_kernels;


#endif /* TD_KERNELS_KERNELS_H */
