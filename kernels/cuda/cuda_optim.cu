/* kernels/cuda/cuda_optim.cu: the CUDA optimizer updates (SGD with
 * momentum, dampening, nesterov, weight decay; Adam/AdamW with amsgrad),
 * PyTorch 1.13's single-tensor rules with the arithmetic in the
 * parameter's dtype and state in double buffers holding the rounded
 * values, one thread per element: the CPU row's formulas
 * (kernels/cpu/cpu_optim.c) term for term, without FMA contraction. */
#include "config.h"

#include "kernels/cuda/cuda_common.cuh"

using namespace td_cuda;

template <typename T>
__global__ void
sgd_kernel(T *p, const T *g, double *mb, int64_t n, td_sgd_args_t s)
{
    const T lr = (T)s.lr, wd = (T)s.weight_decay;
    const T mom = (T)s.momentum, damp = (T)(1 - s.dampening);
    FOR_EACH(i, n) {
        if (mb == NULL && wd == 0) {
            p[i] = p[i] - lr * g[i];
            continue;
        }
        T d = g[i];
        if (wd != 0) d = d + wd * p[i];
        if (mb != NULL) {
            T b = s.first ? d : (T)mb[i] * mom + damp * d;
            mb[i] = b;
            d = s.nesterov ? d + mom * b : b;
        }
        p[i] = p[i] - lr * d;
    }
}

extern "C" void
td__cuda_sgd_step(td_dtype_t dtype, void *param, const void *grad,
                 double *momentum_buf, int64_t n, const td_sgd_args_t *args)
{
    cudaStream_t s;
    if (n == 0 || (s = stream_for(param, "sgd_step")) == NULL) return;
    if (dtype == TD_FLOAT32) {
        sgd_kernel<float><<<blocks_for(n), THREADS, 0, s>>>(
            (float *)param, (const float *)grad, momentum_buf, n, *args);
    } else {
        sgd_kernel<double><<<blocks_for(n), THREADS, 0, s>>>(
            (double *)param, (const double *)grad, momentum_buf, n, *args);
    }
    check_launch("sgd_step");
}

template <typename T>
__global__ void
adam_kernel(T *p, const T *g, double *m, double *v, double *vmax, int64_t n,
            td_adam_args_t a)
{
    const T b1 = (T)a.beta1, b2 = (T)a.beta2, eps = (T)a.eps;
    const T wd = (T)a.weight_decay, lr = (T)a.lr;
    const T step_size = (T)(a.lr / a.bc1);
    const T bc2s = (T)sqrt(a.bc2);
    FOR_EACH(i, n) {
        T gi = g[i], mi = (T)m[i], vi = (T)v[i], den;
        if (a.decoupled) p[i] = p[i] * ((T)1 - lr * wd);
        else if (wd != 0) gi = gi + wd * p[i];
        mi = mi * b1 + ((T)1 - b1) * gi;
        vi = vi * b2 + ((T)1 - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        if (vmax != NULL) {
            T vm = (T)vmax[i] > vi ? (T)vmax[i] : vi;
            vmax[i] = vm;
            vi = vm;
        }
        den = sqrt(vi) / bc2s + eps;
        p[i] = p[i] - step_size * (mi / den);
    }
}

extern "C" void
td__cuda_adam_step(td_dtype_t dtype, void *param, const void *grad,
                  double *exp_avg, double *exp_avg_sq, double *max_exp_avg_sq,
                  int64_t n, const td_adam_args_t *args)
{
    cudaStream_t s;
    if (n == 0 || (s = stream_for(param, "adam_step")) == NULL) return;
    if (dtype == TD_FLOAT32) {
        adam_kernel<float><<<blocks_for(n), THREADS, 0, s>>>(
            (float *)param, (const float *)grad, exp_avg, exp_avg_sq,
            max_exp_avg_sq, n, *args);
    } else {
        adam_kernel<double><<<blocks_for(n), THREADS, 0, s>>>(
            (double *)param, (const double *)grad, exp_avg, exp_avg_sq,
            max_exp_avg_sq, n, *args);
    }
    check_launch("adam_step");
}
