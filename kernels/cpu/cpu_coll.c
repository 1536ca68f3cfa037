/* kernels/cpu/cpu_coll.c: the collectives' reductions on the CPU (dst op=
 * src, dst = a op src, and the division that ends an average) for every
 * dtype and op of
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

/* The operands read (SRC, and A of reduce_to) may be at any byte: a
 * body reduced where the transport received it follows UCX's headers
 * (runtime/coll/ring.c R4). They are read through a type of alignment 1,
 * which GCC and Clang vectorize with unaligned loads (as fast as aligned
 * ones on aligned data); elsewhere they must be aligned for T
 * (TD_CPU_REDUCE_ANY_SRC says which, kernels/kernels.h). */
#if TD_CPU_REDUCE_ANY_SRC
#define SRC_TYPE(T) typedef T src_t __attribute__((aligned(1)))
#else
#define SRC_TYPE(T) typedef T src_t
#endif

/* X is the first operand: DST's element (reduce_into) or A's
 * (reduce_to); read once into x_, so both give the same bits. Integer
 * sums and products are made in U, T's unsigned counterpart, so that
 * they wrap as documented: in T an overflow is undefined (UBSan caught
 * int64 products that overflowed). */
#define LOOP_INTO(T, EXPR)                                                  \
    do {                                                                    \
        SRC_TYPE(T);                                                        \
        T *restrict d = dst;                                                \
        const src_t *restrict s = src;                                      \
        for (size_t i = 0; i < count; i++) {                                \
            T x_ = d[i];                                                    \
            d[i] = (EXPR);                                                  \
        }                                                                   \
    } while (0)

#define LOOP_TO(T, EXPR)                                                    \
    do {                                                                    \
        SRC_TYPE(T);                                                        \
        T *restrict d = dst;                                                \
        const src_t *restrict a_ = a;                                       \
        const src_t *restrict s = src;                                      \
        for (size_t i = 0; i < count; i++) {                                \
            T x_ = a_[i];                                                   \
            d[i] = (EXPR);                                                  \
        }                                                                   \
    } while (0)

#define ARITH(LOOP, T, U)                                                   \
    switch (op) {                                                           \
    case TD_ACC_SUM:                                                        \
        LOOP(T, (T)((U)x_ + (U)s[i]));                                      \
        break;                                                              \
    case TD_ACC_PROD:                                                       \
        LOOP(T, (T)((U)x_ * (U)s[i]));                                      \
        break;                                                              \
    case TD_ACC_MIN:                                                        \
        LOOP(T, s[i] < x_ ? s[i] : x_);                                     \
        break;                                                              \
    case TD_ACC_MAX:                                                        \
        LOOP(T, s[i] > x_ ? s[i] : x_);                                     \
        break;                                                              \
    default:                                                                \
        break;                                                              \
    }

#define BITWISE(LOOP, T, U)                                                 \
    switch (op) {                                                           \
    case TD_ACC_BAND:                                                       \
        LOOP(T, x_ & s[i]);                                                 \
        break;                                                              \
    case TD_ACC_BOR:                                                        \
        LOOP(T, x_ | s[i]);                                                 \
        break;                                                              \
    case TD_ACC_BXOR:                                                       \
        LOOP(T, x_ ^ s[i]);                                                 \
        break;                                                              \
    default:                                                                \
        ARITH(LOOP, T, U);                                                  \
    }

#define BY_DTYPE(LOOP)                                                      \
    switch (dtype) {                                                        \
    case TD_FLOAT32:                                                        \
        ARITH(LOOP, float, float);                                          \
        break;                                                              \
    case TD_FLOAT64:                                                        \
        ARITH(LOOP, double, double);                                        \
        break;                                                              \
    case TD_INT32:                                                          \
        BITWISE(LOOP, int32_t, uint32_t);                                   \
        break;                                                              \
    case TD_INT64:                                                          \
        BITWISE(LOOP, int64_t, uint64_t);                                   \
        break;                                                              \
    case TD_UINT8:                                                          \
        BITWISE(LOOP, uint8_t, uint8_t);                                    \
        break;                                                              \
    default:                                                                \
        break;                                                              \
    }

/* uint8 sums wrap modulo 256, as in PyTorch. */
VECTOR_CLONES void
td_cpu_reduce_into(td_dtype_t dtype, td_accumulate_op_t op, void *dst,
                   const void *src, size_t count)
{
    BY_DTYPE(LOOP_INTO);
}

/* A reduce_into onto a copy of A, in one pass (a leader's host sum
 * starts from its own input: runtime/coll/hier.c). */
VECTOR_CLONES void
td_cpu_reduce_to(td_dtype_t dtype, td_accumulate_op_t op, void *dst,
                 const void *a, const void *src, size_t count)
{
    BY_DTYPE(LOOP_TO);
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
