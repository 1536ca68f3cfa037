/* kernels/cuda/cuda_random.cu: the CUDA random kernels: the CPU's
 * counter-based generator (splitmix64 of the seed and the element's
 * number) evaluated per thread, so a value depends only on (seed, i) on
 * every device (invariant 4 of kernels/kernels.h): uniform draws and
 * dropout masks are the CPU's bits; normal draws go through the device's
 * log/cos/sqrt (within an ulp or two of glibc's). */
#include "config.h"

#include "kernels/cuda/cuda_common.cuh"

using namespace td_cuda;

__device__ __forceinline__ uint64_t
splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* uniform in [0, 1) with 53 random bits; draw I of stream SEED */
__device__ __forceinline__ double
draw(uint64_t seed, uint64_t i)
{
    return (double)(splitmix64(splitmix64(seed) ^ (i * 0xD1B54A32D192ED03ull)) >> 11) *
           0x1.0p-53;
}

template <typename T>
__global__ void
random_kernel(T *out, int64_t n, int normal, double a, double b, uint64_t seed)
{
    FOR_EACH(i, n) {
        double v;
        if (!normal) {
            v = a + (b - a) * draw(seed, (uint64_t)i);
        } else {       /* Box-Muller on draws 2i and 2i+1 */
            double u1 = 1.0 - draw(seed, 2 * (uint64_t)i);
            double u2 = draw(seed, 2 * (uint64_t)i + 1);
            v = a + b * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
        }
        out[i] = (T)v;
    }
}

extern "C" void
td__cuda_random(td_dtype_t dtype, void *out, int64_t n, int normal, double a,
               double b, uint64_t seed)
{
    cudaStream_t s;
    if (n == 0 || (s = stream_for(out, "random")) == NULL) return;
    if (dtype == TD_FLOAT32) {
        random_kernel<float><<<blocks_for(n), THREADS, 0, s>>>((float *)out, n, normal, a, b, seed);
    } else {
        random_kernel<double><<<blocks_for(n), THREADS, 0, s>>>((double *)out, n, normal, a, b, seed);
    }
    check_launch("random");
}

/* mask = (u >= p) / (1 - p), u the uniform draw rounded to T */
template <typename T>
__global__ void
dropout_kernel(T *m, int64_t n, double p, double keep, uint64_t seed)
{
    FOR_EACH(i, n) {
        T u = (T)draw(seed, (uint64_t)i);
        m[i] = (T)((double)u >= p ? keep : 0.0);
    }
}

extern "C" void
td__cuda_dropout_mask(td_dtype_t dtype, void *mask, int64_t n, double p,
                     uint64_t seed)
{
    cudaStream_t s;
    double keep = p < 1 ? 1.0 / (1.0 - p) : 0.0;
    if (n == 0 || (s = stream_for(mask, "dropout_mask")) == NULL) return;
    if (dtype == TD_FLOAT32) {
        dropout_kernel<float><<<blocks_for(n), THREADS, 0, s>>>((float *)mask, n, p, keep, seed);
    } else {
        dropout_kernel<double><<<blocks_for(n), THREADS, 0, s>>>((double *)mask, n, p, keep, seed);
    }
    check_launch("dropout_mask");
}
