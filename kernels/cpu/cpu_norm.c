/* kernels/cpu/cpu_norm.c: the CPU kernels of batch normalisation over the
 * features of a contiguous [n, c] input: per-channel sums, the affine
 * normalisation, and the two halves of the backward (PyTorch's
 * batch_norm_backward_reduce and batch_norm_backward_elemt), split so that
 * SyncBatchNorm can all_reduce the per-channel terms in between.
 * Sums are in double whatever the dtype. Thread-safe (no state). */
#include "config.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <string.h>

#include "kernels/cpu/cpu.h"

#define BN_SUMS(T)                                                          \
    do {                                                                    \
        const T *x_ = x;                                                    \
        for (int64_t r = 0; r < n; r++) {                                   \
            const T *row = x_ + r * c;                                      \
            for (int64_t j = 0; j < c; j++) {                               \
                double d = (double)row[j] - (shift ? shift[j] : 0.0);       \
                s1[j] += d;                                                 \
                s2[j] += d * d;                                             \
            }                                                               \
        }                                                                   \
    } while (0)

void
td_cpu_bn_sums(td_dtype_t dtype, const void *x, int64_t n, int64_t c,
               const double *shift, double *s1, double *s2)
{
    memset(s1, 0, (size_t)c * sizeof(double));
    memset(s2, 0, (size_t)c * sizeof(double));
    if (dtype == TD_FLOAT32) {
        BN_SUMS(float);
    } else {
        BN_SUMS(double);
    }
}

#define BN_APPLY(T)                                                         \
    do {                                                                    \
        const T *x_ = x, *w_ = weight, *b_ = bias;                          \
        T *y_ = y;                                                          \
        for (int64_t r = 0; r < n; r++) {                                   \
            for (int64_t j = 0; j < c; j++) {                               \
                double v = ((double)x_[r * c + j] - mean[j]) * invstd[j];   \
                if (w_ != NULL) v *= (double)w_[j];                         \
                if (b_ != NULL) v += (double)b_[j];                         \
                y_[r * c + j] = (T)v;                                       \
            }                                                               \
        }                                                                   \
    } while (0)

void
td_cpu_bn_apply(td_dtype_t dtype, void *y, const void *x, int64_t n,
                int64_t c, const double *mean, const double *invstd,
                const void *weight, const void *bias)
{
    if (dtype == TD_FLOAT32) {
        BN_APPLY(float);
    } else {
        BN_APPLY(double);
    }
}

#define BN_BWD_REDUCE(T)                                                    \
    do {                                                                    \
        const T *g_ = g, *x_ = x;                                           \
        for (int64_t r = 0; r < n; r++) {                                   \
            for (int64_t j = 0; j < c; j++) {                               \
                double gv = (double)g_[r * c + j];                          \
                sum_dy[j] += gv;                                            \
                sum_dy_xmu[j] += gv * ((double)x_[r * c + j] - mean[j]);    \
            }                                                               \
        }                                                                   \
    } while (0)

void
td_cpu_bn_backward_reduce(td_dtype_t dtype, const void *g, const void *x,
                          int64_t n, int64_t c, const double *mean,
                          double *sum_dy, double *sum_dy_xmu)
{
    memset(sum_dy, 0, (size_t)c * sizeof(double));
    memset(sum_dy_xmu, 0, (size_t)c * sizeof(double));
    if (dtype == TD_FLOAT32) {
        BN_BWD_REDUCE(float);
    } else {
        BN_BWD_REDUCE(double);
    }
}

#define BN_BWD_ELEMT(T)                                                     \
    do {                                                                    \
        const T *g_ = g, *x_ = x, *w_ = weight;                             \
        T *gx_ = gx;                                                        \
        for (int64_t r = 0; r < n; r++) {                                   \
            for (int64_t j = 0; j < c; j++) {                               \
                double is = invstd[j], v = (double)g_[r * c + j];           \
                if (sum_dy != NULL) {                                       \
                    double xmu = (double)x_[r * c + j] - mean[j];           \
                    v -= sum_dy[j] / count                                  \
                         + xmu * is * is * sum_dy_xmu[j] / count;           \
                }                                                           \
                v *= is * (w_ != NULL ? (double)w_[j] : 1.0);               \
                gx_[r * c + j] = (T)v;                                      \
            }                                                               \
        }                                                                   \
    } while (0)

void
td_cpu_bn_backward_elemt(td_dtype_t dtype, void *gx, const void *g,
                         const void *x, int64_t n, int64_t c,
                         const double *mean, const double *invstd,
                         const void *weight, const double *sum_dy,
                         const double *sum_dy_xmu, double count)
{
    if (dtype == TD_FLOAT32) {
        BN_BWD_ELEMT(float);
    } else {
        BN_BWD_ELEMT(double);
    }
}
