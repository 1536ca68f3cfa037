/* kernels/cuda/cuda_reduce.cu: the CUDA kernels that reduce along the
 * middle of a contiguous [outer, mid, inner] block (sum, softmax and its
 * backward, max) and matmul through cuBLAS. Sums accumulate as the CPU row
 * does (double when inner == 1, the dtype otherwise; invariant 2 of
 * kernels/kernels.h); inner == 1 rows use one block and a shared-memory
 * tree, other shapes one thread per (outer, inner) column walking mid in
 * the CPU's order. */
#include "config.h"

#include <cublas_v2.h>

#include "kernels/cuda/cuda_common.cuh"

using namespace td_cuda;

/* ---- sum over the middle dim ------------------------------------------- */

/* inner > 1: one thread per (o, i), walking m (coalesced across i). */
template <typename T>
__global__ void
sum_mid_cols(T *out, const T *in, int64_t outer, int64_t mid, int64_t inner)
{
    int64_t n = outer * inner;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < n;
         j += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = j / inner, i = j % inner;
        const T *p = in + o * mid * inner + i;
        T acc = 0;                 /* in T, in the CPU's order */
        for (int64_t m = 0; m < mid; m++) acc += p[m * inner];
        out[j] = acc;
    }
}

/* inner == 1: one block per row, a shared-memory tree. */
template <typename T>
__global__ void
sum_mid_rows(T *out, const T *in, int64_t mid)
{
    __shared__ double part[THREADS];
    const T *row = in + blockIdx.x * mid;
    double acc = 0;
    for (int64_t m = threadIdx.x; m < mid; m += blockDim.x) acc += row[m];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = (T)part[0];
}

template <typename T>
void
sum_mid_typed(T *out, const T *in, int64_t outer, int64_t mid, int64_t inner,
              cudaStream_t s)
{
    if (inner == 1 && outer <= 0x7fffffff) {
        sum_mid_rows<T><<<(unsigned)outer, THREADS, 0, s>>>(out, in, mid);
    } else {
        sum_mid_cols<T><<<blocks_for(outer * inner), THREADS, 0, s>>>(
            out, in, outer, mid, inner);
    }
}

extern "C" void
td__cuda_sum_mid(td_dtype_t dtype, void *out, const void *in, int64_t outer,
             int64_t mid, int64_t inner)
{
    cudaStream_t s;
    if (outer * inner == 0 || (s = stream_for(out, "sum_mid")) == NULL) return;
    if (dtype == TD_FLOAT32) {
        sum_mid_typed((float *)out, (const float *)in, outer, mid, inner, s);
    } else {
        sum_mid_typed((double *)out, (const double *)in, outer, mid, inner, s);
    }
    check_launch("sum_mid");
}

/* ---- matmul through cuBLAS ----------------------------------------------
 * cuBLAS is column-major: a row-major C = op(A) op(B) is the column-major
 * C^T = op(B)^T op(A)^T, so swap the operands and m/n. */
extern "C" td_status_t
td__cuda_gemm(td_dtype_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
          int64_t k, double alpha, const void *a, int64_t lda, const void *b,
          int64_t ldb, double beta, void *c, int64_t ldc)
{
    void *handle;
    int dev;
    cublasStatus_t st;
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;

    if (m == 0 || n == 0) return TD_OK;
    if (stream_for(c, "gemm") == NULL) {
        return td_error(TD_ERR_INVALID, "cuda: gemm: the output is not "
                        "CUDA device memory");
    }
    dev = td__cuda_device_of(c);
    if (td__cuda_blas(dev, &handle) != TD_OK) {
        td__cuda_launch_failed("gemm", "no cuBLAS handle");
        return td_error(TD_ERR_UNSUPPORTED, "cuda: gemm: no cuBLAS handle "
                        "on device %d", dev);
    }
    if (dtype == TD_FLOAT32) {
        float al = (float)alpha, be = (float)beta;
        st = cublasSgemm((cublasHandle_t)handle, tb, ta, (int)n, (int)m,
                         (int)k, &al, (const float *)b, (int)ldb,
                         (const float *)a, (int)lda, &be, (float *)c,
                         (int)ldc);
    } else {
        st = cublasDgemm((cublasHandle_t)handle, tb, ta, (int)n, (int)m,
                         (int)k, &alpha, (const double *)b, (int)ldb,
                         (const double *)a, (int)lda, &beta, (double *)c,
                         (int)ldc);
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        td__cuda_launch_failed("gemm", cublasGetStatusString(st));
        return td_error(TD_ERR_IO, "cuda: gemm: %s",
                        cublasGetStatusString(st));
    }
    return TD_OK;
}


/* ---- softmax / log_softmax --------------------------------------------- */

/* y = exp(x - max) / sum exp(x - max), sum in double; log: x - (max +
 * log sum). One (o, i) column per thread. */
template <typename T>
__global__ void
softmax_cols(int log_out, T *out, const T *in, int64_t outer, int64_t mid,
             int64_t inner)
{
    FOR_EACH(j, outer * inner) {
        int64_t o = j / inner, i = j % inner;
        const T *x = in + o * mid * inner + i;
        T *y = out + o * mid * inner + i;
        T mx = -INFINITY;
        double s = 0;
        for (int64_t m = 0; m < mid; m++) if (x[m * inner] > mx) mx = x[m * inner];
        for (int64_t m = 0; m < mid; m++) s += exp(x[m * inner] - mx);
        if (log_out) {
            T lse = mx + (T)log(s);
            for (int64_t m = 0; m < mid; m++) y[m * inner] = x[m * inner] - lse;
        } else {
            T inv = (T)(1.0 / s);
            for (int64_t m = 0; m < mid; m++) y[m * inner] = exp(x[m * inner] - mx) * inv;
        }
    }
}

/* inner == 1: one block per row; max and sum by shared-memory trees. */
template <typename T>
__global__ void
softmax_rows(int log_out, T *out, const T *in, int64_t mid)
{
    __shared__ double part[THREADS];
    const T *x = in + blockIdx.x * mid;
    T *y = out + blockIdx.x * mid;
    T mx = -INFINITY;
    for (int64_t m = threadIdx.x; m < mid; m += blockDim.x) if (x[m] > mx) mx = x[m];
    part[threadIdx.x] = mx;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w && part[threadIdx.x + w] > part[threadIdx.x])
            part[threadIdx.x] = part[threadIdx.x + w];
        __syncthreads();
    }
    mx = (T)part[0];
    __syncthreads();
    double s = 0;
    for (int64_t m = threadIdx.x; m < mid; m += blockDim.x) s += exp(x[m] - mx);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    s = part[0];
    if (log_out) {
        T lse = mx + (T)log(s);
        for (int64_t m = threadIdx.x; m < mid; m += blockDim.x) y[m] = x[m] - lse;
    } else {
        T inv = (T)(1.0 / s);
        for (int64_t m = threadIdx.x; m < mid; m += blockDim.x) y[m] = exp(x[m] - mx) * inv;
    }
}

template <typename T>
static void
softmax_typed(int log_out, T *out, const T *in, int64_t outer, int64_t mid,
              int64_t inner, cudaStream_t s)
{
    if (inner == 1 && outer <= 0x7fffffff) {
        softmax_rows<T><<<(unsigned)outer, THREADS, 0, s>>>(log_out, out, in, mid);
    } else {
        softmax_cols<T><<<blocks_for(outer * inner), THREADS, 0, s>>>(
            log_out, out, in, outer, mid, inner);
    }
}

extern "C" void
td__cuda_softmax(td_dtype_t dtype, int log_out, void *out, const void *in,
                int64_t outer, int64_t mid, int64_t inner)
{
    cudaStream_t s;
    if (outer * mid * inner == 0 || (s = stream_for(out, "softmax")) == NULL) return;
    if (dtype == TD_FLOAT32) {
        softmax_typed(log_out, (float *)out, (const float *)in, outer, mid, inner, s);
    } else {
        softmax_typed(log_out, (double *)out, (const double *)in, outer, mid, inner, s);
    }
    check_launch("softmax");
}

/* softmax: gx = y (g - sum_m g y); log_softmax: gx = g - y sum_m g.
 * The sum as the CPU forms it: in T (inner > 1, sequential) or in double
 * (inner == 1). One (o, i) column per thread. */
template <typename T>
__global__ void
softmax_bwd_cols(int log_out, T *gx, const T *y, const T *g, int64_t outer,
                 int64_t mid, int64_t inner)
{
    FOR_EACH(j, outer * inner) {
        int64_t o = j / inner, i = j % inner, b = o * mid * inner + i;
        const T *yp = y + b, *gp = g + b;
        T *dp = gx + b, s;
        if (inner != 1) {
            T acc = 0;
            for (int64_t m = 0; m < mid; m++)
                acc += log_out ? gp[m * inner] : (T)(gp[m * inner] * yp[m * inner]);
            s = acc;
        } else {
            double acc = 0;
            for (int64_t m = 0; m < mid; m++)
                acc += log_out ? gp[m] : (T)(gp[m] * yp[m]);
            s = (T)acc;
        }
        for (int64_t m = 0; m < mid; m++)
            dp[m * inner] = log_out ? gp[m * inner] - yp[m * inner] * s
                                    : yp[m * inner] * (gp[m * inner] - s);
    }
}

extern "C" void
td__cuda_softmax_backward(td_dtype_t dtype, int log_out, void *gx,
                         const void *y, const void *g, int64_t outer,
                         int64_t mid, int64_t inner)
{
    cudaStream_t s;
    if (outer * mid * inner == 0 || (s = stream_for(gx, "softmax_backward")) == NULL) return;
    unsigned nb = blocks_for(outer * inner);
    if (dtype == TD_FLOAT32) {
        softmax_bwd_cols<float><<<nb, THREADS, 0, s>>>(log_out, (float *)gx,
            (const float *)y, (const float *)g, outer, mid, inner);
    } else {
        softmax_bwd_cols<double><<<nb, THREADS, 0, s>>>(log_out, (double *)gx,
            (const double *)y, (const double *)g, outer, mid, inner);
    }
    check_launch("softmax_backward");
}

/* ---- max along mid (first maximum; NaN wins) ----------------------------- */

template <typename T>
__global__ void
max_cols(T *values, int64_t *indices, const T *in, int64_t outer, int64_t mid,
         int64_t inner)
{
    FOR_EACH(j, outer * inner) {
        int64_t o = j / inner, i = j % inner;
        const T *x = in + o * mid * inner + i;
        int64_t best = 0;
        for (int64_t m = 1; m < mid; m++)
            if (x[m * inner] > x[best * inner] ||
                (isnan(x[m * inner]) && !isnan(x[best * inner])))
                best = m;
        indices[j] = best;
        if (values != NULL) values[j] = x[best * inner];
    }
}

extern "C" void
td__cuda_max_dim(td_dtype_t dtype, void *values, int64_t *indices,
                const void *in, int64_t outer, int64_t mid, int64_t inner)
{
    cudaStream_t s;
    if (mid == 0 || outer * inner == 0 ||
        (s = stream_for(indices, "max_dim")) == NULL) return;
    unsigned nb = blocks_for(outer * inner);
    if (dtype == TD_FLOAT32) {
        max_cols<float><<<nb, THREADS, 0, s>>>((float *)values, indices,
                                               (const float *)in, outer, mid, inner);
    } else {
        max_cols<double><<<nb, THREADS, 0, s>>>((double *)values, indices,
                                                (const double *)in, outer, mid, inner);
    }
    check_launch("max_dim");
}
