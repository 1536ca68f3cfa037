/* kernels/cpu/cpu_index.c: the CPU indexing kernels (index checks,
 * index_select / index_add along a dim, gather / scatter-add with one index
 * per position, embedding_bag's bag plan, a dataset batch by rows).
 * Indices are int64 and already
 * checked (invariant 1 of kernels/kernels.h). Thread-safe (no state). */
#include "config.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif

#include <string.h>

#include "kernels/cpu/cpu.h"

static size_t
elem_size(td_dtype_t dtype)
{
    switch (dtype) {
    case TD_FLOAT64:
    case TD_INT64: return 8;
    case TD_FLOAT32:
    case TD_INT32: return 4;
    default: return 1;
    }
}

int64_t
td__cpu_index_check(const int64_t *ix, int64_t n, int64_t limit)
{
    for (int64_t i = 0; i < n; i++) {
        if (ix[i] < 0 || ix[i] >= limit) {
            return i;
        }
    }
    return -1;
}

/* Rows are moved whole: any dtype, bytes as they are. */
void
td__cpu_index_select(td_dtype_t dtype, void *out, const void *in,
                    const int64_t *ix, int64_t nidx, int64_t outer,
                    int64_t in_mid, int64_t inner)
{
    size_t row = (size_t)inner * elem_size(dtype);
    const char *a = in;
    char *o = out;

    for (int64_t k = 0; k < outer; k++) {
        for (int64_t j = 0; j < nidx; j++) {
            memcpy(o + (size_t)(k * nidx + j) * row,
                   a + (size_t)(k * in_mid + ix[j]) * row, row);
        }
    }
}

#define INDEX_ADD_LOOP(T)                                                   \
    do {                                                                    \
        const T *S = src;                                                   \
        T *O = out;                                                         \
        for (int64_t k = 0; k < outer; k++)                                 \
            for (int64_t j = 0; j < nidx; j++) {                            \
                const T *sp = S + (k * nidx + j) * inner;                   \
                T *dp = O + (k * out_mid + ix[j]) * inner;                  \
                for (int64_t i = 0; i < inner; i++) dp[i] += sp[i];         \
            }                                                               \
    } while (0)

void
td__cpu_index_add(td_dtype_t dtype, void *out, const void *src,
                 const int64_t *ix, int64_t nidx, int64_t outer,
                 int64_t out_mid, int64_t inner)
{
    if (dtype == TD_FLOAT32) {
        INDEX_ADD_LOOP(float);
    } else {
        INDEX_ADD_LOOP(double);
    }
}

#define GATHER_LOOP(SCATTER)                                                \
    do {                                                                    \
        for (int64_t o = 0; o < outer; o++)                                 \
            for (int64_t i = 0; i < inner; i++) {                           \
                int64_t j = ix[o * inner + i];                              \
                if (SCATTER) D[(o * mid + j) * inner + i] += S[o * inner + i]; \
                else D[o * inner + i] = S[(o * mid + j) * inner + i];       \
            }                                                               \
    } while (0)

void
td__cpu_gather(td_dtype_t dtype, void *out, const void *in, const int64_t *ix,
              int64_t outer, int64_t mid, int64_t inner)
{
    if (dtype == TD_FLOAT32) {
        float *D = out;
        const float *S = in;
        GATHER_LOOP(0);
    } else {
        double *D = out;
        const double *S = in;
        GATHER_LOOP(0);
    }
}

void
td__cpu_scatter_add(td_dtype_t dtype, void *out, const void *src,
                   const int64_t *ix, int64_t outer, int64_t mid,
                   int64_t inner)
{
    if (dtype == TD_FLOAT32) {
        float *D = out;
        const float *S = src;
        GATHER_LOOP(1);
    } else {
        double *D = out;
        const double *S = src;
        GATHER_LOOP(1);
    }
}

int64_t
td__cpu_bag_plan(const int64_t *offsets, int64_t nb, int64_t n, int mean,
                int64_t *bag, double *scale)
{
    for (int64_t b = 0; b < nb; b++) {
        if ((b == 0 && offsets[0] != 0) ||
            (b > 0 && offsets[b] < offsets[b - 1]) || offsets[b] > n) {
            return b;
        }
    }
    for (int64_t b = 0; b < nb; b++) {
        int64_t end = b + 1 < nb ? offsets[b + 1] : n;
        for (int64_t j = offsets[b]; j < end; j++) {
            bag[j] = b;
            scale[j] = mean ? 1.0 / (double)(end - offsets[b]) : 1.0;
        }
    }
    return -1;
}

void
td__cpu_batch_u8(float *x, int64_t *y, const uint8_t *images,
                const uint8_t *labels, const int64_t *rows, int64_t m,
                int64_t row_len, float scale, float shift)
{
    for (int64_t r = 0; r < m; r++) {
        const uint8_t *src = images + rows[r] * row_len;
        float *dst = x + r * row_len;
        for (int64_t j = 0; j < row_len; j++) {
            dst[j] = (float)src[j] * scale + shift;
        }
        y[r] = labels[rows[r]];
    }
}
