/* kernels/cuda/cuda_index.cu: the CUDA indexing kernels (index checks,
 * index_select / index_add along a dim, gather / scatter-add, embedding
 * bag plans), the semantics of kernels/cpu/cpu_index.c. Index arrays are
 * int64 in device memory. Adds to repeated indices use atomics, so their
 * order (and the last bits of a float sum over duplicates) may differ from
 * the CPU's sequential order. The two kernels that return a value
 * (index_check, bag_plan) synchronise the stream to read it. */
#include "config.h"

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/device.h"

using namespace td_cuda;

/* first[0] = min i with IX[i] outside [0, limit) */
__global__ void
index_check_kernel(const int64_t *ix, int64_t n, int64_t limit,
                   unsigned long long *first)
{
    FOR_EACH(i, n) {
        if (ix[i] < 0 || ix[i] >= limit) atomicMin(first, (unsigned long long)i);
    }
}

/* A scalar on the device, set to V, and read back after the stream's work. */
static unsigned long long *
scalar_new(const void *near, unsigned long long v, cudaStream_t s)
{
    void *p = NULL;
    td_device_t dev = {TD_DEVICE_CUDA, td__cuda_device_of(near)};
    if (dev.index < 0 || td__device_alloc(dev, sizeof(v), &p) != TD_OK) return NULL;
    cudaMemcpyAsync(p, &v, sizeof(v), cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);     /* V lives on the caller's stack */
    return (unsigned long long *)p;
}

static unsigned long long
scalar_take(const void *near, unsigned long long *p, cudaStream_t s)
{
    unsigned long long v = ~0ull;
    cudaMemcpyAsync(&v, p, sizeof(v), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    td__device_free((td_device_t){TD_DEVICE_CUDA, td__cuda_device_of(near)}, p);
    return v;
}

extern "C" int64_t
td__cuda_index_check(const int64_t *ix, int64_t n, int64_t limit)
{
    cudaStream_t s;
    unsigned long long *first;
    if (n == 0 || (s = stream_for(ix, "index_check")) == NULL) return -1;
    if ((first = scalar_new(ix, (unsigned long long)n, s)) == NULL) {
        td__cuda_launch_failed("index_check", "no device memory for the result");
        return 0;                  /* report the first index as bad */
    }
    index_check_kernel<<<blocks_for(n), THREADS, 0, s>>>(ix, n, limit, first);
    check_launch("index_check");
    unsigned long long v = scalar_take(ix, first, s);
    return v >= (unsigned long long)n ? -1 : (int64_t)v;
}

/* rows move whole, any dtype: byte copies of INNER * esize */
__global__ void
index_select_kernel(char *out, const char *in, const int64_t *ix, int64_t nidx,
                    int64_t outer, int64_t in_mid, int64_t row)
{
    FOR_EACH(t, outer * nidx * row) {
        int64_t b = t % row, kj = t / row, j = kj % nidx, k = kj / nidx;
        out[t] = in[(k * in_mid + ix[j]) * row + b];
    }
}

extern "C" void
td__cuda_index_select(td_dtype_t dtype, void *out, const void *in,
                     const int64_t *ix, int64_t nidx, int64_t outer,
                     int64_t in_mid, int64_t inner)
{
    cudaStream_t s;
    int64_t row = inner * (int64_t)td_dtype_size(dtype);
    if (outer * nidx * row == 0 || (s = stream_for(out, "index_select")) == NULL) return;
    index_select_kernel<<<blocks_for(outer * nidx * row), THREADS, 0, s>>>(
        (char *)out, (const char *)in, ix, nidx, outer, in_mid, row);
    check_launch("index_select");
}

template <typename T>
__global__ void
index_add_kernel(T *out, const T *src, const int64_t *ix, int64_t nidx,
                 int64_t outer, int64_t out_mid, int64_t inner)
{
    FOR_EACH(t, outer * nidx * inner) {
        int64_t i = t % inner, kj = t / inner, j = kj % nidx, k = kj / nidx;
        atomicAdd(&out[(k * out_mid + ix[j]) * inner + i], src[t]);
    }
}

extern "C" void
td__cuda_index_add(td_dtype_t dtype, void *out, const void *src,
                  const int64_t *ix, int64_t nidx, int64_t outer,
                  int64_t out_mid, int64_t inner)
{
    cudaStream_t s;
    int64_t n = outer * nidx * inner;
    if (n == 0 || (s = stream_for(out, "index_add")) == NULL) return;
    if (dtype == TD_FLOAT32) {
        index_add_kernel<float><<<blocks_for(n), THREADS, 0, s>>>(
            (float *)out, (const float *)src, ix, nidx, outer, out_mid, inner);
    } else {
        index_add_kernel<double><<<blocks_for(n), THREADS, 0, s>>>(
            (double *)out, (const double *)src, ix, nidx, outer, out_mid, inner);
    }
    check_launch("index_add");
}

template <typename T, bool SCATTER>
__global__ void
gather_kernel(T *d, const T *s, const int64_t *ix, int64_t outer, int64_t mid,
              int64_t inner)
{
    FOR_EACH(t, outer * inner) {
        int64_t o = t / inner, i = t % inner, j = ix[t];
        if (SCATTER) atomicAdd(&d[(o * mid + j) * inner + i], s[t]);
        else d[t] = s[(o * mid + j) * inner + i];
    }
}

template <bool SCATTER>
static void
gather_launch(td_dtype_t dtype, void *d, const void *src, const int64_t *ix,
              int64_t outer, int64_t mid, int64_t inner, const char *name)
{
    cudaStream_t s;
    if (outer * inner == 0 || (s = stream_for(d, name)) == NULL) return;
    unsigned nb = blocks_for(outer * inner);
    if (dtype == TD_FLOAT32) {
        gather_kernel<float, SCATTER><<<nb, THREADS, 0, s>>>(
            (float *)d, (const float *)src, ix, outer, mid, inner);
    } else {
        gather_kernel<double, SCATTER><<<nb, THREADS, 0, s>>>(
            (double *)d, (const double *)src, ix, outer, mid, inner);
    }
    check_launch(name);
}

extern "C" void
td__cuda_gather(td_dtype_t dtype, void *out, const void *in, const int64_t *ix,
               int64_t outer, int64_t mid, int64_t inner)
{
    gather_launch<false>(dtype, out, in, ix, outer, mid, inner, "gather");
}

extern "C" void
td__cuda_scatter_add(td_dtype_t dtype, void *out, const void *src,
                    const int64_t *ix, int64_t outer, int64_t mid,
                    int64_t inner)
{
    gather_launch<true>(dtype, out, src, ix, outer, mid, inner, "scatter_add");
}

/* first bad offset (b == 0 not at 0, decreasing, above n) */
__global__ void
bag_check_kernel(const int64_t *off, int64_t nb, int64_t n,
                 unsigned long long *first)
{
    FOR_EACH(b, nb) {
        if ((b == 0 && off[0] != 0) || (b > 0 && off[b] < off[b - 1]) || off[b] > n)
            atomicMin(first, (unsigned long long)b);
    }
}

/* one thread per bag writes its range */
__global__ void
bag_fill_kernel(const int64_t *off, int64_t nb, int64_t n, int mean,
                int64_t *bag, double *scale)
{
    FOR_EACH(b, nb) {
        int64_t end = b + 1 < nb ? off[b + 1] : n;
        for (int64_t j = off[b]; j < end; j++) {
            bag[j] = b;
            scale[j] = mean ? 1.0 / (double)(end - off[b]) : 1.0;
        }
    }
}

extern "C" int64_t
td__cuda_bag_plan(const int64_t *offsets, int64_t nb, int64_t n, int mean,
                 int64_t *bag, double *scale)
{
    cudaStream_t s;
    unsigned long long *first, v;
    if (nb == 0 || (s = stream_for(offsets, "bag_plan")) == NULL) return -1;
    if ((first = scalar_new(offsets, (unsigned long long)nb, s)) == NULL) {
        td__cuda_launch_failed("bag_plan", "no device memory for the result");
        return 0;
    }
    bag_check_kernel<<<blocks_for(nb), THREADS, 0, s>>>(offsets, nb, n, first);
    v = scalar_take(offsets, first, s);
    if (v < (unsigned long long)nb) return (int64_t)v;
    bag_fill_kernel<<<blocks_for(nb), THREADS, 0, s>>>(offsets, nb, n, mean, bag, scale);
    check_launch("bag_plan");
    return -1;
}
