/* runtime/tensor/ops_common.c: the helpers every op family shares
 * (ops_internal.h): an op's saved state, recording its node, the checks of
 * its inputs. Below the op families (ops_*.c), which call it and not each
 * other's helpers. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/tensor/ops_internal.h"
#include "todist/device.h"

void
td__op_release_saved(td_node_t *node)
{
    td_op_state_t *st = td_node_state(node);

    for (int i = 0; i < 3; i++) {
        td_saved_release(&st->sv[i]);
    }
}

void
td__op_destroy(void *p)
{
    td_op_state_t *st = p;

    for (int i = 0; i < 3; i++) {
        td_saved_release(&st->sv[i]);
    }
    free(st);
}

int
td__op_needs_state(td_tensor_t *const *ins, int n)
{
    return td_grad_enabled() && td__any_requires_grad(ins, n);
}

td_op_state_t *
td__op_state_new(void)
{
    return calloc(1, sizeof(td_op_state_t));
}

td_status_t
td__op_finish(const td_node_ops_t *ops, td_op_state_t *st,
             td_tensor_t *const *ins, int n, td_tensor_t *out,
             td_tensor_t **out_p)
{
    td_status_t status;

    if (st != NULL) {
        status = td__autograd_record(ops, st, ins, n, out);
        if (status != TD_OK) {
            td_tensor_release(out);
            return status;
        }
    }
    *out_p = out;
    return TD_OK;
}

td_status_t
td__op_check_float(const char *op, td_tensor_t *a)
{
    if (!td_dtype_is_float(a->dtype)) {
        return td_error(TD_ERR_DTYPE, "%s: dtype %s is not float32/float64 "
                        "(shape %s)", op, td_dtype_name(a->dtype),
                        TD_SHAPE_STR(a));
    }
    return TD_OK;
}

td_status_t
td__op_check_pair(const char *op, td_tensor_t *a, td_tensor_t *b)
{
    td_status_t status = td__op_check_float(op, a);

    if (status != TD_OK) {
        return status;
    }
    if (a->dtype != b->dtype) {
        return td_error(TD_ERR_DTYPE, "%s: dtypes differ: %s %s and %s %s", op,
                        td_dtype_name(a->dtype), TD_SHAPE_STR(a),
                        td_dtype_name(b->dtype), TD_SHAPE_STR(b));
    }
    if (a->device.type != b->device.type || a->device.index != b->device.index) {
        char da[24], db[24];

        return td_error(TD_ERR_INVALID, "%s: tensors on different devices: "
                        "%s and %s", op, td_device_str(a->device, da, 24),
                        td_device_str(b->device, db, 24));
    }
    return TD_OK;
}

td_status_t
td__op_broadcast_shape(const char *op, td_tensor_t *a, td_tensor_t *b,
                      int64_t *shape, int *ndim_p, int64_t *sa, int64_t *sb)
{
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;

    for (int d = 0; d < nd; d++) {
        int da = d - (nd - a->ndim), db = d - (nd - b->ndim);
        int64_t xa = da >= 0 ? a->shape[da] : 1, xb = db >= 0 ? b->shape[db] : 1;
        if (xa != xb && xa != 1 && xb != 1) {
            return td_error(TD_ERR_SHAPE, "%s: shapes %s and %s do not "
                            "broadcast (dim %d: %lld vs %lld)", op,
                            TD_SHAPE_STR(a), TD_SHAPE_STR(b), d,
                            (long long)xa, (long long)xb);
        }
        shape[d] = xa == 1 ? xb : xa;
        sa[d] = da >= 0 && xa != 1 ? a->strides[da] : 0;
        sb[d] = db >= 0 && xb != 1 ? b->strides[db] : 0;
    }
    *ndim_p = nd;
    return TD_OK;
}

