/* reduce.c: the collectives' reductions (dst op= src, dst = a op src,
 * an average's final division) dispatched to the CPU row of the kernel table
 * (kernels/cpu/cpu_coll.c holds the vectorized loops): the collectives
 * reduce in host memory. The CPU row is named directly, not looked up
 * with td__kernels_get: this runs once per received segment, 8 B ones
 * included. Also which op a dtype allows.
 *
 * Thread safety: pure functions. */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "runtime/coll/reduce.h"

/* todist/coll.h's op as the kernel's (an average sums, then divides). */
static const td_accumulate_op_t accumulate_op[TD_REDUCE_NUM_OPS] = {
    [TD_REDUCE_SUM] = TD_ACC_SUM,   [TD_REDUCE_PROD] = TD_ACC_PROD,
    [TD_REDUCE_MIN] = TD_ACC_MIN,   [TD_REDUCE_MAX] = TD_ACC_MAX,
    [TD_REDUCE_AVG] = TD_ACC_SUM,   [TD_REDUCE_BAND] = TD_ACC_BAND,
    [TD_REDUCE_BOR] = TD_ACC_BOR,   [TD_REDUCE_BXOR] = TD_ACC_BXOR,
};

/* An op coll_op_valid refuses changes nothing, as before the table. */
void
coll_reduce_into(void *dst, const void *src, size_t count, td_dtype_t dtype,
                 td_reduce_op_t op)
{
    if ((unsigned)op < TD_REDUCE_NUM_OPS) {
        td_cpu_kernels.reduce_into(dtype, accumulate_op[op], dst, src, count);
    }
}

void
coll_reduce_to(void *dst, const void *a, const void *src, size_t count,
               td_dtype_t dtype, td_reduce_op_t op)
{
    if ((unsigned)op < TD_REDUCE_NUM_OPS) {
        td_cpu_kernels.reduce_to(dtype, accumulate_op[op], dst, a, src,
                                 count);
    } else if (count > 0) {
        memcpy(dst, a, count * td_dtype_size(dtype));
    }
}

void
coll_divide(void *dst, size_t count, td_dtype_t dtype, int n)
{
    td_cpu_kernels.divide(dtype, dst, count, n);
}

int
coll_op_valid(td_reduce_op_t op, td_dtype_t dtype)
{
    if ((unsigned)op >= TD_REDUCE_NUM_OPS) {
        return 0;
    }
    if (op >= TD_REDUCE_BAND) {
        return !td_dtype_is_float(dtype);
    }
    return 1;
}
