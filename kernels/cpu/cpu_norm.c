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

#include "kernels/cpu/cpu.h"

/* Channels are processed in blocks of CB with per-channel coefficients in
 * a stack array, so the inner loop over a row is branch-free and
 * vectorises; every per-element product is in double. */
#define CB 256

#define BN_SUMS(T)                                                          \
    do {                                                                    \
        const T *restrict x_ = x;                                           \
        for (int64_t j0 = 0; j0 < c; j0 += CB) {                            \
            int64_t nb = c - j0 < CB ? c - j0 : CB;                         \
            double sh[CB], a1[CB], a2[CB];                                  \
            for (int64_t j = 0; j < nb; j++) {                              \
                sh[j] = shift ? shift[j0 + j] : 0.0;                        \
                a1[j] = 0;                                                  \
                a2[j] = 0;                                                  \
            }                                                               \
            for (int64_t r = 0; r < n; r++) {                               \
                const T *restrict row = x_ + r * c + j0;                    \
                for (int64_t j = 0; j < nb; j++) {                          \
                    double d = (double)row[j] - sh[j];                      \
                    a1[j] += d;                                             \
                    a2[j] += d * d;                                         \
                }                                                           \
            }                                                               \
            for (int64_t j = 0; j < nb; j++) {                              \
                s1[j0 + j] = a1[j];                                         \
                s2[j0 + j] = a2[j];                                         \
            }                                                               \
        }                                                                   \
    } while (0)

void
td__cpu_bn_sums(td_dtype_t dtype, const void *x, int64_t n, int64_t c,
               const double *shift, double *s1, double *s2)
{
    if (dtype == TD_FLOAT32) {
        BN_SUMS(float);
    } else {
        BN_SUMS(double);
    }
}

/* y = x a + b with a = invstd w, b = bias - mean a */
#define BN_APPLY(T)                                                         \
    do {                                                                    \
        const T *restrict x_ = x, *w_ = weight, *b_ = bias;                 \
        T *restrict y_ = y;                                                 \
        for (int64_t j0 = 0; j0 < c; j0 += CB) {                            \
            int64_t nb = c - j0 < CB ? c - j0 : CB;                         \
            double a[CB], b[CB];                                            \
            for (int64_t j = 0; j < nb; j++) {                              \
                a[j] = invstd[j0 + j] * (w_ ? (double)w_[j0 + j] : 1.0);    \
                b[j] = (b_ ? (double)b_[j0 + j] : 0.0) - mean[j0 + j] * a[j]; \
            }                                                               \
            for (int64_t r = 0; r < n; r++) {                               \
                const T *restrict xr = x_ + r * c + j0;                     \
                T *restrict yr = y_ + r * c + j0;                           \
                for (int64_t j = 0; j < nb; j++) {                          \
                    yr[j] = (T)((double)xr[j] * a[j] + b[j]);               \
                }                                                           \
            }                                                               \
        }                                                                   \
    } while (0)

void
td__cpu_bn_apply(td_dtype_t dtype, void *y, const void *x, int64_t n,
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
        const T *restrict g_ = g, *restrict x_ = x;                         \
        for (int64_t j0 = 0; j0 < c; j0 += CB) {                            \
            int64_t nb = c - j0 < CB ? c - j0 : CB;                         \
            double m[CB], a1[CB], a2[CB];                                   \
            for (int64_t j = 0; j < nb; j++) {                              \
                m[j] = mean[j0 + j];                                        \
                a1[j] = 0;                                                  \
                a2[j] = 0;                                                  \
            }                                                               \
            for (int64_t r = 0; r < n; r++) {                               \
                const T *restrict gr = g_ + r * c + j0;                     \
                const T *restrict xr = x_ + r * c + j0;                     \
                for (int64_t j = 0; j < nb; j++) {                          \
                    double gv = (double)gr[j];                              \
                    a1[j] += gv;                                            \
                    a2[j] += gv * ((double)xr[j] - m[j]);                   \
                }                                                           \
            }                                                               \
            for (int64_t j = 0; j < nb; j++) {                              \
                sum_dy[j0 + j] = a1[j];                                     \
                sum_dy_xmu[j0 + j] = a2[j];                                 \
            }                                                               \
        }                                                                   \
    } while (0)

void
td__cpu_bn_backward_reduce(td_dtype_t dtype, const void *g, const void *x,
                          int64_t n, int64_t c, const double *mean,
                          double *sum_dy, double *sum_dy_xmu)
{
    if (dtype == TD_FLOAT32) {
        BN_BWD_REDUCE(float);
    } else {
        BN_BWD_REDUCE(double);
    }
}

/* gx = g A + x B + C per channel:
 *   A = invstd w,  B = -invstd^3 w sum_dy_xmu / count,
 *   C = (mean invstd^2 sum_dy_xmu - sum_dy) / count * invstd w */
#define BN_BWD_ELEMT(T)                                                     \
    do {                                                                    \
        const T *restrict g_ = g, *restrict x_ = x, *w_ = weight;           \
        T *restrict gx_ = gx;                                               \
        for (int64_t j0 = 0; j0 < c; j0 += CB) {                            \
            int64_t nb = c - j0 < CB ? c - j0 : CB;                         \
            double A[CB], B[CB], Cc[CB];                                    \
            for (int64_t j = 0; j < nb; j++) {                              \
                double is = invstd[j0 + j];                                 \
                double sw = is * (w_ ? (double)w_[j0 + j] : 1.0);           \
                A[j] = sw;                                                  \
                B[j] = 0;                                                   \
                Cc[j] = 0;                                                  \
                if (sum_dy != NULL) {                                       \
                    double k = is * is * sum_dy_xmu[j0 + j] / count;        \
                    B[j] = -k * sw;                                         \
                    Cc[j] = (mean[j0 + j] * k - sum_dy[j0 + j] / count) * sw; \
                }                                                           \
            }                                                               \
            for (int64_t r = 0; r < n; r++) {                               \
                const T *restrict gr = g_ + r * c + j0;                     \
                const T *restrict xr = x_ + r * c + j0;                     \
                T *restrict out = gx_ + r * c + j0;                         \
                for (int64_t j = 0; j < nb; j++) {                          \
                    out[j] = (T)((double)gr[j] * A[j] +                     \
                                 (double)xr[j] * B[j] + Cc[j]);             \
                }                                                           \
            }                                                               \
        }                                                                   \
    } while (0)

void
td__cpu_bn_backward_elemt(td_dtype_t dtype, void *gx, const void *g,
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
