/* kernels/cpu/cpu_coll.c: the collectives' reductions on the CPU (dst op=
 * src, and the division that ends an average) for every dtype and op of
 * the table's reduce_into, written as plain loops the compiler vectorizes
 * (they run where a received segment lands, while the next one is still
 * in flight). Thread-safe (no state). */
#include "config.h"

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/cpu.h"

/* GCC 12's -O2 leaves these loops scalar (measured: a 512 KiB float sum
 * took a third of a 1 MiB all_reduce): vectorize them, and pick the
 * widest vector unit at load time. Element-wise, so the vector code gives
 * the same bits as the scalar one. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
/* No clones under ThreadSanitizer: their ifunc resolvers run while the
 * loader relocates libtodist, before TSan's runtime is set up, and every
 * program linking the library crashed in the loader. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    defined(__has_attribute) && !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", \
                                                   "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

#define LOOP(T, EXPR)                                                       \
    do {                                                                    \
        T *restrict d = dst;                                                \
        const T *restrict s = src;                                          \
        for (size_t i = 0; i < count; i++) {                                \
            d[i] = (EXPR);                                                  \
        }                                                                   \
    } while (0)

#define ARITH(T)                                                            \
    switch (op) {                                                           \
    case TD_ACC_SUM:                                                        \
        LOOP(T, (T)(d[i] + s[i]));                                          \
        break;                                                              \
    case TD_ACC_PROD:                                                       \
        LOOP(T, (T)(d[i] * s[i]));                                          \
        break;                                                              \
    case TD_ACC_MIN:                                                        \
        LOOP(T, s[i] < d[i] ? s[i] : d[i]);                                 \
        break;                                                              \
    case TD_ACC_MAX:                                                        \
        LOOP(T, s[i] > d[i] ? s[i] : d[i]);                                 \
        break;                                                              \
    default:                                                                \
        break;                                                              \
    }

#define BITWISE(T)                                                          \
    switch (op) {                                                           \
    case TD_ACC_BAND:                                                       \
        LOOP(T, d[i] & s[i]);                                               \
        break;                                                              \
    case TD_ACC_BOR:                                                        \
        LOOP(T, d[i] | s[i]);                                               \
        break;                                                              \
    case TD_ACC_BXOR:                                                       \
        LOOP(T, d[i] ^ s[i]);                                               \
        break;                                                              \
    default:                                                                \
        ARITH(T);                                                           \
    }

/* uint8 sums wrap modulo 256, as in PyTorch. */
VECTOR_CLONES void
td_cpu_reduce_into(td_dtype_t dtype, td_accumulate_op_t op, void *dst,
                   const void *src, size_t count)
{
    switch (dtype) {
    case TD_FLOAT32:
        ARITH(float);
        break;
    case TD_FLOAT64:
        ARITH(double);
        break;
    case TD_INT32:
        BITWISE(int32_t);
        break;
    case TD_INT64:
        BITWISE(int64_t);
        break;
    case TD_UINT8:
        BITWISE(uint8_t);
        break;
    default:
        break;
    }
}

#define DIV(T)                                                              \
    do {                                                                    \
        T *restrict d = dst;                                                \
        for (size_t i = 0; i < count; i++) {                                \
            d[i] = (T)(d[i] / (T)n);                                        \
        }                                                                   \
    } while (0)

VECTOR_CLONES void
td_cpu_divide(td_dtype_t dtype, void *dst, size_t count, int n)
{
    switch (dtype) {
    case TD_FLOAT32:
        DIV(float);
        break;
    case TD_FLOAT64:
        DIV(double);
        break;
    case TD_INT32:
        DIV(int32_t);
        break;
    case TD_INT64:
        DIV(int64_t);
        break;
    case TD_UINT8:
        DIV(uint8_t);
        break;
    default:
        break;
    }
}
