/* kernels/cuda/cuda_elementwise.cu: the CUDA elementwise kernels
 * (binary and unary ops over strided operands with broadcasting, converting
 * copies, fills): one thread per output element, a contiguous fast path.
 * The same semantics as kernels/cpu/cpu_elementwise.c; compiled without
 * FMA contraction (cuda.mk), so +, -, *, / give the CPU's bits. */
#include "config.h"

#include "kernels/cuda/cuda_common.cuh"

using namespace td_cuda;

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

extern "C" void
td__cuda_binary(td_binary_op_t op, td_dtype_t dtype, void *out, td_operand_t a,
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

extern "C" void
td__cuda_unary(td_unary_op_t op, td_dtype_t dtype, void *out, td_operand_t a,
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

extern "C" void
td__cuda_copy(td_dtype_t ddtype, td_operand_t dst, td_dtype_t sdtype,
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

extern "C" void
td__cuda_fill(td_dtype_t dtype, td_operand_t dst, double value,
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

