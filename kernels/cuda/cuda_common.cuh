/* kernels/cuda/cuda_common.cuh: what the kernels/cuda/ .cu files share:
 * launch geometry, the stream of the device that owns an output
 * (cuda_device.h, G2), and launch-error reporting (G3). Internal. */
#ifndef TD_KERNELS_CUDA_COMMON_CUH
#define TD_KERNELS_CUDA_COMMON_CUH

#include <math.h>
#include <stdint.h>
#include <cuda_runtime.h>

extern "C" {
#include "kernels/cuda/cuda.h"
#include "kernels/cuda/cuda_device.h"
}

namespace td_cuda {

static const int THREADS = 256;

/* Shapes and strides travel by value in the launch parameters. */
struct geom_t {
    int     ndim;
    int64_t shape[TD_MAX_DIMS];
    int64_t s0[TD_MAX_DIMS], s1[TD_MAX_DIMS], s2[TD_MAX_DIMS];
};

static __device__ __forceinline__ void
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

static inline int64_t
numel_of(const int64_t *shape, int ndim)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

static inline bool
is_contig(const int64_t *shape, const int64_t *st, int ndim)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && st[d] != s) return false;
        s *= shape[d];
    }
    return true;
}

static inline geom_t
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
static inline cudaStream_t
stream_for(const void *ptr, const char *kernel)
{
    void *stream = NULL;
    int dev = td__cuda_device_of(ptr);
    if (dev < 0 || td__cuda_enter(dev, &stream) != TD_OK) {
        td__cuda_launch_failed(kernel, "output is not CUDA device memory");
        return NULL;
    }
    return (cudaStream_t)stream;
}

static inline unsigned
blocks_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b > 65535 * 32 ? 65535 * 32 : b);
}

static inline void
check_launch(const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) td__cuda_launch_failed(kernel, cudaGetErrorString(e));
}

} /* namespace td_cuda */

/* a grid-stride loop over [0, N) */
#define FOR_EACH(i, n)                                                     \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;       \
         i < (n); i += (int64_t)gridDim.x * blockDim.x)

#endif /* TD_KERNELS_CUDA_COMMON_CUH */
