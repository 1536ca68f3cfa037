/* kernels/cpu/cpu_optim.c: the CPU optimizer updates (SGD with momentum,
 * dampening, nesterov and weight decay; Adam/AdamW with amsgrad), PyTorch
 * 1.13's single-tensor rules with the arithmetic in the parameter's dtype:
 * each value is rounded to T as torch's float32 tensors would be, and
 * state is kept in double buffers holding those rounded values.
 * Thread-safe (no state of its own). */
#include "config.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <math.h>

#include "kernels/cpu/cpu.h"

#define SGD_LOOP(T)                                                         \
    do {                                                                    \
        T *p = param;                                                       \
        const T *g = grad;                                                  \
        double *mb = momentum_buf;                                          \
        const T lr = (T)s->lr, wd = (T)s->weight_decay;                     \
        const T mom = (T)s->momentum, damp = (T)(1 - s->dampening);         \
        if (mb == NULL && wd == 0) {                                        \
            for (int64_t i = 0; i < n; i++) p[i] = p[i] - lr * g[i];        \
            break;                                                          \
        }                                                                   \
        for (int64_t i = 0; i < n; i++) {                                   \
            T d = g[i];                                                     \
            if (wd != 0) d = d + wd * p[i];                                 \
            if (mb != NULL) {                                               \
                T b = s->first ? d : (T)mb[i] * mom + damp * d;             \
                mb[i] = b;                                                  \
                d = s->nesterov ? d + mom * b : b;                          \
            }                                                               \
            p[i] = p[i] - lr * d;                                           \
        }                                                                   \
    } while (0)

void
td__cpu_sgd_step(td_dtype_t dtype, void *param, const void *grad,
                double *momentum_buf, int64_t n, const td_sgd_args_t *s)
{
    if (dtype == TD_FLOAT32) {
        SGD_LOOP(float);
    } else {
        SGD_LOOP(double);
    }
}

#define ADAM_LOOP(T, SQRT)                                                  \
    do {                                                                    \
        T *p = param;                                                       \
        const T *g = grad;                                                  \
        double *m = exp_avg, *v = exp_avg_sq, *vmax = max_exp_avg_sq;       \
        const T b1 = (T)a->beta1, b2 = (T)a->beta2, eps = (T)a->eps;        \
        const T wd = (T)a->weight_decay, lr = (T)a->lr;                     \
        const T step_size = (T)(a->lr / a->bc1);                            \
        const T bc2s = (T)sqrt(a->bc2);                                     \
        for (int64_t i = 0; i < n; i++) {                                   \
            T gi = g[i], mi = (T)m[i], vi = (T)v[i], den;                   \
            if (a->decoupled) p[i] = p[i] * ((T)1 - lr * wd);               \
            else if (wd != 0) gi = gi + wd * p[i];                          \
            mi = mi * b1 + ((T)1 - b1) * gi;                                \
            vi = vi * b2 + ((T)1 - b2) * gi * gi;                           \
            m[i] = mi;                                                      \
            v[i] = vi;                                                      \
            if (vmax != NULL) {                                             \
                T vm = (T)vmax[i] > vi ? (T)vmax[i] : vi;                   \
                vmax[i] = vm;                                               \
                vi = vm;                                                    \
            }                                                               \
            den = SQRT(vi) / bc2s + eps;                                    \
            p[i] = p[i] - step_size * (mi / den);                           \
        }                                                                   \
    } while (0)

void
td__cpu_adam_step(td_dtype_t dtype, void *param, const void *grad,
                 double *exp_avg, double *exp_avg_sq, double *max_exp_avg_sq,
                 int64_t n, const td_adam_args_t *a)
{
    if (dtype == TD_FLOAT32) {
        ADAM_LOOP(float, sqrtf);
    } else {
        ADAM_LOOP(double, sqrt);
    }
}
