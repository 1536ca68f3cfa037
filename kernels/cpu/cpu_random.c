/* kernels/cpu/cpu_random.c: the CPU random kernels. The generator is
 * counter-based (splitmix64 of the seed and the element's number), so a
 * value depends only on (seed, i): any device, any split of the work, the
 * same stream (invariant 4 of kernels/kernels.h). Thread-safe (no state). */
#include "config.h"

#include <math.h>

#include "kernels/cpu/cpu.h"

static inline uint64_t
splitmix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* uniform in [0, 1) with 53 random bits; draw I of stream SEED */
static inline double
draw(uint64_t seed, uint64_t i)
{
    return (double)(splitmix64(splitmix64(seed) ^
                               (i * 0xD1B54A32D192ED03ull)) >> 11) *
           0x1.0p-53;
}

/* value I in double, then rounded once to the dtype */
static inline double
value(int normal, double a, double b, uint64_t seed, int64_t i)
{
    if (!normal) {
        return a + (b - a) * draw(seed, (uint64_t)i);
    }
    /* Box-Muller on draws 2i and 2i+1; 1-u keeps log's argument > 0 */
    double u1 = 1.0 - draw(seed, 2 * (uint64_t)i);
    double u2 = draw(seed, 2 * (uint64_t)i + 1);
    return a + b * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void
td__cpu_random(td_dtype_t dtype, void *out, int64_t n, int normal, double a,
              double b, uint64_t seed)
{
    if (dtype == TD_FLOAT32) {
        float *p = out;
        for (int64_t i = 0; i < n; i++) {
            p[i] = (float)value(normal, a, b, seed, i);
        }
    } else {
        double *p = out;
        for (int64_t i = 0; i < n; i++) {
            p[i] = value(normal, a, b, seed, i);
        }
    }
}

/* mask = (u >= p) / (1 - p) with u = uniform_(0, 1) in DTYPE; p == 1
 * drops everything */
void
td__cpu_dropout_mask(td_dtype_t dtype, void *mask, int64_t n, double p,
                    uint64_t seed)
{
    double keep = p < 1 ? 1.0 / (1.0 - p) : 0.0;

    if (dtype == TD_FLOAT32) {
        float *m = mask;
        for (int64_t i = 0; i < n; i++) {
            float u = (float)draw(seed, (uint64_t)i);
            m[i] = (float)((double)u >= p ? keep : 0.0);
        }
    } else {
        double *m = mask;
        for (int64_t i = 0; i < n; i++) {
            m[i] = draw(seed, (uint64_t)i) >= p ? keep : 0.0;
        }
    }
}
