/* kernels/cuda/cuda_kernels.cu: the CUDA row of the kernel table
 * (kernels/kernels.h), the same entries and semantics as kernels/cpu/:
 * strided elementwise ops over up to TD_MAX_DIMS dims (one thread per
 * output element, a contiguous fast path), converting copies, fills, the
 * middle-dim sum, and matmul through cuBLAS. Every launch goes to the
 * stream of the device that owns the output (cuda_device.h, G2); float
 * sums accumulate in double like the CPU row, so results agree to
 * rounding. Thread-safe (no state besides cuda_device.c's). */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>

extern "C" {
#include "kernels/kernels.h"
#include "kernels/cuda/cuda_device.h"
}

namespace {

const int THREADS = 256;

/* Shapes and strides travel by value in the launch parameters. */
struct geom_t {
    int     ndim;
    int64_t shape[TD_MAX_DIMS];
    int64_t s0[TD_MAX_DIMS], s1[TD_MAX_DIMS], s2[TD_MAX_DIMS];
};

__device__ __forceinline__ void
offsets(const geom_t &g, int64_t i, int64_t *o0, int64_t *o1, int64_t *o2)
{
    int64_t a = 0, b = 0, c = 0;
    for (int d = g.ndim - 1; d >= 0; d--) {
        int64_t k = i % g.shape[d];
        i /= g.shape[d];
        a += k * g.s0[d];
        b += k * g.s1[d];
        c += k * g.s2[d];
    }
    *o0 = a; *o1 = b; *o2 = c;
}

int64_t
numel_of(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

bool
is_contig(const int64_t *shape, const int64_t *st, int ndim)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && st[d] != s) return false;
        s *= shape[d];
    }
    return true;
}

geom_t
make_geom(const int64_t *shape, int ndim, const int64_t *s0,
          const int64_t *s1, const int64_t *s2)
{
    geom_t g;
    int64_t s = 1;
    g.ndim = ndim;
    for (int d = ndim - 1; d >= 0; d--) {
        g.shape[d] = shape[d];
        g.s0[d] = s0 ? s0[d] : s;      /* NULL: contiguous output */
        g.s1[d] = s1 ? s1[d] : 0;
        g.s2[d] = s2 ? s2[d] : 0;
        s *= shape[d];
    }
    return g;
}

/* The stream of the device holding PTR (made current), or NULL after
 * recording why. */
cudaStream_t
stream_for(const void *ptr, const char *kernel)
{
    void *stream = NULL;
    int dev = td_cuda_device_of(ptr);
    if (dev < 0 || td_cuda_enter(dev, &stream) != TD_OK) {
        td_cuda_launch_failed(kernel, "output is not CUDA device memory");
        return NULL;
    }
    return (cudaStream_t)stream;
}

unsigned
blocks_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b > 65535 * 32 ? 65535 * 32 : b);
}

void
check_launch(const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) td_cuda_launch_failed(kernel, cudaGetErrorString(e));
}

/* ---- binary -------------------------------------------------------------- */

template <typename T>
__device__ __forceinline__ T
bin(td_binary_op_t op, T x, T y)
{
    switch (op) {
    case TD_BIN_ADD: return x + y;
    case TD_BIN_SUB: return x - y;
    case TD_BIN_MUL: return x * y;
    case TD_BIN_DIV: return x / y;
    case TD_BIN_RELU_MASK: return y > 0 ? x : (T)0;
    }
    return x;
}

template <typename T>
__global__ void
binary_kernel(td_binary_op_t op, T *out, const T *a, const T *b, geom_t g,
              int64_t n, bool contig)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (contig) {
            out[i] = bin(op, a[i], b[i]);
        } else {
            int64_t o0, o1, o2;
            offsets(g, i, &o0, &o1, &o2);
            out[i] = bin(op, a[o1], b[o2]);
        }
    }
}

void
cuda_binary(td_binary_op_t op, td_dtype_t dtype, void *out, td_operand_t a,
            td_operand_t b, const int64_t *shape, int ndim)
{
    int64_t n = numel_of(shape, ndim);
    cudaStream_t s;
    if (n == 0 || (s = stream_for(out, "binary")) == NULL) return;
    geom_t g = make_geom(shape, ndim, NULL, a.strides, b.strides);
    bool contig = is_contig(shape, a.strides, ndim) &&
                  is_contig(shape, b.strides, ndim);
    if (dtype == TD_FLOAT32) {
        binary_kernel<float><<<blocks_for(n), THREADS, 0, s>>>(
            op, (float *)out, (const float *)a.data, (const float *)b.data,
            g, n, contig);
    } else {
        binary_kernel<double><<<blocks_for(n), THREADS, 0, s>>>(
            op, (double *)out, (const double *)a.data,
            (const double *)b.data, g, n, contig);
    }
    check_launch("binary");
}

/* ---- unary --------------------------------------------------------------- */

/* gelu(x) = x Phi(x); gelu' = Phi(x) + x phi(x); gelu'' = phi(x)(2 - x^2) */
template <typename T>
__device__ __forceinline__ T
un(td_unary_op_t op, T x, T c)
{
    const T k = (T)(0.5 * M_2_SQRTPI * M_SQRT1_2);   /* 1/sqrt(2 pi) */
    switch (op) {
    case TD_UN_NEG: return -x;
    case TD_UN_EXP: return exp(x);
    case TD_UN_LOG: return log(x);
    case TD_UN_SQRT: return sqrt(x);
    case TD_UN_ABS: return fabs(x);
    case TD_UN_TANH: return tanh(x);
    case TD_UN_SIGMOID: return (T)1 / ((T)1 + exp(-x));
    case TD_UN_RELU: return x > 0 ? x : (T)0;
    case TD_UN_GELU: return x * (T)0.5 * ((T)1 + erf(x * (T)M_SQRT1_2));
    case TD_UN_GELU_GRAD:
        return (T)0.5 * ((T)1 + erf(x * (T)M_SQRT1_2)) +
               x * k * exp((T)-0.5 * x * x);
    case TD_UN_GELU_GRAD2: return k * exp((T)-0.5 * x * x) * ((T)2 - x * x);
    case TD_UN_SIGN: return (T)((x > 0) - (x < 0));
    case TD_UN_STEP: return x > 0 ? (T)1 : (T)0;
    case TD_UN_POW: return pow(x, c);
    case TD_UN_MUL_SCALAR: return x * c;
    case TD_UN_ADD_SCALAR: return x + c;
    }
    return x;
}

template <typename T>
__global__ void
unary_kernel(td_unary_op_t op, T *out, const T *a, T c, geom_t g, int64_t n,
             bool contig)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (contig) {
            out[i] = un(op, a[i], c);
        } else {
            int64_t o0, o1, o2;
            offsets(g, i, &o0, &o1, &o2);
            out[i] = un(op, a[o1], c);
        }
    }
}

void
cuda_unary(td_unary_op_t op, td_dtype_t dtype, void *out, td_operand_t a,
           double scalar, const int64_t *shape, int ndim)
{
    int64_t n = numel_of(shape, ndim);
    cudaStream_t s;
    if (n == 0 || (s = stream_for(out, "unary")) == NULL) return;
    geom_t g = make_geom(shape, ndim, NULL, a.strides, NULL);
    bool contig = is_contig(shape, a.strides, ndim);
    if (dtype == TD_FLOAT32) {
        unary_kernel<float><<<blocks_for(n), THREADS, 0, s>>>(
            op, (float *)out, (const float *)a.data, (float)scalar, g, n,
            contig);
    } else {
        unary_kernel<double><<<blocks_for(n), THREADS, 0, s>>>(
            op, (double *)out, (const double *)a.data, scalar, g, n, contig);
    }
    check_launch("unary");
}

/* ---- copy and fill ------------------------------------------------------- */

template <typename TD, typename TS>
__global__ void
copy_kernel(TD *dst, const TS *src, geom_t g, int64_t n, bool contig)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        if (contig) {
            dst[i] = (TD)src[i];
        } else {
            int64_t o0, o1, o2;
            offsets(g, i, &o0, &o1, &o2);
            dst[o0] = (TD)src[o1];
        }
    }
}

template <typename TD>
void
copy_from(td_dtype_t sdtype, TD *dst, const void *src, const geom_t &g,
          int64_t n, bool contig, cudaStream_t s)
{
    unsigned nb = blocks_for(n);
    switch (sdtype) {
    case TD_FLOAT32:
        copy_kernel<TD, float><<<nb, THREADS, 0, s>>>(dst, (const float *)src, g, n, contig);
        break;
    case TD_FLOAT64:
        copy_kernel<TD, double><<<nb, THREADS, 0, s>>>(dst, (const double *)src, g, n, contig);
        break;
    case TD_INT64:
        copy_kernel<TD, int64_t><<<nb, THREADS, 0, s>>>(dst, (const int64_t *)src, g, n, contig);
        break;
    case TD_INT32:
        copy_kernel<TD, int32_t><<<nb, THREADS, 0, s>>>(dst, (const int32_t *)src, g, n, contig);
        break;
    case TD_UINT8:
        copy_kernel<TD, uint8_t><<<nb, THREADS, 0, s>>>(dst, (const uint8_t *)src, g, n, contig);
        break;
    default:
        break;
    }
}

void
cuda_copy(td_dtype_t ddtype, td_operand_t dst, td_dtype_t sdtype,
          td_operand_t src, const int64_t *shape, int ndim)
{
    int64_t n = numel_of(shape, ndim);
    cudaStream_t s;
    if (n == 0 || (s = stream_for(dst.data, "copy")) == NULL) return;
    geom_t g = make_geom(shape, ndim, dst.strides, src.strides, NULL);
    bool contig = is_contig(shape, dst.strides, ndim) &&
                  is_contig(shape, src.strides, ndim);
    switch (ddtype) {
    case TD_FLOAT32: copy_from(sdtype, (float *)dst.data, src.data, g, n, contig, s); break;
    case TD_FLOAT64: copy_from(sdtype, (double *)dst.data, src.data, g, n, contig, s); break;
    case TD_INT64: copy_from(sdtype, (int64_t *)dst.data, src.data, g, n, contig, s); break;
    case TD_INT32: copy_from(sdtype, (int32_t *)dst.data, src.data, g, n, contig, s); break;
    case TD_UINT8: copy_from(sdtype, (uint8_t *)dst.data, src.data, g, n, contig, s); break;
    default: break;
    }
    check_launch("copy");
}

template <typename T>
__global__ void
fill_kernel(T *dst, T v, geom_t g, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o0, o1, o2;
        offsets(g, i, &o0, &o1, &o2);
        dst[o0] = v;
    }
}

void
cuda_fill(td_dtype_t dtype, td_operand_t dst, double value,
          const int64_t *shape, int ndim)
{
    int64_t n = numel_of(shape, ndim);
    cudaStream_t s;
    if (n == 0 || (s = stream_for(dst.data, "fill")) == NULL) return;
    geom_t g = make_geom(shape, ndim, dst.strides, NULL, NULL);
    unsigned nb = blocks_for(n);
    switch (dtype) {
    case TD_FLOAT32: fill_kernel<float><<<nb, THREADS, 0, s>>>((float *)dst.data, (float)value, g, n); break;
    case TD_FLOAT64: fill_kernel<double><<<nb, THREADS, 0, s>>>((double *)dst.data, value, g, n); break;
    case TD_INT64: fill_kernel<int64_t><<<nb, THREADS, 0, s>>>((int64_t *)dst.data, (int64_t)value, g, n); break;
    case TD_INT32: fill_kernel<int32_t><<<nb, THREADS, 0, s>>>((int32_t *)dst.data, (int32_t)value, g, n); break;
    case TD_UINT8: fill_kernel<uint8_t><<<nb, THREADS, 0, s>>>((uint8_t *)dst.data, (uint8_t)value, g, n); break;
    default: break;
    }
    check_launch("fill");
}

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
        double acc = 0;
        for (int64_t m = 0; m < mid; m++) acc += p[m * inner];
        out[j] = (T)acc;
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

void
cuda_sum_mid(td_dtype_t dtype, void *out, const void *in, int64_t outer,
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
void
cuda_gemm(td_dtype_t dtype, int trans_a, int trans_b, int64_t m, int64_t n,
          int64_t k, double alpha, const void *a, int64_t lda, const void *b,
          int64_t ldb, double beta, void *c, int64_t ldc)
{
    void *handle;
    int dev;
    cublasStatus_t st;
    cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;

    if (m == 0 || n == 0) return;
    if (stream_for(c, "gemm") == NULL) return;
    dev = td_cuda_device_of(c);
    if (td_cuda_blas(dev, &handle) != TD_OK) {
        td_cuda_launch_failed("gemm", "no cuBLAS handle");
        return;
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
        td_cuda_launch_failed("gemm", cublasGetStatusString(st));
    }
}

} /* namespace */

extern "C" const td_kernels_t td_cuda_kernels = {
    .binary = cuda_binary,
    .unary = cuda_unary,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .sum_mid = cuda_sum_mid,
    .gemm = cuda_gemm,
};
