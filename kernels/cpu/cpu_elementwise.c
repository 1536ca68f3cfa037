/* kernels/cpu/cpu_elementwise.c: the CPU elementwise kernels (binary,
 * unary, copy, fill) over strided operands. The op and dtype are dispatched
 * once per call; inner loops are straight loops over the last dimension
 * with its strides, so the compiler vectorises the contiguous case.
 * Thread-safe (no state). */
#include "config.h"

/* The loops below are written to be vectorised; -O2's cheap cost model
 * leaves the conditional ones (relu, masks) scalar, so ask for -O3 here. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

/* Walk every index of SHAPE[0..ndim-2]; for each, BODY runs with the
 * element offsets (in elements) of up to 3 operands, then the last dim is
 * left to BODY (n = shape[ndim-1], s0..s2 its strides). */
#define WALK(ndim, shape, st0, st1, st2, ...)                               \
    do {                                                                    \
        const int64_t *w0_ = (st0), *w1_ = (st1), *w2_ = (st2);             \
        int64_t idx_[TD_MAX_DIMS] = {0};                                    \
        int64_t o0 = 0, o1 = 0, o2 = 0;                                     \
        int nd_ = (ndim);                                                   \
        int64_t n = nd_ > 0 ? (shape)[nd_ - 1] : 1;                         \
        int64_t s0 = nd_ > 0 && w0_ ? w0_[nd_ - 1] : 0;                     \
        int64_t s1 = nd_ > 0 && w1_ ? w1_[nd_ - 1] : 0;                     \
        int64_t s2 = nd_ > 0 && w2_ ? w2_[nd_ - 1] : 0;                     \
        int64_t outer_ = 1;                                                 \
        (void)s0; (void)s1; (void)s2; (void)o2;                             \
        for (int d_ = 0; d_ < nd_ - 1; d_++) outer_ *= (shape)[d_];         \
        if (n == 0) outer_ = 0;                                             \
        for (int64_t it_ = 0; it_ < outer_; it_++) {                        \
            __VA_ARGS__;                                                    \
            for (int d_ = nd_ - 2; d_ >= 0; d_--) {                         \
                idx_[d_]++;                                                 \
                o0 += w0_ ? w0_[d_] : 0;                                    \
                o1 += w1_ ? w1_[d_] : 0;                                    \
                o2 += w2_ ? w2_[d_] : 0;                                    \
                if (idx_[d_] < (shape)[d_]) break;                          \
                o0 -= w0_ ? w0_[d_] * (shape)[d_] : 0;                      \
                o1 -= w1_ ? w1_[d_] * (shape)[d_] : 0;                      \
                o2 -= w2_ ? w2_[d_] * (shape)[d_] : 0;                      \
                idx_[d_] = 0;                                               \
            }                                                               \
        }                                                                   \
    } while (0)

static void
contig_strides(const int64_t *shape, int ndim, int64_t *st)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= shape[d];
    }
}

#define BINARY_LOOP(T, EXPR)                                                \
    do {                                                                    \
        T *o_ = out;                                                        \
        const T *A_ = a.data, *B_ = b.data;                                 \
        WALK(ndim, shape, ost, a.strides, b.strides, {                      \
            T *dp_ = o_ + o0;                                                \
            const T *ap = A_ + o1, *bp = B_ + o2;                           \
            if (s1 == 1 && s2 == 1) {                                       \
                for (int64_t i = 0; i < n; i++) {                           \
                    T x = ap[i], y = bp[i]; dp_[i] = (EXPR);                 \
                }                                                           \
            } else if (s1 == 1 && s2 == 0) {                                \
                T y = bp[0];                                                \
                for (int64_t i = 0; i < n; i++) {                           \
                    T x = ap[i]; dp_[i] = (EXPR);                            \
                }                                                           \
            } else {                                                        \
                for (int64_t i = 0; i < n; i++) {                           \
                    T x = ap[i * s1], y = bp[i * s2]; dp_[i] = (EXPR);       \
                }                                                           \
            }                                                               \
        });                                                                 \
    } while (0)

#define BINARY_TYPED(T)                                                     \
    switch (op) {                                                           \
    case TD_BIN_ADD: BINARY_LOOP(T, x + y); break;                          \
    case TD_BIN_SUB: BINARY_LOOP(T, x - y); break;                          \
    case TD_BIN_MUL: BINARY_LOOP(T, x * y); break;                          \
    case TD_BIN_DIV: BINARY_LOOP(T, x / y); break;                          \
    case TD_BIN_RELU_MASK: BINARY_LOOP(T, y > 0 ? x : (T)0); break;         \
    }

void
td__cpu_binary(td_binary_op_t op, td_dtype_t dtype, void *out, td_operand_t a,
              td_operand_t b, const int64_t *shape, int ndim)
{
    int64_t ost[TD_MAX_DIMS];

    contig_strides(shape, ndim, ost);
    if (dtype == TD_FLOAT32) {
        BINARY_TYPED(float)
    } else {
        BINARY_TYPED(double)
    }
}

#define UNARY_LOOP(T, EXPR)                                                 \
    do {                                                                    \
        T *o_ = out;                                                        \
        const T *A_ = a.data;                                               \
        const T c = (T)scalar;                                              \
        (void)c;                                                            \
        WALK(ndim, shape, ost, a.strides, (const int64_t *)NULL, {          \
            T *dp_ = o_ + o0;                                               \
            const T *ap = A_ + o1;                                          \
            if (s1 == 1) {                                                  \
                for (int64_t i = 0; i < n; i++) {                           \
                    T x = ap[i]; dp_[i] = (EXPR);                           \
                }                                                           \
            } else {                                                        \
                for (int64_t i = 0; i < n; i++) {                           \
                    T x = ap[i * s1]; dp_[i] = (EXPR);                      \
                }                                                           \
            }                                                               \
        });                                                                 \
    } while (0)

/* gelu(x) = x * Phi(x); gelu'(x) = Phi(x) + x phi(x);
 * gelu''(x) = phi(x) (2 - x^2). */
#define UNARY_TYPED(T, EXP, LOG, SQRT, FABS, TANH, ERF, POW)                \
    switch (op) {                                                           \
    case TD_UN_NEG: UNARY_LOOP(T, -x); break;                               \
    case TD_UN_EXP: UNARY_LOOP(T, EXP(x)); break;                           \
    case TD_UN_LOG: UNARY_LOOP(T, LOG(x)); break;                           \
    case TD_UN_SQRT: UNARY_LOOP(T, SQRT(x)); break;                         \
    case TD_UN_ABS: UNARY_LOOP(T, FABS(x)); break;                          \
    case TD_UN_TANH: UNARY_LOOP(T, TANH(x)); break;                         \
    case TD_UN_SIGMOID: UNARY_LOOP(T, (T)1 / ((T)1 + EXP(-x))); break;      \
    case TD_UN_RELU: UNARY_LOOP(T, x > 0 ? x : (T)0); break;                \
    case TD_UN_GELU:                                                        \
        UNARY_LOOP(T, x * (T)0.5 * ((T)1 + ERF(x * (T)M_SQRT1_2))); break;  \
    case TD_UN_GELU_GRAD:                                                   \
        UNARY_LOOP(T, (T)0.5 * ((T)1 + ERF(x * (T)M_SQRT1_2)) +             \
                   x * (T)(0.5 * M_2_SQRTPI * M_SQRT1_2) *                  \
                   EXP((T)-0.5 * x * x)); break;                            \
    case TD_UN_GELU_GRAD2:                                                  \
        UNARY_LOOP(T, (T)(0.5 * M_2_SQRTPI * M_SQRT1_2) *                   \
                   EXP((T)-0.5 * x * x) * ((T)2 - x * x)); break;           \
    case TD_UN_SIGN: UNARY_LOOP(T, (T)((x > 0) - (x < 0))); break;          \
    case TD_UN_STEP: UNARY_LOOP(T, x > 0 ? (T)1 : (T)0); break;             \
    case TD_UN_POW: UNARY_LOOP(T, POW(x, c)); break;                        \
    case TD_UN_MUL_SCALAR: UNARY_LOOP(T, x * c); break;                     \
    case TD_UN_ADD_SCALAR: UNARY_LOOP(T, x + c); break;                     \
    }

void
td__cpu_unary(td_unary_op_t op, td_dtype_t dtype, void *out, td_operand_t a,
             double scalar, const int64_t *shape, int ndim)
{
    int64_t ost[TD_MAX_DIMS];

    contig_strides(shape, ndim, ost);
    if (dtype == TD_FLOAT32) {
        UNARY_TYPED(float, expf, logf, sqrtf, fabsf, tanhf, erff, powf)
    } else {
        UNARY_TYPED(double, exp, log, sqrt, fabs, tanh, erf, pow)
    }
}

#define COPY_LOOP(TD, TS)                                                   \
    do {                                                                    \
        TD *D_ = dst.data;                                                  \
        const TS *S_ = src.data;                                            \
        WALK(ndim, shape, dst.strides, src.strides, (const int64_t *)NULL, {\
            TD *dp = D_ + o0;                                               \
            const TS *sp = S_ + o1;                                         \
            if (s0 == 1 && s1 == 1) {                                       \
                for (int64_t i = 0; i < n; i++) dp[i] = (TD)sp[i];          \
            } else {                                                        \
                for (int64_t i = 0; i < n; i++) dp[i * s0] = (TD)sp[i * s1];\
            }                                                               \
        });                                                                 \
    } while (0)

#define COPY_FROM(TD)                                                       \
    switch (sdtype) {                                                       \
    case TD_FLOAT32: COPY_LOOP(TD, float); break;                           \
    case TD_FLOAT64: COPY_LOOP(TD, double); break;                          \
    case TD_INT64: COPY_LOOP(TD, int64_t); break;                           \
    case TD_INT32: COPY_LOOP(TD, int32_t); break;                           \
    case TD_UINT8: COPY_LOOP(TD, uint8_t); break;                           \
    default: break;                                                         \
    }

void
td__cpu_copy(td_dtype_t ddtype, td_operand_t dst, td_dtype_t sdtype,
            td_operand_t src, const int64_t *shape, int ndim)
{
    switch (ddtype) {
    case TD_FLOAT32: COPY_FROM(float); break;
    case TD_FLOAT64: COPY_FROM(double); break;
    case TD_INT64: COPY_FROM(int64_t); break;
    case TD_INT32: COPY_FROM(int32_t); break;
    case TD_UINT8: COPY_FROM(uint8_t); break;
    default: break;
    }
}

#define FILL_LOOP(T)                                                        \
    do {                                                                    \
        T *D_ = dst.data;                                                   \
        T v = (T)value;                                                     \
        WALK(ndim, shape, dst.strides, (const int64_t *)NULL,               \
             (const int64_t *)NULL, {                                       \
            for (int64_t i = 0; i < n; i++) D_[o0 + i * s0] = v;            \
        });                                                                 \
    } while (0)

void
td__cpu_fill(td_dtype_t dtype, td_operand_t dst, double value,
            const int64_t *shape, int ndim)
{
    switch (dtype) {
    case TD_FLOAT32: FILL_LOOP(float); break;
    case TD_FLOAT64: FILL_LOOP(double); break;
    case TD_INT64: FILL_LOOP(int64_t); break;
    case TD_INT32: FILL_LOOP(int32_t); break;
    case TD_UINT8: FILL_LOOP(uint8_t); break;
    default: break;
    }
}

