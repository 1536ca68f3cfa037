/* kernels/cpu/cpu_reduce.c: the CPU kernels that reduce along the middle
 * dimension of a contiguous [outer, mid, inner] block (sum, softmax and its
 * backward, max); the matrix product is in cpu_blas.c. Thread-safe (no
 * state). */
#include "config.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"

/* out[o, i] = sum_m in[o, m, i]; row by row so the inner loop is
 * contiguous (inner > 1) or a dot-like reduction (inner == 1). */
#define SUM_MID(T, ACC)                                                     \
    do {                                                                    \
        T *o_ = out;                                                        \
        const T *in_ = in;                                                  \
        for (int64_t o = 0; o < outer; o++) {                               \
            const T *blk = in_ + o * mid * inner;                           \
            T *dst = o_ + o * inner;                                        \
            if (inner == 1) {                                               \
                ACC s = 0;                                                  \
                for (int64_t m = 0; m < mid; m++) s += blk[m];              \
                dst[0] = (T)s;                                              \
                continue;                                                   \
            }                                                               \
            memset(dst, 0, (size_t)inner * sizeof(T));                      \
            for (int64_t m = 0; m < mid; m++) {                             \
                const T *row = blk + m * inner;                             \
                for (int64_t i = 0; i < inner; i++) dst[i] += row[i];       \
            }                                                               \
        }                                                                   \
    } while (0)

void
td__cpu_sum_mid(td_dtype_t dtype, void *out, const void *in, int64_t outer,
               int64_t mid, int64_t inner)
{
    if (dtype == TD_FLOAT32) {
        SUM_MID(float, double);
    } else {
        SUM_MID(double, double);
    }
}

/* softmax_i = exp(x_i - max) / sum_j exp(x_j - max) with the sum in
 * double; log_softmax_i = x_i - (max + log sum). */
#define SOFTMAX_LOOP(T, EXP)                                                \
    do {                                                                    \
        const T *X = in;                                                    \
        T *Y = out;                                                         \
        for (int64_t o = 0; o < outer; o++) {                               \
            for (int64_t i = 0; i < inner; i++) {                           \
                const T *x = X + o * mid * inner + i;                       \
                T *y = Y + o * mid * inner + i;                             \
                T mx = -INFINITY;                                           \
                double s = 0;                                               \
                for (int64_t m = 0; m < mid; m++)                           \
                    if (x[m * inner] > mx) mx = x[m * inner];               \
                for (int64_t m = 0; m < mid; m++)                           \
                    s += EXP(x[m * inner] - mx);                            \
                if (log_out) {                                              \
                    T lse = mx + (T)log(s);                                 \
                    for (int64_t m = 0; m < mid; m++)                       \
                        y[m * inner] = x[m * inner] - lse;                  \
                } else {                                                    \
                    T inv = (T)(1.0 / s);                                   \
                    for (int64_t m = 0; m < mid; m++)                       \
                        y[m * inner] = EXP(x[m * inner] - mx) * inv;        \
                }                                                           \
            }                                                               \
        }                                                                   \
    } while (0)

void
td__cpu_softmax(td_dtype_t dtype, int log_out, void *out, const void *in,
               int64_t outer, int64_t mid, int64_t inner)
{
    if (dtype == TD_FLOAT32) {
        SOFTMAX_LOOP(float, expf);
    } else {
        SOFTMAX_LOOP(double, exp);
    }
}

/* The sum over mid of V(m) as td__cpu_sum_mid forms it (in double when
 * inner == 1, in T otherwise), so the fused backward gives the bits of the
 * composed one (mul, sum_dims, sub, mul). */
#define MID_SUM(T, V, RES)                                                  \
    do {                                                                    \
        if (inner != 1) {                                                   \
            T acc_ = 0;                                                     \
            for (int64_t m = 0; m < mid; m++) acc_ += (V);                  \
            (RES) = acc_;                                                   \
        } else {                                                            \
            double acc_ = 0;                                                \
            for (int64_t m = 0; m < mid; m++) acc_ += (V);                  \
            (RES) = (T)acc_;                                                \
        }                                                                   \
    } while (0)

/* softmax:     gx = y (g - sum_m g y)
 * log_softmax: gx = g - y sum_m g        (y = softmax(x) in both) */
#define SOFTMAX_BWD_LOOP(T)                                                 \
    do {                                                                    \
        const T *Y = y, *G = g;                                             \
        T *GX = gx;                                                         \
        for (int64_t o = 0; o < outer; o++) {                               \
            for (int64_t i = 0; i < inner; i++) {                           \
                int64_t b_ = o * mid * inner + i;                           \
                const T *yp = Y + b_, *gp = G + b_;                         \
                T *dp = GX + b_, s;                                         \
                if (log_out) {                                              \
                    MID_SUM(T, gp[m * inner], s);                           \
                    for (int64_t m = 0; m < mid; m++)                       \
                        dp[m * inner] = gp[m * inner] - yp[m * inner] * s;  \
                } else {                                                    \
                    MID_SUM(T, (T)(gp[m * inner] * yp[m * inner]), s);      \
                    for (int64_t m = 0; m < mid; m++)                       \
                        dp[m * inner] = yp[m * inner] *                     \
                                        (gp[m * inner] - s);                \
                }                                                           \
            }                                                               \
        }                                                                   \
    } while (0)

void
td__cpu_softmax_backward(td_dtype_t dtype, int log_out, void *gx, const void *y,
                        const void *g, int64_t outer, int64_t mid,
                        int64_t inner)
{
    if (mid == 0) {
        return;
    }
    if (dtype == TD_FLOAT32) {
        SOFTMAX_BWD_LOOP(float);
    } else {
        SOFTMAX_BWD_LOOP(double);
    }
}

#define MAX_LOOP(T)                                                         \
    do {                                                                    \
        const T *A = in;                                                    \
        T *V = values;                                                      \
        for (int64_t o = 0; o < outer; o++)                                 \
            for (int64_t i = 0; i < inner; i++) {                           \
                const T *x = A + o * mid * inner + i;                       \
                int64_t best = 0;                                           \
                for (int64_t m = 1; m < mid; m++)                           \
                    if (x[m * inner] > x[best * inner] ||                   \
                        (isnan(x[m * inner]) && !isnan(x[best * inner])))   \
                        best = m;                                           \
                indices[o * inner + i] = best;                              \
                if (V != NULL) V[o * inner + i] = x[best * inner];          \
            }                                                               \
    } while (0)

void
td__cpu_max_dim(td_dtype_t dtype, void *values, int64_t *indices,
               const void *in, int64_t outer, int64_t mid, int64_t inner)
{
    if (mid == 0) {
        return;
    }
    if (dtype == TD_FLOAT32) {
        MAX_LOOP(float);
    } else {
        MAX_LOOP(double);
    }
}
