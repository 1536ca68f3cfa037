/* runtime/coll/reduce.h: the reductions the algorithms use (internal;
 * reduce.c dispatches them to the kernel table's CPU row). Pure functions
 * on host memory. */
#ifndef TD_RUNTIME_COLL_REDUCE_H
#define TD_RUNTIME_COLL_REDUCE_H

#include <stddef.h>

#include "todist/coll.h"
#include "kernels/kernels.h"          /* TD_CPU_REDUCE_ANY_SRC */

/* Where COLL_REDUCE_ANY_SRC is 1, SRC (and A) may be at any byte; DST
 * is aligned for its elements (kernels/kernels.h). */
#define COLL_REDUCE_ANY_SRC TD_CPU_REDUCE_ANY_SRC

/* DST[i] = DST[i] op SRC[i], i < COUNT (AVG sums). */
void        coll_reduce_into(void *dst, const void *src, size_t count,
                             td_dtype_t dtype, td_reduce_op_t op);
/* DST[i] = A[i] op SRC[i]: memcpy(DST, A) then coll_reduce_into(DST,
 * SRC), bit for bit, in one pass; DST overlaps neither. */
void        coll_reduce_to(void *dst, const void *a, const void *src,
                           size_t count, td_dtype_t dtype,
                           td_reduce_op_t op);
/* DST[i] /= N (AVG's last step). */
void        coll_divide(void *dst, size_t count, td_dtype_t dtype, int n);
/* Is OP defined on DTYPE? (bitwise ones only on integers) */
int         coll_op_valid(td_reduce_op_t op, td_dtype_t dtype);

#endif /* TD_RUNTIME_COLL_REDUCE_H */
